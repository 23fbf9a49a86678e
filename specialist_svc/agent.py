"""One specialist agent: its registered manifest and its rules, without any transport.

:class:`SpecialistAgent` checks a task's input against the manifest's
``input_schema`` (additional fields are refused, so an agent never works on
context outside its projection), runs the rules with a
:class:`~specialist_svc.rules.CapabilityClient`, checks the result against
the manifest's ``output_schema`` and stamps ids, time and versions (§58).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from agentmesh import errors
from agentmesh.agent_manifest import AgentManifest, definition, load_manifests
from agentmesh.data_file import format_path
from agentmesh.schema_check import SchemaCheck
from agentmesh.structs import plain_struct
from agentmesh.v1 import common_pb2
from specialist_svc.agents import RULES, AgentRules
from specialist_svc.phrases import speaking
from specialist_svc.rules import CapabilityClient, ModelPort, TaskContext, TaskInputInvalid

__all__ = ["RUNTIME_VERSION", "SpecialistAgent", "UnknownAgent"]

SHIPPED_MANIFESTS = Path(__file__).resolve().parents[1] / "supervisor_svc" / "agents"
"""The manifests of the agents the mesh ships, kept with the registry that serves them (read as files)."""

RUNTIME_VERSION = "agentmesh-specialist/0.1.0"
"""``VersionStamp.runtime_version`` of every result."""


class UnknownAgent(ValueError):
    """No registered manifest, or no rules, for the requested agent id."""


@dataclass(frozen=True)
class SpecialistAgent:
    """A registered agent and its deterministic rules."""

    manifest: AgentManifest
    rules: AgentRules
    clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)
    """Stamps ``completed_at``; the rules themselves read no clock."""
    today: Callable[[], dt.date] = lambda: dt.datetime.now(dt.UTC).date()
    """The mesh's date the rules measure "already ended" by (``MeshConfig.today``, see agentmesh.clock)."""

    @classmethod
    def load(cls, agent_id: str, agents_dir: Path | None = None,
             today: Callable[[], dt.date] | None = None) -> SpecialistAgent:
        """The agent named ``agent_id`` from the supervisor's manifests (read-only).

        Raises:
            UnknownAgent: no manifest or no rules for ``agent_id``, or the rules call a
                capability the manifest does not register.
            agentmesh.agent_manifest.ManifestError: a manifest file is invalid.
        """
        manifests = {m.agent_id: m for m in load_manifests(agents_dir or SHIPPED_MANIFESTS)}
        known = sorted(set(manifests) & set(RULES))
        if agent_id not in manifests or agent_id not in RULES:
            raise UnknownAgent(f"unknown agent {agent_id!r} (known: {', '.join(known)})")
        manifest, rules = manifests[agent_id], RULES[agent_id]
        missing = [c for c in rules.capabilities if c not in manifest.capabilities]
        if missing:
            raise UnknownAgent(f"agent {agent_id!r}: its rules call {', '.join(missing)}, which its manifest "
                               f"({manifest.source}) does not register")
        return cls(manifest, rules, today=today) if today is not None else cls(manifest, rules)

    @cached_property
    def _input_check(self) -> SchemaCheck:
        return SchemaCheck(self.manifest.input_schema, formats=False)

    @cached_property
    def _output_check(self) -> SchemaCheck:
        return SchemaCheck(self.manifest.output_schema, formats=False)

    @property
    def agent_id(self) -> str:
        """The agent's id, e.g. ``training-agent``."""
        return self.manifest.agent_id

    @property
    def spiffe_id(self) -> str:
        """The SPIFFE id this agent's process presents."""
        return self.manifest.spiffe_id

    def definition(self) -> common_pb2.AgentDefinition:
        """The ``AgentDefinition`` of the manifest (its declared status; the supervisor's registry may differ)."""
        return definition(self.manifest, self.manifest.status)

    def task_input(self, task: common_pb2.AgentTask) -> dict[str, Any]:
        """The task's input as plain data, checked against the manifest's ``input_schema``.

        Raises:
            agentmesh.errors.InvalidArgument: ``TASK_INPUT_INVALID`` naming the field.
        """
        data: dict[str, Any] = plain_struct(task.input)
        error = self._input_check.first_error(data)
        if error is not None:
            field = format_path(["task", "input", *error.absolute_path])
            raise errors.InvalidArgument(f"{field}: {error.message}", reason="TASK_INPUT_INVALID", field=field)
        return data

    def run(self, task: common_pb2.AgentTask, client: CapabilityClient,
            handoffs: Sequence[common_pb2.HandoffOutcome] = (), *, again: bool = False,
            models: ModelPort | None = None) -> common_pb2.AgentResult:
        """Runs the rules on one task and returns the stamped result.

        ``handoffs`` (with ``again``): the task is called again after it answered WAITING, with the
        outcome of each handoff it asked for. A WAITING result is not an answer, so it is not checked
        against the output schema. ``models`` reaches the rules of an agent that uses a model
        (``AgentRules.models``); None (no model service) lets them run without, deterministic rules only.

        Raises:
            agentmesh.errors.InvalidArgument: the input breaks the schema or lacks what the rules need.
            agentmesh.errors.Internal: ``RESULT_SCHEMA_VIOLATION`` — the rules broke the
                manifest's ``output_schema`` (a bug; nothing half-right is returned).
        """
        data = self.task_input(task)
        context = TaskContext(today=self.today(), handoffs={h.action_id: h for h in handoffs},
                              again=again or bool(handoffs))
        try:
            with speaking(task.locale):  # statements in the user's language
                result = self.rules.run(data, client, context, models=models) if self.rules.models \
                    else self.rules.run(data, client, context)
        except TaskInputInvalid as err:
            field = f"task.input.{err.field}"
            raise errors.InvalidArgument(str(err), reason="TASK_INPUT_INVALID", field=field) from err
        if result.status not in (common_pb2.RESULT_STATUS_FAILED, common_pb2.RESULT_STATUS_WAITING):
            produced = plain_struct(result.result)
            for error in self._output_check.errors(produced):
                raise errors.Internal(f"result breaks {self.agent_id}'s output schema: {error.message}",
                                      reason="RESULT_SCHEMA_VIOLATION")
        result.task_id = task.task_id
        result.agent_id = self.agent_id
        stamp = Timestamp()
        stamp.FromDatetime(self.clock())
        result.completed_at.CopyFrom(stamp)
        capabilities = sorted({e.capability for e in result.evidence if e.capability})
        result.versions.CopyFrom(common_pb2.VersionStamp(
            agent_version=self.manifest.version, capability_version=",".join(capabilities),
            runtime_version=RUNTIME_VERSION))
        return result
