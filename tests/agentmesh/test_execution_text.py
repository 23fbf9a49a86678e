"""How enum values read to a person: by name, or by number when the contract is newer than the reader."""

from __future__ import annotations

from agentmesh.execution_text import enum_name
from agentmesh.v1 import common_pb2


def test_a_known_value_reads_as_its_name_without_the_prefix() -> None:
    assert enum_name(common_pb2.TaskStatus, common_pb2.TASK_STATUS_COMPLETED, "TASK_STATUS_") == "COMPLETED"
    assert enum_name(common_pb2.TaskStatus, common_pb2.TASK_STATUS_COMPLETED) == "TASK_STATUS_COMPLETED"


def test_a_value_the_enum_does_not_know_reads_as_its_number() -> None:
    assert enum_name(common_pb2.TaskStatus, 917, "TASK_STATUS_") == "917"
