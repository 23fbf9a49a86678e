"""Capability registry: manifests from files, lifecycle status in SQLite.

A capability is declared by one YAML (or JSON) manifest file::

    id: workPermit.get               # dotted, lowerCamel segments
    version: 1.0.0                   # semver
    description: Read one work permit with its workers and required trainings.
    domain: work-permit
    backend: internal                # or "knowledge" (capability_svc.knowledge_store), or
                                     # "external:<system>", e.g. external:lms
    lifecycle: ACTIVE                # initial status; operators change it at run time
    timeout_ms: 2000                 # default execution deadline (optional)
    risk_profile:                    # PRD §65, used by the policy engine
      max_risk: LOW                  # LOW | MEDIUM | HIGH | CRITICAL
      mutates: false
      external_write: false
      bulk: false
    resource:                        # what the call acts on (required for mutations)
      type: permit
      id_field: permit_id            # input property holding the resource id
    input_schema: {...}              # JSON Schema 2020-12, root object, additionalProperties: false
    output_schema: {...}             # JSON Schema 2020-12, root object, requires "provenance"

Several versions of one id may be registered (one file each). Status changes
are persisted per ``id@version`` in SQLite and override the manifest's
``lifecycle`` on every later start, so a kill switch survives a restart. Only
ACTIVE and DEPRECATED capabilities execute; anything else fails closed.
"""

from __future__ import annotations

import builtins
import datetime as _dt
import functools
import json
import re
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import jsonschema
import pydantic
from jsonschema import Draft202012Validator

from agentmesh.database import sqlite_connection
from agentmesh.vocabulary import LifecycleStatus, RiskLevel
from capability_svc._validation import SchemaCheck, pydantic_violations
from capability_svc._yaml_lines import DocumentError, LinedDocument, format_path, load_document
from capability_svc.errors import (
    CapabilityNotExecutable,
    CapabilityNotFound,
    DependencyError,
    InputInvalid,
    ManifestError,
    OutputInvalid,
    StatusChangeRefused,
)
from capability_svc.provenance import format_timestamp
from capability_svc.semver import Version, parse_dependency

__all__ = [
    "EXECUTABLE_STATUSES",
    "CapabilityEntry",
    "CapabilityManifest",
    "CapabilityRegistry",
    "LifecycleStatus",
    "RiskLevel",
    "RiskProfile",
    "StatusChange",
    "check_dependency",
    "default_capabilities_dir",
]

_MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
_MAX_MANIFEST_BYTES = 1024 * 1024


EXECUTABLE_STATUSES = frozenset({LifecycleStatus.ACTIVE, LifecycleStatus.DEPRECATED})
"""Statuses in which a capability may execute. Everything else fails closed."""


@dataclass(frozen=True)
class RiskProfile:
    """Declared potential impact of a capability (PRD §65)."""

    max_risk: RiskLevel
    mutates: bool
    """Changes state in a system of record; needs an idempotency key and read-back."""
    external_write: bool
    """Writes to a system outside the mesh."""
    bulk: bool
    """Acts on many records in one call."""


@dataclass(frozen=True)
class CapabilityManifest:
    """One registered capability version, as declared in its manifest file."""

    id: str
    version: Version
    description: str
    domain: str
    backend: str
    """``internal``, ``knowledge`` or ``external:<system>``."""
    lifecycle: LifecycleStatus
    """Initial status declared in the file; the effective one is ``CapabilityEntry.status``."""
    risk_profile: RiskProfile
    input_schema: Mapping[str, Any]
    output_schema: Mapping[str, Any]
    resource_type: str | None
    """Kind of record the call acts on (``permit``), for the policy request."""
    resource_id_field: str | None
    """Input property naming the record (``permit_id``)."""
    timeout_ms: int
    source_file: str

    @property
    def key(self) -> str:
        """``id@version``, the form recorded in evidence and audit."""
        return f"{self.id}@{self.version}"

    @property
    def external_system(self) -> str | None:
        """``lms`` for ``external:lms``; ``None`` for internal capabilities."""
        return self.backend.split(":", 1)[1] if self.backend.startswith("external:") else None

    def resource_id(self, arguments: Mapping[str, Any]) -> str | None:
        """The id of the record ``arguments`` act on, if the manifest declares one."""
        if self.resource_id_field is None:
            return None
        value = arguments.get(self.resource_id_field)
        return value if isinstance(value, str) else None


