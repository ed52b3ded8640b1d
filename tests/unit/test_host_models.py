"""The workstation's model cache tool (jobs/host/models.py), run as the workstation runs it - a file, by a
python with huggingface_hub, in a subprocess with its own HF_HOME - against the SIMULATED Hub: pull, list,
complete, touch, rm; refusals; two pulls download once; two concurrent pulls download once (the client's
file locks); a pull cut off mid-file resumes with a Range request; a cache without room refuses in one line.
The laptop's venv stands in for the training venv (the same huggingface_hub version: test_model_resolve)."""

from __future__ import annotations

import ast
import errno
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from radeonlab.jobs.host import VENV_TOOLS, models
from radeonlab.sandbox import hub as sandbox_hub
from radeonlab.sandbox.hubcatalog import TINY_GATED, TINY_PUBLIC, TOKEN_DENIED, TOKEN_GRANTED
from tests.support.hubkit import catalog, sha256_of, tiny_assets

TOOL = Path(models.__file__)
WEIGHTS = "model.safetensors"


@dataclass
class Run:
    code: int
    events: list[dict]
    stderr: str

    def last(self) -> dict:
        return self.events[-1]


@pytest.fixture
def hub() -> Iterator[sandbox_hub.Hub]:
    with sandbox_hub.serve(catalog()) as running:
        yield running


def tool_env(hub: sandbox_hub.Hub, home: Path, **extra: str) -> dict[str, str]:
    """A clean environment: this machine's own Hub settings (a token, a cache) must not leak in."""
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "HF_HOME": str(home / "hf"),
        "HF_ENDPOINT": hub.url,
    } | extra


def start(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    command = [sys.executable, str(TOOL), *args]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str]) -> Run:
    out, err = proc.communicate(timeout=300)
    return Run(proc.returncode, [json.loads(line) for line in out.splitlines() if line.strip()], err)


def tool(env: dict[str, str], *args: str) -> Run:
    return finish(start(env, *args))


def cache_of(env: dict[str, str]) -> Path:
    return Path(env["HF_HOME"]) / "hub"


def test_pull_list_complete_touch_rm(hub: sandbox_hub.Hub, tmp_path: Path) -> None:
    env = tool_env(hub, tmp_path)
    model_dir, _ = tiny_assets()
    first = tool(env, "pull", TINY_PUBLIC)
    assert first.code == 0, first.stderr
    kinds = [e["event"] for e in first.events]
    assert kinds[0] == "start" and kinds[-1] == "done" and kinds.count("file") == 8
    total = sum(f.size for f in catalog().get("model", TINY_PUBLIC).commits[-1].files)  # type: ignore[union-attr]
    assert first.last()["fetched"] == first.last()["bytes"] == total
    sha = first.last()["sha"]
    snapshot = cache_of(env) / "models--radeonlab-sandbox--tiny-llama/snapshots" / sha
    for path in model_dir.iterdir():
        assert (snapshot / path.name).read_bytes() == path.read_bytes()

    again = tool(env, "pull", TINY_PUBLIC)
    assert again.code == 0 and again.last()["fetched"] == 0
    for path in model_dir.iterdir():  # two pulls: each file served once
        assert hub.downloads(TINY_PUBLIC, path.name) == 1

    [entry] = tool(env, "list").events[0]
    assert entry["repo"] == TINY_PUBLIC and entry["size"] == total and entry["partial_bytes"] == 0
    assert entry["revisions"] == [{"sha": sha, "refs": ["main"], "size": total, "files": 8, "complete": True}]

    complete = tool(env, "complete", TINY_PUBLIC, "main")
    assert complete.code == 0 and complete.events[0]["complete"] and complete.events[0]["sha"] == sha
    (snapshot / WEIGHTS).unlink()  # a file gone from the snapshot: no longer complete
    broken = tool(env, "complete", TINY_PUBLIC, "main")
    assert broken.code == 1 and broken.events[0]["missing"] == [WEIGHTS]
    assert tool(env, "pull", TINY_PUBLIC).code == 0  # relinks from the cached blob, downloads nothing
    assert hub.downloads(TINY_PUBLIC, WEIGHTS) == 1
    assert tool(env, "complete", TINY_PUBLIC, sha).code == 0

    touched = tool(env, "touch", TINY_PUBLIC)
    assert touched.code == 0
    assert tool(env, "list").events[0][0]["last_used"] == touched.events[0]["used_at"]

    removed = tool(env, "rm", TINY_PUBLIC)
    assert removed.code == 0 and removed.events[0]["freed"] >= total
    assert tool(env, "list").events[0] == []
    assert tool(env, "complete", TINY_PUBLIC).code == 1
    assert tool(env, "rm", TINY_PUBLIC).code == models.EXIT["bad_input"]


def test_refusals_are_one_line_errors(hub: sandbox_hub.Hub, tmp_path: Path) -> None:
    env = tool_env(hub, tmp_path)
    cases = [
        ({}, [TINY_GATED], f"{TINY_GATED}@main: gated: no token: set HF_TOKEN or log in"),
        (
            {"HF_TOKEN": TOKEN_DENIED},
            [TINY_GATED],
            "this token has no access; request it on the model's page (403)",
        ),
        ({}, ["nobody/nothing"], "nobody/nothing@main: no such model on the Hub (404)"),
        ({}, [TINY_PUBLIC, "--revision", "v9"], f"{TINY_PUBLIC}@v9: no such revision on the Hub (404)"),
    ]
    for extra, args, message in cases:
        run = tool(env | extra, "pull", *args)
        assert run.code == models.EXIT["bad_input"]
        assert [e["event"] for e in run.events] == ["error"] and message in run.last()["message"]
    granted = tool(env | {"HF_TOKEN": TOKEN_GRANTED}, "pull", TINY_GATED)
    assert granted.code == 0 and hub.downloads(TINY_GATED, WEIGHTS, client="token:granted") == 1
    assert hub.bytes_served(TINY_GATED, client="token:denied") == 0


