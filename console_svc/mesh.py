"""The console's mTLS calls into the mesh, as ``svc/console``, each with the signed-in user's assertion.

Every failed call comes back as the mesh's own error (:class:`agentmesh.errors.MeshError`,
from the status and ``ErrorInfo``), which the pages show with its reason; nothing
here decides what a user may do.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, TypeVar

import grpc

from agentmesh import errors, spiffe, transport
from agentmesh.config import MeshConfig
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import audit_service_pb2_grpc as audit_grpc
from agentmesh.v1 import decision_center_service_pb2 as dc_pb2
from agentmesh.v1 import decision_center_service_pb2_grpc as dc_grpc
from agentmesh.v1 import policy_service_pb2 as policy_pb2
from agentmesh.v1 import policy_service_pb2_grpc as policy_grpc
from agentmesh.v1 import supervisor_service_pb2 as pb
from agentmesh.v1 import supervisor_service_pb2_grpc as pb_grpc

T = TypeVar("T")

WATCH_TIMEOUT_S = 600.0
"""The longest one live-progress stream stays open (the browser opens another if it must)."""


def _call(fn: Callable[[], T]) -> T:
    try:
        return fn()
    except grpc.RpcError as err:
        raise errors.from_rpc_error(err) from err


class Mesh:
    """Stubs of the supervisor, Decision Center, audit and policy over this process's channels."""

    def __init__(self, cfg: MeshConfig, tls: transport.TlsFiles) -> None:
        self._cfg = cfg
        self._tls = tls
        self._channels: dict[str, grpc.Channel] = {}

    def channel(self, peer: str) -> grpc.Channel:
        """The shared channel to a role (``supervisor``, ``audit``, ``policy``)."""
        if peer not in self._channels:
            self._channels[peer] = transport.secure_channel(self._cfg.address(peer), self._tls,
                                                            spiffe.service(peer),
                                                            default_timeout_s=self._cfg.call_timeout_s)
        return self._channels[peer]

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()

    @property
    def _sup(self) -> pb_grpc.SupervisorServiceStub:
        return pb_grpc.SupervisorServiceStub(self.channel("supervisor"))

    @property
    def _dc(self) -> dc_grpc.DecisionCenterServiceStub:
        return dc_grpc.DecisionCenterServiceStub(self.channel("supervisor"))

    @property
    def _audit(self) -> audit_grpc.AuditServiceStub:
        return audit_grpc.AuditServiceStub(self.channel("audit"))

    @property
    def _policy(self) -> policy_grpc.PolicyServiceStub:
        return policy_grpc.PolicyServiceStub(self.channel("policy"))

    # -- executions ---------------------------------------------------------------

    def analyze(self, assertion: str, tenant_id: str, text: str, *, release: bool,
                client_request_id: str) -> pb.Execution:
        """Starts an analysis and returns at once (``detach``); the page follows it live."""
        req = pb.AnalyzeRequest(user_assertion=assertion, tenant_id=tenant_id, request_text=text, detach=True,
                                request_release=release, client_request_id=client_request_id)
        result: pb.Execution = _call(lambda: self._sup.Analyze(req).execution)
        return result

    def list_executions(self, assertion: str, page_token: str = "", page_size: int = 20
                        ) -> pb.ListExecutionsResponse:
        req = pb.ListExecutionsRequest(user_assertion=assertion, page_token=page_token, page_size=page_size)
        result: pb.ListExecutionsResponse = _call(lambda: self._sup.ListExecutions(req))
        return result

    def execution(self, assertion: str, execution_id: str) -> pb.Execution:
        req = pb.GetExecutionRequest(user_assertion=assertion, execution_id=execution_id)
        result: pb.Execution = _call(lambda: self._sup.GetExecution(req).execution)
        return result

    def watch(self, assertion: str, execution_id: str) -> Generator[pb.WatchExecutionResponse, None, None]:
        """The execution's progress until it ends; cancel by closing the iterator."""
        req = pb.WatchExecutionRequest(user_assertion=assertion, execution_id=execution_id)
        stream = self._sup.WatchExecution(req, timeout=WATCH_TIMEOUT_S)
        try:
            yield from stream
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.CANCELLED:
                raise errors.from_rpc_error(err) from err
        finally:
            stream.cancel()

    def confirm(self, assertion: str, execution_id: str, token: str, capability_id: str, resource_id: str, *,
                decline: bool) -> pb.Execution:
        req = pb.ConfirmActionRequest(user_assertion=assertion, execution_id=execution_id, confirmation_token=token,
                                      capability_id=capability_id, resource_id=resource_id, decline=decline)
        timeout = max(self._cfg.call_timeout_s, 60.0)  # the release runs and is read back before the answer
        result: pb.Execution = _call(lambda: self._sup.ConfirmAction(req, timeout=timeout).execution)
        return result

    def cancel(self, assertion: str, execution_id: str, reason: str) -> pb.Execution:
        req = pb.CancelExecutionRequest(user_assertion=assertion, execution_id=execution_id, reason=reason)
        result: pb.Execution = _call(lambda: self._sup.CancelExecution(req).execution)
        return result

    # -- Decision Center ------------------------------------------------------------

    def reviews(self, assertion: str, status: int = 0) -> list[dc_pb2.ReviewItem]:
        req = dc_pb2.ListReviewsRequest(user_assertion=assertion, status=status)  # type: ignore[arg-type, unused-ignore]
        return list(_call(lambda: self._dc.ListReviews(req).reviews))

    def review(self, assertion: str, review_id: str) -> dc_pb2.GetReviewResponse:
        req = dc_pb2.GetReviewRequest(user_assertion=assertion, review_id=review_id)
        result: dc_pb2.GetReviewResponse = _call(lambda: self._dc.GetReview(req))
        return result

    def decide(self, assertion: str, review_id: str, decision: int, **fields: Any
               ) -> dc_pb2.SubmitReviewDecisionResponse:
        req = dc_pb2.SubmitReviewDecisionRequest(user_assertion=assertion, review_id=review_id,
                                                 decision=decision, **fields)  # type: ignore[arg-type]
        timeout = max(self._cfg.call_timeout_s, 60.0)
        result: dc_pb2.SubmitReviewDecisionResponse = _call(lambda: self._dc.SubmitReviewDecision(req, timeout=timeout))
        return result

    # -- operators: audit and kill switches -------------------------------------------

    def audit_records(self, execution_id: str) -> list[audit_pb2.AuditRecord]:
        """Every record of an execution, page after page."""

        def read() -> list[audit_pb2.AuditRecord]:
            out: list[audit_pb2.AuditRecord] = []
            token = ""
            while True:
                last = ""
                for page in self._audit.QueryRecords(audit_pb2.QueryRecordsRequest(
                        execution_id=execution_id, page_size=1000, page_token=token)):
                    out.extend(page.records)
                    last = page.next_page_token
                if not last:
                    return out
                token = last

        result: list[audit_pb2.AuditRecord] = _call(read)
        return result

    def checkpoint(self) -> audit_pb2.GetCheckpointResponse:
        req = audit_pb2.GetCheckpointRequest()
        result: audit_pb2.GetCheckpointResponse = _call(lambda: self._audit.GetCheckpoint(req))
        return result

    def inclusion_proof(self, index: int, tree_size: int) -> audit_pb2.GetInclusionProofResponse:
        req = audit_pb2.GetInclusionProofRequest(leaf_index=index, tree_size=tree_size)
        result: audit_pb2.GetInclusionProofResponse = _call(lambda: self._audit.GetInclusionProof(req))
        return result

    def consistency_proof(self, first: int, second: int) -> audit_pb2.GetConsistencyProofResponse:
        req = audit_pb2.GetConsistencyProofRequest(first_tree_size=first, second_tree_size=second)
        result: audit_pb2.GetConsistencyProofResponse = _call(lambda: self._audit.GetConsistencyProof(req))
        return result

    def kill_switches(self) -> list[policy_pb2.KillSwitch]:
        return list(_call(lambda: self._policy.ListKillSwitches(policy_pb2.ListKillSwitchesRequest()).kill_switches))

    def set_kill_switch(self, scope: int, target: str, enabled: bool, reason: str) -> policy_pb2.KillSwitch:
        req = policy_pb2.SetKillSwitchRequest(scope=scope, target=target, enabled=enabled,  # type: ignore[arg-type]
                                              reason=reason)
        result: policy_pb2.KillSwitch = _call(lambda: self._policy.SetKillSwitch(req).kill_switch)
        return result
