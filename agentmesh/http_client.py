"""A kept-alive HTTP/1.1 client on the standard library, for the mesh's calls out of process.

The capability service's gateway to the LMS and the model gateway's chat backends
make one small request per lookup or completion on connections they keep. On
kept connections ``http.client`` costs its caller a quarter of what httpx does
per request (about 0.1 against 0.4 CPU-ms on this machine class), and these
requests lie on every analysis' path, so :class:`HttpPool` keeps
``http.client`` connections itself:

* one pool per base URL, thread-safe; a request takes an idle connection or
  opens one, and gives it back only once its answer was read to the end and the
  server did not say it would close it;
* an idle connection that has become readable (the server closed it, or sent
  something unasked) is dropped before use, and a GET or HEAD that fails on a
  reused connection before any answer arrived is sent once more on a new one (a
  server may close a kept connection at any moment); a POST is never sent twice;
* one timeout per request, for the connect and for each read (callers bound a
  whole answer themselves, as a server trickling bytes never trips a read
  timeout);
* no redirects followed, no content decoding (``Accept-Encoding: identity``);
* a user and password in the URL are sent as Basic authentication, as curl
  and httpx do, and never shown in :meth:`HttpPool.url`.

Errors, all :class:`HttpError`:

    HttpError            the request could not be made or its answer not read
    └── HttpTimeout      a connect or a read took longer than the timeout
"""

from __future__ import annotations

import base64
import functools
import http.client
import select
import ssl
import threading
import urllib.parse
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import certifi

__all__ = ["HttpError", "HttpPool", "HttpResponse", "HttpTimeout", "default_ssl_context"]

_IDEMPOTENT = frozenset({"GET", "HEAD"})
_READ_SIZE = 64 * 1024


@functools.cache
def default_ssl_context() -> ssl.SSLContext:
    """The verifying context for an ``https`` server without a CA of its own: certifi's bundle.

    Building one loads the bundle (~80 ms); this one, shared and never changed, serves the process.
    """
    return ssl.create_default_context(cafile=certifi.where())


class HttpError(Exception):
    """The request could not be sent or its answer not read (refused, reset, TLS, protocol)."""

    @property
    def cause(self) -> str:
        """What failed underneath, e.g. ``ConnectionRefusedError`` or ``SSLCertVerificationError``."""
        return type(self.__cause__ if self.__cause__ is not None else self).__name__


class HttpTimeout(HttpError):
    """A connect or a read took longer than the request's timeout."""


class HttpResponse:
    """An answer being read: status and headers at once, the body by :meth:`chunks`."""

    def __init__(self, response: http.client.HTTPResponse) -> None:
        self._response = response
        self.status: int = response.status
        """The HTTP status code."""

    def header(self, name: str, default: str = "") -> str:
        """One header's value (case-insensitive name); ``default`` when absent."""
        value = self._response.getheader(name)
        return default if value is None else value

    @property
    def content_encoding(self) -> str:
        """The body's ``Content-Encoding``, lower case; ``identity`` when none is named (the body as sent)."""
        return self.header("content-encoding", "identity").strip().lower() or "identity"

    def chunks(self) -> Iterator[bytes]:
        """The body as it arrives (chunked transfer decoded), each read bounded by the timeout.

        Raises:
            HttpTimeout: a read took longer than the timeout.
            HttpError: the connection broke or the framing is wrong.
        """
        response = self._response
        while True:
            try:
                chunk = response.read1(_READ_SIZE)
                if not chunk:
                    if response.length:
                        raise HttpError(f"the connection closed {response.length} bytes before the body's end")
                    # Marks the exchange complete (read1 does not once the length is reached),
                    # so that the connection may carry the next request.
                    response.read()
                    return
            except TimeoutError as err:
                raise HttpTimeout("no answer bytes within the timeout") from err
            except (OSError, http.client.HTTPException) as err:
                raise HttpError(f"the answer could not be read: {type(err).__name__}") from err
            yield chunk

    @property
    def complete(self) -> bool:
        """Whether the whole body was read (the connection may then carry another request)."""
        return self._response.isclosed()


