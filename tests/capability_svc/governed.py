"""The governed invoker in process, for tests: real grants, a policy and an audit that keep what they were given.

Grants are signed with a key made per test; the policy allows unless told
otherwise (and denies a resource of another tenant, as ``tenant.isolation``
does); audit keeps every record with how it was sent (``record`` — durable
before the caller goes on, or raises — ``record_durably`` through the outbox,
or ``record_later``), and can be told to be down.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from google.protobuf import struct_pb2
from google.rpc import error_details_pb2

from agentmesh import errors, grants, spiffe
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import capability_service_pb2 as pb
from agentmesh.v1 import common_pb2
from agentmesh.v1 import policy_service_pb2 as policy_pb2
from capability_svc.executor import CapabilityExecutor
from capability_svc.external_gateway import LmsClient
from capability_svc.governance import GovernedInvoker
from capability_svc.idempotency import IdempotencyStore
from capability_svc.internal_runtime import InternalBackend, InternalStore
from capability_svc.knowledge_store import KnowledgeBackend, KnowledgeLibrary
from capability_svc.registry import CapabilityRegistry
from capability_svc.runtime import CapabilityRuntime

NOW = dt.datetime(2026, 11, 30, 9, 0, tzinfo=dt.UTC)
"""The demo's "now" (as in conftest)."""

AGENT = str(spiffe.agent("work-permit-agent"))
SUPERVISOR = str(spiffe.service("supervisor"))
MUTATIONS = ["workPermit.release", "workPermit.updateValidity"]
READS = ["workPermit.get", "workPermit.search", "worker.get", "risk.evaluate", "compliance.getChecklist",
         "training.getStatus"]

INVOKED = (audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED, audit_pb2.AUDIT_OUTCOME_PENDING, [])
VERIFIED = (audit_pb2.AUDIT_EVENT_TYPE_VERIFICATION, audit_pb2.AUDIT_OUTCOME_SUCCESS, ["VERIFIED", "EFFECT_VISIBLE"])
NOT_VISIBLE = (audit_pb2.AUDIT_EVENT_TYPE_VERIFICATION, audit_pb2.AUDIT_OUTCOME_FAILURE,
               ["VERIFICATION_FAILED", "EFFECT_NOT_VISIBLE"])


def outcome(result: int, *reasons: str) -> tuple[int, int, list[str]]:
    return (audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME, result, list(reasons))


@dataclass
class Record:
    event_type: int
    fields: dict[str, Any]
    how: str
    """``record``, ``record_durably`` (appended or queued in the outbox), ``record_all`` or ``record_later``."""


class Recorder:
    """Keeps every record it is given.

    ``failing`` lists event types audit refuses (audit down for them): ``record``
    raises, ``record_durably`` still keeps them (the outbox). ``outbox_broken``
    makes ``record_durably`` raise too.
    """

    def __init__(self) -> None:
        self.kept: list[Record] = []
        self.failing: set[int] = set()
        self.outbox_broken = False
        self.appends: list[int] = []
        """The number of records of each ``record_all``, in order."""

    @property
    def records(self) -> list[tuple[int, dict[str, Any]]]:
        return [(r.event_type, r.fields) for r in self.kept]

    def record(self, event_type: int, **fields: Any) -> audit_pb2.AppendRecordResponse:
        if event_type in self.failing:
            raise errors.Unavailable("audit down", reason="AUDIT_UNAVAILABLE")
        self.kept.append(Record(event_type, fields, "record"))
        return audit_pb2.AppendRecordResponse()

    def record_durably(self, event_type: int, **fields: Any) -> None:
        if self.outbox_broken:
            raise errors.Unavailable("audit down and the outbox cannot write", reason="AUDIT_UNAVAILABLE")
        self.kept.append(Record(event_type, fields, "record_durably"))

    def record_all(self, records: list[tuple[int, dict[str, Any]]]) -> list[audit_pb2.AppendRecordResponse]:
        self.appends.append(len(records))
        if any(event_type in self.failing for event_type, _ in records):
            raise errors.Unavailable("audit down", reason="AUDIT_UNAVAILABLE")
        self.kept.extend(Record(event_type, fields, "record_all") for event_type, fields in records)
        return [audit_pb2.AppendRecordResponse() for _ in records]

    def record_later(self, event_type: int, **fields: Any) -> Any:
        if event_type in self.failing:
            raise errors.Unavailable("audit down", reason="AUDIT_UNAVAILABLE")
        self.kept.append(Record(event_type, fields, "record_later"))
        return None

    def wait(self, sent: Any) -> bool:
        return True

    def trail(self) -> list[tuple[int, int, list[str]]]:
        return [(t, f["outcome"], list(f.get("reason_codes", []))) for t, f in self.records]

    def how(self) -> list[tuple[int, str]]:
        return [(r.event_type, r.how) for r in self.kept]


