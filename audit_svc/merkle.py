"""RFC 9162 (Certificate Transparency v2) Merkle tree hashing, as pure functions.

    leaf hash  = SHA-256(0x00 || entry)
    node hash  = SHA-256(0x01 || left || right)
    MTH(D[n])  = node(MTH(D[0:k]), MTH(D[k:n])), k the largest power of two < n
    MTH([])    = SHA-256("")

Proofs are described twice: as the *ranges* of leaves whose subtree hashes make
up the proof (``inclusion_proof_ranges``, ``consistency_proof_ranges``) and as
concrete hashes over an in-memory list of leaf hashes. Every range a proof
needs is a node of the RFC tree, and every such node is the right fold of at
most log2(n) *perfect* (complete, aligned, power-of-two sized) subtrees
(``perfect_subtrees``). A store that keeps the hashes of perfect subtrees can
therefore answer any root or proof, at any tree size, in O(log n) lookups;
``log_store`` does exactly that.

Verification follows RFC 9162 §2.1.3.2 (inclusion) and §2.1.4.2 (consistency)
step by step, and fails closed: any malformed input yields ``False``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence

from audit_svc.errors import InvalidArgumentError

__all__ = [
    "EMPTY_ROOT",
    "HASH_SIZE",
    "MAX_TREE_SIZE",
    "CompactRange",
    "consistency_proof",
    "consistency_proof_from",
    "consistency_proof_ranges",
    "fold_subtrees",
    "inclusion_proof",
    "inclusion_proof_from",
    "inclusion_proof_ranges",
    "leaf_hash",
    "node_hash",
    "perfect_subtrees",
    "root",
    "verify_consistency",
    "verify_inclusion",
]

HASH_SIZE = 32
"""Length in bytes of every hash in the tree (SHA-256)."""

MAX_TREE_SIZE = 1 << 62
"""Largest tree size accepted; keeps sizes inside SQLite's and protobuf's int64."""

EMPTY_ROOT = hashlib.sha256(b"").digest()
"""MTH of the empty tree (RFC 9162 §2.1.1)."""

# A proof never has more elements than the tree has levels (+1 for the
# consistency proof's prepended first root); anything longer is malformed and
# is rejected before hashing, so a hostile proof cannot make us do much work.
_MAX_PROOF_LENGTH = 64

# (start, end) of a run of leaves, end exclusive.
LeafRange = tuple[int, int]
# (level, index) of a perfect subtree: it covers leaves
# [index * 2**level, (index + 1) * 2**level).
SubtreeId = tuple[int, int]


def leaf_hash(entry: bytes) -> bytes:
    """Hash of one log entry: SHA-256(0x00 || entry)."""
    return hashlib.sha256(b"\x00" + entry).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """Hash of an interior node: SHA-256(0x01 || left || right)."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two strictly smaller than ``n`` (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def _check_size(size: int, reason: str) -> None:
    if size < 0 or size > MAX_TREE_SIZE:
        raise InvalidArgumentError(f"tree size {size} out of range", reason=reason)


def fold_subtrees(hashes: Sequence[bytes]) -> bytes:
    """Hash of an RFC tree node from its perfect subtrees, largest (leftmost) first.

    The RFC splits a node at the largest power of two, so the node's right
    spine is a chain of perfect subtrees of decreasing size; folding them from
    the right reproduces exactly that shape.
    """
    if not hashes:
        return EMPTY_ROOT
    acc = hashes[-1]
    for h in reversed(hashes[:-1]):
        acc = node_hash(h, acc)
    return acc


def perfect_subtrees(start: int, end: int) -> list[SubtreeId]:
    """Split leaves [start, end) into maximal aligned perfect subtrees, left to right.

    For the ranges that are nodes of an RFC tree (all ranges returned by the
    ``*_ranges`` functions, and [0, n) for any n), folding the subtrees' hashes
    with ``fold_subtrees`` yields the node's hash. There are at most
    2*log2(end - start) of them.
    """
    if not 0 <= start <= end:
        raise InvalidArgumentError(f"bad leaf range [{start}, {end})", reason="LEAF_RANGE")
    out: list[SubtreeId] = []
    while start < end:
        # Alignment of start bounds the subtree size from above; so does what is left.
        size = (start & -start) if start else 1 << ((end - start).bit_length() - 1)
        while start + size > end:
            size >>= 1
        level = size.bit_length() - 1
        out.append((level, start >> level))
        start += size
    return out


