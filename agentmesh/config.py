"""Typed, validated configuration with one precedence: defaults → file → env → flags.

The file is YAML (``--config FILE``, else ``HOME/config.yaml`` when present).
Environment variables are ``AGENTMESH_<FIELD>`` for top-level scalar fields,
e.g. ``AGENTMESH_HOST`` or ``AGENTMESH_CALL_TIMEOUT_S``. A bad value stops the
process with one line naming the source and the field.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agentmesh import spiffe
from agentmesh.home import MeshHome

ROLES = ("audit", "policy", "capability", "model", "supervisor")
DEFAULT_AGENTS = ("work-permit-agent", "training-agent", "risk-agent", "compliance-agent", "employee-agent",
                  "medical-agent")
DEFAULT_PORTS: dict[str, int] = {
    "supervisor": 7401,
    "policy": 7402,
    "capability": 7403,
    "audit": 7404,
    "work-permit-agent": 7411,
    "training-agent": 7412,
    "risk-agent": 7413,
    "compliance-agent": 7414,
    "employee-agent": 7415,
    "medical-agent": 7416,
    "model": 7405,
    "lms": 7480,
    "model-sandbox": 7481,
    "console": 7490,
    "dev-idp": 7491,
}
DEFAULT_OPERATORS = ("spiffe://agentmesh.local/client/operator", "spiffe://agentmesh.local/svc/console")
"""The CLI's operator identity and the web console (which shows operator pages only to users whose
verified assertion holds the ``operator`` role; see console_svc)."""


class ConfigError(Exception):
    """The configuration is invalid; the message names the source and field."""


class ModelBackend(BaseModel):
    """One model the model service may route to: an OpenAI-compatible chat-completions endpoint.

    vLLM, Ollama, llama.cpp's server and hosted providers all expose one. The model id is the
    mesh's name for it (the policy engine permits models by id); ``model`` is the name the
    backend knows it by.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,62}$")
    """The mesh's id of the model, e.g. ``sandbox-small`` (named by the policy data)."""
    model: str = Field(min_length=1, max_length=200)
    """The model name sent to the backend, e.g. ``llama3.1:8b``."""
    url: str | None = None
    """Base URL of the backend's OpenAI-compatible API (``…/v1``); unset: ``model_url``, else the sandbox."""
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Z_][A-Z0-9_]{0,127}$")
    """Environment variable holding the bearer token for the backend (the token is never in a file)."""
    context_tokens: int = Field(default=8192, ge=256, le=10_000_000)
    """The model's context window: prompt and answer together must fit."""
    max_output_tokens: int = Field(default=512, ge=16, le=1_000_000)
    """The most tokens an answer may have (sent as ``max_tokens``; reserved from the budget)."""
    price_input_per_1k: float = Field(default=0.0, ge=0, le=1000)
    """Price of 1,000 prompt tokens (the unit of ``max_model_cost``, e.g. USD)."""
    price_output_per_1k: float = Field(default=0.0, ge=0, le=1000)
    """Price of 1,000 answer tokens."""
    latency_ms: float = Field(default=1000.0, gt=0, le=600_000)
    """Expected latency of one call, the routing prior until calls have been observed."""
    quality: int = Field(default=3, ge=1, le=5)
    """How complex a prompt the model handles well (1 simplest … 5 hardest); routing matches it."""
    timeout_s: float = Field(default=20.0, gt=0, le=600)
    """Deadline of one call to the backend (the caller's deadline, when shorter, wins)."""

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"{value!r} is not an http(s) URL")
        return value


DEFAULT_MODEL_BACKENDS = (
    ModelBackend(id="sandbox-small", model="sandbox-small", context_tokens=4096, max_output_tokens=400,
                 price_input_per_1k=0.0002, price_output_per_1k=0.0006, latency_ms=150, quality=2),
    ModelBackend(id="sandbox-large", model="sandbox-large", context_tokens=32768, max_output_tokens=800,
                 price_input_per_1k=0.003, price_output_per_1k=0.015, latency_ms=600, quality=4),
)
"""The two models the sandbox model server serves; a real endpoint is ``model_url`` (and ``model_backends``)."""


