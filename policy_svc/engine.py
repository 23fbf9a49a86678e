"""The policy engine: Cedar policies, schema and data loaded once, decisions on demand.

Loading (:meth:`PolicyEngine.load`) reads a policy directory::

    schema.cedarschema   the Cedar schema (Cedar syntax)
    entities.yaml        the platform: capabilities, privileges, system actors (policy_svc.data)
    *.cedar              the policies; every policy carries @id("...")

and validates every policy against the schema (strict mode) and the data
against the schema, once. Tenants' roles are data applied at run time
(:meth:`PolicyEngine.set_tenants`, fed by policy_svc.tenants): the entity graph
is rebuilt and swapped in atomically, and the version changes with it; a
decision reads one consistent state (entities and version) throughout. The
parsed ``cedarpy.PolicySet``, ``cedarpy.Schema`` and ``cedarpy.Entities``
handles are kept, so a decision parses only the
request itself: principal, action, the resource (the capability, or the
execution for READ_EXECUTION and CANCEL_EXECUTION), and a flat context of
strings, booleans and one number (cedarpy takes the context as JSON
and re-parses it on every call; it offers no pre-parsed context handle).

Deciding (:meth:`PolicyEngine.authorize`) fails closed: only a Cedar ``Allow``
with no evaluation error is an ALLOW. Obligations: a forbid annotated
``@obligation("confirmation")`` or ``@obligation("human_approval")`` turns a
Deny into CONFIRMATION_REQUIRED or HUMAN_APPROVAL_REQUIRED when (a) only
obligation policies denied and (b) the same request is allowed by the set
without the obligation policies. Human approval wins when both apply.

Remembering: an evaluation depends only on the request, the policies, the state's
entities and the kill-switch board, so a request already evaluated against the same
state and switches is answered from memory (a new decision id, the same effect,
reasons and explanation). A change of tenants, data or switches starts afresh.
"""

from __future__ import annotations

import hashlib
import json
import logging
import marshal
import math
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import cedarpy
import yaml

from policy_svc.data import (
    NAME_PATTERN,
    JsonObject,
    PlatformData,
    PolicyData,
    TenantPolicy,
    build_policy_data,
    entity_type,
    load_platform_data,
    role_id,
    uid,
)
from policy_svc.errors import InvalidRequestError, PolicyLoadError
from policy_svc.model import (
    ActorType,
    AuthorizationRequest,
    Decision,
    Effect,
    KillSwitchScope,
    OperationKind,
    PolicyInfo,
    RiskLevel,
    RiskProfile,
    parse_kill_switch_key,
)

__all__ = [
    "DEFAULT_EVALUATION_BUDGET_S",
    "DEFAULT_POLICY_DIR",
    "ENGINE_REASONS",
    "PolicyEngine",
]

_log = logging.getLogger(__name__)

#: The policy directory shipped with the package.
DEFAULT_POLICY_DIR = Path(__file__).parent / "policies"
SCHEMA_FILE = "schema.cedarschema"
DATA_FILE = "entities.yaml"
RELEASE_FILE = "release.yaml"
"""``release: <semver>`` — the policy set's release, what agents' ``dependencies.policies`` ranges meet."""


def _release(path: Path) -> str:
    """The policy set's declared release ("" without the file)."""
    if not path.exists():
        return ""
    text = _read(path, "DATA_INVALID")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PolicyLoadError(f"{path}: not valid YAML: {exc}", reason="DATA_INVALID", path=str(path)) from exc
    release = data.get("release") if isinstance(data, dict) and set(data) == {"release"} else None
    if not isinstance(release, str) or not re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", release):
        raise PolicyLoadError(f"{path}: expected exactly 'release: \"<major>.<minor>.<patch>\"'",
                              reason="DATA_INVALID", path=str(path))
    return release
POLICY_GLOB = "*.cedar"

#: A decision that takes longer than this is discarded as DENY (policy.timeout).
DEFAULT_EVALUATION_BUDGET_S = 0.25

OBLIGATION_CONFIRMATION = "confirmation"
OBLIGATION_HUMAN_APPROVAL = "human_approval"
_OBLIGATIONS = frozenset({OBLIGATION_CONFIRMATION, OBLIGATION_HUMAN_APPROVAL})

# Engine-level reason codes: outcomes no single policy decided.
EVALUATION_ERROR = "policy.evaluation_error"
NO_DECISION = "policy.no_decision"
DEFAULT_DENY = "policy.default_deny"
ENGINE_ERROR = "policy.engine_error"
TIMEOUT = "policy.timeout"
INVALID_KILL_SWITCH = "policy.invalid_kill_switch"

