"""Fixtures for the specialists: the real capability runtime on the demo world, and fakes shaped like it.

The agents' rules are tested against what the capability runtime really
returns: :class:`LocalCapabilityClient` runs the capability executor (the
internal systems loaded with the demo world, the sandbox LMS on loopback)
and builds evidence and errors exactly as the capability service does —
only grant, policy and audit are left out. :class:`FakeCapabilityClient`
serves hand-made outputs for cases the demo world lacks, each validated
against the capability's output schema, so neither can drift from the manifests.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format, struct_pb2

from agentmesh import errors
from agentmesh.result_contract import ParsedResult, ResultContract, check_result
from agentmesh.v1 import common_pb2
from capability_svc import errors as cap_errors
from capability_svc.executor import CapabilityExecutor
from capability_svc.external_gateway import ExternalGateway, GatewayConfig, LmsClient
from capability_svc.governance import evidence_of, mesh_error
from capability_svc.internal_runtime import InternalBackend, InternalStore
from capability_svc.invocation import InvocationContext
from capability_svc.knowledge_store import KnowledgeBackend, KnowledgeLibrary
from capability_svc.registry import CapabilityRegistry, default_capabilities_dir
from capability_svc.world import load_world
from lms_sandbox import Fault, LmsSandbox, load_lms_data
from specialist_svc.agent import SpecialistAgent
from specialist_svc.rules import CallsInTurn, plain
from supervisor_svc.definitions import default_catalog, projection_config
from supervisor_svc.projection import Projector

REPO = Path(__file__).resolve().parents[2]
DEMO_WORLD = REPO / "agentmesh" / "data" / "demo_world.yaml"
NOW = dt.datetime(2026, 11, 30, 9, 0, tzinfo=dt.UTC)
"""'Today' of the demo world."""

_WP_PLAN = default_catalog().domain("work-permit").plans["analysis"]
CONTRACT: dict[str, ResultContract] = {"work-permit-agent": _WP_PLAN.task("permit").contract}
"""The result contract of each agent's task in the work-permit analysis (others: verdict and subjects only)."""
PURPOSE = {
    "work-permit-agent": "permit.assess",
    "training-agent": "training.verify",
    "risk-agent": "risk.assess",
    "risk-rules-agent": "risk.assess",
    "compliance-agent": "compliance.check",
}


DEMO_TODAY = dt.date(2026, 11, 30)
"""The demo world's today."""


@functools.cache
def load_agent(agent_id: str) -> SpecialistAgent:
    """Each agent's manifest and rules, loaded once per session."""
    return SpecialistAgent.load(agent_id, today=lambda: DEMO_TODAY)


@dataclass
class World:
    """The capability runtime over the demo world, without grant, policy or audit."""

    executor: CapabilityExecutor
    registry: CapabilityRegistry
    lms: LmsSandbox


@pytest.fixture(scope="session")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """Internal systems loaded with the demo world and the sandbox LMS serving it (loopback)."""
    tmp = tmp_path_factory.mktemp("specialist-world")
    registry = CapabilityRegistry.load(default_capabilities_dir(), tmp / "capabilities.db", clock=lambda: NOW)
    store = InternalStore(tmp / "internal.db", clock=lambda: NOW)
    load_world(DEMO_WORLD, store)
    lms = LmsSandbox(load_lms_data(DEMO_WORLD)).start()
    # Short timeouts and no retries: a hanging LMS lookup costs a fraction of a second.
    gateway = ExternalGateway(GatewayConfig(lms.base_url, timeout_s=0.3, max_attempts=1,
                                            breaker_failure_threshold=1000),
                              name="lms", wall_clock=lambda: NOW)
    lms_client = LmsClient(gateway)
    try:
        knowledge = KnowledgeBackend(KnowledgeLibrary.load(), clock=lambda: NOW)
        yield World(CapabilityExecutor(registry, InternalBackend(store), {"lms": lms_client}, knowledge), registry,
                    lms)
    finally:
        lms_client.close()
        lms.stop()
        registry.close()


