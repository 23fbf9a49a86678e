"""Benchmark of knowledge retrieval at 10,000 documents (generated): BM25 and wikilink expansion.

Run from the repository root::

    .venv/bin/python benchmarks/bench_knowledge.py                 # in process
    .venv/bin/python benchmarks/bench_knowledge.py --grpc          # also the governed call over mTLS
    .venv/bin/python benchmarks/bench_knowledge.py --documents 2000 --queries 500 --json

Generates a store of ``--documents`` markdown documents (seeded, so every run
sees the same corpus): front matter, a title, an intro and ``--clauses``
clauses of 40-90 words each, words drawn with a Zipf distribution from a
vocabulary of the shipped NR store's terms plus generated words, two
wikilinks per clause to clauses of other documents. It is written to files
and loaded the way the capability service loads a store (parse, links
resolved, BM25 weights computed), then queried:

  * clause      what the compliance agent sends: a document id, a clause id and
                four words of that clause (``DOC-01234 3 word word word word``)
  * keywords-3  three words drawn from the vocabulary's distribution
  * keywords-8  eight words

each with ``limit 5`` and wikilink expansion depth 1 (the agent's call), and
the clause mix also at depth 0 and 2. ``backend`` is the capability service's
part of a call without the network: the backend's answer plus the output
schema check every capability output goes through. ``--grpc`` starts audit,
policy and capability processes on the generated store (named compliance.nr,
so the compliance agent's scope) and calls ``InvokeCapability(knowledge.search)``
as the compliance agent with a signed grant: grant check, policy decision,
two audit records, the search, over mTLS.

Latencies in milliseconds: p50, p90, p99 and max over the queries; the
garbage collector stays on, as in the service.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from capability_svc.invocation import InvocationContext  # noqa: E402
from capability_svc.knowledge_store import (  # noqa: E402
    KnowledgeBackend,
    KnowledgeLibrary,
    KnowledgeStore,
    default_knowledge_dir,
    tokens,
)
from capability_svc.registry import CapabilityRegistry, default_capabilities_dir  # noqa: E402

SCOPE = "compliance.nr"
SYLLABLES = ["ka", "lo", "mi", "ne", "tu", "ra", "si", "po", "de", "va", "gu", "fe", "zo", "bi", "xa", "ci",
             "mo", "ta", "le", "nu", "sa", "ri", "pe", "go"]


def _rss_mb() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def _vocabulary(rng: random.Random, size: int) -> list[str]:
    """The shipped store's own terms first (the most frequent), then generated words."""
    shipped = KnowledgeLibrary.load(default_knowledge_dir()).get(SCOPE)
    assert shipped is not None
    seen: dict[str, None] = {}
    for p in shipped.passages:
        for word in re.findall(r"[A-Za-z]{3,}", p.text):
            if tokens(word):
                seen.setdefault(word.lower(), None)
    words = list(seen)
    while len(words) < size:
        word = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))
        if word not in seen:
            seen[word] = None
            words.append(word)
    rng.shuffle(words)
    return words


def generate(root: Path, *, documents: int, clauses: int, vocabulary: int, seed: int) -> dict[str, Any]:
    """Writes the store under ``root/SCOPE``; what a query generator needs to know about it."""
    rng = random.Random(seed)
    words = _vocabulary(rng, vocabulary)
    weights = [1.0 / (rank + 1) ** 1.07 for rank in range(len(words))]
    cumulative: list[float] = []
    total = 0.0
    for w in weights:
        total += w
        cumulative.append(total)

    def draw(k: int) -> list[str]:
        return rng.choices(words, cum_weights=cumulative, k=k)

    store = root / SCOPE
    store.mkdir(parents=True)
    (store / "scope.yaml").write_text(f"scope: {SCOPE}\ntitle: Generated benchmark store\n"
                                      "authority: UNVERIFIED_DOCUMENT\n")
    ids = [f"DOC-{i:05d}" for i in range(documents)]
    sample: list[tuple[str, str, list[str]]] = []
    for i, doc in enumerate(ids):
        lines = ["---", f"edition: generated {seed}", "---", f"# {doc} {' '.join(draw(5))}", "",
                 " ".join(draw(30)), ""]
        for c in range(1, clauses + 1):
            body = draw(rng.randint(40, 90))
            for _ in range(2):
                target = ids[rng.randrange(documents)]
                if target != doc:
                    body.insert(rng.randrange(len(body)), f"[[{target}#{rng.randint(1, clauses)}]]")
            lines += [f"## {c} {' '.join(draw(4))}", "", " ".join(body), ""]
            if i % 97 == 0:
                sample.append((doc, str(c), [w for w in body if not w.startswith("[[")]))
        (store / f"{doc}.md").write_text("\n".join(lines))
    return {"draw": draw, "sample": sample, "rng": rng}


