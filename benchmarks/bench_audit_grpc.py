"""Benchmark of the audit service end to end: durable AppendRecord/s over mTLS.

Starts a real ``python -m audit_svc`` process in a temporary mesh home (fresh
CA and identities), then appends records as ``svc/capability`` from 1 and from
32 concurrent client threads (one mTLS channel each). Every call returns only
after its group-commit transaction is fsynced, so the figures are *durable*
appends. Records look like the capability runtime's: ids, a delegation chain
with one signed grant, a policy decision and digests (about 900 bytes).

Run from the repository root::

    .venv/bin/python benchmarks/bench_audit_grpc.py
    .venv/bin/python benchmarks/bench_audit_grpc.py --threads 1 8 32 --appends 4000

Client and server share the machine: on a small one the Python gRPC client's
own CPU time is part of what is measured. A last reference run calls
GetCheckpoint (no write) at the highest thread count: the ceiling the gRPC +
mTLS stack itself sets on this machine, to read the append figures against.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc  # noqa: E402

from agentmesh import config, grants, spiffe, transport  # noqa: E402
from agentmesh.config import MeshConfig  # noqa: E402
from agentmesh.identities import OPERATOR, init_identities  # noqa: E402
from agentmesh.pki import leaf_paths  # noqa: E402
from agentmesh.service import address_file  # noqa: E402
from agentmesh.signing import load_private_key  # noqa: E402
from agentmesh.v1 import audit_service_pb2 as pb  # noqa: E402
from agentmesh.v1 import audit_service_pb2_grpc as pb_grpc  # noqa: E402
from agentmesh.v1 import common_pb2  # noqa: E402


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _stub(cfg: MeshConfig, address: str, identity: spiffe.SpiffeId) -> tuple[grpc.Channel, pb_grpc.AuditServiceStub]:
    tls = transport.TlsFiles.of(leaf_paths(cfg.mesh_home.workloads, identity), cfg.mesh_home.trust_bundle)
    channel = transport.secure_channel(address, tls, spiffe.service("audit"), default_timeout_s=60)
    return channel, pb_grpc.AuditServiceStub(channel)


def _record(cfg: MeshConfig) -> pb.AuditRecord:
    """A record shaped like the capability runtime's CAPABILITY_INVOKED."""
    signer = grants.GrantSigner(load_private_key(cfg.mesh_home.grant_signer_key))
    grant = signer.issue(issuer=str(spiffe.service("supervisor")), audience=str(spiffe.agent("training-agent")),
                         execution_id="exe-bench", task_id="t-1", tenant_id="acme", user_id="alice",
                         assertion_digest="sha256:" + "ab" * 32, capabilities=["training.getStatus"])
    return pb.AuditRecord(
        event_type=pb.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED, outcome=pb.AUDIT_OUTCOME_PENDING,
        tenant_id="acme", user_id="alice", trace_id="0af7651916cd43dd8448eb211c80319c",
        correlation_id="corr-bench", execution_id="exe-bench", task_id="t-1", agent_id="training-agent",
        principal=common_pb2.AgentPrincipal(
            agent_id="training-agent", execution_id="exe-bench", grants=[grant],
            delegation_chain=["user:acme/alice", "svc:supervisor", "agent:training-agent",
                              "capability:training.getStatus"]),
        capability_id="training.getStatus", capability_version="2.1.0",
        policy_decision=common_pb2.PolicyDecision(decision_id="dec-1", effect=common_pb2.POLICY_EFFECT_ALLOW,
                                                  reason_codes=["user.invoke"], policy_version="sha256:" + "cd" * 32),
        versions=common_pb2.VersionStamp(agent_version="1.0.0", capability_version="2.1.0",
                                         policy_version="sha256:" + "cd" * 32, runtime_version="0.1.0"),
        resource="worker:W-1001", input_digest="sha256:" + "ef" * 32)


