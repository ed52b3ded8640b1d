"""The workstation's shared Hub model cache: pull, list, remove, and "is this revision complete?".

Runs on the workstation with the TRAINING VENV's python (it imports huggingface_hub, installed there with
transformers; the other jobs/host modules run on the system python3 and import only the stdlib). It uses
the Hub client's own settings from its environment: the cache (HF_HUB_CACHE, else $HF_HOME/hub), the
endpoint (HF_ENDPOINT) and the token (HF_TOKEN). Of radeonlab it imports only the cache's layout
(modelcache.py, stdlib, which the probe reads too).

    python models.py pull MODEL [--revision R] [--ref REF] [--all-files]
                                                               JSON lines: start, file, progress, done | error
    python models.py list                                      JSON: what the cache holds
    python models.py rm MODEL [--revision R]                   JSON: what was removed
    python models.py complete MODEL [REV]                      JSON; exit 0 when complete, 1 when not
    python models.py touch MODEL [REV]                         records a job's use of the model

`pull` downloads each file of the revision with the client's hf_hub_download into the shared cache, so what
the client guarantees holds: two processes pulling the same model download each file once (a file lock per
blob; the second waits, then links), and an interrupted download resumes from its `.incomplete` file with an
HTTP Range request. Before downloading it compares what is missing with the free space of the cache's disk
and refuses with one line naming the cache and the space needed; a disk that fills up anyway fails the same
way. A finished pull writes a manifest (<cache>/models--org--name/.radeonlab/<sha>.json: the revision's
files and sizes): `complete` checks every one of them is in the snapshot, so a job can run with
HF_HUB_OFFLINE=1. Not verified against the real Hub's Xet storage: the SIMULATED sandbox Hub serves plain
HTTP only (hf_xet, installed with the stack, downloads Xet-backed files its own way).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import errno
import fnmatch
import json
import os
import shutil
import sys
import threading
import time
import warnings
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import requests
from huggingface_hub import HfApi, constants, hf_hub_download, scan_cache_dir
from huggingface_hub.errors import (
    CacheNotFound,
    GatedRepoError,
    HfHubHTTPError,
    HFValidationError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import disable_progress_bars

from radeonlab.jobs.host.modelcache import MANIFEST_DIR, completeness, manifest, resolve_sha, storage

DEFAULTS: dict[str, Any] = {
    "workers": 4,  # files downloaded at once
    "progress_s": 2.0,  # seconds between progress lines
    "reserve_bytes": 256 * 2**20,  # free space kept on the cache's disk beyond what the model needs
    # The client keeps only whole chunks of a download cut off mid-way (a partial read is dropped), 10 MiB by
    # default (constants.DOWNLOAD_CHUNK_SIZE): smaller chunks lose less on a flaky link.
    "chunk_bytes": 512 * 1024,
}
# Never needed to fine-tune with transformers: other frameworks' formats and Meta's original/ checkpoint
# (16 GB in Llama-3-8B's repo).
NOT_TRANSFORMERS = ("original/*", "*.gguf", "*.onnx", "*.msgpack", "*.h5", "*.tflite", "*.ot")
# When a repo has safetensors weights transformers loads those (PreTrainedModel.from_pretrained prefers
# them): the same weights in PyTorch pickles are skipped.
PICKLED_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.ckpt")
EXIT = {"ok": 0, "incomplete": 1, "bad_input": 2, "disk_full": 3, "hub": 4}


class PullError(Exception):
    """One line for the user; `kind` picks the exit status (EXIT)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


_PRINT_LOCK = threading.Lock()


def emit(event: str, **fields: Any) -> None:
    """One JSON line on stdout (the laptop reads them as progress)."""
    with _PRINT_LOCK:
        print(json.dumps({"event": event, **fields}), flush=True)


def wanted(paths: list[str], all_files: bool) -> list[str]:
    """The repo files a fine-tuning job needs (all of them with all_files)."""
    if all_files:
        return paths
    skip = NOT_TRANSFORMERS + (PICKLED_WEIGHTS if any(p.endswith(".safetensors") for p in paths) else ())
    return [p for p in paths if not any(fnmatch.fnmatch(p, pattern) for pattern in skip)]


