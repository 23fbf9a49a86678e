"""SchemaCheck: the compiled check answers the valid case; the precise validator names the errors, has the last word."""

from __future__ import annotations

from typing import Any

import pytest

from agentmesh.schema_check import SchemaCheck

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

INSTANCES = [
    {"permit_id": "WP-10231"},
    {"permit_id": "WP-10231", "valid_from": "2030-01-31", "workers": ["W-1001"]},
    {"permit_id": "WP-1"},
    {"permit_id": "WP-10231", "valid_from": "2030-02-30"},
    {"permit_id": "WP-10231", "extra": 1},
    {"valid_from": "2030-01-01"},
    {"permit_id": "WP-10231", "workers": ["a", "b", "c", "d"]},
    {"permit_id": 7},
    [],
]


@pytest.mark.parametrize("formats", [True, False])
@pytest.mark.parametrize("instance", INSTANCES)
def test_the_same_errors_as_the_precise_validator(instance: Any, formats: bool) -> None:
    check = SchemaCheck(SCHEMA, formats=formats)
    assert [e.message for e in check.errors(instance)] == [e.message for e in check.precise.iter_errors(instance)]


def test_formats_are_checked_by_both_or_by_neither() -> None:
    bad_date = {"permit_id": "WP-10231", "valid_from": "2030-02-30"}
    assert [e.validator for e in SchemaCheck(SCHEMA).errors(bad_date)] == ["format"]
    lenient = SchemaCheck(SCHEMA, formats=False)
    assert lenient.errors(bad_date) == []
    assert lenient.passes_fast(bad_date)  # not sent to the precise validator for a format it does not check


def test_where_the_compiled_check_is_stricter_the_precise_answer_stands() -> None:
    # Python's "$" matches before a trailing newline; the compiled check's does not.
    check = SchemaCheck(SCHEMA)
    assert not check.passes_fast({"permit_id": "WP-10231\n"})
    assert check.errors({"permit_id": "WP-10231\n"}) == []
    assert check.first_error({"permit_id": "WP-10231\n"}) is None


def test_a_schema_the_compiled_check_cannot_build_is_checked_by_the_precise_validator_alone() -> None:
    check = SchemaCheck({"type": "string", "pattern": r"^WP-\d{5}\Z"})  # \Z: Python's, not the compiled one's
    assert not check.passes_fast("WP-10231")
    assert check.errors("WP-10231") == []
    assert [e.validator for e in check.errors("WP-1")] == ["pattern"]


def test_the_first_error_is_the_first_by_path_whatever_the_dict_order() -> None:
    check = SchemaCheck(SCHEMA)
    for instance in ({"workers": [1], "permit_id": 7}, {"permit_id": 7, "workers": [1]}):
        error = check.first_error(instance)
        assert error is not None and list(error.absolute_path) == ["permit_id"]
    assert check.first_error({"permit_id": "WP-10231"}) is None
