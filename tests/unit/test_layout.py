"""The shape of the product's code: one import name, no import cycles, nothing imports the tests, short
modules, no Python source hidden in strings, pyproject's package list matching the folders, and the seams of
issue 24: the planner reaches no SSH, the contract is the standard library alone and typed past `Any`."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
import typing
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# The path is the import name: src/radeonlab is the package `radeonlab`, nothing is mapped.
ROOTS = {"src/radeonlab": "radeonlab"}
MAX_LINES = 450
LONG_REASON = "Why this module is long:"


def product_modules() -> dict[str, Path]:
    """import name -> file, for every product module (the sandbox's in-host payload aside: it runs there)."""
    out = {}
    for folder, prefix in ROOTS.items():
        for path in sorted((REPO / folder).rglob("*.py")):
            if "standins/payload" in path.as_posix():
                continue
            parts = list(path.relative_to(REPO / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([prefix, *parts])] = path
    return out


def runtime_imports(path: Path) -> set[str]:
    """Every dotted name `path` imports at run time (imports only for type checkers aside; imports inside
    functions count: they run when the function does). `from pkg import name` gives pkg and pkg.name."""
    tree = ast.parse(path.read_text())
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING"
        for inner in ast.walk(node)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
    return found


def imports_of(path: Path, known: set[str], typing: bool = False) -> set[str]:
    """The product modules `path` imports at run time (imports only for type checkers aside, unless
    `typing`: a cycle through a type-only import is still a knot in the code's shape)."""
    tree = ast.parse(path.read_text())
    typing_only = set() if typing else {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING"
        for inner in ast.walk(node)
    }  # fmt: skip
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from pkg import mod` depends on pkg.mod; `from pkg import name` on pkg itself
            subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in known]
            names = subs if len(subs) == len(node.names) else [node.module, *subs]
        found |= {n for n in names if n in known}
    return found


def reached_from(start: str) -> dict[str, str | None]:
    """Every product module importing `start` loads, each with the module that imported it (None for the
    start): importing a.b.c runs a/__init__ and a/b/__init__ too, so parent packages are followed."""
    modules = product_modules()
    known = set(modules)
    via: dict[str, str | None] = {start: None}
    todo = [start]
    while todo:
        name = todo.pop()
        parts = name.split(".")
        nexts = imports_of(modules[name], known) | {".".join(parts[:k]) for k in range(1, len(parts))}
        for nxt in sorted(nexts & known):
            if nxt not in via:
                via[nxt] = name
                todo.append(nxt)
    return via


def chain(via: dict[str, str | None], name: str) -> str:
    links = [name]
    while (parent := via[links[-1]]) is not None:
        links.append(parent)
    return " <- ".join(links)


def external_roots(path: Path) -> set[str]:
    """The top-level names of what `path` imports from outside radeonlab at run time."""
    return {n.split(".")[0] for n in runtime_imports(path)} - {"radeonlab", "__future__"}


def test_no_import_cycle() -> None:
    modules = product_modules()
    graph = {name: imports_of(path, set(modules), typing=True) - {name} for name, path in modules.items()}
    # a package's __init__ is imported with each of its submodules: follow edges to packages too
    state: dict[str, int] = defaultdict(int)  # 0 new, 1 on the stack, 2 done
    stack: list[str] = []

    def visit(name: str) -> None:
        state[name] = 1
        stack.append(name)
        for nxt in sorted(graph.get(name, ())):
            if state[nxt] == 1:
                cycle = stack[stack.index(nxt) :] + [nxt]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if state[nxt] == 0:
                visit(nxt)
        stack.pop()
        state[name] = 2

    for name in sorted(graph):
        if state[name] == 0:
            visit(name)


def test_no_product_module_imports_the_tests() -> None:
    for name, path in product_modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                assert not any(a.name.split(".")[0] == "tests" for a in node.names), (name, path)
            if isinstance(node, ast.ImportFrom) and node.module:
                assert node.module.split(".")[0] != "tests", (name, path)


def test_modules_are_short_or_say_why() -> None:
    long = []
    for path in product_modules().values():
        text = path.read_text()
        if text.count("\n") > MAX_LINES and LONG_REASON not in text[:3000]:
            long.append(f"{path.relative_to(REPO)} ({text.count(chr(10))} lines)")
    assert not long, f"over {MAX_LINES} lines without '{LONG_REASON}' at the top: {long}"


def test_no_python_source_in_string_constants() -> None:
    """Code that runs on a workstation is a module with tests, shipped as a file, never text in a string."""
    found = []
    for path in product_modules().values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                s = node.value
                if s.count("\n") >= 6 and "import " in s and ("def " in s or "print(" in s or "for " in s):
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not found, found


def test_packages_are_found_under_src_with_no_mapping() -> None:
    """Every folder of src/radeonlab with code is a package setuptools finds; no folder is mapped to another
    name (tools that follow paths then see the structure the interpreter sees)."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "package-dir" not in config
    assert config["packages"] == {"find": {"where": ["src"], "namespaces": False}}
    missing = sorted(
        str(folder.relative_to(REPO))
        for folder in (REPO / "src/radeonlab").rglob("*")
        if folder.is_dir()
        and any(folder.glob("*.py"))
        and not (folder / "__init__.py").exists()
        and "standins/payload" not in folder.as_posix()
    )
    assert not missing, f"folders with code but no __init__.py (left out of the install): {missing}"
    # the root entry files are one call into the package each
    for entry in ("deploy/setup.py", "deploy/verify.py", "inventories/sandbox.py"):
        code = [n for n in ast.parse((REPO / entry).read_text()).body if not isinstance(n, ast.Expr)]
        assert len(code) <= 2, entry


SSH_LIBRARIES = {"paramiko", "fabric", "invoke"}


def ssh_reached(start: str) -> list[str]:
    """How `start` comes to load jobs/ssh or an SSH library: one import chain each, empty when it does not."""
    modules = product_modules()
    via = reached_from(start)
    return [
        chain(via, name) + (f" ({', '.join(sorted(libs))})" if libs else "")
        for name in sorted(via)
        if (libs := external_roots(modules[name]) & SSH_LIBRARIES) or name.startswith("radeonlab.jobs.ssh")
    ]


def role_of(name: str) -> str | None:
    """The role a module belongs to (radeonlab.roles.X...: X, a folder), None outside a role's folder."""
    parts = name.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["radeonlab", "roles"] else None


def test_no_role_reads_another_roles_defaults() -> None:
    """Each role reads its own DEFAULTS; the stack choice (roles/stack.py, computed once in
    radeonlab/deploy/stack.py) and the GPU table come to it, and another role's key through that role's
    function (issue 24 item 5). Type-only imports count too."""
    modules = product_modules()
    known = set(modules)
    roles = {p.parent.name for p in (REPO / "src/radeonlab/roles").glob("*/__init__.py")}
    found = []
    for name, path in modules.items():
        own = role_of(name)
        if own not in roles:
            continue  # the composition (deploy/) and the shared modules (roles/stack.py, privilege.py)
        for target in sorted(imports_of(path, known, typing=True)):
            other = role_of(target)
            if other in roles and other != own and target == f"radeonlab.roles.{other}.defaults":
                found.append(f"{name} imports {target}")
    assert not found, found


def test_the_planner_reaches_no_ssh() -> None:
    """Nothing under jobs/plan imports jobs/ssh or paramiko/fabric, directly or through another module (issue
    24 item 2: observing is jobs/fleet's, planning is pure), and no module is exempt."""
    planner = [name for name in product_modules() if name.startswith("radeonlab.jobs.plan")]
    assert "radeonlab.jobs.plan.plan" in planner and "radeonlab.jobs.plan.placement" in planner
    reaching = {name: chains[:3] for name in planner if (chains := ssh_reached(name))}
    assert not reaching, reaching


def test_the_contract_imports_only_the_standard_library() -> None:
    """contract/ is shipped to the hosts and read by their system python3: the standard library only,
    and within radeonlab only contract/ itself (and the packages above it, which import nothing)."""
    modules = product_modules()
    bad = []
    for start in (n for n in modules if n.startswith("radeonlab.contract")):
        via = reached_from(start)
        for name in sorted(via):
            if name not in ("radeonlab", "radeonlab.contract") and not name.startswith("radeonlab.contract."):
                bad.append(f"{chain(via, name)}: outside contract/")
            foreign = sorted(external_roots(modules[name]) - set(sys.stdlib_module_names))
            if foreign:
                bad.append(f"{chain(via, name)}: {foreign}")
    assert not bad, "\n".join(sorted(set(bad)))


def contract_dataclasses() -> list[type]:
    import dataclasses
    import importlib

    found = []
    for name in sorted(n for n in product_modules() if n.startswith("radeonlab.contract")):
        module = importlib.import_module(name)
        for value in vars(module).values():
            if dataclasses.is_dataclass(value) and isinstance(value, type) and value.__module__ == name:
                found.append(value)
    return found


def loose_parts(hint: object) -> list[str]:
    """The parts of a type that say nothing: Any, or dict/list/set/tuple/Mapping/Sequence without
    parameters, at any depth (`dict[str, Any]` says nothing of its values)."""
    import collections.abc as abc

    bare = {dict, list, set, frozenset, tuple, abc.Mapping, abc.Sequence, abc.MutableMapping, abc.Iterable}
    if hint is typing.Any:
        return ["Any"]
    if hint in bare or hint in (typing.Dict, typing.List, typing.Set, typing.Tuple):  # noqa: UP006
        return [f"bare {getattr(hint, '__name__', hint)}"]
    return [p for arg in typing.get_args(hint) for p in loose_parts(arg)]


def test_contract_fields_are_typed() -> None:
    """No field of a contract dataclass is typed Any or a bare dict/list, nor has Any inside (`extra`, the
    keys a newer version wrote, is typed as JSON values)."""
    top, inside = [], set()
    for cls in contract_dataclasses():
        for name, hint in typing.get_type_hints(cls).items():
            if typing.get_origin(hint) is typing.ClassVar:
                continue
            own = loose_parts(hint) if not typing.get_args(hint) else []
            if own:
                top.append(f"{cls.__name__}.{name}: {hint}")
            elif loose_parts(hint):
                inside.add(f"{cls.__name__}.{name}")
    assert not top, top
    assert sorted(inside) == [], "fields typed with Any inside"


def test_tests_sit_in_their_lane_folders() -> None:
    """tests/unit holds what needs no sandbox host, tests/e2e what does (or is slow), tests/support what both
    use: no test file sits flat in tests/, and no file in tests/unit is marked for the sandbox or as slow."""
    top = ("__init__.py", "conftest.py")
    flat = sorted(p.name for p in (REPO / "tests").glob("*.py") if p.name not in top)
    assert flat == [], f"move these into tests/unit, tests/e2e or tests/support: {flat}"
    marked = [
        p.name for p in (REPO / "tests" / "unit").glob("test_*.py")
        if re.search(r"^pytestmark = .*\b(sandbox|slow)\b", p.read_text(), re.M)
    ]  # fmt: skip
    assert marked == [], f"whole files marked sandbox/slow belong in tests/e2e: {marked}"


def test_the_files_that_share_the_provisioned_hosts_run_in_one_worker() -> None:
    """tests/conftest.py's PROVISIONED_FILES are exactly the files that ask for the `provisioned` fixture
    (a file missing there would provision the hosts a second time in the other worker), and the scheduler
    groups a file's tests together."""
    from tests.conftest import PROVISIONED_FILES, group_of

    asks = re.compile(r"def \w+\([^)]*\bprovisioned\b", re.S)
    using = sorted(p.name for p in (REPO / "tests").rglob("test_*.py") if asks.search(p.read_text()))
    assert using == sorted(PROVISIONED_FILES)
    e2e = "tests/e2e/"
    assert group_of(f"{e2e}test_provision.py::test_a") == group_of(f"{e2e}test_provision_hub_e2e.py::b")
    assert group_of(f"{e2e}test_jobs_e2e.py::test_a") == group_of(f"{e2e}test_jobs_e2e.py::test_b[x]")
    assert group_of(f"{e2e}test_jobs_e2e.py::test_a") != group_of(f"{e2e}test_watch_e2e.py::test_a")


def test_the_longest_files_named_to_start_first_exist_and_do_start_first() -> None:
    """tests/conftest.py's LONGEST_FIRST: a renamed file would silently lose its place at the start."""
    from tests.conftest import LONGEST_FIRST, PROVISIONED_FILES, _start_rank

    assert [p for p in LONGEST_FIRST if not (REPO / p).is_file()] == []

    class Item:
        def __init__(self, nodeid: str) -> None:
            self.nodeid = nodeid

    order = ["tests/unit/test_a.py::t", "tests/e2e/test_provision_hub_e2e.py::t",
             "tests/e2e/test_slurm.py::t"]
    ranked = sorted(order, key=lambda n: _start_rank(Item(n)))  # type: ignore[arg-type]
    assert ranked == [order[2], order[1], order[0]]
    assert "test_provision_hub_e2e.py" in PROVISIONED_FILES
