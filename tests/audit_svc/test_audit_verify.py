"""Offline verification: every tampering with the SQLite file is detected and located."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from audit_svc import merkle
from audit_svc.checkpoints import Checkpoint, CheckpointSigner
from audit_svc.log_store import AuditLog, AuditLogConfig, IndexAttributes
from audit_svc.verify import VerifyReport, load_saved_checkpoint, verify_log

N = 40


def record(index: int, body: str = "payload") -> bytes:
    """A toy entry that embeds its own index, like an AuditRecord does."""
    return f"record index={index} tenant=acme {body}".encode()


def index_matches(index: int, entry: bytes) -> str | None:
    """The lead's per-entry check, in miniature: the embedded index equals the position."""
    claimed = int(entry.split(b" ")[1].split(b"=")[1])
    return None if claimed == index else f"record claims index {claimed}"


def tenant_matches(index: int, entry: bytes, attrs: IndexAttributes) -> str | None:
    claimed = entry.split(b" ")[2].split(b"=")[1].decode()
    return None if attrs.tenant_id == claimed else f"indexed tenant {attrs.tenant_id!r}"


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory, signer: CheckpointSigner) -> tuple[Path, Checkpoint]:
    """A closed log of N records with checkpoints every 10, and the checkpoint a user saved."""
    path = tmp_path_factory.mktemp("template") / "audit.db"
    log = AuditLog.open(path, signer=signer, config=AuditLogConfig(checkpoint_every_entries=10))
    for _ in range(N):
        log.append(record, IndexAttributes(tenant_id="acme"))
    saved = log.checkpoint()
    log.close()
    assert not path.with_name("audit.db-wal").exists()  # closed cleanly: one self-contained file
    return path, saved


@pytest.fixture
def built(tmp_path: Path, template: tuple[Path, Checkpoint]) -> tuple[Path, Checkpoint]:
    """A private copy of the template log for one test to tamper with."""
    source, saved = template
    path = tmp_path / "data" / "audit.db"
    path.parent.mkdir()
    shutil.copyfile(source, path)
    (tmp_path / "saved.json").write_text(saved.to_json())
    return path, saved


def check(
    path: Path,
    signer: CheckpointSigner,
    saved: Checkpoint | None = None,
    *,
    with_entry_check: bool = True,
) -> VerifyReport:
    return verify_log(
        path,
        signer.public_key_pem(),
        origin=signer.origin,
        saved_checkpoints=[saved] if saved is not None else [],
        entry_check=index_matches if with_entry_check else None,
    )


def assert_fails(report: VerifyReport, reason: str, index: int, end: int | None = None) -> None:
    assert not report.ok
    assert report.problem is not None
    assert report.problem.reason == reason, report.summary()
    assert report.problem.index == index, report.summary()
    assert report.problem.end_index == (index + 1 if end is None else end), report.summary()
    assert report.summary().startswith(f"FAIL {reason}")


def sql(path: Path, *statements: str) -> None:
    """Tamper with the file directly, as an attacker with disk access would."""
    db = sqlite3.connect(path)
    try:
        for statement in statements:
            db.execute(statement)
        db.commit()
    finally:
        db.close()


def rehash_everything(path: Path) -> None:
    """A careful attacker: recompute leaf hashes and all subtree hashes to match the entries."""
    db = sqlite3.connect(path)
    try:
        rows = db.execute("SELECT idx, entry FROM entries ORDER BY idx").fetchall()
        cr = merkle.CompactRange()
        db.execute("DELETE FROM subtrees")
        for idx, entry in rows:
            leaf = merkle.leaf_hash(bytes(entry))
            db.execute("UPDATE entries SET leaf_hash = ? WHERE idx = ?", (leaf, idx))
            db.executemany("INSERT INTO subtrees VALUES (?, ?, ?)", cr.append(leaf))
        db.commit()
    finally:
        db.close()


# --------------------------------------------------------------- untouched


def test_an_untouched_log_verifies(built: tuple[Path, Checkpoint], signer: CheckpointSigner) -> None:
    path, saved = built
    report = verify_log(
        path,
        signer.public_key,
        origin=signer.origin,
        saved_checkpoints=[load_saved_checkpoint(path.parent.parent / "saved.json")],
        entry_check=index_matches,
        attribute_check=tenant_matches,
    )
    assert report.ok, report.summary()
    assert report.tree_size == N and report.signed_size == N
    assert report.root_hash == saved.root_hash == merkle.root(merkle.leaf_hash(record(i)) for i in range(N))
    # Stored checkpoints at 1, 11, 21, 31 and N, plus the saved one.
    assert report.checkpoints_checked == 6
    assert report.summary().startswith(f"OK: {N} records")