#: Explanation of each engine-level reason code.
ENGINE_REASONS: Mapping[str, str] = {
    EVALUATION_ERROR: "a policy failed to evaluate, so the engine fails closed",
    NO_DECISION: "Cedar reached no decision (the request could not be evaluated), so the engine fails closed",
    DEFAULT_DENY: "no policy permits this operation",
    ENGINE_ERROR: "the policy engine failed unexpectedly, so it fails closed",
    TIMEOUT: "the evaluation exceeded its time budget, so the engine fails closed",
    INVALID_KILL_SWITCH: "a kill switch in force could not be understood, so the engine fails closed",
}

ACTION_TYPE = entity_type("Action")
OPERATOR_GROUP = "operators"
_ACTIONS = {
    OperationKind.INVOKE: "invoke",
    OperationKind.OVERRIDE: "override",
    OperationKind.REVIEW: "review",
    OperationKind.READ_EXECUTION: "read_execution",
    OperationKind.CANCEL_EXECUTION: "cancel_execution",
    OperationKind.USE_MODEL: "use_model",
    OperationKind.MANAGE_AGENT: "manage_agent",
    OperationKind.APPROVE_AGENT: "approve_agent",
    OperationKind.USE_FALLBACK_AGENT: "use_fallback_agent",
}
# Operations on a supervisor execution: the resource is the Execution, not a
# capability, so they name none.
_ON_AN_EXECUTION = frozenset({OperationKind.READ_EXECUTION, OperationKind.CANCEL_EXECUTION})
EXECUTION_RESOURCE_TYPE = "Execution"
# Operations on an agent version (onboarding, PRD §57; a fallback, §47): the resource is the AgentVersion
# "<agent>@<version>".
_ON_AN_AGENT = frozenset({OperationKind.MANAGE_AGENT, OperationKind.APPROVE_AGENT, OperationKind.USE_FALLBACK_AGENT})
AGENT_VERSION_RESOURCE_TYPE = "AgentVersion"
# A read of a knowledge store names its scope as the resource; the policies see the scope and the
# agent's registered scopes (optional context attributes, absent from every other request).
KNOWLEDGE_RESOURCE_TYPE = "KnowledgeScope"
MODEL_RESOURCE_TYPE = "Model"
MODEL_CAPABILITY_PREFIX = "model:"
"""A model call's ``capability_id`` in the Cedar context: ``model:<id>``, so a capability kill switch with the
target ``model:sandbox-large`` stops that model."""
# Operations about someone's work: each must say whose work it is, or the
# own-request rules would compare against "" (never the requester, so a
# decision on one's own request would pass, and one's own execution fail).
_DECISIONS_ON_A_REQUEST = frozenset({OperationKind.OVERRIDE, OperationKind.REVIEW, OperationKind.APPROVE_AGENT}) \
    | _ON_AN_EXECUTION
# Proto int32 bounds; Cedar Longs are i64, so anything larger is a caller bug.
_MAX_DEPTH_VALUE = 2**31 - 1


@dataclass(frozen=True, slots=True)
class _PolicyMeta:
    policy_id: str
    obligation: str | None
    description: str
    path: str


@dataclass(frozen=True, slots=True)
class _State:
    """What a decision reads: the data, its Cedar entities and the version they make."""

    data: PolicyData
    entities: cedarpy.Entities
    version: str


_Evaluation = tuple[Effect, tuple[str, ...], tuple[str, ...]]
"""What an evaluation found: the effect, its reason codes and details."""

_Remembered = tuple[Effect, tuple[str, ...], str]
"""A decision as remembered: its effect, reason codes and explanation (each answer gets its own id)."""

MEMO_SIZE: Final = 4096
"""Most distinct requests remembered per state and kill-switch board (then the memo starts again)."""

_CALLERS_KEY: Final = b"caller:"
"""Prefix of the memo's keys given by callers (``remember_as``); the engine's own keys are marshalled dicts."""


@dataclass(frozen=True, slots=True)
class _Outcome:
    decision: cedarpy.Decision
    reasons: tuple[str, ...]
    errors: tuple[str, ...]


