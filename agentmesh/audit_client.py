"""Recording to the audit service from any role.

Services never build ``AppendRecordRequest`` by hand: they call
:meth:`AuditRecorder.record` (or :meth:`AuditRecorder.record_durably`), which
fills the trace, correlation and execution ids from the current context. The
recording identity is not sent at all — the audit service stamps it from the
caller's mTLS certificate.

Two promises, two methods:

``record``
    Returns once the audit service has the record durably, raises otherwise.
    For the record that must exist *before* an action takes effect: if it
    cannot be written the action does not happen (fail closed).

``record_durably``
    Never loses the record and never blocks the thing it records for long.
    It appends at once when audit answers; otherwise the record goes to this
    process's :class:`AuditOutbox` (SQLite, ``synchronous=FULL``) and a
    background thread delivers it, in order, when audit is back. For
    refusals (the refusal stands anyway), kill switches and status changes
    (a safety stop must not wait for audit) and records of an effect that
    has already happened.

How the outbox treats what audit answers:

* acknowledged (AppendRecords returned): the rows are deleted — audit
  answers only once the batch is durable in its log;
* UNAVAILABLE, DEADLINE_EXCEEDED, a caller-table refusal, anything else
  that says nothing about the record itself: nothing is deleted, the same
  batch is tried again with backoff (up to :data:`MAX_BACKOFF_S`) for as long
  as it takes;
* a *permanent* refusal of one record (INVALID_ARGUMENT, or
  PERMISSION_DENIED naming a record field): retrying would block every later
  record for ever, and dropping it would lose evidence. The record is moved,
  byte for byte, to the outbox's ``refused`` table (kept, counted by
  :meth:`AuditRecorder.refused`, logged at ERROR) and in its place in the
  queue goes a substitute built only from values audit accepts: the same
  event type and ids (where valid), reason ``AUDIT_RECORD_REFUSED``, audit's
  reason and the SHA-256 of the refused request. So the log still shows
  that something happened, and where the full record is kept.

Delivery is at least once: a batch whose acknowledgement was lost is sent
again. A record that waited in the outbox carries ``queued_at=<time>`` in its
reason codes — the time of the event — since ``recorded_at`` is stamped when
audit receives it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import IO, Any, Final

import grpc

from agentmesh import errors, telemetry, transport
from agentmesh.audit_appends import GroupAppender
from agentmesh.database import sqlite_connection
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import audit_service_pb2_grpc as audit_grpc

log = logging.getLogger(__name__)

__all__ = [
    "MAX_BACKOFF_S", "AuditOutbox", "AuditRecorder", "OutboxRow", "outbox_path", "sanitize_ids", "substitute_for",
]

MAX_BACKOFF_S: Final = 2.0
"""Longest wait between two delivery attempts while audit is unreachable."""
MAX_ID_LENGTH: Final = 512
"""The audit service files records under their ids; it refuses an id longer than this or with a NUL."""
_ID_FIELDS: Final = ("execution_id", "trace_id", "correlation_id", "agent_id", "capability_id", "tenant_id")
_BATCH_RECORDS: Final = 200
_BATCH_BYTES: Final = 1 << 20  # well under gRPC's 4 MiB message limit
_REFUSED: Final = "AUDIT_RECORD_REFUSED"
_EVENT_TYPES: Final = frozenset(audit_pb2.AuditEventType.values()) - {0}
_OUTCOMES: Final = frozenset(audit_pb2.AuditOutcome.values())


def _valid_id(value: str) -> bool:
    return len(value) <= MAX_ID_LENGTH and "\x00" not in value


def sanitize_ids(record: audit_pb2.AuditRecord) -> audit_pb2.AuditRecord:
    """Clears ids audit would refuse (too long, NUL) and says so, with a digest, in the reason codes.

    For records that must reach the log whatever a caller sent — e.g. the
    refusal of a call whose correlation id is the very thing wrong with it.
    """
    for name in _ID_FIELDS:
        value: str = getattr(record, name)
        if not _valid_id(value):
            digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()
            record.reason_codes.append(f"{name}=invalid")
            record.reason_codes.append(f"{name}_sha256={digest}")
            setattr(record, name, "")
    return record


def _now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# --------------------------------------------------------------- the outbox


class OutboxRow:
    """One queued record: its position and its serialized ``AppendRecordRequest``."""

    __slots__ = ("request", "seq")

    def __init__(self, seq: int, request: bytes) -> None:
        self.seq = seq
        self.request = request


class AuditOutbox:
    """Records waiting for the audit service, in a local SQLite file (WAL, ``synchronous=FULL``).

    ``put`` returns once the record is on disk. Rows leave the ``outbox``
    table only once audit acknowledged them (:meth:`delete`), or for the
    ``refused`` table (:meth:`refuse`), never otherwise. Thread-safe. Several
    processes may write the same file; :meth:`try_lock_delivery` lets only
    one of them deliver.
    """

    def __init__(self, path: Path) -> None:
        """Opens (creating) the outbox at ``path``; raises ``errors.Unavailable`` if it cannot."""
        self.path = Path(path)
        self._lock = threading.Lock()
        self._delivery_lock: IO[bytes] | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite_connection(self.path)
            self._conn.executescript(
                "CREATE TABLE IF NOT EXISTS outbox (seq INTEGER PRIMARY KEY AUTOINCREMENT,"
                " request BLOB NOT NULL, queued_at TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0);"
                "CREATE TABLE IF NOT EXISTS refused (seq INTEGER PRIMARY KEY, request BLOB NOT NULL,"
                " queued_at TEXT NOT NULL, refused_at TEXT NOT NULL, status TEXT NOT NULL,"
                " reason TEXT NOT NULL, detail TEXT NOT NULL);")
        except (OSError, sqlite3.Error) as err:
            raise errors.Unavailable(f"audit outbox {self.path}: {err}", reason="AUDIT_UNAVAILABLE") from err

    def put(self, request: audit_pb2.AppendRecordRequest) -> int:
        """Stores one record durably; its sequence number. Raises ``errors.Unavailable`` if it cannot."""
        try:
            with self._lock:
                cur = self._conn.execute("INSERT INTO outbox (request, queued_at) VALUES (?, ?)",
                                         (request.SerializeToString(), _now_iso()))
        except sqlite3.Error as err:
            raise errors.Unavailable(f"audit outbox {self.path}: {err}", reason="AUDIT_UNAVAILABLE") from err
        return int(cur.lastrowid or 0)

    def peek(self, *, max_records: int = _BATCH_RECORDS, max_bytes: int = _BATCH_BYTES) -> list[OutboxRow]:
        """The oldest rows, in order: at most ``max_records`` and (past the first) ``max_bytes``."""
        with self._lock:
            rows = self._conn.execute("SELECT seq, request FROM outbox ORDER BY seq LIMIT ?",
                                      (max_records,)).fetchall()
        batch: list[OutboxRow] = []
        size = 0
        for seq, blob in rows:
            size += len(blob)
            if batch and size > max_bytes:
                break
            batch.append(OutboxRow(int(seq), bytes(blob)))
        return batch

    def delete(self, seqs: Iterable[int]) -> None:
        """Removes rows audit acknowledged as durable."""
        with self._lock, self._conn:
            self._conn.executemany("DELETE FROM outbox WHERE seq = ?", [(s,) for s in seqs])

    def attempted(self, seqs: Iterable[int]) -> None:
        """Counts a failed delivery attempt of these rows (for an operator reading the file)."""
        with self._lock, self._conn:
            self._conn.executemany("UPDATE outbox SET attempts = attempts + 1 WHERE seq = ?",
                                   [(s,) for s in seqs])

    def refuse(self, row: OutboxRow, *, status: str, reason: str, detail: str,
               substitute: audit_pb2.AppendRecordRequest | None) -> None:
        """Moves a row audit refused for good to ``refused``; ``substitute`` takes its place in the queue."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.execute(
                    "INSERT OR REPLACE INTO refused (seq, request, queued_at, refused_at, status, reason, detail)"
                    " SELECT seq, request, queued_at, ?, ?, ?, ? FROM outbox WHERE seq = ?",
                    (_now_iso(), status, reason, detail, row.seq))
                if substitute is None:
                    self._conn.execute("DELETE FROM outbox WHERE seq = ?", (row.seq,))
                else:
                    self._conn.execute("UPDATE outbox SET request = ?, attempts = 0 WHERE seq = ?",
                                       (substitute.SerializeToString(), row.seq))
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    def pending(self) -> int:
        """Records waiting for delivery."""
        with self._lock:
            return int(self._conn.execute("SELECT count(*) FROM outbox").fetchone()[0])

    def refused(self) -> int:
        """Records audit refused for good, kept in the ``refused`` table."""
        with self._lock:
            return int(self._conn.execute("SELECT count(*) FROM refused").fetchone()[0])

    def try_lock_delivery(self) -> bool:
        """Takes (without waiting) the right to deliver this file's rows; True if this process holds it."""
        if self._delivery_lock is not None:
            return True
        lock_file = open(self.path.with_name(self.path.name + ".lock"), "ab")  # noqa: SIM115 - held until close
        try:
            fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock_file.close()
            return False
        self._delivery_lock = lock_file
        return True

    def close(self) -> None:
        """Closes the file and gives up delivery."""
        with self._lock:
            self._conn.close()
            if self._delivery_lock is not None:
                self._delivery_lock.close()
                self._delivery_lock = None


