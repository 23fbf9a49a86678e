"""Building blocks shared by every agent's rules: the capability port, results, failures.

An agent's rules are a pure function ``(task input, CapabilityClient) -> AgentResult``
(:data:`RuleFn`). They reach data only through the :class:`CapabilityClient`
port, which answers with the capability's output and the evidence references
built from its provenance, or raises a :class:`agentmesh.errors.MeshError`.
:func:`classify` turns such an error into what it means for an analysis:

======================================  =============  ==========================================
error (gRPC status)                     kind           what the result says
======================================  =============  ==========================================
DEADLINE_EXCEEDED                       ``uncertain``  UNCERTAINTY ``<SYSTEM>_TIMEOUT``, subject UNKNOWN
UNAVAILABLE (5xx, connection, circuit)  ``uncertain``  UNCERTAINTY ``<SYSTEM>_UNAVAILABLE``
UNAVAILABLE / INTERNAL (bad answer)     ``uncertain``  UNCERTAINTY ``<SYSTEM>_MALFORMED``
UNAVAILABLE (policy / audit down)       ``uncertain``  UNCERTAINTY ``GOVERNANCE_UNAVAILABLE``
RESOURCE_EXHAUSTED, ABORTED, INTERNAL   ``uncertain``  UNCERTAINTY ``CAPABILITY_FAILED``
NOT_FOUND (the record)                  ``not_found``  the agent's own "not found" rule
PERMISSION_DENIED, UNAUTHENTICATED      ``fatal``      FAILED, ``error_reason`` ``NOT_AUTHORISED: ...``
FAILED_PRECONDITION                     ``fatal``      FAILED, ``CAPABILITY_REFUSED: ...``
INVALID_ARGUMENT, UNIMPLEMENTED,        ``fatal``      FAILED, ``CAPABILITY_REJECTED: ...``
NOT_FOUND (the capability)
======================================  =============  ==========================================

Nothing is ever invented in place of an answer that did not come: a subject
whose data could not be read is UNKNOWN with an UNCERTAINTY naming why.

Statement texts are composed from the agent's own words plus values that
pass :func:`token` or :func:`iso_date`. Free text from a source (an LMS course
title, an issuer) is data: it may be copied into an evidence reference's
``data`` and nowhere else, and no rule ever reads it.
"""

from __future__ import annotations

import contextvars
import datetime as dt
import math
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

from google.protobuf import struct_pb2

from agentmesh import errors
from agentmesh.result_contract import Verdict, derived_verdict
from agentmesh.v1 import common_pb2
from specialist_svc.phrases import say

__all__ = [
    "AgentFailed",
    "CallFailure",
    "CapabilityClient",
    "ContextRuleFn",
    "ModelAnswer",
    "ModelInput",
    "ModelPort",
    "Answered",
    "CallsInTurn",
    "ResultBuilder",
    "RuleFn",
    "TaskContext",
    "TaskInputInvalid",
    "calls_or_failures",
    "classify",
    "handoff",
    "handoff_failure",
    "waiting",
    "is_id",
    "iso_date",
    "parallel_map",
    "plain",
    "token",
]

_T = TypeVar("_T")
_R = TypeVar("_R")

_TOKEN_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:-]{0,63}$")
_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


Answered = tuple[dict[str, Any], list[common_pb2.EvidenceReference]]
"""A call's answer: the output document (plain JSON-like data) and its evidence references."""


class CapabilityClient(Protocol):
    """The only way an agent's rules reach data: governed capability calls.

    Implementations: :class:`specialist_svc.capability_client.GrpcCapabilityClient`
    (InvokeCapability over mTLS with the task's grant); fakes in unit tests
    (:class:`CallsInTurn` gives them ``call_all``). Must be safe to call from
    several threads at once.
    """

    def call(
        self, capability_id: str, input: Mapping[str, Any], idempotency_key: str | None = None
    ) -> tuple[dict[str, Any], list[common_pb2.EvidenceReference]]:
        """Runs one capability.

        Returns:
            ``(output, evidence)``: the output document as plain JSON-like data
            (integral numbers as ``int``) and the evidence references the
            capability service built from the output's ``provenance``.

        Raises:
            agentmesh.errors.MeshError: the typed error of the failed call.
        """
        ...

    def call_all(self, calls: Sequence[tuple[str, Mapping[str, Any]]], *,
                 traceparents: Sequence[str] = ()) -> list[Answered | errors.MeshError]:
        """Runs independent reads together (one round trip): each call's answer or its own error, in order.

        Each call is governed as :meth:`call` governs it; one's failure changes nothing for the others.
        A mutation never goes here (it goes alone, with its idempotency key). ``traceparents[i]``, when
        given, is the W3C traceparent of the caller's span for call ``i``. Never raises a MeshError.
        """
        ...


