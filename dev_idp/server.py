"""The dev identity provider's HTTP endpoints: an OAuth 2.0 authorization-code flow with PKCE.

::

    GET  /healthz                       {"status": "SERVING"}
    GET  /authorize?response_type=code&client_id=console&redirect_uri=URI
                   &state=S&code_challenge=C&code_challenge_method=S256
                                        the sign-in page: the directory's users, one button each
    POST /authorize                     (the page's form) -> 303 URI?code=CODE&state=S
    POST /token  grant_type=authorization_code&code=CODE&redirect_uri=URI
                 &client_id=console&code_verifier=V
                                        200 {"assertion": JWT, "token_type": "agentmesh-user-assertion",
                                             "expires_in": 3600}
                                        400 {"error": "invalid_grant" | "invalid_request", ...}

Only known clients with their registered redirect URI are served (the web
console: the address it recorded in ``HOME/run/console.addr`` plus
``/auth/callback``, read at each request so a console on a new port is known
at once). A code is random, single use, bound to its client, redirect URI and
PKCE challenge, and valid :data:`CODE_TTL_S`; the assertion never passes through
the browser. The users are whoever the directory lists, without a password:
this is a development stand-in, never an identity provider for production.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import html
import json
import secrets
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agentmesh import assertion
from agentmesh.http_app import CSP, Request, Response
from dev_idp.directory import DevUser

CODE_TTL_S = 60
"""How long an authorization code may wait for its exchange."""
_MAX_PENDING = 1000


@dataclass(frozen=True, slots=True)
class _Grant:
    user: DevUser
    client_id: str
    redirect_uri: str
    challenge: str
    expires_at: float


def s256(verifier: str) -> str:
    """The PKCE S256 challenge of a verifier (RFC 7636)."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


