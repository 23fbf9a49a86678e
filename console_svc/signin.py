"""Signing in through the identity provider, and the sessions it opens.

The flow (OAuth 2.0 authorization code with PKCE, the dev IdP in development):

1. ``/login/start``: a random ``state`` and PKCE verifier are kept here (not in
   the browser); the browser gets the state in a short-lived ``am_login``
   cookie (HttpOnly, SameSite=Lax so that it comes back with the IdP's
   redirect) and is sent to the IdP's ``/authorize``.
2. The IdP redirects to ``/auth/callback?code&state``: the state must equal the
   cookie's and be one we issued (single use, :data:`LOGIN_TTL_S`); the code is
   exchanged server to server at the IdP's ``/token`` with the verifier; the
   assertion it returns is verified here (signature with ``trust/idp.pub``,
   issuer, audience, expiry, claims) before anything is opened.
3. A session: a random id in the ``am_session`` cookie (HttpOnly,
   SameSite=Strict; ``Secure`` when the console is served over HTTPS), kept
   here by its SHA-256 with the assertion, the verified user and a CSRF token
   every POST must carry. It ends when the assertion expires or at sign-out.

Sessions live in memory: a restarted console asks people to sign in again
(nothing else is lost — everything they did is in the mesh).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import jwt

from agentmesh.assertion import AssertionInvalid, UserIdentity

LOGIN_TTL_S = 600
"""How long a sign-in may take between leaving for the IdP and coming back."""
MAX_SESSIONS = 10_000
MAX_PENDING = 1_000
SESSION_COOKIE = "am_session"
LOGIN_COOKIE = "am_login"


class SignInFailed(Exception):
    """A sign-in that cannot be completed; ``reason`` is a stable code, the message says why."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Session:
    """A signed-in user: their assertion (sent with every call), who it says they are, the CSRF token."""

    assertion: str
    user: UserIdentity
    csrf: str
    expires_at: float

    @property
    def is_operator(self) -> bool:
        """Whether the verified assertion holds the ``operator`` role (the console's operator pages)."""
        return "operator" in self.user.roles


@dataclass(frozen=True, slots=True)
class _Pending:
    verifier: str
    expires_at: float


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def pkce_challenge(verifier: str) -> str:
    """RFC 7636 S256."""
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode("ascii")).digest()).decode().rstrip("=")


class SessionStore:
    """Pending sign-ins and open sessions (see the module docstring)."""

    def __init__(self, verify: Callable[[str], UserIdentity], *,
                 clock: Callable[[], float] = time.time) -> None:
        self._verify = verify
        self._clock = clock
        self._pending: dict[str, _Pending] = {}
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    def _sweep(self, now: float) -> None:
        for key in [k for k, p in self._pending.items() if p.expires_at < now]:
            del self._pending[key]
        for key in [k for k, s in self._sessions.items() if s.expires_at < now]:
            del self._sessions[key]

    def begin(self) -> tuple[str, str]:
        """A new sign-in: ``(state, PKCE challenge)``; the verifier stays here."""
        state, verifier = secrets.token_urlsafe(32), secrets.token_urlsafe(48)
        now = self._clock()
        with self._lock:
            self._sweep(now)
            if len(self._pending) >= MAX_PENDING:
                raise SignInFailed("too many sign-ins in progress; try again in a minute", "SIGN_IN_BUSY")
            self._pending[_digest(state)] = _Pending(verifier, now + LOGIN_TTL_S)
        return state, pkce_challenge(verifier)

    def verifier_for(self, state: str, cookie_state: str) -> str:
        """The verifier of a sign-in coming back, once (SignInFailed if it is not ours or not this browser's)."""
        if not state or not cookie_state or not hmac.compare_digest(state, cookie_state):
            raise SignInFailed("this sign-in was not started in this browser (state mismatch)",
                               "SIGN_IN_STATE_MISMATCH")
        with self._lock:
            pending = self._pending.pop(_digest(state), None)
        if pending is None or pending.expires_at < self._clock():
            raise SignInFailed("this sign-in is unknown, was used already or took too long", "SIGN_IN_STATE_UNKNOWN")
        return pending.verifier

    def open(self, token: str) -> tuple[str, Session]:
        """Verifies the assertion the IdP gave and opens a session; ``(session id, session)``."""
        try:
            user = self._verify(token)
            expires = float(jwt.decode(token, options={"verify_signature": False})["exp"])
        except AssertionInvalid as err:
            raise SignInFailed(f"the identity provider's assertion was refused: {err}", err.reason) from err
        except (jwt.PyJWTError, KeyError, TypeError, ValueError) as err:  # verified already; cannot happen
            raise SignInFailed("the identity provider's assertion has no expiry", "ASSERTION_INVALID") from err
        session_id = secrets.token_urlsafe(32)
        session = Session(token, user, secrets.token_urlsafe(32), expires)
        with self._lock:
            self._sweep(self._clock())
            if len(self._sessions) >= MAX_SESSIONS:
                raise SignInFailed("too many open sessions", "SIGN_IN_BUSY")
            self._sessions[_digest(session_id)] = session
        return session_id, session

    def get(self, session_id: str) -> Session | None:
        """The open session of a cookie value, or None (unknown, ended, or its assertion expired)."""
        if not session_id:
            return None
        with self._lock:
            session = self._sessions.get(_digest(session_id))
            if session is not None and session.expires_at <= self._clock():
                del self._sessions[_digest(session_id)]
                return None
        return session

    def close(self, session_id: str) -> None:
        """Ends a session (sign-out)."""
        with self._lock:
            self._sessions.pop(_digest(session_id), None)


def csrf_ok(session: Session, given: str) -> bool:
    """Whether a POST carries the session's CSRF token (constant time)."""
    return bool(given) and hmac.compare_digest(given.encode(), session.csrf.encode())
