"""The governed path of one model call (the model service's domain; no gRPC here).

In this order, each step failing closed:

1. **Grant and principal** — as for a capability call: the grant's signature
   (the supervisor's key) and validity, the caller's SPIFFE id equal to its
   audience, the execution not revoked, and the principal rebuilt from grants
   that verify and chain to this one (:mod:`agentmesh.delegation`);
2. **Prompt** — a registered prompt (``PROMPT_NOT_FOUND``) this agent may use
   (``PROMPT_NOT_ALLOWED``); parameters valid against its schema, data parts it
   declares within their sizes (``PARAMETERS_INVALID``, ``DATA_INVALID``);
3. **Budget present** — the grant carries the task's and the execution's model
   budget (``MODEL_BUDGET_MISSING`` otherwise: no budget, no model);
4. **Route** — every model scored (:mod:`model_svc.routing`); the policy engine
   is asked (``OPERATION_KIND_USE_MODEL``) about the candidates in score order
   until one is allowed; each denial is kept in the route (``POLICY_DENIED``).
   None allowed → PERMISSION_DENIED ``MODEL_NOT_PERMITTED``;
5. **Reserve** the call's maximum from both budgets (:mod:`model_svc.ledger`);
   exhausted → RESOURCE_EXHAUSTED naming the limit;
6. **Call** the backend within the caller's deadline, then settle the budget
   from the reported usage. A transient failure (timeout, 5xx, unreachable,
   circuit open) falls back to the next candidate only if the policy engine
   allows it for that model with ``model_fallback`` set — and the route says so
   (``fallback_from``, ``fallback_reason``, ``fallback_decision_id``);
7. **Validate** the answer: a cut answer (``finish_reason`` ``length``) is
   ``MODEL_ANSWER_TOO_LONG``; not one strict JSON object,
   ``MODEL_ANSWER_MALFORMED``; not valid against the prompt's answer schema,
   ``MODEL_ANSWER_INVALID``. Never repaired, never retried as something else;
8. **Audit** every attempt as a MODEL_CALL record: model, version, usage,
   latency, finish reason, route, and the SHA-256 of the prompt and of the
   answer — never their text (PRD §56). A successful answer leaves only once
   its record is durable (else UNAVAILABLE ``AUDIT_UNAVAILABLE``); failures and
   refusals go through the durable outbox.

What comes back is a proposal: the caller validates it again against what it
knows, and a statement made from it is at most an INFERENCE.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from google.protobuf import struct_pb2
from opentelemetry import metrics

from agentmesh import delegation, errors, grants, telemetry
from agentmesh.data_file import format_path
from agentmesh.external import strict_json_loads
from agentmesh.revocation import revoke_execution
from agentmesh.structs import struct_dict
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import common_pb2
from agentmesh.v1 import model_service_pb2 as pb
from agentmesh.v1 import policy_service_pb2 as policy_pb2
from model_svc.backends import BackendError, BackendTimeout, ChatBackend, Completion
from model_svc.ledger import Budget, BudgetExhausted, BudgetLedger, Reservation
from model_svc.prompting import DataPart, Prompt, PromptRegistry, Rendered, render
from model_svc.routing import Call, Router, Score

__all__ = ["ModelGateway", "RUNTIME_VERSION"]

log = logging.getLogger(__name__)

RUNTIME_VERSION = "agentmesh-model/0.1.0"
_meter = metrics.get_meter("agentmesh.model")
_tokens = _meter.create_counter("agentmesh.model.tokens", description="Model tokens by agent, model and kind")
_calls = _meter.create_counter("agentmesh.model.calls", description="Model calls by agent, model and outcome")
_cost = _meter.create_counter("agentmesh.model.cost", description="Model cost by agent and model")
_latency = _meter.create_histogram("agentmesh.model.latency", unit="ms", description="Backend latency of calls")


class Authorizer(Protocol):
    """The policy engine, as this service sees it."""

    def __call__(self, request: policy_pb2.AuthorizeRequest) -> policy_pb2.AuthorizeResponse: ...


class Recorder(Protocol):
    """The audit log (see agentmesh.audit_client.AuditRecorder)."""

    def record(self, event_type: int, **fields: Any) -> audit_pb2.AppendRecordResponse: ...

    def record_durably(self, event_type: int, **fields: Any) -> None: ...


def _sha256(data: str) -> str:
    return hashlib.sha256(data.encode()).hexdigest()


@dataclass
class _Attempt:
    """One backend call of a model call, for the route, the budget and the record."""

    score: Score
    decision: common_pb2.PolicyDecision
    reservation: Reservation | None = None
    completion: Completion | None = None
    failure: BackendError | None = None
    latency_ms: int = 0
    usage: common_pb2.ModelUsage = field(default_factory=common_pb2.ModelUsage)
    prompt_digest: str = ""
    answer: dict[str, Any] | None = None
    """The completion's content as read and checked by ``_validate`` (when it passed)."""


