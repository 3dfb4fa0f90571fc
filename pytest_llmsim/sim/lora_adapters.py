"""The LoRA adapters a backend serves (vLLM's ``/v1/load_lora_adapter`` and ``/v1/unload_lora_adapter``).

A mapping of adapter name to the path it was loaded from, bounded by
``MAX_LORA_ADAPTERS``: what a client's loads can fill. Not thread-safe on its
own; the simulator calls it under its lock.
"""

from __future__ import annotations

from .request import SimError

__all__ = ["MAX_LORA_ADAPTERS", "LoraAdapters"]

MAX_LORA_ADAPTERS = 1_000  # loaded at once (vLLM keeps --max-cpu-loras in memory): a bound on a client's loads


class LoraAdapters(dict[str, str]):
    """Adapter name -> path; :meth:`load` and :meth:`unload` answer as vLLM does."""

    def load(self, name: str, path: str) -> None:
        """Load ``name``; 400 if one of that name is loaded, or ``MAX_LORA_ADAPTERS`` are."""
        if name in self:
            raise SimError(400, f"The lora adapter '{name}' has already been loaded.", param="lora_name",
                           code="lora_adapter_exists")
        if len(self) >= MAX_LORA_ADAPTERS:
            raise SimError(400, f"At most {MAX_LORA_ADAPTERS} LoRA adapters can be loaded; unload one first.",
                           param="lora_name", code="too_many_lora_adapters")
        self[name] = path

    def unload(self, name: str) -> None:
        """Unload ``name``; 404 when none of that name is loaded."""
        if name not in self:
            raise SimError(404, f"The lora adapter '{name}' cannot be found.", param="lora_name",
                           code="lora_adapter_not_found")
        del self[name]
