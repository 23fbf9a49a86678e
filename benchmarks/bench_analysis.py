"""Benchmark of the governed analysis end to end over a real mesh.

Run from the repository root::

    .venv/bin/python benchmarks/bench_analysis.py [--delay-ms 100] [--runs 40] [--concurrency 8]

Starts a whole mesh (`agentmesh up --ports-auto`) in a temporary home twice:

  * with every specialist delayed --delay-ms per task: analysis latency p50/p99
    of "Analyze permit WP-10231 ..." (the 1 + 3 parallel plan) and the
    orchestration overhead above the specialists' own time, i.e. wall time
    minus the critical path (stage one + the slowest stage-two task, measured
    from the task timestamps the supervisor records);
  * without delay: analyses per second with --concurrency parallel callers (several
    counts: each in turn, in one mesh), and the CPU time each mesh process spent per
    analysis (user + system, from /proc/PID/stat; the kernel's part; the context
    switches of its threads, from /proc/PID/task/*/status), plus the benchmark's own
    client process;
  * with --function-cpu MODULE:NAME,...: also, for the throughput run, each named function's
    calls and thread CPU per analysis in every mesh process that calls it (the probe in
    benchmarks/function_cpu/, put on the processes' PYTHONPATH; the calling thread's own CPU,
    not its waits), e.g. --function-cpu supervisor_svc.executions:ExecutionStore.save;
  * with --rpc-counts: also, for the throughput run, the gRPC calls each method of the mesh served
    per analysis (its servicer method's calls, counted by the same probe), e.g. how many
    ``AppendRecords`` carried the analysis' audit records;
  * with --timeline: instead of the runs above, where one analysis' time goes: after --runs sequential
    analyses (specialists delayed --delay-ms, 0 by default here), the one of median latency, each of its
    audit records with the moment audit stamped it and each task's window, in milliseconds since its
    Analyze was sent;
  * with --call-counts: instead of the runs above, how much Python each process runs for one analysis: after
    --runs sequential analyses (specialists delayed --delay-ms, 0 by default here), the Python functions and
    built-ins each process called per analysis, and its most called functions (the probe in
    benchmarks/call_counts/). Counts barely move from run to run where times move by a third, so they show
    what a change removed; counting slows every call several times, so it tells nothing of time;
  * with --offered RATE ...: an open loop instead of the callers: analyses started at a
    fixed rate for --seconds whatever the mesh's pace, each timed from its planned start
    (so a backlog counts), reporting what completed per second, the latency p50/p99 and
    any analysis not SUCCEEDED or refused.
  * with --database-url URL (a PostgreSQL server): any of the above with the executions, idempotency
    keys and tenants in a new database on it, as a scale-out mesh keeps them (one supervisor).

Targets on the 2-core machine class (issue 13): a sequential analysis with 0 ms specialists <= 20 ms p50;
overhead <= 10 ms p50 with 50 ms specialists; >= 60 analyses/s with 8-16 callers; at 40/s offered, p99 <= 250 ms.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from proc_usage import Usage, usage  # noqa: E402

from agentmesh import assertion, config, launcher, spiffe, transport  # noqa: E402
from agentmesh.identities import PLATFORM_CLI, client_paths  # noqa: E402
from agentmesh.signing import load_private_key  # noqa: E402
from agentmesh.v1 import audit_service_pb2 as audit_pb2  # noqa: E402
from agentmesh.v1 import supervisor_service_pb2 as pb  # noqa: E402
from agentmesh.v1 import supervisor_service_pb2_grpc as pb_grpc  # noqa: E402

REQUEST = "Analyze permit WP-10231 and tell me if it can be released"
RPC_METHODS = (
    "supervisor_svc.servicer:SupervisorServicer.Analyze", "policy_svc.servicer:TenantServicer.GetTenant",
    "specialist_svc.servicer:SpecialistServicer.RunTask", "capability_svc.servicer:CapabilityServicer.InvokeCapability",
    "capability_svc.servicer:CapabilityServicer.InvokeCapabilities", "policy_svc.servicer:PolicyServicer.Authorize",
    "policy_svc.servicer:PolicyServicer.AuthorizeBatch", "model_svc.servicer:ModelServicer.Complete",
    "audit_svc.servicer:AuditServicer.AppendRecord", "audit_svc.servicer:AuditServicer.AppendRecords")
"""The servicer methods an analysis calls (``--rpc-counts``): each call of one is one RPC served."""
PROBE = Path(__file__).resolve().parent / "function_cpu"
CALL_PROBE = Path(__file__).resolve().parent / "call_counts"


POSTGRESQL_SERVER = ""
"""``--database-url``: the PostgreSQL server each mesh gets a new empty database on ("": SQLite files)."""


def _fresh_database(server_url: str) -> str:
    """A new, empty database on the PostgreSQL server of ``server_url``, dropped when the benchmark exits; its
    URL."""
    import psycopg

    name = f"agentmesh_bench_{os.getpid()}_{time.monotonic_ns()}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    atexit.register(_drop_database, server_url, name)
    return server_url.rsplit("/", 1)[0] + "/" + name


def _drop_database(server_url: str, name: str) -> None:
    import psycopg

    try:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    except psycopg.Error as err:
        print(f"could not drop the benchmark's database {name}: {err}", file=sys.stderr)


def _mesh(home: Path, delay_ms: int) -> config.MeshConfig:
    home.mkdir(exist_ok=True)
    settings: dict[str, object] = {"specialist_delay_ms": delay_ms}
    if POSTGRESQL_SERVER:
        settings["database_url"] = _fresh_database(POSTGRESQL_SERVER)
    (home / "config.yaml").write_text(json.dumps(settings))  # JSON is YAML: a URL's characters stay as they are
    cfg = config.load(home=str(home), environ={})
    cfg = cfg.model_copy(update={"ports": {k: 0 for k in cfg.ports}})
    launcher.up(cfg, progress=False)
    return cfg


def _stub(cfg: config.MeshConfig) -> pb_grpc.SupervisorServiceStub:
    addr = next(p.address for p in launcher.read_state(cfg) if p.name == "supervisor")
    tls = transport.TlsFiles.of(client_paths(cfg, PLATFORM_CLI), cfg.mesh_home.trust_bundle)
    return pb_grpc.SupervisorServiceStub(transport.secure_channel(addr, tls, spiffe.service("supervisor"),
                                                                  default_timeout_s=120))


def _token(cfg: config.MeshConfig) -> str:
    return assertion.issue(load_private_key(cfg.mesh_home.idp_key), tenant_id="acme", user_id="bench",
                           roles=["analyst"], ttl_s=7200)


def _secs(ts: object) -> float:
    return ts.ToNanoseconds() / 1e9  # type: ignore[attr-defined,no-any-return]


@contextlib.contextmanager
def _warm_mesh(delay_ms: int) -> Iterator[tuple[config.MeshConfig, pb_grpc.SupervisorServiceStub, str]]:
    """A mesh in a temporary home (specialists delayed ``delay_ms``), its supervisor's stub and a user's token,
    after three analyses (connections made, caches filled); taken down after."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg = _mesh(Path(tmp), delay_ms)
        try:
            stub, tok = _stub(cfg), _token(cfg)
            for _ in range(3):
                stub.Analyze(pb.AnalyzeRequest(user_assertion=tok, tenant_id="acme", request_text=REQUEST))
            yield cfg, stub, tok
        finally:
            launcher.down(cfg)


