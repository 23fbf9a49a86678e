"""Plain data of a ``google.protobuf.Struct``, in one pass, without ``json_format``'s generic printer.

* :func:`struct_dict` is ``json_format.MessageToDict(struct)``: every number a float, as a Struct has it;
* :func:`plain_struct` is the same with integral numbers as ints, as JSON data written by hand has them
  (``{"hours": 8}`` rather than ``8.0``).

Both raise ValueError for a NaN or an infinity, as ``MessageToDict`` does (no JSON has them; the edge
validation refuses them in every request, see :mod:`agentmesh.validation`). A Value with no kind set is
None, as ``MessageToDict`` has it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from google.protobuf import struct_pb2

__all__ = ["plain_struct", "struct_dict"]


def struct_dict(struct: struct_pb2.Struct) -> dict[str, Any]:
    """``json_format.MessageToDict(struct)`` of a Struct, numbers as floats.

    Raises:
        ValueError: a number is infinite or NaN.
    """
    return _struct(struct, _number)


def plain_struct(struct: struct_pb2.Struct) -> dict[str, Any]:
    """:func:`struct_dict` with integral numbers as ints.

    Raises:
        ValueError: a number is infinite or NaN.
    """
    return _struct(struct, _plain_number)


def _number(number: float) -> float:
    if not math.isfinite(number):
        raise ValueError(f"{number} in a Struct is not a JSON number")
    return number


def _plain_number(number: float) -> float | int:
    return int(number) if _number(number).is_integer() else number


def _struct(struct: struct_pb2.Struct, number: Callable[[float], Any]) -> dict[str, Any]:
    fields = struct.fields
    # Keys, then each value by key: the map's own C iteration, not the Python generator of ``items()``.
    return {key: _value(fields[key], number) for key in fields}


def _value(value: struct_pb2.Value, number: Callable[[float], Any]) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        return value.string_value
    if kind == "number_value":
        return number(value.number_value)
    if kind == "struct_value":
        return _struct(value.struct_value, number)
    if kind == "list_value":
        return [_value(item, number) for item in value.list_value.values]
    if kind == "bool_value":
        return value.bool_value
    return None  # null_value, or no kind set (MessageToDict's null too)
