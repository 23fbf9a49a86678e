"""Shared pieces for calling systems outside the mesh (the LMS, model backends).

* :class:`CircuitBreaker`: opens after N consecutive failed calls, lets one probe
  through (half-open) after a cool-down;
* :func:`strict_json_loads`: JSON as an external answer must be read — no NaN or
  Infinity (neither the constants nor a number too large for a double, such as
  ``1e999``), no string that is not Unicode text (a lone surrogate escape such as
  ``\ud800``, which no UTF-8 encoder takes), nothing nested deeper than
  :data:`MAX_JSON_DEPTH` (no protobuf parser on the way would read it back as a
  Struct), no duplicate keys (an ambiguous document is refused, never guessed).
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from collections.abc import Callable
from enum import StrEnum
from typing import Any

__all__ = ["MAX_JSON_DEPTH", "BreakerState", "CircuitBreaker", "DuplicateJsonKey", "strict_json_loads"]


class BreakerState(StrEnum):
    """State of a circuit breaker."""

    CLOSED = "CLOSED"
    OPEN = "OPEN"
    HALF_OPEN = "HALF_OPEN"


class CircuitBreaker:
    """Consecutive-failure circuit breaker with a single half-open probe. Thread-safe.

    A *call* (one logical request with its retries) counts once: a lookup that
    fails after three attempts is one failure, so one unresponsive record does
    not trip the breaker for every other request, while an LMS that is down
    still opens it after ``failure_threshold`` calls.
    """

    def __init__(
        self,
        failure_threshold: int,
        cooldown_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
    ):
        """Create a closed breaker; ``clock`` is monotonic seconds (tests pass a fake)."""
        self._threshold = failure_threshold
        self._cooldown = cooldown_s
        self._clock = clock
        self._lock = threading.Lock()
        self._failures = 0
        self._opened_at: float | None = None
        self._probe_in_flight = False

    @property
    def state(self) -> BreakerState:
        """Current state; OPEN turns HALF_OPEN once the cool-down has passed."""
        with self._lock:
            return self._state_locked()

    @property
    def consecutive_failures(self) -> int:
        """Failed calls since the last success."""
        with self._lock:
            return self._failures

    def _state_locked(self) -> BreakerState:
        if self._opened_at is None:
            return BreakerState.CLOSED
        if self._clock() - self._opened_at >= self._cooldown:
            return BreakerState.HALF_OPEN
        return BreakerState.OPEN

    def acquire(self) -> bool | None:
        """Ask to make a call.

        Returns:
            ``False`` for a normal call, ``True`` if this call is the half-open
            probe, ``None`` if the call is refused (circuit open, or a probe is
            already in flight).
        """
        with self._lock:
            state = self._state_locked()
            if state is BreakerState.CLOSED:
                return False
            if state is BreakerState.HALF_OPEN and not self._probe_in_flight:
                self._probe_in_flight = True
                return True
            return None

    def record_success(self, probe: bool) -> None:
        """The call reached the system and it answered: close the circuit."""
        with self._lock:
            self._failures = 0
            self._opened_at = None
            if probe:
                self._probe_in_flight = False

    def record_failure(self, probe: bool) -> None:
        """The call failed for a transient reason; open once the threshold is reached."""
        with self._lock:
            self._failures += 1
            if probe:
                self._probe_in_flight = False
                self._opened_at = self._clock()
            elif self._opened_at is None and self._failures >= self._threshold:
                self._opened_at = self._clock()


class DuplicateJsonKey(ValueError):
    """An object of the document has the same key twice."""

    pass


def _strict_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # Duplicate keys make a document ambiguous (which status is the real
    # one?); refusing it is the only honest reading.
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateJsonKey(key)
        out[key] = value
    return out


def _no_constants(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


_MAX_DOUBLE = int(1.7976931348623157e308)
"""The largest finite double, as an integer: a Struct carries every number as a double."""


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError("a JSON number too large for a double")
    return number


def _finite_int(text: str) -> int:
    number = int(text)
    if not -_MAX_DOUBLE <= number <= _MAX_DOUBLE:
        raise ValueError("a JSON number too large for a double")
    return number


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_ESCAPE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]")
"""A ``\\uD800``-``\\uDFFF`` escape: half of a pair (an emoji, say), or alone, which is not Unicode text."""


def _unicode_text(data: Any) -> None:
    try:
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("a JSON string with a lone surrogate is not Unicode text") from None


MAX_JSON_DEPTH = 24
"""The most nested objects and arrays an outside answer may have. A Struct carried in a mesh message is read
back by protobuf parsers that stop at 100 message levels, three per level of JSON: an answer of about 32
levels, put in an agent's evidence, could be made but never read by the supervisor."""


def _depth_within(data: Any, room: int) -> bool:
    if isinstance(data, dict):
        children: Any = data.values()
    elif isinstance(data, list):
        children = data
    else:
        return True
    if room == 0:
        return False
    return all(_depth_within(child, room - 1) for child in children)


def strict_json_loads(text: str | bytes) -> Any:
    """Parses strict JSON.

    Raises:
        DuplicateJsonKey: an object has a key twice.
        ValueError: anything else that is not strict JSON (``json.JSONDecodeError`` for syntax,
            with its line and column; a NaN or Infinity constant; a number no double holds, such as
            ``1e999``, which Python would read as infinity; a string with a lone surrogate escape, which no
            Struct or UTF-8 encoder takes; more than :data:`MAX_JSON_DEPTH` levels of nesting); RecursionError
            for absurd nesting.
    """
    data = json.loads(text, object_pairs_hook=_strict_object, parse_constant=_no_constants,
                      parse_float=_finite_float, parse_int=_finite_int)
    if isinstance(text, str):
        escaped = _SURROGATE_ESCAPE.search(text) is not None
        opened = text.count("{") + text.count("[")
    else:
        escaped = _SURROGATE_ESCAPE_BYTES.search(text) is not None
        opened = text.count(b"{") + text.count(b"[")
    # Only a document with a surrogate escape can hold a lone surrogate (UTF-8 bytes never decode to one);
    # it is then encoded whole once, in C, to find out.
    if escaped:
        _unicode_text(data)
    # Only a document with that many brackets (counted in C, inside strings too) can be nested that deep.
    if opened > MAX_JSON_DEPTH and not _depth_within(data, MAX_JSON_DEPTH):
        raise ValueError(f"JSON nested more than {MAX_JSON_DEPTH} levels deep")
    return data
