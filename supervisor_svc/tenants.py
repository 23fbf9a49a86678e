"""Per-tenant orchestration configuration: allowed agents and limits (PRD §10, §21, §26). Tenants are data.

A tenant's configuration is its ``TenantDefinition`` (proto ``tenant_service.proto``),
applied by an operator to the tenant directory the policy engine hosts
(``agentmesh tenants apply``); the supervisor reads it for every execution it
accepts (:class:`TenantSource`), so a change takes effect with the next one,
without a restart. Over the definition's ``limits`` and ``on_exceeded`` lie the
platform defaults, one data file, ``supervisor_svc/config/limits.yaml``::

    limits: {max_depth: 5, max_tasks: 30, max_handoffs: 10,
             max_execution_time_ms: 60000, max_cost: 100.0}
    on_exceeded: {default: STOP}            # STOP | HUMAN_REVIEW, per limit reason

A tenant with no definition is not configured: nothing of it runs
(:class:`~supervisor_svc.errors.TenantNotConfigured`, "tenant X is not configured"),
never "no agent available". The defaults file is validated at start-up; an error
names the file, the field and the line.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol, get_args

import pydantic

from agentmesh.v1 import tenant_service_pb2 as tenant_pb2
from supervisor_svc._datafile import load_document, validation_error
from supervisor_svc.errors import TenantNotConfigured
from supervisor_svc.limits import LIMIT_REASONS, LimitAction, LimitPolicy, Limits

__all__ = ["TenantConfig", "TenantDirectory", "TenantSource", "default_limits_file", "load_limit_defaults",
           "tenant_config"]


class _Strict(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True, frozen=True)


class _LimitsModel(_Strict):
    max_depth: Annotated[int, pydantic.Field(ge=0)] | None = None
    max_tasks: Annotated[int, pydantic.Field(ge=0)] | None = None
    max_handoffs: Annotated[int, pydantic.Field(ge=0)] | None = None
    max_execution_time_ms: Annotated[int, pydantic.Field(ge=0)] | None = None
    max_cost: Annotated[float | int, pydantic.Field(ge=0, allow_inf_nan=False)] | None = None
    max_tokens: Annotated[int, pydantic.Field(ge=0)] | None = None
    max_model_calls: Annotated[int, pydantic.Field(ge=0)] | None = None
    max_model_cost: Annotated[float | int, pydantic.Field(ge=0, allow_inf_nan=False)] | None = None


_Action = Literal["STOP", "HUMAN_REVIEW"]
_ActionKey = Literal[
    "default", "MAX_DEPTH_EXCEEDED", "MAX_TASKS_EXCEEDED", "MAX_HANDOFFS_EXCEEDED", "MAX_EXECUTION_TIME_EXCEEDED",
    "MAX_COST_EXCEEDED", "MAX_TOKENS_EXCEEDED", "MAX_MODEL_CALLS_EXCEEDED", "MAX_MODEL_COST_EXCEEDED",
]
assert set(get_args(_ActionKey)) == {"default", *LIMIT_REASONS}  # the two lists must not drift


class _DefaultsModel(_Strict):
    limits: _LimitsModel = _LimitsModel()
    on_exceeded: dict[_ActionKey, _Action] = {}


@dataclass(frozen=True)
class TenantConfig:
    """One tenant's orchestration settings."""

    tenant_id: str
    allowed_agents: frozenset[str]
    """Agents this tenant may use; any other is never discovered for it, nor admitted as a handoff target."""
    limit_policy: LimitPolicy
    revision: int = 0
    """The definition's revision in the tenant directory."""


def default_limits_file() -> Path:
    """The platform's default limits, shipped with the supervisor."""
    return Path(__file__).parent / "config" / "limits.yaml"


def _merge(base: Limits, values: Mapping[str, Any]) -> Limits:
    given = {f.name: values[f.name] for f in fields(Limits) if values.get(f.name) is not None}
    if "max_cost" in given:
        given["max_cost"] = float(given["max_cost"])
    return Limits(**{**{f.name: getattr(base, f.name) for f in fields(Limits)}, **given})


def _policy(limits: Limits, on_exceeded: Mapping[str, str], inherited: LimitPolicy | None) -> LimitPolicy:
    actions = dict(inherited.actions) if inherited else {}
    default = inherited.default_action if inherited else LimitAction.STOP
    for key, value in on_exceeded.items():
        if key == "default":
            default = LimitAction(value)
        else:
            actions[key] = LimitAction(value)
    return LimitPolicy(limits=limits, default_action=default, actions=actions)


def load_limit_defaults(path: Path | None = None) -> LimitPolicy:
    """The platform's default limits and actions.

    Raises:
        ConfigError: naming the file, the field and the line.
    """
    path = path or default_limits_file()
    doc = load_document(path)
    try:
        model = _DefaultsModel.model_validate(doc.data)
    except pydantic.ValidationError as exc:
        raise validation_error(exc, doc, str(path)) from None
    return _policy(_merge(Limits(), model.limits.model_dump()), {str(k): str(v) for k, v in model.on_exceeded.items()},
                   None)


def tenant_config(definition: tenant_pb2.TenantDefinition, defaults: LimitPolicy) -> TenantConfig:
    """The orchestration settings of a tenant's definition, over the platform defaults.

    The definition was checked when it was applied (the policy engine's tenant directory): limits are
    not negative and every ``on_exceeded`` action is STOP or HUMAN_REVIEW.
    """
    limits = {f.name: getattr(definition.limits, f.name) for f in fields(Limits)
              if definition.limits.HasField(f.name)}
    actions = {key: tenant_pb2.LimitAction.Name(value).removeprefix("LIMIT_ACTION_")
               for key, value in definition.on_exceeded.items()}
    policy = _policy(_merge(defaults.limits, limits), actions, defaults)
    return TenantConfig(definition.tenant_id, frozenset(definition.allowed_agents), policy, definition.revision)


class TenantSource(Protocol):
    """Where the supervisor reads a tenant's configuration (the tenant directory, or a fixed one in tests)."""

    def get(self, tenant_id: str, *, max_age_s: float = 0.0) -> TenantConfig:
        """The tenant's configuration, as in force now (``max_age_s`` > 0: one read that recently will do).

        Raises:
            TenantNotConfigured: the tenant has no definition.
            agentmesh.errors.Unavailable: the tenant directory could not be asked.
        """
        ...


@dataclass(frozen=True)
class TenantDirectory:
    """A fixed set of tenants (tests, tools); the supervisor process reads the policy engine's directory."""

    defaults: LimitPolicy = field(default_factory=LimitPolicy)
    tenants: Mapping[str, TenantConfig] = field(default_factory=dict)

    @classmethod
    def of(cls, definitions: Iterable[tenant_pb2.TenantDefinition], defaults: LimitPolicy | None = None
           ) -> TenantDirectory:
        """The directory of these definitions over ``defaults`` (the shipped limits.yaml when None)."""
        base = defaults or load_limit_defaults()
        return cls(base, {d.tenant_id: tenant_config(d, base) for d in definitions})

    def get(self, tenant_id: str, *, max_age_s: float = 0.0) -> TenantConfig:
        """The tenant's settings.

        Raises:
            TenantNotConfigured: the tenant has no definition.
        """
        config = self.tenants.get(tenant_id)
        if config is None:
            raise TenantNotConfigured(tenant_id)
        return config
