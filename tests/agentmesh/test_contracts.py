"""The contracts a polyglot client relies on: language options in every file, reasons that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agentmesh.v1 import (
    agent_registry_service_pb2,
    audit_service_pb2,
    capability_service_pb2,
    common_pb2,
    decision_center_service_pb2,
    model_service_pb2,
    policy_service_pb2,
    specialist_service_pb2,
    supervisor_service_pb2,
    tenant_service_pb2,
)

ROOT = Path(__file__).resolve().parents[2]
FILES = [agent_registry_service_pb2, audit_service_pb2, capability_service_pb2, common_pb2,
         decision_center_service_pb2, model_service_pb2, policy_service_pb2, specialist_service_pb2,
         supervisor_service_pb2, tenant_service_pb2]
OPTIONS = {
    "go_package": "agentmesh.local/gen/go/agentmesh/v1;agentmeshv1",
    "java_package": "local.agentmesh.v1",
    "java_multiple_files": True,
    "csharp_namespace": "Agentmesh.V1",
    "php_namespace": "Agentmesh\\V1",
    "ruby_package": "Agentmesh::V1",
    "objc_class_prefix": "AVX",
}


def test_every_proto_file_of_the_package_is_in_this_list() -> None:
    on_disk = {p.name for p in (ROOT / "proto" / "agentmesh" / "v1").glob("*.proto")}
    assert on_disk == {Path(m.DESCRIPTOR.name).name for m in FILES}


@pytest.mark.parametrize("module", FILES, ids=lambda m: m.DESCRIPTOR.name)
def test_every_file_names_its_package_for_each_language(module: object) -> None:
    descriptor = module.DESCRIPTOR  # type: ignore[attr-defined]
    options = descriptor.GetOptions()
    assert {name: getattr(options, name) for name in OPTIONS} == OPTIONS
    stem = Path(descriptor.name).stem
    assert options.java_outer_classname == "".join(p.title() for p in stem.split("_")) + "Proto"


def _source_literals() -> set[str]:
    literals: set[str] = set()
    for package in ("agentmesh", "supervisor_svc", "specialist_svc", "policy_svc", "capability_svc", "audit_svc",
                    "model_svc"):
        for path in (ROOT / package).rglob("*.py"):
            if "/v1/" not in str(path):
                literals.update(re.findall(r"[\"']([A-Z][A-Z0-9_]+)[\"']", path.read_text()))
    return literals


def test_every_error_reason_the_contracts_document_is_one_the_code_returns() -> None:
    documented: dict[str, set[str]] = {}
    for path in (ROOT / "proto" / "agentmesh" / "v1").glob("*.proto"):
        comments = "\n".join(line.split("//", 1)[1] for line in path.read_text().splitlines() if "//" in line)
        for reason in re.findall(r"`([A-Z][A-Z0-9_]+)`", comments):
            documented.setdefault(reason, set()).add(path.name)
    assert len(documented) > 80
    unknown = {r: sorted(f) for r, f in documented.items() if r not in _source_literals()}
    assert not unknown, f"reasons documented in proto/ that no code returns: {unknown}"
