"""Typed errors of the supervisor's domain (no gRPC here).

Every error carries a stable, machine-readable ``reason`` (UPPER_SNAKE, for
``google.rpc.ErrorInfo.reason``) and, where one field is at fault, ``field``
(the request field or the JSON path in a data file). The servicer maps each
*class* to one gRPC status; the suggested code is noted on each class.

Exception tree::

    SupervisorError
    ├── ConfigError              a manifest / config data file is invalid (INTERNAL at start-up)
    │   └── AgentManifestError   an agent manifest is invalid; names file and field
    ├── AgentDependencyError     a declared capability dependency is unmet (FAILED_PRECONDITION)
    ├── RequestInvalid           the caller's input is malformed (INVALID_ARGUMENT)
    ├── TenantMismatch           the request names another tenant than the assertion (PERMISSION_DENIED)
    ├── TenantNotConfigured      no definition is in force for the tenant (FAILED_PRECONDITION)
    ├── AgentNotFound            no such agent (NOT_FOUND)
    ├── AgentNotActive           the agent exists but may not take new tasks (FAILED_PRECONDITION)
    ├── StatusChangeRefused      an illegal lifecycle change (FAILED_PRECONDITION)
    ├── NoAgentAvailable         discovery found no eligible agent (FAILED_PRECONDITION)
    ├── PlanError                a task graph is not a valid DAG (INVALID_ARGUMENT / INTERNAL)
    ├── HandoffRejected          a handoff is outside allowed delegations or loops (PERMISSION_DENIED)
    └── LimitExceeded            a limit or budget was exceeded (RESOURCE_EXHAUSTED); has ``action``
"""

from __future__ import annotations

__all__ = [
    "AgentDependencyError",
    "AgentManifestError",
    "AgentNotActive",
    "AgentNotFound",
    "ConfigError",
    "HandoffRejected",
    "LimitExceeded",
    "NoAgentAvailable",
    "PlanError",
    "RequestInvalid",
    "StatusChangeRefused",
    "SupervisorError",
    "TenantMismatch",
    "TenantNotConfigured",
]


