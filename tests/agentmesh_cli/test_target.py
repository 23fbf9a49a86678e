"""Which address the CLI calls: a process's recorded address; the supervisor's replicas all as one target."""

from __future__ import annotations

from pathlib import Path

from agentmesh import config, launcher
from agentmesh.config import MeshConfig
from agentmesh_cli.common import target_of


def _mesh(tmp_path: Path, *addresses: str, replicas: int = 3) -> MeshConfig:
    (tmp_path / "config.yaml").write_text(f"supervisor_replicas: {replicas}\n"
                                          "database_url: postgresql://agentmesh@127.0.0.1:5432/agentmesh\n")
    cfg = config.load(home=str(tmp_path), environ={})
    names = ["supervisor", *(w.name for w in launcher.supervisor_replicas(cfg))]
    procs = [launcher.Running(name, "spiffe://agentmesh.local/svc/supervisor", address, 1000 + i)
             for i, (name, address) in enumerate(zip(names, addresses, strict=False))]
    procs.append(launcher.Running("policy", "spiffe://agentmesh.local/svc/policy", "127.0.0.1:7001", 999))
    launcher.state_file(cfg).parent.mkdir(parents=True, exist_ok=True)
    launcher._write_state(cfg, procs)
    return cfg


def test_the_supervisor_is_every_recorded_replica_in_order(tmp_path: Path) -> None:
    cfg = _mesh(tmp_path, "127.0.0.1:7101", "127.0.0.1:7102", "127.0.0.1:7103")
    assert target_of(cfg, "supervisor") == "ipv4:127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103"
    assert target_of(cfg, "policy") == "127.0.0.1:7001"


def test_a_replica_not_recorded_is_left_out_and_one_alone_is_its_address(tmp_path: Path) -> None:
    assert target_of(_mesh(tmp_path, "127.0.0.1:7101", "127.0.0.1:7102"), "supervisor") == \
        "ipv4:127.0.0.1:7101,127.0.0.1:7102"
    assert target_of(_mesh(tmp_path, "127.0.0.1:7101", replicas=1), "supervisor") == "127.0.0.1:7101"


def test_replicas_at_host_names_or_mixed_families_fall_back_to_the_first(tmp_path: Path) -> None:
    assert target_of(_mesh(tmp_path, "sup-a.internal:7101", "127.0.0.1:7102"), "supervisor") == "sup-a.internal:7101"
    assert target_of(_mesh(tmp_path, "127.0.0.1:7101", "[::1]:7102"), "supervisor") == "127.0.0.1:7101"
    assert target_of(_mesh(tmp_path, "[::1]:7101", "[::1]:7102"), "supervisor") == "ipv6:[::1]:7101,[::1]:7102"
