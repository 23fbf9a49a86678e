"""The supervisor's data files, read as every mesh data file is (:mod:`agentmesh.data_file`), refused
with a :class:`~supervisor_svc.errors.ConfigError` unless a reader names its own error."""

from __future__ import annotations

from pathlib import Path

import pydantic

from agentmesh import data_file
from agentmesh.data_file import Document, FileErrorFactory, PathKey, format_path
from supervisor_svc.errors import ConfigError

__all__ = ["Document", "PathKey", "format_path", "load_document", "validation_error"]


def load_document(path: Path, *, error: FileErrorFactory = ConfigError) -> Document:
    """One YAML/JSON file (:func:`agentmesh.data_file.load_document`)."""
    return data_file.load_document(path, error=error)


def validation_error(exc: pydantic.ValidationError, doc: Document, file: str, *,
                     error: FileErrorFactory = ConfigError, prefix: PathKey = ()) -> Exception:
    """The first pydantic violation, naming file, field and line (:func:`agentmesh.data_file.validation_error`)."""
    return data_file.validation_error(exc, doc, file, error=error, prefix=prefix)
