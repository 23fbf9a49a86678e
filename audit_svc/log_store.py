"""Append-only, durable Merkle log in SQLite, with group commit.

Storage (one SQLite file, WAL, ``synchronous=FULL``):

``entries``
    one row per log entry: index (the rowid), leaf hash, the entry bytes
    (opaque here; the audit service stores the deterministic protobuf encoding
    of an ``AuditRecord``) and the attributes queries filter on.
``attr_index``
    (kind, value, index) rows over those attributes for ``query``; derived
    data, brought up to date in bulk every few thousand entries (watermark
    ``meta.indexed_size``); queries scan the short unindexed tail directly.
``subtrees``
    the hash of every *perfect* subtree of level >= 1 that is complete; with
    the leaf hashes these answer the root, an inclusion proof or a consistency
    proof at any tree size in O(log n) point lookups (see ``audit_svc.merkle``).
``checkpoints``
    signed tree heads, written in the same transaction as the batch they cover.

Writes go through one writer thread. Callers enqueue an append and block on a
waiter; the writer drains whatever is queued (up to ``max_batch`` entries),
asks each caller's callback to build its entry *with the index it gets* (so
indexes are gap-free and match the order of the tree), writes the whole batch
and its subtree hashes in one transaction, commits (one fsync for the batch),
and only then releases the waiters. An acknowledged append is therefore on
disk, and a crash leaves only whole batches (SQLite transactions) behind.

Reads use one SQLite connection per calling thread and only ever look at the
tree up to the committed size, so they never block on, or see half of, a batch.

A batch that cannot be stored (full disk, I/O error) is refused to its callers,
and the writer re-reads the committed state and proves it can commit again (a
small write to ``meta``). If it cannot, the log is *failed*: appends are refused
at once (``LOG_WRITER_FAILED``) while the writer retries every
``recovery_interval_s``, and :meth:`AuditLog.health` names the cause; the first
retry that succeeds puts the log back in service. Reads go on meanwhile: they
only ever see committed entries.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import queue
import sqlite3
import threading
import time
import urllib.parse
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import IO, Any, Final, Generic, TypeVar

from audit_svc import merkle
from audit_svc.checkpoints import Checkpoint, CheckpointSigner
from audit_svc.errors import (
    AuditError,
    InvalidArgumentError,
    LogClosedError,
    LogCorruptedError,
    LogLockedError,
    StorageError,
)

__all__ = [
    "SCHEMA_VERSION",
    "AppendResult",
    "AuditLog",
    "AuditLogConfig",
    "CHECKPOINT_COLUMNS",
    "INDEX_KINDS",
    "ConsistencyProof",
    "InclusionProof",
    "IndexAttributes",
    "QueryHit",
    "RecordFilter",
    "checkpoint_from_row",
]

SCHEMA_VERSION: Final = 1
"""Version of the SQLite layout; ``AuditLog.open`` refuses any other."""

_ATTRIBUTE_COLUMNS: Final = (
    "execution_id",
    "trace_id",
    "correlation_id",
    "agent_id",
    "capability_id",
    "tenant_id",
)
_MAX_ATTRIBUTE_LENGTH: Final = 512
_MAX_QUERY_LIMIT: Final = 10_000
_WAL_AUTOCHECKPOINT_PAGES: Final = 20_000
_ENTRIES_CHUNK: Final = 1_000
_RETRY_ON_DEMAND_S: Final = 0.1
"""While failed, an incoming batch triggers a new attempt at most this often (besides the timer)."""

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS entries (
    idx            INTEGER PRIMARY KEY,
    leaf_hash      BLOB NOT NULL,
    entry          BLOB NOT NULL,
    execution_id   TEXT,
    trace_id       TEXT,
    correlation_id TEXT,
    agent_id       TEXT,
    capability_id  TEXT,
    tenant_id      TEXT,
    recorded_at    INTEGER
);
CREATE TABLE IF NOT EXISTS subtrees (
    level INTEGER NOT NULL,
    idx   INTEGER NOT NULL,
    hash  BLOB NOT NULL,
    PRIMARY KEY (level, idx)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS checkpoints (
    id               INTEGER PRIMARY KEY,
    origin           TEXT NOT NULL,
    tree_size        INTEGER NOT NULL,
    root_hash        BLOB NOT NULL,
    timestamp_micros INTEGER NOT NULL,
    key_id           TEXT NOT NULL,
    signature        BLOB NOT NULL
);
"""

# The query index. Attributes are stored with each entry, in the same
# transaction, but indexing them row by row would dirty one B-tree page per
# index per distinct key in every small group-commit batch. Instead the writer
# indexes them in bulk, sorted, every few thousand entries; queries read the
# index up to its watermark (meta 'indexed_size') and scan the short unindexed
# tail of ``entries`` directly. The index is derived data: it is rebuilt from
# the entries' columns on open if it lags, and ``verify`` cross-checks it.
_INDEX_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS attr_index (
    kind  INTEGER NOT NULL,
    value NOT NULL,
    idx   INTEGER NOT NULL,
    PRIMARY KEY (kind, value, idx)
) WITHOUT ROWID;
"""

INDEX_KINDS: Final = (*_ATTRIBUTE_COLUMNS, "recorded_at")
"""Entry columns mirrored in ``attr_index``; a row's ``kind`` is the position here."""
_TIME_KIND: Final = len(INDEX_KINDS) - 1

CHECKPOINT_COLUMNS: Final = "origin, tree_size, root_hash, timestamp_micros, signature, key_id"
"""Column list, in ``checkpoint_from_row`` order, for selecting stored checkpoints."""


def checkpoint_from_row(row: Sequence[Any]) -> Checkpoint:
    """A ``Checkpoint`` from a row selected as ``CHECKPOINT_COLUMNS``."""
    origin, tree_size, root_hash, ts, signature, key_id = row
    return Checkpoint(
        origin=str(origin),
        tree_size=int(tree_size),
        root_hash=bytes(root_hash),
        timestamp_micros=int(ts),
        signature=bytes(signature),
        key_id=str(key_id),
    )


_T = TypeVar("_T")
_log = logging.getLogger(__name__)


def _now_micros() -> int:
    return time.time_ns() // 1_000


