"""The identities a mesh needs, and issuing them all at once (``agentmesh certs init``).

Where everything goes is described in :mod:`agentmesh.home`: the CA key and the
dev identity provider's key in ``HOME/ca`` (issuing commands only), the trust
bundle and public keys in ``HOME/trust``, and one private directory per
identity in ``HOME/workloads`` with its certificate, its key and, for the roles
that sign, their own signing key.
"""

from __future__ import annotations

import datetime as dt
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.exceptions import InvalidSignature

from agentmesh import spiffe, transport
from agentmesh.config import ROLES, MeshConfig
from agentmesh.home import MeshHome
from agentmesh.pki import CertificateAuthority, CertPaths, PkiError, Validity, workload_dir_name
from agentmesh.signing import load_or_create_private_key

OPERATOR = spiffe.client("operator")
"""The identity the CLI uses for operator commands (kill switches, audit, status)."""
PLATFORM_CLI = spiffe.client("platform-cli")
"""The identity the CLI uses as a platform caller of the supervisor."""
CONSOLE = spiffe.service("console")
"""The web console: a client of the supervisor (and, for operators, of audit and policy)."""
SUPERVISOR = spiffe.service("supervisor")
AUDIT = spiffe.service("audit")

IDP_PUBLIC_KEY = "idp.pub"
GRANT_SIGNER_KEY = "grant-signer.key"
GRANT_SIGNER_PUBLIC_KEY = "grant-signer.pub"
RENEW_BEFORE = dt.timedelta(hours=1)
"""A certificate that expires sooner than this is re-issued by ``certs init`` / ``up`` (as is one
past half its lifetime): a mesh started without its supervising loop has at least this long."""


@dataclass(frozen=True, slots=True)
class Workload:
    """One process of the mesh: its name, identity and Python module."""

    name: str
    identity: spiffe.SpiffeId
    module: str
    extra_args: tuple[str, ...] = ()


def workloads(config: MeshConfig) -> list[Workload]:
    """Every gRPC process, in start order: each one's dependencies come before it."""
    order = ["audit", "policy", "capability", "model"]
    items = [Workload(r, spiffe.service(r), f"{r}_svc") for r in order]
    items += [
        Workload(a, spiffe.agent(a), "specialist_svc", ("--agent", a)) for a in config.agents
    ]
    items.append(Workload("supervisor", spiffe.service("supervisor"), "supervisor_svc"))
    assert {w.name for w in items} >= set(ROLES)
    return items


def client_paths(config: MeshConfig, identity: spiffe.SpiffeId) -> CertPaths:
    """Certificate paths of a client (or workload) identity."""
    return config.mesh_home.workload_files(identity)


def tls_files(config: MeshConfig, identity: spiffe.SpiffeId) -> transport.TlsFiles:
    """An identity's certificate and key with the trust bundle."""
    home = config.mesh_home
    return transport.TlsFiles.of(home.workload_files(identity), home.trust_bundle)


def grant_signer_key_path(home: MeshHome) -> Path:
    """The supervisor's grant signing key, in the supervisor's own directory."""
    return home.grant_signer_key


def audit_key_dir(home: MeshHome) -> Path:
    """Where the audit service keeps its checkpoint signing key: its own directory."""
    return home.workload_dir(AUDIT)


AUDIT_CHECKPOINT_KEY: Final = "audit-checkpoint-ed25519.pem"
"""File name of the audit service's checkpoint signing key (PKCS#8 PEM, mode 0600) inside its key directory."""

AUDIT_CHECKPOINT_PUBLIC_KEY: Final = "audit-checkpoint-ed25519.pub.pem"
"""File name of its exported public key (SubjectPublicKeyInfo PEM), in the key directory and the public keys'."""


def mesh_identities(config: MeshConfig) -> list[spiffe.SpiffeId]:
    """Every identity the mesh issues and renews: each workload, the web console, and the CLI's two clients."""
    return [w.identity for w in workloads(config)] + [CONSOLE, OPERATOR, PLATFORM_CLI]


