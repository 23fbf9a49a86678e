"""Agent registry: manifests validated at start, status persisted with history (PRD §8, §57, §63)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from agentmesh.v1 import common_pb2
from supervisor_svc.errors import (
    AgentDependencyError,
    AgentManifestError,
    AgentNotActive,
    AgentNotFound,
    RequestInvalid,
    StatusChangeRefused,
)
from supervisor_svc.registry import (
    AgentRegistry,
    LifecycleStatus,
    default_agents_dir,
    load_manifests,
    status_from_proto,
)

AGENTS = ["compliance-agent", "employee-agent", "medical-agent", "risk-agent", "risk-rules-agent", "training-agent",
          "work-permit-agent"]


def _copy_agents(tmp_path: Path) -> Path:
    target = tmp_path / "agents"
    shutil.copytree(default_agents_dir(), target)
    return target


def _edit(path: Path, **changes: object) -> None:
    data = yaml.safe_load(path.read_text())
    data.update(changes)
    path.write_text(yaml.safe_dump(data))


def test_shipped_manifests_load(registry: AgentRegistry) -> None:
    entries = registry.list()
    assert [e.agent_id for e in entries] == AGENTS
    assert all(e.status is LifecycleStatus.ACTIVE for e in entries)
    training = registry.get("training-agent")
    assert training.manifest.capabilities == ("training.getStatus",)
    assert training.manifest.allowed_delegations == ()
    assert "training-agent" in registry.get("work-permit-agent").manifest.allowed_delegations
    assert set(registry.get("work-permit-agent").manifest.capabilities) == {
        "workPermit.get", "workPermit.search", "workPermit.release", "workPermit.updateValidity"}


def test_to_proto_carries_every_field(registry: AgentRegistry) -> None:
    msg = registry.get("training-agent").to_proto()
    assert isinstance(msg, common_pb2.AgentDefinition)
    assert msg.agent_id == "training-agent" and msg.version == "1.0.0"
    assert msg.status == common_pb2.LIFECYCLE_STATUS_ACTIVE
    assert msg.spiffe_id == "spiffe://agentmesh.local/agent/training-agent"
    assert list(msg.dependencies.capabilities) == ["training.getStatus@^2.0"]
    assert msg.risk_profile.max_risk == common_pb2.RISK_LEVEL_LOW
    assert msg.input_schema["type"] == "object"
    assert msg.cost == 1.0


def test_unknown_agent(registry: AgentRegistry) -> None:
    with pytest.raises(AgentNotFound) as err:
        registry.get("nobody-agent")
    assert err.value.reason == "AGENT_NOT_FOUND" and err.value.field == "agent_id"


def test_disabled_takes_effect_at_once_and_survives_restart(tmp_path: Path) -> None:
    db = tmp_path / "agents.db"
    with AgentRegistry(db) as reg:
        reg.ensure_active("training-agent")
        changed = reg.set_status("training-agent", LifecycleStatus.DISABLED, "kill switch drill", "client:ops")
        assert changed.status is LifecycleStatus.DISABLED and changed.changed_by == "client:ops"
        with pytest.raises(AgentNotActive) as err:
            reg.ensure_active("training-agent")
        assert err.value.reason == "AGENT_DISABLED"
    with AgentRegistry(db) as again:
        entry = again.get("training-agent")
        assert entry.status is LifecycleStatus.DISABLED and entry.status_reason == "kill switch drill"
        assert again.get("risk-agent").status is LifecycleStatus.ACTIVE
        again.set_status("training-agent", "ACTIVE", "drill over", "client:ops")
        history = again.history("training-agent")
    assert [(h.old_status, h.new_status) for h in history] == [
        (LifecycleStatus.ACTIVE, LifecycleStatus.DISABLED), (LifecycleStatus.DISABLED, LifecycleStatus.ACTIVE)]
    assert [h.reason for h in history] == ["kill switch drill", "drill over"]


def test_status_change_seen_by_another_registry_on_the_same_database(tmp_path: Path) -> None:
    db = tmp_path / "agents.db"
    with AgentRegistry(db) as a, AgentRegistry(db) as b:
        assert b.get("risk-agent").status is LifecycleStatus.ACTIVE  # b has read the file before the change
        a.set_status("risk-agent", LifecycleStatus.DISABLED, "incident", "client:ops")
        assert b.get("risk-agent").status is LifecycleStatus.DISABLED
        with pytest.raises(AgentNotActive):
            b.ensure_active("risk-agent")
        assert [h.reason for h in b.history("risk-agent")] == ["incident"]
        assert {e.agent_id: e.status for e in b.shipped()}["risk-agent"] is LifecycleStatus.DISABLED
        [(entry, changes)] = b.shipped_histories("risk-agent")
        assert entry.status is LifecycleStatus.DISABLED and [h.reason for h in changes] == ["incident"]


def test_the_shipped_versions_with_their_histories_are_one_read_of_an_unchanged_file(tmp_path: Path) -> None:
    with AgentRegistry(tmp_path / "agents.db") as registry:
        registry.set_status("risk-agent", LifecycleStatus.DISABLED, "incident", "client:ops")
        expected = [(e, registry.history(e.agent_id)) for e in registry.shipped()]
        statements: list[str] = []
        registry._db.set_trace_callback(statements.append)
        assert registry.shipped_histories() == expected
        assert registry.shipped_histories("risk-agent") == [(e, h) for e, h in expected if e.agent_id == "risk-agent"]
        assert statements == ["PRAGMA data_version"] * 2  # the file is unchanged: nothing read again


def test_setting_the_same_status_records_nothing(registry: AgentRegistry) -> None:
    registry.set_status("risk-agent", LifecycleStatus.ACTIVE, "no-op", "client:ops")
    assert registry.history("risk-agent") == []


def test_retired_is_terminal(registry: AgentRegistry) -> None:
    registry.set_status("risk-agent", LifecycleStatus.DEPRECATED, "being replaced", "client:ops")
    registry.set_status("risk-agent", LifecycleStatus.RETIRED, "replaced", "client:ops")
    with pytest.raises(AgentNotActive) as err:
        registry.ensure_active("risk-agent")
    assert err.value.reason == "AGENT_RETIRED"
    with pytest.raises(StatusChangeRefused):
        registry.set_status("risk-agent", LifecycleStatus.ACTIVE, "bring back", "client:ops")


@pytest.mark.parametrize(
    ("status", "reason", "by", "code", "field"),
    [
        ("BROKEN", "x", "ops", "STATUS_INVALID", "status"),
        (LifecycleStatus.DISABLED, "  ", "ops", "REASON_REQUIRED", "reason"),
        (LifecycleStatus.DISABLED, "r" * 1001, "ops", "REASON_TOO_LONG", "reason"),
        (LifecycleStatus.DISABLED, "why", "", "ACTOR_REQUIRED", "by"),
    ],
)
def test_set_status_validates_input(
    registry: AgentRegistry, status: str, reason: str, by: str, code: str, field: str
) -> None:
    with pytest.raises(RequestInvalid) as err:
        registry.set_status("risk-agent", status, reason, by)
    assert (err.value.reason, err.value.field) == (code, field)
    assert registry.get("risk-agent").status is LifecycleStatus.ACTIVE


def test_lifecycle_from_proto() -> None:
    assert status_from_proto(common_pb2.LIFECYCLE_STATUS_DISABLED) is LifecycleStatus.DISABLED
    for bad in (common_pb2.LIFECYCLE_STATUS_UNSPECIFIED, 999):
        with pytest.raises(RequestInvalid) as err:
            status_from_proto(bad)
        assert err.value.field == "status"


# --- bad manifests -------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"version": "one"}, "version"),
        ({"domains": []}, "domains"),
        ({"capabilities": ["Not A Capability"]}, "capabilities[0]"),
        ({"status": "SOMETIMES"}, "status"),
        ({"cost": -1}, "cost"),
        ({"surprise": 1}, "surprise"),
        ({"agent_id": "other-agent"}, "agent_id"),
        ({"allowed_delegations": ["training-agent"]}, "allowed_delegations[0]"),  # itself
        ({"allowed_delegations": ["ghost-agent"]}, "allowed_delegations[0]"),
        ({"fallback": "ghost-agent"}, "fallback"),
        ({"fallback": "training-agent"}, "fallback"),  # itself
        ({"capabilities": ["training.getStatus", "training.getStatus"]}, "capabilities[1]"),
        ({"input_schema": {"type": "array"}}, "input_schema"),
        ({"input_schema": {"type": "object", "properties": {"a": {"type": 5}}}}, "input_schema.properties.a.type"),
        ({"dependencies": {"capabilities": ["training.getStatus"]}}, "dependencies.capabilities[0]"),
        ({"dependencies": {"capabilities": ["risk.evaluate@^1.0"]}}, "dependencies.capabilities[0]"),
        ({"spiffe_id": "spiffe://agentmesh.local/agent/risk-agent"}, "spiffe_id"),
        ({"risk_profile": {"max_risk": "LOW"}}, "risk_profile.can_mutate"),
    ],
)
def test_bad_manifest_names_file_and_field(tmp_path: Path, changes: dict[str, object], field: str) -> None:
    agents = _copy_agents(tmp_path)
    _edit(agents / "training-agent.yaml", **changes)
    with pytest.raises(AgentManifestError) as err:
        AgentRegistry(tmp_path / "db.sqlite", agents)
    assert err.value.field == field
    assert "training-agent.yaml" in str(err.value)


def test_syntax_error_and_duplicate_keys_name_the_line(tmp_path: Path) -> None:
    agents = _copy_agents(tmp_path)
    (agents / "risk-agent.yaml").write_text("agent_id: risk-agent\nagent_id: risk-agent\n")
    with pytest.raises(AgentManifestError) as err:
        load_manifests(agents)
    assert err.value.line == 2 and "duplicate key" in err.value.message
    (agents / "risk-agent.yaml").write_text("agent_id: [unclosed\n")
    with pytest.raises(AgentManifestError) as err:
        load_manifests(agents)
    assert err.value.reason == "CONFIG_SYNTAX_INVALID" and "risk-agent.yaml" in str(err.value)


def test_empty_or_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(AgentManifestError):
        load_manifests(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(AgentManifestError):
        load_manifests(tmp_path / "empty")


# --- dependency hook -------------------------------------------------------------------------------------

class _Incompatible(Exception):
    reason = "DEPENDENCY_VERSION_INCOMPATIBLE"


def test_dependency_checker_is_called_for_every_declared_dependency(tmp_path: Path) -> None:
    seen: list[str] = []
    with AgentRegistry(tmp_path / "db", dependency_checker=seen.append):
        pass
    assert "training.getStatus@^2.0" in seen and "risk.evaluate@^1.0" in seen


def test_unmet_dependency_blocks_start(tmp_path: Path) -> None:
    def checker(spec: str) -> None:
        if spec.startswith("training.getStatus"):
            raise _Incompatible("available: 1.4.0")

    with pytest.raises(AgentDependencyError) as err:
        AgentRegistry(tmp_path / "db", dependency_checker=checker)
    e = err.value
    assert e.agent_id == "training-agent" and e.dependency == "training.getStatus@^2.0"
    assert e.cause_reason == "DEPENDENCY_VERSION_INCOMPATIBLE"
    assert e.field == "dependencies.capabilities[0]" and e.file and e.file.endswith("training-agent.yaml")


def test_activation_rechecks_dependencies(tmp_path: Path) -> None:
    broken = {"on": False}

    def checker(spec: str) -> None:
        if broken["on"] and spec.startswith("risk.evaluate"):
            raise _Incompatible("retired")

    with AgentRegistry(tmp_path / "db", dependency_checker=checker) as reg:
        reg.set_status("risk-agent", LifecycleStatus.DISABLED, "maintenance", "ops")
        broken["on"] = True
        with pytest.raises(AgentDependencyError):
            reg.set_status("risk-agent", LifecycleStatus.ACTIVE, "back", "ops")
        assert reg.get("risk-agent").status is LifecycleStatus.DISABLED


@pytest.mark.parametrize("agent_id", AGENTS)
def test_output_schemas_accept_a_contract_result(registry: AgentRegistry, agent_id: str) -> None:
    import jsonschema

    result: dict[str, object] = {"verdict": "PASS", "subjects": {"permit:WP-1/status": "PASS"}}
    if agent_id == "work-permit-agent":
        result.update(permit_found=True, permit={"permit_id": "WP-1"})
    jsonschema.validate(result, registry.get(agent_id).manifest.output_schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**result, "verdict": "MAYBE"}, registry.get(agent_id).manifest.output_schema)


def test_only_lifecycle_edges_are_accepted(registry: AgentRegistry) -> None:
    # DRAFT -> ACTIVE used to be accepted: an agent skipped validation, evaluation and approval.
    registry.set_status("risk-agent", LifecycleStatus.DEPRECATED, "to retire", "client:ops")
    with pytest.raises(StatusChangeRefused) as err:
        registry.set_status("risk-agent", LifecycleStatus.CANARY, "skip", "client:ops")
    assert (err.value.reason, err.value.field) == ("TRANSITION_NOT_ALLOWED", "status")
    assert "DEPRECATED to CANARY" in err.value.message
    assert registry.get("risk-agent").status is LifecycleStatus.DEPRECATED
    assert len(registry.history("risk-agent")) == 1


def test_a_disabled_agent_returns_only_where_it_came_from(registry: AgentRegistry) -> None:
    registry.set_status("risk-agent", LifecycleStatus.DEPRECATED, "old", "client:ops")
    registry.set_status("risk-agent", LifecycleStatus.DISABLED, "incident", "client:ops")
    with pytest.raises(StatusChangeRefused):
        registry.set_status("risk-agent", LifecycleStatus.ACTIVE, "sneak back", "client:ops")
    registry.set_status("risk-agent", LifecycleStatus.DEPRECATED, "incident over", "client:ops")
    assert registry.get("risk-agent").status is LifecycleStatus.DEPRECATED