def latency(delay_ms: int, runs: int) -> None:
    with _warm_mesh(delay_ms) as (_, stub, tok):
        walls, overheads = [], []
        for _ in range(runs):
            t0 = time.perf_counter()
            ex = stub.Analyze(pb.AnalyzeRequest(user_assertion=tok, tenant_id="acme",
                                                request_text=REQUEST)).execution
            wall = time.perf_counter() - t0
            assert ex.status == pb.EXECUTION_STATUS_SUCCEEDED, ex.summary
            nodes = list(ex.graph.nodes)
            first, rest = nodes[0], nodes[1:]
            critical = (_secs(first.finished_at) - _secs(first.started_at)) + max(
                _secs(n.finished_at) - _secs(n.started_at) for n in rest)
            walls.append(wall * 1000)
            overheads.append((wall - critical) * 1000)
        walls.sort()
        overheads.sort()
        print(f"analysis, 1 + 3 parallel plan, each specialist delayed {delay_ms} ms ({runs} runs)")
        print(f"  latency p50 {statistics.median(walls):8.1f} ms   p99 {walls[int(len(walls) * .99) - 1]:8.1f} ms")
        print(f"  overhead above the critical path p50 {statistics.median(overheads):6.1f} ms   "
              f"p99 {overheads[int(len(overheads) * .99) - 1]:6.1f} ms")
        print(f"  sequential would be >= {4 * delay_ms} ms; the two-stage critical path is >= {2 * delay_ms} ms")


