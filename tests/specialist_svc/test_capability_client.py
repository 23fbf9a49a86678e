"""The gRPC capability client's pure parts: the principal it acts as, its deadline, failures without a call."""

from __future__ import annotations

from typing import Any

import pytest

from agentmesh import errors
from agentmesh.v1 import common_pb2 as c
from specialist_svc.capability_client import Deadline, GrpcCapabilityClient, principal_for
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
