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
import ipaddress
import json
import os
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

import grpc

from agentmesh import assertion, config, errors, launcher, spiffe, transport
from agentmesh.config import ConfigError, MeshConfig
from agentmesh.identities import OPERATOR, LegacyLayoutError, init_identities, migrate_legacy_layout, tls_files
from agentmesh.pki import CertificateAuthority, PkiError
from agentmesh.service import address_file
from agentmesh.signing import SigningKeyError, load_private_key

if TYPE_CHECKING:
    from agentmesh.v1 import supervisor_service_pb2 as sup_pb2

Handler = Callable[[argparse.Namespace, MeshConfig], int]


class CliError(Exception):
    """A command failed; printed as one line, exit code 1."""


class MeshUnreachable(CliError):
    """A mesh process could not be reached at all (no answer, not an error it sent)."""

    def __init__(self, hint: str = "") -> None:
        super().__init__("the mesh does not answer")
        self.hint = hint
        """What else the command can do without the mesh, added to the line."""


def program(args: argparse.Namespace | None = None) -> str:
    """This command as the user can run it again: ``agentmesh`` when that is what PATH finds, else the
    path it was run by (``.venv/bin/agentmesh``), with ``--home`` / ``--config`` when they were given."""
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else "agentmesh"
    if os.path.basename(argv0) == "agentmesh":
        found = shutil.which("agentmesh")
        same = found is not None and os.path.realpath(found) == os.path.realpath(argv0)
        words = ["agentmesh" if same or os.sep not in argv0 else argv0]
    else:  # python -m agentmesh.cli
        words = [sys.executable, "-m", "agentmesh.cli"]
    for option in ("home", "config"):
        value = getattr(args, option, None) if args is not None else None
        if value:
            words += [f"--{option}", str(value)]
    return " ".join(shlex.quote(w) for w in words)


def unreachable_line(cfg: MeshConfig, args: argparse.Namespace, err: MeshUnreachable) -> str:
    """One line for a mesh that does not answer: is one running here at all, and what to do."""
    hint = f"; {err.hint}" if err.hint else ""
    rows = launcher.status(cfg)
    if not any(r.get("alive") for r in rows):
        return f"no mesh is running under {cfg.home}; start it with: {program(args)} up --detach{hint}"
    return (f"the mesh under {cfg.home} does not answer; '{program(args)} status' shows which process is not "
            f"SERVING{hint}")


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


def target_of(cfg: MeshConfig, name: str) -> str:
    """The gRPC target of a mesh process: its address; for the supervisor, every replica the running mesh
    records, in order, as one target, so the channel takes the first that answers (gRPC's pick_first)
    and a command still goes through while a replica is down. Replicas not all at IP addresses: the first."""
    first = address_of(cfg, name)
    if name != "supervisor":
        return first
    names = [w.name for w in launcher.supervisor_replicas(cfg)]
    recorded = {p.name: p.address for p in launcher.read_state(cfg) if p.address}
    addresses = [first, *(recorded[n] for n in names if n in recorded and recorded[n] != first)]
    if len(addresses) == 1:
        return first
    families = {_ip_family(a) for a in addresses}
    if len(families) != 1 or None in families:
        return first
    (family,) = families
    return f"{family}:{','.join(addresses)}"


def _ip_family(address: str) -> str | None:
    """``ipv4`` or ``ipv6`` for an ``IP:port`` address (``[IPv6]:port``), None for a host name."""
    host = address.rpartition(":")[0].strip("[]")
    try:
        return f"ipv{ipaddress.ip_address(host).version}"
    except ValueError:
        return None


def mesh_channel(cfg: MeshConfig, name: str, as_identity: spiffe.SpiffeId = OPERATOR) -> grpc.Channel:
    """An mTLS channel to a mesh process (the supervisor: any of its replicas, see :func:`target_of`), using
    a client identity from the home."""
    ident = spiffe.service(name) if name in config.ROLES else spiffe.agent(name)
    try:
        return transport.secure_channel(target_of(cfg, name), tls_files(cfg, as_identity), ident,
                                        default_timeout_s=cfg.call_timeout_s)
    except PkiError as err:
        raise CliError(f"{err}: no mesh was set up under {cfg.home}; start one with: "
                       f"{program()} --home {shlex.quote(str(cfg.home))} up --detach") from err


