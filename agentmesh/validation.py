"""Edge validation of every request, before any servicer code runs.

The mesh server interceptor (:mod:`agentmesh.transport`) calls :func:`check`
on every decoded request of every service, and :func:`check_trace_ids` on
the ids a caller can send in W3C ``baggage`` and ``traceparent``. A request
is refused with INVALID_ARGUMENT, ``ErrorInfo.metadata["field"]`` naming the
offending field by its dotted path (``agent.delegation_chain[2]``), when:

* an enum field holds a number its enum does not define (``ENUM_VALUE_UNKNOWN``);
* a string, bytes or repeated field is longer than its maximum
  (``FIELD_TOO_LONG``, with ``max``);
* a string has a character outside its category's set (``FIELD_INVALID_CHARACTERS``);
* a ``google.protobuf.Timestamp`` is outside years 1-9999 or has bad nanos
  (``FIELD_OUT_OF_RANGE``);
* a ``double`` or ``float`` field, or a number anywhere inside a
  ``google.protobuf.Struct`` / ``Value`` / ``ListValue``, is NaN or infinite
  (``FIELD_OUT_OF_RANGE``; no JSON, no schema and no canonical digest has such
  a number, so every service would otherwise fail on it where it reads it).

Every string field belongs to one category (:data:`CATEGORIES`) chosen by its
name: :data:`FIELD_CATEGORIES` first (by ``Message.field`` or by field name),
then the id rule (:func:`category_of`), else ``line``. The README section
"Input limits" is this table (a test keeps them in sync).

The contents of ``google.protobuf.Struct`` / ``Value`` / ``ListValue`` are
checked for their numbers only (their shape and strings are schema-validated by
the services that take them), and the inside of bytes fields not at all (a
signed grant is decoded and checked by whoever verifies it). A Struct's keys are
the caller's data, so a refusal names the field that holds the Struct, never a
key inside it.

:func:`problem` applies to any message, not only a request: the supervisor
holds an agent's answer to the same rules (see ``supervisor_svc.servicer``).

Checks are cheap: the first request of a type builds a plan (the list of its
fields that need a check, with their rule), cached by the type's full name;
later requests only loop over that plan. Nothing here ever puts the refused
value into an error: messages and metadata name the field, the rule and the
maximum only, so a refusal can be audited and logged as it is.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from agentmesh import errors, telemetry

REQUEST_UNDECODABLE: Final = "REQUEST_UNDECODABLE"
ENUM_VALUE_UNKNOWN: Final = "ENUM_VALUE_UNKNOWN"
FIELD_TOO_LONG: Final = "FIELD_TOO_LONG"
FIELD_INVALID_CHARACTERS: Final = "FIELD_INVALID_CHARACTERS"
FIELD_OUT_OF_RANGE: Final = "FIELD_OUT_OF_RANGE"

MAX_REPEATED: Final = 1000
"""Most items in any repeated (or map) field."""
MAX_BYTES: Final = 16 * 1024
"""Most bytes in a bytes field (a signed grant is well under 2 KiB)."""
MAX_BYTES_BY_FIELD: Final[Mapping[str, int]] = {
    # An Ed25519 signature is 64 bytes.
    "agentmesh.v1.SignedTaskGrant.signature": 512,
    "agentmesh.v1.SignedTaskGrant.record_signature": 512,
}

ID_CHARACTERS: Final = "A-Z a-z 0-9 . _ ~ : / @ + = -"


@dataclass(frozen=True, slots=True)
class Category:
    """One kind of string field: its maximum length (characters) and its character set."""

    name: str
    max_length: int
    characters: str
    """The character set, as documented."""
    ok: Callable[[str], object]
    """Truthy when every character of the (non-empty) value is in the set."""
    examples: str


def _only(characters: str) -> Callable[[str], object]:
    # The pattern's own fullmatch (a match or None): no Python call of ours around it on the hot path.
    return re.compile(f"[{re.escape(characters)}]*").fullmatch


def _none_of(pattern: str) -> Callable[[str], object]:
    search = re.compile(f"[{pattern}]").search
    # isprintable() is a fast yes for almost every real value; only a value it
    # doubts (a control character, or e.g. a no-break space) needs the exact search.
    return lambda value: value.isprintable() or search(value) is None


def _chars(*items: str) -> str:
    """Every character of the given ranges ("a-z") and single characters."""
    out: list[str] = []
    for item in items:
        if len(item) == 3 and item[1] == "-":
            out.extend(chr(c) for c in range(ord(item[0]), ord(item[2]) + 1))
        else:
            out.append(item)
    return "".join(out)


_ID_SET: Final = _chars("A-Z", "a-z", "0-9", ".", "_", "~", ":", "/", "@", "+", "=", "-")
_ASSERTION_SET: Final = _chars("A-Z", "a-z", "0-9", "_", "-", ".", "=")
_TRACE_SET: Final = _chars("0-9", "a-f", "-")

_CONTROL: Final = r"\x00-\x1f\x7f-\x9f"  # Unicode category Cc: C0 controls, DEL, C1 controls
_CONTROL_BUT_TAB_LF: Final = r"\x00-\x08\x0b-\x1f\x7f-\x9f"

CATEGORIES: Final[Mapping[str, Category]] = {
    c.name: c
    for c in (
        Category("id", 128, ID_CHARACTERS, _only(_ID_SET),
                 "`exe-3f2a…`, `task-training-1a2b`, `W-1001`, `acme`, a SHA-256 hex digest, a confirmation token"),
        Category("principal", 256, ID_CHARACTERS, _only(_ID_SET),
                 "`spiffe://agentmesh.local/agent/training-agent`, `user:acme/alice`"),
        Category("reference", 256, ID_CHARACTERS, _only(_ID_SET),
                 "`permit:WP-10231`, `training.getStatus@1.0.0` (a TYPE:ID or ID@VERSION of two ids)"),
        Category("assertion", 8192, "A-Z a-z 0-9 _ - . = (base64url and dots)", _only(_ASSERTION_SET),
                 "a compact JWS (the user assertion)"),
        Category("trace", 128, "0-9 a-f -", _only(_TRACE_SET),
                 "`00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01`"),
        Category("text", 4096, "any character except control characters other than TAB and LF",
                 _none_of(_CONTROL_BUT_TAB_LF), "a request in natural language, a reason"),
        Category("line", 1024, "any character except control characters", _none_of(_CONTROL),
                 "a version, an evidence source, a symbol name"),
    )
}
"""The string categories; ``line`` is the default of any string field not otherwise classed."""

DEFAULT_CATEGORY: Final = "line"

ID_SUFFIXES: Final = ("_id", "_ids", "_key", "_token", "_digest")
ID_NAMES: Final = frozenset({"id", "digest"})

FIELD_CATEGORIES: Final[Mapping[str, str]] = {
    # SPIFFE ids and delegation-chain principals.
    "recorded_by": "principal",
    "delegation_chain": "principal",
    "spiffe_id": "principal",
    "issuer": "principal",
    "audience": "principal",
    "changed_by": "principal",
    # Two ids joined: "TYPE:ID", "ID@VERSION".
    "resource": "reference",
    "resources": "reference",
    "capability": "reference",
    # Ids whose name does not say so.
    "target": "id",
    "assignee": "id",
    "system_actor": "id",
    "type": "id",
    "roles": "id",
    "user_roles": "id",
    "capabilities": "id",
    "required_capabilities": "id",
    "domains": "id",
    "knowledge_scopes": "id",
    "training_code": "id",
    "expired_on": "id",
    "locale": "id",
    "intent_rule": "id",
    # The signed user assertion (JWT).
    "user_assertion": "assertion",
    # Free text.
    "request_text": "text",
    "reason": "text",
    "override_reason": "text",
    "reason_codes": "text",
    "objective": "text",
    "purpose": "text",
    "description": "text",
    "summary": "text",
    "message": "text",
    "text": "text",
    "explanation": "text",
    "error_reason": "text",
    "resolution": "text",
}
"""Category of a string field by ``package.Message.field`` or by field name (the former wins);
fields not listed follow the id rule (:func:`category_of`) or are ``line``."""

TRACE_HEADERS: Final[Mapping[str, str]] = {"traceparent": "trace"}
"""gRPC metadata headers checked at the edge, and their category."""


def category_of(field: FieldDescriptor) -> Category:
    """The category of a string field: the override table, else the id rule, else ``line``.

    The id rule: a field named ``id`` or ``digest``, or whose name ends in ``_id``,
    ``_ids``, ``_key``, ``_token`` or ``_digest``.
    """
    name = field.name
    chosen = FIELD_CATEGORIES.get(field.full_name) or FIELD_CATEGORIES.get(name)
    if chosen is None:
        chosen = "id" if name in ID_NAMES or name.endswith(ID_SUFFIXES) else DEFAULT_CATEGORY
    return CATEGORIES[chosen]


class _Violation(Exception):
    """Raised inside the walk; the path is collected while unwinding (only on failure)."""

    def __init__(self, reason: str, leaf: str, *, says: str = "is out of range", **metadata: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.parts = [leaf]
        self.says = says
        """What is wrong, after the path (``FIELD_OUT_OF_RANGE``)."""
        self.metadata = metadata

    def error(self, prefix: str = "") -> errors.InvalidArgument:
        path = prefix + ".".join(reversed(self.parts))
        if self.reason == FIELD_TOO_LONG:
            message = f"{path} is longer than {self.metadata['max']} {self.metadata.pop('unit')}"
        elif self.reason == FIELD_INVALID_CHARACTERS:
            message = f"{path} has a character outside its set ({self.metadata.pop('characters')})"
        elif self.reason == ENUM_VALUE_UNKNOWN:
            message = f"{path} is not a known {self.metadata['enum']} value"
        else:
            message = f"{path} {self.says}"
        return errors.InvalidArgument(message, reason=self.reason, field=path, metadata=self.metadata)


# Kinds of plan steps: the three common singular kinds get their own fast path.
_STRING, _MESSAGE, _ENUM, _REPEATED, _BYTES, _TIMESTAMP, _MAP, _NUMBER, _JSON = range(9)

_Step = tuple[str, int, Any]
"""(field name, kind, rule): rule is a Category (string), a sub-plan (message), the enum's
(name, numbers), a byte maximum, the check of a Struct, Value or ListValue (_JSON: true when every
number inside is finite), or for _REPEATED / _MAP the step of one item (None when only the length
is bounded) / the (key step, value step)."""

_NOT_FINITE: Final = "is not a finite number (NaN or infinity)"
_HOLDS_NOT_FINITE: Final = "holds a number that is not finite (NaN or infinity)"


_MAYBE_NOT_FINITE: Final = re.compile(rb"\x11.{6}[\xf0-\xff][\x7f\xff]", re.DOTALL).search
"""Nine bytes that may be a non-finite ``Value.number_value`` on the wire: its tag (field 2, 64-bit: 0x11), then
the little-endian double, whose 11 exponent bits are all set in a NaN or an infinity (the top nibble of its 7th
byte, the low 7 bits of its 8th). Every non-finite number in a Struct is such nine bytes; a wire form without
them anywhere has none."""


def _finite_json(message: Any) -> bool:
    """True when every number inside a Struct, Value or ListValue is finite."""
    # The wire form is made and searched in C; only when it has such bytes (a non-finite number, or, rarely,
    # string or length bytes that look like one) is the message converted as its readers convert it, which
    # raises ValueError for a NaN or an infinity anywhere inside.
    if _MAYBE_NOT_FINITE(message.SerializeToString()) is None:
        return True
    try:
        json_format.MessageToDict(message)
    except ValueError:
        return False
    return True


_JSON_TYPES: Final = frozenset({"google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue"})

_TIMESTAMP_TYPE: Final = "google.protobuf.Timestamp"
_MIN_SECONDS: Final = -62_135_596_800  # 0001-01-01T00:00:00Z
_MAX_SECONDS: Final = 253_402_300_799  # 9999-12-31T23:59:59Z

_plans: dict[str, list[_Step]] = {}
_building: set[str] = set()
_lock = threading.Lock()


def _plan(descriptor: Any) -> list[_Step]:
    plan = _plans.get(descriptor.full_name)
    if plan is None:
        with _lock:
            plan = _plans.get(descriptor.full_name)
            if plan is None:
                plan = _build(descriptor)
    return plan


def _build(descriptor: Any) -> list[_Step]:
    # Registered before it is filled, so a recursive type refers to its own plan.
    plan: list[_Step] = []
    _plans[descriptor.full_name] = plan
    _building.add(descriptor.full_name)
    try:
        for field in descriptor.fields:
            step = _step(field)
            if step is not None:
                plan.append(step)
    finally:
        _building.discard(descriptor.full_name)
    return plan


def _step(field: FieldDescriptor, *, item: bool = False) -> _Step | None:
    """The check of one field; ``item`` builds the check of one element of a repeated field."""
    if field.is_repeated and not item:
        sub = field.message_type
        if sub is not None and sub.GetOptions().map_entry:
            return (field.name, _MAP, (_step(sub.fields_by_name["key"]), _step(sub.fields_by_name["value"])))
        return (field.name, _REPEATED, _step(field, item=True))
    if field.type == FieldDescriptor.TYPE_STRING:
        return (field.name, _STRING, category_of(field))
    if field.type == FieldDescriptor.TYPE_BYTES:
        return (field.name, _BYTES, MAX_BYTES_BY_FIELD.get(field.full_name, MAX_BYTES))
    if field.type == FieldDescriptor.TYPE_ENUM:
        enum = field.enum_type
        assert enum is not None
        return (field.name, _ENUM, (enum.full_name, frozenset(v.number for v in enum.values)))
    if field.type in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP):
        sub = field.message_type
        assert sub is not None
        if sub.full_name in _JSON_TYPES:
            return (field.name, _JSON, _finite_json)
        if sub.full_name == _TIMESTAMP_TYPE:
            return (field.name, _TIMESTAMP, None)
        sub_plan = _plans.get(sub.full_name)
        if sub_plan is None:
            sub_plan = _build(sub)
        if not sub_plan and sub.full_name not in _building:
            return None  # only integers and bools inside: nothing to check
        return (field.name, _MESSAGE, sub_plan)
    if field.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return (field.name, _NUMBER, None)
    return None  # integers and bools


def _string_violation(value: str, leaf: str, category: Category) -> _Violation:
    if len(value) > category.max_length:
        return _Violation(FIELD_TOO_LONG, leaf, max=str(category.max_length), unit="characters")
    return _Violation(FIELD_INVALID_CHARACTERS, leaf, characters=category.characters)


def _leaf(name: str, index: int) -> str:
    return name if index < 0 else f"{name}[{index}]"


def _check_item(kind: int, rule: Any, value: Any, name: str, index: int = -1) -> None:
    """Checks one value of any kind but _REPEATED / _MAP: field ``name``, item ``index`` (-1: singular)."""
    if kind == _STRING:
        if value and (len(value) > rule.max_length or not rule.ok(value)):
            raise _string_violation(value, _leaf(name, index), rule)
    elif kind == _MESSAGE:
        try:
            _walk(value, rule)
        except _Violation as v:
            v.parts.append(_leaf(name, index))
            raise
    elif kind == _ENUM:
        if value not in rule[1]:
            raise _Violation(ENUM_VALUE_UNKNOWN, _leaf(name, index), enum=rule[0])
    elif kind == _BYTES:
        if len(value) > rule:
            raise _Violation(FIELD_TOO_LONG, _leaf(name, index), max=str(rule), unit="bytes")
    elif kind == _TIMESTAMP:
        if not (_MIN_SECONDS <= value.seconds <= _MAX_SECONDS and 0 <= value.nanos <= 999_999_999):
            raise _Violation(FIELD_OUT_OF_RANGE, _leaf(name, index))
    elif kind == _NUMBER:
        if not math.isfinite(value):
            raise _Violation(FIELD_OUT_OF_RANGE, _leaf(name, index), says=_NOT_FINITE)
    elif kind == _JSON and not rule(value):
        raise _Violation(FIELD_OUT_OF_RANGE, _leaf(name, index), says=_HOLDS_NOT_FINITE)


def _check_items(message: Any, name: str, kind: int, rule: Any) -> None:
    values = getattr(message, name)
    if not values:
        return
    if len(values) > MAX_REPEATED:
        raise _Violation(FIELD_TOO_LONG, name, max=str(MAX_REPEATED), unit="items")
    if kind == _MAP:
        for i, key in enumerate(values):
            for step, value, part in ((rule[0], key, "key"), (rule[1], values[key], "value")):
                if step is not None:
                    try:
                        _check_item(step[1], step[2], value, part)
                    except _Violation as v:
                        v.parts.append(f"{name}[{i}]")
                        raise
    elif rule is not None:
        _, item_kind, item_rule = rule
        for i, value in enumerate(values):
            _check_item(item_kind, item_rule, value, name, i)


def _walk(message: Any, plan: list[_Step]) -> None:
    for name, kind, rule in plan:
        if kind == _STRING:
            value = getattr(message, name)
            if value and (len(value) > rule.max_length or not rule.ok(value)):
                raise _string_violation(value, name, rule)
        elif kind == _MESSAGE:
            if message.HasField(name):
                try:
                    _walk(getattr(message, name), rule)
                except _Violation as v:
                    v.parts.append(name)
                    raise
        elif kind == _ENUM:
            if getattr(message, name) not in rule[1]:
                raise _Violation(ENUM_VALUE_UNKNOWN, name, enum=rule[0])
        elif kind == _TIMESTAMP:
            if message.HasField(name):
                _check_item(kind, rule, getattr(message, name), name)
        elif kind == _BYTES:
            _check_item(kind, rule, getattr(message, name), name)
        elif kind == _NUMBER:
            if not math.isfinite(getattr(message, name)):
                raise _Violation(FIELD_OUT_OF_RANGE, name, says=_NOT_FINITE)
        elif kind == _JSON:
            if message.HasField(name) and not rule(getattr(message, name)):
                raise _Violation(FIELD_OUT_OF_RANGE, name, says=_HOLDS_NOT_FINITE)
        else:  # _REPEATED, _MAP
            _check_items(message, name, kind, rule)


def check(message: Message) -> None:
    """Raises ``errors.InvalidArgument`` naming the first field of ``message`` that breaks its rule."""
    error = problem(message)
    if error is not None:
        raise error


def problem(message: Message) -> errors.InvalidArgument | None:
    """The refusal for the first field of ``message`` that breaks its rule, or None.

    Anything that is not a protobuf message (a handler that takes raw bytes, or
    decodes leniently into its own stand-in) has nothing to check here.
    """
    try:
        descriptor = message.DESCRIPTOR
    except AttributeError:
        return None
    plan = _plans.get(descriptor.full_name)
    if plan is None:
        plan = _plan(descriptor)
    try:
        _walk(message, plan)
    except _Violation as v:
        return v.error()
    return None


def value_problem(field: str, value: str, category: str) -> errors.InvalidArgument | None:
    """The refusal for one string value of a category (e.g. a baggage entry), or None."""
    try:
        _check_item(_STRING, CATEGORIES[category], value, field)
    except _Violation as v:
        return v.error()
    return None


def check_trace_ids(headers: Iterable[tuple[str, Any]], baggage: Mapping[str, object]) -> errors.InvalidArgument | None:
    """The refusal for a bad ``traceparent`` header or a bad mesh id in baggage, or None.

    ``headers`` are the call's metadata; ``baggage`` the mesh entries extracted
    from its ``baggage`` header (name → value), checked as ids
    (field ``baggage.<name>``).
    """
    for key, value in headers:
        category = TRACE_HEADERS.get(key)
        if category is not None and isinstance(value, str):
            found = value_problem(key, value, category)
            if found is not None:
                return found
    for name, value in baggage.items():
        found = value_problem(f"baggage.{name}", str(value), "id")
        if found is not None:
            return found
    return None


def invalid_ids(ids: Mapping[str, str]) -> list[str]:
    """The names of the baggage ids (name → value) that break the id rule."""
    return [name for name, value in ids.items() if value_problem(name, value, "id") is not None]


def undecodable(type_name: str) -> errors.InvalidArgument:
    """The refusal for request bytes that are not a ``type_name``."""
    return errors.InvalidArgument(f"the request is not a valid {type_name or 'message'}",
                                  reason=REQUEST_UNDECODABLE, metadata={"type": type_name} if type_name else None)


def limits_markdown() -> str:
    """The README's table of input limits, generated from the tables above (a test compares them)."""

    def names(category: str) -> str:
        return ", ".join(f"`{n.rsplit('.', 1)[-1]}`" for n, c in FIELD_CATEGORIES.items() if c == category)

    which = {
        "id": "named " + " or ".join(f"`{n}`" for n in sorted(ID_NAMES)) + ", or ending in "
              + ", ".join(f"`{s}`" for s in ID_SUFFIXES) + "; and " + names("id"),
        "trace": "the `traceparent` header",
        "line": "every other string field",
    }
    lines = ["| category | string fields | maximum (characters) | characters | e.g. |", "|---|---|---|---|---|"]
    for c in CATEGORIES.values():
        lines.append(f"| `{c.name}` | {which.get(c.name) or names(c.name)} | {c.max_length} | {c.characters} "
                     f"| {c.examples} |")
    bytes_overrides = ", ".join(f"`{n.rsplit('.', 2)[-2]}.{n.rsplit('.', 1)[-1]}` {m}"
                                for n, m in MAX_BYTES_BY_FIELD.items())
    lines += [
        "",
        f"* bytes fields: at most {MAX_BYTES} bytes ({bytes_overrides});",
        f"* repeated and map fields: at most {MAX_REPEATED} items;",
        "* enum fields: only numbers the enum defines (`ENUM_VALUE_UNKNOWN`);",
        "* `google.protobuf.Timestamp`: years 1 to 9999, nanos 0 to 999999999 (`FIELD_OUT_OF_RANGE`);",
        "* baggage " + ", ".join(f"`{k}`" for k in telemetry.MESH_KEYS)
        + ": the `id` category, field `baggage.<name>`;",
        "* `double` and `float` fields, and every number inside a `google.protobuf.Struct`, `Value` or\n"
        "  `ListValue`: finite (`FIELD_OUT_OF_RANGE`). No JSON, schema or canonical digest has NaN or infinity:\n"
        "  before this check such a number failed whichever service first read it as JSON (INTERNAL, nothing\n"
        "  recorded);",
        "* the strings and shape inside a Struct are the schema's of whoever takes it (a capability's input schema, a\n"
        "  result contract), and the inside of bytes fields is not walked here.",
    ]
    return "\n".join(lines) + "\n"