class CallsInTurn:
    """``call_all`` as one :meth:`call` after another, for in-process clients and fakes."""

    def call(self, capability_id: str, input: Mapping[str, Any], idempotency_key: str | None = None) -> Answered:
        raise NotImplementedError

    def call_all(self, calls: Sequence[tuple[str, Mapping[str, Any]]], *,
                 traceparents: Sequence[str] = ()) -> list[Answered | errors.MeshError]:
        """Each call in turn; a MeshError is its slot's answer."""
        answers: list[Answered | errors.MeshError] = []
        for capability_id, input in calls:
            try:
                answers.append(self.call(capability_id, input))
            except errors.MeshError as err:
                answers.append(err)
        return answers


@dataclass(frozen=True)
class ModelInput:
    """One piece of external text for a model: sent as data (its own delimited message), never instructions."""

    name: str
    text: str
    source: str = ""


@dataclass(frozen=True)
class ModelAnswer:
    """A model's answer through the model service: valid against the prompt's schema, and still a proposal."""

    answer: dict[str, Any]
    call_id: str
    model_id: str
    model_version: str
    prompt: str
    """``id@version`` of the prompt."""
    answer_digest: str


class ModelPort(Protocol):
    """The only way an agent's rules reach a language model: one governed call of a registered prompt.

    Implementations: :class:`specialist_svc.model_client.GrpcModelClient`; fakes in unit tests.
    What comes back is at most an INFERENCE: the rules check it against what they know (e.g. that a
    quote really is in the text) and never turn it into a FACT.
    """

    def complete(self, prompt_id: str, parameters: Mapping[str, Any], data: Sequence[ModelInput]) -> ModelAnswer:
        """Raises agentmesh.errors.MeshError when the call fails or is refused (e.g. an exhausted budget)."""
        ...


RuleFn = Callable[..., common_pb2.AgentResult]
"""An agent's rules: task input (the projected context) and the capability port in, result out;
the rules of an agent that uses a model also take ``models`` (a :class:`ModelPort` or None) by keyword.

The result has ``status``, ``result``, ``evidence``, ``statements``, ``confidence``
and ``error_reason``; ids, timestamps and versions are stamped by the caller.
"""


@dataclass(frozen=True)
class TaskContext:
    """What rules may know besides the task input: the mesh's date and the outcomes of their handoffs."""

    today: dt.date
    """The mesh's date (``MeshConfig.today``, else the host's UTC date): what "already ended" is measured by."""
    handoffs: Mapping[str, common_pb2.HandoffOutcome] = field(default_factory=dict)
    """When the task is called again after a WAITING answer: each requested handoff's outcome, by ``action_id``."""
    again: bool = False
    """Whether this call follows a WAITING answer (then every handoff asked for has its outcome here)."""


ContextRuleFn = Callable[..., common_pb2.AgentResult]
"""Rules that also read the :class:`TaskContext` (the mesh's date, handoff outcomes):
``(task_input, client, context)``, plus ``models`` by keyword for an agent that uses a model."""


def handoff(action_id: str, target_agent_id: str, *, purpose: str, required_capabilities: Sequence[str],
            input: Mapping[str, Any], reason: str) -> common_pb2.RequestedAction:
    """A handoff request (PRD §20): the supervisor decides whether it runs, and projects ``input`` for
    ``target_agent_id`` and ``purpose`` (only what that projection allows reaches the target)."""
    action = common_pb2.RequestedAction(action="handoff", target_agent_id=target_agent_id, reason=reason,
                                        action_id=action_id)
    action.parameters.CopyFrom(_struct({"purpose": purpose, "required_capabilities": list(required_capabilities),
                                        "input": dict(input)}))
    return action


