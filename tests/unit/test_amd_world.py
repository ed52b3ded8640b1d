"""The product's beliefs about AMD compared with AMD's documents (src/radeonlab/sandbox/amdworld/*.yaml, with
their sources in its README.md): releases and dates, the newest production release, repositories and keys per
stream, Python indexes, torch/torchvision/torchaudio pairings, device extras and package names, the Core SDK's
apt meta packages (per target and per family, with the targets each family carries), the support matrix.
Any difference fails unless the product declares it as its own choice
(roles/amd_releases.py DECLARED_CHOICES); a declared choice no difference needs fails too (stale)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from radeonlab.roles import amd_releases
from radeonlab.roles.gpu import table
from radeonlab.roles.python_stack import defaults as stack
from radeonlab.roles.rocm import matrix, repos
from radeonlab.roles.rocm import releases as rocm_releases
from radeonlab.roles.rocm.defaults import DEFAULTS, SUPPORTED_DISTROS

AMDWORLD = Path(__file__).resolve().parents[2] / "src/radeonlab/sandbox/amdworld"


def amd(name: str) -> dict[str, Any]:
    return yaml.safe_load((AMDWORLD / f"{name}.yaml").read_text())


def series(version: str) -> str:
    return ".".join(str(version).split(".")[:2])


def template(url: str) -> str:
    """AMD's "<distro>" placeholders as the product writes them ("{distro}"), without the trailing slash."""
    return url.replace("<", "{").replace(">", "}").rstrip("/")


@dataclass(frozen=True)
class Product:
    """The product's tables, as a value a test can copy with one thing changed."""

    releases: tuple[amd_releases.Release, ...] = amd_releases.RELEASES
    newest_production: str = amd_releases.NEWEST_PRODUCTION
    default: str = amd_releases.DEFAULT_RELEASE
    wheels: tuple[tuple[str, stack.AmdWheels], ...] = tuple(stack.AMD_WHEELS.items())
    device_targets: tuple[str, ...] = table.AMD_DEVICE_TARGETS
    matrix: tuple[tuple[str, tuple[matrix.Listed, ...]], ...] = tuple(matrix.MATRIX.items())
    # the rocm role's Core SDK sets (roles/rocm/releases.py, derived from roles/gpu/table.py)
    multi_arch_targets: tuple[str, ...] = rocm_releases.MULTI_ARCH_TARGETS
    family_packages: tuple[tuple[str, tuple[str, ...]], ...] = tuple(rocm_releases.FAMILY_PACKAGES.items())


@dataclass(frozen=True)
class Difference:
    choice: str  # the DECLARED_CHOICES key that accepts it; "" = nothing may accept it
    text: str


def release_differences(p: Product) -> list[Difference]:
    world = amd("releases")
    out: list[Difference] = []
    ours = {r.version: r for r in p.releases}
    theirs = {str(r["version"]): r for r in world["releases"]}
    for version, r in theirs.items():
        mine = ours.get(version)
        if mine is None:
            out.append(
                Difference(
                    "", f"release {version}: AMD lists it ({r['date']}, {r['stream']}), not the product"
                )
            )
            continue
        for field, value in (("date", str(r["date"])), ("stream", r["stream"])):
            if getattr(mine, field) != value:
                out.append(
                    Difference("", f"release {version}: {field} {getattr(mine, field)} != AMD's {value}")
                )
    out += [Difference("", f"release {v}: not in AMD's list") for v in ours if v not in theirs]
    if p.newest_production != world["newest_production"]:
        out.append(
            Difference("", f"newest production {p.newest_production} != AMD's {world['newest_production']}")
        )
    if p.default != world["newest_production"]:
        out.append(
            Difference(
                "default-not-newest", f"default {p.default} is not AMD's newest {world['newest_production']}"
            )
        )
    # The product's defaults must be its table's default: the role's rocm_version and the stack's torch.
    default = next((r for r in p.releases if r.version == p.default), None)
    if default is None:
        out.append(Difference("", f"release {p.default}: the product's default, missing from its table"))
    elif (DEFAULTS["rocm_version"], stack.DEFAULTS["pytorch_version"]) != (default.series, default.torch):
        out.append(Difference("", f"DEFAULTS {DEFAULTS['rocm_version']}/{stack.DEFAULTS['pytorch_version']} "
                                  f"!= the table's default {default.series}/{default.torch}"))  # fmt: skip
    if any(r.stream == "legacy" for r in p.releases):
        out.append(Difference("legacy-7.2", "legacy 7.2.x releases kept outside AMD's 10.x matrix"))
    return out


