"""Context projection: each task receives only the fields its agent and purpose need (PRD §23–25).

The whitelist is data: each domain definition's ``projections``
(``supervisor_svc/domains/*.yaml``, merged with :meth:`ProjectionConfig.merged`)
and, for the platform, ``supervisor_svc/config/projections.yaml``, which
holds the sensitive fields and the resource rules (below) and may whitelist
too::

    sensitive_fields: [medical_notes, clinical_notes, diagnosis]   # never projected, to anyone
    agents:                                  # optional; a domain's purposes live in its definition
      training-agent:
        training.verify:                     # purpose
          - permit_id
          - required_trainings
          - workers[].worker_id              # "[]" = every item of a list

A path names a field; ``a.b`` descends into a mapping, ``a[].b`` into every
item of a list. Selecting a mapping or list copies it whole, minus sensitive
fields. A field whose *name* is listed in ``sensitive_fields`` is dropped at
any depth even if a path would select it, and a whitelist naming one is
rejected when the file is loaded — so, for example, medical notes can never
reach the training agent, whatever the full context holds.

An agent or purpose that is not configured gets an empty projection (fail
closed). The projection record (``AgentContextProjection``) lists the allowed
paths, every path of the full context that was *not* passed (redacted), the
purpose, and the SHA-256 digest of the projected data's canonical JSON (keys
sorted, no whitespace, UTF-8, integral numbers written as integers so that the
digest is the same whether computed from a dict or from its protobuf Struct).
Only the digest is audited and put in the task grant.

Resources
---------

The same file says which resources a task's grant names (``resources``)::

    resources:
      fields:                        # input path -> resource type
        permit_id: permit
        "workers[].worker_id": worker
      tenant_wide: [workPermit.search]
      knowledge: [knowledge.search]

A task's resources are every id found at those paths of its input (its
projected context, or the input the supervisor gave it), as ``TYPE:ID`` in
the order of the file and of the input, without repeats; plus
``tenant:<tenant>`` when the task is granted a ``tenant_wide`` capability (one
that works over the tenant as a whole, such as a search); plus
``knowledge:<scope>`` for each knowledge scope the agent's manifest registers
(``knowledge_scopes``) when the task is granted a ``knowledge`` capability
(one that reads a knowledge store): an agent reads knowledge within its own
scopes, never another's (the policy engine checks it again). A value that is not
an id is never listed. The capability runtime refuses a call on a resource the
grant does not list, so a task whose input names nothing can act on nothing
(fail closed). The types are those of the capability registry's manifests
(``resource.type``); ``tenant`` and ``knowledge`` are reserved. Without a ``resources`` section
grants name nothing.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import pydantic
from google.protobuf import struct_pb2, timestamp_pb2

from agentmesh.agent_manifest import AGENT_ID_PATTERN
from agentmesh.structs import struct_dict
from agentmesh.v1 import common_pb2
from supervisor_svc._datafile import load_document, validation_error
from supervisor_svc.errors import ConfigError

__all__ = [
    "ProjectionConfig",
    "Projector",
    "ResourceRules",
    "canonical_json",
    "context_digest",
    "default_projections_file",
    "to_struct",
]

_LIST = "[]"
_PATH_RE = r"^[A-Za-z_][A-Za-z0-9_]*(\[\])?(\.[A-Za-z_][A-Za-z0-9_]*(\[\])?)*$"
_Path = Annotated[str, pydantic.StringConstraints(pattern=_PATH_RE)]
_Purpose = Annotated[str, pydantic.StringConstraints(pattern=r"^[a-z][a-z0-9._-]{0,127}$")]
_AgentId = Annotated[str, pydantic.StringConstraints(pattern=AGENT_ID_PATTERN)]


_ResourceType = Annotated[str, pydantic.StringConstraints(pattern=r"^[a-z][a-z0-9_-]{0,31}$")]
_CapabilityId = Annotated[str, pydantic.StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9._-]{0,127}$")]
_RESOURCE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
TENANT = "tenant"
"""The resource type of an operation over the whole tenant."""
KNOWLEDGE = "knowledge"
"""The resource type of a knowledge scope."""


class _ResourcesModel(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True, frozen=True)
    fields: dict[_Path, _ResourceType]
    tenant_wide: list[_CapabilityId] = []
    knowledge: list[_CapabilityId] = []


class _FileModel(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True, frozen=True)
    sensitive_fields: list[Annotated[str, pydantic.StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]]
    agents: dict[_AgentId, dict[_Purpose, list[_Path]]] = {}
    resources: _ResourcesModel = _ResourcesModel(fields={})
    """Absent: grants name no resource, so their tasks can act on nothing (fail closed)."""


def _tokens(path: str) -> list[str]:
    out: list[str] = []
    for part in path.split("."):
        if part.endswith(_LIST):
            out += [part[: -len(_LIST)], _LIST]
        else:
            out.append(part)
    return out


def default_projections_file() -> Path:
    """The projection whitelist shipped with the supervisor."""
    return Path(__file__).parent / "config" / "projections.yaml"


def _values(value: Any, tokens: list[str]) -> list[Any]:
    """Every value at a tokenized path (``[]`` = each item of a list); nothing where the shape differs."""
    if not tokens:
        return [value]
    head, rest = tokens[0], tokens[1:]
    if head == _LIST:
        return [v for item in value for v in _values(item, rest)] if isinstance(value, list | tuple) else []
    if isinstance(value, Mapping) and head in value:
        return _values(value[head], rest)
    return []


@dataclass(frozen=True)
class ResourceRules:
    """Which resources a task's grant names (see the module docstring)."""

    fields: tuple[tuple[str, str], ...] = ()
    """(input path, resource type), in file order."""
    tenant_wide: frozenset[str] = frozenset()
    """Capabilities that work over the whole tenant: a task granted one names ``tenant:<tenant>``."""
    knowledge: frozenset[str] = frozenset()
    """Capabilities that read a knowledge store: a task granted one names ``knowledge:<scope>`` for each of its
    agent's registered knowledge scopes."""

    def resources(self, task_input: Mapping[str, Any], capabilities: Iterable[str], tenant_id: str,
                  knowledge_scopes: Iterable[str] = ()) -> list[str]:
        """The ``TYPE:ID`` resources of a task with this input and these granted capabilities, its agent
        registering ``knowledge_scopes``."""
        out: list[str] = []
        granted = set(capabilities)
        for path, kind in self.fields:
            for value in _values(task_input, _tokens(path)):
                if isinstance(value, str) and _RESOURCE_ID.match(value) and f"{kind}:{value}" not in out:
                    out.append(f"{kind}:{value}")
        if tenant_id and self.tenant_wide.intersection(granted):
            out.append(f"{TENANT}:{tenant_id}")
        if self.knowledge.intersection(granted):
            out += [f"{KNOWLEDGE}:{s}" for s in dict.fromkeys(knowledge_scopes) if _RESOURCE_ID.match(s)]
        return out


