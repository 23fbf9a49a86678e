"""The gRPC capability client's pure parts: the principal it acts as, its deadline, failures without a call."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from agentmesh import errors
from agentmesh.v1 import capability_service_pb2 as cap_pb2
from agentmesh.v1 import common_pb2 as c
from specialist_svc.capability_client import MAX_BATCH, Deadline, GrpcCapabilityClient, principal_for
from specialist_svc.rules import plain

GRANT = c.SignedTaskGrant(grant=b"body", signature=b"sig", key_id="k1")


def test_principal_names_the_agent_and_carries_the_grant_once() -> None:
    received = c.AgentPrincipal(delegation_chain=["user:acme/alice", "svc:supervisor"], execution_id="e0")
    p = principal_for(received, GRANT, agent_id="training-agent", agent_version="1.0.0", execution_id="e1")
    assert list(p.delegation_chain) == ["user:acme/alice", "svc:supervisor", "agent:training-agent"]
    assert list(p.grants) == [GRANT]
    assert (p.agent_id, p.agent_version, p.execution_id) == ("training-agent", "1.0.0", "e1")
    again = principal_for(p, GRANT, agent_id="training-agent", agent_version="1.0.0", execution_id="e1")
    assert again == p
    assert list(received.delegation_chain) == ["user:acme/alice", "svc:supervisor"]  # not modified


def test_an_empty_chain_is_left_for_the_capability_service_to_derive() -> None:
    p = principal_for(c.AgentPrincipal(), GRANT, agent_id="risk-agent", agent_version="1.0.0", execution_id="e")
    assert list(p.delegation_chain) == []


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_deadline_keeps_a_reserve_for_answering() -> None:
    clock = Clock()
    d = Deadline(2.0, monotonic=clock)
    assert d.call_timeout() == pytest.approx(1.8)
    clock.now += 1.5
    assert d.call_timeout() == pytest.approx(0.45)
    clock.now += 1.0
    assert d.call_timeout() is not None and d.call_timeout() < 0  # type: ignore[operator]
    assert Deadline(None).call_timeout() is None
    assert Deadline(10.0, monotonic=Clock()).call_timeout() == pytest.approx(9.75)


class NoStub:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError("no call may be made")


def test_no_time_left_is_a_deadline_error_without_a_call() -> None:
    clock = Clock()
    client = GrpcCapabilityClient(NoStub(), grant=GRANT, principal=c.AgentPrincipal(), trace=c.TraceContext(),
                                  deadline=Deadline(0.0, monotonic=clock))  # type: ignore[arg-type]
    with pytest.raises(errors.DeadlineExceeded) as info:
        client.call("training.getStatus", {"worker_id": "W-1"})
    assert info.value.reason == "TASK_DEADLINE_EXCEEDED"


def test_plain_restores_integers_after_the_wire() -> None:
    assert plain({"a": 4.0, "b": [1.5, {"c": 2.0}], "d": None, "e": True}) == {"a": 4, "b": [1.5, {"c": 2}],
                                                                              "d": None, "e": True}


class BatchStub:
    """Answers InvokeCapabilities from ``answers`` (per call: an output dict or a MeshError), or fails it whole."""

    def __init__(self, answers: list[Any], failure: grpc.RpcError | None = None) -> None:
        self.answers, self.failure = answers, failure
        self.requests: list[cap_pb2.InvokeCapabilitiesRequest] = []

    def InvokeCapabilities(self, request: cap_pb2.InvokeCapabilitiesRequest, timeout: float | None = None) -> Any:
        self.requests.append(request)
        if self.failure is not None:
            raise self.failure
        results = []
        for answer in self.answers[:len(request.calls)]:
            if isinstance(answer, errors.MeshError):
                results.append(cap_pb2.InvokeCapabilityResult(error=answer.to_status()))
            else:
                response = cap_pb2.InvokeCapabilityResponse(knowledge_version="compliance.nr@sha256:x")
                response.output.update(answer)
                results.append(cap_pb2.InvokeCapabilityResult(response=response))
        self.answers = self.answers[len(request.calls):]
        return cap_pb2.InvokeCapabilitiesResponse(results=results)


def _batch_client(stub: Any) -> GrpcCapabilityClient:
    return GrpcCapabilityClient(stub, grant=GRANT, principal=c.AgentPrincipal(agent_id="compliance-agent"),
                                trace=c.TraceContext(trace_id="t" * 32), deadline=Deadline(5.0))


def test_calls_together_go_in_one_rpc_each_answered_in_its_slot() -> None:
    refused = errors.PermissionDenied("no", reason="GRANT_RESOURCE_NOT_LISTED", field="scope")
    stub = BatchStub([{"hits": [], "n": 1}, refused, {"hits": [], "n": 3}])
    client = _batch_client(stub)
    answers = client.call_all([("knowledge.search", {"query": q}) for q in ("a", "b", "c")],
                              traceparents=["tp-a", "tp-b", "tp-c"])
    (sent,) = stub.requests
    assert [(r.capability_id, r.input["query"], r.grant, r.trace.trace_id) for r in sent.calls] == [
        ("knowledge.search", q, GRANT, "t" * 32) for q in ("a", "b", "c")]
    assert list(sent.traceparents) == ["tp-a", "tp-b", "tp-c"]
    assert answers[0] == ({"hits": [], "n": 1}, []) and answers[2] == ({"hits": [], "n": 3}, [])
    assert isinstance(answers[1], errors.PermissionDenied)
    assert (answers[1].reason, answers[1].field) == ("GRANT_RESOURCE_NOT_LISTED", "scope")
    assert client.knowledge_versions == ["compliance.nr@sha256:x"]


def test_more_calls_than_a_batch_holds_go_in_several() -> None:
    stub = BatchStub([{"i": i} for i in range(MAX_BATCH + 2)])
    answers = _batch_client(stub).call_all([("knowledge.search", {"i": i}) for i in range(MAX_BATCH + 2)])
    assert [len(r.calls) for r in stub.requests] == [MAX_BATCH, 2]
    assert answers == [({"i": i}, []) for i in range(MAX_BATCH + 2)]


class Failed(grpc.RpcError, grpc.Call):  # type: ignore[misc]
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "connection refused"

    def trailing_metadata(self) -> Any:
        return ()


def test_a_batch_that_failed_whole_answers_every_call_with_that_error() -> None:
    answers = _batch_client(BatchStub([], failure=Failed())).call_all([("a.b", {}), ("c.d", {})])
    assert [type(a) for a in answers] == [errors.Unavailable, errors.Unavailable]


def test_no_time_left_answers_every_call_of_a_batch_without_a_call() -> None:
    clock = Clock()
    client = GrpcCapabilityClient(NoStub(), grant=GRANT, principal=c.AgentPrincipal(), trace=c.TraceContext(),
                                  deadline=Deadline(1.0, monotonic=clock))
    clock.now += 2
    answers = client.call_all([("a.b", {}), ("c.d", {})])
    assert all(isinstance(a, errors.DeadlineExceeded) and a.reason == "TASK_DEADLINE_EXCEEDED" for a in answers)
