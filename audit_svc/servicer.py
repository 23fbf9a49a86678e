"""AuditService over gRPC: validates and stamps records, calls the AuditLog, packs proofs.

Thin by design: the Merkle tree, durability, group commit, proofs and queries
live in :class:`audit_svc.log_store.AuditLog`, which knows nothing of gRPC or
protobuf. This module decides what an entry *is*:

* the caller sends an ``AuditRecord``; the service replaces ``recorded_by``
  with the caller's SPIFFE id from mTLS (never a request field),
  ``record_id`` with a fresh UUID, ``recorded_at`` with the current time, and
  ``index`` with the position the log gives the entry;
* the entry is ``record.SerializeToString(deterministic=True)`` with that
  index embedded, so a record cannot be moved to another position without
  :func:`record_check` noticing;
* a record whose ``principal.grants`` do not verify against the grant
  signer's key is refused (``PRINCIPAL_INVALID``), so the log holds only
  delegation chains :func:`grant_check` accepts: nothing a caller sends can
  make ``audit verify`` fail. Audit verifies each grant's *record signature*
  (``agentmesh.grants.verify_record_chain``); a link without one is refused;
* the log keeps no grant signature (a signed grant is a credential): each
  grant is stored in its record form (``agentmesh.grants.record_form``:
  body, key id and record signature, no ``signature``), which proves the
  grant authentic offline but can never be presented as one. ``verify``
  checks the record signatures, and older records as they were stored
  (:func:`chain_check` says how each chain was checked);
* an agent identity may append ACCESS_DENIED records only (the refusals at
  its own door); anything else is PERMISSION_DENIED, and that refusal is
  recorded too;
* the record's ids are passed to the log as :class:`IndexAttributes` for
  ``QueryRecords``; :func:`attribute_check` ties them back to the bytes.

Bad input is refused before anything is appended, with INVALID_ARGUMENT and
an ``ErrorInfo`` naming the field. That includes a request that does not even
decode: the handlers registered by :func:`add_to_server` let it through to
the caller table and then to validation, instead of gRPC's own INTERNAL.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Final, TypeVar

import grpc
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from google.protobuf import message as pb_message
from google.protobuf.timestamp_pb2 import Timestamp

from agentmesh import errors, grants, spiffe, telemetry, transport
from agentmesh.v1 import audit_service_pb2 as pb
from agentmesh.v1 import audit_service_pb2_grpc as pb_grpc
from agentmesh.v1 import common_pb2
from audit_svc.checkpoints import Checkpoint
from audit_svc.errors import (
    AuditError,
    CheckpointInvalidError,
    InvalidArgumentError,
    KeyFileError,
    LogClosedError,
    LogLockedError,
    StorageError,
)
from audit_svc.log_store import AuditLog, IndexAttributes, RecordFilter

log = logging.getLogger(__name__)

SERVICE_NAME: Final = "agentmesh.v1.AuditService"
ORIGIN: Final = "agentmesh.local/audit"
"""Origin line of every checkpoint this service signs."""
MAX_RECORD_BYTES: Final = 64 * 1024
"""Largest encoded record accepted (after stamping); payloads belong in digests, not records."""
DEFAULT_PAGE_SIZE: Final = 100
MAX_PAGE_SIZE: Final = 1000
MAX_BATCH: Final = 1000
"""Records one AppendRecords call may carry."""

_MAX_MICROS: Final = 253_402_300_799 * 1_000_000  # 9999-12-31T23:59:59Z
_PAGE_TOKEN: Final = re.compile(r"[0-9]{1,18}")
_ATTRIBUTE_NAMES: Final = tuple(f.name for f in fields(IndexAttributes) if f.name != "recorded_at_micros")

_T = TypeVar("_T")


# --------------------------------------------------------------- decoding


@dataclass(frozen=True, slots=True)
class Undecodable:
    """Stands in for a request whose bytes are not the message the RPC expects."""

    message: str
    error: str


def _lenient(cls: type[pb_message.Message]) -> Callable[[bytes], Any]:
    def deserialize(data: bytes) -> Any:
        try:
            return cls.FromString(data)
        except pb_message.DecodeError as err:
            return Undecodable(cls.DESCRIPTOR.full_name, str(err))

    return deserialize


def _decoded(request: _T | Undecodable, field: str) -> _T:
    if isinstance(request, Undecodable):
        raise errors.InvalidArgument(
            f"the request is not a valid {request.message}: {request.error}",
            reason="REQUEST_UNDECODABLE", field=field, metadata={"type": request.message})
    return request


def add_to_server(servicer: AuditServicer, server: grpc.Server) -> None:
    """Registers ``servicer`` like the generated ``add_AuditServiceServicer_to_server``, but leniently.

    gRPC answers a request that fails to deserialize with INTERNAL before any
    interceptor runs. Deserializing into :class:`Undecodable` instead lets the
    caller table run first and then turns the request into INVALID_ARGUMENT.
    """
    unary, stream = grpc.unary_unary_rpc_method_handler, grpc.unary_stream_rpc_method_handler
    handlers = {
        "AppendRecord": unary(servicer.AppendRecord, request_deserializer=_lenient(pb.AppendRecordRequest),
                              response_serializer=pb.AppendRecordResponse.SerializeToString),
        "AppendRecords": unary(servicer.AppendRecords, request_deserializer=_lenient(pb.AppendRecordsRequest),
                               response_serializer=pb.AppendRecordsResponse.SerializeToString),
        "QueryRecords": stream(servicer.QueryRecords, request_deserializer=_lenient(pb.QueryRecordsRequest),
                               response_serializer=pb.QueryRecordsResponse.SerializeToString),
        "GetCheckpoint": unary(servicer.GetCheckpoint, request_deserializer=_lenient(pb.GetCheckpointRequest),
                               response_serializer=pb.GetCheckpointResponse.SerializeToString),
        "GetInclusionProof": unary(servicer.GetInclusionProof,
                                   request_deserializer=_lenient(pb.GetInclusionProofRequest),
                                   response_serializer=pb.GetInclusionProofResponse.SerializeToString),
        "GetConsistencyProof": unary(servicer.GetConsistencyProof,
                                     request_deserializer=_lenient(pb.GetConsistencyProofRequest),
                                     response_serializer=pb.GetConsistencyProofResponse.SerializeToString),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    server.add_registered_method_handlers(SERVICE_NAME, handlers)


# --------------------------------------------------------------- errors

# Domain reasons that name a request field, and the reason the caller sees.
_FIELD_OF_REASON: Final[Mapping[str, tuple[str, str]]] = {
    "LEAF_INDEX": ("leaf_index", "LEAF_INDEX_OUT_OF_RANGE"),
    "TREE_SIZE": ("tree_size", "TREE_SIZE_OUT_OF_RANGE"),
    "FIRST_TREE_SIZE": ("first_tree_size", "TREE_SIZE_OUT_OF_RANGE"),
    "SECOND_TREE_SIZE": ("second_tree_size", "TREE_SIZE_OUT_OF_RANGE"),
    "TIME_RANGE": ("end_time", "INVALID_TIME_RANGE"),
    "LIMIT": ("page_size", "INVALID_FIELD"),
    "AFTER_INDEX": ("page_token", "INVALID_PAGE_TOKEN"),
    "ENTRY_TOO_LARGE": ("record", "RECORD_TOO_LARGE"),
}


def mesh_error(err: AuditError, *, field_prefix: str = "") -> errors.MeshError:
    """The mesh error (status + ErrorInfo) for an audit domain error."""
    if isinstance(err, InvalidArgumentError | CheckpointInvalidError):
        field, reason = _FIELD_OF_REASON.get(err.reason, ("", err.reason))
        if not field and err.reason.endswith("_INVALID"):
            field, reason = field_prefix + err.reason.removesuffix("_INVALID").lower(), "INVALID_FIELD"
        return errors.InvalidArgument(f"{field}: {err}" if field else str(err), reason=reason, field=field or None,
                                      metadata={"audit_reason": err.reason})
    if isinstance(err, LogClosedError | StorageError):
        return errors.Unavailable(str(err), reason=err.reason)
    if isinstance(err, LogLockedError | KeyFileError):
        return errors.FailedPrecondition(str(err), reason=err.reason)
    # LogCorruptedError and anything new: the log refuses to serve (fail closed).
    return errors.Internal(str(err), reason=err.reason)


@contextlib.contextmanager
def _domain_errors(field_prefix: str = "") -> Iterator[None]:
    try:
        yield
    except AuditError as err:
        raise mesh_error(err, field_prefix=field_prefix) from err
    except TimeoutError as err:
        raise errors.DeadlineExceeded("the deadline passed before the log took the request",
                                      reason="AUDIT_DEADLINE_EXCEEDED") from err


def _invalid(field: str, message: str, reason: str = "INVALID_FIELD") -> errors.InvalidArgument:
    return errors.InvalidArgument(f"{field}: {message}", reason=reason, field=field)


# --------------------------------------------------------------- records and checkpoints


def index_attributes(record: pb.AuditRecord) -> IndexAttributes:
    """The query attributes of a stamped record; raises InvalidArgumentError (``<FIELD>_INVALID``)."""
    return IndexAttributes(
        execution_id=record.execution_id,
        trace_id=record.trace_id,
        correlation_id=record.correlation_id,
        agent_id=record.agent_id,
        capability_id=record.capability_id,
        tenant_id=record.tenant_id,
        recorded_at_micros=record.recorded_at.ToMicroseconds(),
    )


def decode_record(entry: bytes) -> pb.AuditRecord:
    """The AuditRecord an entry encodes; raises ``google.protobuf.message.DecodeError``."""
    return pb.AuditRecord.FromString(entry)


CHAIN_RECORD_SIGNATURES: Final = "record_signatures"
"""A stored chain every link of which carries its record signature, verified against a trusted key."""
CHAIN_GRANT_SIGNATURES: Final = "grant_signatures"
"""A chain of an older record that still carries the grant signatures (before the log kept none): verified."""
CHAIN_KEY_IDS: Final = "key_ids_and_links"
"""A chain of an older record stored without any signature: only its key ids and links can be checked."""
CHAIN_CHECKS: Final = (CHAIN_RECORD_SIGNATURES, CHAIN_GRANT_SIGNATURES, CHAIN_KEY_IDS)
"""How a stored chain is checked, strongest first; a chain counts as its weakest link."""


@dataclass(frozen=True, slots=True)
class ChainCheck:
    """What :func:`chain_check` found of one record's delegation chain."""

    how: str
    """One of :data:`CHAIN_CHECKS` (the weakest link's), or "" for a record without grants."""
    problem: str | None = None
    """What is wrong with the chain, or None."""