@dataclass(frozen=True)
class ProjectionConfig:
    """Validated whitelists per agent and purpose, and the resource rules of grants."""

    sensitive_fields: frozenset[str]
    whitelists: Mapping[str, Mapping[str, tuple[str, ...]]] = field(default_factory=dict)
    """agent id → purpose → allowed paths (sorted)."""
    resources: ResourceRules = field(default_factory=ResourceRules)

    @classmethod
    def load(cls, path: Path | None = None) -> ProjectionConfig:
        """Read and validate a projections file.

        Raises:
            ConfigError: naming the file, the field and the line; ``PROJECTION_SENSITIVE_FIELD``
                when a whitelist names a sensitive field.
        """
        path = path or default_projections_file()
        doc = load_document(path)
        try:
            model = _FileModel.model_validate(doc.data)
        except pydantic.ValidationError as exc:
            raise validation_error(exc, doc, str(path)) from None
        sensitive = frozenset(model.sensitive_fields)
        whitelists: dict[str, dict[str, tuple[str, ...]]] = {}
        for agent_id, purposes in model.agents.items():
            whitelists[agent_id] = {}
            for purpose, paths in purposes.items():
                for i, p in enumerate(paths):
                    named = {t for t in _tokens(p) if t != _LIST}
                    if named & sensitive:
                        loc = ("agents", agent_id, purpose, i)
                        raise ConfigError(
                            f"{p!r} names a sensitive field; sensitive fields are never projected",
                            file=str(path), field=f"agents.{agent_id}.{purpose}[{i}]", line=doc.line_of(loc),
                            reason="PROJECTION_SENSITIVE_FIELD",
                        )
                whitelists[agent_id][purpose] = tuple(sorted(set(paths)))
        reserved = {TENANT: "an operation over the whole tenant (tenant_wide)",
                    # The scopes a grant names come from the agent's manifest, never from a task's input.
                    KNOWLEDGE: "the knowledge scopes of the agent's manifest (knowledge)"}
        for p, kind in model.resources.fields.items():
            if kind in reserved:
                raise ConfigError(f"{kind!r} is reserved for {reserved[kind]}",
                                  file=str(path), field=f"resources.fields.{p}",
                                  line=doc.line_of(("resources", "fields", p)), reason="RESOURCE_TYPE_RESERVED")
        rules = ResourceRules(tuple(model.resources.fields.items()), frozenset(model.resources.tenant_wide),
                              frozenset(model.resources.knowledge))
        return cls(sensitive, whitelists, rules)

    def merged(self, whitelists: Mapping[str, Mapping[str, tuple[str, ...]]], *, source: str) -> ProjectionConfig:
        """This configuration plus more whitelists (a domain catalogue's), which must name no sensitive
        field and no (agent, purpose) already whitelisted.

        Raises:
            ConfigError: ``PROJECTION_SENSITIVE_FIELD`` or ``PROJECTION_DUPLICATE`` (file ``source``).
        """
        combined: dict[str, dict[str, tuple[str, ...]]] = {a: dict(p) for a, p in self.whitelists.items()}
        for agent_id, purposes in whitelists.items():
            for purpose, paths in purposes.items():
                where = f"projections.{agent_id}.{purpose}"
                if purpose in combined.get(agent_id, {}):
                    raise ConfigError(f"{agent_id} already has a whitelist for {purpose!r}", file=source,
                                      field=where, reason="PROJECTION_DUPLICATE")
                for i, p in enumerate(paths):
                    if {t for t in _tokens(p) if t != _LIST} & self.sensitive_fields:
                        raise ConfigError(f"{p!r} names a sensitive field; sensitive fields are never projected",
                                          file=source, field=f"{where}[{i}]", reason="PROJECTION_SENSITIVE_FIELD")
                combined.setdefault(agent_id, {})[purpose] = tuple(sorted(set(paths)))
        return ProjectionConfig(self.sensitive_fields, combined, self.resources)

    def whitelist(self, agent_id: str, purpose: str) -> tuple[str, ...]:
        """The allowed paths, or ``()`` for an unknown agent or purpose."""
        return tuple(self.whitelists.get(agent_id, {}).get(purpose, ()))


