"""Onboarding agent versions (PRD §4, §57–§59): register, validate, approve, canary, promote, roll back.

An operator registers a version of an agent — its manifest, the endpoint its
``SpecialistService`` listens on and the SPIFFE id its process presents — and
it enters DRAFT. It then moves only along the edges of
:mod:`supervisor_svc.lifecycle`, each move asked of the policy engine as the
operator's user (``OPERATION_KIND_MANAGE_AGENT``; the approval
``OPERATION_KIND_APPROVE_AGENT`` with the registrant as the subject, so
nobody approves what they registered) and audited:

* entering VALIDATING runs the Release Manager (:class:`ReleaseManager`);
  a version it blocks goes back to DRAFT and the call answers
  FAILED_PRECONDITION ``RELEASE_BLOCKED`` with every problem;
* EVALUATING -> APPROVED needs a passed evaluation of this version
  (``EVALUATION_REQUIRED`` otherwise; see the ``evaluations`` hook);
* CANARY -> ACTIVE deprecates the agent's ACTIVE version; DEPRECATED ->
  ACTIVE (the rollback of a promotion) deprecates the one that replaced it.

The versions shipped as manifest files (``supervisor_svc/agents``) are the
agents' baseline versions: they are listed here with ``registered_by``
``manifest:<file>``, and their status is the registry's. A registered version
that becomes ACTIVE is what the registry serves for its agent from then on.

Plain domain code: no gRPC here; the caller passes the policy and audit
functions.
"""

from __future__ import annotations

import builtins
import contextlib
import datetime as _dt
import json
import re
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentmesh import assertion, database, spiffe
from agentmesh.vocabulary import LifecycleStatus, RiskLevel
from capability_svc.semver import Version, parse_dependency
from supervisor_svc.errors import AgentManifestError, RequestInvalid, StatusChangeRefused, SupervisorError
from supervisor_svc.lifecycle import TransitionNotAllowed, check_transition
from supervisor_svc.registry import AgentManifest, AgentRegistry, manifest_from_data

__all__ = [
    "AgentVersionRecord",
    "CapabilityFacts",
    "Onboarding",
    "OnboardingDenied",
    "ReleaseBlocked",
    "ReleaseManager",
    "VersionNotFound",
]

_ENDPOINT_RE = re.compile(r"^[A-Za-z0-9.\-]{1,253}:[0-9]{1,5}$|^\[[0-9A-Fa-f:]{2,45}\]:[0-9]{1,5}$")
_MAX_REASON = 1000
_WHERE = {"capability": "registered", "knowledge store": "served with a release",
          "policy": "in force with a release"}
_RISK_ORDER = {RiskLevel.LOW: 0, RiskLevel.MEDIUM: 1, RiskLevel.HIGH: 2, RiskLevel.CRITICAL: 3}

S = LifecycleStatus


class VersionNotFound(SupervisorError):
    """No such agent version."""

    default_reason = "AGENT_VERSION_NOT_FOUND"


class VersionExists(SupervisorError):
    """The agent already has this version."""

    default_reason = "AGENT_VERSION_EXISTS"


class ReleaseBlocked(StatusChangeRefused):
    """The Release Manager blocked a version (PRD §59); ``problems`` lists every reason."""

    default_reason = "RELEASE_BLOCKED"

    def __init__(self, message: str, problems: Sequence[str]) -> None:
        super().__init__(message, field="to_status")
        self.problems = tuple(problems)


class EvaluationRequired(StatusChangeRefused):
    """Approval without a passed evaluation of this version."""

    default_reason = "EVALUATION_REQUIRED"


class EvaluationNotAllowed(StatusChangeRefused):
    """The version is not where an evaluation may run (DRAFT, VALIDATING, DISABLED, RETIRED)."""

    default_reason = "EVALUATION_NOT_ALLOWED"


class OnboardingDenied(SupervisorError):
    """The policy engine did not allow the operator's act; ``reason_codes`` are its reasons."""

    default_reason = "POLICY_DENIED"

    def __init__(self, message: str, reason_codes: Sequence[str], decision_id: str) -> None:
        super().__init__(message, field="user_assertion")
        self.reason_codes = tuple(reason_codes)
        self.decision_id = decision_id


