"""Statements in the user's language: the catalogs, and every demo scenario in Portuguese."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from agentmesh.result_contract import context_of
from specialist_svc import phrases
from supervisor_svc.definitions import default_catalog

WP_CONTRACT = default_catalog().domain("work-permit").plans["analysis"].task("permit").contract

SOURCE = Path(phrases.__file__).parent
PERMITS = ["WP-10231", "WP-10232", "WP-10233", "WP-10234", "WP-10235", "WP-10236", "WP-10237", "WP-10238",
           "WP-10239", "WP-10240", "WP-10242", "WP-10243", "WP-10245", "WP-10246", "WP-10247", "WP-10248",
           "WP-10249", "WP-10250", "WP-20001"]


def _templates_in_source() -> set[str]:
    """Every literal template given to ``say`` (and the date fragments of the training agent)."""
    found: set[str] = set()
    for path in SOURCE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "say":
                if isinstance(node.args[0], ast.Constant):
                    found.add(node.args[0].value)
            elif isinstance(node, ast.Tuple) and len(node.elts) == 2 and isinstance(node.elts[0], ast.Constant) \
                    and isinstance(node.elts[0].value, str) and "{date}" in node.elts[0].value:
                found.add(node.elts[0].value)
    return found


def test_the_portuguese_catalog_has_every_template_and_nothing_else() -> None:
    catalog = phrases.catalog("pt")
    assert set(catalog) == _templates_in_source()
    for english, portuguese in catalog.items():
        assert phrases.placeholders(portuguese) == phrases.placeholders(english), english
        assert portuguese != english


def test_languages_are_read_from_bcp47_tags() -> None:
    assert [phrases.language_of(t) for t in ("pt", "pt-BR", "pt_PT", "PT", "en", "en-GB", "", "de")] == [
        "pt", "pt", "pt", "pt", "en", "en", "en", "en"]
    with phrases.speaking("pt-BR"):
        said = phrases.say("Permit {permit_id} was not found", permit_id="WP-1")
    assert said == "A permissão WP-1 não foi encontrada"
    assert phrases.say("Permit {permit_id} was not found", permit_id="WP-1") == "Permit WP-1 was not found"


def _team(permit_id: str, locale: str, local: Any, run_agent: Any, projector: Any) -> list[Any]:
    first = run_agent("work-permit-agent", {"permit_id": permit_id}, local("work-permit-agent"), locale)
    results = [first]
    context = context_of([(first, WP_CONTRACT, "permit")])
    if context:
        for agent_id, purpose in (("training-agent", "training.verify"), ("risk-agent", "risk.assess"),
                                  ("compliance-agent", "compliance.check")):
            projected, _ = projector.project(context, agent_id, purpose)
            results.append(run_agent(agent_id, projected, local(agent_id), locale))
    return results


@pytest.mark.parametrize("permit_id", PERMITS)
def test_a_portuguese_request_gets_every_statement_in_portuguese(permit_id: str, local: Any, run_agent: Any,
                                                                 projector: Any) -> None:
    english = _team(permit_id, "en", local, run_agent, projector)
    before = phrases.untranslated()
    portuguese = _team(permit_id, "pt-BR", local, run_agent, projector)
    assert phrases.untranslated() == before, "templates the Portuguese catalog lacks"
    for en, pt in zip(english, portuguese, strict=True):
        # Only the words change: codes, subjects, kinds, evidence and the verdicts are the same.
        assert [(s.kind, s.code, s.subject, list(s.evidence_indexes)) for s in pt.statements] == [
            (s.kind, s.code, s.subject, list(s.evidence_indexes)) for s in en.statements]
        assert list(pt.evidence) == list(en.evidence) and pt.result == en.result and pt.status == en.status
        for s_en, s_pt in zip(en.statements, pt.statements, strict=True):
            assert s_pt.text != s_en.text, s_en.text
