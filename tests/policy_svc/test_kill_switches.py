"""The SQLite kill-switch store: persistence, history, validation, and the engine."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from policy_svc.engine import PolicyEngine
from policy_svc.errors import InvalidRequestError, KillSwitchStoreError
from policy_svc.kill_switches import KillSwitchStore
from policy_svc.model import Effect, KillSwitchScope, kill_switch_key, parse_kill_switch_key

from .conftest import with_demo_tenants

OPERATOR = "spiffe://agentmesh.local/client/operator"
T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


class _Clock:
    """A clock that advances one second per reading."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "home" / "data" / "policy.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[KillSwitchStore]:
    with KillSwitchStore(db_path, clock=_Clock()) as opened:
        yield opened


def test_new_store_is_empty_and_creates_its_directory(store: KillSwitchStore, db_path: Path) -> None:
    assert db_path.exists()
    assert store.active() == frozenset()
    assert store.list() == []
    assert store.history() == []


@pytest.mark.parametrize(
    ("scope", "target", "key"),
    [
        (KillSwitchScope.AGENT, "training-agent", "agent:training-agent"),
        (KillSwitchScope.CAPABILITY, "training.external.update", "capability:training.external.update"),
        (KillSwitchScope.TENANT, "acme", "tenant:acme"),
        (KillSwitchScope.PLATFORM, "", "platform"),
    ],
)
def test_each_scope_becomes_its_key(store: KillSwitchStore, scope: KillSwitchScope, target: str, key: str) -> None:
    switch = store.set(scope, target, enabled=True, reason="incident 42", changed_by=OPERATOR)
    assert switch.key == key
    assert store.active() == frozenset({key})
    assert parse_kill_switch_key(key) == (scope, target)
    assert kill_switch_key(scope, target) == key


def test_switch_records_who_why_and_when(store: KillSwitchStore) -> None:
    switch = store.set(
        KillSwitchScope.AGENT,
        "training-agent",
        enabled=True,
        reason=" incident 42 ",
        changed_by=OPERATOR,
    )
    assert switch.reason == "incident 42"
    assert switch.changed_by == OPERATOR
    assert switch.changed_at == T0 + timedelta(seconds=1)
    assert store.list() == [switch]


def test_turning_off_keeps_the_history(store: KillSwitchStore) -> None:
    store.set(KillSwitchScope.AGENT, "training-agent", enabled=True, reason="runaway", changed_by=OPERATOR)
    store.set(
        KillSwitchScope.AGENT,
        "training-agent",
        enabled=False,
        reason="fixed in 1.2.1",
        changed_by="spiffe://agentmesh.local/client/oncall",
    )

    assert store.active() == frozenset()
    assert store.list() == []
    [current] = store.list(include_disabled=True)
    assert (current.enabled, current.reason) == (False, "fixed in 1.2.1")

    history = store.history(KillSwitchScope.AGENT, "training-agent")
    assert [(h.enabled, h.reason, h.changed_by) for h in history] == [
        (True, "runaway", OPERATOR),
        (False, "fixed in 1.2.1", "spiffe://agentmesh.local/client/oncall"),
    ]
    assert history[0].seq < history[1].seq
    assert history[0].changed_at < history[1].changed_at


def test_history_filters(store: KillSwitchStore) -> None:
    store.set(KillSwitchScope.TENANT, "acme", enabled=True, reason="a", changed_by=OPERATOR)
    store.set(KillSwitchScope.TENANT, "globex", enabled=True, reason="b", changed_by=OPERATOR)
    store.set(KillSwitchScope.PLATFORM, "", enabled=True, reason="c", changed_by=OPERATOR)
    assert [h.reason for h in store.history()] == ["a", "b", "c"]
    assert [h.reason for h in store.history(KillSwitchScope.TENANT)] == ["a", "b"]
    assert [h.reason for h in store.history(target="globex")] == ["b"]


def test_switches_survive_reopening(db_path: Path) -> None:
    with KillSwitchStore(db_path) as first:
        first.set(
            KillSwitchScope.CAPABILITY,
            "training.external.update",
            enabled=True,
            reason="LMS writes failing",
            changed_by=OPERATOR,
        )
        first.set(KillSwitchScope.TENANT, "globex", enabled=True, reason="offboarding", changed_by=OPERATOR)
        first.set(KillSwitchScope.TENANT, "globex", enabled=False, reason="back", changed_by=OPERATOR)
        before = first.list(include_disabled=True)

    with KillSwitchStore(db_path) as reopened:
        assert reopened.active() == frozenset({"capability:training.external.update"})
        assert reopened.list(include_disabled=True) == before
        assert len(reopened.history()) == 3