def inclusion_proof_ranges(index: int, tree_size: int) -> list[LeafRange]:
    """Leaf ranges whose hashes form PATH(index, D[tree_size]), leaf to root order.

    Follows the recursive definition of RFC 9162 §2.1.3.1, unrolled.
    """
    _check_size(tree_size, "TREE_SIZE")
    if not 0 <= index < tree_size:
        raise InvalidArgumentError(f"leaf index {index} not in a tree of size {tree_size}", reason="LEAF_INDEX")
    path: list[LeafRange] = []
    lo, hi = 0, tree_size
    while hi - lo > 1:
        k = _split(hi - lo)
        if index < lo + k:
            path.append((lo + k, hi))
            hi = lo + k
        else:
            path.append((lo, lo + k))
            lo += k
    path.reverse()
    return path


def consistency_proof_ranges(first_size: int, second_size: int) -> list[LeafRange]:
    """Leaf ranges whose hashes form PROOF(first_size, D[second_size]).

    Follows SUBPROOF of RFC 9162 §2.1.4.1, unrolled. The proof is empty when
    ``first_size`` is 0 or equal to ``second_size`` (nothing to prove).
    """
    _check_size(second_size, "SECOND_TREE_SIZE")
    if not 0 <= first_size <= second_size:
        raise InvalidArgumentError(f"first tree size {first_size} not in [0, {second_size}]", reason="FIRST_TREE_SIZE")
    if first_size in (0, second_size):
        return []
    out: list[LeafRange] = []
    m, lo, hi = first_size, 0, second_size
    # ``complete`` is the RFC's boolean b: the subtree reached is the whole old tree.
    complete = True
    while True:
        if m == hi - lo:
            if not complete:
                out.append((lo, hi))
            break
        k = _split(hi - lo)
        if m <= k:
            out.append((lo + k, hi))
            hi = lo + k
        else:
            out.append((lo, lo + k))
            lo += k
            m -= k
            complete = False
    out.reverse()
    return out


def inclusion_proof_from(index: int, tree_size: int, range_hash: Callable[[int, int], bytes]) -> list[bytes]:
    """PATH(index, D[tree_size]) with node hashes supplied by ``range_hash(start, end)``."""
    return [range_hash(lo, hi) for lo, hi in inclusion_proof_ranges(index, tree_size)]


def consistency_proof_from(first_size: int, second_size: int, range_hash: Callable[[int, int], bytes]) -> list[bytes]:
    """PROOF(first_size, D[second_size]) with node hashes from ``range_hash(start, end)``."""
    return [range_hash(lo, hi) for lo, hi in consistency_proof_ranges(first_size, second_size)]


def root(leaf_hashes: Iterable[bytes]) -> bytes:
    """MTH over leaf hashes (already hashed with ``leaf_hash``); O(n) time, O(log n) memory."""
    cr = CompactRange()
    for h in leaf_hashes:
        cr.append(h)
    return cr.root()


def _range_hash_over(leaf_hashes: Sequence[bytes]) -> Callable[[int, int], bytes]:
    def range_hash(lo: int, hi: int) -> bytes:
        return root(leaf_hashes[lo:hi])

    return range_hash


def inclusion_proof(leaf_hashes: Sequence[bytes], index: int) -> list[bytes]:
    """PATH(index, D[n]) over an in-memory list of n leaf hashes."""
    return inclusion_proof_from(index, len(leaf_hashes), _range_hash_over(leaf_hashes))


def consistency_proof(leaf_hashes: Sequence[bytes], first_size: int) -> list[bytes]:
    """PROOF(first_size, D[n]) over an in-memory list of n leaf hashes."""
    return consistency_proof_from(first_size, len(leaf_hashes), _range_hash_over(leaf_hashes))


