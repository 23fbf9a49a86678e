"""Deterministic intent parsing of Portuguese and English requests (PRD §49), from domain definitions.

Deterministic first: a request is matched against the rules of the domain
definitions (:mod:`supervisor_svc.definitions`) on its normalised text (lower
case, accents removed, spaces collapsed). No model is involved, so the same
text always yields the same :class:`Intent`, and the matched rule is recorded
with it. Nothing here knows a domain: the patterns, the subjects a request
names (``WP-10231``, ``W-1003``), the intents and their sentences are data.

How a request is read:

1. Domains are tried in priority order; within one, its rules in order. The
   first rule whose ``when`` holds decides the intent; if two domains of the
   same priority both have a rule that holds, the request is ambiguous and
   nothing is guessed (``AMBIGUOUS_REQUEST``).
2. The intent's subjects are taken from the text (or, for a follow-up, from
   the conversation's ``context_subjects``). Several values of one subject
   (two permits) make the request ``UNKNOWN`` (``MULTIPLE_<SUBJECT>S``); a
   missing one leaves the intent not actionable, with a message saying which
   one to name.
3. A rule with ``asks_action`` records that the action (e.g. the release) was
   asked for; it is never performed by the analysis itself.

No rule: ``UNKNOWN`` (``NO_RULE``) with a message listing what the domains
understand — unless a :class:`Classifier` (e.g. a model behind the model
gateway) names one of the catalogue's intents and subjects, which are then
checked against the definitions exactly as a rule's would be (``rule`` is the
classifier's name, so the record says it was not a rule).

A tenant named in the text ("... do tenant globex", "for tenant globex") is
extracted into ``mentioned_tenants`` only so the caller can refuse a mismatch
with the user assertion (:func:`check_tenant`); the text never selects a tenant.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from supervisor_svc.definitions import DomainCatalog, DomainDefinition, IntentDef, default_catalog
from supervisor_svc.errors import RequestInvalid, TenantMismatch
from supervisor_svc.normalized_text import normalize

__all__ = [
    "MAX_REQUEST_CHARS",
    "UNKNOWN",
    "Classification",
    "Classifier",
    "Intent",
    "check_tenant",
    "normalize",
    "parse_intent",
]

MAX_REQUEST_CHARS = 2000
"""Longer requests are refused: they are not the short commands this parser understands."""
UNKNOWN = "UNKNOWN"
"""The kind of a request no domain understands."""


@dataclass(frozen=True)
class Intent:
    """The parsed request."""

    kind: str
    """The intent's kind (``ANALYZE_PERMIT``, ``ASSIGN_WORKER``, ...), or :data:`UNKNOWN`."""
    subjects: Mapping[str, str]
    """Canonical subject values by name (``{"permit": "WP-10231"}``), from the text or the conversation."""
    action_requested: bool
    """The user asked for the intent's action (e.g. the release); never acted on by the analysis."""
    language: str
    """``pt``, ``en`` or ``unknown`` — the language of the request, for the answer."""
    mentioned_tenants: tuple[str, ...]
    """Tenant ids named in the text, lower-cased, in order of appearance."""
    rule: str
    """Name of the deterministic rule that matched (recorded with the execution)."""
    message: str
    """A plain explanation: what will be done, or why nothing can be."""
    domain: DomainDefinition | None = field(default=None, compare=False, repr=False)
    """The definition of the intent's domain (None when UNKNOWN)."""
    definition: IntentDef | None = field(default=None, compare=False, repr=False)
    """The intent's definition (None when UNKNOWN)."""

    @property
    def actionable(self) -> bool:
        """Whether a plan can be built: a known intent with every subject it needs."""
        return self.definition is not None and all(s in self.subjects for s in self.definition.subjects)

    @property
    def domain_id(self) -> str:
        """The domain's id, or ``""``."""
        return self.domain.domain if self.domain is not None else ""

    @property
    def action(self) -> str | None:
        """The key of the intent's action, if it has one."""
        return self.definition.action if self.definition is not None else None


@dataclass(frozen=True)
class Classification:
    """What a classifier says a request is: one of the catalogue's kinds, with subject values."""

    kind: str
    subjects: Mapping[str, str]
    name: str
    """Who classified it (recorded as the intent's rule, e.g. ``MODEL:gateway``)."""
    action_requested: bool = False


class Classifier(Protocol):
    """Names the intent of a request no rule understood (see the module docstring)."""

    def classify(self, text: str, catalog: DomainCatalog) -> Classification | None:
        """A classification, or None when it cannot tell."""
        ...


