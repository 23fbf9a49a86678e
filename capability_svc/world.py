"""World data files: tenants, workers, permits, risks, checklists and LMS records.

A *world* is everything the demo systems of record hold, in one plain YAML or
JSON file so anyone can write their own scenarios. :func:`parse_world`
validates a whole file — syntax, every field, unique ids, references — before
:func:`load_world` writes anything, and the write is one transaction, so a bad
file never leaves half a world behind. Errors name the file, the line and the
field (``tenants[0].permits[1].valid_until``).

Format (full reference with every field: ``capability_svc/WORLD_FORMAT.md``)::

    format: agentmesh-world/v1
    description: optional free text
    tenants:
      - id: acme                       # lowercase, [a-z][a-z0-9-]*
        name: ACME Industrial
        definition:                    # optional: the tenant's configuration (agentmesh.tenant_file),
          roles: {analyst: {capabilities: [workPermit.get]}}   # applied by `agentmesh data load`
          agents: [work-permit-agent]
        workers:
          - id: W-1001
            name: Ana Souza
            job_title: Electrician
            company: ACME
            employment_status: ACTIVE  # ACTIVE|INACTIVE|ON_LEAVE|TERMINATED (default ACTIVE)
            medical_notes: null        # sensitive; optional
            medical:                   # the occupational exam; sensitive, optional
              exam_date: 2026-03-10
              valid_until: 2027-03-10
              fit_for: [ELECTRICAL]    # work types
              unfit_for: []
              diagnosis: null          # never served by any capability
              clinical_notes: null     # never served by any capability
        permits:
          - id: WP-10231
            title: Substation maintenance
            description: optional
            site: Plant 3
            work_type: ELECTRICAL
            status: PENDING_RELEASE    # DRAFT|PENDING_RELEASE|RELEASED|SUSPENDED|CLOSED|CANCELLED
            valid_from: 2026-11-25
            valid_until: 2026-12-20
            requested_by: alice
            required_trainings: [NR-10, NR-35]
            workers: [{id: W-1001, role: EXECUTOR}]
            added_workers: [{id: W-1009, role: EXECUTOR, added_on: 2026-11-29}]   # after planning
            risks:
              - {id: R-1, hazard: Arc flash, severity: 4, likelihood: 2,
                 controls: [{control: LOTO applied, in_place: true}]}
            checklists:
              - id: CL-1
                title: NR-10 pre-work checklist
                items:
                  - {id: I-1, requirement: ..., regulation: NR-10 10.5.1, status: PASS,
                     subject: null, note: null}
            simulate: {verification_failure: false}   # test hook: false|true|lost_write|partial_write
        lms:                           # what the sandbox LMS serves for this tenant
          workers:
            - worker_id: W-1001
              trainings:
                - {record_id: TR-1, course_code: NR-10, course_title: ..., status: COMPLETED,
                   completed_on: 2025-09-01, valid_until: 2027-09-01,
                   certificate_id: C-1, issuer: ..., issuer_id: senai}
          faults:                      # per worker: a mode name or a mapping
            W-1006: timeout
            W-1007: {mode: latency, latency_ms: 800}

Loading replaces, per tenant named in the file, all of that tenant's rows;
tenants not in the file are left alone. ``simulate.verification_failure``
makes mutations of that permit acknowledge without taking effect (``true`` or
``lost_write``) or take effect only in part (``partial_write``), so the
read-back verification genuinely fails and the compensation has something to
undo — for tests and demos.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol

import pydantic

from agentmesh.tenant_file import TenantFile, TenantFileError, parse_tenants
from capability_svc._validation import pydantic_violations
from capability_svc._yaml_lines import (
    DocumentError,
    LinedDocument,
    PathKey,
    format_path,
    load_document,
)
from capability_svc.errors import FieldViolation, WorldFormatError

__all__ = [
    "EMPLOYMENT_STATUSES",
    "FAULT_MODES",
    "PERMIT_STATUSES",
    "SIMULATED_FAILURES",
    "WORLD_FORMAT",
    "LoadSummary",
    "SimulatedFailure",
    "World",
    "load_world",
    "parse_world",
    "parse_world_text",
    "world_tenant_file",
]

WORLD_FORMAT = "agentmesh-world/v1"
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
TENANT_PATTERN = r"^[a-z][a-z0-9-]{0,62}$"
PERMIT_STATUSES = ("DRAFT", "PENDING_RELEASE", "RELEASED", "SUSPENDED", "CLOSED", "CANCELLED")
CHECK_STATUSES = ("PASS", "FAIL", "PENDING", "NOT_APPLICABLE")
FAULT_MODES = ("none", "latency", "timeout", "5xx", "malformed", "oversized", "hostile")
_MAX_WORLD_BYTES = 16 * 1024 * 1024
_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def _iso_date(value: Any) -> Any:
    # Only YYYY-MM-DD text is a date here; pydantic's lax mode would also take
    # an integer as a Unix timestamp, silently turning a typo into a date.
    if isinstance(value, str) and _DATE_RE.match(value):
        try:
            return _dt.date.fromisoformat(value)
        except ValueError:
            raise ValueError(f"{value!r} is not a real calendar date") from None
    raise ValueError("expected a date as YYYY-MM-DD")


def _fault_shorthand(value: Any) -> Any:
    return {"mode": value} if isinstance(value, str) else value


Id = Annotated[str, pydantic.Field(pattern=ID_PATTERN)]
TenantId = Annotated[str, pydantic.Field(pattern=TENANT_PATTERN)]
IsoDate = Annotated[_dt.date, pydantic.BeforeValidator(_iso_date)]
Text = Annotated[str, pydantic.Field(min_length=1, max_length=500)]
LongText = Annotated[str, pydantic.Field(max_length=4000)]


class _Model(pydantic.BaseModel):
    # Strict: "3" is not 3 and "yes" is not true; a data file that needs
    # coercion is a data file with a mistake in it.
    model_config = pydantic.ConfigDict(extra="forbid", strict=True, frozen=True)


WorkType = Annotated[str, pydantic.Field(pattern=r"^[A-Z][A-Z0-9_]{0,39}$")]
EMPLOYMENT_STATUSES = ("ACTIVE", "INACTIVE", "ON_LEAVE", "TERMINATED")


class MedicalSpec(_Model):
    """A worker's occupational-health record (the fitness exam). Sensitive: only the eligibility derived from
    it is ever served (``medical.getEligibility``); ``diagnosis`` and ``clinical_notes`` never leave the store."""

    exam_date: IsoDate
    valid_until: IsoDate
    fit_for: list[WorkType] = []
    unfit_for: list[WorkType] = []
    diagnosis: LongText | None = None
    clinical_notes: LongText | None = None


class WorkerSpec(_Model):
    """A worker of a tenant. ``medical_notes`` and ``medical`` are sensitive health data."""

    id: Id
    name: Text
    job_title: Text
    company: Text
    employment_status: Literal["ACTIVE", "INACTIVE", "ON_LEAVE", "TERMINATED"] = "ACTIVE"
    medical_notes: LongText | None = None
    medical: MedicalSpec | None = None


class PermitWorkerSpec(_Model):
    """A worker assigned to a permit, by id, with their role on it."""

    id: Id
    role: Text


class AddedWorkerSpec(_Model):
    """A worker added to a permit after its crew was planned (``workers``), by id, with role and date."""

    id: Id
    role: Text
    added_on: IsoDate


class ControlSpec(_Model):
    """A risk control and whether it is in place."""

    control: Text
    in_place: bool


class RiskSpec(_Model):
    """A hazard of a permit in the risk register (severity, likelihood 1-5)."""

    id: Id
    hazard: Text
    severity: int = pydantic.Field(ge=1, le=5)
    likelihood: int = pydantic.Field(ge=1, le=5)
    controls: list[ControlSpec] = []


class ChecklistItemSpec(_Model):
    """One requirement of a compliance checklist."""

    id: Id
    requirement: Text
    regulation: Text | None = None
    status: Literal["PASS", "FAIL", "PENDING", "NOT_APPLICABLE"]
    subject: Text | None = None
    note: LongText | None = None


class ChecklistSpec(_Model):
    """A compliance checklist of a permit."""

    id: Id
    title: Text
    items: list[ChecklistItemSpec] = pydantic.Field(min_length=1)


SimulatedFailure = Literal["lost_write", "partial_write"]
"""How a permit's mutations fail verification (``simulate.verification_failure``)."""
SIMULATED_FAILURES: tuple[SimulatedFailure, ...] = ("lost_write", "partial_write")


