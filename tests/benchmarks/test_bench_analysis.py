"""bench_analysis: what it refuses before it starts a mesh."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_analysis.py"


@pytest.mark.parametrize("counts", [["0"], ["8", "0"], ["-1"]])
def test_a_caller_count_below_one_is_refused_before_any_mesh_starts(counts: list[str]) -> None:
    run = subprocess.run([sys.executable, str(SCRIPT), "--throughput-only", "--concurrency", *counts],
                         capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 2
    assert "--concurrency must be >= 1" in run.stderr
    assert run.stdout == ""
