"""The stack's hash locks without hosts: reading one, a host's lines, the refusals, the lock made from pip's
installation report (AMD's package graph), and the one line a refused file becomes (pip's recorded output)."""

from __future__ import annotations

from pathlib import Path

import pytest

from radeonlab.roles.python_stack import lock as stack_lock
from radeonlab.roles.python_stack import pip_locked, resolve
from radeonlab.roles.python_stack.defaults import DEFAULTS

FIXTURES = Path(__file__).parents[1] / "fixtures" / "pip"
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
    assert stack_lock.lock_key(DEFAULTS, "10.1.0", "3.11.2") == "amd-rocm10.1-py3.11-torch2.14.0-lf0.9.5"
    pt = {**DEFAULTS, "pytorch_source": "pytorch"}
    assert stack_lock.lock_key(pt, "7.2.4", "3.12") == "pytorch-rocm7.2-py3.12-torch2.14.0-lf0.9.5"


def _write_lock(tmp_path: Path, data: dict, pins: list[str]) -> dict:
    key = stack_lock.lock_key(data, "10.1", "3.11")
    (tmp_path / f"{key}.txt").write_text("".join(f"{p} --hash=sha256:{H['a']}\n" for p in pins))
    return {**data, "python_stack_lock_dir": str(tmp_path)}


STACK_PINS = [
    "torch==2.14.0+rocm10.1.0",
    *DEFAULTS["python_stack_requirements"],  # type: ignore[misc]
    "llamafactory==0.9.5",
]


def test_a_current_lock_loads_and_a_changed_pin_is_refused_with_the_fix(tmp_path: Path) -> None:
    data = _write_lock(tmp_path, dict(DEFAULTS), STACK_PINS)
    lock = stack_lock.load_lock(data, "10.1", "3.11", [], "/nowhere")
    assert lock.key == "amd-rocm10.1-py3.11-torch2.14.0-lf0.9.5"
    assert stack_lock.covers(lock, data, [], []) and not stack_lock.covers(lock, data, ["gfx1100"], [])
    moved = [p.replace("peft==0.18.1", "peft==0.18.2") for p in data["python_stack_requirements"]]
    with pytest.raises(ValueError) as refused:
        stack_lock.load_lock({**data, "python_stack_requirements": moved}, "10.1", "3.11", [], "/nowhere")
    assert str(refused.value).startswith("peft==0.18.2 pinned but not in the hash lock")
    assert "python_stack_lock_refresh: true" in str(refused.value)
    with pytest.raises(ValueError, match="tensorboard==2.21.0 pinned but not in the hash lock"):
        stack_lock.load_lock(data, "10.1", "3.11", ["tensorboard"], "/nowhere")  # an extra the lock lacks


def test_no_lock_yet_says_the_first_deploy_makes_it_beside_the_inventory(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"no hash lock for the stack amd-rocm10.0-py3.11.*deploy one host"):
        stack_lock.load_lock(dict(DEFAULTS), "10.0", "3.11", [], str(tmp_path))
    key = stack_lock.lock_key(DEFAULTS, "10.0", "3.11")
    assert stack_lock.lock_path(DEFAULTS, key, str(tmp_path)) == tmp_path / "locks" / f"{key}.txt"
    assert stack_lock.lab_lock_dir({"python_stack_lock_dir": "/lab"}, str(tmp_path)) == Path("/lab")


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


# --- the lock from pip's installation report ---------------------------------------------------------------
def _item(name: str, version: str, requires: list[str], sha: str, requested: bool = False) -> dict:
    """One `install` entry of pip's report (format version 1, as pip 23 writes it)."""
    url = f"http://10.0.0.5:8765/pypi/files/{name}-{version}.whl"
    return {
        "download_info": {"url": f"{url}#sha256={sha}", "archive_info": {"hashes": {"sha256": sha}}},
        "requested": requested,
        "metadata": {"name": name, "version": version, "requires_dist": requires},
    }


