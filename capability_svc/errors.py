"""Typed errors of the capability runtime.

Every error carries a machine-readable ``reason`` (UPPER_SNAKE, stable, for
``google.rpc.ErrorInfo.reason``) and, where one field is at fault, the
``field`` (a JSON path such as ``permit_id`` or ``tenants[0].permits[2].valid_until``)
so the transport layer can build a ``google.rpc.BadRequest`` without parsing
messages. The transport layer maps each *class* to one gRPC status code; the
suggested code is noted on each class.

Exception tree::

    CapabilityError
    ├── ManifestError                 a capability manifest is invalid (INTERNAL at start-up)
    ├── CapabilityNotFound            unknown capability id / version (NOT_FOUND)
    ├── CapabilityNotExecutable       DISABLED / RETIRED / not ACTIVE (FAILED_PRECONDITION)
    ├── StatusChangeRefused           illegal lifecycle change (FAILED_PRECONDITION)
    ├── DependencyError               semver dependency unparsable or unmet (FAILED_PRECONDITION)
    ├── SchemaViolation               input/output fails its JSON Schema
    │   ├── InputInvalid              (INVALID_ARGUMENT)
    │   └── OutputInvalid             the backend broke its contract (INTERNAL)
    ├── ResourceNotFound              no such record *in this tenant* (NOT_FOUND)
    ├── PreconditionFailed            the record's state forbids the change (FAILED_PRECONDITION)
    ├── VerificationFailed            a mutation's effect is not visible on read-back (ABORTED)
    ├── DeadlineExceeded              deadline passed before execution (DEADLINE_EXCEEDED)
    ├── WorldFormatError              world data file invalid; nothing loaded (INVALID_ARGUMENT)
    └── ExternalError                 the external gateway could not return honest data
        ├── ExternalTimeout           (DEADLINE_EXCEEDED)
        ├── ExternalUnavailable       5xx, connection failure, circuit open (UNAVAILABLE)
        ├── ExternalMalformed         bad JSON, wrong content type, schema mismatch (UNAVAILABLE)
        └── ExternalTooLarge          response larger than the limit (UNAVAILABLE)
"""

from __future__ import annotations

from dataclasses import dataclass

from capability_svc.invocation import CompensationResult

__all__ = [
    "CapabilityError",
    "CapabilityNotExecutable",
    "CapabilityNotFound",
    "DeadlineExceeded",
    "DependencyError",
    "ExternalError",
    "ExternalMalformed",
    "ExternalTimeout",
    "ExternalTooLarge",
    "ExternalUnavailable",
    "FieldViolation",
    "InputInvalid",
    "ManifestError",
    "OutputInvalid",
    "PreconditionFailed",
    "ResourceNotFound",
    "SchemaViolation",
    "StatusChangeRefused",
    "VerificationFailed",
    "WorldFormatError",
    "not_found",
]


@dataclass(frozen=True)
class FieldViolation:
    """One field that failed validation (maps to ``google.rpc.BadRequest.FieldViolation``)."""

    field: str
    """JSON path of the offending field, ``""`` for the document root."""
    description: str
    """Human-readable reason; never contains the offending value for sensitive data."""
    line: int | None = None
    """1-based line in the source file, when the data came from a file."""


class CapabilityError(Exception):
    """Base of every capability-runtime error.

    Attributes:
        reason: Stable UPPER_SNAKE code for ``ErrorInfo.reason``.
        field: JSON path of the offending field, if one field is at fault.
        message: Human-readable explanation.
    """

    default_reason = "CAPABILITY_ERROR"

    def __init__(self, message: str, *, reason: str | None = None, field: str | None = None):
        super().__init__(message)
        self.message = message
        self.reason = reason or self.default_reason
        self.field = field

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"