def _open_stored_link(signed: common_pb2.SignedTaskGrant, trusted: Mapping[str, Ed25519PublicKey],
                      seen: list[str]) -> common_pb2.TaskGrant:
    """Authenticates one stored link as well as what it carries allows; notes how in ``seen``."""
    if signed.record_signature:
        seen.append(CHAIN_RECORD_SIGNATURES)
        return grants.verify_record(signed, trusted)
    if signed.signature:
        seen.append(CHAIN_GRANT_SIGNATURES)
        return grants.verify(signed, trusted, check_expiry=False)
    seen.append(CHAIN_KEY_IDS)
    if signed.key_id not in trusted:
        raise grants.GrantInvalid(f"grant signed by an unknown key {signed.key_id!r}", "GRANT_UNKNOWN_KEY")
    return grants.decode(signed)


def chain_check(record: pb.AuditRecord, trusted_grant_keys: Mapping[str, Ed25519PublicKey]) -> ChainCheck:
    """Checks a stored record's delegation chain offline, and says how.

    A link with its record signature (every record audit stores now) must
    verify against a trusted key. Older records are checked as they were
    stored: a link that kept its grant signature must verify; one stored
    without any signature must name a trusted key. Either way the chain rules
    hold (``agentmesh.grants.verify_links``: each link derives from the one
    before it, keeps its tenant and user, never widens the capabilities or
    resources). Expiry is not checked: a record is about a moment that has
    passed.
    """
    chain = list(record.principal.grants)
    if not chain:
        return ChainCheck("")
    seen: list[str] = []
    problem: str | None = None
    try:
        grants.verify_links(chain, lambda signed: _open_stored_link(signed, trusted_grant_keys, seen))
    except grants.GrantInvalid as err:
        problem = f"{err} ({err.reason})"
    return ChainCheck(max(seen, key=CHAIN_CHECKS.index), problem)


