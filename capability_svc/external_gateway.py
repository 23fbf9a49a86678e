"""External gateway: the only way capabilities reach systems outside the mesh.

:class:`ExternalGateway` is a guarded JSON-over-HTTP client:

- a per-attempt timeout, and retries with exponential backoff for transient
  failures (timeout, 5xx, 429, connection errors) inside the caller's budget;
- a :class:`CircuitBreaker` that opens after N consecutive failed calls and
  lets one probe through (half-open) after a cool-down;
- a response size limit enforced while streaming (reading stops past it);
- strict JSON parsing (no NaN, no duplicate keys) and JSON Schema validation.

:class:`LmsClient` uses it for the LMS and returns training records as *data*
with provenance (source ``lms``, authority VERIFIED_INTEGRATION, fetched-at,
URL). Text fields are copied verbatim and never interpreted, and a training
status is only ever one the LMS gave: every failure is a typed
:class:`~capability_svc.errors.ExternalError`, never a default value.
"""

from __future__ import annotations

import datetime as _dt
import json
import ssl
import time
import urllib.parse
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from agentmesh.external import BreakerState, CircuitBreaker, DuplicateJsonKey, strict_json_loads
from agentmesh.http_client import HttpError, HttpPool, HttpResponse, HttpTimeout, default_ssl_context
from capability_svc._validation import SchemaCheck
from capability_svc.errors import (
    CapabilityNotFound,
    ExternalError,
    ExternalMalformed,
    ExternalTimeout,
    ExternalTooLarge,
    ExternalUnavailable,
)
from capability_svc.invocation import InvocationContext
from capability_svc.provenance import Authority, Provenance

__all__ = [
    "LMS_TRAININGS_SCHEMA",
    "BreakerState",
    "CircuitBreaker",
    "ExternalGateway",
    "ExternalResponse",
    "GatewayConfig",
    "LmsClient",
    "TrainingLookup",
    "lms_client",
]


@dataclass(frozen=True)
class GatewayConfig:
    """Settings of one external system's gateway. Validated on construction."""

    base_url: str
    """Root URL of the external API, e.g. ``http://127.0.0.1:8766`` (no trailing path needed)."""
    timeout_s: float = 2.0
    """Time allowed for one HTTP attempt (connect, and each read)."""
    max_attempts: int = 3
    """Attempts per call, including the first; retries happen only for transient failures."""
    backoff_initial_s: float = 0.05
    """Wait before the first retry."""
    backoff_multiplier: float = 2.0
    """Factor applied to the wait before each further retry."""
    backoff_max_s: float = 1.0
    """Upper bound of one wait."""
    max_response_bytes: int = 256 * 1024
    """Largest (decoded) response body accepted; reading stops past it."""
    breaker_failure_threshold: int = 5
    """Consecutive failed calls that open the circuit."""
    breaker_cooldown_s: float = 10.0
    """Time the circuit stays open before one probe call is let through."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Extra request headers, e.g. an API token for a real LMS."""
    ca_file: str | None = None
    """CA bundle for an ``https`` base URL with a private CA; system CAs otherwise."""

    def __post_init__(self) -> None:
        url = urllib.parse.urlsplit(self.base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"base_url must be an absolute http(s) URL, got {self.base_url!r}")
        checks = {
            "timeout_s": self.timeout_s > 0,
            "max_attempts": self.max_attempts >= 1,
            "backoff_initial_s": self.backoff_initial_s >= 0,
            "backoff_multiplier": self.backoff_multiplier >= 1,
            "backoff_max_s": self.backoff_max_s >= 0,
            "max_response_bytes": self.max_response_bytes >= 1,
            "breaker_failure_threshold": self.breaker_failure_threshold >= 1,
            "breaker_cooldown_s": self.breaker_cooldown_s >= 0,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"invalid gateway settings: {', '.join(bad)}")


