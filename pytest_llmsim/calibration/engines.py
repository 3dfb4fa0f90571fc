"""How serving engines compose a step by default: what a fit cannot tell from a sweep and must be told.

``llmsim calibrate --engine NAME`` takes an engine's defaults from :data:`ENGINES` (its step policy, whether it
splits prompts across steps, whether it runs a step's prompts and decodes in one forward pass); ``--policy``,
``--no-chunked-prefill`` and ``--separate-prefill-pass`` given beside it win. Each entry says where its defaults
come from. The token budget is not among them: it depends on the device and the server's flags (``--budget``;
without it, vLLM's default for the device or a fitted one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ENGINES", "EngineDefaults"]


@dataclass(frozen=True)
class EngineDefaults:
    """One engine's step composition (``SimConfig``'s ``step_policy``, ``chunked_prefill`` and
    ``separate_prefill_pass``) and where it comes from."""

    step_policy: str
    chunked_prefill: bool
    separate_prefill_pass: bool
    source: str

    def settings(self, step_policy: str | None = None, chunked_prefill: bool | None = None,
                 separate_prefill_pass: bool | None = None) -> dict[str, Any]:
        """The three as ``SimConfig`` settings, each one given (not None) instead of the engine's."""
        return {"step_policy": self.step_policy if step_policy is None else step_policy,
                "chunked_prefill": self.chunked_prefill if chunked_prefill is None else chunked_prefill,
                "separate_prefill_pass": (self.separate_prefill_pass if separate_prefill_pass is None
                                          else separate_prefill_pass)}


#: ``llmsim calibrate --engine``'s names and each engine's defaults.
ENGINES: dict[str, EngineDefaults] = {
    "vllm": EngineDefaults("mixed", True, False, "vLLM V1: every decode, then prefill chunks filling the budget"),
    "vllm-v0": EngineDefaults("prefill_first", False, False, "vLLM V0 without chunked prefill (0.6 and older; "
                              "MLA models in 0.7): waiting prompts whole in a step of their own"),
    "sglang": EngineDefaults("prefill_first", True, False, "SGLang: waiting prompts first, in chunks of its "
                             "chunked prefill size, while the decoders wait"),
    "tgi": EngineDefaults("prefill_when_due", True, False, "TGI's router: a prefill batch once the waiting "
                          "prompts are 1.2 times the running batch or 20 decode steps have passed"),
    "tensorrt-llm": EngineDefaults("mixed", False, False, "TensorRT-LLM (and NIM on it): in-flight batching with "
                                   "chunked context off by default, so prompts go whole"),
    "vllm-gaudi": EngineDefaults("mixed", True, True, "vllm-gaudi (Intel Gaudi), unified attention off by "
                                 "default: a step's prompts and its decodes run as two forward passes"),
}
