"""Loading the policy directory: validated once, refused loudly when wrong."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from agentmesh.v1 import tenant_service_pb2 as tenant_pb2
from policy_svc.engine import DEFAULT_POLICY_DIR, PolicyEngine
from policy_svc.errors import PolicyLoadError
from policy_svc.tenants import check_definitions

from .conftest import AGENTS, with_demo_tenants


def _shipped_policy_ids() -> set[str]:
    ids: set[str] = set()
    for path in DEFAULT_POLICY_DIR.glob("*.cedar"):
        ids.update(re.findall(r'@id\("([^"]+)"\)', path.read_text(encoding="utf-8")))
    return ids


def test_shipped_policies_load_with_every_id(engine: PolicyEngine) -> None:
    info = engine.info()
    assert set(info.policy_ids) == _shipped_policy_ids()
    assert list(info.policy_ids) == sorted(info.policy_ids)
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", info.policy_version)


def test_the_policy_set_declares_its_release(policy_dir: Path) -> None:
    assert re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", PolicyEngine.load().info().policy_release)
    (policy_dir / "release.yaml").unlink(missing_ok=True)
    assert PolicyEngine.load(policy_dir).info().policy_release == ""
    for bad in ("release: 1.0\n", "release: \"one\"\n", "release: \"1.0.0\"\nextra: 1\n", "[\n"):
        (policy_dir / "release.yaml").write_text(bad)
        with pytest.raises(PolicyLoadError) as info:
            PolicyEngine.load(policy_dir)
        assert "release.yaml" in str(info.value)


def test_version_is_stable_across_loads(engine: PolicyEngine, policy_dir: Path) -> None:
    assert PolicyEngine.load(policy_dir).version == PolicyEngine.load().version
    assert with_demo_tenants(PolicyEngine.load(policy_dir)).version == engine.version


def test_version_changes_with_the_tenants_roles(policy_dir: Path) -> None:
    engine = PolicyEngine.load(policy_dir)
    bare = engine.version
    with_demo = with_demo_tenants(engine).version
    assert bare != with_demo
    # Another role for globex: another version; the same roles again: the same version.
    (checked,) = check_definitions([tenant_pb2.TenantDefinition(
        tenant_id="globex", display_name="Globex", roles={"viewer": tenant_pb2.TenantRole(
            capabilities=["workPermit.get"])})], engine, AGENTS)
    assert engine.set_tenants({"globex": checked[1]}) not in (bare, with_demo)
    assert with_demo_tenants(engine).version == with_demo


@pytest.mark.parametrize(
    ("file", "edit"),
    [
        ("tenant_isolation.cedar", lambda t: t + "\n// a comment is a change too\n"),
        ("schema.cedarschema", lambda t: t + "\n"),
        ("entities.yaml", lambda t: t + "\n# reviewed\n"),
    ],
    ids=["policy", "schema", "data"],
)
def test_version_changes_with_any_input(
    engine: PolicyEngine, policy_dir: Path, file: str, edit: Callable[[str], str]
) -> None:
    path = policy_dir / file
    path.write_text(edit(path.read_text(encoding="utf-8")), encoding="utf-8")
    assert PolicyEngine.load(policy_dir).version != engine.version


def test_version_changes_when_a_policy_moves_to_another_file(engine: PolicyEngine, policy_dir: Path) -> None:
    source = policy_dir / "tenant_isolation.cedar"
    (policy_dir / "zz_moved.cedar").write_text(source.read_text(encoding="utf-8"))
    source.write_text("// moved\n", encoding="utf-8")
    assert PolicyEngine.load(policy_dir).version != engine.version


def _load_error(policy_dir: Path) -> PolicyLoadError:
    with pytest.raises(PolicyLoadError) as caught:
        PolicyEngine.load(policy_dir)
    return caught.value


def test_policy_failing_validation_stops_loading_with_its_id(policy_dir: Path) -> None:
    (policy_dir / "zz_bad.cedar").write_text(
        '@id("test.reads_missing_attribute")\n'
        "forbid (principal, action, resource)\n"
        'when { context.no_such_field == "x" };\n',
        encoding="utf-8",
    )
    error = _load_error(policy_dir)
    assert error.reason == "POLICY_VALIDATION_FAILED"
    assert error.policy_id == "test.reads_missing_attribute"
    assert "test.reads_missing_attribute" in str(error)
    assert "no_such_field" in str(error)  # Cedar's own message is kept
    assert error.metadata["policy_id"] == "test.reads_missing_attribute"
    assert error.path is not None and error.path.endswith("zz_bad.cedar")


def test_type_error_names_the_right_policy_among_several(policy_dir: Path) -> None:
    (policy_dir / "zz_bad.cedar").write_text(
        '@id("test.fine")\nforbid (principal, action, resource) when { false };\n'
        '@id("test.type_error")\n'
        'forbid (principal, action, resource) when { context.delegation_depth == "5" && '
        'context.delegation_depth > "x" };\n',
        encoding="utf-8",
    )
    error = _load_error(policy_dir)
    assert error.reason == "POLICY_VALIDATION_FAILED"
    assert error.policy_id == "test.type_error"


def test_policy_without_id_is_refused(policy_dir: Path) -> None:
    (policy_dir / "zz_bad.cedar").write_text("forbid (principal, action, resource) when { false };\n", encoding="utf-8")
    error = _load_error(policy_dir)
    assert error.reason == "POLICY_ID_MISSING"
    assert "zz_bad.cedar" in str(error)


def test_duplicate_id_is_refused(policy_dir: Path) -> None:
    (policy_dir / "zz_bad.cedar").write_text(
        '@id("tenant.isolation")\nforbid (principal, action, resource) when { false };\n',
        encoding="utf-8",
    )
    error = _load_error(policy_dir)
    assert error.reason == "POLICY_ID_DUPLICATE"
    assert error.policy_id == "tenant.isolation"


def test_unparsable_policy_is_refused(policy_dir: Path) -> None:
    (policy_dir / "zz_bad.cedar").write_text('@id("x")\npermit (principal,', encoding="utf-8")
    assert _load_error(policy_dir).reason == "POLICY_PARSE_FAILED"


def test_template_is_refused(policy_dir: Path) -> None:
    (policy_dir / "zz_bad.cedar").write_text(
        '@id("test.template")\npermit (principal == ?principal, action, resource);\n',
        encoding="utf-8",
    )
    assert _load_error(policy_dir).reason == "POLICY_TEMPLATE_UNSUPPORTED"


@pytest.mark.parametrize(
    "policy",
    [
        '@id("t")\n@obligation("confirmation")\npermit (principal, action, resource);\n',
        '@id("t")\n@obligation("coffee")\nforbid (principal, action, resource);\n',
    ],
    ids=["on-a-permit", "unknown-kind"],
)
def test_bad_obligation_annotation_is_refused(policy_dir: Path, policy: str) -> None:
    (policy_dir / "zz_bad.cedar").write_text(policy, encoding="utf-8")
    error = _load_error(policy_dir)
    assert error.reason == "POLICY_VALIDATION_FAILED"
    assert error.policy_id == "t"


def test_invalid_schema_is_refused(policy_dir: Path) -> None:
    (policy_dir / "schema.cedarschema").write_text("namespace AgentMesh { entity", "utf-8")
    assert _load_error(policy_dir).reason == "SCHEMA_INVALID"


def test_missing_schema_is_refused(policy_dir: Path) -> None:
    (policy_dir / "schema.cedarschema").unlink()
    assert _load_error(policy_dir).reason == "SCHEMA_INVALID"


def test_missing_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PolicyLoadError) as caught:
        PolicyEngine.load(tmp_path / "nowhere")
    assert caught.value.reason == "POLICY_DIR_INVALID"


def test_directory_without_policies_is_refused(policy_dir: Path) -> None:
    for path in policy_dir.glob("*.cedar"):
        path.unlink()
    assert _load_error(policy_dir).reason == "POLICY_DIR_INVALID"


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("  workPermit.get: {kind: read}", "  workPermit.get: {kind: delete}", "kind"),
        ("system_actors:", "colour: blue\nsystem_actors:", "colour"),
        ("      - workPermit.get\n", "      - workPermit.delete\n", "unknown capability 'workPermit.delete'"),
        ("system_actors:", "tenants: {acme: {roles: {}}}\nsystem_actors:", "tenants are data"),
        ("  workPermit.release: {kind: mutate}", "  workPermit.release: {kind: mutate, knowledge: true}",
         "capabilities.workPermit.release: a knowledge capability is of kind read"),
    ],
    ids=["bad-kind", "unknown-key", "system-actor-unknown-capability", "tenants-in-the-file",
         "mutating-knowledge-capability"],
)
def test_invalid_data_is_refused(policy_dir: Path, old: str, new: str, message: str) -> None:
    path = policy_dir / "entities.yaml"
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    error = _load_error(policy_dir)
    assert error.reason == "DATA_INVALID"
    assert message in str(error)


def test_yaml_that_is_not_yaml_is_refused(policy_dir: Path) -> None:
    (policy_dir / "entities.yaml").write_text("tenants: [unclosed", encoding="utf-8")
    assert _load_error(policy_dir).reason == "DATA_INVALID"
