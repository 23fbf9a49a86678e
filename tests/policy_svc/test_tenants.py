"""Tenants as data in the policy engine: checked, applied at once, persisted, audited, operators only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentmesh import errors
from agentmesh.tenant_file import load_tenant_file
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import tenant_service_pb2 as pb
from policy_svc.engine import PolicyEngine
from policy_svc.errors import InvalidRequestError
from policy_svc.model import Effect
from policy_svc.tenants import AdministrationDenied, TenantDirectory, TenantNotConfigured, TenantStore

from .conftest import AGENTS, DEMO_TENANTS

OPERATOR = "spiffe://agentmesh.local/client/operator"


class Audit:
    def __init__(self) -> None:
        self.records: list[audit_pb2.AuditRecord] = []
        self.down = False

    def record(self, event_type: int, **fields: Any) -> None:
        if self.down:
            raise errors.Unavailable("connection refused", reason="UNAVAILABLE")
        self.records.append(audit_pb2.AuditRecord(event_type=event_type, **fields))

    def record_durably(self, event_type: int, **fields: Any) -> None:
        self.records.append(audit_pb2.AuditRecord(event_type=event_type, **fields))


def initech(**changes: Any) -> pb.TenantDefinition:
    definition = pb.TenantDefinition(
        tenant_id="initech", display_name="Initech",
        roles={"viewer": pb.TenantRole(capabilities=["workPermit.get", "workPermit.search"]),
               "analyst": pb.TenantRole(includes=["viewer"], capabilities=["training.getStatus", "risk.evaluate",
                                                                           "compliance.getChecklist"])},
        allowed_agents=list(AGENTS), on_exceeded={"MAX_COST_EXCEEDED": pb.LIMIT_ACTION_HUMAN_REVIEW})
    definition.limits.max_tasks = 12
    for name, value in changes.items():
        if name == "roles":
            definition.roles[value[0]].CopyFrom(value[1])
        else:
            setattr(definition, name, value)
    return definition


@pytest.fixture()
def directory(tmp_path: Path, make_request: Any) -> Any:
    engine = PolicyEngine.load()
    audit = Audit()
    store = TenantStore(tmp_path / "tenants.db")
    yield TenantDirectory(store, engine, agents=AGENTS, operators=[OPERATOR], audit=audit), engine, audit, store
    store.close()


def invoke(engine: PolicyEngine, make_request: Any, tenant: str, roles: tuple[str, ...]) -> Any:
    return engine.authorize(make_request(tenant=tenant, roles=roles, capability="training.getStatus"),
                            kill_switches=())


def test_a_tenant_that_is_not_configured_is_refused_by_name(directory: Any, make_request: Any) -> None:
    _, engine, _, _ = directory
    decision = invoke(engine, make_request, "initech", ("analyst",))
    assert decision.effect is Effect.DENY and "tenant.not_configured" in decision.reason_codes


def test_an_applied_tenant_is_in_force_at_once_and_recorded_before(directory: Any, make_request: Any) -> None:
    tenants, engine, audit, store = directory
    before = engine.version
    (applied,), version = tenants.apply([initech()], OPERATOR)
    assert applied.change == pb.TENANT_CHANGE_CREATED and applied.tenant.revision == 1
    assert applied.tenant.changed_by == OPERATOR and len(applied.tenant.digest) == 64
    assert version == engine.version != before
    assert invoke(engine, make_request, "initech", ("analyst",)).effect is Effect.ALLOW
    # Roles are the tenant's own: a viewer of initech may not read trainings.
    assert invoke(engine, make_request, "initech", ("viewer",)).effect is Effect.DENY
    (record,) = audit.records
    assert record.event_type == audit_pb2.AUDIT_EVENT_TYPE_TENANT_CHANGED and record.tenant_id == "initech"
    assert record.reason_codes[:3] == ["CREATED", "revision=1", f"changed_by={OPERATOR}"]
    assert record.input_digest == applied.tenant.digest
    assert tenants.get("initech").limits.max_tasks == 12
    assert store.history("initech") == [(1, applied.tenant.digest, OPERATOR)]


def test_the_same_definition_again_changes_nothing_and_records_nothing(directory: Any) -> None:
    tenants, engine, audit, _ = directory
    tenants.apply([initech()], OPERATOR)
    version = engine.version
    (again,), _ = tenants.apply([initech()], OPERATOR)
    assert again.change == pb.TENANT_CHANGE_UNCHANGED and again.tenant.revision == 1
    assert engine.version == version and len(audit.records) == 1


def test_a_change_is_a_new_revision_that_replaces_the_roles(directory: Any, make_request: Any) -> None:
    tenants, engine, _, store = directory
    tenants.apply([initech()], OPERATOR)
    (changed,), _ = tenants.apply([initech(roles=("viewer", pb.TenantRole(capabilities=["training.getStatus"])))],
                                  OPERATOR)
    assert changed.change == pb.TENANT_CHANGE_UPDATED and changed.tenant.revision == 2
    assert invoke(engine, make_request, "initech", ("viewer",)).effect is Effect.ALLOW
    assert [r for r, _, _ in store.history("initech")] == [1, 2]


def test_tenants_survive_a_restart(directory: Any, tmp_path: Path, make_request: Any) -> None:
    tenants, _, _, store = directory
    tenants.apply([initech()], OPERATOR)
    store.close()
    engine = PolicyEngine.load()
    reopened = TenantStore(tmp_path / "tenants.db")
    TenantDirectory(reopened, engine, agents=AGENTS, operators=[OPERATOR], audit=None)
    assert invoke(engine, make_request, "initech", ("analyst",)).effect is Effect.ALLOW
    reopened.close()


def test_only_an_operator_may_apply_and_the_refusal_is_recorded(directory: Any, make_request: Any) -> None:
    tenants, engine, audit, _ = directory
    with pytest.raises(AdministrationDenied) as caught:
        tenants.apply([initech()], "spiffe://agentmesh.local/client/operator-evil")
    assert caught.value.metadata["field"] == "tenants[0].tenant_id"
    assert "tenant.administer_requires_operator" in caught.value.metadata["reason_codes"]
    (record,) = audit.records
    assert record.event_type == audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED and "POLICY_DENIED" in record.reason_codes
    assert invoke(engine, make_request, "initech", ("analyst",)).effect is Effect.DENY


def test_audit_down_changes_nothing(directory: Any, make_request: Any) -> None:
    tenants, engine, audit, _ = directory
    audit.down = True
    with pytest.raises(errors.Unavailable) as caught:
        tenants.apply([initech()], OPERATOR)
    assert caught.value.reason == "AUDIT_UNAVAILABLE"
    with pytest.raises(TenantNotConfigured):
        tenants.get("initech")
    assert invoke(engine, make_request, "initech", ("analyst",)).effect is Effect.DENY


def test_audit_lost_midway_through_a_change_of_two_tenants_records_the_first_as_not_applied(
        directory: Any, make_request: Any) -> None:
    tenants, engine, audit, _ = directory
    record = audit.record

    def first_only(event_type: int, **fields: Any) -> None:
        if audit.records:
            raise errors.Unavailable("connection refused", reason="UNAVAILABLE")
        record(event_type, **fields)

    audit.record = first_only  # type: ignore[method-assign]
    with pytest.raises(errors.Unavailable) as caught:
        tenants.apply([initech(), initech(tenant_id="umbrella", display_name="Umbrella")], OPERATOR)
    assert caught.value.reason == "AUDIT_UNAVAILABLE"
    changed, not_applied = audit.records
    assert changed.tenant_id == "initech" and changed.outcome == audit_pb2.AUDIT_OUTCOME_SUCCESS
    assert (not_applied.tenant_id, not_applied.outcome) == ("initech", audit_pb2.AUDIT_OUTCOME_FAILURE)
    assert not_applied.reason_codes[:2] == ["NOT_APPLIED", "AUDIT_UNAVAILABLE"]
    for tenant in ("initech", "umbrella"):
        with pytest.raises(TenantNotConfigured):
            tenants.get(tenant)
        assert invoke(engine, make_request, tenant, ("analyst",)).effect is Effect.DENY


@pytest.mark.parametrize(("change", "field", "message"), [
    ({"tenant_id": "Init/ech"}, "tenants[0].tenant_id", "lowercase"),
    ({"display_name": ""}, "tenants[0].display_name", "required"),
    ({"roles": ("viewer", pb.TenantRole(capabilities=["workPermit.get", "worker.delete"]))},
     "tenants[0].roles.viewer.capabilities[1]", "unknown capability 'worker.delete'"),
    ({"roles": ("viewer", pb.TenantRole(includes=["nobody"]))}, "tenants[0].roles.viewer.includes[0]",
     "unknown included role"),
    ({"roles": ("viewer", pb.TenantRole(privileges=["root"]))}, "tenants[0].roles.viewer.privileges[0]",
     "unknown privilege 'root'"),
    ({"roles": ("viewer", pb.TenantRole(includes=["analyst"]))}, "tenants[0].roles.", "include each other"),
    ({"roles": ("ad/min", pb.TenantRole())}, "tenants[0].roles.ad/min", "role name"),
])
def test_a_bad_definition_names_the_field_and_changes_nothing(directory: Any, change: dict[str, Any], field: str,
                                                              message: str) -> None:
    tenants, engine, audit, _ = directory
    version = engine.version
    with pytest.raises(InvalidRequestError) as caught:
        tenants.apply([initech(**change)], OPERATOR)
    assert caught.value.field.startswith(field) and message in caught.value.message
    assert engine.version == version and audit.records == []


def test_agents_limits_and_actions_are_checked(directory: Any) -> None:
    tenants, _, _, _ = directory
    bad_agent = initech()
    bad_agent.allowed_agents.append("ghost-agent")
    bad_limit = initech()
    bad_limit.limits.max_tasks = -1
    bad_action = initech()
    bad_action.on_exceeded["MAX_COFFEE_EXCEEDED"] = pb.LIMIT_ACTION_STOP
    no_action = initech()
    no_action.on_exceeded["default"] = pb.LIMIT_ACTION_UNSPECIFIED
    for definition, field in ((bad_agent, "tenants[0].allowed_agents[6]"), (bad_limit, "tenants[0].limits.max_tasks"),
                              (bad_action, "tenants[0].on_exceeded.MAX_COFFEE_EXCEEDED"),
                              (no_action, "tenants[0].on_exceeded.default")):
        with pytest.raises(InvalidRequestError) as caught:
            tenants.apply([definition], OPERATOR)
        assert caught.value.field == field
    with pytest.raises(InvalidRequestError) as caught:
        tenants.apply([initech(), initech()], OPERATOR)
    assert caught.value.field == "tenants[1].tenant_id"


def test_one_bad_tenant_applies_none(directory: Any) -> None:
    tenants, _, _, _ = directory
    with pytest.raises(InvalidRequestError):
        tenants.apply([initech(), initech(tenant_id="umbrella", display_name="")], OPERATOR)
    with pytest.raises(TenantNotConfigured):
        tenants.get("initech")


def test_the_demo_tenants_file_applies(directory: Any, make_request: Any) -> None:
    tenants, engine, _, _ = directory
    results, _ = tenants.apply(load_tenant_file(DEMO_TENANTS).definitions, OPERATOR)
    assert [(r.tenant.tenant_id, r.change) for r in results] == [
        ("acme", pb.TENANT_CHANGE_CREATED), ("globex", pb.TENANT_CHANGE_CREATED)]
    assert invoke(engine, make_request, "acme", ("analyst",)).effect is Effect.ALLOW
    # globex's viewer does not read trainings; acme's does.
    assert invoke(engine, make_request, "globex", ("viewer",)).effect is Effect.DENY
    assert invoke(engine, make_request, "acme", ("viewer",)).effect is Effect.ALLOW
