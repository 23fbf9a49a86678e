"""Per-tenant orchestration configuration: allowed agents and limits (PRD §10, §21, §26).

One data file, ``supervisor_svc/config/tenants.yaml`` by default::

    defaults:
      limits: {max_depth: 5, max_tasks: 30, max_handoffs: 10,
               max_execution_time_ms: 60000, max_cost: 100.0}
      on_exceeded: {default: STOP}            # STOP | HUMAN_REVIEW, per limit reason
    tenants:
      acme:
        allowed_agents: [work-permit-agent, training-agent, risk-agent, compliance-agent]
        limits: {max_tasks: 20}               # overrides the defaults field by field
        on_exceeded: {default: STOP, MAX_COST_EXCEEDED: HUMAN_REVIEW}

A tenant that is not listed may use no agent (fail closed) and gets the
default limits. The whole file is validated at start-up; an error names the
file, the field and the line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import pydantic

from supervisor_svc._datafile import load_document, validation_error
from supervisor_svc.errors import ConfigError
from supervisor_svc.limits import LIMIT_REASONS, LimitAction, LimitPolicy, Limits
from supervisor_svc.registry import AGENT_ID_PATTERN

__all__ = ["TenantConfig", "TenantDirectory", "default_tenants_file"]

_TENANT_PATTERN = r"^[a-z][a-z0-9-]{0,62}$"


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


class _SectionModel(_Strict):
    limits: _LimitsModel = _LimitsModel()
    on_exceeded: dict[_ActionKey, _Action] = {}


class _TenantModel(_SectionModel):
    allowed_agents: list[Annotated[str, pydantic.StringConstraints(pattern=AGENT_ID_PATTERN)]]


class _FileModel(_Strict):
    defaults: _SectionModel = _SectionModel()
    tenants: dict[Annotated[str, pydantic.StringConstraints(pattern=_TENANT_PATTERN)], _TenantModel]


@dataclass(frozen=True)
class TenantConfig:
    """One tenant's orchestration settings."""

    tenant_id: str
    allowed_agents: frozenset[str]
    """Agents this tenant may use; any other is never discovered for it."""
    limit_policy: LimitPolicy


def default_tenants_file() -> Path:
    """The tenant configuration shipped with the supervisor."""
    return Path(__file__).parent / "config" / "tenants.yaml"


def _merge(base: Limits, section: _LimitsModel) -> Limits:
    values = {f.name: getattr(section, f.name) for f in fields(Limits) if getattr(section, f.name) is not None}
    if "max_cost" in values:
        values["max_cost"] = float(values["max_cost"])
    return Limits(**{**{f.name: getattr(base, f.name) for f in fields(Limits)}, **values})


def _policy(limits: Limits, on_exceeded: Mapping[Any, str], inherited: LimitPolicy | None) -> LimitPolicy:
    actions = dict(inherited.actions) if inherited else {}
    default = inherited.default_action if inherited else LimitAction.STOP
    for key, value in on_exceeded.items():
        if key == "default":
            default = LimitAction(value)
        else:
            actions[key] = LimitAction(value)
    return LimitPolicy(limits=limits, default_action=default, actions=actions)


@dataclass(frozen=True)
class TenantDirectory:
    """All tenants' configuration."""

    defaults: LimitPolicy = field(default_factory=LimitPolicy)
    tenants: Mapping[str, TenantConfig] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path | None = None) -> TenantDirectory:
        """Read and validate a tenants file.

        Raises:
            ConfigError: naming the file, the field and the line.
        """
        path = path or default_tenants_file()
        doc = load_document(path)
        try:
            model = _FileModel.model_validate(doc.data)
        except pydantic.ValidationError as exc:
            raise validation_error(exc, doc, str(path)) from None
        defaults = _policy(_merge(Limits(), model.defaults.limits), model.defaults.on_exceeded, None)
        tenants: dict[str, TenantConfig] = {}
        for tenant_id, tenant in model.tenants.items():
            if len(set(tenant.allowed_agents)) != len(tenant.allowed_agents):
                loc = ("tenants", tenant_id, "allowed_agents")
                raise ConfigError("an agent is listed twice", file=str(path),
                                  field=f"tenants.{tenant_id}.allowed_agents", line=doc.line_of(loc))
            policy = _policy(_merge(defaults.limits, tenant.limits), tenant.on_exceeded, defaults)
            tenants[tenant_id] = TenantConfig(tenant_id, frozenset(tenant.allowed_agents), policy)
        return cls(defaults, tenants)

    def get(self, tenant_id: str) -> TenantConfig:
        """The tenant's settings; an unknown tenant may use no agent and has the default limits."""
        config = self.tenants.get(tenant_id)
        if config is None:
            return TenantConfig(tenant_id, frozenset(), self.defaults)
        return config

    def check_agents(self, known_agents: set[str], *, file: str = "tenants") -> None:
        """Refuse a configuration that allows an agent the registry does not know (a typo fails loudly).

        Raises:
            ConfigError: ``CONFIG_REFERENCE_INVALID``.
        """
        for tenant_id, config in sorted(self.tenants.items()):
            unknown = sorted(config.allowed_agents - known_agents)
            if unknown:
                raise ConfigError(
                    f"unknown agent(s) {', '.join(unknown)}", file=file,
                    field=f"tenants.{tenant_id}.allowed_agents", reason="CONFIG_REFERENCE_INVALID",
                )
