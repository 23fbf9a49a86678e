"""The console's pages on their own, over an in-memory stand-in for the mesh's answers.

What comes from data is escaped everywhere it is shown; a POST needs the session's
CSRF token (and this console's Origin); the operator pages need the operator role;
the console's own refusals are recorded; the mesh's refusals are shown with their reason.
(The real mesh and a real browser: test_console_e2e.py.)
"""

from __future__ import annotations

import random
from email.message import Message
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from google.protobuf import struct_pb2

from agentmesh import assertion, errors
from agentmesh.http_app import Request, Response
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import common_pb2
from agentmesh.v1 import decision_center_service_pb2 as dc_pb2
from agentmesh.v1 import supervisor_service_pb2 as pb
from console_svc import views
from console_svc.app import ConsoleApp, ConsoleConfig, Recorder
from console_svc.signin import SESSION_COOKIE, SessionStore

HOSTILE = '<script>window.pwned=1</script><img src=x onerror="alert(1)">" onclick="x'
"""Text a permit note, a user or an external system could put in data."""


def _struct(**values: Any) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    s.update(values)
    return s


def hostile_execution() -> pb.Execution:
    ex = pb.Execution(
        execution_id="exe-0123456789abcdef", status=pb.EXECUTION_STATUS_AWAITING_REVIEW,
        decision=common_pb2.ANALYSIS_DECISION_REQUIRES_REVIEW, request_text=f"Analyze permit WP-10233 {HOSTILE}",
        intent=pb.EXECUTION_INTENT_ANALYZE_PERMIT, tenant_id="acme", user_id="alice", summary=HOSTILE, reason=HOSTILE,
        missing=[pb.MissingItem(agent_id="training-agent", text=f"training-agent: {HOSTILE}")],
        actor_type=common_pb2.ACTOR_TYPE_USER)
    ex.graph.nodes.add(task_id="t1", target_agent_id="work-permit-agent", objective=HOSTILE,
                       status=common_pb2.TASK_STATUS_COMPLETED)
    ex.graph.nodes.add(task_id="t2", target_agent_id="training-agent", objective="check",
                       status=common_pb2.TASK_STATUS_RUNNING)
    ex.graph.edges.add(from_task_id="t1", to_task_id="t2", condition="permit_found")
    r = ex.results.add(task_id="t1", agent_id="work-permit-agent", status=common_pb2.RESULT_STATUS_SUCCESS,
                       error_reason=HOSTILE)
    r.statements.add(kind=common_pb2.STATEMENT_KIND_FACT, code="PERMIT_NOTE", subject="permit:WP-10233",
                     text=f"the permit note says {HOSTILE}", evidence_indexes=[0])
    r.evidence.add(source="permit-registry", reference=HOSTILE, authority=common_pb2.AUTHORITY_LEVEL_OFFICIAL_RECORD,
                   data=_struct(note=HOSTILE), capability="workPermit.get@1.0.0")
    c = ex.conflicts.add(subject="worker:W-1005/NR-35", agent_a="training-agent", agent_b="compliance-agent",
                         applicable_rules=[HOSTILE], review_id="rev-1")
    c.evidence_a.add(source="lms", reference="T-1", data=_struct(title=HOSTILE))
    c.evidence_b.add(source="checklist", reference="CL-9", data=_struct(item=HOSTILE))
    ex.selection_scores.add(agent_id="training-agent", final_score=0.9)
    ex.action.CopyFrom(pb.ProposedAction(capability_id="workPermit.release", resource_id="WP-10233",
                                         state=pb.ACTION_STATE_AWAITING_APPROVAL, reason=HOSTILE,
                                         arguments=_struct(reason=HOSTILE)))
    return ex


