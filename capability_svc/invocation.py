"""Plain values passed into and out of capability backends."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["InvocationContext", "VerificationResult"]


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