def _simulated_failure(value: Any) -> Any:
    # `true` is the original lost-write switch and stays valid; `false` is none.
    if value is True:
        return "lost_write"
    if value is False or value is None:
        return None
    if value in SIMULATED_FAILURES:
        return value
    raise ValueError(f"expected one of false, true, {', '.join(SIMULATED_FAILURES)}")


class SimulateSpec(_Model):
    """Test hooks of a permit."""

    verification_failure: Annotated[SimulatedFailure | None, pydantic.BeforeValidator(_simulated_failure)] = None
    """Written ``false`` (``None``), ``true`` or ``lost_write`` (a write is
    acknowledged but not applied), ``partial_write`` (only part of it is applied)."""


class PermitSpec(_Model):
    """A work permit with its workers, requirements, risks and checklists."""

    id: Id
    title: Text
    description: LongText = ""
    site: Text
    work_type: WorkType
    status: Literal["DRAFT", "PENDING_RELEASE", "RELEASED", "SUSPENDED", "CLOSED", "CANCELLED"]
    valid_from: IsoDate
    valid_until: IsoDate
    requested_by: Text
    released_by: Text | None = None
    required_trainings: list[Id] = []
    workers: list[PermitWorkerSpec] = []
    added_workers: list[AddedWorkerSpec] = []
    """Workers added after the crew was planned: the work-permit agent hands them to the training agent."""
    risks: list[RiskSpec] = []
    checklists: list[ChecklistSpec] = []
    simulate: SimulateSpec = SimulateSpec()


