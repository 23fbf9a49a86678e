"""Internal systems: tenant scoping, handlers, mutations with read-back verification."""

from __future__ import annotations

import datetime as dt
import sqlite3
from typing import Any

import pytest

from capability_svc.errors import PreconditionFailed, ResourceNotFound
from capability_svc.internal_runtime import InternalBackend, InternalStore, risk_level
from capability_svc.invocation import InvocationContext
from capability_svc.registry import CapabilityRegistry

DEMO_PERMITS = {
    "acme": [f"WP-{n}" for n in range(10231, 10251)],
    "globex": ["WP-20001"],
}


def not_found(backend: InternalBackend, ctx: InvocationContext, capability: str,
              args: dict[str, Any]) -> ResourceNotFound:
    with pytest.raises(ResourceNotFound) as info:
        backend.execute(capability, ctx, args)
    return info.value


# --- tenant isolation ---------------------------------------------------------


@pytest.mark.parametrize(
    "capability",
    ["workPermit.get", "risk.evaluate", "compliance.getChecklist"],
)
def test_other_tenants_permit_is_indistinguishable_from_a_missing_one(
    backend: InternalBackend, acme: InvocationContext, capability: str
) -> None:
    foreign = not_found(backend, acme, capability, {"permit_id": "WP-20001"})
    missing = not_found(backend, acme, capability, {"permit_id": "WP-99999"})
    # The one answer for a record the tenant does not hold: the id the caller
    # sent, no field, no kind of record, no hint of existence.
    for err, permit in ((foreign, "WP-20001"), (missing, "WP-99999")):
        assert (err.reason, err.field, err.message) == ("RESOURCE_NOT_FOUND", None, f"'{permit}' not found")


def test_owner_tenant_reads_its_permit(backend: InternalBackend, globex: InvocationContext) -> None:
    out = backend.execute("workPermit.get", globex, {"permit_id": "WP-20001"})
    assert out["permit_id"] == "WP-20001"
    assert {w["worker_id"] for w in out["workers"]} == {"W-2001", "W-2002", "W-1001"}


def test_worker_ids_are_per_tenant(
    backend: InternalBackend, acme: InvocationContext, globex: InvocationContext
) -> None:
    a = backend.execute("worker.get", acme, {"worker_id": "W-1001"})
    g = backend.execute("worker.get", globex, {"worker_id": "W-1001"})
    assert a["name"] == "Ana Souza" and "WP-10231" in a["permits"]
    assert g["name"] == "Rafael Okafor" and g["permits"] == ["WP-20001"]
    foreign = not_found(backend, acme, "worker.get", {"worker_id": "W-2001"})
    assert (foreign.reason, foreign.field, foreign.message) == ("RESOURCE_NOT_FOUND", None, "'W-2001' not found")


def test_search_never_crosses_tenants(backend: InternalBackend, acme: InvocationContext) -> None:
    out = backend.execute("workPermit.search", acme, {"limit": 100})
    ids = [p["permit_id"] for p in out["permits"]]
    assert ids == DEMO_PERMITS["acme"]
    assert out["truncated"] is False
    # globex's worker has no permits in acme's world.
    assert backend.execute("workPermit.search", acme, {"worker_id": "W-2001"})["permits"] == []
    by_worker = backend.execute("workPermit.search", acme, {"worker_id": "W-1001"})
    assert [p["permit_id"] for p in by_worker["permits"]] == ["WP-10231", "WP-10242"]


def test_search_filters_and_truncation(backend: InternalBackend, acme: InvocationContext) -> None:
    released = backend.execute("workPermit.search", acme, {"status": "RELEASED"})
    assert [p["permit_id"] for p in released["permits"]] == ["WP-10242"]
    page = backend.execute("workPermit.search", acme, {"limit": 2.0})
    assert page["count"] == 2 and page["truncated"] is True
    on_day = backend.execute("workPermit.search", acme, {"valid_on": "2027-01-15"})
    assert [p["permit_id"] for p in on_day["permits"]] == ["WP-10243"]
    site = backend.execute("workPermit.search", acme, {"site": "Plant 2 - Roof"})
    assert [p["permit_id"] for p in site["permits"]] == ["WP-10243"]


def test_scope_refuses_empty_tenant_and_unknown_tables(store: InternalStore) -> None:
    with pytest.raises(ValueError):
        store.scope("")
    scope = store.scope("acme")
    with sqlite3.connect(store.path) as conn, pytest.raises(ValueError):
        scope._select(conn, "sqlite_master")


