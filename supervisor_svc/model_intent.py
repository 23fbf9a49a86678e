"""Intent by a model, only for requests the deterministic rules do not understand (PRD §9, §49).

Deterministic first: :func:`supervisor_svc.intent.parse_intent` decides every
request the domain definitions' rules understand, and such a request never
reaches a model. Only one no rule holds for (``NO_RULE``) is offered to
:class:`IntentClassifier`, and only if it is relevant to some intent of the
domains that has a ``model`` block (data in ``supervisor_svc/domains/*.yaml``,
not code):

1. **Candidates** (§9): an intent is shown to the model only when every subject
   it requires is named in the request, once (found by its domain's own subject
   pattern); they are ranked by the words the request shares with their
   keywords, description and examples, and at most :data:`MAX_SHOWN` are shown.
   No candidate → no model call.
2. **The call** goes through the model service with the prompt ``intent.classify``:
   the candidates are its parameters (configuration), the request text is data.
   The supervisor's own grant for the call names the tenant and user of the
   assertion and carries the execution's model budget.
3. **The answer is a proposal**, accepted only if the intent is one of the
   candidates shown, every subject is one the intent declares, each id is one the
   supervisor itself finds in the request, every required subject is there, and
   the confidence reaches :data:`MIN_CONFIDENCE`. A tenant never comes from the
   answer (there is no field for one; a subject named ``tenant_id`` is refused as
   undeclared), and a model never asks for an intent's action (the release): that
   needs words the rules understand, or ``request_release``. The accepted reading
   is then resolved through the definitions exactly as a rule's would be
   (:class:`supervisor_svc.intent.Classification`). Anything else → not understood.

The outcome (accepted or not, with the model, its version, the call id and the
candidates shown) is an :class:`~agentmesh.v1.supervisor_service_pb2.IntentClassification`
kept with the execution; the model service's MODEL_CALL record has the rest.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from google.protobuf import struct_pb2

from agentmesh.structs import struct_dict
from agentmesh.v1 import common_pb2
from agentmesh.v1 import model_service_pb2 as model_pb2
from agentmesh.v1 import supervisor_service_pb2 as pb
from supervisor_svc.definitions import DomainCatalog, SubjectDef
from supervisor_svc.intent import UNKNOWN, Classification
from supervisor_svc.normalized_text import normalize

__all__ = ["MAX_SHOWN", "MIN_CONFIDENCE", "PROMPT_ID", "Classified", "IntentCandidate", "IntentCatalogue",
           "IntentClassifier", "ModelPort"]

PROMPT_ID = "intent.classify"
MAX_SHOWN = 3
"""At most this many candidate intents are shown to a model."""
MIN_CONFIDENCE = 0.6
"""A model's answer below this confidence is not accepted."""
MODEL_RULE = "MODEL"
"""The rule recorded for an intent a model found (``Execution.intent_rule``)."""
_WORD = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class IntentCandidate:
    """One intent a model may be asked about."""

    intent: str
    """The intent's kind, e.g. ``ANALYZE_PERMIT``."""
    description: str
    examples: tuple[str, ...]
    keywords: frozenset[str]
    subjects: Mapping[str, str]
    """Subject name → the pattern of its canonical id, as the model is to write it."""
    found: Mapping[str, SubjectDef]
    """Subject name → its domain's definition (how the supervisor finds and checks its ids)."""

    def parameters(self) -> dict[str, Any]:
        """How the model sees it (the prompt's parameters)."""
        return {"intent": self.intent, "description": self.description, "examples": list(self.examples),
                "subjects": dict(self.subjects)}

    def ids(self, name: str, text: str) -> list[str]:
        """The canonical ids of subject ``name`` that ``text`` names."""
        return self.found[name].find(normalize(text))


def _words(text: str) -> set[str]:
    return set(_WORD.findall(normalize(text)))


