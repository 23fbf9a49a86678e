"""Domain definitions: what the supervisor knows about a domain is data, never code (PRD §75).

One YAML file per domain, ``supervisor_svc/domains/<domain>.yaml`` (format
``agentmesh-domain/v1``; the shipped ``work-permit.yaml`` and
``worker-assignment.yaml`` are annotated examples, the README's "How to add a
domain" walks through one). A definition declares:

``subjects``
    what a request names, each with the pattern that finds it in the
    normalised text (lower case, accents removed) and its canonical form
    (``WP-10231``, ``W-1003``).
``patterns``, ``rules``, ``intents``
    deterministic intent recognition in Portuguese and English (PRD §49): named
    regular expressions; rules tried in order, each a boolean expression over
    pattern and subject names (``(assign_en or assign_pt) and worker``); the
    intent a rule recognises, the subjects it needs, its plan, the sentence
    that says what will be done, and the action a request may ask for.
``plans``
    DAG templates (PRD §17-19): tasks, each with the requirement an agent must
    meet (domains, capabilities, knowledge scopes), its objective, its input
    (first stage) or context-projection purpose (later stages), the result
    fields it must return and the ``context`` field later tasks are projected
    from; edges ``after: {task: done | <condition> | not <condition>}`` for
    sequential chains, parallel fan-out and conditional branches; conditions
    on a task's result, with the outcome that answers when one is false; or a
    ``report`` instead of a decision (a status question).
``projections``
    agent -> purpose -> the fields it receives (PRD §23-25).
``evidence``
    authority hierarchies, decisive thresholds and conflict rules (PRD §36-38).
``outcomes``
    the decision mapping: each aggregation outcome -> decision and headline.
``actions``, ``events``
    what an intent's action does once recommended (the release, PRD §67), and
    event-triggered work of a system actor (PRD §44).

Everything is validated when the supervisor starts, the whole file, before
anything runs: a bad definition stops it with a :class:`ConfigError` naming
``file:line`` and the field (``plans.analysis.tasks[1].after.permit``).
Across files: domain ids, intent kinds, rule-visible names, purposes per
agent, action capabilities and event kinds are unique.

Nothing here knows a domain; :class:`DomainCatalog` is what the intent parser,
planner, executor, aggregator, release and event handler read.
"""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import pydantic

from agentmesh.agent_manifest import AGENT_ID_PATTERN
from agentmesh.result_contract import FIELD_TYPES, Condition, ResultContract, ResultField
from agentmesh.v1 import supervisor_service_pb2
from supervisor_svc._datafile import Document, PathKey, format_path, load_document, validation_error
from supervisor_svc.aggregation import EvidencePolicy
from supervisor_svc.errors import ConfigError
from supervisor_svc.normalized_text import normalize
from supervisor_svc.selection import Requirement

if TYPE_CHECKING:
    from supervisor_svc.projection import ProjectionConfig

__all__ = [
    "FORMAT",
    "GENERIC_OUTCOMES",
    "ActionDef",
    "DomainCatalog",
    "DomainDefinition",
    "EventDef",
    "EventStep",
    "Expr",
    "IntentDef",
    "ModelHints",
    "OutcomeDef",
    "PlanDef",
    "ReportDef",
    "RuleDef",
    "SubjectDef",
    "TaskDef",
    "Template",
    "Text",
    "default_catalog",
    "default_domains_dir",
    "execution_intent",
    "load_definition",
    "projection_config",
]

FORMAT = "agentmesh-domain/v1"
LANGUAGES = ("en", "pt")
"""Every text of a definition is given in each of these; English answers when the language is unknown."""

GENERIC_OUTCOMES = ("ALL_ANALYSES_PASS", "DEFINITIVE_FAIL", "UNRESOLVED_CONFLICT", "NON_DECISIVE_FAIL",
                    "MISSING_ANALYSIS", "NO_ANALYSIS_COMPLETED")
"""What the aggregator concludes (supervisor_svc.aggregation); a domain with a decided plan maps each."""
_ALLOWED_DECISIONS: dict[str, tuple[str, ...]] = {
    # Only "everything passed on evidence" may recommend; a conflict always goes to a human.
    "ALL_ANALYSES_PASS": ("RECOMMENDED_FOR_RELEASE", "REQUIRES_REVIEW"),
    "DEFINITIVE_FAIL": ("NOT_RECOMMENDED", "REQUIRES_REVIEW"),
    "UNRESOLVED_CONFLICT": ("REQUIRES_REVIEW",),
    "NON_DECISIVE_FAIL": ("REQUIRES_REVIEW", "NOT_RECOMMENDED"),
    "MISSING_ANALYSIS": ("INSUFFICIENT_EVIDENCE", "REQUIRES_REVIEW"),
    "NO_ANALYSIS_COMPLETED": ("INSUFFICIENT_EVIDENCE", "REQUIRES_REVIEW"),
}
_BRANCH_DECISIONS = ("NOT_RECOMMENDED", "REQUIRES_REVIEW", "INSUFFICIENT_EVIDENCE")
"""A branch outcome answers before every analysis ran: it never recommends."""
EVENT_FIELD_KINDS = ("id", "date", "text")

_ID = r"^[a-z][a-z0-9_]{0,62}$"
_DOMAIN_ID = r"^[a-z][a-z0-9-]{0,62}$"
_TASK_ID = r"^[a-z][a-z0-9_-]{0,62}$"
_CODE = r"^[A-Z][A-Z0-9_]{0,63}$"
_CAPABILITY = r"^[a-z][A-Za-z0-9]*(\.[a-z][A-Za-z0-9]*)+$"
_PURPOSE = r"^[a-z][a-z0-9._-]{0,127}$"
_PATH = r"^[A-Za-z_][A-Za-z0-9_]*(\[\])?(\.[A-Za-z_][A-Za-z0-9_]*(\[\])?)*$"
_FIELD_NAME = re.compile(r"^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)?$")
_NOT = "not "


def default_domains_dir() -> Path:
    """The domain definitions shipped with the supervisor."""
    return Path(__file__).parent / "domains"


# --- texts and templates -------------------------------------------------------------------------------

class Template:
    """A text with ``{name}`` / ``{a.b}`` placeholders, checked when loaded; rendering never evaluates anything."""

    def __init__(self, text: str) -> None:
        """Raises ValueError for a placeholder that is not a plain (dotted) name."""
        self.text = text
        parts: list[tuple[str, str | None]] = []
        try:
            parsed = list(string.Formatter().parse(text))
        except ValueError as err:
            raise ValueError(f"not a valid template: {err}") from None
        for literal, name, spec, conversion in parsed:
            if name is not None and (spec or conversion or not _FIELD_NAME.match(name)):
                raise ValueError(f"placeholder {{{name}}} must be a plain name such as {{permit}}")
            parts.append((literal, name))
        self._parts = tuple(parts)

    @property
    def fields(self) -> frozenset[str]:
        """The placeholder names."""
        return frozenset(n for _, n in self._parts if n is not None)

    def render(self, values: Mapping[str, Any], *, missing: str = "?") -> str:
        """The text with each placeholder replaced (``missing`` where there is no value)."""
        out: list[str] = []
        for literal, name in self._parts:
            out.append(literal)
            if name is not None:
                value = _lookup(values, name)
                out.append(missing if value is None else str(value))
        return "".join(out)

    def has_values(self, values: Mapping[str, Any]) -> bool:
        """Whether every placeholder has a value."""
        return all(_lookup(values, n) is not None for n in self.fields)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Template) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"Template({self.text!r})"


