"""agentmesh.structs: the plain data of a Struct, as json_format has it, in one pass."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from google.protobuf import json_format, struct_pb2

from agentmesh.structs import plain_struct, struct_dict

CASES: list[dict[str, Any]] = [
    {},
    {"a": 4.0, "b": [1.5, {"c": 2.0}], "d": None, "e": True, "f": False},
    {"hits": [{"doc": "NR-35", "score": 0.8123, "rank": 3, "links": [], "text": "ç" * 50}] * 3, "total": 3},
    {"deep": {"er": {"still": [[1, 2.5], [], [None, "x"]]}}, "big": 2.0 ** 60, "neg": -0.0, "small": 1e-300},
    {"max": 1.7976931348623157e308, "min": -1.7976931348623157e308, "tiny": 5e-324, "\u00ff\x00key": "v"},
]


def plain(value: Any) -> Any:
    """Integral floats as ints, everywhere in ``value``."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def _struct(data: dict[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(data)
    return struct


def _random(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.choice("snbzld" if depth < 4 else "snb")
    if kind == "s":
        return "".join(rng.choice("ab\x11\U0001f600") for _ in range(rng.randint(0, 6)))
    if kind == "n":
        return rng.choice([0.0, -0.0, 3.0, -7.0, 2.0 ** 53 + 2, rng.random() * 1e6, -rng.random()])
    if kind == "b":
        return rng.random() < 0.5
    if kind == "z":
        return None
    if kind == "l":
        return [_random(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {f"k{i}": _random(rng, depth + 1) for i in range(rng.randint(0, 4))}


@pytest.mark.parametrize("data", [*CASES, *({f"k{i}": _random(random.Random(seed)) for i in range(5)}
                                            for seed in range(30))])
def test_the_same_data_as_message_to_dict(data: dict[str, Any]) -> None:
    struct = _struct(data)
    expected = json_format.MessageToDict(struct)
    got = struct_dict(struct)
    assert got == expected
    # Equal is not enough: 3 == 3.0. Every number a float, as MessageToDict has it.
    assert repr(got) == repr(expected)
    assert repr(plain_struct(struct)) == repr(plain(expected))


def test_a_value_with_no_kind_is_null() -> None:
    unset = struct_pb2.Struct()
    unset.fields["x"].SetInParent()
    assert struct_dict(unset) == plain_struct(unset) == json_format.MessageToDict(unset) == {"x": None}


@pytest.mark.parametrize("number", [math.inf, -math.inf, math.nan])
def test_what_json_has_no_number_for_is_refused(number: float) -> None:
    struct = _struct({"outer": [{"x": number}]})
    with pytest.raises(ValueError):
        json_format.MessageToDict(struct)
    with pytest.raises(ValueError):
        struct_dict(struct)
    with pytest.raises(ValueError):
        plain_struct(struct)