# --------------------------------------------------------------- the recorder


def _permanent(err: errors.MeshError) -> bool:
    """Whether audit refused the record itself (retrying cannot help), not the call or the moment."""
    if isinstance(err, errors.InvalidArgument):
        return True
    return isinstance(err, errors.PermissionDenied) and (err.field or "").startswith("record")


def _refused_index(err: errors.MeshError, batch_size: int) -> int | None:
    """The record of a batch audit names (``records[3].tenant_id`` → 3), if it names one."""
    field = err.field or ""
    if batch_size == 1 and field.startswith("record"):
        return 0
    if field.startswith("records["):
        number = field.removeprefix("records[").partition("]")[0]
        if number.isdigit() and int(number) < batch_size:
            return int(number)
    return None


def substitute_for(request: bytes, err: errors.MeshError) -> audit_pb2.AppendRecordRequest | None:
    """A record audit will take in place of one it refused: what happened, minus what it refused."""
    original = audit_pb2.AppendRecordRequest()
    with contextlib.suppress(Exception):
        original.ParseFromString(request)
    rec = original.record
    # "records[3].tenant_id" (in a batch) or "record.tenant_id": the field of the record.
    named = (err.field or "").partition("].")[2] or (err.field or "").removeprefix("record.")
    if rec.reason_codes and rec.reason_codes[0] == _REFUSED:
        return None  # a refused substitute: keep it, do not loop
    sub = audit_pb2.AuditRecord(
        event_type=rec.event_type if rec.event_type in _EVENT_TYPES else audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED,
        outcome=rec.outcome if rec.outcome in _OUTCOMES else audit_pb2.AUDIT_OUTCOME_UNSPECIFIED,
        reason_codes=[_REFUSED, f"audit_reason={err.reason}", f"audit_field={named}",
                      f"request_sha256={hashlib.sha256(request).hexdigest()}",
                      f"original_event_type={rec.event_type}"],
    )
    # Keep the ids (queries find the substitute where they would have found
    # the record), except the one audit named as what it refused.
    for name in _ID_FIELDS:
        if name != named:
            setattr(sub, name, getattr(rec, name))
    sub.reason_codes.extend(c for c in rec.reason_codes if c.startswith("queued_at="))
    return audit_pb2.AppendRecordRequest(record=sanitize_ids(sub))