def test_a_log_being_appended_to_verifies_from_a_snapshot(tmp_path: Path, signer: CheckpointSigner) -> None:
    path = tmp_path / "audit.db"
    log = AuditLog.open(path, signer=signer)
    try:
        log.append_many([record] * 25)
        report = check(path, signer)
        assert report.ok, report.summary()
        assert report.tree_size == 25
        log.append_many([record] * 3)  # no checkpoint due: an unsigned tail
        report = check(path, signer)
        assert report.ok and report.tree_size == 28 and report.signed_size == 25
        assert "not covered by any checkpoint" in report.notes[0]
    finally:
        log.close()


# --------------------------------------------------------------- the five tamperings


def test_changed_byte_in_a_record(built: tuple[Path, Checkpoint], signer: CheckpointSigner) -> None:
    path, saved = built
    sql(path, "UPDATE entries SET entry = CAST(replace(entry, 'payload', 'pAyload') AS BLOB) WHERE idx = 17")
    assert_fails(check(path, signer, saved), "LEAF_HASH_MISMATCH", 17)


def test_changed_record_with_its_leaf_hash_recomputed(built: tuple[Path, Checkpoint], signer: CheckpointSigner) -> None:
    path, saved = built
    forged = record(17, "pAyload")
    sql(
        path,
        f"UPDATE entries SET entry = x'{forged.hex()}', leaf_hash = x'{merkle.leaf_hash(forged).hex()}' WHERE idx = 17",
    )
    # The stored subtree over records 16..17 no longer matches.
    assert_fails(check(path, signer, saved), "SUBTREE_HASH_MISMATCH", 16, 18)


def test_changed_record_with_every_hash_recomputed(built: tuple[Path, Checkpoint], signer: CheckpointSigner) -> None:
    path, saved = built
    forged = record(17, "pAyload")
    sql(path, f"UPDATE entries SET entry = x'{forged.hex()}' WHERE idx = 17")
    rehash_everything(path)
    # Only the signed checkpoints still remember: the one at 11 matches, the one at 21 not.
    assert_fails(check(path, signer, saved), "CHECKPOINT_ROOT_MISMATCH", 11, 21)


def test_deleted_record_in_the_middle(built: tuple[Path, Checkpoint], signer: CheckpointSigner) -> None:
    path, saved = built
    sql(path, "DELETE FROM entries WHERE idx = 20")
    assert_fails(check(path, signer, saved), "RECORD_MISSING", 20)


def test_deleted_record_with_later_ones_renumbered(built: tuple[Path, Checkpoint], signer: CheckpointSigner) -> None:
    path, saved = built
    sql(
        path,
        "DELETE FROM entries WHERE idx = 20",
        "UPDATE entries SET idx = -(idx - 1) WHERE idx > 20",
        "UPDATE entries SET idx = -idx WHERE idx < 0",
    )
    rehash_everything(path)
    # The record now at 20 says it is 21.
    assert_fails(check(path, signer, saved), "ENTRY_CHECK_FAILED", 20)
    # Without the per-record check, the signed checkpoint at 21 catches it.
    assert_fails(check(path, signer, saved, with_entry_check=False), "CHECKPOINT_ROOT_MISMATCH", 11, 21)


def test_newest_records_deleted_with_their_checkpoints(
    built: tuple[Path, Checkpoint], signer: CheckpointSigner
) -> None:
    path, saved = built
    sql(
        path,
        "DELETE FROM entries WHERE idx >= 33",
        "DELETE FROM subtrees WHERE ((idx + 1) << level) > 33",
        "DELETE FROM checkpoints WHERE tree_size > 33",
    )
    # The query index still remembers 40 records ...
    assert check(path, signer).problem.reason == "QUERY_INDEX_MISMATCH"  # type: ignore[union-attr]
    sql(path, "DELETE FROM attr_index WHERE idx >= 33", "UPDATE meta SET value = '33' WHERE key = 'indexed_size'")
    # ... without it, and without the saved checkpoint, the log looks like a shorter, valid log ...
    assert check(path, signer).ok
    # ... the user's saved checkpoint proves records 33..39 existed.
    assert_fails(check(path, signer, saved), "TRUNCATED", 33, N)


