"""Agent registry: manifests from files, lifecycle status in SQLite (PRD §7, §8, §57, §63).

Each agent is declared by one YAML (or JSON) manifest named after it,
``supervisor_svc/agents/<agent_id>.yaml``::

    agent_id: training-agent            # [a-z][a-z0-9-]*, also the SPIFFE name
    version: 1.0.0                      # semver
    name: Training Agent
    description: Checks that every worker holds the trainings a permit requires.
    domains: [training]
    capabilities: [training.getStatus, worker.get]
    knowledge_scopes: [training.nr]
    input_schema: {type: object, ...}   # JSON Schema 2020-12 of the task input
    output_schema: {type: object, ...}  # JSON Schema 2020-12 of AgentResult.result
    allowed_delegations: []             # agents this one may hand off to (PRD §20)
    status: ACTIVE                      # initial lifecycle status
    risk_profile: {max_risk: LOW, can_mutate: false, can_external_write: false, can_bulk_operate: false}
    dependencies:                       # PRD §59
      capabilities: ["training.getStatus@^2.0"]
      knowledge: []
      policies: []
    cost: 1.0                           # relative cost of one task (selection, PRD §10)
    fallback: risk-rules-agent          # optional: the agent that stands in while this one is
                                        # unavailable, if the policy engine allows it (PRD §47)
    spiffe_id: spiffe://agentmesh.local/agent/training-agent   # optional; must be this value

Everything is validated when the registry starts; a bad file stops it with an
error naming the file, the field and the line. Status changes are persisted
per agent id (with history) and override the manifest's ``status`` on every
later start, so a kill switch (§63) survives restarts and upgrades. Status is
read from the database on every lookup, so DISABLED takes effect at once for
new tasks, also in other supervisor replicas sharing the database.

A specialisation is not an authority: nothing here grants an agent anything.
"""

from __future__ import annotations

import builtins
import datetime as _dt
import math
import re
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import jsonschema
import pydantic
from google.protobuf import struct_pb2

from agentmesh import spiffe
from agentmesh.v1 import common_pb2
from agentmesh.vocabulary import LifecycleStatus, RiskLevel
from supervisor_svc._datafile import Document, format_path, load_document, validation_error
from supervisor_svc.errors import (
    AgentDependencyError,
    AgentManifestError,
    AgentNotActive,
    AgentNotFound,
    RequestInvalid,
)
from supervisor_svc.lifecycle import check_transition

__all__ = [
    "AgentEntry",
    "AgentManifest",
    "AgentRegistry",
    "DependencyChecker",
    "LifecycleStatus",
    "StatusChange",
    "default_agents_dir",
    "load_manifests",
]

DependencyChecker = Callable[[str], object]
"""Validates one declared dependency such as ``"training.getStatus@^2.0"``.

Returns anything when satisfied; raises when not. An exception's ``reason``
attribute, if any, is kept as :attr:`AgentDependencyError.cause_reason`. The
lead passes the capability registry's semver check here.
"""

AGENT_ID_PATTERN = r"^[a-z][a-z0-9-]{0,62}$"
_CAPABILITY_PATTERN = r"^[a-z][A-Za-z0-9]*(\.[a-z][A-Za-z0-9]*)+$"
_SEMVER_PATTERN = r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$"
_DEPENDENCY_RE = re.compile(r"^([A-Za-z][A-Za-z0-9_.\-]*)@(\S+)$")
_SUFFIXES = (".yaml", ".yml", ".json")


def status_from_proto(value: int) -> LifecycleStatus:
    """A lifecycle status from its ``common_pb2`` number.

    Raises:
        RequestInvalid: ``STATUS_INVALID`` (field ``status``) for UNSPECIFIED or an unknown number.
    """
    try:
        return LifecycleStatus.from_proto(value)
    except ValueError:
        raise RequestInvalid("status must be a real lifecycle status", reason="STATUS_INVALID",
                             field="status") from None


