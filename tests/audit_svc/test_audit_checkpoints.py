"""Checkpoint signing key on disk, note body, signatures, JSON round trip."""

from __future__ import annotations

import base64
import json
import os
import stat
from dataclasses import replace
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ec import SECP256R1, generate_private_key
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from audit_svc.checkpoints import (
    PRIVATE_KEY_FILE,
    PUBLIC_KEY_FILE,
    Checkpoint,
    CheckpointSigner,
    load_public_key_pem,
    note_body,
    verify_checkpoint,
)
from audit_svc.errors import CheckpointInvalidError, KeyFileError

ORIGIN = "agentmesh.local/audit"
ROOT = bytes(range(32))


def test_key_is_created_once_with_private_permissions(tmp_path: Path) -> None:
    key_dir = tmp_path / "keys" / "audit"
    first = CheckpointSigner.load_or_create(key_dir, ORIGIN)
    key_file = key_dir / PRIVATE_KEY_FILE
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(key_dir.stat().st_mode) == 0o700
    assert not list(key_dir.glob("*.tmp"))
    # Restart: the same key, not a new one.
    second = CheckpointSigner.load_or_create(key_dir, ORIGIN)
    assert second.key_id == first.key_id
    assert (key_dir / PUBLIC_KEY_FILE).read_text() == first.public_key_pem()
    assert load_public_key_pem(first.public_key_pem()) == first.public_key


def test_key_readable_by_others_is_refused(tmp_path: Path) -> None:
    CheckpointSigner.load_or_create(tmp_path, ORIGIN)
    os.chmod(tmp_path / PRIVATE_KEY_FILE, 0o644)
    with pytest.raises(KeyFileError) as exc:
        CheckpointSigner.load_or_create(tmp_path, ORIGIN)
    assert exc.value.reason == "KEY_FILE_PERMISSIONS"


@pytest.mark.parametrize("kind", ["garbage", "ec-key"])
def test_key_file_that_is_not_ed25519_is_refused(tmp_path: Path, kind: str) -> None:
    path = tmp_path / PRIVATE_KEY_FILE
    if kind == "garbage":
        data = b"not a key"
    else:
        data = generate_private_key(SECP256R1()).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, data)
    os.close(fd)
    with pytest.raises(KeyFileError) as exc:
        CheckpointSigner.load_or_create(tmp_path, ORIGIN)
    assert exc.value.reason == "KEY_FILE_INVALID"


def test_public_key_pem_must_be_ed25519() -> None:
    with pytest.raises(KeyFileError) as exc:
        load_public_key_pem("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")
    assert exc.value.reason == "PUBLIC_KEY_INVALID"
    ec_pem = (
        generate_private_key(SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    with pytest.raises(KeyFileError):
        load_public_key_pem(ec_pem)


def test_note_body_has_the_checkpoint_text_shape() -> None:
    body = note_body(ORIGIN, 42, ROOT, 1_700_000_000_123_456)
    assert body == (f"{ORIGIN}\n42\n{base64.b64encode(ROOT).decode()}\n1700000000123456\n".encode())


@pytest.mark.parametrize("origin", ["", "two\nlines", " padded", "x" * 300])
def test_bad_origins_are_refused(origin: str) -> None:
    with pytest.raises(CheckpointInvalidError) as exc:
        CheckpointSigner(Ed25519PrivateKey.generate(), origin)
    assert exc.value.reason == "CHECKPOINT_ORIGIN"


def test_signed_checkpoint_verifies_and_any_change_breaks_it() -> None:
    signer = CheckpointSigner(Ed25519PrivateKey.generate(), ORIGIN)
    cp = signer.sign(42, ROOT, 1_700_000_000_000_000)
    verify_checkpoint(cp, signer.public_key, origin=ORIGIN)
    verify_checkpoint(cp, signer.public_key)

    changed = [
        replace(cp, tree_size=43),
        replace(cp, root_hash=bytes(32)),
        replace(cp, timestamp_micros=cp.timestamp_micros + 1),
        replace(cp, signature=bytes([cp.signature[0] ^ 1]) + cp.signature[1:]),
    ]
    for bad in changed:
        with pytest.raises(CheckpointInvalidError) as exc:
            verify_checkpoint(bad, signer.public_key)
        assert exc.value.reason == "CHECKPOINT_SIGNATURE"

    with pytest.raises(CheckpointInvalidError) as exc:
        verify_checkpoint(cp, signer.public_key, origin="other.log")
    assert exc.value.reason == "CHECKPOINT_ORIGIN"

    other = CheckpointSigner(Ed25519PrivateKey.generate(), ORIGIN)
    with pytest.raises(CheckpointInvalidError) as exc:
        verify_checkpoint(cp, other.public_key)
    assert exc.value.reason == "CHECKPOINT_KEY_ID"
    # Even claiming the other key's id, the signature gives it away.
    with pytest.raises(CheckpointInvalidError) as exc:
        verify_checkpoint(replace(cp, key_id=other.key_id), other.public_key)
    assert exc.value.reason == "CHECKPOINT_SIGNATURE"


def test_checkpoint_json_round_trip() -> None:
    signer = CheckpointSigner(Ed25519PrivateKey.generate(), ORIGIN)
    cp = signer.sign(7, ROOT, 123)
    again = Checkpoint.from_json(cp.to_json())
    assert again == cp
    verify_checkpoint(again, signer.public_key)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: "not json",
        lambda d: json.dumps([1, 2]),
        lambda d: json.dumps({**d, "tree_size": "7"}),
        lambda d: json.dumps({**d, "tree_size": True}),
        lambda d: json.dumps({**d, "tree_size": -1}),
        lambda d: json.dumps({**d, "root_hash": "%%%"}),
        lambda d: json.dumps({**d, "root_hash": base64.b64encode(b"short").decode()}),
        lambda d: json.dumps({**d, "signature": base64.b64encode(b"short").decode()}),
        lambda d: json.dumps({**d, "origin": 5}),
        lambda d: json.dumps({k: v for k, v in d.items() if k != "key_id"}),
    ],
)
def test_malformed_checkpoint_json_is_refused(mutate: object) -> None:
    signer = CheckpointSigner(Ed25519PrivateKey.generate(), ORIGIN)
    data = signer.sign(7, ROOT, 123).to_dict()
    with pytest.raises(CheckpointInvalidError) as exc:
        Checkpoint.from_json(mutate(data))  # type: ignore[operator]
    assert exc.value.reason == "CHECKPOINT_FORMAT"
