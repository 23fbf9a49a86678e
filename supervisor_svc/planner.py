"""Plans as task DAGs (PRD §17–19), handoff validation (§20) and loop prevention (§22).

A plan is built from the DAG template of the intent's domain definition
(:mod:`supervisor_svc.definitions`): one task per template task, in template
order, with an edge for each ``after`` of the template — sequential chains,
parallel fan-out, and conditional edges whose condition (``permit_found``, or
``not permit_found`` for the false branch) is read from the source task's
result at run time (:meth:`Plan.edge_holds`). The work-permit analysis, for
example, is two stages::

    t1 work-permit ──permit_found──┬─> t2 training
                                   ├─> t3 risk          (in parallel)
                                   └─> t4 compliance

First-stage tasks get their input from the intent's subjects; the others get
their context projection at run time (``purpose`` in :class:`TaskSpec`). Each
task's agent is chosen by the selector (discovery + explainable scores) for
the template's requirement; an analysis no ACTIVE agent can take is recorded
in ``Plan.not_run`` (it will be reported missing, never guessed), and so is
every task after it; a first-stage task without an agent stops the plan
(:class:`NoAgentAvailable`): nothing could run.

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

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from agentmesh.v1 import common_pb2
from supervisor_svc.definitions import PlanDef, TaskDef
from supervisor_svc.errors import HandoffRejected, NoAgentAvailable, PlanError, RequestInvalid
from supervisor_svc.intent import Intent
from supervisor_svc.limits import ExecutionBudget
from supervisor_svc.registry import AgentEntry
from supervisor_svc.selection import Requirement, Selection

__all__ = [
    "SUPERVISOR_AGENT_ID",
    "HandoffRequest",
    "NotRun",
    "Plan",
    "Selector",
    "TaskSpec",
    "admit_handoff",
    "build_plan",
    "lineage",
    "restore_plan",
    "stages",
    "validate_graph",
]

SUPERVISOR_AGENT_ID = "supervisor"
"""``source_agent_id`` of the tasks the supervisor creates itself."""
_NOT = "not "


class Selector(Protocol):
    """Chooses an agent for a requirement (implemented by :class:`~supervisor_svc.selection.AgentSelector`)."""

    def select(self, tenant_id: str, requirement: Requirement, *, execution_id: str = "") -> Selection:
        """The chosen agent, the version its task goes to for the execution, and all candidates' scores;
        raises NoAgentAvailable."""
        ...


@dataclass(frozen=True)
class TaskSpec:
    """What the executor needs to know about a task beyond the AgentTask message."""

    task_id: str
    analysis: str
    purpose: str
    """Projection purpose for this task's input."""
    agent: AgentEntry
    template: TaskDef | None = None
    """The template task it was planned from; None for a handoff (it serves its parent's analysis)."""


@dataclass(frozen=True)
class NotRun:
    """An analysis the plan could not assign; reported as missing, never guessed."""

    analysis: str
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
    expected: tuple[str, ...]
    """The analyses the answer needs (planned or not)."""
    not_run: list[NotRun] = field(default_factory=list)
    template: PlanDef | None = None
    """The DAG template it was built from (conditions, report)."""

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
        return [s for task_id in self.specs if task_id in self.selections for s in self.selections[task_id].scores]

    def condition_value(self, edge: common_pb2.TaskEdge,
                        results: Mapping[str, common_pb2.AgentResult]) -> bool | None:
        """The value of an edge's condition for its source's result: True, False or None (undetermined).

        ``""`` (the source produced a usable result) is True or None. An unknown condition is None.
        """
        result = results.get(edge.from_task_id)
        if edge.condition == "":
            return True if result is not None and result.status != common_pb2.RESULT_STATUS_FAILED else None
        name = edge.condition.removeprefix(_NOT)
        condition = self.template.conditions.get(name) if self.template is not None else None
        spec = self.specs.get(edge.from_task_id)
        if condition is None or spec is None or spec.template is None or spec.template.task_id != condition.task:
            return None  # fail closed
        return condition.evaluate(result, spec.template.contract)

    def edge_holds(self, edge: common_pb2.TaskEdge, results: Mapping[str, common_pb2.AgentResult]) -> bool:
        """Whether the task after ``edge`` may run: its condition holds (``not X``: X is definitely false)."""
        value = self.condition_value(edge, results)
        return value is (not edge.condition.startswith(_NOT))

    def branch_not_taken(self, edge: common_pb2.TaskEdge, results: Mapping[str, common_pb2.AgentResult]) -> bool:
        """Whether the edge's condition is definitely the other branch (its task is off the path, not missing)."""
        if edge.condition == "":
            return False
        value = self.condition_value(edge, results)
        return value is edge.condition.startswith(_NOT)


