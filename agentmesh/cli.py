"""The ``agentmesh`` command line: certificates, tokens, the launcher, operator tools.

Every command has ``--help``; those that print results accept ``--json``.
Exit codes: 0 success, 1 the operation failed or was refused, 2 bad usage or
configuration.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

import grpc

from agentmesh import assertion, config, errors, launcher, spiffe, transport
from agentmesh.config import ConfigError, MeshConfig
from agentmesh.identities import OPERATOR, client_paths, init_identities
from agentmesh.pki import CertificateAuthority, PkiError
from agentmesh.service import address_file
from agentmesh.signing import SigningKeyError, load_private_key

Handler = Callable[[argparse.Namespace, MeshConfig], int]


class CliError(Exception):
    """A command failed; printed as one line, exit code 1."""


def print_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    """Prints rows as an aligned plain-text table."""
    widths = {c: max([len(c)] + [len(str(r.get(c, ""))) for r in rows]) for c in columns}
    print("  ".join(c.upper().ljust(widths[c]) for c in columns))
    for r in rows:
        print("  ".join(str(r.get(c, "")).ljust(widths[c]) for c in columns))


def emit(args: argparse.Namespace, data: Any, human: Callable[[], None]) -> None:
    """Prints JSON with ``--json``, else the human form."""
    if getattr(args, "json", False):
        print(json.dumps(data, indent=2, default=str))
    else:
        human()


# --- certs -----------------------------------------------------------------

def cmd_certs_init(args: argparse.Namespace, cfg: MeshConfig) -> int:
    issued = init_identities(cfg, force=args.force)
    data = {"home": str(cfg.home), "ca": str(cfg.mesh_home.certs / "ca.pem"), "issued": issued}
    emit(args, data, lambda: print(
        f"mesh CA and identities in {cfg.mesh_home.certs} ({len(issued)} issued now)"))
    return 0


def cmd_certs_issue(args: argparse.Namespace, cfg: MeshConfig) -> int:
    try:
        ident = spiffe.parse(args.spiffe_id)
    except spiffe.InvalidSpiffeId as err:
        raise CliError(f"--spiffe-id: {err}") from err
    ca = CertificateAuthority.load(cfg.mesh_home.certs)
    paths = ca.issue(ident, validity=dt.timedelta(hours=args.validity_hours))
    data = {"spiffe_id": str(ident), "cert": str(paths.cert), "key": str(paths.key),
            "valid_hours": args.validity_hours}
    emit(args, data, lambda: print(f"issued {ident}: {paths.cert}"))
    return 0


# --- token -----------------------------------------------------------------

def cmd_token_issue(args: argparse.Namespace, cfg: MeshConfig) -> int:
    try:
        key = load_private_key(cfg.mesh_home.keys / "idp.key")
    except SigningKeyError as err:
        raise CliError(f"{err} (run 'agentmesh certs init' first)") from err
    token = assertion.issue(key, tenant_id=args.tenant, user_id=args.user, roles=args.role or [],
                            session_id=args.session, conversation_id=args.conversation,
                            ttl_s=args.ttl)
    emit(args, {"token": token, "tenant": args.tenant, "user": args.user, "roles": args.role or []},
         lambda: print(token))
    return 0


# --- launcher --------------------------------------------------------------

def _show_mesh(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    emit(args, rows, lambda: print_table(rows, ["name", "spiffe_id", "address", "pid", "health"]))


def cmd_up(args: argparse.Namespace, cfg: MeshConfig) -> int:
    if args.ports_auto:
        cfg = cfg.model_copy(update={"ports": {k: 0 for k in cfg.ports}})
    try:
        procs = launcher.up(cfg, progress=not args.json)
    except launcher.LaunchError as err:
        raise CliError(str(err)) from err
    _show_mesh(args, launcher.status(cfg))
    if args.detach:
        return 0
    print("agentmesh: running; press Ctrl-C to stop", file=sys.stderr)
    launcher.wait_foreground(cfg, procs)
    return 0


def cmd_status(args: argparse.Namespace, cfg: MeshConfig) -> int:
    rows = launcher.status(cfg)
    if not rows:
        emit(args, [], lambda: print(f"no mesh running under {cfg.home}"))
        return 1
    _show_mesh(args, rows)
    return 0 if all(r["health"] == "SERVING" for r in rows) else 1


def cmd_down(args: argparse.Namespace, cfg: MeshConfig) -> int:
    procs = launcher.down(cfg)
    emit(args, {"stopped": [p.name for p in procs]},
         lambda: print(f"stopped {len(procs)} processes" if procs else "no mesh was running"))
    return 0


# --- talking to the running mesh -------------------------------------------

def address_of(cfg: MeshConfig, name: str) -> str:
    """Where a process of the running mesh listens: the launcher's record, else the config."""
    for p in launcher.read_state(cfg):
        if p.name == name and p.address:
            return p.address
    if name not in cfg.peers:
        # A process started on its own records where it listens.
        try:
            return str(json.loads(address_file(cfg, name).read_text())["address"])
        except (OSError, ValueError, KeyError):
            pass
    return cfg.address(name)


