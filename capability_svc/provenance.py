"""Where a record came from and how much it can be trusted (PRD §15, §37).

Every capability output carries a ``provenance`` object so the caller can turn
it into an ``EvidenceReference`` without guessing. Authority names are the
``AuthorityLevel`` enum values of ``common.proto`` without their prefix.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = ["Authority", "Provenance", "format_timestamp"]


class Authority(StrEnum):
    """Authority of a piece of evidence, highest first (mirrors ``AuthorityLevel``)."""

    GOVERNMENT_SOURCE = "GOVERNMENT_SOURCE"
    OFFICIAL_RECORD = "OFFICIAL_RECORD"
    VERIFIED_INTEGRATION = "VERIFIED_INTEGRATION"
    UNVERIFIED_DOCUMENT = "UNVERIFIED_DOCUMENT"
    MODEL_INFERENCE = "MODEL_INFERENCE"


def format_timestamp(moment: _dt.datetime) -> str:
    """RFC 3339 UTC with millisecond precision and a ``Z`` suffix.

    Raises:
        ValueError: for a naive datetime — a timestamp without a zone is ambiguous.
    """
    if moment.tzinfo is None:
        raise ValueError("timestamps must be timezone-aware")
    utc = moment.astimezone(_dt.UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


@dataclass(frozen=True)
class Provenance:
    """Origin of a capability's data.

    Attributes:
        source: System of record, e.g. ``permit-registry`` or ``lms``.
        authority: How far the source can be trusted.
        fetched_at: When the data was read (timezone-aware).
        reference: The record inside the source: a key such as ``acme/WP-10231``
            or, for external systems, the URL that was called.
    """

    source: str
    authority: Authority
    fetched_at: _dt.datetime
    reference: str

    def to_dict(self) -> dict[str, Any]:
        """The JSON form used in capability outputs (see the ``provenance`` schema)."""
        return {
            "source": self.source,
            "authority": self.authority.value,
            "fetched_at": format_timestamp(self.fetched_at),
            "reference": self.reference,
        }