def test_newest_records_deleted_but_stored_checkpoint_left(
    built: tuple[Path, Checkpoint], signer: CheckpointSigner
) -> None:
    path, _ = built
    sql(
        path,
        "DELETE FROM entries WHERE idx >= 33",
        "DELETE FROM subtrees WHERE ((idx + 1) << level) > 33",
    )
    assert_fails(check(path, signer), "TRUNCATED", 33, N)


def test_newest_records_replaced_by_others(built: tuple[Path, Checkpoint], signer: CheckpointSigner) -> None:
    path, saved = built
    sql(
        path,
        "DELETE FROM entries WHERE idx >= 33",
        "DELETE FROM subtrees WHERE ((idx + 1) << level) > 33",
        "DELETE FROM checkpoints WHERE tree_size > 33",
    )
    # Rewritten by the real service code, even signed with the real key.
    log = AuditLog.open(path, signer=signer)
    log.append_many([lambda i: record(i, "rewritten")] * (N - 33))
    log.close()
    assert check(path, signer).ok  # self-consistent ...
    # ... but not the history the user saw.
    assert_fails(check(path, signer, saved), "SAVED_CHECKPOINT_ROOT_MISMATCH", 31, N)


def test_two_records_swapped(built: tuple[Path, Checkpoint], signer: CheckpointSigner) -> None:
    path, saved = built
    swap = (
        "UPDATE entries SET entry = (SELECT entry FROM entries WHERE idx = {b}),"
        " leaf_hash = (SELECT leaf_hash FROM entries WHERE idx = {b}) WHERE idx = {a}"
    )
    sql(
        path,
        "CREATE TEMP TABLE keep AS SELECT * FROM entries WHERE idx = 12",
        swap.format(a=12, b=13),
        "UPDATE entries SET entry = (SELECT entry FROM keep), leaf_hash = (SELECT leaf_hash FROM keep) WHERE idx = 13",
    )
    assert_fails(check(path, signer, saved), "ENTRY_CHECK_FAILED", 12)
    assert_fails(check(path, signer, saved, with_entry_check=False), "SUBTREE_HASH_MISMATCH", 12, 14)
    rehash_everything(path)
    assert_fails(check(path, signer, saved, with_entry_check=False), "CHECKPOINT_ROOT_MISMATCH", 11, 21)


def test_swapped_bytes_only(built: tuple[Path, Checkpoint], signer: CheckpointSigner) -> None:
    path, saved = built
    sql(
        path,
        "CREATE TEMP TABLE keep AS SELECT * FROM entries WHERE idx = 5",
        "UPDATE entries SET entry = (SELECT entry FROM entries WHERE idx = 9) WHERE idx = 5",
        "UPDATE entries SET entry = (SELECT entry FROM keep) WHERE idx = 9",
    )
    assert_fails(check(path, signer, saved), "LEAF_HASH_MISMATCH", 5)


def test_record_inserted(built: tuple[Path, Checkpoint], signer: CheckpointSigner) -> None:
    path, saved = built
    forged = record(25, "inserted")
    sql(
        path,
        "UPDATE entries SET idx = -(idx + 1) WHERE idx >= 25",
        "UPDATE entries SET idx = -idx WHERE idx < 0",
        "INSERT INTO entries (idx, leaf_hash, entry) VALUES"
        f" (25, x'{merkle.leaf_hash(forged).hex()}', x'{forged.hex()}')",
    )
    # The subtree over records 24..25 completes with the forged leaf and disagrees.
    assert_fails(check(path, signer, saved), "SUBTREE_HASH_MISMATCH", 24, 26)
    rehash_everything(path)
    # Hashes made to match: the displaced record 25 (now at 26) gives it away.
    assert_fails(check(path, signer, saved), "ENTRY_CHECK_FAILED", 26)
    assert_fails(check(path, signer, saved, with_entry_check=False), "CHECKPOINT_ROOT_MISMATCH", 21, 31)


# --------------------------------------------------------------- other damage


def test_altered_subtree_row(built: tuple[Path, Checkpoint], signer: CheckpointSigner) -> None:
    path, saved = built
    sql(path, "UPDATE subtrees SET hash = zeroblob(32) WHERE level = 3 AND idx = 2")
    assert_fails(check(path, signer, saved), "SUBTREE_HASH_MISMATCH", 16, 24)


