"""Model budgets (PRD §51): tokens, calls and cost per task and per execution, reserved before a call.

The limits come signed in the task's grant (``TaskGrant.budget`` for the task,
``TaskGrant.execution_budget`` for the whole execution; the supervisor derives
them from the tenant's limits and the request's budget). A grant without a
model budget can make no model call: nothing here is unlimited by default.

Before a call, :meth:`BudgetLedger.reserve` checks — in one transaction, so
concurrent calls of one execution cannot both take the last tokens — that the
call's maximum (the prompt estimate plus the most answer tokens, at the model's
prices, and one call) fits the task's and the execution's limits beside what
they have spent and what other calls have reserved, and reserves it; else
:class:`BudgetExhausted` names the limit (``MAX_MODEL_CALLS_EXCEEDED``,
``MAX_TOKENS_EXCEEDED``, ``MAX_MODEL_COST_EXCEEDED``), the scope and the
figures. After the call :meth:`BudgetLedger.settle` replaces the reservation by
what the backend reported (the reservation itself when it reported nothing, or
when the call timed out: what the backend spent is then unknown, and the larger
figure is never invented away). A reservation a crash left behind stays
counted. The ledger also keeps the executions whose grants were revoked.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from agentmesh import database
from agentmesh.revocation import Revocation, widened
from agentmesh.v1 import common_pb2

__all__ = ["Budget", "BudgetExhausted", "BudgetLedger", "Reservation", "Revocation", "Spent"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS model_spent (
    scope TEXT NOT NULL, key TEXT NOT NULL, tokens BIGINT NOT NULL, calls BIGINT NOT NULL, cost {real} NOT NULL,
    PRIMARY KEY (scope, key));
CREATE TABLE IF NOT EXISTS model_reservations (
    id TEXT PRIMARY KEY, execution_id TEXT NOT NULL, task_key TEXT NOT NULL, tokens BIGINT NOT NULL,
    cost {real} NOT NULL, created_at {real} NOT NULL);
CREATE INDEX IF NOT EXISTS model_reservations_execution ON model_reservations (execution_id);
CREATE TABLE IF NOT EXISTS model_revocations (
    execution_id TEXT PRIMARY KEY, issued_before {real}, reason TEXT NOT NULL, revoked_at {real} NOT NULL);
"""


@dataclass(frozen=True)
class Budget:
    """One scope's model limits."""

    max_tokens: int
    max_calls: int
    max_cost: float

    @classmethod
    def of(cls, budget: common_pb2.AgentBudget) -> Budget | None:
        """The model limits of an ``AgentBudget``; None when any is missing (0: no model use at all)."""
        if budget.max_tokens <= 0 or budget.max_model_calls <= 0 or not budget.max_model_cost > 0:
            return None
        return cls(int(budget.max_tokens), int(budget.max_model_calls), float(budget.max_model_cost))


@dataclass(frozen=True)
class Spent:
    """What a scope has used (settled and reserved)."""

    tokens: int = 0
    calls: int = 0
    cost: float = 0.0


@dataclass(frozen=True)
class Reservation:
    """A call's maximum, held until it is settled."""

    id: str
    execution_id: str
    task_key: str
    tokens: int
    cost: float


class BudgetExhausted(Exception):
    """A call would exceed a limit; nothing was reserved."""

    def __init__(self, reason: str, scope: str, field: str, limit: float, observed: float) -> None:
        super().__init__(f"the call would use {observed:g} of {field} = {limit:g} ({scope})")
        self.reason = reason
        self.scope = scope
        self.field = field
        self.limit = limit
        self.observed = observed


_CHECKS = (("calls", "MAX_MODEL_CALLS_EXCEEDED", "max_model_calls"),
           ("tokens", "MAX_TOKENS_EXCEEDED", "max_tokens"),
           ("cost", "MAX_MODEL_COST_EXCEEDED", "max_model_cost"))


