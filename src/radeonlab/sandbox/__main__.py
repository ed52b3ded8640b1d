"""`radeonlab sandbox up|down|status|demo`: sandbox workstations from a shell (= `radeonlab sandbox`).

`demo` is the README's main-job demo (radeonlab/sandbox/demo.py): provision one SIMULATED workstation, train a
LoRA on it through the radeonlab CLI, fetch and try the adapter, tear it down.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from radeonlab.sandbox import config, reap
from radeonlab.sandbox.hosts import Sandbox, SandboxError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="radeonlab sandbox", description=__doc__)
    p.add_argument("--state-dir", type=Path, default=config.STATE_DIR, help="default: %(default)s")
    sub = p.add_subparsers(dest="action", required=True)
    up = sub.add_parser("up", help="create and start hosts (builds the base rootfs on first use)")
    up.add_argument("--hosts", type=int, default=2, help="how many hosts (default: %(default)s)")
    up.add_argument(
        "--cards",
        default="rx7900xtx,rx6700xt",
        help=f"simulated card per host, comma-separated ({', '.join(config.CARDS)}, none); %(default)s",
    )
    up.add_argument(
        "--provision",
        action="store_true",
        help="then provision them with deploy/setup.py against the SIMULATED AMD servers (= `provision`)",
    )
    prov = sub.add_parser(
        "provision",
        help="provision hosts with deploy/setup.py, the SIMULATED apt repo and wheel index served meanwhile",
    )
    prov.add_argument("names", nargs="*", help="host names (default: every host)")
    down = sub.add_parser("down", help="destroy every host (the base rootfs stays cached)")
    down.add_argument(
        "--stale",
        action="store_true",
        help="instead: destroy every sandbox host on this machine left behind by a killed run",
    )
    st = sub.add_parser("status", help="list the hosts")
    st.add_argument("--json", action="store_true")
    demo = sub.add_parser("demo", help="the README demo: provision, submit, watch, fetch --try (own state)")
    demo.add_argument("--keep", action="store_true", help="keep the demo's sandbox host afterwards")
    sub.add_parser(
        "laptop-requirements",
        help="print the pip requirements the laptop side of the sandbox needs (tiny model, adapter check)",
    )
    return p


def laptop_requirements() -> list[str]:
    """The training-stack pins the laptop needs to make the tiny model and load adapters.

    Taken from roles/python_stack/defaults.py so the laptop and the workstations run the same versions;
    torch is the machine's local CPU wheel, the one every SIMULATED torch of the sandbox is made of.
    """
    from radeonlab.roles.python_stack.defaults import DEFAULTS
    from radeonlab.sandbox.wheelfiles import standin_torch_version

    wanted = {"transformers", "peft", "safetensors"}
    pins = [r for r in DEFAULTS["python_stack_requirements"] if r.split("==")[0] in wanted]
    return [f"torch=={standin_torch_version()}", *pins]


def _provision(sbx: Sandbox, names: list[str]) -> None:
    """deploy/setup.py on these hosts, the one way the test bed provisions (sandbox/provision.py)."""
    from radeonlab.sandbox.provision import provision_hosts

    done = provision_hosts(sbx, {n: sbx.hosts[n].card for n in names}, quiet=False)
    seconds = next(iter(done.values())).seconds if done else 0.0
    print(f"provisioned {', '.join(names)} in {seconds:.1f}s")


def _say_how_to_use(sbx: Sandbox) -> None:
    from radeonlab.sandbox.provision import INVENTORY

    print(f"  jobs: RADEONLAB_SANDBOX_DIR={sbx.state_dir} RADEONLAB_INVENTORY={INVENTORY} radeonlab fleet")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.action == "laptop-requirements":
        print("\n".join(laptop_requirements()))
        return 0
    if args.action == "demo":
        from radeonlab.sandbox import demo as demo_module

        return demo_module.run(keep=args.keep)
    if args.action == "down" and args.stale:
        removed = reap.reap_stale()
        print(f"removed {len(removed)} stale sandbox host(s)" + "".join(f"\n  {r}" for r in removed))
        return 0
    sbx = Sandbox(args.state_dir)
    try:
        if args.action == "up":
            reap.reap_stale()
            reap.keep(sbx.state_dir)
            cards = [None if c in ("", "none") else c for c in args.cards.split(",")]
            t0 = time.monotonic()
            hosts = sbx.create_hosts(args.hosts, cards)
            for host in hosts:
                print(f"{host.name}: {host.user}@{host.address}:{host.port} card={host.card}")
            print(f"ready in {time.monotonic() - t0:.1f}s; inventory: {sbx.inventory_file}")
            if args.provision:
                _provision(sbx, [h.name for h in hosts])
            else:  # the deploy needs the SIMULATED servers: the verb serves them for its run
                print(f"  provision them: radeonlab sandbox --state-dir {sbx.state_dir} provision")
            _say_how_to_use(sbx)
        elif args.action == "provision":
            unknown = [n for n in args.names if n not in sbx.hosts]
            if unknown or not sbx.hosts:
                raise SandboxError(f"no such host(s) {', '.join(unknown) or '(none up)'}: `sandbox up` first")
            _provision(sbx, args.names or list(sbx.hosts))
            _say_how_to_use(sbx)
        elif args.action == "down":
            sbx.destroy_all()
            print(f"all hosts destroyed under {sbx.state_dir}")
        elif args.json:
            print(json.dumps(sbx.status(), indent=1))
        else:
            for s in sbx.status():
                state = "up" if s["sshd"] else ("running, sshd off" if s["running"] else "stopped")
                where = f"{s['ssh_user']}@{s['ssh_hostname']}:{s['ssh_port']}"
                print(f"{s['name']:8} {where}  card={s['card']}  {state}")
    except SandboxError as exc:
        print(f"sandbox: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
