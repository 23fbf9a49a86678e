"""The kept-alive HTTP client against a real server: reuse, stale connections, framing, errors."""

from __future__ import annotations

import base64
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

from agentmesh.http_client import HttpError, HttpPool, HttpTimeout
from tests.http_answers import Answer, AnsweringServer, Seen, self_signed_certificate


@contextmanager
def serving(answer: Callable[[Seen], Answer]) -> Iterator[tuple[AnsweringServer, HttpPool]]:
    """A scripted server answering ``answer(seen)`` and a pool to it, both stopped at the end."""
    with AnsweringServer(answer) as server, closing(HttpPool(server.base_url)) as pool:
        yield server, pool


def read_all(pool: HttpPool, method: str = "GET", path: str = "/x", **kwargs: object) -> tuple[int, bytes]:
    with pool.request(method, path, timeout=2.0, **kwargs) as response:  # type: ignore[arg-type]
        return response.status, b"".join(response.chunks())


@pytest.fixture
def ok_server() -> Iterator[AnsweringServer]:
    with AnsweringServer(lambda seen: Answer(200, json={"path": seen.path})) as server:
        yield server


def test_requests_share_one_kept_connection(ok_server: AnsweringServer) -> None:
    with closing(HttpPool(ok_server.base_url + "/api/")) as pool:
        for _ in range(5):
            assert read_all(pool) == (200, b'{"path": "/api/x"}')
    assert ok_server.connections == 1
    assert [s.connection for s in ok_server.seen] == [1] * 5
    assert ok_server.seen[0].headers["accept-encoding"] == "identity"


