"""The real ``agentmesh`` command against a real mesh: what a newcomer types and reads.

Hints run as printed, exit codes as ``--help`` says, a mesh that does not answer in one line,
enum names readable in text and full in ``--json``, Portuguese statements for a Portuguese
request, and output into a closed pipe without a traceback. This module starts its own mesh:
it releases WP-10231.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentmesh.config import MeshConfig

from .conftest import launched_mesh

AGENTMESH = str(Path(sys.executable).parent / "agentmesh")
"""The installed command, run by its path (it is not on PATH here): hints must name it so."""
FULL_NAMES = ("ANALYSIS_DECISION_", "EXECUTION_STATUS_", "STATEMENT_KIND_", "AUTHORITY_LEVEL_", "RESULT_STATUS_",
              "REVIEW_KIND_", "REVIEW_STATUS_", "ACTION_STATE_", "POLICY_EFFECT_", "TASK_STATUS_")


@pytest.fixture(scope="module")
def cli_mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MeshConfig]:
    with launched_mesh(tmp_path_factory.mktemp("cli-mesh")) as cfg:
        yield cfg


def am(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``agentmesh --home HOME ARGS`` by the installed command's path, stdin not a terminal."""
    return subprocess.run([AGENTMESH, "--home", str(home), *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def _hint(text: str, marker: str) -> list[str]:
    line = next(line for line in text.splitlines() if marker in line)
    return shlex.split(line.split(marker, 1)[1])


def test_the_confirm_hint_runs_as_printed_and_releases(cli_mesh: MeshConfig) -> None:
    home = cli_mesh.home
    asked = am(home, "analyze", "Analise a permissão WP-10231 e libere se estiver tudo correto", "--tenant", "acme",
               "--user", "alice", "--role", "permit-manager", "--release", "--no-wait", "--quiet")
    assert asked.returncode == 0, asked.stderr
    hint = _hint(asked.stdout, "once it is decided: ")
    execution_id = hint[4]
    assert hint == [AGENTMESH, "--home", str(home), "confirm", execution_id, "--tenant", "acme", "--user", "alice",
                    "--role", "permit-manager"]
    reviews = am(home, "reviews", "list", "--tenant", "acme", "--user", "bob", "--execution", execution_id, "--json")
    review_id = json.loads(reviews.stdout)[0]["review_id"]
    approved = am(home, "reviews", "approve", review_id, "--tenant", "acme", "--user", "bob", "--reason", "checked")
    assert approved.returncode == 0, approved.stderr
    assert _hint(approved.stdout, "confirms it with: ") == hint  # bob's output tells alice the same command
    confirmed = subprocess.run([*hint, "--yes"], capture_output=True, text=True, timeout=120)
    assert confirmed.returncode == 0, confirmed.stdout + confirmed.stderr
    assert "WP-10231: released and verified" in confirmed.stdout


def test_a_failed_analysis_exits_1_and_a_partial_one_0(cli_mesh: MeshConfig) -> None:
    home = cli_mesh.home
    assert am(home, "policy", "kill", "--scope", "capability", "--target", "workPermit.get",
              "--reason", "test: no permit can be read").returncode == 0
    try:
        failed = am(home, "analyze", "Analyze permit WP-10232 and tell me if it can be released", "--tenant", "acme",
                    "--user", "alice", "--quiet")
    finally:
        assert am(home, "policy", "kill", "--scope", "capability", "--target", "workPermit.get", "--off",
                  "--reason", "test done").returncode == 0
    assert "(FAILED)" in failed.stdout.splitlines()[0], failed.stdout
    assert failed.returncode == 1
    partial = am(home, "analyze", "Analyze permit WP-10234 and tell me if it can be released", "--tenant", "acme",
                 "--user", "alice", "--quiet")
    assert "(PARTIAL)" in partial.stdout.splitlines()[0] and partial.returncode == 0, partial.stdout
    assert "exit status:" in am(home, "analyze", "--help").stdout


def test_text_names_enum_values_plainly_and_json_in_full(cli_mesh: MeshConfig) -> None:
    home = cli_mesh.home
    text = am(home, "analyze", "Analyze permit WP-10232 and tell me if it can be released", "--tenant", "acme",
              "--user", "alice")
    assert text.returncode == 0, text.stderr
    assert "decision  NOT_RECOMMENDED" in text.stdout and "execution exe-" in text.stdout
    assert not [n for n in FULL_NAMES if n in text.stdout + text.stderr], text.stdout
    as_json = json.loads(am(home, "analyze", "Analyze permit WP-10232 and tell me if it can be released",
                            "--tenant", "acme", "--user", "alice", "--json").stdout)
    assert (as_json["decision"], as_json["status"], as_json["intent"], as_json["actor_type"]) == (
        "ANALYSIS_DECISION_NOT_RECOMMENDED", "EXECUTION_STATUS_SUCCEEDED", "EXECUTION_INTENT_ANALYZE_PERMIT",
        "ACTOR_TYPE_USER")
    conflict = am(home, "analyze", "Analyze permit WP-10233 and tell me if it can be released", "--tenant", "acme",
                  "--user", "alice", "--quiet")
    reviews = am(home, "reviews", "list", "--tenant", "acme", "--user", "bob")
    assert " CONFLICT " in reviews.stdout and "REVIEW_KIND_" not in reviews.stdout, reviews.stdout
    assert "training-agent (PASS) evidence:" in conflict.stdout and "REVIEW_" not in conflict.stdout


def test_a_portuguese_request_gets_its_statements_in_portuguese(cli_mesh: MeshConfig) -> None:
    run = am(cli_mesh.home, "analyze", "Analise a permissão WP-10232 e me diga se ela pode ser liberada",
             "--tenant", "acme", "--user", "alice", "--json")
    ex = json.loads(run.stdout)
    training = next(r for r in ex["results"] if r["agent_id"] == "training-agent")
    expired = next(s for s in training["statements"] if s["code"] == "TRAINING_EXPIRED")
    assert expired["text"] == ("NR-10 de W-1003 venceu em 2026-08-15, antes da janela da permissão "
                               f"{expired['text'].rsplit(' ', 1)[1]}")
    assert all(n["locale"] == "pt" for n in ex["graph"]["nodes"])
    english = json.loads(am(cli_mesh.home, "analyze", "Analyze permit WP-10232 and tell me if it can be released",
                            "--tenant", "acme", "--user", "alice", "--json").stdout)
    training = next(r for r in english["results"] if r["agent_id"] == "training-agent")
    assert next(s for s in training["statements"] if s["code"] == "TRAINING_EXPIRED")["text"].startswith(
        "NR-10 of W-1003 expired on 2026-08-15")


def test_output_into_a_closed_pipe_ends_without_a_traceback(cli_mesh: MeshConfig) -> None:
    ex = json.loads(am(cli_mesh.home, "analyze", "Analyze permit WP-10232 and tell me if it can be released",
                       "--tenant", "acme", "--user", "alice", "--json").stdout)
    # The reader is gone before the command writes anything: every write meets a closed pipe.
    proc = subprocess.Popen([AGENTMESH, "--home", str(cli_mesh.home), "audit", "trail", ex["execution_id"]],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 141 and err == "", err
    # And as typed in a shell.
    shell = subprocess.run(["bash", "-o", "pipefail", "-c",
                            f"{shlex.quote(AGENTMESH)} --home {shlex.quote(str(cli_mesh.home))} audit trail "
                            f"{ex['execution_id']} | head -n 1"], capture_output=True, text=True, timeout=60)
    assert shell.stdout.startswith(f"execution {ex['execution_id']}: ") and "Traceback" not in shell.stderr
    assert shell.returncode in (0, 141)


@pytest.mark.parametrize("command", [
    ["analyze", "Analyze permit WP-10231", "--tenant", "acme", "--user", "alice"],
    ["reviews", "list", "--tenant", "acme", "--user", "bob"],
    ["audit", "trail", "exe-1"],
    ["policy", "switches"],
    ["events", "training-expired", "--tenant", "acme", "--worker", "W-1003", "--training", "NR-10",
     "--expired-on", "2026-08-15"],
])
def test_a_mesh_that_is_not_running_is_one_line_saying_how_to_start_it(tmp_path: Path, command: list[str]) -> None:
    home = tmp_path / "home"
    assert am(home, "certs", "init").returncode == 0  # set up, never started (or stopped with down)
    run = am(home, *command)
    assert run.returncode == 1 and run.stdout == ""
    assert run.stderr == (f"agentmesh: no mesh is running under {home}; start it with: "
                          f"{AGENTMESH} --home {home} up --detach\n"), run.stderr
    never = am(tmp_path / "nothing-here", *command)  # a home that was never set up at all
    assert never.returncode == 1 and len(never.stderr.splitlines()) == 1 and "up --detach" in never.stderr
    assert "Traceback" not in never.stderr and "failed to connect" not in run.stderr + never.stderr


def test_status_outside_a_mesh_says_how_to_start_it(tmp_path: Path) -> None:
    run = am(tmp_path / "home", "status")
    assert run.returncode == 1 and "up --detach" in run.stdout
    assert os.path.basename(AGENTMESH) == "agentmesh"
