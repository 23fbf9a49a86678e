"""Statements in the language the user asked in, from data (gettext-style).

A specialist writes every statement's text as an English template with named
values: ``say("Permit {permit_id} was not found", permit_id=...)``. The
template is the message id; ``phrases/<language>.yaml`` maps it to the same
sentence in that language, with the same ``{names}``. The task says which
language (``AgentTask.locale``, set by the supervisor from the request); the
agent runs its rules inside :func:`speaking`, so every ``say`` in them — also
on the threads :func:`specialist_svc.rules.parallel` starts — answers in it.
A template a catalog lacks stays English, and is remembered
(:func:`untranslated`) so tests can keep the catalogs complete. Codes,
subjects, evidence and verdicts never depend on the language.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import string
from collections.abc import Iterator, Mapping
from pathlib import Path

import yaml

__all__ = ["DEFAULT", "catalog", "language_of", "placeholders", "say", "speaking", "untranslated"]

DEFAULT = "en"
"""The language templates are written in."""

_DIR = Path(__file__).parent / "phrases"
_current: contextvars.ContextVar[str] = contextvars.ContextVar("agentmesh_locale", default=DEFAULT)
_missing: set[tuple[str, str]] = set()


def language_of(locale: str) -> str:
    """The catalog a BCP 47 tag reads from: ``pt-BR`` → ``pt``; an unknown or empty tag → English."""
    language = (locale or DEFAULT).replace("_", "-").split("-", 1)[0].lower()
    return language if language == DEFAULT or (_DIR / f"{language}.yaml").is_file() else DEFAULT


@functools.cache
def catalog(language: str) -> Mapping[str, str]:
    """English template → the template in ``language`` (empty for English)."""
    if language == DEFAULT:
        return {}
    data = yaml.safe_load((_DIR / f"{language}.yaml").read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise ValueError(f"{_DIR / language}.yaml: expected a mapping of English template to translation")
    return dict(data)


@contextlib.contextmanager
def speaking(locale: str) -> Iterator[str]:
    """Within the block, :func:`say` answers in ``locale``'s language; yields that language."""
    language = language_of(locale)
    token = _current.set(language)
    try:
        yield language
    finally:
        _current.reset(token)


def say(template: str, **values: object) -> str:
    """``template`` in the current language, with ``values`` filled in (each as given: already a text)."""
    language = _current.get()
    text = template
    if language != DEFAULT:
        translated = catalog(language).get(template)
        if translated is None:
            _missing.add((language, template))
        else:
            text = translated
    return text.format(**values) if values else text.replace("{{", "{").replace("}}", "}")


def placeholders(template: str) -> set[str]:
    """The ``{names}`` a template uses."""
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def untranslated() -> set[tuple[str, str]]:
    """(language, template) pairs :func:`say` was asked for and no catalog had, since the process started."""
    return set(_missing)
