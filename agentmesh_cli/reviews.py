"""``agentmesh reviews``: the Decision Center from the terminal.

``agentmesh reviews list``
    The reviews of your tenant (undecided ones unless ``--status``), as a table.
``agentmesh reviews show REVIEW_ID``
    The review (kind, status, summary, the conflict with both sides' evidence,
    the action, its history) and the report of the execution under review.
``agentmesh reviews approve|reject|request-info|override|assign REVIEW_ID``
    Submits a decision; prints the review's new status and where the execution
    and its action stand now.

Every subcommand acts as a user: ``--tenant/--user/--role`` mint an assertion
with the dev identity provider key (role ``reviewer`` by default, ``admin``
for ``override``), or ``--assertion`` passes one. The Decision Center is
served by the supervisor. A refusal prints its status, reason and field and
exits 1.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from agentmesh.config import MeshConfig
    from agentmesh.v1 import decision_center_service_pb2 as dc_pb2

T = TypeVar("T")

STATUSES = {
    "open": "REVIEW_STATUS_OPEN",
    "information-requested": "REVIEW_STATUS_INFORMATION_REQUESTED",
    "approved": "REVIEW_STATUS_APPROVED",
    "rejected": "REVIEW_STATUS_REJECTED",
    "overridden": "REVIEW_STATUS_OVERRIDDEN",
}
"""``--status`` choices and the ReviewStatus each selects."""

OVERRIDE_DECISIONS = {
    "recommended": "ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE",
    "not-recommended": "ANALYSIS_DECISION_NOT_RECOMMENDED",
}
"""``override --decision`` choices and the AnalysisDecision each sets."""

_SUMMARY_WIDTH = 60


def register(sub: Any, common: argparse.ArgumentParser, out: argparse.ArgumentParser) -> None:
    """Adds ``agentmesh reviews ...`` to the command tree."""
    from agentmesh_cli.common import add_user_options

    reviews = sub.add_parser(
        "reviews", help="the Decision Center: list, show and decide human reviews",
        description="The Decision Center (served by the supervisor): list and show the reviews of your tenant, "
                    "and approve, reject, request information, override or assign them. Every subcommand acts "
                    "as a user: --tenant/--user/--role mint an assertion with the dev identity provider key "
                    "(role reviewer by default, admin for override), or --assertion passes one. A refusal "
                    "prints its status, reason and field and exits 1.")
    rsub = reviews.add_subparsers(dest="reviews_command", required=True, metavar="SUBCOMMAND")

    def add(name: str, help_: str, description: str, handler: Callable[..., int], role: str = "reviewer",
            review_id: bool = True) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = rsub.add_parser(name, parents=[common, out], help=help_,
                                                     description=f"{description} Exits 1 when refused.")
        if review_id:
            p.add_argument("review_id", metavar="REVIEW_ID", help="the review, e.g. from 'agentmesh reviews list'")
        add_user_options(p, role)
        p.set_defaults(handler=handler)
        return p

    p = add("list", "list the reviews of your tenant",
            "List the reviews of your tenant, oldest first: the undecided ones (open or information requested) "
            "unless --status says otherwise.", cmd_reviews_list, review_id=False)
    p.add_argument("--status", choices=list(STATUSES), help="only reviews in this status")
    p.add_argument("--execution", metavar="ID", help="only the reviews of this execution")

    add("show", "show a review, its evidence and the execution under review",
        "Show a review (kind, status, summary, the conflict with both sides' evidence, the action, the "
        "history) and the report of the execution under review.", cmd_reviews_show)

    p = add("approve", "approve a review (the requester cannot approve their own action)",
            "Approve a review: an action approval lets the requester confirm the action; a conflict review "
            "lets the execution go on.", cmd_reviews_decide)
    p.add_argument("--reason", default="", help="why (recorded)")
    p.set_defaults(review_decision="REVIEW_DECISION_APPROVE")

    p = add("reject", "reject a review (the action will not run)",
            "Reject a review: the action under review will not run.", cmd_reviews_decide)
    p.add_argument("--reason", required=True, help="why (recorded; required)")
    p.set_defaults(review_decision="REVIEW_DECISION_REJECT")

    p = add("request-info", "ask for more information before deciding",
            "Ask for more information: the review becomes INFORMATION_REQUESTED.", cmd_reviews_decide)
    p.add_argument("--reason", required=True, help="what is asked (required)")
    p.set_defaults(review_decision="REVIEW_DECISION_REQUEST_INFORMATION")

    p = add("override", "set the analysis decision as an administrator, with a reason",
            "Override the analysis decision (administrators only, under the administrative policy, "
            "with a reason).", cmd_reviews_decide, role="admin")
    p.add_argument("--decision", dest="override_decision", required=True, choices=list(OVERRIDE_DECISIONS),
                   help="the analysis decision to set")
    p.add_argument("--reason", required=True, help="why (recorded; required)")
    p.set_defaults(review_decision="REVIEW_DECISION_OVERRIDE")

    p = add("assign", "assign a review to a user of your tenant",
            "Assign a review to another reviewer of the same tenant.", cmd_reviews_decide)
    p.add_argument("--to", required=True, metavar="USER", help="the user id to assign it to")
    p.add_argument("--reason", default="", help="why (recorded)")
    p.set_defaults(review_decision="REVIEW_DECISION_ASSIGN")


def _decision_center(cfg: MeshConfig, call: Callable[[Any], T]) -> T:
    """Runs ``call`` with a DecisionCenterService stub on the supervisor's address."""
    from agentmesh.identities import PLATFORM_CLI
    from agentmesh.v1 import decision_center_service_pb2_grpc as dc_grpc
    from agentmesh_cli.common import exchange

    return exchange(cfg, "supervisor", dc_grpc.DecisionCenterServiceStub, call, PLATFORM_CLI)