def test_unknown_tenant_sees_nothing(backend: InternalBackend) -> None:
    nobody = InvocationContext("initech", "peter")
    assert backend.execute("workPermit.search", nobody, {})["permits"] == []
    not_found(backend, nobody, "workPermit.get", {"permit_id": "WP-10231"})


# --- read handlers -------------------------------------------------------------


@pytest.mark.parametrize("tenant", ["acme", "globex"])
def test_every_demo_output_matches_its_schema(
    backend: InternalBackend, registry: CapabilityRegistry, tenant: str
) -> None:
    ctx = InvocationContext(tenant, "auditor")
    for permit_id in DEMO_PERMITS[tenant]:
        for capability in ("workPermit.get", "risk.evaluate", "compliance.getChecklist"):
            out = backend.execute(capability, ctx, {"permit_id": permit_id})
            registry.validate_output(registry.get(capability).manifest, out)
    out = backend.execute("workPermit.search", ctx, {})
    registry.validate_output(registry.get("workPermit.search").manifest, out)


def test_permit_get_carries_provenance_and_sensitive_fields(
    backend: InternalBackend, acme: InvocationContext
) -> None:
    out = backend.execute("workPermit.get", acme, {"permit_id": "WP-10231"})
    assert out["provenance"] == {
        "source": "permit-registry",
        "authority": "OFFICIAL_RECORD",
        "fetched_at": "2026-11-30T09:00:00.000Z",
        "reference": "permit/WP-10231",
    }
    assert out["required_trainings"] == ["NR-10", "NR-35"]
    ana = out["workers"][0]
    assert ana["worker_id"] == "W-1001" and ana["permit_role"] == "EXECUTOR"
    # Present here on purpose: it is the supervisor's projection that must drop it.
    assert ana["medical_notes"] and "diabetes" in ana["medical_notes"]


def test_risk_evaluate(backend: InternalBackend, acme: InvocationContext) -> None:
    out = backend.execute("risk.evaluate", acme, {"permit_id": "WP-10231"})
    assert out["assessed"] is True
    assert out["risk_level"] == "MEDIUM"
    assert out["max_score"] == 8
    assert out["open_controls_count"] == 0
    assert out["provenance"]["source"] == "risk-register"
    draft = backend.execute("risk.evaluate", acme, {"permit_id": "WP-10243"})
    assert draft["assessed"] is False
    assert draft["risk_level"] is None  # no assessment is not "low risk"
    assert [risk_level(s) for s in (1, 4, 5, 9, 10, 16, 20, 25)] == [
        "LOW", "LOW", "MEDIUM", "MEDIUM", "HIGH", "HIGH", "CRITICAL", "CRITICAL"
    ]


def test_compliance_checklist_reports_the_failing_item(
    backend: InternalBackend, acme: InvocationContext
) -> None:
    out = backend.execute("compliance.getChecklist", acme, {"permit_id": "WP-10233"})
    assert out["summary"] == {"PASS": 2, "FAIL": 1, "PENDING": 0, "NOT_APPLICABLE": 0}
    failing = [i for c in out["checklists"] for i in c["items"] if i["status"] == "FAIL"]
    assert failing[0]["subject"] == "worker:W-1005/NR-35"
    assert failing[0]["regulation"] == "NR-35 35.3.3"
    clean = backend.execute("compliance.getChecklist", acme, {"permit_id": "WP-10231"})
    assert clean["summary"]["FAIL"] == 0


# --- mutations -----------------------------------------------------------------

RELEASE = {"permit_id": "WP-10231", "reason": "all checks passed"}


def test_release_then_verify(backend: InternalBackend, store: InternalStore,
                             acme: InvocationContext) -> None:
    out = backend.execute("workPermit.release", acme, RELEASE)
    assert out["status"] == "RELEASED"
    assert out["previous_status"] == "PENDING_RELEASE"
    assert out["released_by"] == "alice via work-permit-agent"
    result = backend.verify("workPermit.release", acme, RELEASE, out)
    assert result.verified and result.reason == "EFFECT_VISIBLE"
    permit = store.scope("acme").get_permit("WP-10231")
    assert permit is not None and permit.status == "RELEASED"
    assert permit.released_at == "2026-11-30T09:00:00.000Z"
    with pytest.raises(PreconditionFailed) as info:
        backend.execute("workPermit.release", acme, RELEASE)
    assert info.value.reason == "PERMIT_ALREADY_RELEASED"


