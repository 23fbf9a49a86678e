"""Edge validation: every rule, the exact boundaries, paths of nested and repeated fields."""

from __future__ import annotations

import random
import re
import secrets
from pathlib import Path

import pytest
from google.protobuf import struct_pb2
from google.rpc import error_details_pb2

from agentmesh import errors, validation
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import capability_service_pb2 as cap_pb2
from agentmesh.v1 import common_pb2
from agentmesh.v1 import policy_service_pb2 as policy_pb2
from agentmesh.v1 import supervisor_service_pb2 as sup_pb2

README = Path(__file__).resolve().parents[2] / "README.md"


def _refusal(message: object) -> errors.InvalidArgument:
    err = validation.problem(message)  # type: ignore[arg-type]
    assert err is not None, "expected a refusal"
    assert err.code.name == "INVALID_ARGUMENT"
    return err


def _authorize(**fields: object) -> policy_pb2.AuthorizeRequest:
    req = policy_pb2.AuthorizeRequest(
        user=common_pb2.UserContext(tenant_id="acme", user_id="alice", session_id="ses-1a2b3c4d5e6f",
                                    conversation_id="conv-1a2b3c4d5e6f", roles=["analyst", "permit-manager"],
                                    assertion_digest="a" * 64),
        actor_type=common_pb2.ACTOR_TYPE_USER,
        agent=common_pb2.AgentPrincipal(
            agent_id="training-agent", agent_version="1.0.0", execution_id="exe-0123456789abcdef",
            delegation_chain=["user:acme/alice", "svc:supervisor", "agent:training-agent"]),
        delegation_depth=2, capability_id="training.getStatus", capability_version="1.0.0",
        resource=policy_pb2.ResourceRef(type="Worker", id="W-1001", tenant_id="acme"),
        context=policy_pb2.OperationContext(risk_profile=common_pb2.RiskProfile(max_risk=common_pb2.RISK_LEVEL_LOW)),
        operation=policy_pb2.OPERATION_KIND_INVOKE,
        trace=common_pb2.TraceContext(trace_id="4bf92f3577b34da6a3ce929d0e0e4736", correlation_id="corr-1a2b3c4d5e6f",
                                      execution_id="exe-0123456789abcdef"),
    )
    for name, value in fields.items():
        setattr(req, name, value)
    return req


# --------------------------------------------------------------- real values fit


def test_real_ids_and_requests_pass() -> None:
    assert validation.problem(_authorize()) is None
    jwt = ".".join(secrets.token_urlsafe(n) for n in (30, 400, 64))
    assert validation.problem(sup_pb2.AnalyzeRequest(
        user_assertion=jwt, request_text="Analise a permissão WP-10231 e me diga\tse ela pode ser liberada\n",
        tenant_id="acme", correlation_id="corr-1a2b3c4d5e6f")) is None
    grant = common_pb2.SignedTaskGrant(grant=secrets.token_bytes(900), signature=secrets.token_bytes(64),
                                       key_id="grant-signer")
    data = struct_pb2.Struct()
    data.update({"permit_id": "WP-10231", "note": "\x00 anything goes inside a Struct " * 100})
    assert validation.problem(cap_pb2.InvokeCapabilityRequest(
        grant=grant, capability_id="workPermit.release", input=data,
        idempotency_key=f"idem-{secrets.token_hex(16)}",
        principal=common_pb2.AgentPrincipal(agent_id="supervisor", grants=[grant],
                                            delegation_chain=["system:TrainingExpirationScanner"]),
        approval=cap_pb2.InvocationApproval(confirmation_token=secrets.token_urlsafe(32),
                                            human_approval_id="rev-0123456789ab"),
    )) is None
    assert validation.problem(audit_pb2.AppendRecordRequest(record=audit_pb2.AuditRecord(
        event_type=audit_pb2.AUDIT_EVENT_TYPE_TASK_DELEGATED, recorded_by="spiffe://agentmesh.local/svc/supervisor",
        task_id="task-training-1a2b3c4d", resource="permit:WP-10231", input_digest="f" * 64,
        reason_codes=["Check the training of every worker of permit WP-10231 (objective, free text)"],
        evidence=[common_pb2.EvidenceReference(source="lms", reference="TR-2231 / NR-10",
                                               capability="training.getStatus@1.0.0")],
    ))) is None
    assert validation.problem(sup_pb2.HandleEventRequest(
        event_id="evt-6f1d1f0e-4a39-5d0e-9a53-6167656e746d", tenant_id="acme",
        training_expired=sup_pb2.TrainingExpired(worker_id="W-1003", training_code="NR-10",
                                                 expired_on="2026-08-15"))) is None


