"""Limits (PRD §21) and budgets (PRD §51): each limit stops with its own reason and configured action."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentmesh.v1 import common_pb2
from agentmesh.v1 import tenant_service_pb2 as tenant_pb2
from supervisor_svc.errors import ConfigError, LimitExceeded, RequestInvalid, TenantNotConfigured
from supervisor_svc.limits import ExecutionBudget, LimitAction, LimitPolicy, Limits, Usage
from supervisor_svc.tenants import TenantDirectory, load_limit_defaults


def _policy(**limits: object) -> LimitPolicy:
    return LimitPolicy(limits=Limits(**limits))  # type: ignore[arg-type]


def test_defaults() -> None:
    limits = Limits()
    assert (limits.max_depth, limits.max_tasks, limits.max_handoffs) == (5, 30, 10)


def test_max_depth() -> None:
    budget = ExecutionBudget(_policy(max_depth=2))
    budget.admit_task(depth=2, cost=0)
    with pytest.raises(LimitExceeded) as err:
        budget.admit_task(depth=3, cost=0)
    assert err.value.reason == "MAX_DEPTH_EXCEEDED" and err.value.field == "limits.max_depth"
    assert err.value.action == "STOP" and (err.value.limit, err.value.observed) == (2, 3)


def test_max_tasks_leaves_usage_unchanged() -> None:
    budget = ExecutionBudget(_policy(max_tasks=2))
    budget.admit_task(depth=1, cost=1)
    budget.admit_task(depth=1, cost=1)
    with pytest.raises(LimitExceeded) as err:
        budget.admit_task(depth=1, cost=1)
    assert err.value.reason == "MAX_TASKS_EXCEEDED"
    assert budget.usage == Usage(tasks=2, cost=2.0, max_depth=1)


def test_max_handoffs_only_counts_handoffs() -> None:
    budget = ExecutionBudget(_policy(max_handoffs=1))
    budget.admit_task(depth=1, cost=0)
    budget.admit_task(depth=2, cost=0, handoff=True)
    with pytest.raises(LimitExceeded) as err:
        budget.admit_task(depth=2, cost=0, handoff=True)
    assert err.value.reason == "MAX_HANDOFFS_EXCEEDED"


def test_max_cost() -> None:
    budget = ExecutionBudget(_policy(max_cost=2.5))
    budget.admit_task(depth=1, cost=2.0)
    with pytest.raises(LimitExceeded) as err:
        budget.admit_task(depth=1, cost=1.0)
    assert err.value.reason == "MAX_COST_EXCEEDED" and err.value.observed == 3.0


def test_max_execution_time() -> None:
    budget = ExecutionBudget(_policy(max_execution_time_ms=1000))
    budget.check_time(1000)
    assert budget.remaining_ms(400) == 600
    with pytest.raises(LimitExceeded) as err:
        budget.check_time(1001)
    assert err.value.reason == "MAX_EXECUTION_TIME_EXCEEDED"


def test_tokens_and_model_calls_from_request_budget() -> None:
    budget = ExecutionBudget(LimitPolicy(), common_pb2.AgentBudget(max_tokens=100, max_model_calls=1))
    budget.record_model_usage(tokens=60, model_calls=1)
    with pytest.raises(LimitExceeded) as err:
        budget.record_model_usage(tokens=50)
    assert err.value.reason == "MAX_TOKENS_EXCEEDED" and err.value.field == "budget.max_tokens"
    calls = ExecutionBudget(LimitPolicy(), common_pb2.AgentBudget(max_model_calls=1))
    calls.record_model_usage(model_calls=1)
    with pytest.raises(LimitExceeded) as err:
        calls.record_model_usage(model_calls=1)
    assert err.value.reason == "MAX_MODEL_CALLS_EXCEEDED"


def test_request_budget_only_tightens() -> None:
    tighter = ExecutionBudget(_policy(max_cost=10.0, max_handoffs=5),
                              common_pb2.AgentBudget(max_cost=1.0, max_delegations=0, max_execution_time_ms=500))
    assert tighter.limits.max_cost == 1.0 and tighter.limits.max_execution_time_ms == 500
    assert tighter.limits.max_handoffs == 5  # 0 means "not set" in proto3
    with pytest.raises(LimitExceeded) as err:
        tighter.admit_task(depth=1, cost=2.0)
    assert err.value.field == "budget.max_cost"
    looser = ExecutionBudget(_policy(max_cost=10.0), common_pb2.AgentBudget(max_cost=1000.0, max_delegations=50))
    assert looser.limits.max_cost == 10.0 and looser.limits.max_handoffs == 10


def test_delegation_budget_binds_handoffs() -> None:
    budget = ExecutionBudget(LimitPolicy(), common_pb2.AgentBudget(max_delegations=1))
    budget.admit_task(depth=2, cost=0, handoff=True)
    with pytest.raises(LimitExceeded) as err:
        budget.admit_task(depth=2, cost=0, handoff=True)
    assert (err.value.reason, err.value.field) == ("MAX_HANDOFFS_EXCEEDED", "budget.max_delegations")


def test_negative_request_budget_is_invalid() -> None:
    with pytest.raises(RequestInvalid) as err:
        ExecutionBudget(LimitPolicy(), common_pb2.AgentBudget(max_cost=-1))
    assert err.value.field == "budget.max_cost"


def test_admit_plan_is_all_or_nothing() -> None:
    budget = ExecutionBudget(_policy(max_tasks=3))
    with pytest.raises(LimitExceeded):
        budget.admit_plan([(1, 1.0)] * 4)
    assert budget.usage == Usage()


def test_action_per_reason_from_configuration() -> None:
    policy = LimitPolicy(limits=Limits(max_cost=1.0, max_tasks=1), default_action=LimitAction.STOP,
                         actions={"MAX_COST_EXCEEDED": LimitAction.HUMAN_REVIEW})
    budget = ExecutionBudget(policy)
    with pytest.raises(LimitExceeded) as err:
        budget.admit_task(depth=1, cost=5.0)
    assert err.value.action == "HUMAN_REVIEW"
    budget.admit_task(depth=1, cost=0.5)
    with pytest.raises(LimitExceeded) as err:
        budget.admit_task(depth=1, cost=0.1)
    assert err.value.action == "STOP"


def test_task_budget_is_what_is_left() -> None:
    budget = ExecutionBudget(_policy(max_cost=4.0, max_handoffs=3, max_execution_time_ms=1000))
    budget.admit_task(depth=1, cost=1.0)
    tb = budget.task_budget(elapsed_ms=300)
    assert (tb.max_cost, tb.max_delegations, tb.max_execution_time_ms) == (3.0, 3, 700)


def test_resume_from_usage() -> None:
    budget = ExecutionBudget(_policy(max_tasks=2), usage=Usage(tasks=2))
    with pytest.raises(LimitExceeded):
        budget.admit_task(depth=1, cost=0)


# --- tenant configuration ---------------------------------------------------------------------------------

def test_demo_tenants(tenants: TenantDirectory) -> None:
    acme = tenants.get("acme")
    assert "training-agent" in acme.allowed_agents
    assert acme.limit_policy.action_for("MAX_COST_EXCEEDED") is LimitAction.HUMAN_REVIEW
    assert acme.limit_policy.action_for("MAX_TASKS_EXCEEDED") is LimitAction.STOP
    assert tenants.get("globex").limit_policy.limits.max_tasks == 20
    with pytest.raises(TenantNotConfigured) as err:
        tenants.get("initech")
    assert (err.value.reason, err.value.field, err.value.message) == (
        "TENANT_NOT_CONFIGURED", "tenant_id", "tenant initech is not configured")


def test_tenant_limits_override_defaults_field_by_field(tmp_path: Path) -> None:
    cfg = tmp_path / "limits.yaml"
    cfg.write_text("limits: {max_tasks: 8, max_depth: 3}\non_exceeded: {default: HUMAN_REVIEW}\n")
    definition = tenant_pb2.TenantDefinition(tenant_id="acme", display_name="ACME", allowed_agents=["training-agent"],
                                             on_exceeded={"MAX_COST_EXCEEDED": tenant_pb2.LIMIT_ACTION_STOP})
    definition.limits.max_tasks = 4
    acme = TenantDirectory.of([definition], load_limit_defaults(cfg)).get("acme")
    assert (acme.limit_policy.limits.max_tasks, acme.limit_policy.limits.max_depth) == (4, 3)
    assert acme.limit_policy.default_action is LimitAction.HUMAN_REVIEW
    assert acme.limit_policy.action_for("MAX_COST_EXCEEDED") is LimitAction.STOP
    assert acme.allowed_agents == frozenset({"training-agent"})


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("limits: {max_tasks: -1}\n", "limits.max_tasks"),
        ("on_exceeded: {MAX_FUN: STOP}\n", "on_exceeded.MAX_FUN"),
        ("on_exceeded: {default: PANIC}\n", "on_exceeded.default"),
        ("tenants: {acme: {}}\n", "tenants"),
    ],
)
def test_bad_defaults_file_names_field(tmp_path: Path, text: str, field: str) -> None:
    cfg = tmp_path / "limits.yaml"
    cfg.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_limit_defaults(cfg)
    assert err.value.field == field and "limits.yaml" in str(err.value)


# --- model budgets ------------------------------------------------------------------------------------

def test_model_budgets_go_into_grants_and_shrink_with_use() -> None:
    budget = ExecutionBudget(LimitPolicy(Limits(max_tokens=1000, max_model_calls=3, max_model_cost=0.2)),
                             common_pb2.AgentBudget(max_tokens=800))
    task, execution = budget.grant_budgets()
    assert (execution.max_tokens, execution.max_model_calls, execution.max_model_cost) == (800, 3, 0.2)
    assert (task.max_tokens, task.max_model_calls) == (800, 3)
    budget.record_model_usage(tokens=300, model_calls=1, cost=0.05)
    task, execution = budget.grant_budgets()
    assert (task.max_tokens, task.max_model_calls, round(task.max_model_cost, 6)) == (500, 2, 0.15)
    assert execution.max_tokens == 800  # the whole execution's limit stays what it is


def test_no_model_limit_means_no_model_use() -> None:
    task, execution = ExecutionBudget(LimitPolicy(Limits())).grant_budgets()
    assert (task.max_tokens, task.max_model_calls, task.max_model_cost) == (0, 0, 0.0)
    assert (execution.max_tokens, execution.max_model_calls, execution.max_model_cost) == (0, 0, 0.0)


def test_model_cost_is_a_limit() -> None:
    budget = ExecutionBudget(LimitPolicy(Limits(max_model_cost=0.1), actions={"MAX_MODEL_COST_EXCEEDED":
                                                                             LimitAction.HUMAN_REVIEW}))
    budget.record_model_usage(cost=0.08, model_calls=1)
    with pytest.raises(LimitExceeded) as caught:
        budget.record_model_usage(cost=0.03, model_calls=1)
    assert caught.value.reason == "MAX_MODEL_COST_EXCEEDED" and caught.value.action == "HUMAN_REVIEW"
    with pytest.raises(RequestInvalid):
        ExecutionBudget(LimitPolicy(Limits(max_model_cost=0.1)), common_pb2.AgentBudget(max_model_cost=-1))


@pytest.mark.parametrize("reason", ["MAX_TOKENS_EXCEEDED", "MAX_MODEL_CALLS_EXCEEDED", "MAX_MODEL_COST_EXCEEDED"])
def test_a_refused_model_call_is_the_tenants_limit(reason: str) -> None:
    policy = LimitPolicy(Limits(max_tokens=100, max_model_calls=1, max_model_cost=0.01),
                         actions={reason: LimitAction.HUMAN_REVIEW})
    err = ExecutionBudget(policy).model_budget_exhausted(reason)
    assert err is not None and err.reason == reason and err.action == "HUMAN_REVIEW"
    assert ExecutionBudget(policy).model_budget_exhausted("MODEL_TIMEOUT") is None