def _well_formed(proof: Sequence[bytes], *hashes: bytes) -> bool:
    if len(proof) > _MAX_PROOF_LENGTH:
        return False
    return all(isinstance(h, bytes) and len(h) == HASH_SIZE for h in (*proof, *hashes))


def verify_inclusion(
    leaf_index: int,
    tree_size: int,
    leaf_hash_: bytes,
    proof: Sequence[bytes],
    root_hash: bytes,
) -> bool:
    """RFC 9162 §2.1.3.2: is ``leaf_hash_`` at ``leaf_index`` in the tree ``root_hash``?"""
    if not 0 <= leaf_index < tree_size <= MAX_TREE_SIZE:
        return False
    if not _well_formed(proof, leaf_hash_, root_hash):
        return False
    fn, sn = leaf_index, tree_size - 1
    r = leaf_hash_
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root_hash


def verify_consistency(
    first_size: int,
    second_size: int,
    proof: Sequence[bytes],
    first_root: bytes,
    second_root: bytes,
) -> bool:
    """RFC 9162 §2.1.4.2: is the tree ``first_root`` (size first) a prefix of ``second_root``?

    Edge cases the RFC leaves to the caller: equal sizes need an empty proof and
    equal roots; an empty first tree needs an empty proof and the empty root.
    """
    if not 0 <= first_size <= second_size <= MAX_TREE_SIZE:
        return False
    if not _well_formed(proof, first_root, second_root):
        return False
    if first_size == second_size:
        return not proof and first_root == second_root
    if first_size == 0:
        return not proof and first_root == EMPTY_ROOT
    # Step 1: a non-trivial proof is never empty.
    if not proof:
        return False
    path = list(proof)
    # Step 2: when the old tree is a perfect subtree, its root is the proof's seed.
    if first_size & (first_size - 1) == 0:
        path.insert(0, first_root)
    # Steps 3-4.
    fn, sn = first_size - 1, second_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    # Step 5.
    fr = sr = path[0]
    # Step 6.
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    # Step 7.
    return fr == first_root and sr == second_root and sn == 0


class CompactRange:
    """The right edge of a growing tree: the perfect subtrees covering [0, size).

    Appending a leaf merges equal-sized subtrees, which yields exactly the
    perfect subtrees that became complete; the store persists those. Holds
    O(log n) hashes, so the writer can compute the root without any reads.
    """

    __slots__ = ("_hashes", "_size")

    def __init__(self, size: int = 0, hashes: Sequence[bytes] = ()) -> None:
        """Resume at ``size`` from the hashes of ``perfect_subtrees(0, size)``, in order."""
        _check_size(size, "TREE_SIZE")
        if len(hashes) != size.bit_count():
            raise InvalidArgumentError(
                f"a tree of size {size} has {size.bit_count()} edge subtrees, got {len(hashes)}",
                reason="TREE_SIZE",
            )
        self._size = size
        self._hashes = list(hashes)

    @property
    def size(self) -> int:
        """Number of leaves appended so far."""
        return self._size

    @property
    def hashes(self) -> tuple[bytes, ...]:
        """Hashes of ``perfect_subtrees(0, size)``, largest first."""
        return tuple(self._hashes)

    def append(self, leaf: bytes) -> list[tuple[int, int, bytes]]:
        """Add one leaf hash; return (level, index, hash) of each newly completed subtree.

        Level-0 (the leaf itself) is not included; the list is ordered by level.
        """
        if len(leaf) != HASH_SIZE:
            raise InvalidArgumentError("leaf hash must be 32 bytes", reason="LEAF_HASH")
        i = self._size
        h = leaf
        level = 0
        completed: list[tuple[int, int, bytes]] = []
        while (i >> level) & 1:
            h = node_hash(self._hashes.pop(), h)
            level += 1
            completed.append((level, i >> level, h))
        self._hashes.append(h)
        self._size += 1
        return completed

    def root(self) -> bytes:
        """MTH of the leaves appended so far."""
        return fold_subtrees(self._hashes)

    def copy(self) -> CompactRange:
        """An independent copy (the writer mutates a copy and keeps it only on commit)."""
        return CompactRange(self._size, self._hashes)
