"""Operators are an explicit list of identities (config ``operators``), never a name pattern."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentmesh import config, spiffe
from agentmesh.access import AccessTable, AccessTableError

OPERATOR = spiffe.client("operator")
SET_KILL_SWITCH = "/agentmesh.v1.PolicyService/SetKillSwitch"
QUERY_RECORDS = "/agentmesh.v1.AuditService/QueryRecords"


def test_shipped_operators_are_exact() -> None:
    table = AccessTable.load(operators=config.DEFAULT_OPERATORS)
    assert table.allows(SET_KILL_SWITCH, str(OPERATOR))
    for evil in ("operator-evil", "operator-", "operators", "operator2"):
        assert not table.allows(SET_KILL_SWITCH, str(spiffe.client(evil))), evil
        assert not table.allows(QUERY_RECORDS, str(spiffe.client(evil))), evil
    # The file's own group (no config given) is the same single identity.
    assert AccessTable.load().allows(SET_KILL_SWITCH, str(OPERATOR))
    assert not AccessTable.load().allows(SET_KILL_SWITCH, str(spiffe.client("operator-evil")))


def test_configured_operators_replace_the_group() -> None:
    alice = "spiffe://agentmesh.local/client/ops-alice"
    table = AccessTable.load(operators=[alice])
    assert table.allows(SET_KILL_SWITCH, alice) and table.allows(QUERY_RECORDS, alice)
    assert not table.allows(SET_KILL_SWITCH, str(OPERATOR))


@pytest.mark.parametrize("member", [
    "spiffe://agentmesh.local/client/operator-*",
    "spiffe://agentmesh.local/client/*",
    "spiffe://agentmesh.local/*/*",
    "operator",
])
def test_a_pattern_in_the_operators_group_is_refused(member: str) -> None:
    doc = {"groups": {"operators": [member]}, "rules": [{"methods": [SET_KILL_SWITCH], "callers": ["operators"]}]}
    with pytest.raises(AccessTableError, match="operators"):
        AccessTable.parse(doc)
    with pytest.raises(AccessTableError, match="operators"):
        AccessTable.parse({"rules": doc["rules"]}, operators=[member])


@pytest.mark.parametrize("value", [
    "[spiffe://agentmesh.local/client/operator-*]",
    "[operator]",
    "[]",
    "[spiffe://other.domain/client/operator]",
])
def test_config_refuses_operator_patterns(tmp_path: Path, value: str) -> None:
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text(f"operators: {value}\n")
    with pytest.raises(config.ConfigError, match="operators"):
        config.load(home=str(tmp_path), config_file=str(cfg_file), environ={})


def test_config_operators_from_the_file(tmp_path: Path) -> None:
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("operators: [spiffe://agentmesh.local/client/operator, spiffe://agentmesh.local/client/ops-bob]\n")
    cfg = config.load(home=str(tmp_path), config_file=str(cfg_file), environ={})
    assert cfg.operators == ("spiffe://agentmesh.local/client/operator", "spiffe://agentmesh.local/client/ops-bob")
    assert config.load(home=str(tmp_path), environ={}).operators == config.DEFAULT_OPERATORS
