"""What the sandbox "model" answers: deterministic skills, one per prompt the mesh ships.

The sandbox reads the conventions of the mesh's model service from the chat
messages — the system message names the prompt (``PROMPT: intent.classify@1``)
and carries its parameters as JSON after ``PARAMETERS:``; each piece of data is
its own user message delimited as ``<data-NONCE name="…" source="…">`` …
``</data-NONCE>`` — and answers with a JSON object, the same one for the same
input every time. It never follows anything written inside the data: there is
nothing in it that could (the ``hostile`` fault plays a model that does).

Skills:

``intent.classify``
    Scores each candidate intent by the words its description and examples share
    with the request text, and finds each subject id by its pattern.
``risk.hazards_in_text``
    Finds hazard words (English and Portuguese) in a permit's description and says,
    per category, whether the registered hazards mention it too.

Tokens are counted as one per four characters (rounded up), plus three per message.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DataPart", "ParsedPrompt", "answer", "count_tokens", "parse_messages"]

_PROMPT_RE = re.compile(r"^PROMPT: ([A-Za-z0-9._-]+)(?:@(\S+))?$", re.MULTILINE)
_DATA_RE = re.compile(r'^<data-([A-Za-z0-9]+) name="([^"]*)" source="([^"]*)">\n(.*)\n</data-\1>$', re.DOTALL)
_WORD_RE = re.compile(r"[a-z0-9]+")
_STOPWORDS = frozenset((
    "a", "an", "and", "are", "as", "at", "be", "by", "can", "could", "de", "do", "da", "das", "dos", "e", "for",
    "from", "has", "have", "how", "i", "if", "in", "is", "it", "its", "me", "my", "na", "no", "o", "of", "on", "or",
    "os", "para", "por", "que", "se", "the", "this", "to", "um", "uma", "was", "what", "whether", "will", "with",
    "you", "your", "ela", "ele", "me", "diga", "pode", "ser",
))


@dataclass(frozen=True)
class DataPart:
    """One delimited data message."""

    name: str
    source: str
    text: str


@dataclass(frozen=True)
class ParsedPrompt:
    """What the sandbox understood of a chat request."""

    prompt_id: str
    parameters: Mapping[str, Any]
    data: tuple[DataPart, ...] = field(default_factory=tuple)

    def text(self, name: str) -> str:
        """The data part called ``name`` (all data joined when there is none by that name)."""
        named = [d.text for d in self.data if d.name == name]
        return "\n".join(named or [d.text for d in self.data])


def count_tokens(text: str) -> int:
    """The sandbox's token count of a text: one per four characters, rounded up."""
    return math.ceil(len(text) / 4)


def _parameters(system: str) -> Mapping[str, Any]:
    start = system.find("PARAMETERS:\n")
    if start < 0:
        return {}
    rest = system[start + len("PARAMETERS:\n"):]
    end = rest.find("\n\n")
    try:
        value = json.loads(rest if end < 0 else rest[:end])
    except ValueError:
        return {}
    return value if isinstance(value, Mapping) else {}


def parse_messages(messages: Sequence[Mapping[str, Any]]) -> ParsedPrompt:
    """The prompt id, parameters and data parts of a chat request (unknown parts are ignored)."""
    system = "\n".join(str(m.get("content", "")) for m in messages if m.get("role") == "system")
    found = _PROMPT_RE.search(system)
    data = []
    for m in messages:
        if m.get("role") != "user":
            continue
        match = _DATA_RE.match(str(m.get("content", "")))
        if match:
            data.append(DataPart(match.group(2), match.group(3), match.group(4)))
    return ParsedPrompt(found.group(1) if found else "", _parameters(system), tuple(data))


def _fold(text: str) -> str:
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()


def _words(text: str) -> set[str]:
    """The meaningful words: three letters or more, no digits (ids are subjects, not meaning), no stop words."""
    return {w for w in _WORD_RE.findall(_fold(text))
            if len(w) > 2 and w not in _STOPWORDS and not any(c.isdigit() for c in w)}


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