# AMD's graph (amdworld/python-packages.yaml): torch -> rocm[libraries]; torch[device-T] -> amd-torch-device-T
# -> rocm-sdk-device-T -> rocm-sdk-libraries. `rocm` is an sdist: pip reports the metadata of its build.
REPORT = {
    "version": "1",
    "environment": {"python_version": "3.11", "sys_platform": "linux", "platform_system": "Linux"},
    "install": [
        _item(
            "torch",
            "2.13.0+rocm10.0.0",
            [
                "rocm[libraries]==10.0.0",
                "sympy",
                'amd-torch-device-gfx1100==2.13.0+rocm10.0.0; extra == "device-gfx1100"',
                'amd-torch-device-gfx1201==2.13.0+rocm10.0.0; extra == "device-gfx1201"',
            ],
            H["a"],
            True,
        ),
        _item(
            "rocm",
            "10.0.0",
            [
                "rocm-sdk-core==10.0.0",
                'rocm-sdk-libraries==10.0.0; extra == "libraries"',
                'rocm-sdk-device-gfx1100==10.0.0; extra == "device-gfx1100"',
            ],
            H["b"],
        ),
        _item("rocm-sdk-core", "10.0.0", [], H["c"]),
        _item("rocm-sdk-libraries", "10.0.0", [], H["d"]),
        _item("amd-torch-device-gfx1100", "2.13.0+rocm10.0.0", ["rocm-sdk-device-gfx1100==10.0.0"], H["e"]),
        _item("amd-torch-device-gfx1201", "2.13.0+rocm10.0.0", ["rocm-sdk-device-gfx1201==10.0.0"], H["e"]),
        _item("rocm-sdk-device-gfx1100", "10.0.0", ["rocm-sdk-libraries==10.0.0"], H["f"]),
        _item("rocm-sdk-device-gfx1201", "10.0.0", ["rocm-sdk-libraries==10.0.0"], H["0"]),
        _item("sympy", "1.14.0", ['colorama; sys_platform == "win32"'], H["1"]),
        _item("peft", "0.18.1", ["torch>=2.0"], H["2"], True),
        _item("tensorboard", "2.21.0", ["protobuf"], H["3"], True),
        _item("protobuf", "7.36.2", [], H["3"]),
    ],
}
NO_DEPS_REPORT = {"version": "1", "install": [_item("llamafactory", "0.9.5", ["gradio"], H["1"], True)]}


def test_the_report_becomes_lines_sorted_by_who_needs_them() -> None:
    roots = resolve.Roots(
        ["torch==2.13.0+rocm10.0.0", "peft==0.18.1", "llamafactory==0.9.5"],
        {t: [f"torch[device-{t}]==2.13.0+rocm10.0.0"] for t in ("gfx1100", "gfx1201")},
        {"tensorboard": ["tensorboard==2.21.0"]},
    )
    pins = resolve.pins_from_reports([REPORT, NO_DEPS_REPORT], roots)
    got = {p.name: (p.target, p.extras) for p in pins}
    assert got == {
        "torch": ("", ()),
        "rocm": ("", ()),  # the sdist selector, every host
        "rocm-sdk-core": ("", ()),
        "rocm-sdk-libraries": ("", ()),
        "sympy": ("", ()),
        "peft": ("", ()),
        "llamafactory": ("", ()),  # its gradio is never asked for (--no-deps)
        "amd-torch-device-gfx1100": ("gfx1100", ()),
        "rocm-sdk-device-gfx1100": ("gfx1100", ()),
        "amd-torch-device-gfx1201": ("gfx1201", ()),
        "rocm-sdk-device-gfx1201": ("gfx1201", ()),
        "tensorboard": ("", ("tensorboard",)),
        "protobuf": ("", ("tensorboard",)),
    }
    torch = next(p for p in pins if p.name == "torch")
    assert (
        torch.sha256 == H["a"] and torch.url == "http://10.0.0.5:8765/pypi/files/torch-2.13.0+rocm10.0.0.whl"
    )
    lock = stack_lock.Lock("k", resolve.header("k", "lab1", ["http://i/simple"], "/l/k.txt"), tuple(pins))
    again = stack_lock.parse_lock(lock.text(), "k")
    assert again == lock and again.indexes == ("http://i/simple",)  # markers and URLs round-trip
    mine = again.for_host(["gfx1201"], [])
    assert "amd-torch-device-gfx1100" not in {p.name for p in mine}
    by_url = again.install_text(mine, by_url=True).splitlines()
    assert f"torch @ {torch.url} --hash=sha256:{H['a']}" in by_url
    assert f"torch==2.13.0+rocm10.0.0 --hash=sha256:{H['a']}" in again.install_text(mine, False).splitlines()


