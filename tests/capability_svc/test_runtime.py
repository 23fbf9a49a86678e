"""The assembled runtime, as the servicer will build it."""

from __future__ import annotations

from pathlib import Path

import pytest

from capability_svc.errors import ManifestError
from capability_svc.invocation import InvocationContext
from capability_svc.runtime import CAPABILITY_DB, INTERNAL_DB, open_runtime
from lms_sandbox import LmsSandbox


def test_open_runtime_end_to_end(tmp_path: Path, lms: LmsSandbox, demo_world: Path) -> None:
    runtime = open_runtime(tmp_path, lms.base_url)
    try:
        assert (tmp_path / CAPABILITY_DB).exists() and (tmp_path / INTERNAL_DB).exists()
        first = runtime.load_world_if_empty(demo_world)
        assert first is not None and first.tenants == ("acme", "globex")
        assert runtime.load_world_if_empty(demo_world) is None  # only on first start
        ctx = InvocationContext("acme", "alice", "training-agent")
        out = runtime.executor.execute(ctx, "training.getStatus", {"worker_id": "W-1003"}).output
        assert out["worker_known"] is True
        assert out["provenance"]["source"] == "lms"
    finally:
        runtime.close()


def test_open_runtime_refuses_a_bad_manifest_dir(tmp_path: Path) -> None:
    caps = tmp_path / "caps"
    caps.mkdir()
    (caps / "broken.yaml").write_text("id: [\n", encoding="utf-8")
    with pytest.raises(ManifestError):
        open_runtime(tmp_path / "data", "http://127.0.0.1:9", capabilities_dir=caps)