def test_a_restarted_engine_still_obeys_a_switch(db_path: Path, make_request: Any) -> None:
    request = make_request(
        roles=("training-coordinator",),
        capability="training.external.update",
        confirmation_given=True,
    )
    with KillSwitchStore(db_path) as store:
        engine = with_demo_tenants(PolicyEngine.load())
        assert engine.authorize(request, kill_switches=store.active()).effect is Effect.ALLOW
        store.set(
            KillSwitchScope.CAPABILITY,
            "training.external.update",
            enabled=True,
            reason="LMS writes failing",
            changed_by=OPERATOR,
        )

    # "Restart": a new store on the same file, a new engine.
    with KillSwitchStore(db_path) as store:
        engine = with_demo_tenants(PolicyEngine.load())
        decision = engine.authorize(request, kill_switches=store.active())
        assert decision.effect is Effect.DENY
        assert decision.reason_codes == ("kill_switch.capability",)
        read = make_request(roles=("training-coordinator",), capability="training.external.getStatus")
        assert engine.authorize(read, kill_switches=store.active()).effect is Effect.ALLOW


def test_active_sees_changes_made_by_another_process(db_path: Path) -> None:
    with KillSwitchStore(db_path) as reader, KillSwitchStore(db_path) as writer:
        assert reader.active() == frozenset()  # cached now
        writer.set(KillSwitchScope.PLATFORM, "", enabled=True, reason="stop", changed_by=OPERATOR)
        assert reader.active() == frozenset({"platform"})
        writer.set(KillSwitchScope.PLATFORM, "", enabled=False, reason="go", changed_by=OPERATOR)
        assert reader.active() == frozenset()


BAD_INPUT = [
    ("scope", "MISSING_FIELD", KillSwitchScope.UNSPECIFIED, "x", "why", OPERATOR),
    ("scope", "INVALID_FIELD", "AGENT", "x", "why", OPERATOR),
    ("target", "MISSING_FIELD", KillSwitchScope.AGENT, "", "why", OPERATOR),
    ("target", "INVALID_FIELD", KillSwitchScope.PLATFORM, "acme", "why", OPERATOR),
    ("target", "INVALID_FIELD", KillSwitchScope.TENANT, " acme", "why", OPERATOR),
    ("target", "INVALID_FIELD", KillSwitchScope.TENANT, "ac\nme", "why", OPERATOR),
    ("target", "INVALID_FIELD", KillSwitchScope.AGENT, "a" * 257, "why", OPERATOR),
    ("reason", "MISSING_FIELD", KillSwitchScope.AGENT, "x", "", OPERATOR),
    ("reason", "MISSING_FIELD", KillSwitchScope.AGENT, "x", "   ", OPERATOR),
    ("reason", "INVALID_FIELD", KillSwitchScope.AGENT, "x", "w" * 2001, OPERATOR),
    ("changed_by", "MISSING_FIELD", KillSwitchScope.AGENT, "x", "why", ""),
]


@pytest.mark.parametrize(
    ("field", "reason", "scope", "target", "why", "who"),
    BAD_INPUT,
    ids=[f"{row[0]}-{i}" for i, row in enumerate(BAD_INPUT)],
)
def test_bad_input_names_the_field_and_changes_nothing(
    store: KillSwitchStore, field: str, reason: str, scope: Any, target: str, why: str, who: str
) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        store.set(scope, target, enabled=True, reason=why, changed_by=who)
    assert caught.value.field == field
    assert caught.value.reason == reason
    assert store.history() == []
    assert store.active() == frozenset()


def test_enabled_must_be_a_boolean(store: KillSwitchStore) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        store.set(
            KillSwitchScope.AGENT,
            "x",
            enabled=1,  # type: ignore[arg-type]
            reason="why",
            changed_by=OPERATOR,
        )
    assert caught.value.field == "enabled"


def test_unopenable_file_is_a_store_error(tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    with pytest.raises(KillSwitchStoreError) as caught:
        KillSwitchStore(tmp_path / "taken")
    assert caught.value.reason == "KILL_SWITCH_STORE_UNAVAILABLE"


def test_failed_write_leaves_no_partial_change(db_path: Path) -> None:
    with KillSwitchStore(db_path) as store:
        # Sabotage the history table: the current-state write must roll back too.
        conn = sqlite3.connect(db_path)
        conn.execute("DROP TABLE kill_switch_history")
        conn.commit()
        conn.close()
        with pytest.raises(KillSwitchStoreError):
            store.set(KillSwitchScope.AGENT, "x", enabled=True, reason="why", changed_by=OPERATOR)
        assert store.active() == frozenset()


def test_closed_store_reports_a_store_error(db_path: Path) -> None:
    store = KillSwitchStore(db_path)
    store.close()
    with pytest.raises(KillSwitchStoreError):
        store.active()
