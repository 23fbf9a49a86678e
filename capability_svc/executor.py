"""Transport-free execution of registered capabilities.

The servicer drives one call in the order the brief fixes, with its own steps
(grant, policy, audit) between these::

    call = executor.prepare(ctx, capability_id, arguments)   # status + input schema
    ... policy.Authorize(...), audit (durable before any effect of a mutation) ...
    ran = executor.run(call, deadline_s=remaining)           # status re-checked, output schema
    if call.mutates:
        result = executor.verify(call, ran.output)           # read-back
        if not result.verified:                              # a failure, and:
            undo = executor.compensate(call, ran)            # previous state back, read back

:meth:`CapabilityExecutor.execute` does all of it in one call (tests, tools).
Identity and tenant come only from the :class:`InvocationContext` the caller
built from a verified grant.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from capability_svc.errors import (
    CapabilityNotFound,
    DeadlineExceeded,
    ManifestError,
    VerificationFailed,
)
from capability_svc.internal_runtime import InternalBackend
from capability_svc.invocation import CompensationResult, Execution, InvocationContext, VerificationResult
from capability_svc.knowledge_store import KnowledgeBackend
from capability_svc.registry import CapabilityManifest, CapabilityRegistry

__all__ = ["CapabilityExecutor", "ExecutionResult", "ExternalBackend", "PreparedCall", "verification_failure"]


class ExternalBackend(Protocol):
    """A backend for ``external:<system>`` capabilities, e.g. :class:`LmsClient`."""

    @property
    def capability_ids(self) -> frozenset[str]:
        """Capabilities the backend implements."""
        ...

    def execute(
        self,
        capability_id: str,
        ctx: InvocationContext,
        arguments: Mapping[str, Any],
        *,
        budget_s: float | None = None,
    ) -> dict[str, Any]:
        """Run one capability within ``budget_s`` seconds."""
        ...


@dataclass(frozen=True)
class PreparedCall:
    """A call whose capability is executable and whose input passed its schema."""

    manifest: CapabilityManifest
    ctx: InvocationContext
    arguments: Mapping[str, Any]
    """A private deep copy of the validated input."""

    @property
    def mutates(self) -> bool:
        """Whether the call changes state (idempotency key, audit-before, read-back)."""
        return self.manifest.risk_profile.mutates

    @property
    def resource_id(self) -> str | None:
        """The record the call acts on (``WP-10231``), for the policy request."""
        return self.manifest.resource_id(self.arguments)

    @property
    def resource_ref(self) -> str:
        """What the call acts on, as a grant names it: ``permit:WP-10231``, ``worker:W-1001``.

        A capability over no single record (``workPermit.search``) acts on the
        tenant as a whole: ``tenant:acme``. A declared resource whose id is
        missing from the input gives ``permit:``, which no grant names.
        """
        m = self.manifest
        if m.resource_id_field is None:
            return f"tenant:{self.ctx.tenant_id}"
        return f"{m.resource_type}:{self.resource_id or ''}"

    @property
    def resource_field(self) -> str:
        """The input field naming the resource (``permit_id``); ``input`` for an operation on the tenant."""
        return self.manifest.resource_id_field or "input"


@dataclass(frozen=True)
class ExecutionResult:
    """Output of :meth:`CapabilityExecutor.execute`."""

    manifest: CapabilityManifest
    output: dict[str, Any]
    verification: VerificationResult | None
    """Read-back result for mutations (always ``verified=True`` here), else ``None``."""


class CapabilityExecutor:
    """Dispatches registered capabilities to the internal runtime, the knowledge stores or external backends."""

    def __init__(
        self,
        registry: CapabilityRegistry,
        internal: InternalBackend,
        external: Mapping[str, ExternalBackend] | None = None,
        knowledge: KnowledgeBackend | None = None,
    ):
        """Bind backends; ``external`` maps a system name (``lms``) to its backend."""
        self.registry = registry
        self._internal = internal
        self._external = dict(external or {})
        self._knowledge = knowledge

    @property
    def knowledge(self) -> KnowledgeBackend | None:
        """The backend of ``knowledge`` capabilities, if any."""
        return self._knowledge

    def check_wiring(self) -> None:
        """Fail start-up if a registered capability has no backend to run it.

        Raises:
            ManifestError: reason ``MANIFEST_BACKEND_MISSING`` naming the manifest file.
        """
        for entry in self.registry.list():
            m = entry.manifest
            system = m.external_system
            if m.backend == "knowledge":
                ok = self._knowledge is not None and m.id in self._knowledge.capability_ids
            elif system is None:
                ok = m.id in self._internal.capability_ids
                # A mutation must be verifiable, and undoable when verification fails.
                ok = ok and (not m.risk_profile.mutates or (
                    self._internal.has_verifier(m.id) and self._internal.has_compensator(m.id)))
            else:
                backend = self._external.get(system)
                ok = backend is not None and m.id in backend.capability_ids
                # No external mutation has a read-back yet; refuse rather than
                # run a write that cannot be verified.
                ok = ok and not m.risk_profile.mutates
            if not ok:
                raise ManifestError(
                    f"no backend implements {m.key} ({m.backend})",
                    file=m.source_file,
                    field="backend",
                    reason="MANIFEST_BACKEND_MISSING",
                )

    def prepare(
        self,
        ctx: InvocationContext,
        capability_id: str,
        arguments: Any,
        *,
        version: str | None = None,
    ) -> PreparedCall:
        """Check status (fail closed) and validate input. Nothing is executed.

        Raises:
            CapabilityNotFound, CapabilityNotExecutable, InputInvalid.
        """
        manifest = self.registry.ensure_executable(capability_id, version).manifest
        self.registry.validate_input(manifest, arguments)
        return PreparedCall(manifest, ctx, copy.deepcopy(dict(arguments)))

    def run(self, call: PreparedCall, *, deadline_s: float | None = None) -> Execution:
        """Execute a prepared call and validate its output.

        For an internal mutation the result also carries the record's state
        before the write (:attr:`Execution.before`), for :meth:`compensate`.

        The status is checked again: a kill switch thrown while the policy
        decision was being made must still stop the call.

        Args:
            call: From :meth:`prepare`.
            deadline_s: Seconds left in the caller's deadline; the manifest's
                ``timeout_ms`` caps it.

        Raises:
            CapabilityNotExecutable: disabled since :meth:`prepare`.
            DeadlineExceeded: no time left; the backend was not called.
            ResourceNotFound, PreconditionFailed: from internal handlers.
            ExternalError: from external backends (timeout, unavailable, ...).
            OutputInvalid: the backend broke its output contract.
        """
        m = call.manifest
        self.registry.ensure_executable(m.id, str(m.version))
        budget = m.timeout_ms / 1000.0
        if deadline_s is not None:
            if deadline_s <= 0:
                raise DeadlineExceeded(f"deadline passed before {m.key} could run")
            budget = min(budget, deadline_s)
        system = m.external_system
        if m.backend == "knowledge":
            if self._knowledge is None:
                raise CapabilityNotFound(f"no knowledge backend for {m.key}")
            ran = self._knowledge.run(m.id, call.ctx, call.arguments)
        elif system is None:
            ran = self._internal.run(m.id, call.ctx, call.arguments)
        else:
            backend = self._external.get(system)
            if backend is None:
                raise CapabilityNotFound(f"no backend for external system {system!r}")
            ran = Execution(backend.execute(m.id, call.ctx, call.arguments, budget_s=budget))
        self.registry.validate_output(m, ran.output)
        return ran

    def verify(self, call: PreparedCall, output: Mapping[str, Any]) -> VerificationResult:
        """Read a mutation's effect back. ``verified=False`` must be reported as a failure.

        Raises:
            CapabilityNotFound: the capability is not an internal mutation.
        """
        return self._internal.verify(call.manifest.id, call.ctx, call.arguments, output)

    def compensate(self, call: PreparedCall, ran: Execution) -> CompensationResult:
        """Undo a mutation whose verification failed, and read the record back.

        ``compensated=True`` only if the read-back shows the previous state;
        without a captured previous state nothing is touched (``NO_PRIOR_STATE``).

        Raises:
            CapabilityNotFound: the capability is not an internal mutation.
        """
        if ran.before is None:
            return CompensationResult(False, "NO_PRIOR_STATE")
        return self._internal.compensate(call.manifest.id, call.ctx, call.arguments, ran.output, ran.before)

    def execute(
        self,
        ctx: InvocationContext,
        capability_id: str,
        arguments: Any,
        *,
        version: str | None = None,
        deadline_s: float | None = None,
    ) -> ExecutionResult:
        """prepare → run → verify (mutations; compensated if that fails), without policy or audit.

        Raises:
            Everything :meth:`prepare` and :meth:`run` raise, and
            VerificationFailed: a mutation's effect is not visible on read-back;
                its ``compensation`` says whether the previous state is back.
        """
        call = self.prepare(ctx, capability_id, arguments, version=version)
        ran = self.run(call, deadline_s=deadline_s)
        verification = None
        if call.mutates:
            verification = self.verify(call, ran.output)
            if not verification.verified:
                raise verification_failure(call, verification, self.compensate(call, ran))
        return ExecutionResult(call.manifest, ran.output, verification)


def verification_failure(
    call: PreparedCall, check: VerificationResult, compensation: CompensationResult | None
) -> VerificationFailed:
    """The error for a failed read-back, saying honestly whether the previous state was restored."""
    message = (
        f"{call.manifest.key} on {call.resource_id!r} was acknowledged but "
        f"its effect is not visible ({check.reason})"
    )
    if compensation is not None and compensation.compensated:
        message += f"; compensated: the previous state is back ({compensation.summary})"
    elif compensation is not None:
        message += (
            f"; COMPENSATION_FAILED ({compensation.reason}): the previous state could not be "
            f"restored, check {call.resource_id!r} by hand"
        )
    return VerificationFailed(
        message, expected=check.expected, observed=check.observed, compensation=compensation
    )
