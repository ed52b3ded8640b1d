"""What the SIMULATED Hugging Face Hub (radeonlab/sandbox/hub.py) serves: repos, commits, files, tokens.

A repository is a list of commits (each a full file set, oldest first) and refs (branch and tag names ->
commit sha). Commit shas and file ids are computed the way git and the Hub compute them, from the content,
so the same inputs always give the same shas:
- a regular file's id (`blobId`, its ETag) is the git blob sha1 of its content;
- an LFS file (weights; LFS_PATTERNS) is stored as a git-lfs pointer: its `blobId` is the pointer's git sha1,
  its ETag the sha256 of the content (what the client names the cached blob after).

The sandbox catalog (`sandbox_catalog`) holds the test bed's tiny model as a public and as a gated repo, a
dataset repo, and "config-only" repos of Llama-3-8B/70B whose config.json is the real one (recorded/hub/);
the benchmark alone adds a larger public model (BENCH_PUBLIC, ~233 MB of random weights).
Everything here is SIMULATED: these repositories exist on no real Hub (the meta-llama ids mirror real ones,
which are gated there and hold weights; here they are public and hold only config.json and a README).
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import io
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

RECORDED = Path(__file__).with_name("recorded") / "hub"

# --- data: the sandbox's repositories and tokens ----------------------------------------------------------
TINY_PUBLIC = "radeonlab-sandbox/tiny-llama"
TINY_GATED = "radeonlab-sandbox/tiny-llama-gated"
# Opt-in (sandbox_catalog's `bench_model`): the bench's larger model (tinymodel.BENCH_MODEL_CONFIG), public.
BENCH_PUBLIC = "radeonlab-sandbox/bench-llama"
DEMO_DATASET = "radeonlab-sandbox/demo-data"
LLAMA3_8B = "meta-llama/Meta-Llama-3-8B"
LLAMA3_70B = "meta-llama/Meta-Llama-3-70B"
# The tiny public repo's first commit (config.json and README only) carries this tag, so a pinned
# `model_revision` can name a commit that is not the newest.
FIRST_TAG = "v0.1"
# SIMULATED tokens (shaped like the Hub's: "hf_" + 34 letters). GRANTED may read the gated repo, DENIED is a
# valid token without access to it (the Hub answers 403).
TOKEN_GRANTED = "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"
TOKEN_DENIED = "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"
SANDBOX_TOKENS = {TOKEN_GRANTED: "granted", TOKEN_DENIED: "denied"}
# Files the Hub stores with git-lfs: its default .gitattributes for a new model repo (excerpt).
LFS_PATTERNS = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.ckpt", "*.h5", "*.msgpack", "*.model", "*.onnx")
LFS_SIZE_LIMIT = 10 * 1024 * 1024  # the Hub refuses larger regular files: they go to LFS too
LFS_POINTER = "version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n"
TIMESTAMP = "2026-01-01T00:00:00.000Z"  # createdAt/lastModified of every repo (fixed: reproducible answers)


def git_blob_sha1(data: bytes) -> str:
    """git's object id of a blob: sha1 over "blob <size>\\0" + content."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass(frozen=True)
class HubFile:
    """One file of a commit. Its content is either a file on disk (`source`) or small inline `data`."""

    path: str
    size: int
    blob_id: str  # git object id of what git stores (the LFS pointer for an LFS file)
    sha256: str | None = None  # set for LFS files: the content's sha256, the client's cache key (ETag)
    pointer_size: int = 0
    source: Path | None = None
    data: bytes | None = None

    @property
    def etag(self) -> str:
        return self.sha256 or self.blob_id

    def open(self) -> BinaryIO:
        if self.data is not None:
            return io.BytesIO(self.data)
        assert self.source is not None, self.path  # make_file gives every file data or a source
        return open(self.source, "rb")  # noqa: SIM115 - the caller closes it


