"""The caller table: which SPIFFE ids may call which RPC. Deny by default.

Loaded once at start-up from YAML (``agentmesh/access_policy.yaml`` unless the
config names another file) and checked by the server interceptor on every
call, before any servicer code runs.

The ``operators`` group is special: it is an explicit list of identities,
never a pattern, and when the table is loaded for a mesh it is exactly the
configured ``operators`` (whatever the file lists).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from agentmesh import spiffe

OPERATORS_GROUP = "operators"


class AccessTableError(ValueError):
    """The caller table file is malformed; the message names file and entry."""


@dataclass(frozen=True, slots=True)
class AccessRule:
    """Callers matching any of ``callers`` may invoke methods matching ``methods``."""

    methods: tuple[str, ...]
    callers: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class AccessTable:
    """An ordered list of allow rules; nothing else is allowed."""

    rules: tuple[AccessRule, ...]
    source: str

    def allows(self, method: str, caller: str) -> bool:
        """Whether ``caller`` (a SPIFFE id) may call ``method`` (``/pkg.Service/Rpc``)."""
        for rule in self.rules:
            if any(fnmatch.fnmatchcase(method, m) for m in rule.methods) and (
                spiffe.authorize_one_of(caller, rule.callers)
            ):
                return True
        return False

    @classmethod
    def load(cls, path: Path | None = None, *, operators: Sequence[str] | None = None) -> AccessTable:
        """Loads a table file, or the shipped default when ``path`` is None.

        ``operators`` (the config's list) replaces the file's ``operators`` group.
        """
        if path is None:
            text = resources.files("agentmesh").joinpath("access_policy.yaml").read_text()
            source = "agentmesh/access_policy.yaml"
        else:
            try:
                text = path.read_text()
            except OSError as err:
                raise AccessTableError(f"{path}: cannot read caller table: {err.strerror}") from err
            source = str(path)
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as err:
            raise AccessTableError(f"{source}: not valid YAML: {err}") from err
        return cls.parse(doc, source, operators=operators)

    @classmethod
    def parse(
        cls, doc: Any, source: str = "<memory>", *, operators: Sequence[str] | None = None
    ) -> AccessTable:
        """Builds a table from a parsed document, expanding named groups.

        ``operators``, when given, becomes the ``operators`` group. That group
        must list exact SPIFFE ids: a pattern (``*``) is refused.
        """
        if not isinstance(doc, dict) or not isinstance(doc.get("rules"), list):
            raise AccessTableError(f"{source}: expected a mapping with a 'rules' list")
        if not isinstance(doc.get("groups") or {}, dict):
            raise AccessTableError(f"{source}: 'groups' must be a mapping")
        groups = dict(doc.get("groups") or {})
        if operators is not None:
            groups[OPERATORS_GROUP] = list(operators)
        for name, members in groups.items():
            if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
                raise AccessTableError(f"{source}: groups.{name}: expected a list of SPIFFE ids")
        for member in groups.get(OPERATORS_GROUP, []):
            try:
                exact = str(spiffe.parse(member)) == member
            except spiffe.InvalidSpiffeId:
                exact = False
            if not exact:
                raise AccessTableError(f"{source}: groups.{OPERATORS_GROUP}: {member!r} is not one exact "
                                       f"SPIFFE id (operators are listed one by one, never by pattern)")
        rules = []
        for i, raw in enumerate(doc["rules"]):
            where = f"{source}: rules[{i}]"
            if not isinstance(raw, dict):
                raise AccessTableError(f"{where}: expected a mapping")
            methods, callers = raw.get("methods"), raw.get("callers")
            if not isinstance(methods, list) or not methods or not all(
                isinstance(m, str) and m.startswith("/") for m in methods
            ):
                raise AccessTableError(f"{where}.methods: expected a list of '/pkg.Service/Rpc'")
            if not isinstance(callers, list) or not callers:
                raise AccessTableError(f"{where}.callers: expected a non-empty list")
            expanded: list[str] = []
            for caller in callers:
                if caller in groups:
                    expanded.extend(groups[caller])
                elif isinstance(caller, str) and caller.startswith("spiffe://"):
                    expanded.append(caller)
                else:
                    raise AccessTableError(f"{where}.callers: unknown group or id {caller!r}")
            rules.append(AccessRule(tuple(methods), tuple(expanded)))
        return cls(tuple(rules), source)