def chain_problem(record: pb.AuditRecord, trusted_grant_keys: Mapping[str, Ed25519PublicKey]) -> str | None:
    """What is wrong with a stored record's delegation chain, or None (see :func:`chain_check`)."""
    return chain_check(record, trusted_grant_keys).problem


def record_forms(record: pb.AuditRecord) -> None:
    """Puts every grant of a record in its record form: a signed grant is a credential, the log keeps none.

    What the grant said (its body, with its id, issuer, audience and key id)
    stays, and so does the proof that it is genuine: its record signature,
    which anyone can verify offline and no one can present as a grant.
    """
    for signed in record.principal.grants:
        signed.CopyFrom(grants.record_form(signed))


def record_check(index: int, entry: bytes) -> str | None:
    """A per-entry check for ``verify_log``: the entry is an AuditRecord, at its own index."""
    try:
        record = decode_record(entry)
    except pb_message.DecodeError:
        return "the entry is not an AuditRecord"
    if record.index != index:
        return f"the record says it is record {record.index}"
    return None


def grant_check(trusted_grant_keys: Mapping[str, Ed25519PublicKey],
                tally: dict[str, int] | None = None) -> Callable[[int, bytes], str | None]:
    """A per-entry check for ``verify_log`` (``grant_check``): the record's delegation chain verifies.

    With ``tally``, counts the chains that verified by how they were checked
    (:data:`CHAIN_CHECKS`), so a report can say which were verified by
    signatures and which by key ids and links only.
    """

    def check(index: int, entry: bytes) -> str | None:
        try:
            record = decode_record(entry)
        except pb_message.DecodeError:
            return None  # record_check reports it
        found = chain_check(record, trusted_grant_keys)
        if found.problem is not None:
            return f"its delegation chain does not verify: {found.problem}"
        if tally is not None and found.how:
            tally[found.how] = tally.get(found.how, 0) + 1
        return None

    return check


