"""The tenant directory: tenants are data, applied by an operator, in force at once, persisted, audited.

A tenant is a ``TenantDefinition`` (proto ``tenant_service.proto``): its roles and
what they hold, the agents it may use, its limits and what happens when one is
exceeded. :class:`TenantDirectory` is the one place they change
(``TenantService.ApplyTenants``), in this order, all or nothing:

1. the policy engine decides, per tenant, whether the caller may administer it
   (``administer_tenant``: only the mesh's operators; a refusal is
   PERMISSION_DENIED ``POLICY_DENIED``, recorded);
2. every definition is checked (:func:`check_definitions`): a bad field is
   INVALID_ARGUMENT naming it (``tenants[0].roles.analyst.capabilities[1]``) and
   nothing changes;
3. each tenant that really changes (its digest differs from the one in force)
   gets its ``TENANT_CHANGED`` record, durable in the audit log before anything
   takes effect (audit down: UNAVAILABLE ``AUDIT_UNAVAILABLE``, nothing changed);
4. the tenants are stored (one transaction, with their history: revision, who,
   when) and the policy engine's entities are swapped to the new roles at once.

An unchanged definition is reported UNCHANGED and records nothing. The store is
SQLite (``data/tenants.db``) or, when ``database_url`` names one, PostgreSQL;
what is stored is put in force again when the service starts. Readers
(``GetTenant`` for the supervisor, which reads a tenant's agents and limits for
every execution it accepts) see the change as soon as ApplyTenants answers.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from google.protobuf.timestamp_pb2 import Timestamp

from agentmesh import errors
from agentmesh.audit_client import AuditRecorder
from agentmesh.database import Database, open_database
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import common_pb2
from agentmesh.v1 import tenant_service_pb2 as pb
from policy_svc.data import RoleSpec, TenantPolicy, TenantRolesInvalid, tenant_models, tenant_roles
from policy_svc.engine import PolicyEngine
from policy_svc.errors import InvalidRequestError, PolicyError
from policy_svc.model import Effect

__all__ = [
    "LIMIT_KEYS",
    "MAX_TENANTS_PER_APPLY",
    "TenantDirectory",
    "TenantNotConfigured",
    "TenantStore",
    "check_definitions",
    "definition_digest",
]

log = logging.getLogger(__name__)

TENANT_ID = re.compile(r"^[a-z][a-z0-9-]{0,62}$")
MAX_TENANTS_PER_APPLY = 100
LIMIT_KEYS = frozenset({"default", "MAX_DEPTH_EXCEEDED", "MAX_TASKS_EXCEEDED", "MAX_HANDOFFS_EXCEEDED",
                        "MAX_EXECUTION_TIME_EXCEEDED", "MAX_COST_EXCEEDED", "MAX_TOKENS_EXCEEDED",
                        "MAX_MODEL_CALLS_EXCEEDED", "MAX_MODEL_COST_EXCEEDED"})
"""The keys of ``on_exceeded``."""
_OUTPUT_FIELDS = ("revision", "digest", "changed_by", "changed_at")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tenants (
    tenant_id TEXT PRIMARY KEY,
    revision INTEGER NOT NULL,
    digest TEXT NOT NULL,
    changed_by TEXT NOT NULL,
    changed_at TEXT NOT NULL,
    body {blob} NOT NULL
);
CREATE TABLE IF NOT EXISTS tenant_history (
    tenant_id TEXT NOT NULL,
    revision INTEGER NOT NULL,
    digest TEXT NOT NULL,
    changed_by TEXT NOT NULL,
    changed_at TEXT NOT NULL,
    body {blob} NOT NULL,
    PRIMARY KEY (tenant_id, revision)
);
"""


class TenantNotConfigured(PolicyError):
    """No definition is in force for the tenant (NOT_FOUND ``TENANT_NOT_CONFIGURED``, field ``tenant_id``)."""

    default_reason = "TENANT_NOT_CONFIGURED"

    def __init__(self, tenant_id: str) -> None:
        super().__init__(f"tenant {tenant_id!r} is not configured", metadata={"field": "tenant_id"})
        self.tenant_id = tenant_id


class AdministrationDenied(PolicyError):
    """The policy engine did not allow the caller to administer a tenant (PERMISSION_DENIED)."""

    default_reason = "POLICY_DENIED"


def _ts(moment: dt.datetime) -> Timestamp:
    ts = Timestamp()
    ts.FromDatetime(moment)
    return ts


