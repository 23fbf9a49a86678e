"""mTLS servers and channels, identity from the transport, the caller table.

Every mesh server is built by :func:`create_server`: client certificates are
required and verified against the mesh CA, certificates are reloaded without
a restart, and a server interceptor establishes the caller's identity from
the ``peer_spiffe_id`` auth-context property only (never CN, never a request
field) and checks it against the caller table before any servicer code runs.
The same interceptor refuses bad input before any servicer code runs, with
INVALID_ARGUMENT naming the field (:mod:`agentmesh.validation`): request bytes
that do not decode, unknown enum numbers, strings over their maximum or with
characters outside their set, and bad mesh ids in ``baggage`` / ``traceparent``.
Every refusal goes through the denial hook, so it is audited: the
interceptor's own, and every refusal a servicer answers (a status in
:data:`agentmesh.errors.REFUSALS`, raised as a MeshError or through
``context.abort``) unless the service recorded it itself and said so with
:func:`agentmesh.errors.recorded`.
Every outgoing call goes through :func:`secure_channel`, which verifies the
server by the DNS name derived from its SPIFFE id, puts a deadline on
every call that has none, and tries a lost peer again at most a second apart
(:data:`RECONNECT_OPTIONS`), so a restarted process is reached again at once.
Certificates rotate without a restart: a server serves a re-issued leaf from its
next handshake, a channel (:class:`ReloadingChannel`) uses it for new calls
within a second, and neither ever takes up a leaf that is expired or not yet
valid (a process refuses to start with one).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import os
import socket
import threading
import time
import types
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc
from opentelemetry import context as otel_context
from opentelemetry import propagate
from opentelemetry.instrumentation.grpc import client_interceptor, grpcext, server_interceptor

from agentmesh import errors, spiffe, telemetry, validation
from agentmesh.access import AccessTable
from agentmesh.pki import CertPaths, KeyMismatch, LeafNotValidNow, PkiError, check_leaf, peer_chain_problem

log = logging.getLogger(__name__)

PEER_SPIFFE_ID = "peer_spiffe_id"
DEFAULT_CALL_TIMEOUT_S = 10.0
RECONNECT_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 1000),
    ("grpc.max_reconnect_backoff_ms", 1000),
)
"""Channel options of :func:`secure_channel`: a lost peer is tried again at most a second apart."""


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """A workload's certificate and key, and the mesh CA bundle."""

    cert: Path
    key: Path
    ca: Path

    @classmethod
    def of(cls, paths: CertPaths, ca: Path) -> TlsFiles:
        """From a workload's cert paths and the CA bundle path."""
        return cls(paths.cert, paths.key, ca)

    def read(self) -> tuple[bytes, bytes, bytes]:
        """(cert, key, ca) PEM bytes; a missing or unreadable file names itself."""
        cert, key = CertPaths(self.cert, self.key).read()
        ca, _ = CertPaths(self.ca, self.ca).read()
        return cert, key, ca

    def load(self) -> tuple[bytes, bytes, bytes]:
        """Like :meth:`read`, and refuses (PkiError naming the file and its validity) a leaf that is
        expired, not yet valid, or whose key is not its certificate's: what is never served or used."""
        for attempt in range(3):
            cert, key, ca = self.read()
            try:
                check_leaf(CertPaths(self.cert, self.key), cert, key)
            except KeyMismatch:
                if attempt == 2:
                    raise
                time.sleep(0.02)  # read between the two renames of a renewal: the pair is complete in a moment
                continue
            return cert, key, ca
        raise AssertionError("unreachable")

    def stamp(self) -> tuple[int, ...]:
        """Inode, size and modification time of each file, to notice a re-issued certificate."""
        out: list[int] = []
        for path in (self.cert, self.key, self.ca):
            st = os.stat(path)
            out += (st.st_ino, st.st_size, st.st_mtime_ns)
        return tuple(out)


@dataclass(frozen=True, slots=True)
class DeniedCall:
    """A refused call, handed to the denial hook for audit: refused by the interceptor, or by the
    servicer with a refusal it did not record itself."""

    method: str
    caller: str
    code: grpc.StatusCode
    reason: str
    field: str = ""
    """For a refused input: the offending field (its name only, never its value)."""
    invalid_ids: tuple[str, ...] = ()
    """Baggage ids (e.g. ``agentmesh.execution_id``) the call carried but that broke the id
    rule: removed from the context before the hook runs, so a record built from the
    context cannot carry them; named here so the record can say they were there."""


