"""The governed path of one capability call (BRIEF "The path of one capability call").

In this order, each step failing closed:

1. the caller's SPIFFE id must equal the grant's audience; the grant's
   signature (the supervisor's key), expiry, tenant and capability list hold;
   the caller's principal verifies against the grants and chains to this one
   (``agentmesh.delegation``) — the principal recorded and shown to the
   policy is rebuilt from verified grants, never copied from the caller;
2. the capability is executable and the input passes its JSON Schema;
   under a sandbox grant (an evaluation, PRD §60) the call ends here: it is
   answered from the grant's signed mock answers (held to the output
   schema: ``SANDBOX_ANSWER_INVALID``), or refused (``SANDBOX_NOT_MOCKED``);
   nothing runs, no policy is asked, nothing persists but its audit record
   (``SANDBOX``);
3. the grant names the resource the call acts on (``permit:WP-10231``, or
   ``tenant:acme`` for a search); an empty list names none;
   and the grant is not revoked (its execution was cancelled, or the grant
   belongs to tasks a supervisor restart orphaned: ``GRANT_REVOKED``);
4. a mutation carries an idempotency key, held by the principal that first
   used it; a replay by that principal goes through step 5 again and is
   answered with the first outcome, audited (``IDEMPOTENT_REPLAY``). A key
   still IN_FLIGHT whose capability process died mid-call is resolved, after
   step 5 again, by reading the effect back: there → the key is completed with
   it (``IN_FLIGHT_RESOLVED``, ``EFFECT_PRESENT``); not there → this process
   takes the claim over and runs the call (``EFFECT_ABSENT``);
5. PolicyService.Authorize decides, with the user from the grant; a record
   the tenant does not hold (missing or another tenant's) is "not found",
   byte-identical either way;
6. an audit record of the decision, durable before any effect;
7. execution with the caller's deadline; output validated;
8. for mutations, the effect is read back and the check audited; a failed
   read-back is a failure, and the write is compensated: the record is put
   back into its previous state and read back again (PRD §73);
9. an audit record of the outcome, naming the compensation if there was one.

Every refusal is audited too, through the durable outbox (``record_durably``:
a refusal stands whether or not audit answers at once), as is every record
after an effect; the decision record before an effect uses ``record`` and
nothing happens if it cannot be written. Transport-free: the servicer passes
the caller identity, the request and the remaining deadline; policy and audit
are ports.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

import grpc
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from google.protobuf import struct_pb2
from google.protobuf.timestamp_pb2 import Timestamp
from opentelemetry import context as otel_context
from opentelemetry.trace import Status, StatusCode

from agentmesh import delegation, errors, grants, telemetry
from agentmesh.revocation import Revocation, revoke_execution
from agentmesh.structs import struct_dict
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import capability_service_pb2 as pb
from agentmesh.v1 import common_pb2
from agentmesh.v1 import policy_service_pb2 as policy_pb2
from capability_svc import errors as cap_errors
from capability_svc.executor import PreparedCall, verification_failure
from capability_svc.idempotency import (
    Claim,
    IdempotencyConflict,
    IdempotencyFailed,
    IdempotencyInFlight,
    IdempotencyStore,
    KeyHolder,
)
from capability_svc.internal_runtime import TenantScope
from capability_svc.invocation import CompensationResult, Execution, InvocationContext, VerificationResult
from capability_svc.provenance import Authority, Provenance
from capability_svc.runtime import CapabilityRuntime

log = logging.getLogger(__name__)

RUNTIME_VERSION = "agentmesh-capability/0.1.0"


class Authorizer(Protocol):
    """The policy engine, as this service sees it (see agentmesh.policy_client.PolicyClient)."""

    def __call__(self, request: policy_pb2.AuthorizeRequest) -> policy_pb2.AuthorizeResponse:
        """One decision; raises a MeshError when there is none."""
        ...

    def authorize_all(self, requests: Sequence[policy_pb2.AuthorizeRequest]
                      ) -> list[policy_pb2.AuthorizeResponse | errors.MeshError]:
        """Several decisions in one round trip, in order: each its answer or its own error; never raises."""
        ...


class Recorder(Protocol):
    """The audit log, as this service sees it (see agentmesh.audit_client.AuditRecorder)."""

    def record(self, event_type: int, **fields: Any) -> audit_pb2.AppendRecordResponse:
        """Durable before it returns; raises a MeshError (then the action it records must not happen)."""
        ...

    def record_durably(self, event_type: int, **fields: Any) -> None:
        """Appended now, or kept in a local outbox until audit takes it; raises only if the outbox cannot write."""
        ...

    def record_all(self, records: Sequence[tuple[int, dict[str, Any]]]) -> list[audit_pb2.AppendRecordResponse]:
        """Durable together, in order, before it returns (all or none); raises a MeshError otherwise."""
        ...


_RISK = {"LOW": common_pb2.RISK_LEVEL_LOW, "MEDIUM": common_pb2.RISK_LEVEL_MEDIUM,
         "HIGH": common_pb2.RISK_LEVEL_HIGH, "CRITICAL": common_pb2.RISK_LEVEL_CRITICAL}
_POLICY_RESOURCE = {"permit": "WorkPermit", "worker": "Worker", "knowledge": "KnowledgeScope"}


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


ERRORS: errors.ErrorTable = [
    (cap_errors.InputInvalid, errors.InvalidArgument),
    (cap_errors.CapabilityNotFound, errors.NotFound),
    (cap_errors.ResourceNotFound, errors.NotFound),
    (cap_errors.CapabilityNotExecutable, errors.FailedPrecondition),
    (cap_errors.PreconditionFailed, errors.FailedPrecondition),
    (cap_errors.StatusChangeRefused, errors.FailedPrecondition),
    (cap_errors.DependencyError, errors.FailedPrecondition),
    (cap_errors.VerificationFailed, errors.Aborted),
    (IdempotencyConflict, errors.Aborted),
    (IdempotencyInFlight, errors.Aborted),
    (IdempotencyFailed, errors.Aborted),
    (cap_errors.DeadlineExceeded, errors.DeadlineExceeded),
    (cap_errors.ExternalTimeout, errors.DeadlineExceeded),
    (cap_errors.ExternalError, errors.Unavailable),
]
"""Capability-domain errors and their gRPC statuses."""


def compensation_codes(compensation: CompensationResult) -> list[str]:
    """Audit reason codes of a compensation: ``["COMPENSATED", "RESTORED status=PENDING_RELEASE"]``
    or ``["COMPENSATION_FAILED", "CHANGED_BY_ANOTHER_WRITE"]``."""
    if compensation.compensated:
        return ["COMPENSATED", f"{compensation.reason} {compensation.summary}"]
    return ["COMPENSATION_FAILED", compensation.reason]


def mesh_error(err: cap_errors.CapabilityError) -> errors.MeshError:
    """Maps a capability-domain error to the mesh error (and so to its gRPC status)."""
    return errors.translate(err, ERRORS)


def evidence_of(output: Mapping[str, Any], capability: str) -> list[common_pb2.EvidenceReference]:
    """EvidenceReferences from the provenance the output carries (data, never instructions)."""
    prov = output.get("provenance")
    if not isinstance(prov, Mapping):
        return []
    ref = common_pb2.EvidenceReference(
        source=str(prov.get("source", "")), reference=str(prov.get("reference", "")),
        authority=f"AUTHORITY_LEVEL_{prov.get('authority', 'UNSPECIFIED')}", capability=capability)
    fetched = prov.get("fetched_at")
    if isinstance(fetched, str):
        with contextlib.suppress(ValueError):
            ref.fetched_at.FromJsonString(fetched)
    return [ref]


EffectProbe = Callable[[TenantScope, InvocationContext, Mapping[str, Any], dt.datetime], "dict[str, Any] | None"]
"""Reads a mutation's effect back without its output: the output it would have given, or None if absent."""


