"""Request text as the supervisor's rules compare it: one form for every way of writing the same words."""

from __future__ import annotations

import unicodedata

_DASHES = str.maketrans({c: "-" for c in "\u2010\u2011\u2012\u2013\u2014\u2212"})


def normalize(text: str) -> str:
    """Lower case, accents removed, dashes made plain, whitespace collapsed (so "Permissão" == "permissao")."""
    decomposed = unicodedata.normalize("NFKD", text)
    stripped = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return " ".join(stripped.translate(_DASHES).casefold().split())
