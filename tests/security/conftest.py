"""The §62 security evaluation: one real mesh, attacked from outside.

One session-scoped mesh (``agentmesh up --detach --ports-auto`` in a fresh
home, ``launcher.down`` in ``finally``). The tests play outsiders holding what
an attacker could hold: the CLI's operator and platform certificates, agent
certificates, certificates minted with the mesh CA for new names, a foreign CA,
a sub-CA, signed user assertions (and forged, ``alg=none``, expired and
wrong-audience ones), grants captured from the log or signed as the supervisor
signs them, and forged ones.

Every refusal is checked twice: the status and the ``ErrorInfo`` reason
decoded from ``grpc-status-details-bin`` (:meth:`Mesh.refused`), and the audit
record it left (:meth:`Mesh.find_record`, which polls because some refusals
reach the log through a durable outbox).

Keys and certificates are found through the project's own API (``MeshHome``
properties, the ``certs issue`` command), never by hard-coded paths.
"""

from __future__ import annotations

import base64
import datetime as dt
import functools
import hashlib
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from google.protobuf import struct_pb2, text_format
from google.protobuf.timestamp_pb2 import Timestamp

from agentmesh import assertion, config, errors, grants, launcher, pki, spiffe, transport
from agentmesh.config import MeshConfig
from agentmesh.v1 import agent_registry_service_pb2_grpc as reg_grpc
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import audit_service_pb2_grpc as audit_grpc
from agentmesh.v1 import capability_service_pb2 as cap_pb2
from agentmesh.v1 import capability_service_pb2_grpc as cap_grpc
from agentmesh.v1 import common_pb2
from agentmesh.v1 import decision_center_service_pb2_grpc as dc_grpc
from agentmesh.v1 import policy_service_pb2_grpc as policy_grpc
from agentmesh.v1 import specialist_service_pb2_grpc as spec_grpc
from agentmesh.v1 import supervisor_service_pb2 as sup_pb2
from agentmesh.v1 import supervisor_service_pb2_grpc as sup_grpc

OPERATOR = spiffe.client("operator")
"""The CLI's operator identity."""
PLATFORM = spiffe.client("platform-cli")
"""The CLI's platform identity (a caller of the supervisor)."""
SUPERVISOR = spiffe.service("supervisor")
WORK_PERMIT = spiffe.agent("work-permit-agent")
TRAINING = spiffe.agent("training-agent")
RISK = spiffe.agent("risk-agent")
COMPLIANCE = spiffe.agent("compliance-agent")

DENIED_EVENTS = (audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED, audit_pb2.AUDIT_EVENT_TYPE_POLICY_DECISION)
"""The event types a refusal is recorded as (with outcome DENIED)."""

ANALYSIS = "Analyze permit {} and tell me if it can be released"
RELEASE = "Analyze permit {} and release it if everything is fine"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "security_last(order): run after the rest of tests/security, by order")


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Moves the ``security_last`` tests (the scans of the whole session) to the end of this suite."""
    here = Path(__file__).parent
    positions = [i for i, item in enumerate(items) if here in Path(str(item.path)).parents]
    ours = [items[i] for i in positions]

    def order(item: pytest.Item) -> int:
        mark = item.get_closest_marker("security_last")
        return int(mark.args[0]) if mark and mark.args else 0

    last = sorted((item for item in ours if item.get_closest_marker("security_last")), key=order)
    if not last:
        return
    reordered = [item for item in ours if not item.get_closest_marker("security_last")] + last
    for i, item in zip(positions, reordered, strict=True):
        items[i] = item


# ------------------------------------------------------------------ processes


def agentmesh_cli(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Runs the real ``agentmesh`` command."""
    return subprocess.run([sys.executable, "-m", "agentmesh_cli", "--home", str(home), *args],
                          capture_output=True, text=True, timeout=timeout)


# ------------------------------------------------------------------ what an attacker holds