def _probe_release(scope: TenantScope, ctx: InvocationContext, args: Mapping[str, Any],
                   now: dt.datetime) -> dict[str, Any] | None:
    permit = scope.get_permit(str(args["permit_id"]))
    if permit is None or permit.status != "RELEASED" or permit.released_by != ctx.actor or not permit.released_at:
        return None  # not released, or released by someone else: this call's effect is not there
    return {"permit_id": permit.permit_id, "status": "RELEASED", "previous_status": "PENDING_RELEASE",
            "released_at": permit.released_at, "released_by": permit.released_by,
            "provenance": Provenance("permit-registry", Authority.OFFICIAL_RECORD, now,
                                     f"permit/{permit.permit_id}").to_dict()}


def _probe_validity(scope: TenantScope, ctx: InvocationContext, args: Mapping[str, Any],
                    now: dt.datetime) -> dict[str, Any] | None:
    permit = scope.get_permit(str(args["permit_id"]))
    if permit is None or permit.valid_until != str(args["valid_until"]) or permit.updated_by != ctx.actor:
        return None
    return {"permit_id": permit.permit_id, "valid_from": permit.valid_from, "valid_until": permit.valid_until,
            # The value it replaced is not kept on the record; the orphaned call's CAPABILITY_INVOKED says it.
            "previous_valid_until": permit.valid_until, "updated_at": permit.updated_at or "",
            "updated_by": permit.updated_by or "",
            "provenance": Provenance("permit-registry", Authority.OFFICIAL_RECORD, now,
                                     f"permit/{permit.permit_id}").to_dict()}


EFFECT_PROBES: dict[str, EffectProbe] = {
    "workPermit.release": _probe_release,
    "workPermit.updateValidity": _probe_validity,
}
"""How an orphaned IN_FLIGHT key of each mutation is read back; the manifest's verifier then checks
what was found, as after any write. A mutation without a probe is taken over and run again (its
preconditions, e.g. PERMIT_ALREADY_RELEASED, refuse a second effect)."""


def _fits(expected: Any, actual: Any) -> bool:
    """An answer's input fits a call when each of its fields is in the call with the same value."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(k in actual and _fits(v, actual[k]) for k, v in expected.items())
    return bool(expected == actual)


def sandbox_answer(answers: Sequence[common_pb2.SandboxAnswer], capability_id: str,
                   arguments: Mapping[str, Any]) -> common_pb2.SandboxAnswer | None:
    """The first mocked answer of ``capability_id`` whose input fits ``arguments`` (None: unmocked)."""
    for answer in answers:
        if answer.capability_id == capability_id and _fits(struct_dict(answer.input), arguments):
            return answer
    return None


def sandbox_failure(answer: common_pb2.SandboxAnswer) -> errors.MeshError:
    """The failure a mocked answer stands for (an unknown code name is UNAVAILABLE)."""
    code = getattr(grpc.StatusCode, answer.error_code, grpc.StatusCode.UNAVAILABLE)
    cls = errors.error_class(code)
    if cls is errors.Internal:
        cls = errors.Unavailable
    return cls(f"mocked failure of {answer.capability_id}", reason=answer.error_reason or cls.default_reason)


def revoked_error(revocation: Revocation) -> errors.PermissionDenied:
    """The refusal of a call under a revoked grant."""
    return errors.PermissionDenied(
        f"the grants of execution {revocation.execution_id} were revoked ({revocation.reason})",
        reason="GRANT_REVOKED", metadata={"field": "grant"})


def _policy_outcome(span: Any, answer: policy_pb2.AuthorizeResponse | errors.MeshError) -> None:
    """A ``Policy`` span says the effect decided, or that there was no decision (an error status)."""
    if isinstance(answer, errors.MeshError):
        span.record_exception(answer)
        span.set_status(Status(StatusCode.ERROR, f"{answer.code.name} {answer.reason}"))
    else:
        span.set_attribute("agentmesh.policy_effect", common_pb2.PolicyEffect.Name(answer.decision.effect))


@dataclass(frozen=True, slots=True)
class _Admitted:
    """A call through steps 1–4: everything its decision and its execution need."""

    req: pb.InvokeCapabilityRequest
    grant: common_pb2.TaskGrant
    call: PreparedCall
    principal: common_pb2.AgentPrincipal
    resource: str
    payload: str
    claimed: bool
    """A mutation's idempotency key, claimed by this call (released if it does not run)."""
    policy_request: policy_pb2.AuthorizeRequest
    owners: list[str] | None
    """The tenants holding the call's record (None: not a record held here)."""