def timeline(runs: int, delay_ms: int) -> None:
    """The audit records and task windows of the median of ``runs`` sequential analyses (see --timeline)."""
    with _warm_mesh(delay_ms) as (cfg, stub, tok):
        seen = []
        for _ in range(runs):
            sent_us = time.time_ns() // 1000
            ex = stub.Analyze(pb.AnalyzeRequest(user_assertion=tok, tenant_id="acme",
                                                request_text=REQUEST)).execution
            seen.append((time.time_ns() // 1000 - sent_us, sent_us, ex))
        wall_us, sent_us, ex = sorted(seen, key=lambda s: s[0])[len(seen) // 2]
        print(f"timeline of the median of {runs} sequential analyses, specialists delayed {delay_ms} ms "
              f"({ex.execution_id}, "
              f"{pb.ExecutionStatus.Name(ex.status)}): {wall_us / 1000:.1f} ms from Analyze sent to answered")
        print("  ms     what (audit records: when audit stamped them)")
        with sqlite3.connect(f"file:{cfg.mesh_home.data / 'audit.db'}?mode=ro", uri=True) as db:
            rows = db.execute("SELECT entry, recorded_at FROM entries WHERE execution_id = ? ORDER BY idx",
                              (ex.execution_id,)).fetchall()
        events = []
        for entry, at_us in rows:
            record = audit_pb2.AuditRecord()
            record.ParseFromString(bytes(entry))
            name = audit_pb2.AuditEventType.Name(record.event_type).removeprefix("AUDIT_EVENT_TYPE_")
            events.append((at_us, f"{name} {record.agent_id} {record.capability_id}".rstrip()))
        for node in ex.graph.nodes:
            events.append((node.started_at.ToMicroseconds(), f"task {node.task_id} {node.target_agent_id} started"))
            events.append((node.finished_at.ToMicroseconds(), f"task {node.task_id} {node.target_agent_id} ended"))
        for at_us, what in sorted(events):
            print(f"  {(at_us - sent_us) / 1000:6.2f} {what}")


Calls = dict[str, dict[tuple[str, int, str], int]]
"""By process name: (file, first line, function) -> calls so far (file "C": a built-in)."""


def _call_snapshot(cfg: config.MeshConfig, directory: Path) -> Calls:
    """What each probed mesh process counted so far (see --call-counts)."""
    return {name: {(f, line, fn): n for f, line, fn, n in doc["calls"]}
            for name, doc in _probe_snapshots(cfg, directory, "call counts", wait_s=10).items()}


def _shown(path: str) -> str:
    """A file as the report names it: relative to the checkout, the interpreter's library or site-packages."""
    prefixes = {str(Path(__file__).resolve().parents[1]) + os.sep, os.path.dirname(os.__file__) + os.sep,
                *(s + os.sep for s in sys.path if s.endswith("site-packages"))}
    for prefix in sorted(prefixes, key=len, reverse=True):  # site-packages before the checkout it lies in
        if path.startswith(prefix):
            return path[len(prefix):]
    return path


def call_counts(runs: int, delay_ms: int, top: int = 8) -> None:
    """Python calls per analysis in every mesh process over ``runs`` sequential analyses (see --call-counts)."""
    with tempfile.TemporaryDirectory() as tmp:
        probed = Path(tmp)
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(CALL_PROBE), os.environ.get("PYTHONPATH")) if p)
        os.environ["AGENTMESH_CALL_COUNTS_DIR"] = str(probed)
        with _warm_mesh(delay_ms) as (cfg, stub, tok):
            before = _call_snapshot(cfg, probed)
            for _ in range(runs):
                ex = stub.Analyze(pb.AnalyzeRequest(user_assertion=tok, tenant_id="acme",
                                                    request_text=REQUEST)).execution
                if ex.status != pb.EXECUTION_STATUS_SUCCEEDED:
                    raise SystemExit(f"{ex.execution_id} ended {pb.ExecutionStatus.Name(ex.status)}: {ex.reason}")
            after = _call_snapshot(cfg, probed)
    per: dict[str, dict[tuple[str, int, str], float]] = {}
    for name, counts in after.items():
        was = before.get(name, {})
        per[name] = {k: (n - was.get(k, 0)) / runs for k, n in counts.items() if n > was.get(k, 0)}

    def python(calls: dict[tuple[str, int, str], float]) -> float:
        return sum(n for k, n in calls.items() if k[0] != "C")

    total_py = sum(python(c) for c in per.values())
    total_c = sum(n for c in per.values() for k, n in c.items() if k[0] == "C")
    print(f"calls per analysis over {runs} sequential analyses, specialists delayed {delay_ms} ms: "
          f"{total_py:,.0f} Python functions and {total_c:,.0f} built-ins in the mesh's processes")
    print(f"  {'process':<24} {'Python':>8} {'built-in':>9}   most called Python functions")
    for name, calls in sorted(per.items(), key=lambda kv: -python(kv[1])):
        py = python(calls)
        builtin = sum(n for k, n in calls.items() if k[0] == "C")
        print(f"  {name:<24} {py:8,.0f} {builtin:9,.0f}")
        if py < 1000:
            continue
        by_file: dict[str, float] = {}
        for (f, _, _), n in calls.items():
            if f != "C":
                by_file[_shown(f)] = by_file.get(_shown(f), 0) + n
        print("      by file: " + ", ".join(f"{f} {n:,.0f}" for f, n in
                                           sorted(by_file.items(), key=lambda kv: -kv[1])[:top]))
        for (f, line, fn), n in sorted(((k, n) for k, n in calls.items() if k[0] != "C"),
                                       key=lambda kv: -kv[1])[:top]:
            print(f"      {n:8,.1f}  {fn} ({_shown(f)}:{line})")


def _cpu_by_process(cfg: config.MeshConfig) -> dict[str, Usage]:
    spent = {p.name: usage(p.pid) for p in launcher.read_state(cfg)}
    spent["(benchmark client)"] = usage(os.getpid())
    return spent


def _per_analysis(before: dict[str, Usage], after: dict[str, Usage], analyses: int) -> dict[str, Usage]:
    n = max(1, analyses)
    return {name: Usage(*((a - b) / n for a, b in zip(after[name], before.get(name, Usage()), strict=True)))
            for name in after}


def _print_cpu(per: dict[str, Usage]) -> None:
    mesh = [u for k, u in per.items() if not k.startswith("(")]
    total = sum(u.cpu_s for u in mesh) * 1000
    print(f"  CPU per analysis: {total:.1f} ms in the mesh's processes "
          f"(2 cores allow {2000 / max(total, 0.001):.0f} analyses/s at most), "
          f"{sum(u.system_s for u in mesh) * 1000:.1f} ms of it in the kernel; "
          f"{sum(u.voluntary for u in mesh):.0f} voluntary and {sum(u.involuntary for u in mesh):.0f} "
          "involuntary context switches")
    print(f"    {'process':<24} {'CPU ms':>7} {'kernel':>7} {'vol. cs':>8} {'invol.':>7}")
    for name, u in sorted(per.items(), key=lambda kv: -kv[1].cpu_s):
        print(f"    {name:<24} {u.cpu_s * 1000:7.2f} {u.system_s * 1000:7.2f} {u.voluntary:8.1f} {u.involuntary:7.1f}")


def _probe_functions(spec: str, directory: Path) -> None:
    """Makes every process started from now on load the function probe (see --function-cpu)."""
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROBE), os.environ.get("PYTHONPATH")) if p)
    os.environ["AGENTMESH_FUNCTION_CPU_DIR"] = str(directory)
    os.environ["AGENTMESH_FUNCTION_CPU"] = spec