class ManifestError(CapabilityError):
    """A capability manifest file is invalid; names the file, field and line."""

    default_reason = "MANIFEST_INVALID"

    def __init__(
        self,
        message: str,
        *,
        file: str,
        field: str | None = None,
        line: int | None = None,
        reason: str | None = None,
    ):
        where = file if line is None else f"{file}:{line}"
        at = f" at {field!r}" if field else ""
        super().__init__(f"{where}{at}: {message}", reason=reason, field=field)
        self.file = file
        self.line = line


class CapabilityNotFound(CapabilityError):
    """No capability with that id (and version) is registered."""

    default_reason = "CAPABILITY_NOT_FOUND"


class CapabilityNotExecutable(CapabilityError):
    """The capability exists but its lifecycle status forbids execution (fail closed).

    ``reason`` is ``CAPABILITY_DISABLED``, ``CAPABILITY_RETIRED`` or
    ``CAPABILITY_NOT_ACTIVE``.
    """

    default_reason = "CAPABILITY_NOT_ACTIVE"

    def __init__(self, message: str, *, reason: str | None = None, status: str):
        super().__init__(message, reason=reason)
        self.status = status


class StatusChangeRefused(CapabilityError):
    """A lifecycle status change is not allowed (e.g. out of RETIRED)."""

    default_reason = "STATUS_CHANGE_REFUSED"


class DependencyError(CapabilityError):
    """A declared semver dependency cannot be satisfied.

    ``reason`` is one of ``DEPENDENCY_SYNTAX_INVALID``, ``DEPENDENCY_UNKNOWN``,
    ``DEPENDENCY_VERSION_INCOMPATIBLE`` or ``DEPENDENCY_NOT_EXECUTABLE``.
    """

    default_reason = "DEPENDENCY_INCOMPATIBLE"

    def __init__(self, message: str, *, reason: str | None = None, dependency: str):
        super().__init__(message, reason=reason)
        self.dependency = dependency


class SchemaViolation(CapabilityError):
    """Data does not match a capability's JSON Schema.

    ``field`` is the first violation's path; ``violations`` lists all of them in
    a deterministic order.
    """

    default_reason = "SCHEMA_INVALID"

    def __init__(
        self,
        message: str,
        *,
        violations: tuple[FieldViolation, ...],
        capability: str,
        reason: str | None = None,
    ):
        first = violations[0].field if violations else None
        super().__init__(message, reason=reason, field=first)
        self.violations = violations
        self.capability = capability


class InputInvalid(SchemaViolation):
    """The caller's input fails the capability's input schema; nothing was executed."""

    default_reason = "INPUT_INVALID"


class OutputInvalid(SchemaViolation):
    """The backend's output fails the capability's output schema; it is withheld."""

    default_reason = "OUTPUT_INVALID"


class ResourceNotFound(CapabilityError):
    """No such record in the caller's tenant.

    Deliberately identical whether the record is absent everywhere or exists in
    another tenant: the message names only the requested id.
    """

    default_reason = "RESOURCE_NOT_FOUND"


def not_found(resource_id: str) -> ResourceNotFound:
    """The one answer for a record the caller's tenant does not hold: ``'WP-10231' not found``.

    Byte-identical whether the record is missing everywhere, belongs to another
    tenant, is a permit, a worker or anything else: no field, no type, no
    metadata, only the id the caller itself sent.
    """
    return ResourceNotFound(f"'{resource_id}' not found")


class PreconditionFailed(CapabilityError):
    """The record exists but its state forbids the requested change."""

    default_reason = "PRECONDITION_FAILED"


