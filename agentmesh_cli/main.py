"""The ``agentmesh`` command line: certificates, tokens, the launcher, operator tools.

Every command has ``--help``; those that print results accept ``--json``.
Text output names enum values without their prefix (``NOT_RECOMMENDED``,
``ACTION_APPROVAL``); ``--json`` prints the full enum names of the contracts
(``ANALYSIS_DECISION_NOT_RECOMMENDED``). Exit codes: 0 success, 1 the
operation failed or was refused (or the mesh does not answer: one line says
so and how to start it), 2 bad usage or configuration; ``analyze``,
``confirm`` and ``policy check`` document theirs in ``--help``. Output cut
short by a closed pipe (``agentmesh audit trail X | head``) ends quietly with
141, as a command killed by SIGPIPE does.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import grpc

from agentmesh import assertion, config, launcher, spiffe
from agentmesh.config import ConfigError, MeshConfig
from agentmesh.execution_text import action_outcome, enum_name
from agentmesh.identities import LegacyLayoutError, init_identities, migrate_legacy_layout
from agentmesh.pki import CertificateAuthority, PkiError
from agentmesh.signing import SigningKeyError, load_private_key
from agentmesh_cli.common import (
    ANALYSIS_NOT_FINISHED,
    ActionFlow,
    CliError,
    MeshUnreachable,
    add_user_options,
    confirm_hint,
    emit,
    exchange,
    execution_dict,
    mesh_channel,
    print_execution,
    print_table,
    program,
    reviewer_hint,
    rpc_failure,
    unreachable_line,
    user_assertion,
)

if TYPE_CHECKING:
    pass

Handler = Callable[[argparse.Namespace, MeshConfig], int]


# --- certs -----------------------------------------------------------------

CERTS_DESCRIPTION = """\
The mesh CA and the identities, under the mesh home:

  ca/                     the CA key (ca.key) and the dev identity provider's key
                          (idp.key); read only by 'certs init', 'certs issue',
                          'token issue' and the CLI's dev assertions, never by a
                          workload process
  trust/                  the trust bundle (ca.pem) and public keys (idp.pub,
                          grant-signer.pub, the audit checkpoint key)
  workloads/KIND-NAME/    one private directory per identity: cert.pem, key.pem,
                          and the role's own signing key (svc-supervisor:
                          grant-signer.key; svc-audit: its checkpoint key)

