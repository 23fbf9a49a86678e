"""One exception tree for the mesh and one table mapping it to gRPC.

    MeshError
     ├── InvalidArgument        INVALID_ARGUMENT   bad input; names the field
     ├── Unauthenticated        UNAUTHENTICATED    no or bad transport identity / assertion
     ├── PermissionDenied       PERMISSION_DENIED  identity known, operation not allowed
     ├── NotFound               NOT_FOUND
     ├── AlreadyExists          ALREADY_EXISTS
     ├── FailedPrecondition     FAILED_PRECONDITION state forbids it (e.g. DISABLED)
     ├── Aborted                ABORTED            conflicting concurrent change / replay mismatch
     ├── ResourceExhausted      RESOURCE_EXHAUSTED limits and budgets
     ├── DeadlineExceeded       DEADLINE_EXCEEDED  a timeout, reported as such
     ├── Unavailable            UNAVAILABLE        a dependency cannot be reached
     ├── Unimplemented          UNIMPLEMENTED      behaviour that does not exist yet
     └── Internal               INTERNAL

Servers abort with ``google.rpc.Status`` carrying ``google.rpc.ErrorInfo``
(AIP-193: reason in UPPER_SNAKE_CASE, domain ``agentmesh.local``, metadata
naming the field). Clients turn an ``RpcError`` back into the same class with
:func:`from_rpc_error`, so domain code never parses error strings.

Refusals are audited. A status in :data:`REFUSALS` says the caller's request
was refused — for what it says, for who asks, or for the state it meets — and
not that something failed. Every one a servicer raises is recorded: the
transport's interceptor hands it to the denial hook (an ACCESS_DENIED record
through the durable outbox) unless the service recorded it itself, in which
case it marks the error with :func:`recorded` so nothing is recorded twice.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import ClassVar, Final, NoReturn, TypeVar

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

DOMAIN = "agentmesh.local"

REFUSALS: Final = frozenset({
    grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.NOT_FOUND, grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.ABORTED, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.OUT_OF_RANGE,
})
"""The statuses that refuse a request: bad input, no or wrong identity, no authority, nothing
(visible) to act on, a state that forbids it, a conflicting or replayed request, a limit. Each
one a servicer answers is audited. Not refusals: the service or a dependency failing
(UNAVAILABLE, DEADLINE_EXCEEDED, INTERNAL, UNKNOWN, DATA_LOSS), an RPC without behaviour
(UNIMPLEMENTED) and the caller's own cancellation (CANCELLED)."""


