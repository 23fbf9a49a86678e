"""Deterministic intent parsing in Portuguese and English (PRD §49)."""

from __future__ import annotations

import pytest

from supervisor_svc.errors import RequestInvalid, TenantMismatch
from supervisor_svc.intent import MAX_REQUEST_CHARS, check_tenant, parse_intent

ANALYZE, STATUS, UNKNOWN = "ANALYZE_PERMIT", "PERMIT_STATUS", "UNKNOWN"


@pytest.mark.parametrize(
    ("text", "kind", "permit", "release", "language"),
    [
        ("Analise a permissão WP-10231 e me diga se ela pode ser liberada", ANALYZE, "WP-10231", False, "pt"),
        ("ANALISE A PERMISSAO wp-10231 E ME DIGA SE ELA PODE SER LIBERADA", ANALYZE, "WP-10231", False, "pt"),
        ("Analyze permit WP-10231 and tell me if it can be released", ANALYZE, "WP-10231", False, "en"),
        ("analyse permit wp 10231 and tell me whether it can be released", ANALYZE, "WP-10231", False, "en"),
        ("Can permit WP10231 be released?", ANALYZE, "WP-10231", False, "en"),
        ("Analise a permissão WP-10231 e libere se estiver tudo correto.", ANALYZE, "WP-10231", True, "pt"),
        ("Analyze WP-10231 and release it if everything is fine", ANALYZE, "WP-10231", True, "en"),
        ("Não libere a WP-10231, apenas analise", ANALYZE, "WP-10231", False, "pt"),
        ("Should I release WP-10231?", ANALYZE, "WP-10231", False, "en"),
        ("status of WP-10231", STATUS, "WP-10231", False, "en"),
        ("What is the status of WP–10231?", STATUS, "WP-10231", False, "en"),  # en dash
        ("qual o status da WP-10231", STATUS, "WP-10231", False, "pt"),
        ("Qual é a situação da permissão WP-10231?", STATUS, "WP-10231", False, "pt"),
        ("check the status of WP-10231", STATUS, "WP-10231", False, "en"),
    ],
)
def test_known_requests(text: str, kind: str, permit: str, release: bool, language: str) -> None:
    intent = parse_intent(text)
    assert (intent.kind, intent.subjects.get("permit"), intent.action_requested, intent.language) == (
        kind, permit, release, language)
    assert intent.actionable
    assert permit in intent.message


@pytest.mark.parametrize(
    ("text", "language"),
    [("Se estiver tudo correto, libere", "pt"), ("release it if everything is fine", "en")],
)
def test_release_follow_up_without_permit(text: str, language: str) -> None:
    intent = parse_intent(text)
    assert intent.kind == ANALYZE and intent.action_requested and intent.language == language
    assert "permit" not in intent.subjects and not intent.actionable
    assert "WP-10231" in intent.message  # tells the user how to name one

    follow_up = parse_intent(text, context_subjects={"permit": "WP-10231"})
    assert follow_up.subjects["permit"] == "WP-10231" and follow_up.action_requested and follow_up.actionable
    # A conversation's subject is held to the definition like the text's.
    assert not parse_intent(text, context_subjects={"permit": "not a permit"}).actionable


def test_status_question_is_a_single_task_kind_not_the_team() -> None:
    assert parse_intent("status of WP-10231").kind == STATUS
    assert parse_intent("is WP-10231 ready for release?").kind == ANALYZE


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("hello there", "NO_RULE"),
        ("WP-10231", "NO_RULE"),
        ("qual a previsão do tempo?", "NO_RULE"),
        ("Analyze WP-1 and WP-2", "MULTIPLE_PERMITS"),
    ],
)
def test_unknown_requests_say_so(text: str, rule: str) -> None:
    intent = parse_intent(text)
    assert intent.kind == UNKNOWN and intent.rule == rule
    assert not intent.subjects and not intent.actionable and not intent.action_requested
    assert intent.message


def test_unknown_answer_is_in_the_users_language() -> None:
    assert "Não entendi" in parse_intent("qual a previsão do tempo para amanhã?").message
    assert "did not understand" in parse_intent("what is the weather?").message


@pytest.mark.parametrize(
    ("text", "tenants"),
    [
        ("Analise a permissão WP-20001 do tenant Globex", ("globex",)),
        ("Analyze permit WP-20001 for tenant globex", ("globex",)),
        ("In the globex tenant, analyze WP-20001", ("globex",)),
        ("tenant: acme, status of WP-1", ("acme",)),
        ("Analyze permit WP-20001", ()),
        ("Analyze the tenant permit WP-1", ()),
    ],
)
def test_tenant_mentions(text: str, tenants: tuple[str, ...]) -> None:
    assert parse_intent(text).mentioned_tenants == tenants


def test_tenant_mismatch_is_refused_without_naming_the_other_tenant() -> None:
    intent = parse_intent("Analise a permissão WP-20001 do tenant globex")
    with pytest.raises(TenantMismatch) as err:
        check_tenant(intent, "acme")
    assert err.value.reason == "TENANT_MISMATCH" and err.value.field == "request_text"
    assert "globex" not in err.value.message
    check_tenant(intent, "globex")  # the same tenant is fine
    check_tenant(parse_intent("status of WP-1"), "acme")  # no tenant named


@pytest.mark.parametrize(("text", "reason"), [("", "REQUEST_TEXT_EMPTY"), ("   \n", "REQUEST_TEXT_EMPTY"),
                                              ("x" * (MAX_REQUEST_CHARS + 1), "REQUEST_TEXT_TOO_LONG")])
def test_invalid_request_text(text: str, reason: str) -> None:
    with pytest.raises(RequestInvalid) as err:
        parse_intent(text)
    assert err.value.reason == reason and err.value.field == "request_text"


def test_parsing_is_deterministic() -> None:
    text = "Analise a permissão WP-10231 e me diga se ela pode ser liberada"
    assert parse_intent(text) == parse_intent(text)
