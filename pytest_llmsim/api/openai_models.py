"""Model discovery in OpenAI's shape (``GET /v1/models``, ``GET /v1/models/{id}``), as vLLM serves it.

A card per served name: the base model, then ``served_models``, then LoRA
adapters (whose ``parent`` is the base model and ``root`` the adapter's
path), each with vLLM's ``max_model_len``.
"""

from __future__ import annotations

from typing import Any

from ..sim import SimError

__all__ = ["model_card", "model_list", "unknown_model"]


def model_card(name: str, base_model: str, adapter_path: str | None, max_model_len: int) -> dict[str, Any]:
    """One model's card; ``adapter_path`` is not None for a LoRA adapter (``""``: loaded without a path)."""
    is_adapter = adapter_path is not None
    return {"id": name, "object": "model", "created": 0, "owned_by": "pytest-llmsim",
            "root": (adapter_path or name) if is_adapter else base_model,
            "parent": base_model if is_adapter else None, "max_model_len": max_model_len, "permission": []}


def model_list(cards: list[dict[str, Any]]) -> dict[str, Any]:
    """The answer of ``GET /v1/models``."""
    return {"object": "list", "data": cards}


def unknown_model(model_id: str) -> SimError:
    """The 404 of ``GET /v1/models/{id}`` for a name not served."""
    return SimError(404, f"The model `{model_id}` does not exist.", code="model_not_found", param="model")