class VerificationFailed(CapabilityError):
    """A mutation was acknowledged but reading it back does not show the effect.

    The outcome is a failure, never a success: ``expected`` and ``observed``
    say what the read-back found. ``compensation`` says whether the record was
    put back into its previous state (PRD §73); :attr:`metadata` carries it to
    ``ErrorInfo`` so the calling agent can report it as it is.
    """

    default_reason = "VERIFICATION_FAILED"

    def __init__(
        self,
        message: str,
        *,
        expected: dict[str, object],
        observed: dict[str, object],
        reason: str | None = None,
        compensation: CompensationResult | None = None,
    ):
        super().__init__(message, reason=reason)
        self.expected = expected
        self.observed = observed
        self.compensation = compensation

    @property
    def metadata(self) -> dict[str, str]:
        """``ErrorInfo`` metadata: ``compensated`` (``true``/``false``), ``restored``, ``compensation``.

        ``restored`` is the record's key fields as read back after a successful
        compensation (``status=PENDING_RELEASE``), empty when it failed;
        ``compensation`` is the compensation's reason code. Empty when no
        compensation was attempted.
        """
        comp = self.compensation
        if comp is None:
            return {}
        return {
            "compensated": "true" if comp.compensated else "false",
            "restored": comp.summary if comp.compensated else "",
            "compensation": comp.reason,
        }


class DeadlineExceeded(CapabilityError):
    """The caller's deadline passed before the backend could be called."""

    default_reason = "DEADLINE_EXCEEDED"


class WorldFormatError(CapabilityError):
    """A world data file is invalid; nothing from it was loaded.

    ``reason`` is ``WORLD_SYNTAX_INVALID`` (not parseable), ``WORLD_FIELD_INVALID``
    (a field is missing, unknown or of the wrong type/value),
    ``WORLD_DUPLICATE_ID`` or ``WORLD_REFERENCE_INVALID``.
    """

    default_reason = "WORLD_FIELD_INVALID"

    def __init__(
        self,
        message: str,
        *,
        file: str,
        field: str | None = None,
        line: int | None = None,
        reason: str | None = None,
        violations: tuple[FieldViolation, ...] = (),
    ):
        where = file if line is None else f"{file}:{line}"
        at = f" at {field!r}" if field else ""
        super().__init__(f"{where}{at}: {message}", reason=reason, field=field)
        self.file = file
        self.line = line
        self.violations = violations


class ExternalError(CapabilityError):
    """The external system could not give an honest answer.

    Attributes:
        transient: Whether a later retry could succeed (timeouts, 5xx, connection).
        attempts: How many HTTP attempts were made before giving up (0 if none).
        url: The URL that was called, if any.
    """

    default_reason = "EXTERNAL_ERROR"
    transient_default = False

    def __init__(
        self,
        message: str,
        *,
        reason: str | None = None,
        url: str | None = None,
        attempts: int = 0,
        transient: bool | None = None,
    ):
        super().__init__(message, reason=reason)
        self.url = url
        self.attempts = attempts
        self.transient = self.transient_default if transient is None else transient


class ExternalTimeout(ExternalError):
    """The external system did not answer within the time allowed."""

    default_reason = "EXTERNAL_TIMEOUT"
    transient_default = True


class ExternalUnavailable(ExternalError):
    """The external system failed (5xx), was unreachable, or the circuit is open.

    ``reason``: ``EXTERNAL_5XX``, ``EXTERNAL_CONNECTION_FAILED``,
    ``EXTERNAL_CIRCUIT_OPEN``, ``EXTERNAL_HTTP_STATUS`` (unexpected 4xx).
    """

    default_reason = "EXTERNAL_UNAVAILABLE"
    transient_default = True


class ExternalMalformed(ExternalError):
    """The response was not valid JSON, had the wrong content type, or broke the schema.

    ``reason``: ``EXTERNAL_MALFORMED_JSON``, ``EXTERNAL_CONTENT_TYPE``,
    ``EXTERNAL_SCHEMA_INVALID``, ``EXTERNAL_RESPONSE_MISMATCH``.
    """

    default_reason = "EXTERNAL_MALFORMED"


class ExternalTooLarge(ExternalError):
    """The response exceeded the size limit; reading was aborted."""

    default_reason = "EXTERNAL_TOO_LARGE"