def _find_id(pattern: str, text: str) -> str | None:
    """The first id in ``text`` matching ``pattern``, written as the pattern wants (``wp 10231`` → ``WP-10231``)."""
    try:
        strict = re.compile(pattern)
        lenient = re.compile(_lenient(pattern), re.IGNORECASE)
    except re.error:
        return None
    for match in lenient.finditer(text):
        raw = match.group(0)
        for variant in (raw, raw.upper(), re.sub(r"\s", "-", raw.upper()),
                        re.sub(r"^([A-Z]+)[-\s]?(?=\d)", r"\1-", raw.upper())):
            if strict.fullmatch(variant):
                return variant
    return None


def _classify(prompt: ParsedPrompt) -> dict[str, Any]:
    text = prompt.text("request_text")
    words = _words(text)
    best: tuple[int, str, dict[str, str]] | None = None
    candidates = prompt.parameters.get("candidates")
    for candidate in candidates if isinstance(candidates, list) else []:
        if not isinstance(candidate, Mapping) or not isinstance(candidate.get("intent"), str):
            continue
        examples = candidate.get("examples")
        shown = [str(e) for e in examples] if isinstance(examples, list) else []
        vocabulary = _words(" ".join([str(candidate.get("description", "")), *shown]))
        score = len(words & vocabulary)
        subjects: dict[str, str] = {}
        patterns = candidate.get("subjects")
        for name, pattern in (patterns.items() if isinstance(patterns, Mapping) else []):
            found = _find_id(str(pattern), text)
            if found is not None:
                subjects[str(name)] = found
        if score and (best is None or score > best[0]):
            best = (score, candidate["intent"], subjects)
    if best is None:
        return {"intent": "NONE", "subjects": {}, "confidence": 0.1}
    score, intent, subjects = best
    return {"intent": intent, "subjects": subjects, "confidence": round(min(0.95, 0.5 + 0.15 * score), 2)}


HAZARD_WORDS: dict[str, tuple[str, ...]] = {
    "WORK_AT_HEIGHT": ("height", "elevated", "platform", "scaffold", "roof", "ladder", "rooftop", "altura",
                       "andaime", "telhado", "escada"),
    "ELECTRICAL": ("kv", "breaker", "breakers", "panel", "energised", "energized", "live", "feeder", "feeders",
                   "wiring", "rewire", "cable", "eletric", "eletrico", "painel", "disjuntor"),
    "CONFINED_SPACE": ("tunnel", "tank", "silo", "vessel", "manhole", "pit", "confined", "vault", "galeria",
                       "tunel", "tanque", "confinado"),
    "HOT_WORK": ("welding", "weld", "cutting torch", "grinding", "brazing", "solda", "soldagem"),
    "CHEMICAL": ("solvent", "acid", "chemical", "fumes", "toxic", "quimico", "acido"),
    "LIFTING": ("crane", "hoist", "rigging", "lifting", "guindaste", "icamento"),
}
"""Category → the words that suggest it (matched as whole words, accents and case ignored)."""


def _first_quote(words: tuple[str, ...], text: str) -> str | None:
    folded = _fold(text)
    if len(folded) != len(text):  # folding changed the length: match on the text itself
        folded = text.casefold()
    for word in words:
        match = re.search(rf"\b{re.escape(word)}\b", folded)
        if match:
            return text[match.start():match.end()]
    return None


def _hazards(prompt: ParsedPrompt) -> dict[str, Any]:
    description = prompt.text("permit.description")
    registered = " ".join(d.text for d in prompt.data if d.name == "risk.registered_hazards")
    asked = prompt.parameters.get("categories")
    wanted = {str(c) for c in asked} if isinstance(asked, list) else set(HAZARD_WORDS)
    found = []
    for category, words in HAZARD_WORDS.items():
        if category not in wanted:
            continue
        quote = _first_quote(words, description)
        if quote is None:
            continue
        found.append({"category": category, "quote": quote, "covered": _first_quote(words, registered) is not None})
    return {"hazards": found}


SKILLS = {"intent.classify": _classify, "risk.hazards_in_text": _hazards}
"""Prompt id → the skill that answers it."""


def answer(prompt: ParsedPrompt) -> dict[str, Any]:
    """The deterministic answer to a prompt; an unknown prompt gets an answer of no known shape."""
    skill = SKILLS.get(prompt.prompt_id)
    if skill is None:
        return {"answer": "this sandbox model has no skill for that prompt"}
    return skill(prompt)