@dataclass(frozen=True)
class AuditLogConfig:
    """Tuning of an ``AuditLog``; the defaults suit the audit service."""

    max_batch: int = 4096
    """Most entries one group-commit transaction holds (bounds latency and memory)."""
    max_entry_bytes: int = 1 << 20
    """Largest entry accepted; larger ones fail with ENTRY_TOO_LARGE and are not stored."""
    checkpoint_every_entries: int = 1000
    """Sign and store a checkpoint once a batch leaves the tree this far past the last one."""
    checkpoint_every_micros: int = 1_000_000
    """... or once a batch commits this long (wall clock) after the last checkpoint."""
    clock_micros: Callable[[], int] = _now_micros
    """Wall clock for checkpoint timestamps, Unix epoch microseconds (tests pin it)."""
    busy_timeout_ms: int = 5000
    """How long SQLite waits on a lock held by another connection (e.g. an offline verifier)."""
    wal_checkpoint_interval_s: float = 0.25
    """How often a background thread folds the WAL into the database file.

    Doing it there keeps that work (and its fsync of the database file) off the
    writer, which otherwise stalls every few thousand appends to do it itself.
    """
    index_every_entries: int = 2048
    """Bring the query index up to date once this many entries are unindexed ..."""
    index_every_micros: int = 250_000
    """... or once a batch commits this long (monotonic clock) after the last update."""
    recovery_interval_s: float = 1.0
    """While the writer is failed, how often it tries again to re-read the log and commit."""

    def __post_init__(self) -> None:
        if self.max_batch < 1:
            raise InvalidArgumentError("max_batch must be >= 1", reason="MAX_BATCH")
        if self.max_entry_bytes < 1:
            raise InvalidArgumentError("max_entry_bytes must be >= 1", reason="MAX_ENTRY_BYTES")
        if self.wal_checkpoint_interval_s <= 0:
            raise InvalidArgumentError("wal_checkpoint_interval_s must be > 0", reason="WAL_CHECKPOINT_INTERVAL")
        if self.index_every_entries < 1 or self.index_every_micros < 0:
            raise InvalidArgumentError("bad index interval", reason="INDEX_INTERVAL")
        if self.checkpoint_every_entries < 1 or self.checkpoint_every_micros < 0:
            raise InvalidArgumentError("bad checkpoint interval", reason="CHECKPOINT_INTERVAL")
        if self.recovery_interval_s <= 0:
            raise InvalidArgumentError("recovery_interval_s must be > 0", reason="RECOVERY_INTERVAL")


def _check_attribute(name: str, value: str | None) -> str | None:
    if value is None or value == "":
        # Protobuf has no "unset" for strings: empty means "not given".
        return None
    if not isinstance(value, str) or len(value) > _MAX_ATTRIBUTE_LENGTH or "\x00" in value:
        raise InvalidArgumentError(f"bad {name}", reason=f"{name.upper()}_INVALID")
    return value


def _check_micros(name: str, value: int | None) -> int | None:
    if value is None:
        return None
    # bool is an int; a flag is not a timestamp.
    if type(value) is not int or not 0 <= value < (1 << 62):
        raise InvalidArgumentError(f"bad {name}", reason=f"{name.upper()}_INVALID")
    return value


@dataclass(frozen=True)
class IndexAttributes:
    """Attributes of one entry, stored with it and indexed for ``AuditLog.query``.

    They are a search aid, not part of the Merkle leaf: the entry bytes are the
    source of truth (``verify`` can cross-check them). Empty strings mean unset.
    """

    execution_id: str | None = None
    trace_id: str | None = None
    correlation_id: str | None = None
    agent_id: str | None = None
    capability_id: str | None = None
    tenant_id: str | None = None
    recorded_at_micros: int | None = None
    """When the record was recorded, Unix epoch microseconds."""

    def __post_init__(self) -> None:
        for name in _ATTRIBUTE_COLUMNS:
            object.__setattr__(self, name, _check_attribute(name, getattr(self, name)))
        _check_micros("recorded_at_micros", self.recorded_at_micros)

    @classmethod
    def from_mapping(cls, values: Mapping[str, object]) -> IndexAttributes:
        """Build from a dict; ``recorded_at`` is accepted for ``recorded_at_micros``.

        Unknown keys fail with reason ``<KEY>_UNKNOWN`` rather than being dropped,
        so a typo cannot silently make records unfindable.
        """
        known = _ATTRIBUTE_FIELDS
        kwargs: dict[str, Any] = {}
        for key, value in values.items():
            name = "recorded_at_micros" if key == "recorded_at" else key
            if name not in known:
                raise InvalidArgumentError(f"unknown attribute {key!r}", reason=f"{key.upper()}_UNKNOWN")
            kwargs[name] = value
        return cls(**kwargs)

    def row(self) -> tuple[str | int | None, ...]:
        """Column values in storage order."""
        return (
            self.execution_id,
            self.trace_id,
            self.correlation_id,
            self.agent_id,
            self.capability_id,
            self.tenant_id,
            self.recorded_at_micros,
        )


_NO_ATTRIBUTES: Final = IndexAttributes()
_ATTRIBUTE_FIELDS: Final = frozenset(f.name for f in fields(IndexAttributes))


@dataclass(frozen=True)
class RecordFilter:
    """Conjunction of conditions for ``AuditLog.query``; ``None`` / ``""`` means any."""

    execution_id: str | None = None
    trace_id: str | None = None
    correlation_id: str | None = None
    agent_id: str | None = None
    capability_id: str | None = None
    tenant_id: str | None = None
    start_micros: int | None = None
    """Only records with recorded_at >= this (inclusive)."""
    end_micros: int | None = None
    """Only records with recorded_at < this (exclusive)."""

    def __post_init__(self) -> None:
        for name in _ATTRIBUTE_COLUMNS:
            object.__setattr__(self, name, _check_attribute(name, getattr(self, name)))
        start = _check_micros("start_time", self.start_micros)
        end = _check_micros("end_time", self.end_micros)
        if start is not None and end is not None and start > end:
            raise InvalidArgumentError("start time after end time", reason="TIME_RANGE")


@dataclass(frozen=True)
class AppendResult:
    """Where an appended entry landed."""

    index: int
    """Position of the entry in the log (0-based), equal to what the callback received."""
    tree_size: int
    """Tree size committed together with the entry (>= index + 1); proofs at it work at once."""
    leaf_hash: bytes
    """RFC 9162 leaf hash of the entry."""


@dataclass(frozen=True)
class QueryHit:
    """One entry returned by ``AuditLog.query``."""

    index: int
    entry: bytes


@dataclass(frozen=True)
class InclusionProof:
    """Proof that the leaf at ``leaf_index`` is in the tree of ``tree_size`` with ``root_hash``."""

    leaf_index: int
    tree_size: int
    leaf_hash: bytes
    audit_path: tuple[bytes, ...]
    root_hash: bytes