def rpc_failure(err: grpc.RpcError) -> CliError:
    """A failed call as one line: status, reason and the field it names; :class:`MeshUnreachable` when
    nothing answered (UNAVAILABLE from the channel itself, with no ErrorInfo from a server)."""
    if isinstance(err, grpc.Call) and err.code() == grpc.StatusCode.UNAVAILABLE and errors.error_info(err) is None:
        return MeshUnreachable()
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
            subject_requester_id=args.subject_requester or ("-" if args.override or args.review else ""),
            risk_profile=common_pb2.RiskProfile(max_risk=f"RISK_LEVEL_{risk}", can_mutate=args.mutates)),
        operation=("OPERATION_KIND_OVERRIDE" if args.override else
                   "OPERATION_KIND_REVIEW" if args.review else "OPERATION_KIND_INVOKE"),
    )
    try:
        with mesh_channel(cfg, "policy") as channel:
            resp = policy_grpc.PolicyServiceStub(channel).Authorize(req)
    except grpc.RpcError as err:
        raise rpc_failure(err) from err
    full_effect = common_pb2.PolicyEffect.Name(resp.decision.effect)
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
    try:
        with mesh_channel(cfg, "policy") as channel:
            ks = policy_grpc.PolicyServiceStub(channel).SetKillSwitch(req).kill_switch
    except grpc.RpcError as err:
        raise rpc_failure(err) from err
    state = "ON (stopped)" if ks.enabled else "off"
    emit(args, {"scope": policy_pb2.KillSwitchScope.Name(ks.scope), "target": ks.target, "enabled": ks.enabled,
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
    rows = [{"scope": policy_pb2.KillSwitchScope.Name(k.scope),
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

    try:
        with mesh_channel(cfg, "model") as channel:
            resp = model_grpc.ModelServiceStub(channel).ListModels(model_pb2.ListModelsRequest())
    except grpc.RpcError as err:
        raise rpc_failure(err) from err
    rows = [{"model": m.model_id, "backend_model": m.backend_model, "url": m.url, "context": m.context_tokens,
             "max_output": m.max_output_tokens, "price_in_1k": m.price_input_per_1k,
             "price_out_1k": m.price_output_per_1k, "latency_ms": round(m.latency_ms, 1), "quality": m.quality,
             "availability": m.availability} for m in resp.models]
    emit(args, rows, lambda: print_table(rows, list(rows[0]) if rows else ["model"]))
    return 0


# --- analyze ---------------------------------------------------------------

POLL_INTERVAL_S = 1.0
"""How often a waiting command asks the supervisor for the execution again."""


def _name(enum: Any, value: int, prefix: str) -> str:
    return str(enum.Name(value)).removeprefix(prefix)


def when(ts: Any) -> str:
    """A protobuf Timestamp as ISO 8601 UTC, or ``-`` when unset."""
    if not ts.seconds and not ts.nanos:
        return "-"
    return str(ts.ToDatetime(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z"))


def _expires_in(ts: Any) -> str:
    if not ts.seconds:
        return ""
    left = int(ts.ToDatetime(dt.UTC).timestamp() - dt.datetime.now(dt.UTC).timestamp())
    return " (expired)" if left <= 0 else f" (in {left // 60}m {left % 60:02d}s)"


def _released(action: sup_pb2.ProposedAction) -> str:
    """'released' for the release, else '<capability> done'."""
    return "released" if "release" in action.capability_id.lower() else f"{action.capability_id} done"


def action_outcome(action: sup_pb2.ProposedAction) -> str:
    """Where a proposed action stands, in one plain sentence."""
    from agentmesh.v1 import supervisor_service_pb2 as sup_pb2

    reason = f": {action.reason}" if action.reason else ""
    state = action.state
    if state == sup_pb2.ACTION_STATE_SUCCEEDED:
        return f"{_released(action)} and verified" if action.verified else f"{_released(action)}, NOT verified"
    if state == sup_pb2.ACTION_STATE_FAILED:
        restored = {
            sup_pb2.ACTION_EFFECT_NONE: "nothing was written: the permit is as it was",
            sup_pb2.ACTION_EFFECT_COMPENSATED: "compensated: previous state restored",
            sup_pb2.ACTION_EFFECT_NOT_RESTORED: "NOT compensated: the previous state could not be restored",
            sup_pb2.ACTION_EFFECT_UNKNOWN: "whether anything was written is not known: read it before any retry",
        }.get(action.effect) or ("compensated: previous state restored" if action.compensated
                                 else "not verified, and whether the previous state is back is not known")
        return f"FAILED{reason or ': no reason given'} ({restored})"
    if state == sup_pb2.ACTION_STATE_NOT_ELIGIBLE:
        return f"not {_released(action)}: not eligible{reason}"
    if state == sup_pb2.ACTION_STATE_DENIED:
        return f"not {_released(action)}: DENIED by policy{reason}"
    if state == sup_pb2.ACTION_STATE_DECLINED:
        return f"not {_released(action)}: declined by the requester"
    if state == sup_pb2.ACTION_STATE_EXPIRED:
        return f"not {_released(action)}: the confirmation was not given in time"
    if state == sup_pb2.ACTION_STATE_REJECTED:
        return f"not {_released(action)}: rejected by a reviewer{reason}"
    if state == sup_pb2.ACTION_STATE_AWAITING_APPROVAL:
        review = f" in review {action.approval_review_id}" if action.approval_review_id else ""
        return f"pending: awaits a reviewer's approval{review}"
    if state == sup_pb2.ACTION_STATE_AWAITING_CONFIRMATION:
        return f"pending: awaits the requester's confirmation until {when(action.confirmation_expires_at)}"
    if state == sup_pb2.ACTION_STATE_EXECUTING:
        return "executing"
    return "pending"


def print_action(action: sup_pb2.ProposedAction, out: TextIO | None = None) -> None:
    """The action block of a report: what, on what, its state and why."""
    from agentmesh.v1 import common_pb2
    from agentmesh.v1 import supervisor_service_pb2 as sup_pb2

    out = out or sys.stdout
    state = _name(sup_pb2.ActionState, action.state, "ACTION_STATE_")
    print(f"\naction    {action.capability_id} on {action.resource_id or '-'}  ({state})", file=out)
    print(f"          {action_outcome(action)}", file=out)
    if action.reason and action.state not in (sup_pb2.ACTION_STATE_FAILED, sup_pb2.ACTION_STATE_NOT_ELIGIBLE,
                                              sup_pb2.ACTION_STATE_DENIED, sup_pb2.ACTION_STATE_REJECTED):
        print(f"  reason        {action.reason}", file=out)
    decision = action.policy_decision
    if decision.effect:
        codes = f" [{', '.join(decision.reason_codes)}]" if decision.reason_codes else ""
        print(f"  policy        {_name(common_pb2.PolicyEffect, decision.effect, 'POLICY_EFFECT_')}{codes}"
              f" (policy {decision.policy_version or '-'}, decision {decision.decision_id or '-'})", file=out)
    if action.approval_review_id and action.state != sup_pb2.ACTION_STATE_AWAITING_APPROVAL:
        by = f", approved by {action.approved_by}" if action.approved_by else ""
        print(f"  approval      review {action.approval_review_id}{by}", file=out)
    if action.state in (sup_pb2.ACTION_STATE_SUCCEEDED, sup_pb2.ACTION_STATE_FAILED):
        effect = _name(sup_pb2.ActionEffect, action.effect, "ACTION_EFFECT_") if action.effect else "-"
        print(f"  verified      {'yes' if action.verified else 'no'}"
              f"   compensated {'yes' if action.compensated else 'no'}   effect {effect}", file=out)


def print_execution(ex: Any) -> None:
    """The human report of an execution: decision, results with evidence, conflicts, scores, action."""
    from agentmesh.v1 import common_pb2
    from agentmesh.v1 import supervisor_service_pb2 as sup_pb2

    print(f"execution {ex.execution_id}  ({_name(sup_pb2.ExecutionStatus, ex.status, 'EXECUTION_STATUS_')})")
    print(f"decision  {_name(common_pb2.AnalysisDecision, ex.decision, 'ANALYSIS_DECISION_')}")
    if ex.actor_type == common_pb2.ACTOR_TYPE_SYSTEM:
        print(f"actor     SYSTEM {ex.system_actor or '-'}")
    elif ex.HasField("action"):
        print(f"actor     user {ex.tenant_id}/{ex.user_id}")
    if ex.reason:
        print(f"reason    {ex.reason}")
    found = ex.intent_classification
    if found.source == "MODEL":
        print(f"intent    {found.intent} — understood by a model, not by the rules: {found.model_id} "
              f"({found.model_version}), confidence {found.confidence:.2f}, shown {', '.join(found.candidates)}; "
              f"call {found.model_call_id}")
    print()
    print(ex.summary)
    for result in ex.results:
        status = _name(common_pb2.ResultStatus, result.status, "RESULT_STATUS_")
        verdict = result.result.fields["verdict"].string_value if "verdict" in result.result.fields else "-"
        print(f"\n[{result.agent_id}] {status}, verdict {verdict}"
              + (f" — {result.error_reason}" if result.error_reason else ""))
        if result.versions.knowledge_version:
            print(f"  knowledge      {result.versions.knowledge_version}")
        usage = result.model_usage
        if usage.calls or usage.exhausted_reason:
            print(f"  model use: {usage.calls} call(s), {usage.prompt_tokens}+{usage.completion_tokens} tokens, "
                  f"cost {usage.cost:.6f} ({', '.join(usage.models) or '-'}; {result.versions.model_version or '-'})"
                  + (f" — budget exhausted: {usage.exhausted_reason}" if usage.exhausted_reason else ""))
        for st in result.statements:
            kind = _name(common_pb2.StatementKind, st.kind, "STATEMENT_KIND_")
            if any(0 <= i < len(result.evidence) and result.evidence[i].authority ==
                   common_pb2.AUTHORITY_LEVEL_MODEL_INFERENCE for i in st.evidence_indexes):
                kind += " (model)"
            refs = ", ".join(f"#{i}" for i in st.evidence_indexes)
            print(f"  {kind:<14} {st.code:<26} {st.subject:<24} {st.text}" + (f"  [{refs}]" if refs else ""))
        reading = result.result.fields.get("model_reading")
        if reading is not None and reading.struct_value.fields["status"].string_value != "NOT_ASKED":
            fields = {k: (v.string_value or f"{v.number_value:g}") for k, v in reading.struct_value.fields.items()}
            print("  model reading: " + ", ".join(f"{k} {v}" for k, v in sorted(fields.items())))
        for i, ev in enumerate(result.evidence):
            auth = _name(common_pb2.AuthorityLevel, ev.authority, "AUTHORITY_LEVEL_")
            print(f"  evidence #{i}: {ev.source} {ev.reference} ({auth}, {ev.capability})")
    for c in ex.conflicts:
        from agentmesh.cli_reviews import print_evidence

        print(f"\nconflict on {c.subject}: {c.agent_a} vs {c.agent_b}"
              + (f" — resolved: {c.resolution}" if c.resolution else f" — review {c.review_id}"))
        print_evidence(f"{c.agent_a} (PASS)", c.evidence_a)
        print_evidence(f"{c.agent_b} (FAIL)", c.evidence_b)
        for rule in c.applicable_rules:
            print(f"  rule: {rule}")
    if ex.missing:
        print("\nmissing:")
        for m in ex.missing:
            print(f"  - {m.text}")
    if ex.recommended_resources:
        print("\nrecommended resources:")
        for r in ex.recommended_resources:
            print(f"  - {r}")
    if ex.selection_scores:
        print("\nselection scores:")
        for sc in ex.selection_scores:
            print(f"  {sc.agent_id:<18} final {sc.final_score:.3f}  domain {sc.domain_score:.2f}  capability "
                  f"{sc.capability_score:.2f}  knowledge {sc.knowledge_score:.2f}  availability "
                  f"{sc.availability_score:.2f}  cost {sc.cost_score:.2f}  history {sc.history_score:.2f}")
            if sc.agent_version:
                print(f"  {'':<18} {'chosen, ' if sc.chosen else ''}version {sc.agent_version} ({sc.version_reason}); "
                      f"availability: {sc.availability_reason or '-'}; history: {sc.history_reason or '-'}")
    # Retries and fallbacks (PRD §45, §47): shown when a task took more than one plain call.
    eventful = {a.task_id for a in ex.attempts if a.kind in (sup_pb2.ATTEMPT_KIND_RETRY, sup_pb2.ATTEMPT_KIND_FALLBACK)
                or a.outcome not in (sup_pb2.ATTEMPT_OUTCOME_ANSWERED, sup_pb2.ATTEMPT_OUTCOME_UNSPECIFIED)}
    if eventful:
        print("\nattempts:")
        for a in ex.attempts:
            if a.task_id in eventful:
                kind = _name(sup_pb2.AttemptKind, a.kind, "ATTEMPT_KIND_")
                outcome = _name(sup_pb2.AttemptOutcome, a.outcome, "ATTEMPT_OUTCOME_")
                wait = f" after {a.backoff_ms} ms" if a.backoff_ms else ""
                print(f"  {a.task_id} #{a.attempt} {kind}{wait}: {a.agent_id}@{a.agent_version} at {a.endpoint} "
                      f"-> {outcome}" + (f" ({a.reason})" if a.reason and outcome != "ANSWERED" else ""))
    for f in ex.fallbacks:
        ran = "ran" if f.allowed else "did not run"
        print(f"\nfallback  {f.task_id}: {f.primary_agent_id}@{f.primary_version} was unavailable "
              f"({f.primary_failure}); {f.fallback_agent_id}@{f.fallback_version or '-'} {ran} "
              f"[{', '.join(f.reason_codes)}]" + (f" (decision {f.decision_id})" if f.decision_id else ""))
    if ex.HasField("action"):
        print_action(ex.action)
    print(f"\ntrace {ex.trace.trace_id or '-'}  correlation {ex.trace.correlation_id}")


def execution_dict(ex: Any) -> dict[str, Any]:
    """An execution (or any message) as the JSON the CLI prints."""
    from google.protobuf import json_format

    return dict(json_format.MessageToDict(ex, preserving_proto_field_name=True))


def add_user_options(p: argparse.ArgumentParser, default_role: str, *, required: bool = False) -> None:
    """--tenant/--user/--role/--assertion: who the command acts for."""
    need = "" if required else "; not needed with --assertion"
    p.add_argument("--tenant", required=required, help=f"the user's tenant (goes into the signed assertion{need})")
    p.add_argument("--user", required=required, help="the user id" + (f" ({need[2:]})" if need else ""))
    p.add_argument("--role", action="append", help=f"a role of the user (repeatable; default {default_role})")
    p.add_argument("--assertion", help="use this signed user assertion instead of minting one with the dev IdP key")


def user_assertion(args: argparse.Namespace, cfg: MeshConfig, default_role: str) -> str:
    """The command's signed user assertion: --assertion, else one minted with the dev IdP key."""
    if getattr(args, "assertion", None):
        return str(args.assertion)
    if not (getattr(args, "tenant", None) and getattr(args, "user", None)):
        raise CliError("--tenant and --user are required (or --assertion)")
    try:
        key = load_private_key(cfg.mesh_home.idp_key)
    except SigningKeyError as err:
        raise CliError(f"{err}: no mesh was set up under {cfg.home}; start one with: {program(args)} up --detach") \
            from err
    return assertion.issue(key, tenant_id=args.tenant, user_id=args.user, roles=args.role or [default_role])


def pending_reviews(ex: sup_pb2.Execution) -> list[str]:
    """The review ids an execution waits for: the action's approval, unresolved conflicts."""
    from agentmesh.v1 import supervisor_service_pb2 as sup_pb2

    ids = []
    if ex.HasField("action") and ex.action.state == sup_pb2.ACTION_STATE_AWAITING_APPROVAL \
            and ex.action.approval_review_id:
        ids.append(ex.action.approval_review_id)
    ids += [c.review_id for c in ex.conflicts if c.review_id and not c.resolution]
    return list(dict.fromkeys(ids))


@dataclass
class ActionFlow:
    """Drives an execution's proposed action to its end: wait for reviews, confirm, report.

    ``answer`` is True for --yes, False for --decline, None to ask on the
    terminal. Messages go to ``ui`` (stderr under --json, so stdout stays one
    JSON document); progress goes to stderr.
    """

    stub: Any
    token: str
    answer: bool | None
    wait: bool
    timeout_s: float
    ui: TextIO
    progress: bool
    confirm_hint: str
    reviewer_hint: str = ""
    """How a reviewer opens the review (``{review}`` stands for its id)."""

    def get(self, execution_id: str) -> sup_pb2.Execution:
        from agentmesh.v1 import supervisor_service_pb2 as sup_pb2

        req = sup_pb2.GetExecutionRequest(user_assertion=self.token, execution_id=execution_id)
        return self.stub.GetExecution(req).execution  # type: ignore[no-any-return]

    def run(self, ex: sup_pb2.Execution) -> tuple[sup_pb2.Execution, bool]:
        """The execution at the end of the flow, and whether it ended as asked (exit 0)."""
        from agentmesh.v1 import supervisor_service_pb2 as sup_pb2

        ex = self.wait_for_reviews(ex)
        if ex.status in (sup_pb2.EXECUTION_STATUS_AWAITING_REVIEW, sup_pb2.EXECUTION_STATUS_RUNNING):
            return ex, not self.wait  # left waiting on purpose (--no-wait), or timed out
        if ex.status == sup_pb2.EXECUTION_STATUS_AWAITING_CONFIRMATION:
            return self.confirm(ex)
        outcome = action_outcome(ex.action)
        if ex.action.state == sup_pb2.ACTION_STATE_UNSPECIFIED:  # the execution ended before the action was weighed
            status = _name(sup_pb2.ExecutionStatus, ex.status, "EXECUTION_STATUS_")
            outcome = f"not {_released(ex.action)}: the execution ended {status}" + (
                f": {ex.reason}" if ex.reason else "")
        print(f"\n{ex.action.resource_id or ex.execution_id}: {outcome}", file=self.ui)
        return ex, ex.action.state == sup_pb2.ACTION_STATE_SUCCEEDED

    def wait_for_reviews(self, ex: sup_pb2.Execution) -> sup_pb2.Execution:
        """Polls while the execution waits for a review (or resumes after one), up to the timeout."""
        from agentmesh.v1 import supervisor_service_pb2 as sup_pb2

        waiting = (sup_pb2.EXECUTION_STATUS_AWAITING_REVIEW, sup_pb2.EXECUTION_STATUS_RUNNING)
        if ex.status not in waiting:
            return ex
        deadline = time.monotonic() + self.timeout_s
        announced: list[str] = []
        shown = ""
        tty = sys.stderr.isatty()
        while ex.status in waiting:
            reviews = pending_reviews(ex)
            if reviews and reviews != announced:
                announced = reviews
                approval = ex.action.state == sup_pb2.ACTION_STATE_AWAITING_APPROVAL
                what, who = (("the action's approval", "a reviewer other than you") if approval
                             else ("a human review", "a reviewer"))
                print(f"\n{ex.execution_id} waits for {what}: review {', '.join(reviews)}", file=self.ui)
                print(f"  {who} decides it: {self.reviewer_hint.format(review=reviews[0])}", file=self.ui)
            if not self.wait:
                print(f"not waiting (--no-wait); once it is decided: {self.confirm_hint}", file=self.ui)
                return ex
            status = _name(sup_pb2.ExecutionStatus, ex.status, "EXECUTION_STATUS_")
            left = deadline - time.monotonic()
            if left <= 0:
                if self.progress and tty:
                    print(file=sys.stderr)
                print(f"timed out after {self.timeout_s:.0f}s, still {status}; the execution goes on. "
                      f"Once it is decided: {self.confirm_hint}", file=self.ui)
                return ex
            if self.progress:
                line = f"  waiting for review {', '.join(reviews) or '-'} ({status}, {left:.0f}s left)"
                if tty:  # one line, rewritten in place
                    print(f"\r{line}\033[K", end="", file=sys.stderr, flush=True)
                elif line.split(" (")[0] != shown:
                    print(line, file=sys.stderr)
                    shown = line.split(" (")[0]
            time.sleep(min(POLL_INTERVAL_S, max(left, 0.0)))
            ex = self.get(ex.execution_id)
        if self.progress and tty:
            print(file=sys.stderr)
        print(f"{ex.execution_id}: now {_name(sup_pb2.ExecutionStatus, ex.status, 'EXECUTION_STATUS_')}",
              file=self.ui)
        return ex

    def confirm(self, ex: sup_pb2.Execution) -> tuple[sup_pb2.Execution, bool]:
        """Shows what would happen, asks (unless --yes/--decline) and sends ConfirmAction."""
        from agentmesh.v1 import supervisor_service_pb2 as sup_pb2

        if not ex.action.confirmation_token:
            ex = self.get(ex.execution_id)  # the stream may leave the token out; GetExecution shows it to us
        action = ex.action
        if not action.confirmation_token:
            raise CliError(f"{ex.execution_id} awaits confirmation but no token was returned: only the user "
                           "who asked for the action may confirm it")
        show_confirmation(action, self.ui)
        answer = self.answer
        if answer is None:
            answer = ask(f"{confirm_question(action)} [y/N]", self.ui)
        if answer is None:
            print(f"not asked: stdin is not a terminal. The action stays pending until "
                  f"{when(action.confirmation_expires_at)}; to confirm: {self.confirm_hint} --yes", file=self.ui)
            return ex, True
        req = sup_pb2.ConfirmActionRequest(
            user_assertion=self.token, execution_id=ex.execution_id, confirmation_token=action.confirmation_token,
            capability_id=action.capability_id, resource_id=action.resource_id, decline=not answer)
        final: sup_pb2.Execution = self.stub.ConfirmAction(req, timeout=self.timeout_s).execution
        print(f"{final.action.resource_id or final.execution_id}: {action_outcome(final.action)}", file=self.ui)
        return final, answer and final.action.state == sup_pb2.ACTION_STATE_SUCCEEDED


def confirm_question(action: sup_pb2.ProposedAction) -> str:
    """``Release WP-10231 now?`` (or the capability, for another action)."""
    if "release" in action.capability_id.lower():
        return f"Release {action.resource_id} now?"
    return f"Run {action.capability_id} on {action.resource_id} now?"


def show_confirmation(action: sup_pb2.ProposedAction, out: TextIO) -> None:
    """Exactly what confirming would do."""
    from google.protobuf import json_format

    from agentmesh.v1 import common_pb2

    label = "permit" if action.capability_id.startswith("workPermit.") else "resource"
    arguments = json.dumps(json_format.MessageToDict(action.arguments), sort_keys=True)
    print("\nconfirming runs:", file=out)
    print(f"  capability  {action.capability_id}", file=out)
    print(f"  {label:<10}  {action.resource_id}", file=out)
    print(f"  arguments   {arguments}", file=out)
    if action.policy_decision.effect:
        effect = _name(common_pb2.PolicyEffect, action.policy_decision.effect, "POLICY_EFFECT_")
        print(f"  policy      {effect} (policy {action.policy_decision.policy_version or '-'})", file=out)
    if action.approved_by:
        print(f"  approved by {action.approved_by} (review {action.approval_review_id})", file=out)
    print(f"  expires     {when(action.confirmation_expires_at)}{_expires_in(action.confirmation_expires_at)}",
          file=out)


def ask(question: str, out: TextIO) -> bool | None:
    """y/N on the terminal: True only for y/yes; None when stdin is not a terminal."""
    if not sys.stdin.isatty():
        return None
    print(question, end=" ", file=out, flush=True)
    line = sys.stdin.readline()
    if not line:
        print(file=out)  # EOF (Ctrl-D) declines, on a fresh line
    return line.strip().lower() in ("y", "yes")


def confirm_command(args: argparse.Namespace | None, ex: sup_pb2.Execution, *, assertion_given: bool = False) -> str:
    """The ``agentmesh confirm`` line that works for the requester of ``ex``: this program (and home), their
    tenant, user id and the roles they asked with (the confirmation is decided on the roles it comes with)."""
    if assertion_given:
        who = "--assertion TOKEN"
    else:
        who = f"--tenant {shlex.quote(ex.tenant_id)} --user {shlex.quote(ex.user_id)}"
        roles = list(ex.user_roles) or list(getattr(args, "role", None) or [])
        who += "".join(f" --role {shlex.quote(r)}" for r in roles)
    return f"{program(args)} confirm {ex.execution_id} {who}"


def _confirm_hint(args: argparse.Namespace, ex: sup_pb2.Execution) -> str:
    return confirm_command(args, ex, assertion_given=bool(getattr(args, "assertion", None)))


def _reviewer_hint(args: argparse.Namespace, ex: sup_pb2.Execution) -> str:
    return f"{program(args)} reviews show {{review}} --tenant {shlex.quote(ex.tenant_id)} --user REVIEWER"


ANALYSIS_NOT_FINISHED = frozenset({"EXECUTION_STATUS_RUNNING", "EXECUTION_STATUS_FAILED", "EXECUTION_STATUS_CANCELLED",
                                   "EXECUTION_STATUS_STOPPED"})
"""An analysis that did not finish (exit 1): still RUNNING when the wait timed out, FAILED, CANCELLED,
STOPPED by a limit."""


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
            for event in watch:
                final = event.execution
                if not quiet and event.event in (sup_pb2.EXECUTION_EVENT_TASK_STARTED,
                                                 sup_pb2.EXECUTION_EVENT_TASK_FINISHED):
                    what = _name(sup_pb2.ExecutionEvent, event.event, "EXECUTION_EVENT_").lower().replace("_", " ")
                    state = _name(common_pb2.TaskStatus, event.task_status, "TASK_STATUS_")
                    print(f"  {what:<14} {event.agent_id:<18} {state}", file=sys.stderr)
            if not args.json:
                print_execution(final)
            ok = sup_pb2.ExecutionStatus.Name(final.status) not in ANALYSIS_NOT_FINISHED
            # A request text that asks for the release gets an action too, with or without --release.
            if final.HasField("action"):
                flow = ActionFlow(stub=stub, token=token, answer=True if args.yes else None, wait=not args.no_wait,
                                  timeout_s=args.timeout, ui=ui, progress=not quiet,
                                  confirm_hint=_confirm_hint(args, final), reviewer_hint=_reviewer_hint(args, final))
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
            flow.confirm_hint = _confirm_hint(args, ex)
            if ex.status != sup_pb2.EXECUTION_STATUS_AWAITING_CONFIRMATION:
                status = _name(sup_pb2.ExecutionStatus, ex.status, "EXECUTION_STATUS_")
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

    from agentmesh.cli_tenants import TenantApplyFailed, apply_tenant_file
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
                    "change": str(tenant_change_name(r.change))} for r in response.results]
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


def tenant_change_name(value: int) -> str:
    """``TENANT_CHANGE_CREATED`` → ``CREATED``."""
    from agentmesh.v1 import tenant_service_pb2 as tenant_pb2

    return str(tenant_pb2.TenantChange.Name(value)).removeprefix("TENANT_CHANGE_")


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

    from agentmesh import cli_agents, cli_audit, cli_reviews, cli_tenants
    from agentmesh.cli_events import register as register_events

    cli_reviews.register(sub, common, out)
    cli_agents.register(sub, common, out)
    register_events(sub, common, out)
    cli_audit.register(sub, common, out)
    cli_tenants.register(sub, common, out)
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


if __name__ == "__main__":
    sys.exit(main())
