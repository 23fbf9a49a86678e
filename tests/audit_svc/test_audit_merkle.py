"""RFC 9162 hashing, proofs and verification against independent references.

Two independent references: (1) a direct transcription of the RFC's recursive
definitions MTH / PATH / SUBPROOF, written here without touching the code under
test, and (2) the Certificate Transparency test vectors (literal hex) over the
eight classic leaves.
"""

from __future__ import annotations

import functools
import hashlib

import pytest

from audit_svc import merkle
from audit_svc.errors import InvalidArgumentError

# --------------------------------------------------------------- reference (RFC 9162 §2.1)


def _sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def ref_mth(d: list[bytes]) -> bytes:
    """MTH(D[n]) exactly as RFC 9162 §2.1.1 defines it, over raw entries."""
    return _ref_mth(tuple(d))


@functools.cache
def _ref_mth(d: tuple[bytes, ...]) -> bytes:
    # Memoised only to keep the exhaustive sweep fast; the recursion is the RFC's.
    n = len(d)
    if n == 0:
        return _sha(b"")
    if n == 1:
        return _sha(b"\x00" + d[0])
    k = 1
    while k * 2 < n:
        k *= 2
    return _sha(b"\x01" + _ref_mth(d[:k]) + _ref_mth(d[k:]))


def ref_path(m: int, d: list[bytes]) -> list[bytes]:
    """PATH(m, D[n]) from RFC 9162 §2.1.3.1."""
    n = len(d)
    if n == 1:
        return []
    k = 1
    while k * 2 < n:
        k *= 2
    if m < k:
        return ref_path(m, d[:k]) + [ref_mth(d[k:])]
    return ref_path(m - k, d[k:]) + [ref_mth(d[:k])]


def ref_subproof(m: int, d: list[bytes], b: bool) -> list[bytes]:
    """SUBPROOF(m, D[n], b) from RFC 9162 §2.1.4.1."""
    n = len(d)
    if m == n:
        return [] if b else [ref_mth(d)]
    k = 1
    while k * 2 < n:
        k *= 2
    if m <= k:
        return ref_subproof(m, d[:k], b) + [ref_mth(d[k:])]
    return ref_subproof(m - k, d[k:], False) + [ref_mth(d[:k])]


def ref_proof(m: int, d: list[bytes]) -> list[bytes]:
    """PROOF(m, D[n]) = SUBPROOF(m, D[n], true) for 0 < m < n."""
    return ref_subproof(m, d, True)


# --------------------------------------------------------------- CT vectors

CT_LEAVES = [
    bytes.fromhex(h)
    for h in (
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    )
]

CT_ROOTS = [
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]

