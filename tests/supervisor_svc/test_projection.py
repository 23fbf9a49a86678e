"""Context projection: least context per agent and purpose, never sensitive fields (PRD §23–25)."""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from supervisor_svc.definitions import default_catalog, projection_config
from supervisor_svc.errors import ConfigError
from supervisor_svc.projection import ProjectionConfig, Projector, canonical_json, context_digest, to_struct

PERMIT: dict[str, Any] = {
    "permit_id": "WP-10231",
    "title": "Substation maintenance",
    "description": "Replace breaker",
    "site": "Plant 3",
    "work_type": "ELECTRICAL",
    "status": "PENDING_RELEASE",
    "valid_from": "2026-11-25",
    "valid_until": "2026-12-20",
    "requested_by": "alice",
    "released_at": None,
    "released_by": None,
    "required_trainings": ["NR-10", "NR-35"],
    "workers": [
        {"worker_id": "W-1001", "name": "Ana Souza", "job_title": "Electrician", "company": "ACME",
         "permit_role": "EXECUTOR", "medical_notes": "Hypertension; cleared with restrictions"},
        {"worker_id": "W-1002", "name": "Bruno Lima", "job_title": "Technician", "company": "ACME",
         "permit_role": "OBSERVER", "medical_notes": None},
    ],
}


@pytest.fixture()
def projector() -> Projector:
    """The platform's projection configuration with the shipped domains' whitelists."""
    return Projector(projection_config(default_catalog()))


def _contains_key(value: Any, key: str) -> bool:
    if isinstance(value, dict):
        return key in value or any(_contains_key(v, key) for v in value.values())
    if isinstance(value, list):
        return any(_contains_key(v, key) for v in value)
    return False


def test_training_agent_gets_worker_ids_and_trainings_only(projector: Projector) -> None:
    projected, record = projector.project(PERMIT, "training-agent", "training.verify", source_context_id="exe-1-t1")
    assert projected == {
        "permit_id": "WP-10231", "valid_from": "2026-11-25", "valid_until": "2026-12-20",
        "required_trainings": ["NR-10", "NR-35"], "workers": [{"worker_id": "W-1001"}, {"worker_id": "W-1002"}],
    }
    assert not _contains_key(projected, "medical_notes") and "Hypertension" not in json.dumps(projected)
    assert "workers[].medical_notes" in record.redacted_fields
    assert "workers[].name" in record.redacted_fields and "title" in record.redacted_fields
    assert "permit_id" not in record.redacted_fields
    assert list(record.allowed_fields) == sorted(record.allowed_fields)
    assert (record.target_agent_id, record.purpose, record.source_context_id) == (
        "training-agent", "training.verify", "exe-1-t1")
    assert record.digest == hashlib.sha256(canonical_json(projected)).hexdigest()


@pytest.mark.parametrize(
    ("agent", "purpose", "keys"),
    [
        ("work-permit-agent", "permit.assess", {"permit_id"}),
        ("risk-agent", "risk.assess", {"permit_id", "work_type", "site", "valid_from", "valid_until", "description"}),
        ("compliance-agent", "compliance.check", {"permit_id", "work_type", "required_trainings", "workers"}),
    ],
)
def test_every_agent_gets_its_whitelist(projector: Projector, agent: str, purpose: str, keys: set[str]) -> None:
    projected, _ = projector.project(PERMIT, agent, purpose)
    assert set(projected) == keys
    assert not _contains_key(projected, "medical_notes")


def test_compliance_agent_gets_worker_roles(projector: Projector) -> None:
    projected, _ = projector.project(PERMIT, "compliance-agent", "compliance.check")
    assert projected["workers"] == [{"worker_id": "W-1001", "permit_role": "EXECUTOR"},
                                    {"worker_id": "W-1002", "permit_role": "OBSERVER"}]


@pytest.mark.parametrize(("agent", "purpose"), [("ghost-agent", "training.verify"),
                                                 ("training-agent", "risk.assess"),
                                                 ("training-agent", "")])
