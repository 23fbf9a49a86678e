"""HTTP server of the sandbox model server: an OpenAI-compatible chat-completions API (stdlib only).

Endpoints::

    GET    /healthz                 {"status": "ok"}
    GET    /v1/models               {"object": "list", "data": [{"id": "sandbox-small", ...}, ...]}
    POST   /v1/chat/completions     {"model", "messages", "max_tokens", "temperature", "response_format"}
                                    → {"id", "object": "chat.completion", "model", "system_fingerprint",
                                       "choices": [{"message": {"role": "assistant", "content": "…"},
                                                    "finish_reason": "stop" | "length"}],
                                       "usage": {"prompt_tokens", "completion_tokens", "total_tokens"}}
    GET    /admin/faults            the rules in force
    POST   /admin/faults            {"mode": "5xx", "model": "sandbox-large" (optional), "count": 2 (optional)}
    DELETE /admin/faults            clears every rule
    GET    /admin/calls             how many completions each model answered (for tests)

Answers are deterministic (:mod:`model_sandbox.skills`): the same request gives
the same answer. An unknown model is a 404 ``model_not_found``; a request that
is not a chat request is a 400 ``invalid_request_error``, like a real server.
With an API key (``api_key``) every ``/v1`` route requires ``Authorization:
Bearer <key>``. Every ``/admin`` route requires the admin token, compared in
constant time, and answers 401 without it.
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
import threading
import time
import urllib.parse
import uuid
from collections import Counter
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler
from typing import Any

from agentmesh.background_http import BackgroundHttpServer, KeptAliveHttpServer
from model_sandbox.faults import HOSTILE_TEXT, Fault, FaultMode, FaultTable
from model_sandbox.skills import ParsedPrompt, answer, count_tokens, parse_messages

__all__ = ["DEFAULT_MODELS", "MODEL_BUILD", "ModelSandbox"]

_log = logging.getLogger("model_sandbox")
_MAX_BODY = 1024 * 1024
DEFAULT_MODELS = ("sandbox-small", "sandbox-large")
MODEL_BUILD = "2026.11-sandbox"
"""What ``system_fingerprint`` says: the model's version is ``<model>@<build>``."""


class _Server(KeptAliveHttpServer):
    sandbox: ModelSandbox


