"""Where a spec's base model comes from, answered on the laptop before anything is uploaded: a local folder,
or a Hugging Face Hub id resolved through the Hub's own client (huggingface_hub, the version the deploy pins)
with the endpoint and token the job will use.

    answer = resolve_model(spec.train["model_name_or_path"], revision=spec.train.get("model_revision"),
                           base_dir=spec.base_dir, endpoint=hf_endpoint, token=laptop_token())
    if not answer.ok: refuse with answer.message (one line), nothing uploaded
    answer.sha, answer.files, answer.total_size, answer.config (config.json, for the VRAM estimate)

Answers (`Answer`): a local folder; a Hub model (commit sha, files with sizes, config.json); or a refusal:
a path that does not exist, a malformed id, an unknown repo, an unknown revision, a Hub id that is a dataset,
a gated repo without a token (401) or with a token that has no access (403), a token that is empty or that
the Hub rejects, and - distinct, not a refusal of the spec - a Hub that cannot be reached (the caller may
still run the job offline from a workstation's cache).

The token comes from the laptop: HF_TOKEN, else the Hub client's own token file (`huggingface-cli login`
writes it) - `laptop_token()`. It is only ever sent to the Hub endpoint; this module never prints it.
config.json is kept on the laptop (a few KB) under the radeonlab data folder, in the client's cache layout
(keyed by repo and commit sha), so asking again about the same commit costs no download.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import requests
from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    HFValidationError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status, validate_repo_id

from radeonlab.jobs.fleet.store import db_path
from radeonlab.jobs.spec.paths import hub_cache_fix, local_path

# The client's default endpoint (huggingface_hub/constants.py) when neither the caller nor HF_ENDPOINT says.
DEFAULT_ENDPOINT = "https://huggingface.co"
HUB_TIMEOUT_S = 10.0  # per request to the Hub
CACHE_FOLDER = "hub"  # under the radeonlab data folder ($RADEONLAB_HOME, ~/.local/share/radeonlab)
CONFIG_FILE = "config.json"
# model_name_or_path values that can only be paths (LLaMA-Factory treats a value as local when it is a folder)
PATH_LIKE = re.compile(r"^(/|~|\.{1,2}(/|$))|/.*/|/$")


class Answer(StrEnum):
    LOCAL = "local"  # a folder on the laptop (uploaded with the job)
    HUB = "hub"  # a Hub model, resolved to a commit
    NO_SUCH_PATH = "no_such_path"
    MALFORMED = "malformed"
    UNKNOWN_REPO = "unknown_repo"
    UNKNOWN_REVISION = "unknown_revision"
    DATASET = "dataset"
    GATED_NO_TOKEN = "gated_no_token"
    GATED_NO_ACCESS = "gated_no_access"
    BAD_TOKEN = "bad_token"
    UNREACHABLE = "unreachable"  # not the spec's fault: the caller decides (e.g. the host cache has it)


@dataclass(frozen=True)
class RepoFile:
    path: str
    size: int
    etag: str = ""  # the Hub's ETag: an LFS file's sha256, else its git blob sha1 (the cached blob's name)
    lfs: bool = False


@dataclass(frozen=True)
class ModelAnswer:
    """What `model_name_or_path` (+ `model_revision`) names; `message` is one line for the user."""

    answer: Answer
    value: str
    message: str
    revision: str | None = None
    repo_id: str | None = None
    sha: str | None = None  # the commit the revision resolved to (job.json, `status`, beside the adapter)
    files: tuple[RepoFile, ...] = ()
    gated: bool = False
    config: Mapping[str, Any] | None = None  # config.json, None when the model has none
    local_dir: Path | None = None
    endpoint: str | None = None

    @property
    def ok(self) -> bool:
        return self.answer in (Answer.LOCAL, Answer.HUB)

    @property
    def total_size(self) -> int:
        return sum(f.size for f in self.files)


@dataclass(frozen=True)
class Token:
    """The laptop's Hub token: its value (never printed), where it came from, or what is wrong with it."""

    value: str | None = None
    source: str = "none"
    problem: str | None = None  # set: a bad input (an empty HF_TOKEN, an empty token file)


def token_path(environ: Mapping[str, str]) -> Path:
    """Where the Hub client keeps its login token: HF_TOKEN_PATH, else $HF_HOME/token, HF_HOME defaulting
    to $XDG_CACHE_HOME/huggingface or ~/.cache/huggingface (huggingface_hub/constants.py)."""
    if environ.get("HF_TOKEN_PATH"):
        return Path(environ["HF_TOKEN_PATH"]).expanduser()
    cache = environ.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(environ.get("HF_HOME") or os.path.join(cache, "huggingface")).expanduser() / "token"


