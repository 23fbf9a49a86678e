"""Benchmark of what the agent registry costs a task dispatch, as agent versions are onboarded.

Run from the repository root::

    .venv/bin/python benchmarks/bench_agent_dispatch.py [--versions 0 1 5 20] [--calls 200]

Every task the supervisor dispatches asks the registry whether its agent may take it
(``AgentRegistry.ensure_active``) and the router which version it goes to
(``Router.route``). Both read the registered versions of onboarding (PRD §57) and the
shipped agents' statuses. This registers 0, 1, 5 and 20 versions of the training agent
(in DRAFT, as ``RegisterAgentVersion`` leaves them) in a temporary registry and
onboarding database, then prints the CPU time of each call. The cost should not grow
with the number of versions: the registry reads its files again only when they change.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentmesh import assertion  # noqa: E402
from agentmesh.vocabulary import LifecycleStatus, RiskLevel  # noqa: E402
from supervisor_svc.onboarding import CapabilityFacts, Onboarding, ReleaseManager  # noqa: E402
from supervisor_svc.registry import AgentRegistry, default_agents_dir  # noqa: E402
from supervisor_svc.routing import Router  # noqa: E402

OPERATOR = assertion.UserIdentity("acme", "olga", ("agent-operator",), "s", "c")
SPIFFE = "spiffe://agentmesh.local/agent/training-agent"
CAPABILITIES = [CapabilityFacts("training.getStatus", "2.1.0", LifecycleStatus.ACTIVE, RiskLevel.LOW,
                                False, False, False)]


def _manifest(version: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((default_agents_dir() / "training-agent.yaml").read_text())
    data["version"] = version
    return data


def _cpu_ms(call: Any, calls: int) -> float:
    start = time.process_time()
    for _ in range(calls):
        call()
    return (time.process_time() - start) / calls * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--versions", type=int, nargs="+", default=[0, 1, 5, 20],
                        help="registered versions to measure with (default 0 1 5 20)")
    parser.add_argument("--calls", type=int, default=200, help="calls timed per figure (default 200)")
    args = parser.parse_args()
    print("registered versions | ensure_active CPU-ms | route CPU-ms")
    with tempfile.TemporaryDirectory() as tmp, AgentRegistry(Path(tmp) / "agents.db") as registry:
        onboarding = Onboarding(Path(tmp) / "lifecycle.db", registry, lambda: ReleaseManager(CAPABILITIES),
                                authorize=lambda *_: (True, ["agent.manage"], "d-1"),
                                audit=lambda event, **fields: None)
        router = Router(onboarding)
        registered = 0
        try:
            for wanted in sorted(args.versions):
                while registered < wanted:
                    registered += 1
                    onboarding.register(OPERATOR, _manifest(f"1.{registered}.0"), "127.0.0.1:7600", SPIFFE)
                entry = registry.get("training-agent")
                active = _cpu_ms(lambda: registry.ensure_active("risk-agent"), args.calls)
                route = _cpu_ms(lambda e=entry: router.route(e, tenant_id="acme", execution_id="exe-1"), args.calls)
                print(f"{registered:19d} | {active:20.3f} | {route:12.3f}")
        finally:
            onboarding.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