@dataclass(frozen=True)
class CapabilityEntry:
    """A manifest together with its effective lifecycle status."""

    manifest: CapabilityManifest
    status: LifecycleStatus
    status_changed_at: _dt.datetime | None
    """When an operator last changed the status; ``None`` if never (file default)."""

    @property
    def executable(self) -> bool:
        """Whether the status allows execution (ACTIVE or DEPRECATED)."""
        return self.status in EXECUTABLE_STATUSES


@dataclass(frozen=True)
class StatusChange:
    """The result of one status change, for the audit record."""

    capability_id: str
    version: str
    previous: LifecycleStatus
    current: LifecycleStatus
    changed_at: _dt.datetime
    changed_by: str
    reason: str


# --- manifest file model -----------------------------------------------------

_ID_PATTERN = r"^[a-z][A-Za-z0-9]*(\.[a-z][A-Za-z0-9]*)+$"
_NAME_PATTERN = r"^[a-z][a-z0-9-]*$"
_BACKEND_PATTERN = r"^(internal|knowledge|external:[a-z][a-z0-9-]*)$"
_PROPERTY_PATTERN = r"^[a-z][a-z0-9_]*$"


class _RiskProfileModel(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True)
    max_risk: Literal["LOW", "MEDIUM", "HIGH", "CRITICAL"]
    mutates: bool
    external_write: bool
    bulk: bool


class _ResourceModel(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True)
    type: str = pydantic.Field(pattern=_NAME_PATTERN)
    id_field: str = pydantic.Field(pattern=_PROPERTY_PATTERN)


class _ManifestModel(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True)
    id: str = pydantic.Field(pattern=_ID_PATTERN, max_length=128)
    version: str
    description: str = pydantic.Field(min_length=1, max_length=2000)
    domain: str = pydantic.Field(pattern=_NAME_PATTERN)
    backend: str = pydantic.Field(pattern=_BACKEND_PATTERN)
    lifecycle: Literal[
        "DRAFT",
        "VALIDATING",
        "EVALUATING",
        "APPROVED",
        "CANARY",
        "ACTIVE",
        "DEPRECATED",
        "DISABLED",
        "RETIRED",
    ]
    timeout_ms: int = pydantic.Field(default=2000, ge=1, le=600_000)
    risk_profile: _RiskProfileModel
    resource: _ResourceModel | None = None
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]


def default_capabilities_dir() -> Path:
    """The directory of manifests shipped with the package."""
    return Path(__file__).resolve().parent / "capabilities"