Counts = dict[str, dict[str, list[int]]]
"""By process name: function -> [calls, CPU ns] so far."""


def _probe_snapshots(cfg: config.MeshConfig, directory: Path, what: str, wait_s: float = 5) -> dict[str, Any]:
    """Each probed mesh process's snapshot, by process name: asked for with SIGUSR2, read from
    ``<directory>/<pid>.json`` once its ``seq`` is past the last one read."""
    out: dict[str, Any] = {}
    for p in launcher.read_state(cfg):
        if not (directory / f"{p.pid}.ready").exists():
            continue  # not a probed Python process (the Node.js agent, say)
        path = directory / f"{p.pid}.json"
        seq = json.loads(path.read_text())["seq"] if path.exists() else 0
        os.kill(p.pid, signal.SIGUSR2)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if path.exists() and (doc := json.loads(path.read_text()))["seq"] > seq:
                out[p.name] = doc
                break
            time.sleep(0.02)
        else:
            print(f"  (no {what} from {p.name})")
    return out


def _function_snapshot(cfg: config.MeshConfig, directory: Path) -> tuple[Counts, set[str]]:
    """What each probed mesh process counted so far, and the functions no probed process has."""
    docs = _probe_snapshots(cfg, directory, "function counts")
    missing = set.intersection(*(set(doc["missing"]) for doc in docs.values())) if docs else set()
    return {name: doc["functions"] for name, doc in docs.items()}, missing