def _lookup(values: Mapping[str, Any], name: str) -> Any:
    value: Any = values
    for part in name.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


@dataclass(frozen=True)
class Text:
    """One text in each language."""

    by_language: Mapping[str, Template]

    def render(self, language: str, values: Mapping[str, Any], *, missing: str = "?") -> str:
        """In ``language``, English when it is not one of :data:`LANGUAGES`."""
        template = self.by_language.get(language) or self.by_language["en"]
        return template.render(values, missing=missing)

    def has_values(self, values: Mapping[str, Any]) -> bool:
        """Whether every language's placeholders have values."""
        return all(t.has_values(values) for t in self.by_language.values())

    @property
    def fields(self) -> frozenset[str]:
        """The placeholder names of every language."""
        return frozenset().union(*(t.fields for t in self.by_language.values()))


# --- rule expressions ----------------------------------------------------------------------------------

_TOKEN = re.compile(r"\s*(\(|\)|[a-z_][a-z0-9_]*)")


class Expr:
    """A boolean expression over names: ``and``, ``or``, ``not``, parentheses (``a and not (b or c)``)."""

    def __init__(self, text: str) -> None:
        """Raises ValueError when it does not parse."""
        self.text = text
        tokens: list[str] = []
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            m = _TOKEN.match(text, pos)
            if m is None:
                raise ValueError(f"unexpected character {text[pos:].strip()[:1]!r} at {pos + 1}")
            tokens.append(m.group(1))
            pos = m.end()
        if not tokens:
            raise ValueError("the expression is empty")
        self._tokens = tokens
        self._i = 0
        self._tree = self._or()
        if self._i != len(tokens):
            raise ValueError(f"unexpected {tokens[self._i]!r}")
        del self._tokens

    def _peek(self) -> str | None:
        return self._tokens[self._i] if self._i < len(self._tokens) else None

    def _take(self) -> str:
        token = self._peek()
        if token is None:
            raise ValueError("the expression ends too early")
        self._i += 1
        return token

    def _or(self) -> Any:
        node = self._and()
        while self._peek() == "or":
            self._take()
            node = ("or", node, self._and())
        return node

    def _and(self) -> Any:
        node = self._not()
        while self._peek() == "and":
            self._take()
            node = ("and", node, self._not())
        return node

    def _not(self) -> Any:
        token = self._take()
        if token == "not":
            return ("not", self._not())
        if token == "(":
            node = self._or()
            if self._take() != ")":
                raise ValueError("a parenthesis is not closed")
            return node
        if token in ("and", "or", ")"):
            raise ValueError(f"unexpected {token!r}")
        return ("name", token)

    @property
    def names(self) -> frozenset[str]:
        """Every name the expression reads."""
        out: set[str] = set()

        def walk(node: Any) -> None:
            if node[0] == "name":
                out.add(node[1])
            else:
                for child in node[1:]:
                    walk(child)

        walk(self._tree)
        return frozenset(out)

    def evaluate(self, truth: Callable[[str], bool]) -> bool:
        """The value, with ``truth(name)`` for each name."""

        def ev(node: Any) -> bool:
            kind = node[0]
            if kind == "name":
                return truth(node[1])
            if kind == "not":
                return not ev(node[1])
            if kind == "and":
                return ev(node[1]) and ev(node[2])
            return ev(node[1]) or ev(node[2])

        return ev(self._tree)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Expr) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)


# --- the runtime model ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class SubjectDef:
    """Something a request names (a permit, a worker)."""

    name: str
    pattern: re.Pattern[str]
    canonical: str
    """``WP-{1}``: ``{n}`` is the n-th group of the pattern."""
    example: str
    several: Text
    missing: Text

    def find(self, normalized: str) -> list[str]:
        """Every canonical value named in a normalised text, in order, without repeats."""
        out: list[str] = []
        for m in self.pattern.finditer(normalized):
            groups = (m.group(0), *m.groups())

            def group(g: re.Match[str], groups: tuple[str | Any, ...] = groups) -> str:
                return str(groups[int(g.group(1))] or "")

            value = re.sub(r"\{(\d+)\}", group, self.canonical)
            if value not in out:
                out.append(value)
        return out

    def accepts(self, value: str) -> bool:
        """Whether ``value`` is a canonical value of this subject (e.g. one a model proposed)."""
        return self.find(normalize(value)) == [value]


@dataclass(frozen=True)
class RuleDef:
    """One recognition rule: when ``when`` holds, the request is ``intent``."""

    rule_id: str
    intent: str
    when: Expr
    asks_action: bool


@dataclass(frozen=True)
class IntentDef:
    """What a request can ask of a domain."""

    key: str
    kind: str
    """Recorded with the execution (``Execution.intent`` = ``KIND:RULE``); unique across domains."""
    domain: str
    subjects: tuple[str, ...]
    plan: str
    message: Text
    action: str | None = None
    action_message: Text | None = None
    model: ModelHints | None = None
    """How a model is shown the intent when no rule understood a request (None: never shown to one)."""


@dataclass(frozen=True)
class ModelHints:
    """An intent as a model sees it (supervisor_svc.model_intent): words, and each subject's id pattern."""

    description: str
    examples: tuple[str, ...]
    keywords: tuple[str, ...]
    subjects: Mapping[str, str]
    """Subject name -> the pattern of its canonical id (``WP-[0-9]{1,12}``), as the model is to write it."""


@dataclass(frozen=True)
class TaskDef:
    """One task of a plan template."""

    task_id: str
    analysis: str
    requirement: Requirement
    objective: Template
    input: Mapping[str, Template] | None
    """First stage: the task's input, from the subjects. Later stages: None (projected at run time)."""
    purpose: str
    """Context-projection purpose (the first stage's is recorded only)."""
    after: tuple[tuple[str, str], ...]
    """(predecessor task id, edge condition: ``""``, ``<condition>`` or ``not <condition>``)."""
    contract: ResultContract
    context: str | None
    """The result field later tasks are projected from."""


@dataclass(frozen=True)
class ReportDef:
    """The answer of a plan that reports instead of deciding: the first template the context fills."""

    templates: tuple[Text, ...]
    unavailable_text: Text

    def text(self, language: str, values: Mapping[str, Any]) -> str | None:
        """The first template all of whose fields ``values`` has, in a language; None if none."""
        for t in self.templates:
            if t.has_values(values):
                return t.render(language, values)
        return None

    def unavailable(self, language: str, values: Mapping[str, Any]) -> str:
        """The line saying the report cannot be given."""
        return self.unavailable_text.render(language, values)


