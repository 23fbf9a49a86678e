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
    for option in ("--port", "--data", "--host", "--admin-token-file"):
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


def test_admin_token_file_is_created_private_and_required(tmp_path: Path) -> None:
    token_file = tmp_path / "lms" / "admin-token"
    proc = subprocess.Popen(
        [sys.executable, "-m", "lms_sandbox", "--port", "0", "--data", str(DEMO_WORLD),
         "--admin-token-file", str(token_file)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert proc.stdout is not None
        base_url = proc.stdout.readline().rsplit(" ", 1)[1].strip()
        token = token_file.read_text().strip()
        assert len(token) >= 32 and token_file.stat().st_mode & 0o777 == 0o600
        assert httpx.get(f"{base_url}/admin/faults", timeout=5).status_code == 401
        ok = httpx.get(f"{base_url}/admin/faults", headers={"Authorization": f"Bearer {token}"}, timeout=5)
        assert ok.status_code == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert proc.stderr is not None
        assert token not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    # The same file is reused on the next start.
    assert token_file.read_text().strip() == token


@pytest.mark.parametrize("case", ["world-readable", "empty"])
def test_unusable_admin_token_file_exits_2(tmp_path: Path, case: str) -> None:
    token_file = tmp_path / "admin-token"
    token_file.write_text("" if case == "empty" else "t" * 40)
    token_file.chmod(0o600 if case == "empty" else 0o644)
    result = run_module("--port", "0", "--admin-token-file", str(token_file))
    assert result.returncode == 2
    assert str(token_file) in result.stderr and len(result.stderr.strip().splitlines()) == 1
