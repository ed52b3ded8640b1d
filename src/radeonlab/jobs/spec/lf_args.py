"""The keys and values LLaMA-Factory's `train` accepts, for the version the deploy pins.

The list is generated data (jobs/spec/lf_args.json, committed) so that `radeonlab check` needs no training
stack on
the laptop. It is generated from the real package, installed in a separate generator venv with the versions in
roles/python_stack/defaults.py:

    # once: python3.11 venv, CPU torch, pinned stack (1.5 GB, ~85 s)
    python -m radeonlab.jobs.spec.lf_args --make-venv
    python -m radeonlab.jobs.spec.lf_args --regenerate     # rewrite jobs/spec/lf_args.json from that venv

The generator half of this file (`_dump`) runs INSIDE the generator venv as a plain script, so this module
imports only the standard library at the top.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

DATA_FILE = Path(__file__).with_name("lf_args.json")
# Where the generator venv lives unless RADEONLAB_LFARGS_VENV says otherwise (outside the repo: 1.5 GB).
GENERATOR_VENV_ENV = "RADEONLAB_LFARGS_VENV"
GENERATOR_VENV_DEFAULT = "/var/cache/radeonlab-sandbox/lfargs-venv"
GENERATOR_PYTHON = "python3.11"

# Fields whose values are only checked by argparse (`choices=` in field metadata) or by an Enum; the
# generator records the choices of every field it can, these are the ones the brief names explicitly and
# that the generated file must always contain.
REQUIRED_CHOICES = (
    "flash_attn",
    "ddp_backend",
    "optim",
    "lr_scheduler_type",
    "finetuning_type",
    "stage",
    "template",
)


def generator_venv() -> Path:
    """The generator venv's path (env override first)."""
    return Path(os.environ.get(GENERATOR_VENV_ENV, GENERATOR_VENV_DEFAULT))


def pinned_versions() -> dict[str, str]:
    """The versions the deploy installs, from roles/python_stack/defaults.py (the one place they live)."""
    from radeonlab.roles.python_stack.defaults import DEFAULTS

    pins = {"llamafactory": str(DEFAULTS["llamafactory_version"]), "torch": str(DEFAULTS["pytorch_version"])}
    for req in DEFAULTS["python_stack_requirements"]:
        name, _, version = str(req).partition("==")
        pins[name] = version
    return pins


