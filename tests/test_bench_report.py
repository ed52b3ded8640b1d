"""The bench's report is made from its JSON (README's table: `python -m tests.bench.run --markdown JSON`)."""

from __future__ import annotations

import json

from tests.bench import phases, provisioning
from tests.bench.ansible_inventory import PlaybookRun
from tests.bench.run import markdown, table

RESULT = {
    "reduced": False,
    "total_s": 612.0,
    "machine": {"cpus": 2, "cpu": "AMD EPYC", "date": "2026-12-03 10:00 UTC", "load_start": "1.00 1.00 1.00"},
    "provisioning": {
        "hosts": 3,
        "first_s": 80.0,
        "noop_s": [4.0, 5.0, 6.0],
        "facts_only_s": [4.0, 4.0, 4.0],
        "noop_over_first": 0.0625,
        "facts_over_noop": 0.8,
        "ansible": {"ansible_core": "2.19.14", "first_s": 200.0, "first_changed": {}, "noop_s": [40.0, 50.0]},
        "over_ansible_first": 0.4,
        "over_ansible_noop": 5.0 / 45.0,
        "goals": provisioning.GOALS,
    },
    "data": {
        "size_mb": 100,
        "mb_per_s": {"upload_files": 90.0, "scp_up": 100.0, "fetch_files": 120.0, "scp_down": 130.0},
        "upload_over_scp": 0.9,
        "fetch_over_scp": 0.92,
        "reupload_bytes_sent": 0,
        "reupload_s": 0.2,
        "reupload_over_scp_s": 0.19,
    },
    "submit": {"median_first_step_s": 8.0, "median_overhead_s": 6.0, "overhead_share": 0.75},
    "watch": {
        "watching_cpu_s_per_min": 4.0,
        "idle_cpu_s_per_min": 0.2,
        "watch_cost_share_of_one_core": 0.063,
    },
}


def test_the_ansible_row_gives_both_ratios_against_their_goals() -> None:
    rows = {
        what: (measured, ratio) for what, measured, ratio in provisioning.table_rows(RESULT["provisioning"])
    }
    measured, ratio = rows["vs Ansible"]
    assert measured == "ansible-core 2.19.14: first 200.0s, no-op 45.0s"
    assert ratio == "first 0.40x (goal <= 0.6); no-op 0.11x (goal <= 0.25)"
    assert "no-op 5.0s" in rows["provisioning"][0]


def test_the_markdown_table_states_the_machine_and_has_every_row() -> None:
    text = markdown(RESULT)
    assert text.startswith("Run of 2026-12-03 10:00 UTC on AMD EPYC, 2 cores; load average 1.00 1.00 1.00")
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(lines) == 1 + 7 and lines[0] == "| what | measured | ratio |"
    assert any(line.startswith("| vs Ansible |") for line in lines)
    assert len(table(RESULT).splitlines()) == 2 + 7


def test_phases_last_until_the_next_step_starts() -> None:
    stamped = [
        (10.5, "--> Loading config..."),
        (12.0, "--> Starting operation: Install ROCm | Write /etc/apt/sources.list.d/rocm.list "),
        (12.5, "    [ws1] Success"),
        (20.0, "--> Starting operation: Install the Python training stack | Install torch==2.13.0"),
    ]
    got = phases.phases_of(stamped, 10.0, 50.0, phases.PYINFRA_STEP)
    assert got == [
        ("start-up", 2.0),
        ("Install ROCm | Write /etc/apt/sources.list.d/rocm.list", 8.0),
        ("Install the Python training stack | Install torch==2.13.0", 30.0),
    ]
    task = [(1.0, "TASK [Install ROCm 7.2.4 packages] ****")]
    ansible = phases.phases_of(task, 0.0, 3.0, phases.ANSIBLE_STEP)
    assert ansible == [("start-up", 1.0), ("Install ROCm 7.2.4 packages", 2.0)]
    assert phases.Timed(0, 3.0, "", ansible).slowest(1) == [("Install ROCm 7.2.4 packages", 2.0)]


def test_the_provisioning_summary_is_json_and_feeds_the_table() -> None:
    step = [("start-up", 1.0), ("Install ROCm 7.2.4 packages", 3.0)]
    ours = [phases.Timed(0, s, "", step) for s in (80.0, 4.0, 6.0, 5.0)]
    theirs = [PlaybookRun(0, s, "", step, recap={"ws4": {"changed": 0}}) for s in (200.0, 40.0, 50.0, 45.0)]
    summary = provisioning.summary(3, ours[0], theirs[0], ours[1:], theirs[1:], [4.0, 4.0, 4.0])
    summary = json.loads(json.dumps(summary))  # what the bench writes
    assert summary["over_ansible_first"] == 0.4 and summary["over_ansible_noop"] == 5.0 / 45.0
    assert summary["noop_over_first"] == 5.0 / 80.0 and summary["ansible"]["noop_s"] == [40.0, 50.0, 45.0]
    assert summary["phases"]["ansible_noop"] == [["start-up", 1.0], ["Install ROCm 7.2.4 packages", 3.0]]
    rows = provisioning.table_rows(summary)
    assert rows[1][2] == "first 0.40x (goal <= 0.6); no-op 0.11x (goal <= 0.25)"