@dataclass(frozen=True)
class ExternalResponse:
    """A parsed, schema-valid JSON response."""

    url: str
    status_code: int
    data: Any
    fetched_at: _dt.datetime
    attempts: int


def _utc_now() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC)


class ExternalGateway:
    """Guarded GET-JSON client for one external system (see module docstring). Thread-safe."""

    def __init__(
        self,
        config: GatewayConfig,
        *,
        name: str = "external",
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        wall_clock: Callable[[], _dt.datetime] = _utc_now,
    ):
        """Create the client.

        Args:
            config: Settings (base URL, timeouts, retry, breaker, size limit).
            name: System name used in messages, e.g. ``lms``.
            clock: Monotonic seconds, for budgets and the breaker.
            sleep: Waits between retries (tests may pass a no-op).
            wall_clock: Timezone-aware now, for ``fetched_at``.
        """
        self.config = config
        self.name = name
        self._clock = clock
        self._sleep = sleep
        self._wall_clock = wall_clock
        self.breaker = CircuitBreaker(
            config.breaker_failure_threshold, config.breaker_cooldown_s, clock=clock
        )
        verify = (
            default_ssl_context()
            if config.ca_file is None
            else ssl.create_default_context(cafile=config.ca_file)
        )
        # Redirects are never followed: a 3xx is an answer (a misconfiguration).
        self._http = HttpPool(
            config.base_url,
            headers={"Accept": "application/json", **dict(config.headers)},
            ssl_context=verify,
        )

    def close(self) -> None:
        """Close pooled connections."""
        self._http.close()

    def get_json(
        self,
        path: str,
        schemas: Mapping[int, SchemaCheck],
        *,
        budget_s: float | None = None,
    ) -> ExternalResponse:
        """GET ``path`` and return its JSON body if the status is one of ``schemas``.

        Args:
            path: Path below the base URL (segments already quoted).
            schemas: Accepted HTTP status codes, each with the validator its body must pass.
            budget_s: Total time for all attempts and waits; ``None`` means
                ``max_attempts`` attempts with no overall cap beyond their timeouts.

        Raises:
            ExternalTimeout: every attempt timed out, or the budget ran out.
            ExternalUnavailable: 5xx/429/connection failure after retries, an
                unexpected status, or the circuit is open.
            ExternalMalformed: bad JSON, wrong content type, schema violation.
            ExternalTooLarge: the body exceeded ``max_response_bytes``.
        """
        url = self._http.url(path)
        if budget_s is not None and budget_s <= 0:
            # Checked before the breaker: the caller's spent budget says nothing
            # about the external system's health.
            raise ExternalTimeout(
                f"no time left to call {self.name}; call not attempted", url=url, attempts=0
            )
        probe = self.breaker.acquire()
        if probe is None:
            raise ExternalUnavailable(
                f"{self.name} circuit is open after repeated failures; call not attempted",
                reason="EXTERNAL_CIRCUIT_OPEN",
                url=url,
                attempts=0,
            )
        deadline = None if budget_s is None else self._clock() + budget_s
        max_attempts = 1 if probe else self.config.max_attempts
        attempt = 0
        while True:
            attempt += 1
            timeout = self.config.timeout_s
            if deadline is not None:
                remaining = deadline - self._clock()
                if remaining <= 0:
                    # Only reachable after a failed attempt (the first one always
                    # has time), so this is that failure running out of time.
                    self.breaker.record_failure(probe)
                    raise ExternalTimeout(
                        f"{self.name} call budget of {budget_s:.3f}s exhausted after "
                        f"{attempt - 1} attempt(s)",
                        url=url,
                        attempts=attempt - 1,
                    )
                timeout = min(timeout, remaining)
            try:
                response = self._attempt(path, url, timeout, schemas, attempt)
            except ExternalError as exc:
                if not exc.transient:
                    # The system answered (badly): the transport is healthy, so
                    # this does not count towards opening the circuit.
                    self.breaker.record_success(probe)
                    raise
                if attempt >= max_attempts or self.breaker.state is BreakerState.OPEN:
                    self.breaker.record_failure(probe)
                    raise
                delay = min(
                    self.config.backoff_max_s,
                    self.config.backoff_initial_s
                    * self.config.backoff_multiplier ** (attempt - 1),
                )
                if deadline is not None and self._clock() + delay >= deadline:
                    # No time left for another honest attempt: report the real cause.
                    self.breaker.record_failure(probe)
                    raise
                self._sleep(delay)
                continue
            except BaseException:
                # A bug or an interrupt must not leave a half-open probe
                # marked in flight forever, which would block every later call.
                self.breaker.record_failure(probe)
                raise
            self.breaker.record_success(probe)
            return response

    def _attempt(
        self,
        path: str,
        url: str,
        timeout: float,
        schemas: Mapping[int, SchemaCheck],
        attempt: int,
    ) -> ExternalResponse:
        started = self._clock()
        try:
            with self._http.request("GET", path, timeout=timeout) as response:
                status = response.status
                if status not in schemas:
                    raise self._status_error(status, url, attempt)
                encoding = response.content_encoding
                if encoding != "identity":
                    raise ExternalMalformed(
                        f"{self.name} answered with content encoding {encoding[:40]!r}, not identity",
                        reason="EXTERNAL_CONTENT_TYPE",
                        url=url,
                        attempts=attempt,
                    )
                body = self._read_limited(response, url, attempt, started + timeout)
                content_type = response.header("content-type")
        except HttpTimeout:
            raise ExternalTimeout(
                f"{self.name} did not answer within {timeout:.3f}s", url=url, attempts=attempt
            ) from None
        except HttpError as exc:
            raise ExternalUnavailable(
                f"{self.name} unreachable: {exc.cause}",
                reason="EXTERNAL_CONNECTION_FAILED",
                url=url,
                attempts=attempt,
            ) from None
        fetched_at = self._wall_clock()
        if content_type.split(";")[0].strip().lower() != "application/json":
            raise ExternalMalformed(
                f"{self.name} answered with content type {content_type[:60]!r}, not JSON",
                reason="EXTERNAL_CONTENT_TYPE",
                url=url,
                attempts=attempt,
            )
        try:
            data = strict_json_loads(body)
        except DuplicateJsonKey:
            raise ExternalMalformed(
                f"{self.name} response has duplicate keys",
                reason="EXTERNAL_MALFORMED_JSON",
                url=url,
                attempts=attempt,
            ) from None
        except (ValueError, RecursionError) as exc:
            where = (
                f" (line {exc.lineno} column {exc.colno})"
                if isinstance(exc, json.JSONDecodeError)
                else ""
            )
            raise ExternalMalformed(
                f"{self.name} response is not valid JSON{where}",
                reason="EXTERNAL_MALFORMED_JSON",
                url=url,
                attempts=attempt,
            ) from None
        errors = sorted(schemas[status].errors(data), key=lambda e: list(e.absolute_path))
        if errors:
            first = errors[0]
            path_text = "/".join(str(p) for p in first.absolute_path) or "<root>"
            # The message names the path and the rule only: the offending value
            # is external text and must not travel on in errors or audit.
            raise ExternalMalformed(
                f"{self.name} response breaks its schema at {path_text!r} ({first.validator})",
                reason="EXTERNAL_SCHEMA_INVALID",
                url=url,
                attempts=attempt,
            )
        return ExternalResponse(url, status, data, fetched_at, attempt)

    def _status_error(self, status: int, url: str, attempt: int) -> ExternalError:
        if status >= 500 or status == 429:
            return ExternalUnavailable(
                f"{self.name} failed with HTTP {status}",
                reason="EXTERNAL_5XX" if status >= 500 else "EXTERNAL_RATE_LIMITED",
                url=url,
                attempts=attempt,
            )
        # Anything else (404 on a wrong path, 401, 3xx) means the integration
        # is misconfigured; retrying would not change the answer.
        return ExternalUnavailable(
            f"{self.name} answered with unexpected HTTP {status}",
            reason="EXTERNAL_HTTP_STATUS",
            url=url,
            attempts=attempt,
            transient=False,
        )

    def _read_limited(
        self, response: HttpResponse, url: str, attempt: int, attempt_deadline: float
    ) -> bytes:
        limit = self.config.max_response_bytes
        declared = response.header("content-length")
        if declared.isdigit() and int(declared) > limit:
            raise ExternalTooLarge(
                f"{self.name} response declares {declared} bytes, limit is {limit}",
                url=url,
                attempts=attempt,
            )
        chunks: list[bytes] = []
        size = 0
        for chunk in response.chunks():
            size += len(chunk)
            if size > limit:
                raise ExternalTooLarge(
                    f"{self.name} response exceeded {limit} bytes; reading aborted",
                    url=url,
                    attempts=attempt,
                )
            if self._clock() > attempt_deadline:
                # The timeout is per read; a server trickling bytes would
                # never trip them, so the attempt as a whole is bounded here.
                raise ExternalTimeout(
                    f"{self.name} response did not complete in time", url=url, attempts=attempt
                )
            chunks.append(chunk)
        return b"".join(chunks)


