"""The shape of the product's code: one import name, no import cycles, nothing imports the tests, short
modules, no Python source hidden in strings, and pyproject's package list matching the folders."""

from __future__ import annotations

import ast
import tomllib
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
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


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The product modules `path` imports at run time (imports only for type checkers aside)."""
    tree = ast.parse(path.read_text())
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING"
        for inner in ast.walk(node)
    }
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


def test_no_import_cycle() -> None:
    modules = product_modules()
    graph = {name: imports_of(path, set(modules)) - {name} for name, path in modules.items()}
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
