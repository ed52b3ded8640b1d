"""The dashboard's web side: one page, its static files, JSON, server-sent events and (when allowed) cancel.

Starlette (an ASGI toolkit: routing, responses, streaming, a test client) served by uvicorn; README
"Web dashboard" says why. Routes:

    GET  /                      the page (static/index.html; the cancel token is put in when cancel is on)
    GET  /static/{file}         dashboard.js, dashboard.css; /static/plotly.min.js from the plotly package
    GET  /api/lab               hosts and jobs (JSON)
    GET  /api/jobs/{id}         one job: series, GPU readings, attempts, log tail (?since=N: points from N)
    GET  /events[?job=ID]       server-sent events: the lab on every change; with job=ID that job's new points
    POST /api/jobs/{id}/cancel  only with --allow-cancel; refused unless `allowed()` (no cross-site request)

Every route answers only to the names the server listens as (`Host:` 127.0.0.1, localhost, [::1] or the --bind
address, with its port; anything else is refused with 421): a page of another site whose name was rebound to
this address (DNS rebinding) is then not "same origin" and gets neither the page, its cancel token, nor the
lab. With a password (RADEONLAB_DASHBOARD_PASSWORD, required for --allow-cancel on a non-loopback bind) every
route needs it too (HTTP Basic: the browser asks once).

Everything reads `Lab` (radeonlab/dashboard/poller.py); no request ever waits on a host, except cancel.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from radeonlab.dashboard.poller import Lab
from radeonlab.errors import RadeonlabError, one_line

STATIC = resources.files("radeonlab.dashboard") / "static"
PLOTLY_JS = resources.files("plotly") / "package_data" / "plotly.min.js"
OWN_FILES = {"dashboard.js": "text/javascript", "dashboard.css": "text/css"}
EVENTS: dict[str, float] = {"poll_s": 0.5, "keepalive_s": 15.0}  # how often a stream looks for changes
TOKEN_HEADER = "X-Radeonlab-Token"
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def host_names(bind: str, port: int) -> frozenset[str]:
    """The `Host:` values this server answers to: the loopback names and the bind address, with the port
    (and without it where the port is HTTP's default, as browsers then send it)."""
    names = {*LOOPBACK_NAMES, f"[{bind}]" if ":" in bind else bind} - {"0.0.0.0", "[::]"}
    return frozenset({f"{n}:{port}" for n in names} | ({*names} if port == 80 else set()))


def misdirected(headers: Mapping[str, str], names: frozenset[str]) -> str | None:
    """Why a request addressed to another name is refused (None: it names this server)."""
    host = headers.get("host", "").strip().lower()
    if host in names:
        return None
    return f"this dashboard answers only as {', '.join(sorted(names))}; Host {host or '(none)'!r} refused"


def password_refused(headers: Mapping[str, str], password: str) -> bool:
    """HTTP Basic: any user name, the dashboard's password."""
    scheme, _, value = headers.get("authorization", "").partition(" ")
    try:
        given = base64.b64decode(value, validate=True).decode().partition(":")[2]
    except (binascii.Error, UnicodeDecodeError):
        return True
    return scheme.lower() != "basic" or not secrets.compare_digest(given.encode(), password.encode())


def allowed(headers: Mapping[str, str], token: str) -> str | None:
    """Why a state-changing request is refused (None: allowed). It must come from the dashboard's own page:
    its Origin is this server (a browser sets Origin on every cross-site POST, and a page cannot forge it)
    and it carries the per-process token the page was given (a custom header: a cross-site form cannot send
    one, and script from another origin would need a CORS preflight this server never grants)."""
    origin, host = headers.get("origin"), headers.get("host")
    if not origin or not host:
        return "no Origin header: only the dashboard's own page may do this"
    parts = urlsplit(origin)
    if parts.scheme != "http" or parts.netloc != host:
        return f"cross-site request from {origin} refused"
    if not secrets.compare_digest(headers.get(TOKEN_HEADER.lower(), ""), token):
        return "missing or wrong dashboard token (reload the page)"
    return None


def page(allow_cancel: bool, token: str) -> str:
    """index.html with its settings: whether cancel buttons show, and the token they send."""
    settings = {"allowCancel": allow_cancel, "token": token if allow_cancel else ""}
    text = (STATIC / "index.html").read_text()
    return text.replace("{{SETTINGS}}", json.dumps(settings).replace("<", "\\u003c"))


def create_app(
    lab: Lab,
    *,
    names: Iterable[str],
    allow_cancel: bool = False,
    token: str | None = None,
    password: str | None = None,
) -> Starlette:
    """The ASGI app over `lab` (started and stopped by the caller); `names`: the `Host:` values it answers to
    (host_names())."""
    token = token or secrets.token_urlsafe(32)
    allowed_names = frozenset(n.lower() for n in names)
    headers = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}
    csp = (
        "default-src 'self'; img-src 'self' data: blob:; style-src 'self' 'unsafe-inline'; "
        "frame-ancestors 'none'"
    )  # fmt: skip  (plotly sets inline styles; no other origin is used)

    async def index(request: Request) -> Response:
        return HTMLResponse(page(allow_cancel, token), headers={**headers, "Content-Security-Policy": csp})

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name == "plotly.min.js":
            return FileResponse(str(PLOTLY_JS), media_type="text/javascript",
                                headers={"Cache-Control": "max-age=86400"})  # fmt: skip
        if name not in OWN_FILES:
            return Response("not found", status_code=404)
        return FileResponse(str(STATIC / name), media_type=OWN_FILES[name], headers=headers)

    async def api_lab(request: Request) -> Response:
        return JSONResponse(lab.snapshot(), headers=headers)

    async def api_job(request: Request) -> Response:
        detail = lab.job_detail(request.path_params["job_id"], _since(request))
        if detail is None:
            return JSONResponse({"error": "no such job"}, status_code=404)
        return JSONResponse(detail, headers=headers)

    async def events(request: Request) -> Response:
        return StreamingResponse(
            _stream(lab, request, request.query_params.get("job")),
            media_type="text/event-stream",
            headers={**headers, "X-Accel-Buffering": "no"},
        )

    async def cancel(request: Request) -> Response:
        if not allow_cancel:
            return JSONResponse(
                {"error": "read-only dashboard (start it with --allow-cancel)"}, status_code=403
            )
        why = allowed(request.headers, token)
        if why:
            return JSONResponse({"error": why}, status_code=403)
        try:
            state = await run_in_threadpool(lab.cancel, request.path_params["job_id"])
        except RadeonlabError as exc:
            return JSONResponse({"error": one_line(exc)}, status_code=409)
        return JSONResponse({"state": state.state.value, "reason": state.reason}, headers=headers)

    async def favicon(request: Request) -> Response:
        return Response(status_code=204)  # none: a browser asks anyway

    Endpoint = Callable[[Request], Awaitable[Response]]

    def guarded(endpoint: Endpoint) -> Endpoint:
        async def check(request: Request) -> Response:
            why = misdirected(request.headers, allowed_names)
            if why:
                return Response(why, status_code=421, media_type="text/plain")
            if password and password_refused(request.headers, password):
                ask = {"WWW-Authenticate": 'Basic realm="radeonlab dashboard"'}
                return Response("the dashboard's password is needed", status_code=401, headers=ask)
            return await endpoint(request)

        return check

    return Starlette(
        routes=[
            Route("/", guarded(index)),
            Route("/favicon.ico", guarded(favicon)),
            Route("/static/{name}", guarded(static)),
            Route("/api/lab", guarded(api_lab)),
            Route("/api/jobs/{job_id}", guarded(api_job)),
            Route("/events", guarded(events)),
            Route("/api/jobs/{job_id}/cancel", guarded(cancel), methods=["POST"]),
        ]
    )


