"""Keys live apart by who may read them; operators are an exact list; old homes are moved."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import stat
from pathlib import Path

import pytest
from cryptography import x509

from agentmesh import config, launcher, pki, spiffe
from agentmesh.config import MeshConfig
from agentmesh.home import MeshHome, record_address
from agentmesh.identities import (
    CONSOLE,
    OPERATOR,
    PLATFORM_CLI,
    LegacyLayoutError,
    init_identities,
    leaf_due,
    mesh_identities,
    migrate_legacy_layout,
    workloads,
)
from agentmesh.pki import CertificateAuthority, PkiError
from agentmesh_cli import main as cli

AUDIT_KEY, AUDIT_PUB = "audit-checkpoint-ed25519.pem", "audit-checkpoint-ed25519.pub.pem"


def _fresh(tmp_path: Path) -> MeshConfig:
    cfg = config.load(home=str(tmp_path / "home"), environ={})
    init_identities(cfg)
    return cfg


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _files(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


def test_layout_keeps_keys_apart(tmp_path: Path) -> None:
    cfg = _fresh(tmp_path)
    home = cfg.mesh_home
    assert _files(home.ca) == {"ca.key", "idp.key"}
    assert _files(home.trust) == {"ca.pem", "idp.pub", "grant-signer.pub", AUDIT_PUB}
    for path in home.trust.iterdir():
        assert b"PRIVATE KEY" not in path.read_bytes(), path
    identities = [w.identity for w in workloads(cfg)] + [CONSOLE, OPERATOR, PLATFORM_CLI]
    assert _files(home.workloads) == {f"{i.kind}-{i.name}" for i in identities}
    own = {"svc-supervisor": {"grant-signer.key"}, "svc-audit": {AUDIT_KEY}}
    for identity in identities:
        folder = home.workload_dir(identity)
        assert _files(folder) == {"cert.pem", "key.pem"} | own.get(folder.name, set()), folder
        assert _mode(folder) == 0o700
        for path in folder.iterdir():
            if path.name != "cert.pem":
                assert _mode(path) == 0o600, path
        assert pki.spiffe_id_of(home.workload_files(identity).cert.read_bytes()) == str(identity)
    # No workload directory holds a copy of any key of the CA directory.
    ca_secrets = {p.read_bytes() for p in home.ca.iterdir()}
    assert not any(p.read_bytes() in ca_secrets for p in home.workloads.rglob("*") if p.is_file())
    assert (_mode(home.ca), _mode(home.ca_key), _mode(home.idp_key), _mode(home.trust)) == (0o700, 0o600, 0o600, 0o755)


def test_init_is_idempotent_and_renews_what_is_due(tmp_path: Path) -> None:
    cfg = _fresh(tmp_path)
    home = cfg.mesh_home
    before = {p: p.read_bytes() for p in home.root.rglob("*") if p.is_file()}
    assert init_identities(cfg) == []
    assert {p: p.read_bytes() for p in home.root.rglob("*") if p.is_file()} == before
    # An expiring certificate and one from another CA are issued again; nothing else.
    ca = CertificateAuthority.load(home.ca, home.trust_bundle)
    ca.issue_unchecked(spiffe.service("policy"), home.workload_files(spiffe.service("policy")),
                       validity=dt.timedelta(minutes=30))
    rogue = CertificateAuthority.init(tmp_path / "rogue")
    rogue.issue(OPERATOR, home.workload_files(OPERATOR))
    assert sorted(init_identities(cfg)) == sorted([str(spiffe.service("policy")), str(OPERATOR)])
    assert ca.issued(home.workload_files(OPERATOR).cert.read_bytes())


def test_a_home_without_its_ca_directory_still_starts(tmp_path: Path) -> None:
    """The CA key is read only to issue: with ca/ moved away, nothing due, init reads none of it."""
    cfg = _fresh(tmp_path)
    home = cfg.mesh_home
    trust_before = {p.name: p.read_bytes() for p in home.trust.iterdir()}
    shutil.move(home.ca, tmp_path / "ca-offline")
    assert init_identities(cfg) == []
    assert {p.name: p.read_bytes() for p in home.trust.iterdir()} == trust_before  # no new CA, no new IdP key
    assert list(home.ca.iterdir()) == []
    home.workload_files(OPERATOR).cert.unlink()
    with pytest.raises(PkiError, match="ca.key"):
        init_identities(cfg)


def test_half_a_ca_is_refused_not_replaced(tmp_path: Path) -> None:
    cfg = _fresh(tmp_path)
    home = cfg.mesh_home
    home.trust_bundle.unlink()
    with pytest.raises(PkiError, match="incomplete mesh CA"):
        init_identities(cfg)
    with pytest.raises(PkiError, match="incomplete mesh CA"):
        CertificateAuthority.init(home.ca, home.trust_bundle)


def test_force_starts_a_new_ca_and_keeps_signing_keys(tmp_path: Path) -> None:
    cfg = _fresh(tmp_path)
    home = cfg.mesh_home
    old_ca = home.trust_bundle.read_bytes()
    keys = [home.idp_key, home.workload_dir(spiffe.service("supervisor")) / "grant-signer.key",
            home.workload_dir(spiffe.service("audit")) / AUDIT_KEY]
    kept = [k.read_bytes() for k in keys]
    issued = init_identities(cfg, force=True)
    assert home.trust_bundle.read_bytes() != old_ca
    assert len(issued) == len(workloads(cfg)) + 3
    assert [k.read_bytes() for k in keys] == kept


def _make_legacy(cfg: MeshConfig) -> dict[str, bytes]:
    """Turns a fresh home into the old layout (certs/, keys/); returns old name -> content."""
    home = cfg.mesh_home
    certs, keys = home.legacy_dirs
    certs.mkdir()
    keys.mkdir()
    moves = {certs / "ca.key": home.ca_key, certs / "ca.pem": home.trust_bundle,
             keys / "idp.key": home.idp_key, keys / "idp.pub": home.trust / "idp.pub",
             keys / "grant-signer.key": home.workload_dir(spiffe.service("supervisor")) / "grant-signer.key",
             keys / "grant-signer.pub": home.trust / "grant-signer.pub",
             keys / AUDIT_KEY: home.workload_dir(spiffe.service("audit")) / AUDIT_KEY,
             keys / AUDIT_PUB: home.trust / AUDIT_PUB}
    for folder in home.workloads.iterdir():
        moves[certs / f"{folder.name}.pem"] = folder / "cert.pem"
        moves[certs / f"{folder.name}.key"] = folder / "key.pem"
    for old, new in moves.items():
        shutil.move(new, old)
    for folder in (home.ca, home.trust, home.workloads):
        shutil.rmtree(folder)
    return {str(old.relative_to(home.root)): old.read_bytes() for old in moves}


def test_an_old_home_is_moved_to_the_new_layout(tmp_path: Path) -> None:
    cfg = _fresh(tmp_path)
    home = cfg.mesh_home
    old = _make_legacy(cfg)
    moved = migrate_legacy_layout(home)
    assert len(moved) == len(old)
    assert not any(p.exists() for p in home.legacy_dirs)
    assert home.ca_key.read_bytes() == old["certs/ca.key"]
    assert home.trust_bundle.read_bytes() == old["certs/ca.pem"]
    assert home.workload_files(OPERATOR).key.read_bytes() == old["certs/client-operator.key"]
    audit_dir = home.workload_dir(spiffe.service("audit"))
    assert (audit_dir / AUDIT_KEY).read_bytes() == old[f"keys/{AUDIT_KEY}"]  # the log's signatures stay valid
    assert (audit_dir / AUDIT_PUB).read_bytes() == (home.trust / AUDIT_PUB).read_bytes()
    assert init_identities(cfg) == []  # everything is where it belongs; nothing to issue
    assert migrate_legacy_layout(home) == []


def test_a_home_with_both_layouts_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = _fresh(tmp_path)
    home = cfg.mesh_home
    certs, _ = home.legacy_dirs
    certs.mkdir()
    (certs / "ca.key").write_bytes(home.ca_key.read_bytes())
    with pytest.raises(LegacyLayoutError, match="both the old layout"):
        migrate_legacy_layout(home)
    assert (certs / "ca.key").exists()  # nothing moved
    assert cli.main(["certs", "init", "--home", str(home.root)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "certs/" in err[0]


def test_certs_commands_never_print_private_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = MeshHome(tmp_path / "home")
    assert cli.main(["certs", "init", "--home", str(home.root), "--json"]) == 0
    out = capsys.readouterr()
    data = json.loads(out.out)
    assert data["ca"] == str(home.trust_bundle) and len(data["issued"]) >= 10
    assert cli.main(["certs", "issue", "--home", str(home.root), "--spiffe-id",
                     "spiffe://agentmesh.local/client/reporting"]) == 0
    assert cli.main(["token", "issue", "--home", str(home.root), "--tenant", "acme", "--user", "alice"]) == 0
    printed = capsys.readouterr()
    secrets = [p.read_text() for p in home.root.rglob("*") if p.is_file() and "PRIVATE KEY" in p.read_text()]
    assert len(secrets) >= 12
    for text in (out.out, out.err, printed.out, printed.err):
        assert "PRIVATE KEY" not in text
        for secret in secrets:
            body = "".join(secret.splitlines()[1:-1])
            assert body not in text.replace("\n", "")
    issued = home.workload_files(spiffe.client("reporting"))
    assert issued.cert.exists() and _mode(issued.key) == 0o600


@pytest.mark.parametrize("hours", ["0", "-1", "100000"])
def test_certs_issue_refuses_an_invalid_validity(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 hours: str) -> None:
    home = MeshHome(tmp_path / "home")
    assert cli.main(["certs", "init", "--home", str(home.root)]) == 0
    capsys.readouterr()
    assert cli.main(["certs", "issue", "--home", str(home.root), "--spiffe-id",
                     "spiffe://agentmesh.local/client/x", "--validity-hours", hours]) == 1
    assert "validity" in capsys.readouterr().err
    assert not home.workload_files(spiffe.client("x")).cert.exists()


# --- renewal: leaves of the configured validity, renewed at half their lifetime ---

def _serials(cfg: MeshConfig) -> dict[str, int]:
    return {str(i): x509.load_pem_x509_certificate(cfg.mesh_home.workload_files(i).cert.read_bytes()).serial_number
            for i in mesh_identities(cfg)}


def test_leaves_are_issued_for_leaf_validity_s(tmp_path: Path) -> None:
    cfg = config.load(home=str(tmp_path / "home"), environ={}, overrides={"leaf_validity_s": 600})
    init_identities(cfg)
    for identity in mesh_identities(cfg):
        v = pki.validity_of(cfg.mesh_home.workload_files(identity).cert.read_bytes())
        assert dt.timedelta(seconds=598) <= v.not_after - dt.datetime.now(dt.UTC) <= dt.timedelta(seconds=600)
        assert v.lifetime == dt.timedelta(seconds=660)  # a tenth before, for clock skew
    assert config.load(home=str(tmp_path / "home"), environ={"AGENTMESH_LEAF_VALIDITY_S": "30"}).leaf_validity_s == 30
    with pytest.raises(config.ConfigError, match="leaf_validity_s"):
        config.load(home=str(tmp_path / "home"), environ={}, overrides={"leaf_validity_s": 5})


def test_leaf_due_says_why(tmp_path: Path) -> None:
    cfg = _fresh(tmp_path)
    home = cfg.mesh_home
    ca_cert = x509.load_pem_x509_certificate(home.trust_bundle.read_bytes())
    paths = home.workload_files(OPERATOR)
    v = pki.validity_of(paths.cert.read_bytes())
    assert leaf_due(paths, ca_cert, v.renew_at - dt.timedelta(seconds=1)) is None
    assert leaf_due(paths, ca_cert, v.renew_at) == "past half its lifetime"
    assert leaf_due(paths, ca_cert, v.not_after) == "expired"
    assert leaf_due(paths, ca_cert, v.not_before - dt.timedelta(seconds=1)) == "not yet valid"
    assert leaf_due(paths, ca_cert, v.not_before, renew_before=dt.timedelta(days=2)).startswith("expires within")
    paths.key.unlink()
    assert leaf_due(paths, ca_cert, v.not_before) == "missing"


def test_the_supervising_loop_renews_every_leaf_at_half_its_lifetime(tmp_path: Path) -> None:
    cfg = _fresh(tmp_path)
    said: list[str] = []
    renewer = launcher.LeafRenewer(cfg, said.append)
    now = dt.datetime.now(dt.UTC)
    assert renewer.step(now) == [] and said == []
    before = _serials(cfg)
    keys = {str(i): cfg.mesh_home.workload_files(i).key.read_bytes() for i in mesh_identities(cfg)}
    later = now + dt.timedelta(hours=12, minutes=5)
    renewed = renewer.step(later)
    assert sorted(renewed) == sorted(before)
    after = _serials(cfg)
    assert all(after[i] != before[i] for i in before)
    assert all(cfg.mesh_home.workload_files(i).key.read_bytes() != keys[str(i)] for i in mesh_identities(cfg))
    assert len(said) == len(before) and all("renewed the certificate of" in line and "past half" in line
                                            for line in said)
    assert renewer.step() == []  # the new leaves (issued now) are not due before their own half
    # One that turned expired or was replaced by another CA's is issued again too.
    pki.CertificateAuthority.init(tmp_path / "rogue").issue(OPERATOR, cfg.mesh_home.workload_files(OPERATOR))
    assert renewer.step() == [str(OPERATOR)]


def test_without_the_ca_key_renewal_is_said_once_and_the_leaves_stay(tmp_path: Path) -> None:
    cfg = _fresh(tmp_path)
    shutil.move(cfg.mesh_home.ca, tmp_path / "ca-offline")
    said: list[str] = []
    renewer = launcher.LeafRenewer(cfg, said.append)
    before = _serials(cfg)
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=13)
    assert renewer.step(later) == [] and renewer.step(later) == []
    assert len(said) == len(before) and all("ca.key" in line and "until it expires" in line for line in said)
    assert _serials(cfg) == before


def test_status_shows_each_leafs_expiry_and_warns_in_its_last_tenth(tmp_path: Path) -> None:
    cfg = _fresh(tmp_path)
    policy = spiffe.service("policy")
    v = pki.validity_of(cfg.mesh_home.workload_files(policy).cert.read_bytes())
    row = launcher.leaf_status(cfg, str(policy))
    assert row["cert_expires_at"] == v.not_after.timestamp() and row["cert_warning"] == ""
    assert row["cert_file"] == str(cfg.mesh_home.workload_files(policy).cert)
    late = launcher.leaf_status(cfg, str(policy), now=v.warn_at + dt.timedelta(seconds=1))
    assert "expires in" in str(late["cert_warning"]) and "supervising loop" in str(late["cert_warning"])
    gone = launcher.leaf_status(cfg, str(policy), now=v.not_after)
    assert "expired at" in str(gone["cert_warning"])


def test_an_address_file_is_replaced_whole(tmp_path: Path) -> None:
    addr = tmp_path / "run" / "audit.addr"
    record_address(addr, {"address": "127.0.0.1:1", "pid": 1})
    first = addr.stat().st_ino
    record_address(addr, {"address": "127.0.0.1:2", "pid": 2})
    # A new file renamed over the old one: a reader holds either whole, never a truncated one.
    assert addr.stat().st_ino != first
    assert json.loads(addr.read_text()) == {"address": "127.0.0.1:2", "pid": 2}
    assert sorted(p.name for p in addr.parent.iterdir()) == ["audit.addr"]
