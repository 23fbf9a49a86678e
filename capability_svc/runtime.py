"""One call to build the whole transport-free capability runtime.

The servicer needs a registry, the internal systems, the LMS client and an
executor over them; :func:`open_runtime` builds and checks them together so a
missing backend or a bad manifest stops the process at start-up.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from capability_svc.executor import CapabilityExecutor
from capability_svc.external_gateway import ExternalGateway, GatewayConfig, LmsClient
from capability_svc.internal_runtime import InternalBackend, InternalStore
from capability_svc.knowledge_store import KnowledgeBackend, KnowledgeLibrary
from capability_svc.registry import CapabilityRegistry, default_capabilities_dir
from capability_svc.world import LoadSummary, load_world

__all__ = ["CAPABILITY_DB", "INTERNAL_DB", "CapabilityRuntime", "open_runtime"]

CAPABILITY_DB = "capabilities.db"
"""File name (under the data directory) of the capability status database."""
INTERNAL_DB = "internal.db"
"""File name (under the data directory) of the internal systems' database."""


def _utc_now() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC)


@dataclass
class CapabilityRuntime:
    """The parts of a running capability service (no gRPC)."""

    registry: CapabilityRegistry
    store: InternalStore
    internal: InternalBackend
    lms: LmsClient
    executor: CapabilityExecutor
    knowledge: KnowledgeBackend

    def load_world_if_empty(self, path: Path) -> LoadSummary | None:
        """Load ``path`` only if no tenant is loaded yet (``agentmesh up`` on first start)."""
        if self.store.tenants():
            return None
        return load_world(path, self.store)

    def close(self) -> None:
        """Release the status database and the LMS connections."""
        self.lms.close()
        self.registry.close()


def open_runtime(
    data_dir: Path,
    lms: GatewayConfig | str,
    *,
    capabilities_dir: Path | None = None,
    knowledge_dir: Path | None = None,
    clock: Callable[[], _dt.datetime] = _utc_now,
    today: Callable[[], _dt.date] | None = None,
) -> CapabilityRuntime:
    """Build and check the runtime.

    Args:
        data_dir: The mesh home's data directory; ``capabilities.db`` and
            ``internal.db`` are created in it.
        lms: Gateway settings, or just the LMS base URL (default settings).
        capabilities_dir: Manifest directory; the shipped one by default.
        knowledge_dir: The knowledge stores, one sub-directory per scope; the shipped ones by default.
        clock: Wall clock for records and status changes.
        today: The mesh's date, by which releases and validity changes are judged against a
            permit's window (``agentmesh.clock.mesh_today``); the clock's date when not given.

    Raises:
        ManifestError: a manifest is invalid or has no backend.
        KnowledgeError: a knowledge store does not load.
    """
    knowledge = KnowledgeBackend(KnowledgeLibrary.load(knowledge_dir), clock=clock)
    config = lms if isinstance(lms, GatewayConfig) else GatewayConfig(base_url=lms)
    registry = CapabilityRegistry.load(
        capabilities_dir or default_capabilities_dir(), data_dir / CAPABILITY_DB, clock=clock
    )
    try:
        store = InternalStore(data_dir / INTERNAL_DB, clock=clock)
        internal = InternalBackend(store, today=today)
        lms_client = LmsClient(ExternalGateway(config, name="lms", wall_clock=clock))
        executor = CapabilityExecutor(registry, internal, {"lms": lms_client}, knowledge)
        try:
            executor.check_wiring()
        except BaseException:
            lms_client.close()
            raise
    except BaseException:
        registry.close()
        raise
    return CapabilityRuntime(registry, store, internal, lms_client, executor, knowledge)
