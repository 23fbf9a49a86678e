"""``scripts/demo`` as a newcomer runs it: twice in a row, then the README's commands by hand.

The demo's own mesh (its home, every port picked free) keeps everything in SQLite files, so the
test runs once, not again with the mesh on PostgreSQL (marker ``sqlite_files``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from agentmesh import config, launcher
from agentmesh.config import DEFAULT_PORTS

from .conftest import agentmesh_cli, write_config

ROOT = Path(__file__).resolve().parents[2]


def _readme_table() -> dict[str, str]:
    """permit → the decision the README's demo-world table gives for its analysis."""
    text = (ROOT / "README.md").read_text()
    rows = dict(re.findall(r"^\| (WP-\d+) \| [^|]+ \| ([A-Z_]+)", text, re.M))
    assert {"WP-10231", "WP-10232", "WP-10233", "WP-10234"} <= set(rows), rows
    return rows


@pytest.mark.sqlite_files
def test_the_demo_reruns_from_the_demo_world_and_leaves_it_as_the_readme_says(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_config(home, ports={name: 0 for name in DEFAULT_PORTS})
    env = {**os.environ, "AGENTMESH_HOME": str(home)}
    try:
        for _ in range(2):  # the second run finds WP-10231 as the first one did
            demo = subprocess.run(["scripts/demo"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
            assert demo.returncode == 0, demo.stdout[-4000:] + "\n" + demo.stderr[-4000:]
            out = demo.stdout
            assert "WP-10231: released and verified" in out
            # It shows the conflict it announces, both sides and the rules that did not decide it.
            assert "conflict on worker:W-1005/NR-35: training-agent vs compliance-agent — review rev-" in out
            assert "rule: GOVERNMENT_SOURCE_PREVAILS" in out
            assert "  training-agent (PASS) evidence:\n    #0 lms " in out
            assert "  compliance-agent (FAIL) evidence:\n    #0 compliance-registry " in out
            # The Portuguese request's statements are in Portuguese.
            assert "W-1003 venceu em 2026-08-15" in out
            assert "OK: " in out  # audit verify
            assert "Traceback" not in demo.stderr
        for permit, decision in _readme_table().items():
            if permit not in ("WP-10231", "WP-10232", "WP-10233", "WP-10234"):
                continue
            run = agentmesh_cli(home, "analyze", f"Analyze permit {permit} and tell me if it can be released",
                                "--tenant", "acme", "--user", "alice", "--json")
            assert run.returncode == 0, run.stderr
            assert json.loads(run.stdout)["decision"] == f"ANALYSIS_DECISION_{decision}", permit
        # The README's first command by hand, in Portuguese.
        pt = agentmesh_cli(home, "analyze", "Analise a permissão WP-10231 e me diga se ela pode ser liberada",
                           "--tenant", "acme", "--user", "alice", "--quiet")
        assert pt.returncode == 0, pt.stderr
        assert "Permissão WP-10231: liberação recomendada." in pt.stdout
        assert "A permissão WP-10231 está PENDING_RELEASE" in pt.stdout
    finally:
        launcher.down(config.load(home=str(home), environ={}))