@dataclass(frozen=True)
class CapabilityFacts:
    """What the capability registry says about one capability version (for the Release Manager)."""

    capability_id: str
    version: str
    status: LifecycleStatus
    max_risk: RiskLevel
    can_mutate: bool
    can_external_write: bool
    can_bulk_operate: bool


@dataclass(frozen=True)
class Transition:
    """One recorded transition of a version."""

    from_status: LifecycleStatus
    to_status: LifecycleStatus
    reason: str
    changed_by: str
    changed_at: str


@dataclass(frozen=True)
class AgentVersionRecord:
    """One version of an agent and where it stands."""

    manifest: AgentManifest
    status: LifecycleStatus
    endpoint: str
    spiffe_id: str
    registered_by: str
    """``user:<tenant>/<user>`` for a registered version, ``manifest:<file>`` for a shipped one."""
    registrant_user: str
    """The registrant's user id (for the own-approval rule); "" for a shipped version."""
    history: tuple[Transition, ...]
    problems: tuple[str, ...]

    @property
    def agent_id(self) -> str:
        """The agent."""
        return self.manifest.agent_id

    @property
    def version(self) -> str:
        """The version."""
        return self.manifest.version

    @property
    def shipped(self) -> bool:
        """A baseline version from the manifest files (its status is the registry's)."""
        return self.registered_by.startswith("manifest:")

    @property
    def key(self) -> str:
        """``<agent>@<version>``."""
        return f"{self.agent_id}@{self.version}"