def mesh_channel(cfg: MeshConfig, name: str, as_identity: spiffe.SpiffeId = OPERATOR) -> grpc.Channel:
    """An mTLS channel to a mesh process, using a client identity from the home."""
    tls = transport.TlsFiles.of(client_paths(cfg, as_identity), cfg.mesh_home.certs / "ca.pem")
    ident = spiffe.service(name) if name in config.ROLES else spiffe.agent(name)
    return transport.secure_channel(address_of(cfg, name), tls, ident, default_timeout_s=cfg.call_timeout_s)


def rpc_failure(err: grpc.RpcError) -> CliError:
    """A failed call as one line: status, reason and the field it names."""
    mesh_err = errors.from_rpc_error(err)
    field = f" (field {mesh_err.field})" if mesh_err.field else ""
    return CliError(f"{mesh_err.code.name}: {mesh_err.reason}{field}: {mesh_err.message}")


# --- policy ----------------------------------------------------------------

def cmd_policy_check(args: argparse.Namespace, cfg: MeshConfig) -> int:
    from agentmesh.v1 import common_pb2
    from agentmesh.v1 import policy_service_pb2 as policy_pb2
    from agentmesh.v1 import policy_service_pb2_grpc as policy_grpc

    risk = args.risk.upper()
    req = policy_pb2.AuthorizeRequest(
        user=common_pb2.UserContext(tenant_id=args.tenant, user_id=args.user, roles=args.role or []),
        actor_type="ACTOR_TYPE_SYSTEM" if args.system_actor else "ACTOR_TYPE_USER",
        system_actor=args.system_actor or "",
        agent=common_pb2.AgentPrincipal(agent_id=args.agent, delegation_chain=[
            f"user:{args.tenant}/{args.user}", "svc:supervisor", f"agent:{args.agent}"]),
        delegation_depth=args.depth,
        capability_id=args.capability,
        resource=policy_pb2.ResourceRef(type=args.resource_type, id=args.resource_id,
                                        tenant_id=args.resource_tenant or args.tenant),
        context=policy_pb2.OperationContext(
            confirmation_given=args.confirmed, human_approval_id=args.human_approval or "",
            human_approver_id=args.approver or "", override_reason=args.override_reason or "",
            risk_profile=common_pb2.RiskProfile(max_risk=f"RISK_LEVEL_{risk}", can_mutate=args.mutates)),
        operation="OPERATION_KIND_OVERRIDE" if args.override else "OPERATION_KIND_INVOKE",
    )
    try:
        with mesh_channel(cfg, "policy") as channel:
            resp = policy_grpc.PolicyServiceStub(channel).Authorize(req)
    except grpc.RpcError as err:
        raise rpc_failure(err) from err
    effect = common_pb2.PolicyEffect.Name(resp.decision.effect).removeprefix("POLICY_EFFECT_")
    data = {"effect": effect, "reason_codes": list(resp.decision.reason_codes),
            "policy_version": resp.decision.policy_version, "decision_id": resp.decision.decision_id,
            "explanation": resp.explanation}

    def human() -> None:
        print(f"decision: {effect}")
        print(f"because:  {resp.explanation}")
        for code in resp.decision.reason_codes:
            print(f"  - {code}")
        print(f"policy version: {resp.decision.policy_version}")
        print(f"decision id:    {resp.decision.decision_id}")

    emit(args, data, human)
    return 0