class AuditProcess:
    """``python -m audit_svc`` on a free port in ``cfg``'s home; ``stop()`` in finally."""

    def __init__(self, cfg: MeshConfig) -> None:
        addr = address_file(cfg, "audit")
        addr.unlink(missing_ok=True)
        self.log = cfg.mesh_home.logs / "audit-bench.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "audit_svc", "--home", str(cfg.home), "--port", "0", "--log-level", "WARNING"],
                stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"audit_svc exited {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            if addr.exists():
                try:
                    self.address = str(json.loads(addr.read_text())["address"])
                    return
                except (ValueError, KeyError):
                    pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("audit_svc did not start")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def bench(cfg: MeshConfig, address: str, threads: int, total: int, *, rpc: str = "AppendRecord",
          batch: int = 1) -> dict[str, Any]:
    """`total` calls shared by `threads` client threads, one mTLS channel each.

    ``rpc`` is AppendRecord (durable appends, as svc/capability), AppendRecords
    (``batch`` records per call; ``total`` counts records) or GetCheckpoint (as
    the operator; no write, the newest checkpoint is cached), the latter as a
    reference for what the gRPC + mTLS stack alone allows on this machine.
    """
    template = _record(cfg)
    per_thread = max(1, total // threads // batch)
    latencies: list[list[float]] = [[] for _ in range(threads)]
    errors: list[BaseException] = []
    ready = threading.Barrier(threads + 1)
    appending = rpc in ("AppendRecord", "AppendRecords")

    def run(n: int) -> None:
        channel, stub = _stub(cfg, address, spiffe.service("capability") if appending else OPERATOR)
        try:
            rec = pb.AuditRecord()
            rec.CopyFrom(template)
            call: Callable[[], object]
            if rpc == "AppendRecords":
                call = lambda: stub.AppendRecords(pb.AppendRecordsRequest(records=[rec] * batch))  # noqa: E731
            elif appending:
                call = lambda: stub.AppendRecord(pb.AppendRecordRequest(record=rec))  # noqa: E731
            else:
                call = lambda: stub.GetCheckpoint(pb.GetCheckpointRequest())  # noqa: E731
            call()  # connect (TLS handshake) before timing
            ready.wait()
            mine = latencies[n]
            for i in range(per_thread):
                rec.task_id = f"t-{n}-{i}"
                start = time.perf_counter()
                call()
                mine.append(time.perf_counter() - start)
        except BaseException as err:  # noqa: BLE001 - reported after the run
            errors.append(err)
            ready.abort()
        finally:
            channel.close()

    workers = [threading.Thread(target=run, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    ready.wait()
    start = time.perf_counter()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise RuntimeError(f"appends failed: {errors[0]!r}")
    flat = [x for xs in latencies for x in xs]
    return {
        "rpc": rpc,
        "threads": threads,
        "appends": len(flat) * batch,
        "seconds": elapsed,
        "per_s": len(flat) * batch / elapsed,
        "p50_ms": statistics.median(flat) * 1e3,
        "p99_ms": _pct(flat, 0.99) * 1e3,
    }


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark and prints a table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 32],
                        help="concurrent client threads per run (default: 1 32)")
    parser.add_argument("--appends", type=int, default=3000,
                        help="durable appends per run, shared by its threads (default 3000)")
    parser.add_argument("--home", type=Path,
                        help="mesh home with no audit process running (default: a temporary one, deleted after)")
    parser.add_argument("--batch", type=int, default=50,
                        help="records per AppendRecords call in the bulk run; 0 skips it (default 50)")
    parser.add_argument("--no-reference", action="store_true",
                        help="skip the reference run of GetCheckpoint (no write) at the highest thread count")
    args = parser.parse_args(argv)
    if any(t < 1 for t in args.threads) or args.appends < 1:
        parser.error("--threads and --appends must be >= 1")

    with tempfile.TemporaryDirectory(prefix="bench-audit-grpc-") as tmp:
        cfg = config.load(home=str(args.home or Path(tmp) / "home"), environ={})
        init_identities(cfg)
        proc = AuditProcess(cfg)
        try:
            rows = [bench(cfg, proc.address, t, args.appends) for t in args.threads]
            if args.batch:
                rows.append(bench(cfg, proc.address, max(args.threads), args.appends * 5, rpc="AppendRecords",
                                  batch=args.batch))
            if not args.no_reference:
                rows.append(bench(cfg, proc.address, max(args.threads), args.appends, rpc="GetCheckpoint"))
            channel, operator = _stub(cfg, proc.address, OPERATOR)
            with channel:
                size = operator.GetCheckpoint(pb.GetCheckpointRequest()).checkpoint.tree_size
        finally:
            proc.stop()
        record_bytes = _record(cfg).ByteSize()
    print(f"audit_svc over mTLS, durable appends (fsync per group commit), record ~{record_bytes} bytes, "
          f"{os.cpu_count()} CPUs, log size at end {size}")
    print(f"{'rpc':<32} {'threads':>7}  {'records':>7}  {'seconds':>8}  {'records/s':>9}  {'p50 ms':>7}  "
          f"{'p99 ms':>7}")
    for r in rows:
        label = {"AppendRecord": "AppendRecord (durable)",
                 "AppendRecords": f"AppendRecords x{args.batch} (durable)"}.get(r["rpc"], "GetCheckpoint (reference)")
        print(f"{label:<32} {r['threads']:>7}  {r['appends']:>7}  {r['seconds']:>8.2f}  {r['per_s']:>9.0f}  "
              f"{r['p50_ms']:>7.2f}  {r['p99_ms']:>7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
