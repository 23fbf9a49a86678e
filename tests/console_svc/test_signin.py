"""Sign-in on its own: the dev IdP's code flow with PKCE, the console's pending sign-ins and sessions."""

from __future__ import annotations

import urllib.parse
from email.message import Message

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agentmesh import assertion
from agentmesh.http_app import Request
from console_svc.signin import SessionStore, SignInFailed, csrf_ok, pkce_challenge
from dev_idp import directory
from dev_idp.server import DevIdp, s256

CALLBACK = "http://127.0.0.1:7490/auth/callback"


def _request(method: str, path: str, query: dict[str, str] | None = None,
             form: dict[str, str] | None = None) -> Request:
    return Request(method, path, query or {}, Message(), {}, form or {})


@pytest.fixture()
def idp_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.fixture()
def idp(idp_key: Ed25519PrivateKey) -> DevIdp:
    return DevIdp(idp_key, directory.load(), {"console": lambda: CALLBACK})


def _params(state: str, challenge: str, **over: str) -> dict[str, str]:
    return {"response_type": "code", "client_id": "console", "redirect_uri": CALLBACK, "state": state,
            "code_challenge": challenge, "code_challenge_method": "S256", **over}


def _code(idp: DevIdp, params: dict[str, str], user: str = "acme/alice") -> str:
    answer = idp(_request("POST", "/authorize", form={**params, "user": user}))
    assert answer.status == 303, answer.body
    location = dict(answer.headers)["Location"]
    assert location.startswith(CALLBACK + "?")
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(location).query)
    assert query["state"] == [params["state"]]
    return query["code"][0]


def _token(idp: DevIdp, code: str, verifier: str, **over: str) -> tuple[int, dict[str, str]]:
    import json

    answer = idp(_request("POST", "/token", form={"grant_type": "authorization_code", "code": code,
                                                  "client_id": "console", "redirect_uri": CALLBACK,
                                                  "code_verifier": verifier, **over}))
    return answer.status, json.loads(answer.body)


def test_the_shipped_directory_has_the_demo_people() -> None:
    users = {u.key: u.roles for u in directory.load()}
    assert users["acme/alice"] == ("analyst", "permit-manager")
    assert users["acme/bob"] == ("reviewer", "permit-manager")
    assert users["acme/olga"] == ("operator",)
    assert "globex/gina" in users


def test_a_code_is_exchanged_once_for_the_users_assertion(idp: DevIdp, idp_key: Ed25519PrivateKey) -> None:
    sessions = SessionStore(lambda t: assertion.verify(t, idp_key.public_key()))
    state, challenge = sessions.begin()
    page = idp(_request("GET", "/authorize", query=_params(state, challenge)))
    assert page.status == 200 and b'id="user-acme-alice"' in page.body
    code = _code(idp, _params(state, challenge))
    verifier = sessions.verifier_for(state, state)
    assert pkce_challenge(verifier) == challenge == s256(verifier)
    status, body = _token(idp, code, verifier)
    assert status == 200
    user = assertion.verify(body["assertion"], idp_key.public_key())
    assert (user.tenant_id, user.user_id, user.roles) == ("acme", "alice", ("analyst", "permit-manager"))
    # Single use, whatever the second try brings.
    assert _token(idp, code, verifier) == (400, {"error": "invalid_grant",
                                                 "error_description": "the code is unknown, used or expired"})
    session_id, session = sessions.open(body["assertion"])
    assert sessions.get(session_id) == session and session.user.user_id == "alice"
    assert not session.is_operator
    sessions.close(session_id)
    assert sessions.get(session_id) is None