@dataclass(frozen=True)
class ConsistencyProof:
    """Proof that the tree of ``first_tree_size`` is a prefix of that of ``second_tree_size``."""

    first_tree_size: int
    second_tree_size: int
    proof: tuple[bytes, ...]
    first_root_hash: bytes
    second_root_hash: bytes


# Serialises the queued -> running / withdrawn transition of every _Waiter; held
# for a few bytecodes only, so one lock for all is cheaper than one per append.
_STATE_LOCK: Final = threading.Lock()


class _Waiter(Generic[_T]):
    """A one-shot result slot; lighter than concurrent.futures.Future.

    Group commit wakes every caller of a batch at once, and they all contend for
    the GIL with the writer; a bare lock keeps that wake-up as cheap as it gets.
    """

    __slots__ = ("_done", "_error", "_state", "_value")
    _QUEUED, _RUNNING, _WITHDRAWN, _FINISHED = range(4)

    def __init__(self) -> None:
        self._done = threading.Lock()
        self._done.acquire()
        self._state = self._QUEUED
        self._value: _T | None = None
        self._error: BaseException | None = None

    def start(self) -> bool:
        """Writer: claim the request; False if its caller has already withdrawn it."""
        with _STATE_LOCK:
            if self._state != self._QUEUED:
                return False
            self._state = self._RUNNING
            return True

    def done(self) -> bool:
        return self._state in (self._WITHDRAWN, self._FINISHED)

    def set_result(self, value: _T) -> None:
        self._value = value
        self._state = self._FINISHED
        self._done.release()

    def set_exception(self, error: BaseException) -> None:
        self._error = error
        self._state = self._FINISHED
        self._done.release()

    def wait(self, timeout: float | None) -> _T:
        """Caller: the result; withdraw and raise TimeoutError if not started in time."""
        if not self._done.acquire(timeout=-1 if timeout is None else max(timeout, 0.0)):
            with _STATE_LOCK:
                if self._state == self._QUEUED:
                    self._state = self._WITHDRAWN
                    raise TimeoutError("append withdrawn before it was built; nothing stored")
            # Already being written: the outcome is moments away and must be reported.
            self._done.acquire()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


class _AppendRequest:
    __slots__ = ("attributes", "builders", "future")

    def __init__(
        self,
        builders: Sequence[Callable[[int], bytes]],
        attributes: Sequence[IndexAttributes],
    ) -> None:
        self.builders = builders
        self.attributes = attributes
        self.future: _Waiter[list[AppendResult]] = _Waiter()


class _CheckpointRequest:
    __slots__ = ("future",)

    def __init__(self) -> None:
        self.future: _Waiter[Checkpoint] = _Waiter()


_Request = _AppendRequest | _CheckpointRequest


class _Wake:
    """Queued to make the writer look at its state (e.g. retry after a failure) without a request."""


_WAKE: Final = _Wake()


class _ReaderConnection:
    """Owns one thread's read connection; closes it when the thread (and its local) goes."""

    __slots__ = ("__weakref__", "conn")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self.conn.close()

    def __del__(self) -> None:
        self.close()


