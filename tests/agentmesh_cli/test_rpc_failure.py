"""A failed call as the command line prints it: one line, then each problem the server listed."""

from __future__ import annotations

from typing import Any

import grpc

from agentmesh import errors
from agentmesh_cli.common import MeshUnreachable, rpc_failure


class _Failed(grpc.RpcError, grpc.Call):  # type: ignore[misc]
    """A failed call as grpc raises it, carrying a mesh error's google.rpc.Status (or none)."""

    def __init__(self, err: errors.MeshError | None, code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE) -> None:
        self._err = err
        self._code = err.code if err is not None else code

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._err.message if self._err is not None else "connection refused"

    def trailing_metadata(self) -> Any:
        if self._err is None:
            return ()
        return (("grpc-status-details-bin", self._err.to_status().SerializeToString()),)


def test_the_problems_a_server_lists_follow_the_line_in_their_order() -> None:
    refused = errors.FailedPrecondition(
        "the agent cannot go active", reason="DEPENDENCY_INCOMPATIBLE",
        metadata={"field": "to_status", "problem_2": "second", "problem_10": "tenth", "problem_1": "first"})
    text = str(rpc_failure(_Failed(refused)))
    assert text.splitlines() == [
        "FAILED_PRECONDITION: DEPENDENCY_INCOMPATIBLE (field to_status): the agent cannot go active",
        "  - first", "  - second", "  - tenth"]


def test_an_error_without_problems_is_one_line() -> None:
    text = str(rpc_failure(_Failed(errors.InvalidArgument("tenant_id is required", reason="MISSING_FIELD",
                                                          field="tenant_id"))))
    assert text == "INVALID_ARGUMENT: MISSING_FIELD (field tenant_id): tenant_id is required"


def test_nothing_answering_is_the_mesh_unreachable() -> None:
    assert isinstance(rpc_failure(_Failed(None)), MeshUnreachable)