# Common words of each language; domains add their own (``language`` in a definition).
_BASE_WORDS = {
    "pt": ("da", "do", "qual", "diga", "se", "ela", "estiver", "tudo", "correto", "pode", "ser", "esta", "e", "o",
           "os", "as", "uma?", "para", "nao", "por", "favor"),
    "en": ("of", "the", "what", "is", "it", "can", "be", "tell", "if", "and", "everything", "fine", "please", "for",
           "whether", "ready", "whats"),
}
# "tenant globex", "tenant: globex", "tenant=globex"; also "globex tenant" (en).
_TENANT_AFTER_RE = re.compile(r"\btenant\s*[:=]?\s*([a-z][a-z0-9-]{0,62})\b")
_TENANT_BEFORE_RE = re.compile(r"\b([a-z][a-z0-9-]{0,62})\s+tenant\b")
_NOT_TENANT_WORDS = frozenset(
    {"the", "a", "an", "this", "that", "my", "our", "your", "other", "another", "same", "is", "was",
     "and", "or", "id", "of", "for", "in", "on", "o", "um", "uma", "este", "esse", "meu", "nosso", "outro",
     "mesmo", "de", "do", "da", "no", "na", "e", "ou", "para"}
)

_GENERIC = {
    "en": {"no_rule": "I did not understand the request. {help}",
           "ambiguous": "The request could mean several things ({what}); say which one."},
    "pt": {"no_rule": "Não entendi o pedido. {help}",
           "ambiguous": "O pedido pode significar mais de uma coisa ({what}); diga qual."},
}


@dataclass(frozen=True)
class _Vocabulary:
    languages: Mapping[str, re.Pattern[str]]
    not_tenants: frozenset[str]


@functools.lru_cache(maxsize=32)
def _vocabulary(catalog: DomainCatalog) -> _Vocabulary:
    words: dict[str, list[str]] = {lang: list(base) for lang, base in _BASE_WORDS.items()}
    not_tenants = set(_NOT_TENANT_WORDS)
    for d in catalog.domains:
        for lang, extra in d.language.items():
            words[lang].extend(w for w in extra if w not in words[lang])
        not_tenants.update(d.vocabulary)
    return _Vocabulary({lang: re.compile(r"\b(" + "|".join(ws) + r")\b") for lang, ws in words.items()},
                       frozenset(not_tenants))


def _language(text: str, vocabulary: _Vocabulary) -> str:
    pt, en = (len(vocabulary.languages[lang].findall(text)) for lang in ("pt", "en"))
    if pt == en:
        return "unknown" if pt == 0 else "en"
    return "pt" if pt > en else "en"


def _tenants(text: str, vocabulary: _Vocabulary) -> tuple[str, ...]:
    found: list[tuple[int, str]] = []
    for m in _TENANT_AFTER_RE.finditer(text):
        if m.group(1) not in vocabulary.not_tenants:
            found.append((m.start(1), m.group(1)))
    for m in _TENANT_BEFORE_RE.finditer(text):
        if m.group(1) not in vocabulary.not_tenants and m.group(1) != "tenant":
            found.append((m.start(1), m.group(1)))
    seen: list[str] = []
    for _, name in sorted(found):
        if name not in seen:
            seen.append(name)
    return tuple(seen)


def _help(catalog: DomainCatalog, language: str) -> str:
    lang = language if language in ("en", "pt") else "en"
    return " ".join(d.help.render(lang, {}) for d in catalog.domains)


def _unknown(language: str, tenants: tuple[str, ...], rule: str, message: str) -> Intent:
    return Intent(UNKNOWN, {}, False, language, tenants, rule, message)


def _generic(language: str, key: str, **values: str) -> str:
    return _GENERIC.get(language, _GENERIC["en"])[key].format(**values)


def _match(catalog: DomainCatalog, norm: str) -> list[tuple[DomainDefinition, str, str, bool]]:
    """The first rule that holds in each domain of the highest priority that has one: (domain, intent, rule, asks)."""
    found: list[tuple[DomainDefinition, str, str, bool]] = []
    priority: int | None = None
    for d in catalog.domains:
        if priority is not None and d.priority < priority:
            break
        present = {name for name, s in d.subjects.items() if s.find(norm)}
        hits: dict[str, bool] = {}

        def truth(name: str, d: DomainDefinition = d, present: set[str] = present,
                  hits: dict[str, bool] = hits) -> bool:
            if name in present:
                return True
            if name not in hits:
                pattern = d.patterns.get(name)
                hits[name] = pattern is not None and pattern.search(norm) is not None
            return hits[name]

        for rule in d.rules:
            if rule.when.evaluate(truth):
                found.append((d, rule.intent, rule.rule_id, rule.asks_action))
                priority = d.priority
                break
    return found


