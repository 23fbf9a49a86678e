"""The lifecycle state machine (PRD §57): only its edges."""

from __future__ import annotations

import itertools

import pytest

from agentmesh.vocabulary import LifecycleStatus as S
from supervisor_svc.lifecycle import EDGES, TransitionNotAllowed, allowed_next, check_transition

MAIN_PATH = [S.DRAFT, S.VALIDATING, S.EVALUATING, S.APPROVED, S.CANARY, S.ACTIVE, S.DEPRECATED, S.RETIRED]
BACK = {(S.VALIDATING, S.DRAFT), (S.EVALUATING, S.DRAFT), (S.CANARY, S.APPROVED), (S.DEPRECATED, S.ACTIVE),
        (S.DRAFT, S.RETIRED), (S.APPROVED, S.RETIRED), (S.DISABLED, S.RETIRED)}
KILL = {(S.ACTIVE, S.DISABLED), (S.CANARY, S.DISABLED), (S.DEPRECATED, S.DISABLED)}


def test_the_main_path_is_allowed_step_by_step() -> None:
    for old, new in itertools.pairwise(MAIN_PATH):
        check_transition(old, new, field="to_status", what="a@1.0.0")


def test_exactly_the_documented_edges_exist() -> None:
    edges = {(old, new) for old, nexts in EDGES.items() for new in nexts}
    assert edges == set(itertools.pairwise(MAIN_PATH)) | BACK | KILL


@pytest.mark.parametrize(("old", "new"), [
    (old, new) for old in S for new in S
    if old != new and new not in allowed_next(old) and old is not S.DISABLED
])
def test_every_other_edge_is_refused(old: S, new: S) -> None:
    with pytest.raises(TransitionNotAllowed) as err:
        check_transition(old, new, field="to_status", what="a@1.0.0")
    assert (err.value.reason, err.value.field) == ("TRANSITION_NOT_ALLOWED", "to_status")


def test_draft_to_active_names_the_way() -> None:
    with pytest.raises(TransitionNotAllowed) as err:
        check_transition(S.DRAFT, S.ACTIVE, field="status", what="agent 'x'")
    assert err.value.message == ("agent 'x' cannot go from DRAFT to ACTIVE (PRD §57); from DRAFT it may go to: "
                                 "RETIRED, VALIDATING")


def test_disabled_goes_back_only_where_it_came_from() -> None:
    check_transition(S.DISABLED, S.CANARY, field="status", what="a", disabled_from=S.CANARY)
    with pytest.raises(TransitionNotAllowed):
        check_transition(S.DISABLED, S.ACTIVE, field="status", what="a", disabled_from=S.CANARY)
    with pytest.raises(TransitionNotAllowed):
        check_transition(S.DISABLED, S.ACTIVE, field="status", what="a")


def test_retired_is_terminal() -> None:
    with pytest.raises(TransitionNotAllowed, match="can no longer change"):
        check_transition(S.RETIRED, S.DRAFT, field="status", what="a")