# (leaf index, tree size) -> audit path
CT_INCLUSION = {
    (0, 1): [],
    (0, 8): [
        "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
        "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
        "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
    ],
    (5, 8): [
        "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    ],
    (2, 3): ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"],
    (1, 5): [
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
        "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
    ],
}

# (first size, second size) -> consistency proof
CT_CONSISTENCY = {
    (1, 1): [],
    (1, 8): [
        "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
        "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
        "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
    ],
    (6, 8): [
        "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
        "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    ],
    (2, 5): [
        "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
        "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
    ],
}


def _hx(values: list[str]) -> list[bytes]:
    return [bytes.fromhex(v) for v in values]


CT_HASHES = [merkle.leaf_hash(e) for e in CT_LEAVES]

# 70 distinct entries for the exhaustive sweep.
ENTRIES = [b"entry-%d" % i for i in range(70)]
HASHES = [merkle.leaf_hash(e) for e in ENTRIES]


# --------------------------------------------------------------- CT vectors


def test_hashing_primitives_match_the_rfc_prefixes() -> None:
    assert merkle.EMPTY_ROOT.hex() == CT_ROOTS[0]
    assert merkle.leaf_hash(b"\x00").hex() == ("96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7")
    assert merkle.node_hash(b"a" * 32, b"b" * 32) == _sha(b"\x01" + b"a" * 32 + b"b" * 32)


@pytest.mark.parametrize("size", range(len(CT_ROOTS)))
def test_roots_match_ct_vectors(size: int) -> None:
    assert merkle.root(CT_HASHES[:size]).hex() == CT_ROOTS[size]
    assert ref_mth(CT_LEAVES[:size]).hex() == CT_ROOTS[size]


@pytest.mark.parametrize(("index", "size"), sorted(CT_INCLUSION))
def test_inclusion_proofs_match_ct_vectors(index: int, size: int) -> None:
    want = _hx(CT_INCLUSION[(index, size)])
    assert merkle.inclusion_proof(CT_HASHES[:size], index) == want
    assert merkle.verify_inclusion(index, size, CT_HASHES[index], want, bytes.fromhex(CT_ROOTS[size]))


@pytest.mark.parametrize(("first", "second"), sorted(CT_CONSISTENCY))
def test_consistency_proofs_match_ct_vectors(first: int, second: int) -> None:
    want = _hx(CT_CONSISTENCY[(first, second)])
    assert merkle.consistency_proof(CT_HASHES[:second], first) == want
    assert merkle.verify_consistency(
        first, second, want, bytes.fromhex(CT_ROOTS[first]), bytes.fromhex(CT_ROOTS[second])
    )


# --------------------------------------------------------------- exhaustive vs reference


@pytest.mark.parametrize("size", range(0, 71))
def test_root_matches_reference_for_every_size(size: int) -> None:
    assert merkle.root(HASHES[:size]) == ref_mth(ENTRIES[:size])


@pytest.mark.parametrize("size", range(1, 71))
def test_every_inclusion_proof_matches_reference_and_verifies(size: int) -> None:
    root = ref_mth(ENTRIES[:size])
    for index in range(size):
        proof = merkle.inclusion_proof(HASHES[:size], index)
        assert proof == ref_path(index, ENTRIES[:size]), (index, size)
        assert merkle.verify_inclusion(index, size, HASHES[index], proof, root)
        # The same proof must not vouch for a neighbour or another size.
        other = (index + 1) % size
        if other != index:
            assert not merkle.verify_inclusion(other, size, HASHES[index], proof, root)
            assert not merkle.verify_inclusion(index, size, HASHES[other], proof, root)
        # A claimed size whose tree is deeper needs a longer path. (Sizes with
        # the same path shape are legitimately indistinguishable: the root binds them.)
        assert not merkle.verify_inclusion(index, size * 4, HASHES[index], proof, root)


@pytest.mark.parametrize("second", range(1, 71))
def test_every_consistency_proof_matches_reference_and_verifies(second: int) -> None:
    second_root = ref_mth(ENTRIES[:second])
    for first in range(1, second + 1):
        proof = merkle.consistency_proof(HASHES[:second], first)
        first_root = ref_mth(ENTRIES[:first])
        if first < second:
            assert proof == ref_proof(first, ENTRIES[:second]), (first, second)
        else:
            assert proof == []
        assert merkle.verify_consistency(first, second, proof, first_root, second_root)
        # A different old root (a rewritten history) must not verify.
        forged = ref_mth([b"forged"] + ENTRIES[1:first])
        assert not merkle.verify_consistency(first, second, proof, forged, second_root)


def test_ranges_of_proofs_name_rfc_nodes() -> None:
    for size in range(1, 40):
        for index in range(size):
            ranges = merkle.inclusion_proof_ranges(index, size)
            assert [ref_mth(ENTRIES[lo:hi]) for lo, hi in ranges] == ref_path(index, ENTRIES[:size])
            for lo, hi in ranges:
                subtrees = merkle.perfect_subtrees(lo, hi)
                hashes = [ref_mth(ENTRIES[i << lvl : (i + 1) << lvl]) for lvl, i in subtrees]
                assert merkle.fold_subtrees(hashes) == ref_mth(ENTRIES[lo:hi])


# --------------------------------------------------------------- failure paths


def _valid_inclusion() -> tuple[int, int, bytes, list[bytes], bytes]:
    size, index = 13, 6
    return index, size, HASHES[index], merkle.inclusion_proof(HASHES[:size], index), (merkle.root(HASHES[:size]))


def test_verify_inclusion_rejects_malformed_input() -> None:
    index, size, leaf, proof, root = _valid_inclusion()
    assert merkle.verify_inclusion(index, size, leaf, proof, root)
    assert not merkle.verify_inclusion(index, size, leaf, proof[:-1], root)  # too short
    assert not merkle.verify_inclusion(index, size, leaf, [*proof, proof[0]], root)  # too long
    assert not merkle.verify_inclusion(index, size, leaf, proof[::-1], root)  # reordered
    assert not merkle.verify_inclusion(index, size, leaf, [proof[0][:31], *proof[1:]], root)
    flipped = bytes([proof[1][0] ^ 1]) + proof[1][1:]
    assert not merkle.verify_inclusion(index, size, leaf, [proof[0], flipped, *proof[2:]], root)
    assert not merkle.verify_inclusion(index, size, leaf, proof, root[:31])
    assert not merkle.verify_inclusion(size, size, leaf, proof, root)  # index out of range
    assert not merkle.verify_inclusion(-1, size, leaf, proof, root)
    assert not merkle.verify_inclusion(0, 0, leaf, [], merkle.EMPTY_ROOT)
    assert not merkle.verify_inclusion(index, size, leaf, [b"\x00" * 32] * 100, root)


def test_verify_consistency_rejects_malformed_input() -> None:
    first, second = 6, 13
    proof = merkle.consistency_proof(HASHES[:second], first)
    r1, r2 = merkle.root(HASHES[:first]), merkle.root(HASHES[:second])
    assert merkle.verify_consistency(first, second, proof, r1, r2)
    assert not merkle.verify_consistency(first, second, [], r1, r2)
    assert not merkle.verify_consistency(first, second, proof[:-1], r1, r2)
    assert not merkle.verify_consistency(first, second, [*proof, proof[0]], r1, r2)
    assert not merkle.verify_consistency(first, second, proof, r2, r1)
    assert not merkle.verify_consistency(second, first, proof, r2, r1)
    assert not merkle.verify_consistency(first, second * 4, proof, r1, r2)
    # Equal sizes: empty proof and equal roots only.
    assert merkle.verify_consistency(5, 5, [], r1, r1)
    assert not merkle.verify_consistency(5, 5, [], r1, r2)
    assert not merkle.verify_consistency(5, 5, [r1], r1, r1)
    # From the empty tree: empty proof and the empty root only.
    assert merkle.verify_consistency(0, second, [], merkle.EMPTY_ROOT, r2)
    assert not merkle.verify_consistency(0, second, [], r1, r2)
    assert not merkle.verify_consistency(0, second, [r1], merkle.EMPTY_ROOT, r2)


def test_proof_construction_rejects_bad_ranges() -> None:
    with pytest.raises(InvalidArgumentError) as exc:
        merkle.inclusion_proof_ranges(5, 5)
    assert exc.value.reason == "LEAF_INDEX"
    with pytest.raises(InvalidArgumentError) as exc:
        merkle.inclusion_proof_ranges(0, -1)
    assert exc.value.reason == "TREE_SIZE"
    with pytest.raises(InvalidArgumentError) as exc:
        merkle.consistency_proof_ranges(6, 5)
    assert exc.value.reason == "FIRST_TREE_SIZE"
    with pytest.raises(InvalidArgumentError) as exc:
        merkle.consistency_proof_ranges(-1, 5)
    assert exc.value.reason == "FIRST_TREE_SIZE"
    with pytest.raises(InvalidArgumentError):
        merkle.perfect_subtrees(3, 2)


def test_compact_range_reports_completed_subtrees_and_resumes() -> None:
    cr = merkle.CompactRange()
    completed: list[tuple[int, int, bytes]] = []
    for h in HASHES[:11]:
        completed.extend(cr.append(h))
    ids = sorted((level, idx) for level, idx, _ in completed)
    # Every complete perfect subtree of level >= 1 in an 11-leaf tree, once.
    assert ids == sorted((level, idx) for level in range(1, 4) for idx in range(11 >> level))
    for level, idx, h in completed:
        assert h == ref_mth(ENTRIES[idx << level : (idx + 1) << level])
    resumed = merkle.CompactRange(cr.size, cr.hashes)
    for h in HASHES[11:30]:
        resumed.append(h)
        cr.append(h)
    assert resumed.root() == cr.root() == ref_mth(ENTRIES[:30])
    with pytest.raises(InvalidArgumentError):
        merkle.CompactRange(3, [HASHES[0]])
    with pytest.raises(InvalidArgumentError):
        cr.append(b"short")