# --- LMS -----------------------------------------------------------------------

_DATE_OR_NULL = {"type": ["string", "null"], "pattern": r"^\d{4}-\d{2}-\d{2}$"}
_TEXT_OR_NULL = {"type": ["string", "null"], "maxLength": 4000}

LMS_TRAININGS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["tenant_id", "worker_id", "trainings"],
    "properties": {
        "tenant_id": {"type": "string", "maxLength": 64},
        "worker_id": {"type": "string", "maxLength": 64},
        "trainings": {
            "type": "array",
            "maxItems": 1000,
            "items": {
                "type": "object",
                "required": ["record_id", "course_code", "course_title", "status"],
                "properties": {
                    "record_id": {"type": "string", "minLength": 1, "maxLength": 200},
                    "course_code": {"type": "string", "minLength": 1, "maxLength": 64},
                    "course_title": {"type": "string", "maxLength": 4000},
                    "status": {"type": "string", "minLength": 1, "maxLength": 40},
                    "completed_on": _DATE_OR_NULL,
                    "valid_until": _DATE_OR_NULL,
                    "certificate_id": {"type": ["string", "null"], "maxLength": 200},
                    "issuer": _TEXT_OR_NULL,
                    "issuer_id": {"type": ["string", "null"], "pattern": r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"},
                },
            },
        },
    },
}
"""Contract of ``GET /v1/tenants/{tenant}/workers/{worker}/trainings`` (HTTP 200)."""