def _resolve(d: DomainDefinition, key: str, rule: str, asks_action: bool, norm: str, language: str,
             tenants: tuple[str, ...], context_subjects: Mapping[str, str]) -> Intent:
    intent = d.intents[key]
    lang = language if language in ("en", "pt") else "en"
    values: dict[str, str] = {}
    missing: list[str] = []
    for name in intent.subjects:
        subject = d.subjects[name]
        named = subject.find(norm)
        if len(named) > 1:
            return _unknown(language, tenants, f"MULTIPLE_{name.upper()}S",
                            subject.several.render(lang, {"values": ", ".join(named)}))
        if named:
            values[name] = named[0]
        elif name in context_subjects and subject.accepts(context_subjects[name]):
            values[name] = context_subjects[name]
        else:
            missing.append(name)
    if missing:
        message = " ".join(d.subjects[name].missing.render(lang, {}) for name in missing)
    elif asks_action and intent.action_message is not None:
        message = intent.action_message.render(lang, values)
    else:
        message = intent.message.render(lang, values)
    return Intent(intent.kind, values, asks_action and intent.action is not None, language, tenants, rule, message,
                  d, intent)


def parse_intent(
    text: str,
    *,
    catalog: DomainCatalog | None = None,
    context_subjects: Mapping[str, str] | None = None,
    classifier: Classifier | None = None,
) -> Intent:
    """Parse a request deterministically.

    Args:
        text: The user's request in Portuguese or English.
        catalog: The domains served (the shipped definitions by default).
        context_subjects: Subjects the conversation is about, used only for a subject the text does
            not name (a follow-up such as "Se estiver tudo correto, libere").
        classifier: Asked only when no rule holds (see the module docstring).

    Raises:
        RequestInvalid: ``REQUEST_TEXT_EMPTY`` or ``REQUEST_TEXT_TOO_LONG`` (field ``request_text``).
    """
    if not text or not text.strip():
        raise RequestInvalid("the request text is empty", reason="REQUEST_TEXT_EMPTY", field="request_text")
    if len(text) > MAX_REQUEST_CHARS:
        raise RequestInvalid(
            f"the request text is longer than {MAX_REQUEST_CHARS} characters",
            reason="REQUEST_TEXT_TOO_LONG",
            field="request_text",
        )
    catalog = catalog or default_catalog()
    vocabulary = _vocabulary(catalog)
    norm = normalize(text)
    tenants = _tenants(norm, vocabulary)
    language = _language(norm, vocabulary)
    lang = language if language in ("en", "pt") else "en"
    context = dict(context_subjects or {})

    matches = _match(catalog, norm)
    if len(matches) > 1:
        what = ", ".join(f"{d.domain}: {d.intents[key].kind}" for d, key, _, _ in matches)
        return _unknown(language, tenants, "AMBIGUOUS_REQUEST", _generic(lang, "ambiguous", what=what))
    if matches:
        d, key, rule, asks = matches[0]
        return _resolve(d, key, rule, asks, norm, language, tenants, context)
    if classifier is not None:
        found = classifier.classify(text, catalog)
        known = catalog.intent(found.kind) if found is not None else None
        if found is not None and known is not None:
            d, intent = known
            # A classifier's subject values are held to the definitions like the text's.
            accepted = {k: v for k, v in found.subjects.items()
                        if k in intent.subjects and d.subjects[k].accepts(v)}
            return _resolve(d, intent.key, found.name, found.action_requested, norm, language, tenants,
                            {**context, **accepted})
    return _unknown(language, tenants, "NO_RULE", _generic(lang, "no_rule", help=_help(catalog, language)))


def check_tenant(intent: Intent, tenant_id: str) -> None:
    """Refuse a request whose text names a tenant other than the assertion's.

    Raises:
        TenantMismatch: field ``request_text``; the message names only the caller's own tenant.
    """
    others = [t for t in intent.mentioned_tenants if t != tenant_id.casefold()]
    if others:
        # Do not echo the other tenant's name back: whether it exists is not the caller's business.
        raise TenantMismatch(
            f"the request names a tenant other than {tenant_id!r}; requests act only in the "
            "tenant of the user assertion",
            field="request_text",
        )