@dataclass(frozen=True)
class Issuer:
    """A CA an attacker can sign with, and the intermediates a leaf of it must send along."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey
    chain: tuple[x509.Certificate, ...] = ()


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def new_ca(common_name: str, *, signer: Issuer | None = None, path_length: int | None = 0) -> Issuer:
    """A CA: self-signed, or a sub-CA signed by ``signer``."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(signer.cert.subject if signer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now() - dt.timedelta(minutes=5))
        .not_valid_after(_now() + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=path_length), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if signer:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.key.public_key()), critical=False)
    cert = builder.sign(signer.key if signer else key, hashes.SHA256())
    return Issuer(cert, key, ((cert, *signer.chain) if signer else ()))


def leaf_pem(issuer: Issuer, spiffe_id: str) -> tuple[bytes, bytes]:
    """(certificate chain PEM, key PEM) of a leaf shaped like a mesh workload certificate, from any CA."""
    key = ec.generate_private_key(ec.SECP256R1())
    parsed = spiffe.parse(spiffe_id)
    sans: list[x509.GeneralName] = [x509.UniformResourceIdentifier(spiffe_id), x509.DNSName(parsed.dns_name)]
    start = _now() - dt.timedelta(minutes=5)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, parsed.name)]))
        .issuer_name(issuer.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + dt.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False, key_cert_sign=False,
                                     crl_sign=False, content_commitment=False, data_encipherment=False,
                                     key_agreement=True, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                       critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer.key.public_key()), critical=False)
        .sign(issuer.key, hashes.SHA256())
    )
    chain = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in (cert, *issuer.chain))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return chain, key_pem


def struct(**fields: Any) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    s.update(fields)
    return s


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# ------------------------------------------------------------------ refusals


@dataclass
class Refusal:
    """A refused call as the caller saw it."""

    code: grpc.StatusCode
    reason: str
    metadata: dict[str, str]
    message: str
    details: bytes = field(repr=False)
    """The raw ``grpc-status-details-bin`` trailer (empty when the server sent none)."""

    @property
    def field(self) -> str | None:
        return self.metadata.get("field")

    def __str__(self) -> str:
        return f"{self.code.name} {self.reason} {self.metadata} {self.message!r}"


def refusal_of(err: grpc.RpcError) -> Refusal:
    mesh_err = errors.from_rpc_error(err)
    details = b""
    if isinstance(err, grpc.Call):
        for key, value in err.trailing_metadata() or ():
            if key == "grpc-status-details-bin":
                details = value if isinstance(value, bytes) else str(value).encode()
    code = err.code() if isinstance(err, grpc.Call) else grpc.StatusCode.UNKNOWN
    info = errors.error_info(err)
    return Refusal(code, info.reason if info else "", dict(info.metadata) if info else {},
                   mesh_err.message, details)


# ------------------------------------------------------------------ the mesh under attack