def attribute_check(index: int, entry: bytes, attributes: IndexAttributes) -> str | None:
    """An attribute check for ``verify_log``: the stored query attributes are the record's own."""
    try:
        expected = index_attributes(decode_record(entry))
    except (pb_message.DecodeError, AuditError):
        return "the entry is not a well-formed AuditRecord"
    for f in fields(IndexAttributes):
        own, filed = getattr(expected, f.name), getattr(attributes, f.name)
        if own != filed:
            return f"it is filed for queries under {f.name}={filed!r}, but the record says {own!r}"
    return None


def checkpoint_to_pb(cp: Checkpoint) -> pb.Checkpoint:
    """The wire form of a signed checkpoint."""
    ts = Timestamp()
    ts.FromMicroseconds(cp.timestamp_micros)
    return pb.Checkpoint(origin=cp.origin, tree_size=cp.tree_size, root_hash=cp.root_hash, timestamp=ts,
                         signature=cp.signature, key_id=cp.key_id)


def checkpoint_from_pb(msg: pb.Checkpoint) -> Checkpoint:
    """A checkpoint received over the wire (verify it with ``verify_checkpoint`` before trusting it)."""
    return Checkpoint(origin=msg.origin, tree_size=msg.tree_size, root_hash=msg.root_hash,
                      timestamp_micros=msg.timestamp.ToMicroseconds(), signature=msg.signature, key_id=msg.key_id)