def _via_struct(output: Mapping[str, Any]) -> dict[str, Any]:
    """What the output looks like after the wire (Struct) and the gRPC client's normalisation."""
    struct = struct_pb2.Struct()
    struct.update(dict(output))
    result: dict[str, Any] = plain(json_format.MessageToDict(struct))
    return result


class LocalCapabilityClient(CallsInTurn):
    """A CapabilityClient over the real executor for one tenant and agent."""

    def __init__(self, world: World, agent_id: str, tenant_id: str = "acme") -> None:
        self.world = world
        self.ctx = InvocationContext(tenant_id, "alice", agent_id, "exec-test")
        self.allowed = set(load_agent(agent_id).manifest.capabilities)
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def call(self, capability_id: str, input: Mapping[str, Any], idempotency_key: str | None = None
             ) -> tuple[dict[str, Any], list[common_pb2.EvidenceReference]]:
        self.calls.append((capability_id, dict(input)))
        if capability_id not in self.allowed:
            raise errors.PermissionDenied(f"the grant does not list {capability_id}",
                                          reason="GRANT_CAPABILITY_NOT_LISTED")
        try:
            done = self.world.executor.execute(self.ctx, capability_id, _via_struct(input), deadline_s=5.0)
        except cap_errors.CapabilityError as err:
            raise mesh_error(err) from err
        return _via_struct(done.output), evidence_of(done.output, done.manifest.key)


class FakeCapabilityClient(CallsInTurn):
    """Canned answers keyed by (capability, resource id); each output checked against its output schema.

    The key is the input's ``worker_id``, ``permit_id`` or (knowledge) ``scope``; a search by status is
    answered from ``"<id>?status=<status>"`` when that key has an answer.
    """

    def __init__(self, registry: CapabilityRegistry) -> None:
        self._registry = registry
        self._answers: dict[tuple[str, str], dict[str, Any] | errors.MeshError] = {}
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.idempotency_keys: list[str | None] = []
        """One per call, in the order of ``calls``."""

    def answer(self, capability_id: str, key: str, output: dict[str, Any] | errors.MeshError) -> None:
        if isinstance(output, dict):
            self._registry.validate_output(self._registry.get(capability_id).manifest, output)
        self._answers[(capability_id, key)] = output

    def call(self, capability_id: str, input: Mapping[str, Any], idempotency_key: str | None = None
             ) -> tuple[dict[str, Any], list[common_pb2.EvidenceReference]]:
        self.calls.append((capability_id, dict(input)))
        self.idempotency_keys.append(idempotency_key)
        key = str(input.get("worker_id") or input.get("permit_id") or input.get("scope"))
        if "status" in input and (capability_id, f"{key}?status={input['status']}") in self._answers:
            key = f"{key}?status={input['status']}"
        answer = self._answers.get((capability_id, key))
        if answer is None:
            raise AssertionError(f"no canned answer for {capability_id} {key}")
        if isinstance(answer, errors.MeshError):
            raise answer
        manifest = self._registry.get(capability_id).manifest
        return _via_struct(answer), evidence_of(answer, manifest.key)


@pytest.fixture()
def local(world: World) -> Callable[..., LocalCapabilityClient]:
    """``local(agent_id, tenant="acme")``: a client over the real runtime."""
    def make(agent_id: str, tenant_id: str = "acme") -> LocalCapabilityClient:
        return LocalCapabilityClient(world, agent_id, tenant_id)
    return make


@pytest.fixture()
def fake(world: World) -> FakeCapabilityClient:
    return FakeCapabilityClient(world.registry)


@pytest.fixture()
def lms_fault(world: World) -> Iterator[Callable[..., None]]:
    """``lms_fault(mode, worker_id, tenant_id="acme", **params)``: a run-time LMS fault, cleared afterwards."""
    def set_fault(mode: str, worker_id: str, tenant_id: str = "acme", **params: Any) -> None:
        world.lms.faults.set(Fault.from_mapping({"mode": mode, **params}), tenant_id=tenant_id, worker_id=worker_id)
    try:
        yield set_fault
    finally:
        world.lms.faults.clear()


