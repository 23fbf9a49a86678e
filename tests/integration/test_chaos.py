"""Chaos: ``kill -9`` of random roles while callers drive analyses and releases; then the world must be true.

One mesh under ``agentmesh up --detach --ports-auto`` (its supervising loop restarts what is
killed). Four caller threads run analyses and releases the way a real client does: every
Analyze carries a ``client_request_id`` and is retried with it while the mesh answers
UNAVAILABLE or DEADLINE_EXCEEDED; a release is driven to its end (bob approves the review,
alice confirms with her token), re-reading the execution after each failed step. A chaos
thread kills a random role process (audit, policy, capability, each specialist, the
supervisor, the sandbox LMS) every 1–3 s for ``CHAOS_S`` seconds. Callers stop starting new
work when the chaos stops and finish what they started. Once every process is SERVING
again and every execution has ended, the test checks:

* every execution a caller saw has ended, and a retried Analyze was the same execution;
* end states are true: an action that SUCCEEDED left its permit RELEASED, every permit that
  is RELEASED now has the execution that released it (SUCCEEDED, verified), and a permit
  whose release did not succeed is as it was (PENDING_RELEASE);
* every RELEASED permit's execution has its approval (REVIEW_DECIDED) and the requester's
  confirmation (CONFIRMATION_GIVEN) in the audit log;
* no idempotency key is left IN_FLIGHT;
* every process's audit outbox is delivered, ``agentmesh audit verify`` passes, and each
  execution's trail is complete (EXECUTION_STARTED, EXECUTION_FINISHED, and TASK_FINISHED for
  every TASK_DELEGATED; a resumed execution may delegate a task twice).

The run is seeded: the seed is printed (``chaos seed N``) and ``AGENTMESH_CHAOS_SEED=N``
replays the same kill schedule and caller choices (thread timing still varies).
``AGENTMESH_CHAOS_SECONDS`` changes how long the chaos lasts.

The PostgreSQL variant runs the same body with the mesh on ``AGENTMESH_TEST_DATABASE_URL``
(CI sets it) and two supervisor replicas, one of which is killed first.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from agentmesh import config, errors, launcher
from agentmesh.config import MeshConfig
from agentmesh.launcher import demo_world
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import decision_center_service_pb2 as dc_pb2
from agentmesh.v1 import supervisor_service_pb2 as pb
from capability_svc.idempotency import IdempotencyStore, owner_alive
from capability_svc.internal_runtime import InternalStore

from .conftest import PG_URL, agentmesh_cli, fresh_database
from .test_analysis_e2e import audit_records, supervisor, token
from .test_release_e2e import center

pytestmark = pytest.mark.integration

CALLERS = 4
CHAOS_S = float(os.environ.get("AGENTMESH_CHAOS_SECONDS", "35"))
FINISH_S = 45.0
"""How long callers may take, after the chaos, to finish what they started."""
SETTLE_S = 30.0
CLONES = 60
"""Permits like WP-10231 (all valid) added to the world: each is released at most once."""
FAILING = ("WP-10241", "WP-10244")
"""Releases that fail verification (lost, half-applied write): the permit must stay PENDING_RELEASE."""
ANALYSES = ("WP-10231", "WP-10232", "WP-10233", "WP-10234", "WP-10235")
TRANSIENT = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
AWAITING = (pb.EXECUTION_STATUS_AWAITING_REVIEW, pb.EXECUTION_STATUS_AWAITING_CONFIRMATION)
ALICE = ("permit-manager",)
BOB = ("reviewer",)


def _seed() -> int:
    text = os.environ.get("AGENTMESH_CHAOS_SEED", "")
    return int(text) if text else random.SystemRandom().randrange(2**31)


# ------------------------------------------------------------------ the mesh


def _chaos_world(path: Path) -> list[str]:
    """The demo world plus CLONES copies of WP-10231 (WP-31001...); returns the clones' ids."""
    world = yaml.safe_load(demo_world().read_text())
    acme = next(t for t in world["tenants"] if t["id"] == "acme")
    template = next(p for p in acme["permits"] if p["id"] == "WP-10231")
    ids = []
    for n in range(CLONES):
        pid = f"WP-{31001 + n}"
        clone = json.loads(json.dumps(template, default=str))
        clone["id"] = pid
        for i, risk in enumerate(clone.get("risks", [])):
            risk["id"] = f"R-{31001 + n}-{i + 1}"
        for i, checklist in enumerate(clone.get("checklists", [])):
            checklist["id"] = f"CL-{31001 + n}-{i + 1}"
        acme["permits"].append(clone)
        ids.append(pid)
    path.write_text(yaml.safe_dump(world, sort_keys=False, allow_unicode=True))
    return ids


