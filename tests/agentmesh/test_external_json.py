"""agentmesh.external.strict_json_loads: what an outside answer must be to be read at all."""

from __future__ import annotations

import json

import pytest
from google.protobuf import struct_pb2

from agentmesh.external import MAX_JSON_DEPTH, DuplicateJsonKey, strict_json_loads
from agentmesh.v1 import specialist_service_pb2 as spec_pb2

REFUSED = {
    "NaN constant": '{"a": NaN}',
    "Infinity constant": '{"a": [-Infinity]}',
    "a float no double holds": '{"a": {"b": 1e999}}',
    "a negative float no double holds": '[-1.8e308]',
    "an integer no double holds": '{"a": 1' + "0" * 309 + "}",
    "a lone high surrogate": r'{"a": "x\ud800"}',
    "a lone low surrogate, in a list": r'{"a": ["ok", "\uDFFF"]}',
    "a lone surrogate in a key": r'{"\ud801": 1}',
    "a pair in the wrong order": r'["\ude00\ud83d"]',
    "lists nested one level too deep": "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1),
    "objects nested one level too deep, among others": '{"ok": [1, {"b": 2}], "deep": '
    + '{"a": ' * MAX_JSON_DEPTH + "1" + "}" * MAX_JSON_DEPTH + "}",
}


@pytest.mark.parametrize("case", sorted(REFUSED))
@pytest.mark.parametrize("as_bytes", [False, True], ids=["text", "bytes"])
def test_what_no_struct_could_carry_is_refused(case: str, as_bytes: bool) -> None:
    doc = REFUSED[case]
    with pytest.raises(ValueError):
        strict_json_loads(doc.encode() if as_bytes else doc)


READ = {
    "largest doubles": ('[1.7976931348623157e308, -1.7976931348623157e308, 5e-324]',
                        [1.7976931348623157e308, -1.7976931348623157e308, 5e-324]),
    "a number that underflows to zero": ('[1e-400]', [0.0]),
    "a big integer a double holds": ('[' + "9" * 300 + ']', [int("9" * 300)]),
    "a surrogate pair (an emoji)": (r'{"a": "\ud83d\ude00"}', {"a": "\U0001f600"}),
    "an escaped backslash before u": (r'{"a": "\\ud800"}', {"a": "\\ud800"}),
    "plain UTF-8": ('{"a": "ação \U0001f600"}', {"a": "ação \U0001f600"}),
    "brackets inside a string": ('{"a": "' + "{[" * 100 + '"}', {"a": "{[" * 100}),
    "many brackets, none deep": ("[" + ", ".join(["{}"] * 100) + "]", [{}] * 100),
}


@pytest.mark.parametrize("case", sorted(READ))
def test_strict_json_is_read_as_json_and_fits_a_struct(case: str) -> None:
    doc, expected = READ[case]
    for form in (doc, doc.encode()):
        got = strict_json_loads(form)
        assert got == expected
        struct = struct_pb2.Struct()
        struct.update({"v": got})
        struct.SerializeToString()


def test_the_deepest_answer_read_still_travels_in_an_agents_evidence() -> None:
    data: object = 1
    for _ in range(MAX_JSON_DEPTH - 1):
        data = {"a": data}
    read = strict_json_loads('{"v": ' + str(data).replace("'", '"') + "}")
    response = spec_pb2.RunTaskResponse()
    response.result.evidence.add().data.update(read)
    assert spec_pb2.RunTaskResponse.FromString(response.SerializeToString()) == response


def test_a_key_twice_is_refused_as_such() -> None:
    with pytest.raises(DuplicateJsonKey):
        strict_json_loads('{"a": 1, "a": 2}')
    with pytest.raises(json.JSONDecodeError):
        strict_json_loads('{"a": ')
