"""The transport-free execution path: fail closed, validate, dispatch, verify."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import grpc
import pytest

from capability_svc.errors import (
    CapabilityNotExecutable,
    DeadlineExceeded,
    InputInvalid,
    ManifestError,
    OutputInvalid,
    ResourceNotFound,
    VerificationFailed,
)
from capability_svc.executor import CapabilityExecutor
from capability_svc.external_gateway import LmsClient
from capability_svc.governance import mesh_error
from capability_svc.internal_runtime import InternalBackend, InternalStore
from capability_svc.invocation import InvocationContext
from capability_svc.knowledge_store import KnowledgeBackend
from capability_svc.registry import CapabilityRegistry


class RecordingLms:
    """An external backend that records calls and returns a canned output."""

    capability_ids = frozenset({"training.getStatus"})

    def __init__(self, output: dict[str, Any]):
        self.output = output
        self.calls: list[tuple[str, str, float | None]] = []

    def execute(
        self,
        capability_id: str,
        ctx: InvocationContext,
        arguments: Mapping[str, Any],
        *,
        budget_s: float | None = None,
    ) -> dict[str, Any]:
        self.calls.append((capability_id, ctx.tenant_id, budget_s))
        return self.output


GOOD_TRAINING = {
    "worker_id": "W-1001",
    "worker_known": True,
    "trainings": [],
    "provenance": {
        "source": "lms",
        "authority": "VERIFIED_INTEGRATION",
        "fetched_at": "2026-11-30T09:00:00.000Z",
        "reference": "http://lms/v1/tenants/acme/workers/W-1001/trainings",
    },
}


@pytest.fixture
def fake_lms() -> RecordingLms:
    return RecordingLms(dict(GOOD_TRAINING))


@pytest.fixture
def executor(
    registry: CapabilityRegistry, backend: InternalBackend, fake_lms: RecordingLms, knowledge: KnowledgeBackend
) -> CapabilityExecutor:
    ex = CapabilityExecutor(registry, backend, {"lms": fake_lms}, knowledge)
    ex.check_wiring()
    return ex


def status_of(store: InternalStore, permit_id: str) -> str:
    permit = store.scope("acme").get_permit(permit_id)
    assert permit is not None
    return permit.status


def test_read_capability(executor: CapabilityExecutor, acme: InvocationContext) -> None:
    result = executor.execute(acme, "workPermit.get", {"permit_id": "WP-10231"})
    assert result.manifest.key == "workPermit.get@1.1.0"
    assert result.output["permit_id"] == "WP-10231"
    assert result.verification is None


def test_mutation_is_verified(
    executor: CapabilityExecutor, store: InternalStore, acme: InvocationContext
) -> None:
    call = executor.prepare(acme, "workPermit.release", {"permit_id": "WP-10231", "reason": "ok!"})
    assert call.mutates and call.resource_id == "WP-10231"
    result = executor.execute(acme, "workPermit.release", {"permit_id": "WP-10231",
                                                           "reason": "ok!"})
    assert result.verification is not None and result.verification.verified
    assert status_of(store, "WP-10231") == "RELEASED"


def test_failed_verification_is_a_failure(
    executor: CapabilityExecutor, acme: InvocationContext
) -> None:
    with pytest.raises(VerificationFailed) as info:
        executor.execute(acme, "workPermit.release", {"permit_id": "WP-10241", "reason": "ok!"})
    assert info.value.reason == "VERIFICATION_FAILED"
    assert info.value.observed == {"status": "PENDING_RELEASE", "released_at": None}
    # Nothing had landed: the permit is verified to be in its previous state.
    assert info.value.compensation is not None and info.value.compensation.compensated
    assert info.value.metadata == {"compensated": "true", "restored": "status=PENDING_RELEASE",
                                   "compensation": "ALREADY_IN_PREVIOUS_STATE"}


def test_partially_applied_mutation_is_compensated(
    executor: CapabilityExecutor, store: InternalStore, acme: InvocationContext
) -> None:
    with pytest.raises(VerificationFailed) as info:
        executor.execute(acme, "workPermit.release", {"permit_id": "WP-10244", "reason": "ok!"})
    err = info.value
    assert err.observed == {"status": "RELEASED", "released_at": None}
    assert err.metadata == {"compensated": "true", "restored": "status=PENDING_RELEASE",
                            "compensation": "RESTORED"}
    assert "compensated: the previous state is back (status=PENDING_RELEASE)" in err.message
    assert status_of(store, "WP-10244") == "PENDING_RELEASE"
    mesh = mesh_error(err)
    assert mesh.code == grpc.StatusCode.ABORTED and mesh.reason == "VERIFICATION_FAILED"
    assert mesh.metadata == err.metadata


def test_run_carries_the_previous_state_outside_the_output(
    executor: CapabilityExecutor, acme: InvocationContext
) -> None:
    call = executor.prepare(acme, "workPermit.updateValidity",
                            {"permit_id": "WP-10232", "valid_until": "2026-12-31", "reason": "extend"})
    ran = executor.run(call)
    assert ran.before is not None and ran.before.fields["valid_until"] == "2026-12-10"
    assert ran.output["previous_valid_until"] == "2026-12-10"
    assert executor.run(executor.prepare(acme, "workPermit.get", {"permit_id": "WP-10231"})).before is None
    # Without a captured previous state there is nothing to restore to.
    from capability_svc.invocation import Execution

    assert executor.compensate(call, Execution(ran.output)).reason == "NO_PRIOR_STATE"


def test_mutation_without_compensation_is_refused_at_start_up(
    registry: CapabilityRegistry, backend: InternalBackend, fake_lms: RecordingLms,
    monkeypatch: pytest.MonkeyPatch, knowledge: KnowledgeBackend,
) -> None:
    monkeypatch.setattr(backend, "has_compensator", lambda capability_id: False)
    with pytest.raises(ManifestError) as info:
        CapabilityExecutor(registry, backend, {"lms": fake_lms}, knowledge).check_wiring()
    assert info.value.reason == "MANIFEST_BACKEND_MISSING"


def test_disabled_capability_fails_closed_before_anything_runs(
    executor: CapabilityExecutor,
    registry: CapabilityRegistry,
    store: InternalStore,
    acme: InvocationContext,
    fake_lms: RecordingLms,
) -> None:
    registry.set_status("workPermit.release", "DISABLED")
    with pytest.raises(CapabilityNotExecutable) as info:
        executor.execute(acme, "workPermit.release", {"permit_id": "WP-10231", "reason": "ok!"})
    assert info.value.reason == "CAPABILITY_DISABLED"
    assert status_of(store, "WP-10231") == "PENDING_RELEASE"

    registry.set_status("training.getStatus", "DISABLED")
    with pytest.raises(CapabilityNotExecutable):
        executor.execute(acme, "training.getStatus", {"worker_id": "W-1001"})
    assert fake_lms.calls == []


def test_kill_switch_between_prepare_and_run_still_stops_the_call(
    executor: CapabilityExecutor,
    registry: CapabilityRegistry,
    store: InternalStore,
    acme: InvocationContext,
) -> None:
    call = executor.prepare(acme, "workPermit.release", {"permit_id": "WP-10231", "reason": "ok!"})
    registry.set_status("workPermit.release", "DISABLED")  # e.g. while policy was deciding
    with pytest.raises(CapabilityNotExecutable):
        executor.run(call)
    assert status_of(store, "WP-10231") == "PENDING_RELEASE"


def test_invalid_input_executes_nothing(
    executor: CapabilityExecutor, store: InternalStore, acme: InvocationContext
) -> None:
    with pytest.raises(InputInvalid) as info:
        executor.execute(acme, "workPermit.release", {"permit_id": "WP-10231"})
    assert info.value.field == "reason"
    with pytest.raises(InputInvalid) as info:
        executor.execute(
            acme, "workPermit.release",
            {"permit_id": "WP-10231", "reason": "ok!", "tenant_id": "globex"},
        )
    assert info.value.field == "tenant_id"
    assert status_of(store, "WP-10231") == "PENDING_RELEASE"


def test_prepared_arguments_are_a_private_copy(
    executor: CapabilityExecutor, acme: InvocationContext
) -> None:
    arguments = {"worker_id": "W-1001", "training_codes": ["NR-10"]}
    call = executor.prepare(acme, "training.getStatus", arguments)
    arguments["training_codes"].append("not valid!")  # mutated after validation
    assert call.arguments["training_codes"] == ["NR-10"]


def test_deadline_passed_executes_nothing(
    executor: CapabilityExecutor, store: InternalStore, acme: InvocationContext
) -> None:
    with pytest.raises(DeadlineExceeded):
        executor.execute(
            acme, "workPermit.release", {"permit_id": "WP-10231", "reason": "ok!"}, deadline_s=0
        )
    assert status_of(store, "WP-10231") == "PENDING_RELEASE"


def test_external_budget_is_capped_by_manifest_and_deadline(
    executor: CapabilityExecutor, acme: InvocationContext, fake_lms: RecordingLms
) -> None:
    executor.execute(acme, "training.getStatus", {"worker_id": "W-1001"})
    executor.execute(acme, "training.getStatus", {"worker_id": "W-1001"}, deadline_s=0.5)
    executor.execute(acme, "training.getStatus", {"worker_id": "W-1001"}, deadline_s=60)
    assert [c[2] for c in fake_lms.calls] == [3.0, 0.5, 3.0]
    assert all(c[1] == "acme" for c in fake_lms.calls)


def test_bad_backend_output_is_withheld(
    executor: CapabilityExecutor, acme: InvocationContext, fake_lms: RecordingLms
) -> None:
    fake_lms.output = {**GOOD_TRAINING, "worker_known": "probably"}
    with pytest.raises(OutputInvalid) as info:
        executor.execute(acme, "training.getStatus", {"worker_id": "W-1001"})
    assert info.value.field == "worker_known"
    fake_lms.output = {k: v for k, v in GOOD_TRAINING.items() if k != "provenance"}
    with pytest.raises(OutputInvalid) as info:
        executor.execute(acme, "training.getStatus", {"worker_id": "W-1001"})
    assert info.value.field == "provenance"


def test_tenant_comes_from_the_context_only(
    executor: CapabilityExecutor, globex: InvocationContext, acme: InvocationContext
) -> None:
    assert executor.execute(globex, "workPermit.get", {"permit_id": "WP-20001"}).output
    with pytest.raises(ResourceNotFound):
        executor.execute(acme, "workPermit.get", {"permit_id": "WP-20001"})


def test_wiring_check_refuses_missing_backend(
    registry: CapabilityRegistry, backend: InternalBackend, knowledge: KnowledgeBackend
) -> None:
    with pytest.raises(ManifestError) as info:
        CapabilityExecutor(registry, backend, {}, knowledge).check_wiring()
    assert info.value.reason == "MANIFEST_BACKEND_MISSING"
    assert "training.getStatus" in info.value.message


def test_wiring_check_refuses_a_knowledge_capability_without_the_knowledge_backend(
    registry: CapabilityRegistry, backend: InternalBackend, fake_lms: RecordingLms
) -> None:
    with pytest.raises(ManifestError) as info:
        CapabilityExecutor(registry, backend, {"lms": fake_lms}).check_wiring()
    assert info.value.reason == "MANIFEST_BACKEND_MISSING"
    assert "knowledge.search@1.0.0 (knowledge)" in info.value.message


def test_real_lms_client_satisfies_the_backend_protocol(
    registry: CapabilityRegistry, backend: InternalBackend, lms_client: LmsClient,
    acme: InvocationContext, knowledge: KnowledgeBackend,
) -> None:
    executor = CapabilityExecutor(registry, backend, {"lms": lms_client}, knowledge)
    executor.check_wiring()
    out = executor.execute(
        acme, "training.getStatus", {"worker_id": "W-1001", "training_codes": ["NR-35"]}
    ).output
    assert [r["course_code"] for r in out["trainings"]] == ["NR-35"]
    assert out["provenance"]["authority"] == "VERIFIED_INTEGRATION"
