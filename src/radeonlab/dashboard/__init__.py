"""`radeonlab dashboard`: one web page for the lab, served from the laptop (docs/guide/dashboard.md).

poller.py keeps the lab's state current over one SSH connection per host; model.py turns probes and job
streams into what the page shows; app.py is the web side (Starlette + uvicorn); static/ holds the page, its
script and style (the chart is plotly.js, shipped inside the plotly package: nothing is fetched from another
site).
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence

from radeonlab.jobs.fleet.inventory import HostTarget

DASHBOARD: dict[str, object] = {"port": 8686, "bind": "127.0.0.1"}
LOOPBACK_BINDS = ("127.0.0.1", "::1", "localhost")
# The password of a dashboard that others can reach (set by the user; never on the command line, where `ps`
# shows it): every request then needs it, and --allow-cancel on a non-loopback bind refuses to start without.
PASSWORD_VARIABLE = "RADEONLAB_DASHBOARD_PASSWORD"


def serve(
    inventory: str,
    targets: dict[str, HostTarget],
    selected: Sequence[HostTarget],
    *,
    port: int = int(DASHBOARD["port"]),  # type: ignore[call-overload]
    bind: str = str(DASHBOARD["bind"]),
    allow_cancel: bool = False,
    password: str | None = None,
    say: Callable[[str], None] = print,
) -> None:
    """Serve the dashboard until interrupted (port 0: any free port; the URL is said first)."""
    import uvicorn

    from radeonlab.dashboard.app import create_app, host_names
    from radeonlab.dashboard.poller import Lab

    sock = socket.socket(socket.AF_INET6 if ":" in bind else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((bind, port))
    lab = Lab(inventory, targets, selected)
    lab.start()
    names = host_names(bind, sock.getsockname()[1])
    app = create_app(lab, names=names, allow_cancel=allow_cancel, password=password)
    host = f"[{bind}]" if ":" in bind else bind
    mode = "cancel allowed" if allow_cancel else "read-only"
    say(f"radeonlab dashboard: http://{host}:{sock.getsockname()[1]}/ ({mode}; Ctrl-C stops it)")
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2, lifespan="off")
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        lab.stop()
        sock.close()