A role process reads its own workloads/ directory and trust/ only. The CA issues
leaves only (path length 0); leaves are valid 24 hours by default. Private keys
are written 0600 and never printed.
"""


def _migrate(cfg: MeshConfig) -> None:
    launcher.report_migration(migrate_legacy_layout(cfg.mesh_home), cfg)


def cmd_certs_init(args: argparse.Namespace, cfg: MeshConfig) -> int:
    try:
        _migrate(cfg)
    except LegacyLayoutError as err:
        print(f"agentmesh: {err}", file=sys.stderr)
        return 2
    issued = init_identities(cfg, force=args.force)
    home = cfg.mesh_home
    data = {"home": str(cfg.home), "ca": str(home.trust_bundle), "workloads": str(home.workloads),
            "issued": issued}
    emit(args, data, lambda: print(
        f"mesh CA in {home.ca}, trust bundle {home.trust_bundle}, identities in {home.workloads} "
        f"({len(issued)} issued now)"))
    return 0


def cmd_certs_issue(args: argparse.Namespace, cfg: MeshConfig) -> int:
    try:
        ident = spiffe.parse(args.spiffe_id)
    except spiffe.InvalidSpiffeId as err:
        raise CliError(f"--spiffe-id: {err}") from err
    home = cfg.mesh_home
    ca = CertificateAuthority.load(home.ca, home.trust_bundle)
    paths = ca.issue(ident, home.workload_files(ident), validity=dt.timedelta(hours=args.validity_hours))
    data = {"spiffe_id": str(ident), "cert": str(paths.cert), "key": str(paths.key),
            "valid_hours": args.validity_hours}
    emit(args, data, lambda: print(f"issued {ident}: {paths.cert}"))
    return 0


# --- token -----------------------------------------------------------------

def cmd_token_issue(args: argparse.Namespace, cfg: MeshConfig) -> int:
    try:
        key = load_private_key(cfg.mesh_home.idp_key)
    except SigningKeyError as err:
        raise CliError(f"{err} (run 'agentmesh certs init' first)") from err
    token = assertion.issue(key, tenant_id=args.tenant, user_id=args.user, roles=args.role or [],
                            session_id=args.session, conversation_id=args.conversation,
                            ttl_s=args.ttl)
    emit(args, {"token": token, "tenant": args.tenant, "user": args.user, "roles": args.role or []},
         lambda: print(token))
    return 0


# --- launcher --------------------------------------------------------------

def _clock(ts: Any) -> str:
    return time.strftime("%H:%M:%S", time.localtime(float(ts))) if ts else ""


def _expiry(ts: Any) -> str:
    """When a leaf expires: the time today, else the date and time (local)."""
    if not ts:
        return ""
    t = float(ts)
    same_day = time.strftime("%Y-%m-%d", time.localtime(t)) == time.strftime("%Y-%m-%d")
    return time.strftime("%H:%M:%S" if same_day else "%Y-%m-%d %H:%M", time.localtime(t))


def _mesh_row(r: dict[str, Any]) -> dict[str, Any]:
    if r["kind"] == launcher.LAUNCHER:
        return {"name": r["name"], "pid": r["pid"], "address": f"({r['mode']})", "health": r["health"],
                "up_since": _clock(r["started_at"])}
    last = launcher.exit_text(r.get("last_exit_code"))
    return {"name": r["name"], "pid": r["pid"] or "", "address": r["address"], "health": r["health"],
            "up_since": _clock(r.get("started_at")) if r["alive"] else "", "restarts": r.get("restarts", 0),
            "last_exit": f"{last} at {_clock(r.get('last_exit_at'))}" if last else "",
            "cert_expires": _expiry(r.get("cert_expires_at")) + (" !" if r.get("cert_warning") else "")}


def _show_mesh(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    def human() -> None:
        print_table([_mesh_row(r) for r in rows],
                    ["name", "pid", "address", "health", "up_since", "restarts", "last_exit", "cert_expires"])
        for r in rows:
            if r.get("cert_warning"):
                print(f"\n{r['name']}: WARNING: {r['cert_warning']}")
            if r["health"] in ("SERVING", "RUNNING"):
                continue
            print(f"\n{r['name']}: {r['health']}" + (f": {r['reason']}" if r.get("reason") else ""))
            if r.get("log"):
                print(f"  last lines of its {'current' if r['alive'] else 'last'} run ({r['log_file']}):")
                for line in r["log"]:
                    print(f"    {line}")
    emit(args, rows, human)


def cmd_up(args: argparse.Namespace, cfg: MeshConfig) -> int:
    if args.ports_auto:
        cfg = cfg.model_copy(update={"ports": {k: 0 for k in cfg.ports}})
    progress = not args.json
    try:
        if args.detach:
            launcher.up_detached(cfg, progress=progress)
            _show_mesh(args, launcher.status(cfg))
            return 0

        def on_up(_: object) -> None:
            _show_mesh(args, launcher.status(cfg))
            sys.stdout.flush()
            print("agentmesh: running; crashed processes are restarted; press Ctrl-C (or run "
                  "'agentmesh down') to stop", file=sys.stderr, flush=True)

        launcher.up_foreground(cfg, progress=progress, on_up=on_up)
    except LegacyLayoutError as err:
        print(f"agentmesh: {err}", file=sys.stderr)
        return 2
    except launcher.LaunchError as err:
        raise CliError(str(err)) from err
    return 0


def cmd_status(args: argparse.Namespace, cfg: MeshConfig) -> int:
    rows = launcher.status(cfg)
    if not rows:
        emit(args, [], lambda: print(f"no mesh running under {cfg.home}; start it with: {program(args)} up --detach"))
        return 1
    _show_mesh(args, rows)
    return 0 if launcher.healthy(rows) else 1


def cmd_down(args: argparse.Namespace, cfg: MeshConfig) -> int:
    procs = launcher.down(cfg)
    emit(args, {"stopped": [p.name for p in procs]},
         lambda: print(f"stopped {len(procs)} processes" if procs else "no mesh was running"))
    return 0


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
            subject_requester_id=args.subject_requester or ("-" if args.override or args.review else ""),
            risk_profile=common_pb2.RiskProfile(max_risk=f"RISK_LEVEL_{risk}", can_mutate=args.mutates)),
        operation=("OPERATION_KIND_OVERRIDE" if args.override else
                   "OPERATION_KIND_REVIEW" if args.review else "OPERATION_KIND_INVOKE"),
    )
    resp = exchange(cfg, "policy", policy_grpc.PolicyServiceStub, lambda stub: stub.Authorize(req))
    full_effect = enum_name(common_pb2.PolicyEffect, resp.decision.effect)
    effect = full_effect.removeprefix("POLICY_EFFECT_")
    data = {"effect": full_effect, "reason_codes": list(resp.decision.reason_codes),
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
    return POLICY_CHECK_EXIT.get(full_effect, POLICY_CHECK_OTHER)


POLICY_CHECK_DESCRIPTION = """\
Ask the running policy engine to decide one operation and print the decision,
why (its reason codes and explanation), the policy version and the decision id.
Nothing is executed or changed; the question itself is not audited as a call.

