"""What the ``agentmesh`` commands share: their errors, output (tables, ``--json``, executions and actions
as text), the channels to the mesh's services, the user options and the confirmation flow."""

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
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

import grpc

from agentmesh import assertion, config, errors, launcher, spiffe, transport
from agentmesh.config import MeshConfig
from agentmesh.execution_text import action_outcome, enum_name, pending_reviews, released, when
from agentmesh.identities import OPERATOR, tls_files
from agentmesh.pki import PkiError
from agentmesh.service import address_file
from agentmesh.signing import SigningKeyError, load_private_key

if TYPE_CHECKING:
    from agentmesh.v1 import supervisor_service_pb2 as sup_pb2

S = TypeVar("S")
T = TypeVar("T")


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
    else:  # python -m agentmesh_cli
        words = [sys.executable, "-m", "agentmesh_cli"]
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
    """A failed call as one line: status, reason and the field it names, then each problem the server
    listed (``problem_1``, ``problem_2``, … in its ErrorInfo) on a line of its own; :class:`MeshUnreachable`
    when nothing answered (UNAVAILABLE from the channel itself, with no ErrorInfo from a server)."""
    if isinstance(err, grpc.Call) and err.code() == grpc.StatusCode.UNAVAILABLE and errors.error_info(err) is None:
        return MeshUnreachable()
    mesh_err = errors.from_rpc_error(err)
    field = f" (field {mesh_err.field})" if mesh_err.field else ""
    metadata = dict(getattr(mesh_err, "metadata", {}) or {})
    problems = [metadata[k] for k in sorted((k for k in metadata if k.startswith("problem_")
                                             and k.removeprefix("problem_").isdigit()),
                                            key=lambda k: int(k.removeprefix("problem_")))]
    return CliError(f"{mesh_err.code.name}: {mesh_err.reason}{field}: {mesh_err.message}"
                    + "".join(f"\n  - {p}" for p in problems))


def exchange(cfg: MeshConfig, name: str, stub: Callable[[grpc.Channel], S], call: Callable[[S], T],
             as_identity: spiffe.SpiffeId = OPERATOR) -> T:
    """One exchange with mesh process ``name``: ``call`` with its ``stub`` over an mTLS channel, as
    ``as_identity``; a failed call becomes the command's error (:func:`rpc_failure`)."""
    try:
        with mesh_channel(cfg, name, as_identity) as channel:
            return call(stub(channel))
    except grpc.RpcError as err:
        raise rpc_failure(err) from err


# --- analyze ---------------------------------------------------------------

POLL_INTERVAL_S = 1.0
"""How often a waiting command asks the supervisor for the execution again."""


def _expires_in(ts: Any) -> str:
    if not ts.seconds:
        return ""
    left = int(ts.ToDatetime(dt.UTC).timestamp() - dt.datetime.now(dt.UTC).timestamp())
    return " (expired)" if left <= 0 else f" (in {left // 60}m {left % 60:02d}s)"


def print_bullets(title: str, items: Sequence[str], out: TextIO | None = None) -> None:
    """A titled list, one ``  - item`` a line after a blank line; nothing when there are no items."""
    if not items:
        return
    out = out or sys.stdout
    print(f"\n{title}:", file=out)
    for item in items:
        print(f"  - {item}", file=out)


def print_action(action: sup_pb2.ProposedAction, out: TextIO | None = None) -> None:
    """The action block of a report: what, on what, its state and why."""
    from agentmesh.v1 import common_pb2
    from agentmesh.v1 import supervisor_service_pb2 as sup_pb2

    out = out or sys.stdout
    state = enum_name(sup_pb2.ActionState, action.state, "ACTION_STATE_")
    print(f"\naction    {action.capability_id} on {action.resource_id or '-'}  ({state})", file=out)
    print(f"          {action_outcome(action)}", file=out)
    if action.reason and action.state not in (sup_pb2.ACTION_STATE_FAILED, sup_pb2.ACTION_STATE_NOT_ELIGIBLE,
                                              sup_pb2.ACTION_STATE_DENIED, sup_pb2.ACTION_STATE_REJECTED):
        print(f"  reason        {action.reason}", file=out)
    decision = action.policy_decision
    if decision.effect:
        codes = f" [{', '.join(decision.reason_codes)}]" if decision.reason_codes else ""
        print(f"  policy        {enum_name(common_pb2.PolicyEffect, decision.effect, 'POLICY_EFFECT_')}{codes}"
              f" (policy {decision.policy_version or '-'}, decision {decision.decision_id or '-'})", file=out)
    if action.approval_review_id and action.state != sup_pb2.ACTION_STATE_AWAITING_APPROVAL:
        by = f", approved by {action.approved_by}" if action.approved_by else ""
        print(f"  approval      review {action.approval_review_id}{by}", file=out)
    if action.state in (sup_pb2.ACTION_STATE_SUCCEEDED, sup_pb2.ACTION_STATE_FAILED):
        effect = enum_name(sup_pb2.ActionEffect, action.effect, "ACTION_EFFECT_") if action.effect else "-"
        print(f"  verified      {'yes' if action.verified else 'no'}"
              f"   compensated {'yes' if action.compensated else 'no'}   effect {effect}", file=out)