@dataclass(frozen=True)
class RiskProfile:
    """Declared potential impact of an agent (PRD §65)."""

    max_risk: RiskLevel
    can_mutate: bool
    can_external_write: bool
    can_bulk_operate: bool

    def to_proto(self) -> common_pb2.RiskProfile:
        """The ``RiskProfile`` message."""
        return common_pb2.RiskProfile(
            max_risk=getattr(common_pb2, f"RISK_LEVEL_{self.max_risk.value}"), can_mutate=self.can_mutate,
            can_external_write=self.can_external_write, can_bulk_operate=self.can_bulk_operate)


@dataclass(frozen=True)
class Dependencies:
    """Semver-ranged dependencies (PRD §59), e.g. ``"training.getStatus@^2.0"``."""

    capabilities: tuple[str, ...]
    knowledge: tuple[str, ...]
    policies: tuple[str, ...]


@dataclass(frozen=True)
class AgentManifest:
    """One validated agent manifest."""

    agent_id: str
    version: str
    name: str
    description: str
    domains: tuple[str, ...]
    capabilities: tuple[str, ...]
    knowledge_scopes: tuple[str, ...]
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    allowed_delegations: tuple[str, ...]
    status: LifecycleStatus
    """The initial status; a persisted change overrides it."""
    risk_profile: RiskProfile
    dependencies: Dependencies
    spiffe_id: str
    cost: float
    source: str
    """The file the manifest was read from."""
    fallback: str = ""
    """The registered agent that may stand in for this one while it is unavailable (PRD §47); "" for none.
    Whether it runs for a task is the policy engine's decision (``use_fallback_agent``)."""


@dataclass(frozen=True)
class AgentEntry:
    """A registered agent with its current lifecycle status."""

    manifest: AgentManifest
    status: LifecycleStatus
    status_reason: str
    """Why the status was last changed ("" when it is the manifest's)."""
    changed_by: str
    changed_at: str
    """RFC 3339 UTC time of the last change ("" when it is the manifest's)."""

    @property
    def agent_id(self) -> str:
        """The agent's id."""
        return self.manifest.agent_id

    @property
    def active(self) -> bool:
        """Only ACTIVE agents are discovered and receive new tasks."""
        return self.status is LifecycleStatus.ACTIVE

    def to_proto(self) -> common_pb2.AgentDefinition:
        """The ``AgentDefinition`` message, with the current status."""
        m = self.manifest
        input_schema, output_schema = struct_pb2.Struct(), struct_pb2.Struct()
        input_schema.update(m.input_schema)
        output_schema.update(m.output_schema)
        return common_pb2.AgentDefinition(
            agent_id=m.agent_id,
            version=m.version,
            name=m.name,
            description=m.description,
            domains=m.domains,
            capabilities=m.capabilities,
            knowledge_scopes=m.knowledge_scopes,
            input_schema=input_schema,
            output_schema=output_schema,
            allowed_delegations=m.allowed_delegations,
            status=self.status.to_proto(),
            risk_profile=m.risk_profile.to_proto(),
            dependencies=common_pb2.AgentDependencies(
                capabilities=m.dependencies.capabilities,
                knowledge=m.dependencies.knowledge,
                policies=m.dependencies.policies,
            ),
            spiffe_id=m.spiffe_id,
            cost=m.cost,
        )


@dataclass(frozen=True)
class StatusChange:
    """One recorded lifecycle change."""

    agent_id: str
    old_status: LifecycleStatus
    new_status: LifecycleStatus
    reason: str
    changed_by: str
    changed_at: str


def _change(row: sqlite3.Row) -> StatusChange:
    return StatusChange(row["agent_id"], LifecycleStatus(row["old_status"]), LifecycleStatus(row["new_status"]),
                        row["reason"], row["changed_by"], row["changed_at"])


# --- manifest validation ---------------------------------------------------------------------------

