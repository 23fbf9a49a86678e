"""Plain values passed into and out of capability backends."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["CompensationResult", "Execution", "InvocationContext", "PriorState", "VerificationResult"]


@dataclass(frozen=True)
class InvocationContext:
    """Who a capability runs for; built by the caller from a *verified* task grant.

    Backends take identity only from here, never from the input document, so a
    caller cannot name another tenant or user in its arguments.
    """

    tenant_id: str
    """The tenant every read and write is confined to."""
    user_id: str
    """The end user on whose authority the call runs (recorded on mutations)."""
    agent_id: str = ""
    """The calling agent, if any (recorded on mutations)."""
    execution_id: str = ""
    """The execution the call belongs to, for correlation."""

    @property
    def actor(self) -> str:
        """``user`` or ``user via agent``, as stored in ``released_by`` / ``updated_by``."""
        return f"{self.user_id} via {self.agent_id}" if self.agent_id else self.user_id


@dataclass(frozen=True)
class VerificationResult:
    """Outcome of reading a mutation's effect back from the system of record.

    A mutation whose effect is not visible is a *failure*, whatever the write
    call returned.
    """

    verified: bool
    reason: str
    """``EFFECT_VISIBLE``, ``EFFECT_NOT_VISIBLE`` or ``RESOURCE_MISSING``."""
    expected: dict[str, Any] = field(default_factory=dict)
    observed: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PriorState:
    """A record as a mutation found it, captured before the write, so a failed write can be undone.

    Carried next to the output, never inside it: the output schema is the
    capability's contract and says nothing about compensation.
    """

    resource_type: str
    """``permit``."""
    resource_id: str
    """``WP-10241``."""
    fields: dict[str, Any]
    """Every column the mutation may write, with its value before the call (``None`` for NULL)."""


@dataclass(frozen=True)
class Execution:
    """What a backend did for one call: the output, and for a mutation the state it replaced."""

    output: dict[str, Any]
    before: PriorState | None = None
    """Set by mutations of the internal systems; ``None`` for reads and external calls."""
    knowledge_version: str = ""
    """For a read of a knowledge store: ``<scope>@<store digest>``, the version the answer came from."""


@dataclass(frozen=True)
class CompensationResult:
    """Outcome of undoing a mutation whose read-back verification failed.

    ``compensated`` is ``True`` only when a read-back *after* the compensation
    shows the record in its previous state; anything else is a failure, never
    reported as success.
    """

    compensated: bool
    reason: str
    """``RESTORED`` (a compensating write put the previous state back),
    ``ALREADY_IN_PREVIOUS_STATE`` (nothing of the write had landed, nothing was
    written), or why it failed: ``CHANGED_BY_ANOTHER_WRITE`` (a field holds a
    value neither from before nor from this call, so it is left alone),
    ``RESTORE_NOT_VISIBLE``, ``RESOURCE_MISSING``, ``NO_PRIOR_STATE``,
    ``COMPENSATION_ERROR``."""
    restored: dict[str, Any] = field(default_factory=dict)
    """The record's key fields as read back after compensation, e.g. ``{"status": "PENDING_RELEASE"}``;
    empty unless ``compensated``."""
    observed: dict[str, Any] = field(default_factory=dict)
    """Every restorable field as read back after compensation (empty if it could not be read)."""

    @property
    def summary(self) -> str:
        """``status=PENDING_RELEASE``: the restored key fields, for error metadata and audit."""
        return ",".join(f"{k}={'null' if v is None else v}" for k, v in self.restored.items())