exit status:
  0  ALLOW
  3  DENY
  4  CONFIRMATION_REQUIRED or HUMAN_APPROVAL_REQUIRED (allowed only with them)
  1  no decision: the policy engine refused the question or could not be reached
  2  bad usage or configuration
"""

POLICY_CHECK_OTHER = 1
POLICY_CHECK_EXIT = {"POLICY_EFFECT_ALLOW": 0, "POLICY_EFFECT_DENY": 3, "POLICY_EFFECT_CONFIRMATION_REQUIRED": 4,
                     "POLICY_EFFECT_HUMAN_APPROVAL_REQUIRED": 4}
"""``policy check``'s exit status by decision (anything else: :data:`POLICY_CHECK_OTHER`)."""


def cmd_policy_kill(args: argparse.Namespace, cfg: MeshConfig) -> int:
    from agentmesh.v1 import policy_service_pb2 as policy_pb2
    from agentmesh.v1 import policy_service_pb2_grpc as policy_grpc

    req = policy_pb2.SetKillSwitchRequest(scope=f"KILL_SWITCH_SCOPE_{args.scope.upper()}", target=args.target or "",
                                          enabled=not args.off, reason=args.reason)
    ks = exchange(cfg, "policy", policy_grpc.PolicyServiceStub, lambda stub: stub.SetKillSwitch(req).kill_switch)
    state = "ON (stopped)" if ks.enabled else "off"
    emit(args, {"scope": enum_name(policy_pb2.KillSwitchScope, ks.scope), "target": ks.target, "enabled": ks.enabled,
                "changed_by": ks.changed_by},
         lambda: print(f"kill switch {args.scope.upper()} {ks.target or '(platform)'}: {state}"))
    return 0


