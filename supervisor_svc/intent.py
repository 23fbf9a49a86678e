"""Deterministic intent parsing of Portuguese and English requests (PRD §49).

Deterministic first: a request is matched against fixed keyword rules on its
normalised text (lower case, accents removed, spaces collapsed). No model is
involved, so the same text always yields the same :class:`Intent` and the
matched rule is recorded with it.

Kinds:

- ``ANALYZE_PERMIT`` — "Analise a permissão WP-10231 e me diga se ela pode ser
  liberada", "Analyze permit WP-10231 and tell me if it can be released":
  the whole team analysis. A request that also asks for the release ("... e
  libere se estiver tudo correto", "release it if everything is fine") sets
  ``release_requested``; the release itself belongs to phase two (§73) and is
  never performed by the analysis.
- ``PERMIT_STATUS`` — "status of WP-10231", "qual o status da WP-10231": a
  simple question, answered by one task, not the whole team.
- ``UNKNOWN`` — anything else, or an ambiguous request (several permits);
  ``message`` says so plainly. Nothing is guessed.

A tenant named in the text ("... do tenant globex", "for tenant globex") is
extracted into ``mentioned_tenants`` only so the caller can refuse a mismatch
with the user assertion (:func:`check_tenant`); the text never selects a tenant.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from enum import StrEnum

from supervisor_svc.errors import RequestInvalid, TenantMismatch

__all__ = [
    "MAX_REQUEST_CHARS",
    "Intent",
    "IntentKind",
    "check_tenant",
    "classified_intent",
    "normalize",
    "parse_intent",
]

MAX_REQUEST_CHARS = 2000
"""Longer requests are refused: they are not the short commands this parser understands."""


class IntentKind(StrEnum):
    """What the user asks for."""

    ANALYZE_PERMIT = "ANALYZE_PERMIT"
    PERMIT_STATUS = "PERMIT_STATUS"
    UNKNOWN = "UNKNOWN"


@dataclass(frozen=True)
class Intent:
    """The parsed request."""

    kind: IntentKind
    """What is asked for."""
    permit_id: str | None
    """Canonical permit id (``WP-10231``), from the text or the conversation; None if absent."""
    release_requested: bool
    """The user asked for the release itself (phase two); never acted on by the analysis."""
    language: str
    """``pt``, ``en`` or ``unknown`` — the language of the matched rule, for the answer."""
    mentioned_tenants: tuple[str, ...]
    """Tenant ids named in the text, lower-cased, in order of appearance."""
    rule: str
    """Name of the deterministic rule that matched (recorded with the execution)."""
    message: str
    """A plain explanation: what will be done, or why nothing can be."""

    @property
    def actionable(self) -> bool:
        """Whether a plan can be built: a known kind and a permit id."""
        return self.kind is not IntentKind.UNKNOWN and self.permit_id is not None


# Permit ids are written "WP-10231", "wp 10231" or "WP10231"; canonical "WP-<digits>".
_PERMIT_RE = re.compile(r"\bwp[-\s]?(\d{1,12})\b")
# "tenant globex", "tenant: globex", "tenant=globex"; also "globex tenant" (en).
_TENANT_AFTER_RE = re.compile(r"\btenant\s*[:=]?\s*([a-z][a-z0-9-]{0,62})\b")
_TENANT_BEFORE_RE = re.compile(r"\b([a-z][a-z0-9-]{0,62})\s+tenant\b")
_NOT_TENANT_WORDS = frozenset(
    {"the", "a", "an", "this", "that", "my", "our", "your", "other", "another", "same", "is", "was",
     "and", "or", "id", "of", "for", "in", "on", "o", "um", "uma", "este", "esse", "meu", "nosso", "outro",
     "mesmo", "de", "do", "da", "no", "na", "e", "ou", "para", "permit", "permits", "permissao", "permissoes", "wp",
     "status", "situacao"}
)

# Asking *for* the release (imperative), as opposed to asking *whether* it can be released.
_RELEASE_REQUEST = (
    ("pt", re.compile(r"\b(libere|liberem|libera-a|libere-a|pode liberar|faca a liberacao|efetue a liberacao"
                      r"|realize a liberacao|prossiga com a liberacao)\b")),
    ("en", re.compile(r"\b(release (it|the permit|this permit|wp[-\s]?\d+)|go ahead and release"
                      r"|proceed with (the )?release)\b")),
)
# "should I release it?" asks whether, not for; "do not release" forbids it.
_RELEASE_NOT_REQUESTED = re.compile(
    r"\b((should|can|could|may|shall) (i|we) release|(do not|don't|dont|never) release|nao (libere|liberar))\b"
)

# Asking whether the permit can be released, or for an analysis of it.
_ANALYSIS = (
    ("pt", re.compile(r"\b(analise|analisar|analisa|analize|avalie|avaliar|verifique|verificar|revise|revisar"
                      r"|confira|conferir|checar|cheque|pode ser liberad[ao]|podem ser liberad[ao]s?"
                      r"|esta apt[ao]|liberacao)\b")),
    ("en", re.compile(r"\b(analy[sz]e|analysis|assess|evaluate|review|check|verify|inspect"
                      r"|be released|releasable|ready (for|to be) released?|(should|can|could|may|shall) (i|we) release"
                      r"|clear(ed)? for release)\b")),
)
# A question about the permit's state only.
_STATUS = (
    ("pt", re.compile(r"\b(status|situacao|estado)\b")),
    ("en", re.compile(r"\b(status|state)\b")),
)
# Words that turn a status question into a release question.
_RELEASE_WORDS = re.compile(r"\b(releas\w*|libera\w*|liber[ae]\w*|apt[ao])\b")
# Language of the answer: words that occur in one language only.
_PT_WORDS = re.compile(
    r"\b(permissao|permissoes|da|do|qual|diga|se|ela|estiver|tudo|correto|libere|pode|ser|liberada|liberado"
    r"|analise|situacao|estado|esta|e|o|os|as|uma?|para|nao|por|favor)\b"
)
_EN_WORDS = re.compile(
    r"\b(permit|of|the|what|is|it|can|be|tell|if|and|released?|everything|fine|analy[sz]e|please|for|whether"
    r"|state|ready|check|whats)\b"
)
_DASHES = str.maketrans({c: "-" for c in "\u2010\u2011\u2012\u2013\u2014\u2212"})


def normalize(text: str) -> str:
    """Lower case, accents removed, whitespace collapsed (so "Permissão" == "permissao")."""
    decomposed = unicodedata.normalize("NFKD", text)
    stripped = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return " ".join(stripped.translate(_DASHES).casefold().split())


def _matches(rules: tuple[tuple[str, re.Pattern[str]], ...], text: str) -> bool:
    return any(pattern.search(text) for _, pattern in rules)


def _language(text: str) -> str:
    pt, en = len(_PT_WORDS.findall(text)), len(_EN_WORDS.findall(text))
    if pt == en:
        return "unknown" if pt == 0 else "en"
    return "pt" if pt > en else "en"


def _tenants(text: str) -> tuple[str, ...]:
    found: list[tuple[int, str]] = []
    for m in _TENANT_AFTER_RE.finditer(text):
        if m.group(1) not in _NOT_TENANT_WORDS:
            found.append((m.start(1), m.group(1)))
    for m in _TENANT_BEFORE_RE.finditer(text):
        if m.group(1) not in _NOT_TENANT_WORDS and m.group(1) != "tenant":
            found.append((m.start(1), m.group(1)))
    seen: list[str] = []
    for _, name in sorted(found):
        if name not in seen:
            seen.append(name)
    return tuple(seen)


# Answers in the user's language; English when the language is unknown.
_MESSAGES: dict[str, dict[str, str]] = {
    "en": {
        "help": "I can analyse whether a work permit can be released (e.g. \"Analyze permit WP-10231 and "
                "tell me if it can be released\") or report its status (e.g. \"status of WP-10231\").",
        "no_rule": "I did not understand the request. {help}",
        "multiple": "The request names several permits ({permits}); ask about one permit at a time.",
        "no_permit": "No work permit id (e.g. WP-10231) was named; say which permit.",
        "status": "Report the status of permit {permit}.",
        "analyze": "Analyse whether permit {permit} can be released.",
        "analyze_release": "Analyse whether permit {permit} can be released; the release itself was asked "
                           "for and needs a separate, confirmed step.",
    },
    "pt": {
        "help": "Posso analisar se uma permissão de trabalho pode ser liberada (ex.: \"Analise a permissão "
                "WP-10231 e me diga se ela pode ser liberada\") ou informar o status dela (ex.: \"qual o "
                "status da WP-10231\").",
        "no_rule": "Não entendi o pedido. {help}",
        "multiple": "O pedido cita várias permissões ({permits}); pergunte sobre uma permissão por vez.",
        "no_permit": "Nenhuma permissão (ex.: WP-10231) foi informada; diga qual permissão.",
        "status": "Informar o status da permissão {permit}.",
        "analyze": "Analisar se a permissão {permit} pode ser liberada.",
        "analyze_release": "Analisar se a permissão {permit} pode ser liberada; a liberação foi pedida e "
                           "exige uma etapa separada, com confirmação.",
    },
}


def _message(language: str, key: str, **values: str) -> str:
    table = _MESSAGES.get(language, _MESSAGES["en"])
    return table[key].format(help=table["help"], **values)


def _unknown(language: str, tenants: tuple[str, ...], rule: str, message: str) -> Intent:
    return Intent(IntentKind.UNKNOWN, None, False, language, tenants, rule, message)


def parse_intent(text: str, *, context_permit_id: str | None = None) -> Intent:
    """Parse a request deterministically.

    Args:
        text: The user's request in Portuguese or English.
        context_permit_id: The permit the conversation is about, used only when
            the text names none (a follow-up such as "Se estiver tudo correto, libere").

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
    norm = normalize(text)
    tenants = _tenants(norm)
    permits = list(dict.fromkeys(f"WP-{m.group(1)}" for m in _PERMIT_RE.finditer(norm)))

    release = _matches(_RELEASE_REQUEST, norm) and not _RELEASE_NOT_REQUESTED.search(norm)
    analysis = _matches(_ANALYSIS, norm)
    status = _matches(_STATUS, norm)
    language = _language(norm)

    if len(permits) > 1:
        return _unknown(
            language, tenants, "MULTIPLE_PERMITS",
            _message(language, "multiple", permits=", ".join(permits)),
        )
    permit_id = permits[0] if permits else context_permit_id

    if release or analysis:
        kind, rule = IntentKind.ANALYZE_PERMIT, "RELEASE_REQUEST" if release else "ANALYSIS"
        # A status question that mentions release ("is it ready for release?") is an analysis;
        # a pure "status of" question is answered by one task (§49: keep the simple simple).
        if not release and status and not _RELEASE_WORDS.search(norm):
            kind, rule = IntentKind.PERMIT_STATUS, "STATUS"
    elif status:
        kind, rule = IntentKind.PERMIT_STATUS, "STATUS"
    else:
        return _unknown(language, tenants, "NO_RULE", _message(language, "no_rule"))

    release_requested = release
    if permit_id is None:
        return Intent(
            kind, None, release_requested, language, tenants, rule, _message(language, "no_permit")
        )
    if kind is IntentKind.PERMIT_STATUS:
        message = _message(language, "status", permit=permit_id)
    elif release_requested:
        message = _message(language, "analyze_release", permit=permit_id)
    else:
        message = _message(language, "analyze", permit=permit_id)
    return Intent(kind, permit_id, release_requested, language, tenants, rule, message)


def classified_intent(kind: IntentKind, permit_id: str, *, language: str, tenants: tuple[str, ...],
                      rule: str) -> Intent:
    """The intent of a request the rules did not understand, as another classifier (a model) found it.

    It never asks for the release itself: a release is asked for in words the rules
    understand, or with ``AnalyzeRequest.request_release``.
    """
    key = "status" if kind is IntentKind.PERMIT_STATUS else "analyze"
    return Intent(kind, permit_id, False, language, tenants, rule, _message(language, key, permit=permit_id))


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