def laptop_token(environ: Mapping[str, str] | None = None) -> Token:
    """HF_TOKEN when set, else the client's token file, else no token. Set but empty is a bad input."""
    env = os.environ if environ is None else environ
    if "HF_TOKEN" in env:
        value = env["HF_TOKEN"].strip()
        if not value:
            return Token(source="HF_TOKEN", problem="HF_TOKEN is set but empty: unset it or set a token")
        return Token(value, "HF_TOKEN")
    path = token_path(env)
    if path.is_file():
        value = path.read_text().strip()
        if not value:
            return Token(
                source=str(path), problem=f"{path} (the Hub login token file) is empty: log in again"
            )
        return Token(value, str(path))
    return Token()


def default_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The laptop's config.json cache: <radeonlab data folder>/hub."""
    return db_path(environ).parent / CACHE_FOLDER


def resolve_model(
    value: Any,
    *,
    revision: str | None = None,
    base_dir: Path = Path("."),
    endpoint: str | None = None,
    token: Token | None = None,
    cache_dir: Path | None = None,
    timeout: float = HUB_TIMEOUT_S,
    environ: Mapping[str, str] | None = None,
) -> ModelAnswer:
    """Answer what `value` (a spec's model_name_or_path) names, asking the Hub only when it is a Hub id."""
    env = os.environ if environ is None else environ
    if not isinstance(value, str) or not value.strip():
        return ModelAnswer(
            Answer.MALFORMED, str(value), f"model_name_or_path {value!r}: not a model id or folder"
        )
    folder = local_path(base_dir, value)
    if folder.is_dir():
        return _local(value, folder, revision)
    if PATH_LIKE.search(value):
        cached = hub_cache_fix(value)  # a Hub cache folder copied from another machine: its Hub id
        fix = f" (fix: {cached})" if cached else ""
        return ModelAnswer(Answer.NO_SUCH_PATH, value, f"{value}: no such local folder ({folder}){fix}")
    try:
        validate_repo_id(value)
    except HFValidationError as exc:
        reason = str(exc).splitlines()[0].rstrip(".")
        message = f"{value}: not a Hub model id ({reason}) and no such local folder ({folder})"
        return ModelAnswer(Answer.MALFORMED, value, message)
    token = laptop_token(env) if token is None else token
    endpoint = (endpoint or env.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
    name = f"{value}@{revision}" if revision else value
    base = {"value": value, "revision": revision, "repo_id": value, "endpoint": endpoint}
    if token.problem:
        return ModelAnswer(Answer.BAD_TOKEN, message=f"{name}: {token.problem}", **base)  # type: ignore[arg-type]
    hub = _Hub(value, revision, endpoint, token.value, timeout, folder)
    try:
        return hub.resolve(cache_dir or default_cache_dir(env), base)
    except _Refusal as refusal:
        return ModelAnswer(refusal.answer, message=refusal.message, **base)  # type: ignore[arg-type]


def _local(value: str, folder: Path, revision: str | None) -> ModelAnswer:
    config_file = folder / CONFIG_FILE
    config = json.loads(config_file.read_text()) if config_file.is_file() else None
    files = tuple(
        RepoFile(p.relative_to(folder).as_posix(), p.stat().st_size)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    )
    note = "" if config is not None else f" (no {CONFIG_FILE})"
    return ModelAnswer(
        Answer.LOCAL,
        value,
        f"{value}: local folder {folder}{note}",
        revision,
        files=files,
        config=config,
        local_dir=folder,
    )


class _Refusal(Exception):
    def __init__(self, answer: Answer, message: str) -> None:
        super().__init__(message)
        self.answer, self.message = answer, message


@dataclass
class _Hub:
    """One resolution: the questions asked of the Hub, each failure turned into a refusal."""

    repo_id: str
    revision: str | None
    endpoint: str
    token: str | None
    timeout: float
    folder: Path

    @property
    def name(self) -> str:
        return f"{self.repo_id}@{self.revision}" if self.revision else self.repo_id

    def resolve(self, cache_dir: Path, base: dict[str, Any]) -> ModelAnswer:
        api = HfApi(endpoint=self.endpoint, token=self.token or False)  # False: never the client's own lookup
        try:
            info = api.model_info(
                self.repo_id, revision=self.revision, files_metadata=True, timeout=self.timeout
            )
        except RevisionNotFoundError:
            message = f"{self.repo_id}: no revision {self.revision!r} on the Hub (404)"
            raise _Refusal(Answer.UNKNOWN_REVISION, message) from None
        except GatedRepoError as exc:  # a subclass of RepositoryNotFoundError: first
            raise self._gated(exc) from exc
        except RepositoryNotFoundError:
            raise self._not_a_model(api) from None
        except Exception as exc:
            raise self._other(exc) from exc
        if not info.sha:  # every answer of the Hub's model API names its commit
            raise self._other(ValueError(f"the Hub named no commit for {self.repo_id}"))
        files = tuple(
            RepoFile(s.rfilename, s.size or 0, s.lfs.sha256 if s.lfs else str(s.blob_id or ""), bool(s.lfs))
            for s in info.siblings or ()
        )
        gated = bool(info.gated)
        if gated:
            self._auth_check()  # before any cached file is trusted: access may have been withdrawn
        config = self._config(info.sha, cache_dir) if any(f.path == CONFIG_FILE for f in files) else None
        size_gb = sum(f.size for f in files) / 1e9
        note = "" if config is not None else f"; no {CONFIG_FILE} (no VRAM estimate)"
        message = f"{self.name}: Hub commit {info.sha[:12]}, {len(files)} files, {size_gb:.2f} GB{note}"
        return ModelAnswer(
            Answer.HUB, message=message, sha=info.sha, files=files, gated=gated, config=config, **base
        )

    def _auth_check(self) -> None:
        url = f"{self.endpoint}/api/models/{self.repo_id}/auth-check"
        headers = build_hf_headers(token=self.token or False)
        try:  # HfApi.auth_check sets no timeout: the same request, with one
            hf_raise_for_status(get_session().get(url, headers=headers, timeout=self.timeout))
        except GatedRepoError as exc:
            raise self._gated(exc) from exc
        except Exception as exc:
            raise self._other(exc) from exc

    def _config(self, sha: str, cache_dir: Path) -> Mapping[str, Any]:
        try:
            path = hf_hub_download(
                self.repo_id,
                CONFIG_FILE,
                revision=sha,  # a commit sha: a cached copy is used without asking the Hub again
                cache_dir=cache_dir,
                endpoint=self.endpoint,
                token=self.token or False,
                etag_timeout=self.timeout,
            )
        except GatedRepoError as exc:
            raise self._gated(exc) from exc
        except Exception as exc:
            raise self._other(exc) from exc
        return json.loads(Path(path).read_text())

    def _gated(self, exc: GatedRepoError) -> _Refusal:
        status = exc.response.status_code if exc.response is not None else 0
        if status == 403:
            message = f"{self.repo_id}: gated: this token has no access; request it on the model's page (403)"
            return _Refusal(Answer.GATED_NO_ACCESS, message)
        if self.token:
            return _Refusal(
                Answer.BAD_TOKEN, f"{self.repo_id}: gated: the Hub did not accept the token ({status})"
            )
        return _Refusal(Answer.GATED_NO_TOKEN, f"{self.repo_id}: gated: no token: set HF_TOKEN or log in")

    def _not_a_model(self, api: HfApi) -> _Refusal:
        try:
            api.dataset_info(self.repo_id, timeout=self.timeout)
        except GatedRepoError:
            pass  # a gated dataset is still a dataset
        except RepositoryNotFoundError:
            message = (
                f"{self.repo_id}: no such model on the Hub ({self.endpoint}, 404) and no such local folder"
            )
            return _Refusal(Answer.UNKNOWN_REPO, f"{message} ({self.folder})")
        except Exception as exc:
            return self._other(exc)
        message = f"{self.repo_id}: a dataset on the Hub, not a model (datasets go in `dataset`)"
        return _Refusal(Answer.DATASET, message)

    def _other(self, exc: Exception) -> _Refusal:
        """Connection problems, offline mode, server errors: the Hub cannot answer; a rejected token."""
        if isinstance(exc, HfHubHTTPError) and exc.response is not None and exc.response.status_code == 401:
            message = (
                f"{self.name}: the Hub rejected the token (401 invalid credentials): check HF_TOKEN or log in"
            )
            return _Refusal(Answer.BAD_TOKEN, message)
        if isinstance(exc, OfflineModeIsEnabled):
            reason = "HF_HUB_OFFLINE is set on the laptop"
        elif isinstance(exc, HfHubHTTPError) and exc.response is not None:
            reason = f"HTTP {exc.response.status_code}"
        elif isinstance(exc, requests.exceptions.Timeout):
            reason = f"no answer within {self.timeout:g} s"
        elif isinstance(exc, requests.exceptions.ConnectionError | LocalEntryNotFoundError):
            reason = "cannot connect"
        else:
            raise exc  # not a Hub answer: a bug to see, not a one-liner to hide
        return _Refusal(
            Answer.UNREACHABLE, f"{self.name}: the Hub ({self.endpoint}) is unreachable: {reason}"
        )
