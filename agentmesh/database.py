"""One small database layer for the stores: SQLite (the embedded default) or PostgreSQL, chosen by URL.

``open_database(url, default=path)``: ``sqlite:///path``, a plain path or no URL at
all open a SQLite file with :mod:`sqlite3` (WAL, and the ``synchronous`` level
the store asks for, exactly as the stores did before); ``postgresql://…`` (or
``postgres://…``) opens a PostgreSQL connection with psycopg 3 (autocommit).

The stores write one SQL dialect: ``?`` placeholders (translated to ``%s`` for
PostgreSQL), ``INSERT … ON CONFLICT …`` for upserts (both backends), and a
schema given per backend where the types differ (:data:`BLOB` is ``BLOB`` on
SQLite and ``BYTEA`` on PostgreSQL; write ``{blob}`` / ``{real}`` in a schema and
:meth:`Database.create_schema` fills it in). :meth:`Database.transaction` runs
statements atomically (``BEGIN IMMEDIATE`` on SQLite, a transaction on
PostgreSQL). Every call is serialised by one lock per :class:`Database`
(one connection each), as the stores did with their own locks.

:meth:`Database.now_sql` is the database's clock in seconds since the epoch: leases
compare against it, so replicas on hosts whose clocks differ still agree.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final, Literal, Protocol

Backend = Literal["sqlite", "postgresql"]
SQLITE: Final[Backend] = "sqlite"
POSTGRESQL: Final[Backend] = "postgresql"

_TYPES = {SQLITE: {"blob": "BLOB", "real": "REAL"}, POSTGRESQL: {"blob": "BYTEA", "real": "DOUBLE PRECISION"}}
_NOW = {SQLITE: "((julianday('now') - 2440587.5) * 86400.0)",
        POSTGRESQL: "EXTRACT(EPOCH FROM clock_timestamp())::DOUBLE PRECISION"}


class DatabaseError(Exception):
    """The database cannot be opened or used; the message says which and why (never a password)."""


class Cursor(Protocol):
    """What a statement returns (the part of the DB-API the stores use)."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


def is_postgresql(url: str | None) -> bool:
    """Whether ``url`` names a PostgreSQL database."""
    return bool(url) and str(url).split(":", 1)[0] in ("postgresql", "postgres")


def redact(url: str) -> str:
    """The URL without its password (for messages and logs)."""
    return re.sub(r"(://[^:/@]*):[^@]*@", r"\1:***@", url)


def sqlite_path(url: str) -> Path:
    """The file a ``sqlite:///path`` URL or a plain path names."""
    if url.startswith("sqlite:///"):
        return Path(url[len("sqlite://"):])
    if url.startswith("sqlite://"):
        raise DatabaseError(f"{url}: a SQLite URL is sqlite:///PATH (three slashes)")
    return Path(url)


def _translate(sql: str) -> str:
    """``?`` placeholders → ``%s`` (a literal ``%`` doubled); the stores never put ``?`` inside literals."""
    return sql.replace("%", "%%").replace("?", "%s")


class Database:
    """One connection to SQLite or PostgreSQL, used from many threads under one lock."""

    def __init__(self, backend: Backend, conn: Any, description: str, url: str = "") -> None:
        self.backend: Backend = backend
        self._conn = conn
        self._url = url
        self.description = description
        self._lock = threading.RLock()
        self._in_tx = False

    @property
    def postgresql(self) -> bool:
        """Whether this is a PostgreSQL database."""
        return self.backend == POSTGRESQL

    def now_sql(self) -> str:
        """An SQL expression: the database's clock, seconds since the epoch."""
        return _NOW[self.backend]

    def create_schema(self, schema: str) -> None:
        """Runs a schema script (``;``-separated statements) with ``{blob}`` and ``{real}`` filled in."""
        script = schema.format(**_TYPES[self.backend])
        with self._lock:
            if self.backend == SQLITE:
                self._conn.executescript(script)
                return
            with self.transaction():
                for statement in (s.strip() for s in script.split(";")):
                    if statement:
                        self._execute(statement, ())

    def _execute(self, sql: str, params: Sequence[Any]) -> Cursor:
        if self.backend == SQLITE:
            cursor: Cursor = self._conn.execute(sql, tuple(params))
            return cursor
        self._reconnect_if_broken()
        return self._conn.execute(_translate(sql), tuple(params))  # type: ignore[no-any-return]

    def _reconnect_if_broken(self) -> None:
        if self._conn.closed and not self._in_tx:
            self._conn = _connect_postgresql(self._url)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        """Runs one statement (``?`` placeholders) and returns its cursor (rows already fetched for SQLite)."""
        with self._lock:
            try:
                cursor = self._execute(sql, params)
                if self.backend == POSTGRESQL and cursor.rowcount >= 0:
                    return _Fetched(cursor)
                return cursor
            except Exception as err:
                if self.backend == POSTGRESQL:
                    _close_if_broken(self._conn)
                raise _wrap(err, self) from err

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Database]:
        """Statements inside run atomically (and serialised with every other use of this database)."""
        with self._lock:
            if self._in_tx:  # nested: part of the outer transaction
                yield self
                return
            if self.backend == SQLITE:
                self._conn.execute("BEGIN IMMEDIATE")
                self._in_tx = True
                try:
                    yield self
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
                finally:
                    self._in_tx = False
                self._conn.execute("COMMIT")
                return
            self._reconnect_if_broken()
            self._in_tx = True
            try:
                with self._conn.transaction():
                    yield self
            except Exception as err:
                _close_if_broken(self._conn)
                raise _wrap(err, self) from err
            finally:
                self._in_tx = False

    def close(self) -> None:
        """Closes the connection."""
        with self._lock:
            self._conn.close()