@dataclass(frozen=True)
class PlanDef:
    """A DAG template."""

    key: str
    tasks: tuple[TaskDef, ...]
    conditions: Mapping[str, Condition]
    report: ReportDef | None = None

    def task(self, task_id: str) -> TaskDef:
        """The template task of an id (KeyError when unknown)."""
        for t in self.tasks:
            if t.task_id == task_id:
                return t
        raise KeyError(task_id)

    @property
    def expected(self) -> tuple[str, ...]:
        """The analyses a complete answer needs, in task order."""
        return tuple(dict.fromkeys(t.analysis for t in self.tasks))


@dataclass(frozen=True)
class OutcomeDef:
    """One entry of the decision mapping."""

    key: str
    decision: str
    """An ``AnalysisDecision`` without its prefix."""
    headline: Text
    details: bool = True
    """Whether the answer lists the analyses after the headline (a branch outcome: the reasons)."""

    def line(self, language: str, subjects: Mapping[str, str]) -> str:
        """The headline in a language (English when unknown)."""
        return self.headline.render(language, subjects)


@dataclass(frozen=True)
class ActionDef:
    """What an intent's action does once the analysis recommends it (see supervisor_svc.actions)."""

    key: str
    domain: str
    capability: str
    agent: str
    resource_type: str
    """As in audit records and grants (``permit`` -> ``permit:WP-1``)."""
    policy_resource_type: str
    """The policy engine's entity type (``WorkPermit``)."""
    subject: str
    """The intent subject the action acts on."""
    verb: str
    """``release``: in the answer's sentences."""
    past: str
    """``RELEASED``: what the resource reads back as once done."""
    arguments: Mapping[str, Template]
    input: Mapping[str, Template]
    capabilities: tuple[str, ...]
    verified: str
    """Dotted path in the agent's result that is true once the effect was read back (``release.verified``)."""
    unknown_codes: tuple[str, ...]
    """Error codes of the agent's result that leave the outcome unknown (asked again under the same key)."""
    nothing_written_codes: tuple[str, ...] = ()
    """Error codes of the agent's result that say it was refused before anything was written."""
    verification_failed_code: str = ""
    """The error code of an effect that did not read back (then ``compensated`` says whether it was undone)."""

    @property
    def effect_field(self) -> str:
        """The result field holding the effect record (``release``)."""
        return self.verified.split(".", 1)[0]


@dataclass(frozen=True)
class EventEnd:
    """How an event-triggered execution ends at a step."""

    status: str
    reason: Template
    summary: Template
    decision: str = "UNSPECIFIED"


@dataclass(frozen=True)
class EventRecommend:
    """The recommendations a step's result lists (for a human, as one review)."""

    items: str
    resource: Template
    line: Template
    none: EventEnd
    reason: Template
    summary: Template


@dataclass(frozen=True)
class EventStep:
    """One task of an event's sequence."""

    step_id: str
    agent: str
    objective: Template
    input: Mapping[str, Template]
    capabilities: tuple[str, ...]
    then: Mapping[str, EventEnd | None]
    """``PASS`` / ``FAIL`` / ``UNKNOWN`` (the verdict) / ``FAILED`` (no usable result) -> an end, or None: next."""
    recommend: EventRecommend | None = None


@dataclass(frozen=True)
class EventDef:
    """Event-triggered work (PRD §44): a system actor's sequence of steps."""

    kind: str
    """The ``HandleEventRequest`` event field, e.g. ``training_expired``."""
    domain: str
    system_actor: str
    fields: Mapping[str, str]
    """Event field -> ``id`` | ``date`` | ``text`` (each required)."""
    request_text: Template
    resource: Template
    values: Mapping[str, Template]
    """Named texts available to every template (``who``)."""
    steps: tuple[EventStep, ...]


@dataclass(frozen=True)
class DomainDefinition:
    """One validated domain definition file."""

    domain: str
    description: str
    file: str
    priority: int
    language: Mapping[str, tuple[str, ...]]
    vocabulary: tuple[str, ...]
    help: Text
    subjects: Mapping[str, SubjectDef]
    patterns: Mapping[str, re.Pattern[str]]
    rules: tuple[RuleDef, ...]
    intents: Mapping[str, IntentDef]
    plans: Mapping[str, PlanDef]
    projections: Mapping[str, Mapping[str, tuple[str, ...]]]
    evidence: EvidencePolicy
    outcomes: Mapping[str, OutcomeDef]
    actions: Mapping[str, ActionDef]
    events: Mapping[str, EventDef]

    def plan_of(self, intent: IntentDef) -> PlanDef:
        """The plan an intent runs."""
        return self.plans[intent.plan]


# --- file models -----------------------------------------------------------------------------------------

class _Strict(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True, frozen=True)


_NonEmpty = Annotated[str, pydantic.StringConstraints(min_length=1, max_length=4000)]


class _TextModel(_Strict):
    en: _NonEmpty
    pt: _NonEmpty


class _SubjectModel(_Strict):
    pattern: _NonEmpty
    canonical: _NonEmpty
    example: _NonEmpty
    several: _TextModel
    missing: _TextModel


class _RuleModel(_Strict):
    id: Annotated[str, pydantic.StringConstraints(pattern=_CODE)]
    intent: Annotated[str, pydantic.StringConstraints(pattern=_ID)]
    when: _NonEmpty
    asks_action: bool = False


class _ModelHintsModel(_Strict):
    description: Annotated[str, pydantic.StringConstraints(min_length=1, max_length=300)]
    examples: list[Annotated[str, pydantic.StringConstraints(max_length=200)]] = pydantic.Field(
        default=[], max_length=6)
    keywords: list[Annotated[str, pydantic.StringConstraints(min_length=1, max_length=40)]] = []
    subjects: dict[Annotated[str, pydantic.StringConstraints(pattern=_ID)],
                   Annotated[str, pydantic.StringConstraints(min_length=1, max_length=100)]]


class _IntentModel(_Strict):
    kind: Annotated[str, pydantic.StringConstraints(pattern=_CODE)]
    subjects: list[Annotated[str, pydantic.StringConstraints(pattern=_ID)]] = pydantic.Field(min_length=1)
    plan: Annotated[str, pydantic.StringConstraints(pattern=_ID)]
    message: _TextModel
    action: Annotated[str, pydantic.StringConstraints(pattern=_ID)] | None = None
    action_message: _TextModel | None = None
    model: _ModelHintsModel | None = None


class _RequiresModel(_Strict):
    domains: list[Annotated[str, pydantic.StringConstraints(pattern=_DOMAIN_ID)]] = []
    capabilities: list[Annotated[str, pydantic.StringConstraints(pattern=_CAPABILITY)]] = []
    knowledge_scopes: list[Annotated[str, pydantic.StringConstraints(pattern=r"^[a-z][a-z0-9._-]{0,127}$")]] = []


class _ResultFieldModel(_Strict):
    type: Literal["boolean", "string", "number", "object", "array"]
    required_when: Annotated[str, pydantic.StringConstraints(pattern=_ID)] | None = None