def queries(corpus: dict[str, Any], count: int) -> dict[str, list[str]]:
    rng: random.Random = corpus["rng"]
    draw: Callable[[int], list[str]] = corpus["draw"]
    sample: list[tuple[str, str, list[str]]] = corpus["sample"]
    clause = []
    for _ in range(count):
        doc, cid, body = rng.choice(sample)
        clause.append(f"{doc} {cid} {' '.join(rng.sample(body, 4))}")
    return {"clause": clause, "keywords-3": [" ".join(draw(3)) for _ in range(count)],
            "keywords-8": [" ".join(draw(8)) for _ in range(count)]}


def _stats(ms: Sequence[float]) -> dict[str, float]:
    ordered = sorted(ms)

    def q(p: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, int(round(p * len(ordered))) - 1))]

    return {"p50": statistics.median(ordered), "p90": q(0.90), "p99": q(0.99), "max": ordered[-1]}


def _timed(fn: Callable[[str], Any], qs: Sequence[str]) -> dict[str, float]:
    for q in qs[:20]:  # warm-up
        fn(q)
    out = []
    for q in qs:
        t0 = time.perf_counter()
        fn(q)
        out.append((time.perf_counter() - t0) * 1000)
    return _stats(out)


def _start(home: Path, module: str, name: str, peers: dict[str, str], extra: Sequence[str] = (),
           env: dict[str, str] | None = None, timeout_s: float = 300) -> tuple[subprocess.Popen[bytes], str]:
    from agentmesh import config
    from agentmesh.service import address_file

    cfg = config.load(home=str(home), environ={})
    address_file(cfg, name).unlink(missing_ok=True)
    cmd = [sys.executable, "-m", module, "--home", str(home), "--port", "0", "--log-level", "WARNING", *extra]
    for k, v in peers.items():
        cmd += ["--peer", f"{k}={v}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, **(env or {})})
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{name} exited {proc.returncode}")
        if address_file(cfg, name).exists():
            return proc, json.loads(address_file(cfg, name).read_text())["address"]
        time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"{name} did not start")


