"""The governed analysis next to the same task DAG in LangGraph and in plain asyncio, side by side.

Run from the repository root (LangGraph is a benchmark extra, never a runtime dependency)::

    .venv/bin/pip install -e '.[bench]'
    .venv/bin/python benchmarks/bench_compare.py [--delays 0,50,200] [--runs 20] [--rounds 3]

The DAG is the analysis plan of "Analyze permit WP-10231 ...": one task, then
three in parallel, then the join. For each specialist delay (every task sleeps
that long, in agentmesh through ``specialist_delay_ms``):

  * agentmesh   a whole mesh (``agentmesh up``, real processes over mTLS, policy,
                audit, capability calls), ``SupervisorService.Analyze`` over mTLS;
  * LangGraph   a ``StateGraph`` of four nodes and the join, in process (``invoke``);
  * asyncio     ``sleep`` then ``gather`` of three ``sleep``s: the floor.

Rounds alternate the three (``--runs`` calls each per round), so a noisy
neighbour slows all of them. It prints, per system, the wall time p50 / p99,
the overhead above the specialists' own critical path (wall - 2 x delay) and
total / critical path, each the median of the rounds, then agentmesh's ratios
to LangGraph. The agentmesh overhead is everything the governance does: the
agents' own capability calls, their policy decisions and audit records, the
supervisor's records and the hops between nine processes.
"""

from __future__ import annotations

import argparse
import asyncio
import operator
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_analysis  # noqa: E402

from agentmesh import launcher  # noqa: E402
from agentmesh.v1 import supervisor_service_pb2 as pb  # noqa: E402

STAGE_TWO = ("training", "compliance", "risk")


class _State(TypedDict):
    results: Annotated[list[str], operator.add]


def _langgraph(delay_s: float) -> Callable[[], object]:
    try:
        from langgraph.graph import END, START, StateGraph
    except ImportError:
        raise SystemExit("LangGraph is not installed: .venv/bin/pip install -e '.[bench]'") from None

    def task(name: str) -> Callable[[_State], dict[str, list[str]]]:
        def run(state: _State) -> dict[str, list[str]]:
            time.sleep(delay_s)
            return {"results": [name]}
        return run

    graph = StateGraph(_State)
    graph.add_node("work_permit", task("work_permit"))
    for name in STAGE_TWO:
        graph.add_node(name, task(name))
        graph.add_edge("work_permit", name)
    graph.add_node("join", lambda state: {"results": []})
    graph.add_edge(START, "work_permit")
    graph.add_edge(list(STAGE_TWO), "join")
    graph.add_edge("join", END)
    compiled = graph.compile()

    def once() -> object:
        out = compiled.invoke({"results": []})
        assert sorted(out["results"]) == sorted(["work_permit", *STAGE_TWO]), out
        return out
    return once


def _asyncio(delay_s: float) -> Callable[[], object]:
    async def plan() -> list[None]:
        await asyncio.sleep(delay_s)
        return list(await asyncio.gather(*(asyncio.sleep(delay_s) for _ in STAGE_TWO)))

    return lambda: asyncio.run(plan())


def _agentmesh(cfg: Any) -> Callable[[], object]:
    stub, token = bench_analysis._stub(cfg), bench_analysis._token(cfg)

    def once() -> object:
        ex = stub.Analyze(pb.AnalyzeRequest(user_assertion=token, tenant_id="acme",
                                            request_text=bench_analysis.REQUEST)).execution
        assert ex.status == pb.EXECUTION_STATUS_SUCCEEDED, ex.summary
        return ex
    return once


def _walls(once: Callable[[], object], runs: int) -> list[float]:
    walls = []
    for _ in range(runs):
        t0 = time.perf_counter()
        once()
        walls.append((time.perf_counter() - t0) * 1000)
    return sorted(walls)


def _p99(values: list[float]) -> float:
    return values[max(0, int(len(values) * 0.99) - 1)]


def compare(delay_ms: int, runs: int, rounds: int) -> dict[str, tuple[float, float, float, float]]:
    """Per system: (p50, p99, overhead p50, total / critical), medians of the rounds."""
    delay_s = delay_ms / 1000
    critical = 2 * delay_ms
    with tempfile.TemporaryDirectory() as tmp:
        cfg = bench_analysis._mesh(Path(tmp), delay_ms)
        try:
            systems = {"agentmesh": _agentmesh(cfg), "LangGraph": _langgraph(delay_s), "asyncio": _asyncio(delay_s)}
            for once in systems.values():  # warm up: connections, imports, compiled graphs
                for _ in range(3):
                    once()
            per_round: dict[str, list[tuple[float, float]]] = {name: [] for name in systems}
            for _ in range(rounds):
                for name, once in systems.items():
                    walls = _walls(once, runs)
                    per_round[name].append((statistics.median(walls), _p99(walls)))
        finally:
            launcher.down(cfg)
    out = {}
    for name, figures in per_round.items():
        p50 = statistics.median(f[0] for f in figures)
        p99 = statistics.median(f[1] for f in figures)
        out[name] = (p50, p99, p50 - critical, p50 / critical if critical else float("nan"))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--delays", default="0,50,200", help="specialist delays in ms (default 0,50,200)")
    parser.add_argument("--runs", type=int, default=20, help="calls per system per round (default 20)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    args = parser.parse_args()
    try:
        delays = [int(d) for d in args.delays.split(",") if d.strip()]
    except ValueError:
        parser.error(f"--delays: not a list of whole milliseconds: {args.delays!r}")
    _langgraph(0.0)  # fail early, with the install hint, if LangGraph is missing
    for delay_ms in delays:
        results = compare(delay_ms, args.runs, args.rounds)
        print(f"specialists {delay_ms} ms ({args.rounds} rounds of {args.runs}, medians)")
        for name, (p50, p99, overhead, ratio) in results.items():
            ratio_text = f"   total / critical path {ratio:6.3f}" if delay_ms else ""
            print(f"  {name:<10} p50 {p50:8.1f} ms   p99 {p99:8.1f} ms   overhead {overhead:7.1f} ms{ratio_text}")
        mesh, graph = results["agentmesh"], results["LangGraph"]
        print(f"  agentmesh / LangGraph: p50 {mesh[0] / graph[0]:.1f} x, overhead "
              f"{mesh[2] / graph[2] if graph[2] > 0 else float('inf'):.1f} x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
