"""Policy data: tenants, roles, capabilities and system actors as Cedar entities.

The data file (``entities.yaml``) says *who holds what*; the ``.cedar`` files
say *what that means*. This module validates the file and turns it into the
static Cedar entity graph, built once at start-up:

- ``Capability::"c"`` has ``permitted_roles``: every tenant-scoped role
  (``"acme/permit-manager"``) that lists it, directly or through ``includes``;
  it is ``in`` every ``SystemActor`` that lists it, in the ``CapabilityGroup``
  of its kind and in ``CapabilityGroup::"known"``, and a capability marked
  ``knowledge: true`` (it reads a knowledge scope) also in
  ``CapabilityGroup::"knowledge"``;
- ``Privilege::"p"`` has ``held_by``: the tenant-scoped roles holding it,
  directly or through ``includes``;
- ``SystemActorDirectory::"all"`` has ``names``: every system actor, so a
  policy can tell a system actor's work from a user's by the requester id;
- ``Model::"m"`` (in ``ModelGroup::"known"``) has ``permitted``: every
  ``"<tenant>/<agent>"`` whose tenant lists the model for the agent
  (``tenants.<tenant>.models.agents``), and ``fallback_permitted``: those of
  them whose calls may fall back to it (``tenants.<tenant>.models.fallback``).

Resolving ``includes`` here is data preparation, not a rule: the rule
("one of the user's roles permits the capability") is the Cedar policy.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pydantic
import yaml

from policy_svc.errors import PolicyLoadError

NAMESPACE = "AgentMesh"
KNOWN_GROUP = "known"
KNOWLEDGE_GROUP = "knowledge"
SYSTEM_ACTOR_DIRECTORY = "all"

# Tenant and role names become parts of entity ids ("<tenant>/<role>"); a "/"
# in a tenant id could make two different (tenant, role) pairs collide.
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

CapabilityKind = Literal["read", "mutate", "external_write"]

JsonObject = dict[str, Any]


def entity_type(name: str) -> str:
    """The fully qualified Cedar entity type, e.g. ``AgentMesh::Role``."""
    return f"{NAMESPACE}::{name}"


def uid(type_name: str, entity_id: str) -> dict[str, str]:
    """A Cedar entity uid in JSON form (``{"type": ..., "id": ...}``)."""
    return {"type": entity_type(type_name), "id": entity_id}


def role_id(tenant_id: str, role: str) -> str:
    """Entity id of a role: roles are scoped to their tenant."""
    return f"{tenant_id}/{role}"


class _Model(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)


class _CapabilitySpec(_Model):
    kind: CapabilityKind
    knowledge: bool = False


class _RoleSpec(_Model):
    capabilities: list[str] = []
    includes: list[str] = []
    privileges: list[str] = []


class _ModelSpec(_Model):
    description: str = ""


class _TenantModels(_Model):
    agents: dict[str, list[str]] = {}
    """Agent id (``supervisor`` for the supervisor) → the models it may use."""
    fallback: list[str] = []
    """Agents whose call may fall back to another of their models when the first choice is unavailable."""


class _TenantSpec(_Model):
    roles: dict[str, _RoleSpec]
    models: _TenantModels = _TenantModels()


class _SystemActorSpec(_Model):
    capabilities: list[str]


class _DataFile(_Model):
    capabilities: dict[str, _CapabilitySpec]
    privileges: list[str] = []
    tenants: dict[str, _TenantSpec]
    system_actors: dict[str, _SystemActorSpec] = {}
    models: dict[str, _ModelSpec] = {}


@dataclass(frozen=True, slots=True)
class PolicyData:
    """The validated data file, ready to be handed to Cedar."""

    #: Capability id -> kind.
    capabilities: Mapping[str, CapabilityKind]
    #: The capabilities that read a knowledge scope (``knowledge: true``).
    knowledge_capabilities: frozenset[str]
    #: Tenant id -> role names defined in it.
    roles: Mapping[str, tuple[str, ...]]
    #: System actor names.
    system_actors: tuple[str, ...]
    #: Model ids of the catalogue.
    models: tuple[str, ...]
    #: The static Cedar entities (JSON-ready list).
    entities: tuple[JsonObject, ...]


def load_policy_data(path: Path) -> PolicyData:
    """Reads and validates the data file; ``PolicyLoadError(DATA_INVALID)`` if bad."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise _invalid(path, f"cannot read data file: {exc}") from exc
    try:
        spec = _DataFile.model_validate(raw)
    except pydantic.ValidationError as exc:
        raise _invalid(path, f"data file does not match its format: {exc}") from exc
    return _build(spec, path)


def _invalid(path: Path, message: str) -> PolicyLoadError:
    return PolicyLoadError(f"{path}: {message}", reason="DATA_INVALID", path=str(path))