def test_the_code_needs_the_verifier_and_the_registered_client(idp: DevIdp) -> None:
    verifier = "v" * 64
    code = _code(idp, _params("s" * 20, s256(verifier)))
    assert _token(idp, code, "w" * 64)[1]["error"] == "invalid_grant"  # and it is spent now
    code = _code(idp, _params("s" * 20, s256(verifier)))
    assert _token(idp, code, verifier, redirect_uri="http://evil.example/cb")[1]["error"] == "invalid_grant"
    code = _code(idp, _params("s" * 20, s256(verifier)))
    assert _token(idp, code, verifier, grant_type="password")[1]["error"] == "unsupported_grant_type"


@pytest.mark.parametrize("over", [{"redirect_uri": "http://evil.example/auth/callback"}, {"client_id": "other"},
                                  {"code_challenge_method": "plain"}, {"response_type": "token"}, {"state": ""}])
def test_a_bad_sign_in_request_is_refused_and_never_redirected(idp: DevIdp, over: dict[str, str]) -> None:
    params = {**_params("s" * 20, "c" * 43), **over}
    page = idp(_request("GET", "/authorize", query=params))
    assert page.status == 400 and not any(k == "Location" for k, _ in page.headers)
    answer = idp(_request("POST", "/authorize", form={**params, "user": "acme/alice"}))
    assert answer.status == 400 and not any(k == "Location" for k, _ in answer.headers)


def test_no_console_running_means_no_sign_in(idp_key: Ed25519PrivateKey) -> None:
    idp = DevIdp(idp_key, directory.load(), {"console": lambda: None})
    assert idp(_request("GET", "/authorize", query=_params("s" * 20, "c" * 43))).status == 400


def test_an_unknown_user_gets_no_code(idp: DevIdp) -> None:
    answer = idp(_request("POST", "/authorize", form={**_params("s" * 20, "c" * 43), "user": "acme/mallory"}))
    assert answer.status == 400


def test_a_sign_in_must_come_back_to_the_browser_that_started_it_once(idp_key: Ed25519PrivateKey) -> None:
    sessions = SessionStore(lambda t: assertion.verify(t, idp_key.public_key()))
    state, _ = sessions.begin()
    with pytest.raises(SignInFailed) as mismatch:
        sessions.verifier_for(state, "another-browsers-state")
    assert mismatch.value.reason == "SIGN_IN_STATE_MISMATCH"
    with pytest.raises(SignInFailed):
        sessions.verifier_for("", "")
    sessions.verifier_for(state, state)
    with pytest.raises(SignInFailed) as again:
        sessions.verifier_for(state, state)
    assert again.value.reason == "SIGN_IN_STATE_UNKNOWN"


def test_a_forged_assertion_opens_no_session(idp_key: Ed25519PrivateKey) -> None:
    sessions = SessionStore(lambda t: assertion.verify(t, idp_key.public_key()))
    forged = assertion.issue(Ed25519PrivateKey.generate(), tenant_id="acme", user_id="alice", roles=["admin"])
    with pytest.raises(SignInFailed) as refused:
        sessions.open(forged)
    assert refused.value.reason == "ASSERTION_INVALID"


def test_a_session_ends_with_its_assertion(idp_key: Ed25519PrivateKey) -> None:
    now = [1000.0]
    sessions = SessionStore(lambda t: assertion.verify(t, idp_key.public_key()), clock=lambda: now[0])
    token = assertion.issue(idp_key, tenant_id="acme", user_id="olga", roles=["operator"], ttl_s=60)
    session_id, session = sessions.open(token)
    assert session.is_operator
    import jwt

    now[0] = float(jwt.decode(token, options={"verify_signature": False})["exp"]) + 1
    assert sessions.get(session_id) is None


def test_csrf_tokens_are_compared_exactly(idp_key: Ed25519PrivateKey) -> None:
    sessions = SessionStore(lambda t: assertion.verify(t, idp_key.public_key()))
    _, session = sessions.open(assertion.issue(idp_key, tenant_id="acme", user_id="bob", roles=["reviewer"]))
    assert csrf_ok(session, session.csrf)
    assert not csrf_ok(session, "") and not csrf_ok(session, session.csrf[:-1]) and not csrf_ok(session, "x" * 43)
