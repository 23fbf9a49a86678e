"""Random requests to every RPC of every mesh server, from the identity the caller table lets call it.

Each request is a well-formed message of the RPC's type with its fields filled at random (ids and names the
demo world knows, strings at and past the limits, numbers at their extremes, enum numbers in and out of their
enum, nested messages, Structs, grants that decode or do not). Whatever it asks, a server answers it with a
status that says what was wrong with it or what it found — never INTERNAL or UNKNOWN, which would mean some
input reached code that did not expect it — and stays up. The mesh is one of its own, so what these requests
change (kill switches, tenants, statuses) touches no other test.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import random
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pool, message_factory
from google.protobuf.descriptor import FieldDescriptor, MethodDescriptor
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentmesh import spiffe, v1

from .conftest import OPERATOR, PLATFORM, Mesh, running_mesh

pytestmark = pytest.mark.integration

ROUNDS = 24
"""Random requests per RPC."""

SEED = os.environ.get("AGENTMESH_TEST_SEED", "0")
"""The same requests on every run unless set (any text): another seed, other requests."""

SERVICES = {
    # service: (server process, caller)
    "SupervisorService": ("supervisor", PLATFORM),
    "DecisionCenterService": ("supervisor", PLATFORM),
    "AgentRegistryService": ("supervisor", OPERATOR),
    "PolicyService": ("policy", OPERATOR),
    "TenantService": ("policy", OPERATOR),
    "CapabilityService": ("capability", spiffe.agent("training-agent")),
    "ModelService": ("model", spiffe.agent("risk-agent")),
    "AuditService": ("audit", spiffe.service("capability")),
    "SpecialistService": ("training-agent", spiffe.service("supervisor")),
}
"""Each service of the protos, where it runs, and an identity the caller table lets call its methods (CALLER_OF
names the identity of those that another calls)."""

CALLER_OF = {
    "/agentmesh.v1.CapabilityService/SetCapabilityStatus": OPERATOR,
    "/agentmesh.v1.CapabilityService/ListCapabilities": PLATFORM,
    "/agentmesh.v1.ModelService/ListModels": PLATFORM,
    "/agentmesh.v1.ModelService/RevokeExecution": spiffe.service("supervisor"),
    "/agentmesh.v1.AuditService/QueryRecords": OPERATOR,
    "/agentmesh.v1.AuditService/GetCheckpoint": OPERATOR,
    "/agentmesh.v1.AuditService/GetInclusionProof": OPERATOR,
    "/agentmesh.v1.AuditService/GetConsistencyProof": OPERATOR,
}
"""Methods whose caller is another than their service's."""

NEVER = {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.DATA_LOSS}

WORDS = ["", "acme", "globex", "alice", "W-1001", "WP-10231", "training-agent", "risk-agent", "training.getStatus",
         "workPermit.release", "permit:WP-10231", "worker:W-1001", "1.0.0", "exe-0123456789abcdef", "NR-10",
         "spiffe://agentmesh.local/agent/training-agent", "user:acme/alice", "svc:supervisor", "PASS", "a" * 128,
         "a" * 129, "é ü 漢字 \U0001f600", "x\ty", "line\nbreak", "../../etc/passwd", "' OR 1=1 --", "2026-11-30",
         "2026-02-30", "-1", "0", "9" * 40, "ALLOW", "none"]


CLEAN_WORDS = [w for w in WORDS if len(w) <= 128 and w.isprintable() and " " not in w and "'" not in w]
"""Words that pass every string category's limits, so a request made of them reaches the servicer."""


