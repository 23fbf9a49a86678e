"""Plans as DAGs, cycle rejection, handoff validation and loop prevention (PRD §17–22)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from agentmesh.v1 import common_pb2
from supervisor_svc.errors import (
    AgentNotActive,
    HandoffRejected,
    LimitExceeded,
    NoAgentAvailable,
    PlanError,
    RequestInvalid,
)
from supervisor_svc.intent import parse_intent
from supervisor_svc.limits import ExecutionBudget, LimitPolicy, Limits
from supervisor_svc.planner import HandoffRequest, Plan, admit_handoff, build_plan, lineage, stages, validate_graph
from supervisor_svc.registry import AgentRegistry, LifecycleStatus, default_agents_dir
from supervisor_svc.selection import AgentSelector

from .conftest import demo_tenants

USER = common_pb2.UserContext(tenant_id="acme", user_id="alice", session_id="s-1", conversation_id="c-1")
CONDITION_PERMIT_FOUND = "permit_found"
ANALYZE = "Analyze permit WP-10231 and tell me if it can be released"


def _plan(selector: AgentSelector, text: str = ANALYZE, budget: ExecutionBudget | None = None) -> Plan:
    return build_plan(parse_intent(text), execution_id="exe-1", user=USER, correlation_id="corr-1",
                      selector=selector, budget=budget)


def test_analysis_plan_is_work_permit_then_three_in_parallel(selector: AgentSelector) -> None:
    plan = _plan(selector)
    agents = [n.target_agent_id for n in plan.graph.nodes]
    assert agents == ["work-permit-agent", "training-agent", "risk-agent", "compliance-agent"]
    assert plan.stages() == [["exe-1-t1"], ["exe-1-t2", "exe-1-t3", "exe-1-t4"]]
    assert all(e.from_task_id == "exe-1-t1" and e.condition == CONDITION_PERMIT_FOUND for e in plan.graph.edges)
    assert plan.expected == ("work-permit", "training", "risk", "compliance")
    first = plan.task("exe-1-t1")
    assert dict(first.input) == {"permit_id": "WP-10231"}
    assert list(first.required_capabilities) == ["workPermit.get"]
    assert (first.tenant_id, first.user_id, first.session_id, first.conversation_id) == ("acme", "alice", "s-1", "c-1")
    assert first.depth == 1 and first.correlation_id == "corr-1" and first.status == common_pb2.TASK_STATUS_CREATED
    assert len(plan.task("exe-1-t2").input) == 0  # projected at run time
    assert plan.specs["exe-1-t2"].purpose == "training.verify"
    assert [s.agent_id for s in plan.selections["exe-1-t2"].scores] == ["training-agent"]
    assert plan.selection_scores()


def test_status_question_is_one_task(selector: AgentSelector) -> None:
    plan = _plan(selector, "qual o status da WP-10231")
    assert [n.target_agent_id for n in plan.graph.nodes] == ["work-permit-agent"]
    assert plan.stages() == [["exe-1-t1"]] and not plan.graph.edges
    assert plan.specs["exe-1-t1"].purpose == "permit.status"


def test_unknown_intent_is_not_planned(selector: AgentSelector) -> None:
    with pytest.raises(RequestInvalid) as err:
        _plan(selector, "hello there")
    assert err.value.reason == "INTENT_NOT_ACTIONABLE"


def test_disabled_specialist_is_recorded_not_run(selector: AgentSelector, registry: AgentRegistry) -> None:
    registry.set_status("risk-agent", LifecycleStatus.DISABLED, "incident", "ops")
    plan = _plan(selector)
    assert [n.target_agent_id for n in plan.graph.nodes] == ["work-permit-agent", "training-agent",
                                                             "compliance-agent"]
    assert [r.analysis for r in plan.not_run] == ["risk"]
    assert "risk-agent" in plan.not_run[0].reason


def test_without_the_first_stage_nothing_is_planned(selector: AgentSelector, registry: AgentRegistry) -> None:
    registry.set_status("work-permit-agent", LifecycleStatus.DISABLED, "incident", "ops")
    with pytest.raises(NoAgentAvailable):
        _plan(selector)


def test_plan_is_admitted_against_limits(selector: AgentSelector) -> None:
    budget = ExecutionBudget(LimitPolicy(limits=Limits(max_tasks=3)))
    with pytest.raises(LimitExceeded) as err:
        _plan(selector, budget=budget)
    assert err.value.reason == "MAX_TASKS_EXCEEDED"
    assert budget.usage.tasks == 0
    budget = ExecutionBudget(LimitPolicy(limits=Limits(max_cost=3.0)))
    with pytest.raises(LimitExceeded) as err:
        _plan(selector, budget=budget)
    assert err.value.reason == "MAX_COST_EXCEEDED"


# --- edge conditions -------------------------------------------------------------------------------------

def _wp_result(found: bool) -> common_pb2.AgentResult:
    result = common_pb2.AgentResult(task_id="exe-1-t1", agent_id="work-permit-agent",
                                    status=common_pb2.RESULT_STATUS_SUCCESS)
    if found:
        result.result.update({"verdict": "UNKNOWN", "subjects": {}, "permit_found": True,
                              "permit": {"permit_id": "WP-10231"}})
    else:
        result.result.update({"verdict": "UNKNOWN", "subjects": {}, "permit_found": False})
    return result


def test_permit_found_condition(selector: AgentSelector) -> None:
    plan = _plan(selector)
    edge = plan.incoming("exe-1-t2")[0]
    assert plan.edge_holds(edge, {"exe-1-t1": _wp_result(True)})
    assert not plan.edge_holds(edge, {"exe-1-t1": _wp_result(False)})
    assert plan.branch_not_taken(edge, {"exe-1-t1": _wp_result(False)})  # off the path, not missing
    assert not plan.edge_holds(edge, {})
    assert not plan.branch_not_taken(edge, {})  # undetermined: neither branch
    failed = _wp_result(True)
    failed.status = common_pb2.RESULT_STATUS_FAILED
    assert not plan.edge_holds(edge, {"exe-1-t1": failed})
    broken = _wp_result(True)
    del broken.result.fields["permit"]  # breaks the task's contract: required when permit_found
    assert not plan.edge_holds(edge, {"exe-1-t1": broken})
    unknown = common_pb2.TaskEdge(from_task_id="exe-1-t1", to_task_id="exe-1-t2", condition="something_else")
    assert not plan.edge_holds(unknown, {"exe-1-t1": _wp_result(True)})  # fail closed


# --- graphs ----------------------------------------------------------------------------------------------

def _graph(nodes: list[str], edges: list[tuple[str, str]]) -> common_pb2.AgentTaskGraph:
    return common_pb2.AgentTaskGraph(
        graph_id="g", nodes=[common_pb2.AgentTask(task_id=n) for n in nodes],
        edges=[common_pb2.TaskEdge(from_task_id=a, to_task_id=b) for a, b in edges])


@pytest.mark.parametrize(
    ("nodes", "edges", "cycle"),
    [
        (["a", "b"], [("a", "b"), ("b", "a")], ("a", "b", "a")),
        (["a", "b", "c"], [("a", "b"), ("b", "c"), ("c", "a")], ("a", "b", "c", "a")),
        (["a"], [("a", "a")], ("a", "a")),
        (["a", "b", "c", "d"], [("a", "b"), ("b", "c"), ("c", "d"), ("d", "b")], ("b", "c", "d", "b")),
    ],
)
def test_cycles_are_rejected(nodes: list[str], edges: list[tuple[str, str]], cycle: tuple[str, ...]) -> None:
    with pytest.raises(PlanError) as err:
        validate_graph(_graph(nodes, edges))
    assert err.value.reason == "GRAPH_CYCLE" and err.value.cycle == cycle
    with pytest.raises(PlanError):
        stages(_graph(nodes, edges))


@pytest.mark.parametrize(
    ("nodes", "edges", "reason", "field"),
    [
        (["a", "a"], [], "GRAPH_DUPLICATE_TASK", "nodes[1].task_id"),
        (["a"], [("a", "zzz")], "GRAPH_UNKNOWN_TASK", "edges[0].to_task_id"),
        ([""], [], "GRAPH_INVALID", "nodes[0].task_id"),
    ],
)
def test_malformed_graphs(nodes: list[str], edges: list[tuple[str, str]], reason: str, field: str) -> None:
    with pytest.raises(PlanError) as err:
        validate_graph(_graph(nodes, edges))
    assert (err.value.reason, err.value.field) == (reason, field)


def test_stages_of_a_diamond() -> None:
    g = _graph(["a", "b", "c", "d"], [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")])
    assert stages(g) == [["a"], ["b", "c"], ["d"]]


# --- handoffs --------------------------------------------------------------------------------------------

@pytest.fixture()
def loopy(tmp_path: Path) -> Iterator[tuple[AgentRegistry, AgentSelector]]:
    """Manifests where delegations could form loops: work-permit → training → risk → work-permit."""
    agents = tmp_path / "agents"
    shutil.copytree(default_agents_dir(), agents)
    for name, targets in {"training-agent": ["risk-agent", "work-permit-agent"],
                          "risk-agent": ["work-permit-agent"]}.items():
        path = agents / f"{name}.yaml"
        data = yaml.safe_load(path.read_text())
        data["allowed_delegations"] = targets
        path.write_text(yaml.safe_dump(data))
    with AgentRegistry(tmp_path / "db", agents) as reg:
        yield reg, AgentSelector(reg, demo_tenants())


def _handoff(from_task: str, target: str, correlation: str = "corr-1",
             caps: tuple[str, ...] = ()) -> HandoffRequest:
    return HandoffRequest(from_task_id=from_task, target_agent_id=target, objective="help", required_capabilities=caps,
                          correlation_id=correlation, purpose="training.verify")


def test_allowed_handoff_becomes_a_child_task(loopy: tuple[AgentRegistry, AgentSelector]) -> None:
    registry, selector = loopy
    plan = _plan(selector)
    budget = ExecutionBudget(LimitPolicy())
    task = admit_handoff(plan, _handoff("exe-1-t1", "training-agent", caps=("training.getStatus",)),
                         lookup=registry.ensure_active, execution_correlation_id="corr-1", budget=budget)
    assert task.task_id == "exe-1-t5" and task.parent_task_id == "exe-1-t1" and task.depth == 2
    assert task.source_agent_id == "work-permit-agent" and task.target_agent_id == "training-agent"
    assert task.tenant_id == "acme" and task.correlation_id == "corr-1"
    assert lineage(plan.graph, "exe-1-t5") == ("work-permit-agent", "training-agent")
    assert budget.usage.handoffs == 1
    assert plan.specs["exe-1-t5"].purpose == "training.verify"


def test_a_b_a_is_rejected(loopy: tuple[AgentRegistry, AgentSelector]) -> None:
    registry, selector = loopy
    plan = _plan(selector)
    admit_handoff(plan, _handoff("exe-1-t1", "training-agent"), lookup=registry.ensure_active,
                  execution_correlation_id="corr-1")
    with pytest.raises(HandoffRejected) as err:
        admit_handoff(plan, _handoff("exe-1-t5", "work-permit-agent"), lookup=registry.ensure_active,
                      execution_correlation_id="corr-1")
    assert err.value.reason == "HANDOFF_LOOP"
    assert err.value.path == ("work-permit-agent", "training-agent", "work-permit-agent")
    assert "work-permit-agent -> training-agent -> work-permit-agent" in err.value.message


def test_a_b_c_a_is_rejected(loopy: tuple[AgentRegistry, AgentSelector]) -> None:
    registry, selector = loopy
    plan = _plan(selector)
    kw = {"lookup": registry.ensure_active, "execution_correlation_id": "corr-1"}
    admit_handoff(plan, _handoff("exe-1-t1", "training-agent"), **kw)  # type: ignore[arg-type]
    admit_handoff(plan, _handoff("exe-1-t5", "risk-agent"), **kw)  # type: ignore[arg-type]
    with pytest.raises(HandoffRejected) as err:
        admit_handoff(plan, _handoff("exe-1-t6", "work-permit-agent"), **kw)  # type: ignore[arg-type]
    assert err.value.reason == "HANDOFF_LOOP"
    assert err.value.path == ("work-permit-agent", "training-agent", "risk-agent", "work-permit-agent")


def test_handoff_outside_allowed_delegations_is_rejected(registry: AgentRegistry, selector: AgentSelector) -> None:
    plan = _plan(selector)
    with pytest.raises(HandoffRejected) as err:  # training-agent may hand off to nobody
        admit_handoff(plan, _handoff("exe-1-t2", "risk-agent"), lookup=registry.ensure_active,
                      execution_correlation_id="corr-1")
    assert err.value.reason == "HANDOFF_NOT_ALLOWED"
    assert (err.value.source_agent_id, err.value.target_agent_id) == ("training-agent", "risk-agent")
    assert len(plan.graph.nodes) == 4


@pytest.mark.parametrize(
    ("request_", "reason"),
    [
        (_handoff("exe-1-t1", "training-agent", correlation="other"), "HANDOFF_CORRELATION_MISMATCH"),
        (_handoff("exe-9-t1", "training-agent"), "HANDOFF_SOURCE_UNKNOWN"),
        (_handoff("exe-1-t1", "training-agent", caps=("workPermit.release",)), "HANDOFF_CAPABILITY_MISMATCH"),
    ],
)
def test_other_handoff_refusals(
    registry: AgentRegistry, selector: AgentSelector, request_: HandoffRequest, reason: str
) -> None:
    plan = _plan(selector)
    with pytest.raises(HandoffRejected) as err:
        admit_handoff(plan, request_, lookup=registry.ensure_active, execution_correlation_id="corr-1")
    assert err.value.reason == reason


def test_repeated_handoff_is_rejected(registry: AgentRegistry, selector: AgentSelector) -> None:
    plan = _plan(selector)
    kw = {"lookup": registry.ensure_active, "execution_correlation_id": "corr-1"}
    admit_handoff(plan, _handoff("exe-1-t1", "training-agent"), **kw)  # type: ignore[arg-type]
    with pytest.raises(HandoffRejected) as err:
        admit_handoff(plan, _handoff("exe-1-t1", "training-agent"), **kw)  # type: ignore[arg-type]
    assert err.value.reason == "HANDOFF_REPEATED"


def test_handoff_to_disabled_agent_is_refused(registry: AgentRegistry, selector: AgentSelector) -> None:
    plan = _plan(selector)
    registry.set_status("training-agent", LifecycleStatus.DISABLED, "kill switch", "ops")
    with pytest.raises(AgentNotActive):
        admit_handoff(plan, _handoff("exe-1-t1", "training-agent"), lookup=registry.ensure_active,
                      execution_correlation_id="corr-1")


@pytest.mark.parametrize(
    ("limits", "reason"),
    [(Limits(max_depth=1), "MAX_DEPTH_EXCEEDED"), (Limits(max_handoffs=0), "MAX_HANDOFFS_EXCEEDED"),
     (Limits(max_tasks=4), "MAX_TASKS_EXCEEDED")],
)
def test_handoff_limits(registry: AgentRegistry, selector: AgentSelector, limits: Limits, reason: str) -> None:
    plan = _plan(selector)
    budget = ExecutionBudget(LimitPolicy(limits=limits))
    if limits.max_tasks == 4:
        budget.admit_plan([(1, 1.0)] * 4)  # the plan's own four tasks
    with pytest.raises(LimitExceeded) as err:
        admit_handoff(plan, _handoff("exe-1-t1", "training-agent"), lookup=registry.ensure_active,
                      execution_correlation_id="corr-1", budget=budget)
    assert err.value.reason == reason
    assert len(plan.graph.nodes) == 4  # nothing was added
