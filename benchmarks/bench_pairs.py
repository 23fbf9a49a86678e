"""Interleaved pairs of ``bench_analysis.py`` runs: a base revision against the working tree.

Run from the repository root::

    .venv/bin/python benchmarks/bench_pairs.py --base HEAD~1 [--pairs 4] [--concurrency 8] [--seconds 15]
    .venv/bin/python benchmarks/bench_pairs.py --base main --latency-runs 80   # also one caller's latency
    .venv/bin/python benchmarks/bench_pairs.py --base HEAD --database-url "$(scripts/postgres start)"

The base revision is checked out in a temporary git worktree (removed afterwards); the other side is
this checkout's working tree as it is, uncommitted changes included, so a change can be measured before
it is committed. Each side runs its own ``benchmarks/bench_analysis.py`` with its own code on
``PYTHONPATH``, in this interpreter: a whole mesh of that side's code is started, loaded and stopped.

Each pair runs both sides one after the other, the order alternating from pair to pair, so a drift of
the machine's load weighs on both alike; on a shared 2-core machine one run against another is noise,
only pairs say which way a change goes. Per pair it prints each side's analyses/s with
``--concurrency`` callers and CPU-ms per analysis across the mesh's processes (with
``--latency-runs N``, also the p50 of N sequential analyses with 0 ms specialists, the latency target's
case); then each figure's medians and in how many pairs the working tree did better, the CPU of each busy
process of the mesh too (from the runs' tables by process), so a change shows where it moved the CPU.
With ``--database-url`` (a PostgreSQL server), every run keeps its mesh's executions, idempotency keys and
tenants in a new database there, as scale-out does (the server's own CPU is not among the mesh's processes);
both sides' ``bench_analysis.py`` must know the option.

Exit status: 0 when every run finished with every analysis SUCCEEDED and ``audit verify`` passing;
1 when one did not (what it printed is shown); 2 for bad arguments or a base git cannot check out.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_RATE = re.compile(r"([\d.]+) analyses/s \((\d+) analyses, (\d+) not SUCCEEDED\)")
_CPU = re.compile(r"CPU per analysis: ([\d.]+) ms")
_LATENCY = re.compile(r"latency p50\s+([\d.]+) ms")
_VERIFY = re.compile(r"audit verify: exit (\d+)")
_PROCESS = re.compile(r"^    (\S(?:.*?\S)?)\s{2,}([\d.]+)\s+[\d.]+\s+[\d.]+\s+[\d.]+$", re.MULTILINE)
"""A line of the CPU table by process: name, CPU ms, kernel, voluntary and involuntary switches."""
PROCESS_MIN_MS = 1.0
"""A process is compared on its own when its base median is at least this many CPU-ms per analysis."""


@dataclass(frozen=True)
class Figures:
    """What one ``bench_analysis.py`` run measured."""

    rate: float
    """Analyses per second with the callers."""
    cpu_ms: float
    """CPU-ms per analysis across the mesh's processes."""
    latency_ms: float | None
    """One caller's p50 with 0 ms specialists, when asked for."""
    processes: tuple[tuple[str, float], ...] = ()
    """CPU-ms per analysis of each mesh process, as the run's table by process printed them."""


class RunFailed(Exception):
    """A run that did not finish as it should; the message says how, with what it printed."""


def read_figures(output: str, *, latency: bool) -> Figures:
    """The figures of one run's output.

    Raises:
        RunFailed: an analysis was not SUCCEEDED, ``audit verify`` failed, or a figure is missing.
    """
    rate, cpu, verify = _RATE.search(output), _CPU.search(output), _VERIFY.search(output)
    found = _LATENCY.search(output) if latency else None
    if rate is None or cpu is None or verify is None or (latency and found is None):
        raise RunFailed("the run printed no " + ", ".join(
            name for name, m in (("analyses/s", rate), ("CPU per analysis", cpu), ("audit verify", verify),
                                 *((("latency p50", found),) if latency else ())) if m is None))
    if int(rate.group(3)):
        raise RunFailed(f"{rate.group(3)} of {rate.group(2)} analyses were not SUCCEEDED")
    if int(verify.group(1)):
        raise RunFailed(f"audit verify exited {verify.group(1)}")
    processes = tuple((m.group(1), float(m.group(2))) for m in _PROCESS.finditer(output))
    return Figures(float(rate.group(1)), float(cpu.group(1)), float(found.group(1)) if found else None, processes)


@dataclass(frozen=True)
class Comparison:
    """One figure over the pairs: the medians of both sides and how many pairs the working tree won."""

    name: str
    base: float
    head: float
    better: int
    pairs: int