def parse_manifest(path: Path) -> CapabilityManifest:
    """Parse and validate one manifest file.

    Raises:
        ManifestError: naming the file, the field path and its line.
    """
    name = str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ManifestError(f"cannot read: {exc.strerror}", file=name) from None
    if len(raw) > _MAX_MANIFEST_BYTES:
        raise ManifestError("manifest larger than 1 MiB", file=name)
    try:
        doc = load_document(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ManifestError("not UTF-8 text", file=name) from None
    except DocumentError as exc:
        raise ManifestError(
            exc.message, file=name, line=exc.line, field=format_path(exc.path) or None
        ) from None
    if not isinstance(doc.data, dict):
        raise ManifestError("a manifest must be a mapping", file=name, line=1)
    try:
        model = _ManifestModel.model_validate(doc.data)
    except pydantic.ValidationError as exc:
        first = pydantic_violations(exc, doc)[0]
        raise ManifestError(
            first.description, file=name, field=first.field or None, line=first.line
        ) from None

    def fail(message: str, *path: str | int) -> ManifestError:
        return ManifestError(message, file=name, field=format_path(path), line=doc.line_of(path))

    try:
        version = Version.parse(model.version)
    except ValueError as exc:
        raise fail(str(exc), "version") from None
    for key in ("input_schema", "output_schema"):
        _check_json_schema(getattr(model, key), key, doc, fail)
    inp, out = model.input_schema, model.output_schema
    if inp.get("additionalProperties") is not False:
        # Unknown input fields are refused rather than ignored: a caller that
        # believes it passed a constraint must not have it silently dropped.
        raise fail("input_schema must set additionalProperties: false", "input_schema")
    if "provenance" not in out.get("properties", {}) or "provenance" not in out.get(
        "required", []
    ):
        raise fail("output_schema must require a 'provenance' property", "output_schema")
    risk = model.risk_profile
    if risk.mutates and model.resource is None:
        raise fail("a mutating capability must declare its resource", "resource")
    if model.resource is not None:
        id_field = model.resource.id_field
        if id_field not in inp.get("properties", {}) or id_field not in inp.get("required", []):
            raise fail(
                f"resource.id_field {id_field!r} must be a required input property",
                "resource",
                "id_field",
            )
    if model.backend.startswith("external:") and risk.external_write and not risk.mutates:
        raise fail("external_write implies mutates", "risk_profile", "mutates")
    if model.backend == "knowledge":
        # A knowledge store is read-only, and every read names the scope it reads:
        # that scope is the resource the grant must name and the policy decides on.
        if risk.mutates or risk.external_write:
            raise fail("a knowledge capability only reads", "risk_profile", "mutates")
        if model.resource is None or model.resource.type != "knowledge":
            raise fail("a knowledge capability declares resource {type: knowledge, id_field: <scope field>}",
                       "resource")
    return CapabilityManifest(
        id=model.id,
        version=version,
        description=model.description,
        domain=model.domain,
        backend=model.backend,
        lifecycle=LifecycleStatus(model.lifecycle),
        risk_profile=RiskProfile(
            max_risk=RiskLevel(risk.max_risk),
            mutates=risk.mutates,
            external_write=risk.external_write,
            bulk=risk.bulk,
        ),
        input_schema=inp,
        output_schema=out,
        resource_type=model.resource.type if model.resource else None,
        resource_id_field=model.resource.id_field if model.resource else None,
        timeout_ms=model.timeout_ms,
        source_file=name,
    )


@functools.lru_cache(maxsize=256)
def _schema_error(canonical: str) -> tuple[str, tuple[str | int, ...]] | None:
    # Checking a schema against the 2020-12 meta-schema is slow (~20 ms);
    # registries are built often in tests and tools, and schemas rarely change.
    try:
        Draft202012Validator.check_schema(json.loads(canonical))
    except jsonschema.SchemaError as exc:
        return exc.message, tuple(exc.absolute_path)
    return None


def _check_json_schema(
    schema: dict[str, Any],
    key: str,
    doc: LinedDocument,
    fail: Callable[..., ManifestError],
) -> None:
    error = _schema_error(json.dumps(schema, sort_keys=True))
    if error is not None:
        message, path = error
        raise fail(f"not a valid JSON Schema: {message}", key, *path)
    if schema.get("type") != "object":
        raise fail("the root schema must have type: object", key, "type")


# --- registry ---------------------------------------------------------------

_STATE_SCHEMA = """
CREATE TABLE IF NOT EXISTS capability_status (
    capability_id TEXT NOT NULL,
    version       TEXT NOT NULL,
    status        TEXT NOT NULL,
    changed_at    TEXT NOT NULL,
    changed_by    TEXT NOT NULL,
    reason        TEXT NOT NULL,
    PRIMARY KEY (capability_id, version)
);
"""


def _utc_now() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC)