def cmd_policy_kill(args: argparse.Namespace, cfg: MeshConfig) -> int:
    from agentmesh.v1 import policy_service_pb2 as policy_pb2
    from agentmesh.v1 import policy_service_pb2_grpc as policy_grpc

    req = policy_pb2.SetKillSwitchRequest(scope=f"KILL_SWITCH_SCOPE_{args.scope.upper()}", target=args.target or "",
                                          enabled=not args.off, reason=args.reason)
    try:
        with mesh_channel(cfg, "policy") as channel:
            ks = policy_grpc.PolicyServiceStub(channel).SetKillSwitch(req).kill_switch
    except grpc.RpcError as err:
        raise rpc_failure(err) from err
    state = "ON (stopped)" if ks.enabled else "off"
    emit(args, {"scope": args.scope.upper(), "target": ks.target, "enabled": ks.enabled,
                "changed_by": ks.changed_by},
         lambda: print(f"kill switch {args.scope.upper()} {ks.target or '(platform)'}: {state}"))
    return 0


def cmd_policy_switches(args: argparse.Namespace, cfg: MeshConfig) -> int:
    from agentmesh.v1 import policy_service_pb2 as policy_pb2
    from agentmesh.v1 import policy_service_pb2_grpc as policy_grpc

    try:
        with mesh_channel(cfg, "policy") as channel:
            resp = policy_grpc.PolicyServiceStub(channel).ListKillSwitches(policy_pb2.ListKillSwitchesRequest())
    except grpc.RpcError as err:
        raise rpc_failure(err) from err
    rows = [{"scope": policy_pb2.KillSwitchScope.Name(k.scope).removeprefix("KILL_SWITCH_SCOPE_"),
             "target": k.target, "reason": k.reason, "changed_by": k.changed_by,
             "changed_at": k.changed_at.ToDatetime().isoformat()} for k in resp.kill_switches]
    emit(args, rows, lambda: print_table(rows, ["scope", "target", "reason", "changed_by", "changed_at"])
         if rows else print("no kill switch in force"))
    return 0


# --- analyze ---------------------------------------------------------------

def _name(enum: Any, value: int, prefix: str) -> str:
    return str(enum.Name(value)).removeprefix(prefix)


