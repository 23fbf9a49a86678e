"""Signed checkpoints (signed tree heads) of the audit log.

A checkpoint commits to the whole log at one size. Its signed *note body* is
text in the shape of a transparency-log checkpoint, with the timestamp as one
extension line::

    <origin>\\n
    <tree size, decimal>\\n
    <base64 of the 32-byte root hash>\\n
    <timestamp, Unix epoch microseconds, decimal>\\n

The body is signed with the audit service's Ed25519 key. The key is created on
first start in a key directory (file mode 0600) and its public half is exported
as PEM, so anyone holding the PEM can check checkpoints offline. A user may
save a checkpoint as JSON (``Checkpoint.to_json``) and later prove the log was
not rolled back or rewritten behind it (see ``audit_svc.verify``).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from agentmesh.identities import AUDIT_CHECKPOINT_KEY, AUDIT_CHECKPOINT_PUBLIC_KEY
from audit_svc.errors import CheckpointInvalidError, KeyFileError
from audit_svc.merkle import HASH_SIZE, MAX_TREE_SIZE

__all__ = [
    "PRIVATE_KEY_FILE",
    "PUBLIC_KEY_FILE",
    "Checkpoint",
    "CheckpointSigner",
    "key_id_for",
    "load_public_key_pem",
    "note_body",
    "verify_checkpoint",
]

PRIVATE_KEY_FILE = AUDIT_CHECKPOINT_KEY
"""File name of the signing key (PKCS#8 PEM, mode 0600) inside the key directory (named by the mesh's identities)."""

PUBLIC_KEY_FILE = AUDIT_CHECKPOINT_PUBLIC_KEY
"""File name of the exported public key (SubjectPublicKeyInfo PEM) inside the key directory."""

_SIGNATURE_SIZE = 64
_MAX_ORIGIN_LENGTH = 256


def _check_origin(origin: str) -> None:
    # The origin is one line of the signed text: a newline would let one
    # checkpoint's body be read as another's.
    if not origin or len(origin) > _MAX_ORIGIN_LENGTH or not origin.isprintable() or origin != origin.strip():
        raise CheckpointInvalidError(f"bad checkpoint origin {origin!r}", reason="CHECKPOINT_ORIGIN")


def note_body(origin: str, tree_size: int, root_hash: bytes, timestamp_micros: int) -> bytes:
    """The exact bytes a checkpoint signature covers."""
    _check_origin(origin)
    if not 0 <= tree_size <= MAX_TREE_SIZE:
        raise CheckpointInvalidError(f"bad tree size {tree_size}", reason="CHECKPOINT_FORMAT")
    if len(root_hash) != HASH_SIZE:
        raise CheckpointInvalidError("root hash must be 32 bytes", reason="CHECKPOINT_FORMAT")
    if timestamp_micros < 0:
        raise CheckpointInvalidError("negative timestamp", reason="CHECKPOINT_FORMAT")
    root_b64 = base64.b64encode(root_hash).decode("ascii")
    return f"{origin}\n{tree_size}\n{root_b64}\n{timestamp_micros}\n".encode()


def key_id_for(public_key: Ed25519PublicKey) -> str:
    """Key id: hex of the first 8 bytes of SHA-256 over the raw 32-byte public key."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).digest()[:8].hex()


@dataclass(frozen=True)
class Checkpoint:
    """A signed tree head: the log had ``tree_size`` entries with root ``root_hash``."""

    origin: str
    """Names the log (one log, one origin); the first line of the note body."""
    tree_size: int
    """Number of entries the checkpoint covers."""
    root_hash: bytes
    """RFC 9162 root (MTH) over the first ``tree_size`` entries."""
    timestamp_micros: int
    """When it was signed, Unix epoch microseconds."""
    signature: bytes
    """Ed25519 signature over ``note_body()``."""
    key_id: str
    """``key_id_for`` of the signing key."""

    def note_body(self) -> bytes:
        """The signed text (see module docstring)."""
        return note_body(self.origin, self.tree_size, self.root_hash, self.timestamp_micros)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; bytes are base64."""
        return {
            "origin": self.origin,
            "tree_size": self.tree_size,
            "root_hash": base64.b64encode(self.root_hash).decode("ascii"),
            "timestamp_micros": self.timestamp_micros,
            "signature": base64.b64encode(self.signature).decode("ascii"),
            "key_id": self.key_id,
        }

    def to_json(self) -> str:
        """A JSON document a user can save and later pass to ``verify``."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, data: Any) -> Checkpoint:
        """Parse ``to_dict`` output; raises ``CheckpointInvalidError`` (CHECKPOINT_FORMAT)."""

        def bad(what: str) -> CheckpointInvalidError:
            return CheckpointInvalidError(f"checkpoint: {what}", reason="CHECKPOINT_FORMAT")

        if not isinstance(data, dict):
            raise bad("not an object")
        origin, size, ts = data.get("origin"), data.get("tree_size"), data.get("timestamp_micros")
        key_id = data.get("key_id")
        if not isinstance(origin, str) or not isinstance(key_id, str):
            raise bad("origin and key_id must be strings")
        # bool is an int subclass; a JSON true is not a size.
        if type(size) is not int or type(ts) is not int:
            raise bad("tree_size and timestamp_micros must be integers")
        try:
            root_hash = base64.b64decode(str(data.get("root_hash")), validate=True)
            signature = base64.b64decode(str(data.get("signature")), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise bad("root_hash and signature must be base64") from exc
        if len(signature) != _SIGNATURE_SIZE:
            raise bad("signature must be 64 bytes")
        cp = cls(origin, size, root_hash, ts, signature, key_id)
        cp.note_body()  # validates origin, size, root length, timestamp
        return cp

    @classmethod
    def from_json(cls, text: str | bytes) -> Checkpoint:
        """Parse ``to_json`` output; raises ``CheckpointInvalidError`` (CHECKPOINT_FORMAT)."""
        try:
            data = json.loads(text)
        except (ValueError, UnicodeDecodeError) as exc:
            raise CheckpointInvalidError("checkpoint is not JSON", reason="CHECKPOINT_FORMAT") from exc
        return cls.from_dict(data)


def load_public_key_pem(pem: str | bytes) -> Ed25519PublicKey:
    """Parse an Ed25519 public key from PEM; raises ``KeyFileError`` (PUBLIC_KEY_INVALID)."""
    data = pem.encode() if isinstance(pem, str) else pem
    try:
        key = serialization.load_pem_public_key(data)
    except ValueError as exc:
        raise KeyFileError("public key is not PEM", reason="PUBLIC_KEY_INVALID") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise KeyFileError("public key is not Ed25519", reason="PUBLIC_KEY_INVALID")
    return key


def verify_checkpoint(checkpoint: Checkpoint, public_key: Ed25519PublicKey, *, origin: str | None = None) -> None:
    """Check a checkpoint's origin, key id and signature; raise ``CheckpointInvalidError``."""
    if origin is not None and checkpoint.origin != origin:
        raise CheckpointInvalidError(
            f"checkpoint origin {checkpoint.origin!r} is not {origin!r}", reason="CHECKPOINT_ORIGIN"
        )
    if checkpoint.key_id != key_id_for(public_key):
        raise CheckpointInvalidError(
            f"checkpoint signed by key {checkpoint.key_id!r}, not this key",
            reason="CHECKPOINT_KEY_ID",
        )
    body = checkpoint.note_body()
    try:
        public_key.verify(checkpoint.signature, body)
    except InvalidSignature as exc:
        raise CheckpointInvalidError("checkpoint signature does not verify", reason="CHECKPOINT_SIGNATURE") from exc


class CheckpointSigner:
    """The audit service's checkpoint signing key, bound to the log's origin."""

    def __init__(self, private_key: Ed25519PrivateKey, origin: str) -> None:
        """Wrap an existing key; most callers want ``load_or_create``."""
        _check_origin(origin)
        self._key = private_key
        self.origin = origin
        self.public_key: Ed25519PublicKey = private_key.public_key()
        self.key_id = key_id_for(self.public_key)

    @classmethod
    def load_or_create(cls, key_dir: Path, origin: str) -> CheckpointSigner:
        """Load the key from ``key_dir``, creating directory and key on first start.

        Fails closed (``KeyFileError``) if the key file is readable by group or
        others (KEY_FILE_PERMISSIONS) or is not an Ed25519 PKCS#8 key
        (KEY_FILE_INVALID).
        """
        key_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = key_dir / PRIVATE_KEY_FILE
        if not path.exists():
            _create_key_file(path)
        signer = cls(_load_private_key(path), origin)
        pub = key_dir / PUBLIC_KEY_FILE
        pem = signer.public_key_pem()
        if not pub.exists() or pub.read_text() != pem:
            # Public, so an ordinary atomic replace with default perms is fine.
            tmp = pub.with_name(pub.name + ".tmp")
            tmp.write_text(pem)
            os.replace(tmp, pub)
        return signer

    def public_key_pem(self) -> str:
        """The public key as SubjectPublicKeyInfo PEM."""
        return self.public_key.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ).decode("ascii")

    def sign(self, tree_size: int, root_hash: bytes, timestamp_micros: int) -> Checkpoint:
        """Sign a tree head."""
        body = note_body(self.origin, tree_size, root_hash, timestamp_micros)
        return Checkpoint(
            origin=self.origin,
            tree_size=tree_size,
            root_hash=root_hash,
            timestamp_micros=timestamp_micros,
            signature=self._key.sign(body),
            key_id=self.key_id,
        )


def _create_key_file(path: Path) -> None:
    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    # Write under a unique temporary name created 0600 from the start (never a
    # moment with wider permissions), fsync, then link into place: link fails if
    # another process won the race, and then we simply use its key.
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _load_private_key(path: Path) -> Ed25519PrivateKey:
    try:
        st = path.stat()
        data = path.read_bytes()
    except OSError as exc:
        raise KeyFileError(f"cannot read {path}: {exc}", reason="KEY_FILE_INVALID") from exc
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise KeyFileError(
            f"{path} is accessible by group or others (mode {stat.S_IMODE(st.st_mode):o})",
            reason="KEY_FILE_PERMISSIONS",
        )
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise KeyFileError(f"{path} is not a PEM private key", reason="KEY_FILE_INVALID") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError(f"{path} is not an Ed25519 key", reason="KEY_FILE_INVALID")
    return key