# proto3 enums are open: an unknown number decodes fine, so check it here.
_EVENT_TYPES: Final = frozenset(pb.AuditEventType.values())
_OUTCOMES: Final = frozenset(pb.AuditOutcome.values())
_ANALYSIS_DECISIONS: Final = frozenset(common_pb2.AnalysisDecision.values())
_POLICY_EFFECTS: Final = frozenset(common_pb2.PolicyEffect.values())


def _check_enum(value: int, known: frozenset[int], field: str, *, required: bool = False) -> None:
    if required and value == 0:
        raise _invalid(field, "is required", "MISSING_FIELD")
    if value not in known:
        raise _invalid(field, f"{value} is not a known value")


def _validate(record: pb.AuditRecord) -> None:
    """Checks a caller's record before anything is stamped or stored."""
    _check_enum(record.event_type, _EVENT_TYPES, "record.event_type", required=True)
    _check_enum(record.outcome, _OUTCOMES, "record.outcome")
    _check_enum(record.analysis_decision, _ANALYSIS_DECISIONS, "record.analysis_decision")
    _check_enum(record.policy_decision.effect, _POLICY_EFFECTS, "record.policy_decision.effect")
    if not 0.0 <= record.confidence <= 1.0:  # also refuses NaN
        raise _invalid("record.confidence", "must be within [0, 1]")


def _micros(ts: Timestamp, field: str) -> int:
    if ts.seconds < 0 or not 0 <= ts.nanos < 1_000_000_000 or ts.ToMicroseconds() > _MAX_MICROS:
        raise _invalid(field, "is not a valid time after 1970")
    return ts.ToMicroseconds()


def _now_micros() -> int:
    return time.time_ns() // 1_000


# --------------------------------------------------------------- the servicer


AGENT_EVENT_TYPES: Final = frozenset({pb.AUDIT_EVENT_TYPE_ACCESS_DENIED})
"""What an agent identity may record: the refusals at its own door, nothing that narrates governed work."""


def _check_recorder(record: pb.AuditRecord, recorded_by: str) -> None:
    """Agents may append (their refusals must be recorded) but only ACCESS_DENIED records."""
    try:
        kind = spiffe.parse(recorded_by).kind
    except spiffe.InvalidSpiffeId:
        return  # the caller table admits mesh identities only; in-process callers name themselves
    if kind == "agent" and record.event_type not in AGENT_EVENT_TYPES:
        raise errors.PermissionDenied(
            f"record.event_type: an agent may record only ACCESS_DENIED, not "
            f"{pb.AuditEventType.Name(record.event_type)}",
            reason="AGENT_EVENT_TYPE_NOT_ALLOWED", field="record.event_type")


