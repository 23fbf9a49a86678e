"""Plans as task DAGs (PRD §17–19), handoff validation (§20) and loop prevention (§22).

A permit analysis (``ANALYZE_PERMIT``) is two stages::

    t1 work-permit ──permit_found──┬─> t2 training
                                   ├─> t3 risk          (in parallel)
                                   └─> t4 compliance

If the permit is not found (in the caller's tenant) the condition fails, the
other tasks are SKIPPED and the answer says so. A status question
(``PERMIT_STATUS``) is one task for the work-permit agent — the simple stays
simple (§49). Each task's agent is chosen by the selector (discovery +
explainable scores); an analysis no ACTIVE agent can take is recorded in
``Plan.not_run`` (it will be reported missing, never guessed), except the
first stage, without which nothing can run (:class:`NoAgentAvailable`).

Graphs must be DAGs: :func:`validate_graph` rejects cycles (``GRAPH_CYCLE``,
with the cycle), duplicate task ids and edges to unknown tasks;
:func:`stages` gives the executor the topological stages.

A handoff a specialist asks for (a ``RequestedAction`` with a
``target_agent_id``) goes through :func:`admit_handoff`: the target must not
already be in the task's lineage (A→A, A→B→A, A→B→C→A are loops); it must be in
the requesting agent's ``allowed_delegations``; the same task may not ask for the
same target twice; the correlation id must be the execution's; the target
must be ACTIVE and hold the requested capabilities; and the limits (depth,
tasks, handoffs, cost) must allow it. A handoff task is linked to its parent by
``parent_task_id`` (no edge: the parent waits for it, so an edge would close a
cycle) and gets depth parent + 1.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from agentmesh.v1 import common_pb2
from supervisor_svc.contract import CONDITION_PERMIT_FOUND, Analysis
from supervisor_svc.errors import HandoffRejected, NoAgentAvailable, PlanError, RequestInvalid
from supervisor_svc.intent import Intent, IntentKind
from supervisor_svc.limits import ExecutionBudget
from supervisor_svc.registry import AgentEntry
from supervisor_svc.selection import Requirement, Selection

__all__ = [
    "ANALYSIS_ROLES",
    "STATUS_ROLE",
    "SUPERVISOR_AGENT_ID",
    "HandoffRequest",
    "NotRun",
    "Plan",
    "Role",
    "Selector",
    "TaskSpec",
    "admit_handoff",
    "build_plan",
    "lineage",
    "stages",
    "validate_graph",
]

SUPERVISOR_AGENT_ID = "work-permit-supervisor"
"""``source_agent_id`` of the tasks the supervisor creates itself (PRD §71)."""


class Selector(Protocol):
    """Chooses an agent for a requirement (implemented by :class:`~supervisor_svc.selection.AgentSelector`)."""

    def select(self, tenant_id: str, requirement: Requirement) -> Selection:
        """The chosen agent and all candidates' scores; raises NoAgentAvailable."""
        ...


@dataclass(frozen=True)
class Role:
    """What one analysis needs and what its task is for."""

    analysis: Analysis
    requirement: Requirement
    purpose: str
    """Context-projection purpose (see :mod:`supervisor_svc.projection`)."""
    objective: str
    """Task objective; ``{permit}`` is replaced by the permit id."""


ANALYSIS_ROLES: tuple[Role, ...] = (
    Role(Analysis.WORK_PERMIT, Requirement(("work-permit",), ("workPermit.get",)), "permit.assess",
         "Read permit {permit} and assess whether its own state allows release."),
    Role(Analysis.TRAINING, Requirement(("training",), ("training.getStatus",)), "training.verify",
         "Verify that every worker of permit {permit} holds each required training, valid for the permit's window."),
    Role(Analysis.RISK, Requirement(("risk",), ("risk.evaluate",)), "risk.assess",
         "Evaluate the registered hazards and controls of permit {permit}."),
    Role(Analysis.COMPLIANCE, Requirement(("compliance",), ("compliance.getChecklist",)), "compliance.check",
         "Check the compliance checklists of permit {permit}."),
)
"""The roles of a permit analysis; the first one is the first stage."""

