"""Offline verification of an audit log's SQLite file.

Needs only the database file and the audit service's public key, and
optionally checkpoints a user saved earlier. It reads one consistent snapshot,
read-only, and trusts nothing it has not recomputed:

1. every entry's leaf hash is recomputed from the entry bytes and compared with
   the stored one; indexes must run 0, 1, 2, ... without gaps;
2. an optional per-entry check (``entry_check``) runs on every entry - the
   audit service uses it to check that a record's embedded index matches its
   position and that its delegation chain's signatures verify;
3. every perfect subtree hash is recomputed and compared with the stored one
   (those answer proofs), and no unexpected subtree rows may exist;
4. at every checkpoint's size the recomputed root must equal the signed root;
   every stored checkpoint's signature is checked, their sizes and times must
   not go backwards, and a consistency proof links each to the next;
5. a saved checkpoint must be signed by the key and match the recomputed root
   at its size; a saved (or stored) checkpoint larger than the log means the
   newest records were deleted;
6. the query index must agree exactly with the records' stored attributes
   (an optional ``attribute_check`` ties those to the record bytes), so no
   record can be hidden from, or misfiled in, QueryRecords.

It stops at the first problem in log order and reports it with the range of
records it implicates (``Problem.index`` .. ``Problem.end_index``); when the
evidence pins a single record, that range has length one.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from audit_svc import merkle
from audit_svc.checkpoints import Checkpoint, load_public_key_pem, verify_checkpoint
from audit_svc.errors import CheckpointInvalidError
from audit_svc.log_store import (
    CHECKPOINT_COLUMNS,
    INDEX_KINDS,
    SCHEMA_VERSION,
    IndexAttributes,
    checkpoint_from_row,
)

__all__ = [
    "AttributeCheck",
    "EntryCheck",
    "Problem",
    "VerifyReport",
    "load_saved_checkpoint",
    "verify_log",
]

EntryCheck = Callable[[int, bytes], str | None]
"""Called with (index, entry bytes); returns what is wrong with the entry, or None."""

AttributeCheck = Callable[[int, bytes, IndexAttributes], str | None]
"""Called with (index, entry bytes, its stored query attributes); returns a problem or None."""


@dataclass(frozen=True)
class Problem:
    """The first thing found wrong, in log order."""

    reason: str
    """UPPER_SNAKE code, e.g. LEAF_HASH_MISMATCH, RECORD_MISSING, TRUNCATED."""
    detail: str
    """Human-readable explanation."""
    index: int | None = None
    """First record implicated (the bad record itself when ``end_index == index + 1``)."""
    end_index: int | None = None
    """End (exclusive) of the implicated records; the first bad record lies in [index, end)."""


@dataclass(frozen=True)
class VerifyReport:
    """Outcome of ``verify_log``."""

    tree_size: int
    """Entries read (up to the first problem if one was found)."""
    root_hash: bytes
    """Root recomputed over those entries."""
    checkpoints_checked: int
    """Stored and saved checkpoints whose signature and root were verified."""
    problem: Problem | None = None
    """The first problem, or None when the log verified."""
    signed_size: int = 0
    """Largest tree size covered by a verified checkpoint; later entries are not yet signed."""
    notes: tuple[str, ...] = field(default=())
    """Informational remarks that are not failures."""

    @property
    def ok(self) -> bool:
        """True when no problem was found."""
        return self.problem is None

    def summary(self) -> str:
        """One line for a CLI: ``OK ...`` or ``FAIL <reason> at record N: ...``."""
        if self.problem is None:
            return (
                f"OK: {self.tree_size} records, root {self.root_hash.hex()}, "
                f"{self.checkpoints_checked} checkpoints verified, "
                f"signed up to {self.signed_size}"
            )
        p = self.problem
        where = ""
        if p.index is not None:
            if p.end_index is None or p.end_index == p.index + 1:
                where = f" at record {p.index}"
            else:
                where = f" in records [{p.index}, {p.end_index})"
        return f"FAIL {p.reason}{where}: {p.detail}"


def load_saved_checkpoint(path: Path) -> Checkpoint:
    """Read a checkpoint saved with ``Checkpoint.to_json``; raises ``CheckpointInvalidError``."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise CheckpointInvalidError(f"cannot read {path}: {exc}", reason="CHECKPOINT_FORMAT") from exc
    return Checkpoint.from_json(text)


