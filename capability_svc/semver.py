"""Semantic versions and the dependency ranges agents declare (PRD §59).

Supported range forms, with npm semantics:

- ``^1.2.3``  >=1.2.3 <2.0.0   (``^0.2.3`` → <0.3.0, ``^0.0.3`` → <0.0.4)
- ``~1.2.3``  >=1.2.3 <1.3.0   (``~1`` → <2.0.0)
- ``>=1.2``, ``>1.2``, ``<=1.2``, ``<2``   a single comparison
- ``1.2.3`` or ``=1.2.3``  exactly that version
- ``1.2`` / ``1``  any patch / minor of that release line (x-range)
- ``*``  any version

Missing minor/patch parts count as 0. A pre-release version (``2.0.0-rc.1``)
satisfies only an exact range naming it: an agent asking for ``^2.0`` must
never be bound to a release candidate by accident.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import total_ordering

__all__ = ["Version", "VersionRange", "parse_dependency"]

_VERSION_RE = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*))*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$"
)
_PARTIAL_RE = re.compile(r"^(0|[1-9]\d*)(?:\.(0|[1-9]\d*))?(?:\.(0|[1-9]\d*))?$")
_RANGE_RE = re.compile(r"^(\^|~|>=|<=|>|<|=)?\s*(.+)$")
_DEPENDENCY_RE = re.compile(r"^([A-Za-z][A-Za-z0-9_.\-]*)@(.+)$")


@total_ordering
@dataclass(frozen=True)
class Version:
    """A semantic version (semver.org 2.0). Build metadata is kept but ignored in ordering."""

    major: int
    minor: int
    patch: int
    prerelease: tuple[str, ...] = ()
    build: str = ""

    @classmethod
    def parse(cls, text: str) -> Version:
        """Parse ``MAJOR.MINOR.PATCH[-PRERELEASE][+BUILD]``.

        Raises:
            ValueError: if ``text`` is not a full semantic version.
        """
        match = _VERSION_RE.match(text.strip())
        if match is None:
            raise ValueError(f"{text!r} is not a semantic version (MAJOR.MINOR.PATCH)")
        pre = tuple(match.group(4).split(".")) if match.group(4) else ()
        return cls(
            int(match.group(1)), int(match.group(2)), int(match.group(3)), pre, match.group(5) or ""
        )

    def _key(self) -> tuple[int, int, int, int, tuple[tuple[int, int, str], ...]]:
        # A release sorts after all its pre-releases; numeric identifiers sort
        # before alphanumeric ones and compare numerically (semver §11).
        pre = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in self.prerelease)
        return (self.major, self.minor, self.patch, 0 if self.prerelease else 1, pre)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() < other._key()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(self.prerelease)
        if self.build:
            text += "+" + self.build
        return text


@dataclass(frozen=True)
class VersionRange:
    """A half-open interval of versions, ``lower`` (inclusive or not) to ``upper`` (exclusive).

    ``exact`` is set for ``=X.Y.Z`` ranges, the only ones a pre-release can satisfy.
    """

    text: str
    lower: Version | None
    lower_inclusive: bool
    upper: Version | None
    upper_inclusive: bool = False
    exact: Version | None = None

    @classmethod
    def parse(cls, text: str) -> VersionRange:
        """Parse a range expression (see module docstring).

        Raises:
            ValueError: with a message saying what is wrong.
        """
        raw = text.strip()
        if raw in ("*", "x", ""):
            if raw == "":
                raise ValueError("empty version range")
            return cls(raw, None, True, None)
        match = _RANGE_RE.match(raw)
        if match is None:  # pragma: no cover - the pattern accepts any non-empty text
            raise ValueError(f"{text!r} is not a version range")
        op, rest = match.group(1) or "", match.group(2).strip()
        full = _VERSION_RE.match(rest)
        if full is not None:
            version = Version.parse(rest)
            parts = 3
        else:
            partial = _PARTIAL_RE.match(rest)
            if partial is None:
                raise ValueError(
                    f"{text!r} is not a version range (expected e.g. ^2.0, ~1.4.2, >=1.0, 1.2.3)"
                )
            parts = sum(1 for g in partial.groups() if g is not None)
            version = Version(
                int(partial.group(1)), int(partial.group(2) or 0), int(partial.group(3) or 0)
            )
        major, minor, patch = version.major, version.minor, version.patch
        if op == "^":
            if major > 0 or parts == 1:
                upper = Version(major + 1, 0, 0)
            elif minor > 0 or parts == 2:
                upper = Version(0, minor + 1, 0)
            else:
                upper = Version(0, 0, patch + 1)
            return cls(raw, version, True, upper)
        if op == "~":
            upper = Version(major + 1, 0, 0) if parts == 1 else Version(major, minor + 1, 0)
            return cls(raw, version, True, upper)
        if op == ">=":
            return cls(raw, version, True, None)
        if op == ">":
            return cls(raw, version, False, None)
        if op == "<":
            return cls(raw, None, True, version)
        if op == "<=":
            return cls(raw, None, True, version, upper_inclusive=True)
        # "=" or no operator: exact for a full version, an x-range for a partial one.
        if parts == 3:
            return cls(raw, version, True, version, upper_inclusive=True, exact=version)
        upper = Version(major + 1, 0, 0) if parts == 1 else Version(major, minor + 1, 0)
        return cls(raw, version, True, upper)

    def contains(self, version: Version) -> bool:
        """Whether ``version`` satisfies this range."""
        if version.prerelease:
            return self.exact is not None and version == self.exact
        if self.lower is not None:
            if self.lower_inclusive and version < self.lower:
                return False
            if not self.lower_inclusive and version <= self.lower:
                return False
        if self.upper is not None:
            if self.upper_inclusive and version > self.upper:
                return False
            if not self.upper_inclusive and version >= self.upper:
                return False
        return True

    def __str__(self) -> str:
        return self.text


def parse_dependency(spec: str) -> tuple[str, VersionRange]:
    """Split ``"training.getStatus@^2.0"`` into ``("training.getStatus", range)``.

    Raises:
        ValueError: if the spec has no ``@range`` part or the range is invalid.
    """
    match = _DEPENDENCY_RE.match(spec.strip())
    if match is None:
        raise ValueError(f"{spec!r} is not a dependency (expected 'capability.id@<range>')")
    return match.group(1), VersionRange.parse(match.group(2))