class ReleaseManager:
    """Checks a version against what the mesh really has (PRD §59, §65); lists every problem.

    * each capability the agent registers exists in the capability registry and is not RETIRED;
    * each ``dependencies.capabilities`` range is met by a registered, non-RETIRED version;
    * each ``dependencies.knowledge`` range is met by the release of a knowledge store the capability
      service serves (``<scope>@<range>``), each ``dependencies.policies`` one names a policy ``@id``
      the policy engine has in force whose policy set's release is in the range (``knowledge`` /
      ``policies``: id -> releases); an unknown one is a problem;
    * each ``allowed_delegations`` target, and the ``fallback``, is a registered agent;
    * the declared risk profile covers every capability it registers: a mutating capability
      needs ``can_mutate``, an external write ``can_external_write``, a bulk one
      ``can_bulk_operate``, and ``max_risk`` is at least the capability's.
    """

    def __init__(
        self,
        capabilities: Sequence[CapabilityFacts],
        *,
        knowledge: Mapping[str, Sequence[str]] | None = None,
        policies: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        """Args: the capability registry's versions; knowledge and policy versions by id."""
        self._caps: dict[str, list[CapabilityFacts]] = {}
        for c in capabilities:
            self._caps.setdefault(c.capability_id, []).append(c)
        self._knowledge = {k: list(v) for k, v in (knowledge or {}).items()}
        self._policies = {k: list(v) for k, v in (policies or {}).items()}

    def problems(self, manifest: AgentManifest, agents: set[str]) -> builtins.list[str]:
        """Every reason the version cannot be released, in manifest order; empty when it may."""
        out: builtins.list[str] = []
        usable = {cid: [c for c in cs if c.status is not S.RETIRED] for cid, cs in self._caps.items()}
        for cap in manifest.capabilities:
            if not usable.get(cap):
                out.append(f"capabilities: {cap!r} is not a registered capability")
        for i, dep in enumerate(manifest.dependencies.capabilities):
            out += self._range(f"dependencies.capabilities[{i}]", dep,
                               {k: [c.version for c in v] for k, v in usable.items()}, "capability")
        for i, dep in enumerate(manifest.dependencies.knowledge):
            out += self._range(f"dependencies.knowledge[{i}]", dep, self._knowledge, "knowledge store")
        for i, dep in enumerate(manifest.dependencies.policies):
            out += self._range(f"dependencies.policies[{i}]", dep, self._policies, "policy")
        for i, target in enumerate(manifest.allowed_delegations):
            if target not in agents:
                out.append(f"allowed_delegations[{i}]: {target!r} is not a registered agent")
        if manifest.fallback and manifest.fallback not in agents:
            out.append(f"fallback: {manifest.fallback!r} is not a registered agent")
        rp = manifest.risk_profile
        for cap in manifest.capabilities:
            for c in usable.get(cap, []):
                if c.can_mutate and not rp.can_mutate:
                    out.append(f"risk_profile.can_mutate: {cap}@{c.version} mutates, the profile says it cannot")
                if c.can_external_write and not rp.can_external_write:
                    out.append(f"risk_profile.can_external_write: {cap}@{c.version} writes to an external "
                               "system, the profile says it cannot")
                if c.can_bulk_operate and not rp.can_bulk_operate:
                    out.append(f"risk_profile.can_bulk_operate: {cap}@{c.version} operates in bulk, the "
                               "profile says it cannot")
                if _RISK_ORDER[c.max_risk] > _RISK_ORDER[rp.max_risk]:
                    out.append(f"risk_profile.max_risk: {cap}@{c.version} is {c.max_risk.value}, above the "
                               f"declared {rp.max_risk.value}")
        return list(dict.fromkeys(out))

    @staticmethod
    def _range(field: str, dep: str, known: Mapping[str, Sequence[str]], kind: str) -> builtins.list[str]:
        try:
            target, wanted = parse_dependency(dep)
        except ValueError as err:
            return [f"{field}: {dep!r} is not '<id>@<semver range>': {err}"]
        have = known.get(target)
        if not have:
            return [f"{field}: {dep!r}: no {kind} {target!r} is {_WHERE[kind]}"]
        versions = []
        for v in have:
            try:
                versions.append(Version.parse(v))
            except ValueError:
                continue
        if not any(wanted.contains(v) for v in versions):
            return [f"{field}: {dep!r} is incompatible with the registered versions ({', '.join(have)})"]
        return []


Authorize = Callable[[str, assertion.UserIdentity, str, str], tuple[bool, Sequence[str], str]]
"""``(operation, user, resource "<agent>@<version>", subject_requester_id) -> (allowed, reason codes, decision id)``;
operation is ``MANAGE_AGENT`` or ``APPROVE_AGENT``. Raises when no decision could be had (fail closed)."""

Audit = Callable[..., None]
"""Records one audit narrative: ``audit(event, outcome=..., **fields)`` with event ``STATUS_CHANGED`` /
``ACCESS_DENIED`` and outcome ``SUCCESS`` / ``DENIED``."""

EvaluationGate = Callable[[str, str], bool]
"""``(agent_id, version) -> True`` when a stored evaluation of the version passed its gate."""


@dataclass(frozen=True)
class EvaluationRun:
    """What running a dataset against a version gave (see :mod:`supervisor_svc.evaluation`)."""

    evaluation: bytes
    """The serialized evaluation, kept as it is."""
    passed: bool
    """Its regression gate held."""
    summary: tuple[str, ...]
    """Reason codes for its audit record (score, gate, baseline, …)."""
    problems: tuple[str, ...]
    """Why the gate failed (empty when it held)."""


EvaluationRunner = Callable[["AgentVersionRecord", "tuple[str, bytes] | None"], EvaluationRun]
"""``(version, baseline (version, its latest evaluation) or None) -> EvaluationRun``; raises a MeshError
when the version could not be evaluated (e.g. its process answered no case)."""

_EVALUABLE = frozenset({LifecycleStatus.EVALUATING, LifecycleStatus.APPROVED, LifecycleStatus.CANARY,
                        LifecycleStatus.ACTIVE, LifecycleStatus.DEPRECATED})

_SCHEMA = """
CREATE TABLE IF NOT EXISTS agent_versions (
    agent_id      TEXT NOT NULL,
    version       TEXT NOT NULL,
    manifest_json TEXT NOT NULL,
    endpoint      TEXT NOT NULL,
    spiffe_id     TEXT NOT NULL,
    status        TEXT NOT NULL,
    registered_by TEXT NOT NULL,
    registrant    TEXT NOT NULL,
    problems_json TEXT NOT NULL DEFAULT '[]',
    created_at    TEXT NOT NULL,
    PRIMARY KEY (agent_id, version)
);
CREATE TABLE IF NOT EXISTS agent_evaluations (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_id     TEXT NOT NULL,
    version      TEXT NOT NULL,
    passed       INTEGER NOT NULL,
    evaluation   BLOB NOT NULL,
    evaluated_by TEXT NOT NULL,
    evaluated_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS agent_version_history (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_id    TEXT NOT NULL,
    version     TEXT NOT NULL,
    from_status TEXT NOT NULL,
    to_status   TEXT NOT NULL,
    reason      TEXT NOT NULL,
    changed_by  TEXT NOT NULL,
    changed_at  TEXT NOT NULL
);
"""


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Onboarding:
    """Registered agent versions in SQLite, moved along the lifecycle under policy, audited."""

    def __init__(
        self,
        db_path: str | Path,
        registry: AgentRegistry,
        release: Callable[[], ReleaseManager],
        *,
        authorize: Authorize,
        audit: Audit,
        evaluations: EvaluationGate | None = None,
    ) -> None:
        """Args:
        db_path: SQLite file (the registry's may be shared); ``":memory:"`` in tests.
        registry: The agent registry (shipped versions, and what it serves once a version is ACTIVE).
        release: Builds the Release Manager from what the mesh has now (asked at each validation).
        authorize: The policy engine's decision on an operator's act.
        audit: Records each transition and each refusal.
        evaluations: Whether a version's evaluation passed; none means no version can be approved.
        """
        self._registry = registry
        self._release = release
        self._authorize = authorize
        self._audit = audit
        self._evaluations = evaluations or self.evaluation_passed
        self._lock = threading.Lock()
        self._db = database.sqlite_connection(db_path, timeout_s=5.0)
        self._db.row_factory = sqlite3.Row
        self._db.executescript(_SCHEMA)
        self._writes = 0
        """Transactions this connection committed (``PRAGMA data_version`` counts only the others')."""
        self._read: tuple[tuple[int, int], tuple[AgentVersionRecord, ...]] | None = None
        registry.attach_versions(self.active_manifests)

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
            self._writes += 1

    # -- reads

    def _history(self, agent_id: str, version: str) -> tuple[Transition, ...]:
        rows = self._db.execute(
            "SELECT * FROM agent_version_history WHERE agent_id = ? AND version = ? ORDER BY seq",
            (agent_id, version)).fetchall()
        return tuple(Transition(S(r["from_status"]), S(r["to_status"]), r["reason"], r["changed_by"],
                                r["changed_at"]) for r in rows)

    def _record(self, row: sqlite3.Row) -> AgentVersionRecord:
        manifest = manifest_from_data(json.loads(row["manifest_json"]),
                                      f"registered:{row['agent_id']}@{row['version']}")
        return AgentVersionRecord(manifest, S(row["status"]), row["endpoint"], row["spiffe_id"],
                                  row["registered_by"], row["registrant"],
                                  self._history(row["agent_id"], row["version"]),
                                  tuple(json.loads(row["problems_json"])))

    def _registered(self, agent_id: str | None = None) -> builtins.list[AgentVersionRecord]:
        """The registered versions (of one agent), read and checked again only when the file changed: the
        registry asks on every task dispatch, and a manifest's check (its JSON Schemas) costs milliseconds."""
        with self._lock:
            stamp = (int(self._db.execute("PRAGMA data_version").fetchone()[0]), self._writes)
            if self._read is None or self._read[0] != stamp:
                rows = self._db.execute("SELECT * FROM agent_versions ORDER BY agent_id, created_at").fetchall()
                self._read = (stamp, tuple(self._record(r) for r in rows))
            records = self._read[1]
        return [r for r in records if not agent_id or r.agent_id == agent_id]

    def _shipped(self, agent_id: str | None = None) -> builtins.list[AgentVersionRecord]:
        out = []
        for entry, changes in self._registry.shipped_histories(agent_id):
            history = tuple(Transition(h.old_status, h.new_status, h.reason, h.changed_by, h.changed_at)
                            for h in changes)
            out.append(AgentVersionRecord(entry.manifest, entry.status, "", entry.manifest.spiffe_id,
                                          f"manifest:{Path(entry.manifest.source).name}", "", history, ()))
        return out

    def list(self, agent_id: str = "") -> builtins.list[AgentVersionRecord]:
        """Every version (shipped and registered), by agent, shipped first then by registration."""
        records = self._shipped(agent_id or None) + self._registered(agent_id or None)
        return sorted(records, key=lambda r: (r.agent_id, not r.shipped))

    def get(self, agent_id: str, version: str) -> AgentVersionRecord:
        """One version.

        Raises:
            VersionNotFound: field ``version``.
        """
        for r in self.list(agent_id):
            if r.version == version:
                return r
        raise VersionNotFound(f"agent {agent_id!r} has no version {version!r}", field="version")

    def active_manifests(self) -> dict[str, AgentManifest]:
        """The ACTIVE registered version of each agent that has one (what the registry serves)."""
        return {r.agent_id: r.manifest for r in self._registered() if r.status is S.ACTIVE}

    # -- acts

    def _ask(self, operation: str, user: assertion.UserIdentity, key: str, subject: str, act: str) -> None:
        allowed, codes, decision_id = self._authorize(operation, user, key, subject)
        if not allowed:
            self._audit("ACCESS_DENIED", outcome="DENIED", tenant_id=user.tenant_id, user_id=user.user_id,
                        resource=f"agent-version:{key}", reason_codes=["POLICY_DENIED", operation, act, *codes])
            raise OnboardingDenied(f"the policy engine refused to let {user.user_id!r} {act} {key}: "
                                   f"{', '.join(codes)}", codes, decision_id)

    def register(
        self, user: assertion.UserIdentity, manifest: Any, endpoint: str, spiffe_id: str
    ) -> AgentVersionRecord:
        """Register a version in DRAFT.

        Raises:
            RequestInvalid: ``MISSING_FIELD``, ``MANIFEST_INVALID`` (field ``manifest.<path>``),
                ``ENDPOINT_INVALID``, ``SPIFFE_ID_MISMATCH``.
            OnboardingDenied: the policy engine refused.
            VersionExists: the agent already has this version.
        """
        if not isinstance(manifest, dict) or not manifest:
            raise RequestInvalid("manifest is required", reason="MISSING_FIELD", field="manifest")
        # A registered version starts in DRAFT whatever the manifest says.
        data = {**manifest, "status": "DRAFT"}
        try:
            parsed = manifest_from_data(data, "manifest")
        except AgentManifestError as err:
            field = f"manifest.{err.field}" if err.field else "manifest"
            raise RequestInvalid(err.message.removeprefix("manifest: ").removeprefix("manifest"),
                                 reason="MANIFEST_INVALID", field=field) from None
        if not endpoint:
            raise RequestInvalid("endpoint is required", reason="MISSING_FIELD", field="endpoint")
        if not _ENDPOINT_RE.match(endpoint) or not 0 < int(endpoint.rsplit(":", 1)[1]) < 65536:
            raise RequestInvalid("endpoint must be host:port", reason="ENDPOINT_INVALID", field="endpoint")
        expected = str(spiffe.agent(parsed.agent_id))
        if spiffe_id != expected:
            raise RequestInvalid(f"spiffe_id must be the agent's own, {expected!r}", reason="SPIFFE_ID_MISMATCH",
                                 field="spiffe_id")
        key = f"{parsed.agent_id}@{parsed.version}"
        self._ask("MANAGE_AGENT", user, key, "-", "register")
        if any(r.version == parsed.version for r in self.list(parsed.agent_id)):
            raise VersionExists(f"{key} is already registered", field="manifest.version")
        by = f"user:{user.tenant_id}/{user.user_id}"
        at = _now()
        record = dict(tenant_id=user.tenant_id, user_id=user.user_id, agent_id=parsed.agent_id,
                      resource=f"agent-version:{key}",
                      reason_codes=["AGENT_VERSION_REGISTERED", "status=DRAFT", f"endpoint={endpoint}",
                                    f"changed_by={by}"])
        # Durable in the log before the version exists (raises, and nothing is registered, if it cannot be).
        self._audit("STATUS_CHANGED", outcome="SUCCESS", first=True, **record)
        with self._not_applied_on_failure(record), self._tx() as db:
            db.execute("INSERT INTO agent_versions (agent_id, version, manifest_json, endpoint, spiffe_id, "
                       "status, registered_by, registrant, created_at) VALUES (?, ?, ?, ?, ?, 'DRAFT', ?, ?, ?)",
                       (parsed.agent_id, parsed.version, json.dumps(data, sort_keys=True), endpoint, spiffe_id,
                        by, user.user_id, at))
        return self.get(parsed.agent_id, parsed.version)

    @contextlib.contextmanager
    def _not_applied_on_failure(self, record: Mapping[str, Any]) -> Iterator[None]:
        """A change whose record is in the log but that could not be stored says so (FAILURE, NOT_APPLIED)."""
        try:
            yield
        except BaseException:
            self._audit("STATUS_CHANGED", outcome="FAILURE",
                        **{**record, "reason_codes": ["NOT_APPLIED", *record["reason_codes"]]})
            raise

    def transition(
        self, user: assertion.UserIdentity, agent_id: str, version: str, to: LifecycleStatus, reason: str
    ) -> tuple[AgentVersionRecord, builtins.list[AgentVersionRecord]]:
        """Move a version along one edge; returns it and the other versions the move changed.

        Raises:
            RequestInvalid: ``MISSING_FIELD``, ``REASON_REQUIRED``, ``REASON_TOO_LONG``.
            VersionNotFound: no such version.
            TransitionNotAllowed: not an edge (field ``to_status``).
            OnboardingDenied: the policy engine refused.
            ReleaseBlocked: validation found problems (the version is back in DRAFT).
            EvaluationRequired: approving a version without a passed evaluation.
        """
        for name, value in (("agent_id", agent_id), ("version", version)):
            if not value:
                raise RequestInvalid(f"{name} is required", reason="MISSING_FIELD", field=name)
        reason = reason.strip()
        if not reason:
            raise RequestInvalid("a reason is required for a transition", reason="REASON_REQUIRED", field="reason")
        if len(reason) > _MAX_REASON:
            raise RequestInvalid(f"the reason is longer than {_MAX_REASON} characters", reason="REASON_TOO_LONG",
                                 field="reason")
        record = self.get(agent_id, version)
        disabled_from = next((t.from_status for t in reversed(record.history) if t.to_status is S.DISABLED), None)
        check_transition(record.status, to, field="to_status", what=record.key, disabled_from=disabled_from)
        approving = record.status is S.EVALUATING and to is S.APPROVED
        if approving:
            self._ask("APPROVE_AGENT", user, record.key, record.registrant_user or record.registered_by, "approve")
        else:
            self._ask("MANAGE_AGENT", user, record.key, "-", f"move to {to.value}")
        by = f"user:{user.tenant_id}/{user.user_id}"
        if approving and (self._evaluations is None or not self._evaluations(agent_id, version)):
            raise EvaluationRequired(f"{record.key} has no passed evaluation; run 'agentmesh agents evaluate "
                                     f"{record.key}' first", field="to_status")
        also: builtins.list[AgentVersionRecord] = []
        if to is S.VALIDATING:
            agents = {r.agent_id for r in self.list()}
            problems = self._release().problems(record.manifest, agents)
            self._move(user, record, S.VALIDATING, reason, by, problems=[])
            if problems:
                self._move(user, self.get(agent_id, version), S.DRAFT,
                           "blocked by the Release Manager: " + "; ".join(problems), by, problems=problems)
                raise ReleaseBlocked(f"{record.key} is blocked by the Release Manager (PRD §59): "
                                     + "; ".join(problems), problems)
        elif to is S.ACTIVE:
            # One ACTIVE version per agent: the one it replaces is deprecated.
            for other in self.list(agent_id):
                if other.version != version and other.status is S.ACTIVE:
                    self._move(user, other, S.DEPRECATED, f"replaced by {record.key}: {reason}", by)
                    also.append(self.get(agent_id, other.version))
            self._move(user, record, to, reason, by)
        else:
            self._move(user, record, to, reason, by)
        return self.get(agent_id, version), also

    def _move(self, user: assertion.UserIdentity, record: AgentVersionRecord, to: LifecycleStatus, reason: str,
              by: str, *, problems: Sequence[str] | None = None) -> None:
        entry = dict(tenant_id=user.tenant_id, user_id=user.user_id, agent_id=record.agent_id,
                     resource=f"agent-version:{record.key}",
                     reason_codes=["AGENT_VERSION_TRANSITION", f"from={record.status.value}", f"status={to.value}",
                                   f"reason={reason}"[:500], f"changed_by={by}",
                                   *([f"problem={p}"[:500] for p in problems] if problems else [])])
        # Durable in the log before the move takes effect (raises, and nothing moves, if it cannot be).
        self._audit("STATUS_CHANGED", outcome="SUCCESS", first=True, **entry)
        with self._not_applied_on_failure(entry):
            if record.shipped:
                self._registry.set_status(record.agent_id, to, reason, by)
                return
            at = _now()
            with self._tx() as db:
                db.execute("UPDATE agent_versions SET status = ?" + (", problems_json = ?" if problems is not None
                                                                     else "") + " WHERE agent_id = ? AND version = ?",
                           (to.value, *([json.dumps(list(problems))] if problems is not None else []),
                            record.agent_id, record.version))
                db.execute("INSERT INTO agent_version_history (agent_id, version, from_status, to_status, reason, "
                           "changed_by, changed_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                           (record.agent_id, record.version, record.status.value, to.value, reason, by, at))

    def set_agent_status(self, agent_id: str, status: LifecycleStatus, reason: str, by: str) -> None:
        """``SetAgentStatus`` (the operator identity's kill switch, §63) on an agent served by a registered version.

        The agent's served version is its ACTIVE registered one, or one a kill switch DISABLED from ACTIVE;
        anything else goes to the registry (the shipped version).

        Raises:
            TransitionNotAllowed: not an edge (field ``status``).
            VersionNotFound: the agent has no registered version in service (the caller uses the registry).
        """
        for record in self._registered(agent_id):
            came = next((t.from_status for t in reversed(record.history) if t.to_status is S.DISABLED), None)
            if record.status is S.ACTIVE or (record.status is S.DISABLED and came is S.ACTIVE):
                if record.status is status:
                    return
                check_transition(record.status, status, field="status", what=f"agent {agent_id!r}",
                                 disabled_from=came)
                at = _now()
                with self._tx() as db:
                    db.execute("UPDATE agent_versions SET status = ? WHERE agent_id = ? AND version = ?",
                               (status.value, agent_id, record.version))
                    db.execute("INSERT INTO agent_version_history (agent_id, version, from_status, to_status, "
                               "reason, changed_by, changed_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                               (agent_id, record.version, record.status.value, status.value, reason, by, at))
                return
        raise VersionNotFound(f"agent {agent_id!r} has no registered version in service", field="agent_id")

    # -- evaluation (PRD §60)

    def latest_evaluation(self, agent_id: str, version: str) -> tuple[bytes, bool] | None:
        """The latest stored evaluation of a version and whether its gate held (None: never evaluated)."""
        with self._lock:
            row = self._db.execute("SELECT evaluation, passed FROM agent_evaluations WHERE agent_id = ? AND "
                                   "version = ? ORDER BY seq DESC LIMIT 1", (agent_id, version)).fetchone()
        return (bytes(row["evaluation"]), bool(row["passed"])) if row is not None else None

    def evaluation_passed(self, agent_id: str, version: str) -> bool:
        """The version's latest evaluation passed its gate (what approving it needs)."""
        latest = self.latest_evaluation(agent_id, version)
        return latest is not None and latest[1]

    def _baseline(self, record: AgentVersionRecord) -> tuple[str, bytes] | None:
        """The latest evaluation of the agent's highest version below this one that has one."""
        try:
            mine = Version.parse(record.version)
        except ValueError:
            return None
        best: tuple[Version, str, bytes] | None = None
        for other in self.list(record.agent_id):
            try:
                theirs = Version.parse(other.version)
            except ValueError:
                continue
            latest = self.latest_evaluation(other.agent_id, other.version) if theirs < mine else None
            if latest is not None and (best is None or best[0] < theirs):
                best = (theirs, other.version, latest[0])
        return (best[1], best[2]) if best else None

    def evaluate(self, user: assertion.UserIdentity, agent_id: str, version: str,
                 run: EvaluationRunner) -> tuple[bytes, AgentVersionRecord]:
        """Runs the version's evaluation, keeps it and audits it; an EVALUATING version whose gate fails goes
        back to DRAFT. Returns the evaluation and the version afterwards.

        Raises:
            RequestInvalid: ``MISSING_FIELD``.
            VersionNotFound: no such version.
            EvaluationNotAllowed: the version is in DRAFT, VALIDATING, DISABLED or RETIRED.
            OnboardingDenied: the policy engine refused.
            agentmesh.errors.MeshError: the evaluation could not run (nothing is kept).
        """
        for name, value in (("agent_id", agent_id), ("version", version)):
            if not value:
                raise RequestInvalid(f"{name} is required", reason="MISSING_FIELD", field=name)
        record = self.get(agent_id, version)
        if record.status not in _EVALUABLE:
            raise EvaluationNotAllowed(
                f"{record.key} is {record.status.value}; a version is evaluated once it has passed validation "
                "(EVALUATING), and until it is retired", field="version")
        self._ask("MANAGE_AGENT", user, record.key, "-", "evaluate")
        outcome = run(record, self._baseline(record))
        by = f"user:{user.tenant_id}/{user.user_id}"
        entry = dict(tenant_id=user.tenant_id, user_id=user.user_id, agent_id=agent_id,
                     resource=f"agent-version:{record.key}",
                     reason_codes=["AGENT_VERSION_EVALUATED", f"status={record.status.value}",
                                   "gate=PASSED" if outcome.passed else "gate=FAILED", *outcome.summary,
                                   *[f"problem={p}"[:500] for p in outcome.problems], f"changed_by={by}"])
        # Durable in the log before it counts (an approval reads it).
        self._audit("STATUS_CHANGED", outcome="SUCCESS" if outcome.passed else "FAILURE", first=True, **entry)
        with self._not_applied_on_failure(entry), self._tx() as db:
            db.execute("INSERT INTO agent_evaluations (agent_id, version, passed, evaluation, evaluated_by, "
                       "evaluated_at) VALUES (?, ?, ?, ?, ?, ?)",
                       (agent_id, version, int(outcome.passed), outcome.evaluation, by, _now()))
        if record.status is S.EVALUATING and not outcome.passed:
            self._move(user, record, S.DRAFT, "the evaluation failed its gate: " + "; ".join(outcome.problems),
                       by, problems=list(outcome.problems))
        return outcome.evaluation, self.get(agent_id, version)

    # -- the supervisor's own move (PRD §57)

    def roll_back_canary(self, agent_id: str, version: str, reason: str, reason_codes: Sequence[str] = (), *,
                         actor: str = "system:supervisor") -> AgentVersionRecord:
        """A system move CANARY -> APPROVED (PRD §57): the supervisor rolls back a canary whose failures crossed
        the threshold (:class:`supervisor_svc.signals.CanaryGuard`). Asked of no human and no policy (it takes
        traffic away, never gives any); audited like every move (``STATUS_CHANGED``, ``AGENT_VERSION_TRANSITION``,
        ``changed_by=system:supervisor`` and ``reason_codes``), durable in the log before it takes effect.

        Raises:
            VersionNotFound: no such version.
            TransitionNotAllowed: the version is no longer CANARY (moved meanwhile).
            agentmesh.errors.Unavailable: ``AUDIT_UNAVAILABLE``; nothing moved.
        """
        record = self.get(agent_id, version)
        if record.status is not S.CANARY:
            raise TransitionNotAllowed(f"{record.key} is {record.status.value}, not CANARY: nothing to roll back",
                                       field="status")
        check_transition(record.status, S.APPROVED, field="status", what=record.key)
        entry = dict(agent_id=agent_id, resource=f"agent-version:{record.key}",
                     reason_codes=["AGENT_VERSION_TRANSITION", "from=CANARY", "status=APPROVED",
                                   f"reason={reason}"[:500], f"changed_by={actor}", *reason_codes])
        # Durable in the log before the move takes effect (raises, and nothing moves, if it cannot be).
        self._audit("STATUS_CHANGED", outcome="SUCCESS", first=True, **entry)
        with self._not_applied_on_failure(entry):
            if record.shipped:
                self._registry.set_status(agent_id, S.APPROVED, reason, actor)
            else:
                with self._tx() as db:
                    db.execute("UPDATE agent_versions SET status = ? WHERE agent_id = ? AND version = ? "
                               "AND status = ?", (S.APPROVED.value, agent_id, version, S.CANARY.value))
                    db.execute("INSERT INTO agent_version_history (agent_id, version, from_status, to_status, "
                               "reason, changed_by, changed_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                               (agent_id, version, S.CANARY.value, S.APPROVED.value, reason, actor, _now()))
        return self.get(agent_id, version)
