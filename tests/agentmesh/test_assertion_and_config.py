"""User assertions and configuration refuse what is wrong, naming it."""

from __future__ import annotations

from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agentmesh import assertion, config


def test_assertion_round_trip() -> None:
    key = Ed25519PrivateKey.generate()
    token = assertion.issue(key, tenant_id="acme", user_id="alice", roles=["analyst"])
    user = assertion.verify(token, key.public_key())
    assert (user.tenant_id, user.user_id, user.roles) == ("acme", "alice", ("analyst",))
    assert user.digest == assertion.digest(token) and len(user.digest) == 64


@pytest.mark.parametrize("case, reason", [
    ("expired", "ASSERTION_EXPIRED"),
    ("other_key", "ASSERTION_INVALID"),
    ("empty", "ASSERTION_MISSING"),
    ("no_tenant", "ASSERTION_NO_TENANT"),
    ("hs256", "ASSERTION_INVALID"),
])
def test_bad_assertions_are_refused(case: str, reason: str) -> None:
    key = Ed25519PrivateKey.generate()
    if case == "expired":
        token = assertion.issue(key, tenant_id="acme", user_id="alice", roles=[], ttl_s=-60)
    elif case == "other_key":
        token = assertion.issue(Ed25519PrivateKey.generate(), tenant_id="acme", user_id="a", roles=[])
    elif case == "empty":
        token = ""
    elif case == "no_tenant":
        token = assertion.issue(key, tenant_id="", user_id="alice", roles=[])
    else:
        token = jwt.encode({"sub": "alice", "tenant": "acme"}, "s" * 32, algorithm="HS256")
    with pytest.raises(assertion.AssertionInvalid) as info:
        assertion.verify(token, key.public_key())
    assert info.value.reason == reason


@pytest.mark.parametrize("claims", [
    {"tenant": "acme\u0000"}, {"sub": "alice bob"}, {"sub": ""}, {"sub": 7}, {"sid": "x" * 200},
    {"cid": "conv\n1"}, {"roles": ["viewer", "admin;drop"]}, {"roles": [""]}, {"tenant": "a" * 129},
], ids=["nul-tenant", "space-sub", "empty-sub", "int-sub", "long-sid", "newline-cid", "bad-role", "empty-role",
        "long-tenant"])
def test_a_signed_assertion_whose_claims_are_not_ids_is_refused(claims: dict[str, object]) -> None:
    key = Ed25519PrivateKey.generate()
    token = assertion.issue(key, tenant_id="acme", user_id="alice", roles=["viewer"])
    body = jwt.decode(token, options={"verify_signature": False})
    body.update(claims)
    forged = jwt.encode(body, key, algorithm="EdDSA")
    with pytest.raises(assertion.AssertionInvalid) as info:
        assertion.verify(forged, key.public_key())
    # PyJWT itself refuses a non-string subject; every other case is the mesh's own check.
    assert info.value.reason == "ASSERTION_INVALID"
    assert info.value.cause == ("InvalidSubjectError" if claims == {"sub": 7} else "ClaimInvalid")
    assert "\u0000" not in str(info.value) and "drop" not in str(info.value)


def test_config_precedence_defaults_file_env_flags(tmp_path: Path) -> None:
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("host: 127.0.0.2\ncall_timeout_s: 3\nports: {policy: 9000}\n")
    cfg = config.load(home=str(tmp_path), config_file=str(cfg_file), environ={})
    assert (cfg.host, cfg.call_timeout_s, cfg.port("policy"), cfg.port("audit")) == ("127.0.0.2", 3, 9000, 7404)
    cfg = config.load(home=str(tmp_path), config_file=str(cfg_file), environ={"AGENTMESH_CALL_TIMEOUT_S": "4"})
    assert cfg.call_timeout_s == 4
    cfg = config.load(home=str(tmp_path), config_file=str(cfg_file), environ={"AGENTMESH_CALL_TIMEOUT_S": "4"},
                      overrides={"call_timeout_s": 5, "ports": {"policy": 0}})
    assert (cfg.call_timeout_s, cfg.port("policy")) == (5, 0)


@pytest.mark.parametrize("text, field", [
    ("call_timeout_s: 0\n", "call_timeout_s"),
    ("ports: {policy: 70000}\n", "ports"),
    ("surprise: 1\n", "surprise"),
    ("- a list\n", "mapping"),
])
def test_bad_config_names_the_field(tmp_path: Path, text: str, field: str) -> None:
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text(text)
    with pytest.raises(config.ConfigError) as info:
        config.load(home=str(tmp_path), config_file=str(cfg_file), environ={})
    assert field in str(info.value)


def test_missing_config_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(config.ConfigError, match="nope.yaml"):
        config.load(home=str(tmp_path), config_file=str(tmp_path / "nope.yaml"), environ={})
