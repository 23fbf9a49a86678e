"""Turn pydantic and jsonschema errors into ``FieldViolation`` lists.

Both libraries report a location as a sequence of keys/indexes; this module
renders it as a JSON path (``workers[0].id``) and, when the data came from a
file, attaches the line. Violations are sorted so the *first* one — the one
named in the error's ``field`` — does not depend on dict iteration order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import jsonschema
import pydantic

from agentmesh import schema_check
from capability_svc._yaml_lines import LinedDocument, format_path
from capability_svc.errors import FieldViolation

_MAX_DESCRIPTION = 300


def _clip(text: str) -> str:
    # Messages can embed the offending value; keep them bounded so a hostile
    # or huge input cannot bloat error details and audit records.
    return text if len(text) <= _MAX_DESCRIPTION else text[: _MAX_DESCRIPTION - 3] + "..."


def _sorted(violations: Iterable[FieldViolation]) -> tuple[FieldViolation, ...]:
    unique = {(v.field, v.description): v for v in violations}
    return tuple(sorted(unique.values(), key=lambda v: (v.line or 0, v.field, v.description)))


def pydantic_violations(
    exc: pydantic.ValidationError, doc: LinedDocument | None = None
) -> tuple[FieldViolation, ...]:
    """Violations of a pydantic validation error, with lines from ``doc`` if given."""
    out: list[FieldViolation] = []
    for err in exc.errors(include_url=False):
        # pydantic marks a bad mapping *key* with a trailing "[key]" element;
        # the path without it already names the key.
        loc: Sequence[str | int] = [
            p for p in err["loc"] if isinstance(p, str | int) and p != "[key]"
        ]
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = "unknown field"
        elif err["type"] == "missing":
            message = "field required"
        line = doc.line_of(loc) if doc is not None else None
        out.append(FieldViolation(format_path(loc), _clip(message), line))
    return _sorted(out)


class SchemaCheck(schema_check.SchemaCheck):
    """:class:`agentmesh.schema_check.SchemaCheck` (formats checked) that also reports every violation."""

    def violations(self, instance: Any) -> tuple[FieldViolation, ...]:
        """Every violation of ``instance`` (empty: valid), as :func:`schema_violations` reports them."""
        if self.passes_fast(instance):
            return ()
        return schema_violations(self.precise, instance)


def schema_violations(
    validator: jsonschema.protocols.Validator, instance: Any
) -> tuple[FieldViolation, ...]:
    """All JSON Schema violations of ``instance``, each naming the precise field.

    ``required`` and ``additionalProperties`` errors are reported at the
    missing / unexpected property (``permit_id``), not at the enclosing object,
    because that is the field the caller has to fix.
    """
    out: list[FieldViolation] = []
    for error in validator.iter_errors(instance):
        base = list(error.absolute_path)
        if error.validator == "required" and isinstance(error.instance, Mapping):
            names = error.validator_value if isinstance(error.validator_value, list) else []
            for name in names:
                if name not in error.instance:
                    out.append(FieldViolation(format_path([*base, name]), "field required"))
            continue
        if error.validator == "additionalProperties" and isinstance(error.instance, Mapping):
            schema = error.schema if isinstance(error.schema, Mapping) else {}
            known = set(schema.get("properties", {}))
            extras = [k for k in error.instance if k not in known]
            if extras:
                for name in extras:
                    out.append(FieldViolation(format_path([*base, str(name)]), "unknown field"))
                continue
        out.append(FieldViolation(format_path(base), _clip(error.message)))
    return _sorted(out)