def waiting(*requests: common_pb2.RequestedAction) -> common_pb2.AgentResult:
    """A WAITING result: the task cannot finish before the supervisor returns the outcome of ``requests``.

    Not an answer: ``result`` is an UNKNOWN verdict with no subjects, and nothing else is reported.
    """
    result = common_pb2.AgentResult(status=common_pb2.RESULT_STATUS_WAITING)
    result.result.CopyFrom(_struct({"verdict": Verdict.UNKNOWN.value, "subjects": {}}))
    result.requested_actions.extend(requests)
    return result


def handoff_failure(outcome: common_pb2.HandoffOutcome | None) -> str:
    """Why a handoff brought no usable result (``""`` when it did): REFUSED / FAILED with the reason,
    or the target's own result FAILED. Codes only, from the supervisor and the target, never source text."""
    if outcome is None:
        return "HANDOFF_OUTCOME_MISSING"
    if outcome.state == common_pb2.HANDOFF_STATE_COMPLETED:
        if outcome.result.status == common_pb2.RESULT_STATUS_FAILED:
            return f"HANDOFF_RESULT_FAILED: {outcome.result.error_reason.split(':', 1)[0]}"
        return ""
    state = common_pb2.HandoffState.Name(outcome.state).removeprefix("HANDOFF_STATE_")
    return f"HANDOFF_{state}: {outcome.reason.split(':', 1)[0]}"


class TaskInputInvalid(ValueError):
    """The task input lacks what the rules need; ``field`` names it."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class AgentFailed(Exception):
    """The analysis cannot be done at all; the result is FAILED with ``error_reason``."""

    def __init__(self, code: str, detail: str, *, payload: Mapping[str, Any] | None = None) -> None:
        """Args:
        code: UPPER_SNAKE, e.g. ``PERMIT_REGISTRY_TIMEOUT``.
        detail: Why, from the mesh error or the agent's own words (never source text).
        payload: Fields added to the FAILED result's ``result`` (next to its UNKNOWN
            verdict), for what the caller must know even though nothing succeeded —
            e.g. whether a failed mutation was compensated.
        """
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail
        self.payload = dict(payload or {})

    @property
    def error_reason(self) -> str:
        """``CODE: detail``, for ``AgentResult.error_reason``."""
        return f"{self.code}: {self.detail}"


# --- capability errors ----------------------------------------------------------------------------

_SYSTEMS = {
    "training.getStatus": "LMS",
    "workPermit.get": "PERMIT_REGISTRY",
    "workPermit.search": "PERMIT_REGISTRY",
    "workPermit.release": "PERMIT_REGISTRY",
    "risk.evaluate": "RISK_REGISTER",
    "compliance.getChecklist": "COMPLIANCE_REGISTRY",
    "employee.get": "HR_REGISTRY",
    "medical.getEligibility": "OCCUPATIONAL_HEALTH",
    "knowledge.search": "KNOWLEDGE",
}
_MALFORMED_REASONS = frozenset({
    "EXTERNAL_MALFORMED", "EXTERNAL_MALFORMED_JSON", "EXTERNAL_CONTENT_TYPE", "EXTERNAL_SCHEMA_INVALID",
    "EXTERNAL_RESPONSE_MISMATCH", "EXTERNAL_TOO_LARGE", "OUTPUT_INVALID",
})
_GOVERNANCE_REASONS = frozenset({"POLICY_UNAVAILABLE", "AUDIT_UNAVAILABLE"})


@dataclass(frozen=True)
class CallFailure:
    """What a failed capability call means for the analysis."""

    kind: Literal["uncertain", "not_found", "fatal"]
    code: str
    """UPPER_SNAKE, e.g. ``LMS_TIMEOUT``, ``NOT_AUTHORISED``."""
    detail: str
    """``capability: reason (message)`` — from the mesh error, never from source data."""

    def failed(self) -> AgentFailed:
        """The :class:`AgentFailed` for a fatal failure."""
        return AgentFailed(self.code, self.detail)


def classify(err: errors.MeshError, capability_id: str) -> CallFailure:
    """Maps a failed capability call to its meaning (see the module docstring)."""
    system = _SYSTEMS.get(capability_id, "CAPABILITY")
    detail = f"{capability_id} {err.reason}: {err.message}"
    if isinstance(err, errors.DeadlineExceeded):
        return CallFailure("uncertain", f"{system}_TIMEOUT", detail)
    if err.reason in _MALFORMED_REASONS and isinstance(err, errors.Unavailable | errors.Internal):
        return CallFailure("uncertain", f"{system}_MALFORMED", detail)
    if isinstance(err, errors.Unavailable):
        if err.reason in _GOVERNANCE_REASONS:
            return CallFailure("uncertain", "GOVERNANCE_UNAVAILABLE", detail)
        return CallFailure("uncertain", f"{system}_UNAVAILABLE", detail)
    if isinstance(err, errors.ResourceExhausted | errors.Aborted | errors.Internal):
        return CallFailure("uncertain", "CAPABILITY_FAILED", detail)
    if isinstance(err, errors.NotFound):
        if err.reason == "CAPABILITY_NOT_FOUND":
            return CallFailure("fatal", "CAPABILITY_REJECTED", detail)
        return CallFailure("not_found", "RESOURCE_NOT_FOUND", detail)
    if isinstance(err, errors.PermissionDenied | errors.Unauthenticated):
        return CallFailure("fatal", "NOT_AUTHORISED", detail)
    if isinstance(err, errors.FailedPrecondition):
        return CallFailure("fatal", "CAPABILITY_REFUSED", detail)
    return CallFailure("fatal", "CAPABILITY_REJECTED", detail)


# --- plain values ---------------------------------------------------------------------------------

def token(value: Any, fallback: str = "<unreadable>") -> str:
    """``value`` if it is a short identifier (letters, digits, ``._/:-``), else ``fallback``.

    Used for every source value that goes into a statement's text, so free text
    (and anything shaped like an instruction) never does.
    """
    if isinstance(value, str) and _TOKEN_RE.match(value):
        return value
    return fallback


def is_id(value: Any) -> bool:
    """Whether ``value`` is a record id as the capabilities accept it (``^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$``)."""
    return isinstance(value, str) and _ID_RE.match(value) is not None


def iso_date(value: Any) -> dt.date | None:
    """A ``YYYY-MM-DD`` calendar date, or None for anything else (null, text, bad dates)."""
    if not isinstance(value, str) or not _DATE_RE.match(value):
        return None
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        return None


def plain(value: Any) -> Any:
    """JSON-like data with integral floats as ints (a Struct carries every number as a double)."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


