"""Tenant files: the form checked with file, line and field; refusals of the engine mapped back to lines."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from agentmesh.launcher import demo_tenants
from agentmesh.tenant_file import TenantFileError, definition_to_mapping, load_tenant_file
from agentmesh.v1 import tenant_service_pb2 as pb

GOOD = """\
format: agentmesh-tenants/v1
tenants:
  - id: initech
    name: Initech
    roles:
      viewer: {capabilities: [workPermit.get]}
      analyst:
        includes: [viewer]
        capabilities: [training.getStatus]
    agents: [work-permit-agent, training-agent]
    limits: {max_tasks: 12, max_cost: 2.5}
    on_exceeded: {default: STOP, MAX_COST_EXCEEDED: HUMAN_REVIEW}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tenants.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_a_tenant_file_becomes_definitions(tmp_path: Path) -> None:
    tenants = load_tenant_file(write(tmp_path, GOOD))
    (initech,) = tenants.definitions
    assert (initech.tenant_id, initech.display_name) == ("initech", "Initech")
    assert list(initech.roles["analyst"].includes) == ["viewer"]
    assert list(initech.allowed_agents) == ["work-permit-agent", "training-agent"]
    assert initech.limits.max_tasks == 12 and initech.limits.max_cost == 2.5
    assert not initech.limits.HasField("max_depth")  # unset: the platform default
    assert dict(initech.on_exceeded) == {"default": pb.LIMIT_ACTION_STOP,
                                         "MAX_COST_EXCEEDED": pb.LIMIT_ACTION_HUMAN_REVIEW}
    assert definition_to_mapping(initech)["limits"] == {"max_tasks": 12, "max_cost": 2.5}


def test_a_refusal_of_the_engine_maps_back_to_the_line(tmp_path: Path) -> None:
    tenants = load_tenant_file(write(tmp_path, GOOD))
    assert tenants.line_of("tenants[0].roles.analyst.capabilities[0]") == 9
    assert tenants.line_of("tenants[0].allowed_agents[1]") == 10
    assert tenants.line_of("tenants[0].tenant_id") == 3
    assert tenants.line_of("tenants[0].on_exceeded.MAX_COST_EXCEEDED") == 12
    assert tenants.line_of("tenants[3].tenant_id") is None and tenants.line_of("") is None


@pytest.mark.parametrize(("text", "field", "line", "message"), [
    (GOOD.replace("id: initech", "id: Initech!"), "tenants[0].id", 3, "pattern"),
    (GOOD.replace("    agents:", "    agnets:"), "tenants[0].agnets", 10, "unknown field"),
    (GOOD.replace("max_tasks: 12", "max_tasks: -1"), "tenants[0].limits.max_tasks", 11, "greater than"),
    (GOOD.replace("max_tasks: 12", 'max_tasks: "12"'), "tenants[0].limits.max_tasks", 11, "integer"),
    (GOOD.replace("HUMAN_REVIEW", "PANIC"), "tenants[0].on_exceeded.MAX_COST_EXCEEDED", 12, "STOP"),
    (GOOD.replace("MAX_COST_EXCEEDED", "MAX_FUN_EXCEEDED"), "tenants[0].on_exceeded.MAX_FUN_EXCEEDED", 12,
     "invalid key"),
    (GOOD.replace("    name: Initech\n", ""), "tenants[0].name", 3, "required"),
    (GOOD.replace("format: agentmesh-tenants/v1", "format: v2"), "format", 1, "agentmesh-tenants/v1"),
    (GOOD + GOOD[GOOD.index("  - id"):], "tenants[1].id", 13, "listed twice"),
    (GOOD.replace("    agents:", "    roles: {}\n    agents:"), "tenants[0].roles", 10, "duplicate key"),
])
def test_a_bad_file_names_its_line_and_field(tmp_path: Path, text: str, field: str, line: int, message: str) -> None:
    with pytest.raises(TenantFileError) as caught:
        load_tenant_file(write(tmp_path, text))
    err = caught.value
    assert (err.field, err.line) == (field, line), str(err)
    assert message in err.message and str(err).startswith(f"{tmp_path / 'tenants.yaml'}:{line}")


def test_not_yaml_and_empty_are_refused(tmp_path: Path) -> None:
    for text in ("tenants: [unclosed", ""):
        with pytest.raises(TenantFileError):
            load_tenant_file(write(tmp_path, text))


def test_the_demo_tenants_file_is_valid() -> None:
    ids = [d.tenant_id for d in load_tenant_file(demo_tenants()).definitions]
    assert ids == ["acme", "globex"]