STATUS_ROLE = Role(Analysis.WORK_PERMIT, Requirement(("work-permit",), ("workPermit.get",)), "permit.status",
                   "Report the status of permit {permit}.")


@dataclass(frozen=True)
class TaskSpec:
    """What the executor needs to know about a task beyond the AgentTask message."""

    task_id: str
    analysis: Analysis
    purpose: str
    """Projection purpose for this task's input."""
    agent: AgentEntry


@dataclass(frozen=True)
class NotRun:
    """An analysis the plan could not assign; reported as missing, never guessed."""

    analysis: Analysis
    reason: str


@dataclass
class Plan:
    """A validated plan: the graph plus what the executor and aggregator need."""

    intent: Intent
    execution_id: str
    graph: common_pb2.AgentTaskGraph
    specs: dict[str, TaskSpec]
    """By task id."""
    selections: dict[str, Selection]
    """By task id: the chosen agent and every candidate's score."""
    expected: tuple[Analysis, ...]
    """The analyses the answer needs (planned or not)."""
    not_run: list[NotRun] = field(default_factory=list)

    def stages(self) -> list[list[str]]:
        """Topological stages of the graph (see :func:`stages`)."""
        return stages(self.graph)

    def task(self, task_id: str) -> common_pb2.AgentTask:
        """The AgentTask message of a task id.

        Raises:
            PlanError: ``GRAPH_UNKNOWN_TASK``.
        """
        for node in self.graph.nodes:
            if node.task_id == task_id:
                return node
        raise PlanError(f"no task {task_id!r} in the plan", reason="GRAPH_UNKNOWN_TASK", field="task_id")

    def incoming(self, task_id: str) -> list[common_pb2.TaskEdge]:
        """The edges into a task; the executor runs it only if every condition holds."""
        return [e for e in self.graph.edges if e.to_task_id == task_id]

    def selection_scores(self) -> list[common_pb2.AgentSelectionScore]:
        """Every selection score, task by task, for ``Execution.selection_scores``."""
        return [s for task_id in self.specs for s in self.selections[task_id].scores]


def _task(
    task_id: str, role: Role, agent: AgentEntry, *, execution_id: str, user: common_pb2.UserContext,
    correlation_id: str, permit_id: str, with_input: bool,
) -> common_pb2.AgentTask:
    task = common_pb2.AgentTask(
        task_id=task_id, execution_id=execution_id, source_agent_id=SUPERVISOR_AGENT_ID,
        target_agent_id=agent.agent_id, tenant_id=user.tenant_id, user_id=user.user_id,
        session_id=user.session_id, conversation_id=user.conversation_id,
        objective=role.objective.format(permit=permit_id),
        required_capabilities=role.requirement.required_capabilities,
        priority=common_pb2.TASK_PRIORITY_NORMAL, status=common_pb2.TASK_STATUS_CREATED, depth=1,
        correlation_id=correlation_id,
    )
    if with_input:
        # The first stage only needs the permit id; later stages get their projection at run time.
        task.input.update({"permit_id": permit_id})
    return task


