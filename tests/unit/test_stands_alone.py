"""The project stands alone: nothing in it cites a file outside the repository (the steering workplace's notes
and fixtures live in docs/notes/ and tests/fixtures/ now), names a path of the machine it was built on, or
names a package registry's host (the project says "PyPI", "Debian's archive" and uses the machine's
configured pip and apt sources)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Registry hosts as escaped regex alternatives: the check below turns each into a sample host name at run
# time, so this file names none itself.
REGISTRY_HOSTS = (
    r"pypi\.org", r"pythonhosted\.org", r"deb\.debian\.org", r"security\.debian\.org", r"npmjs\.org",
    r"npmjs\.com", r"archive\.ubuntu\.com", r"security\.ubuntu\.com", r"ports\.ubuntu\.com", r"crates\.io",
    r"proxy\.golang\.org", r"rubygems\.org", r"conda\.anaconda\.org", r"repo\.anaconda\.com",
)  # fmt: skip
FORBIDDEN: dict[str, re.Pattern[str]] = {
    "a citation of the workplace's shared folder": re.compile(
        r"\.\./shared|shared/(fixtures|notes|reference)"
    ),
    # Any path under the workplace's root folder (its checkouts, notes and venvs; [k] keeps the word out
    # of this file) and the build machine's own caches. The same word inside a URL or another path is not one:
    # the look-behind wants a path's start.
    "a path of the build machine": re.compile(r"(?<![\w.~-])/wor[k]/|/opt/wheels|/opt/pypi"),
    # /root/ is the build machine's home (its caches, venvs, checkouts) but also root's home on a workstation
    # and on a SIMULATED host (`HOME=/root` in sandbox/host.py, root's ssh keys): root's account files on a
    # host stay allowed, any other /root/ path is taken for the build machine's.
    "a path of the build machine's home": re.compile(r"(?<![\w.~-])/root/(?!\.ssh\b|\.bashrc\b|\.profile\b)"),
    # The machine's configured pip and apt sources are used; names of vendors' own servers (repo.amd.com,
    # download.pytorch.org, the Hub, Ubuntu's keyserver) are facts the product uses and stay.
    "a package registry's host": re.compile("|".join(REGISTRY_HOSTS)),
}


def tracked_texts() -> list[tuple[str, str]]:
    """(path, text) of every tracked text file but this one: inputs nobody here wrote included (a dataset
    row that named a registry was edited, tests/fixtures/llamafactory-v0.9.5/SOURCE.md says so)."""
    names = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    out = []
    for name in names.splitlines():
        path = REPO / name
        if not path.is_file() or path == Path(__file__).resolve():
            continue
        try:
            out.append((name, path.read_text()))
        except UnicodeDecodeError:
            continue  # binary
    return out


def test_nothing_cites_outside_the_repository_names_a_machine_path_or_a_registry_host() -> None:
    found = [
        f"{name}:{number}: {what}: {line.strip()[:100]}"
        for name, text in tracked_texts()
        for number, line in enumerate(text.splitlines(), 1)
        for what, pattern in FORBIDDEN.items()
        if pattern.search(line)
    ]
    assert not found, "\n".join(found)


def test_the_patterns_catch_each_kind_and_spare_a_hosts_own_paths() -> None:
    """The scan above can fail: each kind of citation is caught, and paths a workstation or a SIMULATED host
    really has (root's home and ssh keys, a URL that happens to hold the workplace's folder name) are not."""

    def kinds(line: str) -> set[str]:
        return {what for what, pattern in FORBIDDEN.items() if pattern.search(line)}

    # The path samples are written in pieces, so that this file, like every other, names no build-machine
    # path as one word; the registry samples are made from REGISTRY_HOSTS.
    caught = {
        "see ../shared/notes/speed.md": "a citation of the workplace's shared folder",
        "recorded in shared/fixtures/lsb_release.txt": "a citation of the workplace's shared folder",
        "written from /work/wt-x/src": "a path of the build machine",
        "the cache at /root/.cache/pip": "a path of the build machine's home",
        "cloned into /root/radeonlab": "a path of the build machine's home",
    }
    for host in REGISTRY_HOSTS:  # each registry host, as an index URL would name it
        caught[f"index https://{host.replace(chr(92), '')}/simple"] = "a package registry's host"
    for line, what in caught.items():
        assert kinds(line) == {what}, line
    for line in (
        "HOME=/root",
        "install -m 0600 key /root/.ssh/authorized_keys",
        "https://example.org/work/x.html",
        "https://repo.amd.com/rocm/packages/ubuntu2404",
        "https://download.pytorch.org/whl/rocm7.2",
        "pip's default index (PyPI), Debian's archive",
    ):
        assert kinds(line) == set(), line
