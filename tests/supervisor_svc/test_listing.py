"""ListExecutions on its own: which executions of the tenant a user sees is the policy engine's answer."""

from __future__ import annotations

from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agentmesh import assertion, errors
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import policy_service_pb2 as policy_pb2
from agentmesh.v1 import supervisor_service_pb2 as pb
from supervisor_svc import listing

from .test_orchestrator import _analyze, _user, idp, world  # noqa: F401 - fixtures

__all__ = ["idp", "world"]


def _ids(response: pb.ListExecutionsResponse) -> list[str]:
    return [e.execution_id for e in response.executions]


def test_a_user_lists_their_own_a_reader_the_whole_tenant_another_tenant_nothing(world: Any,
                                                                               idp: Ed25519PrivateKey) -> None:
    orch, _, audit, token, _ = world
    alices = [_analyze(orch, token).execution_id for _ in range(2)]
    carol_token = assertion.issue(idp, tenant_id="acme", user_id="carol", roles=["analyst"])
    carols = _analyze(orch, carol_token).execution_id
    policy = orch._guard._authorize
    asked = len(policy.requests)
    denials = len([r for r in audit.records if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED])

    alice = _user(orch, idp, "alice", "analyst")
    assert sorted(_ids(orch.list_visible(alice, pb.ListExecutionsRequest()))) == sorted(alices)
    # One decision per requester met, on Execution::"-" of the user's tenant, the requester as subject.
    questions = policy.requests[asked:]
    assert sorted(q.context.subject_requester_id for q in questions) == ["alice", "carol"]
    assert {(q.operation, q.resource.type, q.resource.id, q.resource.tenant_id) for q in questions} == {
        (policy_pb2.OPERATION_KIND_READ_EXECUTION, "Execution", "-", "acme")}
    # Leaving carol's out is not a refusal of anything alice asked for: nothing is recorded.
    assert len([r for r in audit.records if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED]) == denials

    operator = _user(orch, idp, "olga", "operator")
    assert sorted(_ids(orch.list_visible(operator, pb.ListExecutionsRequest()))) == sorted([*alices, carols])
    viewer = _user(orch, idp, "victor", "viewer")
    assert _ids(orch.list_visible(viewer, pb.ListExecutionsRequest())) == []
    eve = _user(orch, idp, "eve", "admin", tenant="globex")
    asked = len(policy.requests)
    assert _ids(orch.list_visible(eve, pb.ListExecutionsRequest())) == []
    assert len(policy.requests) == asked  # another tenant's executions are never looked at


def test_pages_go_on_where_the_last_one_ended_most_recent_first(world: Any, idp: Ed25519PrivateKey) -> None:
    orch, _, _, token, _ = world
    made = [_analyze(orch, token).execution_id for _ in range(5)]
    alice = _user(orch, idp, "alice", "analyst")
    pages = [orch.list_visible(alice, pb.ListExecutionsRequest(page_size=2))]
    while pages[-1].next_page_token and len(pages) < 10:
        pages.append(orch.list_visible(alice, pb.ListExecutionsRequest(page_size=2,
                                                                       page_token=pages[-1].next_page_token)))
    assert [len(p.executions) for p in pages] == [2, 2, 1]
    assert [i for p in pages for i in _ids(p)] == list(reversed(made))


def test_the_requesters_confirmation_token_is_not_listed_to_others(world: Any, idp: Ed25519PrivateKey) -> None:
    orch, _, _, token, _ = world
    ex = _analyze(orch, token)
    stored = orch._store.get(ex.execution_id)
    stored.action.state = pb.ACTION_STATE_AWAITING_CONFIRMATION
    stored.action.confirmation_token = "tok-secret"
    orch._store.save(stored)
    mine = orch.list_visible(_user(orch, idp, "alice", "analyst"), pb.ListExecutionsRequest()).executions
    assert [e.action.confirmation_token for e in mine] == ["tok-secret"]
    theirs = orch.list_visible(_user(orch, idp, "bob", "reviewer"), pb.ListExecutionsRequest()).executions
    assert [e.action.confirmation_token for e in theirs] == [""]


@pytest.mark.parametrize(("request_", "reason", "field"), [
    (pb.ListExecutionsRequest(page_size=-1), "PAGE_SIZE_INVALID", "page_size"),
    (pb.ListExecutionsRequest(page_size=101), "PAGE_SIZE_INVALID", "page_size"),
    (pb.ListExecutionsRequest(page_token="bm90LW91cnM="), "PAGE_TOKEN_INVALID", "page_token"),
    (pb.ListExecutionsRequest(page_token="%%%"), "PAGE_TOKEN_INVALID", "page_token"),
])
def test_a_bad_page_request_is_invalid_argument_naming_the_field(world: Any, idp: Ed25519PrivateKey,
                                                                 request_: pb.ListExecutionsRequest, reason: str,
                                                                 field: str) -> None:
    orch = world[0]
    with pytest.raises(errors.InvalidArgument) as err:
        orch.list_visible(_user(orch, idp, "alice", "analyst"), request_)
    assert (err.value.reason, err.value.field) == (reason, field)


def test_no_policy_decision_means_no_list(world: Any, idp: Ed25519PrivateKey) -> None:
    orch, _, audit, token, _ = world
    _analyze(orch, token)

    def down(request: policy_pb2.AuthorizeRequest) -> policy_pb2.AuthorizeResponse:
        raise errors.Unavailable("policy down", reason="UNAVAILABLE")

    orch._guard._authorize = down
    with pytest.raises(errors.Unavailable) as err:
        orch.list_visible(_user(orch, idp, "alice", "analyst"), pb.ListExecutionsRequest())
    assert err.value.reason == "POLICY_UNAVAILABLE"
    assert audit.records[-1].reason_codes[0] == "POLICY_UNAVAILABLE"


def test_page_tokens_round_trip() -> None:
    token = listing.encode_token("2026-01-01T00:00:00.000001+00:00", "exe-0123456789abcdef")
    assert listing.decode_token(token) == ("2026-01-01T00:00:00.000001+00:00", "exe-0123456789abcdef")
    assert len(token) <= 128