class FakeMesh:
    """The mesh's answers for one test; records what it was asked."""

    def __init__(self) -> None:
        self.execution_answer = hostile_execution()
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.refuse: errors.MeshError | None = None

    def _asked(self, name: str, *args: Any) -> None:
        self.calls.append((name, args))
        if self.refuse is not None:
            raise self.refuse

    def list_executions(self, assertion_: str, page_token: str = "") -> pb.ListExecutionsResponse:
        self._asked("list_executions", assertion_)
        return pb.ListExecutionsResponse(executions=[self.execution_answer])

    def execution(self, assertion_: str, execution_id: str) -> pb.Execution:
        self._asked("execution", assertion_, execution_id)
        return self.execution_answer

    def review(self, assertion_: str, review_id: str) -> dc_pb2.GetReviewResponse:
        self._asked("review", assertion_, review_id)
        ex = self.execution_answer
        item = dc_pb2.ReviewItem(review_id=review_id, execution_id=ex.execution_id, tenant_id="acme",
                                 kind=dc_pb2.REVIEW_KIND_CONFLICT, status=dc_pb2.REVIEW_STATUS_OPEN,
                                 requester="alice", summary=HOSTILE, conflict=ex.conflicts[0])
        item.history.add(decision=dc_pb2.REVIEW_DECISION_ASSIGN, reviewer="acme/bob", reason=HOSTILE, assignee="carol")
        return dc_pb2.GetReviewResponse(review=item, execution=ex)

    def reviews(self, assertion_: str, status: int = 0) -> list[dc_pb2.ReviewItem]:
        self._asked("reviews", assertion_, status)
        return [self.review(assertion_, "rev-1").review]

    def decide(self, assertion_: str, review_id: str, decision: int, **fields: Any) -> None:
        self._asked("decide", assertion_, review_id, decision, fields)

    def confirm(self, *args: Any, **kw: Any) -> None:
        self._asked("confirm", *args, kw)

    def audit_records(self, execution_id: str) -> list[audit_pb2.AuditRecord]:
        self._asked("audit_records", execution_id)
        return [audit_pb2.AuditRecord(index=3, execution_id=execution_id, tenant_id="acme", user_id="alice",
                                      event_type=audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED, reason_codes=[HOSTILE])]

    def watch(self, assertion_: str, execution_id: str) -> Any:
        self._asked("watch", assertion_, execution_id)
        yield pb.WatchExecutionResponse(event=pb.EXECUTION_EVENT_SNAPSHOT, execution=self.execution_answer)
        yield pb.WatchExecutionResponse(event=pb.EXECUTION_EVENT_TASK_FINISHED, task_id="t2", agent_id="training-agent",
                                        task_status=common_pb2.TASK_STATUS_COMPLETED,
                                        execution=self.execution_answer)

    def kill_switches(self) -> list[Any]:
        self._asked("kill_switches")
        return []

    def analyze(self, assertion_: str, tenant_id: str, text: str, **kw: Any) -> pb.Execution:
        self._asked("analyze", assertion_, tenant_id, text, kw)
        return self.execution_answer

    def cancel(self, assertion_: str, execution_id: str, reason: str) -> None:
        self._asked("cancel", assertion_, execution_id, reason)

    def set_kill_switch(self, *args: Any) -> None:
        self._asked("set_kill_switch", *args)

    def checkpoint(self) -> Any:
        self._asked("checkpoint")
        raise errors.Unavailable("audit is not in this stand-in", reason="UNAVAILABLE")


@pytest.fixture()
def console(tmp_path: Path) -> Any:
    key = Ed25519PrivateKey.generate()
    sessions = SessionStore(lambda t: assertion.verify(t, key.public_key()))
    mesh = FakeMesh()
    recorded: list[dict[str, Any]] = []
    app = ConsoleApp(ConsoleConfig(url="http://127.0.0.1:7490", idp_url=lambda: "http://127.0.0.1:7491",
                                   audit_anchor=tmp_path / "anchor.pem", verify_state=tmp_path / "state.json",
                                   health=lambda: []),
                     mesh, sessions, Recorder(lambda event_type, **fields: recorded.append(fields)))  # type: ignore[arg-type]

    def sign_in(user: str, *roles: str) -> tuple[str, Any]:
        return sessions.open(assertion.issue(key, tenant_id="acme", user_id=user, roles=list(roles)))

    return app, mesh, recorded, sign_in


def _call(app: ConsoleApp, method: str, path: str, session_id: str = "", form: dict[str, str] | None = None,
          headers: dict[str, str] | None = None, query: dict[str, str] | None = None) -> Response:
    msg = Message()
    for k, v in (headers or {}).items():
        msg[k] = v
    return app(Request(method, path, query or {}, msg, {SESSION_COOKIE: session_id} if session_id else {}, form or {}))


def _assert_escaped(body: bytes) -> None:
    text = body.decode()
    assert text.count("<script") == 1, "only the console's own script tag"
    assert '<script src="/static/console.js" defer></script>' in text
    assert "<img" not in text and 'onerror="' not in text and 'onclick="x' not in text
    assert "&lt;script&gt;window.pwned=1&lt;/script&gt;" in text


@pytest.mark.parametrize("path", ["/executions", "/executions/exe-0123456789abcdef", "/reviews", "/reviews/rev-1",
                                  "/operator/trail/exe-0123456789abcdef"])
