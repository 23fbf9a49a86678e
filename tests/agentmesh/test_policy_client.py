"""Decisions asked at the same moment go to the policy engine together, and each caller gets its own.

A fake PolicyService runs in-process on a loopback port (the real engine over mTLS is
tests/policy_svc/test_batch_over_mtls.py). While ``hold`` is clear it keeps every call waiting, so
the decisions asked meanwhile are queued when it is released (the client under test lets one call be
in flight at a time).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from agentmesh import errors
from agentmesh.policy_client import PolicyClient
from agentmesh.unimplemented import unimplemented_servicer
from agentmesh.v1 import common_pb2
from agentmesh.v1 import policy_service_pb2 as pb
from agentmesh.v1 import policy_service_pb2_grpc as pb_grpc

from .test_audit_client import serving

ALLOW = common_pb2.POLICY_EFFECT_ALLOW


class HeldPolicy(unimplemented_servicer(pb_grpc.PolicyServiceServicer)):  # type: ignore[misc]
    """Decides ALLOW with the request's capability as the decision id; a capability ``bad`` is refused
    (its own slot in a batch), ``poison`` refuses a whole batch (as the edge check refuses a malformed
    nested request), and ``down`` makes every call UNAVAILABLE."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []
        self.hold = threading.Event()
        self.in_call = 0
        self.down = False
        self.lock = threading.Lock()

    def _enter(self, method: str, requests: list[pb.AuthorizeRequest], context: grpc.ServicerContext) -> None:
        with self.lock:
            self.calls.append((method, [r.capability_id for r in requests]))
            self.in_call += 1
        try:
            self.hold.wait(10)
        finally:
            with self.lock:
                self.in_call -= 1
        if self.down:
            errors.abort(context, errors.Unavailable("the engine is down", reason="POLICY_UNAVAILABLE"))
        if method == "AuthorizeBatch" and any(r.capability_id == "poison" for r in requests):
            errors.abort(context, errors.InvalidArgument("malformed", reason="INVALID_FIELD",
                                                         field="requests[0].capability_id"))

    @staticmethod
    def _decide(request: pb.AuthorizeRequest) -> pb.AuthorizeResponse:
        if request.capability_id in ("bad", "poison"):
            raise errors.InvalidArgument("refused", reason="INVALID_FIELD", field="capability_id")
        return pb.AuthorizeResponse(decision=common_pb2.PolicyDecision(decision_id=request.capability_id,
                                                                       effect=ALLOW))

    def Authorize(self, request: pb.AuthorizeRequest, context: grpc.ServicerContext) -> Any:
        self._enter("Authorize", [request], context)
        try:
            return self._decide(request)
        except errors.MeshError as err:
            errors.abort(context, err)

    def AuthorizeBatch(self, request: pb.AuthorizeBatchRequest, context: grpc.ServicerContext) -> Any:
        self._enter("AuthorizeBatch", list(request.requests), context)
        results = []
        for one in request.requests:
            try:
                results.append(pb.AuthorizeResult(response=self._decide(one)))
            except errors.MeshError as err:
                results.append(pb.AuthorizeResult(error=err.to_status()))
        return pb.AuthorizeBatchResponse(results=results)


@pytest.fixture()
def policy() -> Iterator[tuple[HeldPolicy, PolicyClient]]:
    fake = HeldPolicy()
    with serving(fake, pb_grpc.add_PolicyServiceServicer_to_server) as channel:
        try:
            yield fake, PolicyClient(channel, timeout_s=5, senders=1)  # one call in flight at a time
        finally:
            fake.hold.set()


def _ask(capability: str) -> pb.AuthorizeRequest:
    return pb.AuthorizeRequest(capability_id=capability)


def _until(check: Any, what: str) -> None:
    deadline = time.monotonic() + 5
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def _held_then(fake: HeldPolicy, client: PolicyClient, asks: list[Any]) -> list[futures.Future[Any]]:
    """One call held at the engine, then ``asks`` (each a function of the client) made while it is, then
    released; the futures of every caller's answer, the held one first."""
    pool = futures.ThreadPoolExecutor(max_workers=1 + len(asks))
    held = pool.submit(client, _ask("held"))
    _until(lambda: fake.in_call == 1, "the first call reached the engine")
    waiting = [pool.submit(ask, client) for ask in asks]
    _until(lambda: client._groups.waiting == len(asks), "the later decisions are queued")
    fake.hold.set()
    pool.shutdown(wait=False)
    return [held, *waiting]


