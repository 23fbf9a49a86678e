"""Employee agent: may this worker be put on this permit at all? (the worker-assignment domain's first stage)

Input (first stage of the worker-assignment plan): ``worker_id``, ``permit_id``.
Two calls, concurrently: ``employee.get`` (the HR record) and ``workPermit.get``
(the permit). Both are read in the caller's tenant only, so a worker or permit
of another tenant is simply not found there — the answer is the same whether
it exists elsewhere or nowhere.

=================================  =======  ==================================================
subject                            verdict  rule
=================================  =======  ==================================================
``worker:<id>/employment``         PASS     ``employment_status`` ACTIVE (FACT ``WORKER_ACTIVE``)
                                   FAIL     any other status (FACT ``WORKER_NOT_ACTIVE``, with the status)
``worker:<id>/tenant``             PASS     the worker and the permit are both records of the caller's
                                            tenant (FACT ``WORKER_IN_PERMIT_TENANT``, both records cited)
                                   FAIL     the worker is not a worker of the tenant (FACT
                                            ``WORKER_NOT_IN_TENANT``)
``permit:<id>/tenant``             FAIL     the permit is not a permit of the tenant (FACT ``PERMIT_NOT_FOUND``)
=================================  =======  ==================================================

``result.assignable`` is true when all of that holds, false when any of it is
definitely not so (the plan's ``worker_assignable`` condition then skips the
other tasks and the answer says why). When it is true, ``result.assignment``
is the context the supervisor projects for the other agents:
``{permit_id, work_type, valid_from, valid_until, required_trainings,
workers: [{worker_id}], worker_id}`` — the permit's facts that matter for
this worker, never the permit's other workers nor anyone's medical notes
(``workPermit.get`` carries those; they are dropped here). A call that could
not be answered leaves the result FAILED (``assignable`` absent): without the
records nothing is established, and nothing after this task runs. A worker
already on the permit is reported (INFERENCE ``ALREADY_ASSIGNED``); it does
not change the verdict.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentmesh.result_contract import Verdict
from agentmesh.v1 import common_pb2
from specialist_svc.phrases import say
from specialist_svc.rules import (
    AgentFailed,
    CallFailure,
    CapabilityClient,
    ResultBuilder,
    call_or_failure,
    iso_date,
    parallel_map,
    require_id,
    run_guarded,
    token,
)

__all__ = ["AGENT_ID", "CAPABILITIES", "run"]

AGENT_ID = "employee-agent"
EMPLOYEE = "employee.get"
PERMIT = "workPermit.get"
CAPABILITIES = (EMPLOYEE, PERMIT)
"""Capabilities these rules call (each must be among the agent's registered ones)."""

ACTIVE = "ACTIVE"
"""The one employment status that lets a worker be assigned."""



def run(data: Mapping[str, Any], client: CapabilityClient) -> common_pb2.AgentResult:
    """May the worker be assigned to the permit at all (see the module docstring)?

    Raises:
        TaskInputInvalid: ``worker_id`` or ``permit_id`` missing or not an id.
    """
    worker_id, permit_id = require_id(data, "worker_id"), require_id(data, "permit_id")

    def rules() -> common_pb2.AgentResult:
        employee, permit = parallel_map(
            lambda call: call_or_failure(client, call[0], call[1]),
            [(EMPLOYEE, {"worker_id": worker_id}), (PERMIT, {"permit_id": permit_id})])
        for answer, what in ((employee, EMPLOYEE), (permit, PERMIT)):
            if isinstance(answer, CallFailure) and answer.kind != "not_found":
                # Without both records nothing is established: FAILED, naming why (no `assignable`).
                raise AgentFailed(answer.code, answer.detail)
            if not isinstance(answer, CallFailure) and not answer[1]:
                raise AgentFailed("EVIDENCE_MISSING", f"{what}: the answer carries no provenance")
        out = ResultBuilder()
        employment, in_tenant = f"worker:{worker_id}/employment", f"worker:{worker_id}/tenant"
        permit_subject = f"permit:{permit_id}/tenant"
        found_worker = not isinstance(employee, CallFailure)
        found_permit = not isinstance(permit, CallFailure)
        worker_ev = permit_ev = -1
        active = False
        if not isinstance(employee, CallFailure):
            record, refs = employee
            if record.get("worker_id") != worker_id:
                raise AgentFailed("HR_REGISTRY_MALFORMED", f"{EMPLOYEE}: the answer is for another worker")
            status = record.get("employment_status")
            worker_ev = out.evidence(refs[0], data={"worker_id": worker_id, "employment_status": status})
            active = status == ACTIVE
            if active:
                out.judge(employment, Verdict.PASS)
                out.fact("WORKER_ACTIVE", say("Worker {worker_id} is ACTIVE", worker_id=worker_id),
                         subject=employment, evidence=[worker_ev])
            else:
                out.judge(employment, Verdict.FAIL)
                out.fact("WORKER_NOT_ACTIVE", say("Worker {worker_id} is {status}, not ACTIVE", worker_id=worker_id,
                                                  status=token(status, say("unrecognised"))),
                         subject=employment, evidence=[worker_ev])
        else:
            out.judge(in_tenant, Verdict.FAIL)
            out.fact("WORKER_NOT_IN_TENANT", say("Worker {worker_id} is not a worker of this tenant, the "
                                                 "permit's", worker_id=worker_id), subject=in_tenant)
        assignment: dict[str, Any] | None = None
        if not isinstance(permit, CallFailure):
            output, refs = permit
            if output.get("permit_id") != permit_id:
                raise AgentFailed("PERMIT_REGISTRY_MALFORMED", f"{PERMIT}: the answer is for another permit")
            trainings = output.get("required_trainings")
            workers = output.get("workers")
            on_permit = [w.get("worker_id") for w in workers if isinstance(w, Mapping)] \
                if isinstance(workers, list) else []
            if not isinstance(trainings, list) or not all(isinstance(t, str) for t in trainings) or \
                    iso_date(output.get("valid_from")) is None or iso_date(output.get("valid_until")) is None:
                raise AgentFailed("PERMIT_REGISTRY_MALFORMED", f"{PERMIT}: the permit's window or trainings are "
                                  "not readable")
            # Only the facts that matter for this worker; never the permit's other workers or medical notes.
            assignment = {
                "permit_id": permit_id, "work_type": output.get("work_type"),
                "valid_from": output.get("valid_from"), "valid_until": output.get("valid_until"),
                "required_trainings": list(trainings), "workers": [{"worker_id": worker_id}],
                "worker_id": worker_id,
            }
            permit_ev = out.evidence(refs[0], data={k: v for k, v in assignment.items() if k != "workers"})
            if worker_id in on_permit:
                out.inference("ALREADY_ASSIGNED", say("Worker {worker_id} is already on permit {permit_id}",
                                                      worker_id=worker_id, permit_id=permit_id),
                              subject=in_tenant, evidence=[permit_ev])
        else:
            out.judge(permit_subject, Verdict.FAIL)
            out.fact("PERMIT_NOT_FOUND", say("Permit {permit_id} is not a permit of this tenant", permit_id=permit_id),
                     subject=permit_subject)
        if found_worker and found_permit:
            out.judge(in_tenant, Verdict.PASS)
            out.fact("WORKER_IN_PERMIT_TENANT", say("Worker {worker_id} and permit {permit_id} are records of the "
                                                    "same tenant", worker_id=worker_id, permit_id=permit_id),
                     subject=in_tenant, evidence=[worker_ev, permit_ev])
        assignable = found_worker and found_permit and active
        if not assignable:
            out.recommendation("DO_NOT_ASSIGN", say("Worker {worker_id} cannot be assigned to permit {permit_id}",
                                                    worker_id=worker_id, permit_id=permit_id))
        extra: dict[str, Any] = {"assignable": assignable}
        if assignable and assignment is not None:
            extra["assignment"] = assignment
        return out.build(extra)

    return run_guarded(rules)
