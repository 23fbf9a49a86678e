"""A JSON Schema prepared once: a compiled check for the common case, the precise one for the errors.

Every service that checks data against a JSON Schema on a call's path (the capability service a
call's input and output, an agent its task's input and its result, the model gateway a prompt's
parameters and a model's answer) checks it through :class:`SchemaCheck`: ``jsonschema_rs``
(compiled) answers "valid" in microseconds; only when it finds a problem does the Python
``jsonschema`` validator run, which names each field. The Python validator is the authority:
where the compiled one is stricter than it (a ``$`` before a trailing newline), the Python answer
stands, so a check never refuses what the Python validator accepts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jsonschema
import jsonschema_rs


class SchemaCheck:
    """One schema, both validators built once.

    ``formats``: whether ``format`` keywords are checked (``date``, ``email``, …), by both.
    """

    def __init__(self, schema: Mapping[str, Any], *, formats: bool = True) -> None:
        checker = jsonschema.Draft202012Validator.FORMAT_CHECKER if formats else None
        self.precise = jsonschema.Draft202012Validator(dict(schema), format_checker=checker)
        try:
            self._fast: jsonschema_rs.Draft202012Validator | None = jsonschema_rs.Draft202012Validator(
                dict(schema), validate_formats=formats)
        except Exception:  # noqa: BLE001 - a schema it cannot compile (a regex it lacks): the precise check only
            self._fast = None

    def passes_fast(self, instance: Any) -> bool:
        """Whether the compiled check alone finds ``instance`` valid (False: ask the precise validator)."""
        return self._fast is not None and self._fast.is_valid(instance)

    def errors(self, instance: Any) -> list[jsonschema.ValidationError]:
        """The precise validator's errors for ``instance`` (empty: valid); it runs only if the compiled check fails."""
        if self.passes_fast(instance):
            return []
        return list(self.precise.iter_errors(instance))

    def first_error(self, instance: Any) -> jsonschema.ValidationError | None:
        """The error at the first path in order (None: valid), so which one is named does not depend on dict order."""
        found = self.errors(instance)
        return min(found, key=lambda e: list(map(str, e.absolute_path))) if found else None