def build_plan(
    intent: Intent,
    *,
    execution_id: str,
    user: common_pb2.UserContext,
    correlation_id: str,
    selector: Selector,
    budget: ExecutionBudget | None = None,
) -> Plan:
    """Build and validate the plan for an intent.

    Task ids are ``"<execution_id>-t<n>"``. Stage-two tasks carry no input yet:
    the executor projects the work-permit result into them (purpose in ``specs``).

    Args:
        intent: A parsed, actionable intent.
        execution_id: The execution the tasks belong to.
        user: The verified user context (tenant, user, session, conversation).
        correlation_id: Shared by every task of the execution.
        selector: Chooses the agent of each task.
        budget: If given, every task is admitted against the limits (all or nothing).

    Raises:
        RequestInvalid: ``INTENT_NOT_ACTIONABLE`` (field ``request_text``).
        NoAgentAvailable: no agent for the first stage.
        LimitExceeded: the plan alone exceeds a limit (e.g. ``MAX_TASKS_EXCEEDED``).
    """
    if not intent.actionable or intent.permit_id is None:
        raise RequestInvalid(intent.message, reason="INTENT_NOT_ACTIONABLE", field="request_text")
    permit_id = intent.permit_id
    roles = (STATUS_ROLE,) if intent.kind is IntentKind.PERMIT_STATUS else ANALYSIS_ROLES
    graph = common_pb2.AgentTaskGraph(graph_id=f"{execution_id}-graph")
    specs: dict[str, TaskSpec] = {}
    selections: dict[str, Selection] = {}
    not_run: list[NotRun] = []
    first_id = ""
    for role in roles:
        try:
            selection = selector.select(user.tenant_id, role.requirement)
        except NoAgentAvailable as exc:
            if not specs:
                raise  # without the first stage nothing can run
            # Name the agents that would have fit but are switched off or not allowed: that is the news.
            blocked = [f"{a} {why}" for a, why in sorted(exc.excluded.items())
                       if why.startswith(("NOT_ACTIVE", "TENANT_NOT_ALLOWED"))]
            detail = f" ({'; '.join(blocked)})" if blocked else ""
            not_run.append(NotRun(role.analysis, f"NO_AGENT_AVAILABLE: {exc.message}{detail}"))
            continue
        task_id = f"{execution_id}-t{len(specs) + 1}"
        graph.nodes.append(_task(
            task_id, role, selection.agent, execution_id=execution_id, user=user,
            correlation_id=correlation_id, permit_id=permit_id, with_input=not specs,
        ))
        if specs:
            graph.edges.append(common_pb2.TaskEdge(
                from_task_id=first_id, to_task_id=task_id, condition=CONDITION_PERMIT_FOUND))
        else:
            first_id = task_id
        specs[task_id] = TaskSpec(task_id, role.analysis, role.purpose, selection.agent)
        selections[task_id] = selection
    validate_graph(graph)
    if budget is not None:
        budget.admit_plan([(node.depth, specs[node.task_id].agent.manifest.cost) for node in graph.nodes])
    return Plan(intent, execution_id, graph, specs, selections, tuple(r.analysis for r in roles), not_run)


# --- graph checks ----------------------------------------------------------------------------------

def _adjacency(graph: common_pb2.AgentTaskGraph) -> tuple[list[str], dict[str, list[str]]]:
    order: list[str] = []
    for i, node in enumerate(graph.nodes):
        if not node.task_id:
            raise PlanError("a task has no id", reason="GRAPH_INVALID", field=f"nodes[{i}].task_id")
        if node.task_id in order:
            raise PlanError(f"task id {node.task_id!r} appears twice", reason="GRAPH_DUPLICATE_TASK",
                            field=f"nodes[{i}].task_id")
        order.append(node.task_id)
    known = set(order)
    children: dict[str, list[str]] = {t: [] for t in order}
    for i, edge in enumerate(graph.edges):
        for name, value in (("from_task_id", edge.from_task_id), ("to_task_id", edge.to_task_id)):
            if value not in known:
                raise PlanError(f"edge names unknown task {value!r}", reason="GRAPH_UNKNOWN_TASK",
                                field=f"edges[{i}].{name}")
        children[edge.from_task_id].append(edge.to_task_id)
    return order, children


