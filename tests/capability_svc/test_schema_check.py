"""The capability service's SchemaCheck: every violation, as the precise validator reports them.

The compiled check and its fallback are tested with :mod:`agentmesh.schema_check`."""

from __future__ import annotations

from typing import Any

import pytest

from capability_svc._validation import SchemaCheck, schema_violations

SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["permit_id"],
    "additionalProperties": False,
    "properties": {
        "permit_id": {"type": "string", "pattern": "^WP-[0-9]{5}$"},
        "valid_from": {"type": "string", "format": "date"},
        "workers": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    },
}


@pytest.mark.parametrize("instance", [
    {"permit_id": "WP-10231"},
    {"permit_id": "WP-10231", "valid_from": "2030-01-31", "workers": ["W-1001"]},
    {"permit_id": "WP-1"},
    {"permit_id": "WP-10231", "valid_from": "2030-02-30"},
    {"permit_id": "WP-10231", "extra": 1},
    {"valid_from": "2030-01-01"},
    {"permit_id": "WP-10231", "workers": ["a", "b", "c", "d"]},
    {"permit_id": 7},
    [],
])
def test_the_same_violations_as_the_precise_validator(instance: Any) -> None:
    check = SchemaCheck(SCHEMA)
    assert check.violations(instance) == schema_violations(check.precise, instance)


def test_where_the_compiled_check_is_stricter_the_precise_answer_stands() -> None:
    # Python's "$" matches before a trailing newline; the compiled check's does not.
    check = SchemaCheck(SCHEMA)
    assert check.violations({"permit_id": "WP-10231\n"}) == ()


def test_an_error_names_the_field() -> None:
    (violation,) = SchemaCheck(SCHEMA).violations({"permit_id": "WP-10231", "valid_from": "someday"})
    assert violation.field == "valid_from"
