"""HTTP server of the sandbox LMS (stdlib ``ThreadingHTTPServer``).

Endpoints::

    GET    /healthz                                        {"status": "ok"}
    GET    /v1/tenants/{tenant}/workers/{worker}/trainings 200 {tenant_id, worker_id, trainings[]}
                                                           404 {"error": {"code": "WORKER_NOT_FOUND"}}
    GET    /admin/faults                                   {"admin": [...], "configured": [...]}
    POST   /admin/faults   {"mode": "latency", "latency_ms": 300,
                            "tenant_id": "acme" (optional), "worker_id": "W-1" (optional),
                            "times": 3 (optional: the next 3 matching lookups only)}
    DELETE /admin/faults                                   clears every admin rule

An unknown tenant and an unknown worker get the same 404, as a real
multi-tenant LMS should answer. Every ``/admin`` route requires
``Authorization: Bearer <admin token>`` (compared in constant time) and answers
401 without it, before anything else (an unknown admin route is 401 too). The
token is ``admin_token``, or a random one when none is given, readable in
process as :attr:`LmsSandbox.admin_token`.
"""

from __future__ import annotations

import datetime as _dt
import hmac
import json
import logging
import secrets
import urllib.parse
from http.server import BaseHTTPRequestHandler
from typing import Any

from agentmesh.background_http import BackgroundHttpServer, KeptAliveHttpServer
from lms_sandbox.data import LmsData
from lms_sandbox.faults import HOSTILE_ISSUER, HOSTILE_TITLE, Fault, FaultMode, FaultTable

__all__ = ["LmsSandbox"]

_log = logging.getLogger("lms_sandbox")
_MAX_ADMIN_BODY = 64 * 1024
_CHUNK = 64 * 1024


