"""The agent manifest: what an agent declares of itself, as a file or as data (PRD §7, §8, §59, §65).

Each agent is declared by one YAML (or JSON) manifest named after it (the agents the mesh
ships: ``supervisor_svc/agents/<agent_id>.yaml``; a registered version's is sent as data)::

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

The supervisor's registry reads the shipped manifests and onboarding a registered version's;
an agent's own process reads its manifest to check its tasks' input and its results. Every
reader names the error a bad manifest raises (``error``, as :mod:`agentmesh.data_file`'s
readers do); the message names the file, the field and the line.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import jsonschema
import pydantic
from google.protobuf import struct_pb2

from agentmesh import spiffe
from agentmesh.data_file import DataFileError, Document, FileErrorFactory, format_path, load_document, validation_error
from agentmesh.v1 import common_pb2
from agentmesh.vocabulary import LifecycleStatus, RiskLevel

__all__ = [
    "AGENT_ID_PATTERN",
    "AgentManifest",
    "Dependencies",
    "ManifestError",
    "RiskProfile",
    "definition",
    "load_manifests",
    "manifest_from_data",
    "manifest_from_document",
    "parse_manifest",
]

AGENT_ID_PATTERN = r"^[a-z][a-z0-9-]{0,62}$"
_CAPABILITY_PATTERN = r"^[a-z][A-Za-z0-9]*(\.[a-z][A-Za-z0-9]*)+$"
_SEMVER_PATTERN = r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$"
_DEPENDENCY_RE = re.compile(r"^([A-Za-z][A-Za-z0-9_.\-]*)@(\S+)$")
_SUFFIXES = (".yaml", ".yml", ".json")


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


class ManifestError(DataFileError):
    """An agent manifest is invalid (syntax, a field, a duplicate id, a reference); names file, field and line."""

    default_reason = "AGENT_MANIFEST_INVALID"


def definition(manifest: AgentManifest, status: LifecycleStatus) -> common_pb2.AgentDefinition:
    """The ``AgentDefinition`` message of ``manifest`` with ``status``."""
    m = manifest
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
        status=status.to_proto(),
        risk_profile=m.risk_profile.to_proto(),
        dependencies=common_pb2.AgentDependencies(
            capabilities=m.dependencies.capabilities,
            knowledge=m.dependencies.knowledge,
            policies=m.dependencies.policies,
        ),
        spiffe_id=m.spiffe_id,
        cost=m.cost,
    )


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


def _unique(values: list[str], doc: Document, file: str, field: str, error: FileErrorFactory) -> None:
    seen: set[str] = set()
    for i, value in enumerate(values):
        if value in seen:
            raise error(
                f"{value!r} is listed twice", file=file, field=f"{field}[{i}]", line=doc.line_of((field, i))
            )
        seen.add(value)


def parse_manifest(path: Path, *, error: FileErrorFactory = ManifestError) -> AgentManifest:
    """Read and validate one manifest file (everything that needs no other file).

    Raises:
        ManifestError (or ``error``): naming the file, the field and the line.
    """
    file = str(path)
    doc = load_document(path, error=error)
    return manifest_from_document(doc, file, file_stem=path.stem, file_name=path.name, error=error)


def manifest_from_data(data: Any, source: str, *, error: FileErrorFactory = ManifestError) -> AgentManifest:
    """Validate a manifest given as plain data (e.g. from ``RegisterAgentVersion``); ``source`` names it.

    Raises:
        ManifestError (or ``error``): naming the field (``line`` is None).
    """
    return manifest_from_document(Document(data), source, error=error)


def manifest_from_document(
    doc: Document, file: str, *, file_stem: str | None = None, file_name: str = "",
    error: FileErrorFactory = ManifestError,
) -> AgentManifest:
    """Validate a loaded manifest document; a file's name must be its agent id.

    Raises:
        ManifestError (or ``error``): naming the file, the field and the line.
    """
    if not isinstance(doc.data, dict):
        raise error("a manifest must be a mapping", file=file, line=doc.line_of(()))
    try:
        model = _ManifestModel.model_validate(doc.data)
    except pydantic.ValidationError as exc:
        raise validation_error(exc, doc, file, error=error) from None

    def fail(message: str, *loc: str | int) -> Exception:
        return error(message, file=file, field=format_path(loc), line=doc.line_of(loc))

    if file_stem is not None and file_stem != model.agent_id:
        raise fail(f"agent_id {model.agent_id!r} does not match the file name {file_name!r}", "agent_id")
    for name in ("domains", "capabilities", "knowledge_scopes", "allowed_delegations"):
        _unique(list(getattr(model, name)), doc, file, name, error)
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


def load_manifests(agents_dir: Path, *, error: FileErrorFactory = ManifestError) -> list[AgentManifest]:
    """Read every manifest of a directory and check references between them.

    Raises:
        ManifestError (or ``error``): a bad file, a duplicate agent id, an unknown delegation target,
            or a directory without manifests.
    """
    if not agents_dir.is_dir():
        raise error("agent manifest directory does not exist", file=str(agents_dir))
    paths = sorted(p for p in agents_dir.iterdir() if p.suffix in _SUFFIXES and p.is_file())
    if not paths:
        raise error("no agent manifests (*.yaml, *.yml, *.json) found", file=str(agents_dir))
    manifests: dict[str, AgentManifest] = {}
    for path in paths:
        manifest = parse_manifest(path, error=error)
        if manifest.agent_id in manifests:
            raise error(
                f"agent {manifest.agent_id!r} is already defined in {manifests[manifest.agent_id].source}",
                file=str(path), field="agent_id", reason="AGENT_DUPLICATE",
            )
        manifests[manifest.agent_id] = manifest
    for manifest in manifests.values():
        for i, target in enumerate(manifest.allowed_delegations):
            if target not in manifests:
                raise error(
                    f"delegation target {target!r} is not a registered agent",
                    file=manifest.source, field=f"allowed_delegations[{i}]", reason="AGENT_REFERENCE_INVALID",
                )
        if manifest.fallback and manifest.fallback not in manifests:
            raise error(
                f"fallback {manifest.fallback!r} is not a registered agent",
                file=manifest.source, field="fallback", reason="AGENT_REFERENCE_INVALID",
            )
    return [manifests[k] for k in sorted(manifests)]
