"""Which version of an agent a task goes to (PRD §57): registered endpoints, the canary split, the routing file."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from agentmesh.vocabulary import LifecycleStatus as S
from supervisor_svc.errors import ConfigError
from supervisor_svc.registry import AgentEntry, AgentManifest, AgentRegistry
from supervisor_svc.routing import (
    CanaryConfig,
    RetryConfig,
    Router,
    canary_bucket,
    default_routing_file,
    load_routing,
)


@dataclasses.dataclass(frozen=True)
class Version:
    """One agent version as the onboarding lists it."""

    manifest: AgentManifest
    status: S
    endpoint: str = ""
    spiffe_id: str = "spiffe://agentmesh.local/agent/training-agent"
    shipped: bool = False


class Versions:
    def __init__(self, *records: Version) -> None:
        self.records = list(records)

    def list(self, agent_id: str = "") -> list[Version]:
        return [r for r in self.records if not agent_id or r.manifest.agent_id == agent_id]


def _training(registry: AgentRegistry, version: str, **changes: object) -> AgentManifest:
    return dataclasses.replace(registry.get("training-agent").manifest, version=version, **changes)


def _router(registry: AgentRegistry, share: float = 20.0, **tenants: float) -> tuple[Router, AgentEntry]:
    shipped = registry.get("training-agent")
    versions = Versions(Version(shipped.manifest, S.ACTIVE, shipped=True),
                        Version(_training(registry, "1.1.0"), S.CANARY, endpoint="127.0.0.1:7601"))
    return Router(versions, CanaryConfig(share_percent=share, tenants=tenants)), shipped


def test_the_bucket_is_the_same_wherever_it_is_computed() -> None:
    assert canary_bucket("exe-1", "training-agent") == canary_bucket("exe-1", "training-agent")
    assert 0 <= canary_bucket("exe-1", "training-agent") < 100
    # Another agent of the same execution splits independently.
    buckets = {canary_bucket(f"exe-{i}", "training-agent") - canary_bucket(f"exe-{i}", "risk-agent")
               for i in range(50)}
    assert len(buckets) > 40


@pytest.mark.parametrize("share", [0.0, 5.0, 20.0, 50.0, 100.0])
def test_the_share_of_executions_is_the_configured_share(registry: AgentRegistry, share: float) -> None:
    router, entry = _router(registry, share)
    routes = [router.route(entry, tenant_id="acme", execution_id=f"exe-{i:05d}") for i in range(4000)]
    canary = [r for r in routes if r.canary]
    assert abs(len(canary) / len(routes) * 100 - share) < 2.5
    # Deterministic per execution: the same execution always gets the same version.
    again = [router.route(entry, tenant_id="acme", execution_id=f"exe-{i:05d}").canary for i in range(4000)]
    assert again == [r.canary for r in routes]
    for i, r in enumerate(routes[:200]):
        assert r.canary == (canary_bucket(f"exe-{i:05d}", "training-agent") < share)


def test_a_canary_route_names_its_version_endpoint_and_why(registry: AgentRegistry) -> None:
    router, entry = _router(registry, 50.0)
    execution_id = next(f"exe-{i}" for i in range(100) if canary_bucket(f"exe-{i}", "training-agent") < 50)
    route = router.route(entry, tenant_id="acme", execution_id=execution_id)
    assert route.canary and route.version == "1.1.0" and route.entry.status is S.CANARY
    assert route.endpoint.address == "127.0.0.1:7601"
    assert route.endpoint.spiffe_id == "spiffe://agentmesh.local/agent/training-agent"
    assert route.reason == (f"canary share 50%: execution bucket "
                            f"{canary_bucket(execution_id, 'training-agent'):.2f} < 50")
    other = next(f"exe-{i}" for i in range(100) if canary_bucket(f"exe-{i}", "training-agent") >= 50)
    active = router.route(entry, tenant_id="acme", execution_id=other)
    assert not active.canary and active.version == "1.0.0"
    assert active.endpoint.address == "" and active.endpoint.shown == "config"
    assert active.reason.startswith("ACTIVE version (canary 1.1.0 share 50%: execution bucket")


def test_a_tenant_may_have_its_own_share(registry: AgentRegistry) -> None:
    router, entry = _router(registry, 100.0, globex=0.0)
    assert router.route(entry, tenant_id="acme", execution_id="exe-1").canary
    routed = router.route(entry, tenant_id="globex", execution_id="exe-1")
    assert not routed.canary and "has no share for globex" in routed.reason


def test_without_an_execution_the_active_version(registry: AgentRegistry) -> None:
    router, entry = _router(registry, 100.0)
    routed = router.route(entry, tenant_id="acme")
    assert not routed.canary and routed.version == "1.0.0"


def test_a_canary_lacking_a_required_capability_gets_no_traffic(registry: AgentRegistry) -> None:
    shipped = registry.get("training-agent")
    router = Router(Versions(Version(_training(registry, "1.1.0", capabilities=()), S.CANARY, endpoint="h:1")),
                    CanaryConfig(share_percent=100))
    routed = router.route(shipped, tenant_id="acme", execution_id="exe-1",
                          required_capabilities=["training.getStatus"])
    assert not routed.canary and routed.reason == "ACTIVE version (canary 1.1.0 lacks training.getStatus)"


def test_a_registered_active_version_is_reached_at_its_endpoint(registry: AgentRegistry) -> None:
    served = _training(registry, "1.2.0")
    router = Router(Versions(Version(registry.get("training-agent").manifest, S.DEPRECATED, shipped=True),
                             Version(served, S.ACTIVE, endpoint="10.0.0.7:7612")))
    routed = router.route(AgentEntry(served, S.ACTIVE, "", "", ""), tenant_id="acme", execution_id="exe-1")
    assert (routed.version, routed.endpoint.address, routed.reason) == ("1.2.0", "10.0.0.7:7612", "ACTIVE version")


def test_without_versions_every_agent_is_its_shipped_version(registry: AgentRegistry) -> None:
    routed = Router().route(registry.get("risk-agent"), tenant_id="acme", execution_id="exe-1")
    assert (routed.version, routed.endpoint.key, routed.canary) == ("1.0.0", "config:risk-agent", False)


def test_the_shipped_routing_file_holds_the_documented_defaults() -> None:
    config = load_routing()
    assert config.canary == CanaryConfig()
    assert config.retry == RetryConfig()
    assert default_routing_file().name == "routing.yaml"


def test_backoff_is_exponential_and_capped() -> None:
    retry = RetryConfig(initial_backoff_ms=100, multiplier=3, max_backoff_ms=500)
    assert [retry.backoff_ms(n) for n in (1, 2, 3, 4)] == [100, 300, 500, 500]


@pytest.mark.parametrize(("text", "field"), [
    ("canary: {share_percent: 120}\n", "canary.share_percent"),
    ("canary: {min_tasks: 30, window: 10}\n", "canary"),
    ("retry: {max_attempts: 0}\n", "retry.max_attempts"),
    ("retry: {backoff: 1}\n", "retry.backoff"),
    ("canary: {tenants: {Acme!: 5}}\n", "canary.tenants"),
])
def test_a_bad_routing_file_names_the_field(tmp_path: Path, text: str, field: str) -> None:
    path = tmp_path / "routing.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_routing(path)
    assert field in str(err.value) and str(path) in str(err.value)
