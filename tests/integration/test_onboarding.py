"""Onboarding agent versions over the running mesh (PRD §57, §59): the CLI, the supervisor, Cedar, audit."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from agentmesh.config import MeshConfig
from supervisor_svc.registry import default_agents_dir

from .conftest import launched_mesh
from .test_analysis_e2e import audit_records
from .test_cli import am

OLGA = ("--tenant", "acme", "--user", "olga")


@pytest.fixture(scope="module")
def onboarding_mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MeshConfig]:
    with launched_mesh(tmp_path_factory.mktemp("onboarding-mesh")) as cfg:
        yield cfg


def _manifest(tmp: Path, name: str, **changes: object) -> Path:
    data = yaml.safe_load((default_agents_dir() / "training-agent.yaml").read_text(encoding="utf-8"))
    data.update(changes)
    path = tmp / name
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_draft_to_active_is_refused_naming_the_field(onboarding_mesh: MeshConfig) -> None:
    home = str(onboarding_mesh.home)
    assert am(Path(home), "agents", "status", "risk-agent", "DEPRECATED", "--reason", "drill").returncode == 0
    refused = am(Path(home), "agents", "status", "risk-agent", "CANARY", "--reason", "skip ahead")
    assert refused.returncode == 1
    assert "FAILED_PRECONDITION" in refused.stderr and "TRANSITION_NOT_ALLOWED" in refused.stderr
    assert "status" in refused.stderr and "DEPRECATED to CANARY" in refused.stderr
    back = am(Path(home), "agents", "transition", "risk-agent@1.0.0", "ACTIVE", "--reason", "drill over", *OLGA)
    assert back.returncode == 0, back.stderr


def test_a_version_is_registered_validated_and_waits_for_a_passed_evaluation(
    onboarding_mesh: MeshConfig, tmp_path: Path
) -> None:
    home = onboarding_mesh.home
    path = _manifest(tmp_path, "t.yaml", version="1.1.0")
    viewer = am(home, "agents", "register", str(path), "--endpoint", "127.0.0.1:7999", *OLGA, "--role", "viewer")
    assert viewer.returncode == 1 and "PERMISSION_DENIED" in viewer.stderr and "POLICY_DENIED" in viewer.stderr
    done = am(home, "agents", "register", str(path), "--endpoint", "127.0.0.1:7999", *OLGA)
    assert done.returncode == 0, done.stderr
    assert "training-agent@1.1.0  DRAFT" in done.stdout
    skip = am(home, "agents", "transition", "training-agent@1.1.0", "ACTIVE", "--reason", "ship", *OLGA)
    assert skip.returncode == 1 and "TRANSITION_NOT_ALLOWED" in skip.stderr
    for status in ("VALIDATING", "EVALUATING"):
        moved = am(home, "agents", "transition", "training-agent@1.1.0", status, "--reason", "go", *OLGA)
        assert moved.returncode == 0, moved.stderr
    own = am(home, "agents", "transition", "training-agent@1.1.0", "APPROVED", "--reason", "mine",
             "--tenant", "acme", "--user", "olga", "--role", "agent-approver")
    assert own.returncode == 1 and "POLICY_DENIED" in own.stderr and "agent.own_registration" in own.stderr
    unevaluated = am(home, "agents", "transition", "training-agent@1.1.0", "APPROVED", "--reason", "ok",
                     "--tenant", "acme", "--user", "adam")
    assert unevaluated.returncode == 1 and "EVALUATION_REQUIRED" in unevaluated.stderr
    listed = json.loads(am(home, "agents", "versions", "training-agent", "--json").stdout)
    assert [(v["version"], v["status"]) for v in listed] == [("1.0.0", "LIFECYCLE_STATUS_ACTIVE"),
                                                              ("1.1.0", "LIFECYCLE_STATUS_EVALUATING")]
    served = json.loads(am(home, "agents", "list", "--json").stdout)
    assert next(a for a in served if a["agentId"] == "training-agent")["version"] == "1.0.0"
    records = [r for r in audit_records(onboarding_mesh, agent_id="training-agent")
               if any(c.startswith("AGENT_VERSION_") for c in r.reason_codes)]
    assert [next(c for c in r.reason_codes if c.startswith("status=")) for r in records] == [
        "status=DRAFT", "status=VALIDATING", "status=EVALUATING"]


def test_an_incompatible_version_is_blocked_with_every_reason(onboarding_mesh: MeshConfig, tmp_path: Path) -> None:
    home = onboarding_mesh.home
    path = _manifest(tmp_path, "bad.yaml", version="2.0.0", allowed_delegations=["ghost-agent"],
                     capabilities=["training.getStatus", "workPermit.release"],
                     dependencies={"capabilities": ["training.getStatus@^9.0"],
                                   "policies": ["no-such-policy@^42.0"]})
    assert am(home, "agents", "register", str(path), "--endpoint", "127.0.0.1:7999", *OLGA).returncode == 0
    blocked = am(home, "agents", "transition", "training-agent@2.0.0", "VALIDATING", "--reason", "go", *OLGA)
    assert blocked.returncode == 1 and "RELEASE_BLOCKED" in blocked.stderr
    for problem in ("dependencies.capabilities[0]: 'training.getStatus@^9.0' is incompatible",
                    "dependencies.policies[0]: 'no-such-policy@^42.0': no policy",
                    "allowed_delegations[0]: 'ghost-agent' is not a registered agent",
                    "risk_profile.can_mutate: workPermit.release@"):
        assert problem in blocked.stderr, blocked.stderr
    listed = json.loads(am(home, "agents", "versions", "training-agent", "--json").stdout)
    assert next(v for v in listed if v["version"] == "2.0.0")["status"] == "LIFECYCLE_STATUS_DRAFT"