class DevIdp:
    """The app (see the module docstring). ``clients`` maps a client id to its current redirect URI (or None)."""

    def __init__(self, key: Ed25519PrivateKey, users: list[DevUser],
                 clients: dict[str, Callable[[], str | None]], *, ttl_s: int = assertion.DEFAULT_TTL_S) -> None:
        self._key = key
        self._users = {u.key: u for u in users}
        self._clients = clients
        self._ttl_s = ttl_s
        self._codes: dict[str, _Grant] = {}
        self._lock = threading.Lock()

    def __call__(self, request: Request) -> Response:
        if request.path == "/healthz":
            return Response(200, b'{"status": "SERVING"}', "application/json")
        if request.path == "/authorize" and request.method in ("GET", "HEAD"):
            return self._page(request.query)
        if request.path == "/authorize" and request.method == "POST":
            return self._authorize(request.form)
        if request.path == "/token" and request.method == "POST":
            return self._token(request.form)
        return Response.text(404, "no such page")

    # -- authorize ------------------------------------------------------------------

    def _client_problem(self, params: dict[str, str]) -> str | None:
        client = params.get("client_id", "")
        if client not in self._clients:
            return "unknown client_id"
        registered = self._clients[client]()
        if not registered or not hmac.compare_digest(params.get("redirect_uri", ""), registered):
            return "redirect_uri is not the one registered for this client"
        if params.get("response_type") != "code":
            return "response_type must be code"
        if params.get("code_challenge_method") != "S256" or not 43 <= len(params.get("code_challenge", "")) <= 128:
            return "a PKCE code_challenge with code_challenge_method S256 is required"
        if not 16 <= len(params.get("state", "")) <= 256:
            return "state is required"
        return None

    def _page(self, params: dict[str, str]) -> Response:
        problem = self._client_problem(params)
        if problem:
            # Never redirect to a URI that is not registered: say what is wrong here.
            return Response.text(400, f"sign-in request refused: {problem}")
        hidden = "".join(f'<input type="hidden" name="{k}" value="{html.escape(params[k])}">'
                         for k in ("client_id", "redirect_uri", "response_type", "state", "code_challenge",
                                   "code_challenge_method"))
        rows = []
        for tenant in sorted({u.tenant_id for u in self._users.values()}):
            rows.append(f"<h2>{html.escape(tenant)}</h2><ul>")
            for u in sorted((u for u in self._users.values() if u.tenant_id == tenant), key=lambda u: u.user_id):
                rows.append(
                    f'<li><button type="submit" name="user" value="{html.escape(u.key)}" '
                    f'id="user-{html.escape(u.tenant_id)}-{html.escape(u.user_id)}">'
                    f"{html.escape(u.user_id)}</button> {html.escape(u.name)} "
                    f"<small>roles: {html.escape(', '.join(u.roles))}</small></li>")
            rows.append("</ul>")
        body = ("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>agentmesh dev sign-in</title>"
                "</head><body><h1>agentmesh development identity provider</h1>"
                "<p>Development only: pick who you are. The console receives an assertion signed for that "
                "user, as <code>agentmesh token issue</code> would mint it.</p>"
                f'<form method="post" action="/authorize">{hidden}{"".join(rows)}</form></body></html>')
        # The form's answer redirects to the client: Chrome checks form-action on that redirect too.
        origin = "{0.scheme}://{0.netloc}".format(urllib.parse.urlsplit(params["redirect_uri"]))
        csp = CSP.replace("form-action 'self'", f"form-action 'self' {origin}")
        return Response(200, body.encode(), headers=[("Content-Security-Policy", csp)])

    def _authorize(self, form: dict[str, str]) -> Response:
        problem = self._client_problem(form)
        if problem:
            return Response.text(400, f"sign-in request refused: {problem}")
        user = self._users.get(form.get("user", ""))
        if user is None:
            return Response.text(400, "sign-in request refused: no such user in the directory")
        code = secrets.token_urlsafe(32)
        now = time.monotonic()
        with self._lock:
            for stale in [c for c, g in self._codes.items() if g.expires_at < now]:
                del self._codes[stale]
            if len(self._codes) >= _MAX_PENDING:
                return Response.text(503, "too many sign-ins in progress; try again")
            self._codes[code] = _Grant(user, form["client_id"], form["redirect_uri"], form["code_challenge"],
                                       now + CODE_TTL_S)
        query = urllib.parse.urlencode({"code": code, "state": form["state"]})
        return Response.redirect(f"{form['redirect_uri']}?{query}")

    # -- token ----------------------------------------------------------------------

    @staticmethod
    def _error(error: str, description: str) -> Response:
        return Response(400, json.dumps({"error": error, "error_description": description}).encode(),
                        "application/json")

    def _token(self, form: dict[str, str]) -> Response:
        if form.get("grant_type") != "authorization_code":
            return self._error("unsupported_grant_type", "grant_type must be authorization_code")
        with self._lock:
            grant = self._codes.pop(form.get("code", ""), None)  # single use, whatever happens next
        if grant is None or grant.expires_at < time.monotonic():
            return self._error("invalid_grant", "the code is unknown, used or expired")
        if not (hmac.compare_digest(form.get("client_id", ""), grant.client_id)
                and hmac.compare_digest(form.get("redirect_uri", ""), grant.redirect_uri)):
            return self._error("invalid_grant", "the code was issued to another client or redirect_uri")
        verifier = form.get("code_verifier", "")
        if not 43 <= len(verifier) <= 128 or not hmac.compare_digest(s256(verifier), grant.challenge):
            return self._error("invalid_grant", "code_verifier does not match the code_challenge")
        user = grant.user
        token = assertion.issue(self._key, tenant_id=user.tenant_id, user_id=user.user_id, roles=user.roles,
                                ttl_s=self._ttl_s)
        return Response(200, json.dumps({"assertion": token, "token_type": "agentmesh-user-assertion",
                                         "expires_in": self._ttl_s}).encode(), "application/json")