class CapabilityRegistry:
    """Registered capabilities and their persisted lifecycle status.

    Thread-safe. Status is read from SQLite on every lookup, so a kill switch
    set through any handle (or another replica sharing the file) takes effect
    for the next call.
    """

    def __init__(
        self,
        manifests: list[CapabilityManifest],
        state_db: Path,
        *,
        clock: Callable[[], _dt.datetime] = _utc_now,
    ):
        """Prefer :meth:`load`; this constructor takes already-parsed manifests."""
        self._by_id: dict[str, dict[Version, CapabilityManifest]] = {}
        for manifest in manifests:
            versions = self._by_id.setdefault(manifest.id, {})
            if manifest.version in versions:
                raise ManifestError(
                    f"{manifest.key} is already declared in "
                    f"{versions[manifest.version].source_file}",
                    file=manifest.source_file,
                    field="version",
                    reason="MANIFEST_DUPLICATE",
                )
            versions[manifest.version] = manifest
        self._validators: dict[tuple[str, Version, str], SchemaCheck] = {}
        self._clock = clock
        self._lock = threading.Lock()
        state_db.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite_connection(state_db, timeout_s=5.0)
        self._db.row_factory = sqlite3.Row
        self._db.executescript(_STATE_SCHEMA)
        self._status_cache: dict[str | None, dict[tuple[str, str], sqlite3.Row]] = {}
        self._status_version: int | None = None

    @classmethod
    def load(
        cls,
        directory: Path,
        state_db: Path,
        *,
        clock: Callable[[], _dt.datetime] = _utc_now,
    ) -> CapabilityRegistry:
        """Load every ``*.yaml|*.yml|*.json`` manifest in ``directory`` (not recursive).

        Args:
            directory: Manifest directory, e.g. :func:`default_capabilities_dir`.
            state_db: SQLite file under the mesh home holding status changes.
            clock: Source of timestamps for status changes (tests pass a fixed one).

        Raises:
            ManifestError: for the first invalid file (in name order), naming
                file, field and line; nothing is registered.
        """
        if not directory.is_dir():
            raise ManifestError("capability directory not found", file=str(directory))
        files = sorted(p for p in directory.iterdir() if p.suffix in _MANIFEST_SUFFIXES)
        manifests = [parse_manifest(p) for p in files]
        return cls(manifests, state_db, clock=clock)

    def close(self) -> None:
        """Close the status database."""
        with self._lock:
            self._db.close()

    # -- lookup --

    def _status_rows(self, capability_id: str | None = None) -> dict[tuple[str, str], sqlite3.Row]:
        """The stored statuses (of one capability), read again only when the file changed.

        ``PRAGMA data_version`` moves when another connection (another process, the
        operator's CLI) commits; this connection's own changes clear the cache.
        """
        with self._lock:
            version = self._db.execute("PRAGMA data_version").fetchone()[0]
            if version != self._status_version:
                self._status_cache.clear()
                self._status_version = version
            cached = self._status_cache.get(capability_id)
            if cached is not None:
                return cached
            if capability_id is None:
                rows = self._db.execute("SELECT * FROM capability_status").fetchall()
            else:
                rows = self._db.execute(
                    "SELECT * FROM capability_status WHERE capability_id = ?", (capability_id,)
                ).fetchall()
            found = {(r["capability_id"], r["version"]): r for r in rows}
            self._status_cache[capability_id] = found
            return found

    def _entry(
        self, manifest: CapabilityManifest, rows: Mapping[tuple[str, str], sqlite3.Row]
    ) -> CapabilityEntry:
        row = rows.get((manifest.id, str(manifest.version)))
        if row is None:
            return CapabilityEntry(manifest, manifest.lifecycle, None)
        return CapabilityEntry(
            manifest,
            LifecycleStatus(row["status"]),
            _dt.datetime.fromisoformat(row["changed_at"].replace("Z", "+00:00")),
        )

    def versions(self, capability_id: str) -> list[CapabilityEntry]:
        """All registered versions of ``capability_id``, newest first.

        Raises:
            CapabilityNotFound: if the id is not registered.
        """
        versions = self._by_id.get(capability_id)
        if not versions:
            raise CapabilityNotFound(f"capability {capability_id!r} is not registered")
        rows = self._status_rows(capability_id)
        return [self._entry(versions[v], rows) for v in sorted(versions, reverse=True)]

    def get(self, capability_id: str, version: str | None = None) -> CapabilityEntry:
        """One capability version with its effective status.

        Without ``version``, the newest executable version is returned, or the
        newest one at all if none is executable (so the caller sees its status
        and fails closed on it).

        Raises:
            CapabilityNotFound: unknown id or version.
        """
        entries = self.versions(capability_id)
        if version is not None:
            try:
                wanted = Version.parse(version)
            except ValueError:
                raise CapabilityNotFound(
                    f"{version!r} is not a valid version of {capability_id!r}"
                ) from None
            for entry in entries:
                if entry.manifest.version == wanted:
                    return entry
            raise CapabilityNotFound(f"capability {capability_id}@{version} is not registered")
        for entry in entries:
            if entry.executable:
                return entry
        return entries[0]

    def list(self) -> list[CapabilityEntry]:
        """Every registered version, ordered by id then newest version first."""
        rows = self._status_rows()
        return [
            self._entry(self._by_id[cid][v], rows)
            for cid in sorted(self._by_id)
            for v in sorted(self._by_id[cid], reverse=True)
        ]

    def ensure_executable(self, capability_id: str, version: str | None = None) -> CapabilityEntry:
        """The entry if its status allows execution, otherwise raise (fail closed).

        Raises:
            CapabilityNotFound: unknown id or version.
            CapabilityNotExecutable: with reason ``CAPABILITY_DISABLED``,
                ``CAPABILITY_RETIRED`` or ``CAPABILITY_NOT_ACTIVE``.
        """
        entry = self.get(capability_id, version)
        if entry.executable:
            return entry
        reason = {
            LifecycleStatus.DISABLED: "CAPABILITY_DISABLED",
            LifecycleStatus.RETIRED: "CAPABILITY_RETIRED",
        }.get(entry.status, "CAPABILITY_NOT_ACTIVE")
        raise CapabilityNotExecutable(
            f"capability {entry.manifest.key} is {entry.status.value} and cannot execute",
            reason=reason,
            status=entry.status.value,
        )

    # -- status --

    def set_status(
        self,
        capability_id: str,
        status: LifecycleStatus | str,
        *,
        version: str | None = None,
        changed_by: str = "",
        reason: str = "",
    ) -> builtins.list[StatusChange]:
        """Change the lifecycle status and persist it.

        Without ``version`` every version of the id changes: a kill switch must
        not leave an older version running.

        Args:
            capability_id: The capability to change.
            status: New status (``DISABLED`` or ``LIFECYCLE_STATUS_DISABLED``).
            version: One exact version, or ``None`` for all versions.
            changed_by: Who asked (operator SPIFFE id / user), kept with the row.
            reason: Free text kept with the row.

        Returns:
            One :class:`StatusChange` per version, for the audit record.

        Raises:
            CapabilityNotFound: unknown id or version.
            StatusChangeRefused: invalid status, or a RETIRED version (terminal).
        """
        try:
            new = LifecycleStatus.parse(status)
        except ValueError as exc:
            raise StatusChangeRefused(str(exc), reason="STATUS_INVALID", field="status") from None
        targets = (
            [self.get(capability_id, version)]
            if version is not None
            else self.versions(capability_id)
        )
        for entry in targets:
            if entry.status is LifecycleStatus.RETIRED and new is not LifecycleStatus.RETIRED:
                # Retired means callers were told it is gone; reviving it would
                # re-open a path that dependants no longer expect.
                raise StatusChangeRefused(
                    f"{entry.manifest.key} is RETIRED; a retired capability cannot be revived",
                    reason="STATUS_TRANSITION_INVALID",
                    field="status",
                )
        now = self._clock()
        changes: builtins.list[StatusChange] = []
        with self._lock, self._transaction():
            for entry in targets:
                self._db.execute(
                    "INSERT INTO capability_status"
                    " (capability_id, version, status, changed_at, changed_by, reason)"
                    " VALUES (?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT (capability_id, version) DO UPDATE SET"
                    " status = excluded.status, changed_at = excluded.changed_at,"
                    " changed_by = excluded.changed_by, reason = excluded.reason",
                    (
                        entry.manifest.id,
                        str(entry.manifest.version),
                        new.value,
                        format_timestamp(now),
                        changed_by,
                        reason,
                    ),
                )
                changes.append(
                    StatusChange(
                        entry.manifest.id,
                        str(entry.manifest.version),
                        entry.status,
                        new,
                        now,
                        changed_by,
                        reason,
                    )
                )
        return changes

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            self._status_cache.clear()
            raise
        self._db.execute("COMMIT")
        self._status_cache.clear()  # this connection's own commits do not move data_version

    # -- validation --

    def _validator(self, manifest: CapabilityManifest, which: str) -> SchemaCheck:
        key = (manifest.id, manifest.version, which)
        validator = self._validators.get(key)
        if validator is None:
            schema = manifest.input_schema if which == "input" else manifest.output_schema
            validator = SchemaCheck(dict(schema))
            self._validators[key] = validator
        return validator

    def validate_input(self, manifest: CapabilityManifest, arguments: Any) -> None:
        """Check ``arguments`` against the input schema of ``manifest``.

        Raises:
            InputInvalid: naming the field path of the first violation.
        """
        violations = self._validator(manifest, "input").violations(arguments)
        if violations:
            first = violations[0]
            raise InputInvalid(
                f"input for {manifest.key} is invalid at {first.field or '<root>'!r}: "
                f"{first.description}",
                violations=violations,
                capability=manifest.key,
            )

    def validate_output(self, manifest: CapabilityManifest, output: Any) -> None:
        """Check a backend's output against the output schema of ``manifest``.

        Raises:
            OutputInvalid: the backend broke its contract; the output must be withheld.
        """
        violations = self._validator(manifest, "output").violations(output)
        if violations:
            first = violations[0]
            raise OutputInvalid(
                f"output of {manifest.key} is invalid at {first.field or '<root>'!r}: "
                f"{first.description}",
                violations=violations,
                capability=manifest.key,
            )


