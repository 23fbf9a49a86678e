"""Onboarding agent versions over the running mesh (PRD §57, §59): the CLI, the supervisor, Cedar, audit."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from agentmesh.config import DEFAULT_AGENTS, MeshConfig
from supervisor_svc.registry import default_agents_dir

from .conftest import launched_mesh, peer_address, write_config
from .test_analysis_e2e import audit_records
from .test_cli import am

OLGA = ("--tenant", "acme", "--user", "olga")


@pytest.fixture(scope="module")
def onboarding_mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MeshConfig]:
    home = tmp_path_factory.mktemp("onboarding-mesh")
    # Every shipped agent runs, so every dataset is evaluated against its process (the risk agent's
    # fallback is not started by default).
    write_config(home, agents=[*DEFAULT_AGENTS, "risk-rules-agent"])
    with launched_mesh(home) as cfg:
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


def test_knowledge_and_policy_dependencies_are_checked_against_what_the_mesh_serves(
    onboarding_mesh: MeshConfig, tmp_path: Path
) -> None:
    home = onboarding_mesh.home
    fits = _manifest(tmp_path, "fits.yaml", version="1.5.0", dependencies={
        "capabilities": ["training.getStatus@^2.0"], "knowledge": ["compliance.nr@^1.0"],
        "policies": ["blast_radius.agent_profile_exceeded@^1.1", "tenant.isolation@>=1.0.0"]})
    assert am(home, "agents", "register", str(fits), "--endpoint", "127.0.0.1:7999", *OLGA).returncode == 0
    moved = am(home, "agents", "transition", "training-agent@1.5.0", "VALIDATING", "--reason", "go", *OLGA)
    assert moved.returncode == 0, moved.stderr
    assert am(home, "agents", "transition", "training-agent@1.5.0", "DRAFT", "--reason", "done", *OLGA
              ).returncode == 0
    wrong = _manifest(tmp_path, "wrong.yaml", version="1.6.0", dependencies={
        "knowledge": ["compliance.nr@^2.0", "training.nr@^1.0"],
        "policies": ["blast_radius.agent_profile_exceeded@^2.0"]})
    assert am(home, "agents", "register", str(wrong), "--endpoint", "127.0.0.1:7999", *OLGA).returncode == 0
    blocked = am(home, "agents", "transition", "training-agent@1.6.0", "VALIDATING", "--reason", "go", *OLGA)
    assert blocked.returncode == 1 and "RELEASE_BLOCKED" in blocked.stderr
    for problem in ("dependencies.knowledge[0]: 'compliance.nr@^2.0' is incompatible with the registered "
                    "versions (1.0.0)",
                    "dependencies.knowledge[1]: 'training.nr@^1.0': no knowledge store 'training.nr' is served",
                    "dependencies.policies[0]: 'blast_radius.agent_profile_exceeded@^2.0' is incompatible"):
        assert problem in blocked.stderr, blocked.stderr


# --- evaluation (PRD §60–61) -----------------------------------------------------------------------

SHIPPED = sorted(p.stem for p in default_agents_dir().glob("*.yaml"))


@pytest.mark.parametrize("agent", SHIPPED)
def test_every_agents_dataset_passes_against_its_running_process(onboarding_mesh: MeshConfig, agent: str) -> None:
    home = onboarding_mesh.home
    ran = am(home, "agents", "evaluate", f"{agent}@1.0.0", *OLGA, "--json")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    evaluation = json.loads(ran.stdout)["evaluation"]
    assert evaluation["gatePassed"] is True and evaluation["score"] == 1.0
    assert evaluation["passedCases"] == evaluation["totalCases"] >= 3
    records = [r for r in audit_records(onboarding_mesh, agent_id=agent)
               if "AGENT_VERSION_EVALUATED" in r.reason_codes]
    assert records and "gate=PASSED" in records[-1].reason_codes
    # The cases ran under sandbox grants: their capability calls were answered from the mocks, nothing ran.
    sandbox = [r for r in audit_records(onboarding_mesh, agent_id=agent) if "SANDBOX" in r.reason_codes]
    assert sandbox and all("MOCK_ANSWER" in r.reason_codes for r in sandbox)


def test_the_training_dataset_holds_the_seven_cases_of_section_61(onboarding_mesh: MeshConfig) -> None:
    ran = am(onboarding_mesh.home, "agents", "evaluate", "training-agent@1.0.0", *OLGA)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    for case in ("valid-certificate", "expired-certificate", "missing-training", "duplicate-records",
                 "future-dated-certificate", "conflicting-certificates", "unknown-employee"):
        assert f"{case}  " in ran.stdout and "pass" in next(line for line in ran.stdout.splitlines()
                                                          if line.startswith(case))
    assert "gate PASSED" in ran.stdout


def test_an_unevaluable_version_is_refused_and_an_unreachable_one_is_not_evaluated(
    onboarding_mesh: MeshConfig, tmp_path: Path
) -> None:
    home = onboarding_mesh.home
    path = _manifest(tmp_path, "t.yaml", version="1.4.0")
    assert am(home, "agents", "register", str(path), "--endpoint", "127.0.0.1:9", *OLGA).returncode == 0
    draft = am(home, "agents", "evaluate", "training-agent@1.4.0", *OLGA)
    assert draft.returncode == 1 and "FAILED_PRECONDITION" in draft.stderr and "EVALUATION_NOT_ALLOWED" in draft.stderr
    for status in ("VALIDATING", "EVALUATING"):
        assert am(home, "agents", "transition", "training-agent@1.4.0", status, "--reason", "go", *OLGA).returncode == 0
    viewer = am(home, "agents", "evaluate", "training-agent@1.4.0", *OLGA, "--role", "viewer")
    assert viewer.returncode == 1 and "POLICY_DENIED" in viewer.stderr
    gone = am(home, "agents", "evaluate", "training-agent@1.4.0", *OLGA)
    assert gone.returncode == 1 and "UNAVAILABLE" in gone.stderr and "AGENT_UNAVAILABLE" in gone.stderr
    listed = json.loads(am(home, "agents", "versions", "training-agent", "--json").stdout)
    version = next(v for v in listed if v["version"] == "1.4.0")
    assert version["status"] == "LIFECYCLE_STATUS_EVALUATING" and "evaluation" not in version
    missing = am(home, "agents", "evaluate", "ghost-agent@1.0.0", *OLGA)
    assert missing.returncode == 1 and "NOT_FOUND" in missing.stderr


def _second_process(cfg: MeshConfig, tmp: Path, agent: str) -> tuple[subprocess.Popen[bytes], str]:
    """Another process of ``agent`` (a version of its own), with the mesh's identities and peers, in a home
    of its own for its run files (so the launcher's state stays the mesh's)."""
    own = tmp / "second-home"
    own.mkdir()
    for name in ("ca", "trust", "workloads"):
        (own / name).symlink_to(Path(cfg.home) / name)
    peers = [f"--peer={n}={peer_address(cfg, n)}" for n in ("capability", "audit")]
    proc = subprocess.Popen([sys.executable, "-m", "specialist_svc", "--agent", agent, "--home", str(own),
                             "--port", "0", *peers], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    addr = own / "run" / f"{agent}.addr"
    deadline = time.monotonic() + 60
    try:
        while not addr.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the second agent process did not start"
            time.sleep(0.2)
        return proc, json.loads(addr.read_text())["address"]
    except BaseException:
        proc.kill()  # the caller never gets it to stop
        proc.wait()
        raise


def test_a_registered_version_goes_through_evaluation_approval_canary_and_promotion(
    onboarding_mesh: MeshConfig, tmp_path: Path
) -> None:
    home = onboarding_mesh.home
    assert am(home, "agents", "evaluate", "training-agent@1.0.0", *OLGA).returncode == 0  # the baseline
    proc, endpoint = _second_process(onboarding_mesh, tmp_path, "training-agent")
    try:
        path = _manifest(tmp_path, "t.yaml", version="1.3.0")
        assert am(home, "agents", "register", str(path), "--endpoint", endpoint, *OLGA).returncode == 0
        for status in ("VALIDATING", "EVALUATING"):
            moved = am(home, "agents", "transition", "training-agent@1.3.0", status, "--reason", "go", *OLGA)
            assert moved.returncode == 0, moved.stderr
        ran = am(home, "agents", "evaluate", "training-agent@1.3.0", *OLGA, "--json")
        assert ran.returncode == 0, ran.stdout + ran.stderr
        evaluation = json.loads(ran.stdout)["evaluation"]
        assert evaluation["baselineVersion"] == "1.0.0" and evaluation["gatePassed"] is True
        approved = am(home, "agents", "transition", "training-agent@1.3.0", "APPROVED", "--reason", "evaluated",
                      "--tenant", "acme", "--user", "adam")
        assert approved.returncode == 0, approved.stderr
        for status in ("CANARY", "ACTIVE"):
            moved = am(home, "agents", "transition", "training-agent@1.3.0", status, "--reason", "ship", *OLGA)
            assert moved.returncode == 0, moved.stderr
        listed = {v["version"]: v["status"] for v in
                  json.loads(am(home, "agents", "versions", "training-agent", "--json").stdout)}
        assert listed["1.3.0"] == "LIFECYCLE_STATUS_ACTIVE" and listed["1.0.0"] == "LIFECYCLE_STATUS_DEPRECATED"
    finally:
        back = am(home, "agents", "transition", "training-agent@1.0.0", "ACTIVE", "--reason", "test over", *OLGA)
        proc.terminate()
        proc.wait(timeout=30)
    assert back.returncode == 0, back.stderr
