"""The users the dev identity provider knows: a YAML file of tenants, users, names and roles."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from agentmesh import validation


class DirectoryError(ValueError):
    """The users file is malformed; the message names the file and the entry."""


@dataclass(frozen=True, slots=True)
class DevUser:
    """One person: tenant, user id (the assertion's ``sub``), display name and roles."""

    tenant_id: str
    user_id: str
    name: str
    roles: tuple[str, ...]

    @property
    def key(self) -> str:
        """``tenant/user``: how the sign-in form names them."""
        return f"{self.tenant_id}/{self.user_id}"


def _id(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value or validation.value_problem(where, value, "id") is not None:
        raise DirectoryError(f"{where}: {value!r} is not a valid id")
    return value


def load(path: Path | None = None) -> list[DevUser]:
    """The users of ``path``, or of the shipped ``dev_idp/users.yaml``."""
    if path is None:
        text, source = resources.files("dev_idp").joinpath("users.yaml").read_text(), "dev_idp/users.yaml"
    else:
        try:
            text, source = path.read_text(), str(path)
        except OSError as err:
            raise DirectoryError(f"{path}: cannot read the users file: {err.strerror}") from err
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise DirectoryError(f"{source}: not valid YAML: {err}") from err
    tenants = doc.get("tenants") if isinstance(doc, dict) else None
    if not isinstance(tenants, dict) or not tenants:
        raise DirectoryError(f"{source}: expected a mapping 'tenants' of tenant -> user -> {{name, roles}}")
    users = []
    for tenant, people in tenants.items():
        _id(tenant, f"{source}: tenants.{tenant}")
        if not isinstance(people, dict):
            raise DirectoryError(f"{source}: tenants.{tenant}: expected a mapping of users")
        for user, entry in people.items():
            where = f"{source}: tenants.{tenant}.{user}"
            _id(user, where)
            if not isinstance(entry, dict):
                raise DirectoryError(f"{where}: expected {{name, roles}}")
            roles = entry.get("roles")
            if not isinstance(roles, list) or not roles:
                raise DirectoryError(f"{where}.roles: expected a non-empty list")
            name = entry.get("name", user)
            if not isinstance(name, str) or not name.isprintable():
                raise DirectoryError(f"{where}.name: expected a line of text")
            users.append(DevUser(tenant, user, name, tuple(_id(r, f"{where}.roles") for r in roles)))
    return users
