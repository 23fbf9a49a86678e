"""Onboarding agent versions (PRD §57, §59): governed registration, the lifecycle's edges, the Release Manager."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentmesh import assertion, errors
from agentmesh.vocabulary import LifecycleStatus as S
from agentmesh.vocabulary import RiskLevel
from supervisor_svc.errors import RequestInvalid
from supervisor_svc.lifecycle import TransitionNotAllowed
from supervisor_svc.onboarding import (
    CapabilityFacts,
    EvaluationRequired,
    Onboarding,
    OnboardingDenied,
    ReleaseBlocked,
    ReleaseManager,
    VersionExists,
)
from supervisor_svc.registry import AgentRegistry, default_agents_dir

OLGA = assertion.UserIdentity("acme", "olga", ("agent-operator",), "s", "c")
ADAM = assertion.UserIdentity("acme", "adam", ("agent-approver",), "s", "c")
VIEWER = assertion.UserIdentity("acme", "val", ("viewer",), "s", "c")
CAPS = [
    CapabilityFacts("training.getStatus", "2.1.0", S.ACTIVE, RiskLevel.LOW, False, False, False),
    CapabilityFacts("workPermit.release", "1.0.0", S.ACTIVE, RiskLevel.HIGH, True, False, False),
]


def manifest(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((default_agents_dir() / "training-agent.yaml").read_text())
    data["version"] = "1.1.0"
    data.update(changes)
    return data


class Policy:
    """A stand-in for the policy engine with the rules of agents.cedar (the real one is tested in policy_svc)."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str, str, str]] = []

    def __call__(self, op: str, user: assertion.UserIdentity, key: str, subject: str) -> tuple[bool, list[str], str]:
        self.asked.append((op, user.user_id, key, subject))
        if op == "APPROVE_AGENT":
            ok = "agent-approver" in user.roles and subject != user.user_id
        else:
            ok = bool({"agent-operator", "agent-approver"} & set(user.roles))
        return ok, ["agent.manage" if ok else "agent.requires_manager"], "d-1"


@pytest.fixture()
def world(tmp_path: Path) -> Iterator[tuple[Onboarding, AgentRegistry, Policy, list[dict[str, Any]], set[str]]]:
    audit: list[dict[str, Any]] = []
    passed: set[str] = set()
    policy = Policy()
    with AgentRegistry(tmp_path / "agents.db") as registry:
        onboarding = Onboarding(
            tmp_path / "lifecycle.db", registry, lambda: ReleaseManager(CAPS), authorize=policy,
            audit=lambda event, **f: audit.append({"event": event, **f}),
            evaluations=lambda a, v: f"{a}@{v}" in passed)
        yield onboarding, registry, policy, audit, passed
        onboarding.close()


SPIFFE = "spiffe://agentmesh.local/agent/training-agent"


