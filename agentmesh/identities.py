"""The identities a mesh needs, and issuing them all at once (``agentmesh certs init``)."""

from __future__ import annotations

from dataclasses import dataclass

from agentmesh import spiffe
from agentmesh.config import ROLES, MeshConfig
from agentmesh.pki import CertificateAuthority, CertPaths, leaf_paths
from agentmesh.signing import load_or_create_private_key

OPERATOR = spiffe.client("operator")
"""The identity the CLI uses for operator commands (kill switches, audit, status)."""
PLATFORM_CLI = spiffe.client("platform-cli")
"""The identity the CLI uses as a platform caller of the supervisor."""


@dataclass(frozen=True, slots=True)
class Workload:
    """One process of the mesh: its name, identity and Python module."""

    name: str
    identity: spiffe.SpiffeId
    module: str
    extra_args: tuple[str, ...] = ()


def workloads(config: MeshConfig) -> list[Workload]:
    """Every gRPC process, in start order: each one's dependencies come before it."""
    order = ["audit", "policy", "capability"]
    items = [Workload(r, spiffe.service(r), f"{r}_svc") for r in order]
    items += [
        Workload(a, spiffe.agent(a), "specialist_svc", ("--agent", a)) for a in config.agents
    ]
    items.append(Workload("supervisor", spiffe.service("supervisor"), "supervisor_svc"))
    assert {w.name for w in items} >= set(ROLES)
    return items


def client_paths(config: MeshConfig, identity: spiffe.SpiffeId) -> CertPaths:
    """Certificate paths of a client identity."""
    return leaf_paths(config.mesh_home.certs, identity)


def init_identities(config: MeshConfig, *, force: bool = False) -> list[str]:
    """Creates the CA, every workload and client certificate, and the signing keys.

    Existing files are kept unless ``force``; returns the SPIFFE ids issued.
    """
    home = config.mesh_home.ensure()
    ca = CertificateAuthority.init(home.certs, force=force)
    issued = []
    for identity in [w.identity for w in workloads(config)] + [OPERATOR, PLATFORM_CLI]:
        paths = leaf_paths(home.certs, identity)
        if force or not (paths.cert.exists() and paths.key.exists()):
            ca.issue(identity)
            issued.append(str(identity))
    load_or_create_private_key(home.keys / "idp.key")
    load_or_create_private_key(home.keys / "grant-signer.key")
    return issued