@dataclass
class Mesh:
    """The running mesh, the attacker's workbench and what the session saw (for the leakage scans)."""

    cfg: MeshConfig
    workdir: Path
    addresses: dict[str, str] = field(default_factory=dict)
    refusals: list[Refusal] = field(default_factory=list)
    assertions: set[str] = field(default_factory=set)
    grant_signatures: set[bytes] = field(default_factory=set)
    forged_signatures: set[bytes] = field(default_factory=set)
    """Signatures of grants that can never verify (forged, tampered): the log must not hold them in any form."""
    confirmation_tokens: set[str] = field(default_factory=set)
    _channels: dict[tuple[str, str], grpc.Channel] = field(default_factory=dict)
    _idp: Ed25519PrivateKey | None = None
    _signer: grants.GrantSigner | None = None

    @property
    def home(self) -> Path:
        return self.cfg.mesh_home.root

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()

    # -- where things are (the project's API) ------------------------------

    @property
    def trust_bundle(self) -> Path:
        return self.cfg.mesh_home.trust_bundle

    def tls(self, identity: spiffe.SpiffeId) -> transport.TlsFiles:
        """The certificate and key the mesh issued to one of its identities, with the trust bundle."""
        paths = self.cfg.mesh_home.workload_files(identity)
        return transport.TlsFiles(paths.cert, paths.key, self.trust_bundle)

    def project_ca(self) -> pki.CertificateAuthority:
        """The mesh CA as the issuing commands load it (its key is in the CA directory)."""
        return pki.CertificateAuthority.load(self.cfg.mesh_home.ca, self.trust_bundle)

    def mesh_ca(self) -> Issuer:
        """The mesh CA, as someone who stole its key holds it."""
        ca = self.project_ca()
        return Issuer(ca.cert, ca.key)

    def issue_unchecked(self, name: str, spiffe_id: str, **kw: Any) -> transport.TlsFiles:
        """A leaf the mesh must refuse (expired, two URI SANs), issued with ``agentmesh.pki`` and the mesh CA."""
        paths = pki.CertPaths(self.workdir / f"{name}.pem", self.workdir / f"{name}.key")
        self.project_ca().issue_unchecked(spiffe.parse(spiffe_id), paths, **kw)
        return transport.TlsFiles(paths.cert, paths.key, self.trust_bundle)

    def issue_with_cli(self, spiffe_id: str) -> transport.TlsFiles:
        """A certificate for a new name, minted by the project's own issuing command."""
        result = agentmesh_cli(self.home, "certs", "issue", "--spiffe-id", spiffe_id, "--json")
        assert result.returncode == 0, result.stderr
        issued = json.loads(result.stdout)
        return transport.TlsFiles(Path(issued["cert"]), Path(issued["key"]), self.trust_bundle)

    def files(self, name: str, chain_pem: bytes, key_pem: bytes, *, trust: Path | None = None) -> transport.TlsFiles:
        """Writes an attacker's certificate and key to the workbench."""
        cert, key = self.workdir / f"{name}.pem", self.workdir / f"{name}.key"
        cert.write_bytes(chain_pem)
        key.write_bytes(key_pem)
        key.chmod(0o600)
        return transport.TlsFiles(cert, key, trust or self.trust_bundle)

    def minted(self, name: str, issuer: Issuer, spiffe_id: str) -> transport.TlsFiles:
        return self.files(name, *leaf_pem(issuer, spiffe_id))

    # -- channels and stubs --------------------------------------------------

    def channel(self, target: str, tls: transport.TlsFiles | spiffe.SpiffeId = PLATFORM) -> grpc.Channel:
        """An mTLS channel to a mesh process (a role or an agent id), verifying the server's identity."""
        files = self.tls(tls) if isinstance(tls, spiffe.SpiffeId) else tls
        key = (target, str(files.cert))
        if key not in self._channels:
            server = spiffe.service(target) if target in config.ROLES else spiffe.agent(target)
            self._channels[key] = transport.secure_channel(self.addresses[target], files, server,
                                                           default_timeout_s=30)
        return self._channels[key]

    def supervisor(self, who: transport.TlsFiles | spiffe.SpiffeId = PLATFORM) -> sup_grpc.SupervisorServiceStub:
        return sup_grpc.SupervisorServiceStub(self.channel("supervisor", who))

    def center(self, who: transport.TlsFiles | spiffe.SpiffeId = PLATFORM) -> dc_grpc.DecisionCenterServiceStub:
        return dc_grpc.DecisionCenterServiceStub(self.channel("supervisor", who))

    def registry(self, who: transport.TlsFiles | spiffe.SpiffeId = OPERATOR) -> reg_grpc.AgentRegistryServiceStub:
        return reg_grpc.AgentRegistryServiceStub(self.channel("supervisor", who))

    def capability(self, who: transport.TlsFiles | spiffe.SpiffeId) -> cap_grpc.CapabilityServiceStub:
        return cap_grpc.CapabilityServiceStub(self.channel("capability", who))

    def policy(self, who: transport.TlsFiles | spiffe.SpiffeId = OPERATOR) -> policy_grpc.PolicyServiceStub:
        return policy_grpc.PolicyServiceStub(self.channel("policy", who))

    def audit(self, who: transport.TlsFiles | spiffe.SpiffeId = OPERATOR) -> audit_grpc.AuditServiceStub:
        return audit_grpc.AuditServiceStub(self.channel("audit", who))

    def specialist(self, agent: str, who: transport.TlsFiles | spiffe.SpiffeId) -> spec_grpc.SpecialistServiceStub:
        return spec_grpc.SpecialistServiceStub(self.channel(agent, who))

    # -- users and grants ----------------------------------------------------

    def token(self, user: str, *roles: str, tenant: str = "acme", ttl_s: int = 3600) -> str:
        """A user assertion signed by the mesh's (development) identity provider."""
        if self._idp is None:
            key = serialization.load_pem_private_key(self.cfg.mesh_home.idp_key.read_bytes(), password=None)
            assert isinstance(key, Ed25519PrivateKey)
            self._idp = key
        token = assertion.issue(self._idp, tenant_id=tenant, user_id=user, roles=list(roles), ttl_s=ttl_s)
        self.assertions.add(token)
        return token

    def remember_assertion(self, token: str) -> str:
        self.assertions.add(token)
        return token

    @property
    def signer(self) -> grants.GrantSigner:
        """The supervisor's grant-signing key: grants signed with it are what the supervisor issues."""
        if self._signer is None:
            key = serialization.load_pem_private_key(self.cfg.mesh_home.grant_signer_key.read_bytes(),
                                                     password=None)
            assert isinstance(key, Ed25519PrivateKey)
            self._signer = grants.GrantSigner(key)
        return self._signer

    def grant(self, audience: spiffe.SpiffeId, capabilities: list[str], resources: list[str], *,
              user: str = "alice", roles: tuple[str, ...] = ("analyst",), tenant: str = "acme",
              signer: grants.GrantSigner | None = None, ttl: dt.timedelta = dt.timedelta(minutes=5),
              issued: dt.datetime | None = None, **fields: Any) -> common_pb2.SignedTaskGrant:
        """A task grant as the supervisor signs one (or as ``signer`` forges one)."""
        start = issued or _now()
        issued_at, expires_at = Timestamp(), Timestamp()
        issued_at.FromDatetime(start)
        expires_at.FromDatetime(start + ttl)
        execution_id = fields.pop("execution_id", None) or f"exe-{uuid.uuid4().hex[:16]}"
        body = common_pb2.TaskGrant(
            grant_id=f"grant-{uuid.uuid4().hex}", execution_id=execution_id, task_id=f"{execution_id}-t1",
            tenant_id=tenant, user_id=user, assertion_digest=sha256_hex(f"{tenant}/{user}"),
            issuer=str(SUPERVISOR), audience=str(audience), capabilities=capabilities, depth=fields.pop("depth", 1),
            issued_at=issued_at, expires_at=expires_at, actor_type=fields.pop("actor_type", common_pb2.ACTOR_TYPE_USER),
            roles=list(roles),
            session_id=f"ses-{uuid.uuid4().hex[:12]}", conversation_id=f"conv-{uuid.uuid4().hex[:12]}",
            resources=resources, **fields)
        signed = (signer or self.signer).sign(body)
        if signer is not None:
            signed.key_id = self.signer.key_id  # a forgery claims the real key
            self.forged_signatures.add(signed.signature)
        self.grant_signatures.add(signed.signature)
        return signed

    def captured_grants(self, execution_id: str, agent_id: str) -> list[common_pb2.SignedTaskGrant]:
        """The grants the supervisor delegated to an agent in an execution, as the agent received them.

        The log keeps each grant's body and record signature (and, in older records, its signature); an Ed25519
        signature is deterministic, so signing the logged body with the supervisor's key
        gives back the very grant the agent got, byte for byte.
        """
        found = []
        for r in self.records(execution_id=execution_id):
            if r.event_type != audit_pb2.AUDIT_EVENT_TYPE_TASK_DELEGATED or r.agent_id != agent_id:
                continue
            for logged in r.principal.grants:
                if grants.decode(logged).audience != str(spiffe.agent(agent_id)):
                    continue
                signed = common_pb2.SignedTaskGrant(grant=logged.grant, key_id=logged.key_id,
                                                    signature=logged.signature or self.signer.key.sign(logged.grant),
                                                    record_signature=logged.record_signature)
                self.grant_signatures.add(signed.signature)
                found.append(signed)
        return found

    def invoke(self, who: transport.TlsFiles | spiffe.SpiffeId, grant: common_pb2.SignedTaskGrant | None,
               capability: str, *, idempotency_key: str = "", principal: common_pb2.AgentPrincipal | None = None,
               **fields: Any) -> cap_pb2.InvokeCapabilityResponse:
        req = cap_pb2.InvokeCapabilityRequest(capability_id=capability, input=struct(**fields),
                                              idempotency_key=idempotency_key)
        if grant is not None:
            req.grant.CopyFrom(grant)
        if principal is not None:
            req.principal.CopyFrom(principal)
        return self.capability(who).InvokeCapability(req, timeout=30)  # type: ignore[no-any-return]

    # -- supervisor ------------------------------------------------------------

    def analyze(self, text: str, user_token: str, *, tenant: str = "acme", **kw: Any) -> sup_pb2.Execution:
        return self.supervisor().Analyze(sup_pb2.AnalyzeRequest(
            user_assertion=user_token, request_text=text, tenant_id=tenant, **kw), timeout=60).execution

    # -- refusals and the log ------------------------------------------------

    def refused(self, call: Callable[[], Any]) -> Refusal:
        """Runs a call that must fail; returns how, and keeps it for the leakage scan."""
        try:
            result = call()
            if isinstance(result, Iterator):
                list(result)
        except grpc.RpcError as err:
            got = refusal_of(err)
            self.refusals.append(got)
            return got
        raise AssertionError(f"the call was not refused: {result!r}"[:2000])

    @staticmethod
    def marker() -> Timestamp:
        """Now, as a QueryRecords start_time: records of what happens next are at or after it."""
        ts = Timestamp()
        ts.FromDatetime(_now() - dt.timedelta(milliseconds=5))
        return ts

    def records(self, **filters: Any) -> list[audit_pb2.AuditRecord]:
        """Audit records, read as an operator."""
        pages = self.audit(OPERATOR).QueryRecords(audit_pb2.QueryRecordsRequest(**filters), timeout=30)
        return [r for page in pages for r in page.records]

    def find_record(
        self,
        *,
        reason: str | None = None,
        execution_id: str = "",
        since: Timestamp | None = None,
        caller: str | None = None,
        user_id: str | None = None,
        event_types: tuple[int, ...] | None = DENIED_EVENTS,
        outcome: int | None = audit_pb2.AUDIT_OUTCOME_DENIED,
        contains: Iterable[str] = (),
        where: Callable[[audit_pb2.AuditRecord], bool] | None = None,
        timeout_s: float = 6.0,
    ) -> audit_pb2.AuditRecord:
        """The audit record of a refusal (polls: some reach the log through an outbox).

        Matches by execution id, or by records at/after ``since``; ``reason`` must be
        the first reason code (the ErrorInfo reason), ``caller`` (a SPIFFE id) and
        ``contains`` must appear in the record.
        """
        assert execution_id or since is not None, "match by execution id, or after a marker"
        wanted = tuple(contains)
        deadline = time.monotonic() + timeout_s
        seen: list[audit_pb2.AuditRecord] = []
        while True:
            seen = self.records(execution_id=execution_id) if execution_id else self.records(start_time=since)
            for r in seen:
                text = text_format.MessageToString(r, as_utf8=True)
                if event_types is not None and r.event_type not in event_types:
                    continue
                if outcome is not None and r.outcome != outcome:
                    continue
                if reason is not None and (not r.reason_codes or r.reason_codes[0] != reason):
                    continue
                if caller is not None and caller not in text:
                    continue
                if user_id is not None and r.user_id != user_id:
                    continue
                if any(w not in text for w in wanted):
                    continue
                if where is not None and not where(r):
                    continue
                return r
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        summary = "\n".join(f"  {audit_pb2.AuditEventType.Name(r.event_type)} "
                            f"{audit_pb2.AuditOutcome.Name(r.outcome)} {list(r.reason_codes)[:4]} "
                            f"by={r.recorded_by} user={r.user_id} exe={r.execution_id}" for r in seen[-15:])
        raise AssertionError(f"no audit record with reason={reason} caller={caller} user={user_id} "
                             f"contains={wanted} among {len(seen)} records; the last ones:\n{summary}")