MAX_BATCH = 16
"""Most calls one InvokeCapabilities carries."""


class GovernedInvoker:
    """Runs InvokeCapability for one caller, in the order documented above."""

    def __init__(
        self,
        runtime: CapabilityRuntime,
        idempotency: IdempotencyStore,
        authorize: Authorizer,
        audit: Recorder,
        trusted_grant_keys: Mapping[str, Ed25519PublicKey],
        *,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self._rt = runtime
        self._idem = idempotency
        self._authorize = authorize
        self._audit = audit
        self._keys = dict(trusted_grant_keys)
        self._clock = clock
        self._pool_lock = threading.Lock()
        self._executions: ThreadPoolExecutor | None = None
        """Runs the calls of a batch after its first, side by side (made on the first batch)."""

    # -- refusals -------------------------------------------------------------

    def _refuse(self, err: errors.MeshError, req: pb.InvokeCapabilityRequest, grant: common_pb2.TaskGrant | None,
                *, principal: common_pb2.AgentPrincipal | None = None,
                decision: common_pb2.PolicyDecision | None = None, resource: str = "",
                details: Sequence[str] = ()) -> errors.MeshError:
        """Records a refusal in audit (durably, without blocking it) and returns the error to raise,
        marked :func:`~agentmesh.errors.recorded` (the interceptor does not record it again).

        ``grant`` and ``principal`` are recorded only once verified (without a
        grant, the ids are those of the call's trace); ``details`` follow the
        error's reason in ``reason_codes`` (the record may say what the caller
        is not told, e.g. ``RESOURCE_IN_ANOTHER_TENANT``).
        """
        denied_by_policy = decision is not None and decision.effect != common_pb2.POLICY_EFFECT_ALLOW
        try:
            self._audit.record_durably(
                audit_pb2.AUDIT_EVENT_TYPE_POLICY_DECISION if denied_by_policy
                else audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED,
                outcome=audit_pb2.AUDIT_OUTCOME_DENIED,
                reason_codes=[err.reason, *details, *(decision.reason_codes if decision else [])],
                capability_id=req.capability_id,
                tenant_id=grant.tenant_id if grant else "",
                user_id=grant.user_id if grant else "",
                execution_id=grant.execution_id if grant else req.trace.execution_id,
                task_id=grant.task_id if grant else "",
                agent_id=grant.audience.rsplit("/", 1)[-1] if grant else "",
                principal=principal,
                policy_decision=decision,
                resource=resource,
                input_digest=_digest(struct_dict(req.input)),
            )
        except errors.MeshError:
            log.exception("refusal of %s could not be audited", req.capability_id)
        return errors.recorded(err)

    # -- the path -------------------------------------------------------------

    def invoke(self, caller: str, req: pb.InvokeCapabilityRequest, *,
               deadline_s: float | None) -> pb.InvokeCapabilityResponse:
        """Authorises, audits, executes and verifies one call; raises a MeshError on refusal or failure."""
        step = self._admit(caller, req, deadline_s, batched=False)
        if isinstance(step, pb.InvokeCapabilityResponse):
            return step
        try:
            decision = self._decide(req, step.grant, step.call, step.principal, step.resource,
                                    prepared=(step.policy_request, step.owners))
            return self._execute(req, step.grant, step.call, step.principal, step.resource, step.payload, decision,
                                 deadline_s)
        except BaseException:
            if step.claimed:
                self._idem.release(step.grant.tenant_id, step.call.manifest.id, req.idempotency_key)
            raise

    def invoke_all(self, caller: str, reqs: Sequence[pb.InvokeCapabilityRequest], *, deadline_s: float | None,
                   contexts: Sequence[otel_context.Context | None] = ()
                   ) -> list[pb.InvokeCapabilityResponse | errors.MeshError]:
        """Several reads of one caller (``InvokeCapabilities``): each answered as :meth:`invoke` would, in order.

        Each call is admitted (steps 1–4) on its own; the decisions of those admitted are asked in one
        round trip; the allowed calls then run side by side, and the records of those that succeeded go in one
        durable append before any of their outputs is returned. A mutation is refused
        (``MUTATION_IN_BATCH``), audited. ``contexts[i]``, when given, is the trace context call ``i``'s
        spans go under. Never raises a MeshError: each call's error is in its slot.
        """
        start = time.monotonic()

        def left() -> float | None:
            return None if deadline_s is None else deadline_s - (time.monotonic() - start)

        def under(i: int) -> contextlib.AbstractContextManager[None]:
            ctx = contexts[i] if i < len(contexts) else None
            return telemetry.attached(ctx) if ctx is not None else contextlib.nullcontext()

        results: list[pb.InvokeCapabilityResponse | errors.MeshError | None] = [None] * len(reqs)
        admitted: list[tuple[int, _Admitted]] = []
        for i, req in enumerate(reqs):
            with under(i):
                try:
                    step = self._admit(caller, req, left(), batched=True)
                except errors.MeshError as err:
                    results[i] = self._recorded(err, req)
                    continue
            if isinstance(step, pb.InvokeCapabilityResponse):
                results[i] = step
            else:
                admitted.append((i, step))
        answers = self._authorize_together([(i, a) for i, a in admitted], under)

        def run(i: int, a: _Admitted, answer: policy_pb2.AuthorizeResponse | errors.MeshError
                ) -> tuple[pb.InvokeCapabilityResponse, list[tuple[int, dict[str, Any]]]] | errors.MeshError:
            with under(i):
                try:
                    decision = self._judge(a.req, a.grant, a.call, a.principal, a.resource, a.owners, answer)
                    records: list[tuple[int, dict[str, Any]]] = []
                    return self._execute(a.req, a.grant, a.call, a.principal, a.resource, a.payload, decision,
                                         left(), records=records), records
                except errors.MeshError as err:
                    return self._recorded(err, a.req)

        # Side by side: a slow backend for one call does not spend the others' time (the first runs here).
        jobs = [(i, a, answer) for (i, a), answer in zip(admitted, answers, strict=True)]
        later = [self._pool().submit(contextvars.copy_context().run, run, i, a, answer) for i, a, answer in jobs[1:]]
        ran = [run(*jobs[0])] if jobs else []
        ran += [f.result() for f in later]
        done: list[tuple[int, pb.InvokeCapabilityResponse, list[tuple[int, dict[str, Any]]]]] = []
        for (i, _, _), outcome in zip(jobs, ran, strict=True):
            if isinstance(outcome, errors.MeshError):
                results[i] = outcome
            else:
                done.append((i, *outcome))
        if done:
            try:
                # Every record of every call that succeeded, durable together before any output leaves.
                self._audit.record_all([r for _, _, records in done for r in records])
            except errors.MeshError as err:
                withheld = errors.Unavailable(f"audit unavailable; the result is withheld: {err.message}",
                                              reason="AUDIT_UNAVAILABLE")
                for i, _, _ in done:
                    results[i] = withheld
            else:
                for i, resp, _ in done:
                    results[i] = resp
        return [r if r is not None else errors.Internal("no answer") for r in results]

    def _pool(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._executions is None:
                self._executions = ThreadPoolExecutor(max_workers=MAX_BATCH, thread_name_prefix="batched-call")
            return self._executions

    def _recorded(self, err: errors.MeshError, req: pb.InvokeCapabilityRequest) -> errors.MeshError:
        """A batched call's error, audited if it is a refusal nothing recorded yet (the interceptor records
        a single call's; it does not see inside a batch)."""
        if err.code in errors.REFUSALS and not err.recorded:
            return self._refuse(err, req, None)
        return err

    def _authorize_together(self, admitted: Sequence[tuple[int, _Admitted]],
                            under: Callable[[int], contextlib.AbstractContextManager[None]]
                            ) -> list[policy_pb2.AuthorizeResponse | errors.MeshError]:
        """The decisions of admitted calls in one round trip, each in a ``Policy`` span of its own call."""
        if not admitted:
            return []
        spans = []
        for i, _ in admitted:
            with under(i):
                spans.append(telemetry.tracer().start_span("Policy"))
        try:
            answers = self._authorize.authorize_all([a.policy_request for _, a in admitted])
            for span, answer in zip(spans, answers, strict=True):
                _policy_outcome(span, answer)
        finally:
            for span in spans:
                span.end()
        return answers

    def _admit(self, caller: str, req: pb.InvokeCapabilityRequest, deadline_s: float | None, *,
               batched: bool) -> _Admitted | pb.InvokeCapabilityResponse:
        """Steps 1–4: the call admitted, ready for its decision, or answered already (a sandbox answer, an
        idempotent replay, a resolved orphan); raises the refusal, audited."""
        # 1. The grant: authentic, unexpired, for this caller, listing this capability.
        try:
            grant = grants.verify(req.grant, self._keys, now=self._clock())
        except grants.GrantInvalid as err:
            # An authentic grant out of its validity window is recorded with its
            # (signed) ids; of anything else only a digest, never its claims.
            try:
                authentic: common_pb2.TaskGrant | None = grants.verify(req.grant, self._keys, check_expiry=False)
            except grants.GrantInvalid:
                authentic = None
            presented = [f"grant_sha256={hashlib.sha256(req.grant.grant).hexdigest()}"] if req.grant.grant else []
            raise self._refuse(errors.Unauthenticated(str(err), reason=err.reason, metadata={"field": "grant"}),
                               req, authentic, details=[] if authentic else presented) from err
        if grant.audience != caller:
            raise self._refuse(errors.PermissionDenied(
                "the grant was issued to another identity", reason="GRANT_AUDIENCE_MISMATCH",
                metadata={"field": "grant", "caller": caller}), req, grant)
        revocation = self._idem.revocation(grant.execution_id) if grant.execution_id else None
        if revocation is not None and revocation.covers(grant.issued_at.ToDatetime(tzinfo=dt.UTC)):
            raise self._refuse(revoked_error(revocation), req, grant,
                               details=[revocation.reason, f"grant_id={grant.grant_id}"])
        # The principal: rebuilt from grants that verify and chain to this one, or refused.
        # Until it verifies nothing of it is recorded, only the verified grant's ids.
        try:
            verified = delegation.verify_principal(req.principal, req.grant, grant, self._keys)
        except delegation.PrincipalInvalid as err:
            raise self._refuse(errors.Unauthenticated(
                f"the principal does not verify: {err}", reason="PRINCIPAL_INVALID", metadata={"field": "principal"}),
                req, grant, details=[err.reason, f"grant_id={grant.grant_id}"]) from err
        if not req.capability_id:
            raise self._refuse(errors.InvalidArgument("capability_id is required", reason="MISSING_FIELD",
                                                      metadata={"field": "capability_id"}),
                               req, grant, principal=verified.principal())
        if req.capability_id not in grant.capabilities:
            raise self._refuse(errors.PermissionDenied(
                f"the grant does not list {req.capability_id}", reason="GRANT_CAPABILITY_NOT_LISTED",
                metadata={"field": "capability_id"}), req, grant, principal=verified.principal())
        principal = verified.principal(req.capability_id)
        if not grant.tenant_id:
            raise self._refuse(errors.PermissionDenied("the grant names no tenant", reason="GRANT_NO_TENANT",
                                                       metadata={"field": "grant"}), req, grant, principal=principal)
        ctx = InvocationContext(grant.tenant_id, grant.user_id, verified.agent_id, grant.execution_id)

        # 2. Executable, and the input matches its schema. Nothing runs yet.
        arguments = struct_dict(req.input)
        try:
            call = self._rt.executor.prepare(ctx, req.capability_id, arguments)
        except cap_errors.CapabilityError as err:
            raise self._refuse(mesh_error(err), req, grant, principal=principal) from err
        m = call.manifest
        if batched and call.mutates:
            raise self._refuse(errors.InvalidArgument(
                f"{req.capability_id} is a mutation, and a mutation goes alone through InvokeCapability",
                reason="MUTATION_IN_BATCH", metadata={"field": "calls"}), req, grant, principal=principal)
        if grant.sandbox:
            # An evaluation's task (PRD §60): answered from the signed mocks; nothing below runs.
            return self._sandbox(req, grant, call, principal)
        resource = call.resource_ref

        # 3. The grant names the resource (an empty list names none: fail closed).
        # Checked before anything looks the resource up, so the answer is the
        # same whether it exists, is another tenant's or is missing. A grant
        # naming its own tenant ("tenant:acme") is a task that searches the
        # tenant: it may read what it finds there, never change it.
        reads_tenant = not call.mutates and f"tenant:{grant.tenant_id}" in grant.resources
        if resource not in grant.resources and not reads_tenant:
            raise self._refuse(errors.PermissionDenied(
                f"the grant does not name the resource {resource}", reason="GRANT_RESOURCE_NOT_LISTED",
                metadata={"field": call.resource_field}), req, grant, principal=principal, resource=resource,
                details=[] if grant.resources else ["GRANT_NAMES_NO_RESOURCE"])

        # 4. Idempotency for mutations: a key belongs to the principal that first used it.
        payload = _digest({"capability": m.key, "input": arguments})
        claimed = False
        if call.mutates:
            if not req.idempotency_key:
                raise self._refuse(errors.InvalidArgument(
                    "a mutation needs an idempotency_key", reason="MISSING_FIELD",
                    metadata={"field": "idempotency_key"}), req, grant, principal=principal, resource=resource)
            holder = KeyHolder(grant.tenant_id, grant.user_id, verified.agent_id)
            try:
                claim = self._idem.claim(holder, m.id, req.idempotency_key, payload)
            except cap_errors.CapabilityError as err:
                raise self._refuse(mesh_error(err), req, grant, principal=principal, resource=resource,
                                   details=[err.cause] if isinstance(err, IdempotencyConflict) else []) from err
            if claim.orphaned:
                return self._resolve_orphan(req, grant, call, principal, resource, payload, claim, deadline_s)
            if not claim.new:
                return self._replay(req, grant, call, principal, resource, payload, claim)
            claimed = True
        try:
            policy_request, owners = self._policy_request(req, grant, call, principal)
        except BaseException:
            if claimed:
                self._idem.release(grant.tenant_id, m.id, req.idempotency_key)
            raise
        return _Admitted(req, grant, call, principal, resource, payload, claimed, policy_request, owners)

    def _sandbox(self, req: pb.InvokeCapabilityRequest, grant: common_pb2.TaskGrant, call: PreparedCall,
                 principal: common_pb2.AgentPrincipal) -> pb.InvokeCapabilityResponse:
        """A call under a sandbox grant: the first of its mocked answers that fits, or a refusal.

        The capability is registered and the input passed its schema (step 2); nothing runs, no key is
        claimed, no policy is asked (no tenant data is read or changed) and nothing persists but the
        audit record, which says SANDBOX.
        """
        m = call.manifest
        answer = sandbox_answer(grant.sandbox_answers, req.capability_id, call.arguments)
        common = dict(tenant_id=grant.tenant_id, user_id=grant.user_id, execution_id=grant.execution_id,
                      task_id=grant.task_id, agent_id=principal.agent_id, principal=principal,
                      capability_id=m.id, capability_version=str(m.version),
                      input_digest=_digest({"capability": m.key, "input": call.arguments}))
        if answer is None:
            raise self._refuse(errors.FailedPrecondition(
                f"the evaluation case has no answer for this {req.capability_id} call, and a sandbox never runs "
                "a capability", reason="SANDBOX_NOT_MOCKED", metadata={"field": "capability_id"}),
                req, grant, principal=principal, details=["SANDBOX"])
        if answer.error_code:
            failure = sandbox_failure(answer)
            self._record_sandbox(common, audit_pb2.AUDIT_OUTCOME_FAILURE, [failure.reason], "")
            raise errors.recorded(failure)
        output = struct_dict(answer.output)
        try:
            # A mock is held to the capability's output schema, as a real answer is.
            self._rt.registry.validate_output(m, output)
        except cap_errors.CapabilityError as err:
            raise self._refuse(errors.FailedPrecondition(
                f"the evaluation case's answer for {req.capability_id} breaks its output schema: {err}",
                reason="SANDBOX_ANSWER_INVALID", metadata={"field": "grant"}),
                req, grant, principal=principal, details=["SANDBOX"]) from err
        self._record_sandbox(common, audit_pb2.AUDIT_OUTCOME_SUCCESS, [], _digest(output))
        completed = Timestamp()
        completed.FromDatetime(self._clock())
        return pb.InvokeCapabilityResponse(
            capability_id=m.id, capability_version=str(m.version), output=answer.output,
            evidence=evidence_of(output, m.key), completed_at=completed)

    def _record_sandbox(self, common: dict[str, Any], outcome: int, reasons: list[str], output_digest: str) -> None:
        """A sandbox answer's record (through the durable outbox); no record, no answer."""
        try:
            self._audit.record_durably(audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME, outcome=outcome,
                                       reason_codes=["SANDBOX", "MOCK_ANSWER", *reasons],
                                       output_digest=output_digest, **common)
        except errors.MeshError as err:
            raise errors.Unavailable(f"audit unavailable; the sandbox answer is withheld: {err.message}",
                                     reason="AUDIT_UNAVAILABLE") from err

    def _decide(self, req: pb.InvokeCapabilityRequest, grant: common_pb2.TaskGrant, call: PreparedCall,
                principal: common_pb2.AgentPrincipal, resource: str, *,
                prepared: tuple[policy_pb2.AuthorizeRequest, list[str] | None] | None = None
                ) -> common_pb2.PolicyDecision:
        """5. PolicyService.Authorize on the user's authority: the ALLOW, or a refusal (audited) for anything else.

        A record this tenant does not hold (missing, or another tenant's) is
        refused as not found whatever the policy says, with one answer for both.
        ``prepared``: the call's request and owners as admission made them (else made here).
        """
        policy_req, owners = prepared or self._policy_request(req, grant, call, principal)
        answer: policy_pb2.AuthorizeResponse | errors.MeshError
        with telemetry.tracer().start_as_current_span("Policy") as span:
            try:
                answer = self._authorize(policy_req)
            except errors.MeshError as err:
                answer = err
            _policy_outcome(span, answer)
        return self._judge(req, grant, call, principal, resource, owners, answer)

    def _policy_request(self, req: pb.InvokeCapabilityRequest, grant: common_pb2.TaskGrant, call: PreparedCall,
                        principal: common_pb2.AgentPrincipal) -> tuple[policy_pb2.AuthorizeRequest, list[str] | None]:
        """The AuthorizeRequest of a call, and the tenants holding its record (None: not a record held here)."""
        m = call.manifest
        resource_id = call.resource_id or ""
        resource_type = m.resource_type or ""
        # The resource's owning tenant, so the policy sees (and audit records) a
        # cross-tenant attempt; the caller only ever hears "not found".
        held = bool(resource_id) and self._rt.store.holds(resource_type)
        owners = self._rt.store.owner_tenants(resource_type, resource_id) if held else []
        elsewhere = held and grant.tenant_id not in owners
        resource_tenant = owners[0] if elsewhere and owners else grant.tenant_id
        policy_req = policy_pb2.AuthorizeRequest(
            user=common_pb2.UserContext(tenant_id=grant.tenant_id, user_id=grant.user_id, roles=list(grant.roles),
                                        session_id=grant.session_id, conversation_id=grant.conversation_id,
                                        assertion_digest=grant.assertion_digest),
            actor_type=grant.actor_type or common_pb2.ACTOR_TYPE_USER,
            system_actor=grant.user_id if grant.actor_type == common_pb2.ACTOR_TYPE_SYSTEM else "",
            agent=principal,
            delegation_depth=grant.depth,
            capability_id=m.id,
            capability_version=str(m.version),
            # A capability over no single record (a search) acts on the tenant's registry as a whole.
            resource=policy_pb2.ResourceRef(type=_POLICY_RESOURCE.get(resource_type, resource_type)
                                            if resource_id else "Tenant",
                                            id=resource_id or grant.tenant_id, tenant_id=resource_tenant),
            # Confirmation and approval count only when the supervisor signed them
            # into this grant, bound to this exact action.
            context=policy_pb2.OperationContext(
                confirmation_given=bool(grant.confirmed_action_digest)
                and grant.confirmed_action_digest == grants.action_digest(m.id, call.arguments),
                human_approval_id=grant.human_approval_id, human_approver_id=grant.human_approver_id,
                risk_profile=common_pb2.RiskProfile(
                max_risk=_RISK.get(m.risk_profile.max_risk.value, common_pb2.RISK_LEVEL_UNSPECIFIED),
                can_mutate=m.risk_profile.mutates, can_external_write=m.risk_profile.external_write,
                can_bulk_operate=m.risk_profile.bulk),
                # What the agent version declared, as the supervisor signed it (unset: the registry's).
                agent_risk_profile=grant.agent_risk_profile if grant.HasField("agent_risk_profile") else None),
            operation=policy_pb2.OPERATION_KIND_INVOKE,
            trace=req.trace,
        )
        return policy_req, owners if held else None

    def _judge(self, req: pb.InvokeCapabilityRequest, grant: common_pb2.TaskGrant, call: PreparedCall,
               principal: common_pb2.AgentPrincipal, resource: str, owners: list[str] | None,
               answer: policy_pb2.AuthorizeResponse | errors.MeshError) -> common_pb2.PolicyDecision:
        """The policy's answer to a call: its ALLOW, or the refusal (audited) of anything else."""
        m = call.manifest
        resource_id = call.resource_id or ""
        if isinstance(answer, errors.MeshError):
            raise self._refuse(errors.Unavailable(
                f"no policy decision, so no execution: {answer.message}", reason="POLICY_UNAVAILABLE"),
                req, grant, principal=principal, resource=resource) from answer
        decision = answer.decision
        if owners is not None and grant.tenant_id not in owners:
            # Byte-identical to the runtime's own "not found": no hint that
            # another tenant holds it. The audit record says the truth.
            raise self._refuse(mesh_error(cap_errors.not_found(resource_id)), req, grant, principal=principal,
                               decision=decision, resource=resource,
                               details=["RESOURCE_IN_ANOTHER_TENANT" if owners else "RESOURCE_MISSING"])
        if decision.effect != common_pb2.POLICY_EFFECT_ALLOW:
            raise self._refuse(self._policy_error(decision, m.id), req, grant, principal=principal,
                               decision=decision, resource=resource)
        return decision

    @staticmethod
    def _common(grant: common_pb2.TaskGrant, principal: common_pb2.AgentPrincipal, call: PreparedCall,
                decision: common_pb2.PolicyDecision, resource: str, payload: str) -> dict[str, Any]:
        """The fields every record of one allowed call carries."""
        m = call.manifest
        versions = common_pb2.VersionStamp(agent_version=principal.agent_version, capability_version=str(m.version),
                                           policy_version=decision.policy_version, runtime_version=RUNTIME_VERSION)
        return dict(tenant_id=grant.tenant_id, user_id=grant.user_id, execution_id=grant.execution_id,
                    task_id=grant.task_id, agent_id=principal.agent_id, principal=principal,
                    capability_id=m.id, capability_version=str(m.version), policy_decision=decision,
                    versions=versions, resource=resource, input_digest=payload)

    def _replay(self, req: pb.InvokeCapabilityRequest, grant: common_pb2.TaskGrant, call: PreparedCall,
                principal: common_pb2.AgentPrincipal, resource: str, payload: str,
                claim: Claim) -> pb.InvokeCapabilityResponse:
        """The stored outcome of a key's first call, to its own principal, after a new ALLOW, audited."""
        decision = self._decide(req, grant, call, principal, resource)
        first = pb.InvokeCapabilityResponse()
        first.ParseFromString(claim.response or b"")
        reasons = ["IDEMPOTENT_REPLAY", f"first_decision_id={first.decision.decision_id}"]
        # The answer carries the decision that allowed this answer, not the first one.
        first.decision.CopyFrom(decision)
        first.replayed = True
        try:
            self._audit.record(audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME, outcome=audit_pb2.AUDIT_OUTCOME_SUCCESS,
                               reason_codes=reasons, output_digest=claim.output_digest,
                               **self._common(grant, principal, call, decision, resource, payload))
        except errors.MeshError as err:
            raise errors.Unavailable(f"audit unavailable; the stored result is withheld: {err.message}",
                                     reason="AUDIT_UNAVAILABLE") from err
        return first

    def _resolve_orphan(self, req: pb.InvokeCapabilityRequest, grant: common_pb2.TaskGrant, call: PreparedCall,
                        principal: common_pb2.AgentPrincipal, resource: str, payload: str, claim: Claim,
                        deadline_s: float | None) -> pb.InvokeCapabilityResponse:
        """A key IN_FLIGHT whose owner died: after a new ALLOW, the effect is read back and the key ends.

        Effect present (the probe finds it and the manifest's verifier agrees): the key is
        completed with that outcome and the caller gets it (``replayed``), audited. Absent: this
        process takes the claim over and runs the call as a first call (its own records).
        """
        m = call.manifest
        decision = self._decide(req, grant, call, principal, resource)
        common = self._common(grant, principal, call, decision, resource, payload)
        dead = f"dead_owner={claim.orphaned}"
        probe = EFFECT_PROBES.get(m.id)
        found = probe(self._rt.store.scope(grant.tenant_id), call.ctx, call.arguments, self._clock()) if probe else None
        if found is not None:
            check = self._rt.executor.verify(call, found)
            if check.verified:
                self._rt.registry.validate_output(m, found)
                output_digest = _digest(found)
                out_struct = struct_pb2.Struct()
                out_struct.update(found)
                completed = Timestamp()
                completed.FromDatetime(self._clock())
                resp = pb.InvokeCapabilityResponse(
                    capability_id=m.id, capability_version=str(m.version), output=out_struct,
                    evidence=evidence_of(found, m.key), decision=decision, verified=True, completed_at=completed,
                    replayed=True)
                try:
                    self._audit.record(audit_pb2.AUDIT_EVENT_TYPE_VERIFICATION, outcome=audit_pb2.AUDIT_OUTCOME_SUCCESS,
                                       reason_codes=["IN_FLIGHT_RESOLVED", "EFFECT_PRESENT", check.reason, dead],
                                       output_digest=output_digest, **common)
                except errors.MeshError as err:
                    raise errors.Unavailable(f"audit unavailable; the key stays unresolved: {err.message}",
                                             reason="AUDIT_UNAVAILABLE") from err
                self._idem.complete(grant.tenant_id, m.id, req.idempotency_key,
                                    resp.SerializeToString(deterministic=True), output_digest)
                self._record_outcome(common, audit_pb2.AUDIT_OUTCOME_SUCCESS,
                                     ["VERIFIED", "IN_FLIGHT_RESOLVED", "EFFECT_PRESENT"], output_digest)
                return resp
        if not self._idem.take_over(grant.tenant_id, m.id, req.idempotency_key, claim.orphaned):
            raise self._refuse(mesh_error(IdempotencyInFlight(
                f"the first call with idempotency key {req.idempotency_key!r} is still running",
                field="idempotency_key")), req, grant, principal=principal, resource=resource)
        self._record(common, audit_pb2.AUDIT_EVENT_TYPE_VERIFICATION, audit_pb2.AUDIT_OUTCOME_PENDING,
                     ["IN_FLIGHT_RESOLVED", "EFFECT_ABSENT", dead, "TAKEN_OVER"], "")
        try:
            return self._execute(req, grant, call, principal, resource, payload, decision, deadline_s)
        except BaseException:
            self._idem.release(grant.tenant_id, m.id, req.idempotency_key)
            raise

    # -- revocation -------------------------------------------------------------

    def revoke(self, caller: str, req: pb.RevokeExecutionRequest) -> pb.RevokeExecutionResponse:
        """Revokes an execution's grants (see ``RevokeExecution``); in force before its record is written."""
        now = self._clock()
        # A safety stop: in force at once, its record kept durably (outbox) rather than awaited.
        revocation = revoke_execution(self._idem, self._audit, execution_id=req.execution_id,
                                      issued_before=req.issued_before if req.HasField("issued_before") else None,
                                      reason=req.reason, caller=caller, code="GRANTS_REVOKED", now=now)
        resp = pb.RevokeExecutionResponse(execution_id=req.execution_id)
        resp.revoked_at.FromDatetime(now)
        if revocation.issued_before is not None:
            resp.issued_before.FromDatetime(revocation.issued_before)
        return resp

    def _execute(self, req: pb.InvokeCapabilityRequest, grant: common_pb2.TaskGrant, call: PreparedCall,
                 principal: common_pb2.AgentPrincipal, resource: str, payload: str,
                 decision: common_pb2.PolicyDecision, deadline_s: float | None, *,
                 records: list[tuple[int, dict[str, Any]]] | None = None) -> pb.InvokeCapabilityResponse:
        """Steps 6–9. ``records``: for a read that succeeds, its decision and outcome records are added
        there instead of appended (the caller appends them, durably, before the answer leaves)."""
        m = call.manifest
        # 6. Audit the decision. A mutation waits until it is durable before any
        # effect; a read's goes with its outcome, in one durable append before any data leaves.
        common = self._common(grant, principal, call, decision, resource, payload)
        knowledge = self._rt.executor.knowledge
        if m.backend == "knowledge" and knowledge is not None:
            # Every record of a knowledge read names the store version it reads (stores never change
            # while the process runs, so the decision record can say it before the read).
            common["versions"].knowledge_version = knowledge.version_of(call.resource_id or "")
        if call.mutates:
            try:
                self._audit.record(audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED,
                                   outcome=audit_pb2.AUDIT_OUTCOME_PENDING, **common)
            except errors.MeshError as err:
                raise errors.Unavailable(f"audit unavailable, nothing executed: {err.message}",
                                         reason="AUDIT_UNAVAILABLE") from err

        # 7–8. Execute within the deadline; verify mutations by reading back,
        # and compensate one whose effect is not (wholly) visible.
        verified = False
        try:
            with telemetry.tracer().start_as_current_span("Execution") as span:
                span.set_attribute("agentmesh.capability", m.key)
                ran = self._rt.executor.run(call, deadline_s=deadline_s)
                if ran.knowledge_version:
                    span.set_attribute("agentmesh.knowledge_version", ran.knowledge_version)
            output = ran.output
            output_digest = _digest(output)
            if call.mutates:
                check = self._rt.executor.verify(call, output)
                if not check.verified:
                    raise self._compensate(common, call, ran, check, output_digest)
                self._record(common, audit_pb2.AUDIT_EVENT_TYPE_VERIFICATION, audit_pb2.AUDIT_OUTCOME_SUCCESS,
                             ["VERIFIED", check.reason], output_digest)
                verified = True
        except cap_errors.CapabilityError as err:
            failure = mesh_error(err)
            reasons = [err.reason]
            if isinstance(err, cap_errors.VerificationFailed) and err.compensation is not None:
                reasons += compensation_codes(err.compensation)
            if call.mutates:
                # The effect may have happened: a replay must not run it again.
                self._idem.fail(grant.tenant_id, m.id, req.idempotency_key, err.reason)
            outcome = (audit_pb2.AUDIT_OUTCOME_TIMEOUT if isinstance(failure, errors.DeadlineExceeded)
                       else audit_pb2.AUDIT_OUTCOME_FAILURE)
            if not call.mutates:
                # The decision of a read that failed, before its outcome (both kept, never blocking).
                self._record(common, audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED, audit_pb2.AUDIT_OUTCOME_PENDING,
                             [], "")
            self._record_outcome(common, outcome, reasons, "")
            raise errors.recorded(failure) from err

        # 9. Audit the outcome; every record of this call is durable before the answer.
        if call.mutates:
            self._record_outcome(common, audit_pb2.AUDIT_OUTCOME_SUCCESS, ["VERIFIED"], output_digest)
        else:
            # The decision record and the outcome, at consecutive indexes in one durable
            # append: no data leaves without both (fail closed).
            pair = [(audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED, {"outcome": audit_pb2.AUDIT_OUTCOME_PENDING,
                                                                     **common}),
                    (audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME, {"outcome": audit_pb2.AUDIT_OUTCOME_SUCCESS,
                                                                     "output_digest": output_digest, **common})]
            if records is not None:
                records.extend(pair)
            else:
                try:
                    self._audit.record_all(pair)
                except errors.MeshError as err:
                    raise errors.Unavailable(f"audit unavailable; the result is withheld: {err.message}",
                                             reason="AUDIT_UNAVAILABLE") from err
        out_struct = struct_pb2.Struct()
        out_struct.update(output)
        completed = Timestamp()
        completed.FromDatetime(self._clock())
        resp = pb.InvokeCapabilityResponse(
            capability_id=m.id, capability_version=str(m.version), output=out_struct,
            evidence=evidence_of(output, m.key), decision=decision, verified=verified, completed_at=completed,
            knowledge_version=ran.knowledge_version)
        if call.mutates:
            self._idem.complete(grant.tenant_id, m.id, req.idempotency_key, resp.SerializeToString(deterministic=True),
                                output_digest)
        return resp

    def _compensate(self, common: dict[str, Any], call: PreparedCall, ran: Execution, check: VerificationResult,
                    output_digest: str) -> cap_errors.VerificationFailed:
        """Audits a failed read-back, undoes the write, and returns the error that says how that went."""
        # The failed check is recorded before the compensating write, like any
        # effect. If audit is down the compensation still runs: leaving a
        # half-applied write in place would be worse than a missing record.
        self._record(common, audit_pb2.AUDIT_EVENT_TYPE_VERIFICATION, audit_pb2.AUDIT_OUTCOME_FAILURE,
                     ["VERIFICATION_FAILED", check.reason], output_digest)
        with telemetry.tracer().start_as_current_span("Compensation") as span:
            try:
                compensation = self._rt.executor.compensate(call, ran)
            except Exception:
                # Whatever went wrong, the previous state is not known to be
                # back, so it must not be reported as compensated.
                log.exception("compensation of %s on %s failed", call.manifest.key, call.resource_id)
                compensation = CompensationResult(False, "COMPENSATION_ERROR")
            span.set_attribute("agentmesh.compensated", compensation.compensated)
            span.set_attribute("agentmesh.compensation", compensation.reason)
        if not compensation.compensated:
            log.error("%s on %s: verification failed and COMPENSATION_FAILED (%s); observed %s",
                      call.manifest.key, call.resource_id, compensation.reason, compensation.observed)
        return verification_failure(call, check, compensation)

    def _record_outcome(self, common: dict[str, Any], outcome: int, reasons: list[str], output_digest: str) -> None:
        self._record(common, audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME, outcome, reasons, output_digest)

    def _record(self, common: dict[str, Any], event_type: int, outcome: int, reasons: list[str],
                output_digest: str) -> None:
        """A record after an effect: never lost (the outbox holds it while audit is down), never blocking."""
        try:
            self._audit.record_durably(event_type, outcome=outcome, reason_codes=reasons,
                                       output_digest=output_digest, **common)
        except errors.MeshError:
            # Not even the outbox could take it. The effect happened and the
            # decision was recorded before it; the loss is logged loudly.
            log.exception("%s of %s could not be audited", audit_pb2.AuditEventType.Name(event_type),
                          common.get("capability_id"))

    @staticmethod
    def _policy_error(decision: common_pb2.PolicyDecision, capability: str) -> errors.MeshError:
        meta = {"decision_id": decision.decision_id, "reason_codes": ",".join(decision.reason_codes)}
        if decision.effect == common_pb2.POLICY_EFFECT_CONFIRMATION_REQUIRED:
            return errors.FailedPrecondition(f"{capability} needs the user's confirmation",
                                             reason="CONFIRMATION_REQUIRED", metadata=meta)
        if decision.effect == common_pb2.POLICY_EFFECT_HUMAN_APPROVAL_REQUIRED:
            return errors.FailedPrecondition(f"{capability} needs a human approval",
                                             reason="HUMAN_APPROVAL_REQUIRED", metadata=meta)
        return errors.PermissionDenied(f"policy denied {capability}: {', '.join(decision.reason_codes)}",
                                       reason="POLICY_DENIED", metadata=meta)
