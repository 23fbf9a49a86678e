"""The grouping the audit appends and the policy decisions share (agentmesh.call_groups), with a plain
``send`` in place of a service: who goes alone, who goes together, and that every unit gets an answer."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from agentmesh.call_groups import CallGroups, Unit


class Expired(Exception):
    pass


class Failed(Exception):
    pass


class Sends:
    """A ``send`` that records each batch's items; the first ``held`` batches wait for ``release``."""

    def __init__(self, held: int = 0, fail_on: str = "") -> None:
        self.batches: list[list[Any]] = []
        self.held = held
        self.release = threading.Event()
        self.fail_on = fail_on
        self.lock = threading.Lock()
        self.in_send = 0

    def __call__(self, batch: list[Unit[list[Any]]]) -> None:
        with self.lock:
            self.batches.append([x for unit in batch for x in unit.items])
            hold = len(self.batches) <= self.held
            self.in_send += 1
        if hold:
            self.release.wait(5)
        if any(self.fail_on in unit.items for unit in batch):
            raise RuntimeError("the send broke")
        for unit in batch:
            unit.answer.set_result([f"ok:{x}" for x in unit.items])


def _groups(send: Any, **kw: Any) -> CallGroups[list[Any]]:
    return CallGroups(send, name="test", limit=1, senders=1, max_count=kw.pop("max_count", 100),
                      expired=Expired, failed=lambda err: Failed(repr(err)), **kw)


def _until(check: Any) -> None:
    deadline = time.monotonic() + 5
    while not check():
        assert time.monotonic() < deadline
        time.sleep(0.002)


def test_a_unit_alone_is_sent_from_the_callers_own_thread() -> None:
    send = Sends()
    seen: list[str] = []

    def named(batch: list[Unit[list[Any]]]) -> None:
        seen.append(threading.current_thread().name)
        send(batch)

    groups = _groups(named)  # type: ignore[arg-type]
    assert groups.run(Unit.of(["x"], 5)).result(1) == ["ok:x"]
    assert seen == [threading.current_thread().name] and send.batches == [["x"]]


def test_callers_that_wait_while_the_service_is_busy_go_together_from_the_first_ones_thread() -> None:
    sent_on: list[str] = []
    send = Sends(held=1)

    def named(batch: list[Unit[list[Any]]]) -> None:
        sent_on.append(threading.current_thread().name)
        send(batch)

    groups = _groups(named)
    first = threading.Thread(target=lambda: groups.run(Unit.of(["first"], 5)), name="caller-first")
    first.start()
    _until(lambda: send.in_send == 1)
    answers: dict[str, Any] = {}

    def caller(item: str) -> None:
        answers[item] = groups.run(Unit.of([item], 5)).result(0)  # answered by the time run returns

    callers = [threading.Thread(target=caller, args=(f"w{i}",), name=f"caller-w{i}") for i in range(3)]
    for t in callers:
        t.start()
    _until(lambda: groups.waiting == 3)
    send.release.set()
    for t in (first, *callers):
        t.join(5)
    assert answers == {"w0": ["ok:w0"], "w1": ["ok:w1"], "w2": ["ok:w2"]}
    assert send.batches[0] == ["first"] and sorted(send.batches[1]) == ["w0", "w1", "w2"]
    # The batch went from the thread of the caller first in the queue; no sender thread was started.
    assert len(sent_on) == 2 and sent_on[1].startswith("caller-w") and groups.batches == 2
    assert not [t for t in threading.enumerate() if t.name.startswith("test-")]


def test_a_caller_waiting_past_its_deadline_leaves_the_queue_expired() -> None:
    send = Sends(held=1)
    groups = _groups(send)
    first = threading.Thread(target=lambda: groups.run(Unit.of(["first"], 5)))
    first.start()
    _until(lambda: send.in_send == 1)
    with pytest.raises(Expired):
        groups.run(Unit.of(["late"], 0.05)).result(0)
    assert groups.waiting == 0
    send.release.set()
    first.join(5)
    assert send.batches == [["first"]]


def test_what_waits_goes_together_within_the_batch_limits() -> None:
    send = Sends(held=1)
    groups = _groups(send, max_count=3)
    first = Unit.of(["a"], 5)
    groups.submit([first])
    _until(lambda: send.in_send == 1)
    later = [Unit.of([f"b{i}"], 5) for i in range(5)] + [Unit.of(["c1", "c2"], 5)]
    groups.submit(later)
    send.release.set()
    assert [u.answer.result(2) for u in later] == [["ok:b0"], ["ok:b1"], ["ok:b2"], ["ok:b3"], ["ok:b4"],
                                                    ["ok:c1", "ok:c2"]]
    # At most three items a batch, and a unit is never split.
    assert send.batches == [["a"], ["b0", "b1", "b2"], ["b3", "b4"], ["c1", "c2"]]
    assert groups.batches == 4


def test_a_unit_that_waited_past_its_deadline_is_answered_expired_and_not_sent() -> None:
    send = Sends(held=1)
    groups = _groups(send)
    groups.submit([Unit.of(["first"], 5)])
    _until(lambda: send.in_send == 1)
    late = Unit.of(["late"], 0.01)
    groups.submit([late])
    time.sleep(0.05)
    send.release.set()
    with pytest.raises(Expired):
        late.answer.result(2)
    assert send.batches == [["first"]]


def test_a_send_that_raises_leaves_no_caller_without_an_answer() -> None:
    send = Sends(fail_on="boom")
    groups = _groups(send)
    # On the caller's thread (its batch may hold other callers' units): the client's failure is its answer.
    with pytest.raises(Failed, match="the send broke"):
        groups.run(Unit.of(["boom"], 5)).result(1)
    # On a sender thread: every unit of the batch is answered with the client's failure.
    units = [Unit.of(["boom"], 5), Unit.of(["other"], 5)]
    groups.submit(units)
    for unit in units:
        with pytest.raises(Failed, match="the send broke"):
            unit.answer.result(2)