class IntentCatalogue:
    """The intents of the domain definitions that a model may be shown (those with a ``model`` block)."""

    def __init__(self, candidates: Sequence[IntentCandidate], *, max_shown: int = MAX_SHOWN,
                 min_confidence: float = MIN_CONFIDENCE) -> None:
        self.candidates = tuple(candidates)
        self.max_shown = max_shown
        self.min_confidence = min_confidence

    @classmethod
    def of(cls, catalog: DomainCatalog, *, max_shown: int = MAX_SHOWN,
           min_confidence: float = MIN_CONFIDENCE) -> IntentCatalogue:
        """The candidates of every domain's intents that have model hints, in the catalogue's order."""
        candidates = []
        for domain in catalog.domains:
            for intent in domain.intents.values():
                hints = intent.model
                if hints is None:
                    continue
                keywords = frozenset(w for k in hints.keywords for w in _words(k))
                candidates.append(IntentCandidate(
                    intent.kind, hints.description, hints.examples, keywords, dict(hints.subjects),
                    {name: domain.subjects[name] for name in intent.subjects}))
        return cls(candidates, max_shown=max_shown, min_confidence=min_confidence)

    def relevant(self, text: str) -> list[IntentCandidate]:
        """The candidates worth showing for ``text``: each subject is named in it once; best overlap first."""
        words = _words(text)
        scored = []
        for order, c in enumerate(self.candidates):
            if not all(len(c.ids(name, text)) == 1 for name in c.subjects):
                continue  # a subject not named, or several of it: no one intent of this kind is asked for
            vocabulary = c.keywords | _words(" ".join([c.description, *c.examples]))
            scored.append((-len(words & vocabulary), order, c))
        return [c for _, _, c in sorted(scored, key=lambda t: (t[0], t[1]))[: self.max_shown]]


class ModelPort(Protocol):
    """``ModelService.Complete``, raising a MeshError when the call fails or is refused."""

    def complete(self, request: model_pb2.CompleteRequest) -> model_pb2.CompleteResponse: ...


@dataclass(frozen=True)
class Classified:
    """What the classification gave: the reading (None when the answer was not accepted) and its record."""

    classification: Classification | None
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

    def classify(self, text: str, *, grant: common_pb2.SignedTaskGrant, principal: common_pb2.AgentPrincipal,
                 trace: common_pb2.TraceContext) -> Classified | None:
        """The model's reading of ``text`` (see the module docstring); None when no intent is relevant.

        Raises the model service's MeshError when the call fails.
        """
        shown = self.catalogue.relevant(text)
        if not shown:
            return None
        params = struct_pb2.Struct()
        params.update({"candidates": [c.parameters() for c in shown]})
        response = self._port.complete(model_pb2.CompleteRequest(
            grant=grant, principal=principal, prompt_id=PROMPT_ID, parameters=params,
            data=[model_pb2.ModelData(name="request_text", text=text, source="user")], trace=trace))
        answer: dict[str, Any] = struct_dict(response.answer)
        record = pb.IntentClassification(
            source="MODEL", candidates=[c.intent for c in shown], model_id=response.model_id,
            model_version=response.model_version, model_call_id=response.call_id)
        confidence = answer.get("confidence")
        if isinstance(confidence, int | float):
            record.confidence = float(confidence)
        why, subjects = self._check(answer, shown, text)
        if why:
            record.intent = f"{UNKNOWN}:{why}"
            return Classified(None, record, response.usage, why)
        record.intent = str(answer["intent"])
        record.subjects.update(subjects)
        return Classified(Classification(record.intent, subjects, MODEL_RULE), record, response.usage)

    def _check(self, answer: Mapping[str, Any], shown: Sequence[IntentCandidate],
               text: str) -> tuple[str, dict[str, str]]:
        """Why the answer is not accepted (or ''), and its subjects' canonical ids."""
        intent = answer.get("intent")
        if intent == "NONE":
            return "MODEL_FOUND_NO_INTENT", {}
        chosen = next((c for c in shown if c.intent == intent), None)
        if chosen is None:
            return "INTENT_NOT_SHOWN", {}
        subjects = answer.get("subjects")
        if not isinstance(subjects, Mapping):
            return "SUBJECTS_INVALID", {}
        accepted: dict[str, str] = {}
        for name, value in subjects.items():
            if name not in chosen.subjects:
                return "SUBJECT_NOT_DECLARED", {}
            # The model's id, written the domain's way, must be one the supervisor finds in the request itself.
            ids = chosen.ids(name, value) if isinstance(value, str) else []
            if len(ids) != 1 or ids[0] not in chosen.ids(name, text):
                return "SUBJECT_NOT_IN_REQUEST", {}
            accepted[str(name)] = ids[0]
        if any(name not in accepted for name in chosen.subjects):
            return "SUBJECT_MISSING", {}
        confidence = answer.get("confidence")
        if not isinstance(confidence, int | float) or confidence < self.catalogue.min_confidence:
            return "CONFIDENCE_TOO_LOW", {}
        return "", accepted