def leaf_validity(config: MeshConfig) -> dt.timedelta:
    """How long a leaf is issued for (config ``leaf_validity_s``, default 24 h)."""
    return dt.timedelta(seconds=config.leaf_validity_s)


MUST_ISSUE = ("missing", "unreadable", "not issued by the current mesh CA", "expired", "not yet valid")
"""Why a leaf cannot be used at all (:func:`leaf_due`); anything else is a renewal that may wait."""


def leaf_due(paths: CertPaths, ca_cert: x509.Certificate, now: dt.datetime, *,
             renew_before: dt.timedelta = dt.timedelta(0)) -> str | None:
    """Why a leaf must be issued again, or None.

    One of :data:`MUST_ISSUE` (missing, unreadable, not issued by the current CA, expired,
    not yet valid), ``past half its lifetime`` (the supervising loop renews it), or
    ``expires within …`` (``renew_before``, what ``up`` adds).
    """
    if not (paths.cert.exists() and paths.key.exists()):
        return "missing"
    try:
        cert = x509.load_pem_x509_certificate(paths.cert.read_bytes())
    except (OSError, ValueError):  # any doubt: issue anew
        return "unreadable"
    try:
        cert.verify_directly_issued_by(ca_cert)
    except (ValueError, TypeError, InvalidSignature):
        return "not issued by the current mesh CA"
    validity = Validity(cert.not_valid_before_utc, cert.not_valid_after_utc)
    if now >= validity.not_after:
        return "expired"
    if now < validity.not_before:
        return "not yet valid"
    if now >= validity.renew_at:
        return "past half its lifetime"
    if validity.not_after - now < renew_before:
        return f"expires within {renew_before}"
    return None


def _signing_key(private: Path, public: Path) -> None:
    """Creates a signing key unless its public half is published without it.

    A published public key whose private key is absent belongs to a signer
    kept elsewhere (e.g. a CA directory moved offline); making a new one would
    silently replace what every verifier trusts.
    """
    if private.exists() or not public.exists():
        load_or_create_private_key(private, public)


def init_identities(config: MeshConfig, *, force: bool = False) -> list[str]:
    """Creates the CA, every workload and client certificate, and the signing keys.

    Existing files are kept unless ``force`` (new CA, every certificate
    re-issued; signing keys are kept). A certificate that is missing, not valid
    now or not issued by the current CA is issued again, valid
    ``leaf_validity_s``; so is one past half its lifetime or expiring within
    :data:`RENEW_BEFORE`, when the CA key is there. The CA key is read only when
    something must be issued, so a home whose ``ca/`` was moved away still
    starts while its leaves are valid. Returns the SPIFFE ids issued.
    """
    home = config.mesh_home.ensure()
    ca: CertificateAuthority | None = None
    if force or not (home.ca_key.exists() or home.trust_bundle.exists()):
        ca = CertificateAuthority.init(home.ca, home.trust_bundle, force=True)
        force = True
    elif home.ca_key.exists() and not home.trust_bundle.exists():
        raise PkiError(f"incomplete mesh CA: {home.ca_key} exists but {home.trust_bundle} does not "
                       f"(restore it, or run 'agentmesh certs init --force' to start a new CA)")
    try:
        ca_cert = x509.load_pem_x509_certificate(home.trust_bundle.read_bytes())
    except (OSError, ValueError) as err:
        raise PkiError(f"cannot read the trust bundle {home.trust_bundle}: {err}") from err
    now = dt.datetime.now(dt.UTC)
    issued = []
    for identity in mesh_identities(config):
        paths = home.workload_files(identity)
        why = "forced" if force else leaf_due(paths, ca_cert, now, renew_before=RENEW_BEFORE)
        if why is None:
            continue
        if ca is None:
            if not home.ca_key.exists():
                if why not in MUST_ISSUE:
                    continue  # still valid: it can wait for the CA directory to come back
                raise PkiError(f"{identity} needs a certificate ({why}) but the CA key {home.ca_key} "
                               f"is not there (put the CA directory back to issue)")
            ca = CertificateAuthority.load(home.ca, home.trust_bundle)
        ca.issue(identity, paths, validity=leaf_validity(config))
        issued.append(str(identity))
    _signing_key(home.idp_key, home.public_key_path(IDP_PUBLIC_KEY))
    _signing_key(grant_signer_key_path(home), home.public_key_path(GRANT_SIGNER_PUBLIC_KEY))
    _signing_key(audit_key_dir(home) / AUDIT_CHECKPOINT_KEY, home.public_key_path(AUDIT_CHECKPOINT_PUBLIC_KEY))
    return issued