def print_execution(ex: Any) -> None:
    """The human report of an execution: decision, results with evidence, conflicts, scores."""
    from agentmesh.v1 import common_pb2
    from agentmesh.v1 import supervisor_service_pb2 as sup_pb2

    print(f"execution {ex.execution_id}  ({_name(sup_pb2.ExecutionStatus, ex.status, 'EXECUTION_STATUS_')})")
    print(f"decision  {_name(common_pb2.AnalysisDecision, ex.decision, 'ANALYSIS_DECISION_')}")
    if ex.reason:
        print(f"reason    {ex.reason}")
    print()
    print(ex.summary)
    for result in ex.results:
        status = _name(common_pb2.ResultStatus, result.status, "RESULT_STATUS_")
        verdict = result.result.fields["verdict"].string_value if "verdict" in result.result.fields else "-"
        print(f"\n[{result.agent_id}] {status}, verdict {verdict}"
              + (f" — {result.error_reason}" if result.error_reason else ""))
        for st in result.statements:
            kind = _name(common_pb2.StatementKind, st.kind, "STATEMENT_KIND_")
            refs = ", ".join(f"#{i}" for i in st.evidence_indexes)
            print(f"  {kind:<14} {st.code:<26} {st.subject:<24} {st.text}" + (f"  [{refs}]" if refs else ""))
        for i, ev in enumerate(result.evidence):
            auth = _name(common_pb2.AuthorityLevel, ev.authority, "AUTHORITY_LEVEL_")
            print(f"  evidence #{i}: {ev.source} {ev.reference} ({auth}, {ev.capability})")
    for c in ex.conflicts:
        print(f"\nconflict on {c.subject}: {c.agent_a} vs {c.agent_b}"
              + (f" — resolved: {c.resolution}" if c.resolution else f" — review {c.review_id}"))
        for rule in c.applicable_rules:
            print(f"  rule: {rule}")
    if ex.missing:
        print("\nmissing:")
        for m in ex.missing:
            print(f"  - {m}")
    if ex.selection_scores:
        print("\nselection scores:")
        for sc in ex.selection_scores:
            print(f"  {sc.agent_id:<18} final {sc.final_score:.3f}  domain {sc.domain_score:.2f}  capability "
                  f"{sc.capability_score:.2f}  knowledge {sc.knowledge_score:.2f}  availability "
                  f"{sc.availability_score:.2f}  cost {sc.cost_score:.2f}  history {sc.history_score:.2f}")
    print(f"\ntrace {ex.trace.trace_id or '-'}  correlation {ex.trace.correlation_id}")


def cmd_analyze(args: argparse.Namespace, cfg: MeshConfig) -> int:
    from google.protobuf import json_format

    from agentmesh.identities import PLATFORM_CLI
    from agentmesh.v1 import common_pb2
    from agentmesh.v1 import supervisor_service_pb2 as sup_pb2
    from agentmesh.v1 import supervisor_service_pb2_grpc as sup_grpc

    try:
        key = load_private_key(cfg.mesh_home.keys / "idp.key")
    except SigningKeyError as err:
        raise CliError(f"{err} (run 'agentmesh certs init' or 'agentmesh up' first)") from err
    token = args.assertion or assertion.issue(key, tenant_id=args.tenant, user_id=args.user,
                                              roles=args.role or ["analyst"])
    request = sup_pb2.AnalyzeRequest(user_assertion=token, request_text=args.request,
                                     tenant_id=args.request_tenant or args.tenant, detach=True)
    quiet = args.json or args.quiet
    try:
        with mesh_channel(cfg, "supervisor", PLATFORM_CLI) as channel:
            stub = sup_grpc.SupervisorServiceStub(channel)
            execution = stub.Analyze(request, timeout=cfg.call_timeout_s).execution
            if not quiet:
                print(f"execution {execution.execution_id}: {len(execution.graph.nodes)} tasks planned",
                      file=sys.stderr)
            final = execution
            watch = stub.WatchExecution(sup_pb2.WatchExecutionRequest(
                user_assertion=token, execution_id=execution.execution_id), timeout=args.timeout)
            for event in watch:
                final = event.execution
                if not quiet and event.event in ("task_started", "task_finished"):
                    state = _name(common_pb2.TaskStatus, event.task_status, "TASK_STATUS_")
                    print(f"  {event.event.replace('_', ' '):<14} {event.agent_id:<18} {state}", file=sys.stderr)
    except grpc.RpcError as err:
        raise rpc_failure(err) from err
    if args.json:
        print(json.dumps(json_format.MessageToDict(final, preserving_proto_field_name=True), indent=2))
    else:
        print_execution(final)
    return 0 if final.status != sup_pb2.EXECUTION_STATUS_RUNNING else 1


# --- data ------------------------------------------------------------------