class SupervisorError(Exception):
    """Base of every supervisor-domain error.

    Attributes:
        reason: Stable UPPER_SNAKE code for ``ErrorInfo.reason``.
        field: The request field or data path at fault, if one is.
        message: Human-readable explanation (never contains sensitive values).
    """

    default_reason = "SUPERVISOR_ERROR"

    def __init__(self, message: str, *, reason: str | None = None, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason or self.default_reason
        self.field = field

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"


class ConfigError(SupervisorError):
    """A configuration data file (tenants, projections, evidence rules) is invalid.

    The message names the file and the field; nothing from the file is used.
    """

    default_reason = "CONFIG_INVALID"

    def __init__(
        self,
        message: str,
        *,
        file: str,
        field: str | None = None,
        line: int | None = None,
        reason: str | None = None,
    ) -> None:
        where = file if line is None else f"{file}:{line}"
        at = f" at {field!r}" if field else ""
        super().__init__(f"{where}{at}: {message}", reason=reason, field=field)
        self.file = file
        self.line = line


class AgentManifestError(ConfigError):
    """An agent manifest file is invalid (syntax, a field, a duplicate id, a reference)."""

    default_reason = "AGENT_MANIFEST_INVALID"


class AgentDependencyError(SupervisorError):
    """A capability dependency an agent declares (``"training.getStatus@^2.0"``) is not satisfied.

    ``cause_reason`` is the checker's own reason (e.g. ``DEPENDENCY_VERSION_INCOMPATIBLE``)
    when it gave one.
    """

    default_reason = "AGENT_DEPENDENCY_UNSATISFIED"

    def __init__(
        self,
        message: str,
        *,
        agent_id: str,
        dependency: str,
        file: str | None = None,
        field: str | None = None,
        cause_reason: str | None = None,
    ) -> None:
        super().__init__(message, field=field)
        self.agent_id = agent_id
        self.dependency = dependency
        self.file = file
        self.cause_reason = cause_reason


class RequestInvalid(SupervisorError):
    """The caller's input is malformed; ``field`` names it."""

    default_reason = "REQUEST_INVALID"


class TenantMismatch(SupervisorError):
    """The request text names a tenant other than the one the user assertion grants.

    The text never widens the tenant; the servicer refuses and audits.
    """

    default_reason = "TENANT_MISMATCH"


class TenantNotConfigured(SupervisorError):
    """No tenant definition is in force for the tenant: nothing of it runs (``field`` ``tenant_id``).

    An operator configures a tenant with ``agentmesh tenants apply`` (TenantService.ApplyTenants).
    """

    default_reason = "TENANT_NOT_CONFIGURED"

    def __init__(self, tenant_id: str) -> None:
        super().__init__(f"tenant {tenant_id} is not configured", field="tenant_id")
        self.tenant_id = tenant_id


class AgentNotFound(SupervisorError):
    """No agent with that id is registered."""

    default_reason = "AGENT_NOT_FOUND"


class AgentNotActive(SupervisorError):
    """The agent is registered but its status forbids new tasks (fail closed).

    ``reason`` is ``AGENT_DISABLED``, ``AGENT_RETIRED`` or ``AGENT_NOT_ACTIVE``.
    """

    default_reason = "AGENT_NOT_ACTIVE"

    def __init__(self, message: str, *, agent_id: str, status: str, reason: str | None = None) -> None:
        super().__init__(message, reason=reason)
        self.agent_id = agent_id
        self.status = status


class StatusChangeRefused(SupervisorError):
    """A lifecycle status change is not allowed (e.g. leaving RETIRED)."""

    default_reason = "STATUS_CHANGE_REFUSED"


class NoAgentAvailable(SupervisorError):
    """Discovery found no ACTIVE agent allowed for the tenant that meets the requirement.

    ``excluded`` maps each considered agent id to why it was excluded.
    """

    default_reason = "NO_AGENT_AVAILABLE"

    def __init__(self, message: str, *, excluded: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.excluded = dict(excluded or {})


class PlanError(SupervisorError):
    """A task graph is not a valid DAG.

    ``reason`` is ``GRAPH_CYCLE`` (``cycle`` lists the task ids in order),
    ``GRAPH_DUPLICATE_TASK`` or ``GRAPH_UNKNOWN_TASK``.
    """

    default_reason = "GRAPH_INVALID"

    def __init__(
        self, message: str, *, reason: str | None = None, field: str | None = None, cycle: tuple[str, ...] = ()
    ) -> None:
        super().__init__(message, reason=reason, field=field)
        self.cycle = cycle


class HandoffRejected(SupervisorError):
    """A specialist's handoff request was refused by the supervisor (PRD §20, §22).

    ``reason`` is ``HANDOFF_NOT_ALLOWED`` (target not in the requester's
    allowed delegations), ``HANDOFF_LOOP`` (the target is already in the
    lineage; ``path`` shows it), ``HANDOFF_REPEATED`` (the same handoff was
    already made in this execution) or ``HANDOFF_CORRELATION_MISMATCH``.
    """

    default_reason = "HANDOFF_REJECTED"

    def __init__(
        self,
        message: str,
        *,
        reason: str | None = None,
        source_agent_id: str,
        target_agent_id: str,
        path: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message, reason=reason)
        self.source_agent_id = source_agent_id
        self.target_agent_id = target_agent_id
        self.path = path


class LimitExceeded(SupervisorError):
    """A limit (PRD §21) or budget (PRD §51) would be exceeded; nothing past it runs.

    ``reason`` names the limit: ``MAX_DEPTH_EXCEEDED``, ``MAX_TASKS_EXCEEDED``,
    ``MAX_HANDOFFS_EXCEEDED``, ``MAX_EXECUTION_TIME_EXCEEDED``,
    ``MAX_COST_EXCEEDED``, ``MAX_TOKENS_EXCEEDED`` or ``MAX_MODEL_CALLS_EXCEEDED``.
    ``field`` says where the binding value came from (``limits.max_tasks`` for
    the tenant's configuration, ``budget.max_cost`` for the request's budget).
    ``action`` is ``STOP`` or ``HUMAN_REVIEW``, from the tenant's configuration.
    """

    default_reason = "LIMIT_EXCEEDED"

    def __init__(
        self,
        message: str,
        *,
        reason: str,
        field: str,
        limit: float,
        observed: float,
        action: str,
    ) -> None:
        super().__init__(message, reason=reason, field=field)
        self.limit = limit
        self.observed = observed
        self.action = action
