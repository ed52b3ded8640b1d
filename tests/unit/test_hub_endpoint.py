"""One Hub endpoint lookup (jobs/spec/hub.py endpoint_of) for every verb that asks the Hub: the laptop's
HF_ENDPOINT first, else the inventory's radeonlab_hf_endpoint; `models pull` asks it too, and a refused spec's
findings are printed once by submit. No sandbox hosts: hosts that listen nowhere."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

from radeonlab.cli import main
from radeonlab.jobs.fleet import store
from radeonlab.jobs.spec import hub
from tests.support.laptop_doubles import CLOSED_HUB

LAB_MIRROR = "http://127.0.77.252:1"  # the inventory's endpoint; nothing listens there either
INVENTORY = (
    'hosts = [("a", {"ssh_hostname": "127.0.77.250", "ssh_port": 1, "ssh_user": "lab",\n'
    f'               "radeonlab_hf_endpoint": "{LAB_MIRROR}"}})]\n'
)
SEED = Path(__file__).resolve().parents[2] / "src/radeonlab/jobs/examples/seed.yaml"


def test_the_laptop_hf_endpoint_wins_over_the_inventory() -> None:
    hosts = {"b": SimpleNamespace(data={hub.ENDPOINT_KEY: "http://b"}), "a": SimpleNamespace(data={})}
    assert hub.endpoint_of(hosts, {"HF_ENDPOINT": "http://laptop"}) == "http://laptop"
    assert hub.endpoint_of(hosts, {}) == "http://b"
    assert hub.endpoint_of(list(hosts.values()), {}) == "http://b"  # a list of hosts as well as a mapping
    assert hub.endpoint_of([SimpleNamespace(data={})], {}) is None  # the client's default


@pytest.mark.parametrize(("laptop", "asked"), [(CLOSED_HUB, CLOSED_HUB), (None, LAB_MIRROR)])
def test_models_pull_asks_the_endpoint_of_the_lookup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, laptop: str | None, asked: str
) -> None:
    monkeypatch.setenv(store.HOME_ENV, str(tmp_path / "home"))
    inventory = tmp_path / "inv.py"
    inventory.write_text(INVENTORY)
    seen: list[Any] = []

    def refused(model: str, **kwargs: Any) -> hub.ModelAnswer:
        # what resolve_model itself does with `endpoint`: it wins over the environment's HF_ENDPOINT
        seen.append(kwargs.get("endpoint") or kwargs.get("environ", {}).get("HF_ENDPOINT"))
        return hub.ModelAnswer(hub.Answer.UNKNOWN_REPO, model, f"{model}: no such model")

    monkeypatch.setattr(hub, "resolve_model", refused)
    result = CliRunner().invoke(
        main, ["models", "pull", "org/none", "-i", str(inventory)], env={"HF_ENDPOINT": laptop}
    )
    assert seen == [asked], result.output
    assert result.exit_code != 0 and "org/none: no such model" in result.stderr


def test_submit_prints_each_finding_of_a_refused_spec_once(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["submit", str(SEED), "-i", str(tmp_path / "nope.py"), "--host", "ws1"],
        env={"HF_ENDPOINT": CLOSED_HUB, store.HOME_ENV: str(tmp_path / "home")},
    )  # fmt: skip
    lines = result.stderr.strip().splitlines()
    findings = [line for line in lines if "compute_type" in line]
    assert len(findings) == 1, lines  # once, not once per path that caught it
    assert lines[-1].startswith("radeonlab: error: ") and "compute_type" not in lines[-1]