_Id = Annotated[str, pydantic.StringConstraints(pattern=AGENT_ID_PATTERN)]
_CapabilityId = Annotated[str, pydantic.StringConstraints(pattern=_CAPABILITY_PATTERN)]
_Text = Annotated[str, pydantic.StringConstraints(min_length=1, max_length=2000, strip_whitespace=True)]
_Scope = Annotated[str, pydantic.StringConstraints(pattern=r"^[a-z][a-z0-9._-]{0,127}$")]
_Status = Literal[
    "DRAFT", "VALIDATING", "EVALUATING", "APPROVED", "CANARY", "ACTIVE", "DEPRECATED", "DISABLED", "RETIRED"
]


class _Strict(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True, frozen=True)


class _RiskProfileModel(_Strict):
    max_risk: Literal["LOW", "MEDIUM", "HIGH", "CRITICAL"]
    can_mutate: bool
    can_external_write: bool
    can_bulk_operate: bool


class _DependenciesModel(_Strict):
    capabilities: list[str] = []
    knowledge: list[str] = []
    policies: list[str] = []


class _ManifestModel(_Strict):
    agent_id: _Id
    version: Annotated[str, pydantic.StringConstraints(pattern=_SEMVER_PATTERN)]
    name: _Text
    description: _Text
    domains: list[_Scope] = pydantic.Field(min_length=1)
    capabilities: list[_CapabilityId]
    knowledge_scopes: list[_Scope] = []
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    allowed_delegations: list[_Id] = []
    status: _Status
    risk_profile: _RiskProfileModel
    dependencies: _DependenciesModel = _DependenciesModel()
    spiffe_id: str | None = None
    cost: float | int = pydantic.Field(ge=0)
    fallback: _Id | None = None


def default_agents_dir() -> Path:
    """The manifests shipped with the supervisor."""
    return Path(__file__).with_name("agents")


def _unique(values: list[str], doc: Document, file: str, field: str) -> None:
    seen: set[str] = set()
    for i, value in enumerate(values):
        if value in seen:
            raise AgentManifestError(
                f"{value!r} is listed twice", file=file, field=f"{field}[{i}]", line=doc.line_of((field, i))
            )
        seen.add(value)


def parse_manifest(path: Path) -> AgentManifest:
    """Read and validate one manifest file (everything that needs no other file).

    Raises:
        AgentManifestError: naming the file, the field and the line.
    """
    file = str(path)
    doc = load_document(path, error=AgentManifestError)
    return manifest_from_document(doc, file, file_stem=path.stem, file_name=path.name)


def manifest_from_data(data: Any, source: str) -> AgentManifest:
    """Validate a manifest given as plain data (e.g. from ``RegisterAgentVersion``); ``source`` names it.

    Raises:
        AgentManifestError: naming the field (``line`` is None).
    """
    return manifest_from_document(Document(data), source)


