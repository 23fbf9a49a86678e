"""Errors of the policy engine domain.

    PolicyError                 base; carries ``reason`` (UPPER_SNAKE) and ``metadata``
     ├── InvalidRequestError    bad input to ``authorize`` or the kill-switch store;
     │                          ``field`` names it            -> INVALID_ARGUMENT
     ├── PolicyLoadError        the policy set, schema or data cannot be loaded;
     │                          the service must not start    -> (start-up failure)
     └── KillSwitchStoreError   the kill-switch database failed -> UNAVAILABLE

These classes know nothing about gRPC: the servicer maps each one to a status
code and a ``google.rpc.ErrorInfo(reason, metadata)``. A decision is never an
error: a request that is well formed but not allowed is a ``Decision`` with
effect DENY, never an exception.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar


class PolicyError(Exception):
    """Base of every error raised by ``policy_svc`` domain code."""

    default_reason: ClassVar[str] = "POLICY_ERROR"

    def __init__(
        self,
        message: str,
        *,
        reason: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        #: Machine-readable cause in UPPER_SNAKE_CASE, for ``ErrorInfo.reason``.
        self.reason = reason or self.default_reason
        #: Extra facts for ``ErrorInfo.metadata`` (e.g. ``field``, ``policy_id``).
        self.metadata: dict[str, str] = dict(metadata or {})


class InvalidRequestError(PolicyError):
    """A request is malformed; ``field`` names the offending field.

    ``reason`` is ``MISSING_FIELD`` (absent or empty) or ``INVALID_FIELD``
    (present but not acceptable).
    """

    default_reason = "INVALID_FIELD"

    def __init__(self, message: str, *, field: str, reason: str | None = None) -> None:
        super().__init__(message, reason=reason, metadata={"field": field})
        #: Dotted path of the field, e.g. ``user.tenant_id``.
        self.field = field

    @classmethod
    def missing(cls, field: str) -> InvalidRequestError:
        """The field is required but absent or empty."""
        return cls(f"{field} is required", field=field, reason="MISSING_FIELD")

    @classmethod
    def invalid(cls, field: str, why: str) -> InvalidRequestError:
        """The field is present but its value is not acceptable."""
        return cls(f"{field} is invalid: {why}", field=field, reason="INVALID_FIELD")


class PolicyLoadError(PolicyError):
    """The policies, schema or data could not be loaded; the service stops.

    ``reason`` is one of ``POLICY_PARSE_FAILED``, ``POLICY_VALIDATION_FAILED``,
    ``POLICY_ID_MISSING``, ``POLICY_ID_DUPLICATE``, ``POLICY_TEMPLATE_UNSUPPORTED``,
    ``SCHEMA_INVALID``, ``DATA_INVALID``, ``POLICY_DIR_INVALID``.
    ``metadata`` names the ``path`` and, when known, the ``policy_id``.
    """

    default_reason = "POLICY_LOAD_FAILED"

    def __init__(
        self,
        message: str,
        *,
        reason: str,
        path: str | None = None,
        policy_id: str | None = None,
    ) -> None:
        metadata: dict[str, str] = {}
        if path is not None:
            metadata["path"] = path
        if policy_id is not None:
            metadata["policy_id"] = policy_id
        super().__init__(message, reason=reason, metadata=metadata)
        #: The file at fault, if any.
        self.path = path
        #: The ``@id`` of the policy at fault, if any.
        self.policy_id = policy_id


class KillSwitchStoreError(PolicyError):
    """The kill-switch database could not be read or written.

    Callers must treat this as "switch state unknown": ``authorize`` is never
    called without the active switches, so no decision is produced.
    """

    default_reason = "KILL_SWITCH_STORE_UNAVAILABLE"
