"""The call-count probe of ``bench_analysis.py --call-counts``: exact counts across threads, nothing of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "benchmarks" / "call_counts"
SCRIPT = ROOT / "benchmarks" / "bench_analysis.py"

PROGRAM = """
import os, signal, threading

def counted():
    return len("x")

def work(n):
    for _ in range(n):
        counted()

work(7)
threads = [threading.Thread(target=work, args=(100,)) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
os.kill(os.getpid(), signal.SIGUSR2)
work(1000)  # after the snapshot: not in it
"""


def _run(program: str, probe_dir: Path | None) -> subprocess.CompletedProcess[str]:
    """``program`` in a new interpreter with the probe on its path, counting into ``probe_dir`` (None: not set)."""
    env = {k: v for k, v in os.environ.items() if k != "AGENTMESH_CALL_COUNTS_DIR"}
    env["PYTHONPATH"] = str(PROBE)
    if probe_dir is not None:
        env["AGENTMESH_CALL_COUNTS_DIR"] = str(probe_dir)
    return subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True,
                          timeout=60, check=True)


def test_every_thread_counts_and_the_snapshot_holds_what_came_before_it(tmp_path: Path) -> None:
    run = _run(PROGRAM, tmp_path)
    [snapshot] = [p for p in tmp_path.iterdir() if p.suffix == ".json"]
    assert (tmp_path / f"{snapshot.stem}.ready").exists()
    doc = json.loads(snapshot.read_text())
    assert doc["seq"] == 1
    calls = {(f, name): n for f, _, name, n in doc["calls"]}
    # 7 on the main thread and 4 x 100 on others, none lost to another thread; the 1000 after it not yet.
    assert calls[("<string>", "counted")] == 407
    assert calls[("<string>", "work")] == 5
    assert calls[("C", "len")] >= 407
    # The snapshot's own work (its JSON encoding) is not counted.
    assert not any("json" in f for f, _ in calls), sorted(f for f, _ in calls if "json" in f)
    assert run.stderr == ""


def test_without_its_directory_the_probe_does_nothing() -> None:
    run = _run("import sys; print(sys.getprofile())", None)
    assert run.stdout.strip() == "None"


def test_call_counts_without_runs_is_refused_before_any_mesh_starts() -> None:
    run = subprocess.run([sys.executable, str(SCRIPT), "--call-counts", "--runs", "0"],
                         capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 2
    assert "--runs must be >= 1" in run.stderr
    assert run.stdout == ""