class AuditServicer(pb_grpc.AuditServiceServicer):
    """The gRPC face of the audit log. Register it with :func:`add_to_server`."""

    def __init__(self, audit_log: AuditLog, *, clock_micros: Callable[[], int] = _now_micros,
                 max_record_bytes: int = MAX_RECORD_BYTES,
                 trusted_grant_keys: Mapping[str, Ed25519PublicKey] | None = None,
                 identity: spiffe.SpiffeId | None = None) -> None:
        """Args:
        audit_log: The log records go to.
        clock_micros: Stamps ``recorded_at``.
        max_record_bytes: Largest encoded record accepted.
        trusted_grant_keys: The grant signer's keys by key id. When given, a record
            whose ``principal.grants`` record signatures do not verify against them is refused
            (INVALID_ARGUMENT ``PRINCIPAL_INVALID``), so the log holds only
            delegation chains ``audit verify`` accepts. None skips the check.
        identity: This service's own identity, which records the refusals it makes.
        """
        self._log = audit_log
        self._clock = clock_micros
        self._max_record_bytes = max_record_bytes
        self._grant_keys = None if trusted_grant_keys is None else dict(trusted_grant_keys)
        self._identity = identity or spiffe.service("audit")

    # -- appending ------------------------------------------------------------

    def _stamp(self, record: pb.AuditRecord, recorded_by: str) -> tuple[pb.AuditRecord, IndexAttributes]:
        """Validates a record and stamps identity, id and time; raises a MeshError if bad."""
        _validate(record)
        _check_recorder(record, recorded_by)
        if self._grant_keys is not None and record.principal.grants:
            # Every link's record signature, the proof the log keeps: a link without one is refused.
            try:
                grants.verify_record_chain(list(record.principal.grants), self._grant_keys)
            except grants.GrantInvalid as err:
                raise errors.InvalidArgument(
                    f"record.principal: the delegation chain does not verify: {err} ({err.reason})",
                    reason="PRINCIPAL_INVALID", field="record.principal") from err
        rec = pb.AuditRecord()
        rec.CopyFrom(record)
        record_forms(rec)
        rec.recorded_by = recorded_by
        rec.record_id = str(uuid.uuid4())
        rec.recorded_at.FromMicroseconds(self._clock())
        # The index is only known on the log's writer; count it at its widest.
        rec.index = 2**62
        size = rec.ByteSize()
        if size > self._max_record_bytes:
            raise errors.InvalidArgument(
                f"record: {size} bytes encoded, at most {self._max_record_bytes}; record digests, not payloads",
                reason="RECORD_TOO_LARGE", field="record", metadata={"max_bytes": str(self._max_record_bytes)})
        with _domain_errors("record."):
            attrs = index_attributes(rec)
        return rec, attrs

    @staticmethod
    def _builder(rec: pb.AuditRecord) -> Callable[[int], bytes]:
        def build(index: int) -> bytes:
            # Runs on the log's writer thread with the index this entry gets.
            rec.index = index
            return rec.SerializeToString(deterministic=True)

        return build

    def append(self, record: pb.AuditRecord, *, recorded_by: str,
               timeout: float | None = None) -> pb.AppendRecordResponse:
        """Validates, stamps and durably appends one record; raises a MeshError, appending nothing, if bad."""
        rec, attrs = self._stamp(record, recorded_by)
        with _domain_errors("record."):
            result = self._log.append(self._builder(rec), attrs, timeout=timeout)
        return pb.AppendRecordResponse(record_id=rec.record_id, index=result.index, tree_size=result.index + 1)

    def append_many(self, records: Sequence[pb.AuditRecord], *, recorded_by: str,
                    timeout: float | None = None) -> list[pb.AppendRecordResponse]:
        """Validates and stamps every record, then appends them all in one durable write, or none."""
        if not records:
            raise _invalid("records", "at least one record is required", "MISSING_FIELD")
        if len(records) > MAX_BATCH:
            raise _invalid("records", f"at most {MAX_BATCH} records per call", "TOO_MANY_RECORDS")
        stamped = []
        for i, record in enumerate(records):
            try:
                stamped.append(self._stamp(record, recorded_by))
            except errors.MeshError as err:
                # Name the record in the batch: records[3].event_type, not record.event_type.
                if err.field and err.field.startswith("record"):
                    err.metadata["field"] = f"records[{i}]" + err.field.removeprefix("record")
                raise
        with _domain_errors("records."):
            results = self._log.append_many([self._builder(rec) for rec, _ in stamped],
                                            [attrs for _, attrs in stamped], timeout=timeout)
        return [pb.AppendRecordResponse(record_id=rec.record_id, index=r.index, tree_size=r.index + 1)
                for (rec, _), r in zip(stamped, results, strict=True)]

    def AppendRecord(self, request: pb.AppendRecordRequest | Undecodable,
                     context: grpc.ServicerContext) -> pb.AppendRecordResponse:
        caller = transport.caller_id(context)
        with self._refusals_recorded(f"/{SERVICE_NAME}/AppendRecord", caller):
            req = _decoded(request, "record")
            if not req.HasField("record"):
                raise _invalid("record", "is required", "MISSING_FIELD")
            return self.append(req.record, recorded_by=caller, timeout=context.time_remaining())

    def AppendRecords(self, request: pb.AppendRecordsRequest | Undecodable,
                      context: grpc.ServicerContext) -> pb.AppendRecordsResponse:
        caller = transport.caller_id(context)
        with self._refusals_recorded(f"/{SERVICE_NAME}/AppendRecords", caller):
            req = _decoded(request, "records")
            return pb.AppendRecordsResponse(results=self.append_many(list(req.records), recorded_by=caller,
                                                                     timeout=context.time_remaining()))

    @contextlib.contextmanager
    def _refusals_recorded(self, method: str, caller: str) -> Iterator[None]:
        """A record refused (bad, an unverified chain, not the caller's to record): the refusal is recorded.

        Like a refusal at the door: ACCESS_DENIED, by this service, reason
        codes starting with the reason, then the field, caller and method.
        Failures that refuse nothing (UNAVAILABLE, a deadline) are not.
        """
        try:
            yield
        except (errors.InvalidArgument, errors.PermissionDenied, errors.Unauthenticated) as err:
            try:
                self.record_refusal(transport.DeniedCall(method, caller, err.code, err.reason),
                                    field=err.field or "")
            except errors.MeshError:
                log.exception("could not record the refusal of %s to %s", method, caller)
            errors.recorded(err)
            raise

    def record_refusal(self, call: transport.DeniedCall, *, field: str = "") -> None:
        """Appends, as this service, the ACCESS_DENIED record of a refused call."""
        field = field or call.field
        ids = telemetry.current_ids()
        rec = pb.AuditRecord(
            event_type=pb.AUDIT_EVENT_TYPE_ACCESS_DENIED,
            outcome=pb.AUDIT_OUTCOME_DENIED,
            reason_codes=[call.reason, *([f"field={field}"] if field else []), f"caller={call.caller or 'none'}",
                          f"method={call.method}"],
        )
        # The ids come from the refused caller's own metadata: file the refusal
        # under them when they are well formed, never let them stop the record.
        for name, key in (("trace_id", "trace_id"), ("execution_id", telemetry.EXECUTION_ID),
                          ("correlation_id", telemetry.CORRELATION_ID)):
            value = ids.get(key, "")
            try:
                IndexAttributes.from_mapping({name: value})
            except InvalidArgumentError:
                rec.reason_codes.append(f"{name}=invalid")
            else:
                setattr(rec, name, value)
        with contextlib.suppress(spiffe.InvalidSpiffeId):
            caller = spiffe.parse(call.caller)
            if caller.kind == "agent":
                rec.agent_id = caller.name  # so the refusal shows up under the agent too
        self.append(rec, recorded_by=str(self._identity), timeout=5.0)

    def denial_hook(self, own_identity: spiffe.SpiffeId | None = None) -> transport.DenialHook:
        """Records every call refused here that is not recorded yet (caller table, bad input at the
        edge, a servicer's refusal), in this log, as ACCESS_DENIED."""
        if own_identity is not None:
            self._identity = own_identity
        return self.record_refusal

    # -- reading --------------------------------------------------------------

    def _query(self, req: pb.QueryRecordsRequest) -> tuple[RecordFilter, int, int, int]:
        if req.page_size < 0:
            raise _invalid("page_size", "must not be negative")
        if req.max_records < 0:
            raise _invalid("max_records", "must not be negative")
        page_size = min(req.page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)  # AIP-158: cap, do not fail
        after = -1
        if req.page_token:
            if not _PAGE_TOKEN.fullmatch(req.page_token) or int(req.page_token) >= self._log.size():
                raise _invalid("page_token", "is not a token this log issued", "INVALID_PAGE_TOKEN")
            after = int(req.page_token)
        start = _micros(req.start_time, "start_time") if req.HasField("start_time") else None
        end = _micros(req.end_time, "end_time") if req.HasField("end_time") else None
        if start is not None and end is not None and start > end:
            raise _invalid("end_time", "is before start_time", "INVALID_TIME_RANGE")
        with _domain_errors():
            flt = RecordFilter(**{name: getattr(req, name) for name in _ATTRIBUTE_NAMES},
                               start_micros=start, end_micros=end)
        return flt, after, page_size, req.max_records

    def QueryRecords(self, request: pb.QueryRecordsRequest | Undecodable,
                     context: grpc.ServicerContext) -> Iterator[pb.QueryRecordsResponse]:
        flt, after, page_size, max_records = self._query(_decoded(request, "request"))
        sent = 0
        while context.is_active():
            want = page_size if not max_records else min(page_size, max_records - sent)
            with _domain_errors():
                # One more than a page, to know whether a next page exists.
                hits = self._log.query(flt, after_index=after, limit=want + 1)
            page, more = hits[:want], len(hits) > want
            if not page:
                return
            try:
                records = [decode_record(hit.entry) for hit in page]
            except pb_message.DecodeError as err:
                raise errors.Internal("a stored entry is not an AuditRecord", reason="LOG_CORRUPTED") from err
            after = page[-1].index
            sent += len(page)
            yield pb.QueryRecordsResponse(records=records, next_page_token=str(after) if more else "")
            if not more or (max_records and sent >= max_records):
                return

    def GetCheckpoint(self, request: pb.GetCheckpointRequest | Undecodable,
                      context: grpc.ServicerContext) -> pb.GetCheckpointResponse:
        _decoded(request, "request")
        with _domain_errors():
            cp = self._log.checkpoint(timeout=context.time_remaining())
        return pb.GetCheckpointResponse(checkpoint=checkpoint_to_pb(cp),
                                        public_key_pem=self._log.signer.public_key_pem())

    def GetInclusionProof(self, request: pb.GetInclusionProofRequest | Undecodable,
                          context: grpc.ServicerContext) -> pb.GetInclusionProofResponse:
        req = _decoded(request, "request")
        if req.leaf_index < 0:
            raise _invalid("leaf_index", "must not be negative", "LEAF_INDEX_OUT_OF_RANGE")
        if req.tree_size < 0:
            raise _invalid("tree_size", "must not be negative (0 means the current size)", "TREE_SIZE_OUT_OF_RANGE")
        with _domain_errors():
            proof = self._log.inclusion_proof(req.leaf_index, req.tree_size or None)
        return pb.GetInclusionProofResponse(leaf_index=proof.leaf_index, tree_size=proof.tree_size,
                                            leaf_hash=proof.leaf_hash, audit_path=list(proof.audit_path),
                                            root_hash=proof.root_hash)

    def GetConsistencyProof(self, request: pb.GetConsistencyProofRequest | Undecodable,
                            context: grpc.ServicerContext) -> pb.GetConsistencyProofResponse:
        req = _decoded(request, "request")
        if req.first_tree_size < 0:
            raise _invalid("first_tree_size", "must not be negative", "TREE_SIZE_OUT_OF_RANGE")
        if req.second_tree_size < 0:
            raise _invalid("second_tree_size", "must not be negative (0 means the current size)",
                           "TREE_SIZE_OUT_OF_RANGE")
        with _domain_errors():
            proof = self._log.consistency_proof(req.first_tree_size, req.second_tree_size or None)
        return pb.GetConsistencyProofResponse(
            first_tree_size=proof.first_tree_size, second_tree_size=proof.second_tree_size,
            proof=list(proof.proof), first_root_hash=proof.first_root_hash, second_root_hash=proof.second_root_hash)