def size(n: float) -> str:
    """Bytes for people: 16.06 GB, 855.4 kB."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} GB" if unit == "GB" else f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def free_bytes(path: Path) -> int:
    while not path.exists():  # the cache may not exist yet: its nearest existing parent is on the same disk
        path = path.parent
    return shutil.disk_usage(path).free


def hub_error(exc: BaseException, name: str) -> PullError:
    """The client's exceptions as one-line errors."""
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return PullError("disk_full", f"{name}: disk full while downloading ({exc.filename or 'cache'})")
    if isinstance(exc, GatedRepoError):
        if exc.response is not None and exc.response.status_code == 403:
            no_access = "gated: this token has no access; request it on the model's page (403)"
            return PullError("bad_input", f"{name}: {no_access}")
        return PullError("bad_input", f"{name}: gated: no token: set HF_TOKEN or log in")
    if isinstance(exc, RevisionNotFoundError):
        return PullError("bad_input", f"{name}: no such revision on the Hub (404)")
    if isinstance(exc, RepositoryNotFoundError):
        return PullError("bad_input", f"{name}: no such model on the Hub (404)")
    if isinstance(exc, HFValidationError):
        return PullError("bad_input", f"{name}: not a Hub model id")
    if isinstance(exc, HfHubHTTPError) and exc.response is not None:
        return PullError("hub", f"{name}: the Hub answered HTTP {exc.response.status_code}")
    if isinstance(exc, requests.exceptions.RequestException | LocalEntryNotFoundError):
        why = type(exc).__name__
        return PullError(
            "hub", f"{name}: download interrupted or Hub unreachable ({why}); pull again to resume"
        )
    raise exc