class MeshConfig(BaseModel):
    """Configuration shared by every process of one mesh."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    home: Path
    """The mesh home (certs, keys, data, logs, pids)."""
    host: str = "127.0.0.1"
    """Interface every server binds to."""
    ports: dict[str, int] = Field(default_factory=lambda: dict(DEFAULT_PORTS))
    """Port per process name (role or agent id); 0 picks a free port."""
    peers: dict[str, str] = Field(default_factory=dict)
    """Address per process name, overriding ``host:port`` (for peers on other hosts)."""
    agents: tuple[str, ...] = DEFAULT_AGENTS
    """Specialist agents the launcher starts, one process each."""
    access_file: Path | None = None
    """Caller table; the shipped deny-by-default table when unset."""
    operators: tuple[str, ...] = DEFAULT_OPERATORS
    """The operator identities, exactly (no patterns): the caller table's ``operators`` group."""
    call_timeout_s: float = Field(default=10.0, gt=0, le=600)
    """Deadline of an outgoing call that sets none."""
    lms_url: str | None = None
    """Base URL of the LMS; the sandbox LMS the launcher starts when unset."""
    knowledge_dir: Path | None = None
    """The knowledge stores the capability service serves, one sub-directory per scope; the shipped ones when
    unset."""
    startup_timeout_s: float = Field(default=30.0, gt=0)
    """How long the launcher waits for a process to report SERVING."""
    specialist_delay_ms: int = Field(default=0, ge=0, le=600_000)
    """A fixed delay every specialist adds to each task: for parallelism tests and benchmarks only."""
    task_timeout_s: float = Field(default=10.0, gt=0, le=600)
    """Deadline the supervisor gives each specialist task."""
    routing_file: Path | None = None
    """How the supervisor routes agent tasks — canary share and rollback, retries, availability, history
    (format: ``supervisor_svc/routing.py``); the shipped ``supervisor_svc/config/routing.yaml`` when unset."""
    confirmation_ttl_s: int = Field(default=300, ge=5, le=86_400)
    """How long a confirmation token stays valid (also the most a request may ask for)."""
    database_url: str | None = None
    """Where executions, tasks, reviews, confirmations and idempotency keys live: ``postgresql://…``
    (shared by supervisor replicas), or ``sqlite:///PATH``; unset: the SQLite files under ``HOME/data``."""
    supervisor_replicas: int = Field(default=1, ge=1, le=16)
    """How many supervisor processes ``up`` starts; more than one needs a PostgreSQL ``database_url``."""
    leaf_validity_s: int = Field(default=86_400, ge=10, le=30 * 86_400)
    """How long each workload and CLI certificate is issued for; the supervising loop renews it at half."""
    log_levels: dict[str, Literal["DEBUG", "INFO", "WARNING", "ERROR"]] = Field(default_factory=dict)
    """Log level per process name (the others log at INFO, or ``$AGENTMESH_LOG_LEVEL``). At DEBUG a specialist
    logs every task input and capability answer it receives: what it saw, to check its least context."""
    today: dt.date | None = None
    """The mesh's date for business rules (e.g. whether a permit's window has ended), ``YYYY-MM-DD``; unset:
    the host's UTC date. For demos and tests whose data is dated; security clocks always use the real time."""
    model_url: str | None = None
    """Base URL (``…/v1``) of the OpenAI-compatible endpoint every model without its own ``url`` uses;
    unset: the sandbox model server the launcher starts."""
    model_backends: tuple[ModelBackend, ...] = DEFAULT_MODEL_BACKENDS
    """The models the model service routes to (ids unique)."""

    @field_validator("model_url")
    @classmethod
    def _model_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"{value!r} is not an http(s) URL")
        return value

    @field_validator("model_backends")
    @classmethod
    def _unique_models(cls, value: tuple[ModelBackend, ...]) -> tuple[ModelBackend, ...]:
        if not value:
            raise ValueError("at least one model backend is required")
        ids = [b.id for b in value]
        dup = next((i for i in ids if ids.count(i) > 1), None)
        if dup is not None:
            raise ValueError(f"model id {dup!r} is configured twice")
        return value

    @property
    def sandbox_models(self) -> bool:
        """Whether some model has no URL of its own and none is configured: the launcher starts the sandbox."""
        return self.model_url is None and any(b.url is None for b in self.model_backends)
    console_idp_url: str | None = None
    """Base URL of the identity provider the web console signs users in with (``/authorize``, ``/token``);
    the dev identity provider the launcher starts when unset."""
    dev_idp_users: Path | None = None
    """The dev identity provider's users file; the shipped ``dev_idp/users.yaml`` when unset."""

    @field_validator("ports")
    @classmethod
    def _ports_in_range(cls, value: dict[str, int]) -> dict[str, int]:
        for name, port in value.items():
            if not 0 <= port <= 65535:
                raise ValueError(f"ports.{name}: {port} is not a port number")
        return value

    @field_validator("operators")
    @classmethod
    def _operators_exact(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("at least one operator identity is required")
        for i, text in enumerate(value):
            try:
                parsed = spiffe.parse(text)
            except spiffe.InvalidSpiffeId as err:
                raise ValueError(f"operators[{i}]: {err}") from None
            if str(parsed) != text or not text.isprintable():
                raise ValueError(f"operators[{i}]: {text!r} is not a canonical SPIFFE id")
        return value

    @model_validator(mode="after")
    def _replicas_share_a_database(self) -> MeshConfig:
        url = self.database_url or ""
        if self.supervisor_replicas > 1 and url.split(":", 1)[0] not in ("postgresql", "postgres"):
            raise ValueError(f"supervisor_replicas: {self.supervisor_replicas} replicas must share a PostgreSQL "
                             "database; set database_url: postgresql://… (SQLite serves one supervisor)")
        return self

    @property
    def mesh_home(self) -> MeshHome:
        """The home as a path helper."""
        return MeshHome(self.home)

    def port(self, name: str) -> int:
        """The configured port of a process."""
        return self.ports.get(name, 0)

    def address(self, name: str) -> str:
        """Where to reach a process: an explicit peer address, else host:port."""
        if name in self.peers:
            return self.peers[name]
        port = self.port(name)
        if port == 0:
            raise ConfigError(f"no address known for {name!r}: set peers.{name} or ports.{name}")
        return f"{self.host}:{port}"


_ENV_FIELDS = {"host": str, "call_timeout_s": float, "lms_url": str, "access_file": Path, "knowledge_dir": Path,
               "routing_file": Path,
               "startup_timeout_s": float, "specialist_delay_ms": int, "task_timeout_s": float,
               "database_url": str, "supervisor_replicas": int,
               "confirmation_ttl_s": int, "leaf_validity_s": int, "today": str, "model_url": str,
               "console_idp_url": str}


def load(
    *,
    home: str | None = None,
    config_file: str | None = None,
    overrides: dict[str, Any] | None = None,
    environ: dict[str, str] | None = None,
) -> MeshConfig:
    """Builds the config: defaults, then the file, then env, then ``overrides`` (flags)."""
    env = os.environ if environ is None else environ
    mesh_home = MeshHome.resolve(home or env.get("AGENTMESH_HOME"))
    data: dict[str, Any] = {}
    path = Path(config_file) if config_file else mesh_home.config_file
    if config_file or path.exists():
        try:
            doc = yaml.safe_load(path.read_text()) or {}
        except OSError as err:
            raise ConfigError(f"{path}: cannot read config: {err.strerror}") from err
        except yaml.YAMLError as err:
            raise ConfigError(f"{path}: not valid YAML: {err}") from err
        if not isinstance(doc, dict):
            raise ConfigError(f"{path}: expected a mapping at the top level")
        data.update(doc)
    source = str(path) if data else "defaults"
    if "ports" in data and isinstance(data["ports"], dict):
        data["ports"] = {**DEFAULT_PORTS, **data["ports"]}
    for field, _ in _ENV_FIELDS.items():
        value = env.get(f"AGENTMESH_{field.upper()}")
        if value is not None:
            data[field] = value
            source = f"AGENTMESH_{field.upper()}"
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if key in ("ports", "peers") and isinstance(value, dict):
            data[key] = {**(data.get(key) or (DEFAULT_PORTS if key == "ports" else {})), **value}
        else:
            data[key] = value
        source = f"--{key.replace('_', '-')}"
    data["home"] = mesh_home.root
    try:
        return MeshConfig.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"invalid config ({source}): {loc}: {first['msg']}") from err