def _print_functions(before: Counts, after: Counts, missing: set[str], cpu: dict[str, Usage], analyses: int) -> None:
    n = max(1, analyses)
    for function in sorted(missing):
        print(f"  function {function}: no mesh process has it (not imported, or no such name)")
    print(f"  {'functions, per analysis':<62} {'process':<20} {'calls':>7} {'CPU ms':>7} {'us/call':>8} "
          f"{'of proc.':>8}")
    for name in sorted(after):
        for function, (calls, ns) in sorted(after[name].items(), key=lambda kv: -kv[1][1]):
            calls -= before.get(name, {}).get(function, [0, 0])[0]
            ns -= before.get(name, {}).get(function, [0, 0])[1]
            if calls <= 0:
                continue
            share = ns / 1e9 / n / cpu[name].cpu_s if cpu.get(name) and cpu[name].cpu_s else 0.0
            print(f"    {function:<60.60} {name:<20.20} {calls / n:7.1f} {ns / 1e6 / n:7.2f} "
                  f"{ns / 1e3 / calls:8.1f} {share:8.1%}")


def _print_rpcs(before: Counts, after: Counts, missing: set[str], analyses: int) -> None:
    n = max(1, analyses)
    for method in sorted(missing):
        print(f"  method {method}: no mesh process has it, not counted")
    served = {m: sum(after[p].get(m, [0, 0])[0] - before.get(p, {}).get(m, [0, 0])[0] for p in after)
              for m in RPC_METHODS}
    total = sum(served.values())
    print(f"  RPCs served per analysis: {total / n:.1f} (" + ", ".join(
        f"{m.rsplit('.', 1)[1]} {c / n:.1f}" for m, c in served.items() if c) + ")")


def _audit_records(cfg: config.MeshConfig) -> int:
    """Records in the audit log so far (read from its file, next to the running service)."""
    with sqlite3.connect(f"file:{cfg.mesh_home.data / 'audit.db'}?mode=ro", uri=True) as db:
        return int(db.execute("SELECT COUNT(*) FROM entries").fetchone()[0])


