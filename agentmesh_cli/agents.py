"""``agentmesh agents``: the agent registry and the onboarding of agent versions (PRD §57).

``agentmesh agents list``
    Every agent the supervisor serves, with the version and status in service.
``agentmesh agents versions [AGENT]``
    Every version (shipped and registered) with its status, endpoint and who registered it.
``agentmesh agents register MANIFEST --endpoint HOST:PORT``
    Registers a version from a manifest file (the format of ``supervisor_svc/agents/*.yaml``); DRAFT.
``agentmesh agents transition AGENT@VERSION STATUS --reason TEXT``
    Moves a version along one lifecycle edge (validate = VALIDATING, approve = APPROVED, ...).
``agentmesh agents evaluate AGENT@VERSION``
    Runs the agent's evaluation dataset against the version in a sandbox and prints each case, the
    score and the regression gate (exit 0: the gate held; 3: it ran and the gate failed).
``agentmesh agents status AGENT STATUS --reason TEXT``
    The operator's kill switch (``SetAgentStatus``), also only along the lifecycle's edges.

Onboarding acts as a user (``--tenant/--user/--role``, role ``agent-operator`` by default;
``agent-approver`` approves) over the operator's certificate. A refusal prints its status,
reason and field (and every problem the Release Manager found) and exits 1.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from agentmesh.config import MeshConfig

T = TypeVar("T")

STATUSES = ["DRAFT", "VALIDATING", "EVALUATING", "APPROVED", "CANARY", "ACTIVE", "DEPRECATED", "DISABLED",
            "RETIRED"]


def register(sub: Any, common: argparse.ArgumentParser, out: argparse.ArgumentParser) -> None:
    """Adds ``agentmesh agents ...`` to the command tree."""
    from agentmesh_cli.common import add_user_options

    agents = sub.add_parser("agents", help="the agent registry and onboarding of agent versions",
                            description="The agent registry (served by the supervisor) and the lifecycle of agent "
                                        "versions: register, validate, evaluate, approve, canary, promote, roll back.")
    asub = agents.add_subparsers(dest="agents_command", required=True, metavar="SUBCOMMAND")
    p = asub.add_parser("list", parents=[common, out], help="the agents in service")
    p.set_defaults(handler=cmd_list)
    p = asub.add_parser("versions", parents=[common, out], help="every version of an agent (or of all)")
    p.add_argument("agent_id", nargs="?", default="", metavar="AGENT")
    p.set_defaults(handler=cmd_versions)
    p = asub.add_parser("register", parents=[common, out], help="register a version from a manifest file (DRAFT)",
                        description="Register an agent version from a manifest file; it enters DRAFT. Exits 1 when "
                                    "refused.")
    p.add_argument("manifest", metavar="MANIFEST", help="the manifest (YAML or JSON)")
    p.add_argument("--endpoint", required=True, help="where its SpecialistService listens, host:port")
    p.add_argument("--spiffe-id", default="", help="the SPIFFE id its process presents (default: the agent's own)")
    add_user_options(p, "agent-operator")
    p.set_defaults(handler=cmd_register)
    p = asub.add_parser("transition", parents=[common, out], help="move a version along one lifecycle edge",
                        description="Move AGENT@VERSION to STATUS (one edge of the lifecycle). Entering VALIDATING "
                                    "runs the Release Manager. Exits 1 when refused.")
    p.add_argument("target", metavar="AGENT@VERSION")
    p.add_argument("status", metavar="STATUS", type=str.upper, choices=STATUSES)
    p.add_argument("--reason", required=True, help="why (recorded)")
    add_user_options(p, "agent-operator")
    p.set_defaults(handler=cmd_transition)
    p = asub.add_parser("evaluate", parents=[common, out], help="run the agent's evaluation dataset (sandbox)",
                        description="Run the agent's evaluation dataset (supervisor_svc/evaluations/AGENT.yaml) "
                                    "against AGENT@VERSION in a sandbox: every case is a task to the version's "
                                    "process whose capability calls are answered from the case's mocks. Prints "
                                    "each case, the score and the regression gate against the previous version. "
                                    "An EVALUATING version whose gate fails goes back to DRAFT. Exit codes: 0 the "
                                    "gate held, 3 it ran and the gate failed, 1 refused or not run.")
    p.add_argument("target", metavar="AGENT@VERSION")
    p.add_argument("--timeout", type=float, default=300.0, metavar="S", help="give up after S seconds (300)")
    add_user_options(p, "agent-operator")
    p.set_defaults(handler=cmd_evaluate)
    p = asub.add_parser("status", parents=[common, out], help="the kill switch: change the status in service",
                        description="Change the status of the agent's version in service (SetAgentStatus, operators; "
                                    "only along the lifecycle's edges). Exits 1 when refused.")
    p.add_argument("agent_id", metavar="AGENT")
    p.add_argument("status", metavar="STATUS", type=str.upper, choices=STATUSES)
    p.add_argument("--reason", required=True, help="why (recorded)")
    p.set_defaults(handler=cmd_status)


def _registry(cfg: MeshConfig, call: Callable[[Any], T]) -> T:
    from agentmesh.v1 import agent_registry_service_pb2_grpc as reg_grpc
    from agentmesh_cli.common import exchange

    return exchange(cfg, "supervisor", reg_grpc.AgentRegistryServiceStub, call)


def _status(value: int) -> str:
    from agentmesh.execution_text import enum_name
    from agentmesh.v1 import common_pb2

    return enum_name(common_pb2.LifecycleStatus, value, "LIFECYCLE_STATUS_")


def _version_row(v: Any) -> dict[str, Any]:
    ev = v.evaluation if v.HasField("evaluation") else None
    return {"agent": v.agent_id, "version": v.version, "status": _status(v.status), "endpoint": v.endpoint or "-",
            "registered_by": v.registered_by, "problems": len(v.problems),
            "evaluation": f"{ev.score:.2f} {'PASSED' if ev.gate_passed else 'FAILED'}" if ev else "-"}


def cmd_list(args: argparse.Namespace, cfg: MeshConfig) -> int:
    from google.protobuf import json_format

    from agentmesh.v1 import agent_registry_service_pb2 as reg_pb2
    from agentmesh_cli.common import emit, print_table

    agents = list(_registry(cfg, lambda s: s.ListAgents(reg_pb2.ListAgentsRequest())).agents)
    rows = [{"agent": a.agent_id, "version": a.version, "status": _status(a.status), "domains": ",".join(a.domains)}
            for a in agents]
    emit(args, [json_format.MessageToDict(a) for a in agents],
         lambda: print_table(rows, ["agent", "version", "status", "domains"]))
    return 0


def cmd_versions(args: argparse.Namespace, cfg: MeshConfig) -> int:
    from google.protobuf import json_format

    from agentmesh.v1 import agent_registry_service_pb2 as reg_pb2
    from agentmesh_cli.common import emit, print_table

    versions = list(_registry(cfg, lambda s: s.ListAgentVersions(
        reg_pb2.ListAgentVersionsRequest(agent_id=args.agent_id))).versions)
    emit(args, [json_format.MessageToDict(v) for v in versions],
         lambda: print_table([_version_row(v) for v in versions],
                             ["agent", "version", "status", "endpoint", "registered_by", "problems",
                              "evaluation"]))
    return 0


def _print_version(v: Any) -> None:
    print(f"{v.agent_id}@{v.version}  {_status(v.status)}  endpoint {v.endpoint or '-'}  "
          f"registered by {v.registered_by}")
    for p in v.problems:
        print(f"  problem: {p}")


def cmd_register(args: argparse.Namespace, cfg: MeshConfig) -> int:
    from pathlib import Path

    import yaml
    from google.protobuf import json_format, struct_pb2

    from agentmesh import spiffe
    from agentmesh.v1 import agent_registry_service_pb2 as reg_pb2
    from agentmesh_cli.common import CliError, emit, user_assertion

    try:
        data = yaml.safe_load(Path(args.manifest).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as err:
        raise CliError(f"cannot read the manifest {args.manifest}: {err}") from err
    if not isinstance(data, dict):
        raise CliError(f"{args.manifest}: a manifest is a mapping")
    manifest = struct_pb2.Struct()
    manifest.update(json.loads(json.dumps(data, default=str)))
    spiffe_id = args.spiffe_id or str(spiffe.agent(str(data.get("agent_id", ""))))
    req = reg_pb2.RegisterAgentVersionRequest(user_assertion=user_assertion(args, cfg, "agent-operator"),
                                              manifest=manifest, endpoint=args.endpoint, spiffe_id=spiffe_id)
    v = _registry(cfg, lambda s: s.RegisterAgentVersion(req)).version
    emit(args, json_format.MessageToDict(v), lambda: _print_version(v))
    return 0


def _target(text: str) -> tuple[str, str]:
    from agentmesh_cli.common import CliError

    agent_id, sep, version = text.partition("@")
    if not sep or not agent_id or not version:
        raise CliError("expected AGENT@VERSION, e.g. training-agent@1.1.0")
    return agent_id, version


def cmd_evaluate(args: argparse.Namespace, cfg: MeshConfig) -> int:
    from google.protobuf import json_format

    from agentmesh.v1 import agent_registry_service_pb2 as reg_pb2
    from agentmesh_cli.common import emit, print_table, user_assertion

    agent_id, version = _target(args.target)
    req = reg_pb2.EvaluateAgentVersionRequest(user_assertion=user_assertion(args, cfg, "agent-operator"),
                                              agent_id=agent_id, version=version)
    resp = _registry(cfg, lambda s: s.EvaluateAgentVersion(req, timeout=args.timeout))
    ev = resp.evaluation

    def human() -> None:
        print_table([{"case": c.case_id, "result": "pass" if c.passed else "FAIL",
                      "expected": c.expected_verdict or "-", "got": c.actual_verdict or "-",
                      "why": "; ".join(c.mismatches) or c.description} for c in ev.cases],
                    ["case", "result", "expected", "got", "why"])
        base = f"baseline {ev.baseline_version} {ev.baseline_score:.2f}" if ev.baseline_version else "no baseline"
        print(f"{ev.agent_id}@{ev.version}  dataset {ev.dataset_version}  score {ev.score:.2f} "
              f"({ev.passed_cases}/{ev.total_cases})  {base}  gate {'PASSED' if ev.gate_passed else 'FAILED'}")
        for p in ev.gate_problems:
            print(f"  gate: {p}")
        _print_version(resp.version)

    emit(args, json_format.MessageToDict(resp), human)
    return 0 if ev.gate_passed else 3


def cmd_transition(args: argparse.Namespace, cfg: MeshConfig) -> int:
    from google.protobuf import json_format

    from agentmesh.v1 import agent_registry_service_pb2 as reg_pb2
    from agentmesh_cli.common import emit, user_assertion

    agent_id, version = _target(args.target)
    default_role = "agent-approver" if args.status == "APPROVED" else "agent-operator"
    req = reg_pb2.TransitionAgentVersionRequest(
        user_assertion=user_assertion(args, cfg, default_role), agent_id=agent_id, version=version,
        to_status=f"LIFECYCLE_STATUS_{args.status}", reason=args.reason)
    resp = _registry(cfg, lambda s: s.TransitionAgentVersion(req))

    def human() -> None:
        _print_version(resp.version)
        for other in resp.also_changed:
            print("also: ", end="")
            _print_version(other)

    emit(args, json_format.MessageToDict(resp), human)
    return 0


def cmd_status(args: argparse.Namespace, cfg: MeshConfig) -> int:
    from google.protobuf import json_format

    from agentmesh.v1 import agent_registry_service_pb2 as reg_pb2
    from agentmesh_cli.common import emit

    req = reg_pb2.SetAgentStatusRequest(agent_id=args.agent_id, status=f"LIFECYCLE_STATUS_{args.status}",
                                        reason=args.reason)
    a = _registry(cfg, lambda s: s.SetAgentStatus(req)).agent
    emit(args, json_format.MessageToDict(a), lambda: print(f"{a.agent_id}@{a.version}  {_status(a.status)}"))
    return 0