# --- canonical form and digest -----------------------------------------------------------------------

def _normalize(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("NaN and infinity have no canonical JSON form")
        return int(value) if value.is_integer() else value
    if isinstance(value, _dt.datetime | _dt.date):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(k): _normalize(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalize(v) for v in value]
    raise TypeError(f"{type(value).__name__} is not plain data")


def canonical_json(value: Any) -> bytes:
    """Canonical JSON bytes: sorted keys, no whitespace, UTF-8, integral numbers as integers."""
    return json.dumps(_normalize(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def context_digest(value: Any) -> str:
    """SHA-256 (hex) of the canonical JSON of ``value``; the same for a dict and its Struct."""
    if isinstance(value, struct_pb2.Struct):
        value = struct_dict(value)
    return hashlib.sha256(canonical_json(value)).hexdigest()


def to_struct(projected: Mapping[str, Any]) -> struct_pb2.Struct:
    """The projected data as a Struct for ``AgentTask.input``."""
    struct = struct_pb2.Struct()
    struct.update(_normalize(projected))
    return struct


# --- projection ------------------------------------------------------------------------------------

_Trie = dict[str, Any]
_LEAF: _Trie = {}
_MISSING = object()


def _trie(paths: tuple[str, ...]) -> _Trie:
    root: _Trie = {}
    for p in paths:
        node = root
        tokens = _tokens(p)
        for i, token in enumerate(tokens):
            if node.get(token) is _LEAF:
                break  # an ancestor is selected whole already
            if i == len(tokens) - 1:
                node[token] = _LEAF
            else:
                node = node.setdefault(token, {})
    return root


def _leaf_paths(value: Any, prefix: str, out: set[str]) -> None:
    if isinstance(value, Mapping) and value:
        for k, v in value.items():
            _leaf_paths(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(value, list | tuple) and value and any(isinstance(v, Mapping | list | tuple) for v in value):
        for v in value:
            _leaf_paths(v, f"{prefix}{_LIST}", out)
    elif prefix:
        out.add(prefix)


class Projector:
    """Projects a full context for one agent and purpose."""

    def __init__(self, config: ProjectionConfig) -> None:
        """Args:
        config: The validated whitelists.
        """
        self._config = config

    @property
    def resource_rules(self) -> ResourceRules:
        """Which resources a task's grant names."""
        return self._config.resources

    def _sanitize(self, value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: self._sanitize(v) for k, v in value.items() if k not in self._config.sensitive_fields}
        if isinstance(value, list | tuple):
            return [self._sanitize(v) for v in value]
        return value

    def _select(self, value: Any, trie: _Trie) -> Any:
        if trie is _LEAF:
            return self._sanitize(value)
        if isinstance(value, Mapping):
            out: dict[str, Any] = {}
            for key, sub in trie.items():
                if key == _LIST or key in self._config.sensitive_fields or key not in value:
                    continue
                selected = self._select(value[key], sub)
                if selected is not _MISSING:
                    out[key] = selected
            return out
        if isinstance(value, list | tuple) and _LIST in trie:
            items = [self._select(item, trie[_LIST]) for item in value]
            return [item for item in items if item is not _MISSING]
        return _MISSING  # the context's shape differs from the path: pass nothing

    def project(
        self,
        full_context: Mapping[str, Any],
        agent_id: str,
        purpose: str,
        *,
        source_context_id: str = "",
        expires_at: _dt.datetime | None = None,
    ) -> tuple[dict[str, Any], common_pb2.AgentContextProjection]:
        """The projected context and its record.

        Args:
            full_context: Everything the supervisor knows for the task (plain JSON-like data).
            agent_id: The task's target agent.
            purpose: Why the agent needs context (e.g. ``training.verify``).
            source_context_id: Id of the full context (e.g. the work-permit task id), recorded.
            expires_at: When the projection stops being valid, recorded.

        Returns:
            ``(projected, record)``; the projected dict is in canonical form (integral
            numbers as int, dates as ISO text) and ready for :func:`to_struct`.
        """
        paths = self._config.whitelist(agent_id, purpose)
        selected = self._select(full_context, _trie(paths)) if paths else {}
        projected: dict[str, Any] = _normalize(selected if isinstance(selected, dict) else {})
        everything: set[str] = set()
        kept: set[str] = set()
        _leaf_paths(_normalize(full_context), "", everything)
        _leaf_paths(projected, "", kept)
        record = common_pb2.AgentContextProjection(
            source_context_id=source_context_id,
            target_agent_id=agent_id,
            allowed_fields=paths,
            redacted_fields=sorted(everything - kept),
            purpose=purpose,
            digest=context_digest(projected),
        )
        if expires_at is not None:
            stamp = timestamp_pb2.Timestamp()
            stamp.FromDatetime(expires_at.astimezone(_dt.UTC))
            record.expires_at.CopyFrom(stamp)
        return projected, record
