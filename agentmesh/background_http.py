"""A stdlib ``ThreadingHTTPServer`` bound at once and served from a daemon thread (the sandbox servers).

Binding happens in the constructor (``port=0`` picks a free port, :attr:`address` tells which),
serving starts with :meth:`start` (a thread) or :meth:`serve_forever` (the calling thread), and
:meth:`stop` sets :attr:`stopping` — which handlers that wait (latency, hangs) watch — before it
shuts the server down, so no request keeps it alive.
"""

from __future__ import annotations

import threading
from http.server import ThreadingHTTPServer
from typing import Self


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
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