@dataclass
class ChaosMesh:
    cfg: MeshConfig
    clones: list[str]
    postgres: bool = False


def _start(tmp: Path, settings: dict[str, Any]) -> Iterator[ChaosMesh]:
    home = tmp / "home"
    home.mkdir()
    if settings:
        (home / "config.yaml").write_text(yaml.safe_dump(settings))
    result = agentmesh_cli(home, "up", "--detach", "--ports-auto", "--json")
    cfg = config.load(home=str(home), environ={})
    try:
        assert result.returncode == 0, result.stderr
        world = tmp / "chaos-world.yaml"
        clones = _chaos_world(world)
        loaded = agentmesh_cli(home, "data", "load", str(world))
        assert loaded.returncode == 0, loaded.stderr
        _wait("the mesh SERVING after the world load", lambda: _serving(cfg), 30)
        yield ChaosMesh(cfg, clones, postgres="database_url" in settings)
    finally:
        launcher.down(cfg)


@pytest.fixture
def sqlite_mesh(tmp_path: Path) -> Iterator[ChaosMesh]:
    yield from _start(tmp_path, {})


@pytest.fixture
def postgres_mesh(tmp_path: Path) -> Iterator[ChaosMesh]:
    if not PG_URL:
        pytest.skip("AGENTMESH_TEST_DATABASE_URL is not set (CI sets it; scripts/postgres start)")
    yield from _start(tmp_path, {"database_url": fresh_database(), "supervisor_replicas": 2})


