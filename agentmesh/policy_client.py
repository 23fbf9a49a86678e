"""``PolicyService.Authorize`` as a plain callable that raises mesh errors (for the services that ask it).

Decisions asked at the same moment from several threads go in one ``AuthorizeBatch``
(:class:`agentmesh.call_groups.CallGroups`): a request asked while the engine is not busy goes
alone as ``Authorize``, from the caller's thread; one asked while :data:`SENDERS` calls are in
flight waits until one ends and goes, from its caller's thread, with the others waiting then.
The engine decides each request of a batch on its own and answers each in its own slot, so a
caller only ever gets its own decision or its own error.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Final

import grpc

from agentmesh import errors
from agentmesh.call_groups import CallGroups, Unit
from agentmesh.v1 import policy_service_pb2 as policy_pb2
from agentmesh.v1 import policy_service_pb2_grpc as policy_grpc

__all__ = ["MAX_REQUESTS", "RECONNECT_WAIT_S", "SENDERS", "PolicyClient"]

RECONNECT_WAIT_S = 2.0
"""How long a call refused because the policy engine was unreachable waits for it to be reached again.

A restarted engine is reached again within about a second (the mesh channels' reconnect backoff);
an engine that stays down still ends in UNAVAILABLE, so the caller denies.
"""
MAX_REQUESTS: Final = 64
"""Most requests in one ``AuthorizeBatch`` (the engine's limit)."""
SENDERS: Final = 2
"""Calls to the policy engine in flight at once; what arrives meanwhile waits and goes together."""
_TRANSPORT_FAILURES: Final = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                                        grpc.StatusCode.CANCELLED})

_Decisions = list[policy_pb2.AuthorizeResponse | errors.MeshError]
_Ask = Unit[_Decisions]
"""One caller's requests: they go in the same call; its answer holds a decision or an error for each."""


class PolicyClient:
    """PolicyService.Authorize over a channel; a failed call raises the typed :mod:`agentmesh.errors` error.

    A call that fails UNAVAILABLE (no connection: the engine restarting) is asked once more,
    waiting up to :data:`RECONNECT_WAIT_S` for the channel to connect. A decision is a read;
    asking twice changes nothing but the decision log. Concurrent callers' requests are carried
    together (see the module).
    """

    def __init__(self, channel: grpc.Channel, timeout_s: float, *, senders: int = SENDERS) -> None:
        self._stub = policy_grpc.PolicyServiceStub(channel)
        self._timeout = timeout_s
        self._groups: CallGroups[_Decisions] = CallGroups(
            self._send, name="policy-ask", limit=senders, max_count=MAX_REQUESTS,
            expired=lambda: errors.DeadlineExceeded("the policy decision waited past its deadline",
                                                    reason="POLICY_TIMEOUT"),
            failed=lambda err: errors.Internal(f"the policy decision failed: {err!r}"))

    @property
    def batches(self) -> int:
        """Calls taken so far, alone or together (each one call, unless a refused batch was asked again)."""
        return self._groups.batches

    def __call__(self, request: policy_pb2.AuthorizeRequest) -> policy_pb2.AuthorizeResponse:
        decision = self._wait(self._groups.run(Unit.of([request], self._timeout)))[0]
        if isinstance(decision, errors.MeshError):
            raise decision
        return decision

    def authorize_all(self, requests: Sequence[policy_pb2.AuthorizeRequest]
                      ) -> list[policy_pb2.AuthorizeResponse | errors.MeshError]:
        """The decisions of several requests in one round trip (``AuthorizeBatch``), in order; never raises.

        Each slot holds its decision or its own error. When no decision came back at all (the engine
        unreachable, the kill switches unreadable), every slot holds that error: no slot is ever an ALLOW
        that was not decided. One request alone is asked as ``Authorize``.
        """
        if not requests:
            return []
        try:
            return self._wait(self._groups.run(Unit.of(requests, self._timeout)))
        except errors.MeshError as err:
            return [err] * len(requests)

    def _wait(self, answer: Any) -> _Decisions:
        try:
            decisions: _Decisions = answer.result(timeout=self._timeout + RECONNECT_WAIT_S + 1.0)
        except TimeoutError as err:
            raise errors.DeadlineExceeded("the policy engine did not answer in time",
                                          reason="POLICY_TIMEOUT") from err
        return decisions

    def _send(self, batch: list[_Ask]) -> None:
        requests = [r for ask in batch for r in ask.items]
        timeout = max(0.01, min(ask.deadline for ask in batch) - time.monotonic())
        try:
            if len(requests) == 1:
                batch[0].answer.set_result([batch[0].context.run(self._ask, self._stub.Authorize, requests[0],
                                                                 timeout)])
                return
            answer: policy_pb2.AuthorizeBatchResponse = batch[0].context.run(
                self._ask, self._stub.AuthorizeBatch, policy_pb2.AuthorizeBatchRequest(requests=requests), timeout)
        except errors.MeshError as err:
            if err.code in _TRANSPORT_FAILURES or len(batch) == 1:
                for ask in batch:
                    ask.answer.set_exception(err)
                return
            # Refused for what one of them holds: each is asked alone and gets its own answer.
            for ask in batch:
                self._send([ask])
            return
        if len(answer.results) != len(requests):
            failure = errors.Unavailable(f"the policy engine answered {len(answer.results)} results for "
                                         f"{len(requests)} requests", reason="POLICY_UNAVAILABLE")
            for ask in batch:
                ask.answer.set_exception(failure)
            return
        decisions: _Decisions = [r.response if r.WhichOneof("outcome") == "response" else errors.from_status(r.error)
                                 for r in answer.results]
        start = 0
        for ask in batch:
            ask.answer.set_result(decisions[start:start + len(ask.items)])
            start += len(ask.items)

    @staticmethod
    def _ask(method: Any, request: Any, timeout: float) -> Any:
        try:
            return method(request, timeout=timeout)
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.UNAVAILABLE:
                raise errors.from_rpc_error(err) from err
            try:
                return method(request, timeout=min(timeout, RECONNECT_WAIT_S), wait_for_ready=True)
            except grpc.RpcError as again:
                if again.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                    raise errors.Unavailable(
                        f"the policy engine could not be reached within {RECONNECT_WAIT_S:g} s: {err.details()}",
                        reason="POLICY_UNAVAILABLE") from again
                raise errors.from_rpc_error(again) from again