def compare(pairs: Sequence[tuple[Figures, Figures]]) -> list[Comparison]:
    """Each figure's medians over (base, head) pairs; more analyses/s is better, less CPU and latency. Then
    each process's CPU per analysis, for the processes every run reports and the base spends at least
    :data:`PROCESS_MIN_MS` in, the busiest first."""
    rows: list[tuple[str, Callable[[Figures], float], bool]] = [
        ("analyses/s", lambda f: f.rate, True), ("CPU-ms per analysis", lambda f: f.cpu_ms, False)]
    if pairs and pairs[0][0].latency_ms is not None:
        rows.append(("latency p50 ms", lambda f: f.latency_ms or 0.0, False))
    every = set.intersection(*(set(dict(f.processes)) for pair in pairs for f in pair)) if pairs else set()
    spent = {name: statistics.median(dict(b.processes)[name] for b, _ in pairs) for name in every}
    for name in sorted((n for n in every if spent[n] >= PROCESS_MIN_MS), key=lambda n: -spent[n]):
        rows.append((f"  {name}", lambda f, name=name: dict(f.processes)[name], False))  # type: ignore[misc]
    out = []
    for name, of, higher in rows:
        base = [of(b) for b, _ in pairs]
        head = [of(h) for _, h in pairs]
        better = sum((h > b) if higher else (h < b) for b, h in zip(base, head, strict=True))
        out.append(Comparison(name, statistics.median(base), statistics.median(head), better, len(pairs)))
    return out


@contextlib.contextmanager
def worktree(revision: str) -> Iterator[Path]:
    """``revision`` checked out in a temporary worktree of this repository, removed afterwards.

    Raises:
        SystemExit: git cannot check it out (exit 2, git's message).
    """
    with tempfile.TemporaryDirectory(prefix="bench-pairs-") as tmp:
        tree = Path(tmp) / "base"
        made = subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), revision],
                              capture_output=True, text=True, check=False)
        if made.returncode:
            print(f"bench_pairs: cannot check out {revision!r}: {made.stderr.strip()}", file=sys.stderr)
            raise SystemExit(2)
        try:
            yield tree
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                           capture_output=True, check=False)


def run(tree: Path, args: argparse.Namespace) -> Figures:
    """One ``bench_analysis.py`` run of the code in ``tree``."""
    command = [sys.executable, str(tree / "benchmarks" / "bench_analysis.py"),
               "--concurrency", str(args.concurrency), "--seconds", str(args.seconds)]
    command += ["--delay-ms", "0", "--runs", str(args.latency_runs)] if args.latency_runs else ["--throughput-only"]
    command += ["--database-url", args.database_url] if args.database_url else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(tree), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, check=False)
    output = done.stdout + done.stderr
    if done.returncode:
        raise RunFailed(f"bench_analysis.py exited {done.returncode}:\n{output[-2000:]}")
    try:
        return read_figures(done.stdout, latency=bool(args.latency_runs))
    except RunFailed as err:
        raise RunFailed(f"{err}:\n{output[-2000:]}") from None


def _line(label: str, f: Figures) -> str:
    text = f"{label} {f.rate:6.1f} analyses/s {f.cpu_ms:6.1f} CPU-ms"
    return text + (f"  p50 {f.latency_ms:5.1f} ms" if f.latency_ms is not None else "")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the revision to compare with (e.g. HEAD, HEAD~1, a commit)")
    parser.add_argument("--pairs", type=int, default=4, help="pairs of runs (default 4)")
    parser.add_argument("--concurrency", type=int, default=8, help="parallel callers (default 8)")
    parser.add_argument("--seconds", type=float, default=15, help="duration of each throughput run (default 15)")
    parser.add_argument("--latency-runs", type=int, default=0,
                        help="also time this many sequential analyses with 0 ms specialists per run (default 0: no)")
    parser.add_argument("--database-url", metavar="URL", default="",
                        help="run every mesh on this PostgreSQL server, each in a new database (bench_analysis.py "
                             "--database-url); default: SQLite files")
    args = parser.parse_args(argv)
    if args.pairs < 1 or args.concurrency < 1 or args.seconds <= 0 or args.latency_runs < 0:
        parser.error("--pairs and --concurrency must be >= 1, --seconds > 0, --latency-runs >= 0")
    if args.database_url and not args.database_url.startswith(("postgresql://", "postgres://")):
        parser.error("--database-url must be a postgresql:// URL")
    pairs: list[tuple[Figures, Figures]] = []
    with worktree(args.base) as base:
        script = base / "benchmarks" / "bench_analysis.py"
        if args.database_url and not (script.is_file() and "--database-url" in script.read_text()):
            print(f"bench_pairs: {args.base!r} has no bench_analysis.py with --database-url: compare on "
                  "PostgreSQL with a base that has it", file=sys.stderr)
            return 2
        for i in range(args.pairs):
            order = [("base", base), ("head", ROOT)]
            if i % 2:
                order.reverse()
            got: dict[str, Figures] = {}
            for label, tree in order:
                try:
                    got[label] = run(tree, args)
                except RunFailed as err:
                    print(f"pair {i + 1}, {label} ({'working tree' if tree == ROOT else args.base}): {err}",
                          file=sys.stderr)
                    return 1
            pairs.append((got["base"], got["head"]))
            print(f"pair {i + 1}: {_line('base', got['base'])}   {_line('head', got['head'])}", flush=True)
    print(f"medians of {len(pairs)} pairs (base {args.base} / working tree):")
    for c in compare(pairs):
        print(f"  {c.name:<20} {c.base:7.1f} / {c.head:7.1f}   working tree better in {c.better} of {c.pairs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