class AuditRecorder:
    """Appends records to the audit service over an mTLS channel.

    :meth:`record` returns once the record is durable. :meth:`record_later`
    sends it without waiting, pipelined with other records (the audit
    service commits them together); :meth:`wait` waits until the ones sent
    are durable. Use ``record`` where the record must exist before something
    else happens (a mutation, a reply about a refusal), ``record_later`` for
    the narrative of work in progress, and ``wait`` on those before answering.
    :meth:`record_durably` (with an outbox) for records that must never be
    lost but must not hold back what they record; see the module docstring.
    """

    def __init__(self, channel: grpc.Channel, *, timeout_s: float = 5.0, outbox: AuditOutbox | None = None,
                 direct_timeout_s: float = 2.0, connect: Callable[[], grpc.Channel] | None = None) -> None:
        """Args:
        channel: mTLS channel to the audit service.
        timeout_s: Deadline of ``record`` / ``record_later`` and of one outbox delivery.
        outbox: Where ``record_durably`` keeps what audit could not take at once; delivery
            starts with :meth:`start` (which :meth:`ServiceContext.audit` calls).
        direct_timeout_s: How long ``record_durably`` waits for audit before queuing instead.
        connect: Opens a new channel to audit for the outbox's delivery. A gRPC
            channel that failed to connect waits longer and longer (up to two
            minutes) before trying again; delivery opens a fresh one after an
            UNAVAILABLE instead, so records arrive within :data:`MAX_BACKOFF_S`
            of audit coming back. Without it, delivery uses ``channel``.
        """
        self._stub = audit_grpc.AuditServiceStub(channel)
        self._appender = GroupAppender(lambda: self._stub)
        self._connect = connect
        self._delivery: tuple[grpc.Channel, audit_grpc.AuditServiceStub] | None = None
        self._timeout = timeout_s
        self._direct_timeout = min(direct_timeout_s, timeout_s)
        self._outbox = outbox
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._idle = threading.Condition()
        self._thread: threading.Thread | None = None

    # -- records that must be durable before an action ----------------------------

    def build(self, event_type: int, **fields: Any) -> audit_pb2.AuditRecord:
        """The record, with trace / execution / correlation ids from the current context."""
        rec = audit_pb2.AuditRecord(event_type=event_type, **fields)  # type: ignore[arg-type]
        ids = telemetry.current_ids()
        rec.trace_id = rec.trace_id or ids.get("trace_id", "")
        rec.execution_id = rec.execution_id or ids.get(telemetry.EXECUTION_ID, "")
        rec.correlation_id = rec.correlation_id or ids.get(telemetry.CORRELATION_ID, "")
        return rec

    def record(self, event_type: int, **fields: Any) -> audit_pb2.AppendRecordResponse:
        """Appends one record and returns once it is durable; raises a MeshError on failure.

        Records appended at the same moment by other threads go in the same call
        (:class:`~agentmesh.audit_appends.GroupAppender`); each answer is its own.
        """
        return self._appender.append(self.build(event_type, **fields), self._timeout)

    def record_all(self, records: Iterable[tuple[int, dict[str, Any]]]) -> list[audit_pb2.AppendRecordResponse]:
        """Appends records together (one call, consecutive indexes, all or none); returns once all are durable.

        Raises a MeshError on failure, and then none of them is in the log.
        """
        return self._appender.append_all([self.build(event_type, **fields) for event_type, fields in records],
                                         self._timeout)

    def record_later(self, event_type: int, **fields: Any) -> Future[audit_pb2.AppendRecordResponse]:
        """Sends one record without waiting for it; pass the returned future to :meth:`wait`."""
        return self._appender.submit(self.build(event_type, **fields), self._timeout)

    def append_each(self, records: Sequence[audit_pb2.AuditRecord]) -> list[Future[audit_pb2.AppendRecordResponse]]:
        """Sends records built with :meth:`build` (each in its own caller's context) in one call, each its own
        unit: one future each, holding that record's answer once it is durable, or its MeshError."""
        return self._appender.submit_each(list(records), self._timeout)

    def wait(self, sent: Iterable[Future[audit_pb2.AppendRecordResponse]]) -> bool:
        """Waits until records sent with :meth:`record_later` are durable; False (logged) if any failed."""
        ok = True
        for future in sent:
            try:
                future.result(timeout=self._timeout + 1.0)
            except errors.MeshError as err:
                log.error("audit record not written: %s", err)
                ok = False
            except TimeoutError:
                log.error("audit record not written: audit did not answer in time")
                ok = False
        return ok

    # -- records that must never be lost -------------------------------------------

    def record_durably(self, event_type: int, **fields: Any) -> None:
        """Appends now if audit answers, else queues the record in the outbox for delivery in order.

        The record is built here, with the ids of the current context. Ids
        audit would refuse are cleared and noted (:func:`sanitize_ids`).

        Raises:
            agentmesh.errors.Unavailable: (``AUDIT_UNAVAILABLE``) only when audit did
                not take the record and the outbox could not store it either.
        """
        self.record_all_durably([(event_type, fields)])

    def record_all_durably(self, records: Sequence[tuple[int, dict[str, Any]]]) -> None:
        """:meth:`record_durably` for records made at the same moment, in their order: appended now in one call
        (consecutive indexes, all or none) if audit answers, else each queued in the outbox, in order.

        Raises:
            agentmesh.errors.Unavailable: (``AUDIT_UNAVAILABLE``) only when audit did not take them and the
                outbox could not store them either.
        """
        requests = [audit_pb2.AppendRecordRequest(record=sanitize_ids(self.build(event_type, **fields)))
                    for event_type, fields in records]
        if not requests:
            return
        # Records already waiting go first: a direct append would overtake them.
        if self._outbox is None or not self._waiting():
            try:
                self._appender.append_all([request.record for request in requests], self._direct_timeout)
                return
            except errors.MeshError as failure:
                if self._outbox is None:
                    raise errors.Unavailable(f"audit did not take the record and there is no outbox: {failure}",
                                             reason="AUDIT_UNAVAILABLE") from failure
                log.warning("audit did not take %s at once (%s); queued in %s",
                            ", ".join(audit_pb2.AuditEventType.Name(r.record.event_type)
                                      if r.record.event_type in _EVENT_TYPES else str(r.record.event_type)
                                      for r in requests), failure, self._outbox.path)
        assert self._outbox is not None
        queued_at = f"queued_at={_now_iso()}"
        for request in requests:
            request.record.reason_codes.append(queued_at)
            self._outbox.put(request)
        self._wake.set()

    def _waiting(self) -> bool:
        assert self._outbox is not None
        try:
            return self._outbox.pending() > 0
        except sqlite3.Error:
            log.exception("cannot read the audit outbox %s", self._outbox.path)
            return False  # try audit; if that fails too, put() says the outbox is unusable

    def pending(self) -> int:
        """Records in the outbox not yet acknowledged by audit (0 without an outbox)."""
        return 0 if self._outbox is None else self._outbox.pending()

    def refused(self) -> int:
        """Records audit refused for good, kept in the outbox's ``refused`` table."""
        return 0 if self._outbox is None else self._outbox.refused()

    def flush(self, timeout_s: float) -> bool:
        """Waits until the outbox is empty; False if records are still waiting after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        self._wake.set()
        with self._idle:
            while self.pending():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(min(left, 0.1))
        return True

    def denial_hook(self) -> transport.DenialHook:
        """A hook that records every refused call the interceptor hands it (durably: a refusal is never lost).

        Those the interceptor refused itself and those a servicer refused without
        recording them. ACCESS_DENIED, DENIED, reason codes: the ErrorInfo
        reason, ``field=<name>`` when it names a field, the caller and the method,
        ``invalid_id=<name>`` for each baggage id removed for breaking the id
        rule. Only names and codes: a reason or name that is not plain (letters,
        digits and ``_ . : [ ] -``, short) is written ``invalid``, never copied.
        """
        plain = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:[]-")

        def name(value: str, limit: int) -> str:
            return value if len(value) <= limit and plain.issuperset(value) else "invalid"

        def hook(call: transport.DeniedCall) -> None:
            self.record_durably(
                audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED,
                outcome=audit_pb2.AUDIT_OUTCOME_DENIED,
                reason_codes=[name(call.reason, 128) if call.reason else call.code.name,
                              *([f"field={name(call.field, 256)}"] if call.field else []),
                              f"caller={call.caller or 'none'}", f"method={call.method}",
                              *(f"invalid_id={name(i, 128)}" for i in call.invalid_ids)],
            )

        return hook

    # -- delivery -------------------------------------------------------------------

    def start(self) -> None:
        """Starts delivering the outbox (also what a previous run left) on a background thread."""
        if self._outbox is None or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._deliver_forever, name="audit-outbox", daemon=True)
        self._thread.start()
        self._wake.set()

    def close(self, timeout_s: float | None = None) -> None:
        """Stops delivery (what is left stays in the outbox for the next start) and closes the outbox."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(self._timeout + 1.0 if timeout_s is None else timeout_s)
            if self._thread.is_alive():
                log.warning("audit outbox delivery did not stop in time")
                return
            self._thread = None
        self._drop_delivery_channel()
        if self._outbox is not None:
            try:
                left = self._outbox.pending()
            except sqlite3.Error:
                left = 0
            if left:
                log.warning("%d audit records still in %s; delivered at the next start", left, self._outbox.path)
            self._outbox.close()

    def _deliver_forever(self) -> None:
        outbox = self._outbox
        assert outbox is not None
        backoff = 0.0
        failing_since = 0.0
        last_warning = 0.0
        while not self._stopping.is_set():
            # Cleared before looking, so a record queued meanwhile wakes the wait below at once.
            self._wake.clear()
            try:
                if not outbox.try_lock_delivery():
                    # Another process of this role delivers this file.
                    self._wake.wait(1.0)
                    continue
                rows = outbox.peek()
                if not rows:
                    with self._idle:
                        self._idle.notify_all()
                    # Poll now and then too: another process may share the file.
                    self._wake.wait(1.0)
                    continue
                failure = self._deliver(outbox, rows)
            except Exception:  # noqa: BLE001 - the thread must outlive a bad moment of the disk
                log.exception("audit outbox delivery failed (%s); retrying", outbox.path)
                self._stopping.wait(MAX_BACKOFF_S)
                continue
            if failure is None:
                if failing_since:
                    log.warning("audit reachable again: outbox delivery resumed after %.1f s",
                                time.monotonic() - failing_since)
                backoff, failing_since = 0.0, 0.0
                continue
            now = time.monotonic()
            if not failing_since:
                failing_since = now
            if now - last_warning > 30.0:
                last_warning = now
                log.warning("audit did not take %d queued records (%s); retrying, %d waiting",
                            len(rows), failure, outbox.pending())
            backoff = min(MAX_BACKOFF_S, max(0.05, backoff * 2))
            self._stopping.wait(backoff)

    def _deliver(self, outbox: AuditOutbox, rows: list[OutboxRow]) -> errors.MeshError | None:
        """One attempt at the oldest rows; None when something progressed (delivered or set aside)."""
        batch = audit_pb2.AppendRecordsRequest()
        for row in rows:
            batch.records.append(audit_pb2.AppendRecordRequest.FromString(row.request).record)
        try:
            self._delivery_stub().AppendRecords(batch, timeout=self._timeout)
        except grpc.RpcError as err:
            failure = errors.from_rpc_error(err)
            if isinstance(failure, errors.Unavailable):
                self._drop_delivery_channel()
            if not _permanent(failure):
                with contextlib.suppress(sqlite3.Error):
                    outbox.attempted(r.seq for r in rows)
                return failure
            index = _refused_index(failure, len(rows))
            if index is None:
                if len(rows) > 1:
                    # Audit did not say which one: find it by sending them one at a time.
                    return self._deliver(outbox, rows[:1])
                index = 0
            self._set_aside(outbox, rows[index], failure)
            # The ones before it were not stored either (all or nothing): go again.
            return None
        outbox.delete(r.seq for r in rows)
        return None

    def _delivery_stub(self) -> audit_grpc.AuditServiceStub:
        if self._connect is None:
            return self._stub
        if self._delivery is None:
            channel = self._connect()
            self._delivery = (channel, audit_grpc.AuditServiceStub(channel))
        return self._delivery[1]

    def _drop_delivery_channel(self) -> None:
        if self._delivery is not None:
            channel, self._delivery = self._delivery[0], None
            channel.close()

    def _set_aside(self, outbox: AuditOutbox, row: OutboxRow, failure: errors.MeshError) -> None:
        substitute = substitute_for(row.request, failure)
        outbox.refuse(row, status=failure.code.name, reason=failure.reason, detail=failure.message,
                      substitute=substitute)
        log.error("AUDIT RECORD REFUSED: audit refused queued record #%d for good (%s %s: %s); it is kept in "
                  "the 'refused' table of %s (sha256 %s)%s", row.seq, failure.code.name, failure.reason,
                  failure.message, outbox.path, hashlib.sha256(row.request).hexdigest(),
                  "; a substitute record takes its place" if substitute is not None else "")


def outbox_path(data_dir: Path, role: str) -> Path:
    """Where a role keeps its audit outbox."""
    return Path(data_dir) / f"{role}-audit-outbox.db"