def location_differences() -> list[Difference]:
    """Per stream: AMD's apt repository, key and Python index against the product's table AND what the role
    writes for a release of that stream (repos.apt_source on Ubuntu 24.04)."""
    out: list[Difference] = []
    world = amd("releases")
    for stream, loc in world["locations"].items():
        mine = amd_releases.LOCATIONS.get(stream)
        if mine is None:
            out.append(Difference("", f"stream {stream}: unknown to the product"))
            continue
        pairs = (
            ("apt", template(loc["apt"]), template(mine.apt_repo)),
            ("apt_key", loc["apt_key"], mine.apt_key),
            ("python_index", loc.get("python_index", ""), mine.python_index),
        )
        out += [Difference("", f"stream {stream}: {what} {b} != AMD's {a}") for what, a, b in pairs if a != b]
        release = next(r for r in world["releases"] if r["stream"] == stream)
        settings = {**DEFAULTS, "rocm_version": str(release["version"])}
        if stream == "legacy":
            settings["rocm_stream"] = "legacy"
        source = repos.apt_source(settings, "noble")
        want = template(loc["apt"]).format(
            distro="ubuntu2404", version=repos.version_dir(str(release["version"]))
        )
        written = source.lines[0].split()[3].rstrip("/")
        if (written, source.key_url) != (want, loc["apt_key"]):
            out.append(Difference("", f"stream {stream}: the role writes {written} ({source.key_url})"))
    return out


def wheel_differences(p: Product) -> list[Difference]:
    world, packages = amd("releases"), amd("python-packages")
    out: list[Difference] = []
    wheels = dict(p.wheels)
    rows = {(m["torch"], m["torchvision"], m["torchaudio"]) for m in world["torch_matrix"]}
    index = {s: loc.get("python_index", "") for s, loc in world["locations"].items()}
    for r in world["releases"]:
        version, w = str(r["version"]), wheels.get(str(r["version"]))
        if r["stream"] == "legacy":
            continue
        if w is None:
            out.append(Difference("", f"wheels {version}: AMD publishes them, the product has none"))
            continue
        mine = (series(w.torch), series(w.torchvision), series(w.torchaudio))
        if "torch" in r and mine != (r["torch"], r["torchvision"], r["torchaudio"]):
            out.append(Difference("", f"wheels {version}: torch/vision/audio {mine} != AMD's"))
        if "torch" not in r:
            out.append(Difference("torch-7.14", f"wheels {version}: torch {w.torch} chosen, AMD gives none"))
        if mine not in rows:
            out.append(Difference("", f"wheels {version}: {mine} is no row of AMD's torch matrix"))
        if (w.index_url, w.local) != (index[r["stream"]], f"rocm{version}"):
            out.append(Difference("", f"wheels {version}: {w.index_url} +{w.local}"))
        if any(v.count(".") == 2 and v.endswith(".0") for v in (w.torchvision, w.torchaudio)):
            out.append(Difference("patch-numbers", f"wheels {version}: .0 patch chosen"))
    missing = sorted(set(packages["device_extras"]) - set(p.device_targets))
    out += [Difference("", f"device extra {t}: AMD has it, the product does not") for t in missing]
    return out