def governed(knowledge_root: Path, qs: Sequence[str]) -> dict[str, Any]:
    """InvokeCapability(knowledge.search) over mTLS, as the compliance agent, against real processes."""
    from google.protobuf import struct_pb2

    from agentmesh import config, grants, spiffe, transport
    from agentmesh.identities import init_identities
    from agentmesh.pki import leaf_paths
    from agentmesh.signing import load_private_key
    from agentmesh.v1 import capability_service_pb2 as pb
    from agentmesh.v1 import capability_service_pb2_grpc as pb_grpc
    from agentmesh.v1 import common_pb2

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        cfg = config.load(home=str(home), environ={})
        init_identities(cfg)
        procs: list[subprocess.Popen[bytes]] = []
        try:
            audit, audit_addr = _start(home, "audit_svc", "audit", {})
            procs.append(audit)
            policy, policy_addr = _start(home, "policy_svc", "policy", {"audit": audit_addr})
            procs.append(policy)
            started = time.monotonic()
            capability, cap_addr = _start(home, "capability_svc", "capability",
                                          {"audit": audit_addr, "policy": policy_addr},
                                          extra=("--lms-url", "http://127.0.0.1:9"),
                                          env={"AGENTMESH_KNOWLEDGE_DIR": str(knowledge_root)})
            procs.append(capability)
            start_s = time.monotonic() - started
            signer = grants.GrantSigner(load_private_key(cfg.mesh_home.grant_signer_key))
            agent = spiffe.agent("compliance-agent")
            grant = signer.issue(issuer=str(spiffe.service("supervisor")), audience=str(agent),
                                 execution_id=f"exe-{uuid.uuid4().hex[:10]}", task_id="task-bench", tenant_id="acme",
                                 user_id="alice", assertion_digest="0" * 64, roles=["analyst"],
                                 capabilities=["knowledge.search"], resources=[f"knowledge:{SCOPE}"])
            tls = transport.TlsFiles.of(leaf_paths(cfg.mesh_home.workloads, agent), cfg.mesh_home.trust_bundle)
            channel = transport.secure_channel(cap_addr, tls, spiffe.service("capability"))
            stub = pb_grpc.CapabilityServiceStub(channel)

            def call(query: str) -> Any:
                arguments = struct_pb2.Struct()
                arguments.update({"scope": SCOPE, "query": query, "limit": 5, "expand": 1})
                resp = stub.InvokeCapability(pb.InvokeCapabilityRequest(
                    grant=grant, capability_id="knowledge.search", input=arguments,
                    trace=common_pb2.TraceContext(execution_id=grants.decode(grant).execution_id)), timeout=30)
                assert resp.knowledge_version.startswith(f"{SCOPE}@sha256:")
                return resp

            result = {"capability_start_s": start_s, "clause": _timed(call, qs)}
            channel.close()
            return result
        finally:
            for proc in reversed(procs):
                proc.terminate()
                proc.wait(timeout=20)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", type=int, default=10_000, help="documents in the store (default 10000)")
    parser.add_argument("--clauses", type=int, default=4, help="clauses per document (default 4)")
    parser.add_argument("--vocabulary", type=int, default=20_000, help="distinct words (default 20000)")
    parser.add_argument("--queries", type=int, default=1000, help="queries per mix (default 1000)")
    parser.add_argument("--seed", type=int, default=20261130)
    parser.add_argument("--grpc", action="store_true", help="also the governed call over mTLS (real processes)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "knowledge"
        t0 = time.perf_counter()
        corpus = generate(root, documents=args.documents, clauses=args.clauses, vocabulary=args.vocabulary,
                          seed=args.seed)
        generated_s = time.perf_counter() - t0
        size_mb = sum(p.stat().st_size for p in (root / SCOPE).iterdir()) / 1e6
        rss0 = _rss_mb()
        t0, c0 = time.perf_counter(), time.process_time()
        store = KnowledgeStore.load(root / SCOPE)
        load_s, load_cpu_s = time.perf_counter() - t0, time.process_time() - c0
        rss1 = _rss_mb()
        qs = queries(corpus, args.queries)
        hits = [store.search(q, limit=5, expand=1) for q in qs["clause"][:200]]
        found = sum(any(h.passage.passage_id == f"{q.split()[0]}#{q.split()[1]}" for h in hit[:5])
                    for q, hit in zip(qs["clause"][:200], hits, strict=True))
        backend = KnowledgeBackend(KnowledgeLibrary([store]), clock=lambda: __import__("datetime").datetime.now(
            __import__("datetime").UTC))
        with tempfile.TemporaryDirectory() as reg_tmp:
            registry = CapabilityRegistry.load(default_capabilities_dir(), Path(reg_tmp) / "capabilities.db")
            manifest = registry.get("knowledge.search").manifest
            ctx = InvocationContext("acme", "alice", "compliance-agent", "exe-bench")

            def backend_call(query: str) -> None:
                ran = backend.run("knowledge.search", ctx, {"scope": SCOPE, "query": query, "limit": 5, "expand": 1})
                registry.validate_output(manifest, ran.output)

            figures: dict[str, Any] = {
                "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
                "corpus": {"documents": args.documents, "passages": len(store.passages),
                           "files_mb": round(size_mb, 1), "generated_s": round(generated_s, 2)},
                "load": {"seconds": round(load_s, 2), "cpu_seconds": round(load_cpu_s, 2),
                         "rss_mb": round(rss1 - rss0, 1)},
                "clause_found_in_top5": f"{found}/{len(hits)}",
                "search": {
                    "clause expand=1": _timed(lambda q: store.search(q, limit=5, expand=1), qs["clause"]),
                    "clause expand=0": _timed(lambda q: store.search(q, limit=5, expand=0), qs["clause"]),
                    "clause expand=2": _timed(lambda q: store.search(q, limit=5, expand=2), qs["clause"]),
                    "keywords-3 expand=1": _timed(lambda q: store.search(q, limit=5, expand=1), qs["keywords-3"]),
                    "keywords-8 expand=1": _timed(lambda q: store.search(q, limit=5, expand=1), qs["keywords-8"]),
                },
                "backend": {"clause expand=1": _timed(backend_call, qs["clause"])},
            }
            registry.close()
        if args.grpc:
            figures["governed"] = governed(root, qs["clause"][: min(args.queries, 500)])

    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    c = figures["corpus"]
    print(f"knowledge store: {c['documents']} documents, {c['passages']} passages, {c['files_mb']} MB of markdown")
    print(f"  load and index   {figures['load']['seconds']} s ({figures['load']['cpu_seconds']} s of CPU), "
          f"+{figures['load']['rss_mb']} MB resident")
    print(f"  clause found     {figures['clause_found_in_top5']} clause queries have their clause in the top 5")
    print(f"  {'latency (ms)':<28}{'p50':>8}{'p90':>8}{'p99':>8}{'max':>8}")
    rows = [(f"search {k}", v) for k, v in figures["search"].items()]
    rows += [(f"backend {k}", v) for k, v in figures["backend"].items()]
    if "governed" in figures:
        rows.append(("governed over mTLS, clause", figures["governed"]["clause"]))
    for name, s in rows:
        print(f"  {name:<28}{s['p50']:>8.2f}{s['p90']:>8.2f}{s['p99']:>8.2f}{s['max']:>8.2f}")
    if "governed" in figures:
        print(f"  capability service start with the store: {figures['governed']['capability_start_s']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
