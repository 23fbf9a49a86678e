"""Work-permit agent: assesses a permit, releases one (verified), and finds permits a training affects.

Three operations, chosen by the input's ``operation``:

``assess`` (the default)
    Does the permit exist in the caller's tenant, and does its own state allow a release?
``release`` (PRD §67, §73)
    Releases a permit with ``workPermit.release`` and verifies the effect itself.
``affected_by_training`` (PRD §44, §28)
    Which PENDING_RELEASE or RELEASED permits of a worker require a given training. Reads only.

Assess
------

Input (projection ``permit.assess`` / ``permit.status``): ``permit_id``. One
``workPermit.get`` call. The result carries ``permit_found`` and, when found,
``permit`` — the record as the capability returned it without ``provenance``
and without ``workers[].medical_notes`` — which the supervisor projects for
the other agents.

=============================  =======  ==================================================
subject                        verdict  rule
=============================  =======  ==================================================
``permit:<id>/status``         PASS     status ``PENDING_RELEASE`` (FACT ``PERMIT_PENDING_RELEASE``)
                               FAIL     ``RELEASED`` (``PERMIT_ALREADY_RELEASED``), anything else
                                        (``PERMIT_NOT_RELEASABLE``)
``permit:<id>/validity``       PASS     ``valid_from`` ≤ ``valid_until`` and the window has not
                                        ended by the mesh's date (``PERMIT_WINDOW_VALID``)
                               FAIL     it ends before it starts (``PERMIT_WINDOW_INVALID``), or it
                                        ended before the mesh's date (``PERMIT_WINDOW_ENDED``)
``permit:<id>/workers``        PASS     at least one worker assigned (``PERMIT_WORKERS_ASSIGNED``)
                               FAIL     none (``PERMIT_HAS_NO_WORKERS``)
``permit:<id>/added_worker:W`` PASS     W, added after the crew was planned, holds every required
                                        training for the window: the training agent's answer to
                                        the handoff (``ADDED_WORKER_QUALIFIED``, its evidence)
                               FAIL     the training agent found a FAIL (``ADDED_WORKER_NOT_QUALIFIED``)
                               UNKNOWN  the handoff was refused or failed, or the training agent
                                        could not establish it (UNCERTAINTY ``ADDED_WORKER_UNVERIFIED``)
=============================  =======  ==================================================

The mesh's date (``TaskContext.today``: ``MeshConfig.today``, else the host's
UTC date) is the only clock read: the same record on the same day always gives
the same answer, and the evidence records the date it was judged against.

Workers added after planning (PRD §20): the permit's ``added_workers`` were not
in the crew the plan's training task was given, so the agent hands them off to
the training agent — the first call answers WAITING with one handoff
(``action_id`` ``added-workers``, purpose ``training.verify``, the permit's
window, required trainings and the added workers); the supervisor runs it if it
admits it and calls the agent again with its outcome, and the agent finishes
its assessment with it (subjects above).

Not found (NOT_FOUND — also what a permit of another tenant looks like) →
``permit_found: false``, verdict UNKNOWN, no subjects, and nothing else: the
answer is the same whether the permit exists nowhere or in another tenant.
A permit that could not be read (timeout, registry unavailable, bad answer) →
a FAILED result whose ``error_reason`` names why (e.g. ``PERMIT_REGISTRY_TIMEOUT:
...``) with an UNCERTAINTY statement: not even its existence is established.

Release
-------

Input: ``permit_id``, ``reason`` (3–500 characters), ``idempotency_key`` (sent
with the call, so a retried task never releases twice). ``workPermit.release``,
then an independent read-back with ``workPermit.get``: only a permit that reads
back ``RELEASED`` is a success — subject ``permit:<id>/release`` PASS, FACT
``PERMIT_RELEASED`` citing both answers, and ``result.release`` =
``{permit_id, status, previous_status, released_at, released_by, verified: true}``
(plus ``permit_found``/``permit``, the record read back). Anything else is a
FAILED result, never something that looks like a success; its ``error_reason``
is ``CODE: workPermit.<capability> <ErrorInfo reason>: <message>`` and its
``result.release`` is ``{permit_id, verified: false, reason_code, ...}``:

==============================================  ===============================
the call's error                                 ``error_reason`` code
==============================================  ===============================
ABORTED ``VERIFICATION_FAILED`` (the service's   ``RELEASE_VERIFICATION_FAILED``
own read-back failed; ``compensated`` and        (``; compensated: true, restored
``restored`` from ErrorInfo metadata)            status=...`` appended; both also in
                                                 ``result.release``)
FAILED_PRECONDITION (``CONFIRMATION_REQUIRED``,  ``RELEASE_REFUSED``
``HUMAN_APPROVAL_REQUIRED``,
``PERMIT_ALREADY_RELEASED``, ...), ABORTED
``IDEMPOTENCY_KEY_REUSED``
PERMISSION_DENIED, UNAUTHENTICATED               ``NOT_AUTHORISED``
NOT_FOUND (the permit)                           ``PERMIT_NOT_FOUND``
policy or audit unavailable (nothing executed)   ``GOVERNANCE_UNAVAILABLE``
timeout, unavailable, internal, other ABORTED    ``RELEASE_OUTCOME_UNKNOWN`` (the
                                                 write may have happened)
ABORTED ``IDEMPOTENCY_KEY_FAILED`` (the key's     ``RELEASE_FAILED_EARLIER`` (the
first call failed once its effect was attempted;  permit read back, its status
it never runs again)                             appended and in ``result.release``)
INVALID_ARGUMENT, UNIMPLEMENTED, ...             ``CAPABILITY_REJECTED``
the release answered, the read-back failed       ``RELEASE_NOT_VERIFIED``
the read-back does not show ``RELEASED``         ``RELEASE_NOT_VISIBLE``
==============================================  ===============================

Affected by training
--------------------

Input: ``worker_id``, ``training_code``. ``workPermit.search`` by worker, once
per status (``PENDING_RELEASE``, ``RELEASED``), then ``workPermit.get`` per
permit found; the record read decides (its status, workers and
``required_trainings``), not the search summary. Subjects:

=====================================  =======  =================================================
subject                                verdict  rule
=====================================  =======  =================================================
``worker:<id>/permits``                PASS     the searches are complete (FACT ``WORKER_PERMITS_LISTED``)
                                       UNKNOWN  a search was truncated (UNCERTAINTY ``PERMIT_SEARCH_TRUNCATED``)
``permit:<id>/training:<code>``        FAIL     the permit is PENDING_RELEASE or RELEASED, lists the worker
                                                and requires the training (FACT ``PERMIT_REQUIRES_TRAINING``,
                                                RECOMMENDATION ``SUSPEND_PERMIT`` for RELEASED,
                                                ``HOLD_RELEASE`` for PENDING_RELEASE)
                                       PASS     it does not require the training (``TRAINING_NOT_REQUIRED``),
                                                no longer lists the worker (``WORKER_NOT_ON_PERMIT``) or is
                                                in another status by now (``PERMIT_NOT_ACTIVE``)
                                       UNKNOWN  it could not be read (UNCERTAINTY; result PARTIAL)
=====================================  =======  =================================================

``result`` adds ``affected_permits: [{permit_id, status, recommendation}]``
(``SUSPEND`` | ``HOLD_RELEASE``), ``unverified_permits`` (ids that could not be
read), ``worker_id`` and ``training_code``. A search that fails is a FAILED
result: without the list, "nothing affected" cannot be said. Nothing is changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentmesh import errors
from agentmesh.clock import utc_today
from agentmesh.result_contract import ContractViolation, Verdict, check_result
from agentmesh.v1 import common_pb2
from specialist_svc.phrases import say
from specialist_svc.rules import (
    AgentFailed,
    CallFailure,
    CapabilityClient,
    ResultBuilder,
    TaskContext,
    TaskInputInvalid,
    call_or_failure,
    classify,
    handoff,
    handoff_failure,
    is_id,
    iso_date,
    parallel_map,
    require_id,
    require_str,
    run_guarded,
    token,
    waiting,
)

__all__ = ["ADDED_WORKERS", "AGENT_ID", "CAPABILITIES", "OPERATIONS", "permit_record", "run", "run_in_context"]

AGENT_ID = "work-permit-agent"
CAPABILITY = "workPermit.get"
SEARCH = "workPermit.search"
RELEASE = "workPermit.release"
CAPABILITIES = (CAPABILITY, SEARCH, RELEASE)
"""Capabilities these rules call (each must be among the agent's registered ones).

Each operation needs only some of them in its task grant: ``assess``
``workPermit.get``; ``release`` ``workPermit.release`` and ``workPermit.get``;
``affected_by_training`` ``workPermit.search`` and ``workPermit.get``.
"""

OPERATIONS = ("assess", "release", "affected_by_training")
"""The values of the input's ``operation``; absent means ``assess``."""

RELEASABLE = "PENDING_RELEASE"
RELEASED = "RELEASED"
_RECOMMENDATIONS = {RELEASED: ("SUSPEND", "SUSPEND_PERMIT"), RELEASABLE: ("HOLD_RELEASE", "HOLD_RELEASE")}
"""Status of an affected permit → (``affected_permits[].recommendation``, RECOMMENDATION code)."""
_SEARCH_LIMIT = 100
_REASON_LENGTH = (3, 500)
_SENSITIVE_WORKER_FIELDS = ("medical_notes",)


def permit_record(output: Mapping[str, Any]) -> dict[str, Any]:
    """The permit as ``workPermit.get`` returned it, minus ``provenance`` and workers' medical notes."""
    record = {k: v for k, v in output.items() if k != "provenance"}
    workers = record.get("workers")
    if isinstance(workers, list):
        record["workers"] = [
            {k: v for k, v in w.items() if k not in _SENSITIVE_WORKER_FIELDS} if isinstance(w, Mapping) else w
            for w in workers
        ]
    return record


def _not_found(permit_id: str) -> common_pb2.AgentResult:
    out = ResultBuilder()
    out.fact("PERMIT_NOT_FOUND", say("Permit {permit_id} was not found", permit_id=token(permit_id)))
    result = out.build({"permit_found": False})
    # Complete as an answer: "not found" is the analysis' result, not a gap in it.
    result.status = common_pb2.RESULT_STATUS_SUCCESS
    result.confidence = 1.0
    return result


ADDED_WORKERS = "added-workers"
"""``action_id`` of the handoff of a permit's added workers to the training agent."""
TRAINING_AGENT = "training-agent"


def run_in_context(data: Mapping[str, Any], client: CapabilityClient, context: TaskContext) -> common_pb2.AgentResult:
    """The operation the input names (see the module docstring).

    Raises:
        TaskInputInvalid: an unknown ``operation``, or a field the operation needs is missing or malformed.
    """
    operation = data.get("operation", "assess")
    if operation == "release":
        return _release(data, client)
    if operation == "affected_by_training":
        return _affected_by_training(data, client)
    if operation != "assess":
        raise TaskInputInvalid(f"must be one of {', '.join(OPERATIONS)}", field="operation")
    return _assess(data, client, context)


def run(data: Mapping[str, Any], client: CapabilityClient) -> common_pb2.AgentResult:
    """:func:`run_in_context` on the host's UTC date, with no handoff outcomes."""
    return run_in_context(data, client, TaskContext(today=utc_today()))



# --- assess -----------------------------------------------------------------------------------------

def _added_workers(output: Mapping[str, Any]) -> list[str]:
    """Ids of the workers added after planning, in order (only well-formed ids: others are not asked about)."""
    added = output.get("added_workers")
    if not isinstance(added, list):
        return []
    ids = [w.get("worker_id") for w in added if isinstance(w, Mapping)]
    return list(dict.fromkeys(str(i) for i in ids if is_id(i)))


def _judge_added(out: ResultBuilder, permit_id: str, added: list[str],
                 outcome: common_pb2.HandoffOutcome | None) -> None:
    """The added workers' subjects, from the training agent's answer to the handoff (or why there is none)."""
    failure = handoff_failure(outcome)
    parsed = None
    if not failure and outcome is not None:
        result = outcome.result
        try:
            if result.agent_id != TRAINING_AGENT:
                raise ContractViolation("the handoff's result is not the training agent's", field="agent_id")
            parsed = check_result(result)  # the structure every result has
        except ContractViolation as err:
            failure = f"HANDOFF_RESULT_UNUSABLE: {err.field}"
    for wid in added:
        subject = f"permit:{permit_id}/added_worker:{wid}"
        if parsed is None or outcome is None:
            out.judge(subject, Verdict.UNKNOWN)
            out.uncertainty("ADDED_WORKER_UNVERIFIED",
                            say("Worker {worker} was added to permit {permit_id} after its crew was planned; their "
                                "trainings could not be verified ({failure})",
                                worker=token(wid), permit_id=permit_id, failure=failure),
                            subject=subject)
            continue
        result = outcome.result
        mine = {k: v for k, v in parsed.subjects.items() if k.startswith(f"worker:{wid}/")}
        facts = [st for st in result.statements
                 if st.kind == common_pb2.STATEMENT_KIND_FACT and st.subject in mine and st.evidence_indexes]
        failing = [f"{token(st.subject.split('/', 1)[1])} {token(st.code)}" for st in facts
                   if mine.get(st.subject) is Verdict.FAIL]
        verdicts = set(mine.values())
        if not mine or Verdict.UNKNOWN in verdicts and Verdict.FAIL not in verdicts:
            codes = sorted({token(st.code) for st in result.statements
                            if st.kind == common_pb2.STATEMENT_KIND_UNCERTAINTY and st.subject in mine})
            out.judge(subject, Verdict.UNKNOWN)
            out.uncertainty("ADDED_WORKER_UNVERIFIED",
                            say("Worker {worker} was added to permit {permit_id} after its crew was planned; the "
                                "training agent could not establish their trainings ({codes})",
                                worker=token(wid), permit_id=permit_id,
                                codes=", ".join(codes) or say("no answer")),
                            subject=subject)
            continue
        # The training agent's evidence, as it cited it, for the subjects this verdict rests on.
        wanted = Verdict.FAIL if Verdict.FAIL in verdicts else Verdict.PASS
        cited = [out.evidence(result.evidence[i]) for st in facts if mine.get(st.subject) is wanted
                 for i in st.evidence_indexes if 0 <= i < len(result.evidence)]
        if wanted is Verdict.FAIL:
            out.judge(subject, Verdict.FAIL)
            out.fact("ADDED_WORKER_NOT_QUALIFIED",
                     say("Worker {worker}, added to permit {permit_id} after its crew was planned, does not hold what "
                         "the permit requires: {failing} ({agent})", worker=token(wid), permit_id=permit_id,
                         failing="; ".join(dict.fromkeys(failing)), agent=TRAINING_AGENT),
                     subject=subject, evidence=cited)
        else:
            out.judge(subject, Verdict.PASS)
            out.fact("ADDED_WORKER_QUALIFIED",
                     say("Worker {worker}, added to permit {permit_id} after its crew was planned, holds every "
                         "training the permit requires for its window ({agent})", worker=token(wid),
                         permit_id=permit_id, agent=TRAINING_AGENT),
                     subject=subject, evidence=cited)


def _assess(data: Mapping[str, Any], client: CapabilityClient, context: TaskContext) -> common_pb2.AgentResult:
    permit_id = require_str(data, "permit_id")
    if not is_id(permit_id):
        raise TaskInputInvalid("not a permit id", field="permit_id")

    def rules() -> common_pb2.AgentResult:
        answer = call_or_failure(client, CAPABILITY, {"permit_id": permit_id})
        prefix = f"permit:{permit_id}"
        subjects = [f"{prefix}/status", f"{prefix}/validity", f"{prefix}/workers"]
        if isinstance(answer, CallFailure):
            if answer.kind == "not_found":
                return _not_found(permit_id)
            # Not even the permit's existence is established, so there is no
            # usable analysis (and no honest permit_found): FAILED, naming why.
            raise answer.failed()
        output, refs = answer
        if not refs:
            raise AgentFailed("EVIDENCE_MISSING", f"{CAPABILITY}: the answer carries no provenance")
        if output.get("permit_id") != permit_id:
            raise AgentFailed("PERMIT_REGISTRY_MALFORMED", f"{CAPABILITY}: the answer is for another permit")
        out = ResultBuilder()
        record = permit_record(output)
        ref = refs[0]
        status = output.get("status")
        workers = output.get("workers")
        ids = [w.get("worker_id") for w in workers if isinstance(w, Mapping)] if isinstance(workers, list) else []
        added = _added_workers(output)
        if added and not context.again:
            # Workers the plan's training task does not cover: the training agent checks them (PRD §20).
            return waiting(handoff(
                ADDED_WORKERS, TRAINING_AGENT, purpose="training.verify", required_capabilities=["training.getStatus"],
                input={"permit_id": permit_id, "valid_from": output.get("valid_from"),
                       "valid_until": output.get("valid_until"),
                       "required_trainings": output.get("required_trainings") or [],
                       "workers": [{"worker_id": w} for w in added]},
                reason=f"Verify the trainings of the worker(s) added to permit {permit_id} after its crew was planned"))
        today = context.today
        # One reference to the permit record, with the fields the rules read (and the date it was judged on).
        ev = out.evidence(ref, data={
            "permit_id": permit_id, "status": status, "valid_from": output.get("valid_from"),
            "valid_until": output.get("valid_until"), "worker_ids": [str(i) for i in ids],
            **({"added_worker_ids": added} if added else {}), "judged_on": today.isoformat()})
        shown = token(status, say("unrecognised"))
        if status == RELEASABLE:
            out.judge(subjects[0], Verdict.PASS)
            out.fact(
                "PERMIT_PENDING_RELEASE",
                say("Permit {permit_id} is {RELEASABLE}", permit_id=permit_id, RELEASABLE=RELEASABLE),
                subject=subjects[0],
                evidence=[ev],
            )
        elif status == "RELEASED":
            out.judge(subjects[0], Verdict.FAIL)
            out.fact(
                "PERMIT_ALREADY_RELEASED",
                say("Permit {permit_id} is already RELEASED", permit_id=permit_id),
                subject=subjects[0],
                evidence=[ev],
            )
        else:
            out.judge(subjects[0], Verdict.FAIL)
            out.fact(
                "PERMIT_NOT_RELEASABLE",
                say(
                    "Permit {permit_id} is {shown}; only {RELEASABLE} can be released",
                    permit_id=permit_id,
                    shown=shown,
                    RELEASABLE=RELEASABLE,
                ),
                subject=subjects[0],
                evidence=[ev],
            )

        start, end = iso_date(output.get("valid_from")), iso_date(output.get("valid_until"))
        if start is None or end is None:
            out.judge(subjects[1], Verdict.UNKNOWN)
            out.uncertainty(
                "PERMIT_WINDOW_UNREADABLE",
                say("The validity window of permit {permit_id} is not readable", permit_id=permit_id),
                subject=subjects[1],
                evidence=[ev],
            )
        elif end < start:
            out.judge(subjects[1], Verdict.FAIL)
            out.fact(
                "PERMIT_WINDOW_INVALID",
                say(
                    "Permit {permit_id} ends ({end}) before it starts ({start})",
                    permit_id=permit_id,
                    end=end,
                    start=start,
                ),
                subject=subjects[1],
                evidence=[ev],
            )
        elif end < today:
            out.judge(subjects[1], Verdict.FAIL)
            out.fact(
                "PERMIT_WINDOW_ENDED",
                say(
                    "Permit {permit_id} was valid from {start} until {end}: its window ended before {today}",
                    permit_id=permit_id,
                    start=start,
                    end=end,
                    today=today,
                ),
                subject=subjects[1],
                evidence=[ev],
            )
        else:
            out.judge(subjects[1], Verdict.PASS)
            out.fact(
                "PERMIT_WINDOW_VALID",
                say("Permit {permit_id} is valid from {start} until {end}", permit_id=permit_id, start=start, end=end),
                subject=subjects[1],
                evidence=[ev],
            )

        if ids:
            out.judge(subjects[2], Verdict.PASS)
            out.fact(
                "PERMIT_WORKERS_ASSIGNED",
                say("Permit {permit_id} has {n_ids} assigned worker(s)", permit_id=permit_id, n_ids=len(ids)),
                subject=subjects[2],
                evidence=[ev],
            )
        else:
            out.judge(subjects[2], Verdict.FAIL)
            out.fact(
                "PERMIT_HAS_NO_WORKERS",
                say("Permit {permit_id} has no assigned worker", permit_id=permit_id),
                subject=subjects[2],
                evidence=[ev],
            )

        if added:
            _judge_added(out, permit_id, added, context.handoffs.get(ADDED_WORKERS))

        if out.verdict is Verdict.FAIL:
            out.recommendation(
                "DO_NOT_RELEASE", say("Permit {permit_id} cannot be released in its current state", permit_id=permit_id)
            )
        return out.build({"permit_found": True, "permit": record})

    return run_guarded(rules)


# --- release ----------------------------------------------------------------------------------------

_GOVERNANCE_REASONS = frozenset({"POLICY_UNAVAILABLE", "AUDIT_UNAVAILABLE"})


def _call(
    client: CapabilityClient, capability_id: str, input: Mapping[str, Any]
) -> tuple[dict[str, Any], list[common_pb2.EvidenceReference]] | CallFailure:
    """One capability call; every failure is returned, fatal ones included."""
    try:
        return client.call(capability_id, input)
    except errors.MeshError as err:
        return classify(err, capability_id)


def _release_payload(permit_id: str, reason_code: str, **fields: Any) -> dict[str, Any]:
    return {
        "operation": "release",
        "release": {"permit_id": permit_id, "verified": False, "reason_code": reason_code, **fields},
    }


def _release_failed(permit_id: str, err: errors.MeshError) -> AgentFailed:
    """The FAILED result of a release call that did not succeed (see the module docstring's table)."""
    detail = f"{RELEASE} {err.reason}: {err.message}"
    extra: dict[str, Any] = {}
    if isinstance(err, errors.Aborted) and err.reason == "VERIFICATION_FAILED":
        code = "RELEASE_VERIFICATION_FAILED"
        # What the capability service did about the unverified write (ErrorInfo metadata):
        # whether it compensated, and what it restored. The caller needs both to know the permit's state.
        said = [
            f"{name}: {err.metadata[name]}" if name == "compensated" else f"{name} {err.metadata[name]}"
            for name in ("compensated", "restored")
            if name in err.metadata
        ]
        if said:
            detail += "; " + ", ".join(said)
        if "compensated" in err.metadata:
            flag = err.metadata["compensated"]
            extra["compensated"] = {"true": True, "false": False}.get(flag.lower(), flag)
        if "restored" in err.metadata:
            extra["restored"] = err.metadata["restored"]
    elif isinstance(err, errors.FailedPrecondition) or (
        isinstance(err, errors.Aborted) and err.reason == "IDEMPOTENCY_KEY_REUSED"
    ):
        code = "RELEASE_REFUSED"
    else:
        failure = classify(err, RELEASE)
        if failure.kind == "not_found":
            code = "PERMIT_NOT_FOUND"
        elif failure.kind == "fatal":
            code = failure.code
        elif isinstance(err, errors.Unavailable) and err.reason in _GOVERNANCE_REASONS:
            code = "GOVERNANCE_UNAVAILABLE"  # refused before anything was executed
        else:
            # A timeout, an unavailable registry, a release still in flight under this key:
            # the write may have happened. Never reported as "not released".
            code = "RELEASE_OUTCOME_UNKNOWN"
            detail += "; the release may have taken effect: read the permit before any retry"
    return AgentFailed(code, detail, payload=_release_payload(permit_id, err.reason, **extra))


def _failed_earlier(permit_id: str, err: errors.MeshError, client: CapabilityClient) -> AgentFailed:
    """The FAILED result of a release whose key's first call failed once its effect was attempted.

    The capability service never runs that key again, so the answer is definite: the release
    failed (the first call's reason is in the message). What the permit is now is read back and
    said, since the first call may have left it either way.
    """
    detail = f"{RELEASE} {err.reason}: {err.message}"
    answer = _call(client, CAPABILITY, {"permit_id": permit_id})
    if isinstance(answer, CallFailure):
        detail += f"; the read-back failed: {answer.code} {answer.detail}"
        return AgentFailed("RELEASE_FAILED_EARLIER", detail, payload=_release_payload(permit_id, err.reason))
    permit, get_refs = answer
    observed = token(permit.get("status"), say("unrecognised")) if get_refs else say("no evidence")
    detail += f"; {CAPABILITY} reads back {observed}"
    return AgentFailed("RELEASE_FAILED_EARLIER", detail,
                       payload=_release_payload(permit_id, err.reason, status=observed))


def _release(data: Mapping[str, Any], client: CapabilityClient) -> common_pb2.AgentResult:
    permit_id = require_id(data, "permit_id")
    reason = require_str(data, "reason")
    if not _REASON_LENGTH[0] <= len(reason) <= _REASON_LENGTH[1]:
        raise TaskInputInvalid(f"must be {_REASON_LENGTH[0]} to {_REASON_LENGTH[1]} characters", field="reason")
    key = require_str(data, "idempotency_key")

    def rules() -> common_pb2.AgentResult:
        try:
            released, release_refs = client.call(
                RELEASE, {"permit_id": permit_id, "reason": reason}, idempotency_key=key
            )
        except errors.MeshError as err:
            if isinstance(err, errors.Aborted) and err.reason == "IDEMPOTENCY_KEY_FAILED":
                raise _failed_earlier(permit_id, err, client) from err
            raise _release_failed(permit_id, err) from err
        if not release_refs:
            raise AgentFailed(
                "EVIDENCE_MISSING",
                f"{RELEASE}: the answer carries no provenance",
                payload=_release_payload(permit_id, "EVIDENCE_MISSING"),
            )
        if released.get("permit_id") != permit_id or released.get("status") != RELEASED:
            raise AgentFailed(
                "PERMIT_REGISTRY_MALFORMED",
                f"{RELEASE}: the answer is not a release of this permit",
                payload=_release_payload(permit_id, "PERMIT_REGISTRY_MALFORMED"),
            )

        # The independent verification step (§73): read the permit back ourselves.
        answer = _call(client, CAPABILITY, {"permit_id": permit_id})
        if isinstance(answer, CallFailure):
            raise AgentFailed(
                "RELEASE_NOT_VERIFIED",
                f"{RELEASE} answered RELEASED but the read-back failed: {answer.code} {answer.detail}; "
                f"the release was acknowledged: read the permit before any retry",
                payload=_release_payload(permit_id, answer.code),
            )
        permit, get_refs = answer
        observed = permit.get("status")
        if permit.get("permit_id") != permit_id or observed != RELEASED or not get_refs:
            shown = token(observed, say("unrecognised")) if get_refs else say("no evidence")
            raise AgentFailed(
                "RELEASE_NOT_VISIBLE",
                f"{RELEASE} answered RELEASED but {CAPABILITY} reads back {shown}",
                payload=_release_payload(permit_id, "RELEASE_NOT_VISIBLE", status=token(observed, say("unrecognised"))),
            )

        out = ResultBuilder()
        subject = f"permit:{permit_id}/release"
        summary = {name: released.get(name) for name in ("previous_status", "released_at", "released_by")}
        ev_release = out.evidence(release_refs[0], data={"permit_id": permit_id, "status": RELEASED, **summary})
        ev_read = out.evidence(
            get_refs[0],
            data={
                "permit_id": permit_id,
                "status": observed,
                "released_at": permit.get("released_at"),
                "released_by": permit.get("released_by"),
            },
        )
        out.judge(subject, Verdict.PASS)
        out.fact(
            "PERMIT_RELEASED",
            say(
                "Permit {permit_id} was released (previous status {previous_status}) and reads back {RELEASED}",
                permit_id=permit_id,
                previous_status=token(summary["previous_status"], say("unrecognised")),
                RELEASED=RELEASED,
            ),
            subject=subject,
            evidence=[ev_release, ev_read],
        )
        return out.build(
            {
                "operation": "release",
                "release": {"permit_id": permit_id, "status": observed, **summary, "verified": True},
                "permit_found": True,
                "permit": permit_record(permit),
            }
        )

    return run_guarded(rules)


# --- affected by training ---------------------------------------------------------------------------


def _permit_ids(output: Mapping[str, Any]) -> list[str] | None:
    """The ids of a search answer's permits in the searched statuses, or None when the answer is unusable."""
    permits = output.get("permits")
    if not isinstance(permits, list) or not all(isinstance(p, Mapping) and is_id(p.get("permit_id")) for p in permits):
        return None
    return [str(p["permit_id"]) for p in permits if p.get("status") in _RECOMMENDATIONS]


def _affected_by_training(data: Mapping[str, Any], client: CapabilityClient) -> common_pb2.AgentResult:
    worker_id = require_id(data, "worker_id")
    course = require_id(data, "training_code")

    def search(status: str) -> tuple[str, tuple[dict[str, Any], list[common_pb2.EvidenceReference]] | CallFailure]:
        return status, call_or_failure(
            client, SEARCH, {"worker_id": worker_id, "status": status, "limit": _SEARCH_LIMIT}
        )

    def read(permit_id: str) -> tuple[str, tuple[dict[str, Any], list[common_pb2.EvidenceReference]] | CallFailure]:
        return permit_id, call_or_failure(client, CAPABILITY, {"permit_id": permit_id})

    def rules() -> common_pb2.AgentResult:
        out = ResultBuilder()
        listed = f"worker:{worker_id}/permits"
        found: list[str] = []
        search_evidence: list[int] = []
        truncated = False
        for status, answer in parallel_map(search, list(_RECOMMENDATIONS)):
            if isinstance(answer, CallFailure):
                # Without the list, "no permit is affected" cannot be said: no usable answer.
                raise AgentFailed(answer.code, answer.detail)
            output, refs = answer
            ids = _permit_ids(output)
            if not refs:
                raise AgentFailed("EVIDENCE_MISSING", f"{SEARCH}: the answer carries no provenance")
            if ids is None:
                raise AgentFailed("PERMIT_REGISTRY_MALFORMED", f"{SEARCH}: the answer lists no usable permits")
            cut = output.get("truncated") is True
            truncated = truncated or cut
            search_evidence.append(
                out.evidence(
                    refs[0], data={"worker_id": worker_id, "status": status, "permit_ids": ids, "truncated": cut}
                )
            )
            found.extend(ids)
        found = sorted(set(found))
        if truncated:
            out.judge(listed, Verdict.UNKNOWN)
            out.uncertainty(
                "PERMIT_SEARCH_TRUNCATED",
                say(
                    "The permit registry lists more than {SEARCH_LIMIT} permits of worker {worker_id} in "
                    "one status; permits past the limit were not checked",
                    SEARCH_LIMIT=_SEARCH_LIMIT,
                    worker_id=worker_id,
                ),
                subject=listed,
                evidence=search_evidence,
            )
        else:
            out.judge(listed, Verdict.PASS)
            out.fact(
                "WORKER_PERMITS_LISTED",
                say(
                    "The permit registry lists {n_found} permit(s) of worker {worker_id} "
                    "that are {RELEASABLE} or {RELEASED}",
                    n_found=len(found),
                    worker_id=worker_id,
                    RELEASABLE=RELEASABLE,
                    RELEASED=RELEASED,
                ),
                subject=listed,
                evidence=search_evidence,
            )

        affected: list[dict[str, str]] = []
        unverified: list[str] = []
        for permit_id, answer in parallel_map(read, found):
            subject = f"permit:{permit_id}/training:{course}"
            if isinstance(answer, CallFailure):
                failure = answer
                if failure.kind == "not_found":
                    failure = CallFailure("uncertain", "PERMIT_NOT_FOUND", failure.detail)
                out.unanswered(failure, [subject], say("Permit {permit_id}", permit_id=permit_id))
                unverified.append(permit_id)
                continue
            permit, refs = answer
            trainings, workers = permit.get("required_trainings"), permit.get("workers")
            if (
                not refs
                or permit.get("permit_id") != permit_id
                or not isinstance(trainings, list)
                or not isinstance(workers, list)
            ):
                code = "PERMIT_REGISTRY_MALFORMED" if refs else "EVIDENCE_MISSING"
                out.unanswered(
                    CallFailure("uncertain", code, f"{CAPABILITY}: unusable answer for {permit_id}"),
                    [subject],
                    say("Permit {permit_id}", permit_id=permit_id),
                )
                unverified.append(permit_id)
                continue
            current = permit.get("status")
            worker_ids = [w.get("worker_id") for w in workers if isinstance(w, Mapping)]
            ev = out.evidence(
                refs[0],
                data={
                    "permit_id": permit_id,
                    "status": current,
                    "required_trainings": trainings,
                    "worker_ids": [str(i) for i in worker_ids],
                },
            )
            if current not in _RECOMMENDATIONS:
                out.judge(subject, Verdict.PASS)
                out.fact(
                    "PERMIT_NOT_ACTIVE",
                    say(
                        "Permit {permit_id} is {current}: neither {RELEASABLE} nor {RELEASED}",
                        permit_id=permit_id,
                        current=token(current, "unrecognised"),
                        RELEASABLE=RELEASABLE,
                        RELEASED=RELEASED,
                    ),
                    subject=subject,
                    evidence=[ev],
                )
            elif worker_id not in worker_ids:
                out.judge(subject, Verdict.PASS)
                out.fact(
                    "WORKER_NOT_ON_PERMIT",
                    say(
                        "Permit {permit_id} does not list worker {worker_id}", permit_id=permit_id, worker_id=worker_id
                    ),
                    subject=subject,
                    evidence=[ev],
                )
            elif course not in trainings:
                out.judge(subject, Verdict.PASS)
                out.fact(
                    "TRAINING_NOT_REQUIRED",
                    say("Permit {permit_id} does not require {course}", permit_id=permit_id, course=course),
                    subject=subject,
                    evidence=[ev],
                )
            else:
                recommendation, code = _RECOMMENDATIONS[str(current)]
                out.judge(subject, Verdict.FAIL)
                out.fact(
                    "PERMIT_REQUIRES_TRAINING",
                    say(
                        "Permit {permit_id} is {current}, lists worker {worker_id} and requires {course}",
                        permit_id=permit_id,
                        current=current,
                        worker_id=worker_id,
                        course=course,
                    ),
                    subject=subject,
                    evidence=[ev],
                )
                action = (
                    say("Suspend permit {permit_id}", permit_id=permit_id)
                    if current == RELEASED
                    else say("Hold the release of permit {permit_id}", permit_id=permit_id)
                )
                out.statement(
                    "RECOMMENDATION",
                    code,
                    say(
                        "{action}: it requires {course} of worker {worker_id}",
                        action=action,
                        course=course,
                        worker_id=worker_id,
                    ),
                    subject=subject,
                    evidence=[ev],
                )
                affected.append({"permit_id": permit_id, "status": str(current), "recommendation": recommendation})
        return out.build(
            {
                "operation": "affected_by_training",
                "worker_id": worker_id,
                "training_code": course,
                "affected_permits": affected,
                "unverified_permits": unverified,
            }
        )

    return run_guarded(rules)