def test_injected_verification_failure_from_data(
    backend: InternalBackend, store: InternalStore, acme: InvocationContext
) -> None:
    args = {"permit_id": "WP-10241", "reason": "all checks passed"}
    out = backend.execute("workPermit.release", acme, args)
    result = backend.verify("workPermit.release", acme, args, out)
    assert result.verified is False
    assert result.reason == "EFFECT_NOT_VISIBLE"
    assert result.observed["status"] == "PENDING_RELEASE"
    assert result.expected["status"] == "RELEASED"


def test_injected_verification_failure_at_run_time(
    backend: InternalBackend, store: InternalStore, acme: InvocationContext
) -> None:
    store.scope("acme").set_simulated_verification_failure("WP-10231", True)
    out = backend.execute("workPermit.release", acme, RELEASE)
    assert not backend.verify("workPermit.release", acme, RELEASE, out).verified
    store.scope("acme").set_simulated_verification_failure("WP-10231", False)
    out = backend.execute("workPermit.release", acme, RELEASE)
    assert backend.verify("workPermit.release", acme, RELEASE, out).verified
    with pytest.raises(ResourceNotFound):
        store.scope("acme").set_simulated_verification_failure("WP-20001", True)


def test_verification_of_another_tenants_permit_fails(
    backend: InternalBackend, acme: InvocationContext, globex: InvocationContext
) -> None:
    out = backend.execute("workPermit.release", acme, RELEASE)
    result = backend.verify("workPermit.release", globex, RELEASE, out)
    assert result.verified is False and result.reason == "RESOURCE_MISSING"


def test_release_of_another_tenants_permit_is_not_found_and_changes_nothing(
    backend: InternalBackend, store: InternalStore, acme: InvocationContext
) -> None:
    args = {"permit_id": "WP-20001", "reason": "sneaky"}
    err = not_found(backend, acme, "workPermit.release", args)
    assert err.reason == "RESOURCE_NOT_FOUND"
    permit = store.scope("globex").get_permit("WP-20001")
    assert permit is not None and permit.status == "PENDING_RELEASE"


@pytest.mark.parametrize(
    ("permit_id", "today", "reason"),
    [
        ("WP-10242", dt.date(2026, 11, 30), "PERMIT_ALREADY_RELEASED"),
        ("WP-10243", dt.date(2026, 11, 30), "PERMIT_NOT_RELEASABLE"),
        ("WP-10231", dt.date(2026, 12, 13), "PERMIT_EXPIRED"),
        ("WP-10231", dt.date(2026, 11, 27), "PERMIT_NOT_YET_VALID"),
    ],
)
def test_release_preconditions(
    backend: InternalBackend,
    store: InternalStore,
    acme: InvocationContext,
    clock: Any,
    permit_id: str,
    today: dt.date,
    reason: str,
) -> None:
    clock.now = dt.datetime.combine(today, dt.time(9, 0), tzinfo=dt.UTC)
    before = store.scope("acme").get_permit(permit_id)
    with pytest.raises(PreconditionFailed) as info:
        backend.execute("workPermit.release", acme, {"permit_id": permit_id, "reason": "go"})
    assert info.value.reason == reason
    assert info.value.field == "permit_id"
    assert store.scope("acme").get_permit(permit_id) == before


def test_a_release_is_judged_by_the_mesh_date_not_the_host_clock(
    store: InternalStore, acme: InvocationContext, clock: Any
) -> None:
    # The host's clock is past WP-10231's window (it ends 2026-12-12); the mesh's date is inside it,
    # as the specialists judged it: the release is judged on that same day, and stamped with the clock.
    clock.now = dt.datetime(2027, 1, 15, 9, 0, tzinfo=dt.UTC)
    out = InternalBackend(store, today=lambda: dt.date(2026, 11, 30)).execute("workPermit.release", acme, RELEASE)
    assert out["status"] == "RELEASED" and out["released_at"].startswith("2027-01-15")
    # And the other way round: a validity ending before the mesh's date is refused, whatever the clock says.
    clock.now = dt.datetime(2026, 11, 30, 9, 0, tzinfo=dt.UTC)
    late = InternalBackend(store, today=lambda: dt.date(2027, 1, 10))
    args = {"permit_id": "WP-10232", "valid_until": "2026-12-31", "reason": "scope extended"}
    before = store.scope("acme").get_permit("WP-10232")
    with pytest.raises(PreconditionFailed) as info:
        late.execute("workPermit.updateValidity", acme, args)
    assert (info.value.reason, info.value.field) == ("VALIDITY_IN_PAST", "valid_until")
    assert store.scope("acme").get_permit("WP-10232") == before


