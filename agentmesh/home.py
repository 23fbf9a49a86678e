"""The mesh home: the one directory holding all generated state.

Certificates, keys, data, logs and pid files all live below it, so one
``rm -rf`` resets a mesh and nothing generated ends up in the source tree.
The home is ``--home DIR``, else ``$AGENTMESH_HOME``, else ``~/.agentmesh``.

Keys are kept apart by who may read them::

    ca/                      issuing commands only (certs init/issue, token issue, the
      ca.key                 CLI's dev identity provider); no workload process reads it
      idp.key                the dev identity provider's signing key
    trust/                   what anyone may read
      ca.pem                 the trust bundle (the mesh CA certificate)
      idp.pub, grant-signer.pub, audit-checkpoint-ed25519.pub.pem
    workloads/<kind>-<name>/ one per identity (0700): cert.pem, key.pem, and the
                             role's own signing key if it signs (svc-supervisor:
                             grant-signer.key; svc-audit: the checkpoint key)
    workloads/lms-sandbox/   the sandbox LMS's admin token
    workloads/model-sandbox/ the sandbox model server's admin token
    data/ logs/ run/

A role process reads its own ``workloads/`` directory and ``trust/`` only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from agentmesh import spiffe
from agentmesh.pki import CertPaths, leaf_paths, workload_dir_name

ENV_VAR = "AGENTMESH_HOME"
DEFAULT_HOME = Path("~/.agentmesh")
LMS_SANDBOX = "lms-sandbox"
"""The sandbox LMS's directory under ``workloads/`` (it has no mesh identity)."""
MODEL_SANDBOX = "model-sandbox"
"""The sandbox model server's directory under ``workloads/`` (it has no mesh identity either)."""


@dataclass(frozen=True, slots=True)
class MeshHome:
    """Paths inside a mesh home directory."""

    root: Path

    @classmethod
    def resolve(cls, explicit: str | os.PathLike[str] | None = None) -> MeshHome:
        """Picks the home by precedence: explicit flag, environment, default."""
        raw = explicit or os.environ.get(ENV_VAR) or DEFAULT_HOME
        return cls(Path(raw).expanduser().resolve())

    # --- keys and certificates -------------------------------------------

    @property
    def ca(self) -> Path:
        """The CA key and the signing keys that are no workload's own (issuing commands only)."""
        return self.root / "ca"

    @property
    def ca_key(self) -> Path:
        """The mesh CA's private key."""
        return self.ca / "ca.key"

    @property
    def idp_key(self) -> Path:
        """The dev identity provider's private key (signs user assertions)."""
        return self.ca / "idp.key"

    @property
    def trust(self) -> Path:
        """What every workload may read: the CA bundle and public keys."""
        return self.root / "trust"

    @property
    def trust_bundle(self) -> Path:
        """The mesh CA certificate every server and client verifies peers against."""
        return self.trust / "ca.pem"

    def public_key_path(self, name: str) -> Path:
        """A published public key, e.g. ``public_key_path("grant-signer.pub")``."""
        return self.trust / name

    @property
    def workloads(self) -> Path:
        """One directory per workload or client identity."""
        return self.root / "workloads"

    def workload_dir(self, identity: spiffe.SpiffeId | str) -> Path:
        """The private directory of one identity (``svc-policy``), or of a named
        non-mesh process such as :data:`LMS_SANDBOX`."""
        name = identity if isinstance(identity, str) else workload_dir_name(identity)
        return self.workloads / name

    def workload_files(self, identity: spiffe.SpiffeId) -> CertPaths:
        """An identity's certificate and key."""
        return leaf_paths(self.workloads, identity)

    @property
    def grant_signer_key(self) -> Path:
        """The supervisor's grant signing key, in the supervisor's own directory."""
        return self.workload_dir(spiffe.service("supervisor")) / "grant-signer.key"

    @property
    def lms_admin_token(self) -> Path:
        """The bearer token of the sandbox LMS's ``/admin`` endpoints (0600)."""
        return self.workload_dir(LMS_SANDBOX) / "admin-token"

    @property
    def model_sandbox_admin_token(self) -> Path:
        """The bearer token of the sandbox model server's ``/admin`` endpoints (0600)."""
        return self.workload_dir(MODEL_SANDBOX) / "admin-token"

    @property
    def legacy_dirs(self) -> tuple[Path, Path]:
        """``certs/`` and ``keys/`` of the layout before ``ca/``, ``trust/`` and ``workloads/``."""
        return self.root / "certs", self.root / "keys"

    # --- state -------------------------------------------------------------

    @property
    def data(self) -> Path:
        """SQLite files of every service."""
        return self.root / "data"

    @property
    def logs(self) -> Path:
        """One log file per process started by the launcher."""
        return self.root / "logs"

    @property
    def run(self) -> Path:
        """Pid files and the launcher's state."""
        return self.root / "run"

    @property
    def config_file(self) -> Path:
        """Optional mesh configuration file."""
        return self.root / "config.yaml"

    def ensure(self) -> MeshHome:
        """Creates the directories and returns self.

        Everything is private to the owner (0700) except ``trust/`` (0755),
        which holds only certificates and public keys.
        """
        for path in (self.root, self.ca, self.workloads, self.data, self.logs, self.run):
            path.mkdir(parents=True, exist_ok=True)
            path.chmod(0o700)
        self.trust.mkdir(parents=True, exist_ok=True)
        self.trust.chmod(0o755)
        return self


def record_address(path: Path, fields: Mapping[str, object]) -> None:
    """Writes a process's address file whole or not at all (written aside, then renamed into place):
    whoever polls for the file, the launcher or a test, never reads it empty or half-written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    aside = path.with_name(path.name + ".tmp")
    aside.write_text(json.dumps(dict(fields)))
    os.replace(aside, path)