class LmsTrainingSpec(_Model):
    """A training record as the LMS holds it. Text is served verbatim."""

    record_id: Id
    course_code: Id
    course_title: LongText
    status: Annotated[str, pydantic.Field(pattern=r"^[A-Z][A-Z_]{0,39}$")]
    completed_on: IsoDate | None = None
    valid_until: IsoDate | None = None
    certificate_id: Annotated[str, pydantic.Field(max_length=200)] | None = None
    issuer: Annotated[str, pydantic.Field(max_length=500)] | None = None
    issuer_id: Id | None = None
    """Who issued the record, as an id (the ``issuer`` text is free text and decides nothing): a data
    conflict between records of one certificate is resolved by the issuers' configured authority."""


class LmsWorkerSpec(_Model):
    """The LMS's records of one worker (an empty list: known, but no trainings)."""

    worker_id: Id
    trainings: list[LmsTrainingSpec] = []


class LmsFaultSpec(_Model):
    """A fault the sandbox LMS injects for one worker's lookups."""

    mode: Literal["none", "latency", "timeout", "5xx", "malformed", "oversized", "hostile"]
    latency_ms: int | None = pydantic.Field(default=None, ge=0, le=600_000)
    hang_ms: int | None = pydantic.Field(default=None, ge=0, le=600_000)
    status: int | None = pydantic.Field(default=None, ge=500, le=599)
    kind: Literal["json", "schema"] | None = None
    bytes: int | None = pydantic.Field(default=None, ge=1, le=256 * 1024 * 1024)


class LmsSpec(_Model):
    """What the sandbox LMS serves for a tenant, and its configured faults."""

    workers: list[LmsWorkerSpec] = []
    faults: dict[Id, Annotated[LmsFaultSpec, pydantic.BeforeValidator(_fault_shorthand)]] = {}


class TenantSpec(_Model):
    """One tenant and all its records."""

    id: TenantId
    name: Text
    definition: dict[str, Any] | None = None
    """The tenant's configuration (roles, agents, limits, on_exceeded) as in a tenant file
    (agentmesh.tenant_file): ``agentmesh data load`` applies it before it loads the records."""
    workers: list[WorkerSpec] = []
    permits: list[PermitSpec] = []
    lms: LmsSpec = LmsSpec()


class World(_Model):
    """A validated world file."""

    format: Literal["agentmesh-world/v1"]
    description: LongText = ""
    tenants: list[TenantSpec] = pydantic.Field(min_length=1)


@dataclass(frozen=True)
class LoadSummary:
    """What :func:`load_world` wrote."""

    source: str
    tenants: tuple[str, ...]
    workers: int
    permits: int
    risks: int
    checklists: int
    lms_workers: int