def test_empty_request_passes() -> None:
    assert validation.problem(policy_pb2.AuthorizeRequest()) is None
    assert validation.problem(policy_pb2.ListKillSwitchesRequest()) is None


# --------------------------------------------------------------- lengths, exactly at and over


@pytest.mark.parametrize(("category", "field", "build"), [
    ("id", "event_id", lambda v: sup_pb2.HandleEventRequest(event_id=v)),
    ("id", "correlation_id", lambda v: sup_pb2.AnalyzeRequest(correlation_id=v)),
    ("id", "idempotency_key", lambda v: cap_pb2.InvokeCapabilityRequest(idempotency_key=v)),
    ("id", "approval.confirmation_token",
     lambda v: cap_pb2.InvokeCapabilityRequest(approval=cap_pb2.InvocationApproval(confirmation_token=v))),
    ("id", "user.assertion_digest",
     lambda v: policy_pb2.AuthorizeRequest(user=common_pb2.UserContext(assertion_digest=v))),
    ("id", "resource.id", lambda v: policy_pb2.AuthorizeRequest(resource=policy_pb2.ResourceRef(id=v))),
    ("id", "target", lambda v: policy_pb2.SetKillSwitchRequest(target=v)),
    ("principal", "agent.delegation_chain[0]",
     lambda v: policy_pb2.AuthorizeRequest(agent=common_pb2.AgentPrincipal(delegation_chain=[v]))),
    ("principal", "record.recorded_by",
     lambda v: audit_pb2.AppendRecordRequest(record=audit_pb2.AuditRecord(recorded_by=v))),
    ("reference", "record.resource",
     lambda v: audit_pb2.AppendRecordRequest(record=audit_pb2.AuditRecord(resource=v))),
    ("assertion", "user_assertion", lambda v: sup_pb2.AnalyzeRequest(user_assertion=v)),
    ("text", "request_text", lambda v: sup_pb2.AnalyzeRequest(request_text=v)),
    ("text", "reason", lambda v: policy_pb2.SetKillSwitchRequest(reason=v)),
    ("line", "capability_version", lambda v: policy_pb2.AuthorizeRequest(capability_version=v)),
])
def test_every_category_takes_its_maximum_and_refuses_one_more(category: str, field: str, build: object) -> None:
    maximum = validation.CATEGORIES[category].max_length
    assert validation.problem(build(maximum * "a")) is None  # type: ignore[operator]
    err = _refusal(build((maximum + 1) * "a"))  # type: ignore[operator]
    assert (err.reason, err.field, err.metadata["max"]) == ("FIELD_TOO_LONG", field, str(maximum))


def test_a_one_megabyte_event_id_is_refused_without_echoing_it() -> None:
    err = _refusal(sup_pb2.HandleEventRequest(event_id="x" * (1 << 20)))
    assert (err.reason, err.field, err.metadata) == ("FIELD_TOO_LONG", "event_id",
                                                    {"field": "event_id", "max": "128"})
    assert "xxx" not in err.message and len(err.message) < 200


def test_the_limits_the_brief_names() -> None:
    assert validation.CATEGORIES["id"].max_length == 128
    assert validation.CATEGORIES["principal"].max_length == 256
    assert validation.CATEGORIES["assertion"].max_length == 8192
    assert validation.CATEGORIES["line"].max_length == 1024
    assert validation.MAX_BYTES == 16 * 1024 and validation.MAX_REPEATED == 1000


# --------------------------------------------------------------- characters


@pytest.mark.parametrize("value", ["corr\x00", "a b", "é", "a\tb", "a\nb", "a;b", "a,b", "a\"b", "<script>", "a%00"])
def test_an_id_outside_its_character_set_is_refused(value: str) -> None:
    err = _refusal(sup_pb2.AnalyzeRequest(correlation_id=value))
    assert (err.reason, err.field) == ("FIELD_INVALID_CHARACTERS", "correlation_id")
    assert value not in err.message


@pytest.mark.parametrize("value", ["exe-0123456789abcdef", "task-training-1a2b", "spiffe://agentmesh.local/svc/policy",
                                   "user:acme/alice", "alice@acme.example", "a+b=c", "v1.2_3~x", "A" * 128])