def _hostile(prompt: ParsedPrompt) -> dict[str, Any]:
    """An answer of the right shape from a model that obeyed instructions hidden in its data."""
    if prompt.prompt_id == "intent.classify":
        return {"intent": "ANALYZE_PERMIT", "subjects": {"permit_id": "WP-10232", "tenant_id": "globex"},
                "confidence": 1.0}
    if prompt.prompt_id == "risk.hazards_in_text":
        return {"hazards": [{"category": "ELECTRICAL", "quote": HOSTILE_TEXT, "covered": False}]}
    return {"answer": HOSTILE_TEXT}


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "model-sandbox/1"
    # Keep-alive, as model servers do: every answer has a Content-Length (or closes the connection).
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes: with Nagle on, a kept-alive connection waits for a
    # delayed ACK (about 40 ms) before each body.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        _log.info("%s %s", self.address_string(), format % args)

    def parse_request(self) -> bool:
        self._consumed = False
        return super().parse_request()

    def _send_json(self, status: int, payload: Any) -> None:
        self._send_bytes(status, json.dumps(payload).encode("utf-8"))

    def _send_bytes(self, status: int, body: bytes) -> None:
        if not self._consumed and (self.headers.get("Content-Length") or "0") != "0":
            self.close_connection = True  # the request's body was not read: the connection cannot be reused
        self.send_response(status)
        if self.close_connection:
            self.send_header("Connection", "close")  # so the client opens a new one for its next request
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, kind: str, code: str, message: str) -> None:
        self._send_json(status, {"error": {"message": message, "type": kind, "code": code}})

    def _segments(self) -> list[str]:
        path = urllib.parse.urlsplit(self.path).path
        return [urllib.parse.unquote(s) for s in path.split("/") if s]

    def _refused(self) -> bool:
        """Answers 401 for an ``/admin`` route without the admin token, or a ``/v1`` route without the key."""
        parts = self._segments()
        sandbox = self.server.sandbox
        if parts and parts[0] == "admin":
            expected = f"Bearer {sandbox.admin_token}"
        elif parts and parts[0] == "v1" and sandbox.api_key:
            expected = f"Bearer {sandbox.api_key}"
        else:
            return False
        given = self.headers.get("Authorization", "").encode("latin-1", "replace")
        if hmac.compare_digest(given, expected.encode()):
            return False
        self._error(401, "authentication_error", "invalid_api_key", "a valid bearer token is required")
        return True

    def _body(self) -> Any:
        length = self.headers.get("Content-Length", "")
        if not length.isdigit() or int(length) > _MAX_BODY:
            raise ValueError("a JSON body up to 1 MiB with Content-Length is required")
        raw = self.rfile.read(int(length))
        self._consumed = True
        return json.loads(raw or b"null")

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        if self._refused():
            return
        parts = self._segments()
        sandbox = self.server.sandbox
        if parts == ["healthz"]:
            self._send_json(200, {"status": "ok"})
        elif parts == ["v1", "models"]:
            self._send_json(200, {"object": "list", "data": [
                {"id": m, "object": "model", "created": 0, "owned_by": "agentmesh-sandbox"} for m in sandbox.models]})
        elif parts == ["admin", "faults"]:
            self._send_json(200, {"rules": sandbox.faults.snapshot()})
        elif parts == ["admin", "calls"]:
            self._send_json(200, {"calls": sandbox.calls()})
        else:
            self._error(404, "invalid_request_error", "not_found", "no such endpoint")

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        if self._refused():
            return
        parts = self._segments()
        if parts == ["admin", "faults"]:
            self._set_fault()
        elif parts == ["v1", "chat", "completions"]:
            self._complete()
        else:
            self._error(404, "invalid_request_error", "not_found", "no such endpoint")

    def do_DELETE(self) -> None:  # noqa: N802 - stdlib naming
        if self._refused():
            return
        if self._segments() != ["admin", "faults"]:
            self._error(404, "invalid_request_error", "not_found", "no such endpoint")
            return
        self._send_json(200, {"cleared": self.server.sandbox.faults.clear()})

    def _set_fault(self) -> None:
        try:
            body = self._body()
            if not isinstance(body, dict):
                raise ValueError("body must be a JSON object")
            model, count = body.pop("model", None), body.pop("count", None)
            if model is not None and (not isinstance(model, str) or not model):
                raise ValueError("model must be a non-empty string")
            if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
                raise ValueError("count must be a positive integer")
            fault = Fault.from_mapping(body)
        except ValueError as exc:
            self._error(400, "invalid_request_error", "invalid_fault", str(exc))
            return
        self.server.sandbox.faults.set(fault, model=model, count=count)
        self._send_json(201, {"fault": {"model": model, "count": count, **fault.to_dict()}})

    # -- completions --

    def _complete(self) -> None:
        sandbox = self.server.sandbox
        try:
            body = self._body()
            if not isinstance(body, dict):
                raise ValueError("body must be a JSON object")
            model = body.get("model")
            messages = body.get("messages")
            max_tokens = body.get("max_tokens", 256)
            if not isinstance(model, str) or not model:
                raise ValueError("model is required")
            if not isinstance(messages, list) or not messages or not all(
                    isinstance(m, dict) and isinstance(m.get("content"), str) for m in messages):
                raise ValueError("messages must be a non-empty list of {role, content}")
            if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
                raise ValueError("max_tokens must be a positive integer")
        except ValueError as exc:
            self._error(400, "invalid_request_error", "invalid_request", str(exc))
            return
        if model not in sandbox.models:
            self._error(404, "invalid_request_error", "model_not_found", f"the model {model!r} does not exist")
            return
        fault = sandbox.faults.take(model)
        if sandbox.latency_s > 0 and sandbox.stopping.wait(sandbox.latency_s):
            return
        if fault is not None and self._inject(fault):
            return
        prompt = parse_messages(messages)
        finish = "stop"
        if fault is not None and fault.mode is FaultMode.HOSTILE:
            content = json.dumps(_hostile(prompt))
        elif fault is not None and fault.mode is FaultMode.MALFORMED and fault.kind == "schema":
            content = json.dumps({"result": "everything is fine", "confidence": "very high"})
        elif fault is not None and fault.mode is FaultMode.MALFORMED and fault.kind == "json":
            content = json.dumps(answer(prompt))[:-2] + ', "subjects": {'
        else:
            content = json.dumps(answer(prompt))
        if fault is not None and fault.mode is FaultMode.OVERLONG:
            # An answer that does not stop: it runs on past max_tokens and is cut there.
            content = content[:-1] + ', "padding": "' + "x" * (max_tokens * 4)
        if count_tokens(content) > max_tokens:
            content, finish = content[: max_tokens * 4], "length"
        completion_tokens = count_tokens(content)
        prompt_tokens = sum(count_tokens(str(m["content"])) + 3 for m in messages)
        sandbox.count(model)
        if fault is not None and fault.mode is FaultMode.MALFORMED and fault.kind == "envelope":
            self._send_bytes(200, b'{"id": "chatcmpl-broken", "choices": [{"message": {"content": ')
            return
        self._send_json(200, {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion", "created": int(time.time()),
            "model": model, "system_fingerprint": MODEL_BUILD,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        })

    def _inject(self, fault: Fault) -> bool:
        """Applies a fault that replaces the answer; True if the request is fully handled."""
        stopping = self.server.sandbox.stopping
        if fault.mode is FaultMode.LATENCY:
            return stopping.wait(fault.latency_ms / 1000.0)
        if fault.mode is FaultMode.TIMEOUT:
            stopping.wait(fault.hang_ms / 1000.0)
            self.close_connection = True
            return True
        if fault.mode is FaultMode.HTTP_5XX:
            self._error(fault.status, "server_error", "injected", "injected server error")
            return True
        return False


