"""The mesh PKI: a CA (EC P-256) and short-lived workload certificates.

Each leaf carries exactly one SPIFFE URI SAN (the workload's identity) and one
DNS SAN derived from it, which clients use to check they reached the server
they meant to. Keys are written with mode 0600 under the mesh home only.

The CA's private key and its certificate live apart: the key in the mesh
home's CA directory (read only by the issuing commands), the certificate in
the trust directory every workload reads. The CA certificate has
``BasicConstraints(ca=True, path_length=0)`` and every leaf ``ca=False``: a
certificate issued through an intermediate is never a mesh identity
(:func:`peer_chain_problem`).
"""

from __future__ import annotations

import datetime as dt
import functools
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from agentmesh import spiffe

DEFAULT_VALIDITY = dt.timedelta(hours=24)
MAX_LEAF_VALIDITY = dt.timedelta(days=30)
MAX_BACKDATE = dt.timedelta(minutes=5)
"""A leaf is valid from a little before it is issued (clock skew): a tenth of its validity, at most this."""
CA_VALIDITY = dt.timedelta(days=365)
CERT_FILE = "cert.pem"
KEY_FILE = "key.pem"


class PkiError(Exception):
    """A certificate or key is missing, unreadable or invalid."""


class LeafNotValidNow(PkiError):
    """A workload certificate is expired or not yet valid: never served, never used."""


class KeyMismatch(PkiError):
    """A key file is not the key of its certificate (e.g. caught between the two renames of a renewal)."""


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


def _when(t: dt.datetime) -> str:
    return f"{t:%Y-%m-%d %H:%M:%S} UTC"


@dataclass(frozen=True, slots=True)
class Validity:
    """When a certificate is valid: ``not_before <= t < not_after``."""

    not_before: dt.datetime
    not_after: dt.datetime

    @property
    def lifetime(self) -> dt.timedelta:
        return self.not_after - self.not_before

    @property
    def renew_at(self) -> dt.datetime:
        """Half its lifetime: when the supervising loop issues its successor."""
        return self.not_before + self.lifetime / 2

    @property
    def warn_at(self) -> dt.datetime:
        """The last tenth of its lifetime: ``status`` warns from here on."""
        return self.not_after - self.lifetime / 10

    def problem(self, now: dt.datetime | None = None) -> str | None:
        """Why the certificate is not valid at ``now`` (default: now), or None."""
        now = now or _now()
        if now >= self.not_after:
            return f"expired at {_when(self.not_after)}"
        if now < self.not_before:
            return f"is not valid before {_when(self.not_before)}"
        return None

    def text(self) -> str:
        return f"valid {_when(self.not_before)} to {_when(self.not_after)}"


def validity_of(cert_pem: bytes) -> Validity:
    """A certificate's validity period; PkiError if it does not parse."""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError as err:
        raise PkiError(f"not a PEM certificate: {err}") from err
    return Validity(cert.not_valid_before_utc, cert.not_valid_after_utc)


def check_leaf(paths: CertPaths, cert_pem: bytes, key_pem: bytes, now: dt.datetime | None = None) -> None:
    """Refuses (PkiError, one line naming the file and its validity) a leaf that is expired, not yet
    valid, does not parse, or whose key is not the certificate's: what a process must never serve."""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError as err:
        raise PkiError(f"{paths.cert}: not a PEM certificate: {err}") from err
    validity = Validity(cert.not_valid_before_utc, cert.not_valid_after_utc)
    problem = validity.problem(now)
    if problem is not None:
        raise LeafNotValidNow(f"{paths.cert}: the certificate {problem} ({validity.text()})")
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as err:
        raise PkiError(f"{paths.key}: not a PEM private key: {err}") from err
    if key.public_key() != cert.public_key():
        raise KeyMismatch(f"{paths.key} is not the key of {paths.cert} (being replaced?)")


