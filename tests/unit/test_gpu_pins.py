"""The `gpu` extra and the core dependencies must not exclude each other (no network).

The requirements of each upstream vllm release are recorded in `scripts/vllm-<v>-requires.txt`
(read from the wheel's METADATA). For every package that the core dependencies and that
vllm release both constrain (torch and transformers above all), some version must satisfy
both specifier sets; otherwise `pip install '.[gpu]'` is a resolver conflict — as it was with
`torch==2.13.0` in the core dependencies and vllm 0.33.0 pinning `torch==2.14.0`.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parents[2]
# The machines the gpu extra is for: Linux x86_64, the Pythons of the dev box and GPU image.
GPU_ENVS = [
    {"python_version": pv, "python_full_version": f"{pv}.0", "platform_machine": "x86_64",
     "platform_system": "Linux", "sys_platform": "linux", "extra": ""}
    for pv in ("3.11", "3.12")
]


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _by_name(reqs: list[Requirement]) -> dict[str, SpecifierSet]:
    out: dict[str, SpecifierSet] = {}
    for r in reqs:
        key = canonicalize_name(r.name)
        out[key] = out.get(key, SpecifierSet()) & r.specifier
    return out


def recorded_vllm_requires(version: str) -> list[Requirement]:
    """The unconditional (no extra) requirements of a vllm release on a Linux x86_64 box."""
    path = ROOT / "scripts" / f"vllm-{version}-requires.txt"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path.name} is missing: record it from the wheel's METADATA "
            f"(pip download vllm=={version} --no-deps; unzip -p *.whl "
            f"vllm-{version}.dist-info/METADATA | grep -E '^Requires-(Dist|Python)')"
        )
    reqs = []
    for line in path.read_text().splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.removeprefix("Requires-Dist:").strip())
        if req.marker is None or any(req.marker.evaluate(env) for env in GPU_ENVS):
            reqs.append(req)
    return reqs


def _candidates(*specs: SpecifierSet) -> list[Version]:
    """Versions at the edges of the specifiers: an intersection of intervals, if not empty,
    contains one of its lower bounds or, failing that, a version just above one."""
    out = []
    for spec in specs:
        for s in spec:
            base = s.version.removesuffix(".*")
            try:
                v = Version(base)
            except InvalidVersion:
                continue
            out += [v, Version(f"{v.base_version}.1"), Version(f"{v.base_version}.0.1")]
    return out


def conflicts(ours: dict[str, SpecifierSet], theirs: list[Requirement]) -> dict[str, str]:
    """{package: 'ours ∩ theirs'} for each package no version satisfies both sides of."""
    bad = {}
    for name, spec in _by_name(theirs).items():
        if name not in ours:
            continue
        both = ours[name] & spec
        if not any(both.contains(v, prereleases=True) for v in _candidates(ours[name], spec)):
            bad[name] = f"{ours[name]} ∩ {spec}"
    return bad


def _gpu_vllm_version() -> str:
    reqs = [Requirement(r) for r in _pyproject()["optional-dependencies"]["gpu"]]
    vllm = [r for r in reqs if canonicalize_name(r.name) == "vllm"]
    assert len(vllm) == 1, "the gpu extra names vllm once"
    pins = [s.version for s in vllm[0].specifier if s.operator == "=="]
    assert len(pins) == 1, f"the gpu extra pins one vllm release (vllm==X), not {vllm[0]}"
    return pins[0]


def test_gpu_extra_and_core_dependencies_are_consistent() -> None:
    core = _by_name([Requirement(r) for r in _pyproject()["dependencies"]])
    theirs = recorded_vllm_requires(_gpu_vllm_version())
    shared = set(core) & set(_by_name(theirs))
    assert {"torch", "transformers"} <= shared  # the two that conflicted before
    assert conflicts(core, theirs) == {}


@pytest.mark.parametrize("path", sorted((ROOT / "scripts").glob("vllm-*-requires.txt")),
                         ids=lambda p: p.name)
def test_core_dependencies_admit_every_recorded_vllm(path: Path) -> None:
    """Moving the gpu pin to another recorded release is a one-line change to the extra."""
    version = re.fullmatch(r"vllm-(.+)-requires\.txt", path.name).group(1)
    core = _by_name([Requirement(r) for r in _pyproject()["dependencies"]])
    assert conflicts(core, recorded_vllm_requires(version)) == {}


def test_cpu_constraints_satisfy_core_dependencies() -> None:
    """scripts/constraints.txt pins the CPU build inside the core range (torch 2.13.0)."""
    core = _by_name([Requirement(r) for r in _pyproject()["dependencies"]])
    pins = [Requirement(line) for line in (ROOT / "scripts/constraints.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    assert [str(p) for p in pins] == ["torch==2.13.0"]
    for pin in pins:
        (version,) = [s.version for s in pin.specifier]
        assert core[canonicalize_name(pin.name)].contains(version)


def test_the_check_catches_the_old_torch_pin() -> None:
    """The check is not vacuous: the former core pin against vllm 0.33.0's torch==2.14.0."""
    old = _by_name([Requirement("torch==2.13.0"), Requirement("transformers>=4.56,<5.20")])
    found = conflicts(old, recorded_vllm_requires("0.33.0"))
    assert found == {"torch": "==2.13.0 ∩ ==2.14.0"}
    # Disjoint ranges are caught too; touching-but-open ones are not conflicts.
    assert conflicts({"x": SpecifierSet("<5.16")}, [Requirement("x>=5.16.1")]) == {
        "x": "<5.16 ∩ >=5.16.1"}
    assert conflicts({"x": SpecifierSet(">=4.56,<5.20")}, [Requirement("x<5.21,>=5.16.1")]) == {}
    assert conflicts({"x": SpecifierSet(">5.16")}, [Requirement("x<=5.16.1")]) == {}
