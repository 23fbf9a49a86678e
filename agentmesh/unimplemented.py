"""Servicers for contract RPCs whose behaviour does not exist yet.

Each method answers UNIMPLEMENTED with an ErrorInfo, never placeholder data.
"""

from __future__ import annotations

from typing import Any

from agentmesh import errors


def unimplemented_servicer(base: type[Any], *, only: tuple[str, ...] | None = None) -> type[Any]:
    """A subclass of a generated servicer whose RPCs (all, or those in ``only``) are UNIMPLEMENTED."""
    names = [
        n for n, v in vars(base).items() if callable(v) and not n.startswith("_") and (only is None or n in only)
    ]

    def make(name: str) -> Any:
        def method(self: Any, request: Any, context: Any) -> Any:
            raise errors.Unimplemented(
                f"{base.__name__.removesuffix('Servicer')}.{name} is not implemented yet",
                reason="NOT_IMPLEMENTED",
                metadata={"rpc": name},
            )

        method.__name__ = name
        return method

    return type(f"Unimplemented{base.__name__}", (base,), {n: make(n) for n in names})