class Pull:
    """One pull of one revision: plan (what is missing, is there room), download, record."""

    def __init__(
        self, cache: Path, repo_id: str, revision: str | None, all_files: bool, ref: str | None = None
    ) -> None:
        self.cache, self.repo_id, self.revision, self.all_files = (
            cache,
            repo_id,
            revision or "main",
            all_files,
        )
        # The branch or tag a commit sha was resolved from elsewhere (the laptop pins every host to one
        # commit): recorded as that ref, so "main" is found in the cache when the Hub cannot be asked.
        self.ref = ref
        self.name = f"{repo_id}@{self.revision}"
        self.folder = storage(cache, repo_id)

    def run(self) -> dict[str, Any]:
        started = time.monotonic()
        try:
            api = HfApi()
            info = api.model_info(self.repo_id, revision=self.revision, files_metadata=True)
            if info.gated:  # its listing is public: ask for access before announcing a download
                api.auth_check(self.repo_id)
        except Exception as exc:
            raise hub_error(exc, self.name) from exc
        siblings = {s.rfilename: s for s in info.siblings or ()}
        self.sha = str(info.sha)
        self.files = {p: siblings[p] for p in wanted(sorted(siblings), self.all_files)}
        total = sum(s.size or 0 for s in self.files.values())
        before = self.bytes_present()
        needed, free, spare = total - before, free_bytes(self.cache), DEFAULTS["reserve_bytes"]
        if needed + spare > free:
            message = f"{self.cache}: not enough space for {self.name}: needs {size(needed)} more"
            raise PullError("disk_full", f"{message} (and {size(spare)} kept spare), {size(free)} free")
        start = {"repo": self.repo_id, "revision": self.revision, "sha": self.sha, "files": len(self.files)}
        emit("start", **start, bytes=total, missing=needed)
        self.download(total)
        self.record()
        done = {"repo": self.repo_id, "revision": self.revision, "sha": self.sha, "files": len(self.files)}
        done |= {"bytes": total, "fetched": total - before, "seconds": round(time.monotonic() - started, 2)}
        emit("done", **done)
        return done

    def blob(self, path: str) -> Path:
        sibling = self.files[path]
        return self.folder / "blobs" / (sibling.lfs.sha256 if sibling.lfs else str(sibling.blob_id))

    def bytes_present(self) -> int:
        """Bytes of this revision already on disk: finished blobs and the .incomplete parts of others."""
        present = 0
        for path, sibling in self.files.items():
            blob = self.blob(path)
            for candidate in (blob, Path(f"{blob}.incomplete")):
                if candidate.is_file():
                    present += min(candidate.stat().st_size, sibling.size or 0)
                    break
        return present

    def download(self, total: int) -> None:
        stop = threading.Event()
        ticker = threading.Thread(target=self.report_progress, args=(total, stop), daemon=True)
        ticker.start()
        paths = list(self.files)
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=DEFAULTS["workers"])
        try:
            futures = {pool.submit(self.fetch, p): p for p in paths}
            for n, future in enumerate(concurrent.futures.as_completed(futures), 1):
                try:
                    future.result()
                except Exception as exc:
                    raise self.failure(exc) from exc
                path = futures[future]
                emit("file", path=path, size=self.files[path].size, done=n, of=len(paths))
        finally:
            # On a failure the files still downloading are not waited for (the client retries a dead Hub for
            # ~25 s): main() exits at once; what they wrote stays in .incomplete files for the next pull.
            pool.shutdown(wait=False, cancel_futures=True)
            stop.set()
            ticker.join()

    def fetch(self, path: str) -> None:
        hf_hub_download(self.repo_id, path, revision=self.sha, cache_dir=self.cache)

    def failure(self, exc: BaseException) -> PullError:
        error = hub_error(exc, self.name)
        if error.kind == "disk_full":
            needed = sum(s.size or 0 for s in self.files.values()) - self.bytes_present()
            message = f"{self.cache}: disk full while pulling {self.name}: needs {size(needed)} more"
            return PullError("disk_full", f"{message}, {size(free_bytes(self.cache))} free")
        return error

    def report_progress(self, total: int, stop: threading.Event) -> None:
        last = -1
        while not stop.wait(DEFAULTS["progress_s"]):
            present = self.bytes_present()
            if present != last:
                emit("progress", repo=self.repo_id, bytes_done=present, bytes_total=total)
                last = present

    def record(self) -> None:
        """The ref (a branch or tag name -> sha, as snapshot_download writes it) and radeonlab's manifest."""
        for ref in {self.revision, self.ref} - {self.sha, None}:
            write_atomic(self.folder / "refs" / str(ref), self.sha)
        manifest = {
            "repo": self.repo_id, "sha": self.sha, "revision": self.revision, "pulled_at": now(),
            "files": [{"path": p, "size": s.size or 0} for p, s in self.files.items()],
        }  # fmt: skip
        write_atomic(self.folder / MANIFEST_DIR / f"{self.sha}.json", json.dumps(manifest))


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def listing(cache: Path) -> list[dict[str, Any]]:
    """Every model repo in the cache: revisions (sha, refs, size, files, complete), size, last used."""
    try:
        info = scan_cache_dir(cache)
    except CacheNotFound:
        return []
    out = []
    for repo in sorted(info.repos, key=lambda r: r.repo_id):
        if repo.repo_type != "model":
            continue
        folder = storage(cache, repo.repo_id)
        used = [repo.last_accessed] + [
            datetime.fromisoformat(m["used_at"]).timestamp()
            for r in repo.revisions
            if (m := manifest(folder, r.commit_hash)) and m.get("used_at")
        ]
        revisions = [
            {
                "sha": r.commit_hash,
                "refs": sorted(r.refs),
                "size": r.size_on_disk,
                "files": r.nb_files,
                "complete": completeness(cache, repo.repo_id, r.commit_hash)["complete"],
            }
            for r in sorted(repo.revisions, key=lambda r: r.last_modified)
        ]
        partial = sum(p.stat().st_size for p in (folder / "blobs").glob("*.incomplete"))
        entry = {"repo": repo.repo_id, "size": repo.size_on_disk, "partial_bytes": partial}
        out.append(entry | {"last_used": iso(max(used)), "revisions": revisions})
    for warning in info.warnings:
        out.append({"repo": None, "error": str(warning).splitlines()[0]})
    return out