def test_registered_versions_are_checked_once_not_on_every_dispatch(world: Any,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Every task dispatch asks the registry for its agent, which asks onboarding for the ACTIVE registered
    versions: their manifests (JSON Schemas and all) are checked when the file changed, not on every ask."""
    onboarding, registry, _, _, _ = world
    from supervisor_svc import onboarding as onboarding_module

    checked: list[str] = []
    check = onboarding_module.manifest_from_data

    def counted(data: Any, source: str) -> Any:
        checked.append(source)
        return check(data, source)

    monkeypatch.setattr(onboarding_module, "manifest_from_data", counted)
    onboarding.register(OLGA, manifest(), "127.0.0.1:7600", SPIFFE)
    onboarding.register(OLGA, manifest(version="1.2.0"), "127.0.0.1:7601", SPIFFE)
    checked.clear()
    for _ in range(5):
        registry.ensure_active("training-agent")
        assert [r.version for r in onboarding.list("training-agent") if not r.shipped] == ["1.1.0", "1.2.0"]
    assert len(checked) == len(set(checked)) <= 2, checked  # each version at most once
    onboarding.register(OLGA, manifest(version="1.3.0"), "127.0.0.1:7602", SPIFFE)
    assert [r.version for r in onboarding.list("training-agent") if not r.shipped] == ["1.1.0", "1.2.0", "1.3.0"]
    assert "registered:training-agent@1.3.0" in checked  # the file changed: read and checked again


def test_a_version_registered_through_another_connection_is_seen(world: Any, tmp_path: Path) -> None:
    """Another process on the same files (a second supervisor replica) registers a version after this one has
    read them: this one sees it at its next read."""
    onboarding, registry, policy, _, _ = world
    assert not [r for r in onboarding.list("training-agent") if not r.shipped]
    with AgentRegistry(tmp_path / "agents.db") as other_registry:
        other = Onboarding(tmp_path / "lifecycle.db", other_registry, lambda: ReleaseManager(CAPS), authorize=policy,
                           audit=lambda event, **f: None)
        try:
            other.register(OLGA, manifest(), "127.0.0.1:7600", SPIFFE)
        finally:
            other.close()
    (record,) = [r for r in onboarding.list("training-agent") if not r.shipped]
    assert (record.version, record.status) == ("1.1.0", S.DRAFT)


def test_registration_enters_draft_and_is_audited(world: Any) -> None:
    onboarding, _, policy, audit, _ = world
    record = onboarding.register(OLGA, manifest(status="ACTIVE"), "127.0.0.1:7600", SPIFFE)
    assert (record.status, record.registered_by, record.endpoint) == (S.DRAFT, "user:acme/olga", "127.0.0.1:7600")
    assert policy.asked == [("MANAGE_AGENT", "olga", "training-agent@1.1.0", "-")]
    assert audit[-1]["event"] == "STATUS_CHANGED" and "AGENT_VERSION_REGISTERED" in audit[-1]["reason_codes"]
    versions = [(r.version, r.status) for r in onboarding.list("training-agent")]
    assert versions == [("1.0.0", S.ACTIVE), ("1.1.0", S.DRAFT)]
    with pytest.raises(VersionExists):
        onboarding.register(OLGA, manifest(), "127.0.0.1:7600", SPIFFE)


@pytest.mark.parametrize(("change", "endpoint", "spiffe_id", "reason", "field"), [
    ({"risk_profile": {"max_risk": "LOW"}}, "h:1", SPIFFE, "MANIFEST_INVALID", "manifest.risk_profile.can_mutate"),
    ({"version": "one"}, "h:1", SPIFFE, "MANIFEST_INVALID", "manifest.version"),
    ({}, "no port", SPIFFE, "ENDPOINT_INVALID", "endpoint"),
    ({}, "h:1", "spiffe://agentmesh.local/agent/risk-agent", "SPIFFE_ID_MISMATCH", "spiffe_id"),
])
def test_bad_registrations_name_the_field_and_change_nothing(
    world: Any, change: dict[str, Any], endpoint: str, spiffe_id: str, reason: str, field: str
) -> None:
    onboarding = world[0]
    with pytest.raises(RequestInvalid) as err:
        onboarding.register(OLGA, manifest(**change), endpoint, spiffe_id)
    assert (err.value.reason, err.value.field) == (reason, field)
    assert [r.version for r in onboarding.list("training-agent")] == ["1.0.0"]


def test_only_whom_the_policy_allows_registers(world: Any) -> None:
    onboarding, _, _, audit, _ = world
    with pytest.raises(OnboardingDenied) as err:
        onboarding.register(VIEWER, manifest(), "h:1", SPIFFE)
    assert err.value.reason == "POLICY_DENIED" and err.value.field == "user_assertion"
    assert audit[-1]["event"] == "ACCESS_DENIED" and "agent.requires_manager" in audit[-1]["reason_codes"]
    assert [r.version for r in onboarding.list("training-agent")] == ["1.0.0"]


def test_a_registration_or_a_move_whose_record_cannot_be_made_durable_does_not_happen(tmp_path: Path) -> None:
    kept: list[dict[str, Any]] = []
    audit_up = [True]

    def audit(event: str, *, first: bool = False, **fields: Any) -> None:
        if first and not audit_up[0]:
            raise errors.Unavailable("audit could not make the record durable", reason="AUDIT_UNAVAILABLE")
        kept.append({"event": event, "first": first, **fields})

    with AgentRegistry(tmp_path / "agents.db") as registry:
        onboarding = Onboarding(tmp_path / "lifecycle.db", registry, lambda: ReleaseManager(CAPS),
                                authorize=Policy(), audit=audit)
        try:
            audit_up[0] = False
            with pytest.raises(errors.Unavailable):
                onboarding.register(OLGA, manifest(), "h:1", SPIFFE)
            assert [r.version for r in onboarding.list("training-agent")] == ["1.0.0"] and kept == []
            audit_up[0] = True
            onboarding.register(OLGA, manifest(), "h:1", SPIFFE)
            assert kept[-1]["first"] and "AGENT_VERSION_REGISTERED" in kept[-1]["reason_codes"]
            audit_up[0] = False
            with pytest.raises(errors.Unavailable):
                onboarding.transition(OLGA, "training-agent", "1.1.0", S.VALIDATING, "validate")
            assert onboarding.get("training-agent", "1.1.0").status is S.DRAFT
            # A shipped version's kill-switch-free move goes through the same gate.
            with pytest.raises(errors.Unavailable):
                onboarding.transition(OLGA, "training-agent", "1.0.0", S.DEPRECATED, "replace")
            assert registry.get("training-agent").status is S.ACTIVE
        finally:
            onboarding.close()


def test_the_whole_lifecycle_and_only_its_edges(world: Any) -> None:
    onboarding, registry, policy, audit, passed = world
    onboarding.register(OLGA, manifest(), "h:1", SPIFFE)
    with pytest.raises(TransitionNotAllowed) as err:
        onboarding.transition(OLGA, "training-agent", "1.1.0", S.ACTIVE, "ship it")
    assert (err.value.reason, err.value.field) == ("TRANSITION_NOT_ALLOWED", "to_status")
    onboarding.transition(OLGA, "training-agent", "1.1.0", S.VALIDATING, "validate")
    onboarding.transition(OLGA, "training-agent", "1.1.0", S.EVALUATING, "evaluate")
    with pytest.raises(EvaluationRequired):
        onboarding.transition(ADAM, "training-agent", "1.1.0", S.APPROVED, "looks fine")
    passed.add("training-agent@1.1.0")
    with pytest.raises(OnboardingDenied):  # the registrant never approves their own version
        onboarding.transition(OLGA, "training-agent", "1.1.0", S.APPROVED, "mine is fine")
    onboarding.transition(ADAM, "training-agent", "1.1.0", S.APPROVED, "evaluation passed")
    assert policy.asked[-1] == ("APPROVE_AGENT", "adam", "training-agent@1.1.0", "olga")
    onboarding.transition(OLGA, "training-agent", "1.1.0", S.CANARY, "canary")
    assert registry.get("training-agent").manifest.version == "1.0.0"
    record, also = onboarding.transition(OLGA, "training-agent", "1.1.0", S.ACTIVE, "promote")
    assert record.status is S.ACTIVE and [(a.version, a.status) for a in also] == [("1.0.0", S.DEPRECATED)]
    assert registry.get("training-agent").manifest.version == "1.1.0"
    assert registry.ensure_active("training-agent").manifest.version == "1.1.0"
    # Rolling the promotion back: 1.0.0 is ACTIVE again, 1.1.0 DEPRECATED.
    _, also = onboarding.transition(OLGA, "training-agent", "1.0.0", S.ACTIVE, "roll back")
    assert [(a.version, a.status) for a in also] == [("1.1.0", S.DEPRECATED)]
    assert registry.get("training-agent").manifest.version == "1.0.0"
    moves = [c for a in audit if a["event"] == "STATUS_CHANGED" for c in a["reason_codes"] if c.startswith("status=")]
    assert moves == ["status=DRAFT", "status=VALIDATING", "status=EVALUATING", "status=APPROVED", "status=CANARY",
                     "status=DEPRECATED", "status=ACTIVE", "status=DEPRECATED", "status=ACTIVE"]
    history = [(t.from_status, t.to_status) for t in onboarding.get("training-agent", "1.1.0").history]
    assert history[0] == (S.DRAFT, S.VALIDATING) and history[-1] == (S.ACTIVE, S.DEPRECATED)


def test_the_release_manager_blocks_with_every_reason(world: Any) -> None:
    onboarding, _, _, audit, _ = world
    bad = manifest(capabilities=["training.getStatus", "workPermit.release", "nothing.here"],
                   allowed_delegations=["ghost-agent"],
                   dependencies={"capabilities": ["training.getStatus@^3.0"], "knowledge": ["training@^4.0"],
                                 "policies": ["no-such-policy@^42.0"]})
    onboarding.register(OLGA, bad, "h:1", SPIFFE)
    with pytest.raises(ReleaseBlocked) as err:
        onboarding.transition(OLGA, "training-agent", "1.1.0", S.VALIDATING, "validate")
    problems = err.value.problems
    assert err.value.reason == "RELEASE_BLOCKED"
    assert problems == (
        "capabilities: 'nothing.here' is not a registered capability",
        "dependencies.capabilities[0]: 'training.getStatus@^3.0' is incompatible with the registered versions "
        "(2.1.0)",
        "dependencies.knowledge[0]: 'training@^4.0': no knowledge store 'training' is served with a release",
        "dependencies.policies[0]: 'no-such-policy@^42.0': no policy 'no-such-policy' is in force with a release",
        "allowed_delegations[0]: 'ghost-agent' is not a registered agent",
        "risk_profile.can_mutate: workPermit.release@1.0.0 mutates, the profile says it cannot",
        "risk_profile.max_risk: workPermit.release@1.0.0 is HIGH, above the declared LOW",
    )
    record = onboarding.get("training-agent", "1.1.0")
    assert record.status is S.DRAFT and record.problems == problems
    assert any("problem=" + problems[0] in a["reason_codes"] for a in audit)


def test_a_compatible_version_passes_validation() -> None:
    rm = ReleaseManager(CAPS, knowledge={"training": ["4.2.0"]}, policies={"training-policy": ["3.0.1"]})
    from supervisor_svc.registry import manifest_from_data
    m = manifest_from_data(manifest(dependencies={"capabilities": ["training.getStatus@^2.0"],
                                                  "knowledge": ["training@^4.0"],
                                                  "policies": ["training-policy@^3.0"]}), "t")
    assert rm.problems(m, {"training-agent"}) == []


def test_the_kill_switch_stops_a_served_registered_version(world: Any) -> None:
    onboarding, registry, _, _, passed = world
    onboarding.register(OLGA, manifest(), "h:1", SPIFFE)
    passed.add("training-agent@1.1.0")
    for to in (S.VALIDATING, S.EVALUATING):
        onboarding.transition(OLGA, "training-agent", "1.1.0", to, "go")
    onboarding.transition(ADAM, "training-agent", "1.1.0", S.APPROVED, "ok")
    for to in (S.CANARY, S.ACTIVE):
        onboarding.transition(OLGA, "training-agent", "1.1.0", to, "go")
    onboarding.set_agent_status("training-agent", S.DISABLED, "incident", "client:ops")
    assert "training-agent" not in onboarding.active_manifests()
    assert registry.get("training-agent").status is S.DEPRECATED  # the shipped one; not served either