def make_file(path: str, *, source: Path | None = None, data: bytes | None = None) -> HubFile:
    """A HubFile with its ids computed from the content (read in chunks: weights may be large)."""
    size = len(data) if data is not None else source.stat().st_size  # type: ignore[union-attr]
    git, sha256 = hashlib.sha1(b"blob %d\0" % size), hashlib.sha256()
    chunks = [data] if data is not None else _chunks(source)  # type: ignore[arg-type]
    for chunk in chunks:
        git.update(chunk)
        sha256.update(chunk)
    name = path.rsplit("/", 1)[-1]
    if not any(fnmatch.fnmatch(name, p) for p in LFS_PATTERNS) and size <= LFS_SIZE_LIMIT:
        return HubFile(path, size, git.hexdigest(), source=source, data=data)
    pointer = LFS_POINTER.format(sha256=sha256.hexdigest(), size=size).encode()
    return HubFile(path, size, git_blob_sha1(pointer), sha256.hexdigest(), len(pointer), source, data)


def _chunks(source: Path) -> Iterable[bytes]:
    with source.open("rb") as f:
        yield from iter(lambda: f.read(1 << 20), b"")


@dataclass(frozen=True)
class Commit:
    sha: str
    files: tuple[HubFile, ...]

    def file(self, path: str) -> HubFile | None:
        return next((f for f in self.files if f.path == path), None)


def commit_sha(repo_id: str, parent: str | None, files: Iterable[HubFile]) -> str:
    """A deterministic 40-hex commit id over the repo, the parent commit and the file ids."""
    tree = sorted((f.path, f.blob_id) for f in files)
    return hashlib.sha1(json.dumps([repo_id, parent, tree]).encode()).hexdigest()


@dataclass
class HubRepo:
    """A repository: commits oldest first, refs (branch/tag -> sha), gating and who was granted access."""

    repo_id: str
    repo_type: str = "model"  # "model" | "dataset"
    commits: list[Commit] = field(default_factory=list)
    refs: dict[str, str] = field(default_factory=dict)
    gated: str | None = None  # None (public), "auto" or "manual", as the Hub's `gated` field
    granted: frozenset[str] = frozenset()  # token names allowed to read a gated repo
    tags: tuple[str, ...] = ()

    def add_commit(self, files: Iterable[HubFile], *, branch: str = "main", tag: str | None = None) -> Commit:
        files = tuple(files)
        parent = self.commits[-1].sha if self.commits else None
        commit = Commit(commit_sha(self.repo_id, parent, files), files)
        self.commits.append(commit)
        self.refs[branch] = commit.sha
        if tag:
            self.refs[tag] = commit.sha
        return commit

    def resolve(self, revision: str) -> Commit | None:
        """A branch, a tag or a full commit sha -> its commit (None: no such revision)."""
        sha = self.refs.get(revision, revision)
        return next((c for c in self.commits if c.sha == sha), None)


@dataclass
class HubCatalog:
    """Everything one Hub serves: repos by (type, id) and tokens (token string -> name)."""

    repos: dict[tuple[str, str], HubRepo] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)

    def add(self, repo: HubRepo) -> HubRepo:
        self.repos[(repo.repo_type, repo.repo_id)] = repo
        return repo

    def get(self, repo_type: str, repo_id: str) -> HubRepo | None:
        return self.repos.get((repo_type, repo_id))

    def add_token(self, token: str, name: str, grants: Iterable[str] = ()) -> None:
        """Register a token; `grants` names gated repos (any type) it may read."""
        self.tokens[token] = name
        for repo in self.repos.values():
            if repo.repo_id in grants:
                repo.granted = repo.granted | {name}

    # The child-process Hub receives its catalog as JSON.
    def to_json(self) -> str:
        def file_dict(f: HubFile) -> dict:
            d = {"path": f.path, "size": f.size, "blob_id": f.blob_id, "sha256": f.sha256}
            d["pointer_size"] = f.pointer_size
            d["source"] = str(f.source) if f.source else None
            d["data"] = base64.b64encode(f.data).decode() if f.data is not None else None
            return d

        repos = [
            {
                "repo_id": r.repo_id,
                "repo_type": r.repo_type,
                "refs": r.refs,
                "gated": r.gated,
                "granted": sorted(r.granted),
                "tags": list(r.tags),
                "commits": [{"sha": c.sha, "files": [file_dict(f) for f in c.files]} for c in r.commits],
            }
            for r in self.repos.values()
        ]
        return json.dumps({"repos": repos, "tokens": self.tokens})

    @classmethod
    def from_json(cls, text: str) -> HubCatalog:
        raw = json.loads(text)
        catalog = cls(tokens=dict(raw["tokens"]))
        for r in raw["repos"]:
            commits = [
                Commit(
                    c["sha"],
                    tuple(
                        HubFile(
                            f["path"],
                            f["size"],
                            f["blob_id"],
                            f["sha256"],
                            f["pointer_size"],
                            Path(f["source"]) if f["source"] else None,
                            base64.b64decode(f["data"]) if f["data"] is not None else None,
                        )
                        for f in c["files"]
                    ),
                )
                for c in r["commits"]
            ]
            catalog.add(
                HubRepo(
                    r["repo_id"],
                    r["repo_type"],
                    commits,
                    dict(r["refs"]),
                    r["gated"],
                    frozenset(r["granted"]),
                    tuple(r["tags"]),
                )
            )
        return catalog


