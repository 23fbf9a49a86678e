"""Policy data: the platform's capabilities, privileges and system actors, and each tenant's roles.

The platform data file (``entities.yaml``) says what exists on the platform: the
capability catalogue (with each capability's kind), the privileges and the
system actors with what they are delegated. Tenants and their roles are data
applied at run time (``TenantService.ApplyTenants``, see policy_svc.tenants):
:func:`tenant_roles` checks one tenant's roles against the platform data, and
:func:`build_policy_data` turns the platform data and every tenant's roles
into the Cedar entity graph, rebuilt whenever a tenant changes:

- ``Capability::"c"`` has ``permitted_roles``: every tenant-scoped role
  (``"acme/permit-manager"``) that lists it, directly or through ``includes``;
  it is ``in`` every ``SystemActor`` that lists it, in the ``CapabilityGroup``
  of its kind and in ``CapabilityGroup::"known"``;
- ``Privilege::"p"`` has ``held_by``: the tenant-scoped roles holding it,
  directly or through ``includes``;
- ``SystemActorDirectory::"all"`` has ``names``: every system actor, so a
  policy can tell a system actor's work from a user's by the requester id;
- ``TenantDirectory::"configured"`` has ``names``: every configured tenant, so
  the work of a tenant that is not configured is refused by name
  (``tenant.not_configured``);
- ``Model::"m"`` (in ``ModelGroup::"known"``) has ``permitted``: every
  ``"<tenant>/<agent>"`` whose tenant lists the model for the agent (the
  tenant's ``models``), and ``fallback_permitted``: those of them whose calls
  may fall back to it.

Resolving ``includes`` here is data preparation, not a rule: the rule
("one of the user's roles permits the capability") is the Cedar policy.
"""

from __future__ import annotations

import dataclasses
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
TENANT_DIRECTORY = "configured"

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


class _ModelSpec(_Model):
    description: str = ""


class _SystemActorSpec(_Model):
    capabilities: list[str]


class _DataFile(_Model):
    capabilities: dict[str, _CapabilitySpec]
    privileges: list[str] = []
    system_actors: dict[str, _SystemActorSpec] = {}
    models: dict[str, _ModelSpec] = {}


@dataclass(frozen=True, slots=True)
class RoleSpec:
    """One role of a tenant, as applied."""

    capabilities: tuple[str, ...] = ()
    includes: tuple[str, ...] = ()
    privileges: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TenantPolicy:
    """What the policy engine holds of one tenant: its roles and the models its agents may use."""

    roles: Mapping[str, RoleSpec]
    #: Agent id (``supervisor`` for the supervisor's own calls) -> the model ids it may use.
    models: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    #: Agents whose call may fall back to another of their models when the first choice is unavailable.
    fallback: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class PlatformData:
    """The validated platform data file: what exists, whichever tenants are configured."""

    #: Capability id -> kind.
    capabilities: Mapping[str, CapabilityKind]
    privileges: tuple[str, ...]
    #: System actor -> the capabilities it is delegated.
    system_actors: Mapping[str, tuple[str, ...]]
    #: The file's bytes (part of the policy set version).
    source: bytes = b""
    #: The capabilities that read a knowledge scope (``knowledge: true``).
    knowledge_capabilities: frozenset[str] = frozenset()
    #: Model ids of the catalogue.
    models: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PolicyData:
    """The platform data and every tenant's roles, ready to be handed to Cedar."""

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


