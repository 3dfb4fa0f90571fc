"""Model discovery in OpenAI's shape (``GET /v1/models``, ``GET /v1/models/{id}``), as vLLM serves it.

A card per served name: the base model, then ``served_models``, then LoRA
adapters (whose ``parent`` is the base model and ``root`` the adapter's
path), each with vLLM's ``max_model_len``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..sim import SimError
from .openai_chat import OPENAI_CHAT
from .routing import ApiRoute, Reply, RouteCall

if TYPE_CHECKING:
    from ..sim.simulator import Simulator

__all__ = ["ROUTES", "list_models", "model_card", "model_list", "show_model", "unknown_model"]


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


def _card(simulator: Simulator, name: str) -> dict[str, Any]:
    config = simulator.config
    return model_card(name, config.model, simulator.adapters.get(name), config.max_model_len)


def list_models(call: RouteCall) -> Reply:
    """``GET /v1/models``: every served name, the base model, ``served_models``, then LoRA adapters."""
    return Reply(model_list([_card(call.simulator, name) for name in call.simulator.served_models()]))


def show_model(call: RouteCall) -> Reply:
    """``GET /v1/models/{id}``: one served name's card, else a 404."""
    model_id = call.params["id"]
    if model_id not in call.simulator.served_models():
        raise unknown_model(model_id)
    return Reply(_card(call.simulator, model_id))


ROUTES = (ApiRoute("/v1/models", OPENAI_CHAT, ("GET",), list_models),
          ApiRoute("/v1/models/{id}", OPENAI_CHAT, ("GET",), show_model))