class MeshError(Exception):
    """Base of every error the mesh reports to a caller."""

    code: ClassVar[grpc.StatusCode] = grpc.StatusCode.INTERNAL
    default_reason: ClassVar[str] = "INTERNAL"

    def __init__(
        self,
        message: str,
        *,
        reason: str | None = None,
        field: str | None = None,
        metadata: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason or self.default_reason
        self.metadata = dict(metadata or {})
        if field:
            self.metadata["field"] = field
        self.recorded = False
        """True once the service raising it has audited it itself (see :func:`recorded`)."""

    @property
    def field(self) -> str | None:
        """The request field the error is about, if any."""
        return self.metadata.get("field")

    def to_status(self) -> status_pb2.Status:
        """The google.rpc.Status with an ErrorInfo detail."""
        info = error_details_pb2.ErrorInfo(reason=self.reason, domain=DOMAIN, metadata=self.metadata)
        detail = any_pb2.Any()
        detail.Pack(info)
        return status_pb2.Status(
            code=self.code.value[0], message=self.message, details=[detail]
        )


class InvalidArgument(MeshError):
    """The request is malformed; ``field`` names what is wrong."""

    code = grpc.StatusCode.INVALID_ARGUMENT
    default_reason = "INVALID_ARGUMENT"


class Unauthenticated(MeshError):
    """The caller's identity could not be established."""

    code = grpc.StatusCode.UNAUTHENTICATED
    default_reason = "UNAUTHENTICATED"


class PermissionDenied(MeshError):
    """The caller is known but may not do this."""

    code = grpc.StatusCode.PERMISSION_DENIED
    default_reason = "PERMISSION_DENIED"


class NotFound(MeshError):
    """The named thing does not exist (or is not visible to the caller)."""

    code = grpc.StatusCode.NOT_FOUND
    default_reason = "NOT_FOUND"


class AlreadyExists(MeshError):
    """The thing to create exists already."""

    code = grpc.StatusCode.ALREADY_EXISTS
    default_reason = "ALREADY_EXISTS"


class FailedPrecondition(MeshError):
    """The current state forbids the operation."""

    code = grpc.StatusCode.FAILED_PRECONDITION
    default_reason = "FAILED_PRECONDITION"


class Aborted(MeshError):
    """A conflict with an earlier or concurrent operation."""

    code = grpc.StatusCode.ABORTED
    default_reason = "ABORTED"


class ResourceExhausted(MeshError):
    """A limit or budget was exceeded."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED
    default_reason = "RESOURCE_EXHAUSTED"


class DeadlineExceeded(MeshError):
    """A deadline passed; no result is invented in its place."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED
    default_reason = "DEADLINE_EXCEEDED"


class Unavailable(MeshError):
    """A dependency could not be reached."""

    code = grpc.StatusCode.UNAVAILABLE
    default_reason = "UNAVAILABLE"


class Unimplemented(MeshError):
    """The RPC exists in the contract but has no behaviour yet."""

    code = grpc.StatusCode.UNIMPLEMENTED
    default_reason = "UNIMPLEMENTED"


class Internal(MeshError):
    """A bug or an unexpected failure; details are logged, not returned."""

    code = grpc.StatusCode.INTERNAL
    default_reason = "INTERNAL"


_BY_CODE: dict[grpc.StatusCode, type[MeshError]] = {
    cls.code: cls
    for cls in (
        InvalidArgument, Unauthenticated, PermissionDenied, NotFound, AlreadyExists,
        FailedPrecondition, Aborted, ResourceExhausted, DeadlineExceeded, Unavailable,
        Unimplemented, Internal,
    )
}
_BY_CODE[grpc.StatusCode.CANCELLED] = Aborted
_BY_CODE[grpc.StatusCode.UNKNOWN] = Internal


_E = TypeVar("_E", bound=MeshError)


def error_class(code: grpc.StatusCode) -> type[MeshError]:
    """The mesh error of a gRPC status code (INTERNAL for one the mesh never answers)."""
    return _BY_CODE.get(code, Internal)


def recorded(error: _E) -> _E:
    """Marks a refusal the service has audited itself, and returns it (``raise errors.recorded(err)``).

    The transport's interceptor records every refusal a servicer raises
    (:data:`REFUSALS`) through the denial hook, except those marked here.
    """
    error.recorded = True
    return error


ErrorTable = Sequence[tuple[type[Exception], type[MeshError]]]
"""Domain error class → mesh error class, first match wins (subclasses before their bases)."""


def translate(err: Exception, table: ErrorTable) -> MeshError:
    """Maps a domain error (with ``message``, ``reason`` and ``field`` or ``metadata``) to a mesh error.

    Each service keeps its own table next to its domain errors; anything not
    in it is INTERNAL, never a success.
    """
    metadata = dict(getattr(err, "metadata", None) or {})
    field = getattr(err, "field", None)
    if field:
        metadata["field"] = str(field)
    message = str(getattr(err, "message", None) or err)
    reason = getattr(err, "reason", None)
    for domain_cls, mesh_cls in table:
        if isinstance(err, domain_cls):
            return mesh_cls(message, reason=reason, metadata=metadata)
    return Internal(message, reason=reason, metadata=metadata)


_RECORDED_ABORT: Final = "_agentmesh_abort_recorded"
_DETAILS_KEY: Final = "grpc-status-details-bin"


def abort(context: grpc.ServicerContext, error: MeshError) -> NoReturn:
    """Ends the RPC with the error's status and ErrorInfo.

    The context remembers whether ``error`` was already recorded (:func:`recorded`),
    so the interceptor does not record it again (:func:`abort_recorded`).
    """
    if error.recorded:
        with contextlib.suppress(AttributeError, TypeError):
            setattr(context, _RECORDED_ABORT, True)
    context.abort_with_status(rpc_status.to_status(error.to_status()))
    raise AssertionError("unreachable")  # abort_with_status always raises


def abort_recorded(context: grpc.ServicerContext) -> bool:
    """Whether the call was aborted with :func:`abort` and an error marked :func:`recorded`."""
    return getattr(context, _RECORDED_ABORT, False) is True


def aborted_status(context: grpc.ServicerContext) -> tuple[grpc.StatusCode, str, dict[str, str]] | None:
    """(code, reason, metadata) of a call a servicer ended through ``context.abort`` / ``abort_with_status``.

    None while no error code is set. Reason and metadata are those of the
    ``ErrorInfo`` in the trailing ``grpc-status-details-bin`` when there is one,
    else the code's name and nothing.
    """
    code = context.code()
    if code is None or code == grpc.StatusCode.OK:
        return None
    for key, value in context.trailing_metadata() or ():
        if key != _DETAILS_KEY or not isinstance(value, bytes):
            continue
        with contextlib.suppress(Exception):  # a servicer's own bytes: whatever they are, not a crash
            for detail in status_pb2.Status.FromString(value).details:
                info = error_details_pb2.ErrorInfo()
                if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR) and detail.Unpack(info):
                    return code, info.reason or code.name, dict(info.metadata)
    return code, code.name, {}


def from_rpc_error(err: grpc.RpcError) -> MeshError:
    """Maps a client-side RpcError back to the mesh exception it came from."""
    code = err.code() if isinstance(err, grpc.Call) else grpc.StatusCode.UNKNOWN
    message = err.details() if isinstance(err, grpc.Call) else str(err)
    status = rpc_status.from_call(err) if isinstance(err, grpc.Call) else None
    result = _of(code, message, status)
    result.__cause__ = err
    return result


def from_status(status: status_pb2.Status) -> MeshError:
    """The mesh exception a google.rpc.Status stands for (one answer of a batch, see :meth:`MeshError.to_status`).

    A code that is no gRPC status code is UNKNOWN.
    """
    code = next((c for c in grpc.StatusCode if c.value[0] == status.code), grpc.StatusCode.UNKNOWN)
    return _of(code, status.message, status)


def _of(code: grpc.StatusCode, message: str, status: status_pb2.Status | None) -> MeshError:
    cls = error_class(code)
    reason, metadata = cls.default_reason, {}
    for detail in status.details if status else []:
        info = error_details_pb2.ErrorInfo()
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR) and detail.Unpack(info):
            reason, metadata = info.reason, dict(info.metadata)
    return cls(message or code.name, reason=reason, metadata=metadata)


def error_info(err: grpc.RpcError) -> error_details_pb2.ErrorInfo | None:
    """The ErrorInfo attached to a failed call, if any (for tests and CLIs)."""
    if not isinstance(err, grpc.Call):
        return None
    status = rpc_status.from_call(err)
    for detail in status.details if status else []:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            return info
    return None