def cmd_policy_switches(args: argparse.Namespace, cfg: MeshConfig) -> int:
    from agentmesh.v1 import policy_service_pb2 as policy_pb2
    from agentmesh.v1 import policy_service_pb2_grpc as policy_grpc

    resp = exchange(cfg, "policy", policy_grpc.PolicyServiceStub,
                    lambda stub: stub.ListKillSwitches(policy_pb2.ListKillSwitchesRequest()))
    rows = [{"scope": enum_name(policy_pb2.KillSwitchScope, k.scope),
             "target": k.target, "reason": k.reason, "changed_by": k.changed_by,
             "changed_at": k.changed_at.ToDatetime().isoformat()} for k in resp.kill_switches]
    shown = [{**r, "scope": r["scope"].removeprefix("KILL_SWITCH_SCOPE_")} for r in rows]
    emit(args, rows, lambda: print_table(shown, ["scope", "target", "reason", "changed_by", "changed_at"])
         if rows else print("no kill switch in force"))
    return 0


# --- models ----------------------------------------------------------------

def cmd_models(args: argparse.Namespace, cfg: MeshConfig) -> int:
    from agentmesh.v1 import model_service_pb2 as model_pb2
    from agentmesh.v1 import model_service_pb2_grpc as model_grpc

    resp = exchange(cfg, "model", model_grpc.ModelServiceStub,
                    lambda stub: stub.ListModels(model_pb2.ListModelsRequest()))
    rows = [{"model": m.model_id, "backend_model": m.backend_model, "url": m.url, "context": m.context_tokens,
             "max_output": m.max_output_tokens, "price_in_1k": m.price_input_per_1k,
             "price_out_1k": m.price_output_per_1k, "latency_ms": round(m.latency_ms, 1), "quality": m.quality,
             "availability": m.availability} for m in resp.models]
    emit(args, rows, lambda: print_table(rows, list(rows[0]) if rows else ["model"]))
    return 0


def cmd_analyze(args: argparse.Namespace, cfg: MeshConfig) -> int:
    from agentmesh.identities import PLATFORM_CLI
    from agentmesh.v1 import common_pb2
    from agentmesh.v1 import supervisor_service_pb2 as sup_pb2
    from agentmesh.v1 import supervisor_service_pb2_grpc as sup_grpc

    token = user_assertion(args, cfg, "analyst")
    request = sup_pb2.AnalyzeRequest(user_assertion=token, request_text=args.request,
                                     tenant_id=args.request_tenant or args.tenant, detach=True,
                                     request_release=args.release, confirmation_ttl_seconds=args.confirm_ttl or 0)
    quiet = args.json or args.quiet
    ui = sys.stderr if args.json else sys.stdout
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
            ended = (common_pb2.TASK_STATUS_COMPLETED, common_pb2.TASK_STATUS_FAILED, common_pb2.TASK_STATUS_CANCELLED)
            from_snapshot: set[tuple[str, int]] = set()  # shown from the snapshot, not yet seen as an event

            def progress(kind: int, task_id: str, agent_id: str, status: int, *, snapshot: bool = False) -> None:
                if snapshot:
                    from_snapshot.add((task_id, kind))
                elif (task_id, kind) in from_snapshot:
                    from_snapshot.discard((task_id, kind))  # already shown; a later repeat (a retry) is shown
                    return
                if quiet:
                    return
                what = enum_name(sup_pb2.ExecutionEvent, kind, "EXECUTION_EVENT_").lower().replace("_", " ")
                state = enum_name(common_pb2.TaskStatus, status, "TASK_STATUS_")
                print(f"  {what:<14} {agent_id:<18} {state}", file=sys.stderr)

            for event in watch:
                final = event.execution
                if event.event == sup_pb2.EXECUTION_EVENT_SNAPSHOT:
                    # The watch may join after tasks started or ended (or the execution finished):
                    # what already happened is shown from the snapshot, and not again if it comes as an event.
                    for node in final.graph.nodes:
                        if node.HasField("started_at"):
                            progress(sup_pb2.EXECUTION_EVENT_TASK_STARTED, node.task_id, node.target_agent_id,
                                     common_pb2.TASK_STATUS_RUNNING, snapshot=True)
                        if node.status in ended:
                            progress(sup_pb2.EXECUTION_EVENT_TASK_FINISHED, node.task_id, node.target_agent_id,
                                     node.status, snapshot=True)
                elif event.event in (sup_pb2.EXECUTION_EVENT_TASK_STARTED, sup_pb2.EXECUTION_EVENT_TASK_FINISHED):
                    progress(event.event, event.task_id, event.agent_id, event.task_status)
            if not args.json:
                print_execution(final)
            ok = sup_pb2.ExecutionStatus.Name(final.status) not in ANALYSIS_NOT_FINISHED
            # A request text that asks for the release gets an action too, with or without --release.
            if final.HasField("action"):
                flow = ActionFlow(stub=stub, token=token, answer=True if args.yes else None, wait=not args.no_wait,
                                  timeout_s=args.timeout, ui=ui, progress=not quiet,
                                  confirm_hint=confirm_hint(args, final), reviewer_hint=reviewer_hint(args, final))
                final, ok = flow.run(final)
            elif args.release:
                print("\nno action was proposed for this request", file=ui)
                ok = False
    except grpc.RpcError as err:
        raise rpc_failure(err) from err
    if args.json:
        print(json.dumps(execution_dict(final), indent=2))
    return 0 if ok else 1


