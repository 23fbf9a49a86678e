"""Ed25519 signing keys kept under the mesh home (identity provider, grant signer, audit).

Private keys stay in the directory of whoever signs (``HOME/ca`` for the dev
identity provider, the role's own ``HOME/workloads/...`` otherwise); public
keys are published in ``HOME/trust`` for the processes that verify.
"""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey


class SigningKeyError(Exception):
    """A signing or verification key is missing or invalid."""


def load_or_create_private_key(path: Path, public_path: Path | None = None) -> Ed25519PrivateKey:
    """Loads an Ed25519 private key, creating it (mode 0600, directory 0700) on first use.

    Its public key is published at ``public_path`` (default: beside it, ``.pub``)
    and rewritten when missing or not this key's, so the published key always
    matches the private one.
    """
    if not path.exists():
        key = Ed25519PrivateKey.generate()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.parent.chmod(0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(
                key.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption(),
                )
            )
    else:
        key = load_private_key(path)
    pub = public_path or path.with_suffix(".pub")
    pem = public_pem(key.public_key())
    if not pub.exists() or pub.read_bytes() != pem:
        pub.parent.mkdir(parents=True, exist_ok=True)
        tmp = pub.with_name(pub.name + ".tmp")
        tmp.write_bytes(pem)
        os.replace(tmp, pub)
    return key


def load_private_key(path: Path) -> Ed25519PrivateKey:
    """Loads an existing Ed25519 private key."""
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError) as err:
        raise SigningKeyError(f"cannot load private key {path}: {err}") from err
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningKeyError(f"{path}: not an Ed25519 private key")
    return key


def load_public_key(path_or_pem: Path | bytes) -> Ed25519PublicKey:
    """Loads an Ed25519 public key from a PEM file or PEM bytes."""
    try:
        pem = path_or_pem.read_bytes() if isinstance(path_or_pem, Path) else path_or_pem
        key = serialization.load_pem_public_key(pem)
    except (OSError, ValueError) as err:
        raise SigningKeyError(f"cannot load public key: {err}") from err
    if not isinstance(key, Ed25519PublicKey):
        raise SigningKeyError("not an Ed25519 public key")
    return key


def public_pem(key: Ed25519PublicKey) -> bytes:
    """PEM (SubjectPublicKeyInfo) of a public key."""
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def key_id(key: Ed25519PublicKey) -> str:
    """A short stable id of a public key: base64url of the first 8 bytes of its SHA-256."""
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.urlsafe_b64encode(hashlib.sha256(raw).digest()[:8]).decode().rstrip("=")
