"""Capability registry: manifests, validation errors, lifecycle persistence, schemas."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from capability_svc.errors import (
    CapabilityNotExecutable,
    CapabilityNotFound,
    InputInvalid,
    ManifestError,
    OutputInvalid,
    StatusChangeRefused,
)
from capability_svc.registry import (
    CapabilityRegistry,
    LifecycleStatus,
    RiskLevel,
    default_capabilities_dir,
)

EXPECTED_IDS = {
    "workPermit.get",
    "workPermit.search",
    "workPermit.updateValidity",
    "workPermit.release",
    "training.getStatus",
    "risk.evaluate",
    "compliance.getChecklist",
    "worker.get",
    "employee.get",
    "medical.getEligibility",
    "knowledge.search",
}

MINIMAL = """\
id: demo.read
version: 1.0.0
description: A test capability.
domain: demo
backend: internal
lifecycle: ACTIVE
risk_profile:
  max_risk: LOW
  mutates: false
  external_write: false
  bulk: false
resource:
  type: thing
  id_field: thing_id
input_schema:
  type: object
  additionalProperties: false
  required: [thing_id]
  properties:
    thing_id: {type: string}
output_schema:
  type: object
  required: [provenance]
  properties:
    provenance: {type: object}
"""


def write(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_shipped_manifests_load(registry: CapabilityRegistry) -> None:
    entries = registry.list()
    assert {e.manifest.id for e in entries} == EXPECTED_IDS
    assert all(e.status is LifecycleStatus.ACTIVE for e in entries)
    release = registry.get("workPermit.release").manifest
    assert release.risk_profile.max_risk is RiskLevel.HIGH
    assert release.risk_profile.mutates
    assert release.resource_type == "permit"
    assert release.resource_id({"permit_id": "WP-1"}) == "WP-1"
    training = registry.get("training.getStatus").manifest
    assert training.backend == "external:lms"
    assert training.external_system == "lms"
    assert str(training.version) == "2.2.0"
    assert training.key == "training.getStatus@2.2.0"
    assert registry.get("workPermit.updateValidity").manifest.risk_profile.mutates
    assert not registry.get("workPermit.get").manifest.risk_profile.mutates


def test_unknown_capability_is_not_found(registry: CapabilityRegistry) -> None:
    with pytest.raises(CapabilityNotFound) as info:
        registry.get("workPermit.delete")
    assert info.value.reason == "CAPABILITY_NOT_FOUND"
    with pytest.raises(CapabilityNotFound):
        registry.get("workPermit.get", "9.9.9")


@pytest.mark.parametrize(
    ("old", "new", "field", "line"),
    [
        # A wrong enum value is reported at the field, on its own line.
        ("  max_risk: LOW\n", "  max_risk: EXTREME\n", "risk_profile.max_risk", 8),
        # A missing block is reported at the mapping that should hold it.
        ("risk_profile:\n  max_risk: LOW\n  mutates: false\n  external_write: false\n"
         "  bulk: false\n", "", "risk_profile", 1),
        ("version: 1.0.0\n", "version: one\n", "version", 2),
        ("  mutates: false\n", '  mutates: "no"\n', "risk_profile.mutates", 9),
        ("backend: internal\n", "backend: ftp\n", "backend", 5),
        ("    thing_id: {type: string}\n", "    thing_id: {type: 12}\n",
         "input_schema.properties.thing_id.type", 20),
        ("  additionalProperties: false\n", "", "input_schema", 15),
        ("lifecycle: ACTIVE\n", "lifecycle: ACTIVE\ncolour: blue\n", "colour", 7),
        ("    provenance: {type: object}\n", "    other: {type: object}\n", "output_schema", 21),
    ],
)
def test_bad_manifest_names_file_field_and_line(
    tmp_path: Path, old: str, new: str, field: str, line: int
) -> None:
    assert old in MINIMAL
    path = write(tmp_path / "caps", "demo.read.yaml", MINIMAL.replace(old, new, 1))
    with pytest.raises(ManifestError) as info:
        CapabilityRegistry.load(tmp_path / "caps", tmp_path / "state.db")
    err = info.value
    assert err.file == str(path)
    assert str(path) in str(err)
    assert err.field == field
    assert err.line == line
    assert err.reason == "MANIFEST_INVALID"


def test_removing_optional_resource_is_fine(tmp_path: Path) -> None:
    text = MINIMAL.replace("resource:\n  type: thing\n  id_field: thing_id\n", "")
    write(tmp_path / "caps", "demo.read.yaml", text)
    reg = CapabilityRegistry.load(tmp_path / "caps", tmp_path / "state.db")
    assert reg.get("demo.read").manifest.resource_id_field is None
    reg.close()


def test_mutation_must_declare_resource(tmp_path: Path) -> None:
    text = MINIMAL.replace("  mutates: false", "  mutates: true").replace(
        "resource:\n  type: thing\n  id_field: thing_id\n", ""
    )
    write(tmp_path / "caps", "demo.read.yaml", text)
    with pytest.raises(ManifestError) as info:
        CapabilityRegistry.load(tmp_path / "caps", tmp_path / "state.db")
    assert info.value.field == "resource"


def test_yaml_syntax_and_duplicate_keys_are_refused(tmp_path: Path) -> None:
    write(tmp_path / "a", "x.yaml", MINIMAL + "description: again\n")
    with pytest.raises(ManifestError) as info:
        CapabilityRegistry.load(tmp_path / "a", tmp_path / "state.db")
    assert "duplicate key" in info.value.message
    assert info.value.line == 26
    write(tmp_path / "b", "x.yaml", MINIMAL.replace("domain: demo", "domain: [demo"))
    with pytest.raises(ManifestError) as info:
        CapabilityRegistry.load(tmp_path / "b", tmp_path / "state.db")
    assert info.value.line is not None


def test_duplicate_version_across_files_is_refused(tmp_path: Path) -> None:
    write(tmp_path / "caps", "a.yaml", MINIMAL)
    write(tmp_path / "caps", "b.yaml", MINIMAL)
    with pytest.raises(ManifestError) as info:
        CapabilityRegistry.load(tmp_path / "caps", tmp_path / "state.db")
    assert info.value.reason == "MANIFEST_DUPLICATE"
    assert "b.yaml" in info.value.file


def test_newest_executable_version_is_chosen(tmp_path: Path) -> None:
    write(tmp_path / "caps", "v1.yaml", MINIMAL)
    write(
        tmp_path / "caps",
        "v2.yaml",
        MINIMAL.replace("version: 1.0.0", "version: 2.0.0").replace("ACTIVE", "DRAFT"),
    )
    reg = CapabilityRegistry.load(tmp_path / "caps", tmp_path / "state.db")
    try:
        assert [str(e.manifest.version) for e in reg.versions("demo.read")] == ["2.0.0", "1.0.0"]
        assert str(reg.get("demo.read").manifest.version) == "1.0.0"
        assert reg.get("demo.read", "2.0.0").status is LifecycleStatus.DRAFT
        reg.set_status("demo.read", "DISABLED", version="1.0.0")
        # Nothing executable: the newest is returned so the caller sees its status.
        assert str(reg.get("demo.read").manifest.version) == "2.0.0"
        with pytest.raises(CapabilityNotExecutable) as info:
            reg.ensure_executable("demo.read")
        assert info.value.reason == "CAPABILITY_NOT_ACTIVE"
        assert info.value.status == "DRAFT"
    finally:
        reg.close()


def test_disabled_capability_fails_closed_and_survives_restart(tmp_path: Path) -> None:
    state = tmp_path / "capability.db"
    reg = CapabilityRegistry.load(default_capabilities_dir(), state)
    assert reg.ensure_executable("training.getStatus").executable
    changes = reg.set_status(
        "training.getStatus", "LIFECYCLE_STATUS_DISABLED", changed_by="op", reason="LMS outage"
    )
    assert [(c.previous, c.current) for c in changes] == [
        (LifecycleStatus.ACTIVE, LifecycleStatus.DISABLED)
    ]
    assert changes[0].changed_by == "op"
    with pytest.raises(CapabilityNotExecutable) as info:
        reg.ensure_executable("training.getStatus")
    assert info.value.reason == "CAPABILITY_DISABLED"
    reg.close()

    # A new process over the same state file: the kill switch still holds.
    again = CapabilityRegistry.load(default_capabilities_dir(), state)
    try:
        entry = again.get("training.getStatus")
        assert entry.status is LifecycleStatus.DISABLED
        assert entry.status_changed_at is not None
        with pytest.raises(CapabilityNotExecutable):
            again.ensure_executable("training.getStatus")
        # Other capabilities are untouched (a capability kill switch, PRD §64).
        assert again.ensure_executable("workPermit.get").executable
        again.set_status("training.getStatus", LifecycleStatus.ACTIVE)
        assert again.ensure_executable("training.getStatus").executable
    finally:
        again.close()


def test_a_status_changed_by_another_process_holds_at_the_next_lookup(tmp_path: Path) -> None:
    """Statuses are remembered between lookups, and read again once the file changed."""
    state = tmp_path / "capability.db"
    serving = CapabilityRegistry.load(default_capabilities_dir(), state)
    operator = CapabilityRegistry.load(default_capabilities_dir(), state)
    try:
        assert serving.ensure_executable("training.getStatus").executable  # read, then remembered
        operator.set_status("training.getStatus", "DISABLED", changed_by="op", reason="LMS outage")
        with pytest.raises(CapabilityNotExecutable):
            serving.ensure_executable("training.getStatus")
        operator.set_status("training.getStatus", "ACTIVE")
        assert serving.ensure_executable("training.getStatus").executable
        # Its own change holds at once too.
        serving.set_status("training.getStatus", "DISABLED")
        with pytest.raises(CapabilityNotExecutable):
            serving.ensure_executable("training.getStatus")
    finally:
        serving.close()
        operator.close()


@pytest.mark.parametrize(
    ("status", "executable"),
    [
        ("ACTIVE", True),
        ("DEPRECATED", True),
        ("CANARY", False),
        ("APPROVED", False),
        ("DRAFT", False),
        ("DISABLED", False),
        ("RETIRED", False),
    ],
)
def test_only_active_and_deprecated_execute(
    registry: CapabilityRegistry, status: str, executable: bool
) -> None:
    registry.set_status("workPermit.get", status)
    if executable:
        registry.ensure_executable("workPermit.get")
    else:
        with pytest.raises(CapabilityNotExecutable):
            registry.ensure_executable("workPermit.get")


def test_status_changes_are_validated(registry: CapabilityRegistry) -> None:
    with pytest.raises(StatusChangeRefused) as info:
        registry.set_status("workPermit.get", "LIFECYCLE_STATUS_UNSPECIFIED")
    assert info.value.reason == "STATUS_INVALID"
    with pytest.raises(CapabilityNotFound):
        registry.set_status("nope.nope", "DISABLED")
    registry.set_status("workPermit.get", "RETIRED")
    with pytest.raises(StatusChangeRefused) as info:
        registry.set_status("workPermit.get", "ACTIVE")
    assert info.value.reason == "STATUS_TRANSITION_INVALID"
    assert registry.get("workPermit.get").status is LifecycleStatus.RETIRED


@pytest.mark.parametrize(
    ("capability", "arguments", "field"),
    [
        ("workPermit.get", {}, "permit_id"),
        ("workPermit.get", {"permit_id": 10231}, "permit_id"),
        ("workPermit.get", {"permit_id": "WP 10231; DROP TABLE"}, "permit_id"),
        ("workPermit.get", {"permit_id": "WP-10231", "tenant_id": "globex"}, "tenant_id"),
        ("workPermit.search", {"limit": 0}, "limit"),
        ("workPermit.search", {"status": "OPEN"}, "status"),
        ("workPermit.updateValidity", {"permit_id": "WP-1", "reason": "extend"}, "valid_until"),
        (
            "workPermit.updateValidity",
            {"permit_id": "WP-1", "valid_until": "2026-02-30", "reason": "extend"},
            "valid_until",
        ),
        ("workPermit.release", {"permit_id": "WP-1", "reason": ""}, "reason"),
        ("training.getStatus", {"worker_id": "W-1", "training_codes": ["NR-10", "N R"]},
         "training_codes[1]"),
    ],
)
def test_input_validation_names_the_field(
    registry: CapabilityRegistry, capability: str, arguments: dict[str, object], field: str
) -> None:
    with pytest.raises(InputInvalid) as info:
        registry.validate_input(registry.get(capability).manifest, arguments)
    err = info.value
    assert err.field == field
    assert err.reason == "INPUT_INVALID"
    assert err.violations[0].field == field
    assert field in err.message


def test_valid_input_passes_including_struct_floats(registry: CapabilityRegistry) -> None:
    registry.validate_input(registry.get("workPermit.get").manifest, {"permit_id": "WP-10231"})
    # google.protobuf.Struct carries every number as a double.
    registry.validate_input(registry.get("workPermit.search").manifest, {"limit": 20.0, "valid_on": "2026-11-30"})


def test_output_validation_names_the_field(registry: CapabilityRegistry) -> None:
    manifest = registry.get("risk.evaluate").manifest
    with pytest.raises(OutputInvalid) as info:
        registry.validate_output(manifest, {"permit_id": "WP-1"})
    assert info.value.reason == "OUTPUT_INVALID"
    assert info.value.field in {"assessed", "hazards", "max_score", "open_controls_count",
                                "provenance", "risk_level"}


def test_load_refuses_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(ManifestError):
        CapabilityRegistry.load(tmp_path / "missing", tmp_path / "state.db")


def test_shipped_directory_copy_loads(tmp_path: Path) -> None:
    # The manifests do not depend on their location (e.g. an installed wheel).
    shutil.copytree(default_capabilities_dir(), tmp_path / "caps")
    reg = CapabilityRegistry.load(tmp_path / "caps", tmp_path / "state.db")
    assert len(reg.list()) == len(EXPECTED_IDS)
    reg.close()