def definition_digest(definition: pb.TenantDefinition) -> str:
    """SHA-256 of what a definition says (its output fields left out): equal digests, equal tenants."""
    body = pb.TenantDefinition()
    body.CopyFrom(definition)
    for name in _OUTPUT_FIELDS:
        body.ClearField(name)
    return hashlib.sha256(body.SerializeToString(deterministic=True)).hexdigest()


def _policy(definition: pb.TenantDefinition) -> TenantPolicy:
    """What the policy engine holds of a definition: its roles and its agents' models."""
    return TenantPolicy(
        roles={name: RoleSpec(tuple(r.capabilities), tuple(r.includes), tuple(r.privileges))
               for name, r in definition.roles.items()},
        models={agent: tuple(use.model_ids) for agent, use in definition.models.items()},
        fallback=frozenset(agent for agent, use in definition.models.items() if use.fallback))


def check_definitions(definitions: Sequence[pb.TenantDefinition], engine: PolicyEngine,
                      agents: Iterable[str]) -> list[tuple[pb.TenantDefinition, TenantPolicy]]:
    """Every definition checked against the platform (capabilities, privileges, registered agents), with its
    roles; the output fields are cleared.

    Raises:
        InvalidRequestError: naming the field, e.g. ``tenants[0].allowed_agents[2]``.
    """
    if not definitions:
        raise InvalidRequestError.missing("tenants")
    if len(definitions) > MAX_TENANTS_PER_APPLY:
        raise InvalidRequestError.invalid("tenants", f"at most {MAX_TENANTS_PER_APPLY} tenants per apply")
    known_agents = set(agents)
    seen: dict[str, int] = {}
    out: list[tuple[pb.TenantDefinition, TenantPolicy]] = []
    for i, given in enumerate(definitions):
        at = f"tenants[{i}]"
        definition = pb.TenantDefinition()
        definition.CopyFrom(given)
        for name in _OUTPUT_FIELDS:
            definition.ClearField(name)
        tid = definition.tenant_id
        if not tid:
            raise InvalidRequestError.missing(f"{at}.tenant_id")
        if not TENANT_ID.match(tid):
            raise InvalidRequestError.invalid(f"{at}.tenant_id", "a tenant id is lowercase, [a-z][a-z0-9-]{0,62}")
        if tid in seen:
            raise InvalidRequestError.invalid(f"{at}.tenant_id", f"tenant {tid!r} is also tenants[{seen[tid]}]")
        seen[tid] = i
        if not definition.display_name.strip():
            raise InvalidRequestError.missing(f"{at}.display_name")
        if len(definition.display_name) > 200:
            raise InvalidRequestError.invalid(f"{at}.display_name", "at most 200 characters")
        policy = _policy(definition)
        try:
            tenant_roles(engine.platform, policy.roles)
            tenant_models(engine.platform, policy.models, tuple(policy.fallback))
        except TenantRolesInvalid as err:
            raise InvalidRequestError.invalid(f"{at}.{err.field}", err.message) from None
        for j, agent in enumerate(definition.allowed_agents):
            if agent not in known_agents:
                raise InvalidRequestError.invalid(f"{at}.allowed_agents[{j}]", f"no agent {agent!r} is registered")
            if list(definition.allowed_agents).index(agent) != j:
                raise InvalidRequestError.invalid(f"{at}.allowed_agents[{j}]", f"{agent!r} is listed twice")
        for name in ("max_depth", "max_tasks", "max_handoffs", "max_execution_time_ms", "max_cost", "max_tokens",
                     "max_model_calls", "max_model_cost"):
            if definition.limits.HasField(name):
                value = getattr(definition.limits, name)
                if not value >= 0 or value != value or value == float("inf"):
                    raise InvalidRequestError.invalid(f"{at}.limits.{name}", "must be a finite number, 0 or more")
        for key, action in definition.on_exceeded.items():
            if key not in LIMIT_KEYS:
                raise InvalidRequestError.invalid(f"{at}.on_exceeded.{key}",
                                                  f"not a limit; one of {', '.join(sorted(LIMIT_KEYS))}")
            if action not in (pb.LIMIT_ACTION_STOP, pb.LIMIT_ACTION_HUMAN_REVIEW):
                raise InvalidRequestError.invalid(f"{at}.on_exceeded.{key}", "must be STOP or HUMAN_REVIEW")
        out.append((definition, policy))
    return out