class HttpPool:
    """Kept-alive connections to one base URL (see the module docstring). Thread-safe."""

    def __init__(
        self,
        base_url: str,
        *,
        headers: Mapping[str, str] | None = None,
        ssl_context: ssl.SSLContext | None = None,
        max_idle: int = 16,
    ) -> None:
        """Prepare the pool; nothing connects until the first request.

        Args:
            base_url: ``http://`` or ``https://`` root; a request's path is appended to its path.
            headers: Sent with every request (a request's own headers win).
            ssl_context: The verifying context for ``https`` (required there; unused for ``http``).
            max_idle: Connections kept open between requests; more are closed after use.

        Raises:
            ValueError: not an absolute http(s) URL, or ``https`` without a context.
        """
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an absolute http(s) URL: {base_url!r}")
        if parts.scheme == "https" and ssl_context is None:
            raise ValueError("an https base URL needs an ssl_context")
        netloc = parts.netloc.rpartition("@")[2]
        self.base_url = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", "")).rstrip("/")
        """The base URL without any user or password."""
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._prefix = parts.path.rstrip("/")
        self._headers = {"Accept-Encoding": "identity"}
        if parts.username is not None:
            user = urllib.parse.unquote(parts.username)
            password = urllib.parse.unquote(parts.password or "")
            token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
            self._headers["Authorization"] = f"Basic {token}"
        self._headers.update(headers or {})
        self._context = ssl_context
        self._max_idle = max_idle
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._closed = False

    def url(self, path: str) -> str:
        """The absolute URL a request for ``path`` goes to."""
        return f"{self.base_url}{path}"

    def close(self) -> None:
        """Closes the idle connections; connections in use close when their request ends."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    @contextmanager
    def request(
        self,
        method: str,
        path: str,
        *,
        timeout: float,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Iterator[HttpResponse]:
        """Send one request and yield its answer once the status line and headers arrived.

        The connection goes back to the pool only if the body was read to the end.

        Raises:
            HttpTimeout: the connect or a read took longer than ``timeout``.
            HttpError: the request could not be sent or the answer not read.
        """
        sent_headers = {**self._headers, **dict(headers or {})}
        target = f"{self._prefix}{path}"
        conn, reused = self._take(timeout)
        try:
            try:
                response = self._exchange(conn, method, target, body, sent_headers)
            except HttpError as err:
                conn.close()
                if not reused or method not in _IDEMPOTENT or isinstance(err, HttpTimeout):
                    raise
                # A kept connection the server closed between our check and our
                # request: nothing was answered, so the GET is sent again, once.
                conn = self._connect(timeout)
                response = self._exchange(conn, method, target, body, sent_headers)
            answer = HttpResponse(response)
            yield answer
        except BaseException:
            conn.close()
            raise
        if answer.complete and not response.will_close:
            self._give_back(conn)
        else:
            conn.close()

    def _take(self, timeout: float) -> tuple[http.client.HTTPConnection, bool]:
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._connect(timeout), False
            if conn.sock is not None and not _readable(conn.sock):
                conn.sock.settimeout(timeout)
                conn.timeout = timeout
                return conn, True
            conn.close()

    def _connect(self, timeout: float) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout, context=self._context)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _give_back(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < self._max_idle:
                self._idle.append(conn)
                return
        conn.close()

    @staticmethod
    def _exchange(
        conn: http.client.HTTPConnection,
        method: str,
        target: str,
        body: bytes | None,
        headers: dict[str, str],
    ) -> http.client.HTTPResponse:
        try:
            conn.request(method, target, body=body, headers=headers)
            return conn.getresponse()
        except TimeoutError as err:
            raise HttpTimeout("no answer within the timeout") from err
        except (OSError, http.client.HTTPException) as err:
            raise HttpError(f"the request failed: {type(err).__name__}") from err


def _readable(sock: object) -> bool:
    """Whether an idle connection's socket has something to read: EOF or bytes nobody asked for."""
    poller = select.poll()
    poller.register(sock, select.POLLIN | select.POLLERR | select.POLLHUP)  # type: ignore[arg-type]
    return bool(poller.poll(0))