class PolicyEngine:
    """Decides operations against a policy set loaded once.

    Construct it with :meth:`load`, not directly. Safe to share between
    request threads: the policies are immutable after loading; the tenants'
    state (:meth:`set_tenants`) and a one-entry cache of the kill-switch board
    are each replaced atomically.
    """

    def __init__(
        self,
        *,
        schema: cedarpy.Schema,
        policy_set: cedarpy.PolicySet,
        relaxed_policy_set: cedarpy.PolicySet,
        policies: Mapping[str, _PolicyMeta],
        platform: PlatformData,
        texts: Mapping[str, str],
        schema_text: str,
        evaluation_budget_s: float,
        clock: Callable[[], float],
        new_decision_id: Callable[[], str],
        validate_requests: bool,
        release: str = "",
    ) -> None:
        self._release = release
        self._schema = schema
        self._policy_set = policy_set
        # The same policies minus the obligation forbids: "would this be
        # allowed once confirmed / approved?".
        self._relaxed_policy_set = relaxed_policy_set
        self._platform = platform
        self._texts = dict(texts)
        self._schema_text = schema_text
        self._tenant_lock = threading.Lock()
        self._tenants: dict[str, TenantPolicy] = {}
        self._state = self._build_state({})
        # (state, active switches, static entities + their board); see _entities_with.
        self._board: tuple[_State, _KillSwitches, cedarpy.Entities] | None = None
        # (state, active switches, Cedar request -> its decision); see _memo_for.
        self._memo: tuple[_State, _KillSwitches, dict[bytes, _Remembered]] | None = None
        self._policies = policies
        self._budget_s = evaluation_budget_s
        self._clock = clock
        self._new_decision_id = new_decision_id
        self._request_schema = schema if validate_requests else None

    @classmethod
    def load(
        cls,
        policy_dir: str | Path = DEFAULT_POLICY_DIR,
        *,
        evaluation_budget_s: float = DEFAULT_EVALUATION_BUDGET_S,
        clock: Callable[[], float] = time.monotonic,
        new_decision_id: Callable[[], str] | None = None,
        validate_requests: bool = False,
    ) -> PolicyEngine:
        """Parses and validates the policy directory; raises ``PolicyLoadError``.

        Args:
            policy_dir: directory with ``schema.cedarschema``, ``entities.yaml``
                and ``*.cedar`` files.
            evaluation_budget_s: a decision slower than this is a DENY
                (``policy.timeout``). Cedar cannot be interrupted, so the
                check happens after evaluation: a slow answer is discarded.
            clock: monotonic clock in seconds, for the budget.
            new_decision_id: makes decision ids; a random UUID by default.
            validate_requests: also validate every Cedar request and context
                against the schema. Off by default because it roughly doubles
                the evaluation time; the context is built by typed code and
                the tests run the whole rule table with it on. A context
                that does not conform is a DENY (``policy.no_decision``).
        """
        if not math.isfinite(evaluation_budget_s) or evaluation_budget_s <= 0:
            raise ValueError("evaluation_budget_s must be a positive number")
        root = Path(policy_dir)
        if not root.is_dir():
            raise PolicyLoadError(
                f"policy directory {root} does not exist",
                reason="POLICY_DIR_INVALID",
                path=str(root),
            )
        schema_path = root / SCHEMA_FILE
        data_path = root / DATA_FILE
        policy_paths = sorted(root.glob(POLICY_GLOB))
        if not policy_paths:
            raise PolicyLoadError(f"no {POLICY_GLOB} files in {root}", reason="POLICY_DIR_INVALID", path=str(root))

        schema_text = _read(schema_path, "SCHEMA_INVALID")
        try:
            schema = cedarpy.Schema.from_str(schema_text)
        except ValueError as exc:
            raise PolicyLoadError(
                f"{schema_path}: invalid Cedar schema: {exc}",
                reason="SCHEMA_INVALID",
                path=str(schema_path),
            ) from exc

        platform = load_platform_data(data_path)
        try:
            cedarpy.Entities.from_json_str(json.dumps(list(build_policy_data(platform, {}).entities)), schema)
        except ValueError as exc:
            raise PolicyLoadError(
                f"{data_path}: entities do not match the schema: {exc}",
                reason="DATA_INVALID",
                path=str(data_path),
            ) from exc

        metas: dict[str, _PolicyMeta] = {}
        static_policies: dict[str, JsonObject] = {}
        texts: dict[str, str] = {}
        for path in policy_paths:
            text = _read(path, "POLICY_PARSE_FAILED")
            texts[path.name] = text
            for meta, est in _parse_policy_file(path, text, schema):
                if meta.policy_id in metas:
                    raise PolicyLoadError(
                        f"{path}: policy id {meta.policy_id!r} is also used in {metas[meta.policy_id].path}",
                        reason="POLICY_ID_DUPLICATE",
                        path=str(path),
                        policy_id=meta.policy_id,
                    )
                metas[meta.policy_id] = meta
                static_policies[meta.policy_id] = est

        # Re-keying the policies by their @id makes Cedar report the @ids
        # themselves as reasons and in error messages.
        policy_set = _policy_set(static_policies)
        relaxed_policy_set = _policy_set(
            {pid: est for pid, est in static_policies.items() if metas[pid].obligation is None}
        )

        engine = cls(
            schema=schema,
            policy_set=policy_set,
            relaxed_policy_set=relaxed_policy_set,
            policies=metas,
            platform=platform,
            texts=texts,
            schema_text=schema_text,
            evaluation_budget_s=evaluation_budget_s,
            clock=clock,
            new_decision_id=new_decision_id or _random_decision_id,
            validate_requests=validate_requests,
            release=_release(root / RELEASE_FILE),
        )
        _log.info("loaded %d policies from %s, version %s", len(metas), root, engine.version)
        return engine

    def _build_state(self, tenants: Mapping[str, TenantPolicy]) -> _State:
        data = build_policy_data(self._platform, tenants)
        entities = cedarpy.Entities.from_json_str(json.dumps(list(data.entities)), self._schema)
        roles = {t: {"roles": {r: [list(spec.capabilities), list(spec.includes), list(spec.privileges)]
                               for r, spec in sorted(tp.roles.items())},
                     "models": {a: list(m) for a, m in sorted(tp.models.items())}, "fallback": sorted(tp.fallback)}
                 for t, tp in sorted(tenants.items())}
        version = _digest(self._texts, self._schema_text, self._platform.source, schema_name=SCHEMA_FILE,
                          tenants=json.dumps(roles, sort_keys=True).encode())
        return _State(data, entities, version)

    def set_tenants(self, changes: Mapping[str, TenantPolicy]) -> str:
        """Puts tenants' roles and model use in force (each tenant named is replaced whole; others stay),
        atomically: a decision sees either all of the change or none of it. Returns the new version.

        They must have been checked with :func:`policy_svc.data.tenant_roles` and
        :func:`policy_svc.data.tenant_models`.
        """
        with self._tenant_lock:
            tenants = {**self._tenants, **changes}
            state = self._build_state(tenants)
            self._tenants = tenants
            self._state = state
        return state.version

    @property
    def platform(self) -> PlatformData:
        """The platform data (catalogue, privileges, system actors)."""
        return self._platform

    @property
    def version(self) -> str:
        """The policy set version: ``sha256:`` + digest of policies, schema, platform data and tenants' roles."""
        return self._state.version

    @property
    def data(self) -> PolicyData:
        """The policy data in force (the platform and every tenant's roles)."""
        return self._state.data

    def info(self) -> PolicyInfo:
        """The version and the ``@id`` of every policy (``GetPolicyInfo``)."""
        return PolicyInfo(policy_version=self._state.version, policy_ids=tuple(sorted(self._policies)),
                          policy_release=self._release)

    def describe(self, reason_code: str) -> str:
        """The human-readable meaning of a reason code."""
        meta = self._policies.get(reason_code)
        if meta is not None:
            return meta.description
        return ENGINE_REASONS.get(reason_code, "unknown reason")

    def authorize(self, request: AuthorizationRequest, *, kill_switches: Iterable[str],
                  remember_as: bytes = b"") -> Decision:
        """Decides one operation.

        Args:
            request: the operation to decide.
            kill_switches: the kill switches in force, as context strings
                (``"platform"``, ``"tenant:acme"``, ``"agent:training-agent"``,
                ``"capability:training.external.update"``); typically
                ``KillSwitchStore.active()``. Required so a caller cannot
                forget them.
            remember_as: the caller's own exact key of this request (e.g. its wire bytes), under which
                :meth:`remembered` finds the decision again without building the request. The caller
                vouches that equal keys are equal requests.

        Returns:
            The decision. Every failure to evaluate (Cedar error, no decision,
            exception, budget exceeded) is a DENY with a ``policy.*`` reason.

        Raises:
            InvalidRequestError: the request is malformed (names the field).
                No decision is produced.
        """
        _validate(request)
        state = self._state  # one consistent snapshot for the whole decision
        started = self._clock()
        try:
            switches = _parse_kill_switches(kill_switches)
        except ValueError as exc:
            return self._decide(Effect.DENY, (INVALID_KILL_SWITCH,), details=(str(exc),), version=state.version)
        try:
            cedar_request = _cedar_request(request)
            memo = self._memo_for(state, switches)
            # Format 0 shares no objects, so equal requests (built in the same key order) give equal bytes.
            key = marshal.dumps(cedar_request, 0)
            known = memo.get(key)
            if known is not None:
                if remember_as:
                    memo[_CALLERS_KEY + remember_as] = known
                return Decision(decision_id=self._new_decision_id(), effect=known[0], reason_codes=known[1],
                                policy_version=state.version, explanation=known[2])
            effect, reasons, details = self._evaluate(cedar_request, self._entities_with(state, switches))
        except Exception as exc:  # fail closed on anything, including bugs
            _log.exception("policy evaluation failed; denying")
            return self._decide(Effect.DENY, (ENGINE_ERROR,), details=(repr(exc),), version=state.version)
        elapsed = self._clock() - started
        if elapsed > self._budget_s:
            return self._decide(
                Effect.DENY,
                (TIMEOUT,),
                details=(f"took {elapsed * 1e3:.1f} ms, budget {self._budget_s * 1e3:.1f} ms",),
                version=state.version,
            )
        decision = self._decide(effect, reasons, details=details, version=state.version)
        if len(memo) >= MEMO_SIZE:
            memo.clear()
        memo[key] = (decision.effect, decision.reason_codes, decision.explanation)
        if remember_as:
            memo[_CALLERS_KEY + remember_as] = memo[key]
        return decision

    def remembered(self, key: bytes, *, kill_switches: Iterable[str]) -> Decision | None:
        """The decision of the request :meth:`authorize` was given ``remember_as=key`` for, if it was decided
        against the state and kill switches in force now (a new decision id, the same effect, reasons and
        explanation); else None — then the request is to be decided with :meth:`authorize`. A request only
        gets here once it was valid and its evaluation completed within the budget."""
        try:
            switches = _parse_kill_switches(kill_switches)
        except ValueError:
            return None  # authorize answers it (a DENY)
        state = self._state
        known = self._memo_for(state, switches).get(_CALLERS_KEY + key) if key else None
        if known is None:
            return None
        return Decision(decision_id=self._new_decision_id(), effect=known[0], reason_codes=known[1],
                        policy_version=state.version, explanation=known[2])

    def _memo_for(self, state: _State, switches: _KillSwitches) -> dict[bytes, _Remembered]:
        """The evaluations already made against this state and these kill switches.

        A Cedar evaluation is a pure function of the request, the policies (loaded once), the
        entities of ``state`` and the switches' board: Cedar reads no clock and nothing else. So
        the same request against the same state and switches has the same answer, and it is
        answered from here; any change of tenants, policy data or switches starts an empty memo.
        Only evaluations that completed within the budget are kept; a failure is never kept.
        """
        cached = self._memo  # one read: another thread may replace it
        if cached is not None and cached[0] is state and cached[1] == switches:
            return cached[2]
        memo: dict[bytes, _Remembered] = {}
        self._memo = (state, switches, memo)
        return memo

    def authorize_tenant_administration(self, caller: str, tenant_id: str, *, operators: Iterable[str]) -> Decision:
        """Whether ``caller`` (a SPIFFE id from mTLS) may create or change tenant ``tenant_id``
        (action ``administer_tenant``): only the mesh's ``operators`` may. Fails closed like
        :meth:`authorize`; kill switches do not apply (a safety stop must not keep an operator
        from tightening the tenant it stopped)."""
        state = self._state
        principal = uid("Operator", caller)
        listed = caller in set(operators)
        extra = [
            {"uid": uid("OperatorGroup", OPERATOR_GROUP), "attrs": {}, "parents": []},
            {"uid": principal, "attrs": {}, "parents": [uid("OperatorGroup", OPERATOR_GROUP)] if listed else []},
        ]
        context: JsonObject = {
            "tenant": tenant_id, "requester_id": caller, "roles": [], "capability_id": "", "agent_id": "",
            "agent_capabilities": [], "resource_tenant": tenant_id, "delegation_depth": 0, "delegation_chain": [],
            "confirmation_given": False, "approval_id": "", "approver_id": "",
            "risk_profile": _risk_record(None, unspecified_rank=4),
            "agent_risk_profile": _risk_record(None, unspecified_rank=0),
            "override_reason": "", "subject_requester_id": "",
        }
        request = {"principal": principal, "action": {"type": ACTION_TYPE, "id": "administer_tenant"},
                   "resource": uid("Tenant", tenant_id), "context": context}
        try:
            # The kill-switch policies read the board; they exempt this action, so an empty board is exact.
            board = self._entities_with(state, _NO_SWITCHES)
            effect, reasons, details = self._evaluate(request, board.with_added_json_str(json.dumps(extra),
                                                                                          self._schema))
        except Exception as exc:  # fail closed on anything, including bugs
            _log.exception("tenant administration decision failed; denying")
            return self._decide(Effect.DENY, (ENGINE_ERROR,), details=(repr(exc),), version=state.version)
        return self._decide(effect, reasons, details=details, version=state.version)

    # -- evaluation -------------------------------------------------------

    def _evaluate(self, cedar_request: JsonObject, entities: cedarpy.Entities) -> _Evaluation:
        first = self._run(cedar_request, self._policy_set, entities)
        if first.decision not in (cedarpy.Decision.Allow, cedarpy.Decision.Deny):
            # The request could not even be built (cedarpy reports why in errors).
            return Effect.DENY, (NO_DECISION,), first.errors
        if first.errors:
            return Effect.DENY, (EVALUATION_ERROR,), first.errors
        if first.decision is cedarpy.Decision.Allow:
            return Effect.ALLOW, first.reasons, ()
        if not first.reasons:
            return Effect.DENY, (DEFAULT_DENY,), ()

        obligations = {self._policies[r].obligation for r in first.reasons}
        if None in obligations:
            return Effect.DENY, first.reasons, ()

        # Only obligations denied: would the operation be allowed once they
        # are met? If not, the obligations are moot and the answer is DENY.
        second = self._run(cedar_request, self._relaxed_policy_set, entities)
        if second.decision not in (cedarpy.Decision.Allow, cedarpy.Decision.Deny):
            return Effect.DENY, (NO_DECISION,), second.errors
        if second.errors:
            return Effect.DENY, (EVALUATION_ERROR,), second.errors
        if second.decision is not cedarpy.Decision.Allow:
            return Effect.DENY, second.reasons or (DEFAULT_DENY,), ()
        if OBLIGATION_HUMAN_APPROVAL in obligations:
            return Effect.HUMAN_APPROVAL_REQUIRED, first.reasons, ()
        return Effect.CONFIRMATION_REQUIRED, first.reasons, ()

    def _entities_with(self, state: _State, switches: _KillSwitches) -> cedarpy.Entities:
        """The state's entities plus the kill-switch board for ``switches``.

        Switches (and tenants) change rarely, so the last board is cached: rebuilding
        costs one copy of the static graph, paid only when either changes.
        """
        cached = self._board  # one read: another thread may replace it
        if cached is not None and cached[0] is state and cached[1] == switches:
            return cached[2]
        board = {
            "uid": uid("KillSwitchBoard", "active"),
            "attrs": {
                "platform": switches.platform,
                "tenants": sorted(switches.tenants),
                "agents": sorted(switches.agents),
                "capabilities": sorted(switches.capabilities),
            },
            "parents": [],
        }
        entities = state.entities.with_added_json_str(json.dumps([board]), self._schema)
        self._board = (state, switches, entities)
        return entities

    def _run(self, cedar_request: JsonObject, policy_set: cedarpy.PolicySet, entities: cedarpy.Entities) -> _Outcome:
        # The schema is passed only when validate_requests is on (see load()).
        result = cedarpy.is_authorized(cedar_request, policy_set, entities, schema=self._request_schema)
        diagnostics = result.diagnostics
        return _Outcome(
            decision=result.decision,
            reasons=tuple(sorted(diagnostics.reasons)),
            errors=tuple(diagnostics.errors),
        )

    def _decide(self, effect: Effect, reasons: tuple[str, ...], *, details: tuple[str, ...] = (),
                version: str) -> Decision:
        parts = [f"{code}: {self.describe(code)}" for code in reasons]
        explanation = f"{effect.value}: " + "; ".join(parts)
        if details:
            explanation += " (" + "; ".join(details) + ")"
        return Decision(
            decision_id=self._new_decision_id(),
            effect=effect,
            reason_codes=reasons,
            policy_version=version,
            explanation=explanation,
        )