def test_unknown_agent_or_purpose_gets_nothing(projector: Projector, agent: str, purpose: str) -> None:
    projected, record = projector.project(PERMIT, agent, purpose)
    assert projected == {} and list(record.allowed_fields) == []
    assert "permit_id" in record.redacted_fields and "workers[].medical_notes" in record.redacted_fields
    assert record.digest == hashlib.sha256(b"{}").hexdigest()


def test_digest_is_stable_and_order_independent(projector: Projector) -> None:
    _, first = projector.project(PERMIT, "training-agent", "training.verify")
    shuffled = dict(reversed(list(copy.deepcopy(PERMIT).items())))
    _, second = projector.project(shuffled, "training-agent", "training.verify")
    assert first.digest == second.digest
    changed = copy.deepcopy(PERMIT)
    changed["workers"][0]["worker_id"] = "W-9999"
    _, third = projector.project(changed, "training-agent", "training.verify")
    assert third.digest != first.digest
    # Changing a redacted field does not change what the agent receives.
    changed = copy.deepcopy(PERMIT)
    changed["workers"][0]["medical_notes"] = "something else"
    _, fourth = projector.project(changed, "training-agent", "training.verify")
    assert fourth.digest == first.digest


def test_digest_matches_after_struct_round_trip(projector: Projector) -> None:
    context = {**PERMIT, "headcount": 2}
    config = ProjectionConfig(frozenset({"medical_notes"}), {"a": {"p": ("permit_id", "headcount")}})
    projected, record = Projector(config).project(context, "a", "p")
    struct = to_struct(projected)
    assert struct["headcount"] == 2.0  # Struct numbers are doubles
    assert context_digest(struct) == record.digest


def test_sensitive_fields_are_dropped_even_inside_selected_subtrees() -> None:
    config = ProjectionConfig(frozenset({"medical_notes"}), {"a": {"p": ("workers",)}})
    projected, record = Projector(config).project(PERMIT, "a", "p")
    assert len(projected["workers"]) == 2 and not _contains_key(projected, "medical_notes")
    assert "workers[].medical_notes" in record.redacted_fields


def test_shape_mismatch_passes_nothing() -> None:
    config = ProjectionConfig(frozenset(), {"a": {"p": ("permit_id[].x", "title.y")}})
    projected, _ = Projector(config).project(PERMIT, "a", "p")
    assert projected == {}


def test_expiry_and_dates_are_recorded(projector: Projector) -> None:
    context = {**PERMIT, "valid_from": dt.date(2026, 11, 25)}
    expires = dt.datetime(2026, 11, 25, 12, 0, tzinfo=dt.UTC)
    projected, record = projector.project(context, "training-agent", "training.verify", expires_at=expires)
    assert projected["valid_from"] == "2026-11-25"
    assert record.expires_at.ToDatetime(tzinfo=dt.UTC) == expires


def test_whitelisting_a_sensitive_field_is_refused(tmp_path: Path) -> None:
    cfg = tmp_path / "projections.yaml"
    cfg.write_text("sensitive_fields: [medical_notes]\nagents:\n  training-agent:\n"
                   "    training.verify: [permit_id, \"workers[].medical_notes\"]\n")
    with pytest.raises(ConfigError) as err:
        ProjectionConfig.load(cfg)
    assert err.value.reason == "PROJECTION_SENSITIVE_FIELD"
    assert err.value.field == "agents.training-agent.training.verify[1]" and err.value.line == 4


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("sensitive_fields: []\nagents:\n  a:\n    p: ['bad path']\n", "agents.a.p[0]"),
        ("agents: {}\n", "sensitive_fields"),
        ("sensitive_fields: []\nagents: {}\nextra: 1\n", "extra"),
    ],
)
def test_bad_projection_file(tmp_path: Path, text: str, field: str) -> None:
    cfg = tmp_path / "projections.yaml"
    cfg.write_text(text)
    with pytest.raises(ConfigError) as err:
        ProjectionConfig.load(cfg)
    assert err.value.field == field