class _Failed(Exception):
    """Internal: unwinds the scan at the first problem."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.detail)
        self.problem = problem


def _fail(reason: str, detail: str, index: int | None = None, end: int | None = None) -> _Failed:
    return _Failed(Problem(reason, detail, index, end))


class _SubtreeLevel:
    """Stored subtree hashes of one level, read in index order alongside the scan."""

    def __init__(self, conn: sqlite3.Connection, level: int) -> None:
        self.level = level
        self._rows: Iterator[tuple[int, bytes]] = iter(
            conn.execute("SELECT idx, hash FROM subtrees WHERE level = ? ORDER BY idx", (level,))
        )
        self._pending: tuple[int, bytes] | None = None

    def _next(self) -> tuple[int, bytes] | None:
        if self._pending is not None:
            row, self._pending = self._pending, None
            return row
        return next(self._rows, None)

    def expect(self, idx: int, computed: bytes) -> None:
        lo, hi = idx << self.level, (idx + 1) << self.level
        row = self._next()
        if row is None or row[0] > idx:
            self._pending = row
            raise _fail(
                "SUBTREE_MISSING",
                f"no stored hash for the subtree over records [{lo}, {hi})",
                lo,
                hi,
            )
        if row[0] < idx:
            raise _fail(
                "SUBTREE_UNEXPECTED",
                f"stored subtree level {self.level} index {row[0]} should not exist",
                row[0] << self.level,
                (row[0] + 1) << self.level,
            )
        if bytes(row[1]) != computed:
            raise _fail(
                "SUBTREE_HASH_MISMATCH",
                f"stored hash of the subtree over records [{lo}, {hi}) differs from the "
                "hash recomputed from those records",
                lo,
                hi,
            )

    def leftover(self) -> int | None:
        row = self._next()
        return None if row is None else int(row[0])


def _open_readonly(db_path: Path) -> sqlite3.Connection:
    if not db_path.is_file():
        raise _fail("DATABASE_MISSING", f"{db_path} does not exist")
    uri = db_path.resolve().as_uri() + "?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, isolation_level=None)
        conn.execute("PRAGMA query_only = ON")
        # One read transaction: the whole check sees a single snapshot even if
        # the service is appending meanwhile.
        conn.execute("BEGIN")
        version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except sqlite3.Error as exc:
        raise _fail("DATABASE_UNREADABLE", f"cannot read {db_path}: {exc}") from exc
    if version is None or version[0] != str(SCHEMA_VERSION):
        conn.close()
        raise _fail("SCHEMA_VERSION", f"unsupported schema version {version}")
    return conn


def verify_log(
    db_path: Path,
    public_key: Ed25519PublicKey | str | bytes,
    *,
    origin: str | None = None,
    saved_checkpoints: Sequence[Checkpoint] = (),
    entry_check: EntryCheck | None = None,
    attribute_check: AttributeCheck | None = None,
) -> VerifyReport:
    """Verify the audit log in ``db_path`` (see module docstring); never raises on bad data.

    ``public_key`` is the audit service's Ed25519 key (object or PEM). With
    ``origin``, every checkpoint must carry it.
    """
    if isinstance(public_key, Ed25519PublicKey):
        key = public_key
    else:
        try:
            key = load_public_key_pem(public_key)
        except Exception as exc:  # noqa: BLE001 - reported, not raised
            return VerifyReport(0, merkle.EMPTY_ROOT, 0, Problem("PUBLIC_KEY_INVALID", str(exc)))
    scan = _Scan(key, origin, saved_checkpoints, entry_check, attribute_check)
    try:
        conn = _open_readonly(Path(db_path))
    except _Failed as failed:
        return scan.report(failed.problem)
    try:
        scan.run(conn)
        return scan.report(None)
    except _Failed as failed:
        return scan.report(failed.problem)
    except sqlite3.Error as exc:
        return scan.report(Problem("DATABASE_UNREADABLE", f"reading the log failed: {exc}"))
    except Exception as exc:  # noqa: BLE001 - NULLs or wrong types in hand-edited rows
        return scan.report(Problem("DATABASE_MALFORMED", f"unexpected content: {exc!r}"))
    finally:
        conn.close()


class _Scan:
    def __init__(
        self,
        key: Ed25519PublicKey,
        origin: str | None,
        saved: Sequence[Checkpoint],
        entry_check: EntryCheck | None,
        attribute_check: AttributeCheck | None,
    ) -> None:
        self.key = key
        self.origin = origin
        self.saved = list(saved)
        self.entry_check = entry_check
        self.attribute_check = attribute_check
        self.cr = merkle.CompactRange()
        self.checked = 0
        self.signed_size = 0
        self.notes: list[str] = []

    def report(self, problem: Problem | None) -> VerifyReport:
        return VerifyReport(
            tree_size=self.cr.size,
            root_hash=self.cr.root(),
            checkpoints_checked=self.checked,
            problem=problem,
            signed_size=self.signed_size,
            notes=tuple(self.notes),
        )

    def _check_signature(self, cp: Checkpoint, label: str) -> None:
        try:
            verify_checkpoint(cp, self.key, origin=self.origin)
        except CheckpointInvalidError as exc:
            prefix = "SAVED_" if label.startswith("saved") else ""
            raise _fail(prefix + exc.reason, f"{label} (size {cp.tree_size}): {exc}") from exc

    def run(self, conn: sqlite3.Connection) -> None:
        stored = [
            (int(row[0]), checkpoint_from_row(row[1:]))
            for row in conn.execute(f"SELECT id, {CHECKPOINT_COLUMNS} FROM checkpoints ORDER BY id")
        ]
        # Checkpoints to check at each tree size, in the order they were written.
        due: dict[int, list[tuple[str, Checkpoint]]] = {}
        for cid, cp in stored:
            due.setdefault(cp.tree_size, []).append((f"stored checkpoint #{cid}", cp))
        for i, cp in enumerate(self.saved):
            due.setdefault(cp.tree_size, []).append((f"saved checkpoint {i + 1}", cp))

        n_entries = conn.execute("SELECT count(*) FROM entries").fetchone()[0]
        stray = conn.execute(
            "SELECT min(level) FROM subtrees WHERE level < 1 OR level > ?",
            (max(int(n_entries).bit_length(), 1),),
        ).fetchone()[0]
        levels: dict[int, _SubtreeLevel] = {}
        last_good = 0  # largest size at which a checkpoint matched

        self._checkpoints_at(0, due, last_good)
        rows = conn.execute(
            "SELECT idx, leaf_hash, entry, execution_id, trace_id, correlation_id, agent_id,"
            " capability_id, tenant_id, recorded_at FROM entries ORDER BY idx"
        )
        for row in rows:
            idx, stored_leaf, entry = row[0], row[1], row[2]
            # SQLite keeps whatever type was written; bytes(42) would silently be 42 zeros.
            if not (type(idx) is int and isinstance(stored_leaf, bytes) and isinstance(entry, bytes)):
                at = idx if type(idx) is int else self.cr.size
                raise _fail("RECORD_MALFORMED", "stored row has wrongly typed columns", at, at + 1)
            expected = self.cr.size
            if idx != expected:
                if idx > expected:
                    raise _fail(
                        "RECORD_MISSING",
                        f"records {expected}..{idx - 1} are missing (next stored is {idx})",
                        expected,
                        idx,
                    )
                raise _fail("UNEXPECTED_INDEX", f"a record is stored at index {idx}", idx, idx + 1)
            leaf = merkle.leaf_hash(entry)
            if leaf != stored_leaf:
                raise _fail(
                    "LEAF_HASH_MISMATCH",
                    "the record's bytes do not hash to its stored leaf hash",
                    idx,
                    idx + 1,
                )
            if self.entry_check is not None:
                _run_check("ENTRY_CHECK_FAILED", idx, self.entry_check, idx, entry)
            if self.attribute_check is not None:
                attrs = _attributes(row[3:], idx)
                _run_check("ATTRIBUTES_MISMATCH", idx, self.attribute_check, idx, entry, attrs)
            for level, sidx, h in self.cr.append(leaf):
                reader = levels.get(level)
                if reader is None:
                    reader = levels[level] = _SubtreeLevel(conn, level)
                reader.expect(sidx, h)
            if self.cr.size in due:
                last_good = self._checkpoints_at(self.cr.size, due, last_good)

        size = self.cr.size
        if stray is not None:
            raise _fail("SUBTREE_UNEXPECTED", f"stored subtree rows at level {stray}")
        for level in range(1, max(size.bit_length(), 1) + 1):
            reader = levels.get(level) or _SubtreeLevel(conn, level)
            extra = reader.leftover()
            if extra is not None:
                raise _fail(
                    "SUBTREE_UNEXPECTED",
                    f"stored subtree level {level} index {extra} lies beyond the log",
                    extra << level,
                    (extra + 1) << level,
                )
        beyond = [(label, cp) for s, cps in due.items() if s > size for label, cp in cps]
        if beyond:
            label, cp = max(beyond, key=lambda item: item[1].tree_size)
            self._check_signature(cp, label)
            raise _fail(
                "TRUNCATED",
                f"{label} covers {cp.tree_size} records but the log holds only {size}: the newest records were deleted",
                size,
                cp.tree_size,
            )
        self._check_history(conn, stored)
        self._check_query_index(conn, size)
        if self.signed_size < size:
            self.notes.append(f"records [{self.signed_size}, {size}) are not covered by any checkpoint yet")

    def _checkpoints_at(self, size: int, due: dict[int, list[tuple[str, Checkpoint]]], last_good: int) -> int:
        root = self.cr.root()
        for label, cp in due.get(size, ()):
            self._check_signature(cp, label)
            if cp.root_hash != root:
                reason = "SAVED_CHECKPOINT_ROOT_MISMATCH" if label.startswith("saved") else ("CHECKPOINT_ROOT_MISMATCH")
                raise _fail(
                    reason,
                    f"{label} signs root {cp.root_hash.hex()} for size {size}, but the records "
                    f"hash to {root.hex()}: a record before {size} was changed, removed, "
                    "inserted or reordered",
                    last_good,
                    size,
                )
            self.checked += 1
            self.signed_size = max(self.signed_size, size)
        return size

    def _check_query_index(self, conn: sqlite3.Connection, size: int) -> None:
        # Not part of the Merkle proofs, but QueryRecords reads it: a dropped row
        # would hide a record from a query, an extra one would misfile it.
        row = conn.execute("SELECT value FROM meta WHERE key = 'indexed_size'").fetchone()
        try:
            watermark = int(row[0]) if row is not None else 0
        except (TypeError, ValueError):
            watermark = -1
        if not 0 <= watermark <= size:
            raise _fail("QUERY_INDEX_MISMATCH", f"query index watermark {row[0] if row else None!r} is invalid")
        derived = _derived_index_sql()
        missing = conn.execute(
            f"SELECT min(idx) FROM ({derived} EXCEPT SELECT kind, value, idx FROM attr_index)", {"w": watermark}
        ).fetchone()[0]
        extra = conn.execute(
            f"SELECT min(idx) FROM (SELECT kind, value, idx FROM attr_index EXCEPT SELECT * FROM ({derived}))",
            {"w": watermark},
        ).fetchone()[0]
        first = min((i for i in (missing, extra) if i is not None), default=None)
        if first is not None:
            raise _fail(
                "QUERY_INDEX_MISMATCH",
                f"the query index disagrees with record {first}'s stored attributes: queries would hide or misfile it",
                int(first),
                int(first) + 1,
            )

    def _check_history(self, conn: sqlite3.Connection, stored: list[tuple[int, Checkpoint]]) -> None:
        # The stored subtree hashes have all been verified by now, so proofs built
        # from them are as good as proofs built from the records.
        def range_hash(lo: int, hi: int) -> bytes:
            hashes = []
            for level, idx in merkle.perfect_subtrees(lo, hi):
                if level == 0:
                    row = conn.execute("SELECT leaf_hash FROM entries WHERE idx = ?", (idx,))
                else:
                    row = conn.execute("SELECT hash FROM subtrees WHERE level = ? AND idx = ?", (level, idx))
                hashes.append(bytes(row.fetchone()[0]))
            return merkle.fold_subtrees(hashes)

        for (id_a, a), (id_b, b) in zip(stored, stored[1:], strict=False):
            if b.tree_size < a.tree_size or b.timestamp_micros < a.timestamp_micros:
                raise _fail(
                    "CHECKPOINT_ORDER",
                    f"stored checkpoint #{id_b} (size {b.tree_size}) goes back behind #{id_a} (size {a.tree_size})",
                )
            proof = merkle.consistency_proof_from(a.tree_size, b.tree_size, range_hash)
            if not merkle.verify_consistency(a.tree_size, b.tree_size, proof, a.root_hash, b.root_hash):
                raise _fail(
                    "CHECKPOINT_INCONSISTENT",
                    f"stored checkpoints #{id_a} and #{id_b} are not consistent",
                    a.tree_size,
                    b.tree_size,
                )


def _derived_index_sql() -> str:
    return " UNION ALL ".join(
        f"SELECT {kind} AS kind, {column} AS value, idx FROM entries WHERE {column} IS NOT NULL AND idx < :w"
        for kind, column in enumerate(INDEX_KINDS)
    )


def _run_check(reason: str, idx: int, check: Callable[..., str | None], *args: object) -> None:
    try:
        error = check(*args)
    except Exception as exc:  # noqa: BLE001 - a crashing check is a failed check
        error = f"check raised {exc!r}"
    if error is not None:
        raise _fail(reason, error, idx, idx + 1)


def _attributes(values: Sequence[object], idx: int) -> IndexAttributes:
    try:
        return IndexAttributes(*values)  # type: ignore[arg-type]
    except Exception as exc:  # noqa: BLE001
        raise _fail("ATTRIBUTES_INVALID", f"stored query attributes are malformed: {exc}", idx, idx + 1) from exc
