"""One trace crosses two processes, exported over OTLP to a real receiver."""

from __future__ import annotations

import uuid
from typing import Any

import grpc
import pytest

from agentmesh import spiffe, telemetry, transport
from agentmesh.config import MeshConfig
from agentmesh.pki import leaf_paths
from agentmesh.v1 import policy_service_pb2 as policy_pb2
from agentmesh.v1 import policy_service_pb2_grpc as policy_grpc

from .conftest import RoleProcess
from .otlp_receiver import OtlpReceiver


def _trace_across(spans: list[dict[str, Any]], execution_id: str) -> list[dict[str, Any]]:
    roots = [s for s in spans if s["attributes"].get(telemetry.EXECUTION_ID) == execution_id]
    if not roots:
        return []
    trace_id = roots[0]["trace_id"]
    return [s for s in spans if s["trace_id"] == trace_id]


def test_a_call_crossing_two_services_is_one_trace(mesh_config: MeshConfig) -> None:
    execution_id = f"exe-{uuid.uuid4().hex[:8]}"
    with OtlpReceiver() as receiver:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.port}",
               "OTEL_EXPORTER_OTLP_INSECURE": "true", "OTEL_BSP_SCHEDULE_DELAY": "100"}
        audit = RoleProcess(mesh_config, "audit", "audit_svc", env=env)
        policy = None
        try:
            policy = RoleProcess(mesh_config, "policy", "policy_svc", peers={"audit": audit.address}, env=env)
            # A training agent may not change kill switches: the policy service
            # refuses the call and records the refusal in the audit service.
            tls = transport.TlsFiles.of(leaf_paths(mesh_config.mesh_home.workloads, spiffe.agent("training-agent")),
                                        mesh_config.mesh_home.trust_bundle)
            channel = transport.secure_channel(policy.address, tls, spiffe.service("policy"))
            with channel, telemetry.mesh_ids(execution_id=execution_id, correlation_id="corr-1"), \
                    pytest.raises(grpc.RpcError) as info:
                policy_grpc.PolicyServiceStub(channel).SetKillSwitch(policy_pb2.SetKillSwitchRequest())
            assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED

            def complete(spans: list[dict[str, Any]]) -> bool:
                # Every span asserted on below: each process exports in its own batches, so the policy
                # server's span (which ends after its call to audit) may come after audit's.
                names = {(s["service"], s["name"].rsplit("/", 1)[-1]) for s in _trace_across(spans, execution_id)}
                return {("policy", "SetKillSwitch"), ("policy", "AppendRecord"), ("audit", "AppendRecord")} <= names

            spans = _trace_across(receiver.wait_for(complete), execution_id)
        finally:
            if policy is not None:
                policy.stop()
            audit.stop()
    by_id = {s["span_id"]: s for s in spans}
    policy_server = next(s for s in spans if s["service"] == "policy" and s["name"].endswith("SetKillSwitch"))
    audit_server = next(s for s in spans if s["service"] == "audit" and s["name"].endswith("AppendRecord"))
    assert policy_server["attributes"][telemetry.EXECUTION_ID] == execution_id
    assert audit_server["attributes"][telemetry.EXECUTION_ID] == execution_id
    assert audit_server["attributes"][telemetry.CORRELATION_ID] == "corr-1"
    # audit's server span → policy's client span → policy's server span
    client_span = by_id[audit_server["parent_id"]]
    assert client_span["service"] == "policy" and client_span["name"].endswith("AppendRecord")
    assert client_span["parent_id"] == policy_server["span_id"]
