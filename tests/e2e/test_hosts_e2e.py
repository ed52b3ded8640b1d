"""End to end on sandbox hosts: the deploy as root on a host without sudo. (`radeonlab sandbox up
--provision` giving hosts the job runner uses, and `sandbox provision` again, are shown by
tests/e2e/test_tryit_e2e.py's run of the try-it page: one provisioning for both.)

Root without sudo: pyinfra logs in over SSH as root (the sandbox hosts take root's key, as a workstation
whose owner logs in as root would) to a host whose sudo was removed. That is the cheapest honest stand-in for
`pyinfra @local deploy/setup.py` as root on that host: the same deploy, the same facts, the connection running
as root; only the connector differs (installing pyinfra and radeonlab inside the host would cost minutes).
"""

from __future__ import annotations

import json
import re

import pytest

from radeonlab.sandbox import provision

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

# An inventory's data for a root login: the sandbox inventory sets `_sudo: True` for its usual login user
# (lab); a root login's inventory says neither.
AS_ROOT = {"ssh_user": "root", "_sudo": False}


def test_a_root_deploy_plans_and_runs_without_sudo_and_refuses_root_as_the_training_user(
    sandbox, make_host
) -> None:
    h = make_host("rx7900xtx", data={**AS_ROOT, "python_stack_user": "lab"})
    h.exec("rm -f /usr/bin/sudo && ! command -v sudo")  # a minimal Debian: no sudo at all
    with provision.serving(sandbox):
        dry = provision.run_deploy(sandbox, [h.name], options=["--dry", "--json"])
        assert dry.returncode == 0, dry.stderr[-4000:]
        plan = [op["name"] for op in json.loads(dry.stdout)["plan"]]  # this one host's operations
        # the stack from the lab's lock, or (no lock covers this host yet: run alone) resolved into it first
        stack = re.compile(r"Install the hash-locked stack|into the lab's hash lock .* and install from it")
        for step in ("Install ROCm 10.1 packages", "Add lab to video, render"):
            assert any(step in name for name in plan), (step, plan)
        assert any(stack.search(name) for name in plan), plan
        # and for real: every operation as root without sudo, the training user's as lab through su
        run = provision.run_deploy(sandbox, [h.name])
        assert run.returncode == 0, run.stderr[-4000:]
        record = json.loads((h.root / "etc/radeonlab/host.json").read_text())
        assert record["user"] == "lab" and record["problem"] is None, record
        venv = h.exec("stat -c %U /home/lab/radeonlab/venv/bin/python").stdout.strip()
        assert venv == "lab"

        h.drop_data("python_stack_user")  # the default: the login user, root here
        refused = provision.run_deploy(sandbox, [h.name], options=["--dry"])
    assert refused.returncode != 0
    line = next(x for x in refused.stderr.splitlines() if "training as root is refused" in x)
    assert "the deploy runs as root and python_stack_user is empty" in line, line
    assert "set python_stack_user to a non-root user" in line, line
