"""Tenant files (``agentmesh-tenants/v1``): tenants as data, applied with ``agentmesh tenants apply FILE``.

A tenant file lists tenants; each is what ``TenantService.ApplyTenants`` takes (a
``TenantDefinition``)::

    format: agentmesh-tenants/v1
    tenants:
      - id: initech                     # lowercase, [a-z][a-z0-9-]{0,62}
        name: Initech
        roles:                          # role -> what it holds (capabilities of the catalogue,
          viewer:                       #   roles of the same tenant it includes, privileges)
            capabilities: [workPermit.get, workPermit.search, training.getStatus]
          analyst:
            includes: [viewer]
            capabilities: [risk.evaluate, compliance.getChecklist]
          reviewer:
            includes: [analyst]
            privileges: [decision.review, execution.read]
        agents: [work-permit-agent, training-agent, risk-agent, compliance-agent]
        limits: {max_tasks: 20, max_cost: 50}          # each optional; the platform default otherwise
        on_exceeded: {default: STOP, MAX_COST_EXCEEDED: HUMAN_REVIEW}

The same entries may sit under ``tenants[].definition`` of a world file (``agentmesh
data load`` applies them too). This module checks the *form* — every field, strict
types, unknown fields and duplicate keys refused, errors naming ``file:line`` and the
field — and builds the messages. What the names mean (a capability in the catalogue,
an agent that is registered, a role that exists, no cycle of includes) is the policy
engine's to check when the tenants are applied; its refusal names the same field
(``tenants[0].roles.analyst.capabilities[1]``), which :func:`line_of` maps back to the file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import grpc
import pydantic

from agentmesh import errors
from agentmesh.data_file import DataFileError, Document, PathKey, load_document, validation_error
from agentmesh.v1 import tenant_service_pb2 as tenant_pb2
from agentmesh.v1 import tenant_service_pb2_grpc as tenant_grpc

__all__ = [
    "LIMIT_FIELDS",
    "LIMIT_REASONS",
    "TENANTS_FORMAT",
    "TenantFile",
    "TenantFileError",
    "definition_from_mapping",
    "definition_to_mapping",
    "load_tenant_file",
    "parse_tenants",
]

TENANTS_FORMAT = "agentmesh-tenants/v1"
TENANT_ID_PATTERN = r"^[a-z][a-z0-9-]{0,62}$"
_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"

LIMIT_FIELDS = ("max_depth", "max_tasks", "max_handoffs", "max_execution_time_ms", "max_cost", "max_tokens",
                "max_model_calls", "max_model_cost")
"""The fields of ``limits`` (``TenantLimits``)."""
LIMIT_REASONS = ("MAX_DEPTH_EXCEEDED", "MAX_TASKS_EXCEEDED", "MAX_HANDOFFS_EXCEEDED", "MAX_EXECUTION_TIME_EXCEEDED",
                 "MAX_COST_EXCEEDED", "MAX_TOKENS_EXCEEDED", "MAX_MODEL_CALLS_EXCEEDED", "MAX_MODEL_COST_EXCEEDED")
"""The keys of ``on_exceeded`` besides ``default``."""

class TenantFileError(DataFileError):
    """A tenant file (or a world's tenant definitions) is not valid; names the file, line and field.

    ``reason`` says what kind of problem it is when the reader knows (``CONFIG_UNREADABLE``,
    ``CONFIG_TOO_LARGE``, ``CONFIG_SYNTAX_INVALID``, see :mod:`agentmesh.data_file`), else
    ``TENANT_FILE_INVALID``.
    """

    default_reason = "TENANT_FILE_INVALID"


@dataclass
class TenantFile:
    """The definitions of a tenant file, in file order, and the line of every path."""

    path: str
    definitions: list[tenant_pb2.TenantDefinition]
    lines: dict[PathKey, int] = field(default_factory=dict)
    prefix: PathKey = ()
    """Where the tenants list sits in the document (``("tenants",)``; a world's definitions elsewhere)."""
    positions: list[PathKey] = field(default_factory=list)
    """The path of each definition in the document, e.g. ``("tenants", 2, "definition")``."""

    def line_of(self, request_field: str) -> int | None:
        """The line of a field of the ApplyTenants request (``tenants[0].roles.viewer.capabilities[1]``),
        or of its nearest ancestor in the file."""
        parts: list[str | int] = []
        for token in request_field.replace("]", "").replace("[", ".").split("."):
            if token:
                parts.append(int(token) if token.isdigit() else token)
        if len(parts) < 2 or parts[0] != "tenants" or not isinstance(parts[1], int) \
                or not 0 <= parts[1] < len(self.positions):
            return None
        rest = ["id" if p == "tenant_id" else "name" if p == "display_name" else "agents" if p == "allowed_agents"
                else p for p in parts[2:]]
        key: PathKey = (*self.positions[parts[1]], *rest)
        while key:
            if key in self.lines:
                return self.lines[key]
            key = key[:-1]
        return None


# --- the form ------------------------------------------------------------------------------------------

class _Strict(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True, frozen=True)


_Name = Annotated[str, pydantic.StringConstraints(pattern=_NAME_PATTERN)]


class _Role(_Strict):
    capabilities: list[_Name] = []
    includes: list[_Name] = []
    privileges: list[_Name] = []


class _Limits(_Strict):
    max_depth: Annotated[int, pydantic.Field(ge=0, le=1000)] | None = None
    max_tasks: Annotated[int, pydantic.Field(ge=0, le=100_000)] | None = None
    max_handoffs: Annotated[int, pydantic.Field(ge=0, le=100_000)] | None = None
    max_execution_time_ms: Annotated[int, pydantic.Field(ge=0, le=86_400_000)] | None = None
    max_cost: Annotated[float | int, pydantic.Field(ge=0, le=1e9, allow_inf_nan=False)] | None = None
    max_tokens: Annotated[int, pydantic.Field(ge=0, le=10**12)] | None = None
    max_model_calls: Annotated[int, pydantic.Field(ge=0, le=10**9)] | None = None
    max_model_cost: Annotated[float | int, pydantic.Field(ge=0, le=1e9, allow_inf_nan=False)] | None = None


class _Models(_Strict):
    agents: dict[_Name, list[_Name]] = {}
    """Agent id (``supervisor`` for the supervisor's own calls) -> the models it may use."""
    fallback: list[_Name] = []
    """Agents whose call may fall back to another of their models when the first choice is unavailable."""


_ActionKey = Literal["default", "MAX_DEPTH_EXCEEDED", "MAX_TASKS_EXCEEDED", "MAX_HANDOFFS_EXCEEDED",
                     "MAX_EXECUTION_TIME_EXCEEDED", "MAX_COST_EXCEEDED", "MAX_TOKENS_EXCEEDED",
                     "MAX_MODEL_CALLS_EXCEEDED", "MAX_MODEL_COST_EXCEEDED"]


class _Definition(_Strict):
    roles: dict[_Name, _Role] = {}
    agents: list[_Name] = []
    limits: _Limits = _Limits()
    on_exceeded: dict[_ActionKey, Literal["STOP", "HUMAN_REVIEW"]] = {}
    models: _Models = _Models()


class _Tenant(_Definition):
    id: Annotated[str, pydantic.StringConstraints(pattern=TENANT_ID_PATTERN)]
    name: Annotated[str, pydantic.StringConstraints(min_length=1, max_length=200)]


class _File(_Strict):
    format: Literal["agentmesh-tenants/v1"]
    description: str = ""
    tenants: list[_Tenant] = pydantic.Field(min_length=1, max_length=100)


def definition_from_mapping(tenant_id: str, name: str, spec: Mapping[str, Any]) -> tenant_pb2.TenantDefinition:
    """A ``TenantDefinition`` from a checked mapping (``roles``, ``agents``, ``limits``, ``on_exceeded``,
    ``models``)."""
    definition = tenant_pb2.TenantDefinition(tenant_id=tenant_id, display_name=name)
    for role, held in (spec.get("roles") or {}).items():
        definition.roles[role].CopyFrom(tenant_pb2.TenantRole(
            capabilities=held.get("capabilities", []), includes=held.get("includes", []),
            privileges=held.get("privileges", [])))
    definition.allowed_agents.extend(spec.get("agents") or [])
    for name_, value in (spec.get("limits") or {}).items():
        if value is not None:
            setattr(definition.limits, name_, float(value) if name_ in ("max_cost", "max_model_cost") else int(value))
    for key, action in (spec.get("on_exceeded") or {}).items():
        definition.on_exceeded[key] = tenant_pb2.LimitAction.Value(f"LIMIT_ACTION_{action}")  # type: ignore[assignment]
    models = spec.get("models") or {}
    fallback = set(models.get("fallback") or [])
    for agent, ids in (models.get("agents") or {}).items():
        definition.models[agent].CopyFrom(tenant_pb2.TenantModelUse(model_ids=ids, fallback=agent in fallback))
    for agent in fallback - set(models.get("agents") or {}):
        definition.models[agent].fallback = True  # refused by the policy engine, naming the field
    return definition


def definition_to_mapping(definition: tenant_pb2.TenantDefinition) -> dict[str, Any]:
    """A definition as a tenant file writes it (for ``agentmesh tenants show``)."""
    limits = {n: (getattr(definition.limits, n)) for n in LIMIT_FIELDS if definition.limits.HasField(n)}
    return {
        "id": definition.tenant_id,
        "name": definition.display_name,
        "roles": {role: {k: list(v) for k, v in (("capabilities", held.capabilities), ("includes", held.includes),
                                                 ("privileges", held.privileges)) if v}
                  for role, held in sorted(definition.roles.items())},
        "agents": list(definition.allowed_agents),
        "limits": limits,
        "on_exceeded": {k: tenant_pb2.LimitAction.Name(v).removeprefix("LIMIT_ACTION_")
                        for k, v in sorted(definition.on_exceeded.items())},
        "models": {"agents": {a: list(u.model_ids) for a, u in sorted(definition.models.items())},
                   "fallback": sorted(a for a, u in definition.models.items() if u.fallback)},
    }


def parse_tenants(entries: Sequence[tuple[PathKey, str, str, Any]], lines: Mapping[PathKey, int],
                  file: str) -> list[tenant_pb2.TenantDefinition]:
    """Definitions from ``(path, tenant id, name, mapping)`` entries of a document whose lines are ``lines``
    (a world file's ``tenants[i].definition``).

    Raises:
        TenantFileError: a field is not valid (names the file, line and field).
    """
    out: list[tenant_pb2.TenantDefinition] = []
    for path, tenant_id, name, spec in entries:
        try:
            model = _Definition.model_validate(spec)
        except pydantic.ValidationError as exc:
            raise validation_error(exc, Document(None, dict(lines)), file, error=TenantFileError,
                                   prefix=path) from None
        out.append(definition_from_mapping(tenant_id, name, model.model_dump(exclude_none=True)))
    return out


def load_tenant_file(path: Path) -> TenantFile:
    """Read and check a tenant file (YAML, or JSON by suffix: JSON is YAML).

    Raises:
        TenantFileError: unreadable, too large, not YAML, duplicate keys or ids, or a field that is not valid.
    """
    file = str(path)
    doc = load_document(path, error=TenantFileError)
    try:
        model = _File.model_validate(doc.data)
    except pydantic.ValidationError as exc:
        raise validation_error(exc, doc, file, error=TenantFileError) from None
    lines = doc.lines
    seen: dict[str, int] = {}
    for i, tenant in enumerate(model.tenants):
        if tenant.id in seen:
            raise TenantFileError(f"tenant {tenant.id!r} is listed twice (also tenants[{seen[tenant.id]}])",
                                  file=file, field=f"tenants[{i}].id", line=lines.get(("tenants", i, "id")))
        seen[tenant.id] = i
    definitions = [definition_from_mapping(t.id, t.name, t.model_dump(exclude_none=True)) for t in model.tenants]
    return TenantFile(file, definitions, lines, ("tenants",), [("tenants", i) for i in range(len(definitions))])


class TenantApplyFailed(Exception):
    """The mesh refused (or could not take) the tenants; the message names the file, line and field."""


def apply_tenant_file(channel: grpc.Channel, tenants: TenantFile, *, timeout_s: float = 30.0
                      ) -> tenant_pb2.ApplyTenantsResponse:
    """``TenantService.ApplyTenants`` with a tenant file's definitions, over an operator's channel to the policy
    engine.

    Raises:
        TenantApplyFailed: refused or failed; a field the policy engine names is mapped back to the file's line.
    """
    try:
        response: tenant_pb2.ApplyTenantsResponse = tenant_grpc.TenantServiceStub(channel).ApplyTenants(
            tenant_pb2.ApplyTenantsRequest(tenants=tenants.definitions), timeout=timeout_s)
    except grpc.RpcError as err:
        failure = errors.from_rpc_error(err)
        field = failure.field or ""
        line = tenants.line_of(field) if field else None
        where = tenants.path if line is None else f"{tenants.path}:{line}"
        at = f" at {field!r}" if field else ""
        raise TenantApplyFailed(f"{where}{at}: {failure.code.name} {failure.reason}: {failure.message} "
                                "(nothing was applied)") from err
    return response
