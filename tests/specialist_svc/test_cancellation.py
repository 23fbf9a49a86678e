"""A task whose RunTask has ended (cancelled, or the supervisor is gone) makes no further capability call."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agentmesh import errors
from agentmesh.v1 import capability_service_pb2 as cap_pb2
from agentmesh.v1 import common_pb2 as c
from agentmesh.v1 import specialist_service_pb2 as pb
from specialist_svc.agent import SpecialistAgent
from specialist_svc.rules import CallsInTurn
from specialist_svc.servicer import SpecialistServicer, StopWhenCallEnds

from .test_servicer import request


class _Client(CallsInTurn):
    def __init__(self) -> None:
        self.calls: list[str] = []

    def call(self, capability_id: str, input: Any, idempotency_key: str | None = None) -> Any:
        self.calls.append(capability_id)
        return {}, []


def test_no_call_leaves_once_the_call_has_ended() -> None:
    active = [True]
    inner = _Client()
    client = StopWhenCallEnds(inner, lambda: active[0])
    client.call("training.getStatus", {"worker_id": "W-1"})
    active[0] = False
    with pytest.raises(errors.Aborted) as info:
        client.call("training.getStatus", {"worker_id": "W-2"})
    assert info.value.reason == "TASK_CANCELLED" and client.stopped
    assert inner.calls == ["training.getStatus"]


class _Stub:
    """A capability stub that must not be reached."""

    def __init__(self) -> None:
        self.requests: list[cap_pb2.InvokeCapabilityRequest] = []

    def InvokeCapability(self, request: cap_pb2.InvokeCapabilityRequest, timeout: float | None = None) -> Any:
        self.requests.append(request)
        raise AssertionError("a cancelled task called a capability")


class _EndedContext:
    """The server context of a RunTask the supervisor cancelled while the agent waited."""

    def time_remaining(self) -> float:
        return 5.0

    def is_active(self) -> bool:
        return False

    def add_callback(self, callback: Callable[[], None]) -> bool:
        return False  # the call has ended already


def test_a_cancelled_task_calls_no_capability(permit_input: Callable[..., dict[str, Any]]) -> None:
    stub = _Stub()
    servicer = SpecialistServicer(SpecialistAgent.load("training-agent"), stub,  # type: ignore[arg-type]
                                  fixed_delay_s=0.2)
    response: pb.RunTaskResponse = servicer.RunTask(request(permit_input), _EndedContext())  # type: ignore[arg-type]
    assert stub.requests == []
    # The result (which nobody receives) says nothing was checked, never a pass.
    assert response.result.status != c.RESULT_STATUS_SUCCESS or not response.result.evidence
