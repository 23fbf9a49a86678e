"""Offline verification of an audit log's SQLite file.

Needs only the database file and the audit service's public key, and
optionally checkpoints a user saved earlier. It reads one consistent snapshot,
read-only, and trusts nothing it has not recomputed:

1. every entry's leaf hash is recomputed from the entry bytes and compared with
   the stored one; indexes must run 0, 1, 2, ... without gaps;
2. optional per-entry checks run on every entry whose bytes match their leaf
   hash: ``entry_check`` (the audit service checks that a record is an
   AuditRecord at its own index) and ``grant_check`` (that its delegation
   chain verifies: ``audit_svc.servicer.grant_check`` checks the grants'
   record signatures, and older records as they were stored);
3. every stored perfect subtree hash is checked against the two hashes below
   it, and no unexpected subtree rows may exist;
4. at every checkpoint's size the recomputed root must equal the signed root;
   every stored checkpoint's signature is checked and their sizes and times
   must not go backwards. (Checkpoints whose roots all match one recomputed
   tree are consistent with each other by construction.)
5. a saved checkpoint must be signed by the key and match the recomputed root
   at its size; a saved (or stored) checkpoint larger than the log means the
   newest records were deleted;
6. the query index must agree exactly with the records' stored attributes
   (an optional ``attribute_check`` ties those to the record bytes), so no
   record can be hidden from, or misfiled in, QueryRecords.

It reports **every** problem, in log order, each with the range of records it
implicates (``Problem.index`` .. ``Problem.end_index``; length one when the
evidence pins a single record), so one bad record cannot hide another:

* each record is re-hashed and checked on its own;
* a damaged leaf or subtree is reported at the lowest level where the stored
  hashes disagree, and the checks above it go on with the stored hash (what
  the damage did not touch), so one change is reported once, not at every
  level and checkpoint above it;
* where the records themselves are gone (a gap in the indexes) the tree
  cannot be recomputed past it: the per-record and index checks go on, the
  checkpoints after it are reported as not checked.

One limit is in the nature of a hash tree: after an attacker rewrote a record
*and every hash above it*, only the next signed checkpoint disagrees, and so
do all later ones, since each root covers everything before it. Those later
disagreements are reported as one note, not as further problems; a later
change is still reported if it breaks any record, leaf or subtree check.

Each problem has a ``kind``: :data:`TAMPERING` (the stored log was changed),
:data:`GRANT_CHAIN` (a record, intact, whose delegation chain does not verify
against the trusted grant keys) or :data:`UNVERIFIABLE` (the file or key could
not be read, so nothing was verified).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

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
    "GRANT_CHAIN",
    "MAX_PROBLEMS",
    "TAMPERING",
    "UNVERIFIABLE",
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

TAMPERING: Final = "tampering"
"""The stored log differs from what was signed or recorded: hashes, roots, indexes, rows."""
GRANT_CHAIN: Final = "grant_chain"
"""An intact record whose delegation chain does not verify against the trusted grant keys."""
UNVERIFIABLE: Final = "unverifiable"
"""The log or the key could not be read: nothing could be verified."""

MAX_PROBLEMS: Final = 10_000
"""Problems listed one by one; past this many, the report says how many more were found."""

_UNVERIFIABLE_REASONS: Final = frozenset(
    {"DATABASE_MISSING", "DATABASE_UNREADABLE", "SCHEMA_VERSION", "PUBLIC_KEY_INVALID"})
_CANDIDATES: Final = 8  # hashes a damaged node may stand for (stored, recomputed, ...)


def kind_of(reason: str) -> str:
    """The kind of a problem reason: GRANT_CHAIN, UNVERIFIABLE or TAMPERING."""
    if reason == "GRANT_CHAIN_INVALID":
        return GRANT_CHAIN
    if reason in _UNVERIFIABLE_REASONS:
        return UNVERIFIABLE
    return TAMPERING


@dataclass(frozen=True)
class Problem:
    """One thing found wrong."""

    reason: str
    """UPPER_SNAKE code, e.g. LEAF_HASH_MISMATCH, RECORD_MISSING, TRUNCATED, GRANT_CHAIN_INVALID."""
    detail: str
    """Human-readable explanation."""
    index: int | None = None
    """First record implicated (the bad record itself when ``end_index == index + 1``)."""
    end_index: int | None = None
    """End (exclusive) of the implicated records; the first bad record lies in [index, end)."""
    kind: str = ""
    """TAMPERING, GRANT_CHAIN or UNVERIFIABLE; derived from ``reason`` when not given."""

    def __post_init__(self) -> None:
        if not self.kind:
            object.__setattr__(self, "kind", kind_of(self.reason))

    def where(self) -> str:
        """`` at record N``, `` in records [a, b)`` or nothing."""
        if self.index is None:
            return ""
        if self.end_index is None or self.end_index == self.index + 1:
            return f" at record {self.index}"
        return f" in records [{self.index}, {self.end_index})"

    def line(self) -> str:
        """``FAIL <reason>[ at record N]: <detail>``."""
        return f"FAIL {self.reason}{self.where()}: {self.detail}"

    def to_dict(self) -> dict[str, object]:
        """The problem as JSON-ready values."""
        return {"reason": self.reason, "kind": self.kind, "detail": self.detail, "index": self.index,
                "end_index": self.end_index}


@dataclass(frozen=True)
class VerifyReport:
    """Outcome of ``verify_log``."""

    tree_size: int
    """Records read."""
    root_hash: bytes
    """Root recomputed from the records (up to a gap, if there is one)."""
    checkpoints_checked: int
    """Stored and saved checkpoints whose signature and root were verified."""
    problems: tuple[Problem, ...] = ()
    """Every problem found, in log order; empty when the log verified."""
    signed_size: int = 0
    """Largest tree size covered by a verified checkpoint; later entries are not yet signed."""
    notes: tuple[str, ...] = field(default=())
    """Informational remarks that are not failures."""

    @property
    def ok(self) -> bool:
        """True when no problem was found."""
        return not self.problems

    @property
    def problem(self) -> Problem | None:
        """The first problem in log order, or None."""
        return self.problems[0] if self.problems else None

    def count(self, kind: str) -> int:
        """How many problems of one kind were found."""
        return sum(1 for p in self.problems if p.kind == kind)

    def summary(self) -> str:
        """One line for a CLI: ``OK ...`` or the first problem's line (and how many more)."""
        if not self.problems:
            return (
                f"OK: {self.tree_size} records, root {self.root_hash.hex()}, "
                f"{self.checkpoints_checked} checkpoints verified, "
                f"signed up to {self.signed_size}"
            )
        more = len(self.problems) - 1
        return self.problems[0].line() + (f" (and {more} more problem{'s' * (more > 1)})" if more else "")


