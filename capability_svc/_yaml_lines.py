"""Load YAML (or JSON) while remembering the source line of every node.

PyYAML's ``safe_load`` throws line numbers away; validation errors must name
the line, so documents are composed into nodes and converted by hand, keeping a
map from each JSON path to its 1-based line. Building the data ourselves also
lets us refuse duplicate mapping keys, which ``safe_load`` silently collapses
(last one wins) — a silent data change is worse than a clear error.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from agentmesh.data_file import PathKey, format_path

__all__ = ["DocumentError", "LinedDocument", "PathKey", "format_path", "load_document"]

# libyaml's composer is ~10x faster and keeps the same marks (line numbers).
_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class DocumentError(Exception):
    """The text is not a parseable, unambiguous YAML/JSON document."""

    def __init__(self, message: str, *, line: int | None, path: PathKey = ()):
        super().__init__(message)
        self.message = message
        self.line = line
        self.path = path


@dataclass
class LinedDocument:
    """Plain data (dicts, lists, scalars) with the line of each path."""

    data: Any
    lines: dict[PathKey, int] = field(default_factory=dict)

    def line_of(self, path: Sequence[str | int]) -> int | None:
        """Line of ``path``, or of its nearest ancestor present in the file.

        A missing required field has no line of its own; the line of the
        mapping that should have held it is the useful answer.
        """
        key = tuple(path)
        while True:
            if key in self.lines:
                return self.lines[key]
            if not key:
                return None
            key = key[:-1]


def load_document(text: str) -> LinedDocument:
    """Parse one YAML (or JSON, a YAML subset) document with line tracking.

    Raises:
        DocumentError: on a syntax error, several documents, a duplicate key, a
            non-string key, or an empty document.
    """
    try:
        node = yaml.compose(text, Loader=_Loader)
    except yaml.composer.ComposerError as exc:
        raise DocumentError(_yaml_problem(exc), line=_mark_line(exc)) from None
    except yaml.YAMLError as exc:
        raise DocumentError(_yaml_problem(exc), line=_mark_line(exc)) from None
    if node is None:
        raise DocumentError("the document is empty", line=1)
    doc = LinedDocument(data=None)
    constructor = yaml.SafeLoader("")
    doc.data = _convert(node, (), doc, constructor)
    return doc


def _convert(
    node: yaml.Node,
    path: PathKey,
    doc: LinedDocument,
    ctor: yaml.SafeLoader,
    line: int | None = None,
) -> Any:
    # A mapping entry is located at its key: for a block value the node itself
    # starts on the next line, but "output_schema:" is where a reader looks.
    doc.lines[path] = line if line is not None else node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        result: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise DocumentError(
                    "mapping keys must be plain strings",
                    line=key_node.start_mark.line + 1,
                    path=path,
                )
            key = ctor.construct_object(key_node)
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise DocumentError(
                    "YAML merge keys ('<<') are not supported",
                    line=key_node.start_mark.line + 1,
                    path=path,
                )
            if not isinstance(key, str):
                # Unquoted keys like `2026-01-01` or `yes` would silently become
                # dates/bools; field names are always strings here.
                key = str(key_node.value)
            if key in result:
                raise DocumentError(
                    f"duplicate key {key!r}",
                    line=key_node.start_mark.line + 1,
                    path=(*path, key),
                )
            result[key] = _convert(
                value_node, (*path, key), doc, ctor, key_node.start_mark.line + 1
            )
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_convert(item, (*path, i), doc, ctor) for i, item in enumerate(node.value)]
    try:
        value = ctor.construct_object(node)
    except ValueError:
        # An impossible timestamp such as 2026-13-01 matches YAML's date
        # pattern but cannot be built; keep the text so the schema layer
        # reports it against its field like any other bad date.
        if node.tag == "tag:yaml.org,2002:timestamp":
            return str(node.value)
        raise DocumentError(
            f"cannot read value {str(node.value)[:40]!r}", line=node.start_mark.line + 1, path=path
        ) from None
    except yaml.YAMLError as exc:
        raise DocumentError(_yaml_problem(exc), line=node.start_mark.line + 1, path=path) from None
    if isinstance(value, _dt.datetime | _dt.date):
        # Keep dates as the ISO text the author wrote; the schema layer decides
        # whether a date is acceptable there, uniformly for YAML and JSON input.
        return value.isoformat()
    return value


def _mark_line(exc: yaml.YAMLError) -> int | None:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    return None if mark is None else int(mark.line) + 1


def _yaml_problem(exc: yaml.YAMLError) -> str:
    problem = getattr(exc, "problem", None)
    context = getattr(exc, "context", None)
    if problem and context:
        return f"{context}, {problem}"
    return str(problem or context or "the file is not valid YAML/JSON")