def test_a_requirement_the_report_lacks_or_a_file_without_hash_is_one_line() -> None:
    roots = resolve.Roots(["torch==2.13.0+rocm10.0.0", "accelerate==1.11.0"], {}, {})
    with pytest.raises(ValueError, match="pip's report has no accelerate"):
        resolve.pins_from_reports([REPORT], roots)
    bare = {"install": [{**_item("torch", "2.13.0", [], H["a"]), "download_info": {"url": "x"}}]}
    with pytest.raises(ValueError, match="no sha256 for torch"):
        resolve.pins_from_reports([bare], resolve.Roots(["torch==2.13.0"], {}, {}))


def test_another_target_merges_into_the_lock_without_duplicates() -> None:
    old = stack_lock.parse_lock(LOCK).pins
    new = [
        stack_lock.Pin("peft", "0.18.1", H["b"]),
        stack_lock.Pin("rocm-sdk-device-gfx1151", "10.0.0", H["1"], target="gfx1151"),
        stack_lock.Pin("protobuf", "7.36.2", H["f"], extras=("mlflow",)),
    ]
    merged = {(p.name, p.target, p.extras) for p in resolve.merge(old, new)}
    assert ("rocm-sdk-device-gfx1151", "gfx1151", ()) in merged and ("peft", "", ()) in merged
    assert ("protobuf", "", ("mlflow", "tensorboard", "wandb")) in merged
    assert len(merged) == len(old) + 1


def test_lines_carried_into_a_new_resolution_keep_their_urls_only_from_the_same_indexes() -> None:
    """A lock made from another index address (a mirror moved): its URLs would send pip where the lab no
    longer looks, so the carried lines install by name; from the same indexes they keep their URLs."""
    pin = stack_lock.Pin("peft", "0.18.1", H["b"], url="http://old:8000/pypi/peft-0.18.1-py3-none-any.whl")
    head = (f"{stack_lock.INDEXES}http://old:8000/pypi/simple",)
    old = stack_lock.Lock("k", head, (pin,))
    assert resolve.carried_over(old, ["http://old:8000/pypi/simple"]) == (pin,)
    moved = resolve.carried_over(old, ["http://new:9000/pypi/simple"])
    assert [p.url for p in moved] == [""]
    assert moved[0].install_line(True) == f"peft==0.18.1 --hash=sha256:{H['b']}"


def test_stack_roots_are_the_pins_with_one_device_extra_per_target() -> None:
    roots = resolve.stack_roots(DEFAULTS, "10.1", ["gfx1100"], ["tensorboard"])
    assert roots.common[0] == "torch==2.14.0+rocm10.1.0" and roots.common[-1] == "llamafactory==0.9.5"
    assert "peft==0.18.1" in roots.common and not any("[" in r for r in roots.common)
    assert roots.targets["gfx1100"][0] == "torch[device-gfx1100]==2.14.0+rocm10.1.0"
    assert roots.extras == {"tensorboard": ["tensorboard==2.21.0"]}
    assert "llamafactory==0.9.5" not in roots.all()  # installed --no-deps, in its own step


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
    # a line by URL (a lock made by the deploy), as pip 23.2 words it
    by_url = (
        "ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE. If you ...\n"
        "    idna@ http://127.0.0.1:8799/idna-3.20-py3-none-any.whl from "
        "http://127.0.0.1:8799/idna-3.20-py3-none-any.whl (from -r r.txt (line 1)):\n"
        f"        Expected sha256 {H['a']}\n"
        f"             Got        {H['b']}\n"
    )
    assert pip_locked.mismatch_lines(by_url) == [
        "radeonlab: hash mismatch: idna-3.20-py3-none-any.whl from 127.0.0.1:8799: "
        f"expected sha256 {H['a']}, received {H['b']}; nothing from this install was installed"
    ]


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
