"""The sandbox LMS's records, read from the ``lms`` sections of a world data file.

Only what the LMS needs is read: ``tenants[].id`` and ``tenants[].lms``
(``workers`` with their ``trainings``, and ``faults``). The rest of the world
file belongs to the mesh's own systems and is ignored here; the mesh's loader
validates the whole file. Records are served as written, text untouched.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lms_sandbox.faults import Fault

__all__ = ["LmsData", "LmsDataError", "load_lms_data"]

_RECORD_FIELDS = (
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
_REQUIRED = ("record_id", "course_code", "course_title", "status")


class LmsDataError(ValueError):
    """The data file cannot be served; ``path`` names the offending field."""

    def __init__(self, message: str, *, path: str = ""):
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path


@dataclass
class LmsData:
    """Training records keyed by (tenant, worker), and the configured faults."""

    records: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)
    faults: dict[tuple[str, str], Fault] = field(default_factory=dict)

    def trainings(self, tenant_id: str, worker_id: str) -> list[dict[str, Any]] | None:
        """Copies of the worker's records, or ``None`` if the LMS does not know the worker."""
        found = self.records.get((tenant_id, worker_id))
        return None if found is None else [dict(r) for r in found]


def _text(value: Any) -> Any:
    if isinstance(value, _dt.date):
        return value.isoformat()
    return value


def _field(parent: Mapping[str, Any], key: str, kind: type, default: Any, path: str) -> Any:
    # Absent or null means "none"; any other type is a mistake worth stopping for.
    value = parent.get(key)
    if value is None:
        return default
    if not isinstance(value, kind):
        raise LmsDataError(f"must be a {'list' if kind is list else 'mapping'}", path=path)
    return value


def load_lms_data(path: Path) -> LmsData:
    """Read a world file (YAML, or JSON by suffix) and keep its LMS sections.

    Raises:
        LmsDataError: unreadable file or a malformed ``lms`` section.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LmsDataError(f"cannot read {path}: {exc}") from None
    try:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when available
        doc = json.loads(text) if path.suffix.lower() == ".json" else yaml.load(text, loader)
    except (ValueError, yaml.YAMLError) as exc:
        raise LmsDataError(f"{path} is not valid YAML/JSON: {exc}") from None
    return parse_lms_data(doc)


def parse_lms_data(doc: Any) -> LmsData:
    """Extract the LMS sections from an already-parsed world document.

    Raises:
        LmsDataError: a malformed ``lms`` section.
    """
    data = LmsData()
    if not isinstance(doc, Mapping) or not isinstance(doc.get("tenants"), list):
        raise LmsDataError("expected a mapping with a 'tenants' list")
    for ti, tenant in enumerate(doc["tenants"]):
        where = f"tenants[{ti}]"
        if not isinstance(tenant, Mapping) or not isinstance(tenant.get("id"), str):
            raise LmsDataError("a tenant needs a string 'id'", path=where)
        tenant_id = tenant["id"]
        lms = _field(tenant, "lms", Mapping, {}, f"{where}.lms")
        for wi, worker in enumerate(_field(lms, "workers", list, [], f"{where}.lms.workers")):
            wpath = f"{where}.lms.workers[{wi}]"
            if not isinstance(worker, Mapping) or not isinstance(worker.get("worker_id"), str):
                raise LmsDataError("needs a string 'worker_id'", path=wpath)
            records: list[dict[str, Any]] = []
            trainings = _field(worker, "trainings", list, [], f"{wpath}.trainings")
            for ri, record in enumerate(trainings):
                rpath = f"{wpath}.trainings[{ri}]"
                if not isinstance(record, Mapping):
                    raise LmsDataError("must be a mapping", path=rpath)
                for name in _REQUIRED:
                    if not isinstance(record.get(name), str):
                        raise LmsDataError(f"needs a string {name!r}", path=rpath)
                records.append({name: _text(record.get(name)) for name in _RECORD_FIELDS})
            data.records[(tenant_id, worker["worker_id"])] = records
        faults = _field(lms, "faults", Mapping, {}, f"{where}.lms.faults")
        for worker_id, spec in faults.items():
            try:
                data.faults[(tenant_id, str(worker_id))] = Fault.from_mapping(spec)
            except ValueError as exc:
                raise LmsDataError(str(exc), path=f"{where}.lms.faults.{worker_id}") from None
    return data