def running_mesh(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[Mesh]:
    """``agentmesh up --detach --ports-auto`` in a fresh home named after ``name``; ``down`` afterwards."""
    home = tmp_path_factory.mktemp(f"{name}-mesh")
    result = agentmesh_cli(home, "up", "--detach", "--ports-auto", "--json")
    cfg = config.load(home=str(home), environ={})
    target: Mesh | None = None
    try:
        assert result.returncode == 0, result.stderr
        target = Mesh(cfg, tmp_path_factory.mktemp(f"{name}-attacker"),
                      addresses={p.name: p.address for p in launcher.read_state(cfg)})
        yield target
    finally:
        if target is not None:
            target.close()
        launcher.down(cfg)


@pytest.fixture(scope="session")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    """The mesh the security tests share (see :func:`running_mesh`)."""
    yield from running_mesh(tmp_path_factory, "security")


def b64_forms(data: bytes) -> set[str]:
    """How bytes would look if they were written into text."""
    forms = {data.hex(), base64.b64encode(data).decode(), base64.urlsafe_b64encode(data).decode()}
    return forms | {f.rstrip("=") for f in forms}


def unique(prefix: str) -> str:
    """A fresh name, so the records of one attack are told apart from every other."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def alice_execution(mesh: Mesh) -> sup_pb2.Execution:
    """A finished analysis of WP-10231 asked by alice (permit-manager) in acme."""
    ex = mesh.analyze(ANALYSIS.format("WP-10231"), mesh.token("alice", "permit-manager"))
    assert ex.decision == common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE, ex.summary
    return ex


@pytest.fixture(scope="session")
def conflict_review(mesh: Mesh) -> tuple[sup_pb2.Execution, str]:
    """WP-10233 asked by carol: the conflict goes to the Decision Center as an open review."""
    ex = mesh.analyze(ANALYSIS.format("WP-10233"), mesh.token("carol", "analyst"))
    assert ex.decision == common_pb2.ANALYSIS_DECISION_REQUIRES_REVIEW, ex.summary
    review_id = ex.conflicts[0].review_id
    assert review_id
    return ex, review_id


@functools.cache
def world() -> dict[str, Any]:
    """The demo world the mesh loaded (``agentmesh/data/demo_world.yaml``), for facts the tests check against."""
    from agentmesh.launcher import demo_world

    doc: dict[str, Any] = yaml.safe_load(demo_world().read_text())
    return doc


def world_tenant(tenant: str) -> dict[str, Any]:
    return next(t for t in world()["tenants"] if t["id"] == tenant)


def world_permit(tenant: str, permit_id: str) -> dict[str, Any]:
    return next(p for p in world_tenant(tenant)["permits"] if p["id"] == permit_id)


def world_worker(tenant: str, worker_id: str) -> dict[str, Any]:
    return next(w for w in world_tenant(tenant)["workers"] if w["id"] == worker_id)


def lms_trainings(tenant: str, worker_id: str) -> list[dict[str, Any]]:
    lms = world_tenant(tenant).get("lms", {})
    entry = next((w for w in lms.get("workers", []) if w["worker_id"] == worker_id), {"trainings": []})
    return list(entry["trainings"])


def task_grants(mesh: Mesh, ex: sup_pb2.Execution) -> dict[str, common_pb2.SignedTaskGrant]:
    """The grant each agent got for its (last) task in an execution, captured from the log."""
    out: dict[str, common_pb2.SignedTaskGrant] = {}
    for node in ex.graph.nodes:
        captured = mesh.captured_grants(ex.execution_id, node.target_agent_id)
        assert captured, f"no grant of {node.target_agent_id} in the log of {ex.execution_id}"
        out[node.target_agent_id] = captured[-1]
    return out