def throughput(concurrencies: list[int], seconds: float, functions: str = "", rpcs: bool = False) -> None:
    """Analyses per second with each number of parallel callers in turn, in one mesh."""
    with tempfile.TemporaryDirectory() as tmp:
        probed = Path(tmp) / "function-cpu"
        # The probe counts a call made inside a measured one only in the outer one: the servicer methods
        # are never probed with other functions (main refuses both options at once).
        probing = ",".join(RPC_METHODS) if rpcs else functions
        if probing:
            probed.mkdir()
            _probe_functions(probing, probed)
        cfg = _mesh(Path(tmp) / "home", 0)
        try:
            stub, tok = _stub(cfg), _token(cfg)
            stub.Analyze(pb.AnalyzeRequest(user_assertion=tok, tenant_id="acme", request_text=REQUEST))
            for i, concurrency in enumerate(concurrencies):
                if i:
                    time.sleep(2)  # the last run's deferred work (index, checkpoints) out of the next one
                _callers(cfg, stub, tok, concurrency, seconds, probed if probing else None, functions, rpcs)
        finally:
            launcher.down(cfg)


def _callers(cfg: config.MeshConfig, stub: pb_grpc.SupervisorServiceStub, tok: str, concurrency: int,
             seconds: float, probed: Path | None, functions: str, rpcs: bool) -> None:
    """One closed-loop run: ``concurrency`` callers, each starting its next analysis when the last one answered."""
    done, failed = [0], [0]
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def worker() -> None:
        n = bad = 0
        while time.monotonic() < stop:
            ex = stub.Analyze(pb.AnalyzeRequest(user_assertion=tok, tenant_id="acme",
                                                request_text=REQUEST)).execution
            n += 1
            bad += ex.status != pb.EXECUTION_STATUS_SUCCEEDED
        with lock:
            done[0] += n
            failed[0] += bad

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    records_before = _audit_records(cfg)
    functions_before = _function_snapshot(cfg, probed)[0] if probed else {}
    cpu_before = _cpu_by_process(cfg)
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rate = done[0] / (time.monotonic() - t0)
    cpu_after = _cpu_by_process(cfg)
    functions_after, missing = _function_snapshot(cfg, probed) if probed else ({}, set())
    print(f"throughput, no delay, {concurrency} concurrent callers for {seconds:.0f} s")
    print(f"  {rate:.1f} analyses/s ({done[0]} analyses, {failed[0]} not SUCCEEDED)")
    per = _per_analysis(cpu_before, cpu_after, done[0])
    _print_cpu(per)
    if rpcs:
        _print_rpcs(functions_before, functions_after, missing, done[0])
    elif functions:
        _print_functions(functions_before, functions_after, missing, per, done[0])
    records = _audit_records(cfg) - records_before
    print(f"  audit records per analysis: {records / max(1, done[0]):.1f}")
    verify = subprocess.run([sys.executable, "-m", "agentmesh_cli", "--home", str(cfg.home), "audit", "verify"],
                            capture_output=True, text=True, check=False)
    print(f"  audit verify: exit {verify.returncode}: {(verify.stdout or verify.stderr).strip()[:200]}", flush=True)


def _open_loop(stub: pb_grpc.SupervisorServiceStub, tok: str, rate: float, seconds: float
               ) -> tuple[list[float], dict[str, int], float, float]:
    """Analyses started every 1/rate s for ``seconds``, each on a thread of its own from a pool large enough never
    to hold one back. Returns the latencies (ms, from each one's planned start), the outcomes by name, the time the
    starts took and the time from the last start until every answer was in."""
    latencies: list[float] = []
    outcomes: dict[str, int] = {}
    lock = threading.Lock()

    def one(planned: float) -> None:
        try:
            ex = stub.Analyze(pb.AnalyzeRequest(user_assertion=tok, tenant_id="acme", request_text=REQUEST)).execution
            what = pb.ExecutionStatus.Name(ex.status).removeprefix("EXECUTION_STATUS_")
        except grpc.RpcError as err:
            what = f"refused {err.code().name}"
        with lock:
            latencies.append((time.monotonic() - planned) * 1000)
            outcomes[what] = outcomes.get(what, 0) + 1

    total = max(1, round(rate * seconds))
    with futures.ThreadPoolExecutor(max_workers=256) as pool:
        t0 = time.monotonic() + 0.1
        for i in range(total):
            planned = t0 + i / rate
            time.sleep(max(0.0, planned - time.monotonic()))
            pool.submit(one, planned)
        sent = time.monotonic()
    return sorted(latencies), outcomes, sent - t0, time.monotonic() - sent


