"""The console's pages: routes, sign-in, CSRF, rendering, live progress.

Every page and action needs a session (:mod:`console_svc.signin`); every POST
must carry the session's CSRF token (and, when the browser sends one, an
``Origin`` that is this console's). What a user may see or do is decided by the
mesh: each call carries their assertion, and a refusal is shown with its status,
reason and message. The operator pages (audit trail, verify, kill switches) are
for users whose verified assertion holds the ``operator`` role; the calls
behind them are made as this process's identity, which the caller table lets
read the log and set kill switches (it is in the config's ``operators``), and
a trail is shown only for an execution the supervisor lets that user read.
Refusals decided here (no session for a POST, a bad CSRF token, the operator
role missing) are recorded in the audit log, like every refusal.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import grpc
import httpx
import jinja2

from agentmesh import errors
from agentmesh.http_app import Request, Response
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import common_pb2
from agentmesh.v1 import decision_center_service_pb2 as dc_pb2
from agentmesh.v1 import policy_service_pb2 as policy_pb2
from console_svc import operator, views
from console_svc.mesh import Mesh
from console_svc.signin import LOGIN_COOKIE, SESSION_COOKIE, Session, SessionStore, SignInFailed, csrf_ok

log = logging.getLogger(__name__)

MAX_STREAMS = 32
"""Live-progress streams open at once (each holds a thread and a WatchExecution call)."""
CALLBACK_PATH = "/auth/callback"

HTTP_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: 400, grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403, grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409, grpc.StatusCode.FAILED_PRECONDITION: 409,
    grpc.StatusCode.ABORTED: 409, grpc.StatusCode.RESOURCE_EXHAUSTED: 429, grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNAVAILABLE: 503, grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}
"""The HTTP status of a page showing a refusal or failure of the mesh."""

DECISIONS = {
    "APPROVE": dc_pb2.REVIEW_DECISION_APPROVE, "REJECT": dc_pb2.REVIEW_DECISION_REJECT,
    "REQUEST_INFORMATION": dc_pb2.REVIEW_DECISION_REQUEST_INFORMATION,
    "OVERRIDE": dc_pb2.REVIEW_DECISION_OVERRIDE, "ASSIGN": dc_pb2.REVIEW_DECISION_ASSIGN,
}
OVERRIDE_DECISIONS = {
    "RECOMMENDED_FOR_RELEASE": common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE,
    "NOT_RECOMMENDED": common_pb2.ANALYSIS_DECISION_NOT_RECOMMENDED,
}
REVIEW_FILTERS = {
    "undecided": dc_pb2.REVIEW_STATUS_UNSPECIFIED, "open": dc_pb2.REVIEW_STATUS_OPEN,
    "information-requested": dc_pb2.REVIEW_STATUS_INFORMATION_REQUESTED,
    "approved": dc_pb2.REVIEW_STATUS_APPROVED, "rejected": dc_pb2.REVIEW_STATUS_REJECTED,
    "overridden": dc_pb2.REVIEW_STATUS_OVERRIDDEN,
}
SCOPES = {name: value for name, value in (
    ("AGENT", policy_pb2.KILL_SWITCH_SCOPE_AGENT), ("CAPABILITY", policy_pb2.KILL_SWITCH_SCOPE_CAPABILITY),
    ("TENANT", policy_pb2.KILL_SWITCH_SCOPE_TENANT), ("PLATFORM", policy_pb2.KILL_SWITCH_SCOPE_PLATFORM))}
STATIC = {"console.css": "text/css; charset=utf-8", "console.js": "text/javascript; charset=utf-8"}
_ID = re.compile(r"[A-Za-z0-9._~:@+=-]{1,128}")


class Recorder:
    """Where the console's own refusals are recorded (an AuditRecorder's ``record_durably``)."""

    def __init__(self, record: Callable[..., None] | None) -> None:
        self._record = record

    def refused(self, reason: str, request: Request, session: Session | None = None) -> None:
        if self._record is None:
            return
        try:
            self._record(audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED, outcome=audit_pb2.AUDIT_OUTCOME_DENIED,
                         tenant_id=session.user.tenant_id if session else "",
                         user_id=session.user.user_id if session else "",
                         resource=f"console:{request.method} {request.path.split('?')[0][:200]}",
                         reason_codes=[reason, "recorded_by=console"])
        except errors.MeshError:
            log.exception("console refusal %s not recorded (audit and the outbox both failed)", reason)


@dataclass(frozen=True)
class ConsoleConfig:
    """Where the console is and how it reaches the identity provider."""

    url: str
    """This console's own base URL (``http://HOST:PORT``): the sign-in redirect goes back here."""
    idp_url: Callable[[], str | None]
    """The identity provider's base URL now (None: none is running)."""
    audit_anchor: Path
    """The audit checkpoint public key of this mesh (``HOME/trust/…``)."""
    verify_state: Path
    """Where the last verified checkpoint is kept."""
    health: Callable[[], list[str]]
    """Why the console is not SERVING now ([] when it is)."""