def test_ids_in_use_fit_the_character_set(value: str) -> None:
    assert validation.problem(sup_pb2.AnalyzeRequest(correlation_id=value)) is None


@pytest.mark.parametrize(("value", "ok"), [
    ("Analise a permissão WP-10231", True), ("line one\nline two\ttabbed", True), ("emoji 🙂 and ünïcode", True),
    ("nul \x00 byte", False), ("carriage\rreturn", False), ("escape \x1b[31m", False), ("del \x7f", False),
    ("c1 \x85 control", False),
])
def test_free_text_takes_tab_and_newline_but_no_other_control_character(value: str, ok: bool) -> None:
    err = validation.problem(sup_pb2.AnalyzeRequest(request_text=value))
    if ok:
        assert err is None
    else:
        assert err is not None and (err.reason, err.field) == ("FIELD_INVALID_CHARACTERS", "request_text")


def test_a_default_string_takes_no_control_character_at_all() -> None:
    assert validation.problem(policy_pb2.AuthorizeRequest(capability_version="1.0.0 (beta)")) is None
    for bad in ("1.0\n", "1.0\t", "1\x00"):
        err = _refusal(policy_pb2.AuthorizeRequest(capability_version=bad))
        assert (err.reason, err.field) == ("FIELD_INVALID_CHARACTERS", "capability_version")


def test_the_assertion_is_base64url_and_dots() -> None:
    jws = "eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJhIn0.c2ln"
    assert validation.problem(sup_pb2.AnalyzeRequest(user_assertion=jws)) is None
    for bad in ("Bearer eyJ", "eyJ+/", "a\x00"):
        err = _refusal(sup_pb2.AnalyzeRequest(user_assertion=bad))
        assert (err.reason, err.field) == ("FIELD_INVALID_CHARACTERS", "user_assertion")


# --------------------------------------------------------------- enums


@pytest.mark.parametrize(("request_", "field", "enum"), [
    (_authorize(operation=99), "operation", "agentmesh.v1.OperationKind"),
    (_authorize(actor_type=7), "actor_type", "agentmesh.v1.ActorType"),
    (policy_pb2.SetKillSwitchRequest(scope=99, target="acme"), "scope", "agentmesh.v1.KillSwitchScope"),
    (cap_pb2.SetCapabilityStatusRequest(capability_id="training.getStatus", status=42), "status",
     "agentmesh.v1.LifecycleStatus"),
    (policy_pb2.AuthorizeRequest(context=policy_pb2.OperationContext(risk_profile=common_pb2.RiskProfile(max_risk=-1))),
     "context.risk_profile.max_risk", "agentmesh.v1.RiskLevel"),
    (audit_pb2.AppendRecordsRequest(records=[audit_pb2.AuditRecord(event_type=1),
                                             audit_pb2.AuditRecord(event_type=1, outcome=77)]),
     "records[1].outcome", "agentmesh.v1.AuditOutcome"),
    (audit_pb2.AppendRecordRequest(record=audit_pb2.AuditRecord(
        evidence=[common_pb2.EvidenceReference(authority=1), common_pb2.EvidenceReference(authority=50)])),
     "record.evidence[1].authority", "agentmesh.v1.AuthorityLevel"),
])
def test_an_unknown_enum_number_is_refused_with_its_path(request_: object, field: str, enum: str) -> None:
    err = _refusal(request_)
    assert (err.reason, err.field, err.metadata["enum"]) == ("ENUM_VALUE_UNKNOWN", field, enum)


def test_every_defined_enum_value_passes() -> None:
    for number in policy_pb2.KillSwitchScope.values():
        assert validation.problem(policy_pb2.SetKillSwitchRequest(scope=number)) is None
    for number in policy_pb2.OperationKind.values():
        assert validation.problem(policy_pb2.AuthorizeRequest(operation=number)) is None


# --------------------------------------------------------------- nested and repeated