def package_differences() -> list[Difference]:
    """torch[device-T] -> amd-torch-device-T -> rocm-sdk-device-T; torch -> rocm[libraries]; rocm: an sdist
    providing rocm_sdk (AMD's python-packages.yaml) against the product's graph."""
    world = amd("python-packages")["packages"]
    out: list[Difference] = []
    torch_extra = world["torch"]["extras"]["device-T"]["requires"][0].split("==")[0]
    chain = [torch_extra, world[torch_extra]["requires"][0].split("==")[0]]
    if stack.device_packages("gfx1100") != [c.replace("T", "gfx1100") for c in chain]:
        out.append(Difference("", f"device chain {stack.device_packages('gfx1100')} != AMD's {chain}"))
    if stack.AMD_PACKAGE_GRAPH["torch"] != tuple(t.split("==")[0] for t in world["torch"]["requires"]):
        out.append(Difference("", "torch's own requirement differs from AMD's"))
    rocm = world["rocm"]
    if (
        rocm["kind"] != "sdist"
        or "rocm_sdk Python module" not in rocm["provides"]
        or stack.AMD_SDISTS != {"rocm": "rocm_sdk"}
    ):
        out.append(
            Difference(
                "", f"rocm: AMD's {rocm['kind']} {rocm['provides']} != the product's {stack.AMD_SDISTS}"
            )
        )
    return out


def apt_package_differences(p: Product) -> list[Difference]:
    """The Core SDK's apt meta packages as AMD's install selector lists them (coresdk-packages.yaml) against
    the rocm role's per-target and per-family sets, and the names the role installs for every such target."""
    world = amd("coresdk-packages")
    out: list[Difference] = []
    theirs, mine = world["per_target"]["targets"], p.multi_arch_targets
    out += [Difference("", f"amdrocm<ver>-{t}: AMD lists it, the product does not") for t in theirs
            if t not in mine]  # fmt: skip
    out += [Difference("", f"amdrocm<ver>-{t}: the product installs it, AMD lists none") for t in mine
            if t not in theirs]  # fmt: skip
    families, ours = world["per_family"]["packages"], dict(p.family_packages)
    for family, targets in families.items():
        if family not in ours:
            instinct = all(table.TARGETS[g].arch.name.startswith("CDNA") for g in targets)
            out.append(Difference("instinct-no-family" if instinct else "",
                                  f"amdrocm<ver>-{family} ({', '.join(targets)}): AMD lists it, the product "
                                  "does not"))  # fmt: skip
            continue
        out += [Difference("", f"amdrocm<ver>-{family}: AMD's selector sends {g} to it, the product does not")
                for g in targets if g not in ours[family]]  # fmt: skip
        out += [Difference("", f"amdrocm<ver>-{family}: the product counts {g} in it, AMD's selector "
                           "does not") for g in ours[family] if g not in targets]  # fmt: skip
    out += [Difference("", f"amdrocm<ver>-{f}: the product installs it, AMD lists none") for f in ours
            if f not in families]  # fmt: skip
    # facts -> commands: what the role installs for each such target is one of AMD's names
    names = {"multi-arch": {"amdrocm{v}", *(f"amdrocm{{v}}-{t}" for t in theirs)},
             "family": {f"amdrocm{{v}}-{f}" for f in families}}  # fmt: skip
    for layout, targets in (("multi-arch", mine), ("family", [g for m in ours.values() for g in m])):
        for gfx in targets:
            settings = {**DEFAULTS, "rocm_version": "10.0", "rocm_coresdk_layout": layout}
            for name in repos.coresdk_packages(settings, [gfx]):
                if name not in {n.format(v="10.0") for n in names[layout]}:
                    out.append(Difference("", f"{layout} layout, {gfx}: the role installs {name}, not AMD's"))
    return out


def matrix_differences(p: Product) -> list[Difference]:
    world = amd("support-matrix")
    out: list[Difference] = []
    ours = dict(p.matrix)
    apus = {t for t, names in amd("python-packages")["device_extras"].items()
            if any("Ryzen" in n or "iGPU" in n for n in names)}  # fmt: skip
    if apus != set(matrix.APU_TARGETS):
        out.append(Difference("", f"APU targets {sorted(matrix.APU_TARGETS)} != AMD's {sorted(apus)}"))
    for part in ("radeon", "ryzen"):
        theirs = {("Ubuntu", str(u["version"]), u["kernel"]) for u in world[part]["ubuntu"]}
        theirs |= {("RHEL", str(v), "") for v in world[part].get("rhel", [])}
        mine = {(r.distro, r.version, r.kernel) for r in ours.get(part, ())}
        out += [
            Difference("", f"matrix {part}: AMD lists {r}, the product does not")
            for r in sorted(theirs - mine)
        ]
        for r in sorted(mine - theirs):
            choice = "matrix-10.1-rows" if r[1] in ("26.04.1", "24.04.5") else ""
            out.append(Difference(choice, f"matrix {part}: the product lists {r}, AMD's matrix does not"))
        if world[part]["debian"] == "none" and any(d == "Debian" for d, _ in SUPPORTED_DISTROS):
            out.append(Difference("debian-provisioned", f"matrix {part}: Debian provisioned, AMD lists none"))
        for distro, version, _ in sorted(theirs):
            if (distro, int(version.split(".")[0])) not in SUPPORTED_DISTROS:
                choice = "rhel-refused" if distro == "RHEL" else ""
                out.append(
                    Difference(
                        choice, f"matrix {part}: {distro} {version} listed by AMD, refused by the role"
                    )
                )
    return out