def cmd_confirm(args: argparse.Namespace, cfg: MeshConfig) -> int:
    from agentmesh.identities import PLATFORM_CLI
    from agentmesh.v1 import supervisor_service_pb2 as sup_pb2
    from agentmesh.v1 import supervisor_service_pb2_grpc as sup_grpc

    token = user_assertion(args, cfg, "analyst")
    answer: bool | None = True if args.yes else False if args.decline else None
    if answer is None and not sys.stdin.isatty():
        print("agentmesh: stdin is not a terminal: pass --yes to confirm or --decline to decline", file=sys.stderr)
        return 2
    ui = sys.stderr if args.json else sys.stdout
    try:
        with mesh_channel(cfg, "supervisor", PLATFORM_CLI) as channel:
            stub = sup_grpc.SupervisorServiceStub(channel)
            flow = ActionFlow(stub=stub, token=token, answer=answer, wait=False, timeout_s=args.timeout, ui=ui,
                              progress=not args.json, confirm_hint="")
            ex = flow.get(args.execution_id)
            flow.confirm_hint = confirm_hint(args, ex)
            if ex.status != sup_pb2.EXECUTION_STATUS_AWAITING_CONFIRMATION:
                status = enum_name(sup_pb2.ExecutionStatus, ex.status, "EXECUTION_STATUS_")
                where = action_outcome(ex.action) if ex.HasField("action") else "it proposes no action"
                raise CliError(f"nothing to confirm: {ex.execution_id} is {status}; {where}")
            final, ok = flow.confirm(ex)
            if answer is False:  # declining was what was asked
                ok = final.action.state == sup_pb2.ACTION_STATE_DECLINED
    except grpc.RpcError as err:
        raise rpc_failure(err) from err
    if args.json:
        print(json.dumps(execution_dict(final), indent=2))
    return 0 if ok else 1


# --- data ------------------------------------------------------------------