def load_saved_checkpoint(path: Path) -> Checkpoint:
    """Read a checkpoint saved with ``Checkpoint.to_json``; raises ``CheckpointInvalidError``."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise CheckpointInvalidError(f"cannot read {path}: {exc}", reason="CHECKPOINT_FORMAT") from exc
    return Checkpoint.from_json(text)


class _Fatal(Exception):
    """Internal: the file cannot be read at all."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.detail)
        self.problem = problem


class _Node:
    """A perfect subtree on the right edge of the tree being rebuilt.

    ``pure`` is recomputed from the records alone; ``accepted`` are the hashes
    it may stand for above it: just the stored one when the stored hashes
    agree, else (the disagreement having been reported) the stored and the
    recomputed ones, so the damage is not reported again higher up.
    """

    __slots__ = ("accepted", "pure")

    def __init__(self, pure: bytes, accepted: frozenset[bytes]) -> None:
        self.pure = pure
        self.accepted = accepted


def _cap(hashes: set[bytes], *keep: bytes) -> frozenset[bytes]:
    if len(hashes) <= _CANDIDATES:
        return frozenset(hashes)
    kept = {h for h in keep if h in hashes}
    return frozenset(kept | set(sorted(hashes - kept)[: _CANDIDATES - len(kept)]))


