"""Calls of many threads to one service, carried together: what arrives while calls are in flight goes in one.

A mesh process makes the same kind of call from many threads at once (one per call it serves): its
audit appends (:mod:`agentmesh.audit_appends`), its policy decisions (:mod:`agentmesh.policy_client`).
Each of them sent as an RPC of its own, the Python gRPC stack on both sides is what the machine spends
its time on. :class:`CallGroups` is the part those clients share:

* a caller that waits for its answer (:meth:`CallGroups.run`) and finds fewer than ``limit`` calls in
  flight and nothing waiting sends its unit at once, from its own thread: an idle mesh makes the call
  it made before, under the caller's trace span. Otherwise its unit waits; the first unit waiting is
  sent, by its own caller's thread, as soon as a call in flight ends, together with every unit
  waiting then, up to ``max_count`` items and ``max_size`` bytes (no hand-off to another thread: the
  others' callers are woken with their answers, as a call of their own would wake them);
* a unit queued without waiting (:meth:`CallGroups.submit`, a record sent on ahead) is sent by a
  sender thread (at most ``senders`` of them), with everything else waiting;
* each unit has an answer of its own (a :class:`~concurrent.futures.Future`), which the client's
  ``send`` sets from the service's answer: a caller only ever gets its own result or error;
* a unit whose deadline passed while it waited is answered with ``expired()`` and not sent;
* a ``send`` that raises answers every unit it left unanswered, so no caller is left waiting.

A batch is sent in the context (trace, mesh ids) of its first unit; each item carries its own ids in
its body regardless.
"""

from __future__ import annotations

import contextvars
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

__all__ = ["CallGroups", "Unit"]

A = TypeVar("A")


@dataclass(slots=True)
class Unit(Generic[A]):
    """One caller's items, which go in the same call; its answer is theirs."""

    items: list[Any]
    deadline: float
    """``time.monotonic()`` by which it must have been sent."""
    context: contextvars.Context
    size: int = 0
    """Encoded bytes, for the ``max_size`` of a batch (0 when a client does not count them)."""
    answer: Future[A] = field(default_factory=Future)
    taken: bool = False
    """Taken from the queue into a batch (being sent, or answered)."""

    @classmethod
    def of(cls, items: Sequence[Any], timeout_s: float, *, size: int = 0) -> Unit[A]:
        """The unit of ``items``, due within ``timeout_s``, in the caller's context."""
        return cls(list(items), time.monotonic() + timeout_s, contextvars.copy_context(), size)


class CallGroups(Generic[A]):
    """Units of many callers, sent alone when the service is not busy and together otherwise (see the module).

    ``send(batch)`` makes one call for the units of ``batch`` (in order) and sets each one's answer; it
    runs on a caller's thread or on a sender thread. The sender threads start on the first unit
    queued with :meth:`submit` and are daemons: a process that exits with calls in flight leaves their
    callers without an answer, as a call of their own would.
    """

    def __init__(self, send: Callable[[list[Unit[A]]], None], *, name: str, limit: int, max_count: int,
                 expired: Callable[[], BaseException], failed: Callable[[BaseException], BaseException],
                 senders: int = 1, max_size: int = sys.maxsize) -> None:
        self._send = send
        self._name = name
        self._limit = limit
        self._senders = senders
        self._max_count = max_count
        self._max_size = max_size
        self._expired = expired
        self._failed = failed
        self._queue: deque[Unit[A]] = deque()
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        """Wakes the sender threads: something was queued."""
        self._slot = threading.Condition(self._lock)
        """Wakes the callers waiting to send: a call ended, or their unit was taken."""
        self._threads: list[threading.Thread] = []
        self._in_flight = 0
        self.batches = 0
        """Batches taken so far, alone or together (each one call, unless the client splits a refused one)."""

    @property
    def waiting(self) -> int:
        """Units queued now."""
        with self._lock:
            return len(self._queue)

    def run(self, unit: Unit[A]) -> Future[A]:
        """Sends ``unit`` from this thread, alone when the service is not busy, otherwise once a call in
        flight ends (with the units waiting then) unless another caller's batch took it first; returns
        its answer (set by the time this returns, unless another thread is still sending it)."""
        with self._lock:
            if not self._queue and self._in_flight < self._limit:
                batch = self._start([unit])
            else:
                self._queue.append(unit)
                batch = self._turn(unit)
        if batch:
            self._dispatch_here(batch)
        return unit.answer

    def _turn(self, unit: Unit[A]) -> list[Unit[A]]:
        """Under the lock: waits until ``unit`` is taken by another (``[]``) or is first in the queue with a
        call free, then takes the batch it heads. A unit still waiting at its deadline leaves the queue."""
        while not unit.taken:
            if self._queue[0] is unit and self._in_flight < self._limit:
                return self._start(self._batch())
            left = unit.deadline - time.monotonic()
            if left <= 0:
                self._queue.remove(unit)
                unit.taken = True
                unit.answer.set_exception(self._expired())
                self._slot.notify_all()  # the unit after it may be first now
                return []
            self._slot.wait(left)
        return []

    def _start(self, batch: list[Unit[A]]) -> list[Unit[A]]:
        """Under the lock: ``batch`` counts as one call in flight."""
        for unit in batch:
            unit.taken = True
        self._in_flight += 1
        self.batches += 1
        return batch

    def _batch(self) -> list[Unit[A]]:
        """Under the lock: the queue's first unit and those after it that fit with it."""
        batch = [self._queue.popleft()]
        size, count = batch[0].size, len(batch[0].items)
        while (self._queue and count + len(self._queue[0].items) <= self._max_count
               and size + self._queue[0].size <= self._max_size):
            size += self._queue[0].size
            count += len(self._queue[0].items)
            batch.append(self._queue.popleft())
        return batch

    def _dispatch_here(self, batch: list[Unit[A]]) -> None:
        """Sends a batch from the caller's thread (with other callers' units, perhaps): a ``send`` that raises
        answers each unit it left unanswered with ``failed(err)``, as on a sender thread."""
        try:
            self._dispatch(batch)
        except BaseException as err:  # noqa: BLE001 - no caller may be left without an answer
            for unit in batch:
                if not unit.answer.done():
                    unit.answer.set_exception(self._failed(err))
        finally:
            self._ended()

    def _ended(self) -> None:
        with self._lock:
            self._in_flight -= 1
            self._slot.notify_all()

    def submit(self, units: Sequence[Unit[A]]) -> None:
        """Queues units without waiting, all at once (a sender thread takes them, together within the
        batch's limits, with whatever else waits then)."""
        with self._lock:
            if len(self._threads) < self._senders:
                thread = threading.Thread(target=self._send_forever, name=f"{self._name}-{len(self._threads)}",
                                          daemon=True)
                self._threads.append(thread)
                thread.start()
            self._queue.extend(units)
            self._work.notify()

    def _take(self) -> list[Unit[A]]:
        with self._lock:
            while not self._queue:
                self._work.wait()
            return self._start(self._batch())

    def _send_forever(self) -> None:
        while True:
            batch = self._take()
            try:
                self._dispatch(batch)
            except BaseException as err:  # noqa: BLE001 - no caller may be left without an answer
                for unit in batch:
                    if not unit.answer.done():
                        unit.answer.set_exception(self._failed(err))
            finally:
                self._ended()

    def _dispatch(self, batch: list[Unit[A]]) -> None:
        now = time.monotonic()
        live = []
        for unit in batch:
            if unit.deadline <= now:
                unit.answer.set_exception(self._expired())
            else:
                live.append(unit)
        if live:
            self._send(live)
