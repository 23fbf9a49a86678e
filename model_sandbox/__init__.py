"""Sandbox model server: a stand-alone, OpenAI-compatible chat-completions server, deterministic, with faults.

It plays an *external* model backend (what vLLM, Ollama, llama.cpp's server or a
hosted provider expose) in development and tests, so it shares no code with the
mesh. It answers the prompts the mesh ships with deterministic skills
(:mod:`model_sandbox.skills`) and reports token usage; faults — latency,
timeout, 5xx, malformed JSON, over-long answers, hostile text — are switched at
run time through ``/admin/faults`` with the sandbox's bearer admin token.

Run it with ``python -m model_sandbox --port 0``.
"""

from model_sandbox.faults import HOSTILE_TEXT, Fault, FaultMode, FaultTable
from model_sandbox.server import DEFAULT_MODELS, MODEL_BUILD, ModelSandbox
from model_sandbox.skills import count_tokens

__all__ = ["DEFAULT_MODELS", "HOSTILE_TEXT", "MODEL_BUILD", "Fault", "FaultMode", "FaultTable", "ModelSandbox",
           "count_tokens"]