def test_a_lone_decision_is_one_authorize_call(policy: tuple[HeldPolicy, PolicyClient]) -> None:
    fake, client = policy
    fake.hold.set()
    assert client(_ask("knowledge.search")).decision.decision_id == "knowledge.search"
    assert client.authorize_all([_ask("one")])[0].decision.decision_id == "one"  # type: ignore[union-attr]
    assert fake.calls == [("Authorize", ["knowledge.search"]), ("Authorize", ["one"])]


def test_decisions_asked_while_calls_are_in_flight_go_in_one_batch_each_to_its_caller(
        policy: tuple[HeldPolicy, PolicyClient]) -> None:
    fake, client = policy
    answers = _held_then(fake, client, [
        lambda c: c(_ask("a")),
        lambda c: c.authorize_all([_ask("b"), _ask("c")]),
        lambda c: c(_ask("d")),
    ])
    held, a, bc, d = (f.result(5) for f in answers)
    assert held.decision.decision_id == "held"
    assert a.decision.decision_id == "a" and d.decision.decision_id == "d"
    assert [r.decision.decision_id for r in bc] == ["b", "c"]
    assert fake.calls[0] == ("Authorize", ["held"])
    assert fake.calls[1][0] == "AuthorizeBatch" and sorted(fake.calls[1][1]) == ["a", "b", "c", "d"]
    assert len(fake.calls) == 2 and client.batches == 2


def test_a_refused_request_in_a_batch_fails_only_its_own_caller(policy: tuple[HeldPolicy, PolicyClient]) -> None:
    fake, client = policy
    *_, good, bad, mixed = _held_then(fake, client, [
        lambda c: c(_ask("good")),
        lambda c: c(_ask("bad")),
        lambda c: c.authorize_all([_ask("bad"), _ask("fine")]),
    ])
    assert good.result(5).decision.decision_id == "good"
    err = bad.exception(5)
    assert isinstance(err, errors.InvalidArgument) and err.field == "capability_id"
    first, second = mixed.result(5)
    assert isinstance(first, errors.InvalidArgument) and second.decision.decision_id == "fine"
    assert fake.calls[1][0] == "AuthorizeBatch" and sorted(fake.calls[1][1]) == ["bad", "bad", "fine", "good"]
    assert len(fake.calls) == 2


def test_a_batch_refused_as_a_whole_is_asked_again_caller_by_caller(policy: tuple[HeldPolicy, PolicyClient]) -> None:
    fake, client = policy
    *_, good, poison = _held_then(fake, client, [lambda c: c(_ask("good")), lambda c: c(_ask("poison"))])
    assert good.result(5).decision.decision_id == "good"
    err = poison.exception(5)
    assert isinstance(err, errors.InvalidArgument) and err.field == "capability_id"  # its own, asked alone
    assert fake.calls[1][0] == "AuthorizeBatch" and sorted(fake.calls[1][1]) == ["good", "poison"]
    assert sorted(fake.calls[2:]) == [("Authorize", ["good"]), ("Authorize", ["poison"])]


def test_a_batch_the_engine_could_not_take_leaves_no_caller_an_undecided_allow(
        policy: tuple[HeldPolicy, PolicyClient]) -> None:
    fake, client = policy
    fake.down = True
    answers = _held_then(fake, client, [lambda c: c(_ask("a")), lambda c: c.authorize_all([_ask("b"), _ask("c")])])
    *held, a, bc = answers
    for f in (*held, a):
        assert isinstance(f.exception(10), errors.Unavailable)
    assert all(isinstance(slot, errors.Unavailable) for slot in bc.result(10))
    # Each UNAVAILABLE call was asked once more, waiting for the engine to be reached (then failed again).
    assert [m for m, _ in fake.calls].count("AuthorizeBatch") == 2