def test_missing_and_extra_subtree_rows(built: tuple[Path, Checkpoint], signer: CheckpointSigner) -> None:
    path, saved = built
    sql(path, "DELETE FROM subtrees WHERE level = 1 AND idx = 4")
    assert_fails(check(path, signer, saved), "SUBTREE_MISSING", 8, 10)
    restored = merkle.node_hash(merkle.leaf_hash(record(8)), merkle.leaf_hash(record(9)))
    sql(path, f"INSERT INTO subtrees VALUES (1, 4, x'{restored.hex()}')")
    assert check(path, signer, saved).ok
    sql(path, "INSERT INTO subtrees VALUES (2, 10, zeroblob(32))")  # would cover 40..43
    assert_fails(check(path, signer, saved), "SUBTREE_UNEXPECTED", 40, 44)


def test_forged_checkpoint_signature(built: tuple[Path, Checkpoint], signer: CheckpointSigner) -> None:
    path, saved = built
    sql(path, "UPDATE checkpoints SET tree_size = 12 WHERE tree_size = 11")
    report = check(path, signer, saved)
    assert report.problem is not None and report.problem.reason == "CHECKPOINT_SIGNATURE"


def test_checkpoints_out_of_order(built: tuple[Path, Checkpoint], signer: CheckpointSigner) -> None:
    path, saved = built
    sql(
        path,
        "UPDATE checkpoints SET id = -id WHERE tree_size IN (11, 21)",
        "UPDATE checkpoints SET id = 2 WHERE id = -3",
        "UPDATE checkpoints SET id = 3 WHERE id = -2",
    )
    report = check(path, signer, saved)
    assert report.problem is not None and report.problem.reason == "CHECKPOINT_ORDER"


def test_wrong_public_key_or_foreign_saved_checkpoint(built: tuple[Path, Checkpoint], signer: CheckpointSigner) -> None:
    path, saved = built
    other = CheckpointSigner(Ed25519PrivateKey.generate(), signer.origin)
    report = verify_log(path, other.public_key_pem())
    assert report.problem is not None and report.problem.reason == "CHECKPOINT_KEY_ID"
    foreign = other.sign(saved.tree_size, saved.root_hash, saved.timestamp_micros)
    report = check(path, signer, foreign)
    assert report.problem is not None and report.problem.reason == "SAVED_CHECKPOINT_KEY_ID"
    report = verify_log(path, signer.public_key, origin="another.log")
    assert report.problem is not None and report.problem.reason == "CHECKPOINT_ORIGIN"


def test_tampered_query_attributes(built: tuple[Path, Checkpoint], signer: CheckpointSigner) -> None:
    path, _ = built
    # Hiding a record from tenant-scoped queries does not touch the Merkle leaf ...
    sql(path, "UPDATE entries SET tenant_id = 'globex' WHERE idx = 9")
    # ... but the query index no longer agrees with the record's columns ...
    assert_fails(verify_log(path, signer.public_key), "QUERY_INDEX_MISMATCH", 9)
    sql(path, "UPDATE attr_index SET value = 'globex' WHERE idx = 9 AND value = 'acme'")
    assert verify_log(path, signer.public_key).ok
    # ... and with both changed, the attribute check against the record is what catches it.
    report = verify_log(path, signer.public_key, attribute_check=tenant_matches)
    assert_fails(report, "ATTRIBUTES_MISMATCH", 9)
    # A dropped index row hides a record from queries: caught too.
    sql(path, "DELETE FROM attr_index WHERE idx = 12")
    assert_fails(verify_log(path, signer.public_key), "QUERY_INDEX_MISMATCH", 12)


def test_a_crashing_entry_check_fails_closed(built: tuple[Path, Checkpoint], signer: CheckpointSigner) -> None:
    path, _ = built

    def explode(index: int, entry: bytes) -> str | None:
        raise ValueError("cannot decode")

    report = verify_log(path, signer.public_key, entry_check=explode)
    assert_fails(report, "ENTRY_CHECK_FAILED", 0)
    assert "cannot decode" in report.problem.detail  # type: ignore[union-attr]


def test_missing_database_and_bad_key(tmp_path: Path, signer: CheckpointSigner) -> None:
    report = verify_log(tmp_path / "nope.db", signer.public_key)
    assert report.problem is not None and report.problem.reason == "DATABASE_MISSING"
    (tmp_path / "junk.db").write_bytes(b"not sqlite at all" * 100)
    report = verify_log(tmp_path / "junk.db", signer.public_key)
    assert report.problem is not None and report.problem.reason == "DATABASE_UNREADABLE"
    report = verify_log(tmp_path / "nope.db", "not a pem")
    assert report.problem is not None and report.problem.reason == "PUBLIC_KEY_INVALID"


