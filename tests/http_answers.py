"""A real HTTP/1.1 server on port 0 that answers each request as a test scripts it.

For the protocol's edge cases the sandboxes do not produce (a duplicate JSON key, a
lying ``Content-Length``, a connection dropped on its second request): the clients
under test talk to it over real sockets, kept alive as they would be in production.
"""

from __future__ import annotations

import datetime as dt
import http.server
import ipaddress
import json
import socket
import socketserver
import ssl
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

__all__ = ["Answer", "AnsweringServer", "Seen", "self_signed_certificate"]


@dataclass(frozen=True)
class Answer:
    """What the server sends back for one request."""

    status: int
    json: Any = None
    """Sent as ``application/json`` unless ``content`` is given."""
    content: bytes | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    """Sent as given; a ``Content-Length`` here replaces the true one (and the connection is closed after)."""
    chunked: bool = False
    """The body in chunked transfer encoding, in two chunks."""
    drop: bool = False
    """Read the request, then close the connection without a byte of answer."""
    close: bool = False
    """Close the connection after the answer, without saying so in a header."""


@dataclass(frozen=True)
class Seen:
    """One request as the server read it."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes
    connection: int
    """Which TCP connection carried it (1, 2, … in the order they were accepted)."""


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    tls: ssl.SSLContext | None = None

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client refusing our certificate, or hanging up: the test asserts what it saw

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = super().get_request()
        if self.tls is None:
            return sock, address
        # The handshake happens in the connection's own thread, on its first read.
        return self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), address


class AnsweringServer:
    """Serves ``answer(seen)`` for every request; records what it saw. Use as a context manager."""

    def __init__(self, answer: Callable[[Seen], Answer], *, tls: ssl.SSLContext | None = None) -> None:
        """``tls``: a server context (certificate loaded) to serve ``https``."""
        self._answer = answer
        self.seen: list[Seen] = []
        self.connections = 0
        self._lock = threading.Lock()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                with owner._lock:
                    owner.connections += 1
                    self.connection_number = owner.connections

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
                pass

            def do_GET(self) -> None:  # noqa: N802 - the base class's name
                self._serve()

            do_POST = do_HEAD = do_GET  # noqa: N815

            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                seen = Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()},
                            self.rfile.read(length), self.connection_number)
                with owner._lock:
                    owner.seen.append(seen)
                answer = owner._answer(seen)
                if answer.drop:
                    self.close_connection = True
                    return
                body = answer.content
                headers = {k.lower(): v for k, v in answer.headers.items()}
                if body is None:
                    body = b"" if answer.json is None else json.dumps(answer.json).encode()
                    if answer.json is not None:
                        headers.setdefault("content-type", "application/json")
                self.send_response(answer.status)
                for name, value in headers.items():
                    self.send_header(name, value)
                if answer.chunked:
                    self.send_header("transfer-encoding", "chunked")
                    self.end_headers()
                    half = len(body) // 2
                    for part in (body[:half], body[half:]):
                        if part:  # an empty chunk would end the body
                            self.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
                    self.wfile.write(b"0\r\n\r\n")
                else:
                    if "content-length" in headers:
                        self.close_connection = True
                    else:
                        self.send_header("content-length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                self.wfile.flush()
                if answer.close:
                    self.close_connection = True

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._server.tls = tls
        scheme = "http" if tls is None else "https"
        self.base_url = f"{scheme}://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02},
                                        daemon=True)

    def __enter__(self) -> AnsweringServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 written into ``directory``: (certificate, key)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "answering server")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                       critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "server.pem", directory / "server.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_path.chmod(0o600)
    return cert_path, key_path