@pytest.fixture(scope="session")
def projector() -> Projector:
    return Projector(projection_config(default_catalog()))


@pytest.fixture()
def permit_input(world: World, projector: Projector) -> Callable[..., dict[str, Any]]:
    """``permit_input(permit_id, agent_id)``: the task input the supervisor would project from the permit record."""
    def make(permit_id: str, agent_id: str, tenant_id: str = "acme") -> dict[str, Any]:
        ctx = InvocationContext(tenant_id, "alice", "work-permit-agent", "exec-test")
        record = world.executor.execute(ctx, "workPermit.get", {"permit_id": permit_id}).output
        full = {k: v for k, v in record.items() if k != "provenance"}
        projected, _ = projector.project(full, agent_id, PURPOSE[agent_id])
        return projected
    return make


def task_for(agent_id: str, data: Mapping[str, Any], task_id: str = "task-1", locale: str = "") -> common_pb2.AgentTask:
    """An AgentTask carrying ``data`` as its input (its statements in ``locale``)."""
    task = common_pb2.AgentTask(task_id=task_id, execution_id="exec-test", target_agent_id=agent_id,
                                tenant_id="acme", user_id="alice", correlation_id="corr-1", locale=locale)
    task.input.update(dict(data))
    return task


def refused(action: common_pb2.RequestedAction, reason: str = "HANDOFF_NOT_ALLOWED: refused in this test"
            ) -> common_pb2.HandoffOutcome:
    """The outcome the supervisor returns for a handoff it refuses."""
    return common_pb2.HandoffOutcome(action_id=action.action_id, target_agent_id=action.target_agent_id,
                                     state=common_pb2.HANDOFF_STATE_REFUSED, reason=reason)


@pytest.fixture()
def run_agent() -> Callable[..., common_pb2.AgentResult]:
    """``run_agent(agent_id, data, client, locale="", handoffs=None)``: the agent's full run (schema checks,
    stamping) on one task. A WAITING answer is answered as the supervisor would: with ``handoffs(action)`` for
    each handoff asked for (default: refused), and the agent is called again."""
    def run(agent_id: str, data: Mapping[str, Any], client: Any, locale: str = "",
            handoffs: Callable[[common_pb2.RequestedAction], common_pb2.HandoffOutcome] | None = None,
            ) -> common_pb2.AgentResult:
        agent, task = load_agent(agent_id), task_for(agent_id, data, locale=locale)
        result = agent.run(task, client)
        if result.status == common_pb2.RESULT_STATUS_WAITING:
            answer = handoffs or refused
            result = agent.run(task, client, [answer(a) for a in result.requested_actions], again=True)
        return result
    return run


@pytest.fixture()
def checked() -> Callable[..., ParsedResult]:
    """``checked(result, agent_id, analysis=None)``: the contract check plus what the aggregator relies on.

    Checked against the contract of the agent's task in the work-permit analysis; a
    result of another operation (``analysis`` given, e.g. the work-permit agent's
    ``affected_by_training``, which has no single permit) against the common one.
    """
    def check(result: common_pb2.AgentResult, agent_id: str, analysis: str | None = None) -> ParsedResult:
        parsed = check_result(result, None if analysis else CONTRACT.get(agent_id))
        facts = {s.subject for s in result.statements
                 if s.kind == common_pb2.STATEMENT_KIND_FACT and s.evidence_indexes}
        for subject, verdict in parsed.subjects.items():
            if verdict.value != "UNKNOWN":
                assert subject in facts, f"{verdict.value} on {subject} has no FACT with evidence"
        for ev in result.evidence:
            assert ev.source and ev.reference and ev.capability
            assert ev.authority != common_pb2.AUTHORITY_LEVEL_UNSPECIFIED
        return parsed
    return check


def statements(result: common_pb2.AgentResult, kind: int, subject: str | None = None
               ) -> list[common_pb2.Statement]:
    """The statements of one kind (and subject)."""
    return [s for s in result.statements if s.kind == kind and (subject is None or s.subject == subject)]


@pytest.fixture()
def find() -> Callable[..., list[common_pb2.Statement]]:
    return statements