class _Maker:
    """Fills a request at random; ``clean`` requests keep within the edge's input limits (so they reach the
    servicer's own checks), the others may break any of them."""

    def __init__(self, rng: random.Random, mesh: Mesh) -> None:
        self.rng = rng
        self.mesh = mesh
        self.clean = True

    def fill(self, message: Any, depth: int = 0) -> Any:
        for field in message.DESCRIPTOR.fields:
            if self.rng.random() < 0.35:
                continue
            if field.is_repeated:
                sub = field.message_type
                if sub is not None and sub.GetOptions().map_entry:
                    for _ in range(self.rng.randint(0, 2)):
                        key = self.scalar(sub.fields_by_name["key"])
                        value_field = sub.fields_by_name["value"]
                        if value_field.message_type is not None:
                            self.message(getattr(message, field.name)[key], depth + 1)
                        else:
                            getattr(message, field.name)[key] = self.scalar(value_field)
                    continue
                for _ in range(self.rng.randint(0, 3)):
                    if field.message_type is not None:
                        if depth < 4:
                            self.message(getattr(message, field.name).add(), depth + 1)
                    else:
                        getattr(message, field.name).append(self.scalar(field))
            elif field.message_type is not None:
                if depth < 4:
                    self.message(getattr(message, field.name), depth + 1)
            else:
                setattr(message, field.name, self.scalar(field))
        return message

    def message(self, target: Any, depth: int) -> None:
        name = target.DESCRIPTOR.full_name
        if name == "google.protobuf.Struct":
            target.update(self.json(2))
        elif name == "google.protobuf.Value":
            target.string_value = self.rng.choice(WORDS)
        elif name == "google.protobuf.ListValue":
            target.extend([self.rng.choice(WORDS), 1.5])
        elif name == "google.protobuf.Timestamp":
            target.seconds = self.rng.choice([0, 1_796_000_000, 253_402_300_799, -62_135_596_800])
        elif name == "agentmesh.v1.SignedTaskGrant" and self.rng.random() < 0.5:
            grant = self.mesh.grant(spiffe.agent("training-agent"), ["training.getStatus"], ["worker:W-1001"])
            target.CopyFrom(grant)
        else:
            self.fill(target, depth)

    def json(self, depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for _ in range(self.rng.randint(0, 4)):
            kind = self.rng.random()
            key = self.rng.choice(["permit_id", "worker_id", "worker_ids", "query", "limit", "scope", "x",
                                   "tenant_id", "valid_until", "reason"])
            if kind < 0.4:
                out[key] = self.rng.choice(WORDS)
            elif kind < 0.7:
                numbers = [0, -1, 3, 1e300, 0.5, 2 ** 53]
                out[key] = self.rng.choice(numbers if self.clean else [float("nan"), float("-inf")])
            elif kind < 0.8:
                out[key] = self.rng.random() < 0.5
            elif kind < 0.9 and depth:
                out[key] = self.json(depth - 1)
            else:
                out[key] = [self.rng.choice(WORDS) for _ in range(self.rng.randint(0, 3))]
        return out

    def scalar(self, field: FieldDescriptor) -> Any:
        rng = self.rng
        kind = field.type
        if kind == FieldDescriptor.TYPE_STRING:
            return rng.choice(CLEAN_WORDS if self.clean else WORDS)
        if kind == FieldDescriptor.TYPE_BYTES:
            return rng.randbytes(rng.choice([0, 1, 32, 64] if self.clean else [0, 1, 32, 64, 600, 20_000]))
        if kind == FieldDescriptor.TYPE_BOOL:
            return rng.random() < 0.5
        if kind == FieldDescriptor.TYPE_ENUM:
            numbers = [v.number for v in field.enum_type.values]
            return rng.choice(numbers) if self.clean or rng.random() < 0.9 else 99
        if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
            numbers = [0.0, -1.0, 0.5, 1.0, 1e300, -1e300]
            return rng.choice(numbers if self.clean else [*numbers, float("nan"), float("inf")])
        if kind in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
            return rng.choice([0, 1, 100, 2 ** 32 - 1])
        if kind in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
            return rng.choice([0, 1, 100, 2 ** 64 - 1])
        if kind in (FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_SFIXED64):
            return rng.choice([0, 1, -1, 100, 2 ** 63 - 1, -(2 ** 63)])
        return rng.choice([0, 1, -1, 100, 2 ** 31 - 1, -(2 ** 31)])


def _methods() -> list[tuple[str, MethodDescriptor, str, Any]]:
    out = []
    for module_info in pkgutil.iter_modules(v1.__path__):
        if not module_info.name.endswith("_service_pb2"):
            continue
        module = importlib.import_module(f"agentmesh.v1.{module_info.name}")
        for service in module.DESCRIPTOR.services_by_name.values():
            server, caller = SERVICES[service.name]  # a new service needs its row
            for method in service.methods:
                path = f"/{service.full_name}/{method.name}"
                out.append((path, method, server, CALLER_OF.get(path, caller)))
    return sorted(out, key=lambda m: m[0])


METHODS = _methods()


@pytest.fixture(scope="module")
def own_mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    yield from running_mesh(tmp_path_factory, "random-requests")


def _call(mesh: Mesh, path: str, method: MethodDescriptor, server: str, caller: Any, request: Any) -> Any:
    channel = mesh.channel(server, caller)
    response_type = message_factory.GetMessageClass(method.output_type)
    assert not method.client_streaming, f"{path}: a client stream needs a maker of its own"
    if method.server_streaming:
        stream = channel.unary_stream(path, request_serializer=type(request).SerializeToString,
                                      response_deserializer=response_type.FromString)
        return list(stream(request, timeout=20))
    call = channel.unary_unary(path, request_serializer=type(request).SerializeToString,
                               response_deserializer=response_type.FromString)
    return call(request, timeout=20)


@pytest.mark.parametrize("path, method, server, caller", METHODS, ids=[m[0].rsplit(".", 1)[1] for m in METHODS])
def test_no_request_answers_internal(own_mesh: Mesh, path: str, method: MethodDescriptor, server: str,
                                     caller: Any) -> None:
    rng = random.Random(f"{path}:{SEED}")
    maker = _Maker(rng, own_mesh)
    request_type = message_factory.GetMessageClass(descriptor_pool.Default().FindMessageTypeByName(
        method.input_type.full_name))
    bad: list[str] = []
    for i in range(ROUNDS):
        maker.clean = i % 3 != 2
        request = maker.fill(request_type()) if i else request_type()
        if "user_assertion" in request.DESCRIPTOR.fields_by_name and rng.random() < 0.7:
            request.user_assertion = own_mesh.token(rng.choice(["alice", "bob", "olga"]),
                                                    rng.choice(["analyst", "reviewer", "admin"]))
        try:
            _call(own_mesh, path, method, server, caller, request)
        except grpc.RpcError as err:
            if err.code() in NEVER:
                bad.append(f"round {i}: {err.code().name} {err.details()!r} for {request}"[:1500])
    assert not bad, "\n".join(bad)
    # The server is still there and serves.
    health = health_pb2_grpc.HealthStub(own_mesh.channel(server, caller))
    answer = health.Check(health_pb2.HealthCheckRequest(), timeout=10)
    assert answer.status == health_pb2.HealthCheckResponse.SERVING