DenialHook = Callable[[DeniedCall], None]


def peer_identity(context: grpc.ServicerContext) -> str | None:
    """The caller's SPIFFE id from the TLS auth context, or None when absent or invalid.

    gRPC sets ``peer_spiffe_id`` only for a verified peer certificate with
    exactly one SPIFFE URI SAN; a certificate with several URI SANs gets none.
    A peer whose chain runs through an intermediate (the mesh CA's path length
    is 0, which BoringSSL does not enforce) or whose certificate is a CA gets
    none either.
    """
    auth = context.auth_context() or {}
    values = auth.get(PEER_SPIFFE_ID) or []
    if len(values) != 1 or peer_chain_problem(auth) is not None:
        return None
    return _mesh_id(values[0])


@functools.lru_cache(maxsize=1024)
def _mesh_id(raw: bytes) -> str | None:
    """A peer's SPIFFE URI SAN as a mesh id, or None (a pure function of the bytes: remembered)."""
    try:
        return str(spiffe.parse(raw.decode()))
    except (spiffe.InvalidSpiffeId, UnicodeDecodeError):
        return None


_ADMITTED: contextvars.ContextVar[tuple[grpc.ServicerContext, str] | None] = contextvars.ContextVar(
    "agentmesh_admitted_caller", default=None)
"""The call a servicer method with one answer is running for, and the caller the interceptor admitted on it."""


def caller_id(context: grpc.ServicerContext) -> str:
    """The authenticated caller of the current RPC (the interceptor has checked it).

    Inside a servicer method with one answer, the caller the mesh interceptor admitted on this very call
    (``context``), without reading the TLS auth context again; else read from it.
    """
    admitted = _ADMITTED.get()
    if admitted is not None and admitted[0] is context:
        return admitted[1]
    caller = peer_identity(context)
    if caller is None:
        raise errors.Unauthenticated("no mesh identity on this connection", reason="NO_PEER_IDENTITY")
    return caller


def server_credentials(files: TlsFiles, *, recheck_s: float = 1.0) -> grpc.ServerCredentials:
    """mTLS server credentials that pick up a re-issued certificate on the next handshake.

    Refuses (PkiError naming the file and its validity) to start with a leaf that is
    expired or not yet valid. A re-issued leaf that is expired, not yet valid or not a
    pair with its key is never served: the current one is kept, the refusal logged at
    ERROR once per file version, and the files looked at again at most every
    ``recheck_s`` until they change into something valid.
    """
    cert, key, ca = files.load()
    state: dict[str, Any] = {"stamp": files.stamp(), "refused": None, "checked": 0.0}

    def config(cert: bytes, key: bytes, ca: bytes) -> grpc.ServerCertificateConfiguration:
        return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca)

    def fetch() -> grpc.ServerCertificateConfiguration | None:
        # Called by gRPC before every new TLS handshake; None keeps the current config.
        try:
            stamp = files.stamp()
            if stamp == state["stamp"]:
                return None
            now = time.monotonic()
            if stamp == state["refused"] and now - state["checked"] < recheck_s:
                return None
            state["checked"] = now
            new = config(*files.load())
        except LeafNotValidNow as err:
            if stamp != state["refused"]:
                log.error("REFUSING to serve the certificate now in %s, keeping the current one: %s",
                          files.cert, err)
            state["refused"] = stamp
            return None
        except (OSError, PkiError) as err:
            if stamp != state["refused"]:
                log.warning("certificate reload skipped, keeping the current one: %s", err)
            state["refused"] = stamp
            return None
        except Exception:  # noqa: BLE001 - never break a handshake over a reload
            log.exception("certificate reload failed, keeping the current one")
            return None
        state["stamp"], state["refused"] = stamp, None
        log.info("reloaded certificate %s", files.cert)
        return new

    return grpc.dynamic_ssl_server_credentials(
        config(cert, key, ca), fetch, require_client_authentication=True
    )


