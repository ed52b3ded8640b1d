"""README stays short and the docs stay whole (issue 25): README at most 200 lines with the two fresh-machine
commands CI and the demo rely on, every relative link in README and docs/ resolves to a file, and every page
under docs/ is in mkdocs.yml's navigation (mkdocs itself only logs a page left out)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def markdown_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def test_the_readme_is_short_and_keeps_the_fresh_machine_commands() -> None:
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    for command in ("```bash\n./scripts/demo.sh\n```", "```bash\n./scripts/test.sh\n```"):
        assert command in text, command
    assert "## What cannot be verified without a real card" in text


def test_every_relative_link_resolves() -> None:
    broken = []
    for md in markdown_files():
        for target in LINK.findall(md.read_text()):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue  # a URL, or an anchor in the same page
            if not (md.parent / target.split("#", 1)[0]).exists():
                broken.append(f"{md.relative_to(REPO)} -> {target}")
    assert broken == []


def nav_pages(node: object) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [p for item in node for p in nav_pages(item)]
    if isinstance(node, dict):
        return [p for value in node.values() for p in nav_pages(value)]
    return []


def test_every_docs_page_is_in_the_navigation() -> None:
    nav = nav_pages(yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"])
    pages = {str(p.relative_to(REPO / "docs")) for p in (REPO / "docs").rglob("*.md")}
    assert sorted(pages - set(nav)) == []
    assert sorted(set(nav) - pages) == []


# `src/radeonlab/x` or `radeonlab/x` as a path of the repository; not a machine path that ends in a
# radeonlab folder (`/etc/radeonlab/host.json`, `~/.config/radeonlab/...`): those follow a `/`.
PACKAGE_PATH = re.compile(r"(?<![\w/.~-])(?:src/)?radeonlab/([\w.-]+(?:/[\w.-]+)*)")
# a module path in backticks on the architecture page, relative to src/radeonlab/ or to the root
ARCH_PATH = re.compile(r"`([\w.-]+(?:/[\w.-]+)+/?)`")


def missing_paths(text: str) -> list[str]:
    """The repository paths `text` names that do not exist."""
    named = {m.rstrip("/.") for m in PACKAGE_PATH.findall(text)}
    missing = [f"radeonlab/{p}" for p in sorted(named) if not (REPO / "src/radeonlab" / p).exists()]
    return missing


def test_every_package_path_named_in_the_docs_exists() -> None:
    found = [f"{md.relative_to(REPO)}: {p}" for md in markdown_files() for p in missing_paths(md.read_text())]
    assert found == []


def test_every_module_path_on_the_architecture_page_exists() -> None:
    text = (REPO / "docs/design/architecture.md").read_text()
    named = sorted({p.rstrip("/") for p in ARCH_PATH.findall(text)})
    assert len(named) > 40  # the page names the modules of its reading order, seams and changes
    missing = [p for p in named if not ((REPO / "src/radeonlab" / p).exists() or (REPO / p).exists())]
    assert missing == []


def test_the_path_checks_bite() -> None:
    assert missing_paths("see `src/radeonlab/jobs/plan/nowhere.py` and radeonlab/cli/gone.py") == [
        "radeonlab/cli/gone.py",
        "radeonlab/jobs/plan/nowhere.py",
    ]
    assert missing_paths("/etc/radeonlab/host.json, ~/.config/radeonlab/config.toml, radeonlab/cli/") == []
