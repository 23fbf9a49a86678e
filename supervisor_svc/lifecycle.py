"""The agent lifecycle as a state machine (PRD §57, §63): which status may follow which.

::

    DRAFT -> VALIDATING -> EVALUATING -> APPROVED -> CANARY -> ACTIVE -> DEPRECATED -> RETIRED

plus the way back where the PRD's lifecycle needs one:

* VALIDATING -> DRAFT and EVALUATING -> DRAFT: the Release Manager blocked the
  version, or its evaluation failed; a fixed manifest is a new version, but the
  same one may be validated again once what it depends on is there.
* CANARY -> APPROVED: rolling a canary back (it gets no more traffic).
* DEPRECATED -> ACTIVE: rolling a promotion back (the version that replaced it
  is deprecated by the caller, see :mod:`supervisor_svc.onboarding`).
* DRAFT, APPROVED -> RETIRED: a version that never ran is withdrawn.
* The kill switch (§63): ACTIVE, CANARY, DEPRECATED -> DISABLED, and DISABLED
  -> the status it was disabled from, or RETIRED.

RETIRED is terminal. Anything else (DRAFT -> ACTIVE, APPROVED -> ACTIVE
without a canary, leaving RETIRED) is refused: FAILED_PRECONDITION
``TRANSITION_NOT_ALLOWED`` naming the field.

Pure functions; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

from agentmesh.vocabulary import LifecycleStatus as S
from supervisor_svc.errors import StatusChangeRefused

__all__ = ["EDGES", "TransitionNotAllowed", "allowed_next", "check_transition"]

EDGES: Mapping[S, frozenset[S]] = {
    S.DRAFT: frozenset({S.VALIDATING, S.RETIRED}),
    S.VALIDATING: frozenset({S.EVALUATING, S.DRAFT}),
    S.EVALUATING: frozenset({S.APPROVED, S.DRAFT}),
    S.APPROVED: frozenset({S.CANARY, S.RETIRED}),
    S.CANARY: frozenset({S.ACTIVE, S.APPROVED, S.DISABLED}),
    S.ACTIVE: frozenset({S.DEPRECATED, S.DISABLED}),
    S.DEPRECATED: frozenset({S.ACTIVE, S.RETIRED, S.DISABLED}),
    S.DISABLED: frozenset({S.RETIRED}),  # plus the status it was disabled from
    S.RETIRED: frozenset(),
}
"""Every allowed edge, except DISABLED's way back (which depends on where it came from)."""


class TransitionNotAllowed(StatusChangeRefused):
    """A lifecycle transition that is not an edge of the state machine."""

    default_reason = "TRANSITION_NOT_ALLOWED"


def allowed_next(current: S, disabled_from: S | None = None) -> frozenset[S]:
    """The statuses ``current`` may move to; ``disabled_from`` is where a DISABLED version came from."""
    nxt = EDGES[current]
    if current is S.DISABLED and disabled_from is not None and disabled_from is not S.DISABLED:
        nxt = nxt | {disabled_from}
    return nxt


def check_transition(current: S, new: S, *, field: str, what: str, disabled_from: S | None = None) -> None:
    """Refuse ``current -> new`` unless it is an edge.

    Args:
        current: The status now.
        new: The status asked for.
        field: The request field that asked (``status``, ``to_status``).
        what: What moves, for the message (``agent 'x'``, ``training-agent@1.1.0``).
        disabled_from: For a DISABLED version, the status it was disabled from.

    Raises:
        TransitionNotAllowed: naming ``field``, the statuses and the allowed ones.
    """
    allowed = allowed_next(current, disabled_from)
    if new in allowed:
        return
    if not allowed:
        raise TransitionNotAllowed(f"{what} is {current.value}; its status can no longer change", field=field)
    names = ", ".join(sorted(s.value for s in allowed))
    raise TransitionNotAllowed(
        f"{what} cannot go from {current.value} to {new.value} (PRD §57); from {current.value} it may go to: {names}",
        field=field,
    )