class TenantStore:
    """The tenant definitions in force and their history, in SQLite (``path``) or PostgreSQL (``url``)."""

    def __init__(self, path: Path, *, url: str | None = None) -> None:
        self._db: Database = open_database(url, default=path, synchronous="FULL")
        self._db.create_schema(_SCHEMA)

    @property
    def database(self) -> Database:
        """The database (health checks, tests)."""
        return self._db

    def all(self) -> list[pb.TenantDefinition]:
        """Every tenant in force, by id."""
        rows = self._db.execute("SELECT body FROM tenants ORDER BY tenant_id").fetchall()
        out = []
        for (body,) in rows:
            definition = pb.TenantDefinition()
            definition.ParseFromString(bytes(body))
            out.append(definition)
        return out

    def put(self, definitions: Sequence[pb.TenantDefinition]) -> None:
        """Stores definitions (with their revision, digest, author and time already set), in one transaction."""
        with self._db.transaction():
            for d in definitions:
                body = d.SerializeToString(deterministic=True)
                when = d.changed_at.ToDatetime(tzinfo=dt.UTC).isoformat()
                self._db.execute(
                    "INSERT INTO tenants (tenant_id, revision, digest, changed_by, changed_at, body)"
                    " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (tenant_id) DO UPDATE SET revision = excluded.revision,"
                    " digest = excluded.digest, changed_by = excluded.changed_by, changed_at = excluded.changed_at,"
                    " body = excluded.body", (d.tenant_id, d.revision, d.digest, d.changed_by, when, body))
                self._db.execute(
                    "INSERT INTO tenant_history (tenant_id, revision, digest, changed_by, changed_at, body)"
                    " VALUES (?, ?, ?, ?, ?, ?)", (d.tenant_id, d.revision, d.digest, d.changed_by, when, body))

    def history(self, tenant_id: str) -> list[tuple[int, str, str]]:
        """``(revision, digest, changed_by)`` of every version of a tenant, oldest first."""
        rows = self._db.execute("SELECT revision, digest, changed_by FROM tenant_history WHERE tenant_id = ?"
                                " ORDER BY revision", (tenant_id,)).fetchall()
        return [(int(r[0]), str(r[1]), str(r[2])) for r in rows]

    def close(self) -> None:
        """Closes the database."""
        self._db.close()


@dataclass(frozen=True)
class Applied:
    """One tenant after an apply."""

    tenant: pb.TenantDefinition
    change: pb.TenantChange
    """``TENANT_CHANGE_CREATED``, ``_UPDATED`` or ``_UNCHANGED``."""


