"""README stays short and the docs stay whole (issue 25): README at most 200 lines with the two fresh-machine
commands CI and the demo rely on, every relative link in README and docs/ resolves to a file, and every page
under docs/ is in mkdocs.yml's navigation (mkdocs itself only logs a page left out)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
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
