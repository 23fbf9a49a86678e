"""OpenAI-compatible chat-completions backends (vLLM, Ollama, llama.cpp's server, hosted providers).

One :class:`ChatBackend` per configured model: ``POST {url}/chat/completions``
with ``model``, the messages, ``max_tokens``, ``temperature: 0`` and
``response_format: {"type": "json_object"}``, and the bearer token from the
environment variable the config names (never from a file or a flag). The
answer's body is read with a size limit and parsed as strict JSON
(:func:`agentmesh.external.strict_json_loads`); every failure is a typed
:class:`BackendError`, never a default value:

=======================  ============================  =========  ==================================
error                    reason                        transient  when
=======================  ============================  =========  ==================================
:class:`BackendTimeout`  ``MODEL_TIMEOUT``             yes        no answer within the timeout
BackendUnavailable       ``MODEL_UNAVAILABLE``         yes        connection refused or reset, 5xx, 429
BackendRefused           ``MODEL_REQUEST_REFUSED``     no         another 4xx (unknown model, bad key, …)
BackendMalformed         ``MODEL_RESPONSE_MALFORMED``  no         not JSON, too large, no choice, no content
=======================  ============================  =========  ==================================

Only transient failures let the gateway fall back to another model.
"""

from __future__ import annotations

import json
import os
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentmesh.config import ModelBackend
from agentmesh.external import strict_json_loads
from agentmesh.http_client import HttpError, HttpPool, HttpResponse, HttpTimeout, default_ssl_context

__all__ = ["BackendError", "BackendMalformed", "BackendRefused", "BackendTimeout", "BackendUnavailable",
           "ChatBackend", "Completion"]

MAX_RESPONSE_BYTES = 1024 * 1024


class BackendError(Exception):
    """A call to a model backend failed; ``reason`` says how, ``transient`` whether another model may help."""

    reason = "MODEL_FAILED"
    transient = False


class BackendTimeout(BackendError):
    """No answer within the timeout (the backend may still be working, and billing)."""

    reason = "MODEL_TIMEOUT"
    transient = True


class BackendUnavailable(BackendError):
    """Connection refused or reset, or an HTTP 5xx or 429."""

    reason = "MODEL_UNAVAILABLE"
    transient = True


class BackendRefused(BackendError):
    """The backend refused the request (another 4xx): asking another model would not be the same call."""

    reason = "MODEL_REQUEST_REFUSED"


class BackendMalformed(BackendError):
    """The HTTP answer is not an OpenAI-shaped chat completion."""

    reason = "MODEL_RESPONSE_MALFORMED"


@dataclass(frozen=True)
class Completion:
    """One chat completion as the backend answered it."""

    content: str
    finish_reason: str
    prompt_tokens: int | None
    """As reported; None when the backend reported no usage."""
    completion_tokens: int | None
    model_version: str
    """``<model>@<system_fingerprint>``, or the model name the backend echoed."""
    latency_ms: int
    """The backend's own time: from sending the request to the last byte of the answer."""


def _count(usage: Any, name: str) -> int | None:
    value = usage.get(name) if isinstance(usage, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


class ChatBackend:
    """Chat completions against one configured model. Thread-safe (one pooled HTTP client)."""

    def __init__(self, config: ModelBackend, base_url: str, *, environ: Mapping[str, str] | None = None,
                 max_response_bytes: int = MAX_RESPONSE_BYTES) -> None:
        self.config = config
        self.base_url = base_url.rstrip("/")
        env = os.environ if environ is None else environ
        headers = {"Content-Type": "application/json"}
        if config.api_key_env:
            key = env.get(config.api_key_env, "")
            if key:
                headers["Authorization"] = f"Bearer {key}"
        self._max = max_response_bytes
        https = urllib.parse.urlsplit(self.base_url).scheme == "https"
        context = default_ssl_context() if https else None
        self._http = HttpPool(self.base_url, headers=headers, ssl_context=context, max_idle=16)

    def close(self) -> None:
        """Closes the pooled connections."""
        self._http.close()

    def complete(self, messages: Sequence[Mapping[str, str]], *, max_tokens: int,
                 timeout_s: float | None = None) -> Completion:
        """One chat completion; raises a :class:`BackendError` (see the module docstring)."""
        body = {"model": self.config.model, "messages": list(messages), "max_tokens": max_tokens,
                "temperature": 0, "response_format": {"type": "json_object"}, "stream": False}
        timeout = min(self.config.timeout_s, timeout_s) if timeout_s is not None else self.config.timeout_s
        if timeout <= 0:
            raise BackendTimeout("no time left for the call")
        started = time.monotonic()
        payload = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
        try:
            with self._http.request("POST", "/chat/completions", body=payload, timeout=timeout) as resp:
                raw = self._read(resp, started + timeout)
                status = resp.status
        except HttpTimeout as err:
            raise BackendTimeout(f"no answer within {timeout:.1f} s") from err
        except HttpError as err:
            raise BackendUnavailable(f"cannot reach the backend: {err.cause}") from err
        latency_ms = int((time.monotonic() - started) * 1000)
        if status >= 500 or status == 429:
            raise BackendUnavailable(f"the backend answered HTTP {status}")
        if status >= 400:
            raise BackendRefused(f"the backend refused the request with HTTP {status}")
        if status != 200:
            raise BackendMalformed(f"unexpected HTTP {status}")
        try:
            doc = strict_json_loads(raw)
        except (ValueError, RecursionError) as err:
            raise BackendMalformed("the backend's answer is not JSON") from err
        choices = doc.get("choices") if isinstance(doc, dict) else None
        choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None
        message = choice.get("message") if choice else None
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, str):
            raise BackendMalformed("the backend's answer has no message content")
        assert choice is not None and isinstance(doc, dict)
        finish = choice.get("finish_reason")
        usage = doc.get("usage")
        name = doc.get("model") if isinstance(doc.get("model"), str) else self.config.model
        fingerprint = doc.get("system_fingerprint")
        version = f"{name}@{fingerprint}" if isinstance(fingerprint, str) and fingerprint else str(name)
        return Completion(content, finish if isinstance(finish, str) else "unknown", _count(usage, "prompt_tokens"),
                          _count(usage, "completion_tokens"), version[:200], latency_ms)

    def _read(self, resp: HttpResponse, deadline: float) -> bytes:
        if resp.content_encoding != "identity":
            raise BackendMalformed("the backend's answer is content-encoded although identity was asked for")
        chunks: list[bytes] = []
        size = 0
        for chunk in resp.chunks():
            size += len(chunk)
            if size > self._max:
                raise BackendMalformed(f"the backend's answer is larger than {self._max} bytes")
            if time.monotonic() > deadline:
                raise BackendTimeout("the answer did not finish within the timeout")
            chunks.append(chunk)
        return b"".join(chunks)
