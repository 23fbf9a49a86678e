"""``python -m lms_sandbox`` as a real process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
DEMO_WORLD = REPO / "agentmesh" / "data" / "demo_world.yaml"

pytestmark = pytest.mark.integration


def run_module(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lms_sandbox", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def test_help() -> None:
    result = run_module("--help")
    assert result.returncode == 0
    for option in ("--port", "--data", "--host", "--admin-token"):
        assert option in result.stdout


def test_bad_data_file_exits_with_a_message(tmp_path: Path) -> None:
    bad = tmp_path / "world.yaml"
    bad.write_text("tenants:\n  - id: acme\n    lms: {faults: {W-1: explode}}\n", encoding="utf-8")
    result = run_module("--port", "0", "--data", str(bad))
    assert result.returncode == 2
    assert "tenants[0].lms.faults.W-1" in result.stderr


def test_serves_and_stops_on_sigterm() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "lms_sandbox", "--port", "0", "--data", str(DEMO_WORLD)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("lms_sandbox listening on http://127.0.0.1:"), line
        base_url = line.rsplit(" ", 1)[1].strip()
        assert httpx.get(f"{base_url}/healthz", timeout=5).json() == {"status": "ok"}
        data = httpx.get(f"{base_url}/v1/tenants/acme/workers/W-1001/trainings", timeout=5).json()
        assert data["worker_id"] == "W-1001"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
        if proc.stderr is not None:
            proc.stderr.close()