class BudgetLedger:
    """Spent and reserved model usage per execution and task, and revocations (SQLite or PostgreSQL)."""

    def __init__(self, path: Path, *, url: str | None = None) -> None:
        """``url``: a PostgreSQL database to share (``database_url``); else the SQLite file ``path``."""
        self._db = database.open_database(url if database.is_postgresql(url) else None, default=path,
                                          synchronous="NORMAL")
        self._db.create_schema(SCHEMA)
        self.path = path

    def close(self) -> None:
        self._db.close()

    def _spent(self, scope: str, key: str) -> Spent:
        row = self._db.execute("SELECT tokens, calls, cost FROM model_spent WHERE scope = ? AND key = ?",
                               (scope, key)).fetchone()
        column = "execution_id" if scope == "execution" else "task_key"
        held = self._db.execute(f"SELECT COALESCE(SUM(tokens), 0), COUNT(*), COALESCE(SUM(cost), 0) "
                                f"FROM model_reservations WHERE {column} = ?", (key,)).fetchone()
        base = Spent(int(row[0]), int(row[1]), float(row[2])) if row else Spent()
        return Spent(base.tokens + int(held[0]), base.calls + int(held[1]), base.cost + float(held[2]))

    def spent(self, execution_id: str, task_id: str | None = None) -> Spent:
        """What an execution (or one of its tasks) has used, reservations included."""
        with self._db.transaction():
            if task_id is None:
                return self._spent("execution", execution_id)
            return self._spent("task", f"{execution_id}/{task_id}")

    def reserve(self, execution_id: str, task_id: str, *, task: Budget, execution: Budget, tokens: int,
                cost: float) -> Reservation:
        """Reserves one call's maximum, or raises :class:`BudgetExhausted` (task limits checked first)."""
        task_key = f"{execution_id}/{task_id}"
        with self._db.transaction():
            for scope, key, budget in (("task", task_key, task), ("execution", execution_id, execution)):
                spent = self._spent(scope, key)
                wanted = {"calls": spent.calls + 1, "tokens": spent.tokens + tokens, "cost": spent.cost + cost}
                limits = {"calls": budget.max_calls, "tokens": budget.max_tokens, "cost": budget.max_cost}
                for name, reason, field in _CHECKS:
                    if wanted[name] > limits[name] + (1e-12 if name == "cost" else 0):
                        where = "budget" if scope == "task" else "execution_budget"
                        raise BudgetExhausted(reason, scope, f"grant.{where}.{field}", limits[name], wanted[name])
            reservation = Reservation(f"res-{uuid.uuid4().hex}", execution_id, task_key, tokens, cost)
            self._db.execute("INSERT INTO model_reservations (id, execution_id, task_key, tokens, cost, created_at) "
                             "VALUES (?, ?, ?, ?, ?, ?)", (reservation.id, execution_id, task_key, tokens, cost,
                                                          time.time()))
        return reservation

    def settle(self, reservation: Reservation, *, tokens: int, cost: float) -> None:
        """Replaces a reservation by what the call used (one call, ``tokens``, ``cost``)."""
        with self._db.transaction():
            gone = self._db.execute("DELETE FROM model_reservations WHERE id = ?", (reservation.id,)).rowcount
            if not gone:
                return  # settled already
            for scope, key in (("execution", reservation.execution_id), ("task", reservation.task_key)):
                self._db.execute(
                    "INSERT INTO model_spent (scope, key, tokens, calls, cost) VALUES (?, ?, ?, 1, ?) "
                    "ON CONFLICT (scope, key) DO UPDATE SET tokens = model_spent.tokens + excluded.tokens, "
                    "calls = model_spent.calls + 1, cost = model_spent.cost + excluded.cost",
                    (scope, key, tokens, cost))

    def release(self, reservation: Reservation) -> None:
        """Drops a reservation whose call was never sent (nothing spent)."""
        self._db.execute("DELETE FROM model_reservations WHERE id = ?", (reservation.id,))

    def revoke(self, execution_id: str, issued_before: dt.datetime | None, reason: str,
               now: dt.datetime) -> Revocation:
        """Revokes an execution's grants (all when ``issued_before`` is None); widens an earlier revocation."""
        with self._db.transaction():
            current = self.revocation(execution_id)
            before = widened(current.issued_before if current else None, current is not None, issued_before)
            self._db.execute(
                "INSERT INTO model_revocations (execution_id, issued_before, reason, revoked_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (execution_id) DO UPDATE SET issued_before = excluded.issued_before, "
                "reason = excluded.reason, revoked_at = excluded.revoked_at",
                (execution_id, before.timestamp() if before else None, reason, now.timestamp()))
        return Revocation(execution_id, before, reason)

    def revocation(self, execution_id: str) -> Revocation | None:
        """The revocation in force for an execution, or None."""
        row = self._db.execute("SELECT issued_before, reason FROM model_revocations WHERE execution_id = ?",
                               (execution_id,)).fetchone()
        if row is None:
            return None
        before = dt.datetime.fromtimestamp(float(row[0]), dt.UTC) if row[0] is not None else None
        return Revocation(execution_id, before, str(row[1]))