def cmd_data_load(args: argparse.Namespace, cfg: MeshConfig) -> int:
    from pathlib import Path

    from agentmesh.tenant_file import TenantApplyFailed, apply_tenant_file
    from agentmesh.v1 import tenant_service_pb2 as tenant_pb2
    from capability_svc.errors import WorldFormatError
    from capability_svc.internal_runtime import InternalStore
    from capability_svc.world import load_world, world_tenant_file

    path = Path(args.file)
    if not path.is_file():
        raise CliError(f"{path}: no such file")
    cfg.mesh_home.ensure()
    try:
        tenants = world_tenant_file(path)  # the whole file is checked first, definitions included
    except WorldFormatError as err:
        raise CliError(f"{err} (nothing was loaded)") from err
    applied: list[dict[str, Any]] = []
    if tenants.definitions:
        # The tenants' configuration goes through the operator RPC, as `agentmesh tenants apply` does.
        try:
            with mesh_channel(cfg, "policy") as channel:
                response = apply_tenant_file(channel, tenants, timeout_s=max(30.0, cfg.call_timeout_s))
        except TenantApplyFailed as err:
            raise CliError(f"{err}; no data was loaded") from err
        applied = [{"tenant": r.tenant.tenant_id, "revision": r.tenant.revision,
                    "change": enum_name(tenant_pb2.TenantChange, r.change, "TENANT_CHANGE_")}
                   for r in response.results]
    try:
        summary = load_world(path, InternalStore(cfg.mesh_home.data / "internal.db"))
    except WorldFormatError as err:
        raise CliError(f"{err} (nothing was loaded)") from err
    # The sandbox LMS serves every tenant loaded so far: this file's tenants replace theirs, the others stay.
    launcher.merge_lms_world(cfg, path)
    lms_url = launcher.restart_lms(cfg)
    data = {"source": str(path), "tenants": list(summary.tenants), "workers": summary.workers,
            "permits": summary.permits, "risks": summary.risks, "checklists": summary.checklists,
            "lms_workers": summary.lms_workers, "lms_restarted": lms_url, "tenant_definitions": applied}
    definitions = ", ".join(f"{a['tenant']} {a['change']}" for a in applied)
    emit(args, data, lambda: print(
        f"loaded {path}: tenants {', '.join(summary.tenants)}; {summary.permits} permits, {summary.workers} workers, "
        f"{summary.risks} risks, {summary.checklists} checklists, LMS records for {summary.lms_workers} workers"
        + (f"; tenant definitions applied: {definitions}" if applied else "")
        + (f"; sandbox LMS restarted at {lms_url}" if lms_url else "")))
    return 0


# --- parser ----------------------------------------------------------------

ANALYZE_DESCRIPTION = """\
Ask the supervisor for a governed team analysis and print the report.

With --release (or a request that asks for the release) the execution also
proposes the release, and the command drives it to its end:
  - not eligible / denied by policy: printed, nothing changes;
  - awaiting review (a reviewer other than you must approve it, or agents
    disagree): prints the review id and waits, polling every second up to
    --timeout, unless --no-wait;
  - awaiting confirmation: shows the capability, permit, arguments and expiry
    and asks "Release WP-10231 now? [y/N]" on the terminal; y confirms,
    anything else declines (the single-use token is spent). --yes confirms
    without asking. When stdin is not a terminal and --yes is not given,
    nothing is asked or spent: the action stays pending until it expires and
    the command prints how to confirm it with 'agentmesh confirm'.
  - after confirming: "released and verified", or FAILED with the reason
    and whether the previous state was restored.

Hints it prints (how to confirm, how a reviewer opens the review) are
commands that work as printed: this program's path, --home if you gave one,
and the tenant, user and roles the request was made with.

exit status:
  0  the analysis finished (SUCCEEDED, PARTIAL, or waiting for a human) and,
     when an action was proposed, it succeeded or was left pending on purpose
     (--no-wait, or no terminal to ask);
  1  the analysis did not finish: FAILED, CANCELLED, STOPPED by a limit, or
     still RUNNING when --timeout passed; or the action did not happen: not
     eligible, denied, rejected, declined, expired, failed, or the wait timed
     out; or the request was refused, or the mesh does not answer;
  2  bad usage or configuration.
"""

CONFIRM_DESCRIPTION = """\
Confirm (or decline) the action an execution waits for. Reads the execution
as the user who asked for it (only they see the single-use confirmation
token), shows exactly what would run, asks "Release WP-10231 now? [y/N]"
unless --yes or --decline, and sends ConfirmAction bound to that execution,
token, capability and resource.

exit status:
  0  confirmed and the action succeeded (verified), or declined with --decline;
  1  nothing to confirm, a refusal, a decline at the prompt, or the action failed;
  2  stdin is not a terminal and neither --yes nor --decline was given.
"""