class _TaskModel(_Strict):
    id: Annotated[str, pydantic.StringConstraints(pattern=_TASK_ID)]
    analysis: Annotated[str, pydantic.StringConstraints(pattern=_DOMAIN_ID)] | None = None
    requires: _RequiresModel
    objective: _NonEmpty
    input: dict[Annotated[str, pydantic.StringConstraints(pattern=_ID)], _NonEmpty] | None = None
    purpose: Annotated[str, pydantic.StringConstraints(pattern=_PURPOSE)] | None = None
    after: dict[str, _NonEmpty] = {}
    context: Annotated[str, pydantic.StringConstraints(pattern=_ID)] | None = None
    result: dict[Annotated[str, pydantic.StringConstraints(pattern=_ID)], _ResultFieldModel] = {}


class _ConditionModel(_Strict):
    task: str
    field: Annotated[str, pydantic.StringConstraints(pattern=_ID)]
    true_when: list[bool | str | int] = pydantic.Field(min_length=1)
    false_when: list[bool | str | int] = pydantic.Field(min_length=1)
    if_false: Annotated[str, pydantic.StringConstraints(pattern=_CODE)] | None = None


class _ReportModel(_Strict):
    templates: list[_TextModel] = pydantic.Field(min_length=1)
    unavailable: _TextModel


class _PlanModel(_Strict):
    tasks: list[_TaskModel] = pydantic.Field(min_length=1, max_length=100)
    conditions: dict[Annotated[str, pydantic.StringConstraints(pattern=_ID)], _ConditionModel] = {}
    report: _ReportModel | None = None


class _OutcomeModel(_Strict):
    decision: Literal["RECOMMENDED_FOR_RELEASE", "NOT_RECOMMENDED", "REQUIRES_REVIEW", "INSUFFICIENT_EVIDENCE"]
    en: _NonEmpty
    pt: _NonEmpty
    details: bool = True


class _ActionResourceModel(_Strict):
    type: Annotated[str, pydantic.StringConstraints(pattern=r"^[a-z][a-z0-9_-]{0,31}$")]
    policy_type: Annotated[str, pydantic.StringConstraints(pattern=r"^[A-Z][A-Za-z0-9]{0,63}$")]
    subject: Annotated[str, pydantic.StringConstraints(pattern=_ID)]


class _VerbModel(_Strict):
    en: Annotated[str, pydantic.StringConstraints(pattern=r"^[a-z][a-z ]{0,40}$")]
    past: Annotated[str, pydantic.StringConstraints(pattern=_CODE)]


class _ActionModel(_Strict):
    capability: Annotated[str, pydantic.StringConstraints(pattern=_CAPABILITY)]
    agent: Annotated[str, pydantic.StringConstraints(pattern=AGENT_ID_PATTERN)]
    resource: _ActionResourceModel
    verb: _VerbModel
    arguments: dict[Annotated[str, pydantic.StringConstraints(pattern=_ID)], _NonEmpty] = pydantic.Field(
        min_length=1)
    input: dict[Annotated[str, pydantic.StringConstraints(pattern=_ID)], _NonEmpty] = pydantic.Field(min_length=1)
    capabilities: list[Annotated[str, pydantic.StringConstraints(pattern=_CAPABILITY)]] = pydantic.Field(
        min_length=1)
    verified: Annotated[str, pydantic.StringConstraints(pattern=r"^[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*$")]
    unknown_codes: list[Annotated[str, pydantic.StringConstraints(pattern=_CODE)]] = []
    nothing_written_codes: list[Annotated[str, pydantic.StringConstraints(pattern=_CODE)]] = []
    verification_failed_code: Annotated[str, pydantic.StringConstraints(pattern=_CODE)] | None = None


class _EventEndModel(_Strict):
    status: Literal["SUCCEEDED", "FAILED"]
    reason: _NonEmpty
    summary: _NonEmpty
    decision: Literal["UNSPECIFIED", "NOT_RECOMMENDED", "REQUIRES_REVIEW", "INSUFFICIENT_EVIDENCE"] = "UNSPECIFIED"


class _EventReviewModel(_Strict):
    reason: _NonEmpty
    summary: _NonEmpty


class _RecommendModel(_Strict):
    items: Annotated[str, pydantic.StringConstraints(pattern=_ID)]
    resource: _NonEmpty
    line: _NonEmpty
    none: _EventEndModel
    review: _EventReviewModel


class _EventStepModel(_Strict):
    id: Annotated[str, pydantic.StringConstraints(pattern=_TASK_ID)]
    agent: Annotated[str, pydantic.StringConstraints(pattern=AGENT_ID_PATTERN)]
    objective: _NonEmpty
    input: dict[Annotated[str, pydantic.StringConstraints(pattern=_ID)], _NonEmpty] = pydantic.Field(min_length=1)
    capabilities: list[Annotated[str, pydantic.StringConstraints(pattern=_CAPABILITY)]] = pydantic.Field(
        min_length=1)
    then: dict[Literal["PASS", "FAIL", "UNKNOWN", "FAILED"], _EventEndModel | Literal["next"]] = {}
    recommend: _RecommendModel | None = None


class _EventModel(_Strict):
    system_actor: Annotated[str, pydantic.StringConstraints(pattern=r"^[A-Z][A-Za-z0-9]{0,63}$")]
    fields: dict[Annotated[str, pydantic.StringConstraints(pattern=_ID)], Literal["id", "date", "text"]] = (
        pydantic.Field(min_length=1))
    request_text: _NonEmpty
    resource: _NonEmpty
    who: _NonEmpty | None = None
    steps: list[_EventStepModel] = pydantic.Field(min_length=1, max_length=20)


class _FileModel(_Strict):
    format: Literal["agentmesh-domain/v1"]
    domain: Annotated[str, pydantic.StringConstraints(pattern=_DOMAIN_ID)]
    description: _NonEmpty
    priority: Annotated[int, pydantic.Field(ge=-1000, le=1000)] = 0
    language: dict[Literal["en", "pt"], list[_NonEmpty]] = {}
    vocabulary: list[Annotated[str, pydantic.StringConstraints(pattern=r"^[a-z][a-z0-9-]{0,62}$")]] = []
    help: _TextModel
    subjects: dict[Annotated[str, pydantic.StringConstraints(pattern=_ID)], _SubjectModel] = pydantic.Field(
        min_length=1)
    patterns: dict[Annotated[str, pydantic.StringConstraints(pattern=_ID)], _NonEmpty] = {}
    rules: list[_RuleModel] = pydantic.Field(min_length=1)
    intents: dict[Annotated[str, pydantic.StringConstraints(pattern=_ID)], _IntentModel] = pydantic.Field(
        min_length=1)
    plans: dict[Annotated[str, pydantic.StringConstraints(pattern=_ID)], _PlanModel] = pydantic.Field(min_length=1)
    projections: dict[Annotated[str, pydantic.StringConstraints(pattern=AGENT_ID_PATTERN)],
                      dict[Annotated[str, pydantic.StringConstraints(pattern=_PURPOSE)],
                           list[Annotated[str, pydantic.StringConstraints(pattern=_PATH)]]]] = {}
    evidence: dict[str, Any]
    outcomes: dict[Annotated[str, pydantic.StringConstraints(pattern=_CODE)], _OutcomeModel] = pydantic.Field(
        min_length=1)
    actions: dict[Annotated[str, pydantic.StringConstraints(pattern=_ID)], _ActionModel] = {}
    events: dict[Annotated[str, pydantic.StringConstraints(pattern=_ID)], _EventModel] = {}


