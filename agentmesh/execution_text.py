"""How an execution reads to a person, the same wherever it is shown: the command line and the web console."""

from __future__ import annotations

import datetime as dt
from typing import Any

from agentmesh.v1 import supervisor_service_pb2 as sup_pb2


def enum_name(enum: Any, value: int, prefix: str = "") -> str:
    """An enum value's name without ``prefix``, or its number when the enum does not know it (a value
    from a newer contract is shown, not refused)."""
    try:
        return str(enum.Name(value)).removeprefix(prefix)
    except ValueError:
        return str(value)


def when(ts: Any) -> str:
    """A protobuf Timestamp as ISO 8601 UTC, or ``-`` when unset."""
    if not ts.seconds and not ts.nanos:
        return "-"
    return str(ts.ToDatetime(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z"))


def released(action: sup_pb2.ProposedAction) -> str:
    """'released' for the release, else '<capability> done'."""
    return "released" if "release" in action.capability_id.lower() else f"{action.capability_id} done"


def action_outcome(action: sup_pb2.ProposedAction) -> str:
    """Where a proposed action stands, in one plain sentence."""
    reason = f": {action.reason}" if action.reason else ""
    state = action.state
    if state == sup_pb2.ACTION_STATE_SUCCEEDED:
        return f"{released(action)} and verified" if action.verified else f"{released(action)}, NOT verified"
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
        return f"not {released(action)}: not eligible{reason}"
    if state == sup_pb2.ACTION_STATE_DENIED:
        return f"not {released(action)}: DENIED by policy{reason}"
    if state == sup_pb2.ACTION_STATE_DECLINED:
        return f"not {released(action)}: declined by the requester"
    if state == sup_pb2.ACTION_STATE_EXPIRED:
        return f"not {released(action)}: the confirmation was not given in time"
    if state == sup_pb2.ACTION_STATE_REJECTED:
        return f"not {released(action)}: rejected by a reviewer{reason}"
    if state == sup_pb2.ACTION_STATE_AWAITING_APPROVAL:
        review = f" in review {action.approval_review_id}" if action.approval_review_id else ""
        return f"pending: awaits a reviewer's approval{review}"
    if state == sup_pb2.ACTION_STATE_AWAITING_CONFIRMATION:
        return f"pending: awaits the requester's confirmation until {when(action.confirmation_expires_at)}"
    if state == sup_pb2.ACTION_STATE_EXECUTING:
        return "executing"
    return "pending"


def pending_reviews(ex: sup_pb2.Execution) -> list[str]:
    """The review ids an execution waits for: the action's approval, unresolved conflicts."""
    ids = []
    if ex.HasField("action") and ex.action.state == sup_pb2.ACTION_STATE_AWAITING_APPROVAL \
            and ex.action.approval_review_id:
        ids.append(ex.action.approval_review_id)
    ids += [c.review_id for c in ex.conflicts if c.review_id and not c.resolution]
    return list(dict.fromkeys(ids))
