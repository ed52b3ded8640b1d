"""The stack's hash locks without hosts: reading one, a host's lines, the refusals, the lock builder over
test-made wheels, and the one line a refused file becomes (from pip's recorded output)."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from radeonlab.roles.python_stack import lock as stack_lock
from radeonlab.roles.python_stack import pip_locked
from radeonlab.roles.python_stack.defaults import DEFAULTS
from radeonlab.roles.python_stack.lockgen import lock_from_wheels, stack_roots

FIXTURES = Path(__file__).parent / "fixtures" / "pip"
H = {c: c * 64 for c in "abcdef0123"}

LOCK = f"""# radeonlab lock: test
# generated: 2026-12-03 from somewhere
torch==2.13.0+rocm10.0.0 --hash=sha256:{H["a"]}
peft==0.18.1 --hash=sha256:{H["b"]}
rocm-sdk-device-gfx1100==10.0.0 --hash=sha256:{H["c"]}  # target: gfx1100
rocm-sdk-device-gfx1201==10.0.0 --hash=sha256:{H["d"]}  # target: gfx1201
tensorboard==2.21.0 --hash=sha256:{H["e"]}  # extras: tensorboard
protobuf==7.36.2 --hash=sha256:{H["f"]}  # extras: tensorboard,wandb
"""


def test_a_lock_reads_back_and_gives_each_host_its_lines() -> None:
    lock = stack_lock.parse_lock(LOCK, "test")
    assert len(lock.pins) == 6 and lock.header[0] == "# radeonlab lock: test"
    plain = [p.name for p in lock.for_host(["gfx1100"], [])]
    assert plain == ["torch", "peft", "rocm-sdk-device-gfx1100"]
    with_wandb = [p.name for p in lock.for_host(["gfx1201"], ["WandB"])]
    assert with_wandb == ["torch", "peft", "rocm-sdk-device-gfx1201", "protobuf"]
    assert [p.name for p in lock.for_host([], ["tensorboard"])][-2:] == ["tensorboard", "protobuf"]
    assert stack_lock.parse_lock(lock.text(), "test") == lock  # text() round-trips, markers included


def test_a_line_without_a_hash_is_refused() -> None:
    with pytest.raises(ValueError, match="line 2: not `name==version --hash=sha256"):
        stack_lock.parse_lock(f"a==1 --hash=sha256:{H['a']}\npeft==0.18.1\n", "x")


def test_the_lock_key_names_every_axis_of_the_stack() -> None:
    assert stack_lock.lock_key(DEFAULTS, "10.0.0", "3.11.2") == "amd-rocm10.0-py3.11-torch2.13.0-lf0.9.5"
    pt = {**DEFAULTS, "pytorch_source": "pytorch"}
    assert stack_lock.lock_key(pt, "7.2.4", "3.12") == "pytorch-rocm7.2-py3.12-torch2.13.0-lf0.9.5"
    assert stack_lock.lockgen_command(pt, "7.2.4", "3.12.3") == (
        "python -m radeonlab.roles.python_stack.lockgen --source pytorch --rocm 7.2.4 --python 3.12"
    )


def _write_lock(tmp_path: Path, data: dict, pins: list[str]) -> dict:
    key = stack_lock.lock_key(data, "10.0", "3.11")
    (tmp_path / f"{key}.txt").write_text("".join(f"{p} --hash=sha256:{H['a']}\n" for p in pins))
    return {**data, "python_stack_lock_dir": str(tmp_path)}


STACK_PINS = [
    "torch==2.13.0+rocm10.0.0",
    *DEFAULTS["python_stack_requirements"],  # type: ignore[misc]
    "llamafactory==0.9.5",
]


def test_a_current_lock_loads_and_a_changed_pin_is_refused_with_the_command(tmp_path: Path) -> None:
    data = _write_lock(tmp_path, dict(DEFAULTS), STACK_PINS)
    assert stack_lock.load_lock(data, "10.0", "3.11", []).key == "amd-rocm10.0-py3.11-torch2.13.0-lf0.9.5"
    moved = [p.replace("peft==0.18.1", "peft==0.18.2") for p in data["python_stack_requirements"]]
    with pytest.raises(ValueError) as refused:
        stack_lock.load_lock({**data, "python_stack_requirements": moved}, "10.0", "3.11", [])
    assert str(refused.value).startswith("peft==0.18.2 pinned but not in the hash lock")
    assert (
        "run `python -m radeonlab.roles.python_stack.lockgen --source amd --rocm 10.0 --python 3.11`"
        in str(refused.value)
    )
    with pytest.raises(ValueError, match="tensorboard==2.21.0 pinned but not in the hash lock"):
        stack_lock.load_lock(data, "10.0", "3.11", ["tensorboard"])  # an extra the lock lacks


def test_no_lock_for_the_stack_is_refused_with_the_command(tmp_path: Path) -> None:
    data = {**DEFAULTS, "python_stack_lock_dir": str(tmp_path)}
    with pytest.raises(ValueError, match=r"no hash lock for the stack amd-rocm10.0-py3.11.*run `python -m"):
        stack_lock.load_lock(data, "10.0", "3.11", [])


def test_install_runs_only_when_the_venv_differs_from_the_lock() -> None:
    pins = stack_lock.parse_lock(LOCK).for_host(["gfx1100"], [])
    installed = {"torch": "2.13.0+rocm10.0.0", "peft": "0.18.1", "rocm-sdk-device-gfx1100": "10.0.0"}
    assert stack_lock.install_reasons(pins, installed) == []
    assert stack_lock.install_reasons(pins, {**installed, "peft": "0.18.0", "torch": None}) == [
        "torch missing",
        "peft 0.18.0 != 0.18.1",
    ]
    # PyPI's CPU build of the same release is not the locked ROCm build: it is replaced (issue 18)
    assert stack_lock.install_reasons(pins, {**installed, "torch": "2.13.0+cpu"}) == [
        "torch 2.13.0+cpu != 2.13.0+rocm10.0.0"
    ]


# --- the lock builder over test-made wheels ---------------------------------------------------------------
def _wheel(folder: Path, name: str, version: str, requires: list[str]) -> Path:
    path = folder / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name.replace('-', '_')}-{version}.dist-info/METADATA", meta)
    return path


def test_the_builder_sorts_lines_by_who_needs_them(tmp_path: Path) -> None:
    made = [
        _wheel(
            tmp_path,
            "torch",
            "2.13.0+rocm10.0.0",
            ['rocm-sdk-device-gfx1100==10.0; extra == "device-gfx1100"', "sympy"],
        ),
        _wheel(tmp_path, "torch", "2.13.0+cpu", []),  # another build of the same version: not locked
        _wheel(tmp_path, "sympy", "1.14.0", ['colorama; sys_platform == "win32"']),
        _wheel(tmp_path, "rocm-sdk-device-gfx1100", "10.0", []),
        _wheel(tmp_path, "peft", "0.18.1", ["torch>=2.0"]),
        _wheel(tmp_path, "llamafactory", "0.9.5", ["gradio"]),  # installed --no-deps: gradio never asked for
        _wheel(tmp_path, "tensorboard", "2.21.0", ["protobuf"]),
        _wheel(tmp_path, "protobuf", "7.36.2", []),
        _wheel(tmp_path, "stray", "1.0", []),
    ]
    roots = ["torch==2.13.0+rocm10.0.0", "peft==0.18.1", "llamafactory==0.9.5"]
    lock = lock_from_wheels(made, roots, {"tensorboard": "tensorboard==2.21.0"}, "3.11", "k", ["# h"])
    got = {(p.name, p.version): (p.target, p.extras) for p in lock.pins}
    assert got == {
        ("llamafactory", "0.9.5"): ("", ()),
        ("peft", "0.18.1"): ("", ()),
        ("sympy", "1.14.0"): ("", ()),
        ("torch", "2.13.0+rocm10.0.0"): ("", ()),
        ("protobuf", "7.36.2"): ("", ("tensorboard",)),
        ("tensorboard", "2.21.0"): ("", ("tensorboard",)),
        ("rocm-sdk-device-gfx1100", "10.0"): ("gfx1100", ()),
    }
    torch = next(p for p in lock.pins if p.name == "torch")
    assert torch.sha256 == hashlib.sha256(made[0].read_bytes()).hexdigest()


def test_stack_roots_are_the_pins_without_device_extras() -> None:
    roots = stack_roots(DEFAULTS, "10.0")
    assert roots[0] == "torch==2.13.0+rocm10.0.0" and roots[-1] == "llamafactory==0.9.5"
    assert "peft==0.18.1" in roots and not any("[" in r for r in roots)


# --- the one line a refused file becomes --------------------------------------------------------------------
def test_pips_hash_mismatch_becomes_one_line_with_file_hashes_and_host() -> None:
    lines = pip_locked.mismatch_lines((FIXTURES / "hash-mismatch.stderr").read_text())
    assert lines == [
        "radeonlab: hash mismatch: idna-3.20-py3-none-any.whl from 127.0.0.1:8799: expected sha256 "
        "0b7ae7122974553370f0bdb919e1a960b2cd1bc1ef0276416d896db81c14582c, received "
        "ab7ae7122974553370f0bdb919e1a960b2cd1bc1ef0276416d896db81c14582c; nothing from this install "
        "was installed"
    ]
    assert pip_locked.mismatch_lines("ERROR: No matching distribution found for peft==9") == []


def test_a_cache_refusal_becomes_one_line_with_the_locks_hash_and_the_caches() -> None:
    output = (
        "ERROR: HTTP error 409 while getting http://10.0.0.5:8765/files/peft-0.18.1-py3-none-any.whl\n"
        "ERROR: Could not install requirement peft==0.18.1 from http://10.0.0.5:8765/files/peft-0.18.1-"
        "py3-none-any.whl because of HTTP error 409 Client Error: Conflict for url: ...\n"
    )
    body = f"radeonlab wheel cache: peft-0.18.1-py3-none-any.whl: expected sha256 {H['b']}, received {H['0']}"
    lines = pip_locked.refusal_lines(output, LOCK, fetch=lambda url: body)
    assert lines == [
        "radeonlab: hash mismatch: peft-0.18.1-py3-none-any.whl from 10.0.0.5:8765: expected sha256 "
        f"{H['b']}, received {H['0']} (the wheel cache refused to serve it); nothing from this install "
        "was installed"
    ]