class _TreeReader:
    """Reads node hashes of the committed tree through one SQLite connection."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def subtree(self, level: int, idx: int) -> bytes:
        if level == 0:
            row = self._conn.execute("SELECT leaf_hash FROM entries WHERE idx = ?", (idx,)).fetchone()
        else:
            row = self._conn.execute("SELECT hash FROM subtrees WHERE level = ? AND idx = ?", (level, idx)).fetchone()
        if row is None:
            raise LogCorruptedError(f"subtree level {level} index {idx} is missing", reason="SUBTREE_MISSING")
        value = row[0]
        if not isinstance(value, bytes) or len(value) != merkle.HASH_SIZE:
            raise LogCorruptedError(f"subtree level {level} index {idx} is not a hash", reason="SUBTREE_INVALID")
        return value

    def range_hash(self, start: int, end: int) -> bytes:
        return merkle.fold_subtrees([self.subtree(level, idx) for level, idx in merkle.perfect_subtrees(start, end)])


class AuditLog:
    """The append-only Merkle log. Thread-safe; create with ``AuditLog.open``."""

    def __init__(self, path: Path, *, signer: CheckpointSigner, config: AuditLogConfig | None = None) -> None:
        """Same as ``AuditLog.open``."""
        self._init(Path(path), signer, config or AuditLogConfig())

    @classmethod
    def open(
        cls,
        path: Path,
        *,
        signer: CheckpointSigner,
        config: AuditLogConfig | None = None,
    ) -> AuditLog:
        """Open (creating if needed) the log at ``path`` and start its writer.

        Takes an exclusive lock (``<path>.lock``) so one process writes the log
        (LogLockedError otherwise). Checks the stored tree: entries must be
        numbered 0..n-1 without gaps and the newest checkpoint must match the
        tree (LogCorruptedError otherwise); missing subtree hashes are rebuilt
        from the leaf hashes.
        """
        return cls(path, signer=signer, config=config)

    def _init(self, path: Path, signer: CheckpointSigner, config: AuditLogConfig) -> None:
        self._path = path
        self._signer = signer
        self._config = config
        self._closed = False
        # Set while the writer cannot store anything (see _recover); read by health().
        self._failure: AuditError | None = None
        self._failed_since = 0.0
        self._last_recovery = 0.0
        self._reconnect = False
        self._lock = threading.Lock()
        self._local = threading.local()
        # Weak: a reader connection dies with the thread that opened it.
        self._readers: weakref.WeakSet[_ReaderConnection] = weakref.WeakSet()
        self._queue: queue.SimpleQueue[_Request | _Wake | None] = queue.SimpleQueue()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock_file = _acquire_lock(path.with_name(path.name + ".lock"))
        try:
            self._wconn = self._connect()
            self._prepare_schema()
            self._frontier, self._latest, self._indexed = self._load_state(self._wconn)
            self._inode = os.stat(path).st_ino
        except BaseException:
            with contextlib.suppress(Exception):
                self._wconn.close()
            self._lock_file.close()
            raise
        self._size = self._frontier.size
        # Query-index rows of committed entries [_indexed, _size), kept until the
        # next bulk index update (see _INDEX_SCHEMA).
        self._pending_index: list[tuple[int, str | int, int]] = []
        self._last_index_micros = time.monotonic_ns() // 1000
        self._writer = threading.Thread(target=self._run_writer, name="audit-log-writer", daemon=True)
        self._writer.start()
        self._stop_wal_checkpoints = threading.Event()
        self._wal_checkpointer = threading.Thread(
            target=self._run_wal_checkpointer, name="audit-log-wal-checkpoint", daemon=True
        )
        self._wal_checkpointer.start()

    # ------------------------------------------------------------------ setup

    def _connect(self, *, create: bool = True) -> sqlite3.Connection:
        try:
            if create:
                conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            else:
                # Reconnecting: never create an empty file where the log was.
                conn = sqlite3.connect(f"file:{urllib.parse.quote(str(self._path))}?mode=rw", uri=True,
                                       isolation_level=None, check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout = {int(self._config.busy_timeout_ms)}")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StorageError(f"cannot enable WAL (got {mode})", reason="STORAGE_WAL")
            # FULL: the WAL is fsynced at every commit, so an acknowledged batch survives
            # power loss, not only a process crash.
            conn.execute("PRAGMA synchronous = FULL")
            # The background thread checkpoints the WAL; this is only the backstop
            # that bounds the WAL (~80 MB) should it fall behind.
            conn.execute(f"PRAGMA wal_autocheckpoint = {_WAL_AUTOCHECKPOINT_PAGES}")
        except sqlite3.Error as exc:
            raise StorageError(f"cannot open {self._path}: {exc}") from exc
        return conn

    def _run_wal_checkpointer(self) -> None:
        try:
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout = {int(self._config.busy_timeout_ms)}")
            conn.execute("PRAGMA synchronous = FULL")
        except sqlite3.Error:
            return  # the writer's backstop autocheckpoint still bounds the WAL
        try:
            while not self._stop_wal_checkpoints.wait(self._config.wal_checkpoint_interval_s):
                # PASSIVE never blocks the writer or readers; what it cannot copy
                # now it copies next time.
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        finally:
            conn.close()

    def _prepare_schema(self) -> None:
        conn = self._wconn
        try:
            # Look before creating anything: a file from another schema version is
            # refused untouched.
            has_meta = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone()
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() if has_meta else None
            if row is not None and row[0] != str(SCHEMA_VERSION):
                raise LogCorruptedError(f"schema version {row[0]} is not {SCHEMA_VERSION}", reason="SCHEMA_VERSION")
            # executescript runs outside Python's transaction handling; the script
            # carries its own BEGIN/COMMIT so the schema appears all at once.
            conn.executescript(
                "BEGIN IMMEDIATE;"
                + _SCHEMA
                + _INDEX_SCHEMA
                + f"INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', '{SCHEMA_VERSION}');"
                + "COMMIT;"
            )
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise StorageError(f"cannot create schema: {exc}") from exc

    def _load_state(self, conn: sqlite3.Connection) -> tuple[merkle.CompactRange, Checkpoint | None, int]:
        """Read the committed tree and index watermark; repair derived data that lags.

        Rebuilds subtree hashes unless they are exactly complete, and brings the
        query index up to the log's size.
        """
        try:
            n, lo, hi = conn.execute("SELECT count(*), min(idx), max(idx) FROM entries").fetchone()
            if n and (lo != 0 or hi != n - 1):
                raise LogCorruptedError(
                    f"entries are not numbered 0..{n - 1} (min {lo}, max {hi})",
                    reason="ENTRY_INDEX_GAP",
                )
            have = conn.execute("SELECT count(*) FROM subtrees").fetchone()[0]
            stray = conn.execute(
                "SELECT count(*) FROM subtrees WHERE level < 1 OR level > 62 OR idx < 0 OR ((idx + 1) << level) > ?",
                (n,),
            ).fetchone()[0]
            # Level >= 1 perfect subtrees of an n-leaf tree: sum(n >> L) = n - popcount(n).
            if stray or have != n - n.bit_count():
                self._rebuild_subtrees(conn, n)
            reader = _TreeReader(conn)
            frontier = merkle.CompactRange(
                n, [reader.subtree(level, idx) for level, idx in merkle.perfect_subtrees(0, n)]
            )
            row = conn.execute(f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints ORDER BY id DESC LIMIT 1").fetchone()
            latest = checkpoint_from_row(row) if row is not None else None
            if latest is not None:
                if latest.tree_size > n:
                    raise LogCorruptedError(
                        f"checkpoint at size {latest.tree_size} but the log has {n} entries",
                        reason="CHECKPOINT_BEYOND_LOG",
                    )
                if reader.range_hash(0, latest.tree_size) != latest.root_hash:
                    raise LogCorruptedError(
                        f"newest checkpoint root differs from the tree at {latest.tree_size}",
                        reason="CHECKPOINT_ROOT_MISMATCH",
                    )
            row = conn.execute("SELECT value FROM meta WHERE key = 'indexed_size'").fetchone()
            indexed = int(row[0]) if row is not None and str(row[0]).isdigit() else 0
            if indexed > n:
                indexed = 0  # nonsense watermark: the index is derived data, rebuild it all
            if indexed < n:
                _update_index(conn, indexed, n)
            return frontier, latest, n
        except sqlite3.Error as exc:
            raise StorageError(f"cannot read the log: {exc}") from exc
        except (TypeError, ValueError) as exc:
            # A NULL or mistyped column somewhere: refuse rather than guess.
            raise LogCorruptedError(f"malformed row in the log: {exc}", reason="LOG_MALFORMED") from exc

    @staticmethod
    def _rebuild_subtrees(conn: sqlite3.Connection, n: int) -> None:
        # Only reachable if the file was edited or copied mid-write: every batch
        # writes its entries and subtrees in one transaction.
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("DELETE FROM subtrees")
            cr = merkle.CompactRange()
            start = 0
            while start < n:
                rows = conn.execute(
                    "SELECT idx, leaf_hash FROM entries WHERE idx >= ? ORDER BY idx LIMIT ?",
                    (start, 10_000),
                ).fetchall()
                out: list[tuple[int, int, bytes]] = []
                for idx, lh in rows:
                    if idx != cr.size:
                        raise LogCorruptedError(f"entry {cr.size} is missing", reason="ENTRY_INDEX_GAP")
                    if not isinstance(lh, bytes) or len(lh) != merkle.HASH_SIZE:
                        raise LogCorruptedError(f"leaf hash of entry {idx} is not a hash", reason="LEAF_HASH_INVALID")
                    out.extend(cr.append(lh))
                _insert_rows(conn, _INSERT_SUBTREES, 3, out)
                start = cr.size
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    # ------------------------------------------------------------------ writing

    def append(
        self,
        build_entry: Callable[[int], bytes],
        attributes: IndexAttributes | Mapping[str, object] | None = None,
        *,
        timeout: float | None = None,
    ) -> AppendResult:
        """Append one entry and return once it is durable.

        ``build_entry(index)`` runs on the writer thread with the index the entry
        gets; it must be quick, must not call back into the log, and may raise to
        refuse the entry (the exception reaches this caller; nothing is stored
        and no index is used). With ``timeout`` and the entry not yet being
        built when it expires, the append is withdrawn and ``TimeoutError`` is
        raised; once building has started the call waits for the commit.

        Raises InvalidArgumentError (ENTRY_TYPE, ENTRY_TOO_LARGE, bad attribute),
        StorageError (batch not stored), LogClosedError.
        """
        attrs = attributes if type(attributes) is IndexAttributes else _coerce_attributes(attributes)
        request = _AppendRequest((build_entry,), (attrs,))
        self._submit(request)
        return request.future.wait(timeout)[0]

    def append_many(
        self,
        build_entries: Sequence[Callable[[int], bytes]],
        attributes: Sequence[IndexAttributes | Mapping[str, object] | None] | None = None,
        *,
        timeout: float | None = None,
    ) -> list[AppendResult]:
        """Append several entries atomically, at consecutive indexes, in one transaction.

        All or nothing: if any callback raises or returns a bad entry, none of
        them is stored. Otherwise as ``append``.
        """
        if attributes is None:
            attrs: list[IndexAttributes] = [_NO_ATTRIBUTES] * len(build_entries)
        else:
            if len(attributes) != len(build_entries):
                raise InvalidArgumentError("one attributes item per entry is required", reason="ATTRIBUTES")
            attrs = [_coerce_attributes(a) for a in attributes]
        if not build_entries:
            return []
        request = _AppendRequest(list(build_entries), attrs)
        self._submit(request)
        return request.future.wait(timeout)

    def checkpoint(self, *, timeout: float | None = None) -> Checkpoint:
        """A signed checkpoint of the current tree (GetCheckpoint).

        Returns the newest stored checkpoint if it already covers the whole
        tree; otherwise signs, stores and returns a new one.
        """
        latest = self._latest
        if latest is not None and latest.tree_size == self._size and self._failure is None:
            self._check_open()
            return latest
        request = _CheckpointRequest()
        self._submit(request)
        return request.future.wait(timeout)

    def _submit(self, request: _Request) -> None:
        if threading.get_ident() == self._writer.ident:
            # The callback runs on the writer; waiting on itself would hang forever.
            raise RuntimeError("an entry callback must not call back into the AuditLog")
        with self._lock:
            self._check_open()
            self._queue.put(request)

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError("the audit log is closed")

    def _run_writer(self) -> None:
        stop = False
        previous = 0
        while not stop:
            if self._failure is not None:
                try:
                    first = self._queue.get(timeout=self._config.recovery_interval_s)
                except queue.Empty:
                    self._recover()
                    continue
            else:
                first = self._queue.get()
            if previous > 1:
                # Callers of the last batch were just woken and are about to enqueue
                # their next append; yielding the GIL once lets them, so the batch
                # (and its single fsync) grows. Alone, a caller would only wait longer.
                time.sleep(0)
            batch: list[_Request] = []
            count = 0
            item: _Request | _Wake | None = first
            while True:
                if item is None:
                    stop = True
                elif not isinstance(item, _Wake):
                    batch.append(item)
                    count += len(item.builders) if isinstance(item, _AppendRequest) else 0
                if count >= self._config.max_batch:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            previous = len(batch)
            if not batch:
                if self._failure is not None and not stop:
                    self._recover(min_interval_s=_RETRY_ON_DEMAND_S)
                continue
            try:
                if self._failure is not None and not self._recover(min_interval_s=_RETRY_ON_DEMAND_S):
                    self._refuse(batch)
                    continue
                self._write_batch(batch)
            except BaseException as exc:  # noqa: BLE001 - the writer must never die silently
                failure = exc if isinstance(exc, AuditError) else StorageError(f"writer failed: {exc!r}")
                self._fail(batch, failure)
        if self._failure is None and (
            self._size > (self._latest.tree_size if self._latest else 0) or self._indexed < self._size
        ):
            # On clean shutdown sign the tail and index it, so a restart has nothing to catch up.
            with contextlib.suppress(Exception):
                self._write_batch([_CheckpointRequest()], final=True)

    def _fail(self, batch: Sequence[_Request], failure: AuditError) -> None:
        # Re-read the committed state (after an error at COMMIT SQLite may or may not
        # have kept the batch, and our in-memory frontier must follow the file) and
        # prove a commit goes through; if not, the log is failed until one does.
        # Before answering: a caller told of the failure finds health() saying so.
        self._recover()
        for req in batch:
            fut = req.future
            if not fut.done():
                fut.set_exception(failure)

    def _refuse(self, batch: Sequence[_Request]) -> None:
        failure = self._failure
        for req in batch:
            if not req.future.done():
                req.future.set_exception(LogClosedError(
                    f"the audit log cannot store records: {failure}", reason="LOG_WRITER_FAILED"))

    def _recover(self, *, min_interval_s: float = 0.0) -> bool:
        """Re-reads the committed state and commits a probe; True if the log can write.

        Runs on the writer thread only. On failure the log is (or stays) failed,
        and the next attempt starts from a fresh connection.
        """
        now = time.monotonic()
        if now - self._last_recovery < min_interval_s:
            return False
        self._last_recovery = now
        try:
            if self._reconnect:
                with contextlib.suppress(sqlite3.Error):
                    self._wconn.close()
                self._wconn = self._connect(create=False)
                self._inode = os.stat(self._path).st_ino
                self._reconnect = False
            conn = self._wconn
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            frontier, latest, indexed = self._load_state(conn)
            self._check_extends(conn, frontier.size)
            try:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('writer_checked_at', ?)",
                             (str(_now_micros()),))
                conn.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise
        except BaseException as exc:  # noqa: BLE001 - whatever it is, the log cannot write
            if isinstance(exc, sqlite3.Error):
                failure: AuditError = StorageError(f"cannot commit to {self._path}: {exc}")
            elif isinstance(exc, AuditError):
                failure = exc
            else:
                failure = StorageError(f"writer recovery failed: {exc!r}")
            if isinstance(exc, sqlite3.Error | OSError | LogCorruptedError):
                self._reconnect = True
            with self._lock:
                if self._failure is None:
                    self._failed_since = time.time()
                    _log.error("audit log %s cannot store records (%s); retrying every %g s", self._path,
                               failure, self._config.recovery_interval_s)
                self._failure = failure
            return False
        self._frontier, self._latest, self._indexed = frontier, latest, indexed
        self._size = frontier.size
        self._pending_index = []
        with self._lock:
            if self._failure is not None:
                _log.warning("audit log %s stores records again (size %d)", self._path, self._size)
            self._failure = None
        return True

    def _check_extends(self, conn: sqlite3.Connection, size: int) -> None:
        """The file must still hold every entry this log committed, unchanged (no rollback, no swap)."""
        mine = self._size
        if size < mine or (mine and _TreeReader(conn).range_hash(0, mine) != self._frontier.root()):
            raise LogCorruptedError(
                f"{self._path} no longer holds the {mine} entries this log committed (it has {size})",
                reason="LOG_REPLACED",
            )

    def health(self) -> str | None:
        """None while the log can store records; else why not (for the service's health)."""
        if self._closed:
            return "the audit log is closed"
        if not self._writer.is_alive():
            return "the audit log's writer thread has stopped"
        try:
            replaced = os.stat(self._path).st_ino != self._inode
        except OSError as exc:
            replaced, detail = True, exc.strerror or str(exc)
        else:
            detail = "replaced"
        if replaced:
            with self._lock:
                if self._failure is None and not self._closed:
                    self._failed_since = time.time()
                    self._failure = StorageError(f"{self._path} was {detail} while open", reason="LOG_REPLACED")
                    self._reconnect = True
                    _log.error("audit log %s was %s while open; refusing appends until it is back", self._path,
                               detail)
                    self._queue.put(_WAKE)  # the writer retries from a fresh connection now
        failure = self._failure
        if failure is None:
            return None
        since = time.strftime("%H:%M:%S", time.localtime(self._failed_since))
        return (f"audit log writer failed since {since} ({failure.reason}): {failure}; "
                f"retrying every {self._config.recovery_interval_s:g} s")

    def _write_batch(self, batch: Sequence[_Request], *, final: bool = False) -> None:
        cr = self._frontier.copy()
        entry_rows: list[tuple[Any, ...]] = []
        subtree_rows: list[tuple[int, int, bytes]] = []
        # (request, its first row, end row) in entry_rows
        done: list[tuple[_AppendRequest, int, int]] = []
        checkpoint_waiters: list[_CheckpointRequest] = []
        max_bytes = self._config.max_entry_bytes
        for req in batch:
            if isinstance(req, _CheckpointRequest):
                if req.future.start():
                    checkpoint_waiters.append(req)
                continue
            if not req.future.start():
                continue  # the caller timed out before we got to it
            base = cr.size
            try:
                datas = [build(base + j) for j, build in enumerate(req.builders)]
                for data in datas:
                    if not isinstance(data, bytes):
                        raise InvalidArgumentError("entry must be bytes", reason="ENTRY_TYPE")
                    if len(data) > max_bytes:
                        raise InvalidArgumentError(
                            f"entry of {len(data)} bytes exceeds {max_bytes}",
                            reason="ENTRY_TOO_LARGE",
                        )
            except Exception as exc:  # noqa: BLE001 - the caller's own error goes back to it
                req.future.set_exception(exc)
                continue
            first_row = len(entry_rows)
            for data, attrs in zip(datas, req.attributes, strict=True):
                lh = merkle.leaf_hash(data)
                subtree_rows.extend(cr.append(lh))
                entry_rows.append((cr.size - 1, lh, data, *attrs.row()))
            done.append((req, first_row, len(entry_rows)))

        new_size = cr.size
        checkpoint = self._maybe_checkpoint(cr, force=bool(checkpoint_waiters))
        new_index_rows = [
            (kind, value, row[0]) for row in entry_rows for kind, value in enumerate(row[3:]) if value is not None
        ]
        now = time.monotonic_ns() // 1000
        index_now = new_size > self._indexed and (
            final
            or new_size - self._indexed >= self._config.index_every_entries
            or now - self._last_index_micros >= self._config.index_every_micros
        )
        if not entry_rows and checkpoint is None and not index_now:
            for w in checkpoint_waiters:
                assert self._latest is not None
                w.future.set_result(self._latest)
            return

        conn = self._wconn
        try:
            try:
                conn.execute("BEGIN IMMEDIATE")
                _insert_rows(conn, _INSERT_ENTRIES, 10, entry_rows)
                _insert_rows(conn, _INSERT_SUBTREES, 3, subtree_rows)
                if index_now:
                    # Sorted, so consecutive rows land on the same index pages.
                    rows = sorted(self._pending_index + new_index_rows)
                    _insert_rows(conn, _INSERT_INDEX, 3, rows)
                    _set_indexed_size(conn, new_size)
                if checkpoint is not None:
                    conn.execute(
                        f"INSERT INTO checkpoints ({CHECKPOINT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
                        (
                            checkpoint.origin,
                            checkpoint.tree_size,
                            checkpoint.root_hash,
                            checkpoint.timestamp_micros,
                            checkpoint.signature,
                            checkpoint.key_id,
                        ),
                    )
                conn.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise StorageError(f"append batch not stored: {exc}") from exc

        # Committed and durable: publish, then acknowledge.
        self._frontier = cr
        self._size = new_size
        if index_now:
            self._pending_index = []
            self._indexed = new_size
            self._last_index_micros = now
        else:
            self._pending_index.extend(new_index_rows)
        if checkpoint is not None:
            self._latest = checkpoint
        for req, lo, hi in done:
            req.future.set_result([AppendResult(row[0], new_size, row[1]) for row in entry_rows[lo:hi]])
        for w in checkpoint_waiters:
            assert self._latest is not None
            w.future.set_result(self._latest)

    def _maybe_checkpoint(self, cr: merkle.CompactRange, *, force: bool) -> Checkpoint | None:
        latest = self._latest
        now = self._config.clock_micros()
        if latest is not None:
            if cr.size == latest.tree_size:
                return None
            # Never let checkpoint time run backwards, even if the wall clock does.
            now = max(now, latest.timestamp_micros)
            due = (
                force
                or cr.size - latest.tree_size >= self._config.checkpoint_every_entries
                or now - latest.timestamp_micros >= self._config.checkpoint_every_micros
            )
        else:
            # The first batch ever is always signed: it starts the checkpoint history.
            due = force or cr.size > 0
        if not due:
            return None
        return self._signer.sign(cr.size, cr.root(), now)

    # ------------------------------------------------------------------ reading

    def _reader(self) -> sqlite3.Connection:
        self._check_open()
        holder: _ReaderConnection | None = getattr(self._local, "reader", None)
        if holder is None:
            try:
                conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
                conn.execute(f"PRAGMA busy_timeout = {int(self._config.busy_timeout_ms)}")
                conn.execute("PRAGMA query_only = ON")
                # Proof lookups are random reads across the subtree index; mapping the file
                # avoids a copy per page.
                conn.execute("PRAGMA mmap_size = 1073741824")
            except sqlite3.Error as exc:
                raise StorageError(f"cannot open a reader: {exc}") from exc
            holder = _ReaderConnection(conn)
            with self._lock:
                self._check_open()
                self._readers.add(holder)
            self._local.reader = holder
        return holder.conn

    @property
    def path(self) -> Path:
        """The SQLite file."""
        return self._path

    @property
    def signer(self) -> CheckpointSigner:
        """The checkpoint signer (its ``public_key_pem()`` goes into GetCheckpoint)."""
        return self._signer

    def size(self) -> int:
        """Number of committed (acknowledged or about to be) entries."""
        self._check_open()
        return self._size

    def _resolve_size(self, tree_size: int | None, reason: str) -> int:
        size = self._size
        if tree_size is None:
            return size
        if type(tree_size) is not int or not 0 <= tree_size <= size:
            raise InvalidArgumentError(f"tree size {tree_size} not in [0, {size}]", reason=reason)
        return tree_size

    def entry(self, index: int) -> bytes:
        """The stored bytes of entry ``index``."""
        conn = self._reader()
        if type(index) is not int or not 0 <= index < self._size:
            raise InvalidArgumentError(f"no entry {index}", reason="LEAF_INDEX")
        try:
            row = conn.execute("SELECT entry FROM entries WHERE idx = ?", (index,)).fetchone()
        except sqlite3.Error as exc:
            raise StorageError(str(exc)) from exc
        if row is None:
            raise LogCorruptedError(f"entry {index} is missing", reason="ENTRY_MISSING")
        return bytes(row[0])

    def entries(self, start: int = 0, end: int | None = None) -> Iterator[tuple[int, bytes]]:
        """Yield (index, entry) for start <= index < end (default: the committed size)."""
        stop = self._resolve_size(end, "END_INDEX")
        if type(start) is not int or not 0 <= start <= stop:
            raise InvalidArgumentError(f"start {start} not in [0, {stop}]", reason="START_INDEX")
        return self._iter_entries(start, stop)

    def _iter_entries(self, start: int, stop: int) -> Iterator[tuple[int, bytes]]:
        nxt = start
        while nxt < stop:
            # Fresh query per chunk on the *current* thread's connection, so a
            # generator that outlives a thread or straddles commits stays valid.
            conn = self._reader()
            rows = conn.execute(
                "SELECT idx, entry FROM entries WHERE idx >= ? AND idx < ? ORDER BY idx LIMIT ?",
                (nxt, stop, _ENTRIES_CHUNK),
            ).fetchall()
            for idx, data in rows:
                if idx != nxt:
                    raise LogCorruptedError(f"entry {nxt} is missing", reason="ENTRY_MISSING")
                yield idx, bytes(data)
                nxt += 1
            if not rows:
                raise LogCorruptedError(f"entry {nxt} is missing", reason="ENTRY_MISSING")

    def leaf_hash(self, index: int) -> bytes:
        """The stored leaf hash of entry ``index``."""
        conn = self._reader()
        if type(index) is not int or not 0 <= index < self._size:
            raise InvalidArgumentError(f"no entry {index}", reason="LEAF_INDEX")
        return _TreeReader(conn).subtree(0, index)

    def root(self, tree_size: int | None = None) -> bytes:
        """Root hash (MTH) of the first ``tree_size`` entries (default: all committed)."""
        conn = self._reader()
        size = self._resolve_size(tree_size, "TREE_SIZE")
        return _wrap_sqlite(lambda: _TreeReader(conn).range_hash(0, size))

    def inclusion_proof(self, index: int, tree_size: int | None = None) -> InclusionProof:
        """Audit path for entry ``index`` in the tree of ``tree_size`` (default: current)."""
        conn = self._reader()
        size = self._resolve_size(tree_size, "TREE_SIZE")
        if type(index) is not int or not 0 <= index < size:
            raise InvalidArgumentError(f"leaf index {index} not in a tree of size {size}", reason="LEAF_INDEX")
        reader = _TreeReader(conn)

        def build() -> InclusionProof:
            path = merkle.inclusion_proof_from(index, size, reader.range_hash)
            return InclusionProof(
                leaf_index=index,
                tree_size=size,
                leaf_hash=reader.subtree(0, index),
                audit_path=tuple(path),
                root_hash=reader.range_hash(0, size),
            )

        return _wrap_sqlite(build)

    def consistency_proof(self, first_tree_size: int, second_tree_size: int | None = None) -> ConsistencyProof:
        """Proof that the first ``first_tree_size`` entries are a prefix of ``second_tree_size``."""
        conn = self._reader()
        second = self._resolve_size(second_tree_size, "SECOND_TREE_SIZE")
        if type(first_tree_size) is not int or not 0 <= first_tree_size <= second:
            raise InvalidArgumentError(
                f"first tree size {first_tree_size} not in [0, {second}]", reason="FIRST_TREE_SIZE"
            )
        reader = _TreeReader(conn)

        def build() -> ConsistencyProof:
            proof = merkle.consistency_proof_from(first_tree_size, second, reader.range_hash)
            return ConsistencyProof(
                first_tree_size=first_tree_size,
                second_tree_size=second,
                proof=tuple(proof),
                first_root_hash=reader.range_hash(0, first_tree_size),
                second_root_hash=reader.range_hash(0, second),
            )

        return _wrap_sqlite(build)

    def query(self, flt: RecordFilter, *, after_index: int = -1, limit: int = 100) -> list[QueryHit]:
        """Entries matching ``flt`` with index > ``after_index``, in index order, at most ``limit``.

        Page by passing the last index returned as the next ``after_index``.
        """
        conn = self._reader()
        if type(limit) is not int or not 1 <= limit <= _MAX_QUERY_LIMIT:
            raise InvalidArgumentError(f"limit must be in [1, {_MAX_QUERY_LIMIT}]", reason="LIMIT")
        if type(after_index) is not int or after_index < -1:
            raise InvalidArgumentError("after_index must be >= -1", reason="AFTER_INDEX")
        # Watermark first: index rows below it were committed before it moved.
        indexed, size = self._indexed, self._size
        conds: list[str] = []
        params: list[object] = []
        for name in _ATTRIBUTE_COLUMNS:
            value = getattr(flt, name)
            if value is not None:
                conds.append(f"e.{name} = ?")
                params.append(value)
        if flt.start_micros is not None:
            conds.append("e.recorded_at >= ?")
            params.append(flt.start_micros)
        if flt.end_micros is not None:
            conds.append("e.recorded_at < ?")
            params.append(flt.end_micros)
        extra = "".join(f" AND {c}" for c in conds)
        drive = _driving_condition(flt)

        def run() -> list[tuple[int, bytes]]:
            rows: list[tuple[int, bytes]] = []
            tail_from = after_index
            if drive is not None and after_index + 1 < indexed:
                # Indexed part: candidates from attr_index, every condition re-checked on the
                # entry's own columns. CROSS JOIN keeps attr_index as the outer loop.
                drive_sql, drive_params = drive
                rows = conn.execute(
                    "SELECT e.idx, e.entry FROM attr_index a CROSS JOIN entries e ON e.idx = a.idx"
                    f" WHERE {drive_sql} AND a.idx > ? AND a.idx < ?{extra} ORDER BY a.idx LIMIT ?",
                    [*drive_params, after_index, indexed, *params, limit],
                ).fetchall()
                tail_from = max(after_index, indexed - 1)
            if len(rows) < limit:
                # Unindexed tail (or no filter at all): scan entries in index order.
                rows += conn.execute(
                    f"SELECT e.idx, e.entry FROM entries e WHERE e.idx > ? AND e.idx < ?{extra} ORDER BY e.idx LIMIT ?",
                    [tail_from, size, *params, limit - len(rows)],
                ).fetchall()
            return rows

        rows = _wrap_sqlite(run)
        return [QueryHit(int(i), bytes(e)) for i, e in rows]

    def latest_checkpoint(self) -> Checkpoint | None:
        """The newest stored checkpoint, or None if none was signed yet."""
        self._check_open()
        return self._latest

    def checkpoints(self) -> Iterator[Checkpoint]:
        """All stored checkpoints, oldest first."""
        last_id = 0
        while True:
            conn = self._reader()
            rows = conn.execute(
                f"SELECT id, {CHECKPOINT_COLUMNS} FROM checkpoints WHERE id > ? ORDER BY id LIMIT ?",
                (last_id, _ENTRIES_CHUNK),
            ).fetchall()
            if not rows:
                return
            for row in rows:
                last_id = row[0]
                yield checkpoint_from_row(row[1:])

    # ------------------------------------------------------------------ shutdown

    def close(self) -> None:
        """Finish queued appends, sign a final checkpoint, stop the writer, release the file.

        Idempotent. Appends and reads after ``close`` raise ``LogClosedError``.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._queue.put(None)
        self._writer.join()
        self._stop_wal_checkpoints.set()
        self._wal_checkpointer.join()
        with self._lock:
            readers = list(self._readers)
            self._readers.clear()
        for holder in readers:
            holder.close()
        with contextlib.suppress(sqlite3.Error):
            self._wconn.close()
        self._lock_file.close()

    def __enter__(self) -> AuditLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _coerce_attributes(value: IndexAttributes | Mapping[str, object] | None) -> IndexAttributes:
    if value is None:
        return _NO_ATTRIBUTES
    if isinstance(value, IndexAttributes):
        return value
    return IndexAttributes.from_mapping(value)


_INSERT_ENTRIES: Final = (
    "INSERT INTO entries (idx, leaf_hash, entry, execution_id, trace_id,"
    " correlation_id, agent_id, capability_id, tenant_id, recorded_at) VALUES "
)
_INSERT_SUBTREES: Final = "INSERT INTO subtrees (level, idx, hash) VALUES "
# OR REPLACE: the index is derived data; re-deriving a row must not fail.
_INSERT_INDEX: Final = "INSERT OR REPLACE INTO attr_index (kind, value, idx) VALUES "


def _set_indexed_size(conn: sqlite3.Connection, size: int) -> None:
    conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('indexed_size', ?)", (str(size),))


def _update_index(conn: sqlite3.Connection, start: int, end: int) -> None:
    """Derive the query index of entries [start, end) from their columns, in one transaction."""
    columns = ", ".join(INDEX_KINDS)
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Rows at or past the watermark can only be leftovers; derive them afresh.
        conn.execute("DELETE FROM attr_index WHERE idx >= ?", (start,))
        nxt = start
        while nxt < end:
            chunk = conn.execute(
                f"SELECT idx, {columns} FROM entries WHERE idx >= ? AND idx < ? ORDER BY idx LIMIT 10000",
                (nxt, end),
            ).fetchall()
            if not chunk:
                break
            rows = sorted(
                (kind, value, idx) for idx, *values in chunk for kind, value in enumerate(values) if value is not None
            )
            _insert_rows(conn, _INSERT_INDEX, 3, rows)
            nxt = chunk[-1][0] + 1
        _set_indexed_size(conn, end)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


_ROWS_PER_INSERT: Final = 256


def _insert_rows(conn: sqlite3.Connection, head: str, width: int, rows: Sequence[Sequence[Any]]) -> None:
    """Insert rows with multi-row INSERT statements.

    executemany steps SQLite once per row, and the sqlite3 module drops and
    retakes the GIL around every step; under group commit the writer then queues
    behind the woken callers for the GIL at each row. One statement per chunk
    keeps the writer's GIL handoffs per batch small and constant.
    """
    group = "(" + ", ".join("?" * width) + ")"
    for lo in range(0, len(rows), _ROWS_PER_INSERT):
        chunk = rows[lo : lo + _ROWS_PER_INSERT]
        params = [value for row in chunk for value in row]
        conn.execute(head + ", ".join([group] * len(chunk)), params)


# Most selective first: the attribute that drives an indexed query.
_DRIVE_ORDER: Final = ("execution_id", "correlation_id", "trace_id", "capability_id", "agent_id", "tenant_id")


def _driving_condition(flt: RecordFilter) -> tuple[str, list[object]] | None:
    for name in _DRIVE_ORDER:
        value = getattr(flt, name)
        if value is not None:
            return "a.kind = ? AND a.value = ?", [INDEX_KINDS.index(name), value]
    if flt.start_micros is not None or flt.end_micros is not None:
        lo = flt.start_micros if flt.start_micros is not None else 0
        hi = flt.end_micros if flt.end_micros is not None else 1 << 62
        return "a.kind = ? AND a.value >= ? AND a.value < ?", [_TIME_KIND, lo, hi]
    return None


def _wrap_sqlite(fn: Callable[[], _T]) -> _T:
    try:
        return fn()
    except sqlite3.Error as exc:
        raise StorageError(f"audit log read failed: {exc}") from exc


def _acquire_lock(lock_path: Path) -> IO[bytes]:
    f = open(lock_path, "a+b")  # noqa: SIM115 - held open for the log's lifetime
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        f.close()
        raise LogLockedError(f"{lock_path} is held by another process") from exc
    except OSError:
        f.close()
        raise
    with contextlib.suppress(OSError):
        os.chmod(lock_path, 0o600)
    return f