def _find_cycle(order: list[str], children: dict[str, list[str]]) -> tuple[str, ...] | None:
    white, grey, black = 0, 1, 2
    color = dict.fromkeys(order, white)
    stack: list[str] = []

    def visit(node: str) -> tuple[str, ...] | None:
        color[node] = grey
        stack.append(node)
        for child in children[node]:
            if color[child] == grey:
                return (*stack[stack.index(child):], child)
            if color[child] == white:
                found = visit(child)
                if found:
                    return found
        stack.pop()
        color[node] = black
        return None

    for node in order:
        if color[node] == white:
            found = visit(node)
            if found:
                return found
    return None


def validate_graph(graph: common_pb2.AgentTaskGraph) -> None:
    """Check that a graph is a DAG of uniquely named tasks (PRD §19).

    Raises:
        PlanError: ``GRAPH_CYCLE`` (``cycle`` = the task ids around it, first repeated last),
            ``GRAPH_DUPLICATE_TASK``, ``GRAPH_UNKNOWN_TASK`` or ``GRAPH_INVALID``.
    """
    order, children = _adjacency(graph)
    cycle = _find_cycle(order, children)
    if cycle is not None:
        raise PlanError(f"the task graph has a cycle: {' -> '.join(cycle)}", reason="GRAPH_CYCLE",
                        field="edges", cycle=cycle)


def stages(graph: common_pb2.AgentTaskGraph) -> list[list[str]]:
    """Topological stages: every task's predecessors are in earlier stages.

    Tasks of one stage are independent and may run in parallel; within a stage
    they keep the graph's node order, so the result is deterministic.

    Raises:
        PlanError: as :func:`validate_graph`.
    """
    validate_graph(graph)
    order, children = _adjacency(graph)
    indegree = dict.fromkeys(order, 0)
    for kids in children.values():
        for kid in kids:
            indegree[kid] += 1
    result: list[list[str]] = []
    current = [t for t in order if indegree[t] == 0]
    while current:
        result.append(current)
        released: set[str] = set()
        for task in current:
            for kid in children[task]:
                indegree[kid] -= 1
                if indegree[kid] == 0:
                    released.add(kid)
        current = [t for t in order if t in released]
    return result


# --- handoffs ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class HandoffRequest:
    """A specialist's request that another agent take part of its work (PRD §20)."""

    from_task_id: str
    """The task of the requesting agent."""
    target_agent_id: str
    objective: str
    required_capabilities: tuple[str, ...]
    correlation_id: str
    purpose: str
    """Projection purpose of the new task; one the projection config does not know gets no context."""
    reason: str = ""


def lineage(graph: common_pb2.AgentTaskGraph, task_id: str) -> tuple[str, ...]:
    """The agents from the first task of the chain down to ``task_id``, following ``parent_task_id``.

    Raises:
        PlanError: ``GRAPH_UNKNOWN_TASK``, or ``GRAPH_CYCLE`` if parent links loop.
    """
    by_id = {n.task_id: n for n in graph.nodes}
    chain: list[str] = []
    seen: set[str] = set()
    current: str = task_id
    while current:
        node = by_id.get(current)
        if node is None:
            raise PlanError(f"no task {current!r} in the graph", reason="GRAPH_UNKNOWN_TASK", field="task_id")
        if current in seen:
            raise PlanError("parent links form a cycle", reason="GRAPH_CYCLE", field="parent_task_id")
        seen.add(current)
        chain.append(node.target_agent_id)
        current = node.parent_task_id
    return tuple(reversed(chain))