@dataclass(frozen=True)
class _Caller:
    """A call's verified grant and principal."""

    grant: common_pb2.TaskGrant
    principal: common_pb2.AgentPrincipal
    agent_id: str


class ModelGateway:
    """Runs ``ModelService.Complete`` for one caller, in the order documented above. Thread-safe."""

    def __init__(
        self,
        *,
        prompts: PromptRegistry,
        router: Router,
        backends: Mapping[str, ChatBackend],
        ledger: BudgetLedger,
        authorize: Authorizer,
        audit: Recorder,
        trusted_grant_keys: Mapping[str, Ed25519PublicKey],
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self._prompts = prompts
        self._router = router
        self._backends = dict(backends)
        self._ledger = ledger
        self._authorize = authorize
        self._audit = audit
        self._keys = dict(trusted_grant_keys)
        self._clock = clock

    # -- refusals ---------------------------------------------------------------

    def _refuse(self, err: errors.MeshError, req: pb.CompleteRequest, caller: _Caller | None, *,
                details: Sequence[str] = (), route: common_pb2.ModelRoute | None = None) -> errors.MeshError:
        """Records a refusal (durably, not blocking it) and returns it marked recorded."""
        grant = caller.grant if caller else None
        try:
            self._audit.record_durably(
                audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED, outcome=audit_pb2.AUDIT_OUTCOME_DENIED,
                reason_codes=[err.reason, *details, f"prompt={req.prompt_id or '-'}"],
                tenant_id=grant.tenant_id if grant else "", user_id=grant.user_id if grant else "",
                execution_id=grant.execution_id if grant else req.trace.execution_id,
                task_id=grant.task_id if grant else "", agent_id=caller.agent_id if caller else "",
                principal=caller.principal if caller else None,
                model_call=audit_pb2.ModelCallRecord(prompt=req.prompt_id, route=route) if route else None)
        except errors.MeshError:
            log.exception("refusal of a model call could not be audited")
        return errors.recorded(err)

    # -- the path ---------------------------------------------------------------

    def complete(self, caller_id: str, req: pb.CompleteRequest, *, deadline_s: float | None) -> pb.CompleteResponse:
        """One governed model call; raises a MeshError on refusal or failure."""
        started = time.monotonic()
        caller = self._verify(caller_id, req)
        grant = caller.grant
        prompt = self._prompt(req, caller)
        parameters, data = self._inputs(req, caller, prompt)
        task_budget, execution_budget = Budget.of(grant.budget), Budget.of(grant.execution_budget)
        if task_budget is None or execution_budget is None:
            raise self._refuse(errors.PermissionDenied(
                "the grant carries no model budget (tokens, calls and cost for the task and the execution), "
                "so it allows no model call", reason="MODEL_BUDGET_MISSING",
                metadata={"field": "grant.budget" if task_budget is None else "grant.execution_budget"}),
                req, caller)
        rendered = render(prompt, parameters, data)
        call = Call(prompt.complexity, prompt.risk, prompt.latency_target_ms, rendered.estimated_tokens(),
                    prompt.max_output_tokens)
        ranked = self._router.rank(call)
        route = common_pb2.ModelRoute()
        scores = {s.model_id: s for s in ranked}
        entries = {s.model_id: self._score_message(s) for s in ranked}

        def finish_route() -> common_pb2.ModelRoute:
            del route.scores[:]
            route.scores.extend(entries[s.model_id] for s in ranked)
            return route

        candidates = [s for s in ranked if not s.excluded_reason]
        if not candidates:
            why = ", ".join(f"{s.model_id}: {s.excluded_reason}" for s in ranked)
            if any(s.excluded_reason == "UNAVAILABLE" for s in ranked):
                # Not a refusal: the models that could take it are down (their circuits open). A failure,
                # recorded as a model call that no model answered.
                self._record_unanswered(req, caller, prompt, finish_route(), "MODEL_UNAVAILABLE")
                raise errors.Unavailable(f"no model is available ({why})", reason="MODEL_UNAVAILABLE",
                                         metadata={"field": "prompt_id"})
            raise self._refuse(errors.FailedPrecondition(
                f"no configured model can take this call ({why})", reason="NO_MODEL_FITS",
                metadata={"field": "prompt_id"}), req, caller, route=finish_route())
        attempts: list[_Attempt] = []
        fallback_from = ""
        last_failure: BackendError | None = None
        for score in candidates:
            decision = self._decide(req, caller, score.model_id, fallback=bool(fallback_from),
                                    route=finish_route)
            entries[score.model_id].decision_id = decision.decision_id
            if decision.effect != common_pb2.POLICY_EFFECT_ALLOW:
                entries[score.model_id].excluded_reason = "POLICY_DENIED"
                entries[score.model_id].final_score = 0.0
                if fallback_from:
                    # Falling back is the policy's call: denied, the first failure stands.
                    route.fallback_reason = f"{last_failure.reason if last_failure else ''}; fallback to " \
                                            f"{score.model_id} denied ({','.join(decision.reason_codes)})"
                    break
                continue
            if fallback_from:
                route.fallback_from = fallback_from
                route.fallback_reason = last_failure.reason if last_failure else ""
                route.fallback_decision_id = decision.decision_id
            route.chosen_model_id = score.model_id
            attempt = _Attempt(scores[score.model_id], decision)
            attempts.append(attempt)
            self._attempt(attempt, req, caller, prompt, rendered, task_budget, execution_budget, started, deadline_s,
                          finish_route)
            if attempt.failure is None:
                return self._answer(attempt, attempts, req, caller, prompt, finish_route())
            last_failure = attempt.failure
            if not attempt.failure.transient:
                break
            fallback_from = fallback_from or score.model_id
        if not attempts:
            denied = [s.model_id for s in candidates]
            raise self._refuse(errors.PermissionDenied(
                f"the policy allows this agent none of the models that could take the call ({', '.join(denied)})",
                reason="MODEL_NOT_PERMITTED", metadata={"field": "prompt_id"}), req, caller,
                details=[f"denied={','.join(denied)}"], route=finish_route())
        assert last_failure is not None
        raise self._failure(last_failure, attempts, route)

    # -- steps --------------------------------------------------------------------

    def _verify(self, caller_id: str, req: pb.CompleteRequest) -> _Caller:
        try:
            grant = grants.verify(req.grant, self._keys, now=self._clock())
        except grants.GrantInvalid as err:
            presented = [f"grant_sha256={hashlib.sha256(req.grant.grant).hexdigest()}"] if req.grant.grant else []
            raise self._refuse(errors.Unauthenticated(str(err), reason=err.reason, metadata={"field": "grant"}),
                               req, None, details=presented) from err
        unverified = _Caller(grant, common_pb2.AgentPrincipal(), "")
        if grant.audience != caller_id:
            raise self._refuse(errors.PermissionDenied("the grant was issued to another identity",
                                                       reason="GRANT_AUDIENCE_MISMATCH",
                                                       metadata={"field": "grant", "caller": caller_id}),
                               req, unverified)
        if grant.sandbox:
            # An evaluation never reaches a model: its answers are the case's, and a model's are not repeatable.
            raise self._refuse(errors.FailedPrecondition(
                "a sandbox (evaluation) task reaches no model", reason="SANDBOX_NO_MODEL",
                metadata={"field": "grant"}), req, unverified)
        revocation = self._ledger.revocation(grant.execution_id) if grant.execution_id else None
        if revocation is not None and revocation.covers(grant.issued_at.ToDatetime(tzinfo=dt.UTC)):
            raise self._refuse(errors.PermissionDenied(
                f"the grants of execution {grant.execution_id} were revoked ({revocation.reason})",
                reason="GRANT_REVOKED", metadata={"field": "grant"}), req, unverified,
                details=[revocation.reason, f"grant_id={grant.grant_id}"])
        try:
            verified = delegation.verify_principal(req.principal, req.grant, grant, self._keys)
        except delegation.PrincipalInvalid as err:
            raise self._refuse(errors.Unauthenticated(
                f"the principal does not verify: {err}", reason="PRINCIPAL_INVALID", metadata={"field": "principal"}),
                req, unverified, details=[err.reason, f"grant_id={grant.grant_id}"]) from err
        caller = _Caller(grant, verified.principal(), verified.agent_id)
        if not grant.tenant_id or not grant.execution_id or not grant.task_id:
            raise self._refuse(errors.PermissionDenied("the grant names no tenant, execution or task",
                                                       reason="GRANT_INCOMPLETE", metadata={"field": "grant"}),
                               req, caller)
        return caller

    def _prompt(self, req: pb.CompleteRequest, caller: _Caller) -> Prompt:
        if not req.prompt_id:
            raise self._refuse(errors.InvalidArgument("prompt_id is required", reason="MISSING_FIELD",
                                                      metadata={"field": "prompt_id"}), req, caller)
        prompt = self._prompts.get(req.prompt_id)
        if prompt is None:
            raise self._refuse(errors.NotFound(f"no prompt {req.prompt_id!r} is registered",
                                               reason="PROMPT_NOT_FOUND", metadata={"field": "prompt_id"}),
                               req, caller)
        if caller.agent_id not in prompt.callers:
            raise self._refuse(errors.PermissionDenied(f"{caller.agent_id} may not use the prompt {prompt.id}",
                                                       reason="PROMPT_NOT_ALLOWED", metadata={"field": "prompt_id"}),
                               req, caller)
        return prompt

    def _inputs(self, req: pb.CompleteRequest, caller: _Caller,
                prompt: Prompt) -> tuple[dict[str, Any], list[DataPart]]:
        parameters: dict[str, Any] = struct_dict(req.parameters)
        error = prompt.parameters_check.first_error(parameters)
        if error is not None:
            where = format_path(["parameters", *error.absolute_path])
            raise self._refuse(errors.InvalidArgument(f"{where}: {error.message[:200]}", reason="PARAMETERS_INVALID",
                                                      metadata={"field": where}), req, caller)
        data: list[DataPart] = []
        seen: set[str] = set()
        for i, part in enumerate(req.data):
            limit = prompt.data.get(part.name)
            if limit is None or part.name in seen:
                raise self._refuse(errors.InvalidArgument(
                    f"data[{i}].name: the prompt {prompt.id} takes " + ", ".join(sorted(prompt.data)) + " (each once)",
                    reason="DATA_INVALID", metadata={"field": f"data[{i}].name"}), req, caller)
            if len(part.text) > limit:
                raise self._refuse(errors.InvalidArgument(
                    f"data[{i}].text: at most {limit} characters for {part.name}", reason="DATA_INVALID",
                    metadata={"field": f"data[{i}].text", "max": str(limit)}), req, caller)
            seen.add(part.name)
            data.append(DataPart(part.name, part.text, part.source))
        return parameters, data

    def _decide(self, req: pb.CompleteRequest, caller: _Caller, model_id: str, *, fallback: bool,
                route: Callable[[], common_pb2.ModelRoute]) -> common_pb2.PolicyDecision:
        grant = caller.grant
        policy_req = policy_pb2.AuthorizeRequest(
            user=common_pb2.UserContext(tenant_id=grant.tenant_id, user_id=grant.user_id, roles=list(grant.roles),
                                        session_id=grant.session_id, conversation_id=grant.conversation_id,
                                        assertion_digest=grant.assertion_digest),
            actor_type=grant.actor_type or common_pb2.ACTOR_TYPE_USER,
            system_actor=grant.user_id if grant.actor_type == common_pb2.ACTOR_TYPE_SYSTEM else "",
            agent=caller.principal, delegation_depth=grant.depth,
            resource=policy_pb2.ResourceRef(type="Model", id=model_id, tenant_id=grant.tenant_id),
            context=policy_pb2.OperationContext(model_fallback=fallback),
            operation=policy_pb2.OPERATION_KIND_USE_MODEL, trace=req.trace)
        try:
            with telemetry.tracer(__name__).start_as_current_span("Policy") as span:
                decision = self._authorize(policy_req).decision
                span.set_attribute("agentmesh.policy_effect", common_pb2.PolicyEffect.Name(decision.effect))
        except errors.MeshError as err:
            raise self._refuse(errors.Unavailable(f"no policy decision, so no model call: {err.message}",
                                                  reason="POLICY_UNAVAILABLE"), req, caller, route=route()) from err
        return decision

    def _attempt(self, attempt: _Attempt, req: pb.CompleteRequest, caller: _Caller, prompt: Prompt,
                 rendered: Rendered, task_budget: Budget, execution_budget: Budget, started: float,
                 deadline_s: float | None, route: Callable[[], common_pb2.ModelRoute]) -> None:
        """Reserves, calls, settles, validates and records one backend call; sets ``attempt.failure`` on failure."""
        grant = caller.grant
        score = attempt.score
        backend = self._backends[score.model_id]
        config = backend.config
        max_tokens = score.max_tokens
        attempt.prompt_digest = rendered.digest(config.model, max_tokens)
        reserved_tokens = rendered.estimated_tokens() + max_tokens
        reserved_cost = (rendered.estimated_tokens() / 1000 * config.price_input_per_1k
                         + max_tokens / 1000 * config.price_output_per_1k)
        try:
            attempt.reservation = self._ledger.reserve(grant.execution_id, grant.task_id, task=task_budget,
                                                       execution=execution_budget, tokens=reserved_tokens,
                                                       cost=reserved_cost)
        except BudgetExhausted as err:
            raise self._refuse(errors.ResourceExhausted(
                f"model budget exhausted: {err}", reason=err.reason,
                metadata={"field": err.field, "scope": err.scope, "limit": f"{err.limit:g}",
                          "observed": f"{err.observed:g}"}), req, caller, route=route(),
                details=[f"scope={err.scope}", f"limit={err.limit:g}", f"observed={err.observed:g}"]) from err
        probe = self._router.acquire(score.model_id)
        remaining = None if deadline_s is None else deadline_s - (time.monotonic() - started)
        t0 = time.monotonic()
        try:
            if probe is None:
                raise _CircuitOpen(f"{score.model_id} failed repeatedly; its circuit is open")
            with telemetry.tracer(__name__).start_as_current_span("ModelCall") as span:
                span.set_attribute("agentmesh.model_id", score.model_id)
                completion = backend.complete(rendered.messages, max_tokens=max_tokens, timeout_s=remaining)
            attempt.completion = completion
            attempt.latency_ms = completion.latency_ms
            self._router.observe(score.model_id, ok=True, probe=bool(probe), latency_ms=completion.latency_ms)
        except BackendError as err:
            attempt.failure = err
            attempt.latency_ms = int((time.monotonic() - t0) * 1000)
            if err.transient and not isinstance(err, _CircuitOpen):
                self._router.observe(score.model_id, ok=False, probe=bool(probe))
        self._settle(attempt, caller, reserved_tokens, reserved_cost)
        if attempt.failure is None:
            attempt.failure = self._validate(attempt, prompt)
        self._record(attempt, req, caller, prompt, route(), durable=attempt.failure is None)

    def _settle(self, attempt: _Attempt, caller: _Caller, reserved_tokens: int, reserved_cost: float) -> None:
        config = self._backends[attempt.score.model_id].config
        completion = attempt.completion
        if completion is not None and completion.prompt_tokens is not None and \
                completion.completion_tokens is not None:
            prompt_tokens, completion_tokens = completion.prompt_tokens, completion.completion_tokens
            cost = prompt_tokens / 1000 * config.price_input_per_1k + \
                completion_tokens / 1000 * config.price_output_per_1k
        elif completion is not None or isinstance(attempt.failure, BackendTimeout):
            # Answered without usage, or cut off while it may have been working: the maximum is charged.
            prompt_tokens, completion_tokens = reserved_tokens - attempt.score.max_tokens, attempt.score.max_tokens
            cost = reserved_cost
        else:  # refused before any work (unreachable, 5xx): a call, no tokens
            prompt_tokens, completion_tokens, cost = 0, 0, 0.0
        assert attempt.reservation is not None
        if isinstance(attempt.failure, _CircuitOpen):  # nothing was sent: no call at all
            self._ledger.release(attempt.reservation)
            attempt.usage = common_pb2.ModelUsage(models=[attempt.score.model_id])
            return
        self._ledger.settle(attempt.reservation, tokens=prompt_tokens + completion_tokens, cost=cost)
        attempt.usage = common_pb2.ModelUsage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                                              calls=1, cost=cost, models=[attempt.score.model_id])
        labels = {"agent": caller.agent_id, "model": attempt.score.model_id}
        _tokens.add(prompt_tokens, {**labels, "kind": "prompt"})
        _tokens.add(completion_tokens, {**labels, "kind": "completion"})
        _cost.add(cost, labels)
        _latency.record(attempt.latency_ms, labels)

    @staticmethod
    def _validate(attempt: _Attempt, prompt: Prompt) -> BackendError | None:
        completion = attempt.completion
        assert completion is not None
        if completion.finish_reason == "length":
            return _AnswerTooLong(f"the answer ran past {attempt.score.max_tokens} tokens and was cut")
        try:
            answer = strict_json_loads(completion.content)
        except (ValueError, RecursionError):
            return _AnswerMalformed("the answer is not one JSON object")
        if not isinstance(answer, dict):
            return _AnswerMalformed("the answer is not one JSON object")
        error = prompt.answer_check.first_error(answer)
        if error is not None:
            return _AnswerInvalid(f"the answer breaks the schema of {prompt.ref} at "
                                  + format_path(["answer", *error.absolute_path]))
        attempt.answer = answer
        return None

    def _record(self, attempt: _Attempt, req: pb.CompleteRequest, caller: _Caller, prompt: Prompt,
                route: common_pb2.ModelRoute, *, durable: bool) -> None:
        grant = caller.grant
        completion = attempt.completion
        failure = attempt.failure
        fields: dict[str, Any] = dict(
            outcome=audit_pb2.AUDIT_OUTCOME_SUCCESS if failure is None else (
                audit_pb2.AUDIT_OUTCOME_TIMEOUT if isinstance(failure, BackendTimeout)
                else audit_pb2.AUDIT_OUTCOME_FAILURE),
            reason_codes=[failure.reason] if failure is not None else ["MODEL_ANSWERED"],
            tenant_id=grant.tenant_id, user_id=grant.user_id, execution_id=grant.execution_id,
            task_id=grant.task_id, agent_id=caller.agent_id, principal=caller.principal,
            policy_decision=attempt.decision, resource=f"model:{attempt.score.model_id}",
            versions=common_pb2.VersionStamp(agent_version=caller.principal.agent_version,
                                             model_version=completion.model_version if completion else "",
                                             policy_version=attempt.decision.policy_version,
                                             runtime_version=RUNTIME_VERSION),
            input_digest=attempt.prompt_digest,
            output_digest=_sha256(completion.content) if completion else "",
            model_call=audit_pb2.ModelCallRecord(
                call_id=req_call_id(attempt), prompt=prompt.ref, model_id=attempt.score.model_id,
                model_version=completion.model_version if completion else "", usage=attempt.usage,
                latency_ms=attempt.latency_ms,
                finish_reason=completion.finish_reason if completion else (failure.reason if failure else ""),
                route=route))
        _calls.add(1, {"agent": caller.agent_id, "model": attempt.score.model_id,
                       "outcome": "answered" if failure is None else failure.reason})
        if durable:
            try:
                self._audit.record(audit_pb2.AUDIT_EVENT_TYPE_MODEL_CALL, **fields)
            except errors.MeshError as err:
                attempt.failure = _AuditUnavailable(f"audit unavailable; the answer is withheld: {err.message}")
            return
        try:
            self._audit.record_durably(audit_pb2.AUDIT_EVENT_TYPE_MODEL_CALL, **fields)
        except errors.MeshError:
            log.exception("MODEL_CALL record of %s could not be audited", attempt.score.model_id)

    def _record_unanswered(self, req: pb.CompleteRequest, caller: _Caller, prompt: Prompt,
                           route: common_pb2.ModelRoute, reason: str) -> None:
        """The record of a call no model was asked to answer (every one unavailable)."""
        grant = caller.grant
        try:
            self._audit.record_durably(
                audit_pb2.AUDIT_EVENT_TYPE_MODEL_CALL, outcome=audit_pb2.AUDIT_OUTCOME_FAILURE, reason_codes=[reason],
                tenant_id=grant.tenant_id, user_id=grant.user_id, execution_id=grant.execution_id,
                task_id=grant.task_id, agent_id=caller.agent_id, principal=caller.principal,
                model_call=audit_pb2.ModelCallRecord(prompt=prompt.ref, finish_reason=reason, route=route))
        except errors.MeshError:
            log.exception("MODEL_CALL record of an unanswered call could not be audited")

    def _answer(self, attempt: _Attempt, attempts: Sequence[_Attempt], req: pb.CompleteRequest, caller: _Caller,
                prompt: Prompt, route: common_pb2.ModelRoute) -> pb.CompleteResponse:
        completion = attempt.completion
        assert completion is not None and attempt.answer is not None
        answer = struct_pb2.Struct()
        answer.update(attempt.answer)
        return pb.CompleteResponse(
            call_id=req_call_id(attempt), answer=answer, model_id=attempt.score.model_id,
            model_version=completion.model_version, usage=_total(attempts), finish_reason=completion.finish_reason,
            latency_ms=attempt.latency_ms, route=route, prompt_digest=attempt.prompt_digest,
            answer_digest=_sha256(completion.content), prompt=prompt.ref)

    @staticmethod
    def _failure(failure: BackendError, attempts: Sequence[_Attempt], route: common_pb2.ModelRoute) -> errors.MeshError:
        usage = _total(attempts)
        meta = {"field": "prompt_id", "model": attempts[-1].score.model_id, "calls": str(usage.calls),
                "prompt_tokens": str(usage.prompt_tokens), "completion_tokens": str(usage.completion_tokens),
                "cost": f"{usage.cost:.6f}", "call_id": req_call_id(attempts[-1])}
        if route.fallback_reason and not route.fallback_decision_id:
            meta["fallback"] = "denied by policy"
        elif route.fallback_from:
            meta["fallback"] = f"from {route.fallback_from}"
        message = f"{attempts[-1].score.model_id}: {failure}"
        if isinstance(failure, BackendTimeout):
            return errors.DeadlineExceeded(message, reason=failure.reason, metadata=meta)
        # Every attempt has its MODEL_CALL record; a failure is not a refusal (nothing more to record).
        return errors.Unavailable(message, reason=failure.reason, metadata=meta)

    @staticmethod
    def _score_message(score: Score) -> common_pb2.ModelRouteScore:
        return common_pb2.ModelRouteScore(
            model_id=score.model_id, complexity_score=score.complexity, risk_score=score.risk,
            latency_score=score.latency, cost_score=score.cost, availability_score=score.availability,
            final_score=score.final, excluded_reason=score.excluded_reason)

    # -- models and revocation ----------------------------------------------------

    def models(self) -> pb.ListModelsResponse:
        """The configured models as routing sees them now."""
        out = pb.ListModelsResponse()
        for b in self._router.models():
            backend = self._backends[b.id]
            out.models.append(pb.ModelInfo(
                model_id=b.id, backend_model=b.model, url=re.sub(r"//[^/@]*@", "//", backend.base_url),
                context_tokens=b.context_tokens,
                max_output_tokens=b.max_output_tokens, price_input_per_1k=b.price_input_per_1k,
                price_output_per_1k=b.price_output_per_1k, latency_ms=self._router.expected_latency_ms(b.id),
                quality=b.quality, availability=self._router.availability(b.id)))
        return out

    def revoke(self, caller_id: str, req: pb.ModelServiceRevokeExecutionRequest
               ) -> pb.ModelServiceRevokeExecutionResponse:
        """Revokes an execution's grants here (the supervisor only, by the caller table); in force at once."""
        now = self._clock()
        revoke_execution(self._ledger, self._audit, execution_id=req.execution_id,
                         issued_before=req.issued_before if req.HasField("issued_before") else None,
                         reason=req.reason, caller=caller_id, code="MODEL_GRANTS_REVOKED", now=now)
        resp = pb.ModelServiceRevokeExecutionResponse(execution_id=req.execution_id)
        resp.revoked_at.FromDatetime(now)
        return resp


def req_call_id(attempt: _Attempt) -> str:
    """The call id of an attempt: its reservation's, which the ledger and the record share."""
    return attempt.reservation.id.replace("res-", "mc-", 1) if attempt.reservation else f"mc-{uuid.uuid4().hex}"


def _total(attempts: Sequence[_Attempt]) -> common_pb2.ModelUsage:
    total = common_pb2.ModelUsage()
    for a in attempts:
        total.prompt_tokens += a.usage.prompt_tokens
        total.completion_tokens += a.usage.completion_tokens
        total.calls += a.usage.calls
        total.cost += a.usage.cost
        for m in a.usage.models:
            if m not in total.models:
                total.models.append(m)
    return total


class _CircuitOpen(BackendError):
    reason = "MODEL_UNAVAILABLE"
    transient = True


class _AnswerTooLong(BackendError):
    reason = "MODEL_ANSWER_TOO_LONG"


class _AnswerMalformed(BackendError):
    reason = "MODEL_ANSWER_MALFORMED"


class _AnswerInvalid(BackendError):
    reason = "MODEL_ANSWER_INVALID"


class _AuditUnavailable(BackendError):
    reason = "AUDIT_UNAVAILABLE"