class MeshServerInterceptor(grpc.ServerInterceptor):  # type: ignore[misc]
    """Authenticates the caller, applies the caller table, maps errors to statuses."""

    def __init__(self, access: AccessTable, on_denied: DenialHook | None = None, *,
                 propagate: bool = False) -> None:
        """``propagate``: make each call's incoming trace and baggage current (no tracing interceptor before it)."""
        self._access = access
        self._on_denied = on_denied
        self._propagate = propagate
        # Both are pure functions of their keys; caching them keeps the per-call
        # cost of the checks to two dictionary lookups on the hot path.
        self._wrapped: dict[tuple[str, int], Any] = {}
        self._allowed: dict[tuple[str, str], bool] = {}

    def intercept_service(
        self, continuation: Callable[[Any], Any], details: grpc.HandlerCallDetails
    ) -> Any:
        handler = continuation(details)
        if handler is None:
            return None
        key = (details.method, id(handler))
        wrapped = self._wrapped.get(key)
        if wrapped is None:
            wrapped = self._wrap(details.method, handler)
            self._wrapped[key] = wrapped
        return wrapped

    def _wrap(self, method: str, handler: Any) -> Any:
        deserializer = _safe_deserializer(handler.request_deserializer)
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(method, handler.unary_unary, streaming=False),
                request_deserializer=deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(
                self._stream(method, handler.unary_stream, streaming=False),
                request_deserializer=deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_unary:
            return grpc.stream_unary_rpc_method_handler(
                self._unary(method, handler.stream_unary, streaming=True),
                request_deserializer=deserializer,
                response_serializer=handler.response_serializer,
            )
        return grpc.stream_stream_rpc_method_handler(
            self._stream(method, handler.stream_stream, streaming=True),
            request_deserializer=deserializer,
            response_serializer=handler.response_serializer,
        )

    def _admit(self, method: str, context: grpc.ServicerContext, dropped: tuple[str, ...] = ()) -> str:
        caller = peer_identity(context)
        # Annotate first, so refused calls are traceable too.
        telemetry.annotate_current_span(caller)
        if caller is None:
            self._deny(method, "", errors.Unauthenticated(
                "a client certificate with exactly one mesh SPIFFE id is required",
                reason="NO_PEER_IDENTITY"), context, dropped)
        elif not self._allows(method, caller):
            self._deny(method, caller, errors.PermissionDenied(
                f"{caller} may not call {method}", reason="CALLER_NOT_ALLOWED",
                metadata={"caller": caller, "method": method}), context, dropped)
        return caller

    def _allows(self, method: str, caller: str) -> bool:
        key = (method, caller)
        allowed = self._allowed.get(key)
        if allowed is None:
            allowed = self._access.allows(method, caller)
            if len(self._allowed) < 10_000:  # bounded: callers are mesh identities, not end users
                self._allowed[key] = allowed
        return allowed

    def _deny(
        self, method: str, caller: str, err: errors.MeshError, context: grpc.ServicerContext,
        dropped: tuple[str, ...] = (), call: _Call | None = None,
    ) -> NoReturn:
        if call is not None:
            call.denied = True
        self._hand_over(DeniedCall(method, caller, err.code, err.reason, err.field or "", dropped))
        errors.abort(context, err)

    def _hand_over(self, call: DeniedCall) -> None:
        if self._on_denied is not None:
            try:
                self._on_denied(call)
            except Exception:  # noqa: BLE001 - the refusal stands even if audit fails
                log.exception("could not record denied call to %s", call.method)

    def _refused(self, method: str, caller: str, err: errors.MeshError) -> None:
        """A servicer's refusal, to the denial hook unless the service recorded it itself."""
        if err.code in errors.REFUSALS and not err.recorded:
            self._hand_over(DeniedCall(method, caller, err.code, err.reason, err.field or ""))

    def _aborted(self, method: str, caller: str, context: grpc.ServicerContext, call: _Call) -> None:
        """A servicer that ended the call with ``context.abort``: its refusal, to the denial hook."""
        if call.denied or errors.abort_recorded(context):
            return  # the interceptor's own refusal of a streamed request, or one the service recorded
        status = errors.aborted_status(context)
        if status is not None and status[0] in errors.REFUSALS:
            code, reason, metadata = status
            self._hand_over(DeniedCall(method, caller, code, reason, metadata.get("field", "")))

    def _enter(self, method: str, context: grpc.ServicerContext) -> str:
        """Admits the caller after checking the ids it sent in ``baggage`` and ``traceparent``.

        A bad id is refused with the caller check still first (an unknown caller
        learns nothing about validation), both with the bad ids removed from the
        context, so neither the refusal nor its audit record carries them (the
        valid ones stay, to find the refusal by).
        """
        ids = telemetry.baggage_ids()
        bad = validation.check_trace_ids(context.invocation_metadata() or (), ids)
        if bad is None:
            return self._admit(method, context)
        dropped = tuple(validation.invalid_ids(ids))
        with telemetry.without_mesh_ids(dropped):
            caller = self._admit(method, context, dropped)
            self._deny(method, caller, bad, context, dropped)

    def _check(self, method: str, caller: str, request: Any, context: grpc.ServicerContext,
               call: _Call | None = None) -> None:
        """Refuses an undecodable or invalid request before the servicer sees it."""
        if isinstance(request, _Undecodable):
            self._deny(method, caller, validation.undecodable(request.type_name), context, call=call)
        bad = validation.problem(request)
        if bad is not None:
            self._deny(method, caller, bad, context, call=call)

    def _checked(self, method: str, caller: str, requests: Iterator[Any],
                 context: grpc.ServicerContext, call: _Call) -> Iterator[Any]:
        for request in requests:
            self._check(method, caller, request, context, call)
            yield request

    def _unary(self, method: str, behavior: Callable[..., Any], *, streaming: bool) -> Callable[..., Any]:
        inner = self._unary_admitted(method, behavior, streaming=streaming)
        if not self._propagate:
            return inner

        def in_context(request: Any, context: grpc.ServicerContext) -> Any:
            token = otel_context.attach(telemetry.incoming_context(context.invocation_metadata() or ()))
            try:
                return inner(request, context)
            finally:
                otel_context.detach(token)

        return in_context

    def _unary_admitted(self, method: str, behavior: Callable[..., Any], *,
                        streaming: bool) -> Callable[..., Any]:
        def wrapped(request: Any, context: grpc.ServicerContext) -> Any:
            caller = self._enter(method, context)
            call = _Call()
            if streaming:
                request = self._checked(method, caller, request, context, call)
            else:
                self._check(method, caller, request, context)
            admitted = _ADMITTED.set((context, caller))
            try:
                return behavior(request, context)
            except errors.MeshError as err:
                self._refused(method, caller, err)
                errors.abort(context, err)
            except Exception:
                if context.code() is not None:  # the servicer aborted on purpose
                    self._aborted(method, caller, context, call)
                    raise
                log.exception("unhandled error in %s", method)
                errors.abort(context, errors.Internal("internal error"))
            finally:
                _ADMITTED.reset(admitted)

        return wrapped

    def _stream(self, method: str, behavior: Callable[..., Iterator[Any]], *,
                streaming: bool) -> Callable[..., Any]:
        inner = self._stream_admitted(method, behavior, streaming=streaming)
        if not self._propagate:
            return inner

        def in_context(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            # A generator runs a step at a time: the context is current during each step only.
            incoming = telemetry.incoming_context(context.invocation_metadata() or ())
            responses = inner(request, context)
            try:
                while True:
                    token = otel_context.attach(incoming)
                    try:
                        response = next(responses)
                    except StopIteration:
                        return
                    finally:
                        otel_context.detach(token)
                    yield response
            finally:
                responses.close()

        return in_context

    def _stream_admitted(self, method: str, behavior: Callable[..., Iterator[Any]], *,
                         streaming: bool) -> Callable[..., Any]:
        def wrapped(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            caller = self._enter(method, context)
            call = _Call()
            if streaming:
                request = self._checked(method, caller, request, context, call)
            else:
                self._check(method, caller, request, context)
            try:
                yield from behavior(request, context)
            except errors.MeshError as err:
                self._refused(method, caller, err)
                errors.abort(context, err)
            except Exception:
                if context.code() is not None:
                    self._aborted(method, caller, context, call)
                    raise
                log.exception("unhandled error in %s", method)
                errors.abort(context, errors.Internal("internal error"))

        return wrapped


class _Call:
    """Per-call state of the interceptor: whether it refused a streamed request itself (and recorded it)."""

    __slots__ = ("denied",)

    def __init__(self) -> None:
        self.denied = False


class _Undecodable:
    """Stands in for a request whose bytes did not decode; never reaches a servicer."""

    __slots__ = ("type_name",)

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name


def _safe_deserializer(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    """``deserializer`` that returns an :class:`_Undecodable` instead of raising.

    gRPC answers a deserializer's exception with INTERNAL; the interceptor turns
    the stand-in into INVALID_ARGUMENT ``REQUEST_UNDECODABLE`` after the caller check.
    """
    if deserializer is None:
        return None
    message_type = getattr(deserializer, "__self__", None)
    descriptor = getattr(message_type, "DESCRIPTOR", None)
    failed = _Undecodable(str(getattr(descriptor, "full_name", "")))

    def deserialize(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception:  # noqa: BLE001 - any failure to decode is the caller's bad input
            return failed

    return deserialize


def create_server(
    access: AccessTable,
    *,
    on_denied: DenialHook | None = None,
    max_workers: int = 32,
) -> grpc.Server:
    """A gRPC server with tracing and the mesh interceptor (in that order).

    When nothing exports spans, OpenTelemetry's server interceptor (a server span per
    call that nobody reads) is left out: the mesh interceptor makes the caller's trace
    and baggage current itself (:func:`telemetry.incoming_context`).
    """
    provider = telemetry.setup_tracing(os.environ.get("OTEL_SERVICE_NAME", "agentmesh"))
    exporting = telemetry.exporting()
    tracing = [server_interceptor(tracer_provider=provider)] if exporting else []  # type: ignore[no-untyped-call]
    return grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="rpc"),
        interceptors=[*tracing, MeshServerInterceptor(access, on_denied, propagate=not exporting)],
        options=[("grpc.so_reuseport", 0)],
    )


class PortInUse(Exception):
    """The address could not be bound."""


def bind(server: grpc.Server, host: str, port: int, files: TlsFiles) -> int:
    """Binds an mTLS port and returns the bound port (useful with port 0)."""
    if port:
        # Probe first: gRPC core reports a failed bind with its own multi-line
        # log, and start-up errors must be one line naming the port.
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
            except OSError as err:
                raise PortInUse(f"cannot bind {host}:{port}: {err.strerror}") from err
    try:
        bound: int = server.add_secure_port(f"{host}:{port}", server_credentials(files))
    except RuntimeError as err:
        raise PortInUse(f"cannot bind {host}:{port}: port in use or not available") from err
    if bound == 0:
        raise PortInUse(f"cannot bind {host}:{port}: port in use or not available")
    return bound


REFLECTION_V1 = "grpc.reflection.v1.ServerReflection"
"""The gRPC reflection service as clients ask for it today (grpcurl, Postman, grpc-js tools)."""
REFLECTION_V1_FILE = "grpc/reflection/v1/reflection.proto"


def _add_reflection_v1_descriptors() -> None:
    """Adds ``grpc/reflection/v1/reflection.proto`` to the default descriptor pool.

    grpcio-reflection ships v1alpha only. v1 is the same file under another
    package (same messages, fields and numbers, so the same bytes on the wire),
    so its descriptor is v1alpha's with the package renamed; served from the
    pool, reflection describes itself under both names.
    """
    pool = descriptor_pool.Default()
    try:
        pool.FindFileByName(REFLECTION_V1_FILE)
        return
    except KeyError:
        pass
    file = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(file)
    old, new = ".grpc.reflection.v1alpha.", ".grpc.reflection.v1."
    file.name, file.package = REFLECTION_V1_FILE, "grpc.reflection.v1"
    file.options.java_package = "io.grpc.reflection.v1"
    file.options.go_package = "google.golang.org/grpc/reflection/grpc_reflection_v1"
    for message in file.message_type:
        for f in message.field:
            if f.HasField("type_name"):
                f.type_name = f.type_name.replace(old, new)
    for method in file.service[0].method:
        method.input_type = method.input_type.replace(old, new)
        method.output_type = method.output_type.replace(old, new)
    pool.Add(file)


def add_reflection(server: grpc.Server, service_names: Sequence[str]) -> None:
    """Registers gRPC server reflection, v1 and v1alpha, listing ``service_names``, health and itself."""
    _add_reflection_v1_descriptors()
    reflector = reflection.ReflectionServicer(
        (*service_names, health.SERVICE_NAME, REFLECTION_V1, reflection.SERVICE_NAME))
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(reflector, server)
    # v1 is wire-identical to v1alpha: the same servicer answers it with v1alpha's message classes.
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(REFLECTION_V1, {
        "ServerReflectionInfo": grpc.stream_stream_rpc_method_handler(
            reflector.ServerReflectionInfo,
            request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
            response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString),
    }),))


def add_health_and_reflection(server: grpc.Server, service_names: Sequence[str]) -> health.HealthServicer:
    """Registers gRPC health (initially NOT_SERVING) and reflection, v1 and v1alpha, for the given services."""
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    for name in ("", *service_names):
        servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    add_reflection(server, service_names)
    return servicer


def set_serving(servicer: health.HealthServicer, service_names: Sequence[str], serving: bool) -> None:
    """Flips every service's health status at once."""
    status = (
        health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
    )
    for name in ("", *service_names):
        servicer.set(name, status)


class _DefaultDeadline(
    grpc.UnaryUnaryClientInterceptor,  # type: ignore[misc]
    grpc.UnaryStreamClientInterceptor,  # type: ignore[misc]
):
    """Gives every outgoing call a deadline unless the caller set one (before OpenTelemetry's
    client interceptor, which then records the effective timeout and injects the trace context)."""

    def __init__(self, timeout_s: float) -> None:
        self._timeout = timeout_s

    def _details(self, details: Any) -> Any:
        if details.timeout is None:
            details = details._replace(timeout=self._timeout)
        return details

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)


