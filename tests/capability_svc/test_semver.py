"""Semantic versions, ranges, and dependency checks against the registry."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from capability_svc.errors import DependencyError
from capability_svc.registry import CapabilityRegistry, check_dependency, default_capabilities_dir
from capability_svc.semver import Version, VersionRange, parse_dependency


def test_version_parse_and_order() -> None:
    assert str(Version.parse("2.1.0")) == "2.1.0"
    ordered = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-beta", "1.0.0-rc.1", "1.0.0", "1.0.1",
               "1.2.0", "2.0.0"]
    assert sorted(Version.parse(v) for v in reversed(ordered)) == [Version.parse(v) for v in ordered]
    assert Version.parse("1.0.0+build.5") == Version.parse("1.0.0")
    for bad in ("1", "1.0", "01.0.0", "1.0.0.0", "v1.0.0", ""):
        with pytest.raises(ValueError):
            Version.parse(bad)


@pytest.mark.parametrize(
    ("expr", "inside", "outside"),
    [
        ("^2.0", ["2.0.0", "2.1.0", "2.99.9"], ["1.9.9", "3.0.0", "2.1.0-rc.1"]),
        ("^2.1.3", ["2.1.3", "2.9.0"], ["2.1.2", "3.0.0"]),
        ("^0.2.3", ["0.2.3", "0.2.9"], ["0.3.0", "0.2.2"]),
        ("^0.0.3", ["0.0.3"], ["0.0.4", "0.0.2"]),
        ("~2.1", ["2.1.0", "2.1.7"], ["2.2.0", "2.0.9"]),
        ("~2.1.3", ["2.1.3", "2.1.9"], ["2.2.0", "2.1.2"]),
        ("~2", ["2.0.0", "2.9.9"], ["3.0.0"]),
        (">=1.5", ["1.5.0", "9.0.0"], ["1.4.9"]),
        (">1.5.0", ["1.5.1"], ["1.5.0"]),
        ("<2", ["1.9.9"], ["2.0.0"]),
        ("<=2.0.0", ["2.0.0"], ["2.0.1"]),
        ("2.1.0", ["2.1.0"], ["2.1.1", "2.0.0"]),
        ("=2.1.0-rc.1", ["2.1.0-rc.1"], ["2.1.0"]),
        ("2.1", ["2.1.0", "2.1.5"], ["2.2.0"]),
        ("*", ["0.0.1", "9.9.9"], ["1.0.0-rc.1"]),
    ],
)
def test_ranges(expr: str, inside: list[str], outside: list[str]) -> None:
    version_range = VersionRange.parse(expr)
    for v in inside:
        assert version_range.contains(Version.parse(v)), (expr, v)
    for v in outside:
        assert not version_range.contains(Version.parse(v)), (expr, v)


@pytest.mark.parametrize("bad", ["", "^", "^two", ">=1.x", "~>1.0", "1.0.0 - 2.0.0"])
def test_bad_ranges(bad: str) -> None:
    with pytest.raises(ValueError):
        VersionRange.parse(bad)


def test_parse_dependency() -> None:
    capability, version_range = parse_dependency("training.getStatus@^2.0")
    assert capability == "training.getStatus"
    assert str(version_range) == "^2.0"
    with pytest.raises(ValueError):
        parse_dependency("training.getStatus")


def test_check_dependency_compatible(registry: CapabilityRegistry) -> None:
    assert check_dependency("training.getStatus@^2.0", registry).key == "training.getStatus@2.2.0"
    assert check_dependency("workPermit.get@~1.1", registry).id == "workPermit.get"
    assert check_dependency("workPermit.release@>=1.0.0", registry).id == "workPermit.release"
    assert check_dependency("risk.evaluate@1.0.0", registry).id == "risk.evaluate"


@pytest.mark.parametrize(
    ("spec", "reason", "text"),
    [
        ("training.getStatus@^3.0", "DEPENDENCY_VERSION_INCOMPATIBLE", "available: 2.2.0"),
        ("training.getStatus@~2.0", "DEPENDENCY_VERSION_INCOMPATIBLE", "satisfies ~2.0"),
        ("training.getStatus@<2", "DEPENDENCY_VERSION_INCOMPATIBLE", "training.getStatus"),
        ("training.update@^1.0", "DEPENDENCY_UNKNOWN", "not registered"),
        ("training.getStatus", "DEPENDENCY_SYNTAX_INVALID", "expected"),
        ("training.getStatus@^x", "DEPENDENCY_SYNTAX_INVALID", "not a version range"),
        ("Training@^1.0", "DEPENDENCY_SYNTAX_INVALID", "not a capability id"),
    ],
)
def test_check_dependency_refused_with_reason(
    registry: CapabilityRegistry, spec: str, reason: str, text: str
) -> None:
    with pytest.raises(DependencyError) as info:
        check_dependency(spec, registry)
    assert info.value.reason == reason
    assert info.value.dependency == spec
    assert text in info.value.message


def test_check_dependency_lifecycle(registry: CapabilityRegistry) -> None:
    registry.set_status("training.getStatus", "DISABLED")
    # Compatible but not runnable: accepted for registration, refused when it must run.
    assert check_dependency("training.getStatus@^2.0", registry).id == "training.getStatus"
    with pytest.raises(DependencyError) as info:
        check_dependency("training.getStatus@^2.0", registry, require_executable=True)
    assert info.value.reason == "DEPENDENCY_NOT_EXECUTABLE"
    registry.set_status("training.getStatus", "RETIRED")
    with pytest.raises(DependencyError) as info:
        check_dependency("training.getStatus@^2.0", registry)
    assert info.value.reason == "DEPENDENCY_VERSION_INCOMPATIBLE"


def test_check_dependency_picks_newest_match(tmp_path: Path) -> None:
    caps = tmp_path / "caps"
    caps.mkdir()
    source = (default_capabilities_dir() / "training.getStatus.yaml").read_text()
    for version in ("1.4.0", "2.0.0", "2.3.1", "3.0.0"):
        text = source.replace("version: 2.2.0", f"version: {version}")
        (caps / f"training.getStatus-{version}.yaml").write_text(textwrap.dedent(text))
    reg = CapabilityRegistry.load(caps, tmp_path / "state.db")
    try:
        assert str(check_dependency("training.getStatus@^2.0", reg).version) == "2.3.1"
        assert str(check_dependency("training.getStatus@~1.4", reg).version) == "1.4.0"
        assert str(check_dependency("training.getStatus@>=2.1", reg).version) == "3.0.0"
    finally:
        reg.close()
