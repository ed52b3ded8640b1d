"""jobs/host/modelpeer.py's two ends wired together in-process (the sandbox e2e is
tests/e2e/test_provision_hub_e2e.py), and modelcopy's choice of the host that downloads from the Hub."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
from pathlib import Path

import pytest

from radeonlab.jobs.fleet.inventory import HostTarget
from radeonlab.jobs.fleet.modelcopy import pick_source
from radeonlab.jobs.host import modelpeer, models

REPO = "org/tiny"
SHA = "a" * 40
WEIGHTS = b"\x00\x01weights" * 1000
CONFIG = b'{"model_type": "llama"}'


def git_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


HUB_FILES = [  # as the Hub answers: the weights in LFS (ETag sha256), config.json a regular file (git sha1)
    {
        "path": "model.safetensors",
        "size": len(WEIGHTS),
        "etag": hashlib.sha256(WEIGHTS).hexdigest(),
        "lfs": True,
    },
    {"path": "config.json", "size": len(CONFIG), "etag": git_sha1(CONFIG), "lfs": False},
    {"path": "original/consolidated.pth", "size": 3, "etag": git_sha1(b"pth"), "lfs": False},  # never needed
]


def source_cache(tmp_path: Path) -> Path:
    cache = tmp_path / "source"
    blobs = models.storage(cache, REPO) / "blobs"
    blobs.mkdir(parents=True)
    (blobs / HUB_FILES[0]["etag"]).write_bytes(WEIGHTS)
    (blobs / HUB_FILES[1]["etag"]).write_bytes(CONFIG)
    return cache


def copy(tmp_path: Path, damage: bool = False) -> tuple[dict, Path]:
    """receive's need -> send -> receive, as the laptop relays them."""
    dest = tmp_path / "dest"
    first = io.BytesIO(json.dumps({"files": HUB_FILES}).encode() + b"\n")
    need_out = io.StringIO()
    # receive reads the files line, answers what it needs, then reads the stream: run it on the whole input
    names = [f["etag"] for f in HUB_FILES[:2]]
    sent = io.BytesIO()
    modelpeer.send(
        source_cache(tmp_path), REPO, io.BytesIO(json.dumps({"blobs": names}).encode() + b"\n"), sent
    )
    stream = sent.getvalue()
    if damage:
        at = stream.index(WEIGHTS[:20]) + 100
        stream = stream[:at] + b"X" + stream[at + 1 :]
    first.seek(0, io.SEEK_END)
    first.write(stream)
    first.seek(0)
    with contextlib.redirect_stdout(need_out):
        done = modelpeer.receive(dest, REPO, SHA, "main", first)
    need = json.loads(need_out.getvalue().splitlines()[0])
    assert sorted(b["blob"] for b in need["blobs"]) == sorted(names)  # original/ is never asked for
    return done, dest


def test_a_copy_lands_as_a_hub_pull_would_leave_it(tmp_path: Path) -> None:
    done, dest = copy(tmp_path)
    assert done["complete"] and not done["failed"], done
    assert done["fetched"] == len(WEIGHTS) + len(CONFIG)
    snapshot = models.storage(dest, REPO) / "snapshots" / SHA
    assert (snapshot / "model.safetensors").read_bytes() == WEIGHTS
    assert (snapshot / "config.json").is_symlink() and (snapshot / "config.json").read_bytes() == CONFIG
    assert models.completeness(dest, REPO, "main")["complete"]  # the ref and the manifest are written


def test_a_copy_whose_bytes_differ_from_the_hubs_is_refused_and_never_linked(tmp_path: Path) -> None:
    done, dest = copy(tmp_path, damage=True)
    weights = HUB_FILES[0]["etag"]
    assert not done["complete"] and list(done["failed"]) == [weights], done
    assert done["failed"][weights] == "model.safetensors: sha256 differs from the Hub's; refused"
    blobs = models.storage(dest, REPO) / "blobs"
    assert sorted(p.name for p in blobs.iterdir()) == [HUB_FILES[1]["etag"]]  # no .peer file left behind
    assert not (models.storage(dest, REPO) / "snapshots").exists()
    assert not models.completeness(dest, REPO, "main")["complete"]


def test_send_refuses_a_name_that_is_a_path(tmp_path: Path) -> None:
    out = io.BytesIO()
    modelpeer.send(source_cache(tmp_path), REPO, io.BytesIO(b'{"blobs": ["../../etc/passwd"]}\n'), out)
    assert json.loads(out.getvalue()) == {"blob": "../../etc/passwd", "missing": True}


def test_the_lab_cache_host_downloads_from_the_hub_else_the_first_selected() -> None:
    inventory = {n: HostTarget(n, n, data={"wheel_cache_host": "cache"}) for n in ("a", "b", "cache")}
    assert pick_source([inventory["a"], inventory["b"]], inventory).name == "cache"
    plain = {n: HostTarget(n, n) for n in ("a", "b")}
    assert pick_source([plain["b"], plain["a"]], plain).name == "b"


def test_receive_refuses_a_file_name_that_leaves_the_snapshot(tmp_path: Path) -> None:
    files = [{**HUB_FILES[1], "path": "../../outside.json"}]
    stdin = io.BytesIO(json.dumps({"files": files}).encode() + b"\n")
    with pytest.raises(models.PullError, match="refusing the file name"):
        modelpeer.receive(tmp_path / "dest", REPO, SHA, "main", stdin)