_CALL_ARGS = ("timeout", "metadata", "credentials", "wait_for_ready", "compression")
"""A multi-callable's parameters after the request, in order (``grpc.UnaryUnaryMultiCallable.__call__``)."""


class CallDefaults:
    """What every outgoing call carries when nothing records client spans: a deadline unless
    the caller set one, and the current trace context (``traceparent``, ``baggage``) in its metadata.

    Applied by :class:`ReloadingChannel` to each call's arguments, without an interceptor
    layer in between. The injected headers are a pure function of the (immutable) current
    context, so they are made once per context and reused by the calls made under it.
    """

    def __init__(self, timeout_s: float) -> None:
        self._timeout = timeout_s
        self._headers: dict[int, tuple[otel_context.Context, tuple[tuple[str, str], ...]]] = {}

    def _trace_headers(self) -> tuple[tuple[str, str], ...]:
        ctx = otel_context.get_current()
        kept = self._headers.get(id(ctx))
        if kept is not None and kept[0] is ctx:
            return kept[1]
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=ctx)
        headers = tuple(carrier.items())
        if len(self._headers) >= 1024:
            self._headers.clear()  # bounded; a context in use is simply made again
        self._headers[id(ctx)] = (ctx, headers)  # the context is held, so its id is not reused meanwhile
        return headers

    def apply(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``(request, ...)`` and the keyword arguments of one call (a dict of this call's own,
        changed in place), with the deadline and the trace headers added.

        Raises:
            TypeError: more positional arguments than a multi-callable takes.
        """
        if len(args) > 1:  # given by position: as keywords from here on
            if len(args) > 1 + len(_CALL_ARGS):
                raise TypeError(f"a call takes at most {1 + len(_CALL_ARGS)} positional arguments")
            given = dict(zip(_CALL_ARGS, args[1:], strict=False))
            if given.keys() & kwargs.keys():
                raise TypeError(f"a call got multiple values for {sorted(given.keys() & kwargs.keys())}")
            kwargs.update(given)
            args = args[:1]
        if kwargs.get("timeout") is None:
            kwargs["timeout"] = self._timeout
        headers = self._trace_headers()
        if headers:
            kwargs["metadata"] = (*(kwargs.get("metadata") or ()), *headers)
        return args, kwargs


RELOAD_CHECK_S = 1.0
"""How often (at most) a :class:`ReloadingChannel` looks at its certificate files."""


class _Generation:
    """One underlying channel of a :class:`ReloadingChannel` and the calls still using it."""

    __slots__ = ("channel", "calls", "retired", "closed")

    def __init__(self, channel: grpc.Channel) -> None:
        self.channel = channel
        self.calls = 0
        self.retired = False
        self.closed = False


class ReloadingChannel(grpc.Channel):  # type: ignore[misc]
    """A channel that follows its certificate files: a renewed leaf is used without a restart.

    ``build(cert, key, ca)`` makes an underlying channel. At most every ``check_every_s``
    (on the first call after that long) the files' stamp is compared; when it changed and
    the files hold a valid leaf, a fresh underlying channel is built and every new call
    goes to it, while calls already running finish on the old one, which is closed once
    the last of them ends. A leaf that is expired, not yet valid or not a pair with its
    key is not used (the current channel stays, the refusal logged once per file
    version). The per-call cost when nothing changed is a clock read and a counter
    under an uncontended lock; a stub's multi-callables are made once per channel
    generation, not per call.
    """

    def __init__(self, files: TlsFiles, build: Callable[[bytes, bytes, bytes], grpc.Channel], *,
                 check_every_s: float | None = None, defaults: CallDefaults | None = None) -> None:
        """``defaults``: applied to every call's arguments (deadline, trace headers), if given."""
        self._files = files
        self._build = build
        self.defaults = defaults
        self._every = RELOAD_CHECK_S if check_every_s is None else check_every_s
        self._lock = threading.Lock()
        try:
            self._stamp = files.stamp()
        except OSError:
            files.read()  # raises PkiError naming the file
            raise
        try:
            cert, key, ca = files.load()
        except LeafNotValidNow as err:  # the peer will refuse the handshake; say why here
            log.warning("client certificate not valid now: %s", err)
            cert, key, ca = files.read()
        self._gen = _Generation(build(cert, key, ca))
        self._retired: list[_Generation] = []
        self._refused: tuple[int, ...] | None = None
        self._next_check = time.monotonic() + self._every
        self._closed = False
        self.reloads = 0
        """How many times a new leaf was taken up (for tests and diagnostics)."""

    # --- generations ---------------------------------------------------------------------------

    def _acquire(self) -> _Generation:
        now = time.monotonic()
        if now >= self._next_check:
            self._maybe_reload(now)
        with self._lock:
            gen = self._gen
            gen.calls += 1
        return gen

    def _release(self, gen: _Generation) -> None:
        with self._lock:
            gen.calls -= 1
            done = gen.retired and gen.calls == 0 and not gen.closed
            if done:
                gen.closed = True
                self._retired.remove(gen)
        if done:
            # Not on this thread: a stream's done callback runs on the channel's own thread.
            threading.Thread(target=gen.channel.close, name="close-old-channel", daemon=True).start()

    def _maybe_reload(self, now: float) -> None:
        with self._lock:
            if now < self._next_check or self._closed:
                return
            self._next_check = now + self._every
        try:
            stamp = self._files.stamp()
            if stamp == self._stamp or stamp == self._refused:
                return
            cert, key, ca = self._files.load()
        except (OSError, PkiError) as err:
            if stamp != self._refused:
                log.error("not using the certificate now in %s, keeping the current one: %s",
                          self._files.cert, err)
            self._refused = stamp
            return
        fresh = _Generation(self._build(cert, key, ca))
        old: _Generation | None
        with self._lock:
            if self._closed:
                old = fresh
            else:
                old, self._gen = self._gen, fresh
                self._stamp, self._refused = stamp, None
                self.reloads += 1
                old.retired = True
                if old.calls:
                    self._retired.append(old)
                    old = None
                else:
                    old.closed = True
        if old is not None:
            old.channel.close()
        log.info("client channel took up the renewed certificate %s", self._files.cert)

    # --- grpc.Channel ---------------------------------------------------------------------------

    def unary_unary(self, method: str, request_serializer: Any = None, response_deserializer: Any = None,
                    _registered_method: bool | None = False) -> Any:
        return _ReloadingCallable(self, "unary_unary", method, request_serializer, response_deserializer,
                                  _registered_method)

    def unary_stream(self, method: str, request_serializer: Any = None, response_deserializer: Any = None,
                     _registered_method: bool | None = False) -> Any:
        return _ReloadingCallable(self, "unary_stream", method, request_serializer, response_deserializer,
                                  _registered_method)

    def stream_unary(self, method: str, request_serializer: Any = None, response_deserializer: Any = None,
                     _registered_method: bool | None = False) -> Any:
        return _ReloadingCallable(self, "stream_unary", method, request_serializer, response_deserializer,
                                  _registered_method)

    def stream_stream(self, method: str, request_serializer: Any = None, response_deserializer: Any = None,
                      _registered_method: bool | None = False) -> Any:
        return _ReloadingCallable(self, "stream_stream", method, request_serializer, response_deserializer,
                                  _registered_method)

    def subscribe(self, callback: Callable[[grpc.ChannelConnectivity], None], try_to_connect: bool = False) -> None:
        self._gen.channel.subscribe(callback, try_to_connect=try_to_connect)

    def unsubscribe(self, callback: Callable[[grpc.ChannelConnectivity], None]) -> None:
        with self._lock:
            gens = [self._gen, *self._retired]
        for gen in gens:
            with contextlib.suppress(Exception):
                gen.channel.unsubscribe(callback)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            gens = [g for g in (self._gen, *self._retired) if not g.closed]
            for gen in gens:
                gen.closed = True
            self._retired = []
        for gen in gens:
            gen.channel.close()

    def __enter__(self) -> ReloadingChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _ReloadingCallable:
    """A multi-callable of a :class:`ReloadingChannel`: each call goes to its current channel."""

    __slots__ = ("_owner", "_kind", "_args", "_cache")

    def __init__(self, owner: ReloadingChannel, kind: str, method: str, serializer: Any, deserializer: Any,
                 registered: bool | None) -> None:
        self._owner = owner
        self._kind = kind
        self._args = (method, serializer, deserializer, registered)
        self._cache: tuple[_Generation | None, Any] = (None, None)

    def _callable(self, gen: _Generation) -> Any:
        cached_gen, fn = self._cache
        if cached_gen is not gen:
            method, serializer, deserializer, registered = self._args
            fn = getattr(gen.channel, self._kind)(method, serializer, deserializer,
                                                  _registered_method=registered)
            self._cache = (gen, fn)
        return fn

    def _blocking(self, name: str | None, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        gen = self._owner._acquire()
        try:
            fn = self._callable(gen)
            return (fn if name is None else getattr(fn, name))(*args, **kwargs)
        finally:
            self._owner._release(gen)

    def _tracked(self, name: str | None, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A call that outlives this method (a future, a response stream): released when it ends."""
        owner = self._owner
        gen = owner._acquire()
        released = False
        lock = threading.Lock()

        def release(*_: object) -> None:
            nonlocal released
            with lock:
                if released:
                    return
                released = True
            owner._release(gen)

        try:
            fn = self._callable(gen)
            result = (fn if name is None else getattr(fn, name))(*args, **kwargs)
        except BaseException:
            release()
            raise
        if hasattr(result, "add_done_callback"):
            result.add_done_callback(release)
            return result
        if isinstance(result, types.GeneratorType):
            return _released_after(result, release)
        release()
        return result

    def _with_defaults(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        defaults = self._owner.defaults
        return (args, kwargs) if defaults is None else defaults.apply(args, kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        args, kwargs = self._with_defaults(args, kwargs)
        if self._kind in ("unary_stream", "stream_stream"):
            return self._tracked(None, args, kwargs)
        return self._blocking(None, args, kwargs)

    def with_call(self, *args: Any, **kwargs: Any) -> Any:
        return self._blocking("with_call", *self._with_defaults(args, kwargs))

    def future(self, *args: Any, **kwargs: Any) -> Any:
        return self._tracked("future", *self._with_defaults(args, kwargs))


def _released_after(stream: Iterator[Any], release: Callable[[], None]) -> Iterator[Any]:
    try:
        yield from stream
    finally:
        release()


def secure_channel(
    target: str,
    files: TlsFiles,
    server_id: spiffe.SpiffeId,
    *,
    default_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
) -> grpc.Channel:
    """An mTLS channel to a mesh server, verified as ``server_id``, with tracing and deadlines.

    It follows its certificate files (:class:`ReloadingChannel`): a renewed leaf is used
    by new calls within about a second, without a restart.
    """
    provider = telemetry.setup_tracing(os.environ.get("OTEL_SERVICE_NAME", "agentmesh"))
    exporting = telemetry.exporting()

    def build(cert: bytes, key: bytes, ca: bytes) -> grpc.Channel:
        creds = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)
        channel = grpc.secure_channel(
            target,
            creds,
            options=[
                # The server must present the certificate of the identity we meant to reach.
                ("grpc.ssl_target_name_override", server_id.dns_name),
                ("grpc.default_authority", server_id.dns_name),
                # A peer that restarts is reached again within about a second: gRPC's own
                # backoff grows to two minutes between attempts. (min_reconnect_backoff is
                # the shortest time one connection attempt is given; a closed port fails at once.)
                *RECONNECT_OPTIONS,
            ],
        )
        if not exporting:
            return channel  # the call defaults are applied by the ReloadingChannel
        # Deadline first, so the tracing layer (grpcext, OpenTelemetry's own
        # interceptor API) sees and records the effective timeout.
        with_deadline = grpc.intercept_channel(channel, _DefaultDeadline(default_timeout_s))
        tracing = client_interceptor(tracer_provider=provider)  # type: ignore[no-untyped-call]
        return grpcext.intercept_channel(with_deadline, tracing)  # type: ignore[no-untyped-call]

    # Nobody reads client spans: the context (trace id, mesh ids) and the deadline are
    # added to each call's arguments, without OpenTelemetry's span machinery or an interceptor layer.
    return ReloadingChannel(files, build, defaults=None if exporting else CallDefaults(default_timeout_s))