class TenantRolesInvalid(ValueError):
    """A tenant's roles do not fit the platform data; ``field`` is relative to the tenant
    (``roles.<role>.capabilities[<i>]``)."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


def load_platform_data(path: Path) -> PlatformData:
    """Reads and validates the platform data file; ``PolicyLoadError(DATA_INVALID)`` if bad."""
    try:
        raw_bytes = path.read_bytes()
        raw = yaml.safe_load(raw_bytes.decode("utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise _invalid(path, f"cannot read data file: {exc}") from exc
    try:
        spec = _DataFile.model_validate(raw)
    except pydantic.ValidationError as exc:
        hint = (" (tenants are data: apply them with `agentmesh tenants apply`)"
                if isinstance(raw, dict) and "tenants" in raw else "")
        raise _invalid(path, f"data file does not match its format{hint}: {exc}") from exc
    for cap, cap_spec in spec.capabilities.items():
        if cap_spec.knowledge and cap_spec.kind != "read":
            raise _invalid(path, f"capabilities.{cap}: a knowledge capability is of kind read")
    for actor, actor_spec in spec.system_actors.items():
        where = f"system_actors.{actor}"
        if not NAME_PATTERN.match(actor):
            raise _invalid(path, f"{where}: name must match {NAME_PATTERN.pattern}")
        for cap in actor_spec.capabilities:
            if cap not in spec.capabilities:
                raise _invalid(path, f"{where}: unknown capability {cap!r}")
    return PlatformData(
        capabilities={cap: cap_spec.kind for cap, cap_spec in spec.capabilities.items()},
        privileges=tuple(spec.privileges),
        system_actors={a: tuple(s.capabilities) for a, s in spec.system_actors.items()},
        source=raw_bytes,
        knowledge_capabilities=frozenset(cap for cap, cap_spec in spec.capabilities.items() if cap_spec.knowledge),
        models=tuple(spec.models),
    )


def _invalid(path: Path, message: str) -> PolicyLoadError:
    return PolicyLoadError(f"{path}: {message}", reason="DATA_INVALID", path=str(path))


def tenant_roles(platform: PlatformData, roles: Mapping[str, RoleSpec]) -> dict[str, RoleSpec]:
    """A tenant's roles, checked against the platform: names, known capabilities and privileges, included
    roles of the same tenant, no cycle of includes.

    Raises:
        TenantRolesInvalid: naming the field (``roles.<role>.capabilities[<i>]``).
    """
    for role_name, role in roles.items():
        where = f"roles.{role_name}"
        if not NAME_PATTERN.match(role_name):
            raise TenantRolesInvalid(f"a role name must match {NAME_PATTERN.pattern}", field=where)
        checks: tuple[tuple[str, str, tuple[str, ...], Any], ...] = (
            ("capability", "capabilities", role.capabilities, platform.capabilities),
            ("privilege", "privileges", role.privileges, platform.privileges),
            ("included role", "includes", role.includes, roles))
        for what, attr, names, known in checks:
            for i, name in enumerate(names):
                if name not in known:
                    raise TenantRolesInvalid(f"unknown {what} {name!r}", field=f"{where}.{attr}[{i}]")
    _check_no_cycle(roles)
    return dict(roles)


def tenant_models(platform: PlatformData, models: Mapping[str, tuple[str, ...]],
                  fallback: tuple[str, ...]) -> None:
    """A tenant's model use, checked against the platform: agent names, models of the catalogue, fallback
    only for an agent that uses a model.

    Raises:
        TenantRolesInvalid: naming the field (``models.<agent>.model_ids[<i>]``).
    """
    for agent, ids in models.items():
        if not NAME_PATTERN.match(agent):
            raise TenantRolesInvalid(f"an agent id must match {NAME_PATTERN.pattern}", field=f"models.{agent}")
        for i, model in enumerate(ids):
            if model not in platform.models:
                raise TenantRolesInvalid(f"unknown model {model!r}", field=f"models.{agent}.model_ids[{i}]")
    for agent in fallback:
        if not models.get(agent):
            raise TenantRolesInvalid(f"{agent!r} uses no model", field=f"models.{agent}.fallback")


def build_policy_data(platform: PlatformData, tenants: Mapping[str, TenantPolicy]) -> PolicyData:
    """The Cedar entities of the platform and the tenants (each already checked by :func:`tenant_roles` and
    :func:`tenant_models`)."""
    # Effective permissions of each role: its own plus those of every role it
    # includes, transitively (cycles were refused when the tenant was applied).
    permitted_roles: dict[str, set[str]] = {cap: set() for cap in platform.capabilities}
    held_by: dict[str, set[str]] = {p: set() for p in platform.privileges}
    for tenant_id, tenant in tenants.items():
        roles = tenant.roles
        for role_name in roles:
            scoped = role_id(tenant_id, role_name)
            for included in _closure(roles, role_name):
                for cap in roles[included].capabilities:
                    permitted_roles[cap].add(scoped)
                for privilege in roles[included].privileges:
                    held_by[privilege].add(scoped)
    capability_parents: dict[str, list[dict[str, str]]] = {
        cap: [uid("CapabilityGroup", KNOWN_GROUP), uid("CapabilityGroup", kind)]
        + ([uid("CapabilityGroup", KNOWLEDGE_GROUP)] if cap in platform.knowledge_capabilities else [])
        for cap, kind in platform.capabilities.items()
    }
    for actor, caps in platform.system_actors.items():
        for cap in caps:
            capability_parents[cap].append(uid("SystemActor", actor))

    entities: list[JsonObject] = []
    entities += [_entity("SystemActor", a, {}, []) for a in platform.system_actors]
    groups = [KNOWN_GROUP, "read", "mutate", "external_write", KNOWLEDGE_GROUP]
    entities += [_entity("CapabilityGroup", g, {}, []) for g in groups]
    entities += [
        _entity("Capability", cap, {"permitted_roles": sorted(permitted_roles[cap])}, parents)
        for cap, parents in capability_parents.items()
    ]
    entities += [_entity("Privilege", p, {"held_by": sorted(roles)}, []) for p, roles in held_by.items()]
    entities.append(_entity("SystemActorDirectory", SYSTEM_ACTOR_DIRECTORY,
                            {"names": sorted(platform.system_actors)}, []))
    entities.append(_entity("TenantDirectory", TENANT_DIRECTORY, {"names": sorted(tenants)}, []))
    permitted: dict[str, set[str]] = {m: set() for m in platform.models}
    fallback: dict[str, set[str]] = {m: set() for m in platform.models}
    for tenant_id, tenant in tenants.items():
        for agent, models in tenant.models.items():
            for m in models:
                permitted[m].add(f"{tenant_id}/{agent}")
                if agent in tenant.fallback:
                    fallback[m].add(f"{tenant_id}/{agent}")
    entities.append(_entity("ModelGroup", KNOWN_GROUP, {}, []))
    entities += [_entity("Model", m, {"permitted": sorted(permitted[m]), "fallback_permitted": sorted(fallback[m])},
                         [uid("ModelGroup", KNOWN_GROUP)]) for m in platform.models]
    return PolicyData(
        capabilities=dict(platform.capabilities),
        knowledge_capabilities=platform.knowledge_capabilities,
        roles={t: tuple(tenant.roles) for t, tenant in tenants.items()},
        system_actors=tuple(platform.system_actors),
        models=platform.models,
        entities=tuple(entities),
    )


def _closure(roles: Mapping[str, RoleSpec], role: str) -> set[str]:
    """The role and every role it includes, transitively."""
    seen = {role}
    pending = [role]
    while pending:
        for included in roles[pending.pop()].includes:
            if included not in seen:
                seen.add(included)
                pending.append(included)
    return seen


def _entity(type_name: str, entity_id: str, attrs: JsonObject, parents: list[dict[str, str]]) -> JsonObject:
    return {"uid": uid(type_name, entity_id), "attrs": attrs, "parents": parents}


def _check_no_cycle(roles: Mapping[str, RoleSpec]) -> None:
    # A cycle would make every role in it equivalent; that is never what the
    # author meant, so refuse it.
    done: set[str] = set()

    def visit(role: str, trail: tuple[str, ...]) -> None:
        if role in trail:
            cycle = " -> ".join((*trail[trail.index(role):], role))
            raise TenantRolesInvalid(f"roles include each other: {cycle}", field=f"roles.{trail[-1]}.includes")
        if role in done:
            return
        for included in roles[role].includes:
            visit(included, (*trail, role))
        done.add(role)

    for role in roles:
        visit(role, ())