def manifest_from_document(
    doc: Document, file: str, *, file_stem: str | None = None, file_name: str = ""
) -> AgentManifest:
    """Validate a loaded manifest document; a file's name must be its agent id.

    Raises:
        AgentManifestError: naming the file, the field and the line.
    """
    if not isinstance(doc.data, dict):
        raise AgentManifestError("a manifest must be a mapping", file=file, line=doc.line_of(()))
    try:
        model = _ManifestModel.model_validate(doc.data)
    except pydantic.ValidationError as exc:
        raise validation_error(exc, doc, file, error=AgentManifestError) from None

    def fail(message: str, *loc: str | int) -> AgentManifestError:
        return AgentManifestError(message, file=file, field=format_path(loc), line=doc.line_of(loc))

    if file_stem is not None and file_stem != model.agent_id:
        raise fail(f"agent_id {model.agent_id!r} does not match the file name {file_name!r}", "agent_id")
    for name in ("domains", "capabilities", "knowledge_scopes", "allowed_delegations"):
        _unique(list(getattr(model, name)), doc, file, name)
    if model.agent_id in model.allowed_delegations:
        raise fail("an agent may not delegate to itself", "allowed_delegations",
                   model.allowed_delegations.index(model.agent_id))
    if model.fallback == model.agent_id:
        raise fail("an agent may not be its own fallback", "fallback")
    if not math.isfinite(float(model.cost)):
        raise fail("cost must be a finite number", "cost")
    for name in ("input_schema", "output_schema"):
        schema = getattr(model, name)
        if schema.get("type") != "object":
            raise fail("the schema's root must be {type: object}", name)
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as exc:
            loc = (name, *[p for p in exc.path if isinstance(p, str | int)])
            raise fail(f"not a valid JSON Schema: {exc.message}", *loc) from None
    for i, dep in enumerate(model.dependencies.capabilities):
        match = _DEPENDENCY_RE.match(dep)
        if match is None:
            raise fail("expected \"<capability id>@<semver range>\"", "dependencies", "capabilities", i)
        if match.group(1) not in model.capabilities:
            raise fail(
                f"depends on {match.group(1)!r}, which is not in the agent's capabilities",
                "dependencies", "capabilities", i,
            )
    for kind in ("knowledge", "policies"):
        for i, dep in enumerate(getattr(model.dependencies, kind)):
            if _DEPENDENCY_RE.match(dep) is None:
                raise fail("expected \"<id>@<semver range>\"", "dependencies", kind, i)
    expected_spiffe = str(spiffe.agent(model.agent_id))
    if model.spiffe_id is not None and model.spiffe_id != expected_spiffe:
        raise fail(f"must be {expected_spiffe!r} (the agent's own SPIFFE id)", "spiffe_id")
    rp = model.risk_profile
    return AgentManifest(
        agent_id=model.agent_id,
        version=model.version,
        name=model.name,
        description=model.description,
        domains=tuple(model.domains),
        capabilities=tuple(model.capabilities),
        knowledge_scopes=tuple(model.knowledge_scopes),
        input_schema=dict(model.input_schema),
        output_schema=dict(model.output_schema),
        allowed_delegations=tuple(model.allowed_delegations),
        status=LifecycleStatus(model.status),
        risk_profile=RiskProfile(RiskLevel(rp.max_risk), rp.can_mutate, rp.can_external_write, rp.can_bulk_operate),
        dependencies=Dependencies(
            tuple(model.dependencies.capabilities),
            tuple(model.dependencies.knowledge),
            tuple(model.dependencies.policies),
        ),
        spiffe_id=expected_spiffe,
        cost=float(model.cost),
        source=file,
        fallback=model.fallback or "",
    )


def load_manifests(agents_dir: Path) -> builtins.list[AgentManifest]:
    """Read every manifest of a directory and check references between them.

    Raises:
        AgentManifestError: a bad file, a duplicate agent id, an unknown delegation target,
            or a directory without manifests.
    """
    if not agents_dir.is_dir():
        raise AgentManifestError("agent manifest directory does not exist", file=str(agents_dir))
    paths = sorted(p for p in agents_dir.iterdir() if p.suffix in _SUFFIXES and p.is_file())
    if not paths:
        raise AgentManifestError("no agent manifests (*.yaml, *.yml, *.json) found", file=str(agents_dir))
    manifests: dict[str, AgentManifest] = {}
    for path in paths:
        manifest = parse_manifest(path)
        if manifest.agent_id in manifests:
            raise AgentManifestError(
                f"agent {manifest.agent_id!r} is already defined in {manifests[manifest.agent_id].source}",
                file=str(path), field="agent_id", reason="AGENT_DUPLICATE",
            )
        manifests[manifest.agent_id] = manifest
    for manifest in manifests.values():
        for i, target in enumerate(manifest.allowed_delegations):
            if target not in manifests:
                raise AgentManifestError(
                    f"delegation target {target!r} is not a registered agent",
                    file=manifest.source, field=f"allowed_delegations[{i}]", reason="AGENT_REFERENCE_INVALID",
                )
        if manifest.fallback and manifest.fallback not in manifests:
            raise AgentManifestError(
                f"fallback {manifest.fallback!r} is not a registered agent",
                file=manifest.source, field="fallback", reason="AGENT_REFERENCE_INVALID",
            )
    return [manifests[k] for k in sorted(manifests)]