def remove(cache: Path, repo_id: str, revision: str | None) -> dict[str, Any]:
    """Remove a model (every revision, partial downloads included) or one revision of it."""
    folder = storage(cache, repo_id)
    if not folder.is_dir():
        raise PullError("bad_input", f"{repo_id}: not in the cache ({cache})")
    if revision is None:
        freed = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())
        shutil.rmtree(folder)
        shutil.rmtree(cache / ".locks" / folder.name, ignore_errors=True)
        return {"repo": repo_id, "removed": "all", "freed": freed}
    sha = resolve_sha(folder, revision)
    if sha is None or not (folder / "snapshots" / sha).is_dir():
        raise PullError("bad_input", f"{repo_id}@{revision}: not in the cache ({cache})")
    strategy = scan_cache_dir(cache).delete_revisions(sha)  # the client drops blobs no other revision uses
    strategy.execute()
    (folder / MANIFEST_DIR / f"{sha}.json").unlink(missing_ok=True)
    return {"repo": repo_id, "removed": sha, "freed": strategy.expected_freed_size}


def touch(cache: Path, repo_id: str, revision: str) -> dict[str, Any]:
    """Record that a job used this revision now (`list` shows it as last used)."""
    folder = storage(cache, repo_id)
    sha = resolve_sha(folder, revision)
    record = manifest(folder, sha) if sha else None
    if record is None:
        raise PullError("bad_input", f"{repo_id}@{revision}: not pulled into this cache")
    record["used_at"] = now()
    write_atomic(folder / MANIFEST_DIR / f"{sha}.json", json.dumps(record))
    return {"repo": repo_id, "sha": sha, "used_at": record["used_at"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The workstation's shared Hub model cache")
    parser.add_argument("--cache", type=Path, help="default: the client's own (HF_HUB_CACHE, HF_HOME)")
    sub = parser.add_subparsers(dest="command", required=True)
    pull = sub.add_parser("pull")
    pull.add_argument("model")
    pull.add_argument("--revision")
    pull.add_argument("--all-files", action="store_true", help="also other frameworks' weights and original/")
    pull.add_argument("--ref", help="record the commit under this branch or tag name too (refs/REF)")
    sub.add_parser("list")
    rm = sub.add_parser("rm")
    rm.add_argument("model")
    rm.add_argument("--revision")
    for name in ("complete", "touch"):
        cmd = sub.add_parser(name)
        cmd.add_argument("model")
        cmd.add_argument("revision", nargs="?", default="main")
    args = parser.parse_args(argv)
    cache = (args.cache or Path(constants.HF_HUB_CACHE)).expanduser()
    disable_progress_bars()
    warnings.filterwarnings("ignore", message="Not enough free disk space")  # checked here, as one line
    constants.DOWNLOAD_CHUNK_SIZE = DEFAULTS["chunk_bytes"]
    try:
        if args.command == "pull":
            Pull(cache, args.model, args.revision, args.all_files, args.ref).run()
        elif args.command == "list":
            print(json.dumps(listing(cache)))
        elif args.command == "rm":
            print(json.dumps(remove(cache, args.model, args.revision)))
        elif args.command == "complete":
            result = completeness(cache, args.model, args.revision)
            print(json.dumps(result))
            return EXIT["ok"] if result["complete"] else EXIT["incomplete"]
        else:
            print(json.dumps(touch(cache, args.model, args.revision)))
    except PullError as exc:
        emit("error", kind=exc.kind, message=str(exc))
        sys.stderr.flush()
        os._exit(EXIT[exc.kind])  # not sys.exit: that would wait for the download threads still retrying
    return EXIT["ok"]


if __name__ == "__main__":
    sys.exit(main())