def test_data_is_escaped_on_every_page(console: Any, path: str) -> None:
    app, _, _, sign_in = console
    session_id, _ = sign_in("olga", "operator", "reviewer")
    page = _call(app, "GET", path, session_id)
    assert page.status == 200, page.body[:500]
    _assert_escaped(page.body)


def test_the_execution_page_shows_the_report(console: Any) -> None:
    app, _, _, sign_in = console
    session_id, _ = sign_in("alice", "analyst")
    text = _call(app, "GET", "/executions/exe-0123456789abcdef", session_id).body.decode()
    for part in ('id="status">AWAITING_REVIEW', 'id="decision">REQUIRES_REVIEW', 'data-task="t1"', 'data-task="t2"',
                 "COMPLETED", "RUNNING", "after t1", "PERMIT_NOTE", "OFFICIAL_RECORD", 'id="conflicts"',
                 'id="missing"', 'id="scores"', "training-agent", "pending: awaits a reviewer"):
        assert part in text, part
    assert 'id="audit-trail"' not in text, "the trail link is for operators"
    assert 'id="confirm"' not in text, "nothing to confirm while the approval is pending"


def test_only_the_requester_gets_the_confirm_buttons(console: Any) -> None:
    app, mesh, _, sign_in = console
    ex = mesh.execution_answer
    ex.status, ex.action.state = pb.EXECUTION_STATUS_AWAITING_CONFIRMATION, pb.ACTION_STATE_AWAITING_CONFIRMATION
    ex.action.confirmation_token = "tok-1"
    alice, _ = sign_in("alice", "permit-manager")
    mine = _call(app, "GET", "/executions/exe-0123456789abcdef", alice).body.decode()
    assert 'id="confirm"' in mine and "Release WP-10233 now?" in mine
    assert "tok-1" not in mine, "the single-use token never goes to the browser"
    bob, _ = sign_in("bob", "reviewer")
    ex.action.confirmation_token = ""  # the supervisor shows it only to the requester
    theirs = _call(app, "GET", "/executions/exe-0123456789abcdef", bob).body.decode()
    assert 'id="confirm"' not in theirs and 'id="confirm-elsewhere"' in theirs


def test_a_post_needs_the_sessions_csrf_token_and_this_origin(console: Any) -> None:
    app, mesh, recorded, sign_in = console
    session_id, session = sign_in("bob", "reviewer")
    form = {"decision": "APPROVE", "reason": "ok"}
    for bad_form, headers, reason in [
            (form, {}, "CONSOLE_CSRF_INVALID"),
            ({**form, "csrf": "forged"}, {}, "CONSOLE_CSRF_INVALID"),
            ({**form, "csrf": session.csrf}, {"Origin": "http://evil.example"}, "CONSOLE_ORIGIN_MISMATCH")]:
        answer = _call(app, "POST", "/reviews/rev-1/decide", session_id, bad_form, headers)
        assert answer.status == 403 and reason.encode() in answer.body
        assert recorded[-1]["reason_codes"][0] == reason and recorded[-1]["user_id"] == "bob"
    assert not [c for c in mesh.calls if c[0] == "decide"], "nothing reached the mesh"
    done = _call(app, "POST", "/reviews/rev-1/decide", session_id, {**form, "csrf": session.csrf},
                 {"Origin": "http://127.0.0.1:7490"})
    assert done.status == 200 and [c[0] for c in mesh.calls].count("decide") == 1
    assert mesh.calls[[c[0] for c in mesh.calls].index("decide")][1][:3] == (
        session.assertion, "rev-1", dc_pb2.REVIEW_DECISION_APPROVE), "the decision goes with bob's own assertion"


def test_without_a_session_pages_send_to_sign_in_and_posts_are_refused(console: Any) -> None:
    app, mesh, recorded, _ = console
    assert _call(app, "GET", "/executions").status == 303
    assert _call(app, "GET", "/executions", "not-a-session").status == 303
    answer = _call(app, "POST", "/reviews/rev-1/decide", "not-a-session", {"decision": "APPROVE"})
    assert answer.status == 401 and recorded[-1]["reason_codes"][0] == "CONSOLE_SESSION_REQUIRED"
    assert not mesh.calls


def test_operator_pages_need_the_operator_role(console: Any) -> None:
    app, mesh, recorded, sign_in = console
    session_id, _ = sign_in("ada", "admin", "reviewer")
    for path in ("/operator", "/operator/trail/exe-0123456789abcdef"):
        answer = _call(app, "GET", path, session_id)
        assert answer.status == 403 and b"CONSOLE_OPERATOR_ROLE_REQUIRED" in answer.body
    assert recorded[-1]["reason_codes"][0] == "CONSOLE_OPERATOR_ROLE_REQUIRED"
    assert not [c for c in mesh.calls if c[0] == "audit_records"]