def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"not a positive number of seconds: {text!r}")
    return value


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

    certs = sub.add_parser("certs", help="mesh CA and workload certificates",
                           formatter_class=argparse.RawDescriptionHelpFormatter, description=CERTS_DESCRIPTION)
    certs_sub = certs.add_subparsers(dest="certs_command", required=True, metavar="SUBCOMMAND")
    p = certs_sub.add_parser(
        "init", parents=[common, out], formatter_class=argparse.RawDescriptionHelpFormatter,
        help="create the mesh CA, every workload identity and the signing keys",
        description=CERTS_DESCRIPTION + "\ninit creates what is missing and re-issues the certificates that are\n"
                    "missing, expire within the hour or are not from the current CA; it reads\n"
                    "ca/ only when it must issue. A home of the old layout (certs/, keys/) is\n"
                    "moved to this one first (a home with both layouts is refused, exit 2).")
    p.add_argument("--force", action="store_true",
                   help="start a new CA and re-issue every certificate (signing keys are kept)")
    p.set_defaults(handler=cmd_certs_init)
    p = certs_sub.add_parser(
        "issue", parents=[common, out], help="issue (or re-issue) one certificate",
        description="Issue a certificate (fresh key) for one identity into HOME/workloads/KIND-NAME/. "
                    "Refused when the CA is not valid now or the leaf would outlive it.")
    p.add_argument("--spiffe-id", required=True,
                   help="e.g. spiffe://agentmesh.local/client/my-service")
    p.add_argument("--validity-hours", type=float, default=24.0,
                   help="validity, more than 0 and at most 720 (default 24)")
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

    p = sub.add_parser(
        "up", parents=[common, out], help="start every role as its own process and keep it running",
        description="Start every role as its own process, each SERVING before the next, and supervise them: "
                    "a process that crashes (a signal other than SIGTERM/SIGINT, or an exit code other than 0) "
                    "is restarted on its port after a backoff of 0.5 s doubling to 10 s (reset once it has been "
                    "SERVING for 10 s). Without --detach this command supervises until Ctrl-C.")
    p.add_argument("--detach", action="store_true",
                   help="return once all report SERVING; a background supervisor keeps them running "
                        "(log: HOME/logs/launcher.log)")
    p.add_argument("--ports-auto", action="store_true", help="let every process pick a free port")
    p.set_defaults(handler=cmd_up)
    p = sub.add_parser(
        "status", parents=[common, out], help="show the running mesh and its health",
        description="Each process's pid, address, health (its own answer, or RESTARTING / STARTING / STOPPED / "
                    "DEAD), since when it runs, its restarts and last exit; for a process that is not SERVING the "
                    "reason and the last lines of its current (or last) run. Exit code 0 only while every "
                    "process is SERVING and the supervising loop runs.")
    p.set_defaults(handler=cmd_status)
    p = sub.add_parser("down", parents=[common, out], help="stop the supervising loop and every process of the mesh")
    p.set_defaults(handler=cmd_down)

    policy = sub.add_parser("policy", help="ask the policy engine; manage kill switches")
    policy_sub = policy.add_subparsers(dest="policy_command", required=True, metavar="SUBCOMMAND")
    p = policy_sub.add_parser("check", parents=[common, out], formatter_class=argparse.RawDescriptionHelpFormatter,
                              help="ask the running policy engine for a decision and why (exit 0 only for ALLOW)",
                              description=POLICY_CHECK_DESCRIPTION)
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
    p.add_argument("--review", action="store_true", help="deciding a review in the Decision Center")
    p.add_argument("--subject-requester",
                   help="for --review/--override: who asked for the work under review (default: nobody)")
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

    p = sub.add_parser("models", parents=[common, out],
                       help="the models the model service routes to: prices, context, latency, availability")
    p.set_defaults(handler=cmd_models)

    p = sub.add_parser(
        "analyze", parents=[common, out], formatter_class=argparse.RawDescriptionHelpFormatter,
        help="ask the supervisor for a governed team analysis (and, with --release, the release)",
        description=ANALYZE_DESCRIPTION)
    p.add_argument("request", help='e.g. "Analyze permit WP-10231 and tell me if it can be released"')
    add_user_options(p, "analyst", required=True)
    p.add_argument("--request-tenant", help="tenant named in the request, if different (it will be refused)")
    p.add_argument("--release", action="store_true",
                   help="also ask for the release if the analysis recommends it (asking for it in the request "
                        "text does the same)")
    p.add_argument("--yes", action="store_true",
                   help="confirm the proposed action without asking (you are the one confirming)")
    p.add_argument("--no-wait", action="store_true",
                   help="do not wait while the execution awaits a human review; print the review id and return")
    p.add_argument("--confirm-ttl", type=_positive_int, metavar="SECONDS",
                   help="how long the confirmation may stay open (default and maximum: the supervisor's)")
    p.add_argument("--timeout", type=float, default=120.0,
                   help="seconds to wait for the analysis, and again for a review or the action (default 120)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(handler=cmd_analyze)

    p = sub.add_parser(
        "confirm", parents=[common, out], formatter_class=argparse.RawDescriptionHelpFormatter,
        help="confirm (or decline) the action an execution waits for, as the user who asked",
        description=CONFIRM_DESCRIPTION)
    p.add_argument("execution_id", metavar="EXECUTION_ID", help="the execution awaiting confirmation")
    add_user_options(p, "analyst")
    answer = p.add_mutually_exclusive_group()
    answer.add_argument("--yes", action="store_true", help="confirm without asking")
    answer.add_argument("--decline", action="store_true", help="decline: the token is spent, nothing changes")
    p.add_argument("--timeout", type=float, default=120.0,
                   help="seconds to wait for the action to run and be verified (default 120)")
    p.set_defaults(handler=cmd_confirm)

    data = sub.add_parser("data", help="load worlds (tenants, permits, workers, trainings, risks, checklists)")
    data_sub = data.add_subparsers(dest="data_command", required=True, metavar="SUBCOMMAND")
    p = data_sub.add_parser("load", parents=[common, out],
                            help="validate a YAML/JSON world file and load it (all or nothing)",
                            description="Validate FILE completely, apply the tenant definitions it carries "
                                        "(tenants[].definition, through TenantService as the operator: the mesh "
                                        "must be running), then load its records in one transaction. Tenants "
                                        "named in FILE are replaced; every other tenant's data, internal and in "
                                        "the sandbox LMS, stays as it was.")
    p.add_argument("file", help="world file; format in capability_svc/WORLD_FORMAT.md")
    p.set_defaults(handler=cmd_data_load)

    from agentmesh_cli import agents, audit, events, reviews, tenants

    for commands in (reviews, agents, events, audit, tenants):
        commands.register(sub, common, out)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``agentmesh`` command."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        cfg = config.load(home=getattr(args, "home", None), config_file=getattr(args, "config", None))
        handler: Handler = args.handler
        try:
            code = handler(args, cfg)
            sys.stdout.flush()
            return code
        except MeshUnreachable as err:
            print(f"agentmesh: {unreachable_line(cfg, args, err)}", file=sys.stderr)
            return 1
    except BrokenPipeError:
        return _pipe_closed()
    except ConfigError as err:
        print(f"agentmesh: {err}", file=sys.stderr)
        return 2
    except (CliError, PkiError, SigningKeyError) as err:
        print(f"agentmesh: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


PIPE_CLOSED = 128 + 13
"""Exit status when the reader of stdout went away (``| head``): as for a command killed by SIGPIPE."""


def _pipe_closed() -> int:
    # The reader is gone: nothing more can be shown. Point stdout at /dev/null so the
    # interpreter's final flush does not fail again, and end without a traceback.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return PIPE_CLOSED

