"""Credential leakage: no private key, user assertion, grant signature, confirmation token (or the
sandbox LMS's and the sandbox model server's admin tokens) in any log file, audit record or error a
caller receives.

The confirmation token is also shown to no one but its requester. The scans run
at the end of this suite (``security_last``) over everything the session did:
every assertion minted or forged, every grant signed, captured or forged and
every confirmation token seen are looked for, in every log under HOME/logs,
every audit record (read as an operator) and every refusal received.
"""

from __future__ import annotations

import base64

import grpc
import pytest
from google.protobuf import text_format

from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import decision_center_service_pb2 as dc_pb2
from agentmesh.v1 import supervisor_service_pb2 as sup_pb2

from .conftest import RELEASE, WORK_PERMIT, Mesh, b64_forms, sha256_hex, unique

pytestmark = pytest.mark.integration


def _get(mesh: Mesh, token: str, execution_id: str) -> sup_pb2.Execution:
    return mesh.supervisor().GetExecution(sup_pb2.GetExecutionRequest(user_assertion=token,
                                                                      execution_id=execution_id), timeout=10).execution


def _permit_status(mesh: Mesh, permit_id: str) -> str:
    grant = mesh.grant(WORK_PERMIT, ["workPermit.get"], [f"permit:{permit_id}"])
    return str(mesh.invoke(WORK_PERMIT, grant, "workPermit.get", permit_id=permit_id).output["status"])


def test_the_confirmation_token_reaches_only_its_requester_and_is_never_echoed(mesh: Mesh) -> None:
    dora = unique("dora")
    mine = mesh.token(dora, "permit-manager")
    before = _permit_status(mesh, "WP-10231")
    ex = mesh.analyze(RELEASE.format("WP-10231"), mine)
    assert ex.action.state == sup_pb2.ACTION_STATE_AWAITING_APPROVAL, (ex.action.state, ex.action.reason)
    bob = mesh.token("bob", "reviewer")
    reviews = mesh.center().ListReviews(dc_pb2.ListReviewsRequest(user_assertion=bob, execution_id=ex.execution_id),
                                        timeout=10).reviews
    decided = mesh.center().SubmitReviewDecision(dc_pb2.SubmitReviewDecisionRequest(
        user_assertion=bob, review_id=reviews[0].review_id, decision=dc_pb2.REVIEW_DECISION_APPROVE,
        reason="evidence checked"), timeout=60)
    assert decided.execution.action.state == sup_pb2.ACTION_STATE_AWAITING_CONFIRMATION
    assert decided.execution.action.confirmation_token == "", "the reviewer saw the requester's token"
    token = _get(mesh, mine, ex.execution_id).action.confirmation_token
    assert token
    mesh.confirmation_tokens.add(token)
    assert _get(mesh, bob, ex.execution_id).action.confirmation_token == ""
    assert mesh.center().GetReview(dc_pb2.GetReviewRequest(user_assertion=bob, review_id=reviews[0].review_id),
                                   timeout=10).execution.action.confirmation_token == ""

    # Another permit-manager who may read the execution (a reviewer too) and holds the real token is
    # refused: the token is bound to its requester. Nothing echoes it.
    carol, since = unique("carol"), mesh.marker()
    got = mesh.refused(lambda: mesh.supervisor().ConfirmAction(sup_pb2.ConfirmActionRequest(
        user_assertion=mesh.token(carol, "permit-manager", "reviewer"), execution_id=ex.execution_id,
        confirmation_token=token,
        capability_id=ex.action.capability_id, resource_id=ex.action.resource_id), timeout=30))
    assert (got.code, got.reason) == (grpc.StatusCode.PERMISSION_DENIED, "CONFIRMATION_USER_MISMATCH"), got
    assert token not in got.message and token.encode() not in got.details
    record = mesh.find_record(reason="CONFIRMATION_USER_MISMATCH", since=since, user_id=carol,
                              event_types=(audit_pb2.AUDIT_EVENT_TYPE_CONFIRMATION,
                                           audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED))
    assert token not in text_format.MessageToString(record)

    # The requester says no: nothing is released.
    done = mesh.supervisor().ConfirmAction(sup_pb2.ConfirmActionRequest(
        user_assertion=mine, execution_id=ex.execution_id, confirmation_token=token,
        capability_id=ex.action.capability_id, resource_id=ex.action.resource_id, decline=True), timeout=60).execution
    assert done.action.state == sup_pb2.ACTION_STATE_DECLINED
    assert _permit_status(mesh, "WP-10231") == before


# ------------------------------------------------------------------ the scans


def _private_keys(mesh: Mesh) -> dict[str, str]:
    """Every private key in the mesh home, by file: a run of its PEM body unique to it."""
    keys = {}
    for path in sorted(mesh.home.rglob("*")):
        if not path.is_file() or path.relative_to(mesh.home).parts[0] in ("data", "logs", "run"):
            continue
        text = path.read_text(errors="replace")
        if "PRIVATE KEY-----" in text:
            body = "".join(line for line in text.splitlines() if line and not line.startswith("-----"))
            # A run of the secret part (past the PKCS#8 header of an EC key; an Ed25519 key is short).
            keys[str(path.relative_to(mesh.home))] = body[48:88] if len(body) > 100 else body[-40:]
    assert len(keys) >= 5, f"expected the CA, workload and signing keys, found {sorted(keys)}"
    return keys


def _lms_token(mesh: Mesh) -> str:
    return mesh.cfg.mesh_home.lms_admin_token.read_text().strip()