def test_a_trail_is_shown_only_for_an_execution_the_user_may_read(console: Any) -> None:
    app, mesh, _, sign_in = console
    session_id, _ = sign_in("olga", "operator")
    mesh.refuse = errors.NotFound("execution 'exe-0123456789abcdef' not found", reason="EXECUTION_NOT_FOUND",
                                  field="execution_id")
    answer = _call(app, "GET", "/operator/trail/exe-0123456789abcdef", session_id)
    assert answer.status == 404 and b"EXECUTION_NOT_FOUND" in answer.body
    assert [c[0] for c in mesh.calls] == ["execution"], "the log is not read"


def test_a_refusal_of_the_mesh_is_shown_with_its_reason(console: Any) -> None:
    app, mesh, _, sign_in = console
    session_id, session = sign_in("alice", "permit-manager", "reviewer")
    mesh.refuse = errors.PermissionDenied("the policy engine refused: review.own_request", reason="OWN_REQUEST",
                                          field="user_assertion")
    answer = _call(app, "POST", "/reviews/rev-1/decide", session_id, {"decision": "APPROVE", "csrf": session.csrf})
    assert answer.status == 403
    text = answer.body.decode()
    assert 'id="refusal-reason">OWN_REQUEST<' in text and "review.own_request" in text


def test_a_tenant_kill_switch_is_for_the_operators_own_tenant(console: Any) -> None:
    app, mesh, recorded, sign_in = console
    session_id, session = sign_in("olga", "operator")
    answer = _call(app, "POST", "/operator/kill-switches", session_id,
                   {"csrf": session.csrf, "scope": "TENANT", "target": "globex", "reason": "x", "enabled": "on"})
    assert answer.status == 403 and recorded[-1]["reason_codes"][0] == "CONSOLE_TENANT_SCOPE_OTHER_TENANT"


def test_an_execution_of_a_domain_names_its_intent_and_domain() -> None:
    page = views.execution(pb.Execution(intent=pb.EXECUTION_INTENT_DOMAIN, intent_kind="ASSIGN_WORKER",
                                        domain="worker-assignment"))
    assert (page["intent"], page["domain"]) == ("ASSIGN_WORKER", "worker-assignment")
    assert views.execution(pb.Execution(intent=pb.EXECUTION_INTENT_PERMIT_STATUS))["intent"] == "PERMIT_STATUS"


def test_closed_set_fields_read_as_strings_or_enums() -> None:
    assert views.field_text(pb.Execution(intent=pb.EXECUTION_INTENT_ANALYZE_PERMIT), "intent") == "ANALYZE_PERMIT"
    assert views.field_text(pb.Execution(request_text="x"), "request_text") == "x"
    assert views.field_text(pb.Execution(status=pb.EXECUTION_STATUS_AWAITING_REVIEW), "status") == "AWAITING_REVIEW"
    assert views.field_text(pb.WatchExecutionResponse(event=pb.EXECUTION_EVENT_TASK_STARTED), "event") == "TASK_STARTED"
    assert views.item_text(pb.MissingItem(kind=pb.MISSING_KIND_NOT_FINISHED, text="risk: not finished")) == (
        "risk: not finished")
    assert views.item_text("training-agent: timed out") == "training-agent: timed out"
    assert views.item_text(common_pb2.EvidenceReference(source="lms", reference="T-1")) == "lms: T-1"
    assert views.enum_text(common_pb2.TaskStatus.DESCRIPTOR, 99) == "99"


def test_the_task_graph_is_laid_out_in_stages() -> None:
    graph = hostile_execution().graph
    graph.nodes.add(task_id="t3", target_agent_id="risk-agent", status=common_pb2.TASK_STATUS_CREATED)
    graph.edges.add(from_task_id="t1", to_task_id="t3")
    stages = views.task_graph(graph)["stages"]
    assert [[t["task_id"] for t in stage] for stage in stages] == [["t1"], ["t2", "t3"]]