class _Fetched:
    """A PostgreSQL cursor's rows, fetched at once (the connection is shared, the cursor is not kept)."""

    def __init__(self, cursor: Any) -> None:
        self.rowcount: int = cursor.rowcount
        self._rows: list[Any] = cursor.fetchall() if cursor.description is not None else []
        self._i = 0

    def fetchone(self) -> Any:
        if self._i >= len(self._rows):
            return None
        self._i += 1
        return self._rows[self._i - 1]

    def fetchall(self) -> list[Any]:
        rows, self._i = self._rows[self._i:], len(self._rows)
        return rows


def _close_if_broken(conn: Any) -> None:
    import psycopg

    if conn.info.transaction_status == psycopg.pq.TransactionStatus.UNKNOWN:
        conn.close()


def _wrap(err: Exception, db: Database) -> Exception:
    if db.backend == POSTGRESQL:
        import psycopg

        if isinstance(err, psycopg.OperationalError):
            return DatabaseError(f"{db.description}: {str(err).strip().splitlines()[0] if str(err) else err}")
    return err


def _connect_postgresql(url: str) -> Any:
    try:
        import psycopg
    except ImportError as err:  # pragma: no cover - a dependency of the project
        raise DatabaseError("PostgreSQL needs psycopg 3 (pip install 'psycopg[binary]')") from err
    try:
        return psycopg.connect(url, autocommit=True, connect_timeout=10)
    except psycopg.Error as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise DatabaseError(f"cannot connect to {redact(url)}: {first}") from err


def postgresql_check(url: str) -> Callable[[], str | None]:
    """A health check: a fresh connection to ``url`` answers ``SELECT 1`` within 2 s (None), else the reason."""

    def check() -> str | None:
        try:
            import psycopg

            with psycopg.connect(url, autocommit=True, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
        except Exception as err:  # noqa: BLE001 - any failure is the reason
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            return f"{redact(url)}: {first}"
        return None

    return check


def open_database(url: str | None, *, default: Path, synchronous: str = "FULL", timeout_s: float = 10.0) -> Database:
    """Opens the database ``url`` names, or the SQLite file ``default`` when ``url`` is empty.

    SQLite files are opened as the stores always did: autocommit (``isolation_level=None``),
    WAL, ``PRAGMA synchronous=<synchronous>``, shared across threads, a busy timeout.
    """
    if is_postgresql(url):
        assert url is not None
        return Database(POSTGRESQL, _connect_postgresql(url), f"PostgreSQL {redact(url)}", url)
    path = sqlite_path(url) if url else default
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        conn = sqlite_connection(path, synchronous=synchronous, timeout_s=timeout_s)
    except sqlite3.Error as err:
        raise DatabaseError(f"{path}: cannot open the database: {err}") from err
    return Database(SQLITE, conn, str(path))


def sqlite_connection(path: str | Path, *, synchronous: str = "FULL", timeout_s: float = 10.0) -> sqlite3.Connection:
    """A SQLite file opened as every store of the mesh opens one: autocommit (``isolation_level=None``),
    WAL, ``PRAGMA synchronous=<synchronous>``, shared across threads, a busy timeout (``":memory:"`` too).

    Raises:
        sqlite3.Error: the file cannot be opened or set up.
    """
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False, timeout=timeout_s)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={synchronous}")
    except sqlite3.Error:
        conn.close()
        raise
    return conn


__all__ = ["POSTGRESQL", "SQLITE", "Database", "DatabaseError", "is_postgresql", "open_database",
           "postgresql_check", "redact", "sqlite_connection", "sqlite_path"]