def _wait(what: str, cond: Callable[[], Any], timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = cond()
        if value:
            return value
        assert time.monotonic() < deadline, f"not within {timeout_s:g} s: {what}"
        time.sleep(0.2)


def _serving(cfg: MeshConfig) -> bool:
    return launcher.healthy(launcher.status(cfg))


def _status_text(cfg: MeshConfig) -> str:
    return agentmesh_cli(cfg.home, "status", timeout=60).stdout


# ------------------------------------------------------------------ what the callers saw


@dataclass
class Seen:
    """Everything the callers saw and did, shared between threads."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    executions: set[str] = field(default_factory=set)
    by_request: dict[str, set[str]] = field(default_factory=dict)
    release_of: dict[str, str] = field(default_factory=dict)
    """execution id → the permit whose release it asked for."""
    unfinished: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def saw(self, crid: str, execution_id: str, permit: str | None) -> None:
        if not execution_id:
            return
        with self.lock:
            self.executions.add(execution_id)
            self.by_request.setdefault(crid, set()).add(execution_id)
            if permit:
                self.release_of[execution_id] = permit

    def count(self, what: str) -> None:
        with self.lock:
            self.counts[what] = self.counts.get(what, 0) + 1

    def odd(self, text: str) -> None:
        with self.lock:
            self.unexpected.append(text)


def _execution_id_of(err: grpc.RpcError) -> str:
    """The execution id a failed Analyze had already sent (initial metadata), if any."""
    try:
        metadata = err.initial_metadata() or ()  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - a call that never started has none
        return ""
    return next((v for k, v in metadata if k == "agentmesh-execution-id"), "")


class Pool:
    """Permits to release: each clone once; the failing ones again and again, one caller at a time."""

    def __init__(self, clones: list[str]) -> None:
        self._lock = threading.Lock()
        self._clones = list(clones)
        self._failing = list(FAILING)

    def take(self, rng: random.Random) -> str | None:
        with self._lock:
            if self._failing and rng.random() < 0.15:
                return self._failing.pop(rng.randrange(len(self._failing)))
            return self._clones.pop(0) if self._clones else None

    def give_back(self, permit: str) -> None:
        if permit in FAILING:
            with self._lock:
                self._failing.append(permit)


class Caller:
    """One client thread: analyses and releases, retried like a real client."""

    def __init__(self, cm: ChaosMesh, index: int, seed: int, seen: Seen, pool: Pool,
                 stop_starting: threading.Event, give_up_at: list[float]) -> None:
        self.cfg = cm.cfg
        self.index = index
        self.rng = random.Random(seed * 100 + index)
        self.seed = seed
        self.seen = seen
        self.pool = pool
        self.stop_starting = stop_starting
        self.give_up_at = give_up_at
        self.alice = token(self.cfg, user="alice", roles=ALICE)
        self.bob = token(self.cfg, user="bob", roles=BOB)
        self.stub = supervisor(self.cfg)
        self.center = center(self.cfg)
        self.n = 0

    def late(self) -> bool:
        return bool(self.give_up_at) and time.monotonic() > self.give_up_at[0]

    def pause(self) -> None:
        time.sleep(self.rng.uniform(0.2, 0.5))

    def run(self) -> None:
        try:
            while not self.stop_starting.is_set():
                permit = self.pool.take(self.rng) if self.rng.random() < 0.6 else None
                if permit is not None:
                    try:
                        self.work(f"Analyze permit {permit} and release it if everything is fine", permit)
                    finally:
                        self.pool.give_back(permit)
                else:
                    target = self.rng.choice(ANALYSES)
                    self.work(f"Analyze permit {target} and tell me if it can be released", None)
        except Exception as err:  # noqa: BLE001 - reported by the test, with the seed
            self.seen.odd(f"caller {self.index} crashed: {type(err).__name__}: {err}")

    def work(self, text: str, permit: str | None) -> None:
        self.n += 1
        crid = f"chaos-{self.seed}-{self.index}-{self.n}"
        request = pb.AnalyzeRequest(user_assertion=self.alice, tenant_id="acme", request_text=text,
                                    client_request_id=crid)
        execution_id = ""
        while not execution_id:
            if self.late():
                self.seen.unfinished.append(f"{crid}: Analyze never answered ({text})")
                return
            try:
                ex = self.stub.Analyze(request, timeout=20).execution
                execution_id = ex.execution_id
            except grpc.RpcError as err:
                self.seen.saw(crid, _execution_id_of(err), permit)
                execution_id = _execution_id_of(err)
                if err.code() not in TRANSIENT:
                    got = errors.from_rpc_error(err)
                    self.seen.odd(f"{crid}: Analyze answered {got.code.name} {got.reason}: {got.message}")
                    return
                self.seen.count("analyze retried")
                self.pause()
        self.seen.saw(crid, execution_id, permit)
        self.drive(crid, execution_id)

    def get(self, execution_id: str) -> pb.Execution | None:
        try:
            return self.stub.GetExecution(pb.GetExecutionRequest(user_assertion=self.alice,
                                                                 execution_id=execution_id), timeout=10).execution
        except grpc.RpcError as err:
            if err.code() not in TRANSIENT:
                got = errors.from_rpc_error(err)
                self.seen.odd(f"{execution_id}: GetExecution answered {got.code.name} {got.reason}: {got.message}")
                raise
            return None

    def drive(self, crid: str, execution_id: str) -> None:
        """Approves and confirms until the execution ends (or the caller runs out of time)."""
        while True:
            if self.late():
                self.seen.unfinished.append(f"{crid}: {execution_id} still going when the callers had to stop")
                return
            ex = self.get(execution_id)
            if ex is None or ex.status == pb.EXECUTION_STATUS_RUNNING:
                self.pause()
                continue
            if ex.status == pb.EXECUTION_STATUS_AWAITING_REVIEW:
                self.approve(ex)
            elif ex.status == pb.EXECUTION_STATUS_AWAITING_CONFIRMATION:
                self.confirm(ex)
            else:
                return

    def _refused(self, what: str, ex: pb.Execution, err: grpc.RpcError, settled: tuple[str, ...]) -> None:
        if err.code() in TRANSIENT:
            self.seen.count(f"{what} retried")
            self.pause()
            return
        got = errors.from_rpc_error(err)
        if got.reason in settled:  # an earlier try went through; the answer was lost
            self.seen.count(f"{what} already done")
            return
        self.seen.odd(f"{ex.execution_id}: {what} answered {got.code.name} {got.reason}: {got.message}")
        raise err

    def approve(self, ex: pb.Execution) -> None:
        try:
            reviews = self.center.ListReviews(dc_pb2.ListReviewsRequest(
                user_assertion=self.bob, execution_id=ex.execution_id), timeout=10).reviews
            if not reviews:
                self.pause()
                return
            self.center.SubmitReviewDecision(dc_pb2.SubmitReviewDecisionRequest(
                user_assertion=self.bob, review_id=reviews[0].review_id, decision=dc_pb2.REVIEW_DECISION_APPROVE,
                reason="evidence checked"), timeout=20)
        except grpc.RpcError as err:
            self._refused("approve", ex, err, ("REVIEW_CLOSED",))

    def confirm(self, ex: pb.Execution) -> None:
        if not ex.action.confirmation_token:
            self.seen.odd(f"{ex.execution_id}: AWAITING_CONFIRMATION without a token for its requester")
            raise AssertionError("no token")
        try:
            self.stub.ConfirmAction(pb.ConfirmActionRequest(
                user_assertion=self.alice, execution_id=ex.execution_id,
                confirmation_token=ex.action.confirmation_token, capability_id=ex.action.capability_id,
                resource_id=ex.action.resource_id), timeout=30)
        except grpc.RpcError as err:
            self._refused("confirm", ex, err, ("CONFIRMATION_ALREADY_USED", "CONFIRMATION_NOT_PENDING"))


# ------------------------------------------------------------------ chaos


def _pids(cfg: MeshConfig) -> dict[str, int]:
    """Each role's current pid, for the roles that are running now."""
    return {p.name: p.pid for p in launcher.read_state(cfg)
            if p.pid and p.state == "running" and launcher.pid_alive(p.pid)}


def _chaos(cfg: MeshConfig, rng: random.Random, until: float, kills: list[str], first: str | None,
           stop: threading.Event) -> None:
    roles = sorted(p.name for p in launcher.read_state(cfg))
    started = time.monotonic()
    while not stop.is_set():
        stop.wait(rng.uniform(1.0, 3.0))
        if stop.is_set() or time.monotonic() >= until:
            return
        role = first if first and not kills else rng.choice(roles)
        pid = _pids(cfg).get(role)
        if pid is None:
            kills.append(f"{time.monotonic() - started:5.1f}s {role}: not running, skipped")
            continue
        try:
            os.kill(pid, signal.SIGKILL)
            kills.append(f"{time.monotonic() - started:5.1f}s {role} (pid {pid})")
        except ProcessLookupError:
            kills.append(f"{time.monotonic() - started:5.1f}s {role}: gone already")


# ------------------------------------------------------------------ reading the end state


def _permits(cfg: MeshConfig, ids: list[str]) -> dict[str, str]:
    store = InternalStore(cfg.mesh_home.data / "internal.db").scope("acme")
    out = {}
    for pid in ids:
        permit = store.get_permit(pid)
        assert permit is not None, pid
        out[pid] = permit.status
    return out


def _outbox_pending(cfg: MeshConfig) -> dict[str, int]:
    """Records each process's audit outbox still holds (read-only; the owning process keeps it open)."""
    out = {}
    for path in sorted(cfg.mesh_home.data.glob("*-audit-outbox.db")):
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            out[path.name] = int(conn.execute("SELECT count(*) FROM outbox").fetchone()[0])
        except sqlite3.OperationalError as err:
            if "no such table" not in str(err):
                raise
            out[path.name] = 0
        finally:
            conn.close()
    return out


def _in_flight_keys(cm: ChaosMesh) -> list[tuple[str, str, str, str, bool]]:
    """IN_FLIGHT idempotency keys as (tenant, capability, key, owner, owner alive)."""
    store = IdempotencyStore(cm.cfg.mesh_home.data / "idempotency.db", owner="test:0:reader",
                             url=cm.cfg.database_url if cm.postgres else None)
    try:
        return [(*row, owner_alive(row[3], store.owner)) for row in store.in_flight()]
    finally:
        store.close()


def _name(enum: Any, value: int) -> str:
    return str(enum.Name(value))


# ------------------------------------------------------------------ the test body


def run_chaos(cm: ChaosMesh, *, first_kill: str | None = None) -> None:
    cfg = cm.cfg
    seed = _seed()
    print(f"chaos seed {seed} (replay: AGENTMESH_CHAOS_SEED={seed}); chaos {CHAOS_S:g} s, {CALLERS} callers")
    began = time.monotonic()
    tracked = [*cm.clones, *FAILING, "WP-10231", "WP-10233", "WP-10235"]
    before = _permits(cfg, tracked)
    assert set(before.values()) == {"PENDING_RELEASE"}, before

    seen = Seen()
    pool = Pool(cm.clones)
    stop_starting = threading.Event()
    stop_chaos = threading.Event()
    give_up_at: list[float] = []
    kills: list[str] = []
    callers = [Caller(cm, i, seed, seen, pool, stop_starting, give_up_at) for i in range(CALLERS)]
    threads = [threading.Thread(target=c.run, name=f"caller-{c.index}", daemon=True) for c in callers]
    chaos_until = time.monotonic() + CHAOS_S
    chaos = threading.Thread(target=_chaos, args=(cfg, random.Random(seed), chaos_until, kills, first_kill,
                                                  stop_chaos), name="chaos", daemon=True)
    for t in (*threads, chaos):
        t.start()
    try:
        chaos.join(timeout=CHAOS_S + 5)
    finally:
        stop_chaos.set()
        stop_starting.set()
        give_up_at.append(time.monotonic() + FINISH_S)
    for t in threads:
        t.join(timeout=FINISH_S + 15)
    chaos_done = time.monotonic()
    story = (f"seed {seed}\nkills:\n  " + "\n  ".join(kills) + f"\ncounts: {seen.counts}\n")
    print(story)
    assert not any(t.is_alive() for t in threads), f"callers did not stop\n{story}"

    # The mesh comes back by itself, and every execution ends.
    try:
        _wait("every process SERVING again", lambda: _serving(cfg), SETTLE_S)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{_status_text(cfg)}\n{story}") from None
    reader = callers[0]
    final: dict[str, pb.Execution] = {}

    def all_ended() -> bool:
        for execution_id in sorted(seen.executions - final.keys()):
            ex = reader.get(execution_id)
            if ex is None or ex.status == pb.EXECUTION_STATUS_RUNNING:
                return False
            final[execution_id] = ex
        return True

    try:
        _wait("every execution ended", all_ended, SETTLE_S)
    except AssertionError as err:
        running = sorted(seen.executions - final.keys())
        raise AssertionError(f"{err}: {running}\n{story}") from None
    settled = time.monotonic()

    releases = {e: p for e, p in seen.release_of.items()}
    lines = [f"{e} {p if (p := releases.get(e)) else '-':9} {_name(pb.ExecutionStatus, ex.status)} "
             f"{_name(pb.ActionState, ex.action.state) if ex.HasField('action') else '-'} {ex.action.reason[:120]}"
             for e, ex in sorted(final.items()) if e in releases]
    tally: dict[str, int] = {}
    for ex in final.values():
        tally[_name(pb.ExecutionStatus, ex.status)] = tally.get(_name(pb.ExecutionStatus, ex.status), 0) + 1
    story += f"executions by status: {tally}\nreleases:\n  " + "\n  ".join(lines) + "\n"
    print(f"{len(final)} executions, {len(releases)} releases; chaos+finish {chaos_done - began:.1f} s, "
          f"settled {settled - chaos_done:.1f} s")

    assert not seen.unexpected, "unexpected answers:\n  " + "\n  ".join(seen.unexpected) + f"\n{story}"
    assert not seen.unfinished, "callers could not finish:\n  " + "\n  ".join(seen.unfinished) + f"\n{story}"
    assert final, f"no execution at all\n{story}"
    # A retried Analyze is the same execution.
    doubled = {crid: ids for crid, ids in seen.by_request.items() if len(ids) > 1}
    assert not doubled, f"one client_request_id, several executions: {doubled}\n{story}"
    # Every execution ended; none waits (the callers finished what they started).
    waiting = {e: _name(pb.ExecutionStatus, ex.status) for e, ex in final.items() if ex.status in AWAITING}
    assert not waiting, f"executions left waiting: {waiting}\n{story}"

    # End states are true.
    after = _permits(cfg, tracked)
    succeeded: dict[str, list[str]] = {}
    for execution_id, permit in releases.items():
        ex = final[execution_id]
        if ex.HasField("action") and ex.action.state == pb.ACTION_STATE_SUCCEEDED:
            assert ex.action.verified and ex.status == pb.EXECUTION_STATUS_SUCCEEDED, (execution_id, story)
            succeeded.setdefault(permit, []).append(execution_id)
    for permit, ids in succeeded.items():
        assert after[permit] == "RELEASED", f"{ids} say {permit} was released; it is {after[permit]}\n{story}"
        assert len(ids) == 1, f"{permit} released by several executions: {ids}\n{story}"
    false_ends = {p: s for p, s in after.items() if s != "PENDING_RELEASE" and p not in succeeded}
    assert not false_ends, (f"permits changed with no execution saying it released them: {false_ends} "
                            f"(executions for them: {[(e, p) for e, p in releases.items() if p in false_ends]})"
                            f"\n{story}")
    assert not set(succeeded) & set(FAILING), f"a release that cannot verify succeeded\n{story}"

    # Each released permit has its approval and its confirmation in the log.
    deadline = time.monotonic() + 20
    while True:
        pending = _outbox_pending(cfg)
        if not any(pending.values()) or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert not any(pending.values()), f"audit outboxes not delivered: {pending}\n{story}"
    trails = {e: audit_records(cfg, execution_id=e) for e in final}
    for permit, (execution_id,) in succeeded.items():
        records = trails[execution_id]
        approved = [r for r in records if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_REVIEW_DECIDED
                    and r.outcome == audit_pb2.AUDIT_OUTCOME_SUCCESS]
        confirmed = [r for r in records if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_CONFIRMATION
                     and r.outcome == audit_pb2.AUDIT_OUTCOME_SUCCESS and "CONFIRMATION_GIVEN" in r.reason_codes]
        assert approved and confirmed, (f"{permit} RELEASED by {execution_id} without its "
                                        f"{'approval' if not approved else 'confirmation'} record\n{story}")

    # No idempotency key is left in flight.
    stuck = _in_flight_keys(cm)
    assert not stuck, f"idempotency keys left IN_FLIGHT (tenant, capability, key, owner, alive): {stuck}\n{story}"

    # The log verifies, and each execution's trail is complete.
    verify = agentmesh_cli(cfg.home, "audit", "verify", timeout=120)
    assert verify.returncode == 0, f"audit verify: {verify.stdout[-3000:]}{verify.stderr[-2000:]}\n{story}"
    incomplete: list[str] = []
    for execution_id, records in sorted(trails.items()):
        kinds = {r.event_type for r in records}
        for needed in (audit_pb2.AUDIT_EVENT_TYPE_EXECUTION_STARTED, audit_pb2.AUDIT_EVENT_TYPE_EXECUTION_FINISHED):
            if needed not in kinds:
                incomplete.append(f"{execution_id}: no {_name(audit_pb2.AuditEventType, needed)}")
        delegated = {r.task_id for r in records if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_TASK_DELEGATED}
        finished = {r.task_id for r in records if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED}
        if delegated - finished:
            incomplete.append(f"{execution_id}: delegated, never finished: {sorted(delegated - finished)}")
        ran = {r.task_id for r in final[execution_id].results if r.task_id}
        if ran - delegated:
            incomplete.append(f"{execution_id}: results of tasks never delegated: {sorted(ran - delegated)}")
    assert not incomplete, "incomplete trails:\n  " + "\n  ".join(incomplete) + f"\n{story}"
    print(f"checks {time.monotonic() - settled:.1f} s; whole run {time.monotonic() - began:.1f} s")


def test_chaos_kill_9_of_every_role_leaves_a_true_and_complete_record(sqlite_mesh: ChaosMesh) -> None:
    run_chaos(sqlite_mesh)


def test_chaos_on_postgresql_with_a_supervisor_replica_killed(postgres_mesh: ChaosMesh) -> None:
    replicas = sorted(p.name for p in launcher.read_state(postgres_mesh.cfg) if p.name.startswith("supervisor"))
    assert len(replicas) >= 2, f"two supervisor replicas expected, the mesh runs {replicas}"
    run_chaos(postgres_mesh, first_kill=replicas[0])


__all__ = ["run_chaos"]