def cmd_data_load(args: argparse.Namespace, cfg: MeshConfig) -> int:
    import shutil
    from pathlib import Path

    from capability_svc.errors import WorldFormatError
    from capability_svc.internal_runtime import InternalStore
    from capability_svc.world import load_world

    path = Path(args.file)
    if not path.is_file():
        raise CliError(f"{path}: no such file")
    cfg.mesh_home.ensure()
    try:
        summary = load_world(path, InternalStore(cfg.mesh_home.data / "internal.db"))
    except WorldFormatError as err:
        raise CliError(f"{err} (nothing was loaded)") from err
    # The sandbox LMS serves the trainings of the last world loaded.
    shutil.copyfile(path, cfg.mesh_home.data / "lms-world.yaml")
    lms_url = launcher.restart_lms(cfg)
    data = {"source": str(path), "tenants": list(summary.tenants), "workers": summary.workers,
            "permits": summary.permits, "risks": summary.risks, "checklists": summary.checklists,
            "lms_workers": summary.lms_workers, "lms_restarted": lms_url}
    emit(args, data, lambda: print(
        f"loaded {path}: tenants {', '.join(summary.tenants)}; {summary.permits} permits, {summary.workers} workers, "
        f"{summary.risks} risks, {summary.checklists} checklists, LMS records for {summary.lms_workers} workers"
        + (f"; sandbox LMS restarted at {lms_url}" if lms_url else "")))
    return 0


