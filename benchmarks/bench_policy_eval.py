"""Benchmark of policy evaluation (no gRPC): Cedar alone, and PolicyEngine.authorize.

Run from the repository root::

    .venv/bin/python benchmarks/bench_policy_eval.py
    .venv/bin/python benchmarks/bench_policy_eval.py --iterations 20000 --json

Measures, over a round-robin mix of requests (ALLOW read, cross-tenant DENY,
SYSTEM-actor read, mutation needing confirmation, high risk needing approval):

  * cedar       one ``cedarpy.is_authorized`` call as the engine makes it:
                pre-parsed PolicySet and Entities handles, the request built
                beforehand. This is "Cedar evaluation alone" (target p50 <= 200 us).
  * cedar+schema  the same call also validating the request against the
                pre-parsed Schema handle (the engine's ``validate_requests``).
  * cedar-text  policies, entities and schema passed as text, re-parsed per
                call: what the handles save (fewer iterations; it is slow).
  * authorize   ``PolicyEngine.authorize`` end to end: validation, context
                building, one Cedar call (two for obligations), the decision
                object; plus decisions/s on one thread.

Latencies are per call, in microseconds; the garbage collector stays on, as
in the service.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cedarpy  # noqa: E402

from agentmesh.config import DEFAULT_AGENTS as AGENTS  # noqa: E402
from agentmesh.launcher import demo_tenants  # noqa: E402
from agentmesh.tenant_file import load_tenant_file  # noqa: E402
from policy_svc import engine as engine_module  # noqa: E402
from policy_svc.engine import DEFAULT_POLICY_DIR, PolicyEngine  # noqa: E402
from policy_svc.model import (  # noqa: E402
    ActorType,
    AgentPrincipal,
    AuthorizationRequest,
    OperationContext,
    OperationKind,
    ResourceRef,
    RiskLevel,
    RiskProfile,
    UserContext,
)
from policy_svc.tenants import check_definitions  # noqa: E402

TARGET_P50_US = 200.0


def _request(
    *,
    tenant: str = "acme",
    roles: tuple[str, ...] = ("viewer",),
    actor: ActorType = ActorType.USER,
    system_actor: str = "",
    capability: str = "workPermit.get",
    resource_tenant: str = "acme",
    risk: RiskProfile | None = None,
) -> AuthorizationRequest:
    return AuthorizationRequest(
        user=UserContext(tenant_id=tenant, user_id="alice", roles=roles),
        actor_type=actor,
        system_actor=system_actor,
        agent=AgentPrincipal(
            agent_id="permit-agent",
            agent_version="1.0.0",
            delegation_chain=(f"user:{tenant}/alice", "svc:supervisor", "agent:permit-agent"),
            capabilities=(
                "workPermit.get",
                "workPermit.search",
                "workPermit.release",
                "training.getStatus",
                "risk.evaluate",
            ),
        ),
        delegation_depth=2,
        capability_id=capability,
        capability_version="1.0.0",
        resource=ResourceRef(type="WorkPermit", id="WP-10231", tenant_id=resource_tenant),
        context=OperationContext(risk_profile=risk or RiskProfile(max_risk=RiskLevel.LOW)),
        operation=OperationKind.INVOKE,
    )


SCENARIOS: dict[str, AuthorizationRequest] = {
    "allow-read": _request(),
    "deny-cross-tenant": _request(roles=("admin",), resource_tenant="globex"),
    "allow-system-read": _request(
        actor=ActorType.SYSTEM,
        system_actor="TrainingExpirationScanner",
        capability="training.getStatus",
    ),
    "confirm-mutation": _request(
        roles=("permit-manager",),
        capability="workPermit.release",
        risk=RiskProfile(max_risk=RiskLevel.MEDIUM, can_mutate=True),
    ),
    "approve-high-risk": _request(
        roles=("analyst",),
        capability="risk.evaluate",
        risk=RiskProfile(max_risk=RiskLevel.HIGH),
    ),
}


def _percentile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def _measure(calls: list[Callable[[], object]], iterations: int, warmup: int) -> dict[str, float]:
    """Calls the callables round-robin; per-call latency percentiles in microseconds."""
    for i in range(warmup):
        calls[i % len(calls)]()
    samples: list[float] = []
    started = time.perf_counter()
    for i in range(iterations):
        call = calls[i % len(calls)]
        t0 = time.perf_counter_ns()
        call()
        samples.append((time.perf_counter_ns() - t0) / 1000)
    wall = time.perf_counter() - started
    samples.sort()
    return {
        "n": iterations,
        "p50_us": round(_percentile(samples, 0.50), 1),
        "p90_us": round(_percentile(samples, 0.90), 1),
        "p99_us": round(_percentile(samples, 0.99), 1),
        "per_second": round(iterations / wall),
    }


def run(policy_dir: Path, iterations: int, warmup: int, text_iterations: int) -> dict[str, Any]:
    """Runs every measurement; returns the figures."""
    engine = PolicyEngine.load(policy_dir)
    # The demo tenants in force, as a mesh applies them on first start.
    checked = check_definitions(load_tenant_file(demo_tenants()).definitions, engine, AGENTS)
    engine.set_tenants({d.tenant_id: roles for d, roles in checked})
    no_switches: frozenset[str] = frozenset()
    # What authorize() hands to Cedar, built once so only the call is timed.
    entities = engine._entities_with(engine._state, engine_module._parse_kill_switches(no_switches))
    requests = [engine_module._cedar_request(r) for r in SCENARIOS.values()]
    policy_set, schema = engine._policy_set, engine._schema

    results: dict[str, Any] = {}
    results["cedar"] = _measure(
        [lambda r=r: cedarpy.is_authorized(r, policy_set, entities) for r in requests],
        iterations,
        warmup,
    )
    results["cedar+schema"] = _measure(
        [lambda r=r: cedarpy.is_authorized(r, policy_set, entities, schema=schema) for r in requests],
        iterations,
        warmup,
    )
    policies_text = str(policy_set)
    entities_text = str(entities)
    schema_text = (policy_dir / "schema.cedarschema").read_text(encoding="utf-8")
    results["cedar-text"] = _measure(
        [lambda r=r: cedarpy.is_authorized(r, policies_text, entities_text, schema=schema_text) for r in requests],
        text_iterations,
        min(warmup, text_iterations),
    )
    results["authorize"] = _measure(
        [lambda r=r: engine.authorize(r, kill_switches=no_switches) for r in SCENARIOS.values()],
        iterations,
        warmup,
    )
    for name, request in SCENARIOS.items():
        results[f"authorize:{name}"] = _measure(
            [lambda request=request: engine.authorize(request, kill_switches=no_switches)],
            max(iterations // 5, 100),
            warmup // 5,
        )
    return results


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=5000, help="timed calls per measurement (default 5000)")
    parser.add_argument("--warmup", type=int, default=500, help="untimed calls before each measurement (default 500)")
    parser.add_argument(
        "--text-iterations", type=int, default=300, help="timed calls for the re-parse-per-call baseline (default 300)"
    )
    parser.add_argument(
        "--policy-dir", type=Path, default=DEFAULT_POLICY_DIR, help="policy directory (default: the shipped one)"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if args.iterations < 1 or args.text_iterations < 1 or args.warmup < 0:
        parser.error("iterations must be positive and warmup non-negative")

    results = run(args.policy_dir, args.iterations, args.warmup, args.text_iterations)
    if args.json:
        print(
            json.dumps(
                {
                    "python": platform.python_version(),
                    "cedarpy": getattr(cedarpy, "__version__", "?"),
                    "machine": platform.machine(),
                    "results": results,
                },
                indent=2,
            )
        )
        return 0
    print(f"{'measurement':34} {'n':>6} {'p50 us':>9} {'p90 us':>9} {'p99 us':>9} {'calls/s':>9}")
    for name, r in results.items():
        print(f"{name:34} {r['n']:>6} {r['p50_us']:>9} {r['p90_us']:>9} {r['p99_us']:>9} {r['per_second']:>9}")
    verdict = "meets" if results["cedar"]["p50_us"] <= TARGET_P50_US else "MISSES"
    print(f"\nCedar evaluation p50 {results['cedar']['p50_us']} us {verdict} the {TARGET_P50_US:.0f} us target.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