def test_two_concurrent_pulls_download_once(hub: sandbox_hub.Hub, tmp_path: Path) -> None:
    hub.set_rate(300_000)  # ~3 s for the weights: the second pull arrives while the first downloads
    env = tool_env(hub, tmp_path)
    procs = [start(env | {"HF_HUB_USER_AGENT_ORIGIN": f"p{n}"}, "pull", TINY_PUBLIC) for n in (1, 2)]
    runs = [finish(p) for p in procs]
    assert [r.code for r in runs] == [0, 0], [r.stderr for r in runs]
    size = (tiny_assets()[0] / WEIGHTS).stat().st_size
    [transfer] = [t for t in hub.transfers() if t.path == WEIGHTS]
    assert transfer.complete and transfer.sent == size and hub.bytes_served(TINY_PUBLIC, WEIGHTS) == size
    # both asked for the weights while they were being sent: the client's lock made one of them wait
    weights_url = f"/{TINY_PUBLIC}/resolve/{runs[0].last()['sha']}/{WEIGHTS}"
    heads = [r for r in hub.requests() if r.method == "HEAD" and r.path == weights_url]
    assert {r.client for r in heads} == {"origin:p1", "origin:p2"}
    assert all(r.at < transfer.ended for r in heads)
    assert sum(r.last()["fetched"] for r in runs) >= size  # each saw it missing when it started


def test_pull_cut_off_mid_file_resumes_after_restart(hub: sandbox_hub.Hub, tmp_path: Path) -> None:
    env = tool_env(hub, tmp_path)
    size = (tiny_assets()[0] / WEIGHTS).stat().st_size
    hub.cut(TINY_PUBLIC, WEIGHTS, 600_000)  # then the Hub goes down
    cut = tool(env, "pull", TINY_PUBLIC)
    assert cut.code == models.EXIT["hub"] and "pull again to resume" in cut.last()["message"]
    # The client names an LFS file's blob after its sha256; other files downloading beside it when the Hub
    # went down may have left partial blobs of their own, which are not what this test is about.
    blobs = cache_of(env) / "models--radeonlab-sandbox--tiny-llama/blobs"
    partial = blobs / f"{sha256_of(tiny_assets()[0] / WEIGHTS)}.incomplete"
    assert partial.stat().st_size == models.DEFAULTS["chunk_bytes"]  # the client keeps whole chunks
    hub.stop()
    hub.set_down(False)
    hub.start()  # the same port
    served_before = hub.bytes_served(TINY_PUBLIC, WEIGHTS)
    resumed = tool(env, "pull", TINY_PUBLIC)
    assert resumed.code == 0, resumed.stderr
    second = hub.bytes_served(TINY_PUBLIC, WEIGHTS) - served_before
    assert second == size - models.DEFAULTS["chunk_bytes"] < size
    [last] = [t for t in hub.transfers() if t.path == WEIGHTS][-1:]
    assert last.start == models.DEFAULTS["chunk_bytes"] and last.complete
    snapshot = cache_of(env) / "models--radeonlab-sandbox--tiny-llama/snapshots" / resumed.last()["sha"]
    assert (snapshot / WEIGHTS).read_bytes() == (tiny_assets()[0] / WEIGHTS).read_bytes()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs as the cache (root)")
def test_cache_without_room_refuses_in_one_line(hub: sandbox_hub.Hub, tmp_path: Path) -> None:
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(small)], check=True)
    try:
        env = tool_env(hub, tmp_path, HF_HUB_CACHE=str(small))
        run = tool(env, "pull", TINY_PUBLIC)
    finally:
        subprocess.run(["umount", str(small)], check=True)
    assert run.code == models.EXIT["disk_full"] and [e["event"] for e in run.events] == ["error"]
    message = run.last()["message"]
    assert message.startswith(f"{small}: not enough space for {TINY_PUBLIC}@main: needs 886.2 kB more")
    assert message.endswith("524.3 kB free") and hub.bytes_served() == 0


def test_disk_full_during_download_is_a_disk_error() -> None:
    error = models.hub_error(
        OSError(errno.ENOSPC, "No space left on device", "/cache/x.incomplete"), "m@main"
    )
    assert error.kind == "disk_full" and "/cache/x.incomplete" in str(error)


def test_files_a_fine_tune_needs() -> None:
    llama = ["config.json", "model-00001-of-00004.safetensors", "model.safetensors.index.json"]
    llama += ["original/consolidated.00.pth", "original/params.json", "pytorch_model.bin", "tokenizer.json"]
    assert models.wanted(llama, all_files=False) == [
        "config.json",
        "model-00001-of-00004.safetensors",
        "model.safetensors.index.json",
        "tokenizer.json",
    ]
    assert models.wanted(["config.json", "pytorch_model.bin", "model.gguf"], False) == [
        "config.json",
        "pytorch_model.bin",  # no safetensors: the pickled weights are the model
    ]
    assert models.wanted(llama, all_files=True) == llama


def test_other_host_modules_import_only_the_stdlib() -> None:
    """They run on the host's system python3, which has neither radeonlab's dependencies nor the stack."""
    venv_tools = {f"{name}.py" for name in VENV_TOOLS}
    assert all((TOOL.parent / name).is_file() for name in venv_tools)  # no stale name hides a module
    for path in sorted(TOOL.parent.glob("*.py")):
        if path.name in venv_tools:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or top == "radeonlab" or top == "__future__", (
                    path,
                    name,
                )