def _write_private(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    # Rename so a reader (e.g. a server reloading its certificate) never sees half a file.
    os.replace(tmp, path)


def _tmp_file(path: Path, data: bytes, *, private: bool) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    return tmp


def _write_public(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def workload_dir_name(spiffe_id: spiffe.SpiffeId) -> str:
    """The directory of one identity under ``HOME/workloads``, e.g. ``svc-policy``."""
    return f"{spiffe_id.kind}-{spiffe_id.name}"


def leaf_paths(workloads_dir: Path, spiffe_id: spiffe.SpiffeId) -> CertPaths:
    """An identity's certificate and key: ``WORKLOADS/<kind>-<name>/{cert,key}.pem``."""
    folder = workloads_dir / workload_dir_name(spiffe_id)
    return CertPaths(folder / CERT_FILE, folder / KEY_FILE)


@dataclass(frozen=True, slots=True)
class CertificateAuthority:
    """The mesh CA: its private key (``CA_DIR/ca.key``) and certificate (the trust bundle)."""

    key_path: Path
    bundle_path: Path
    """The trust bundle every server and client verifies peers against."""
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @staticmethod
    def _paths(ca_dir: Path, bundle_path: Path | None) -> tuple[Path, Path]:
        return ca_dir / "ca.key", bundle_path or ca_dir / "ca.pem"

    @classmethod
    def exists(cls, ca_dir: Path, bundle_path: Path | None = None) -> bool:
        """Whether both the CA key and its certificate are there."""
        key_path, cert_path = cls._paths(ca_dir, bundle_path)
        return key_path.exists() and cert_path.exists()

    @classmethod
    def init(
        cls, ca_dir: Path, bundle_path: Path | None = None, *, force: bool = False
    ) -> CertificateAuthority:
        """Creates the CA unless one exists (or ``force``), then loads it.

        The key goes to ``ca_dir/ca.key`` (0600, directory 0700), the certificate
        to ``bundle_path`` (default ``ca_dir/ca.pem``). Half a CA (a key without
        its certificate or the reverse) is refused rather than silently replaced:
        replacing it would orphan every certificate already issued.
        """
        key_path, cert_path = cls._paths(ca_dir, bundle_path)
        if not force and key_path.exists() != cert_path.exists():
            present, missing = (key_path, cert_path) if key_path.exists() else (cert_path, key_path)
            raise PkiError(f"incomplete mesh CA: {present} exists but {missing} does not "
                           f"(restore it, or run 'agentmesh certs init --force' to start a new CA)")
        if force or not key_path.exists():
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
                # path_length=0: the CA issues leaves only, never another CA.
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
            ca_dir.mkdir(parents=True, exist_ok=True)
            ca_dir.chmod(0o700)
            _write_private(key_path, _key_pem(key))
            _write_public(cert_path, cert.public_bytes(serialization.Encoding.PEM))
        return cls.load(ca_dir, bundle_path)

    @classmethod
    def load(cls, ca_dir: Path, bundle_path: Path | None = None) -> CertificateAuthority:
        """Loads an existing CA; a missing, unreadable or mismatched file names itself."""
        key_path, cert_path = cls._paths(ca_dir, bundle_path)
        cert_pem, key_pem = CertPaths(cert_path, key_path).read()
        try:
            cert = x509.load_pem_x509_certificate(cert_pem)
            key = serialization.load_pem_private_key(key_pem, password=None)
        except ValueError as err:
            raise PkiError(f"invalid CA ({key_path}, {cert_path}): {err}") from err
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise PkiError(f"{key_path}: not an EC private key")
        if cert.public_key() != key.public_key():
            raise PkiError(f"{cert_path} is not the certificate of the CA key {key_path}")
        return cls(key_path, cert_path, cert, key)

    def issue(
        self,
        spiffe_id: spiffe.SpiffeId,
        paths: CertPaths,
        *,
        validity: dt.timedelta = DEFAULT_VALIDITY,
    ) -> CertPaths:
        """Issues (or re-issues) a workload certificate valid from now for ``validity``
        (and a tenth of it before, at most :data:`MAX_BACKDATE`, for clock skew),
        written with a fresh key.

        Refused (PkiError) when the CA itself is not valid now, when ``validity``
        is not positive or longer than :data:`MAX_LEAF_VALIDITY`, or when the leaf
        would outlive the CA, and a leaf that would not be valid now is never written:
        the mesh never issues a certificate it would refuse.
        """
        now = _now()
        if not self.cert.not_valid_before_utc <= now < self.cert.not_valid_after_utc:
            raise PkiError(f"the mesh CA {self.bundle_path} is not valid now (valid "
                           f"{self.cert.not_valid_before_utc:%Y-%m-%d} to {self.cert.not_valid_after_utc:%Y-%m-%d})")
        if not dt.timedelta(0) < validity <= MAX_LEAF_VALIDITY:
            raise PkiError(f"validity must be more than 0 and at most {MAX_LEAF_VALIDITY.days} days, "
                           f"got {validity}")
        if now + validity > self.cert.not_valid_after_utc:
            raise PkiError(f"a leaf valid {validity} would outlive the mesh CA "
                           f"(valid until {self.cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC)")
        backdate = min(MAX_BACKDATE, validity / 10)
        cert, key = self._build(spiffe_id, now - backdate, validity + backdate, ())
        # Never write a leaf the mesh would refuse to serve.
        problem = Validity(cert.not_valid_before_utc, cert.not_valid_after_utc).problem(_now())
        if problem is not None:
            raise PkiError(f"refusing to issue {spiffe_id}: the leaf would be {problem}")
        self._write(paths, cert, key)
        return paths

    def issue_unchecked(
        self,
        spiffe_id: spiffe.SpiffeId,
        paths: CertPaths,
        *,
        validity: dt.timedelta = DEFAULT_VALIDITY,
        not_before: dt.datetime | None = None,
        extra_uri_sans: tuple[str, ...] = (),
    ) -> CertPaths:
        """Writes a leaf without :meth:`issue`'s checks: for tests that build the
        certificates the mesh must refuse (two URI SANs, expired, not yet valid).
        Valid from ``not_before`` (default five minutes ago) for ``validity``.
        """
        start = not_before or (_now() - MAX_BACKDATE)
        cert, key = self._build(spiffe_id, start, validity, extra_uri_sans)
        self._write(paths, cert, key)
        return paths

    def _build(
        self, spiffe_id: spiffe.SpiffeId, start: dt.datetime, validity: dt.timedelta,
        extra_uri_sans: tuple[str, ...],
    ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = ec.generate_private_key(ec.SECP256R1())
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
        return cert, key

    @staticmethod
    def _write(paths: CertPaths, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> None:
        """Writes the pair: both to temporary files first, then two renames back to back, key first.

        A reader (a server on its next handshake, a reloading channel) never sees half a file;
        in the microseconds between the renames it sees a key that is not its certificate's,
        which :func:`check_leaf` refuses (:class:`KeyMismatch`) and the reader tries again.
        """
        paths.key.parent.mkdir(parents=True, exist_ok=True)
        paths.key.parent.chmod(0o700)
        key_tmp = _tmp_file(paths.key, _key_pem(key), private=True)
        cert_tmp = _tmp_file(paths.cert, cert.public_bytes(serialization.Encoding.PEM), private=False)
        os.replace(key_tmp, paths.key)
        os.replace(cert_tmp, paths.cert)

    def issued(self, cert_pem: bytes) -> bool:
        """Whether a certificate was signed by this CA (whatever its validity)."""
        try:
            x509.load_pem_x509_certificate(cert_pem).verify_directly_issued_by(self.cert)
        except (ValueError, TypeError, InvalidSignature):
            return False
        return True


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


def _self_signed(cert: x509.Certificate) -> bool:
    if cert.issuer != cert.subject:
        return False
    try:
        cert.verify_directly_issued_by(cert)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


@functools.lru_cache(maxsize=1024)
def _chain_problem(leaf_pem: bytes, chain: tuple[bytes, ...]) -> str | None:
    try:
        leaf = x509.load_pem_x509_certificate(leaf_pem)
        others = [c for pem in chain for c in x509.load_pem_x509_certificates(pem)]
    except ValueError:
        return "the peer certificate cannot be parsed"
    try:
        constraints = leaf.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        constraints = None
    if constraints is not None and constraints.ca:
        return "the peer certificate is a CA certificate, not a workload certificate"
    for cert in others:
        if cert.fingerprint(hashes.SHA256()) == leaf.fingerprint(hashes.SHA256()):
            continue
        if not _self_signed(cert):
            # Only a root may accompany the leaf: the mesh CA has path_length=0,
            # so a leaf reached through any intermediate is not a mesh identity.
            return "the peer certificate was issued through an intermediate CA (path length exceeded)"
    return None


def peer_chain_problem(auth_context: Mapping[str, Iterable[bytes]]) -> str | None:
    """Why a TLS peer that passed the handshake is still not a mesh identity, or None.

    BoringSSL (gRPC) does not apply the trust anchor's ``path_length=0``: a leaf
    issued by a sub-CA that the mesh CA signed completes the handshake. The
    peer's presented chain is in the ``x509_pem_cert_chain`` auth-context
    property (without the leaf on the server side); any certificate in it that
    is not self-signed is an intermediate, so the peer is refused. A leaf that
    is itself a CA certificate is refused too. Results are cached per
    certificate, so the per-call cost is a dictionary lookup.
    """
    leaf = list(auth_context.get("x509_pem_cert") or [])
    if len(leaf) != 1:
        return "no single peer certificate"
    return _chain_problem(leaf[0], tuple(auth_context.get("x509_pem_cert_chain") or ()))