class _Server(KeptAliveHttpServer):
    sandbox: LmsSandbox


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "lms-sandbox/1"
    # Keep-alive, as an LMS behind a load balancer does: every answer has a Content-Length
    # (or says Connection: close), so a client reuses its connection instead of connecting per lookup.
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes: with Nagle on, a kept-alive connection waits
    # for a delayed ACK (about 40 ms) before each body.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        _log.info("%s %s", self.address_string(), format % args)

    # -- plumbing --

    def parse_request(self) -> bool:
        self._consumed = False
        return super().parse_request()

    def _start_response(self, status: int) -> None:
        """The status line, and ``Connection: close`` when this connection cannot serve another request."""
        if not self._consumed and (self.headers.get("Content-Length") or "0") != "0":
            self.close_connection = True  # the request's body was not read: what follows it is not a request
        self.send_response(status)
        if self.close_connection:
            self.send_header("Connection", "close")

    def _send_json(self, status: int, payload: Any) -> None:
        body = json.dumps(payload).encode("utf-8")
        self._start_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, code: str, message: str) -> None:
        self._send_json(status, {"error": {"code": code, "message": message}})

    def _segments(self) -> list[str]:
        path = urllib.parse.urlsplit(self.path).path
        return [urllib.parse.unquote(s) for s in path.split("/") if s]

    def _admin_refused(self) -> bool:
        """For an ``/admin`` path without the right bearer token: answers 401, returns True."""
        parts = self._segments()
        if not parts or parts[0] != "admin":
            return False
        expected = f"Bearer {self.server.sandbox.admin_token}".encode()
        given = self.headers.get("Authorization", "").encode("latin-1", "replace")
        if hmac.compare_digest(given, expected):
            return False
        body = json.dumps({"error": {"code": "UNAUTHENTICATED", "message": "admin token required"}}).encode()
        self._start_response(401)
        self.send_header("WWW-Authenticate", 'Bearer realm="lms-sandbox admin"')
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        return True

    # -- routes --

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        if self._admin_refused():
            return
        parts = self._segments()
        if parts == ["healthz"]:
            self._send_json(200, {"status": "ok"})
        elif parts == ["admin", "faults"]:
            self._send_json(200, self.server.sandbox.faults.snapshot())
        elif len(parts) == 6 and parts[0] == "v1" and parts[1] == "tenants" and (
            parts[3] == "workers" and parts[5] == "trainings"
        ):
            self._trainings(parts[2], parts[4])
        else:
            self._error(404, "NOT_FOUND", "no such endpoint")

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        if self._admin_refused():
            return
        if self._segments() != ["admin", "faults"]:
            self._error(404, "NOT_FOUND", "no such endpoint")
            return
        length = self.headers.get("Content-Length", "")
        if not length.isdigit() or int(length) > _MAX_ADMIN_BODY:
            self._error(400, "INVALID_FAULT", "a JSON body up to 64 KiB with Content-Length")
            return
        try:
            raw = self.rfile.read(int(length))
            self._consumed = True
            body = json.loads(raw or b"null")
            if not isinstance(body, dict):
                raise ValueError("body must be a JSON object")
            scope = {k: body.pop(k, None) for k in ("tenant_id", "worker_id")}
            for key, value in scope.items():
                if value is not None and (not isinstance(value, str) or not value):
                    raise ValueError(f"{key} must be a non-empty string")
            fault = Fault.from_mapping(body)
        except ValueError as exc:
            self._error(400, "INVALID_FAULT", str(exc))
            return
        self.server.sandbox.faults.set(
            fault, tenant_id=scope["tenant_id"], worker_id=scope["worker_id"]
        )
        self._send_json(201, {"fault": {**scope, **fault.to_dict()}})

    def do_DELETE(self) -> None:  # noqa: N802 - stdlib naming
        if self._admin_refused():
            return
        if self._segments() != ["admin", "faults"]:
            self._error(404, "NOT_FOUND", "no such endpoint")
            return
        self._send_json(200, {"cleared": self.server.sandbox.faults.clear()})

    def do_PUT(self) -> None:  # noqa: N802 - stdlib naming
        if not self._admin_refused():
            self._error(405, "METHOD_NOT_ALLOWED", "method not allowed")

    do_PATCH = do_PUT

    # -- trainings --

    def _trainings(self, tenant_id: str, worker_id: str) -> None:
        sandbox = self.server.sandbox
        fault = sandbox.faults.lookup(tenant_id, worker_id)
        mode = fault.mode if fault is not None else FaultMode.NONE
        if fault is not None and self._inject(fault, tenant_id, worker_id):
            return
        records = sandbox.data.trainings(tenant_id, worker_id)
        if records is None:
            self._error(404, "WORKER_NOT_FOUND", "no such worker")
            return
        if mode is FaultMode.HOSTILE:
            for record in records:
                record["course_title"] = HOSTILE_TITLE
                record["issuer"] = HOSTILE_ISSUER
        self._send_json(
            200,
            {
                "tenant_id": tenant_id,
                "worker_id": worker_id,
                "trainings": records,
                "generated_at": _dt.datetime.now(_dt.UTC).isoformat(),
            },
        )

    def _inject(self, fault: Fault, tenant_id: str, worker_id: str) -> bool:
        """Apply ``fault``; ``True`` if the request is fully handled by it."""
        stopping = self.server.sandbox.stopping
        if fault.mode is FaultMode.LATENCY:
            # A stop during the wait ends the request, and its connection, without an answer.
            if stopping.wait(fault.latency_ms / 1000.0):
                self.close_connection = True
                return True
            return False
        if fault.mode is FaultMode.TIMEOUT:
            # Hang without answering, then drop the connection: a client must
            # give up on its own timeout and never receive a status.
            stopping.wait(fault.hang_ms / 1000.0)
            self.close_connection = True
            return True
        if fault.mode is FaultMode.HTTP_5XX:
            self._error(fault.status, "LMS_INTERNAL_ERROR", "injected server error")
            return True
        if fault.mode is FaultMode.MALFORMED:
            self._malformed(fault, tenant_id, worker_id)
            return True
        if fault.mode is FaultMode.OVERSIZED:
            self._oversized(fault, tenant_id, worker_id)
            return True
        return False

    def _malformed(self, fault: Fault, tenant_id: str, worker_id: str) -> None:
        if fault.kind == "schema":
            # Valid JSON of the wrong shape: trainings must be a list of records.
            body = json.dumps(
                {"tenant_id": tenant_id, "worker_id": worker_id, "trainings": "all valid"}
            ).encode()
        else:
            prefix = json.dumps({"tenant_id": tenant_id, "worker_id": worker_id})[:-1]
            body = (prefix + ', "trainings": [{"record_id": "TR-1", "status": ').encode()
        self._start_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _oversized(self, fault: Fault, tenant_id: str, worker_id: str) -> None:
        head = json.dumps({"tenant_id": tenant_id, "worker_id": worker_id, "trainings": []})
        head = head[:-1] + ', "padding": "'
        tail = '"}'
        remaining = max(0, fault.bytes - len(head) - len(tail))
        # No Content-Length: the client cannot reject early and must enforce
        # its limit while streaming, which is the behaviour under test. The body
        # ends when the connection closes.
        self.close_connection = True
        self._start_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        try:
            self.wfile.write(head.encode())
            filler = b"x" * _CHUNK
            while remaining > 0 and not self.server.sandbox.stopping.is_set():
                n = min(remaining, _CHUNK)
                self.wfile.write(filler[:n])
                remaining -= n
            self.wfile.write(tail.encode())
        except (BrokenPipeError, ConnectionResetError):
            # The client aborted past its size limit, as it should.
            pass


class LmsSandbox(BackgroundHttpServer):
    """The sandbox LMS server; start it in a thread or serve in the foreground."""

    thread_name = "lms-sandbox"

    def __init__(
        self,
        data: LmsData,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        admin_token: str | None = None,
    ):
        """Bind to ``host:port`` (``0`` picks a free port) without serving yet.

        ``admin_token`` guards every ``/admin`` route; a random one when None.
        """
        if admin_token is not None and not admin_token:
            raise ValueError("admin_token must not be empty")
        self.data = data
        self.faults = FaultTable(data.faults)
        self.admin_token: str = admin_token or secrets.token_urlsafe(32)
        server = _Server((host, port), _Handler)
        server.sandbox = self
        super().__init__(server)