def folder_files(folder: Path, prefix: str = "") -> list[HubFile]:
    """Every file under `folder` (sorted), as repo files."""
    return [
        make_file(prefix + p.relative_to(folder).as_posix(), source=p)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    ]


def readme(repo_id: str, what: str) -> HubFile:
    text = (
        f"# {repo_id}\n\nSIMULATED: a repository of radeonlab's sandbox Hub (radeonlab/sandbox/hub.py), "
        f"not of the real Hugging Face Hub. {what}\n"
    )
    return make_file("README.md", data=text.encode())


def sandbox_catalog(
    tiny_model: Path,
    demo_data: Path,
    tokens: Mapping[str, str] = SANDBOX_TOKENS,
    bench_model: Path | None = None,
) -> HubCatalog:
    """The test bed's Hub: the tiny model (public, with an older tagged commit, and gated), the demo
    dataset, and the config-only Llama-3 repos. `tiny_model`: radeonlab/sandbox/tinymodel.py's output folder;
    `demo_data`: demodata.py's; `bench_model` (only the benchmark passes it): tinymodel.cached_model's
    larger model, served as the public BENCH_PUBLIC."""
    catalog = HubCatalog()
    model_files = folder_files(tiny_model)
    config = next(f for f in model_files if f.path == "config.json")

    public = catalog.add(HubRepo(TINY_PUBLIC, tags=("llama", "text-generation")))
    first = readme(TINY_PUBLIC, "The tiny sandbox Llama (random weights). First commit: config only.")
    public.add_commit([config, first], tag=FIRST_TAG)
    public.add_commit([*model_files, readme(TINY_PUBLIC, "The tiny sandbox Llama (random weights).")])

    gated = catalog.add(HubRepo(TINY_GATED, gated="manual", tags=("llama", "text-generation")))
    gated_card = readme(TINY_GATED, "The tiny sandbox Llama, gated: a token needs a grant.")
    gated.add_commit([*model_files, gated_card])

    dataset = catalog.add(HubRepo(DEMO_DATASET, repo_type="dataset"))
    dataset.add_commit([*folder_files(demo_data), readme(DEMO_DATASET, "The demo dataset (alpaca rows).")])

    for repo_id, folder in ((LLAMA3_8B, "Meta-Llama-3-8B"), (LLAMA3_70B, "Meta-Llama-3-70B")):
        repo = catalog.add(HubRepo(repo_id, tags=("llama", "text-generation", "config-only")))
        what = "Config only: the real config.json (recorded/hub/SOURCES.md), no weights."
        config_file = make_file("config.json", source=RECORDED / folder / "config.json")
        repo.add_commit([config_file, readme(repo_id, what)])

    if bench_model is not None:
        bench = catalog.add(HubRepo(BENCH_PUBLIC, tags=("llama", "text-generation")))
        what = "The bench's larger sandbox Llama (random weights, ~230 MB): its download takes real time."
        bench.add_commit([*folder_files(bench_model), readme(BENCH_PUBLIC, what)])

    for token, name in tokens.items():
        catalog.add_token(token, name, grants=[TINY_GATED] if name == "granted" else [])
    return catalog