class LegacyLayoutError(PkiError):
    """A home holds both the old layout (``certs/``, ``keys/``) and the new one."""


def migrate_legacy_layout(home: MeshHome) -> list[str]:
    """Moves a home of the old layout (``certs/``, ``keys/``) to ``ca/``, ``trust/``, ``workloads/``.

    Returns one line per file moved ([] when there is nothing to migrate).
    Refuses (LegacyLayoutError, nothing moved) when a destination already exists, i.e.
    both layouts are present. ``certs/`` and ``keys/`` are removed once empty;
    a file it does not know stays where it is and is named in the result.
    """
    certs, keys = home.legacy_dirs
    if not certs.is_dir() and not keys.is_dir():
        return []
    plan: list[tuple[Path, Path]] = [
        (certs / "ca.key", home.ca_key),
        (certs / "ca.pem", home.trust_bundle),
        (keys / "idp.key", home.idp_key),
        (keys / IDP_PUBLIC_KEY, home.public_key_path(IDP_PUBLIC_KEY)),
        (keys / GRANT_SIGNER_KEY, grant_signer_key_path(home)),
        (keys / GRANT_SIGNER_PUBLIC_KEY, home.public_key_path(GRANT_SIGNER_PUBLIC_KEY)),
        (keys / AUDIT_CHECKPOINT_KEY, audit_key_dir(home) / AUDIT_CHECKPOINT_KEY),
        (keys / AUDIT_CHECKPOINT_PUBLIC_KEY, home.public_key_path(AUDIT_CHECKPOINT_PUBLIC_KEY)),
    ]
    if certs.is_dir():
        for cert in sorted(certs.glob("*.pem")):
            stem = cert.stem
            key = certs / f"{stem}.key"
            kind, sep, name = stem.partition("-")
            if stem == "ca" or not sep or kind not in spiffe.KINDS or not key.exists():
                continue
            folder = home.workloads / workload_dir_name(spiffe.SpiffeId(kind, name))
            plan += [(cert, folder / "cert.pem"), (key, folder / "key.pem")]
    plan = [(src, dst) for src, dst in plan if src.exists()]
    clashes = [str(dst) for _, dst in plan if dst.exists()]
    if clashes:
        raise LegacyLayoutError(f"{home.root} has both the old layout (certs/, keys/) and the new one "
                       f"({clashes[0]} exists); keep one: remove certs/ and keys/, or the new directories")
    home.ensure()
    moved = []
    for src, dst in plan:
        dst.parent.mkdir(parents=True, exist_ok=True)
        if dst.parent != home.trust:
            dst.parent.chmod(0o700)
        shutil.move(src, dst)
        moved.append(f"{src.relative_to(home.root)} -> {dst.relative_to(home.root)}")
    # The audit service also keeps its public key beside its private one.
    published = home.public_key_path(AUDIT_CHECKPOINT_PUBLIC_KEY)
    if (audit_key_dir(home) / AUDIT_CHECKPOINT_KEY).exists() and published.exists():
        shutil.copyfile(published, audit_key_dir(home) / AUDIT_CHECKPOINT_PUBLIC_KEY)
    for folder in (certs, keys):
        if folder.is_dir():
            for leftover in sorted(folder.glob("*.tmp")):
                leftover.unlink()
            left = sorted(p.name for p in folder.iterdir())
            if left:
                moved.append(f"left in {folder.relative_to(home.root)}/: {', '.join(left)}")
            else:
                folder.rmdir()
    return moved