def make_venv(path: Path | None = None) -> Path:
    """Create the generator venv: python3.11, CPU torch, the pinned stack, llamafactory without its deps.

    torchaudio is not installed: the hparams module does not import it, and the template registry is read
    with a stand-in module (see `_dump`). Cost measured on the dev machine: ~85 s, 1.5 GB.
    """
    from radeonlab.roles.python_stack.defaults import DEFAULTS

    path = path or generator_venv()
    pins = pinned_versions()
    pip = [str(path / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    subprocess.run([GENERATOR_PYTHON, "-m", "venv", str(path)], check=True)
    # torch first and alone, the CPU build from pip's configured find-links only (--no-index: PyPI's Linux
    # torch is a CUDA build of several GB). Its version does not matter: the keys are LLaMA-Factory's and
    # transformers' argument dataclasses, and the product's torch pin (pins["torch"]) is AMD's ROCm build.
    # Its dependencies (filelock, sympy, ...) are not in those folders: torch alone first, then pip is asked
    # for that exact version again, with the index, which keeps it and adds what it requires.
    subprocess.run([*pip, "--no-index", "--no-deps", "--only-binary=:all:", "torch"], check=True)
    show = [str(path / "bin" / "python"), "-c", "import importlib.metadata as m; print(m.version('torch'))"]
    torch_version = subprocess.run(show, check=True, capture_output=True, text=True).stdout.strip()
    subprocess.run([*pip, "--only-binary=:all:", f"torch=={torch_version}"], check=True)
    subprocess.run([*pip, *map(str, DEFAULTS["python_stack_requirements"])], check=True)
    subprocess.run([*pip, "--no-deps", f"llamafactory=={pins['llamafactory']}"], check=True)
    return path


def regenerate(venv: Path | None = None) -> dict[str, Any]:
    """Run the generator inside the venv and return the data (not written)."""
    python = (venv or generator_venv()) / "bin" / "python"
    if not python.exists():
        raise FileNotFoundError(
            f"generator venv missing: {python} (create it: python -m radeonlab.jobs.spec.lf_args --make-venv)"
        )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "MPLCONFIGDIR": "/tmp/lfargs-mpl"}
    # -I: the script's folder (jobs/, which has a datasets.py) must not shadow the `datasets` package.
    proc = subprocess.run([str(python), "-I", __file__, "--dump"], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"generator failed (rc {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout)


def write(data: dict[str, Any], path: Path = DATA_FILE) -> None:
    """Write the data in a stable, diff-friendly form."""
    path.write_text(json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


@cache
def load() -> dict[str, Any]:
    """The committed key list: {"versions", "keys": {name: {group, types, nullable, default, choices?}}}."""
    return json.loads(DATA_FILE.read_text(encoding="utf-8"))


def keys() -> dict[str, dict[str, Any]]:
    return load()["keys"]


def default(key: str) -> Any:
    """LLaMA-Factory's default for `key` in the pinned release (None for an unknown key)."""
    return keys().get(key, {}).get("default")


def choices(key: str) -> list[str] | None:
    return keys().get(key, {}).get("choices")


# ---------------------------------------------------------------- generator (runs inside the generator venv)


def _type_names(tp: Any) -> tuple[list[str], bool, list[Any] | None]:
    """(JSON type names, nullable, choices) of a resolved dataclass field type."""
    import enum
    import types
    import typing

    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        names: list[str] = []
        nullable = False
        found: list[Any] | None = None
        for arg in typing.get_args(tp):
            if arg is type(None):
                nullable = True
                continue
            sub, sub_null, sub_choices = _type_names(arg)
            names += [n for n in sub if n not in names]
            nullable |= sub_null
            found = sub_choices or found
        return names, nullable, found
    if origin is typing.Literal:
        values = list(typing.get_args(tp))
        return (
            sorted({type(v).__name__ for v in values}),
            None in values,
            [v for v in values if v is not None],
        )
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return ["str"], False, [m.value for m in tp]
    base = origin or tp
    simple = {bool: "bool", int: "int", float: "float", str: "str", list: "list", dict: "dict", tuple: "list"}
    return [simple.get(base, "any")], False, None


def _jsonable(value: Any) -> Any:
    import enum

    if isinstance(value, enum.Enum):
        return value.value
    try:
        json.dumps(value)
        return value
    except TypeError:
        return repr(value)


def _dump() -> None:
    """Print the key/choices list of the installed LLaMA-Factory as JSON (generator venv only)."""
    import dataclasses
    import importlib.machinery
    import importlib.metadata as md
    import platform
    import types
    import typing

    # the exact list get_train_args feeds HfArgumentParser
    from llamafactory.hparams.parser import _TRAIN_ARGS

    result: dict[str, Any] = {}
    for cls in _TRAIN_ARGS:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            names, nullable, found = _type_names(hints[f.name])
            if f.metadata.get("choices"):
                found = list(f.metadata["choices"])
            default = f.default if f.default is not dataclasses.MISSING else None
            if f.default_factory is not dataclasses.MISSING:
                default = f.default_factory()
            entry: dict[str, Any] = {
                "group": cls.__name__,
                "types": names,
                "nullable": nullable or default is None,
                "default": _jsonable(default),
            }
            if found:
                entry["choices"] = [_jsonable(c) for c in found]
            result[f.name] = entry

    # llamafactory.data.template imports mm_plugin, which does a top-level `import torchaudio`. The generator
    # only reads the template registry and never touches audio, so a SIMULATED empty torchaudio module
    # stands in for the real one (which does not import beside CPU torch; see docs/notes/llamafactory-cpu.md).
    if "torchaudio" not in sys.modules:
        stand_in = types.ModuleType("torchaudio")
        stand_in.__spec__ = importlib.machinery.ModuleSpec("torchaudio", None)
        sys.modules["torchaudio"] = stand_in
    from llamafactory.data.template import TEMPLATES

    result["template"]["choices"] = sorted(TEMPLATES)
    versions = {name: md.version(name) for name in ("llamafactory", "transformers", "torch", "peft", "trl")}
    versions["python"] = platform.python_version()
    print(json.dumps({"versions": versions, "keys": result}, sort_keys=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m radeonlab.jobs.spec.lf_args", description=__doc__.splitlines()[0]
    )
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--make-venv", action="store_true", help="create the generator venv")
    group.add_argument("--regenerate", action="store_true", help="rewrite jobs/spec/lf_args.json")
    group.add_argument("--dump", action="store_true", help=argparse.SUPPRESS)  # inside the generator venv
    args = parser.parse_args(argv)
    if args.dump:
        _dump()
    elif args.make_venv:
        print(make_venv())
    else:
        data = regenerate()
        missing = [k for k in REQUIRED_CHOICES if not data["keys"].get(k, {}).get("choices")]
        if missing:
            print(f"no choices found for {missing}", file=sys.stderr)
            return 1
        write(data)
        print(f"wrote {DATA_FILE} ({len(data['keys'])} keys, {data['versions']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