def differences(p: Product) -> list[Difference]:
    return [*release_differences(p), *location_differences(), *wheel_differences(p), *package_differences(),
            *apt_package_differences(p), *matrix_differences(p)]  # fmt: skip


def undeclared(found: list[Difference]) -> list[str]:
    return [d.text for d in found if d.choice not in amd_releases.DECLARED_CHOICES]


def test_the_product_agrees_with_amds_documents_but_for_its_declared_choices() -> None:
    found = differences(Product())
    assert undeclared(found) == []
    # every declared choice is one the product actually makes (no stale excuses)
    assert {d.choice for d in found} - {""} == set(amd_releases.DECLARED_CHOICES)


@pytest.mark.parametrize("version", [str(r["version"]) for r in amd("releases")["releases"]])
def test_it_bites_a_release_removed_from_the_product_table(version: str) -> None:
    product = Product()
    fewer = dataclasses.replace(product, releases=tuple(r for r in product.releases if r.version != version),
                                wheels=tuple((k, w) for k, w in product.wheels if k != version))  # fmt: skip
    texts = undeclared(differences(fewer))
    assert texts and all(version in t for t in texts), texts
    assert any(t.startswith(f"release {version}: AMD lists it") for t in texts)


def test_it_bites_a_wrong_pairing_a_dropped_matrix_row_and_a_lost_device_extra() -> None:
    product = Product()
    w = dict(product.wheels)
    wrong = dataclasses.replace(w["10.1.0"], torchvision="0.28.0")
    bad = dataclasses.replace(product, wheels=tuple({**w, "10.1.0": wrong}.items()))
    assert any("wheels 10.1.0" in t for t in undeclared(differences(bad)))
    rows = dict(product.matrix)
    dropped = dataclasses.replace(product, matrix=tuple({**rows, "ryzen": rows["ryzen"][:1]}.items()))
    assert any("24.04.4" in t and "ryzen" in t for t in undeclared(differences(dropped)))
    lost = dataclasses.replace(
        product, device_targets=tuple(t for t in product.device_targets if t != "gfx1031")
    )
    assert undeclared(differences(lost)) == ["device extra gfx1031: AMD has it, the product does not"]


def test_a_default_other_than_the_declared_one_is_caught() -> None:
    wrong = dataclasses.replace(Product(), newest_production="10.0.0")
    assert "newest production 10.0.0 != AMD's 10.1.0" in undeclared(differences(wrong))


def test_it_bites_a_wrong_core_sdk_package_row() -> None:
    """One target dropped from the per-target list, one family member moved: each named, nothing else."""
    product = Product()
    fewer = dataclasses.replace(product, multi_arch_targets=tuple(t for t in product.multi_arch_targets
                                                                  if t != "gfx1102"))  # fmt: skip
    assert undeclared(differences(fewer)) == ["amdrocm<ver>-gfx1102: AMD lists it, the product does not"]
    families = dict(product.family_packages)
    moved = {**families, "gfx110x": ("gfx1100", "gfx1101", "gfx1102"),
             "gfx120x": ("gfx1200", "gfx1201", "gfx1103")}  # fmt: skip
    texts = undeclared(differences(dataclasses.replace(product, family_packages=tuple(moved.items()))))
    assert sorted(texts) == [
        "amdrocm<ver>-gfx110x: AMD's selector sends gfx1103 to it, the product does not",
        "amdrocm<ver>-gfx120x: the product counts gfx1103 in it, AMD's selector does not",
    ]