def test_update_validity_then_verify(backend: InternalBackend, store: InternalStore,
                                     acme: InvocationContext) -> None:
    args = {"permit_id": "WP-10232", "valid_until": "2026-12-31", "reason": "scope extended"}
    out = backend.execute("workPermit.updateValidity", acme, args)
    assert out["previous_valid_until"] == "2026-12-10"
    assert out["valid_until"] == "2026-12-31"
    assert out["updated_by"] == "alice via work-permit-agent"
    assert backend.verify("workPermit.updateValidity", acme, args, out).verified
    permit = store.scope("acme").get_permit("WP-10232")
    assert permit is not None and permit.valid_until == "2026-12-31"


@pytest.mark.parametrize(
    ("valid_until", "reason"),
    [("2026-11-01", "VALIDITY_BEFORE_START"), ("2026-11-29", "VALIDITY_IN_PAST")],
)
def test_update_validity_preconditions(
    backend: InternalBackend, acme: InvocationContext, valid_until: str, reason: str
) -> None:
    args = {"permit_id": "WP-10232", "valid_until": valid_until, "reason": "change"}
    with pytest.raises(PreconditionFailed) as info:
        backend.execute("workPermit.updateValidity", acme, args)
    assert info.value.reason == reason
    assert info.value.field == "valid_until"


def test_update_validity_lost_write_is_caught(
    backend: InternalBackend, acme: InvocationContext
) -> None:
    args = {"permit_id": "WP-10241", "valid_until": "2026-12-31", "reason": "extend"}
    out = backend.execute("workPermit.updateValidity", acme, args)
    result = backend.verify("workPermit.updateValidity", acme, args, out)
    assert result.verified is False
    assert result.observed == {"valid_until": "2026-12-14"}


def test_verify_is_only_for_mutations(backend: InternalBackend, acme: InvocationContext) -> None:
    from capability_svc.errors import CapabilityNotFound

    with pytest.raises(CapabilityNotFound):
        backend.verify("workPermit.get", acme, {"permit_id": "WP-10231"}, {})
    with pytest.raises(CapabilityNotFound):
        backend.execute("workPermit.delete", acme, {})


# --- compensation of a failed verification (PRD §73) ---------------------------


def test_partial_release_is_caught_and_compensated(
    backend: InternalBackend, store: InternalStore, acme: InvocationContext
) -> None:
    before = store.scope("acme").get_permit("WP-10244")
    args = {"permit_id": "WP-10244", "reason": "all checks passed"}
    ran = backend.run("workPermit.release", acme, args)
    assert ran.before is not None and ran.before.fields["status"] == "PENDING_RELEASE"
    assert "before" not in ran.output  # the output schema is the contract
    check = backend.verify("workPermit.release", acme, args, ran.output)
    assert check.verified is False
    assert check.observed == {"status": "RELEASED", "released_at": None}  # half applied
    result = backend.compensate("workPermit.release", acme, args, ran.output, ran.before)
    assert result.compensated and result.reason == "RESTORED"
    assert result.restored == {"status": "PENDING_RELEASE"} and result.summary == "status=PENDING_RELEASE"
    after = store.scope("acme").get_permit("WP-10244")
    assert after == before
    assert after is not None and after.released_at is None and after.release_reason is None
    # Compensating again finds nothing left to undo.
    again = backend.compensate("workPermit.release", acme, args, ran.output, ran.before)
    assert again.compensated and again.reason == "ALREADY_IN_PREVIOUS_STATE"


def test_lost_release_needs_no_compensating_write(
    backend: InternalBackend, store: InternalStore, acme: InvocationContext
) -> None:
    args = {"permit_id": "WP-10241", "reason": "all checks passed"}
    ran = backend.run("workPermit.release", acme, args)
    assert ran.before is not None
    result = backend.compensate("workPermit.release", acme, args, ran.output, ran.before)
    assert result.compensated and result.reason == "ALREADY_IN_PREVIOUS_STATE"
    assert result.summary == "status=PENDING_RELEASE"


