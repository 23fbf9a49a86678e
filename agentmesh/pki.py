"""The mesh PKI: a CA (EC P-256) and short-lived workload certificates.

Each leaf carries exactly one SPIFFE URI SAN (the workload's identity) and one
DNS SAN derived from it, which clients use to check they reached the server
they meant to. Keys are written with mode 0600 under the mesh home only.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from agentmesh import spiffe

DEFAULT_VALIDITY = dt.timedelta(hours=24)
CA_VALIDITY = dt.timedelta(days=365)


class PkiError(Exception):
    """A certificate or key is missing, unreadable or invalid."""


@dataclass(frozen=True, slots=True)
class CertPaths:
    """Where one workload's certificate and key live."""

    cert: Path
    key: Path

    def read(self) -> tuple[bytes, bytes]:
        """Returns (certificate PEM, key PEM); a missing or unreadable file names itself."""
        out = []
        for path in (self.cert, self.key):
            try:
                out.append(path.read_bytes())
            except OSError as err:
                raise PkiError(f"cannot read {path}: {err.strerror or err}") from err
        return out[0], out[1]


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _write_private(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    # Rename so a reader (e.g. a server reloading its certificate) never sees half a file.
    os.replace(tmp, path)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def leaf_paths(certs_dir: Path, spiffe_id: spiffe.SpiffeId) -> CertPaths:
    """File names of a workload's certificate and key, e.g. ``svc-policy.pem``."""
    stem = f"{spiffe_id.kind}-{spiffe_id.name}"
    return CertPaths(certs_dir / f"{stem}.pem", certs_dir / f"{stem}.key")


@dataclass(frozen=True, slots=True)
class CertificateAuthority:
    """The mesh CA, loaded from ``ca.pem`` / ``ca.key`` in a certs directory."""

    certs_dir: Path
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def bundle_path(self) -> Path:
        """The trust bundle every server and client verifies peers against."""
        return self.certs_dir / "ca.pem"

    @classmethod
    def init(cls, certs_dir: Path, *, force: bool = False) -> CertificateAuthority:
        """Creates the CA unless one exists (or ``force``), then loads it."""
        cert_path, key_path = certs_dir / "ca.pem", certs_dir / "ca.key"
        if force or not (cert_path.exists() and key_path.exists()):
            key = ec.generate_private_key(ec.SECP256R1())
            name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "agentmesh mesh CA")])
            now = _now()
            cert = (
                x509.CertificateBuilder()
                .subject_name(name)
                .issuer_name(name)
                .public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(minutes=5))
                .not_valid_after(now + CA_VALIDITY)
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .add_extension(
                    x509.KeyUsage(
                        digital_signature=True, key_cert_sign=True, crl_sign=True,
                        content_commitment=False, key_encipherment=False,
                        data_encipherment=False, key_agreement=False,
                        encipher_only=False, decipher_only=False,
                    ),
                    critical=True,
                )
                .add_extension(
                    x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
                )
                .sign(key, hashes.SHA256())
            )
            _write_private(key_path, _key_pem(key))
            cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return cls.load(certs_dir)

    @classmethod
    def load(cls, certs_dir: Path) -> CertificateAuthority:
        """Loads an existing CA; a missing or unreadable file names itself."""
        cert_pem, key_pem = CertPaths(certs_dir / "ca.pem", certs_dir / "ca.key").read()
        try:
            cert = x509.load_pem_x509_certificate(cert_pem)
            key = serialization.load_pem_private_key(key_pem, password=None)
        except ValueError as err:
            raise PkiError(f"invalid CA in {certs_dir}: {err}") from err
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise PkiError(f"{certs_dir / 'ca.key'}: not an EC private key")
        return cls(certs_dir, cert, key)

    def issue(
        self,
        spiffe_id: spiffe.SpiffeId,
        *,
        validity: dt.timedelta = DEFAULT_VALIDITY,
        not_before: dt.datetime | None = None,
        extra_uri_sans: tuple[str, ...] = (),
        paths: CertPaths | None = None,
    ) -> CertPaths:
        """Issues (or re-issues) a workload certificate and writes it with a fresh key.

        ``extra_uri_sans`` and ``not_before`` exist so tests can build the
        certificates the mesh must refuse (two URI SANs, expired).
        """
        paths = paths or leaf_paths(self.certs_dir, spiffe_id)
        key = ec.generate_private_key(ec.SECP256R1())
        start = not_before or (_now() - dt.timedelta(minutes=5))
        sans: list[x509.GeneralName] = [
            x509.UniformResourceIdentifier(str(spiffe_id)),
            *(x509.UniformResourceIdentifier(u) for u in extra_uri_sans),
            x509.DNSName(spiffe_id.dns_name),
        ]
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, spiffe_id.name)]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(start + validity)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True, key_encipherment=False, key_cert_sign=False,
                    crl_sign=False, content_commitment=False, data_encipherment=False,
                    key_agreement=True, encipher_only=False, decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                critical=False,
            )
            .sign(self.key, hashes.SHA256())
        )
        _write_private(paths.key, _key_pem(key))
        tmp = paths.cert.with_suffix(".pem.tmp")
        tmp.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        os.replace(tmp, paths.cert)
        return paths


def spiffe_id_of(cert_pem: bytes) -> str:
    """The single SPIFFE URI SAN of a certificate; refuses none or several."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound as err:
        raise PkiError("certificate has no subjectAltName") from err
    uris = sans.get_values_for_type(x509.UniformResourceIdentifier)
    if len(uris) != 1:
        raise PkiError(f"certificate must have exactly one URI SAN, has {len(uris)}")
    return uris[0]


def cert_expiry(cert_pem: bytes) -> dt.datetime:
    """When a certificate stops being valid."""
    return x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc
