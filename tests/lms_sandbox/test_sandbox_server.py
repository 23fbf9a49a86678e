"""The sandbox LMS over real HTTP on a loopback port."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lms_sandbox import (
    HOSTILE_TITLE,
    Fault,
    FaultMode,
    FaultTable,
    LmsDataError,
    LmsSandbox,
    load_lms_data,
)
from lms_sandbox.data import parse_lms_data

DEMO_WORLD = Path(__file__).resolve().parents[2] / "agentmesh" / "data" / "demo_world.yaml"
# One TLS context for all clients: httpx builds a new one (~80 ms) per client otherwise.
TLS = httpx.create_ssl_context()


ADMIN_TOKEN = "test-admin-token"


@pytest.fixture
def sandbox() -> Iterator[LmsSandbox]:
    server = LmsSandbox(load_lms_data(DEMO_WORLD), admin_token=ADMIN_TOKEN).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def http(sandbox: LmsSandbox) -> Iterator[httpx.Client]:
    """A client that sends the admin token (the data endpoints ignore it)."""
    with httpx.Client(base_url=sandbox.base_url, timeout=5, verify=TLS,
                      headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}) as client:
        yield client


def trainings_path(tenant: str, worker: str) -> str:
    return f"/v1/tenants/{tenant}/workers/{worker}/trainings"


def test_health(http: httpx.Client, sandbox: LmsSandbox) -> None:
    assert http.get("/healthz").json() == {"status": "ok"}
    host, port = sandbox.address
    assert host == "127.0.0.1" and port > 0


def test_trainings(http: httpx.Client) -> None:
    response = http.get(trainings_path("acme", "W-1008"))
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    data = response.json()
    assert data["tenant_id"] == "acme" and data["worker_id"] == "W-1008"
    # The duplicate certificate is served as recorded: twice.
    assert [r["certificate_id"] for r in data["trainings"]] == ["C-NR10-1008", "C-NR10-1008"]


def test_unknown_worker_tenant_and_endpoint(http: httpx.Client) -> None:
    for path in (trainings_path("acme", "W-1011"), trainings_path("umbrella", "W-1001")):
        response = http.get(path)
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "WORKER_NOT_FOUND"
    other = http.get("/v1/anything")
    assert other.status_code == 404
    assert other.json()["error"]["code"] == "NOT_FOUND"
    assert http.post("/v1/anything", json={}).status_code == 404
    assert http.delete("/v1/anything").status_code == 404


def test_admin_faults_lifecycle(http: httpx.Client) -> None:
    listed = http.get("/admin/faults").json()
    configured = {(f["tenant_id"], f["worker_id"]): f["mode"] for f in listed["configured"]}
    assert configured == {("acme", "W-1006"): "timeout", ("acme", "W-1007"): "timeout"}
    assert listed["admin"] == []

    created = http.post("/admin/faults", json={"mode": "5xx", "status": 502, "worker_id": "W-1001"})
    assert created.status_code == 201
    assert created.json()["fault"]["status"] == 502
    response = http.get(trainings_path("acme", "W-1001"))
    assert response.status_code == 502
    assert http.get(trainings_path("acme", "W-1002")).status_code == 200

    assert http.delete("/admin/faults").json() == {"cleared": 1}
    assert http.get(trainings_path("acme", "W-1001")).status_code == 200


def test_a_fault_with_times_applies_that_often_then_removes_itself(http: httpx.Client) -> None:
    created = http.post("/admin/faults", json={"mode": "5xx", "worker_id": "W-1001", "times": 2})
    assert created.status_code == 201 and created.json()["fault"]["times"] == 2
    assert [http.get(trainings_path("acme", "W-1001")).status_code for _ in range(3)] == [503, 503, 200]
    assert http.get("/admin/faults").json()["admin"] == []


def test_times_counts_only_matching_lookups() -> None:
    table = FaultTable()
    table.set(Fault(FaultMode.HTTP_5XX, times=1), worker_id="W-1")
    assert table.lookup("acme", "W-2") is None
    assert table.lookup("acme", "W-1") == Fault(FaultMode.HTTP_5XX, times=1)
    assert table.lookup("acme", "W-1") is None
    table.set(Fault(FaultMode.HTTP_5XX, times=1), worker_id="W-1")
    table.set(Fault(FaultMode.HTTP_5XX), worker_id="W-1")  # replaced by one without times: stays
    assert [table.lookup("acme", "W-1") is not None for _ in range(3)] == [True, True, True]


@pytest.mark.parametrize(
    "payload",
    [
        {"mode": "5xx", "times": -1},
        {"mode": "explode"},
        {"mode": "latency", "latency_ms": -1},
        {"mode": "latency", "latency_ms": "fast"},
        {"mode": "5xx", "status": 404},
        {"mode": "malformed", "kind": "xml"},
        {"mode": "timeout", "colour": "red"},
        {"mode": "timeout", "worker_id": ""},
        ["timeout"],
    ],
)
def test_admin_rejects_bad_faults(http: httpx.Client, payload: Any) -> None:
    response = http.post("/admin/faults", json=payload)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "INVALID_FAULT"
    assert http.get("/admin/faults").json()["admin"] == []


def test_admin_rejects_non_json(http: httpx.Client) -> None:
    response = http.post("/admin/faults", content=b"{not json", headers={"content-type": "x"})
    assert response.status_code == 400


def test_malformed_modes(http: httpx.Client) -> None:
    http.post("/admin/faults", json={"mode": "malformed"})
    raw = http.get(trainings_path("acme", "W-1001"))
    assert raw.status_code == 200
    with pytest.raises(json.JSONDecodeError):
        json.loads(raw.content)
    http.post("/admin/faults", json={"mode": "malformed", "kind": "schema"})
    shaped = http.get(trainings_path("acme", "W-1001")).json()
    assert shaped["trainings"] == "all valid"


def test_oversized_mode_streams_without_length(http: httpx.Client) -> None:
    http.post("/admin/faults", json={"mode": "oversized", "bytes": 300_000})
    response = http.get(trainings_path("acme", "W-1001"))
    assert "content-length" not in response.headers
    assert len(response.content) == 300_000
    assert response.json()["trainings"] == []


def test_hostile_mode_rewrites_text_only(http: httpx.Client) -> None:
    before = http.get(trainings_path("acme", "W-1002")).json()["trainings"]
    http.post("/admin/faults", json={"mode": "hostile", "tenant_id": "acme"})
    after = http.get(trainings_path("acme", "W-1002")).json()["trainings"]
    assert {r["course_title"] for r in after} == {HOSTILE_TITLE}
    for old, new in zip(before, after, strict=True):
        assert {k: v for k, v in old.items() if k not in ("course_title", "issuer")} == {
            k: v for k, v in new.items() if k not in ("course_title", "issuer")
        }
    # Tenant-scoped: globex is untouched.
    globex = http.get(trainings_path("globex", "W-2001")).json()["trainings"]
    assert HOSTILE_TITLE not in {r["course_title"] for r in globex}


def test_latency_mode_answers_normally(http: httpx.Client) -> None:
    http.post("/admin/faults", json={"mode": "latency", "latency_ms": 20})
    assert http.get(trainings_path("acme", "W-1001")).status_code == 200


def test_timeout_mode_never_answers(sandbox: LmsSandbox) -> None:
    with httpx.Client(base_url=sandbox.base_url, timeout=0.2, verify=TLS) as client, pytest.raises(
        httpx.TimeoutException
    ):
        client.get(trainings_path("acme", "W-1006"))


@pytest.mark.parametrize("headers", [
    {},
    {"Authorization": "Bearer wrong"},
    {"Authorization": f"Bearer {ADMIN_TOKEN}x"},
    {"Authorization": ADMIN_TOKEN},
    {"Authorization": f"Basic {ADMIN_TOKEN}"},
    {"Authorization": "Bearer"},
], ids=["none", "wrong", "longer", "no-scheme", "basic", "empty"])
def test_admin_endpoints_require_the_token(sandbox: LmsSandbox, headers: dict[str, str]) -> None:
    with httpx.Client(base_url=sandbox.base_url, timeout=5, verify=TLS, headers=headers) as client:
        for method, path in [("GET", "/admin/faults"), ("POST", "/admin/faults"), ("DELETE", "/admin/faults"),
                             ("GET", "/admin/other"), ("PUT", "/admin/faults"), ("GET", "/%61dmin/faults"),
                             ("GET", "/admin/faults/?x=1")]:
            response = client.request(method, path, json={"mode": "5xx"} if method == "POST" else None)
            assert response.status_code == 401, (method, path)
            assert response.json()["error"]["code"] == "UNAUTHENTICATED"
            assert response.headers["www-authenticate"].startswith("Bearer")
            assert ADMIN_TOKEN not in response.text
        # Nothing was changed, and the data endpoints stay open.
        assert sandbox.faults.snapshot()["admin"] == []
        assert client.get(trainings_path("acme", "W-1001")).status_code == 200


def test_admin_with_the_token(http: httpx.Client) -> None:
    assert http.get("/admin/faults").status_code == 200
    assert http.get("/admin/other").status_code == 404
    assert http.put("/admin/faults").status_code == 405


def test_without_a_token_admin_is_closed_with_a_random_one() -> None:
    server = LmsSandbox(load_lms_data(DEMO_WORLD)).start()
    other = LmsSandbox(load_lms_data(DEMO_WORLD))
    try:
        assert len(server.admin_token) >= 32 and server.admin_token != other.admin_token
        with httpx.Client(base_url=server.base_url, timeout=5, verify=TLS) as client:
            assert client.get("/admin/faults").status_code == 401
            ok = client.get("/admin/faults", headers={"Authorization": f"Bearer {server.admin_token}"})
            assert ok.status_code == 200
    finally:
        server.stop()
        other.stop()
    with pytest.raises(ValueError):
        LmsSandbox(load_lms_data(DEMO_WORLD), admin_token="")


def test_stop_without_start_returns() -> None:
    LmsSandbox(load_lms_data(DEMO_WORLD)).stop()


def test_fault_precedence() -> None:
    table = FaultTable({("acme", "W-1"): Fault(FaultMode.TIMEOUT)})
    lookup = table.lookup
    assert lookup("acme", "W-1") == Fault(FaultMode.TIMEOUT)
    assert lookup("acme", "W-2") is None
    table.set(Fault(FaultMode.LATENCY))
    assert lookup("acme", "W-2") == Fault(FaultMode.LATENCY)
    assert lookup("acme", "W-1") == Fault(FaultMode.LATENCY)  # admin beats configured
    table.set(Fault(FaultMode.HOSTILE), tenant_id="acme")
    assert lookup("acme", "W-1") == Fault(FaultMode.HOSTILE)
    assert lookup("globex", "W-1") == Fault(FaultMode.LATENCY)
    table.set(Fault(FaultMode.HTTP_5XX), worker_id="W-1")
    assert lookup("acme", "W-1") == Fault(FaultMode.HTTP_5XX)
    table.set(Fault(FaultMode.NONE), tenant_id="acme", worker_id="W-1")
    assert lookup("acme", "W-1") is None
    assert table.clear() == 4
    assert lookup("acme", "W-1") == Fault(FaultMode.TIMEOUT)


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        ({"tenants": [{"id": "a", "lms": {"faults": {"W-1": "explode"}}}]},
         "tenants[0].lms.faults.W-1"),
        ({"tenants": [{"id": "a", "lms": {"workers": [{"worker_id": "W-1", "trainings": [{}]}]}}]},
         "tenants[0].lms.workers[0].trainings[0]"),
        ({"tenants": [{"id": "a", "lms": {"workers": [{"trainings": []}]}}]},
         "tenants[0].lms.workers[0]"),
        ({"tenants": [{"name": "no id"}]}, "tenants[0]"),
        ({"tenants": [{"id": "a", "lms": []}]}, "tenants[0].lms"),
    ],
)
def test_data_errors_name_the_path(doc: dict[str, Any], path: str) -> None:
    with pytest.raises(LmsDataError) as info:
        parse_lms_data(doc)
    assert info.value.path == path


def test_data_file_errors(tmp_path: Path) -> None:
    with pytest.raises(LmsDataError):
        load_lms_data(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("tenants: [", encoding="utf-8")
    with pytest.raises(LmsDataError):
        load_lms_data(bad)
    with pytest.raises(LmsDataError):
        parse_lms_data(["not", "a", "world"])


def _raw_get(conn: Any, path: str) -> tuple[int, bytes, str | None]:
    conn.request("GET", path)
    response = conn.getresponse()
    return response.status, response.read(), response.getheader("Connection")


def test_a_connection_is_kept_alive_across_lookups(sandbox: LmsSandbox) -> None:
    import http.client

    conn = http.client.HTTPConnection(*sandbox.address, timeout=5)
    try:
        status, body, _ = _raw_get(conn, trainings_path("acme", "W-1008"))
        assert status == 200 and json.loads(body)["worker_id"] == "W-1008"
        first = conn.sock
        status, body, _ = _raw_get(conn, trainings_path("acme", "W-1011"))
        assert status == 404 and json.loads(body)["error"]["code"] == "WORKER_NOT_FOUND"
        assert conn.sock is first  # the same TCP connection answered both
    finally:
        conn.close()


def test_a_request_whose_body_is_not_read_closes_its_connection(sandbox: LmsSandbox) -> None:
    import http.client

    conn = http.client.HTTPConnection(*sandbox.address, timeout=5)
    try:
        # Refused before its body is read (no admin token): what follows the headers is not a request.
        conn.request("POST", "/admin/faults", body=b'{"mode": "timeout"}',
                     headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        assert response.status == 401 and response.getheader("Connection") == "close"
        response.read()
    finally:
        conn.close()


def test_a_stopped_sandbox_answers_no_kept_alive_connection() -> None:
    import http.client

    server = LmsSandbox(load_lms_data(DEMO_WORLD)).start()
    conn = http.client.HTTPConnection(*server.address, timeout=5)
    try:
        assert _raw_get(conn, trainings_path("acme", "W-1008"))[0] == 200
        server.stop()
        with pytest.raises((http.client.HTTPException, OSError)):
            _raw_get(conn, trainings_path("acme", "W-1008"))
    finally:
        conn.close()
        server.stop()