def print_execution(ex: Any) -> None:
    """The human report of an execution: decision, results with evidence, conflicts, scores, action."""
    from agentmesh.v1 import common_pb2
    from agentmesh.v1 import supervisor_service_pb2 as sup_pb2

    print(f"execution {ex.execution_id}  ({enum_name(sup_pb2.ExecutionStatus, ex.status, 'EXECUTION_STATUS_')})")
    print(f"decision  {enum_name(common_pb2.AnalysisDecision, ex.decision, 'ANALYSIS_DECISION_')}")
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
        status = enum_name(common_pb2.ResultStatus, result.status, "RESULT_STATUS_")
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
            kind = enum_name(common_pb2.StatementKind, st.kind, "STATEMENT_KIND_")
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
            auth = enum_name(common_pb2.AuthorityLevel, ev.authority, "AUTHORITY_LEVEL_")
            print(f"  evidence #{i}: {ev.source} {ev.reference} ({auth}, {ev.capability})")
    for c in ex.conflicts:
        print_conflict(c, (f"{c.agent_a} (PASS)", f"{c.agent_b} (FAIL)"), unresolved=f" — review {c.review_id}")
    print_bullets("missing", [m.text for m in ex.missing])
    print_bullets("recommended resources", ex.recommended_resources)
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
                kind = enum_name(sup_pb2.AttemptKind, a.kind, "ATTEMPT_KIND_")
                outcome = enum_name(sup_pb2.AttemptOutcome, a.outcome, "ATTEMPT_OUTCOME_")
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
            status = enum_name(sup_pb2.ExecutionStatus, ex.status, "EXECUTION_STATUS_")
            outcome = f"not {released(ex.action)}: the execution ended {status}" + (
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
            status = enum_name(sup_pb2.ExecutionStatus, ex.status, "EXECUTION_STATUS_")
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
        print(f"{ex.execution_id}: now {enum_name(sup_pb2.ExecutionStatus, ex.status, 'EXECUTION_STATUS_')}",
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
        effect = enum_name(common_pb2.PolicyEffect, action.policy_decision.effect, "POLICY_EFFECT_")
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


def confirm_hint(args: argparse.Namespace, ex: sup_pb2.Execution) -> str:
    return confirm_command(args, ex, assertion_given=bool(getattr(args, "assertion", None)))


def reviewer_hint(args: argparse.Namespace, ex: sup_pb2.Execution) -> str:
    return f"{program(args)} reviews show {{review}} --tenant {shlex.quote(ex.tenant_id)} --user REVIEWER"


ANALYSIS_NOT_FINISHED = frozenset({"EXECUTION_STATUS_RUNNING", "EXECUTION_STATUS_FAILED", "EXECUTION_STATUS_CANCELLED",
                                   "EXECUTION_STATUS_STOPPED"})
"""An analysis that did not finish (exit 1): still RUNNING when the wait timed out, FAILED, CANCELLED,
STOPPED by a limit."""


def print_evidence(side: str, evidence: Any) -> None:
    """One side's evidence of a conflict: source, reference, authority, capability and the data read."""
    from google.protobuf import json_format

    from agentmesh.v1 import common_pb2

    print(f"  {side} evidence:" if evidence else f"  {side} evidence: none")
    for i, ev in enumerate(evidence):
        auth = enum_name(common_pb2.AuthorityLevel, ev.authority, "AUTHORITY_LEVEL_")
        data = json.dumps(json_format.MessageToDict(ev.data), sort_keys=True) if ev.data.fields else ""
        print(f"    #{i} {ev.source} {ev.reference} ({auth}, {ev.capability})" + (f" {data}" if data else ""))


def print_conflict(c: Any, sides: tuple[str, str], *, unresolved: str = "") -> None:
    """A conflict of two agents: the subject, how it was resolved (else ``unresolved``), each side's evidence
    under its label in ``sides`` and the rules that apply."""
    print(f"\nconflict on {c.subject}: {c.agent_a} vs {c.agent_b}"
          + (f" — resolved: {c.resolution}" if c.resolution else unresolved))
    print_evidence(sides[0], c.evidence_a)
    print_evidence(sides[1], c.evidence_b)
    for rule in c.applicable_rules:
        print(f"  rule: {rule}")