@dataclass
class Policy:
    """Allows, unless ``effect`` says otherwise; a resource of another tenant is denied (``tenant.isolation``)."""

    effect: int = common_pb2.POLICY_EFFECT_ALLOW
    requests: list[policy_pb2.AuthorizeRequest] = field(default_factory=list)
    batches: list[int] = field(default_factory=list)
    """The size of each ``authorize_all``."""
    down: bool = False
    """``authorize_all`` answers UNAVAILABLE for every request."""

    def __call__(self, request: policy_pb2.AuthorizeRequest) -> policy_pb2.AuthorizeResponse:
        self.requests.append(request)
        effect, reasons = self.effect, ["test.policy"]
        if request.resource.tenant_id != request.user.tenant_id:
            effect, reasons = common_pb2.POLICY_EFFECT_DENY, ["tenant.isolation"]
        return policy_pb2.AuthorizeResponse(decision=common_pb2.PolicyDecision(
            decision_id=f"d-{len(self.requests)}", effect=effect, reason_codes=reasons, policy_version="test"))

    def authorize_all(self, requests: Sequence[policy_pb2.AuthorizeRequest]
                      ) -> list[policy_pb2.AuthorizeResponse | errors.MeshError]:
        self.batches.append(len(requests))
        if self.down:
            return [errors.Unavailable("policy down", reason="UNAVAILABLE")] * len(requests)
        return [self(r) for r in requests]


def resources_for(capability: str, arguments: dict[str, Any], tenant: str = "acme") -> list[str]:
    """What a supervisor would name for this one call."""
    if capability == "workPermit.search":
        return [f"tenant:{tenant}"]
    if "permit_id" in arguments:
        return [f"permit:{arguments['permit_id']}"]
    return [f"worker:{arguments['worker_id']}"]


class Mesh:
    """A GovernedInvoker over the demo world, and what it recorded."""

    def __init__(self, runtime: CapabilityRuntime, invoker: GovernedInvoker, audit: Recorder, policy: Policy,
                 signer: grants.GrantSigner, store: InternalStore) -> None:
        self.runtime = runtime
        self.invoker = invoker
        self.audit = audit
        self.policy = policy
        self.signer = signer
        self.store = store

    def grant(self, *, capabilities: Sequence[str] = (*MUTATIONS, *READS), resources: Iterable[str] = (),
              audience: str = AGENT, user: str = "alice", tenant: str = "acme", execution_id: str = "exe-1",
              **kw: Any) -> common_pb2.SignedTaskGrant:
        args: dict[str, Any] = dict(issuer=SUPERVISOR, audience=audience, execution_id=execution_id,
                                    task_id="task-1", tenant_id=tenant, user_id=user, assertion_digest="0" * 64,
                                    roles=["permit-manager"], capabilities=list(capabilities),
                                    resources=list(resources), now=NOW)
        args.update(kw)
        return self.signer.issue(**args)

    def request(self, capability: str, key: str = "k-1", *, grant: common_pb2.SignedTaskGrant | None = None,
                principal: common_pb2.AgentPrincipal | None = None, **arguments: Any) -> pb.InvokeCapabilityRequest:
        if grant is None:
            grant = self.grant(resources=resources_for(capability, arguments))
        struct = struct_pb2.Struct()
        struct.update(arguments)
        req = pb.InvokeCapabilityRequest(grant=grant, capability_id=capability, input=struct, idempotency_key=key)
        if principal is not None:
            req.principal.CopyFrom(principal)
        return req

    def call(self, req: pb.InvokeCapabilityRequest, caller: str = AGENT) -> pb.InvokeCapabilityResponse:
        return self.invoker.invoke(caller, req, deadline_s=5.0)

    def invoke(self, capability: str, key: str = "k-1", **arguments: Any) -> pb.InvokeCapabilityResponse:
        return self.call(self.request(capability, key, **arguments))

    def refused(self, capability: str, key: str = "k-1", **arguments: Any) -> errors.MeshError:
        return self.refusal(self.request(capability, key, **arguments))

    def refusal(self, req: pb.InvokeCapabilityRequest, caller: str = AGENT) -> errors.MeshError:
        with pytest.raises(errors.MeshError) as info:
            self.call(req, caller)
        return info.value

    def permit(self, permit_id: str) -> Any:
        permit = self.store.scope("acme").get_permit(permit_id)
        assert permit is not None
        return permit


def error_info(err: errors.MeshError) -> error_details_pb2.ErrorInfo:
    """The ErrorInfo the caller receives (as the servicer aborts with ``err.to_status()``)."""
    (detail,) = err.to_status().details
    info = error_details_pb2.ErrorInfo()
    assert detail.Unpack(info)
    return info


def wire(err: errors.MeshError) -> bytes:
    """Everything the caller receives of a refusal: the google.rpc.Status, serialised (grpc-status-details-bin)."""
    return err.to_status().SerializeToString(deterministic=True)


def make_mesh(tmp_path: Path, registry: CapabilityRegistry, store: InternalStore,
              backend: InternalBackend) -> tuple[Mesh, IdempotencyStore]:
    """A Mesh over the demo world; close the returned store at the end."""
    knowledge = KnowledgeBackend(KnowledgeLibrary.load(), clock=lambda: NOW)
    executor = CapabilityExecutor(registry, backend, {}, knowledge)
    # The LMS is not on this path; the runtime only needs the internal systems and the knowledge stores.
    runtime = CapabilityRuntime(registry, store, backend, cast(LmsClient, None), executor, knowledge)
    idempotency = IdempotencyStore(tmp_path / "idempotency.db")
    key = Ed25519PrivateKey.generate()
    signer = grants.GrantSigner(key)
    audit, policy = Recorder(), Policy()
    invoker = GovernedInvoker(runtime, idempotency, policy, audit, {signer.key_id: key.public_key()},
                              clock=lambda: NOW + dt.timedelta(seconds=1))
    return Mesh(runtime, invoker, audit, policy, signer, store), idempotency