# --- loading one file ---------------------------------------------------------------------------------------

class _Loader:
    """Validates one parsed definition file; every error names the file, the line and the field."""

    def __init__(self, doc: Document, file: str, sensitive_fields: frozenset[str]) -> None:
        self.doc = doc
        self.file = file
        self.sensitive = sensitive_fields

    def fail(self, message: str, *loc: str | int, reason: str = "DOMAIN_DEFINITION_INVALID") -> ConfigError:
        path: PathKey = tuple(loc)
        return ConfigError(message, file=self.file, field=format_path(path) or None, line=self.doc.line_of(path),
                           reason=reason)

    def template(self, text: str, *loc: str | int, allowed: Iterable[str] | None = None) -> Template:
        try:
            template = Template(text)
        except ValueError as err:
            raise self.fail(str(err), *loc) from None
        if allowed is not None:
            known = set(allowed)
            unknown = sorted(f for f in template.fields if f not in known and f.split(".", 1)[0] not in known)
            if unknown:
                raise self.fail(f"unknown placeholder {{{unknown[0]}}} (known: {', '.join(sorted(known)) or 'none'})",
                                *loc)
        return template

    def text(self, model: _TextModel, *loc: str | int, allowed: Iterable[str] | None = None) -> Text:
        names = None if allowed is None else tuple(allowed)
        return Text({lang: self.template(getattr(model, lang), *loc, lang, allowed=names) for lang in LANGUAGES})

    def regex(self, text: str, *loc: str | int) -> re.Pattern[str]:
        try:
            return re.compile(text)
        except re.error as err:
            raise self.fail(f"not a valid regular expression: {err}", *loc) from None

    def load(self) -> DomainDefinition:
        try:
            m = _FileModel.model_validate(self.doc.data)
        except pydantic.ValidationError as exc:
            raise validation_error(exc, self.doc, self.file) from None
        subjects = self._subjects(m)
        patterns = {name: self.regex(text, "patterns", name) for name, text in m.patterns.items()}
        clash = sorted(set(patterns) & set(subjects))
        if clash:
            raise self.fail(f"{clash[0]!r} names both a pattern and a subject", "patterns", clash[0])
        language: dict[str, tuple[str, ...]] = {}
        for lang, words in m.language.items():
            for i, word in enumerate(words):
                self.regex(rf"\b({word})\b", "language", lang, i)
            language[lang] = tuple(words)
        evidence = EvidencePolicy.from_document(self.doc, self.file, ("evidence",))
        outcomes = self._outcomes(m, set(subjects))
        for key, intent in m.intents.items():
            if intent.plan not in m.plans:
                raise self.fail(f"unknown plan {intent.plan!r}", "intents", key, "plan")
        for key in m.plans:
            if not any(i.plan == key for i in m.intents.values()):
                raise self.fail("no intent runs this plan", "plans", key)
        plans = {key: self._plan(m, key, plan, outcomes) for key, plan in m.plans.items()}
        intents = self._intents(m, set(subjects), plans)
        rules = self._rules(m, set(patterns), set(subjects), intents)
        projections = self._projections(m)
        for key, plan in plans.items():
            for i, task in enumerate(plan.tasks):
                if task.input is None and not any(task.purpose in purposes for purposes in projections.values()):
                    raise self.fail(f"purpose {task.purpose!r} has no projection in this definition: the task "
                                    "would receive nothing", "plans", key, "tasks", i, "purpose")
        needs_decisions = any(p.report is None for p in plans.values())
        if needs_decisions:
            for key in GENERIC_OUTCOMES:
                if key not in outcomes:
                    raise self.fail(f"the decision mapping needs {key}", "outcomes")
        actions = {key: self._action(m, key, a, set(subjects)) for key, a in m.actions.items()}
        for key, declared in intents.items():
            if declared.action is not None and declared.action not in actions:
                raise self.fail(f"unknown action {declared.action!r}", "intents", key, "action")
        events = {kind: self._event(m.domain, kind, e) for kind, e in m.events.items()}
        return DomainDefinition(
            domain=m.domain, description=m.description, file=self.file, priority=m.priority, language=language,
            vocabulary=tuple(m.vocabulary), help=self.text(m.help, "help", allowed=()), subjects=subjects,
            patterns=patterns, rules=rules, intents=intents, plans=plans, projections=projections,
            evidence=evidence, outcomes=outcomes, actions=actions, events=events)

    def _subjects(self, m: _FileModel) -> dict[str, SubjectDef]:
        out: dict[str, SubjectDef] = {}
        for name, s in m.subjects.items():
            pattern = self.regex(s.pattern, "subjects", name, "pattern")
            groups = {int(g) for g in re.findall(r"\{(\d+)\}", s.canonical)}
            if any(g < 0 or g > pattern.groups for g in groups):
                raise self.fail(f"names a group the pattern does not have ({pattern.groups} groups)",
                                "subjects", name, "canonical")
            subject = SubjectDef(name, pattern, s.canonical, s.example,
                                 self.text(s.several, "subjects", name, "several", allowed=("values",)),
                                 self.text(s.missing, "subjects", name, "missing", allowed=()))
            if subject.find(normalize(s.example)) != [s.example]:
                raise self.fail(f"the pattern does not find {s.example!r} as written (canonical {s.canonical!r})",
                                "subjects", name, "example")
            out[name] = subject
        return out

    def _outcomes(self, m: _FileModel, subjects: set[str]) -> dict[str, OutcomeDef]:
        out: dict[str, OutcomeDef] = {}
        for key, o in m.outcomes.items():
            allowed = _ALLOWED_DECISIONS.get(key, _BRANCH_DECISIONS)
            if o.decision not in allowed:
                what = "an aggregation outcome" if key in _ALLOWED_DECISIONS else "a condition's outcome"
                raise self.fail(f"{key} is {what}: its decision must be one of {', '.join(allowed)}",
                                "outcomes", key, "decision", reason="DOMAIN_DECISION_UNSAFE")
            headline = Text({lang: self.template(getattr(o, lang), "outcomes", key, lang, allowed=subjects)
                             for lang in LANGUAGES})
            out[key] = OutcomeDef(key, o.decision, headline, o.details)
        return out

    def _plan(self, m: _FileModel, key: str, plan: _PlanModel, outcomes: Mapping[str, OutcomeDef]) -> PlanDef:
        loc: tuple[str | int, ...] = ("plans", key)
        ids = [t.id for t in plan.tasks]
        for i, task_id in enumerate(ids):
            if task_id in ids[:i]:
                raise self.fail(f"task id {task_id!r} is used twice", *loc, "tasks", i, "id")
        analyses = [t.analysis or t.id for t in plan.tasks]
        for i, analysis in enumerate(analyses):
            if analysis in analyses[:i]:
                raise self.fail(f"analysis {analysis!r} is covered by two tasks; each task covers its own",
                                *loc, "tasks", i, "analysis")
        conditions: dict[str, Condition] = {}
        by_id = {t.id: t for t in plan.tasks}
        for name, c in plan.conditions.items():
            cloc = (*loc, "conditions", name)
            reads = by_id.get(c.task)
            if reads is None:
                raise self.fail(f"unknown task {c.task!r}", *cloc, "task")
            declared = reads.result.get(c.field)
            if declared is None:
                raise self.fail(f"task {c.task!r} declares no result field {c.field!r}", *cloc, "field")
            for which in ("true_when", "false_when"):
                for j, value in enumerate(getattr(c, which)):
                    if not isinstance(value, FIELD_TYPES[declared.type]) or (
                            declared.type == "number" and isinstance(value, bool)):
                        raise self.fail(f"{value!r} is not a {declared.type}", *cloc, which, j)
            if set(map(repr, c.true_when)) & set(map(repr, c.false_when)):
                raise self.fail("a value is both true and false", *cloc, "false_when")
            if c.if_false is not None and c.if_false not in outcomes:
                raise self.fail(f"unknown outcome {c.if_false!r} (see outcomes)", *cloc, "if_false")
            if c.if_false in GENERIC_OUTCOMES:
                raise self.fail(f"{c.if_false} is an aggregation outcome; a condition answers with its own",
                                *cloc, "if_false")
            conditions[name] = Condition(name, c.task, c.field, tuple(c.true_when), tuple(c.false_when), c.if_false)
        tasks: list[TaskDef] = []
        false_branches: set[str] = set()
        subjects_used = self._plan_subjects(m, key)
        for i, t in enumerate(plan.tasks):
            tloc = (*loc, "tasks", i)
            contract = self._contract(t, tloc)
            if t.context is not None:
                declared = t.result.get(t.context)
                if declared is None or declared.type != "object":
                    raise self.fail("the context must be a result field of type object, declared in result",
                                    *tloc, "context")
            after: list[tuple[str, str]] = []
            for source, edge in t.after.items():
                if source not in by_id:
                    raise self.fail(f"unknown task {source!r}", *tloc, "after", source)
                if source == t.id:
                    raise self.fail("a task cannot come after itself", *tloc, "after", source)
                if edge == "done":
                    after.append((source, ""))
                    continue
                negated = edge.startswith(_NOT)
                name = edge[len(_NOT):].strip() if negated else edge.strip()
                cond = conditions.get(name)
                if cond is None:
                    raise self.fail(f"{edge!r} is neither 'done', a condition nor 'not <condition>' "
                                    f"(conditions: {', '.join(conditions) or 'none'})", *tloc, "after", source)
                if cond.task != source:
                    raise self.fail(f"condition {name!r} reads task {cond.task!r}, not {source!r}",
                                    *tloc, "after", source)
                if negated:
                    false_branches.add(name)
                after.append((source, f"{_NOT}{name}" if negated else name))
            if not after:
                if t.input is None:
                    raise self.fail("a first-stage task (no 'after') needs an input", *tloc, "input")
            elif t.input is not None:
                raise self.fail("a task after others is projected (purpose), it takes no input", *tloc, "input")
            elif t.purpose is None:
                raise self.fail("a task after others needs the purpose of its context projection", *tloc, "purpose")
            inputs = None if t.input is None else {
                k: self.template(v, *tloc, "input", k, allowed=subjects_used) for k, v in t.input.items()}
            requirement = Requirement(tuple(t.requires.domains), tuple(t.requires.capabilities),
                                      tuple(t.requires.knowledge_scopes))
            if not requirement.domains and not requirement.required_capabilities:
                raise self.fail("a requirement names at least a domain or a capability", *tloc, "requires")
            tasks.append(TaskDef(
                task_id=t.id, analysis=t.analysis or t.id, requirement=requirement,
                objective=self.template(t.objective, *tloc, "objective", allowed=subjects_used), input=inputs,
                purpose=t.purpose or f"{key}.{t.id}", after=tuple(after), contract=contract, context=t.context))
        for name, cond in conditions.items():
            if name in false_branches and cond.if_false is not None:
                raise self.fail("its false branch is taken by a task; it cannot also end with an outcome",
                                *loc, "conditions", name, "if_false")
        self._acyclic(tasks, loc)
        report = None
        if plan.report is not None:
            report = ReportDef(
                tuple(self.text(tm, *loc, "report", "templates", j) for j, tm in enumerate(plan.report.templates)),
                self.text(plan.report.unavailable, *loc, "report", "unavailable"))
            if len(tasks) != 1:
                raise self.fail("a plan that reports has exactly one task", *loc, "report")
        return PlanDef(key, tuple(tasks), conditions, report)

    def _plan_subjects(self, m: _FileModel, plan: str) -> tuple[str, ...]:
        """The subjects every intent running this plan names (what its templates may use)."""
        users = [set(i.subjects) for i in m.intents.values() if i.plan == plan]
        return tuple(sorted(set.intersection(*users))) if users else ()

    def _contract(self, t: _TaskModel, loc: tuple[str | int, ...]) -> ResultContract:
        fields: list[ResultField] = []
        for name, f in t.result.items():
            if name in ("verdict", "subjects"):
                raise self.fail(f"{name!r} is part of every result already", *loc, "result", name)
            if f.required_when is not None:
                other = t.result.get(f.required_when)
                if other is None or other.type != "boolean":
                    raise self.fail(f"{f.required_when!r} must be a boolean result field of this task",
                                    *loc, "result", name, "required_when")
            fields.append(ResultField(name, f.type, f.required_when))
        return ResultContract(tuple(fields))

    def _acyclic(self, tasks: Sequence[TaskDef], loc: tuple[str | int, ...]) -> None:
        children: dict[str, list[str]] = {t.task_id: [] for t in tasks}
        for t in tasks:
            for source, _ in t.after:
                children[source].append(t.task_id)
        state: dict[str, int] = dict.fromkeys(children, 0)
        stack: list[str] = []

        def visit(node: str) -> tuple[str, ...] | None:
            state[node] = 1
            stack.append(node)
            for child in children[node]:
                if state[child] == 1:
                    return (*stack[stack.index(child):], child)
                if state[child] == 0:
                    found = visit(child)
                    if found:
                        return found
            stack.pop()
            state[node] = 2
            return None

        for t in tasks:
            if state[t.task_id] == 0:
                cycle = visit(t.task_id)
                if cycle:
                    index = next(i for i, x in enumerate(tasks) if x.task_id == cycle[1])
                    raise self.fail(f"the plan has a cycle: {' -> '.join(cycle)}", *loc, "tasks", index, "after",
                                    reason="GRAPH_CYCLE")

    def _intents(self, m: _FileModel, subjects: set[str], plans: Mapping[str, PlanDef]) -> dict[str, IntentDef]:
        out: dict[str, IntentDef] = {}
        for key, i in m.intents.items():
            loc = ("intents", key)
            for j, s in enumerate(i.subjects):
                if s not in subjects:
                    raise self.fail(f"unknown subject {s!r}", *loc, "subjects", j)
            if len(set(i.subjects)) != len(i.subjects):
                raise self.fail("a subject is listed twice", *loc, "subjects")
            if i.plan not in plans:
                raise self.fail(f"unknown plan {i.plan!r}", *loc, "plan")
            if (i.action is None) != (i.action_message is None):
                raise self.fail("an action and its action_message go together", *loc,
                                "action_message" if i.action else "action")
            if i.action is not None and plans[i.plan].report is not None:
                raise self.fail("a plan that reports decides nothing, so it can have no action", *loc, "action")
            out[key] = IntentDef(
                key=key, kind=i.kind, domain=m.domain, subjects=tuple(i.subjects), plan=i.plan,
                message=self.text(i.message, *loc, "message", allowed=i.subjects), action=i.action,
                action_message=None if i.action_message is None else self.text(
                    i.action_message, *loc, "action_message", allowed=i.subjects),
                model=None if i.model is None else self._model_hints(i.model, i.subjects, *loc, "model"))
        kinds = [i.kind for i in out.values()]
        for key, defined in out.items():
            if kinds.count(defined.kind) > 1:
                raise self.fail(f"kind {defined.kind!r} is used by two intents", "intents", key, "kind")
        return out

    def _rules(self, m: _FileModel, patterns: set[str], subjects: set[str],
               intents: Mapping[str, IntentDef]) -> tuple[RuleDef, ...]:
        out: list[RuleDef] = []
        for i, r in enumerate(m.rules):
            loc = ("rules", i)
            if r.intent not in intents:
                raise self.fail(f"unknown intent {r.intent!r}", *loc, "intent")
            try:
                expr = Expr(r.when)
            except ValueError as err:
                raise self.fail(f"not a valid expression: {err}", *loc, "when") from None
            unknown = sorted(expr.names - patterns - subjects)
            if unknown:
                raise self.fail(f"{unknown[0]!r} is neither a pattern nor a subject", *loc, "when")
            if r.asks_action and intents[r.intent].action is None:
                raise self.fail(f"intent {r.intent!r} has no action to ask for", *loc, "asks_action")
            out.append(RuleDef(r.id, r.intent, expr, r.asks_action))
        return tuple(out)

    def _projections(self, m: _FileModel) -> dict[str, dict[str, tuple[str, ...]]]:
        out: dict[str, dict[str, tuple[str, ...]]] = {}
        for agent, purposes in m.projections.items():
            out[agent] = {}
            for purpose, paths in purposes.items():
                for i, p in enumerate(paths):
                    named = {t.removesuffix("[]") for t in p.split(".")}
                    if named & self.sensitive:
                        raise self.fail(f"{p!r} names a sensitive field; sensitive fields are never projected",
                                        "projections", agent, purpose, i, reason="PROJECTION_SENSITIVE_FIELD")
                out[agent][purpose] = tuple(sorted(set(paths)))
        return out

    def _action(self, m: _FileModel, key: str, a: _ActionModel, subjects: set[str]) -> ActionDef:
        loc = ("actions", key)
        if a.resource.subject not in subjects:
            raise self.fail(f"unknown subject {a.resource.subject!r}", *loc, "resource", "subject")
        if a.capability not in a.capabilities:
            raise self.fail(f"the task grant must list {a.capability}", *loc, "capabilities")
        known = (*subjects, "tenant", "user", "execution")
        arguments = {k: self.template(v, *loc, "arguments", k, allowed=known) for k, v in a.arguments.items()}
        if a.resource.subject not in {f for t in arguments.values() for f in t.fields}:
            raise self.fail(f"the arguments must name the {a.resource.subject} the action acts on", *loc, "arguments")
        inputs = {k: self.template(v, *loc, "input", k, allowed=("arguments", "action_id"))
                  for k, v in a.input.items()}
        for k, t in inputs.items():
            for f in t.fields:
                if f.startswith("arguments.") and f.split(".", 1)[1] not in arguments:
                    raise self.fail(f"unknown argument {f!r}", *loc, "input", k)
        return ActionDef(
            key=key, domain=m.domain, capability=a.capability, agent=a.agent, resource_type=a.resource.type,
            policy_resource_type=a.resource.policy_type, subject=a.resource.subject, verb=a.verb.en,
            past=a.verb.past, arguments=arguments, input=inputs, capabilities=tuple(a.capabilities),
            verified=a.verified, unknown_codes=tuple(a.unknown_codes),
            nothing_written_codes=tuple(a.nothing_written_codes),
            verification_failed_code=a.verification_failed_code or "")

    def _model_hints(self, h: _ModelHintsModel, subjects: Sequence[str], *loc: str | int) -> ModelHints:
        if sorted(h.subjects) != sorted(subjects):
            raise self.fail(f"names the intent's subjects exactly ({', '.join(subjects)})", *loc, "subjects")
        for name, pattern in h.subjects.items():
            try:
                re.compile(pattern)
            except re.error as err:
                raise self.fail(f"not a regular expression: {err}", *loc, "subjects", name) from None
        return ModelHints(h.description, tuple(h.examples), tuple(h.keywords), dict(h.subjects))

    def _event(self, domain: str, kind: str, e: _EventModel) -> EventDef:
        loc = ("events", kind)
        names = set(e.fields)
        values: dict[str, Template] = {}
        if e.who is not None:
            values["who"] = self.template(e.who, *loc, "who", allowed=names)
        known = names | set(values) | {"why"}
        steps: list[EventStep] = []
        ids: list[str] = []
        for i, s in enumerate(e.steps):
            sloc = (*loc, "steps", i)
            if s.id in ids:
                raise self.fail(f"step id {s.id!r} is used twice", *sloc, "id")
            ids.append(s.id)
            on: dict[str, EventEnd | None] = {}
            for outcome, end in s.then.items():
                on[outcome] = None if end == "next" else self._end(end, known, *sloc, "then", outcome)
            recommend = None
            if s.recommend is not None:
                r = s.recommend
                rloc = (*sloc, "recommend")
                if i != len(e.steps) - 1:
                    raise self.fail("only the last step recommends", *rloc)
                recommend = EventRecommend(
                    items=r.items, resource=self.template(r.resource, *rloc, "resource"),
                    line=self.template(r.line, *rloc, "line"), none=self._end(r.none, known, *rloc, "none"),
                    reason=self.template(r.review.reason, *rloc, "review", "reason", allowed=known),
                    summary=self.template(r.review.summary, *rloc, "review", "summary", allowed=known | {"lines"}))
            steps.append(EventStep(
                step_id=s.id, agent=s.agent, objective=self.template(s.objective, *sloc, "objective", allowed=known),
                input={k: self.template(v, *sloc, "input", k, allowed=known) for k, v in s.input.items()},
                capabilities=tuple(s.capabilities), then=on, recommend=recommend))
        return EventDef(kind=kind, domain=domain, system_actor=e.system_actor, fields=dict(e.fields),
                        request_text=self.template(e.request_text, *loc, "request_text", allowed=names),
                        resource=self.template(e.resource, *loc, "resource", allowed=names), values=values,
                        steps=tuple(steps))

    def _end(self, end: _EventEndModel, known: set[str], *loc: str | int) -> EventEnd:
        return EventEnd(end.status, self.template(end.reason, *loc, "reason", allowed=known),
                        self.template(end.summary, *loc, "summary", allowed=known), end.decision)