def test_compensation_leaves_a_later_write_alone(
    backend: InternalBackend, store: InternalStore, acme: InvocationContext
) -> None:
    args = {"permit_id": "WP-10244", "reason": "all checks passed"}
    ran = backend.run("workPermit.release", acme, args)
    assert ran.before is not None
    # Someone else suspends the permit before the compensation runs.
    conn = sqlite3.connect(store.path)
    conn.execute("UPDATE permits SET status = 'SUSPENDED' WHERE tenant_id = 'acme' AND permit_id = 'WP-10244'")
    conn.commit()
    conn.close()
    result = backend.compensate("workPermit.release", acme, args, ran.output, ran.before)
    assert result.compensated is False and result.reason == "CHANGED_BY_ANOTHER_WRITE"
    assert result.restored == {} and result.observed["status"] == "SUSPENDED"
    permit = store.scope("acme").get_permit("WP-10244")
    assert permit is not None and permit.status == "SUSPENDED" and permit.release_reason == "all checks passed"


def test_compensation_is_tenant_scoped(
    backend: InternalBackend, acme: InvocationContext, globex: InvocationContext
) -> None:
    args = {"permit_id": "WP-10244", "reason": "all checks passed"}
    ran = backend.run("workPermit.release", acme, args)
    assert ran.before is not None
    result = backend.compensate("workPermit.release", globex, args, ran.output, ran.before)
    assert result.compensated is False and result.reason == "RESOURCE_MISSING"


@pytest.mark.parametrize("mode", ["lost_write", "partial_write"])
def test_update_validity_failure_is_compensated(
    backend: InternalBackend, store: InternalStore, acme: InvocationContext, mode: str
) -> None:
    store.scope("acme").set_simulated_verification_failure("WP-10235", mode)  # type: ignore[arg-type]
    before = store.scope("acme").get_permit("WP-10235")
    assert before is not None
    args = {"permit_id": "WP-10235", "valid_until": "2026-12-31", "reason": "extend"}
    ran = backend.run("workPermit.updateValidity", acme, args)
    check = backend.verify("workPermit.updateValidity", acme, args, ran.output)
    assert check.verified is False and check.observed == {"valid_until": before.valid_until}
    half = store.scope("acme").get_permit("WP-10235")
    assert half is not None
    # partial_write stamps the change as made while the date itself is lost.
    assert (half.updated_by == "alice via work-permit-agent") is (mode == "partial_write")
    assert ran.before is not None
    result = backend.compensate("workPermit.updateValidity", acme, args, ran.output, ran.before)
    assert result.compensated
    assert result.reason == ("RESTORED" if mode == "partial_write" else "ALREADY_IN_PREVIOUS_STATE")
    assert result.summary == f"valid_until={before.valid_until}"
    assert store.scope("acme").get_permit("WP-10235") == before


def test_simulated_failure_modes_at_run_time(store: InternalStore) -> None:
    scope = store.scope("acme")
    for enabled, mode in [(True, "lost_write"), ("partial_write", "partial_write"), (False, None),
                          ("lost_write", "lost_write")]:
        scope.set_simulated_verification_failure("WP-10231", enabled)  # type: ignore[arg-type]
        permit = scope.get_permit("WP-10231")
        assert permit is not None and permit.simulate_failure == mode
    with pytest.raises(ValueError):
        scope.set_simulated_verification_failure("WP-10231", "half_write")  # type: ignore[arg-type]


def test_compensation_is_only_for_mutations(backend: InternalBackend, acme: InvocationContext) -> None:
    from capability_svc.errors import CapabilityNotFound
    from capability_svc.invocation import PriorState

    assert backend.run("workPermit.get", acme, {"permit_id": "WP-10231"}).before is None
    with pytest.raises(CapabilityNotFound):
        backend.compensate("workPermit.get", acme, {"permit_id": "WP-10231"}, {},
                           PriorState("permit", "WP-10231", {"status": "PENDING_RELEASE"}))


# --- the worker-assignment domain's capabilities ------------------------------------------------------


def test_employee_get_is_the_hr_record_without_health_data(
    backend: InternalBackend, registry: CapabilityRegistry, acme: InvocationContext, globex: InvocationContext
) -> None:
    out = backend.execute("employee.get", acme, {"worker_id": "W-1030"})
    registry.validate_output(registry.get("employee.get").manifest, out)
    assert (out["name"], out["employment_status"]) == ("Paula Neves", "INACTIVE")
    assert out["provenance"]["source"] == "hr-registry"
    assert backend.execute("employee.get", acme, {"worker_id": "W-1001"})["employment_status"] == "ACTIVE"
    assert backend.execute("employee.get", globex, {"worker_id": "W-2003"})["employment_status"] == "ON_LEAVE"
    assert not {"medical_notes", "medical", "diagnosis"} & set(out)
    # Another tenant's worker is the same "not found" as one that does not exist.
    for worker in ("W-2003", "W-9999"):
        err = not_found(backend, acme, "employee.get", {"worker_id": worker})
        assert (err.reason, err.message) == ("RESOURCE_NOT_FOUND", f"'{worker}' not found")