def _kind(review: dc_pb2.ReviewItem) -> str:
    from agentmesh.execution_text import enum_name
    from agentmesh.v1 import decision_center_service_pb2 as dc_pb2

    return enum_name(dc_pb2.ReviewKind, review.kind, "REVIEW_KIND_")


def _status(review: dc_pb2.ReviewItem) -> str:
    from agentmesh.execution_text import enum_name
    from agentmesh.v1 import decision_center_service_pb2 as dc_pb2

    return enum_name(dc_pb2.ReviewStatus, review.status, "REVIEW_STATUS_")


def _short(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= _SUMMARY_WIDTH else line[: _SUMMARY_WIDTH - 1] + "…"


# --- list / show ---------------------------------------------------------------


def cmd_reviews_list(args: argparse.Namespace, cfg: MeshConfig) -> int:
    from agentmesh.v1 import decision_center_service_pb2 as dc_pb2
    from agentmesh_cli.common import emit, execution_dict, print_table, user_assertion

    status = STATUSES[args.status] if args.status else "REVIEW_STATUS_UNSPECIFIED"
    req = dc_pb2.ListReviewsRequest(user_assertion=user_assertion(args, cfg, "reviewer"), status=status,
                                    execution_id=args.execution or "")
    reviews = list(_decision_center(cfg, lambda stub: stub.ListReviews(req)).reviews)
    rows = [{"review": r.review_id, "kind": _kind(r), "status": _status(r), "execution": r.execution_id,
             "requester": r.requester, "assignee": r.assignee or "-", "summary": _short(r.summary)}
            for r in reviews]

    def human() -> None:
        if not rows:
            print(f"no {args.status or 'undecided'} reviews" + (f" for {args.execution}" if args.execution else ""))
            return
        print_table(rows, ["review", "kind", "status", "execution", "requester", "assignee", "summary"])

    emit(args, [execution_dict(r) for r in reviews], human)
    return 0


def print_review(review: dc_pb2.ReviewItem) -> None:
    """The human form of one review."""
    from agentmesh.execution_text import enum_name, when
    from agentmesh.v1 import common_pb2
    from agentmesh.v1 import decision_center_service_pb2 as dc_pb2
    from agentmesh_cli.common import print_action, print_bullets, print_conflict

    print(f"review    {review.review_id}  {_kind(review)}  ({_status(review)})")
    print(f"execution {review.execution_id}")
    print(f"requester {review.requester}")
    print(f"assignee  {review.assignee or '-'}")
    if review.analysis_decision:
        print(f"analysis  {enum_name(common_pb2.AnalysisDecision, review.analysis_decision, 'ANALYSIS_DECISION_')}")
    print(f"opened    {when(review.created_at)}   updated {when(review.updated_at)}")
    print()
    print(review.summary)
    if review.HasField("conflict"):
        c = review.conflict
        print_conflict(c, (c.agent_a or "first side", c.agent_b or "second side"))
    if review.HasField("action"):
        print_action(review.action)
    print_bullets("recommended resources", review.recommended_resources)
    if review.history:
        print("\nhistory:")
        for ev in review.history:
            what = enum_name(dc_pb2.ReviewDecision, ev.decision, "REVIEW_DECISION_")
            extra = f" -> {ev.assignee}" if ev.assignee else ""
            if ev.override_decision:
                extra += " -> " + enum_name(common_pb2.AnalysisDecision, ev.override_decision, "ANALYSIS_DECISION_")
            print(f"  {when(ev.at)}  {what}{extra} by {ev.reviewer}" + (f": {ev.reason}" if ev.reason else "")
                  + (f"  (policy decision {ev.policy_decision_id})" if ev.policy_decision_id else ""))


def cmd_reviews_show(args: argparse.Namespace, cfg: MeshConfig) -> int:
    from agentmesh.v1 import decision_center_service_pb2 as dc_pb2
    from agentmesh_cli.common import emit, execution_dict, print_execution, user_assertion

    req = dc_pb2.GetReviewRequest(user_assertion=user_assertion(args, cfg, "reviewer"), review_id=args.review_id)
    resp = _decision_center(cfg, lambda stub: stub.GetReview(req))

    def human() -> None:
        print_review(resp.review)
        if resp.HasField("execution"):
            print("\n" + "-" * 72)
            print_execution(resp.execution)

    emit(args, {"review": execution_dict(resp.review), "execution": execution_dict(resp.execution)}, human)
    return 0


# --- decisions -------------------------------------------------------------------


def cmd_reviews_decide(args: argparse.Namespace, cfg: MeshConfig) -> int:
    """approve, reject, request-info, override and assign: one SubmitReviewDecision each."""
    from agentmesh.execution_text import action_outcome, enum_name
    from agentmesh.v1 import decision_center_service_pb2 as dc_pb2
    from agentmesh.v1 import supervisor_service_pb2 as sup_pb2
    from agentmesh_cli.common import confirm_command, emit, execution_dict, user_assertion

    role = "admin" if args.review_decision == "REVIEW_DECISION_OVERRIDE" else "reviewer"
    override = getattr(args, "override_decision", None)
    req = dc_pb2.SubmitReviewDecisionRequest(
        user_assertion=user_assertion(args, cfg, role), review_id=args.review_id,
        decision=args.review_decision, reason=args.reason,
        assignee=getattr(args, "to", None) or "",
        override_decision=OVERRIDE_DECISIONS[override] if override else "ANALYSIS_DECISION_UNSPECIFIED")
    resp = _decision_center(cfg, lambda stub: stub.SubmitReviewDecision(req))
    review, ex = resp.review, resp.execution

    def human() -> None:
        last = review.history[-1] if review.history else None
        by = f" by {last.reviewer}" if last and last.reviewer else ""
        to = f", assigned to {review.assignee}" if review.assignee else ""
        print(f"review {review.review_id}: {_status(review)}{to}  ({_kind(review)}{by})")
        if resp.HasField("execution"):
            status = enum_name(sup_pb2.ExecutionStatus, ex.status, "EXECUTION_STATUS_")
            line = f"execution {ex.execution_id}: {status}"
            if ex.HasField("action"):
                state = enum_name(sup_pb2.ActionState, ex.action.state, "ACTION_STATE_")
                line += f"; action {ex.action.capability_id} {ex.action.resource_id} {state}: " \
                        f"{action_outcome(ex.action)}"
            print(line)
            if ex.status == sup_pb2.EXECUTION_STATUS_AWAITING_CONFIRMATION:
                print(f"  the requester ({ex.user_id}) confirms it with: {confirm_command(args, ex)}")

    emit(args, {"review": execution_dict(review), "execution": execution_dict(ex)}, human)
    return 0
