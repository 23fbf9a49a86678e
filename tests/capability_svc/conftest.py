"""Fixtures for the capability runtime: registry, internal store, sandbox LMS, gateways."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from capability_svc.external_gateway import ExternalGateway, GatewayConfig, LmsClient
from capability_svc.internal_runtime import InternalBackend, InternalStore
from capability_svc.invocation import InvocationContext
from capability_svc.knowledge_store import KnowledgeBackend, KnowledgeLibrary
from capability_svc.registry import CapabilityRegistry, default_capabilities_dir
from capability_svc.world import load_world
from lms_sandbox import LmsSandbox, load_lms_data

REPO = Path(__file__).resolve().parents[2]
DEMO_WORLD = REPO / "agentmesh" / "data" / "demo_world.yaml"
NOW = dt.datetime(2026, 11, 30, 9, 0, tzinfo=dt.UTC)


class FakeClock:
    """A settable wall clock (datetime) for stores and registries."""

    def __init__(self, now: dt.datetime = NOW):
        self.now = now

    def __call__(self) -> dt.datetime:
        return self.now


class FakeMonotonic:
    """A monotonic clock that only moves when told to."""

    def __init__(self) -> None:
        self.value = 1000.0

    def __call__(self) -> float:
        return self.value

    def advance(self, seconds: float) -> None:
        self.value += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock) -> InternalStore:
    """An internal store loaded with the demo world."""
    s = InternalStore(tmp_path / "internal.db", clock=clock)
    load_world(DEMO_WORLD, s)
    return s


@pytest.fixture
def backend(store: InternalStore) -> InternalBackend:
    return InternalBackend(store)


@pytest.fixture(scope="session")
def knowledge_library() -> KnowledgeLibrary:
    """The shipped knowledge stores, loaded once."""
    return KnowledgeLibrary.load()


@pytest.fixture
def knowledge(knowledge_library: KnowledgeLibrary) -> KnowledgeBackend:
    """The knowledge backend over the shipped stores, on the demo's clock."""
    return KnowledgeBackend(knowledge_library, clock=lambda: NOW)


@pytest.fixture
def registry(tmp_path: Path, clock: FakeClock) -> Iterator[CapabilityRegistry]:
    reg = CapabilityRegistry.load(default_capabilities_dir(), tmp_path / "capability.db", clock=clock)
    try:
        yield reg
    finally:
        reg.close()


@pytest.fixture
def acme() -> InvocationContext:
    return InvocationContext("acme", "alice", "work-permit-agent", "exec-1")


@pytest.fixture
def globex() -> InvocationContext:
    return InvocationContext("globex", "grace", "work-permit-agent", "exec-2")


@pytest.fixture
def lms() -> Iterator[LmsSandbox]:
    """The sandbox LMS serving the demo world, on a free loopback port."""
    sandbox = LmsSandbox(load_lms_data(DEMO_WORLD)).start()
    try:
        yield sandbox
    finally:
        sandbox.stop()


GatewayFactory = Callable[..., ExternalGateway]


@pytest.fixture
def make_gateway() -> Iterator[GatewayFactory]:
    """Build gateways with small timeouts and no real sleeping; all closed at the end."""
    made: list[ExternalGateway] = []

    def factory(base_url: str, **overrides: object) -> ExternalGateway:
        kwargs: dict[str, object] = {
            "timeout_s": 0.2,
            "max_attempts": 2,
            "backoff_initial_s": 0.01,
            "breaker_failure_threshold": 50,
        }
        runtime = {k: overrides.pop(k) for k in ("clock", "sleep") if k in overrides}
        kwargs.update(overrides)
        config = GatewayConfig(base_url, **kwargs)  # type: ignore[arg-type]
        gateway = ExternalGateway(config, name="lms", **runtime)  # type: ignore[arg-type]
        made.append(gateway)
        return gateway

    try:
        yield factory
    finally:
        for gateway in made:
            gateway.close()


@pytest.fixture
def lms_client(lms: LmsSandbox, make_gateway: GatewayFactory) -> LmsClient:
    return LmsClient(make_gateway(lms.base_url))


@pytest.fixture
def demo_world() -> Path:
    return DEMO_WORLD


@pytest.fixture
def monotonic() -> FakeMonotonic:
    return FakeMonotonic()


@pytest.fixture
def mesh(tmp_path: Path, registry: CapabilityRegistry, store: InternalStore, backend: InternalBackend) -> Iterator[Any]:
    """The governed invoker over the demo world (see ``governed.py``)."""
    from .governed import make_mesh

    built, idempotency = make_mesh(tmp_path, registry, store, backend)
    try:
        yield built
    finally:
        idempotency.close()