def test_paths_of_nested_and_repeated_fields() -> None:
    req = _authorize()
    req.agent.delegation_chain[2] = "agent:training agent"
    assert _refusal(req).field == "agent.delegation_chain[2]"

    req = _authorize()
    req.user.roles.append("x" * 129)
    err = _refusal(req)
    assert (err.reason, err.field) == ("FIELD_TOO_LONG", "user.roles[2]")

    req = cap_pb2.InvokeCapabilityRequest(principal=common_pb2.AgentPrincipal(grants=[
        common_pb2.SignedTaskGrant(key_id="k1"), common_pb2.SignedTaskGrant(key_id="k 2")]))
    assert _refusal(req).field == "principal.grants[1].key_id"

    req = audit_pb2.AppendRecordsRequest(records=[
        audit_pb2.AuditRecord(), audit_pb2.AuditRecord(policy_decision=common_pb2.PolicyDecision(
            reason_codes=["ok", "bad\x00"]))])
    assert _refusal(req).field == "records[1].policy_decision.reason_codes[1]"


def test_the_first_bad_field_is_named() -> None:
    err = _refusal(_authorize(capability_id="a b", system_actor="c d"))
    assert err.field == "system_actor"  # declared before capability_id


def test_repeated_fields_take_at_most_a_thousand_items() -> None:
    assert validation.problem(common_pb2.UserContext(roles=["r"] * 1000)) is None
    err = _refusal(common_pb2.UserContext(roles=["r"] * 1001))
    assert (err.reason, err.field, err.metadata["max"]) == ("FIELD_TOO_LONG", "roles", "1000")
    assert validation.problem(audit_pb2.AppendRecordsRequest(records=[audit_pb2.AuditRecord()] * 1000)) is None
    err = _refusal(audit_pb2.AppendRecordsRequest(records=[audit_pb2.AuditRecord()] * 1001))
    assert (err.reason, err.field) == ("FIELD_TOO_LONG", "records")
    err = _refusal(common_pb2.Statement(evidence_indexes=list(range(1001))))
    assert (err.reason, err.field) == ("FIELD_TOO_LONG", "evidence_indexes")


def test_bytes_fields_are_bounded() -> None:
    def principal(grant: bytes = b"", signature: bytes = b"") -> common_pb2.AgentPrincipal:
        return common_pb2.AgentPrincipal(grants=[common_pb2.SignedTaskGrant(grant=grant, signature=signature)])

    assert validation.problem(principal(grant=b"\x00" * 16384, signature=b"s" * 512)) is None
    err = _refusal(principal(grant=b"\x00" * 16385))
    assert (err.reason, err.field, err.metadata["max"]) == ("FIELD_TOO_LONG", "grants[0].grant", "16384")
    err = _refusal(principal(signature=b"s" * 513))
    assert (err.reason, err.field, err.metadata["max"]) == ("FIELD_TOO_LONG", "grants[0].signature", "512")


def test_strings_inside_a_struct_are_left_to_the_schema_of_whoever_reads_it() -> None:
    data = struct_pb2.Struct()
    data.update({"k": "\x00" * 10_000, "\x00key": [1.5, {"deep": -2.0e300}], "n": None, "b": True})
    assert validation.problem(cap_pb2.InvokeCapabilityRequest(input=data)) is None


NOT_FINITE = [float("nan"), float("inf"), float("-inf")]


@pytest.mark.parametrize("number", NOT_FINITE, ids=["nan", "inf", "-inf"])
def test_a_number_field_must_be_finite(number: float) -> None:
    ok = audit_pb2.AuditRecord(record_id="rec-1", confidence=1.7976931348623157e308)
    request = audit_pb2.AppendRecordsRequest(records=[ok, audit_pb2.AuditRecord(record_id="rec-2", confidence=0.5)])
    assert validation.problem(request) is None
    request.records[1].confidence = number
    err = _refusal(request)
    assert (err.reason, err.field) == ("FIELD_OUT_OF_RANGE", "records[1].confidence")
    assert err.message == "records[1].confidence is not a finite number (NaN or infinity)"
    analyze = sup_pb2.AnalyzeRequest(request_text="x")
    analyze.budget.max_cost = number
    assert _refusal(analyze).field == "budget.max_cost"


