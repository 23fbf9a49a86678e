"""Shared fixtures: a mesh home with certificates made once per test session, and a forger
of the certificates the mesh must refuse."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from agentmesh import config, spiffe
from agentmesh.config import MeshConfig
from agentmesh.identities import init_identities
from agentmesh.pki import CertificateAuthority, CertPaths

DEMO_TODAY = dt.date(2026, 11, 30)
"""The date the demo world is written for. Every mesh a test starts inherits it (``AGENTMESH_TODAY``), so the
analyses of its dated permits (windows that have not ended yet) do not change with the day the suite runs."""
os.environ.setdefault("AGENTMESH_TODAY", DEMO_TODAY.isoformat())


@pytest.fixture(scope="session")
def mesh_config(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MeshConfig]:
    """A mesh home with the CA, every identity and the dev keys (no processes)."""
    home: Path = tmp_path_factory.mktemp("mesh-home")
    cfg = config.load(home=str(home), environ={})
    init_identities(cfg)
    yield cfg


class Forge:
    """Certificates an attacker holding the mesh CA key could make, which the mesh must refuse."""

    @staticmethod
    def sub_ca(
        ca: CertificateAuthority, *, same_name: bool = False
    ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        """A CA certificate signed with the mesh CA's key.

        ``same_name`` makes it "self-issued" (its subject is the mesh CA's own
        name), a case path-length checks skip.
        """
        key = ec.generate_private_key(ec.SECP256R1())
        name = ca.cert.subject if same_name else x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rogue sub-CA")])
        now = dt.datetime.now(dt.UTC)
        cert = (
            x509.CertificateBuilder().subject_name(name).issuer_name(ca.cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False)
            .sign(ca.key, hashes.SHA256())
        )
        return cert, key

    @classmethod
    def leaf_via_sub_ca(cls, ca: CertificateAuthority, identity: spiffe.SpiffeId, paths: CertPaths, *,
                        same_name: bool = False) -> CertPaths:
        """A leaf for ``identity`` issued by a fresh sub-CA, written as the chain leaf + sub-CA."""
        sub_cert, sub_key = cls.sub_ca(ca, same_name=same_name)
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, identity.name)]))
            .issuer_name(sub_cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.SubjectAlternativeName([x509.UniformResourceIdentifier(str(identity)),
                                                        x509.DNSName(identity.dns_name)]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(sub_key.public_key()), critical=False)
            .sign(sub_key, hashes.SHA256())
        )
        paths.cert.parent.mkdir(parents=True, exist_ok=True)
        paths.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM)
                               + sub_cert.public_bytes(serialization.Encoding.PEM))
        paths.key.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                serialization.NoEncryption()))
        paths.key.chmod(0o600)
        return paths

    @staticmethod
    def split_chain(pem: bytes) -> tuple[bytes, bytes]:
        """(first certificate, the rest) of a PEM chain."""
        certs = x509.load_pem_x509_certificates(pem)
        first = certs[0].public_bytes(serialization.Encoding.PEM)
        return first, b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs[1:])


@pytest.fixture(scope="session")
def forge() -> Forge:
    """Builds refused certificates (leaves through a sub-CA, ...)."""
    return Forge()