def test_canonical_json_form() -> None:
    assert canonical_json({"b": 1.0, "a": [2.5, "é"]}) == '{"a":[2.5,"é"],"b":1}'.encode()
    with pytest.raises(ValueError):
        canonical_json({"x": float("nan")})


def test_a_tasks_resources_are_the_ids_its_input_names() -> None:
    rules = ProjectionConfig.load().resources
    training_input = {"permit_id": "WP-10231", "required_trainings": ["NR-10"],
                      "workers": [{"worker_id": "W-1001"}, {"worker_id": "W-1002"}, {"worker_id": "W-1001"}]}
    assert rules.resources(training_input, ["training.getStatus"], "acme") == [
        "permit:WP-10231", "worker:W-1001", "worker:W-1002"]
    assert rules.resources({"permit_id": "WP-10231"}, ["workPermit.get"], "acme") == ["permit:WP-10231"]
    # A search works over the whole tenant: only then is the tenant named.
    event_step = {"operation": "affected_by_training", "worker_id": "W-1003", "training_code": "NR-10"}
    assert rules.resources(event_step, ["workPermit.search", "workPermit.get"], "acme") == [
        "worker:W-1003", "tenant:acme"]
    # Nothing that is not an id, nothing from another shape, nothing at all for an empty input.
    odd = {"permit_id": "WP 1; DROP", "workers": {"worker_id": "W-1"}, "worker_id": 7}
    assert rules.resources(odd, ["training.getStatus"], "acme") == []
    assert rules.resources({}, ["workPermit.get"], "acme") == []


def test_a_task_granted_knowledge_names_its_agent_s_scopes_and_no_other() -> None:
    rules = ProjectionConfig.load().resources
    compliance = {"permit_id": "WP-10231", "workers": [{"worker_id": "W-1001"}]}
    assert rules.resources(compliance, ["compliance.getChecklist", "knowledge.search"], "acme",
                           ("compliance.nr", "compliance.nr")) == [
        "permit:WP-10231", "worker:W-1001", "knowledge:compliance.nr"]
    # Without the knowledge capability the agent's scopes are not named; a scope that is not an id never is.
    assert rules.resources(compliance, ["compliance.getChecklist"], "acme", ("compliance.nr",)) == [
        "permit:WP-10231", "worker:W-1001"]
    assert rules.resources({}, ["knowledge.search"], "acme", ("bad scope", "risk.matrix")) == ["knowledge:risk.matrix"]
    # A scope in the task's input is data, not a grant: only the manifest's scopes count.
    assert rules.resources({"scope": "training.nr"}, ["knowledge.search"], "acme") == []


def test_resource_rules_are_data_and_tenant_is_reserved(tmp_path: Path) -> None:
    cfg = tmp_path / "projections.yaml"
    cfg.write_text("sensitive_fields: []\nagents: {}\nresources:\n  fields:\n    site_id: site\n"
                   "  tenant_wide: [site.search]\n")
    rules = ProjectionConfig.load(cfg).resources
    assert rules.resources({"site_id": "S-1", "permit_id": "WP-1"}, ["site.search"], "globex") == [
        "site:S-1", "tenant:globex"]
    cfg.write_text("sensitive_fields: []\nagents: {}\n")
    assert ProjectionConfig.load(cfg).resources.resources({"permit_id": "WP-1"}, [], "acme") == []
    cfg.write_text("sensitive_fields: []\nagents: {}\nresources:\n  fields:\n    tenant_id: tenant\n")
    with pytest.raises(ConfigError) as err:
        ProjectionConfig.load(cfg)
    assert (err.value.reason, err.value.field, err.value.line) == (
        "RESOURCE_TYPE_RESERVED", "resources.fields.tenant_id", 5)
    cfg.write_text("sensitive_fields: []\nagents: {}\nresources:\n  fields:\n    scope: knowledge\n")
    with pytest.raises(ConfigError) as err:
        ProjectionConfig.load(cfg)
    assert (err.value.reason, err.value.field) == ("RESOURCE_TYPE_RESERVED", "resources.fields.scope")
