"""The agent manifest format read outside the supervisor (an agent's own process reads it this way)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from agentmesh.agent_manifest import ManifestError, definition, load_manifests, parse_manifest
from agentmesh.vocabulary import LifecycleStatus

SHIPPED_MANIFESTS = Path(__file__).resolve().parents[2] / "supervisor_svc" / "agents"


def _copy(tmp_path: Path) -> Path:
    target = tmp_path / "agents"
    shutil.copytree(SHIPPED_MANIFESTS, target)
    return target


def test_the_shipped_manifests_read_without_the_supervisor() -> None:
    manifests = {m.agent_id: m for m in load_manifests(SHIPPED_MANIFESTS)}
    training = manifests["training-agent"]
    assert training.spiffe_id == "spiffe://agentmesh.local/agent/training-agent"
    found = definition(training, LifecycleStatus.DISABLED)
    assert (found.agent_id, found.version, list(found.capabilities)) == (
        training.agent_id, training.version, list(training.capabilities))
    assert found.status == LifecycleStatus.DISABLED.to_proto()
    assert dict(found.input_schema)["type"] == "object"


def test_a_bad_manifest_names_its_file_field_and_line(tmp_path: Path) -> None:
    agents = _copy(tmp_path)
    path = agents / "risk-agent.yaml"
    path.write_text(path.read_text().replace("cost:", "cost: -1\nunused_cost:", 1))
    with pytest.raises(ManifestError) as err:
        load_manifests(agents)
    assert err.value.file == str(path) and err.value.reason == "AGENT_MANIFEST_INVALID"
    assert err.value.line is not None and str(path) in str(err.value)


def test_a_reader_names_the_error_it_raises(tmp_path: Path) -> None:
    class Refused(Exception):
        def __init__(self, message: str, *, file: str, field: str | None = None, line: int | None = None,
                     reason: str | None = None) -> None:
            super().__init__(message)
            self.field = field

    path = _copy(tmp_path) / "risk-agent.yaml"
    path.write_text(path.read_text().replace("agent_id: risk-agent", "agent_id: other-agent", 1))
    with pytest.raises(Refused) as err:
        parse_manifest(path, error=Refused)
    assert err.value.field == "agent_id"