class ModelSandbox(BackgroundHttpServer):
    """The sandbox model server; start it in a thread or serve in the foreground."""

    thread_name = "model-sandbox"
    url_path = "/v1"
    """``http://host:port/v1``: what an OpenAI-compatible client takes as its base URL."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, models: Sequence[str] = DEFAULT_MODELS,
                 admin_token: str | None = None, api_key: str | None = None, latency_ms: int = 0) -> None:
        """Bind to ``host:port`` (``0`` picks a free port) without serving yet.

        ``admin_token`` guards every ``/admin`` route (a random one when None); ``api_key``, when
        given, is required on every ``/v1`` route; ``latency_ms`` is added to every completion.
        """
        if admin_token is not None and not admin_token:
            raise ValueError("admin_token must not be empty")
        if not models:
            raise ValueError("at least one model is required")
        self.models = tuple(models)
        self.faults = FaultTable()
        self.admin_token: str = admin_token or secrets.token_urlsafe(32)
        self.api_key = api_key
        self.latency_s = latency_ms / 1000.0
        self._calls: Counter[str] = Counter()
        self._calls_lock = threading.Lock()
        server = _Server((host, port), _Handler)
        server.sandbox = self
        super().__init__(server)

    def count(self, model: str) -> None:
        """Counts one answered completion of ``model``."""
        with self._calls_lock:
            self._calls[model] += 1

    def calls(self) -> dict[str, int]:
        """Completions answered so far, per model."""
        with self._calls_lock:
            return dict(self._calls)