# --- parser ----------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    """The full command tree."""
    # SUPPRESS: the options may come before or after the subcommand, and a
    # subcommand's unset default must not overwrite a value given before it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--home", default=argparse.SUPPRESS,
                        help="mesh home directory (default: $AGENTMESH_HOME or ~/.agentmesh)")
    common.add_argument("--config", default=argparse.SUPPRESS,
                        help="YAML config file (default: HOME/config.yaml if present)")
    out = argparse.ArgumentParser(add_help=False)
    out.add_argument("--json", action="store_true", help="print machine-readable JSON")

    parser = argparse.ArgumentParser(
        prog="agentmesh", description="Governed multi-agent work over a gRPC mesh with mTLS.",
        parents=[common])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    certs = sub.add_parser("certs", help="mesh CA and workload certificates")
    certs_sub = certs.add_subparsers(dest="certs_command", required=True, metavar="SUBCOMMAND")
    p = certs_sub.add_parser("init", parents=[common, out],
                             help="create the mesh CA, every workload identity and the dev signing keys")
    p.add_argument("--force", action="store_true", help="replace existing CA, certificates and keys")
    p.set_defaults(handler=cmd_certs_init)
    p = certs_sub.add_parser("issue", parents=[common, out], help="issue (or re-issue) one certificate")
    p.add_argument("--spiffe-id", required=True,
                   help="e.g. spiffe://agentmesh.local/client/my-service")
    p.add_argument("--validity-hours", type=float, default=24.0, help="validity (default 24)")
    p.set_defaults(handler=cmd_certs_issue)

    token = sub.add_parser("token", help="signed user assertions (dev identity provider)")
    token_sub = token.add_subparsers(dest="token_command", required=True, metavar="SUBCOMMAND")
    p = token_sub.add_parser("issue", parents=[common, out], help="mint a user assertion (JWT, EdDSA)")
    p.add_argument("--tenant", required=True)
    p.add_argument("--user", required=True)
    p.add_argument("--role", action="append", help="a role of the user (repeatable)")
    p.add_argument("--session", help="session id (default: a new one)")
    p.add_argument("--conversation", help="conversation id (default: a new one)")
    p.add_argument("--ttl", type=int, default=assertion.DEFAULT_TTL_S, help="seconds valid (default 3600)")
    p.set_defaults(handler=cmd_token_issue)

    p = sub.add_parser("up", parents=[common, out], help="start every role as its own process")
    p.add_argument("--detach", action="store_true", help="return once all report SERVING")
    p.add_argument("--ports-auto", action="store_true", help="let every process pick a free port")
    p.set_defaults(handler=cmd_up)
    p = sub.add_parser("status", parents=[common, out], help="show the running mesh and its health")
    p.set_defaults(handler=cmd_status)
    p = sub.add_parser("down", parents=[common, out], help="stop every process of the mesh")
    p.set_defaults(handler=cmd_down)

    policy = sub.add_parser("policy", help="ask the policy engine; manage kill switches")
    policy_sub = policy.add_subparsers(dest="policy_command", required=True, metavar="SUBCOMMAND")
    p = policy_sub.add_parser("check", parents=[common, out],
                              help="ask the running policy engine for a decision and why")
    p.add_argument("--tenant", required=True, help="the user's tenant")
    p.add_argument("--user", required=True, help="the user id")
    p.add_argument("--role", action="append", help="a role of the user (repeatable)")
    p.add_argument("--agent", required=True, help="the acting agent, e.g. training-agent")
    p.add_argument("--capability", required=True, help="e.g. training.getStatus")
    p.add_argument("--resource-tenant", help="tenant owning the resource (default: --tenant)")
    p.add_argument("--resource-type", default="WorkPermit")
    p.add_argument("--resource-id", default="-")
    p.add_argument("--risk", default="low", choices=["low", "medium", "high", "critical"],
                   help="the capability's risk level (default low)")
    p.add_argument("--mutates", action="store_true", help="the capability changes state")
    p.add_argument("--confirmed", action="store_true", help="the user confirmed this action")
    p.add_argument("--human-approval", help="id of a human approval")
    p.add_argument("--approver", help="user id of the human approver")
    p.add_argument("--system-actor", help="decide for a SYSTEM actor, e.g. TrainingExpirationScanner")
    p.add_argument("--override", action="store_true", help="an OVERRIDE by a human")
    p.add_argument("--override-reason")
    p.add_argument("--depth", type=int, default=2, help="delegation depth (default 2)")
    p.set_defaults(handler=cmd_policy_check)
    p = policy_sub.add_parser("kill", parents=[common, out], help="turn a kill switch on (or --off)")
    p.add_argument("--scope", required=True, choices=["agent", "capability", "tenant", "platform"])
    p.add_argument("--target", help="agent id, capability id or tenant id (none for platform)")
    p.add_argument("--reason", required=True, help="why; recorded with your identity")
    p.add_argument("--off", action="store_true", help="turn the switch off again")
    p.set_defaults(handler=cmd_policy_kill)
    p = policy_sub.add_parser("switches", parents=[common, out], help="list the kill switches in force")
    p.set_defaults(handler=cmd_policy_switches)

    p = sub.add_parser("analyze", parents=[common, out],
                       help="ask the supervisor for a governed team analysis and print the report")
    p.add_argument("request", help='e.g. "Analyze permit WP-10231 and tell me if it can be released"')
    p.add_argument("--tenant", required=True, help="the user's tenant (goes into the signed assertion)")
    p.add_argument("--user", required=True, help="the user id")
    p.add_argument("--role", action="append", help="a role of the user (repeatable; default analyst)")
    p.add_argument("--request-tenant", help="tenant named in the request, if different (it will be refused)")
    p.add_argument("--assertion", help="use this signed user assertion instead of minting one")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the result (default 120)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(handler=cmd_analyze)

    data = sub.add_parser("data", help="load worlds (tenants, permits, workers, trainings, risks, checklists)")
    data_sub = data.add_subparsers(dest="data_command", required=True, metavar="SUBCOMMAND")
    p = data_sub.add_parser("load", parents=[common, out],
                            help="validate a YAML/JSON world file and load it (all or nothing)")
    p.add_argument("file", help="world file; format in capability_svc/WORLD_FORMAT.md")
    p.set_defaults(handler=cmd_data_load)

    from agentmesh import cli_audit

    cli_audit.register(sub, common, out)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``agentmesh`` command."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        cfg = config.load(home=getattr(args, "home", None), config_file=getattr(args, "config", None))
        handler: Handler = args.handler
        return handler(args, cfg)
    except ConfigError as err:
        print(f"agentmesh: {err}", file=sys.stderr)
        return 2
    except (CliError, PkiError, SigningKeyError) as err:
        print(f"agentmesh: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
