"""training-agent 2.0.0 in Node.js (agents/node-training): its own unit tests, and its manifest.

``node --test`` runs the agent's tests (the §61 rules, a failed capability call, what RunTask refuses,
the caller's identity, the principal and trace of its calls, the command line); this test runs them
and fails on any failure, or when node or the agent's dependencies (``npm ci`` in agents/node-training,
done by scripts/bootstrap) are missing. Its results are compared with the Python agent's in
test_node_training_parity.py; it runs on a real mesh in tests/integration/test_node_agent.py.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
AGENT_DIR = REPO / "agents" / "node-training"


def test_the_node_agents_own_tests_pass() -> None:
    node = shutil.which("node")
    assert node, "node is not installed (scripts/bootstrap installs it)"
    assert (AGENT_DIR / "node_modules" / "@grpc" / "grpc-js").is_dir(), \
        "run scripts/bootstrap (npm ci in agents/node-training)"
    # No terminal for node: from a background job it would reset the terminal's mode and stop the job (SIGTTOU).
    run = subprocess.run([node, "--test", "--test-reporter=tap", "test/"], cwd=AGENT_DIR, stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, timeout=300)
    report = run.stdout + run.stderr
    assert run.returncode == 0, report
    passed = re.search(r"^# pass (\d+)$", report, re.M)
    assert passed and int(passed.group(1)) >= 21, report
    assert re.search(r"^# fail 0$", report, re.M), report
    # The seven §61 cases and the failed capability call are among them.
    for case in ("§61 valid", "§61 expired", "§61 missing", "§61 duplicate", "§61 future-dated", "§61 conflicting",
                 "§61 unknown worker", "a failed capability call is UNKNOWN"):
        assert re.search(rf"^ok \d+ - {re.escape(case)}", report, re.M), case


def test_the_manifest_is_the_python_agents_contract_at_version_2() -> None:
    ours = yaml.safe_load((AGENT_DIR / "manifest.yaml").read_text(encoding="utf-8"))
    theirs = yaml.safe_load((REPO / "supervisor_svc" / "agents" / "training-agent.yaml").read_text(encoding="utf-8"))
    assert (ours["agent_id"], ours["version"], theirs["version"]) == ("training-agent", "2.0.0", "1.0.0")
    assert set(ours) == set(theirs)
    same = {k for k in theirs if k not in ("version", "name", "description", "status")}
    assert {k: ours[k] for k in same} == {k: theirs[k] for k in same}