LMS_NOT_FOUND_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code"],
            "properties": {"code": {"const": "WORKER_NOT_FOUND"}},
        }
    },
}
"""Body of the LMS's HTTP 404 for a worker it does not know. Any other 404 is an error."""

_TRAINING_FIELDS = (
    "record_id",
    "course_code",
    "course_title",
    "status",
    "completed_on",
    "valid_until",
    "certificate_id",
    "issuer",
    "issuer_id",
)


@dataclass(frozen=True)
class TrainingLookup:
    """What the LMS said about one worker: data with provenance, nothing derived."""

    tenant_id: str
    worker_id: str
    worker_known: bool
    """``False`` only when the LMS explicitly answered WORKER_NOT_FOUND."""
    trainings: tuple[Mapping[str, Any], ...]
    """Records with exactly the LMS's fields and values (unknown fields dropped)."""
    provenance: Provenance
    attempts: int

    def to_output(self, training_codes: Collection[str] | None = None) -> dict[str, Any]:
        """The ``training.getStatus`` output document, optionally only for some course codes."""
        records = [
            dict(r)
            for r in self.trainings
            if training_codes is None or r["course_code"] in training_codes
        ]
        return {
            "worker_id": self.worker_id,
            "worker_known": self.worker_known,
            "trainings": records,
            "provenance": self.provenance.to_dict(),
        }