@pytest.mark.parametrize(("tenant", "worker", "permit", "status"), [
    ("acme", "W-1001", "WP-10232", "FIT"),
    ("acme", "W-1003", "WP-10231", "FIT"),
    ("acme", "W-1031", "WP-10231", "UNFIT"),
    ("acme", "W-1004", "WP-10231", "NOT_EVALUATED"),  # no exam at all
    ("globex", "W-2002", "WP-20001", "FIT"),
])
def test_medical_eligibility_is_a_status_never_a_diagnosis(
    backend: InternalBackend, registry: CapabilityRegistry, tenant: str, worker: str, permit: str, status: str
) -> None:
    out = backend.execute("medical.getEligibility", InvocationContext(tenant, "u"),
                          {"worker_id": worker, "permit_id": permit})
    registry.validate_output(registry.get("medical.getEligibility").manifest, out)
    assert (out["worker_id"], out["permit_id"], out["status"]) == (worker, permit, status)
    assert set(out) == {"worker_id", "permit_id", "work_type", "status", "valid_until", "provenance"}
    assert out["provenance"]["source"] == "occupational-health"


def test_medical_eligibility_follows_the_exam_and_the_permit(store: InternalStore, clock: Any) -> None:
    from capability_svc.world import parse_world_text

    world = parse_world_text("""
format: agentmesh-world/v1
tenants:
  - id: initech
    name: Initech
    workers:
      - {id: W-1, name: A, job_title: J, company: C,
         medical: {exam_date: 2026-01-01, valid_until: 2026-12-01, fit_for: [ELECTRICAL],
                   diagnosis: Secret condition, clinical_notes: Secret notes}}
      - {id: W-2, name: B, job_title: J, company: C,
         medical: {exam_date: 2026-01-01, valid_until: 2027-12-01, fit_for: [WORK_AT_HEIGHT]}}
    permits:
      - {id: WP-1, title: T, site: S, work_type: ELECTRICAL, status: PENDING_RELEASE, valid_from: 2026-11-28,
         valid_until: 2026-12-12, requested_by: r}
""")
    store.replace_world(world, source="test")
    backend = InternalBackend(store)
    ctx = InvocationContext("initech", "u")
    expired = backend.execute("medical.getEligibility", ctx, {"worker_id": "W-1", "permit_id": "WP-1"})
    assert (expired["status"], expired["valid_until"]) == ("EXAM_EXPIRED", "2026-12-01")  # ends before the permit
    other = backend.execute("medical.getEligibility", ctx, {"worker_id": "W-2", "permit_id": "WP-1"})
    assert other["status"] == "NOT_EVALUATED"  # the exam does not cover electrical work
    assert "Secret" not in str(expired) and "Secret" not in str(other)
    # The clinical data is stored (it is the occupational-health record), just never served.
    with sqlite3.connect(store.path) as conn:
        assert conn.execute("SELECT diagnosis FROM medical_records WHERE worker_id = 'W-1'").fetchone() == (
            "Secret condition",)
    for args in ({"worker_id": "W-9", "permit_id": "WP-1"}, {"worker_id": "W-1", "permit_id": "WP-9"}):
        assert not_found(backend, ctx, "medical.getEligibility", args).reason == "RESOURCE_NOT_FOUND"
    # And another tenant cannot read it.
    assert not_found(backend, InvocationContext("acme", "u"), "medical.getEligibility",
                     {"worker_id": "W-1", "permit_id": "WP-1"}).message == "'W-1' not found"


def test_a_schema_2_file_gets_the_employment_status(tmp_path: Any) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE workers (tenant_id TEXT NOT NULL, worker_id TEXT NOT NULL, name TEXT NOT NULL,"
                     " job_title TEXT NOT NULL, company TEXT NOT NULL, medical_notes TEXT,"
                     " PRIMARY KEY (tenant_id, worker_id))")
        conn.execute("INSERT INTO workers VALUES ('acme', 'W-1', 'A', 'J', 'C', NULL)")
    InternalStore(path)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT employment_status FROM workers").fetchone() == ("ACTIVE",)