def parse_world(path: Path) -> World:
    """Read and fully validate a world file (YAML, or JSON by ``.json`` suffix).

    Raises:
        WorldFormatError: naming file, line and field; ``violations`` lists
            every problem found in the same pass.
    """
    name = str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise WorldFormatError(
            f"cannot read: {exc.strerror}", file=name, reason="WORLD_SYNTAX_INVALID"
        ) from None
    if len(raw) > _MAX_WORLD_BYTES:
        raise WorldFormatError(
            "file larger than 16 MiB", file=name, reason="WORLD_SYNTAX_INVALID"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise WorldFormatError("not UTF-8 text", file=name, reason="WORLD_SYNTAX_INVALID") from None
    return parse_world_text(text, name, json_input=path.suffix.lower() == ".json")


def parse_world_text(text: str, name: str = "<world>", *, json_input: bool = False) -> World:
    """Validate world text; ``name`` is used in error messages.

    Raises:
        WorldFormatError: as :func:`parse_world`.
    """
    doc = _parse_document(text, name, json_input)
    try:
        world = World.model_validate(doc.data)
    except pydantic.ValidationError as exc:
        violations = pydantic_violations(exc, doc)
        first = violations[0]
        raise WorldFormatError(
            first.description,
            file=name,
            field=first.field or None,
            line=first.line,
            violations=violations,
        ) from None
    _check_semantics(world, doc, name)
    _definitions(world, doc, name)
    return world


def _definitions(world: World, doc: LinedDocument, name: str) -> TenantFile:
    """The tenants' definitions (``tenants[i].definition``), checked; WorldFormatError names line and field."""
    entries = [(("tenants", i, "definition"), t.id, t.name, t.definition)
               for i, t in enumerate(world.tenants) if t.definition is not None]
    try:
        definitions = parse_tenants(entries, doc.lines, name)
    except TenantFileError as err:
        raise WorldFormatError(err.message, file=name, field=err.field or None, line=err.line) from None
    return TenantFile(name, definitions, dict(doc.lines), ("tenants",), [e[0] for e in entries])


def world_tenant_file(path: Path) -> TenantFile:
    """The tenant definitions of a world file, with the line of each field (none: an empty list), for
    ``agentmesh data load`` to apply them.

    Raises:
        WorldFormatError: as :func:`parse_world`.
    """
    world = parse_world(path)
    doc = _parse_document(path.read_text(encoding="utf-8"), str(path), path.suffix.lower() == ".json")
    return _definitions(world, doc, str(path))


def _parse_document(text: str, name: str, json_input: bool) -> LinedDocument:
    if json_input:
        # JSON is checked by the JSON parser first so JSON-only rules (no
        # comments, no duplicate keys) hold; YAML then supplies line numbers.
        try:
            data = json.loads(text, object_pairs_hook=_no_duplicates)
        except json.JSONDecodeError as exc:
            raise WorldFormatError(
                exc.msg, file=name, line=exc.lineno, reason="WORLD_SYNTAX_INVALID"
            ) from None
        except _DuplicateKey as exc:
            raise WorldFormatError(
                f"duplicate key {exc.key!r}", file=name, reason="WORLD_SYNTAX_INVALID"
            ) from None
        try:
            doc = load_document(text)
            doc.data = data
            return doc
        except DocumentError:
            return LinedDocument(data=data)
    try:
        return load_document(text)
    except DocumentError as exc:
        raise WorldFormatError(
            exc.message,
            file=name,
            line=exc.line,
            field=format_path(exc.path) or None,
            reason="WORLD_SYNTAX_INVALID",
        ) from None


class _DuplicateKey(Exception):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


def _check_semantics(world: World, doc: LinedDocument, name: str) -> None:
    problems: list[tuple[str, FieldViolation]] = []

    def add(reason: str, message: str, *path: str | int) -> None:
        key: PathKey = tuple(path)
        problems.append((reason, FieldViolation(format_path(key), message, doc.line_of(key))))

    def duplicates(ids: list[str], what: str, *base: str | int, attr: str = "id") -> None:
        seen = Counter(ids)
        for i, value in enumerate(ids):
            if seen[value] > 1 and ids.index(value) != i:
                add("WORLD_DUPLICATE_ID", f"duplicate {what} id {value!r}", *base, i, attr)

    duplicates([t.id for t in world.tenants], "tenant", "tenants")
    for ti, tenant in enumerate(world.tenants):
        t = ("tenants", ti)
        duplicates([w.id for w in tenant.workers], "worker", *t, "workers")
        for wi, worker in enumerate(tenant.workers):
            medical = worker.medical
            if medical is None:
                continue
            m = (*t, "workers", wi, "medical")
            if medical.valid_until < medical.exam_date:
                add("WORLD_FIELD_INVALID", "valid_until is before exam_date", *m, "valid_until")
            for ui, work_type in enumerate(medical.unfit_for):
                if work_type in medical.fit_for:
                    add("WORLD_FIELD_INVALID", f"{work_type} is both in fit_for and unfit_for", *m, "unfit_for", ui)
        duplicates([p.id for p in tenant.permits], "permit", *t, "permits")
        worker_ids = {w.id for w in tenant.workers}
        # Risk and checklist ids are keys of tenant-wide tables, so they must be
        # unique across all permits of the tenant, not just within one.
        risk_seen: set[str] = set()
        checklist_seen: set[str] = set()
        for pi, permit in enumerate(tenant.permits):
            p = (*t, "permits", pi)
            if permit.valid_until < permit.valid_from:
                add("WORLD_FIELD_INVALID", "valid_until is before valid_from", *p, "valid_until")
            for wi, assigned in enumerate(permit.workers):
                if assigned.id not in worker_ids:
                    add(
                        "WORLD_REFERENCE_INVALID",
                        f"worker {assigned.id!r} is not a worker of tenant {tenant.id!r}",
                        *p,
                        "workers",
                        wi,
                        "id",
                    )
            duplicates([w.id for w in permit.workers], "permit worker", *p, "workers")
            crew = {w.id for w in permit.workers}
            for wi, added in enumerate(permit.added_workers):
                if added.id not in worker_ids:
                    add("WORLD_REFERENCE_INVALID", f"worker {added.id!r} is not a worker of tenant {tenant.id!r}",
                        *p, "added_workers", wi, "id")
                elif added.id in crew:
                    add("WORLD_FIELD_INVALID", f"worker {added.id!r} is already in the permit's workers",
                        *p, "added_workers", wi, "id")
            duplicates([w.id for w in permit.added_workers], "added worker", *p, "added_workers")
            codes = permit.required_trainings
            for ci, code in enumerate(codes):
                if codes.index(code) != ci:
                    add(
                        "WORLD_DUPLICATE_ID",
                        f"duplicate training {code!r}",
                        *p,
                        "required_trainings",
                        ci,
                    )
            for ri, risk in enumerate(permit.risks):
                if risk.id in risk_seen:
                    add("WORLD_DUPLICATE_ID", f"duplicate risk id {risk.id!r}", *p, "risks", ri, "id")
                risk_seen.add(risk.id)
            for ci, checklist in enumerate(permit.checklists):
                c = (*p, "checklists", ci)
                if checklist.id in checklist_seen:
                    add("WORLD_DUPLICATE_ID", f"duplicate checklist id {checklist.id!r}", *c, "id")
                checklist_seen.add(checklist.id)
                duplicates([i.id for i in checklist.items], "checklist item", *c, "items")
        lms = (*t, "lms")
        duplicates(
            [w.worker_id for w in tenant.lms.workers],
            "LMS worker",
            *lms,
            "workers",
            attr="worker_id",
        )
    if problems:
        problems.sort(key=lambda p: (p[1].line or 0, p[1].field))
        reason, first = problems[0]
        raise WorldFormatError(
            first.description,
            file=name,
            field=first.field,
            line=first.line,
            reason=reason,
            violations=tuple(v for _, v in problems),
        )


class WorldStore(Protocol):
    """Where a world is loaded (the internal runtime's store, ``capability_svc.internal_runtime.InternalStore``)."""

    def replace_world(self, world: World, *, source: str) -> LoadSummary:
        """Replaces the data of the world's tenants with it, in one transaction."""
        ...


def load_world(path: Path, store: WorldStore) -> LoadSummary:
    """Validate ``path`` completely, then load it into ``store`` in one transaction.

    For every tenant in the file, that tenant's existing rows are replaced;
    other tenants are untouched. If validation fails nothing is written.

    Raises:
        WorldFormatError: the file is invalid (names line and field).
    """
    world = parse_world(path)
    return store.replace_world(world, source=str(path))