# -- loading helpers ------------------------------------------------------


def _read(path: Path, reason: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyLoadError(f"cannot read {path}: {exc}", reason=reason, path=str(path)) from exc


def _parse_policy_file(path: Path, text: str, schema: cedarpy.Schema) -> list[tuple[_PolicyMeta, JsonObject]]:
    try:
        est = json.loads(cedarpy.policies_to_json_str(text))
    except ValueError as exc:
        raise PolicyLoadError(
            f"{path}: cannot parse policies: {exc}", reason="POLICY_PARSE_FAILED", path=str(path)
        ) from exc
    if est.get("templates") or est.get("templateLinks"):
        raise PolicyLoadError(
            f"{path}: policy templates are not supported",
            reason="POLICY_TEMPLATE_UNSUPPORTED",
            path=str(path),
        )

    parsed: list[tuple[_PolicyMeta, JsonObject]] = []
    ids_by_position: dict[str, str] = {}
    for position, (cedar_id, policy) in enumerate(est.get("staticPolicies", {}).items(), 1):
        annotations: dict[str, str] = policy.get("annotations") or {}
        policy_id = annotations.get("id", "")
        if not policy_id:
            raise PolicyLoadError(
                f"{path}: policy #{position} ({policy.get('effect')}) has no @id annotation",
                reason="POLICY_ID_MISSING",
                path=str(path),
            )
        obligation = annotations.get("obligation")
        if obligation is not None and (obligation not in _OBLIGATIONS or policy.get("effect") != "forbid"):
            raise PolicyLoadError(
                f"{path}: policy {policy_id!r}: @obligation must be one of {sorted(_OBLIGATIONS)} on a forbid policy",
                reason="POLICY_VALIDATION_FAILED",
                path=str(path),
                policy_id=policy_id,
            )
        ids_by_position[cedar_id] = policy_id
        meta = _PolicyMeta(
            policy_id=policy_id,
            obligation=obligation,
            description=annotations.get("description") or policy_id,
            path=str(path),
        )
        parsed.append((meta, policy))

    result = cedarpy.validate_policies(text, schema)
    if not result.validation_passed:
        first = result.errors[0]
        # Validation runs on the file text, so errors name Cedar's positional
        # ids ("policy0"); map them back to the @id the author wrote.
        bad_id = ids_by_position.get(first.policy_id) or first.policy_id or "<unknown>"
        others = len(result.errors) - 1
        more = f" (and {others} more error{'s' if others > 1 else ''})" if others else ""
        raise PolicyLoadError(
            f"{path}: policy {bad_id!r} fails validation against the schema: {first.error}{more}",
            reason="POLICY_VALIDATION_FAILED",
            path=str(path),
            policy_id=bad_id,
        )
    return parsed


def _policy_set(static_policies: Mapping[str, JsonObject]) -> cedarpy.PolicySet:
    document = {"staticPolicies": dict(static_policies), "templates": {}, "templateLinks": []}
    return cedarpy.PolicySet.from_json_str(json.dumps(document))


def _digest(texts: Mapping[str, str], schema_text: str, data: bytes, *, schema_name: str, tenants: bytes) -> str:
    # Names are hashed with the contents and every part is length-prefixed, so
    # moving text between files or renaming a file changes the version.
    sha = hashlib.sha256()

    def part(label: str, content: bytes) -> None:
        for chunk in (label.encode(), content):
            sha.update(len(chunk).to_bytes(8, "big"))
            sha.update(chunk)

    for name in sorted(texts):
        part(f"policy:{name}", texts[name].encode())
    part(f"schema:{schema_name}", schema_text.encode())
    part(f"data:{DATA_FILE}", data)
    part("tenants", tenants)
    return "sha256:" + sha.hexdigest()


def _random_decision_id() -> str:
    return str(uuid.uuid4())


# -- request helpers ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _KillSwitches:
    platform: bool
    tenants: frozenset[str]
    agents: frozenset[str]
    capabilities: frozenset[str]


_NO_SWITCHES = _KillSwitches(False, frozenset(), frozenset(), frozenset())


def _parse_kill_switches(keys: Iterable[str]) -> _KillSwitches:
    by_scope: dict[KillSwitchScope, set[str]] = {
        KillSwitchScope.TENANT: set(),
        KillSwitchScope.AGENT: set(),
        KillSwitchScope.CAPABILITY: set(),
    }
    platform = False
    if isinstance(keys, str):
        # A bare string is iterable too; taking it char by char would drop the switch.
        raise ValueError("kill_switches must be a collection of keys, not one string")
    for key in keys:
        scope, target = parse_kill_switch_key(key)
        if scope is KillSwitchScope.PLATFORM:
            platform = True
        else:
            by_scope[scope].add(target)
    return _KillSwitches(
        platform=platform,
        tenants=frozenset(by_scope[KillSwitchScope.TENANT]),
        agents=frozenset(by_scope[KillSwitchScope.AGENT]),
        capabilities=frozenset(by_scope[KillSwitchScope.CAPABILITY]),
    )



_RISK_RANK = {RiskLevel.LOW: 1, RiskLevel.MEDIUM: 2, RiskLevel.HIGH: 3, RiskLevel.CRITICAL: 4}


def _risk_record(profile: RiskProfile | None, *, unspecified_rank: int) -> JsonObject:
    """A risk profile as the policies read it, with ``risk_rank`` (LOW 1 … CRITICAL 4) for comparisons; an
    unspecified level ranks ``unspecified_rank`` (a capability's: as critical; an agent's: below everything)."""
    if profile is None:
        return {"max_risk": "UNSPECIFIED", "risk_rank": unspecified_rank, "can_mutate": False,
                "can_external_write": False, "can_bulk_operate": False}
    return {"max_risk": profile.max_risk.value, "risk_rank": _RISK_RANK.get(profile.max_risk, unspecified_rank),
            "can_mutate": profile.can_mutate, "can_external_write": profile.can_external_write,
            "can_bulk_operate": profile.can_bulk_operate}


def _validate(request: AuthorizationRequest) -> None:
    """Raises ``InvalidRequestError`` naming the first bad field."""
    user = request.user
    if user is None:
        raise InvalidRequestError.missing("user")
    if not user.tenant_id:
        raise InvalidRequestError.missing("user.tenant_id")
    if not NAME_PATTERN.match(user.tenant_id):
        raise InvalidRequestError.invalid("user.tenant_id", "not a valid tenant id")
    if request.actor_type is ActorType.USER:
        if not user.user_id:
            raise InvalidRequestError.missing("user.user_id")
        if request.system_actor:
            raise InvalidRequestError.invalid("system_actor", "must be empty for USER actors")
    elif request.actor_type is ActorType.SYSTEM:
        if not request.system_actor:
            raise InvalidRequestError.missing("system_actor")
    else:
        raise InvalidRequestError.missing("actor_type")
    agent = request.agent
    if agent is None:
        raise InvalidRequestError.missing("agent")
    if not agent.agent_id:
        raise InvalidRequestError.missing("agent.agent_id")
    if request.delegation_depth < 0 or request.delegation_depth > _MAX_DEPTH_VALUE:
        raise InvalidRequestError.invalid("delegation_depth", "must be between 0 and 2^31-1")
    on_execution = request.operation in _ON_AN_EXECUTION
    on_model = request.operation is OperationKind.USE_MODEL
    on_agent = request.operation in _ON_AN_AGENT
    if on_execution or on_model or on_agent:
        if request.capability_id:
            what = "an execution" if on_execution else "a model" if on_model else "an agent version"
            raise InvalidRequestError.invalid(
                "capability_id", f"must be empty for {request.operation.name}: {what} is not a capability"
            )
    elif not request.capability_id:
        raise InvalidRequestError.missing("capability_id")
    resource = request.resource
    if resource is None:
        raise InvalidRequestError.missing("resource")
    if not resource.type:
        raise InvalidRequestError.missing("resource.type")
    if on_execution and resource.type != EXECUTION_RESOURCE_TYPE:
        raise InvalidRequestError.invalid(
            "resource.type", f"must be {EXECUTION_RESOURCE_TYPE!r} for {request.operation.name}"
        )
    if on_agent and resource.type != AGENT_VERSION_RESOURCE_TYPE:
        raise InvalidRequestError.invalid(
            "resource.type", f"must be {AGENT_VERSION_RESOURCE_TYPE!r} for {request.operation.name}"
        )
    if on_model and resource.type != MODEL_RESOURCE_TYPE:
        raise InvalidRequestError.invalid("resource.type", f"must be {MODEL_RESOURCE_TYPE!r} for USE_MODEL")
    if not resource.id:
        raise InvalidRequestError.missing("resource.id")
    if not resource.tenant_id:
        raise InvalidRequestError.missing("resource.tenant_id")
    if request.operation not in _ACTIONS:
        raise InvalidRequestError.missing("operation")
    if request.operation in _DECISIONS_ON_A_REQUEST and not request.context.subject_requester_id:
        raise InvalidRequestError.missing("context.subject_requester_id")


def _cedar_request(request: AuthorizationRequest) -> JsonObject:
    """The Cedar request: principal, action, resource, context.

    The resource is the capability, or the execution for READ_EXECUTION and
    CANCEL_EXECUTION (whose tenant is ``context.resource_tenant``).

    Only what some policy reads goes into the context (see the schema): every
    value costs parse time on every call.
    """
    user, agent, resource = request.user, request.agent, request.resource
    assert user is not None and agent is not None and resource is not None  # _validate
    tenant = user.tenant_id
    ctx = request.context
    if request.actor_type is ActorType.USER:
        principal = uid("User", f"{tenant}/{user.user_id}")
        requester_id = user.user_id
        # Role names are scoped to the user's tenant here, so a role name can
        # never reach another tenant's permissions.
        roles = [role_id(tenant, r) for r in user.roles]
    else:
        principal = uid("SystemActor", request.system_actor)
        requester_id = request.system_actor
        roles = []
    on_model = request.operation is OperationKind.USE_MODEL
    context: JsonObject = {
        "tenant": tenant,
        "requester_id": requester_id,
        "roles": roles,
        "capability_id": MODEL_CAPABILITY_PREFIX + resource.id if on_model else request.capability_id,
        "agent_id": agent.agent_id,
        "agent_capabilities": list(agent.capabilities),
        "resource_tenant": resource.tenant_id,
        "delegation_depth": request.delegation_depth,
        "delegation_chain": list(agent.delegation_chain),
        "confirmation_given": ctx.confirmation_given,
        "approval_id": ctx.human_approval_id,
        "approver_id": ctx.human_approver_id,
        "risk_profile": _risk_record(ctx.risk_profile, unspecified_rank=4),
        # What the calling agent declared; nothing declared is the lowest of everything (fail closed).
        "agent_risk_profile": _risk_record(ctx.agent_risk_profile, unspecified_rank=0),
        "override_reason": ctx.override_reason,
        "subject_requester_id": ctx.subject_requester_id,
        # Which models an agent may use is per tenant: the model entity lists "<tenant>/<agent>".
        "model_user": f"{tenant}/{agent.agent_id}",
        "model_fallback": ctx.model_fallback,
    }
    if resource.type == KNOWLEDGE_RESOURCE_TYPE:
        context["knowledge_scope"] = resource.id
        context["agent_knowledge_scopes"] = list(agent.knowledge_scopes)
    if request.operation in _ON_AN_EXECUTION:
        cedar_resource = uid("Execution", resource.id)
    elif on_model:
        cedar_resource = uid("Model", resource.id)
    elif request.operation in _ON_AN_AGENT:
        cedar_resource = uid(AGENT_VERSION_RESOURCE_TYPE, resource.id)
    else:
        cedar_resource = uid("Capability", request.capability_id)
    return {
        "principal": principal,
        "action": {"type": ACTION_TYPE, "id": _ACTIONS[request.operation]},
        "resource": cedar_resource,
        "context": context,
    }