class LmsClient:
    """Training records from an LMS through an :class:`ExternalGateway`."""

    CAPABILITY_ID = "training.getStatus"
    _OK = SchemaCheck(LMS_TRAININGS_SCHEMA)
    _NOT_FOUND = SchemaCheck(LMS_NOT_FOUND_SCHEMA)

    def __init__(self, gateway: ExternalGateway):
        """Wrap a gateway whose ``base_url`` is the LMS root."""
        self.gateway = gateway

    @property
    def capability_ids(self) -> frozenset[str]:
        """Capabilities this backend implements."""
        return frozenset({self.CAPABILITY_ID})

    def get_trainings(
        self, tenant_id: str, worker_id: str, *, budget_s: float | None = None
    ) -> TrainingLookup:
        """Ask the LMS for one worker's training records in one tenant.

        Raises:
            ExternalTimeout, ExternalUnavailable, ExternalMalformed, ExternalTooLarge:
                see :meth:`ExternalGateway.get_json`; ``ExternalMalformed`` with
                reason ``EXTERNAL_RESPONSE_MISMATCH`` if the LMS answers for
                another tenant or worker.
        """
        path = (
            f"/v1/tenants/{urllib.parse.quote(tenant_id, safe='')}"
            f"/workers/{urllib.parse.quote(worker_id, safe='')}/trainings"
        )
        response = self.gateway.get_json(
            path, {200: self._OK, 404: self._NOT_FOUND}, budget_s=budget_s
        )
        provenance = Provenance(
            source="lms",
            authority=Authority.VERIFIED_INTEGRATION,
            fetched_at=response.fetched_at,
            reference=response.url,
        )
        if response.status_code == 404:
            return TrainingLookup(tenant_id, worker_id, False, (), provenance, response.attempts)
        data = response.data
        if data["tenant_id"] != tenant_id or data["worker_id"] != worker_id:
            raise ExternalMalformed(
                "LMS answered for a different tenant or worker than asked",
                reason="EXTERNAL_RESPONSE_MISMATCH",
                url=response.url,
                attempts=response.attempts,
            )
        records = tuple(
            {name: record.get(name) for name in _TRAINING_FIELDS} for record in data["trainings"]
        )
        return TrainingLookup(tenant_id, worker_id, True, records, provenance, response.attempts)

    def execute(
        self,
        capability_id: str,
        ctx: InvocationContext,
        arguments: Mapping[str, Any],
        *,
        budget_s: float | None = None,
    ) -> dict[str, Any]:
        """Run ``training.getStatus`` for ``ctx.tenant_id``; input must be schema-valid.

        Raises:
            CapabilityNotFound: for any other capability id.
            ExternalError: as :meth:`get_trainings`.
        """
        if capability_id != self.CAPABILITY_ID:
            raise CapabilityNotFound(f"the LMS backend does not implement {capability_id!r}")
        lookup = self.get_trainings(ctx.tenant_id, str(arguments["worker_id"]), budget_s=budget_s)
        codes = arguments.get("training_codes")
        return lookup.to_output(None if codes is None else {str(c) for c in codes})

    def close(self) -> None:
        """Close the underlying gateway."""
        self.gateway.close()


@contextmanager
def lms_client(config: GatewayConfig, **kwargs: Any) -> Iterator[LmsClient]:
    """An :class:`LmsClient` over a new gateway, closed on exit (convenience for scripts)."""
    client = LmsClient(ExternalGateway(config, name="lms", **kwargs))
    try:
        yield client
    finally:
        client.close()