class _SubtreeLevel:
    """Stored subtree hashes of one level, read in index order alongside the scan."""

    def __init__(self, conn: sqlite3.Connection, level: int, scan: _Scan) -> None:
        self.level = level
        self._scan = scan
        self._rows: Iterator[tuple[int, bytes]] = iter(
            conn.execute("SELECT idx, hash FROM subtrees WHERE level = ? ORDER BY idx", (level,))
        )
        self._pending: tuple[int, bytes] | None = None

    def _next(self) -> tuple[int, bytes] | None:
        if self._pending is not None:
            row, self._pending = self._pending, None
            return row
        return next(self._rows, None)

    def _unexpected(self, idx: int, why: str) -> None:
        self._scan.problem("SUBTREE_UNEXPECTED", f"stored subtree level {self.level} index {idx} {why}",
                           idx << self.level, (idx + 1) << self.level)

    def take(self, idx: int) -> bytes | None:
        """The stored hash of subtree ``idx``, or None (reported) when there is none."""
        lo, hi = idx << self.level, (idx + 1) << self.level
        while True:
            row = self._next()
            if row is None or row[0] > idx:
                self._pending = row
                self._scan.problem("SUBTREE_MISSING", f"no stored hash for the subtree over records [{lo}, {hi})",
                                   lo, hi)
                return None
            if row[0] < idx:
                self._unexpected(int(row[0]), "should not exist")
                continue
            if not isinstance(row[1], bytes):
                self._scan.problem("SUBTREE_HASH_MISMATCH",
                                   f"stored hash of the subtree over records [{lo}, {hi}) is not a hash", lo, hi)
                return None
            return bytes(row[1])

    def leftovers(self) -> None:
        """Reports every stored row of this level beyond the log."""
        while (row := self._next()) is not None:
            self._unexpected(int(row[0]), "lies beyond the log")


def _open_readonly(db_path: Path) -> sqlite3.Connection:
    if not db_path.is_file():
        raise _Fatal(Problem("DATABASE_MISSING", f"{db_path} does not exist"))
    uri = db_path.resolve().as_uri() + "?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, isolation_level=None)
        conn.execute("PRAGMA query_only = ON")
        # One read transaction: the whole check sees a single snapshot even if
        # the service is appending meanwhile.
        conn.execute("BEGIN")
        version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except sqlite3.Error as exc:
        raise _Fatal(Problem("DATABASE_UNREADABLE", f"cannot read {db_path}: {exc}")) from exc
    if version is None or version[0] != str(SCHEMA_VERSION):
        conn.close()
        raise _Fatal(Problem("SCHEMA_VERSION", f"unsupported schema version {version}"))
    return conn


