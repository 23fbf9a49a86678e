"""Intent by a model, only for requests the deterministic rules do not understand (PRD §9, §49).

Deterministic first: :func:`supervisor_svc.intent.parse_intent` decides every
request it understands, and such a request never reaches a model. Only one it
has no rule for (``NO_RULE``) is offered to :class:`IntentClassifier`, and only
if it is relevant to some intent of the catalogue (``config/intents.yaml``, data,
not code):

1. **Candidates** (§9): an intent is shown to the model only when every subject
   it requires has an id in the request (found by the subject's pattern, spaces
   and case forgiven: ``wp 10231`` is ``WP-10231``); they are ranked by the words
   the request shares with their keywords, description and examples, and at most
   ``max_shown`` are shown. No candidate → no model call.
2. **The call** goes through the model service with the prompt ``intent.classify``:
   the candidates are its parameters (configuration), the request text is data.
   The supervisor's own grant for the call names the tenant and user of the
   assertion and carries the execution's model budget.
3. **The answer is a proposal**, accepted only if the intent is one of the
   candidates shown, every subject is one the intent declares, each id is one the
   supervisor itself found in the request, every required subject is there, and
   the confidence reaches ``min_confidence``. A tenant never comes from the answer
   (there is no field for one; a subject named ``tenant_id`` is refused as
   undeclared), and a model never asks for the release: that needs words the
   rules understand, or ``request_release``. Anything else → not understood.

The outcome (accepted or not, with the model, its version, the call id and the
candidates shown) is an :class:`~agentmesh.v1.supervisor_service_pb2.IntentClassification`
kept with the execution; the model service's MODEL_CALL record has the rest.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Protocol

import pydantic
from google.protobuf import json_format, struct_pb2

from agentmesh.v1 import common_pb2
from agentmesh.v1 import model_service_pb2 as model_pb2
from agentmesh.v1 import supervisor_service_pb2 as pb
from supervisor_svc._datafile import load_document, validation_error
from supervisor_svc.errors import ConfigError
from supervisor_svc.intent import Intent, IntentKind, classified_intent, normalize

__all__ = ["PROMPT_ID", "Classified", "IntentCandidate", "IntentCatalogue", "IntentClassifier", "ModelPort",
           "default_intents_file", "find_ids"]

PROMPT_ID = "intent.classify"
_WORD = re.compile(r"[a-z0-9]+")


def default_intents_file() -> Path:
    """The shipped catalogue, ``supervisor_svc/config/intents.yaml``."""
    return Path(__file__).parent / "config" / "intents.yaml"


class _Strict(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True, frozen=True)


class _Subject(_Strict):
    pattern: Annotated[str, pydantic.Field(min_length=1, max_length=100)]
    required: bool = True


class _Intent(_Strict):
    intent: Annotated[str, pydantic.Field(pattern=r"^[A-Z][A-Z0-9_]{0,63}$")]
    description: Annotated[str, pydantic.Field(min_length=1, max_length=300)]
    examples: list[Annotated[str, pydantic.Field(max_length=200)]] = []
    keywords: list[Annotated[str, pydantic.Field(min_length=1, max_length=40)]] = []
    subjects: dict[Annotated[str, pydantic.Field(pattern=r"^[a-z][a-z0-9_]{0,31}$")], _Subject]


class _File(_Strict):
    max_shown: Annotated[int, pydantic.Field(ge=1, le=8)] = 3
    min_confidence: Annotated[float, pydantic.Field(ge=0, le=1)] = 0.6
    intents: list[_Intent]


@dataclass(frozen=True)
class IntentCandidate:
    """One intent a model may be asked about."""

    intent: str
    description: str
    examples: tuple[str, ...]
    keywords: frozenset[str]
    subjects: Mapping[str, str]
    """Subject name → its id pattern."""
    required: tuple[str, ...]

    def parameters(self) -> dict[str, Any]:
        """How the model sees it (the prompt's parameters)."""
        return {"intent": self.intent, "description": self.description, "examples": list(self.examples),
                "subjects": dict(self.subjects)}


def _words(text: str) -> set[str]:
    return set(_WORD.findall(normalize(text)))


def _lenient(pattern: str) -> str:
    """``pattern`` with each literal dash outside a character class made optional (or a space)."""
    out, in_class, escaped = [], False, False
    for ch in pattern:
        if escaped:
            out.append(ch)
            escaped = False
        elif ch == "\\":
            out.append(ch)
            escaped = True
        elif ch == "[":
            in_class = True
            out.append(ch)
        elif ch == "]":
            in_class = False
            out.append(ch)
        elif ch == "-" and not in_class:
            out.append(r"[-\s]?")
        else:
            out.append(ch)
    return "".join(out)


def find_ids(pattern: str, text: str) -> list[str]:
    """Every id in ``text`` that ``pattern`` matches, written as the pattern wants it.

    Case and a space or a missing dash between the letters and the digits are forgiven
    (``wp 10231`` and ``wp10231`` are ``WP-10231``); nothing else is.
    """
    strict = re.compile(pattern)
    lenient = re.compile(r"(?<![A-Za-z0-9])" + _lenient(pattern) + r"(?![A-Za-z0-9])", re.IGNORECASE)
    found: list[str] = []
    for match in lenient.finditer(text):
        raw = match.group(0).upper()
        for variant in (raw, re.sub(r"\s", "-", raw), re.sub(r"^([A-Z]+)[-\s]?(?=\d)", r"\1-", raw)):
            if strict.fullmatch(variant):
                if variant not in found:
                    found.append(variant)
                break
    return found


class IntentCatalogue:
    """The intents of ``config/intents.yaml``, each mapped to the supervisor's intent kinds."""

    def __init__(self, candidates: Sequence[IntentCandidate], *, max_shown: int, min_confidence: float) -> None:
        self.candidates = tuple(candidates)
        self.max_shown = max_shown
        self.min_confidence = min_confidence

    @classmethod
    def load(cls, path: Path | None = None) -> IntentCatalogue:
        """Reads and validates the catalogue; ConfigError names the file, field and line."""
        path = path or default_intents_file()
        doc = load_document(path)
        try:
            model = _File.model_validate(doc.data)
        except pydantic.ValidationError as exc:
            raise validation_error(exc, doc, str(path)) from None
        known = {k.value for k in IntentKind} - {IntentKind.UNKNOWN.value}
        candidates = []
        for i, item in enumerate(model.intents):
            where = ("intents", i)
            if item.intent not in known:
                raise ConfigError(f"unknown intent {item.intent!r} (the supervisor plans {', '.join(sorted(known))})",
                                  file=str(path), field=f"intents[{i}].intent", line=doc.line_of((*where, "intent")))
            for name, subject in item.subjects.items():
                try:
                    re.compile(subject.pattern)
                except re.error as err:
                    raise ConfigError(f"not a regular expression: {err}", file=str(path),
                                      field=f"intents[{i}].subjects.{name}.pattern",
                                      line=doc.line_of((*where, "subjects", name))) from None
            if "permit_id" not in item.subjects or not item.subjects["permit_id"].required:
                raise ConfigError("the permit intents need a required permit_id subject", file=str(path),
                                  field=f"intents[{i}].subjects", line=doc.line_of((*where, "subjects")))
            keywords = frozenset(w for k in item.keywords for w in _words(k))
            candidates.append(IntentCandidate(
                item.intent, item.description, tuple(item.examples), keywords,
                {n: s.pattern for n, s in item.subjects.items()},
                tuple(n for n, s in item.subjects.items() if s.required)))
        return cls(candidates, max_shown=model.max_shown, min_confidence=model.min_confidence)

    def relevant(self, text: str) -> list[IntentCandidate]:
        """The candidates worth showing for ``text``: each required subject has an id in it; best overlap first."""
        words = _words(text)
        scored = []
        for order, c in enumerate(self.candidates):
            if not all(find_ids(c.subjects[name], text) for name in c.required):
                continue
            vocabulary = c.keywords | _words(" ".join([c.description, *c.examples]))
            scored.append((-len(words & vocabulary), order, c))
        return [c for _, _, c in sorted(scored, key=lambda t: (t[0], t[1]))[: self.max_shown]]


class ModelPort(Protocol):
    """``ModelService.Complete``, raising a MeshError when the call fails or is refused."""

    def complete(self, request: model_pb2.CompleteRequest) -> model_pb2.CompleteResponse: ...


@dataclass(frozen=True)
class Classified:
    """What the classification gave: the intent (UNKNOWN when the answer was not accepted) and its record."""

    intent: Intent | None
    """None when the answer was not accepted (``record.intent`` says why)."""
    record: pb.IntentClassification
    usage: common_pb2.ModelUsage
    why_not: str = ""
    """When not accepted: the check the answer failed, e.g. ``INTENT_NOT_SHOWN``."""


class IntentClassifier:
    """Asks the model service which candidate intent a request means, and validates the answer."""

    def __init__(self, catalogue: IntentCatalogue, port: ModelPort) -> None:
        self.catalogue = catalogue
        self._port = port

    def classify(self, text: str, rules: Intent, *, grant: common_pb2.SignedTaskGrant,
                 principal: common_pb2.AgentPrincipal, trace: common_pb2.TraceContext) -> Classified | None:
        """The model's reading of ``text`` (see the module docstring); None when no intent is relevant.

        ``rules`` is what the deterministic parser made of it (its language and the tenants
        the text names are kept). Raises the model service's MeshError when the call fails.
        """
        shown = self.catalogue.relevant(text)
        if not shown:
            return None
        params = struct_pb2.Struct()
        params.update({"candidates": [c.parameters() for c in shown]})
        response = self._port.complete(model_pb2.CompleteRequest(
            grant=grant, principal=principal, prompt_id=PROMPT_ID, parameters=params,
            data=[model_pb2.ModelData(name="request_text", text=text, source="user")], trace=trace))
        answer: dict[str, Any] = json_format.MessageToDict(response.answer)
        record = pb.IntentClassification(
            source="MODEL", candidates=[c.intent for c in shown], model_id=response.model_id,
            model_version=response.model_version, model_call_id=response.call_id)
        confidence = answer.get("confidence")
        if isinstance(confidence, int | float):
            record.confidence = float(confidence)
        why = self._check(answer, shown, text)
        if why:
            record.intent = f"{IntentKind.UNKNOWN.value}:{why}"
            return Classified(None, record, response.usage, why)
        chosen = next(c for c in shown if c.intent == answer["intent"])
        subjects = {str(k): str(v) for k, v in dict(answer["subjects"]).items()}
        record.intent = chosen.intent
        record.subjects.update(subjects)
        intent = classified_intent(IntentKind(chosen.intent), subjects["permit_id"], language=rules.language,
                                   tenants=rules.mentioned_tenants, rule="MODEL")
        return Classified(intent, record, response.usage)

    def _check(self, answer: Mapping[str, Any], shown: Sequence[IntentCandidate], text: str) -> str:
        """Why the answer is not accepted, or ''."""
        intent = answer.get("intent")
        if intent == "NONE":
            return "MODEL_FOUND_NO_INTENT"
        chosen = next((c for c in shown if c.intent == intent), None)
        if chosen is None:
            return "INTENT_NOT_SHOWN"
        subjects = answer.get("subjects")
        if not isinstance(subjects, Mapping):
            return "SUBJECTS_INVALID"
        for name, value in subjects.items():
            if name not in chosen.subjects:
                return "SUBJECT_NOT_DECLARED"
            if not isinstance(value, str) or value not in find_ids(chosen.subjects[name], text):
                return "SUBJECT_NOT_IN_REQUEST"
        if any(name not in subjects for name in chosen.required):
            return "SUBJECT_MISSING"
        confidence = answer.get("confidence")
        if not isinstance(confidence, int | float) or confidence < self.catalogue.min_confidence:
            return "CONFIDENCE_TOO_LOW"
        return ""