@pytest.mark.parametrize("number", NOT_FINITE, ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("where", ["top", "nested", "list", "list of structs"])
def test_a_number_anywhere_in_a_struct_must_be_finite_and_the_key_is_never_named(number: float, where: str) -> None:
    key = "secret\nkey"
    data = {"top": {key: number}, "nested": {"a": {"b": {key: number}}}, "list": {"a": [1, 2, number]},
            "list of structs": {"a": [{"x": 1}, {key: [number]}]}}[where]
    bad = struct_pb2.Struct()
    bad.update({"fine": 1.0, **data})
    calls = cap_pb2.InvokeCapabilitiesRequest(calls=[cap_pb2.InvokeCapabilityRequest(capability_id="a.b"),
                                                     cap_pb2.InvokeCapabilityRequest(capability_id="a.c", input=bad)])
    err = _refusal(calls)
    assert (err.reason, err.field) == ("FIELD_OUT_OF_RANGE", "calls[1].input")
    assert err.message == "calls[1].input holds a number that is not finite (NaN or infinity)"
    assert "secret" not in repr(err.to_status())
    record = audit_pb2.AuditRecord(record_id="rec-1",
                                   evidence=[common_pb2.EvidenceReference(), common_pb2.EvidenceReference()])
    record.evidence[1].data.CopyFrom(bad)
    assert _refusal(audit_pb2.AppendRecordRequest(record=record)).field == "record.evidence[1].data"


def test_bytes_that_only_look_like_a_non_finite_number_are_walked_and_pass() -> None:
    # A string ending in 0x11 and five bytes, then the next Value's tag and a length whose varint is f3 7f:
    # on the wire, nine bytes shaped like a NaN's. The exact check after the search finds none.
    data = struct_pb2.Struct()
    data.update({"l": ["\x11abcde", "y" * 16_368]})
    assert validation._MAYBE_NOT_FINITE(data.SerializeToString()) is not None
    assert validation.problem(cap_pb2.InvokeCapabilityRequest(input=data)) is None
    data["l"].append(float("nan"))
    assert _refusal(cap_pb2.InvokeCapabilityRequest(input=data)).field == "input"


@pytest.mark.parametrize("seed", range(20))
def test_every_non_finite_number_is_found_wherever_it_is(seed: int) -> None:
    rng = random.Random(seed)

    def value(depth: int) -> object:
        kind = rng.choice(["s", "n", "b", "none", "l", "d"] if depth < 4 else ["s", "n", "b"])
        if kind == "s":
            return "".join(rng.choice("ab\x11\xf0\u00ff\U0001f600") for _ in range(rng.randint(0, 12)))
        if kind == "n":
            return rng.choice([0.0, -1.0, 1.7976931348623157e308, -1.7976931348623157e308, 5e-324, rng.random()])
        if kind == "b":
            return rng.random() < 0.5
        if kind == "none":
            return None
        if kind == "l":
            return [value(depth + 1) for _ in range(rng.randint(0, 4))]
        return {f"k{i}": value(depth + 1) for i in range(rng.randint(0, 4))}

    data = struct_pb2.Struct()
    data.update({f"k{i}": value(0) for i in range(6)})
    request = cap_pb2.InvokeCapabilityRequest(input=data)
    assert validation.problem(request) is None
    # Put a NaN or an infinity into one place of it: a key of some Struct inside, or an item of some list.
    places: list[object] = []

    def collect(node: object) -> None:
        if isinstance(node, struct_pb2.Struct):
            places.append(node)
            for key in node.fields:
                collect(node[key])
        elif isinstance(node, struct_pb2.ListValue):
            places.append(node)
            for item in node:
                collect(item)

    collect(request.input)
    place = rng.choice(places)
    bad = rng.choice([float("nan"), float("inf"), float("-inf")])
    if isinstance(place, struct_pb2.Struct):
        place["zz"] = bad
    else:
        assert isinstance(place, struct_pb2.ListValue)
        place.append(bad)
    assert _refusal(request).field == "input"


def test_a_struct_left_unset_or_empty_passes() -> None:
    assert validation.problem(cap_pb2.InvokeCapabilityRequest()) is None
    assert validation.problem(cap_pb2.InvokeCapabilityRequest(input=struct_pb2.Struct())) is None


def test_timestamps_must_be_real_dates() -> None:
    task = common_pb2.AgentTask(task_id="task-1")
    task.deadline.seconds = 253_402_300_799
    assert validation.problem(task) is None
    task.deadline.seconds = 253_402_300_800
    err = _refusal(task)
    assert (err.reason, err.field) == ("FIELD_OUT_OF_RANGE", "deadline")
    task.deadline.seconds, task.deadline.nanos = 0, -1
    assert _refusal(task).field == "deadline"
    query = audit_pb2.QueryRecordsRequest()
    query.start_time.seconds = -62_135_596_801
    assert _refusal(query).field == "start_time"


def test_map_fields_are_checked_key_and_value() -> None:
    info = error_details_pb2.ErrorInfo(reason="R", metadata={"field": "ok"})
    assert validation.problem(info) is None
    info.metadata["bad\x00key"] = "v"
    err = _refusal(info)
    assert err.reason == "FIELD_INVALID_CHARACTERS" and re.fullmatch(r"metadata\[\d\]\.key", err.field or "")


def test_a_value_that_is_not_a_message_is_left_alone() -> None:
    assert validation.problem(b"raw bytes") is None  # type: ignore[arg-type]


# --------------------------------------------------------------- categories by name


@pytest.mark.parametrize(("message", "field", "category"), [
    (policy_pb2.ResourceRef, "id", "id"),
    (common_pb2.AgentContextProjection, "digest", "id"),
    (common_pb2.TraceContext, "correlation_id", "id"),
    (cap_pb2.InvokeCapabilityRequest, "idempotency_key", "id"),
    (cap_pb2.InvocationApproval, "confirmation_token", "id"),
    (audit_pb2.QueryRecordsRequest, "page_token", "id"),
    (audit_pb2.AuditRecord, "input_digest", "id"),
    (policy_pb2.SetKillSwitchRequest, "target", "id"),
    (common_pb2.AgentPrincipal, "delegation_chain", "principal"),
    (audit_pb2.AuditRecord, "recorded_by", "principal"),
    (common_pb2.EvidenceReference, "capability", "reference"),
    (sup_pb2.AnalyzeRequest, "user_assertion", "assertion"),
    (sup_pb2.AnalyzeRequest, "request_text", "text"),
    (common_pb2.AgentTask, "objective", "text"),
    (common_pb2.VersionStamp, "policy_version", "line"),
    (common_pb2.AgentContextProjection, "allowed_fields", "line"),
])
def test_category_by_field_name(message: type, field: str, category: str) -> None:
    descriptor = message.DESCRIPTOR.fields_by_name[field]  # type: ignore[attr-defined]
    assert validation.category_of(descriptor).name == category


def test_every_override_names_a_category() -> None:
    assert set(validation.FIELD_CATEGORIES.values()) <= set(validation.CATEGORIES)


# --------------------------------------------------------------- baggage and traceparent


def test_mesh_ids_in_baggage_and_traceparent() -> None:
    good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    assert validation.check_trace_ids([("traceparent", good)], {"agentmesh.correlation_id": "corr-1"}) is None
    err = validation.check_trace_ids([], {"agentmesh.correlation_id": "x" * 600})
    assert err is not None and (err.reason, err.field) == ("FIELD_TOO_LONG", "baggage.agentmesh.correlation_id")
    err = validation.check_trace_ids([], {"agentmesh.execution_id": "exe\x00"})
    assert err is not None and (err.reason, err.field) == ("FIELD_INVALID_CHARACTERS", "baggage.agentmesh.execution_id")
    err = validation.check_trace_ids([("traceparent", good.upper())], {})
    assert err is not None and (err.reason, err.field) == ("FIELD_INVALID_CHARACTERS", "traceparent")
    err = validation.check_trace_ids([("traceparent", good + "-" + "0" * 100)], {})
    assert err is not None and (err.reason, err.field) == ("FIELD_TOO_LONG", "traceparent")
    # Other headers (binary ones included) are not the mesh's business.
    assert validation.check_trace_ids([("user-agent", "x" * 600), ("x-bin", b"\x00")], {}) is None
    assert validation.invalid_ids({"agentmesh.correlation_id": "ok", "agentmesh.execution_id": "x y"}) == [
        "agentmesh.execution_id"]


def test_undecodable_names_the_type_only() -> None:
    err = validation.undecodable("agentmesh.v1.AuthorizeRequest")
    assert (err.reason, err.metadata) == ("REQUEST_UNDECODABLE", {"type": "agentmesh.v1.AuthorizeRequest"})


# --------------------------------------------------------------- the README documents the code


def test_the_readme_table_is_the_code() -> None:
    assert validation.limits_markdown() in README.read_text(), (
        "README 'Input limits' is out of date; paste the output of "
        "`python -c 'from agentmesh import validation; print(validation.limits_markdown())'`")


def test_plans_are_cached_by_type() -> None:
    validation.problem(_authorize())
    assert "agentmesh.v1.AuthorizeRequest" in validation._plans
    plan = validation._plans["agentmesh.v1.AuthorizeRequest"]
    validation.problem(_authorize())
    assert validation._plans["agentmesh.v1.AuthorizeRequest"] is plan