def _build(spec: _DataFile, path: Path) -> PolicyData:
    for cap, cap_spec in spec.capabilities.items():
        if cap_spec.knowledge and cap_spec.kind != "read":
            raise _invalid(path, f"capabilities.{cap}: a knowledge capability is of kind read")
    for tenant_id, tenant in spec.tenants.items():
        if not NAME_PATTERN.match(tenant_id):
            raise _invalid(path, f"tenant id {tenant_id!r} must match {NAME_PATTERN.pattern}")
        for role_name, role in tenant.roles.items():
            where = f"tenants.{tenant_id}.roles.{role_name}"
            if not NAME_PATTERN.match(role_name):
                raise _invalid(path, f"{where}: role name must match {NAME_PATTERN.pattern}")
            _check_known(path, where, "capability", role.capabilities, spec.capabilities)
            _check_known(path, where, "privilege", role.privileges, spec.privileges)
            _check_known(path, where, "included role", role.includes, tenant.roles)
        _check_no_cycle(path, tenant_id, tenant)
        for agent, models in tenant.models.agents.items():
            where = f"tenants.{tenant_id}.models.agents.{agent}"
            if not NAME_PATTERN.match(agent):
                raise _invalid(path, f"{where}: agent id must match {NAME_PATTERN.pattern}")
            _check_known(path, where, "model", models, spec.models)
        for agent in tenant.models.fallback:
            if agent not in tenant.models.agents:
                raise _invalid(path, f"tenants.{tenant_id}.models.fallback: {agent!r} uses no model "
                                     "(list it under models.agents first)")
    for actor, actor_spec in spec.system_actors.items():
        where = f"system_actors.{actor}"
        if not NAME_PATTERN.match(actor):
            raise _invalid(path, f"{where}: name must match {NAME_PATTERN.pattern}")
        _check_known(path, where, "capability", actor_spec.capabilities, spec.capabilities)

    # Effective permissions of each role: its own plus those of every role it
    # includes, transitively (cycles were refused above).
    permitted_roles: dict[str, set[str]] = {cap: set() for cap in spec.capabilities}
    held_by: dict[str, set[str]] = {p: set() for p in spec.privileges}
    for tenant_id, tenant in spec.tenants.items():
        for role_name in tenant.roles:
            scoped = role_id(tenant_id, role_name)
            for included in _closure(tenant, role_name):
                for cap in tenant.roles[included].capabilities:
                    permitted_roles[cap].add(scoped)
                for privilege in tenant.roles[included].privileges:
                    held_by[privilege].add(scoped)
    capability_parents: dict[str, list[dict[str, str]]] = {
        cap: [uid("CapabilityGroup", KNOWN_GROUP), uid("CapabilityGroup", cap_spec.kind)]
        + ([uid("CapabilityGroup", KNOWLEDGE_GROUP)] if cap_spec.knowledge else [])
        for cap, cap_spec in spec.capabilities.items()
    }
    for actor, actor_spec in spec.system_actors.items():
        for cap in actor_spec.capabilities:
            capability_parents[cap].append(uid("SystemActor", actor))

    entities: list[JsonObject] = []
    entities += [_entity("SystemActor", a, {}, []) for a in spec.system_actors]
    groups = [KNOWN_GROUP, "read", "mutate", "external_write", KNOWLEDGE_GROUP]
    entities += [_entity("CapabilityGroup", g, {}, []) for g in groups]
    entities += [
        _entity("Capability", cap, {"permitted_roles": sorted(permitted_roles[cap])}, parents)
        for cap, parents in capability_parents.items()
    ]
    entities += [_entity("Privilege", p, {"held_by": sorted(roles)}, []) for p, roles in held_by.items()]
    entities.append(_entity("SystemActorDirectory", SYSTEM_ACTOR_DIRECTORY, {"names": sorted(spec.system_actors)}, []))
    permitted: dict[str, set[str]] = {m: set() for m in spec.models}
    fallback: dict[str, set[str]] = {m: set() for m in spec.models}
    for tenant_id, tenant in spec.tenants.items():
        for agent, models in tenant.models.agents.items():
            for m in models:
                permitted[m].add(f"{tenant_id}/{agent}")
                if agent in tenant.models.fallback:
                    fallback[m].add(f"{tenant_id}/{agent}")
    entities.append(_entity("ModelGroup", KNOWN_GROUP, {}, []))
    entities += [_entity("Model", m, {"permitted": sorted(permitted[m]), "fallback_permitted": sorted(fallback[m])},
                         [uid("ModelGroup", KNOWN_GROUP)]) for m in spec.models]

    return PolicyData(
        capabilities={cap: cap_spec.kind for cap, cap_spec in spec.capabilities.items()},
        knowledge_capabilities=frozenset(cap for cap, cap_spec in spec.capabilities.items() if cap_spec.knowledge),
        roles={t: tuple(tenant.roles) for t, tenant in spec.tenants.items()},
        system_actors=tuple(spec.system_actors),
        models=tuple(spec.models),
        entities=tuple(entities),
    )


def _closure(tenant: _TenantSpec, role: str) -> set[str]:
    """The role and every role it includes, transitively."""
    seen = {role}
    pending = [role]
    while pending:
        for included in tenant.roles[pending.pop()].includes:
            if included not in seen:
                seen.add(included)
                pending.append(included)
    return seen


def _entity(type_name: str, entity_id: str, attrs: JsonObject, parents: list[dict[str, str]]) -> JsonObject:
    return {"uid": uid(type_name, entity_id), "attrs": attrs, "parents": parents}


def _check_known(path: Path, where: str, what: str, names: list[str], known: Mapping[str, object] | list[str]) -> None:
    for name in names:
        if name not in known:
            raise _invalid(path, f"{where}: unknown {what} {name!r}")


def _check_no_cycle(path: Path, tenant_id: str, tenant: _TenantSpec) -> None:
    # A cycle would make every role in it equivalent; that is never what the
    # author meant, so refuse it.
    done: set[str] = set()

    def visit(role: str, trail: tuple[str, ...]) -> None:
        if role in trail:
            cycle = " -> ".join((*trail[trail.index(role) :], role))
            raise _invalid(path, f"tenants.{tenant_id}: roles include each other: {cycle}")
        if role in done:
            return
        for included in tenant.roles[role].includes:
            visit(included, (*trail, role))
        done.add(role)

    for role in tenant.roles:
        visit(role, ())
