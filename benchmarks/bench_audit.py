"""Benchmark of the audit log's domain core (no gRPC): durable appends and proof latency.

Run from the repository root::

    .venv/bin/python benchmarks/bench_audit.py            # full run (~1-2 min, ~0.7 GB temp)
    .venv/bin/python benchmarks/bench_audit.py --proof-log-size 100000   # quicker

Measures
  * durable appends/s with 1 and with N concurrent writer threads (each append
    returns only after its group-commit transaction is fsynced: WAL,
    synchronous=FULL), with per-append latency p50/p99;
  * inclusion-proof (and consistency-proof) latency p50/p99 on a log of
    1,000,000 entries, every proof checked with the RFC 9162 verifier.

Everything goes to a temporary directory that is deleted afterwards.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402

from audit_svc import merkle  # noqa: E402
from audit_svc.checkpoints import CheckpointSigner  # noqa: E402
from audit_svc.log_store import AuditLog, IndexAttributes  # noqa: E402

ORIGIN = "agentmesh.local/audit"


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _entry_builder(size: int) -> Callable[[int], bytes]:
    body = os.urandom(size - 16)

    def build(index: int) -> bytes:
        # Like the service: the entry embeds its own index.
        return index.to_bytes(16, "big") + body

    return build


def bench_appends(workdir: Path, writers: int, total: int, entry_bytes: int) -> dict[str, float]:
    """Durable appends/s with `writers` threads sharing `total` appends."""
    signer = CheckpointSigner(Ed25519PrivateKey.generate(), ORIGIN)
    path = workdir / f"appends-{writers}.db"
    log = AuditLog.open(path, signer=signer)
    build = _entry_builder(entry_bytes)
    per_thread = max(1, total // writers)
    latencies: list[list[float]] = [[] for _ in range(writers)]
    start_gate = threading.Barrier(writers + 1)

    def worker(slot: int) -> None:
        attrs = IndexAttributes(
            tenant_id="acme",
            execution_id=f"exec-{slot}",
            trace_id=f"trace-{slot}",
            agent_id="training-agent",
            recorded_at_micros=time.time_ns() // 1000,
        )
        mine = latencies[slot]
        start_gate.wait()
        for _ in range(per_thread):
            t0 = time.perf_counter()
            log.append(build, attrs)
            mine.append(time.perf_counter() - t0)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    start_gate.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    n = log.size()
    checkpoints = sum(1 for _ in log.checkpoints())
    log.close()
    flat = [x for lst in latencies for x in lst]
    return {
        "writers": writers,
        "appends": n,
        "seconds": elapsed,
        "rate": n / elapsed,
        "p50_ms": _pct(flat, 0.50) * 1e3,
        "p99_ms": _pct(flat, 0.99) * 1e3,
        "checkpoints": checkpoints,
    }


def build_big_log(path: Path, size: int, entry_bytes: int, batch: int) -> tuple[AuditLog, float]:
    """Fill a log with `size` entries using large append_many batches."""
    signer = CheckpointSigner(Ed25519PrivateKey.generate(), ORIGIN)
    log = AuditLog.open(path, signer=signer)
    build = _entry_builder(entry_bytes)
    attrs = IndexAttributes(tenant_id="acme", execution_id="bulk")
    t0 = time.perf_counter()
    done = 0
    while done < size:
        k = min(batch, size - done)
        log.append_many([build] * k, [attrs] * k)
        done += k
        if done % (batch * 20) == 0:
            print(f"  ... {done:,} entries", file=sys.stderr, flush=True)
    return log, time.perf_counter() - t0


def bench_proofs(log: AuditLog, samples: int, seed: int) -> dict[str, float]:
    """Inclusion- and consistency-proof latency at the current size, every proof verified."""
    rng = random.Random(seed)
    size = log.size()
    root = log.root()
    incl: list[float] = []
    for _ in range(samples):
        i = rng.randrange(size)
        t0 = time.perf_counter()
        p = log.inclusion_proof(i)
        incl.append(time.perf_counter() - t0)
        if not merkle.verify_inclusion(i, size, p.leaf_hash, p.audit_path, root):
            raise SystemExit(f"inclusion proof for {i} did not verify")
    cons: list[float] = []
    for _ in range(max(1, samples // 4)):
        m = rng.randrange(1, size + 1)
        t0 = time.perf_counter()
        c = log.consistency_proof(m)
        cons.append(time.perf_counter() - t0)
        if not merkle.verify_consistency(m, size, c.proof, c.first_root_hash, root):
            raise SystemExit(f"consistency proof {m}->{size} did not verify")
    return {
        "size": size,
        "incl_p50_ms": _pct(incl, 0.50) * 1e3,
        "incl_p99_ms": _pct(incl, 0.99) * 1e3,
        "incl_mean_ms": statistics.fmean(incl) * 1e3,
        "cons_p50_ms": _pct(cons, 0.50) * 1e3,
        "cons_p99_ms": _pct(cons, 0.99) * 1e3,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Benchmark the audit log: durable appends/s and inclusion-proof latency."
    )
    parser.add_argument("--single-appends", type=int, default=3000, help="appends with 1 writer (default 3000)")
    parser.add_argument(
        "--concurrent-appends", type=int, default=20000, help="appends shared by the writers (default 20000)"
    )
    parser.add_argument("--writers", type=int, default=32, help="concurrent writer threads (default 32)")
    parser.add_argument("--entry-bytes", type=int, default=600, help="entry size in bytes (default 600)")
    parser.add_argument(
        "--proof-log-size", type=int, default=1_000_000, help="entries in the proof log (default 1,000,000)"
    )
    parser.add_argument("--proof-samples", type=int, default=2000, help="inclusion proofs timed (default 2000)")
    parser.add_argument("--build-batch", type=int, default=20000, help="entries per bulk transaction (default 20000)")
    parser.add_argument("--skip-appends", action="store_true", help="only the proof benchmark")
    parser.add_argument("--skip-proofs", action="store_true", help="only the append benchmark")
    parser.add_argument("--dir", type=Path, default=None, help="work directory (default: a new temp dir)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    if args.entry_bytes < 16:
        parser.error("--entry-bytes must be >= 16")

    with tempfile.TemporaryDirectory(prefix="bench-audit-", dir=args.dir) as tmp:
        work = Path(tmp)
        print(f"audit log benchmark - python {sys.version.split()[0]}, {os.cpu_count()} CPUs, dir {work}")
        if not args.skip_appends:
            rows = [
                bench_appends(work, 1, args.single_appends, args.entry_bytes),
                bench_appends(work, args.writers, args.concurrent_appends, args.entry_bytes),
            ]
            print()
            print(f"durable appends ({args.entry_bytes}-byte entries, WAL + synchronous=FULL, group commit)")
            print(f"{'writers':>8} {'appends':>9} {'seconds':>8} {'appends/s':>10} {'p50 ms':>8} {'p99 ms':>8}")
            for r in rows:
                print(
                    f"{r['writers']:>8.0f} {r['appends']:>9.0f} {r['seconds']:>8.2f} {r['rate']:>10.0f}"
                    f" {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f}"
                )
        if not args.skip_proofs:
            print()
            print(f"building a log of {args.proof_log_size:,} entries ...", flush=True)
            log, build_s = build_big_log(work / "proofs.db", args.proof_log_size, args.entry_bytes, args.build_batch)
            try:
                warm = bench_proofs(log, args.proof_samples, args.seed)
            finally:
                path = log.path
                signer = log.signer
                log.close()
            # Again from a freshly opened log (new connections, cold SQLite caches).
            reopened = AuditLog.open(path, signer=signer)
            try:
                cold = bench_proofs(reopened, args.proof_samples, args.seed + 1)
            finally:
                reopened.close()
            print(f"built in {build_s:.1f} s ({args.proof_log_size / build_s:,.0f} entries/s in bulk)")
            print()
            print(f"proofs on a log of {warm['size']:,.0f} entries (each verified; ms)")
            print(f"{'':>14} {'incl p50':>9} {'incl p99':>9} {'cons p50':>9} {'cons p99':>9}")
            for name, r in (("warm", warm), ("after reopen", cold)):
                print(
                    f"{name:>14} {r['incl_p50_ms']:>9.3f} {r['incl_p99_ms']:>9.3f}"
                    f" {r['cons_p50_ms']:>9.3f} {r['cons_p99_ms']:>9.3f}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