def _needles(mesh: Mesh) -> tuple[dict[str, str], dict[str, bytes]]:
    """(what to look for in text, what to look for in bytes), each by a name that says what leaked."""
    assert mesh.assertions and mesh.grant_signatures and mesh.confirmation_tokens, (
        "the session produced no assertion, grant or confirmation token to look for: the scan would prove nothing")
    text: dict[str, str] = {"a PEM private key": "PRIVATE KEY-----"}
    raw: dict[str, bytes] = {}
    for name, body in _private_keys(mesh).items():
        text[f"private key {name}"] = body
    for i, token in enumerate(sorted(mesh.assertions)):
        head, _, signature = token.rpartition(".")
        text[f"user assertion #{i}"] = signature if len(signature) >= 20 else head
    for i, signature in enumerate(sorted(mesh.grant_signatures)):
        raw[f"grant signature #{i}"] = signature
        for form in b64_forms(signature):
            text[f"grant signature #{i} ({form[:6]}…)"] = form
    for i, token in enumerate(sorted(mesh.confirmation_tokens)):
        text[f"confirmation token #{i}"] = token
    text["the LMS admin token"] = _lms_token(mesh)
    text["the sandbox model server's admin token"] = mesh.cfg.mesh_home.model_sandbox_admin_token.read_text().strip()
    return text, raw


def _leaks(text: str, data: bytes, needles: tuple[dict[str, str], dict[str, bytes]]) -> list[str]:
    in_text, in_bytes = needles
    found = [name for name, n in in_text.items() if n in text or n.encode() in data]
    found += [name for name, n in in_bytes.items() if n in data]
    return found


@pytest.mark.security_last(1)
def test_no_credential_in_any_error_the_suite_received(mesh: Mesh) -> None:
    needles = _needles(mesh)
    assert mesh.refusals, "no refusal was received"
    leaked = {}
    for refusal in mesh.refusals:
        text = f"{refusal.message} {refusal.metadata}"
        found = _leaks(text, refusal.details, needles)
        if found:
            leaked[str(refusal)[:200]] = found
    assert not leaked, leaked


@pytest.mark.security_last(1)
def test_no_credential_in_any_log_file(mesh: Mesh) -> None:
    needles = _needles(mesh)
    logs = sorted(mesh.cfg.mesh_home.logs.glob("*"))
    assert len(logs) >= 9, logs
    leaked = {}
    for log in logs:
        data = log.read_bytes()
        found = _leaks(data.decode(errors="replace"), data, needles)
        if found:
            leaked[log.name] = found
    assert not leaked, leaked


def _all_records(mesh: Mesh) -> list[audit_pb2.AuditRecord]:
    records = mesh.records(page_size=1000)
    assert len(records) >= 20, "the session should have left a log to scan"
    return records


@pytest.mark.security_last(1)
def test_no_key_assertion_or_confirmation_token_in_any_audit_record(mesh: Mesh) -> None:
    in_text, _ = _needles(mesh)
    needles = ({k: v for k, v in in_text.items() if not k.startswith("grant signature")}, {})
    leaked = {}
    for r in _all_records(mesh):
        found = _leaks(text_format.MessageToString(r, as_utf8=True), r.SerializeToString(), needles)
        if found:
            leaked[f"#{r.index} {audit_pb2.AuditEventType.Name(r.event_type)}"] = found
    assert not leaked, leaked


@pytest.mark.security_last(1)
def test_no_forged_or_tampered_grant_in_any_audit_record(mesh: Mesh) -> None:
    """What never verified never reaches the log, in any form (raw, hex, base64)."""
    assert mesh.forged_signatures, "the session forged no grant: the scan would prove nothing"
    leaked = {}
    for r in _all_records(mesh):
        data, text = r.SerializeToString(), text_format.MessageToString(r, as_utf8=True)
        found = [sig for sig in mesh.forged_signatures
                 if sig in data or any(form in text for form in b64_forms(sig))]
        if found:
            leaked[f"#{r.index} {audit_pb2.AuditEventType.Name(r.event_type)}"] = len(found)
    assert not leaked, leaked


@pytest.mark.security_last(1)
def test_no_grant_signature_in_any_audit_record(mesh: Mesh) -> None:
    """The contract: records carry digests, never a grant's signature (a grant is a bearer credential).

    Stricter than the test above: it also covers the grants that did verify, which the
    capability service and the supervisor record in ``principal.grants`` today.
    """
    _, raw = _needles(mesh)
    leaked = {}
    for r in _all_records(mesh):
        data = r.SerializeToString()
        found = [name for name, sig in raw.items() if sig in data]
        if found:
            leaked[f"#{r.index} {audit_pb2.AuditEventType.Name(r.event_type)}"] = len(found)
    assert not leaked, f"{len(leaked)} records hold grant signatures, e.g. {dict(list(leaked.items())[:5])}"


def test_a_rejected_assertion_leaves_its_digest_not_itself(mesh: Mesh) -> None:
    forged = mesh.remember_assertion(unique("eyJhbGciOiJub25lIn0") + "." + base64.urlsafe_b64encode(
        b'{"sub":"root","tenant":"acme","roles":["admin"]}').decode().rstrip("=") + ".")
    since = mesh.marker()
    got = mesh.refused(lambda: mesh.analyze(RELEASE.format("WP-10231"), forged))
    assert got.code == grpc.StatusCode.UNAUTHENTICATED and got.reason.startswith("ASSERTION_"), got
    assert forged not in got.message and forged.encode() not in got.details
    record = mesh.find_record(reason=got.reason, since=since, contains=[f"assertion_sha256={sha256_hex(forged)}"])
    assert forged not in text_format.MessageToString(record)
