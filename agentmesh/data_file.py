"""Loading the mesh's YAML (or JSON) data files strictly, with line numbers.

``yaml.safe_load`` silently keeps the last of two duplicate keys and forgets
where each value came from. Configuration that decides who sees what must not
change silently, and a bad file must be reported by file, field and line, so
documents are composed into nodes and converted here. The supervisor's data
files (domains, projections, routing, agent manifests) and tenant files are
read this way; each reader names the error it raises (:class:`FileErrorFactory`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pydantic
import yaml

__all__ = ["MAX_FILE_BYTES", "DataFileError", "Document", "FileErrorFactory", "PathKey", "format_path", "load_document",
           "validation_error"]

PathKey = tuple[str | int, ...]
"""A path into a document: mapping keys and sequence indexes, the root is ``()``."""

MAX_FILE_BYTES = 1024 * 1024
"""The largest data file read."""


class DataFileError(ValueError):
    """A data file is not valid: its message names the file, the line and the field.

    ``reason`` says what kind of problem it is when the reader knows (``CONFIG_UNREADABLE``,
    ``CONFIG_TOO_LARGE``, ``CONFIG_SYNTAX_INVALID``), else the subclass's :attr:`default_reason`.
    """

    default_reason = "DATA_FILE_INVALID"

    def __init__(self, message: str, *, file: str, field: str | None = "", line: int | None = None,
                 reason: str | None = None) -> None:
        where = file if line is None else f"{file}:{line}"
        super().__init__(f"{where}{f' at {field!r}' if field else ''}: {message}")
        self.message = message
        self.file = file
        self.field = field or ""
        self.line = line
        self.reason = reason or self.default_reason


class FileErrorFactory(Protocol):
    """The error a reader raises for a bad file: its message, the file, and where in it."""

    def __call__(self, message: str, *, file: str, field: str | None = None, line: int | None = None,
                 reason: str | None = None) -> Exception: ...


# The C parser when libyaml is present (same nodes and marks, several times faster).
_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass
class Document:
    """Plain data with the 1-based source line of each path."""

    data: Any
    lines: dict[PathKey, int] = field(default_factory=dict)

    def line_of(self, path: Sequence[str | int]) -> int | None:
        """The line of ``path`` or of its nearest ancestor that has one."""
        key = tuple(path)
        while key:
            if key in self.lines:
                return self.lines[key]
            key = key[:-1]
        return self.lines.get(())


def format_path(path: Sequence[str | int]) -> str:
    """``("workers", 0, "id")`` → ``workers[0].id``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _scalar(node: yaml.Node) -> Any:
    # The safe constructor resolves the tag (int, bool, null, date...) exactly as safe_load would.
    if not isinstance(node, yaml.ScalarNode):
        return None
    return yaml.constructor.SafeConstructor().construct_object(node, deep=True)


def _convert(node: yaml.Node, path: PathKey, doc: Document, file: str, error: FileErrorFactory) -> Any:
    doc.lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = _scalar(key_node)
            if not isinstance(key, str):
                raise error(
                    "mapping keys must be strings", file=file, field=format_path(path) or None,
                    line=key_node.start_mark.line + 1,
                )
            if key in out:
                raise error(
                    f"duplicate key {key!r}", file=file, field=format_path((*path, key)),
                    line=key_node.start_mark.line + 1,
                )
            out[key] = _convert(value_node, (*path, key), doc, file, error)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_convert(item, (*path, i), doc, file, error) for i, item in enumerate(node.value)]
    return _scalar(node)


def load_document(path: Path, *, error: FileErrorFactory) -> Document:
    """Read and parse one YAML/JSON file.

    Raises:
        ``error``: unreadable (``CONFIG_UNREADABLE``), too large (``CONFIG_TOO_LARGE``), not parseable,
            a duplicate or non-string key (``CONFIG_SYNTAX_INVALID``).
    """
    file = str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise error(f"cannot read file: {exc.strerror}", file=file, reason="CONFIG_UNREADABLE") from None
    if len(raw) > MAX_FILE_BYTES:
        raise error(f"file larger than {MAX_FILE_BYTES} bytes", file=file, reason="CONFIG_TOO_LARGE")
    try:
        node = yaml.compose(raw.decode("utf-8"), Loader=_LOADER)
    except UnicodeDecodeError:
        raise error("file is not UTF-8", file=file, reason="CONFIG_SYNTAX_INVALID") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise error(f"not valid YAML: {problem}", file=file, line=line, reason="CONFIG_SYNTAX_INVALID") from None
    doc = Document(data=None)
    if node is None:
        raise error("file is empty", file=file, reason="CONFIG_SYNTAX_INVALID")
    doc.data = _convert(node, (), doc, file, error)
    return doc


def validation_error(
    exc: pydantic.ValidationError, doc: Document, file: str, *, error: FileErrorFactory, prefix: PathKey = (),
) -> Exception:
    """The first pydantic violation as ``error``, naming file, field and line.

    ``prefix`` is where the validated data sits in the document (a section of a larger file).
    """
    first = exc.errors()[0]
    raw_loc = [p for p in first["loc"] if isinstance(p, str | int)]
    # pydantic marks a bad mapping *key* with a trailing "[key]" segment.
    is_key = bool(raw_loc) and raw_loc[-1] == "[key]"
    loc = (*prefix, *(raw_loc[:-1] if is_key else raw_loc))
    message = f"invalid key: {first['msg']}" if is_key else first["msg"]
    if first["type"] == "extra_forbidden":
        message = "unknown field"
    elif first["type"] == "missing":
        message = "required field is missing"
    return error(message, file=file, field=format_path(loc) or None, line=doc.line_of(loc))
