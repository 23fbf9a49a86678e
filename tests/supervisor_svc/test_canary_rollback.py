"""The supervisor's own lifecycle move (PRD §57): a failing canary rolled back, and the fallback a manifest names."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentmesh import assertion, errors
from agentmesh.vocabulary import LifecycleStatus as S
from agentmesh.vocabulary import RiskLevel
from supervisor_svc.errors import AgentManifestError, RequestInvalid
from supervisor_svc.lifecycle import TransitionNotAllowed
from supervisor_svc.onboarding import CapabilityFacts, Onboarding, ReleaseBlocked, ReleaseManager
from supervisor_svc.registry import AgentRegistry, default_agents_dir, manifest_from_data

OLGA = assertion.UserIdentity("acme", "olga", ("agent-operator",), "s", "c")
ADAM = assertion.UserIdentity("acme", "adam", ("agent-approver",), "s", "c")
SPIFFE = "spiffe://agentmesh.local/agent/training-agent"
CAPS = [CapabilityFacts("training.getStatus", "2.1.0", S.ACTIVE, RiskLevel.LOW, False, False, False)]


def manifest(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((default_agents_dir() / "training-agent.yaml").read_text())
    data["version"] = "1.1.0"
    data.update(changes)
    return data


@pytest.fixture()
def world(tmp_path: Path) -> Iterator[tuple[Onboarding, list[dict[str, Any]], list[bool]]]:
    audit: list[dict[str, Any]] = []
    audit_up = [True]

    def record(event: str, *, first: bool = False, **fields: Any) -> None:
        if first and not audit_up[0]:
            raise errors.Unavailable("audit could not make the record durable", reason="AUDIT_UNAVAILABLE")
        audit.append({"event": event, "first": first, **fields})

    def allow(op: str, user: assertion.UserIdentity, key: str, subject: str) -> tuple[bool, list[str], str]:
        return (op != "APPROVE_AGENT" or subject != user.user_id), [], "d-1"

    with AgentRegistry(tmp_path / "agents.db") as registry:
        onboarding = Onboarding(tmp_path / "lifecycle.db", registry, lambda: ReleaseManager(CAPS), authorize=allow,
                                audit=record, evaluations=lambda a, v: True)
        yield onboarding, audit, audit_up
        onboarding.close()


def _to_canary(onboarding: Onboarding) -> None:
    onboarding.register(OLGA, manifest(), "127.0.0.1:7601", SPIFFE)
    for to in (S.VALIDATING, S.EVALUATING):
        onboarding.transition(OLGA, "training-agent", "1.1.0", to, "go")
    onboarding.transition(ADAM, "training-agent", "1.1.0", S.APPROVED, "evaluated")
    onboarding.transition(OLGA, "training-agent", "1.1.0", S.CANARY, "canary")


def test_a_canary_is_rolled_back_as_a_system_move_durable_before_it_takes_effect(world: Any) -> None:
    onboarding, audit, _ = world
    _to_canary(onboarding)
    record = onboarding.roll_back_canary("training-agent", "1.1.0", "canary failure rate 75% (3 of its last 4 tasks)",
                                         ["CANARY_ROLLBACK", "failure_rate=0.7500"])
    assert record.status is S.APPROVED
    last = record.history[-1]
    assert (last.from_status, last.to_status, last.changed_by) == (S.CANARY, S.APPROVED, "system:supervisor")
    moved = audit[-1]
    assert moved["event"] == "STATUS_CHANGED" and moved["first"] and moved["outcome"] == "SUCCESS"
    assert moved["resource"] == "agent-version:training-agent@1.1.0" and "tenant_id" not in moved
    assert moved["reason_codes"][:3] == ["AGENT_VERSION_TRANSITION", "from=CANARY", "status=APPROVED"]
    assert "changed_by=system:supervisor" in moved["reason_codes"] and "CANARY_ROLLBACK" in moved["reason_codes"]
    # APPROVED may go to CANARY again (by an operator), as after any rollback.
    onboarding.transition(OLGA, "training-agent", "1.1.0", S.CANARY, "fixed")


def test_only_a_canary_is_rolled_back(world: Any) -> None:
    onboarding, audit, _ = world
    onboarding.register(OLGA, manifest(), "127.0.0.1:7601", SPIFFE)
    before = len(audit)
    with pytest.raises(TransitionNotAllowed) as err:
        onboarding.roll_back_canary("training-agent", "1.1.0", "failing")
    assert err.value.field == "status" and "not CANARY" in err.value.message
    assert len(audit) == before and onboarding.get("training-agent", "1.1.0").status is S.DRAFT


def test_a_rollback_whose_record_cannot_be_made_durable_does_not_happen(world: Any) -> None:
    onboarding, _, audit_up = world
    _to_canary(onboarding)
    audit_up[0] = False
    with pytest.raises(errors.Unavailable):
        onboarding.roll_back_canary("training-agent", "1.1.0", "failing")
    assert onboarding.get("training-agent", "1.1.0").status is S.CANARY


# --- the fallback a manifest names (PRD §47) -------------------------------------------------------

def test_the_shipped_risk_agent_falls_back_to_its_rules_only_twin() -> None:
    with AgentRegistry(":memory:") as registry:
        assert registry.get("risk-agent").manifest.fallback == "risk-rules-agent"
        assert registry.get("training-agent").manifest.fallback == ""
        rules = registry.get("risk-rules-agent").manifest
        assert rules.capabilities == registry.get("risk-agent").manifest.capabilities
        assert "description" not in rules.input_schema["properties"]


def test_an_agent_is_not_its_own_fallback() -> None:
    with pytest.raises(AgentManifestError) as err:
        manifest_from_data(manifest(fallback="training-agent"), "t")
    assert err.value.field == "fallback"


def test_a_fallback_must_be_an_agent_id() -> None:
    with pytest.raises(AgentManifestError) as err:
        manifest_from_data(manifest(fallback="Not An Agent"), "t")
    assert err.value.field == "fallback"


def test_the_release_manager_checks_the_fallback_names_a_registered_agent(world: Any) -> None:
    onboarding, _, _ = world
    onboarding.register(OLGA, manifest(fallback="ghost-agent"), "h:1", SPIFFE)
    with pytest.raises(ReleaseBlocked) as err:
        onboarding.transition(OLGA, "training-agent", "1.1.0", S.VALIDATING, "validate")
    assert err.value.problems == ("fallback: 'ghost-agent' is not a registered agent",)
    fine = manifest_from_data(manifest(fallback="risk-agent"), "t")
    assert ReleaseManager(CAPS).problems(fine, {"training-agent", "risk-agent"}) == []


def test_a_registered_manifest_with_a_bad_fallback_is_refused_naming_the_field(world: Any) -> None:
    onboarding, _, _ = world
    with pytest.raises(RequestInvalid) as err:
        onboarding.register(OLGA, manifest(fallback="training-agent"), "h:1", SPIFFE)
    assert (err.value.reason, err.value.field) == ("MANIFEST_INVALID", "manifest.fallback")
