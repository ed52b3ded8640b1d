"""What the laptop knows of a job before it asks any host: the checked spec, the model, what the job asks of a
card, the files it uploads (hashed) and its environment; and what the probe of each host must therefore be
asked (`probe_ask`) and which hosts (`candidates`).

Observe, plan, apply: these inputs and one probe per candidate host (jobs/fleet/observe.py) are all that
`plan_job` (jobs/plan/plan.py) reads. The model is resolved here (a local folder, or the Hub's config.json
over HTTP); nothing here reaches a workstation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from radeonlab.contract.parts import CodeDigest
from radeonlab.errors import ChecksFailedError, shown
from radeonlab.jobs.apply import secrets
from radeonlab.jobs.fleet.inventory import HostTarget, get_host
from radeonlab.jobs.fleet.view import ProbeAsk, model_key
from radeonlab.jobs.plan import model as model_module
from radeonlab.jobs.plan import nodes as nodes_module
from radeonlab.jobs.plan.placement import Asks, asks_of, in_group
from radeonlab.jobs.plan.uploads import Upload, local_dataset_info, uploads_of
from radeonlab.jobs.spec import hub, kinds
from radeonlab.jobs.spec import paths as spec_paths
from radeonlab.jobs.spec.checks import check_spec
from radeonlab.jobs.spec.load import Spec, load, with_overrides
from radeonlab.jobs.spec.problems import ERROR, Problem, name_overrides


def load_checked(spec_path: str | Path, overrides: Sequence[str] = ()) -> tuple[Spec, list[Problem]]:
    """The spec (with `key=value` overrides) and its findings; ChecksFailedError when any is an error
    (an export config is one: it is `radeonlab export`'s)."""
    spec = with_overrides(load(spec_path), list(overrides))
    problems = check_spec(spec) + name_overrides(kinds.export_problems(spec, submitting=True), spec.overrides)
    errors = [p for p in problems if p.severity == ERROR]
    if errors:
        raise ChecksFailedError(
            f"{shown(spec_path)}: {len(errors)} error(s) (see `radeonlab check {shown(spec_path)}`); "
            "nothing uploaded",
            problems,
        )
    return spec, problems


@dataclass
class JobInputs:
    """One job as the laptop sees it before asking a host (see the module docstring)."""

    spec: Spec
    problems: list[Problem]  # warnings and notes of the checks (errors refused the spec)
    model: model_module.ModelInfo
    asks: Asks
    dataset_info: dict[str, Any]
    uploads: list[Upload]
    env: dict[str, str]  # the plain environment job.json records
    code: CodeDigest  # radeonlab's host code as it will be shipped (job.json `code`)
    secrets: secrets.Secrets = field(default_factory=secrets.Secrets, repr=False)
    timings: dict[str, float] = field(default_factory=dict)  # seconds per observing phase (submit --verbose)

    def count(self, nodes: int | None) -> int:
        return nodes or self.spec.radeonlab.nodes

    def wanted(self, host: str | None) -> str | None:
        """The host(s) named with --host or the spec's radeonlab.host (None: placement chooses)."""
        return host or self.spec.radeonlab.host


def prepare(
    spec_path: str | Path,
    targets: Mapping[str, HostTarget],
    environ: Mapping[str, str],
    code: CodeDigest,
    overrides: Sequence[str] = (),
    spec: tuple[Spec, list[Problem]] | None = None,
) -> JobInputs:
    """Check the spec, resolve the model, hash the uploads, split the environment into plain and secret.
    `spec`: already loaded and checked (the caller checks it before it loads the inventory); `code`: the
    host code's digests (jobs/ssh/hostcode.py, which the caller reads)."""
    spec_obj, problems = spec or load_checked(spec_path, overrides)
    model = model_module.resolve(spec_obj, model_module.endpoint_of(targets, environ), environ)
    info = local_dataset_info(spec_obj) or {}
    plain, secret = secrets.job_env(spec_obj.radeonlab.env, spec_obj.radeonlab.forward_env, environ)
    token = hub.laptop_token(environ)
    if model.hub and token.value and "HF_TOKEN" not in secret:  # the client's login file: same channel
        secret["HF_TOKEN"] = token.value
    if model.endpoint:
        plain.setdefault("HF_ENDPOINT", model.endpoint)
    return JobInputs(
        spec_obj,
        problems,
        model,
        asks_of(spec_obj, model.config, model.note),
        info,
        uploads_of(spec_obj, model, info),
        plain,
        code,
        secrets.Secrets(secret),
    )


def model_revision(model: model_module.ModelInfo) -> str | None:
    """The probe's name for the Hub model's revision in a host's cache (None: not a Hub model)."""
    return model_key(model.name, model.sha or model.revision or "main") if model.hub else None


def probe_ask(job: JobInputs, ask_blobs: bool) -> ProbeAsk:
    """What the probe must learn of each candidate host for this job."""
    revision = model_revision(job.model)
    return ProbeAsk(
        tuple(spec_paths.host_values(job.spec)),
        tuple(dict.fromkeys(u.local.sha256 for u in job.uploads)) if ask_blobs else None,
        (revision,) if revision else (),
    )


def candidates(
    job: JobInputs, targets: Mapping[str, HostTarget], host: str | None, nodes: int | None
) -> tuple[list[HostTarget], bool]:
    """The hosts to probe, and whether they were named: the named host(s) (an unknown name refused here),
    else every host in the placement's host group."""
    wanted, count = job.wanted(host), job.count(nodes)
    if wanted:
        named = nodes_module.pick_named(targets, wanted, count) if count > 1 else [get_host(targets, wanted)]
        return named, True
    return [t for t in targets.values() if in_group(t, job.asks.host_group)], False