def _since(request: Request) -> int:
    try:
        return max(0, int(request.query_params.get("since", "0")))
    except ValueError:
        return 0


def _sse(kind: str, data: Any) -> str:
    return f"event: {kind}\ndata: {json.dumps(data, allow_nan=False)}\n\n"


async def _stream(lab: Lab, request: Request, job_id: str | None) -> AsyncIterator[str]:
    """The lab after every change (at most every poll_s); with a job, its points this tab lacks."""
    seen, sent, generation, quiet = -1, 0, None, 0.0
    while not await request.is_disconnected():
        if lab.version != seen:
            seen = lab.version
            yield _sse("lab", lab.snapshot())
            if job_id:
                detail = lab.job_detail(job_id, sent)
                if detail is not None:
                    if detail["generation"] != generation:  # the series started over: send them whole
                        generation, detail = detail["generation"], lab.job_detail(job_id, 0)
                    yield _sse("job", detail)
                    sent = detail["points"] if detail else sent
            quiet = 0.0
        elif quiet >= EVENTS["keepalive_s"]:
            yield ": keepalive\n\n"  # a comment line: keeps proxies and the browser from closing the stream
            quiet = 0.0
        await asyncio.sleep(EVENTS["poll_s"])
        quiet += EVENTS["poll_s"]