def refusal(err: errors.MeshError) -> dict[str, str]:
    """A mesh refusal or failure as the page shows it."""
    return {"code": err.code.name, "reason": err.reason, "field": err.field or "", "message": str(err)}


class ConsoleApp:
    """The app served to browsers (see the module docstring)."""

    def __init__(self, config: ConsoleConfig, mesh: Mesh, sessions: SessionStore, recorder: Recorder) -> None:
        self._cfg = config
        self._mesh = mesh
        self._sessions = sessions
        self._recorder = recorder
        self._streams = threading.BoundedSemaphore(MAX_STREAMS)
        self._secure = config.url.startswith("https://")
        self._origin = config.url.rstrip("/")
        self._env = jinja2.Environment(loader=jinja2.PackageLoader("console_svc", "templates"),
                                       autoescape=True, undefined=jinja2.StrictUndefined,
                                       trim_blocks=True, lstrip_blocks=True)

    # -- plumbing -------------------------------------------------------------------

    def render(self, template: str, session: Session | None, status: int = 200, **values: Any) -> Response:
        page = self._env.get_template(template).render(session=session, **values)
        return Response(status, page.encode())

    def _failed(self, session: Session, err: errors.MeshError, template: str = "refused.html",
                **values: Any) -> Response:
        return self.render(template, session, HTTP_STATUS.get(err.code, 500), refused=refusal(err), **values)

    def __call__(self, request: Request) -> Response:
        path = request.path
        if path == "/healthz":
            reasons = self._cfg.health()
            body = {"status": "NOT_SERVING" if reasons else "SERVING", "reason": "; ".join(reasons)}
            return Response(503 if reasons else 200, json.dumps(body).encode(), "application/json")
        if path.startswith("/static/"):
            return self._static(path.removeprefix("/static/"))
        if request.method in ("GET", "HEAD") and path in ("/login", "/login/start", CALLBACK_PATH):
            canonical = urllib.parse.urlsplit(self._cfg.url).netloc
            if request.header("Host") and request.header("Host") != canonical:
                # Cookies belong to one host name: sign in where the identity provider sends people back.
                query = f"?{urllib.parse.urlencode(request.query)}" if request.query else ""
                return Response.redirect(f"{self._cfg.url}{path}{query}")
            return {"/login": self._login_page, "/login/start": self._login_start,
                    CALLBACK_PATH: self._callback}[path](request)
        session = self._sessions.get(request.cookies.get(SESSION_COOKIE, ""))
        if session is None:
            if request.method == "POST" or path.endswith("/events"):
                self._recorder.refused("CONSOLE_SESSION_REQUIRED", request)
                return Response.text(401, "not signed in (or the session ended): sign in again at /login")
            return Response.redirect("/login")
        if request.method == "POST":
            problem = self._post_problem(request, session)
            if problem:
                self._recorder.refused(problem, request, session)
                return self.render("refused.html", session, 403, refused={
                    "code": "PERMISSION_DENIED", "reason": problem, "field": "csrf",
                    "message": "this form did not come from this console's page (reload the page and try again)"})
        return self._route(request, session)

    def _post_problem(self, request: Request, session: Session) -> str | None:
        origin = request.header("Origin")
        if origin and origin != "null" and origin.rstrip("/") != self._origin and origin.rstrip("/") != (
                f"{'https' if self._secure else 'http'}://{request.header('Host')}"):
            return "CONSOLE_ORIGIN_MISMATCH"
        if not csrf_ok(session, request.form.get("csrf", "")):
            return "CONSOLE_CSRF_INVALID"
        return None

    def _static(self, name: str) -> Response:
        if name not in STATIC:
            return Response.text(404, "no such file")
        body = resources.files("console_svc").joinpath("static", name).read_bytes()
        return Response(200, body, STATIC[name])

    def _route(self, request: Request, session: Session) -> Response:
        parts = [p for p in request.path.split("/") if p]
        get, post = request.method in ("GET", "HEAD"), request.method == "POST"
        if not parts and get:
            return Response.redirect("/executions")
        if any(not _ID.fullmatch(p) for p in parts):
            return self.render("refused.html", session, 404, refused={
                "code": "NOT_FOUND", "reason": "NO_SUCH_PAGE", "field": "", "message": "no such page"})
        match parts:
            case ["logout"] if post:
                return self._logout(request)
            case ["executions"] if get:
                return self._executions(request, session)
            case ["executions"] if post:
                return self._analyze(request, session)
            case ["executions", execution_id] if get:
                return self._execution(session, execution_id)
            case ["executions", execution_id, "events"] if get:
                return self._events(session, execution_id)
            case ["executions", execution_id, "confirm"] if post:
                return self._confirm(request, session, execution_id)
            case ["executions", execution_id, "cancel"] if post:
                return self._cancel(request, session, execution_id)
            case ["reviews"] if get:
                return self._reviews(request, session)
            case ["reviews", review_id] if get:
                return self._review(session, review_id)
            case ["reviews", review_id, "decide"] if post:
                return self._decide(request, session, review_id)
            case ["operator", *rest]:
                if not session.is_operator:
                    self._recorder.refused("CONSOLE_OPERATOR_ROLE_REQUIRED", request, session)
                    return self.render("refused.html", session, 403, refused={
                        "code": "PERMISSION_DENIED", "reason": "CONSOLE_OPERATOR_ROLE_REQUIRED", "field": "",
                        "message": "the operator pages are for users whose assertion holds the operator role"})
                return self._operator(request, session, rest)
        return self.render("refused.html", session, 404, refused={
            "code": "NOT_FOUND", "reason": "NO_SUCH_PAGE", "field": "", "message": "no such page"})

    # -- sign-in --------------------------------------------------------------------

    def _login_page(self, request: Request) -> Response:
        session = self._sessions.get(request.cookies.get(SESSION_COOKIE, ""))
        if session is not None:
            return Response.redirect("/executions")
        return self.render("login.html", None, idp=self._cfg.idp_url(), problem=None)

    def _login_start(self, request: Request) -> Response:
        idp = self._cfg.idp_url()
        if not idp:
            return self.render("login.html", None, 503, idp=None,
                               problem="no identity provider is running (start the mesh with 'agentmesh up')")
        try:
            state, challenge = self._sessions.begin()
        except SignInFailed as err:
            return self.render("login.html", None, 503, idp=idp, problem=str(err))
        query = urllib.parse.urlencode({
            "response_type": "code", "client_id": "console", "redirect_uri": self._cfg.url + CALLBACK_PATH,
            "state": state, "code_challenge": challenge, "code_challenge_method": "S256"})
        response = Response.redirect(f"{idp}/authorize?{query}")
        # Lax: it must come back with the identity provider's redirect (a top-level GET).
        response.set_cookie(LOGIN_COOKIE, state, max_age=600, path=CALLBACK_PATH, same_site="Lax",
                            secure=self._secure)
        return response

    def _callback(self, request: Request) -> Response:
        idp = self._cfg.idp_url()
        try:
            if "error" in request.query:
                raise SignInFailed(f"the identity provider answered {request.query['error']}", "SIGN_IN_REFUSED_BY_IDP")
            verifier = self._sessions.verifier_for(request.query.get("state", ""),
                                                   request.cookies.get(LOGIN_COOKIE, ""))
            if not idp:
                raise SignInFailed("no identity provider is running", "IDP_UNAVAILABLE")
            token = self._exchange(idp, request.query.get("code", ""), verifier)
            session_id, session = self._sessions.open(token)
        except SignInFailed as err:
            self._recorder.refused(err.reason, request)
            page = self.render("login.html", None, 400, idp=idp, problem=f"sign-in failed: {err} ({err.reason})")
            page.set_cookie(LOGIN_COOKIE, "", max_age=0, path=CALLBACK_PATH, same_site="Lax", secure=self._secure)
            return page
        log.info("signed in: %s/%s (roles %s)", session.user.tenant_id, session.user.user_id,
                 ",".join(session.user.roles))
        # A page, not a redirect: the navigation to the console that follows starts on the console
        # itself, so the SameSite=Strict session cookie goes with it even after a cross-site IdP.
        page = self.render("signed_in.html", session)
        page.set_cookie(SESSION_COOKIE, session_id, path="/", same_site="Strict", secure=self._secure)
        page.set_cookie(LOGIN_COOKIE, "", max_age=0, path=CALLBACK_PATH, same_site="Lax", secure=self._secure)
        return page

    def _exchange(self, idp: str, code: str, verifier: str) -> str:
        """The IdP's ``/token``: the code and the PKCE verifier for the signed assertion."""
        if not code:
            raise SignInFailed("the identity provider sent no code", "SIGN_IN_CODE_MISSING")
        try:
            resp = httpx.post(f"{idp}/token", timeout=10, data={
                "grant_type": "authorization_code", "code": code, "client_id": "console",
                "redirect_uri": self._cfg.url + CALLBACK_PATH, "code_verifier": verifier})
            body = resp.json()
        except (httpx.HTTPError, ValueError) as err:
            raise SignInFailed(f"the identity provider's token endpoint failed: {err}", "IDP_UNAVAILABLE") from err
        if resp.status_code != 200 or not isinstance(body, dict) or not isinstance(body.get("assertion"), str):
            detail = body.get("error_description", body.get("error", "")) if isinstance(body, dict) else ""
            raise SignInFailed(f"the identity provider refused the code: {detail}", "SIGN_IN_CODE_REFUSED")
        return str(body["assertion"])

    def _logout(self, request: Request) -> Response:
        self._sessions.close(request.cookies.get(SESSION_COOKIE, ""))
        response = Response.redirect("/login")
        response.set_cookie(SESSION_COOKIE, "", max_age=0, secure=self._secure)
        return response

    # -- executions ------------------------------------------------------------------

    def _executions(self, request: Request, session: Session) -> Response:
        try:
            page = self._mesh.list_executions(session.assertion, request.query.get("page_token", ""))
        except errors.MeshError as err:
            return self._failed(session, err)
        return self.render("executions.html", session, rows=[views.execution_row(e) for e in page.executions],
                           next_page=page.next_page_token if page.executions else "",
                           request_id=secrets.token_hex(12))

    def _analyze(self, request: Request, session: Session) -> Response:
        text = request.form.get("request_text", "").strip()
        request_id = request.form.get("request_id", "") or secrets.token_hex(12)
        try:
            ex = self._mesh.analyze(session.assertion, session.user.tenant_id, text,
                                    release=request.form.get("release") == "on", client_request_id=request_id)
        except errors.MeshError as err:
            return self._failed(session, err, "refused.html", back="/executions")
        return Response.redirect(f"/executions/{ex.execution_id}")

    def _execution(self, session: Session, execution_id: str, refused: dict[str, str] | None = None,
                   status: int = 200) -> Response:
        try:
            ex = self._mesh.execution(session.assertion, execution_id)
        except errors.MeshError as err:
            return self._failed(session, err)
        return self.render("execution.html", session, status, ex=views.execution(ex), refused=refused)

    def _events(self, session: Session, execution_id: str) -> Response:
        def stream() -> Iterator[bytes]:
            # Taken and given back inside the stream: a stream that is never started holds nothing.
            if not self._streams.acquire(blocking=False):
                busy = {"code": "RESOURCE_EXHAUSTED", "reason": "CONSOLE_TOO_MANY_LIVE_VIEWS", "field": "",
                        "message": f"{MAX_STREAMS} live views are open; reload the page later"}
                yield f"event: refused\ndata: {json.dumps(busy)}\n\n".encode()
                return
            watch = self._mesh.watch(session.assertion, execution_id)
            try:
                yield b"retry: 5000\n\n"
                for event in watch:
                    yield f"event: progress\ndata: {json.dumps(views.progress(event))}\n\n".encode()
                yield b"event: end\ndata: {}\n\n"
            except errors.MeshError as err:
                yield f"event: refused\ndata: {json.dumps(refusal(err))}\n\n".encode()
            finally:
                watch.close()
                self._streams.release()

        return Response(200, content_type="text/event-stream; charset=utf-8", stream=stream())

    def _confirm(self, request: Request, session: Session, execution_id: str) -> Response:
        """The requester confirms (or declines) with the single-use token the supervisor shows only to them."""
        decline = request.form.get("answer") == "decline"
        try:
            ex = self._mesh.execution(session.assertion, execution_id)
            # The token is read again now and never sent to the browser; what is confirmed is what the
            # page showed (capability and permit), which the supervisor checks against the pending action.
            self._mesh.confirm(session.assertion, execution_id, ex.action.confirmation_token,
                               request.form.get("capability_id", ""), request.form.get("resource_id", ""),
                               decline=decline)
        except errors.MeshError as err:
            return self._execution(session, execution_id, refusal(err), HTTP_STATUS.get(err.code, 500))
        return Response.redirect(f"/executions/{execution_id}")

    def _cancel(self, request: Request, session: Session, execution_id: str) -> Response:
        try:
            self._mesh.cancel(session.assertion, execution_id,
                              request.form.get("reason", "") or "cancelled in the console")
        except errors.MeshError as err:
            return self._execution(session, execution_id, refusal(err), HTTP_STATUS.get(err.code, 500))
        return Response.redirect(f"/executions/{execution_id}")

    # -- Decision Center -------------------------------------------------------------

    def _reviews(self, request: Request, session: Session) -> Response:
        chosen = request.query.get("status", "undecided")
        status = REVIEW_FILTERS.get(chosen, dc_pb2.REVIEW_STATUS_UNSPECIFIED)
        try:
            reviews = self._mesh.reviews(session.assertion, status)
        except errors.MeshError as err:
            return self._failed(session, err)
        return self.render("reviews.html", session, reviews=[views.review(r) for r in reviews],
                           filters=list(REVIEW_FILTERS), chosen=chosen if chosen in REVIEW_FILTERS else "undecided")

    def _review(self, session: Session, review_id: str, refused: dict[str, str] | None = None,
                status: int = 200, done: str = "") -> Response:
        try:
            got = self._mesh.review(session.assertion, review_id)
        except errors.MeshError as err:
            return self._failed(session, err)
        ex = views.execution(got.execution) if got.HasField("execution") else None
        return self.render("review.html", session, status, review=views.review(got.review), ex=ex, refused=refused,
                           done=done, decisions=list(DECISIONS), override_decisions=list(OVERRIDE_DECISIONS))

    def _decide(self, request: Request, session: Session, review_id: str) -> Response:
        form = request.form
        decision = DECISIONS.get(form.get("decision", ""))
        if decision is None:
            return self._review(session, review_id, {"code": "INVALID_ARGUMENT", "reason": "INVALID_DECISION",
                                                     "field": "decision", "message": "no such decision"}, 400)
        override = OVERRIDE_DECISIONS.get(form.get("override_decision", ""), common_pb2.ANALYSIS_DECISION_UNSPECIFIED)
        try:
            self._mesh.decide(session.assertion, review_id, decision, reason=form.get("reason", ""),
                              assignee=form.get("assignee", ""), override_decision=override)
        except errors.MeshError as err:
            return self._review(session, review_id, refusal(err), HTTP_STATUS.get(err.code, 500))
        return self._review(session, review_id, done=form.get("decision", ""))

    # -- operators ---------------------------------------------------------------------

    def _operator(self, request: Request, session: Session, rest: list[str]) -> Response:
        get, post = request.method in ("GET", "HEAD"), request.method == "POST"
        match rest:
            case [] if get:
                return self._operator_home(session)
            case ["kill-switches"] if post:
                return self._kill_switch(request, session)
            case ["verify"] if post:
                return self._operator_home(session, verification=operator.verify(
                    self._mesh, self._cfg.audit_anchor, self._cfg.verify_state))
            case ["trail"] if get:
                execution_id = request.query.get("execution_id", "").strip()
                if not _ID.fullmatch(execution_id):
                    return self._operator_home(session, refused={
                        "code": "INVALID_ARGUMENT", "reason": "MISSING_FIELD", "field": "execution_id",
                        "message": "an execution id, e.g. exe-…"})
                return Response.redirect(f"/operator/trail/{execution_id}")
            case ["trail", execution_id] if get:
                return self._trail(session, execution_id)
            case ["trail", execution_id, "verify"] if post:
                return self._trail(session, execution_id, verify=True)
        return self.render("refused.html", session, 404, refused={
            "code": "NOT_FOUND", "reason": "NO_SUCH_PAGE", "field": "", "message": "no such page"})

    def _operator_home(self, session: Session, *, verification: operator.Verification | None = None,
                       refused: dict[str, str] | None = None, status: int = 200) -> Response:
        switches: list[dict[str, str]] = []
        switches_refused = None
        try:
            switches = [{"scope": views.enum_text(policy_pb2.KillSwitchScope.DESCRIPTOR, k.scope), "target": k.target,
                         "reason": k.reason, "changed_by": k.changed_by, "changed_at": views.when(k.changed_at)}
                        for k in self._mesh.kill_switches()]
        except errors.MeshError as err:
            switches_refused = refusal(err)
        return self.render("operator.html", session, status, switches=switches, switches_refused=switches_refused,
                           scopes=list(SCOPES), verification=verification, refused=refused)

    def _kill_switch(self, request: Request, session: Session) -> Response:
        form = request.form
        scope = SCOPES.get(form.get("scope", ""))
        reason = form.get("reason", "").strip()
        if scope is None or not reason:
            return self._operator_home(session, status=400, refused={
                "code": "INVALID_ARGUMENT", "reason": "MISSING_FIELD", "field": "scope" if scope is None else "reason",
                "message": "a scope and a reason are required"})
        target = form.get("target", "").strip()
        if scope == policy_pb2.KILL_SWITCH_SCOPE_TENANT and target != session.user.tenant_id:
            self._recorder.refused("CONSOLE_TENANT_SCOPE_OTHER_TENANT", request, session)
            return self._operator_home(session, status=403, refused={
                "code": "PERMISSION_DENIED", "reason": "CONSOLE_TENANT_SCOPE_OTHER_TENANT", "field": "target",
                "message": "a tenant kill switch from the console is for your own tenant only"})
        who = f"{session.user.tenant_id}/{session.user.user_id}"
        try:
            self._mesh.set_kill_switch(scope, target, form.get("enabled") == "on",
                                       f"{reason} (by {who} in the console)")
        except errors.MeshError as err:
            return self._operator_home(session, refused=refusal(err), status=HTTP_STATUS.get(err.code, 500))
        return Response.redirect("/operator")

    def _trail(self, session: Session, execution_id: str, *, verify: bool = False) -> Response:
        try:
            # Only a trail of an execution the supervisor (the policy engine) lets this user read.
            ex = self._mesh.execution(session.assertion, execution_id)
            records = self._mesh.audit_records(execution_id)
        except errors.MeshError as err:
            return self._failed(session, err)
        verification = operator.verify(self._mesh, self._cfg.audit_anchor, self._cfg.verify_state,
                                       records) if verify else None
        return self.render("trail.html", session, ex=views.execution_row(ex),
                           trail_tree=operator.trail(execution_id, records), count=len(records),
                           verification=verification)
