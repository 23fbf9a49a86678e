"""Attempts at a task (PRD §45, §47): how a call ended, whether it may be tried again, and the retry budget.

Each call of an agent version for a task is one **attempt**, recorded in the execution
(``Execution.attempts``) and as an event of the task's span. How it ended
(:func:`outcome_of`):

====================  ==================================================================  ==========
outcome               when                                                                transient
====================  ==================================================================  ==========
ANSWERED              the agent answered with a result the analysis can use               —
TRANSIENT_RESULT      a PARTIAL result every reason of which is ``GOVERNANCE_UNAVAILABLE``  yes
                      (the mesh's own policy engine or audit log was away for a moment)
RESULT_FAILED         a FAILED result (``NOT_AUTHORISED``, a bad input, ...)               no
UNAVAILABLE           the call failed UNAVAILABLE (the agent unreachable or not serving)   yes
TIMED_OUT             the call ran past its deadline (DEADLINE_EXCEEDED)                   yes
NOT_CALLED            the version is down (health not SERVING, circuit open): not called   yes
FAILED                any other failure (INTERNAL: a result that breaks the contract,      no
                      a refusal)
CANCELLED             the execution was cancelled                                          no
====================  ==================================================================  ==========

A transient outcome is **retried** on the same version, waiting an exponential backoff
(``retry`` of the routing file: ``initial_backoff_ms`` times ``multiplier`` per retry, at
most ``max_backoff_ms``, no jitter), up to ``max_attempts`` calls and within the
execution's ``execution_budget`` of retries and its remaining wall time — and only when the
task is **idempotent** (:func:`idempotent`): none of the capabilities its grant can list
mutates or writes to an external system, as the capability registry says (a capability the
registry does not know counts as mutating). A mutation is never retried by the supervisor:
it runs once, under its idempotency key, and what happened is read back.

UNAVAILABLE, TIMED_OUT and NOT_CALLED mean the **agent** is unavailable: once its retries are
spent, its declared fallback may run (the policy engine decides). A TRANSIENT_RESULT means the
agent answered and the governance it depends on did not: no fallback (another agent would meet
the same).

A PARTIAL result whose source was away (``LMS_UNAVAILABLE``, ``LMS_TIMEOUT``) is an answer, not
retried here: the capability service's gateway already tried that external system again with
backoff and keeps its circuit (PRD §45 leaves errors of capabilities to their layer); running
the whole task again would multiply the calls against a failing system and open its circuit
for every other tenant's work.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping

from agentmesh import errors
from agentmesh.v1 import common_pb2
from agentmesh.v1 import supervisor_service_pb2 as pb

__all__ = [
    "AGENT_UNAVAILABLE",
    "TRANSIENT",
    "TRANSIENT_RESULT_REASONS",
    "RetryBudget",
    "idempotent",
    "outcome_of",
    "result_reason_codes",
    "transient_result",
]

TRANSIENT_RESULT_REASONS = frozenset({"GOVERNANCE_UNAVAILABLE"})
"""A PARTIAL result's reason codes that say the mesh's governance (policy engine, audit log) was away for a
moment (specialist_svc.rules): the task is worth trying again."""

TRANSIENT = frozenset({pb.ATTEMPT_OUTCOME_TRANSIENT_RESULT, pb.ATTEMPT_OUTCOME_UNAVAILABLE,
                       pb.ATTEMPT_OUTCOME_TIMED_OUT, pb.ATTEMPT_OUTCOME_NOT_CALLED})
"""Outcomes a read is retried after."""
AGENT_UNAVAILABLE = frozenset({pb.ATTEMPT_OUTCOME_UNAVAILABLE, pb.ATTEMPT_OUTCOME_TIMED_OUT,
                               pb.ATTEMPT_OUTCOME_NOT_CALLED})
"""Outcomes that say the agent itself is unavailable (its fallback may run)."""


def result_reason_codes(result: common_pb2.AgentResult) -> list[str]:
    """The codes of a result's ``error_reason`` (``"LMS_TIMEOUT: ...; GOVERNANCE_UNAVAILABLE: ..."``)."""
    return [part.split(":", 1)[0].strip() for part in result.error_reason.split(";") if part.strip()]


def transient_result(result: common_pb2.AgentResult) -> bool:
    """A PARTIAL result whose every reason says the mesh's governance was away (:data:`TRANSIENT_RESULT_REASONS`)."""
    codes = result_reason_codes(result)
    return (result.status == common_pb2.RESULT_STATUS_PARTIAL and bool(codes)
            and all(c in TRANSIENT_RESULT_REASONS for c in codes))


def outcome_of(result: common_pb2.AgentResult | None, error: errors.MeshError | None, *,
               cancelled: bool = False) -> pb.AttemptOutcome:
    """How one call ended (see the module docstring): its result, or the error it failed with."""
    if cancelled:
        return pb.ATTEMPT_OUTCOME_CANCELLED
    if result is not None:
        if result.status == common_pb2.RESULT_STATUS_FAILED:
            return pb.ATTEMPT_OUTCOME_RESULT_FAILED
        return pb.ATTEMPT_OUTCOME_TRANSIENT_RESULT if transient_result(result) else pb.ATTEMPT_OUTCOME_ANSWERED
    if isinstance(error, errors.DeadlineExceeded):
        return pb.ATTEMPT_OUTCOME_TIMED_OUT
    if isinstance(error, errors.Unavailable):
        return pb.ATTEMPT_OUTCOME_UNAVAILABLE
    return pb.ATTEMPT_OUTCOME_FAILED


def idempotent(capabilities: Iterable[str], mutating: Mapping[str, bool] | None) -> tuple[bool, str]:
    """Whether a task that may call ``capabilities`` (its grant's) only reads, and why not.

    ``mutating``: capability id -> whether any registered version of it mutates or writes to an
    external system (the capability registry's risk profiles). None: nothing is known, so no task is
    idempotent (fail closed).
    """
    if mutating is None:
        return False, "the capability registry's risk profiles are not known"
    for capability in capabilities:
        if capability not in mutating:
            return False, f"{capability} is not in the capability registry"
        if mutating[capability]:
            return False, f"{capability} mutates"
    return True, ""


class RetryBudget:
    """The retries one execution may still make (``retry.execution_budget``); thread-safe."""

    def __init__(self, retries: int) -> None:
        """Args: how many retries the execution may make, all its tasks together."""
        self._left = retries
        self._lock = threading.Lock()

    def take(self) -> bool:
        """Spends one retry; False when none is left."""
        with self._lock:
            if self._left <= 0:
                return False
            self._left -= 1
            return True

    @property
    def left(self) -> int:
        """Retries left."""
        with self._lock:
            return self._left