class TenantDirectory:
    """Applies, keeps and answers tenant definitions (see the module docstring). Thread-safe."""

    def __init__(self, store: TenantStore, engine: PolicyEngine, *, agents: Iterable[str],
                 operators: Iterable[str], audit: AuditRecorder | None,
                 clock: type[dt.datetime] = dt.datetime) -> None:
        """Puts every stored tenant in force in ``engine`` at once.

        Args:
            agents: The registered agent ids (what ``allowed_agents`` may name).
            operators: The mesh's operator identities (exact SPIFFE ids), for the policy decision.
            audit: Records each change (durably, before it takes effect); None records nothing (tests).
        """
        self._store = store
        self._engine = engine
        self._agents = frozenset(agents)
        self._operators = tuple(operators)
        self._audit = audit
        self._clock = clock
        self._lock = threading.Lock()
        self._tenants: dict[str, pb.TenantDefinition] = {d.tenant_id: d for d in store.all()}
        engine.set_tenants({t: _policy(d) for t, d in self._tenants.items()})

    def get(self, tenant_id: str) -> pb.TenantDefinition:
        """The tenant in force.

        Raises:
            InvalidRequestError: no ``tenant_id``.
            TenantNotConfigured: there is none.
        """
        if not tenant_id:
            raise InvalidRequestError.missing("tenant_id")
        found = self._tenants.get(tenant_id)
        if found is None:
            raise TenantNotConfigured(tenant_id)
        out = pb.TenantDefinition()
        out.CopyFrom(found)
        return out

    def all(self) -> list[pb.TenantDefinition]:
        """Every tenant in force, by id."""
        return [self._tenants[t] for t in sorted(self._tenants)]

    def apply(self, definitions: Sequence[pb.TenantDefinition], caller: str) -> tuple[list[Applied], str]:
        """Creates or replaces tenants, all or nothing; returns each one as in force, and the policy version.

        Raises:
            AdministrationDenied: the policy engine did not allow ``caller`` (recorded).
            InvalidRequestError: a field is not valid (names it); nothing changed.
            agentmesh.errors.Unavailable: ``AUDIT_UNAVAILABLE`` — a change could not be recorded; nothing changed.
        """
        with self._lock:
            for i, d in enumerate(definitions):
                decision = self._engine.authorize_tenant_administration(caller, d.tenant_id or "-",
                                                                        operators=self._operators)
                if decision.effect is not Effect.ALLOW:
                    self._refused(caller, d.tenant_id, decision.reason_codes, decision.decision_id)
                    raise AdministrationDenied(
                        f"the policy engine does not let {caller} administer tenants "
                        f"({', '.join(decision.reason_codes)})",
                        metadata={"field": f"tenants[{i}].tenant_id", "decision_id": decision.decision_id,
                                  "reason_codes": ",".join(decision.reason_codes)})
            checked = check_definitions(definitions, self._engine, self._agents)
            now = self._clock.now(dt.UTC)
            results: list[Applied] = []
            changed: list[tuple[pb.TenantDefinition, TenantPolicy, pb.TenantChange]] = []
            for definition, policy in checked:
                digest = definition_digest(definition)
                before = self._tenants.get(definition.tenant_id)
                if before is not None and before.digest == digest:
                    results.append(Applied(before, pb.TENANT_CHANGE_UNCHANGED))
                    continue
                definition.revision = (before.revision if before is not None else 0) + 1
                definition.digest = digest
                definition.changed_by = caller
                definition.changed_at.CopyFrom(_ts(now))
                change = pb.TENANT_CHANGE_CREATED if before is None else pb.TENANT_CHANGE_UPDATED
                changed.append((definition, policy, change))
                results.append(Applied(definition, change))
            recorded: list[pb.TenantDefinition] = []
            cause = "AUDIT_UNAVAILABLE"
            try:
                for definition, _, change in changed:
                    # The change lets authority take effect: it is durable in the log first, or nothing happens.
                    self._record(definition, change, caller)
                    recorded.append(definition)
                cause = "TENANT_STORE_FAILED"
                if changed:
                    self._store.put([d for d, _, _ in changed])
            except Exception:
                # Nothing was applied: every change already on the record says so (one tenant's record may be
                # in the log when the next one's could not be written).
                for definition in recorded:
                    self._narrate(audit_pb2.AUDIT_EVENT_TYPE_TENANT_CHANGED,
                                  outcome=audit_pb2.AUDIT_OUTCOME_FAILURE, tenant_id=definition.tenant_id,
                                  reason_codes=["NOT_APPLIED", cause, f"revision={definition.revision}"])
                raise
            if changed:
                self._engine.set_tenants({d.tenant_id: policy for d, policy, _ in changed})
                for definition, _, _ in changed:
                    self._tenants[definition.tenant_id] = definition
                log.info("tenants applied by %s: %s", caller,
                         ", ".join(f"{d.tenant_id} r{d.revision}" for d, _, _ in changed))
            return results, self._engine.version

    def _record(self, definition: pb.TenantDefinition, change: pb.TenantChange, caller: str) -> None:
        if self._audit is None:
            return
        try:
            self._audit.record(
                audit_pb2.AUDIT_EVENT_TYPE_TENANT_CHANGED, outcome=audit_pb2.AUDIT_OUTCOME_SUCCESS,
                tenant_id=definition.tenant_id, input_digest=definition.digest,
                resource=f"tenant:{definition.tenant_id}",
                reason_codes=[pb.TenantChange.Name(change).removeprefix("TENANT_CHANGE_"),
                              f"revision={definition.revision}", f"changed_by={caller}",
                              f"roles={len(definition.roles)}", f"agents={','.join(definition.allowed_agents)}"],
                policy_decision=common_pb2.PolicyDecision(effect=common_pb2.POLICY_EFFECT_ALLOW,
                                                          reason_codes=["tenant.administer"]))
        except errors.MeshError as err:
            raise errors.Unavailable(f"the change of tenant {definition.tenant_id!r} could not be recorded, so "
                                     f"nothing was changed: {err.message}", reason="AUDIT_UNAVAILABLE",
                                     metadata={"field": "tenants"}) from err

    def _refused(self, caller: str, tenant_id: str, codes: Sequence[str], decision_id: str) -> None:
        self._narrate(audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED, outcome=audit_pb2.AUDIT_OUTCOME_DENIED,
                      tenant_id=tenant_id if TENANT_ID.match(tenant_id or "") else "",
                      resource="tenant-directory",
                      reason_codes=["POLICY_DENIED", *codes, f"caller={caller}", f"decision={decision_id}",
                                    "method=/agentmesh.v1.TenantService/ApplyTenants"])

    def _narrate(self, event_type: int, **fields: object) -> None:
        if self._audit is None:
            return
        try:
            self._audit.record_durably(event_type, **fields)
        except errors.MeshError:
            log.exception("a tenant directory record reached neither audit nor the outbox")
