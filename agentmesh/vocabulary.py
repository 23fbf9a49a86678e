"""Enumerations the domain packages share, named as in ``common.proto`` without their prefixes."""

from __future__ import annotations

from enum import StrEnum

from agentmesh.v1 import common_pb2


class LifecycleStatus(StrEnum):
    """Lifecycle of an agent or capability (PRD §7, §57). Only ACTIVE and DEPRECATED may run."""

    DRAFT = "DRAFT"
    VALIDATING = "VALIDATING"
    EVALUATING = "EVALUATING"
    APPROVED = "APPROVED"
    CANARY = "CANARY"
    ACTIVE = "ACTIVE"
    DEPRECATED = "DEPRECATED"
    DISABLED = "DISABLED"
    RETIRED = "RETIRED"

    def to_proto(self) -> common_pb2.LifecycleStatus:
        """The ``common_pb2.LifecycleStatus`` value."""
        value: common_pb2.LifecycleStatus = getattr(common_pb2, f"LIFECYCLE_STATUS_{self.value}")
        return value

    @classmethod
    def parse(cls, value: str | LifecycleStatus) -> LifecycleStatus:
        """Accept ``ACTIVE`` or the proto name ``LIFECYCLE_STATUS_ACTIVE``.

        Raises:
            ValueError: for anything else, including ``UNSPECIFIED``.
        """
        if isinstance(value, LifecycleStatus):
            return value
        name = value.strip().upper().removeprefix("LIFECYCLE_STATUS_")
        try:
            return cls(name)
        except ValueError:
            raise ValueError(f"{value!r} is not a lifecycle status") from None

    @classmethod
    def from_proto(cls, value: int) -> LifecycleStatus:
        """From a ``common_pb2.LifecycleStatus`` number.

        Raises:
            ValueError: for UNSPECIFIED or an unknown number.
        """
        try:
            name = common_pb2.LifecycleStatus.Name(value)
        except ValueError:
            name = ""
        if not name.startswith("LIFECYCLE_STATUS_") or name.endswith("_UNSPECIFIED"):
            raise ValueError(f"{value!r} is not a lifecycle status")
        return cls(name.removeprefix("LIFECYCLE_STATUS_"))


class RiskLevel(StrEnum):
    """Declared potential impact (PRD §65)."""

    LOW = "LOW"
    MEDIUM = "MEDIUM"
    HIGH = "HIGH"
    CRITICAL = "CRITICAL"