# --- the registry ----------------------------------------------------------------------------------

_SCHEMA = """
CREATE TABLE IF NOT EXISTS agent_status (
    agent_id   TEXT PRIMARY KEY,
    status     TEXT NOT NULL,
    reason     TEXT NOT NULL,
    changed_by TEXT NOT NULL,
    changed_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS agent_status_history (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_id   TEXT NOT NULL,
    old_status TEXT NOT NULL,
    new_status TEXT NOT NULL,
    reason     TEXT NOT NULL,
    changed_by TEXT NOT NULL,
    changed_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS agent_status_history_agent ON agent_status_history (agent_id, seq);
"""

_MAX_REASON_CHARS = 1000


def _utc_now() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC)


def _format_time(moment: _dt.datetime) -> str:
    return moment.astimezone(_dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class AgentRegistry:
    """The official list of agents (PRD §8), with persisted lifecycle status.

    Thread-safe: one SQLite connection guarded by a lock.
    """

    def __init__(
        self,
        db_path: str | Path,
        agents_dir: Path | None = None,
        *,
        dependency_checker: DependencyChecker | None = None,
        clock: Callable[[], _dt.datetime] = _utc_now,
    ) -> None:
        """Load and validate the manifests, open the status database, check dependencies.

        Args:
            db_path: SQLite file for status and history (created if missing); ``":memory:"`` for tests.
            agents_dir: Manifest directory; defaults to :func:`default_agents_dir`.
            dependency_checker: Validates each declared capability dependency; none means unchecked.
            clock: Source of the time recorded with status changes.

        Raises:
            AgentManifestError: a manifest is invalid.
            AgentDependencyError: a declared dependency is not satisfied (an incompatible
                release is blocked, PRD §59).
        """
        self._manifests = {m.agent_id: m for m in load_manifests(agents_dir or default_agents_dir())}
        self._checker = dependency_checker
        self._clock = clock
        self._active_versions: Callable[[], dict[str, AgentManifest]] | None = None
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(db_path), check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA busy_timeout = 5000")
        self._db.executescript(_SCHEMA)
        self._writes = 0
        """Transactions this connection committed (``PRAGMA data_version`` counts only the others')."""
        self._read: tuple[tuple[int, int], dict[str, sqlite3.Row], dict[str, builtins.list[sqlite3.Row]]] | None = None
        self.check_dependencies()

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()

    def __enter__(self) -> AgentRegistry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reads

    def _stored(self) -> tuple[dict[str, sqlite3.Row], dict[str, builtins.list[sqlite3.Row]]]:
        """The stored statuses and histories by agent, read again only when the file changed: every task
        dispatch asks for its agent, and the file changes only when an operator moves one."""
        with self._lock:
            stamp = (int(self._db.execute("PRAGMA data_version").fetchone()[0]), self._writes)
            if self._read is None or self._read[0] != stamp:
                statuses = {r["agent_id"]: r for r in self._db.execute("SELECT * FROM agent_status").fetchall()}
                histories: dict[str, builtins.list[sqlite3.Row]] = {}
                for r in self._db.execute("SELECT * FROM agent_status_history ORDER BY seq").fetchall():
                    histories.setdefault(r["agent_id"], []).append(r)
                self._read = (stamp, statuses, histories)
            return self._read[1], self._read[2]

    def _row(self, agent_id: str) -> sqlite3.Row | None:
        return self._stored()[0].get(agent_id)

    def _entry(self, manifest: AgentManifest, row: sqlite3.Row | None) -> AgentEntry:
        if row is None:
            return AgentEntry(manifest, manifest.status, "", "", "")
        return AgentEntry(manifest, LifecycleStatus(row["status"]), row["reason"], row["changed_by"], row["changed_at"])

    def attach_versions(self, active: Callable[[], dict[str, AgentManifest]]) -> None:
        """Serve registered versions: ``active()`` maps an agent id to its ACTIVE registered version's manifest.

        Such a version replaces the shipped manifest of its agent (which the promotion
        deprecated), or adds an agent that ships with no manifest (see
        :mod:`supervisor_svc.onboarding`).
        """
        self._active_versions = active

    def _overlay(self) -> dict[str, AgentManifest]:
        return self._active_versions() if self._active_versions is not None else {}

    def shipped(self) -> builtins.list[AgentEntry]:
        """The versions shipped as manifest files, with their status, ordered by agent id."""
        rows = self._stored()[0]
        return [self._entry(m, rows.get(k)) for k, m in sorted(self._manifests.items())]

    def shipped_histories(
        self, agent_id: str | None = None
    ) -> builtins.list[tuple[AgentEntry, builtins.list[StatusChange]]]:
        """:meth:`shipped` (of one agent), each with its :meth:`history`, from one read of the file: the
        router asks on every task dispatch."""
        rows, histories = self._stored()
        return [(self._entry(m, rows.get(k)), [_change(r) for r in histories.get(k, [])])
                for k, m in sorted(self._manifests.items()) if agent_id is None or k == agent_id]

    def list(self) -> builtins.list[AgentEntry]:
        """Every registered agent with its current status, ordered by agent id.

        An agent with an ACTIVE registered version is that version.
        """
        entries = {e.agent_id: e for e in self.shipped()}
        for agent_id, manifest in self._overlay().items():
            entries[agent_id] = AgentEntry(manifest, LifecycleStatus.ACTIVE, "", "", "")
        return [entries[k] for k in sorted(entries)]

    def get(self, agent_id: str) -> AgentEntry:
        """One agent with its current status (its ACTIVE registered version, if it has one).

        Raises:
            AgentNotFound: no such agent (field ``agent_id``).
        """
        registered = self._overlay().get(agent_id)
        if registered is not None:
            return AgentEntry(registered, LifecycleStatus.ACTIVE, "", "", "")
        manifest = self._manifests.get(agent_id)
        if manifest is None:
            raise AgentNotFound(f"no agent {agent_id!r} is registered", field="agent_id")
        return self._entry(manifest, self._row(agent_id))

    def ensure_active(self, agent_id: str) -> AgentEntry:
        """The agent, if it may take a new task now; call right before dispatching one.

        Raises:
            AgentNotFound: no such agent.
            AgentNotActive: ``AGENT_DISABLED``, ``AGENT_RETIRED`` or ``AGENT_NOT_ACTIVE``.
        """
        entry = self.get(agent_id)
        if entry.active:
            return entry
        reason = {
            LifecycleStatus.DISABLED: "AGENT_DISABLED",
            LifecycleStatus.RETIRED: "AGENT_RETIRED",
        }.get(entry.status, "AGENT_NOT_ACTIVE")
        raise AgentNotActive(
            f"agent {agent_id!r} is {entry.status.value} and takes no new tasks",
            agent_id=agent_id, status=entry.status.value, reason=reason,
        )

    def history(self, agent_id: str) -> builtins.list[StatusChange]:
        """Every recorded status change of an agent, oldest first.

        Raises:
            AgentNotFound: no such agent.
        """
        self.get(agent_id)
        return [_change(r) for r in self._stored()[1].get(agent_id, [])]

    # -- dependencies

    def _check_agent(self, manifest: AgentManifest) -> None:
        if self._checker is None:
            return
        for i, dep in enumerate(manifest.dependencies.capabilities):
            try:
                self._checker(dep)
            except Exception as exc:  # any failure of the checker means "not satisfied" (fail closed)
                cause = getattr(exc, "reason", None)
                raise AgentDependencyError(
                    f"agent {manifest.agent_id!r} ({manifest.source}) declares {dep!r}, which is not "
                    f"satisfied: {getattr(exc, 'message', None) or exc}",
                    agent_id=manifest.agent_id, dependency=dep, file=manifest.source,
                    field=f"dependencies.capabilities[{i}]",
                    cause_reason=cause if isinstance(cause, str) else None,
                ) from exc

    def check_dependencies(self) -> None:
        """Check every agent's declared capability dependencies with the checker.

        Raises:
            AgentDependencyError: the first unsatisfied dependency, naming agent, file and field.
        """
        for manifest in self._manifests.values():
            self._check_agent(manifest)

    # -- writes

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
            self._writes += 1

    def set_status(self, agent_id: str, status: LifecycleStatus | str, reason: str, by: str) -> AgentEntry:
        """Change an agent's lifecycle status, persisted with history (operators only — the caller checks).

        Setting the current status again changes nothing and records nothing.
        Activating re-checks the agent's dependencies, so an incompatible agent
        cannot be switched on.

        Raises:
            AgentNotFound: no such agent.
            RequestInvalid: ``STATUS_INVALID`` (field ``status``), ``REASON_REQUIRED`` /
                ``REASON_TOO_LONG`` (field ``reason``), ``ACTOR_REQUIRED`` (field ``by``).
            TransitionNotAllowed: not an edge of the lifecycle (:mod:`supervisor_svc.lifecycle`), e.g.
                DRAFT -> ACTIVE or leaving RETIRED; ``field`` is ``status``.
            AgentDependencyError: activating an agent whose dependencies are unmet.
        """
        try:
            new = LifecycleStatus(status)
        except ValueError:
            raise RequestInvalid(
                f"{status!r} is not a lifecycle status", reason="STATUS_INVALID", field="status"
            ) from None
        reason = reason.strip()
        if not reason:
            raise RequestInvalid("a reason is required for a status change", reason="REASON_REQUIRED", field="reason")
        if len(reason) > _MAX_REASON_CHARS:
            raise RequestInvalid(
                f"the reason is longer than {_MAX_REASON_CHARS} characters", reason="REASON_TOO_LONG", field="reason"
            )
        if not by.strip():
            raise RequestInvalid("the acting identity is required", reason="ACTOR_REQUIRED", field="by")
        manifest = self._manifests.get(agent_id)
        if manifest is None:
            raise AgentNotFound(f"no agent {agent_id!r} is shipped with a manifest", field="agent_id")
        if new is LifecycleStatus.ACTIVE:
            self._check_agent(manifest)
        with self._transaction() as db:
            row = db.execute("SELECT status FROM agent_status WHERE agent_id = ?", (agent_id,)).fetchone()
            old = LifecycleStatus(row["status"]) if row is not None else manifest.status
            if old != new:
                came = db.execute(
                    "SELECT old_status FROM agent_status_history WHERE agent_id = ? AND new_status = 'DISABLED' "
                    "ORDER BY seq DESC LIMIT 1", (agent_id,)).fetchone()
                check_transition(old, new, field="status", what=f"agent {agent_id!r}",
                                 disabled_from=LifecycleStatus(came["old_status"]) if came is not None else None)
                at = _format_time(self._clock())
                db.execute(
                    "INSERT INTO agent_status (agent_id, status, reason, changed_by, changed_at) "
                    "VALUES (?, ?, ?, ?, ?) ON CONFLICT(agent_id) DO UPDATE SET status = excluded.status, "
                    "reason = excluded.reason, changed_by = excluded.changed_by, changed_at = excluded.changed_at",
                    (agent_id, new.value, reason, by, at),
                )
                db.execute(
                    "INSERT INTO agent_status_history (agent_id, old_status, new_status, reason, changed_by, "
                    "changed_at) VALUES (?, ?, ?, ?, ?, ?)",
                    (agent_id, old.value, new.value, reason, by, at),
                )
        return self._entry(manifest, self._row(agent_id))