def test_live_progress_is_a_stream_of_json_events_that_ends(console: Any) -> None:
    import json

    app, mesh, _, sign_in = console
    session_id, _ = sign_in("alice", "analyst")
    answer = _call(app, "GET", "/executions/exe-0123456789abcdef/events", session_id)
    assert answer.status == 200 and answer.content_type.startswith("text/event-stream") and answer.stream
    chunks = b"".join(answer.stream).decode().split("\n\n")
    events = [dict(line.split(": ", 1) for line in c.split("\n")) for c in chunks if c.startswith("event:")]
    assert [e["event"] for e in events] == ["progress", "progress", "end"]
    finished = json.loads(events[1]["data"])
    assert (finished["event"], finished["agent_id"], finished["task_status"]) == (
        "TASK_FINISHED", "training-agent", "COMPLETED")
    assert {t["task_id"]: t["status"] for t in finished["tasks"]} == {"t1": "COMPLETED", "t2": "RUNNING"}
    assert mesh.calls[-1][0] == "watch" and mesh.calls[-1][1][1] == "exe-0123456789abcdef"


def test_a_refused_watch_ends_the_stream_with_the_refusal(console: Any) -> None:
    import json

    app, mesh, _, sign_in = console
    session_id, _ = sign_in("victor", "viewer")
    mesh.refuse = errors.PermissionDenied("the policy engine refused: execution.not_requester_or_reader",
                                          reason="POLICY_DENIED", field="user_assertion")
    answer = _call(app, "GET", "/executions/exe-0123456789abcdef/events", session_id)
    assert answer.stream is not None
    chunks = [c for c in b"".join(answer.stream).decode().split("\n\n") if c.startswith("event:")]
    assert len(chunks) == 1 and chunks[0].startswith("event: refused")
    assert json.loads(chunks[0].split("data: ", 1)[1])["reason"] == "POLICY_DENIED"
    # The stream's slot is given back: as many more as the console allows can be opened.
    from console_svc.app import MAX_STREAMS

    mesh.refuse = None
    for _ in range(MAX_STREAMS + 1):
        assert b"event: end" in b"".join(_call(app, "GET", "/executions/exe-0123456789abcdef/events",
                                               session_id).stream or [])


PATHS = ["/", "/executions", "/executions/exe-0123456789abcdef", "/executions/exe-0123456789abcdef/events",
         "/executions/exe-0123456789abcdef/confirm", "/executions/exe-0123456789abcdef/cancel", "/reviews",
         "/reviews/rev-1", "/reviews/rev-1/decide", "/operator", "/operator/trail/exe-0123456789abcdef",
         "/operator/kill-switches", "/operator/verify", "/logout", "/executions/../../etc/passwd", "/executions/%00",
         "/reviews/" + "r" * 300, "/operator/trail/", "//", "/executions/exe-1/confirm/again", "/static/../app.py"]
FIELDS = ["csrf", "request_text", "request_id", "release", "answer", "capability_id", "resource_id", "reason",
          "decision", "override_decision", "assignee", "scope", "target", "enabled", "status", "page_token",
          "execution_id"]
VALUES = ["", "on", "APPROVE", "REJECT", "ASSIGN", "decline", "TENANT", "AGENT", "CAPABILITY", "GLOBAL", "acme",
          "globex", "workPermit.release", "WP-10231", "x" * 5000, "\x00", "<script>", "é漢字\U0001f600", "-1",
          "undecided", "all", "RECOMMENDED_FOR_RELEASE", "exe-0123456789abcdef", "\r\nSet-Cookie: a=b"]


@pytest.mark.parametrize("seed", range(6))
def test_random_pages_and_forms_are_answered_never_failed(console: Any, seed: int) -> None:
    """Whatever is asked of the console, by whom, it answers a page, a redirect or a refusal: never a failure of
    its own (an exception, a 500)."""
    rng = random.Random(seed)
    app, mesh, _, sign_in = console
    for _ in range(150):
        session_id, session = sign_in(rng.choice(["alice", "bob", "olga"]),
                                      *rng.sample(["analyst", "permit-manager", "reviewer", "operator", "admin"],
                                                  rng.randint(0, 3)))
        form = {rng.choice(FIELDS): rng.choice(VALUES) for _ in range(rng.randint(0, 6))}
        if rng.random() < 0.8:
            form["csrf"] = session.csrf
        query = {rng.choice(FIELDS): rng.choice(VALUES) for _ in range(rng.randint(0, 2))}
        method = rng.choice(["GET", "POST", "HEAD", "PUT"])
        answer = _call(app, method, rng.choice(PATHS), rng.choice([session_id, session_id, "", "forged"]), form,
                       rng.choice([{}, {"Origin": "http://127.0.0.1:7490"}, {"Origin": "null"}]), query)
        assert 200 <= answer.status < 500, (method, answer.status, answer.body[:300])
        body = answer.body if isinstance(answer.body, bytes) else b"".join(answer.body)
        # Only the console's own script tag; no input (``<script>``, a header split) comes back as markup.
        assert body.count(b"<script") <= 1 and b"\r\nSet-Cookie" not in body
