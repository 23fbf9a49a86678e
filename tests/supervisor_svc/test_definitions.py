"""Domain definitions: validated completely at start, errors naming file:line:field; the shipped domains."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentmesh.v1 import common_pb2
from supervisor_svc.definitions import (
    DomainCatalog,
    Expr,
    Template,
    default_catalog,
    default_domains_dir,
    load_definition,
    projection_config,
)
from supervisor_svc.errors import ConfigError
from supervisor_svc.intent import parse_intent
from supervisor_svc.planner import build_plan
from supervisor_svc.projection import ProjectionConfig
from supervisor_svc.selection import AgentSelector

SENSITIVE = ProjectionConfig.load().sensitive_fields
USER = common_pb2.UserContext(tenant_id="acme", user_id="alice", session_id="s", conversation_id="c")


def _shipped(name: str = "worker-assignment") -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((default_domains_dir() / f"{name}.yaml").read_text())
    return data


def _write(tmp_path: Path, data: dict[str, Any], name: str = "domain.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    return path


def _error(tmp_path: Path, data: dict[str, Any]) -> ConfigError:
    path = _write(tmp_path, data)
    with pytest.raises(ConfigError) as err:
        load_definition(path, sensitive_fields=SENSITIVE)
    assert err.value.file == str(path)
    return err.value


def test_the_shipped_domains_load_and_hold_no_code() -> None:
    catalog = default_catalog()
    assert [d.domain for d in catalog.domains] == ["worker-assignment", "work-permit"]  # by priority
    wp = catalog.domain("work-permit")
    assert set(wp.plans) == {"analysis", "status"} and wp.plans["status"].report is not None
    assert [t.task_id for t in wp.plans["analysis"].tasks] == ["permit", "training", "risk", "compliance"]
    assert catalog.action("workPermit.release") is not None and catalog.event("training_expired") is not None
    wa = catalog.domain("worker-assignment")
    plan = wa.plans["assignment"]
    assert [(t.task_id, t.after) for t in plan.tasks] == [
        ("employee", ()), ("training", (("employee", "worker_assignable"),)),
        ("medical", (("employee", "worker_assignable"),))]
    assert plan.conditions["worker_assignable"].if_false == "WORKER_NOT_ASSIGNABLE"
    assert catalog.agents() >= {"employee-agent", "medical-agent", "training-agent", "work-permit-agent"}
    assert {k["kind"] for k in catalog.describe()} == {"ANALYZE_PERMIT", "PERMIT_STATUS", "ASSIGN_WORKER"}


def test_the_assignment_plan_is_sequential_then_parallel(selector: AgentSelector) -> None:
    intent = parse_intent("Can worker W-1003 be assigned to permit WP-10231?")
    plan = build_plan(intent, execution_id="exe-1", user=USER, correlation_id="corr", selector=selector)
    assert [n.target_agent_id for n in plan.graph.nodes] == ["employee-agent", "training-agent", "medical-agent"]
    assert plan.stages() == [["exe-1-t1"], ["exe-1-t2", "exe-1-t3"]]
    assert dict(plan.task("exe-1-t1").input) == {"worker_id": "W-1003", "permit_id": "WP-10231"}
    assert {e.condition for e in plan.graph.edges} == {"worker_assignable"}
    assert plan.expected == ("employee", "training", "medical")
    assert plan.specs["exe-1-t3"].purpose == "assignment.medical"


def test_projections_of_every_domain_are_merged_and_least() -> None:
    config = projection_config(default_catalog())
    assert config.whitelist("medical-agent", "assignment.medical") == ("permit_id", "worker_id")
    assert config.whitelist("training-agent", "training.verify") == config.whitelist("training-agent",
                                                                                     "assignment.training")
    assert config.whitelist("medical-agent", "training.verify") == ()  # another agent's purpose: nothing


# --- errors name file:line:field ----------------------------------------------------------------------


def _task(data: dict[str, Any], task_id: str) -> dict[str, Any]:
    task: dict[str, Any] = next(t for t in data["plans"]["assignment"]["tasks"] if t["id"] == task_id)
    return task


@pytest.mark.parametrize(("mutate", "field", "message"), [
    (lambda d: d.update(format="agentmesh-domain/v9"), "format", "agentmesh-domain/v1"),
    (lambda d: d.update(surprise=1), "surprise", "unknown field"),
    (lambda d: d["subjects"]["worker"].update(pattern="([unclosed"), "subjects.worker.pattern", "regular expression"),
    (lambda d: d["subjects"]["worker"].update(example="X-1"), "subjects.worker.example", "does not find"),
    (lambda d: d["subjects"]["worker"].update(canonical="W-{3}"), "subjects.worker.canonical", "group"),
    (lambda d: d["rules"][0].update(when="(assign_en or"), "rules[0].when", "not a valid expression"),
    (lambda d: d["rules"][0].update(when="assign_en and nothing"), "rules[0].when", "'nothing'"),
    (lambda d: d["rules"][0].update(intent="ghost"), "rules[0].intent", "unknown intent"),
    (lambda d: d["intents"]["assign"].update(plan="ghost"), "intents.assign.plan", "unknown plan"),
    (lambda d: d["intents"]["assign"]["subjects"].append("ghost"), "intents.assign.subjects[2]", "unknown subject"),
    (lambda d: d["intents"]["assign"]["message"].update(en="Check {ghost}."), "intents.assign.message.en",
     "{ghost}"),
    (lambda d: _task(d, "training").update(after={"ghost": "done"}), "plans.assignment.tasks[1].after.ghost",
     "unknown task"),
    (lambda d: _task(d, "training").update(after={"employee": "worker_happy"}),
     "plans.assignment.tasks[1].after.employee", "neither 'done'"),
    (lambda d: (_task(d, "training").update(after={"medical": "done"}),
                _task(d, "medical").update(after={"training": "done"})), "plans.assignment.tasks[2].after",
     "cycle: training -> medical -> training"),
    (lambda d: _task(d, "training").update(purpose=None), "plans.assignment.tasks[1].purpose", "purpose"),
    (lambda d: _task(d, "training").update(purpose="assignment.nothing"), "plans.assignment.tasks[1].purpose",
     "no projection"),
    (lambda d: _task(d, "employee").pop("input"), "plans.assignment.tasks[0].input", "needs an input"),
    (lambda d: _task(d, "medical").update(analysis="training"), "plans.assignment.tasks[2].analysis",
     "two tasks"),
    (lambda d: _task(d, "employee").update(context="nothing"), "plans.assignment.tasks[0].context", "context"),
    (lambda d: _task(d, "training").update(requires={}), "plans.assignment.tasks[1].requires", "at least"),
    (lambda d: d["plans"]["assignment"]["conditions"]["worker_assignable"].update(field="happy"),
     "plans.assignment.conditions.worker_assignable.field", "no result field"),
    (lambda d: d["plans"]["assignment"]["conditions"]["worker_assignable"].update(false_when=["no"]),
     "plans.assignment.conditions.worker_assignable.false_when[0]", "not a boolean"),
    (lambda d: d["plans"]["assignment"]["conditions"]["worker_assignable"].update(if_false="NOWHERE"),
     "plans.assignment.conditions.worker_assignable.if_false", "unknown outcome"),
    (lambda d: d["projections"]["medical-agent"]["assignment.medical"].append("workers[].diagnosis"),
     "projections.medical-agent.assignment.medical[2]", "sensitive"),
    (lambda d: d["outcomes"].pop("MISSING_ANALYSIS"), "outcomes", "MISSING_ANALYSIS"),
    (lambda d: d["outcomes"]["MISSING_ANALYSIS"].update(decision="RECOMMENDED_FOR_RELEASE"),
     "outcomes.MISSING_ANALYSIS.decision", "must be one of"),
    (lambda d: d["outcomes"]["WORKER_NOT_ASSIGNABLE"].update(decision="RECOMMENDED_FOR_RELEASE"),
     "outcomes.WORKER_NOT_ASSIGNABLE.decision", "must be one of"),
    (lambda d: d["evidence"]["decisive_authority"].update(default="RUMOUR"), "evidence.decisive_authority.default",
     ""),
])
def test_an_invalid_definition_names_file_line_and_field(tmp_path: Path, mutate: Any, field: str,
                                                         message: str) -> None:
    data = _shipped()
    mutate(data)
    err = _error(tmp_path, data)
    assert err.field == field, err
    assert err.line is not None and err.line >= 1, err
    assert message in err.message, err
    assert f"{tmp_path / 'domain.yaml'}:{err.line}" in str(err)


def test_the_line_is_the_line_of_the_field(tmp_path: Path) -> None:
    text = (default_domains_dir() / "worker-assignment.yaml").read_text()
    text = text.replace("capabilities: [medical.getEligibility]", "capabilities: [medical.get Eligibility]")
    path = tmp_path / "domain.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_definition(path, sensitive_fields=SENSITIVE)
    line = next(i for i, row in enumerate(text.splitlines(), 1) if "medical.get Eligibility" in row)
    assert err.value.line == line and err.value.field == "plans.assignment.tasks[2].requires.capabilities[0]"


def test_a_condition_with_both_branches_runs_the_taken_one(tmp_path: Path, selector: AgentSelector) -> None:
    data = _shipped()
    plan = data["plans"]["assignment"]
    del plan["conditions"]["worker_assignable"]["if_false"]
    # The false branch is a task too: the work-permit agent reads the permit when the worker cannot be assigned.
    plan["tasks"].append({"id": "explain", "analysis": "work-permit",
                          "requires": {"domains": ["work-permit"], "capabilities": ["workPermit.get"]},
                          "objective": "Read permit {permit}.", "purpose": "assignment.explain",
                          "after": {"employee": "not worker_assignable"}})
    data["projections"]["work-permit-agent"] = {"assignment.explain": ["permit_id"]}
    data["domain"] = "branches"
    for i in data["intents"].values():
        i["kind"] = "ASSIGN_BRANCHES"
    d = load_definition(_write(tmp_path, data), sensitive_fields=SENSITIVE)
    intent = parse_intent("Can worker W-1 be assigned to WP-1?", catalog=DomainCatalog.of([d]))
    built = build_plan(intent, execution_id="e", user=USER, correlation_id="c", selector=selector)
    edges = {(e.to_task_id, e.condition) for e in built.graph.edges}
    assert edges == {("e-t2", "worker_assignable"), ("e-t3", "worker_assignable"),
                     ("e-t4", "not worker_assignable")}
    yes, no = (common_pb2.AgentResult(status=common_pb2.RESULT_STATUS_SUCCESS) for _ in range(2))
    yes.result.update({"verdict": "PASS", "subjects": {"worker:W-1/employment": "PASS"}, "assignable": True,
                       "assignment": {"permit_id": "WP-1"}})
    no.result.update({"verdict": "FAIL", "subjects": {"worker:W-1/employment": "FAIL"}, "assignable": False})
    true_edge, false_edge = (next(e for e in built.graph.edges if e.to_task_id == t) for t in ("e-t2", "e-t4"))
    assert built.edge_holds(true_edge, {"e-t1": yes}) and not built.edge_holds(false_edge, {"e-t1": yes})
    assert built.edge_holds(false_edge, {"e-t1": no}) and not built.edge_holds(true_edge, {"e-t1": no})
    assert built.branch_not_taken(true_edge, {"e-t1": no}) and built.branch_not_taken(false_edge, {"e-t1": yes})
    # Undetermined (the task failed): neither branch.
    failed = common_pb2.AgentResult(status=common_pb2.RESULT_STATUS_FAILED)
    assert not built.edge_holds(true_edge, {"e-t1": failed}) and not built.edge_holds(false_edge, {"e-t1": failed})

    # Both branches lead somewhere: a false branch cannot also end with an outcome.
    plan["conditions"]["worker_assignable"]["if_false"] = "WORKER_NOT_ASSIGNABLE"
    err = _error(tmp_path, data)
    assert err.field == "plans.assignment.conditions.worker_assignable.if_false"


def test_definitions_that_clash_name_the_later_file(tmp_path: Path) -> None:
    shutil.copy(default_domains_dir() / "work-permit.yaml", tmp_path / "a.yaml")
    clash = _shipped()
    clash["intents"]["assign"]["kind"] = "ANALYZE_PERMIT"
    _write(tmp_path, clash, "b.yaml")
    with pytest.raises(ConfigError) as err:
        DomainCatalog.load(tmp_path, sensitive_fields=SENSITIVE)
    assert err.value.file == str(tmp_path / "b.yaml") and "already defined in" in err.value.message
    assert err.value.reason == "DOMAIN_DEFINITION_CONFLICT"


def test_an_empty_or_missing_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        DomainCatalog.load(tmp_path)
    with pytest.raises(ConfigError):
        DomainCatalog.load(tmp_path / "nowhere")


def test_expressions_and_templates() -> None:
    e = Expr("(a or b) and not c")
    assert e.names == {"a", "b", "c"}
    assert e.evaluate(lambda n: n == "a") and not e.evaluate(lambda n: n in ("a", "c"))
    for bad in ("a and", "(a", "a b", "and", "a & b", ""):
        with pytest.raises(ValueError):
            Expr(bad)
    t = Template("Permit {permit}: {context.status}")
    assert t.fields == {"permit", "context.status"}
    assert t.render({"permit": "WP-1", "context": {"status": "X"}}) == "Permit WP-1: X"
    assert t.render({}) == "Permit ?: ?"
    for bad in ("{0}", "{permit!r}", "{permit:>4}", "{a[0]}", "{"):
        with pytest.raises(ValueError):
            Template(bad)


def test_the_worker_assignment_intent_in_both_languages() -> None:
    for text, language in (("Can worker W-1003 be assigned to permit WP-10231?", "en"),
                           ("O trabalhador W-1003 pode ser alocado na permissão WP-10231?", "pt")):
        intent = parse_intent(text)
        assert (intent.kind, dict(intent.subjects), intent.language, intent.rule) == (
            "ASSIGN_WORKER", {"worker": "W-1003", "permit": "WP-10231"}, language, "ASSIGNMENT")
        assert intent.actionable and intent.domain_id == "worker-assignment"
    assert "trabalhador W-1003" in parse_intent("O trabalhador W-1003 pode ser alocado na permissão WP-10231?").message
    missing = parse_intent("Can W-1003 be assigned?")
    assert missing.kind == "ASSIGN_WORKER" and not missing.actionable and "WP-10231" in missing.message
    assert parse_intent("Can W-1 and W-2 be assigned to WP-1?").rule == "MULTIPLE_WORKERS"
    # Naming no worker keeps a permit question a permit question.
    assert parse_intent("Analyze WP-10231: are the assigned workers trained?").kind == "ANALYZE_PERMIT"


def test_a_classifier_names_an_intent_only_as_the_definitions_allow() -> None:
    from supervisor_svc.intent import Classification

    class Model:
        def __init__(self, kind: str, subjects: dict[str, str]) -> None:
            self.answer = Classification(kind, subjects, "MODEL:test")

        def classify(self, text: str, catalog: DomainCatalog) -> Classification | None:
            return self.answer

    text = "is Carla fine for the breaker job, W-1003 on WP-10231"
    assert parse_intent(text).kind == "UNKNOWN"
    got = parse_intent(text, classifier=Model("ASSIGN_WORKER", {"worker": "W-1003", "permit": "WP-10231"}))
    assert (got.kind, got.rule, got.actionable) == ("ASSIGN_WORKER", "MODEL:test", True)
    # A kind no domain defines, or subject values that are not what the definition says, are not taken.
    assert parse_intent(text, classifier=Model("DELETE_EVERYTHING", {})).kind == "UNKNOWN"
    bad = parse_intent("hello", classifier=Model("ASSIGN_WORKER", {"worker": "robert'); drop", "permit": "WP-1"}))
    assert not bad.actionable and "worker" not in bad.subjects
