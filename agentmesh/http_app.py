"""A small HTTP server for the mesh's browser-facing processes (the web console, the dev IdP).

Standard library only (``ThreadingHTTPServer``, one thread per connection, like
the sandbox LMS): an *app* is a function from :class:`Request` to
:class:`Response`. The server parses the query, cookies and url-encoded form
bodies (at most :data:`MAX_FORM_BYTES`; anything else is refused before the app
sees it), adds the security headers every answer carries (a strict
Content-Security-Policy with no inline script, no framing, no sniffing, no
referrer, no caching), and streams a response whose ``stream`` is set
(server-sent events), closing the stream when the browser goes away.
"""

from __future__ import annotations

import contextlib
import http.cookies
import logging
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)

MAX_FORM_BYTES = 64 * 1024
"""The largest request body taken (url-encoded forms only)."""

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'")
"""The Content-Security-Policy of every answer unless the response sets its own."""

SECURITY_HEADERS = (
    ("Content-Security-Policy", CSP),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-store"),
    ("Cross-Origin-Opener-Policy", "same-origin"),
)


@dataclass
class Request:
    """One parsed request."""

    method: str
    path: str
    query: dict[str, str]
    """The first value of each query parameter."""
    headers: Message
    cookies: dict[str, str]
    form: dict[str, str] = field(default_factory=dict)
    """The first value of each field of an url-encoded POST body."""

    def header(self, name: str) -> str:
        """A request header, or ``""``."""
        return str(self.headers.get(name, ""))


@dataclass
class Response:
    """What the app answers. ``stream`` (an iterator of chunks) is written as it comes."""

    status: int = 200
    body: bytes = b""
    content_type: str = "text/html; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)
    stream: Iterator[bytes] | None = None

    @classmethod
    def redirect(cls, location: str, status: int = 303) -> Response:
        """A redirect (303 See Other by default: the browser follows with a GET)."""
        return cls(status, b"", "text/plain; charset=utf-8", [("Location", location)])

    @classmethod
    def text(cls, status: int, text: str) -> Response:
        """A plain-text answer."""
        return cls(status, text.encode(), "text/plain; charset=utf-8")

    def set_cookie(self, name: str, value: str, *, max_age: int | None = None, path: str = "/",
                   same_site: str = "Strict", secure: bool = False) -> None:
        """Adds a ``Set-Cookie``: always HttpOnly; ``max_age=0`` removes it."""
        parts = [f"{name}={value}", f"Path={path}", "HttpOnly", f"SameSite={same_site}"]
        if max_age is not None:
            parts.append(f"Max-Age={max_age}")
        if secure:
            parts.append("Secure")
        self.headers.append(("Set-Cookie", "; ".join(parts)))


App = Callable[[Request], Response]


def _first(pairs: dict[str, list[str]]) -> dict[str, str]:
    return {k: v[0] for k, v in pairs.items() if v}


def parse_cookies(header: str) -> dict[str, str]:
    """The cookies of a ``Cookie`` header; a malformed header counts as none."""
    jar: http.cookies.SimpleCookie = http.cookies.SimpleCookie()
    try:
        jar.load(header)
    except http.cookies.CookieError:
        return {}
    return {k: m.value for k, m in jar.items()}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    app: App
    name: str


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.0"

    @property
    def server_version(self) -> str:  # type: ignore[override]
        return self.server.name

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        # Never the query string: it carries sign-in codes and states.
        line = format % args
        if getattr(self, "path", "") and "?" in self.path:
            line = line.replace(self.path, self.path.split("?", 1)[0] + "?…")
        log.info("%s %s", self.address_string(), line)

    def _send(self, response: Response) -> None:
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        own = {name.lower() for name, _ in response.headers}
        for name, value in SECURITY_HEADERS:
            if name.lower() not in own:  # a response may narrow or widen one for itself (e.g. form-action)
                self.send_header(name, value)
        for name, value in response.headers:
            self.send_header(name, value)
        if response.stream is None:
            self.send_header("Content-Length", str(len(response.body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(response.body)
            return
        self.end_headers()
        self.wfile.flush()
        stream = response.stream
        try:
            for chunk in stream:
                self.wfile.write(chunk)
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            pass  # the browser went away
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()

    def _handle(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        form: dict[str, str] = {}
        if self.command == "POST":
            length = self.headers.get("Content-Length", "")
            if not length.isdigit() or int(length) > MAX_FORM_BYTES:
                self._send(Response.text(413 if length.isdigit() else 411,
                                         f"a form body of at most {MAX_FORM_BYTES} bytes, with Content-Length"))
                return
            kind = self.headers.get("Content-Type", "").split(";")[0].strip().lower()
            body = self.rfile.read(int(length))
            if body and kind != "application/x-www-form-urlencoded":
                self._send(Response.text(415, "only application/x-www-form-urlencoded bodies are taken"))
                return
            try:
                form = _first(urllib.parse.parse_qs(body.decode("utf-8"), keep_blank_values=True,
                                                    max_num_fields=200))
            except (UnicodeDecodeError, ValueError):
                self._send(Response.text(400, "the form body is not UTF-8 url-encoded data"))
                return
        try:
            query = _first(urllib.parse.parse_qs(url.query, keep_blank_values=True, max_num_fields=50))
        except ValueError:
            self._send(Response.text(400, "too many query parameters"))
            return
        request = Request(self.command, urllib.parse.unquote(url.path) or "/", query, self.headers,
                          parse_cookies(self.headers.get("Cookie", "")), form)
        try:
            response = self.server.app(request)
        except Exception:  # noqa: BLE001 - one failing request must not stop the server
            log.exception("%s %s failed", self.command, url.path)
            response = Response.text(500, "internal error (logged)")
        self._send(response)

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self._handle()

    def do_HEAD(self) -> None:  # noqa: N802 - stdlib naming
        self._handle()

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        self._handle()


class HttpServer:
    """An app served on ``host:port`` (0 picks a free port) on a thread of its own."""

    def __init__(self, app: App, host: str, port: int, *, name: str = "agentmesh") -> None:
        self._server = _Server((host, port), _Handler)
        self._server.app = app
        self._server.name = name
        self.host, self.port = host, int(self._server.server_address[1])
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``http://HOST:PORT``."""
        return f"http://{self.host}:{self.port}"

    def start(self) -> HttpServer:
        """Serves on a background thread."""
        self._thread = threading.Thread(target=self._server.serve_forever, name="http", daemon=True)
        self._thread.start()
        return self

    @property
    def alive(self) -> bool:
        """Whether the serving thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        """Stops serving and closes the socket."""
        with contextlib.suppress(Exception):
            self._server.shutdown()
        self._server.server_close()