def load_definition(path: Path, *, sensitive_fields: Iterable[str] = ()) -> DomainDefinition:
    """Read and validate one domain definition file.

    Args:
        path: The YAML file.
        sensitive_fields: Field names no projection may name (``projections.yaml``'s ``sensitive_fields``).

    Raises:
        ConfigError: naming the file, the line and the field.
    """
    doc = load_document(path)
    return _Loader(doc, str(path), frozenset(sensitive_fields)).load()


# --- the catalogue -----------------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class DomainCatalog:
    """Every domain the supervisor serves, checked against each other."""

    domains: tuple[DomainDefinition, ...]
    """Highest ``priority`` first, then by domain id (the order rules are tried in)."""
    _by_id: Mapping[str, DomainDefinition] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def load(cls, directory: Path | None = None, *, sensitive_fields: Iterable[str] = (),
             files: Sequence[Path] | None = None) -> DomainCatalog:
        """Every ``*.yaml`` definition of ``directory`` (the shipped ones by default), or ``files``.

        Raises:
            ConfigError: a file is invalid, or two files clash (the second one is named).
        """
        if files is None:
            root = directory or default_domains_dir()
            if not root.is_dir():
                raise ConfigError("the domain definition directory does not exist", file=str(root),
                                  reason="CONFIG_UNREADABLE")
            files = sorted(p for p in root.iterdir() if p.suffix in (".yaml", ".yml"))
            if not files:
                raise ConfigError("no domain definition (*.yaml) found", file=str(root),
                                  reason="DOMAIN_DEFINITION_INVALID")
        sensitive = frozenset(sensitive_fields)
        loaded = [load_definition(p, sensitive_fields=sensitive) for p in files]
        return cls.of(loaded)

    @classmethod
    def of(cls, definitions: Sequence[DomainDefinition]) -> DomainCatalog:
        """A catalogue of already loaded definitions, checked against each other.

        Raises:
            ConfigError: a clash, naming the later file.
        """
        seen: dict[str, str] = {}

        def claim(what: str, value: str, d: DomainDefinition, loc: str) -> None:
            key = f"{what}:{value}"
            if key in seen:
                raise ConfigError(f"{what} {value!r} is already defined in {seen[key]}", file=d.file, field=loc,
                                  reason="DOMAIN_DEFINITION_CONFLICT")
            seen[key] = d.file

        for d in definitions:
            claim("domain", d.domain, d, "domain")
            for i in d.intents.values():
                claim("intent kind", i.kind, d, f"intents.{i.key}.kind")
            for a in d.actions.values():
                claim("action capability", a.capability, d, f"actions.{a.key}.capability")
            for e in d.events.values():
                claim("event", e.kind, d, f"events.{e.kind}")
            for agent, purposes in d.projections.items():
                for purpose in purposes:
                    claim("projection", f"{agent}/{purpose}", d, f"projections.{agent}.{purpose}")
        ordered = tuple(sorted(definitions, key=lambda d: (-d.priority, d.domain)))
        return cls(ordered, {d.domain: d for d in ordered})

    def domain(self, domain_id: str) -> DomainDefinition:
        """A domain by id (KeyError when unknown)."""
        return self._by_id[domain_id]

    def intent(self, kind: str) -> tuple[DomainDefinition, IntentDef] | None:
        """The domain and intent of a recorded kind (``ANALYZE_PERMIT``), or None."""
        for d in self.domains:
            for i in d.intents.values():
                if i.kind == kind:
                    return d, i
        return None

    def action(self, capability_id: str) -> ActionDef | None:
        """The action a capability performs (``workPermit.release``), or None."""
        for d in self.domains:
            for a in d.actions.values():
                if a.capability == capability_id:
                    return a
        return None

    def event(self, kind: str) -> EventDef | None:
        """The definition of an event kind (``training_expired``), or None."""
        for d in self.domains:
            if kind in d.events:
                return d.events[kind]
        return None

    @functools.cached_property
    def projections(self) -> dict[str, dict[str, tuple[str, ...]]]:
        """agent -> purpose -> allowed paths, over every domain."""
        out: dict[str, dict[str, tuple[str, ...]]] = {}
        for d in self.domains:
            for agent, purposes in d.projections.items():
                out.setdefault(agent, {}).update(purposes)
        return out

    def agents(self) -> frozenset[str]:
        """Every agent a definition names (actions, events, projections)."""
        out: set[str] = set(self.projections)
        for d in self.domains:
            out.update(a.agent for a in d.actions.values())
            out.update(s.agent for e in d.events.values() for s in e.steps)
        return frozenset(out)

    def describe(self) -> list[dict[str, Any]]:
        """Every intent as plain data (kind, domain, subjects with examples, message) — for a classifier of
        requests the rules do not understand, which must answer with one of these kinds."""
        out: list[dict[str, Any]] = []
        for d in self.domains:
            for i in d.intents.values():
                out.append({"kind": i.kind, "domain": d.domain, "description": d.description,
                            "subjects": {s: d.subjects[s].example for s in i.subjects},
                            "message": i.message.by_language["en"].text})
        return out


