"""The mesh home: the one directory holding all generated state.

Certificates, keys, data, logs and pid files all live below it, so one
``rm -rf`` resets a mesh and nothing generated ends up in the source tree.
The home is ``--home DIR``, else ``$AGENTMESH_HOME``, else ``~/.agentmesh``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ENV_VAR = "AGENTMESH_HOME"
DEFAULT_HOME = Path("~/.agentmesh")


@dataclass(frozen=True, slots=True)
class MeshHome:
    """Paths inside a mesh home directory."""

    root: Path

    @classmethod
    def resolve(cls, explicit: str | os.PathLike[str] | None = None) -> MeshHome:
        """Picks the home by precedence: explicit flag, environment, default."""
        raw = explicit or os.environ.get(ENV_VAR) or DEFAULT_HOME
        return cls(Path(raw).expanduser().resolve())

    @property
    def certs(self) -> Path:
        """Mesh CA and workload certificates with their keys."""
        return self.root / "certs"

    @property
    def keys(self) -> Path:
        """Signing keys: the dev identity provider, grant signer, audit log."""
        return self.root / "keys"

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
        """Creates the directories (private to the owner) and returns self."""
        for path in (self.root, self.certs, self.keys, self.data, self.logs, self.run):
            path.mkdir(parents=True, exist_ok=True)
            path.chmod(0o700)
        return self