def offered(rates: list[float], seconds: float) -> None:
    """Open loop at each rate in turn, in one mesh (see :func:`_open_loop`)."""
    with _warm_mesh(0) as (_, stub, tok):
        for rate in rates:
            latencies, outcomes, starting_s, draining_s = _open_loop(stub, tok, rate, seconds)
            p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
            print(f"offered {rate:g}/s for {seconds:.0f} s: {len(latencies)} analyses, the last answered "
                  f"{draining_s:.1f} s after the last start ({len(latencies) / (starting_s + draining_s):.1f}/s "
                  "over the whole run)")
            print(f"  latency from the planned start p50 {statistics.median(latencies):.0f} ms   "
                  f"p99 {p99:.0f} ms   max {latencies[-1]:.0f} ms; outcomes: "
                  + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())))
            time.sleep(2)


def main() -> int:
    global POSTGRESQL_SERVER
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--delay-ms", type=int, default=None,
                        help="fixed delay per specialist task (default 100; with --timeline or --call-counts 0)")
    parser.add_argument("--runs", type=int, default=40, help="analyses for the latency figures (default 40)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8], metavar="N",
                        help="parallel callers for throughput (default 8); several, e.g. 1 4 8 16, run one after "
                             "another in one mesh")
    parser.add_argument("--seconds", type=float, default=15, help="duration of the throughput run (default 15)")
    parser.add_argument("--throughput-only", action="store_true", help="skip the latency run")
    parser.add_argument("--function-cpu", metavar="MODULE:NAME,...", default="",
                        help="also count these functions' calls and thread CPU per analysis in every mesh process "
                             "during the throughput run, e.g. agentmesh.validation:problem,"
                             "supervisor_svc.executions:ExecutionStore.save")
    parser.add_argument("--rpc-counts", action="store_true",
                        help="also count the gRPC calls each mesh method served per analysis during the throughput "
                             "run (not with --function-cpu: a function inside a servicer method would count 0)")
    parser.add_argument("--timeline", action="store_true",
                        help="instead: where one analysis' time goes, its audit records and task windows in ms since "
                             "its Analyze was sent (the median of --runs sequential analyses)")
    parser.add_argument("--call-counts", action="store_true",
                        help="instead: the Python functions and built-ins each mesh process calls per analysis over "
                             "--runs sequential analyses, and its most called functions (counts, not times)")
    parser.add_argument("--offered", type=float, nargs="+", metavar="RATE",
                        help="analyses per second to offer in an open loop, one run each (instead of the latency "
                             "and throughput runs), e.g. --offered 10 20 40")
    parser.add_argument("--database-url", metavar="URL", default="",
                        help="keep the mesh's executions, idempotency keys and tenants in PostgreSQL, as a scale-out "
                             "mesh does: each mesh gets a new empty database on this server (e.g. the URL "
                             "scripts/postgres start prints); default: SQLite files in the mesh's home")
    args = parser.parse_args()
    if args.database_url:
        if not args.database_url.startswith(("postgresql://", "postgres://")):
            parser.error("--database-url must be a postgresql:// URL")
        POSTGRESQL_SERVER = args.database_url
    if args.rpc_counts and args.function_cpu:
        parser.error("--rpc-counts and --function-cpu are measured in separate runs")
    if args.delay_ms is not None and args.delay_ms < 0:
        parser.error("--delay-ms must be >= 0")
    if any(n < 1 for n in args.concurrency):
        parser.error("--concurrency must be >= 1")
    if args.timeline:
        if args.runs < 1:
            parser.error("--runs must be >= 1")
        timeline(args.runs, args.delay_ms or 0)
        return 0
    if args.call_counts:
        if args.runs < 1:
            parser.error("--runs must be >= 1")
        call_counts(args.runs, args.delay_ms or 0)
        return 0
    if args.offered:
        if any(r <= 0 for r in args.offered):
            parser.error("--offered rates must be > 0")
        offered(args.offered, args.seconds)
        return 0
    if not args.throughput_only:
        latency(100 if args.delay_ms is None else args.delay_ms, args.runs)
    throughput(args.concurrency, args.seconds, args.function_cpu, args.rpc_counts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
