"""The Node.js client (clients/node, built from proto/ only) against the real mesh over mTLS.

It connects with its own platform identity (``spiffe://agentmesh.local/client/node-client``,
issued here with ``agentmesh certs issue``), checks health, runs an Analyze it follows with
WatchExecution, and decodes refusals from ``grpc-status-details-bin``. ``scripts/bootstrap``
installs its dependencies (``npm ci`` in clients/node); without them this test fails.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from agentmesh.config import MeshConfig

from .conftest import agentmesh_cli, peer_address
from .test_analysis_e2e import token

CLIENT = Path(__file__).resolve().parents[2] / "clients" / "node"


def test_the_node_client_talks_to_the_mesh_from_the_contracts_alone(mesh: MeshConfig) -> None:
    node = shutil.which("node")
    assert node, "node is not installed (scripts/bootstrap installs it)"
    assert (CLIENT / "node_modules" / "@grpc" / "grpc-js").is_dir(), "run scripts/bootstrap (npm ci in clients/node)"
    issued = agentmesh_cli(mesh.home, "certs", "issue", "--spiffe-id", "spiffe://agentmesh.local/client/node-client")
    assert issued.returncode == 0, issued.stderr
    env = {**os.environ, "AGENTMESH_HOME": str(mesh.home), "AGENTMESH_SUPERVISOR": peer_address(mesh, "supervisor"),
           "AGENTMESH_IDENTITY": "client-node-client", "AGENTMESH_ASSERTION": token(mesh)}
    # No terminal for node: from a background job it would reset the terminal's mode and stop the job (SIGTTOU).
    run = subprocess.run([node, "--test", "--test-reporter=tap", "test/"], cwd=CLIENT, env=env,
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180)
    report = run.stdout + run.stderr
    assert run.returncode == 0, report
    assert re.search(r"^# pass 3$", report, re.M) and re.search(r"^# fail 0$", report, re.M), report