def admit_handoff(
    plan: Plan,
    request: HandoffRequest,
    *,
    lookup: Callable[[str], AgentEntry],
    execution_correlation_id: str,
    budget: ExecutionBudget | None = None,
    task_id: str | None = None,
) -> common_pb2.AgentTask:
    """Validate a handoff request and, if admitted, add its task to the plan.

    Args:
        plan: The execution's plan (the new task is appended to it).
        request: The handoff request.
        lookup: Current agent entries — pass ``registry.ensure_active`` so a
            DISABLED or unknown target is refused at once.
        execution_correlation_id: The execution's correlation id.
        budget: The execution's limits; the new task counts as a task and a handoff.
        task_id: The new task's id (default ``<execution_id>-t<n>``, n = the plan's task count + 1).

    Returns:
        The new task (depth = parent's + 1, ``parent_task_id`` set, ``source_agent_id`` the requester).

    Raises:
        HandoffRejected: ``HANDOFF_SOURCE_UNKNOWN``, ``HANDOFF_CORRELATION_MISMATCH``,
            ``HANDOFF_NOT_ALLOWED``, ``HANDOFF_LOOP``, ``HANDOFF_REPEATED``,
            ``HANDOFF_CAPABILITY_MISMATCH``.
        AgentNotFound / AgentNotActive: from ``lookup``.
        LimitExceeded: ``MAX_DEPTH_EXCEEDED``, ``MAX_TASKS_EXCEEDED``, ``MAX_HANDOFFS_EXCEEDED``,
            ``MAX_COST_EXCEEDED``.
    """
    target = request.target_agent_id
    by_id = {n.task_id: n for n in plan.graph.nodes}
    parent = by_id.get(request.from_task_id)
    if parent is None:
        raise HandoffRejected(f"no task {request.from_task_id!r} in this execution",
                              reason="HANDOFF_SOURCE_UNKNOWN", source_agent_id="", target_agent_id=target)
    source = parent.target_agent_id

    def reject(reason: str, message: str, path: tuple[str, ...] = ()) -> HandoffRejected:
        return HandoffRejected(message, reason=reason, source_agent_id=source, target_agent_id=target, path=path)

    if request.correlation_id != execution_correlation_id or parent.correlation_id != execution_correlation_id:
        raise reject("HANDOFF_CORRELATION_MISMATCH", "the handoff does not belong to this execution")
    # A loop is refused whatever the delegations allow (and named as the loop it is).
    chain = lineage(plan.graph, parent.task_id)
    if target in chain:
        path = (*chain, target)
        raise reject("HANDOFF_LOOP", f"handoff would loop: {' -> '.join(path)}", path)
    requester = lookup(source)
    if target not in requester.manifest.allowed_delegations:
        raise reject("HANDOFF_NOT_ALLOWED",
                     f"{source} may not hand off to {target} (allowed: "
                     f"{', '.join(requester.manifest.allowed_delegations) or 'none'})")
    for node in plan.graph.nodes:
        if node.parent_task_id == parent.task_id and node.target_agent_id == target:
            raise reject("HANDOFF_REPEATED", f"task {parent.task_id} already handed off to {target}")
    agent = lookup(target)
    missing = sorted(set(request.required_capabilities) - set(agent.manifest.capabilities))
    if missing:
        raise reject("HANDOFF_CAPABILITY_MISMATCH", f"{target} does not have {', '.join(missing)}")
    depth = parent.depth + 1
    if budget is not None:
        budget.admit_task(depth=depth, cost=agent.manifest.cost, handoff=True)
    task = common_pb2.AgentTask(
        task_id=task_id or f"{plan.execution_id}-t{len(plan.graph.nodes) + 1}",
        parent_task_id=parent.task_id, execution_id=parent.execution_id, source_agent_id=source,
        target_agent_id=target, tenant_id=parent.tenant_id, user_id=parent.user_id,
        session_id=parent.session_id, conversation_id=parent.conversation_id, objective=request.objective,
        required_capabilities=request.required_capabilities, priority=parent.priority,
        status=common_pb2.TASK_STATUS_CREATED, depth=depth, correlation_id=parent.correlation_id,
    )
    plan.graph.nodes.append(task)
    validate_graph(plan.graph)
    spec = plan.specs[parent.task_id]
    plan.specs[task.task_id] = TaskSpec(task.task_id, spec.analysis, request.purpose, agent)
    plan.selections[task.task_id] = Selection(agent, ())
    return task