def verify_log(
    db_path: Path,
    public_key: Ed25519PublicKey | str | bytes,
    *,
    origin: str | None = None,
    saved_checkpoints: Sequence[Checkpoint] = (),
    entry_check: EntryCheck | None = None,
    grant_check: EntryCheck | None = None,
    attribute_check: AttributeCheck | None = None,
) -> VerifyReport:
    """Verify the audit log in ``db_path`` (see module docstring); never raises on bad data.

    ``public_key`` is the audit service's Ed25519 key (object or PEM). With
    ``origin``, every checkpoint must carry it. ``entry_check`` failures are
    reported as ENTRY_CHECK_FAILED (tampering), ``grant_check`` failures as
    GRANT_CHAIN_INVALID.
    """
    if isinstance(public_key, Ed25519PublicKey):
        key = public_key
    else:
        try:
            key = load_public_key_pem(public_key)
        except Exception as exc:  # noqa: BLE001 - reported, not raised
            return VerifyReport(0, merkle.EMPTY_ROOT, 0, (Problem("PUBLIC_KEY_INVALID", str(exc)),))
    scan = _Scan(key, origin, saved_checkpoints, entry_check, grant_check, attribute_check)
    try:
        conn = _open_readonly(Path(db_path))
    except _Fatal as fatal:
        return scan.report(fatal.problem)
    try:
        scan.run(conn)
        return scan.report(None)
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
        grant_check: EntryCheck | None,
        attribute_check: AttributeCheck | None,
    ) -> None:
        self.key = key
        self.origin = origin
        self.saved = list(saved)
        self.entry_check = entry_check
        self.grant_check = grant_check
        self.attribute_check = attribute_check
        self.edge: list[_Node] = []  # the tree's right edge, largest subtree first
        self.size = 0  # leaves in the rebuilt tree
        self.stopped_at: int | None = None  # the tree cannot be rebuilt past this record
        self.checked = 0
        self.signed_size = 0
        self.notes: list[str] = []
        self.problems: list[Problem] = []
        self.unlisted = 0
        self.levels: dict[int, _SubtreeLevel] = {}
        self.last_good = 0  # largest size at which a checkpoint matched
        self.root_mismatch: tuple[int, list[int]] | None = None  # size of the first, sizes of later ones

    # -- collecting ---------------------------------------------------------------

    def problem(self, reason: str, detail: str, index: int | None = None, end: int | None = None) -> None:
        if len(self.problems) >= MAX_PROBLEMS:
            self.unlisted += 1
            return
        self.problems.append(Problem(reason, detail, index, end))

    def report(self, fatal: Problem | None) -> VerifyReport:
        problems = list(self.problems)
        if fatal is not None:
            problems.append(fatal)
        if self.unlisted:
            problems.append(Problem("TOO_MANY_PROBLEMS", f"{self.unlisted} more problems were found, not listed"))
        return VerifyReport(
            tree_size=self.size,
            root_hash=merkle.fold_subtrees([n.pure for n in self.edge]),
            checkpoints_checked=self.checked,
            problems=tuple(problems),
            signed_size=self.signed_size,
            notes=tuple(self.notes),
        )

    # -- the scan -------------------------------------------------------------------

    def run(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
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
        self._checkpoints_at(0, due)
        next_idx = 0  # the index the next row should have
        rows = conn.execute(
            "SELECT idx, leaf_hash, entry, execution_id, trace_id, correlation_id, agent_id,"
            " capability_id, tenant_id, recorded_at FROM entries ORDER BY idx"
        )
        for row in rows:
            idx, stored_leaf, entry = row[0], row[1], row[2]
            # SQLite keeps whatever type was written; bytes(42) would silently be 42 zeros.
            if not (type(idx) is int and isinstance(stored_leaf, bytes) and isinstance(entry, bytes)):
                at = idx if type(idx) is int else next_idx
                self.problem("RECORD_MALFORMED", "stored row has wrongly typed columns", at, at + 1)
                self._stop(at)
                next_idx = at + 1
                continue
            if idx != next_idx:
                if idx > next_idx:
                    self.problem("RECORD_MISSING", f"records {next_idx}..{idx - 1} are missing (next stored is {idx})",
                                 next_idx, idx)
                else:
                    self.problem("UNEXPECTED_INDEX", f"a record is stored at index {idx}", idx, idx + 1)
                self._stop(min(idx, next_idx))
            next_idx = max(next_idx, idx + 1)
            leaf = merkle.leaf_hash(entry)
            if leaf != stored_leaf:
                # The bytes are not what was recorded: checks of their content would say nothing.
                self.problem("LEAF_HASH_MISMATCH", "the record's bytes do not hash to its stored leaf hash",
                             idx, idx + 1)
            else:
                self._check("ENTRY_CHECK_FAILED", idx, self.entry_check, idx, entry)
                self._check("GRANT_CHAIN_INVALID", idx, self.grant_check, idx, entry)
                if self.attribute_check is not None:
                    attrs = self._attributes(row[3:], idx)
                    if attrs is not None:
                        self._check("ATTRIBUTES_MISMATCH", idx, self.attribute_check, idx, entry, attrs)
            if self.stopped_at is None:
                self._push(leaf, stored_leaf)
                if self.size in due:
                    self._checkpoints_at(self.size, due)

        end = next_idx
        for (level,) in conn.execute(
            "SELECT DISTINCT level FROM subtrees WHERE level < 1 OR level > ? ORDER BY level",
            (max(int(n_entries).bit_length(), 1),),
        ):
            self.problem("SUBTREE_UNEXPECTED", f"stored subtree rows at level {level}")
        if self.stopped_at is None:
            for level in range(1, max(self.size.bit_length(), 1) + 1):
                self._level(conn, level).leftovers()
        else:
            unchecked = sorted({s for s in due if self.stopped_at < s <= end})
            if unchecked:
                self.notes.append(
                    f"the tree cannot be recomputed past record {self.stopped_at}: the roots of the checkpoints at "
                    f"sizes {', '.join(map(str, unchecked))} were not checked (their signatures were)")
                for s in unchecked:
                    for label, cp in due[s]:
                        self._signature_ok(cp, label)
        beyond = [(label, cp) for s, cps in due.items() if s > end for label, cp in cps]
        if beyond:
            signed = [(label, cp) for label, cp in beyond if self._signature_ok(cp, label)]
            if signed:
                label, cp = max(signed, key=lambda item: item[1].tree_size)
                self.problem(
                    "TRUNCATED",
                    f"{label} covers {cp.tree_size} records but the log holds only {end}: "
                    "the newest records were deleted",
                    end,
                    cp.tree_size,
                )
        self._close_root_mismatch()
        self._check_history(stored)
        self._check_query_index(conn, end)
        if self.stopped_at is None and self.signed_size < self.size:
            self.notes.append(f"records [{self.signed_size}, {self.size}) are not covered by any checkpoint yet")

    def _stop(self, at: int) -> None:
        if self.stopped_at is None:
            self.stopped_at = at

    def _level(self, conn: sqlite3.Connection, level: int) -> _SubtreeLevel:
        reader = self.levels.get(level)
        if reader is None:
            reader = self.levels[level] = _SubtreeLevel(conn, level, self)
        return reader

    def _push(self, leaf: bytes, stored_leaf: bytes) -> None:
        """Adds one leaf to the rebuilt tree, checking each subtree it completes against the stored one."""
        i = self.size
        node = _Node(leaf, frozenset({leaf, stored_leaf}))
        level = 0
        while (i >> level) & 1:
            left = self.edge.pop()
            level += 1
            sidx = i >> level
            lo, hi = sidx << level, (sidx + 1) << level
            pure = merkle.node_hash(left.pure, node.pure)
            combos = {merkle.node_hash(a, b) for a in left.accepted for b in node.accepted}
            stored = self._level(self.conn, level).take(sidx)
            if stored is None:
                accepted = _cap(combos, pure)
            elif stored in combos:
                accepted = frozenset({stored})
            else:
                self.problem(
                    "SUBTREE_HASH_MISMATCH",
                    f"stored hash of the subtree over records [{lo}, {hi}) differs from the "
                    "hash recomputed from those records",
                    lo,
                    hi,
                )
                accepted = _cap(combos | {stored}, stored, pure)
            node = _Node(pure, accepted)
        self.edge.append(node)
        self.size += 1

    def _roots(self) -> set[bytes]:
        """Every root the rebuilt tree may have, given the damage already reported."""
        if not self.edge:
            return {merkle.EMPTY_ROOT}
        acc: set[bytes] = set(self.edge[-1].accepted)
        for node in reversed(self.edge[:-1]):
            acc = set(_cap({merkle.node_hash(h, a) for h in node.accepted for a in acc}))
        return acc

    def _signature_ok(self, cp: Checkpoint, label: str) -> bool:
        try:
            verify_checkpoint(cp, self.key, origin=self.origin)
        except CheckpointInvalidError as exc:
            prefix = "SAVED_" if label.startswith("saved") else ""
            self.problem(prefix + exc.reason, f"{label} (size {cp.tree_size}): {exc}")
            return False
        return True

    def _checkpoints_at(self, size: int, due: dict[int, list[tuple[str, Checkpoint]]]) -> None:
        roots = self._roots()
        prior_good = self.last_good  # the range implicated ends here, whatever matches at this size
        for label, cp in due.get(size, ()):
            if not self._signature_ok(cp, label):
                continue
            if cp.root_hash in roots:
                self.checked += 1
                self.signed_size = max(self.signed_size, size)
                self.last_good = size
                self._close_root_mismatch()
                continue
            if self.root_mismatch is not None:
                # Every root after a rewritten one disagrees too: not a new problem.
                self.root_mismatch[1].append(size)
                continue
            reason = "SAVED_CHECKPOINT_ROOT_MISMATCH" if label.startswith("saved") else "CHECKPOINT_ROOT_MISMATCH"
            root = merkle.fold_subtrees([n.pure for n in self.edge])
            self.problem(
                reason,
                f"{label} signs root {cp.root_hash.hex()} for size {size}, but the records "
                f"hash to {root.hex()}: a record before {size} was changed, removed, "
                "inserted or reordered",
                prior_good,
                size,
            )
            self.root_mismatch = (size, [])

    def _close_root_mismatch(self) -> None:
        if self.root_mismatch is None:
            return
        first, later = self.root_mismatch
        self.root_mismatch = None
        if later:
            sizes = sorted(set(later))
            self.notes.append(
                f"{len(later)} later checkpoint(s), at sizes {sizes[0]}..{sizes[-1]}, disagree with the records "
                f"as well: their roots cover the records already implicated before {first}, so they cannot tell "
                "whether records after it were rewritten together with every hash above them")

    def _check(self, reason: str, idx: int, check: Callable[..., str | None] | None, *args: object) -> None:
        if check is None:
            return
        try:
            error = check(*args)
        except Exception as exc:  # noqa: BLE001 - a crashing check is a failed check
            error = f"check raised {exc!r}"
        if error is not None:
            self.problem(reason, error, idx, idx + 1)

    def _attributes(self, values: Sequence[object], idx: int) -> IndexAttributes | None:
        try:
            return IndexAttributes(*values)  # type: ignore[arg-type]
        except Exception as exc:  # noqa: BLE001
            self.problem("ATTRIBUTES_INVALID", f"stored query attributes are malformed: {exc}", idx, idx + 1)
            return None

    def _check_query_index(self, conn: sqlite3.Connection, size: int) -> None:
        # Not part of the Merkle proofs, but QueryRecords reads it: a dropped row
        # would hide a record from a query, an extra one would misfile it.
        row = conn.execute("SELECT value FROM meta WHERE key = 'indexed_size'").fetchone()
        try:
            watermark = int(row[0]) if row is not None else 0
        except (TypeError, ValueError):
            watermark = -1
        if not 0 <= watermark <= size:
            self.problem("QUERY_INDEX_MISMATCH", f"query index watermark {row[0] if row else None!r} is invalid")
            return
        derived = _derived_index_sql()
        differing = conn.execute(
            f"SELECT idx FROM ({derived} EXCEPT SELECT kind, value, idx FROM attr_index)"
            f" UNION SELECT idx FROM (SELECT kind, value, idx FROM attr_index EXCEPT SELECT * FROM ({derived}))"
            " ORDER BY idx",
            {"w": watermark},
        )
        for (idx,) in differing:
            self.problem(
                "QUERY_INDEX_MISMATCH",
                f"the query index disagrees with record {idx}'s stored attributes: queries would hide or misfile it",
                int(idx),
                int(idx) + 1,
            )

    def _check_history(self, stored: list[tuple[int, Checkpoint]]) -> None:
        for (id_a, a), (id_b, b) in zip(stored, stored[1:], strict=False):
            if b.tree_size < a.tree_size or b.timestamp_micros < a.timestamp_micros:
                self.problem(
                    "CHECKPOINT_ORDER",
                    f"stored checkpoint #{id_b} (size {b.tree_size}) goes back behind #{id_a} (size {a.tree_size})",
                )


def _derived_index_sql() -> str:
    return " UNION ALL ".join(
        f"SELECT {kind} AS kind, {column} AS value, idx FROM entries WHERE {column} IS NOT NULL AND idx < :w"
        for kind, column in enumerate(INDEX_KINDS)
    )