_POOL = ThreadPoolExecutor(max_workers=64, thread_name_prefix="rules")
"""The threads every :func:`parallel_map` of this process shares (made as needed, then kept)."""


def parallel_map(fn: Callable[[_T], _R], items: Sequence[_T], *, max_workers: int = 8) -> list[_R]:
    """``[fn(x) for x in items]``, run concurrently (at most ``max_workers`` at once), results in input order.

    Each call runs in a copy of the caller's context, so tracing and the mesh
    ids in baggage follow the outgoing capability calls. The threads are the
    process's shared pool, not made per call; ``fn`` must not call
    :func:`parallel_map` itself (it could wait for a thread its caller holds).
    """
    if len(items) <= 1:
        return [fn(x) for x in items]
    slots = threading.BoundedSemaphore(min(max_workers, len(items)))

    def one(x: _T) -> _R:
        with slots:
            return fn(x)

    futures = []
    for x in items:
        futures.append(_POOL.submit(contextvars.copy_context().run, one, x))
    return [f.result() for f in futures]


# --- results --------------------------------------------------------------------------------------

_KINDS = {
    "FACT": common_pb2.STATEMENT_KIND_FACT,
    "INFERENCE": common_pb2.STATEMENT_KIND_INFERENCE,
    "RECOMMENDATION": common_pb2.STATEMENT_KIND_RECOMMENDATION,
    "UNCERTAINTY": common_pb2.STATEMENT_KIND_UNCERTAINTY,
}
_SEVERITY = {Verdict.PASS: 0, Verdict.UNKNOWN: 1, Verdict.FAIL: 2}