def check_dependency(
    spec: str, registry: CapabilityRegistry, *, require_executable: bool = False
) -> CapabilityManifest:
    """Resolve a declared dependency such as ``"training.getStatus@^2.0"`` (PRD §59).

    RETIRED versions never satisfy a dependency. With ``require_executable``
    only ACTIVE / DEPRECATED versions do.

    Returns:
        The newest registered manifest that satisfies the range.

    Raises:
        DependencyError: ``DEPENDENCY_SYNTAX_INVALID``, ``DEPENDENCY_UNKNOWN``,
            ``DEPENDENCY_VERSION_INCOMPATIBLE`` (lists the available versions) or
            ``DEPENDENCY_NOT_EXECUTABLE``.
    """
    try:
        capability_id, wanted = parse_dependency(spec)
    except ValueError as exc:
        raise DependencyError(
            str(exc), reason="DEPENDENCY_SYNTAX_INVALID", dependency=spec
        ) from None
    if not re.match(_ID_PATTERN, capability_id):
        raise DependencyError(
            f"{capability_id!r} is not a capability id",
            reason="DEPENDENCY_SYNTAX_INVALID",
            dependency=spec,
        )
    try:
        entries = registry.versions(capability_id)
    except CapabilityNotFound:
        raise DependencyError(
            f"dependency {spec!r}: capability {capability_id!r} is not registered",
            reason="DEPENDENCY_UNKNOWN",
            dependency=spec,
        ) from None
    live = [e for e in entries if e.status is not LifecycleStatus.RETIRED]
    matching = [e for e in live if wanted.contains(e.manifest.version)]
    if not matching:
        available = ", ".join(str(e.manifest.version) for e in live) or "none"
        raise DependencyError(
            f"dependency {spec!r} is incompatible: no registered version of "
            f"{capability_id!r} satisfies {wanted} (available: {available})",
            reason="DEPENDENCY_VERSION_INCOMPATIBLE",
            dependency=spec,
        )
    if require_executable:
        runnable = [e for e in matching if e.executable]
        if not runnable:
            statuses = ", ".join(f"{e.manifest.version}={e.status.value}" for e in matching)
            raise DependencyError(
                f"dependency {spec!r}: matching versions are not executable ({statuses})",
                reason="DEPENDENCY_NOT_EXECUTABLE",
                dependency=spec,
            )
        return runnable[0].manifest
    return matching[0].manifest
