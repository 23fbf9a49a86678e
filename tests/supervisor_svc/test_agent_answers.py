"""An agent's answer is held to the mesh's input rules before the supervisor reads any of it.

A real gRPC server in the test process plays an agent that answers what it likes; the supervisor's
client of agents (``GrpcSpecialists``) reaches it over a real channel.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2

from agentmesh import errors
from agentmesh.v1 import common_pb2
from agentmesh.v1 import specialist_service_pb2 as spec_pb2
from agentmesh.v1 import specialist_service_pb2_grpc as spec_grpc
from supervisor_svc.servicer import GrpcSpecialists


class _Agent(spec_grpc.SpecialistServiceServicer):
    def __init__(self) -> None:
        self.answer = common_pb2.AgentResult()

    def RunTask(self, request: spec_pb2.RunTaskRequest, context: Any) -> spec_pb2.RunTaskResponse:
        return spec_pb2.RunTaskResponse(result=self.answer)


@pytest.fixture
def agent() -> Iterator[tuple[_Agent, GrpcSpecialists]]:
    servicer = _Agent()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    spec_grpc.add_SpecialistServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield servicer, GrpcSpecialists(lambda agent_id: channel)
    finally:
        channel.close()
        server.stop(None)


def _result(**data: Any) -> common_pb2.AgentResult:
    result = struct_pb2.Struct()
    result.update({"verdict": "PASS", "subjects": {"worker:W-1001/NR-10": "PASS"}, **data})
    return common_pb2.AgentResult(task_id="t1", agent_id="training-agent", status=common_pb2.RESULT_STATUS_SUCCESS,
                                  result=result)


def _answer(specialists: GrpcSpecialists) -> common_pb2.AgentResult:
    return specialists.start("training-agent", spec_pb2.RunTaskRequest(), 5.0).result()


def test_an_answer_within_the_rules_is_read_as_sent(agent: tuple[_Agent, GrpcSpecialists]) -> None:
    servicer, specialists = agent
    servicer.answer = _result(hours=[8, 1.5e300], note="fine")
    servicer.answer.statements.add(kind=common_pb2.STATEMENT_KIND_FACT, code="VALID", text="a\tb\nc")
    assert _answer(specialists) == servicer.answer


def _hostile(case: str) -> tuple[common_pb2.AgentResult, str, str]:
    """(answer, the field named, the rule broken)"""
    if case == "nan in the result":
        return _result(hours={"total": [1, float("nan")]}), "result.result", "FIELD_OUT_OF_RANGE"
    if case == "infinite confidence":
        answer = _result()
        answer.confidence = float("inf")
        return answer, "result.confidence", "FIELD_OUT_OF_RANGE"
    if case == "infinity in evidence data":
        answer = _result()
        answer.evidence.add(source="lms").data.update({"hours": float("-inf")})
        return answer, "result.evidence[0].data", "FIELD_OUT_OF_RANGE"
    if case == "statement over its maximum":
        answer = _result()
        answer.statements.add(kind=common_pb2.STATEMENT_KIND_FACT, code="VALID", text="x" * 4097)
        return answer, "result.statements[0].text", "FIELD_TOO_LONG"
    if case == "nul in an evidence source":
        answer = _result()
        answer.evidence.add(source="lms\x00")
        return answer, "result.evidence[0].source", "FIELD_INVALID_CHARACTERS"
    answer = _result()
    answer.status = 42  # type: ignore[assignment]
    return answer, "result.status", "ENUM_VALUE_UNKNOWN"


CASES = ["nan in the result", "infinite confidence", "infinity in evidence data", "statement over its maximum",
         "nul in an evidence source", "unknown status"]


@pytest.mark.parametrize("case", CASES)
def test_an_answer_outside_the_rules_is_a_failed_task_naming_the_field(
        agent: tuple[_Agent, GrpcSpecialists], case: str) -> None:
    servicer, specialists = agent
    servicer.answer, field, rule = _hostile(case)
    with pytest.raises(errors.FailedPrecondition) as info:
        _answer(specialists)
    err = info.value
    assert (err.reason, err.metadata) == ("AGENT_ANSWER_INVALID", {"field": field, "rule": rule}), err
    assert field in err.message
    # Not transient: the orchestrator fails the task rather than trying the same answer again.
    assert not isinstance(err, errors.Unavailable | errors.DeadlineExceeded)