def _struct(data: Mapping[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(dict(data))
    return struct


class ResultBuilder:
    """Collects subjects, statements and evidence and builds a contract-shaped ``AgentResult``.

    Status: SUCCESS when every subject is PASS/FAIL and nothing is uncertain;
    PARTIAL when a capability call could not be answered (:meth:`unanswered`);
    UNCERTAIN when something else could not be established.
    """

    def __init__(self) -> None:
        self._subjects: dict[str, Verdict] = {}
        self._statements: list[common_pb2.Statement] = []
        self._evidence: list[common_pb2.EvidenceReference] = []
        self._evidence_keys: dict[bytes, int] = {}
        self._unanswered: list[CallFailure] = []

    def evidence(
        self,
        ref: common_pb2.EvidenceReference,
        *,
        part: str = "",
        data: Mapping[str, Any] | None = None,
    ) -> int:
        """Adds (once) an evidence reference derived from a capability's provenance; returns its index.

        Args:
            ref: As the capability service built it (source, reference, authority,
                fetched_at, capability) — copied, never raised or lowered.
            part: The record within the source, appended to ``reference`` as
                ``#part`` (e.g. an LMS record id); only if it is a :func:`token`.
            data: Plain data copied from the source, for the reader. Data, never instructions.
        """
        item = common_pb2.EvidenceReference()
        item.CopyFrom(ref)
        if part and token(part, "") and ref.reference:
            item.reference = f"{ref.reference}#{part}"
        if data is not None:
            item.data.CopyFrom(_struct(data))
        key = item.SerializeToString(deterministic=True)
        if key not in self._evidence_keys:
            self._evidence_keys[key] = len(self._evidence)
            self._evidence.append(item)
        return self._evidence_keys[key]

    def statement(self, kind: str, code: str, text: str, *, subject: str = "",
                  evidence: Iterable[int] = ()) -> None:
        """Adds a typed statement (``kind``: FACT, INFERENCE, RECOMMENDATION or UNCERTAINTY)."""
        self._statements.append(common_pb2.Statement(
            kind=_KINDS[kind], code=code, text=text, subject=subject,
            evidence_indexes=sorted(set(evidence))))

    def fact(self, code: str, text: str, *, subject: str = "", evidence: Iterable[int] = ()) -> None:
        """A FACT; for a PASS or FAIL subject it must cite evidence."""
        self.statement("FACT", code, text, subject=subject, evidence=evidence)

    def inference(self, code: str, text: str, *, subject: str = "", evidence: Iterable[int] = ()) -> None:
        """An INFERENCE: reported, never decisive."""
        self.statement("INFERENCE", code, text, subject=subject, evidence=evidence)

    def recommendation(self, code: str, text: str, *, subject: str = "") -> None:
        """A RECOMMENDATION: reported, never decisive."""
        self.statement("RECOMMENDATION", code, text, subject=subject)

    def uncertainty(self, code: str, text: str, *, subject: str = "", evidence: Iterable[int] = ()) -> None:
        """An UNCERTAINTY: something could not be established."""
        self.statement("UNCERTAINTY", code, text, subject=subject, evidence=evidence)

    def judge(self, subject: str, verdict: Verdict) -> None:
        """Sets a subject's verdict; judged twice, the graver one stands (FAIL > UNKNOWN > PASS)."""
        current = self._subjects.get(subject)
        if current is None or _SEVERITY[verdict] > _SEVERITY[current]:
            self._subjects[subject] = verdict

    def unanswered(self, failure: CallFailure, subjects: Iterable[str], what: str) -> None:
        """A capability call got no usable answer: each subject is UNKNOWN with an UNCERTAINTY."""
        self._unanswered.append(failure)
        for subject in subjects:
            self.judge(subject, Verdict.UNKNOWN)
            self.uncertainty(failure.code, say("{what} could not be read ({code}); no status is assumed", what=what,
                                               code=failure.code), subject=subject)

    @property
    def subjects(self) -> dict[str, Verdict]:
        """The verdicts so far."""
        return dict(self._subjects)

    @property
    def verdict(self) -> Verdict:
        """The verdict the subjects imply."""
        return derived_verdict(self._subjects)

    def build(self, extra: Mapping[str, Any] | None = None) -> common_pb2.AgentResult:
        """The result: ``result`` = ``{verdict, subjects, **extra}``."""
        verdict = self.verdict
        uncertain = any(s.kind == common_pb2.STATEMENT_KIND_UNCERTAINTY for s in self._statements)
        if self._unanswered:
            status = common_pb2.RESULT_STATUS_PARTIAL
        elif uncertain or verdict is Verdict.UNKNOWN:
            status = common_pb2.RESULT_STATUS_UNCERTAIN
        else:
            status = common_pb2.RESULT_STATUS_SUCCESS
        result = common_pb2.AgentResult(status=status)
        result.result.CopyFrom(_struct({
            "verdict": verdict.value,
            "subjects": {k: v.value for k, v in self._subjects.items()},
            **(extra or {}),
        }))
        result.evidence.extend(self._evidence)
        result.statements.extend(self._statements)
        known = sum(1 for v in self._subjects.values() if v is not Verdict.UNKNOWN)
        result.confidence = 1.0 if status == common_pb2.RESULT_STATUS_SUCCESS else (
            known / len(self._subjects) if self._subjects else 0.0)
        if self._unanswered:
            codes = dict.fromkeys(f.code for f in self._unanswered)
            result.error_reason = "; ".join(
                f"{code}: " + ", ".join(dict.fromkeys(f.detail for f in self._unanswered if f.code == code))
                for code in codes)
        return result


def failed_result(failure: AgentFailed) -> common_pb2.AgentResult:
    """A FAILED result: no usable analysis, ``error_reason`` says why.

    ``result`` holds an UNKNOWN verdict with no subjects, so the result still
    has the contract's shape; the work-permit agent's ``permit_found`` is left
    out on purpose — whether the permit exists was not established.
    ``failure.payload`` is added to ``result``.
    """
    result = common_pb2.AgentResult(status=common_pb2.RESULT_STATUS_FAILED, error_reason=failure.error_reason)
    result.result.CopyFrom(_struct({**failure.payload, "verdict": Verdict.UNKNOWN.value, "subjects": {}}))
    result.statements.append(common_pb2.Statement(
        kind=common_pb2.STATEMENT_KIND_UNCERTAINTY, code=failure.code,
        text=say("The analysis could not be done: {code}", code=failure.code)))
    return result


def run_guarded(rules: Callable[[], common_pb2.AgentResult]) -> common_pb2.AgentResult:
    """Runs rules; an :class:`AgentFailed` becomes a FAILED result."""
    try:
        return rules()
    except AgentFailed as failure:
        return failed_result(failure)


def call_or_failure(
    client: CapabilityClient, capability_id: str, input: Mapping[str, Any]
) -> tuple[dict[str, Any], list[common_pb2.EvidenceReference]] | CallFailure:
    """One capability call; a fatal failure raises :class:`AgentFailed`, others are returned."""
    try:
        return client.call(capability_id, input)
    except errors.MeshError as err:
        return _failure_of(err, capability_id)


def _failure_of(err: errors.MeshError, capability_id: str) -> CallFailure:
    """What a failed call means for the rules; a fatal failure raises :class:`AgentFailed`."""
    failure = classify(err, capability_id)
    if failure.kind == "fatal":
        raise failure.failed() from err
    return failure


def calls_or_failures(client: CapabilityClient, calls: Sequence[tuple[str, Mapping[str, Any]]], *,
                      traceparents: Sequence[str] = ()) -> list[Answered | CallFailure]:
    """Independent reads in one round trip (:meth:`CapabilityClient.call_all`), each its answer or what its
    failure means; a fatal failure of any raises :class:`AgentFailed` (as :func:`call_or_failure` does)."""
    out: list[Answered | CallFailure] = []
    for (capability_id, _), answer in zip(calls, client.call_all(calls, traceparents=traceparents), strict=True):
        out.append(_failure_of(answer, capability_id) if isinstance(answer, errors.MeshError) else answer)
    return out


def require_str(data: Mapping[str, Any], name: str) -> str:
    """A required, non-empty string input field."""
    value = data.get(name)
    if not isinstance(value, str) or not value:
        raise TaskInputInvalid("a non-empty string is required", field=name)
    return value


def require_id(data: Mapping[str, Any], name: str) -> str:
    """A required record id input field (see :func:`is_id`)."""
    value = require_str(data, name)
    if not is_id(value):
        raise TaskInputInvalid("not a record id", field=name)
    return value


def str_list(data: Mapping[str, Any], name: str) -> list[str]:
    """A list of strings, deduplicated in order (absent → empty)."""
    value = data.get(name, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TaskInputInvalid("a list of strings is expected", field=name)
    return list(dict.fromkeys(value))