def test_malformed_row(built: tuple[Path, Checkpoint], signer: CheckpointSigner) -> None:
    path, saved = built
    sql(path, "UPDATE entries SET entry = 'text, not a blob' WHERE idx = 6")
    assert_fails(check(path, signer, saved), "RECORD_MALFORMED", 6)


# --------------------------------------------------------------- every problem, not just the first


def grant_ok(index: int, entry: bytes) -> str | None:
    """A toy delegation-chain check: an entry saying ``forged-grant`` carries a chain that does not verify."""
    return "its delegation chain does not verify" if b"forged-grant" in entry else None


def test_two_tampered_records_are_both_reported(built: tuple[Path, Checkpoint], signer: CheckpointSigner) -> None:
    path, saved = built
    for idx in (5, 30):
        sql(path, f"UPDATE entries SET entry = CAST(replace(entry, 'payload', 'pAyload') AS BLOB) WHERE idx = {idx}")
    report = check(path, signer, saved)
    assert [(p.reason, p.index, p.kind) for p in report.problems] == [
        ("LEAF_HASH_MISMATCH", 5, "tampering"), ("LEAF_HASH_MISMATCH", 30, "tampering")]
    assert report.summary().startswith("FAIL LEAF_HASH_MISMATCH at record 5") and "1 more problem" in report.summary()


def test_a_bad_grant_chain_does_not_hide_a_later_tamper(tmp_path: Path, signer: CheckpointSigner) -> None:
    path = tmp_path / "audit.db"
    log = AuditLog.open(path, signer=signer, config=AuditLogConfig(checkpoint_every_entries=10))
    for i in range(N):
        log.append(lambda idx, i=i: record(idx, "forged-grant" if i == 7 else "payload"),
                   IndexAttributes(tenant_id="acme"))
    log.close()
    forged = record(25, "pAyload")  # a careful tamper: leaf and subtree hashes made to match
    sql(path, f"UPDATE entries SET entry = x'{forged.hex()}' WHERE idx = 25")
    rehash_everything(path)
    report = verify_log(path, signer.public_key, origin=signer.origin, entry_check=index_matches,
                        grant_check=grant_ok)
    assert [(p.reason, p.index, p.end_index, p.kind) for p in report.problems] == [
        ("GRANT_CHAIN_INVALID", 7, 8, "grant_chain"),
        ("CHECKPOINT_ROOT_MISMATCH", 21, 31, "tampering"),
    ]
    assert report.count("grant_chain") == 1 and report.count("tampering") == 1
    assert any("later checkpoint" in note for note in report.notes)


def test_one_change_is_reported_once_not_at_every_level_above_it(built: tuple[Path, Checkpoint],
                                                                 signer: CheckpointSigner) -> None:
    path, saved = built
    # A changed subtree row, a record rewritten with its leaf hash, and a changed byte elsewhere.
    sql(path, "UPDATE subtrees SET hash = zeroblob(32) WHERE level = 3 AND idx = 0")
    forged = record(17, "pAyload")
    sql(path, f"UPDATE entries SET entry = x'{forged.hex()}', leaf_hash = x'{merkle.leaf_hash(forged).hex()}'"
              " WHERE idx = 17")
    sql(path, "UPDATE entries SET entry = CAST(replace(entry, 'payload', 'pAyload') AS BLOB) WHERE idx = 33")
    report = check(path, signer, saved)
    assert [(p.reason, p.index, p.end_index) for p in report.problems] == [
        ("SUBTREE_HASH_MISMATCH", 0, 8), ("SUBTREE_HASH_MISMATCH", 16, 18), ("LEAF_HASH_MISMATCH", 33, 34)]
    assert report.checkpoints_checked == 6  # every signed root still matches the undamaged hashes


def test_after_a_gap_the_records_are_still_checked(built: tuple[Path, Checkpoint], signer: CheckpointSigner) -> None:
    path, saved = built
    sql(path, "DELETE FROM entries WHERE idx = 20",
        "UPDATE entries SET entry = CAST(replace(entry, 'payload', 'pAyload') AS BLOB) WHERE idx = 33")
    report = check(path, signer, saved)
    assert [(p.reason, p.index) for p in report.problems] == [
        ("RECORD_MISSING", 20), ("LEAF_HASH_MISMATCH", 33), ("QUERY_INDEX_MISMATCH", 20)]
    assert any("cannot be recomputed past record 20" in note for note in report.notes)