def test_parallel_requests_each_get_a_connection_and_keep_it(ok_server: AnsweringServer) -> None:
    pool = HttpPool(ok_server.base_url)
    gate = threading.Barrier(4)
    results: list[tuple[int, bytes]] = []

    def call() -> None:
        gate.wait()
        for _ in range(10):
            results.append(read_all(pool))

    threads = [threading.Thread(target=call) for _ in range(4)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        pool.close()
    assert len(results) == 40 and all(r == (200, b'{"path": "/x"}') for r in results)
    assert 1 <= ok_server.connections <= 4


def test_a_connection_the_server_closed_is_not_used_again() -> None:
    with serving(lambda seen: Answer(200, json={}, close=True)) as (server, pool):
        for _ in range(3):
            # A POST, which is never sent twice: each must find its idle connection dead before use.
            assert read_all(pool, "POST", body=b"{}") == (200, b"{}")
            time.sleep(0.05)  # the server's close has reached us: the idle socket reads EOF
    assert server.connections == 3


def second_request_dropped(seen: Seen, first: dict[int, bool]) -> Answer:
    """Answers the first request on each connection; drops the second, as a server timing out idlers does."""
    if first.setdefault(seen.connection, True):
        first[seen.connection] = False
        return Answer(200, json={"n": seen.connection})
    return Answer(200, drop=True)


def test_a_get_dropped_on_a_reused_connection_is_sent_once_more() -> None:
    first: dict[int, bool] = {}
    with serving(lambda seen: second_request_dropped(seen, first)) as (server, pool):
        assert read_all(pool) == (200, b'{"n": 1}')
        assert read_all(pool) == (200, b'{"n": 2}')
    assert [s.connection for s in server.seen] == [1, 1, 2]


def test_a_post_dropped_on_a_reused_connection_is_never_sent_twice() -> None:
    first: dict[int, bool] = {}
    with serving(lambda seen: second_request_dropped(seen, first)) as (server, pool):
        assert read_all(pool, "POST", body=b"{}") == (200, b'{"n": 1}')
        with pytest.raises(HttpError) as info:
            read_all(pool, "POST", body=b"{}")
        assert not isinstance(info.value, HttpTimeout)
    assert [(s.method, s.connection, s.body) for s in server.seen] == [("POST", 1, b"{}"), ("POST", 1, b"{}")]


def test_a_get_dropped_on_a_new_connection_is_an_error() -> None:
    with serving(lambda seen: Answer(200, drop=True)) as (server, pool), pytest.raises(HttpError):
        read_all(pool)
    assert len(server.seen) == 1


def test_chunked_answers_are_decoded_and_the_connection_kept() -> None:
    with serving(lambda seen: Answer(200, content=b"0123456789abcdef", chunked=True)) as (server, pool):
        assert read_all(pool) == (200, b"0123456789abcdef")
        assert read_all(pool) == (200, b"0123456789abcdef")
    assert server.connections == 1


def test_an_answer_left_unread_closes_its_connection(ok_server: AnsweringServer) -> None:
    with closing(HttpPool(ok_server.base_url)) as pool:
        with pool.request("GET", "/x", timeout=2.0) as response:
            assert response.status == 200  # body never read
        assert read_all(pool)[0] == 200
    assert ok_server.connections == 2


def test_an_error_inside_the_request_closes_its_connection(ok_server: AnsweringServer) -> None:
    with closing(HttpPool(ok_server.base_url)) as pool:
        with pytest.raises(RuntimeError), pool.request("GET", "/x", timeout=2.0):
            raise RuntimeError("the caller gave up")
        assert read_all(pool)[0] == 200
    assert ok_server.connections == 2


def test_a_silent_server_is_a_timeout() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()  # accepts (the kernel does), never answers
        pool = HttpPool(f"http://127.0.0.1:{listener.getsockname()[1]}")
        started = time.monotonic()
        with pytest.raises(HttpTimeout), pool.request("GET", "/x", timeout=0.2):
            pass
        assert time.monotonic() - started < 2.0
        pool.close()


def test_nothing_listening_is_an_error_naming_the_cause() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    pool = HttpPool(f"http://127.0.0.1:{port}")
    with pytest.raises(HttpError) as info:
        read_all(pool)
    assert isinstance(info.value.__cause__, ConnectionRefusedError)


def test_user_and_password_in_the_url_are_basic_auth_and_not_shown(ok_server: AnsweringServer) -> None:
    url = ok_server.base_url.replace("http://", "http://svc%40acme:s%3Acret@")
    with closing(HttpPool(url, headers={"X-Extra": "1"})) as pool:
        read_all(pool, headers={"X-Request": "2"})
    headers = ok_server.seen[0].headers
    assert headers["authorization"] == "Basic " + base64.b64encode(b"svc@acme:s:cret").decode()
    assert headers["x-extra"] == "1" and headers["x-request"] == "2"
    assert pool.url("/v1/x") == ok_server.base_url + "/v1/x"


@pytest.mark.parametrize("url", ["127.0.0.1:80", "ftp://host/", "http:///path"])
def test_only_absolute_http_urls(url: str) -> None:
    with pytest.raises(ValueError, match="absolute http"):
        HttpPool(url)


def test_https_needs_a_context() -> None:
    with pytest.raises(ValueError, match="ssl_context"):
        HttpPool("https://lms.example")


def test_a_body_shorter_than_its_length_is_an_error() -> None:
    answer = Answer(200, content=b"short", headers={"Content-Length": "50"})
    with serving(lambda seen: answer) as (server, pool), pytest.raises(HttpError, match="45 bytes before"):
        read_all(pool)


@pytest.fixture(scope="module")
def server_certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed_certificate(tmp_path_factory.mktemp("https"))


@pytest.fixture
def https_server(server_certificate: tuple[Path, Path]) -> Iterator[AnsweringServer]:
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(*server_certificate)
    with AnsweringServer(lambda seen: Answer(200, json={"path": seen.path}), tls=tls) as server:
        yield server


def test_https_against_a_private_ca_keeps_its_connection(
    https_server: AnsweringServer, server_certificate: tuple[Path, Path]
) -> None:
    context = ssl.create_default_context(cafile=server_certificate[0])
    with closing(HttpPool(https_server.base_url, ssl_context=context)) as pool:
        assert read_all(pool) == (200, b'{"path": "/x"}')
        assert read_all(pool) == (200, b'{"path": "/x"}')
    assert https_server.connections == 1


def test_https_with_a_certificate_nobody_vouches_for_is_refused(https_server: AnsweringServer) -> None:
    pool = HttpPool(https_server.base_url, ssl_context=ssl.create_default_context())
    with pytest.raises(HttpError) as info:
        read_all(pool)
    assert isinstance(info.value.__cause__, ssl.SSLCertVerificationError)
    assert https_server.seen == []