def execution_intent(kind: str) -> supervisor_service_pb2.ExecutionIntent:
    """``Execution.intent`` of an intent (or event) kind: ``EXECUTION_INTENT_<KIND>`` where the contract names
    one, else ``EXECUTION_INTENT_DOMAIN`` (``Execution.intent_kind`` names it)."""
    names = supervisor_service_pb2.ExecutionIntent.keys()
    name = f"EXECUTION_INTENT_{kind}"
    value: supervisor_service_pb2.ExecutionIntent = getattr(
        supervisor_service_pb2, name if name in names else "EXECUTION_INTENT_DOMAIN")
    return value


def projection_config(catalog: DomainCatalog, base: ProjectionConfig | None = None) -> ProjectionConfig:
    """The platform's projection configuration (``projections.yaml`` by default) with every domain's whitelists.

    Raises:
        ConfigError: a domain whitelists what the platform file already does, or a sensitive field.
    """
    from supervisor_svc.projection import ProjectionConfig

    config = base or ProjectionConfig.load()
    for d in catalog.domains:
        config = config.merged(d.projections, source=d.file)
    return config


@functools.cache
def default_catalog() -> DomainCatalog:
    """The shipped definitions, with the shipped sensitive fields (cached: loaded once per process)."""
    from supervisor_svc.projection import ProjectionConfig

    return DomainCatalog.load(sensitive_fields=ProjectionConfig.load().sensitive_fields)