def _task(
    task_id: str, template: TaskDef, agent: AgentEntry, *, execution_id: str, user: common_pb2.UserContext,
    correlation_id: str, subjects: Mapping[str, str],
) -> common_pb2.AgentTask:
    task = common_pb2.AgentTask(
        task_id=task_id, execution_id=execution_id, source_agent_id=SUPERVISOR_AGENT_ID,
        target_agent_id=agent.agent_id, tenant_id=user.tenant_id, user_id=user.user_id,
        session_id=user.session_id, conversation_id=user.conversation_id,
        objective=template.objective.render(subjects),
        required_capabilities=template.requirement.required_capabilities,
        priority=common_pb2.TASK_PRIORITY_NORMAL, status=common_pb2.TASK_STATUS_CREATED, depth=1,
        correlation_id=correlation_id,
    )
    if template.input is not None:
        # The first stage gets its input from the subjects; later stages get their projection at run time.
        task.input.update({k: v.render(subjects) for k, v in template.input.items()})
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
    """Build and validate the plan for an intent from its domain's DAG template.

    Task ids are ``"<execution_id>-t<n>"``, in template order. Tasks after others carry no
    input yet: the executor projects the context into them (purpose in ``specs``).

    Args:
        intent: A parsed, actionable intent.
        execution_id: The execution the tasks belong to.
        user: The verified user context (tenant, user, session, conversation).
        correlation_id: Shared by every task of the execution.
        selector: Chooses the agent of each task.
        budget: If given, every task is admitted against the limits (all or nothing).

    Raises:
        RequestInvalid: ``INTENT_NOT_ACTIONABLE`` (field ``request_text``).
        NoAgentAvailable: no agent for a first-stage task.
        LimitExceeded: the plan alone exceeds a limit (e.g. ``MAX_TASKS_EXCEEDED``).
    """
    if not intent.actionable or intent.domain is None or intent.definition is None:
        raise RequestInvalid(intent.message, reason="INTENT_NOT_ACTIONABLE", field="request_text")
    template = intent.domain.plan_of(intent.definition)
    graph = common_pb2.AgentTaskGraph(graph_id=f"{execution_id}-graph")
    specs: dict[str, TaskSpec] = {}
    selections: dict[str, Selection] = {}
    not_run: list[NotRun] = []
    planned: dict[str, str] = {}
    """template task id -> task id."""
    for t in template.tasks:
        missing = [source for source, _ in t.after if source not in planned]
        if missing:
            before = template.task(missing[0])
            not_run.append(NotRun(t.analysis, f"NO_AGENT_AVAILABLE: it comes after the {before.analysis} "
                                              "analysis, which has no agent"))
            continue
        try:
            selection = selector.select(user.tenant_id, t.requirement, execution_id=execution_id)
        except NoAgentAvailable as exc:
            if not t.after:
                raise  # without the first stage nothing can run
            # Name the agents that would have fit but are switched off or not allowed: that is the news.
            blocked = [f"{a} {why}" for a, why in sorted(exc.excluded.items())
                       if why.startswith(("NOT_ACTIVE", "TENANT_NOT_ALLOWED"))]
            detail = f" ({'; '.join(blocked)})" if blocked else ""
            not_run.append(NotRun(t.analysis, f"NO_AGENT_AVAILABLE: {exc.message}{detail}"))
            continue
        task_id = f"{execution_id}-t{len(specs) + 1}"
        for s in selection.scores:  # the execution keeps every task's candidates: say which task and which won
            s.task_id = task_id
            s.chosen = s.agent_id == selection.agent.agent_id
        graph.nodes.append(_task(task_id, t, selection.agent, execution_id=execution_id, user=user,
                                 correlation_id=correlation_id, subjects=intent.subjects))
        for source, condition in t.after:
            graph.edges.append(common_pb2.TaskEdge(from_task_id=planned[source], to_task_id=task_id,
                                                   condition=condition))
        planned[t.task_id] = task_id
        specs[task_id] = TaskSpec(task_id, t.analysis, t.purpose, selection.agent, t)
        selections[task_id] = selection
    validate_graph(graph)
    if budget is not None:
        budget.admit_plan([(node.depth, specs[node.task_id].agent.manifest.cost) for node in graph.nodes])
    return Plan(intent, execution_id, graph, specs, selections, template.expected, not_run, template)


def restore_plan(
    intent: Intent, execution_id: str, graph: common_pb2.AgentTaskGraph, not_run: list[NotRun],
    agent: Callable[[str], AgentEntry],
) -> Plan:
    """The plan of a stored execution (its planned tasks, without handoffs), mapped onto its template again.

    The template's tasks, minus the analyses recorded as not run, are the stored tasks in order.

    Raises:
        PlanError: ``PLAN_MISMATCH`` — the stored graph is not what the template plans (the definition
            changed since); ``RequestInvalid`` for an intent that is no longer actionable.
    """
    if not intent.actionable or intent.domain is None or intent.definition is None:
        raise RequestInvalid(intent.message, reason="INTENT_NOT_ACTIONABLE", field="request_text")
    template = intent.domain.plan_of(intent.definition)
    skipped = {n.analysis for n in not_run}
    tasks = [t for t in template.tasks if t.analysis not in skipped]
    nodes = list(graph.nodes)
    if len(tasks) != len(nodes):
        raise PlanError(f"{len(nodes)} stored tasks, the template plans {len(tasks)}", reason="PLAN_MISMATCH",
                        field="graph")
    specs: dict[str, TaskSpec] = {}
    for t, node in zip(tasks, nodes, strict=True):
        if tuple(node.required_capabilities) != tuple(t.requirement.required_capabilities):
            raise PlanError(f"task {node.task_id} does not match template task {t.task_id}", reason="PLAN_MISMATCH",
                            field="graph")
        specs[node.task_id] = TaskSpec(node.task_id, t.analysis, t.purpose, agent(node.target_agent_id), t)
    return Plan(intent, execution_id, graph, specs, {}, template.expected, not_run, template)


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
    plan.specs[task.task_id] = TaskSpec(task.task_id, spec.analysis, request.purpose, agent, None)
    plan.selections[task.task_id] = Selection(agent, ())
    return task

