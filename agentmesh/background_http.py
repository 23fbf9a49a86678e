"""A stdlib ``ThreadingHTTPServer`` bound at once and served from a daemon thread (the sandbox servers).

Binding happens in the constructor (``port=0`` picks a free port, :attr:`address` tells which),
serving starts with :meth:`start` (a thread) or :meth:`serve_forever` (the calling thread), and
:meth:`stop` sets :attr:`stopping` — which handlers that wait (latency, hangs) watch — before it
shuts the server down, so no request keeps it alive. A server that keeps connections alive
(:class:`KeptAliveHttpServer`) has its open connections closed by :meth:`stop` too: a stopped
server answers nobody, not even a client that still holds a connection to it.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
from http.server import ThreadingHTTPServer
from typing import Any, Self


class KeptAliveHttpServer(ThreadingHTTPServer):
    """A threading HTTP server that knows its open connections, so that stopping it closes them.

    With HTTP/1.1 keep-alive a handler thread serves one connection until the client closes it;
    without this, a stopped server would go on answering on connections opened before.
    """

    daemon_threads = True
    # Quick restarts in tests must not fail on a socket in TIME_WAIT.
    allow_reuse_address = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that resets a kept-alive connection between requests has only ended it.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)

    def close_connections(self) -> None:
        """Ends every open connection (a handler waiting for the next request sees it closed)."""
        with self._open_lock:
            open_now = list(self._open)
        for sock in open_now:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class BackgroundHttpServer:
    """Lifecycle of one bound HTTP server; subclasses give the thread name and the base URL's path."""

    thread_name = "http-server"
    url_path = ""
    """Appended to ``http://host:port`` in :attr:`base_url` (e.g. ``/v1``)."""

    def __init__(self, server: ThreadingHTTPServer) -> None:
        self.stopping = threading.Event()
        self._http = server
        self._thread: threading.Thread | None = None
        self._serving = False

    @property
    def address(self) -> tuple[str, int]:
        """The bound (host, port)."""
        host, port = self._http.server_address[:2]
        return str(host), int(port)

    @property
    def base_url(self) -> str:
        """``http://host:port`` plus :attr:`url_path` (IPv6 hosts in brackets)."""
        host, port = self.address
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{port}{self.url_path}"

    def start(self) -> Self:
        """Serve in a daemon thread; returns ``self``."""
        # Set before the thread runs so an immediate stop() still shuts it down.
        self._serving = True
        self._thread = threading.Thread(target=self.serve_forever, name=self.thread_name, daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in the calling thread until :meth:`stop` is called from another."""
        self._serving = True
        # A short poll interval makes stop() prompt (the default waits 0.5 s).
        self._http.serve_forever(poll_interval=0.05)

    def stop(self) -> None:
        """Stop serving, release waiting requests and close the socket."""
        self.stopping.set()
        if self._serving:
            # shutdown() waits for serve_forever to return; on a server that never served it would wait for ever.
            self._http.shutdown()
        self._http.server_close()
        if isinstance(self._http, KeptAliveHttpServer):
            self._http.close_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
