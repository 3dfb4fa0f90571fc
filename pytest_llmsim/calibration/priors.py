"""Hardware and model priors: the roofline's costs from what the server runs on, up to two efficiencies.

A decode step reads the weights once (``params x bytes per parameter``, split
over ``tp`` devices) and the KV cache its sequences attend; a token costs
``2 x active params`` floating-point operations. With a device's peak
bandwidth and compute, that gives ``step_base``, ``step_per_kv_token`` and
``step_compute_per_token`` up to a memory and a compute efficiency (the
fraction of peak reached), which :func:`~pytest_llmsim.calibration.calibrate`
fits instead of the costs themselves: one or two measured rows are then
enough. The table's figures are the vendors' published dense peaks (no
sparsity), per device.

A mixture-of-experts model reads only the experts its batch's tokens choose,
fewer at low batch than the whole model. Given its routed ``experts`` and
``experts_per_token`` (and ``active_params``), the routed experts' weights
are ``(params - active_params) / (1 - experts_per_token / experts)``; a step
reads the shared rest always and of the experts the share ``1 - (1 -
experts_per_token / experts)^tokens`` (``step_expert_weights``,
``expert_share_per_token``), so ITL bends up as the batch activates more
experts. Without them ``params`` is read whole by every step (the fitted
memory efficiency then absorbs the difference at one batch size, not its
change with load).
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass

__all__ = ["DTYPE_BYTES", "FP4_TYPES", "GPUS", "LEAN_STACK_VENDORS", "Device", "Hardware", "device_key",
           "expert_share"]


@dataclass(frozen=True)
class Device:
    """One accelerator's dense peak compute (FLOP/s at BF16/FP16), memory bandwidth (bytes/s), memory (bytes)
    and, where it has them, its FP8 and FP4 peaks (FLOP/s; None: that type runs at the next wider type's peak) and
    its INT8 peak where it differs from FP8's (None: FP8's, else the 16-bit one)."""

    flops: float
    bandwidth: float
    source: str
    memory: float | None = None
    fp8_flops: float | None = None
    fp4_flops: float | None = None
    int8_ops: float | None = None

    def peak(self, dtype: str) -> float:
        """The dense peak a model of ``dtype`` computes at: FP4's where the device has one (Blackwell, CDNA 4),
        else FP8's (an FP4 model on Hopper computes in FP8), else the 16-bit one. Integer weights with 16-bit
        activations (``w8a16``, ``w4a16``, ``int8``, ``int4``) compute at the 16-bit peak; ``w8a8`` at INT8's."""
        if dtype in FP4_TYPES and self.fp4_flops:
            return self.fp4_flops
        if dtype == "w8a8":
            return self.int8_ops or self.fp8_flops or self.flops
        if (dtype == "fp8" or dtype in FP4_TYPES) and self.fp8_flops:
            return self.fp8_flops
        return self.flops


#: Vendors whose serving stacks the development sweeps saw run a step with little fixed work beside its reads, near
#: the datasheet's bandwidth: CUDA graphs (vLLM, TensorRT-LLM/NIM on NVIDIA) and XLA compiling a whole step (TPU):
#: 0.5-0.8 of a weight read per step beside it, 78-96 % of peak bandwidth. The ROCm and Gaudi stacks of the sweeps
#: (MI300X, Gaudi 3, early 2025) spent 1.4-2.6 weight reads, for dense models and mixtures alike, and reached about
#: three quarters of the bandwidth share and two fifths of the compute share the lean stacks reached with each kind.
LEAN_STACK_VENDORS = ("NVIDIA", "Google")


#: Known devices (dense tensor peaks, HBM/GDDR bandwidth and capacity), from the vendors' datasheets.
GPUS: dict[str, Device] = {
    "v100": Device(125e12, 0.9e12, "NVIDIA V100 SXM2 datasheet: 125 TFLOPS FP16 tensor (no BF16), 900 GB/s, "
                                   "32 GB", 32e9),
    "a100": Device(312e12, 2.039e12, "NVIDIA A100 80GB SXM datasheet: 312 TFLOPS BF16, 624 TOPS INT8, 2,039 GB/s",
                    80e9, int8_ops=624e12),
    "h100": Device(989e12, 3.35e12, "NVIDIA H100 SXM datasheet: 989 TFLOPS BF16 dense, 1,979 FP8, 3.35 TB/s, "
                                    "80 GB", 80e9, 1979e12),
    "h200": Device(989e12, 4.8e12, "NVIDIA H200 SXM datasheet: 989 TFLOPS BF16 dense, 1,979 FP8, 4.8 TB/s, "
                                   "141 GB", 141e9, 1979e12),
    "b200": Device(2250e12, 8.0e12, "NVIDIA DGX B200 / HGX B200: 2.25 PFLOPS BF16 dense per GPU, 4.5 FP8, 9 FP4, "
                                    "8 TB/s, 180 GB", 180e9, 4500e12, 9000e12),
    "l4": Device(121e12, 0.3e12, "NVIDIA L4 datasheet: 121 TFLOPS BF16 dense (242 with sparsity), 242 FP8, "
                                 "300 GB/s, 24 GB", 24e9, 242e12),
    "l40s": Device(362e12, 0.864e12, "NVIDIA L40S datasheet: 362 TFLOPS BF16 dense, 733 FP8, 864 GB/s, 48 GB",
                   48e9, 733e12),
    "rtx3090": Device(142e12, 0.936e12, "NVIDIA Ampere GA102 (RTX 3090): 142 TFLOPS FP16 tensor dense (285 with "
                                        "sparsity; FP32 accumulate 71), 284 TOPS INT8, 936 GB/s, 24 GB GDDR6X", 24e9,
                       int8_ops=284e12),
    "t4": Device(65e12, 0.32e12, "NVIDIA T4 datasheet: 65 TFLOPS FP16 mixed-precision tensor (no BF16), 130 TOPS "
                                 "INT8, 320 GB/s, 16 GB GDDR6", 16e9, int8_ops=130e12),
    "a6000": Device(154.8e12, 0.768e12, "NVIDIA RTX A6000 datasheet: 309.7 TFLOPS tensor with sparsity (154.8 "
                                        "dense), 768 GB/s, 48 GB GDDR6", 48e9),
    "h20": Device(148e12, 4.0e12, "NVIDIA H20 (as reported; no public datasheet): 148 TFLOPS BF16 dense, 296 FP8, "
                                  "4.0 TB/s, 96 GB HBM3", 96e9, 296e12),
    "a10": Device(125e12, 0.6e12, "NVIDIA A10 datasheet: 125 TFLOPS BF16/FP16 tensor dense (250 with sparsity), "
                                  "250 TOPS INT8, 600 GB/s, 24 GB GDDR6", 24e9, int8_ops=250e12),
    "a40": Device(149.7e12, 0.696e12, "NVIDIA A40 datasheet: 149.7 TFLOPS BF16 tensor dense with FP32 accumulate "
                                      "(299.4 with sparsity), 299.3 TOPS INT8, 696 GB/s, 48 GB GDDR6", 48e9,
                  int8_ops=299.3e12),
    "rtx4090": Device(165e12, 1.008e12, "NVIDIA Ada whitepaper, RTX 4090: 165 TFLOPS FP16/BF16 tensor (FP32 "
                                        "accumulate 82.6), 330 FP8 (FP32 accumulate), 660.6 TOPS INT8, 1,008 GB/s, "
                                        "24 GB", 24e9, 330e12, int8_ops=660.6e12),
    "mi300x": Device(1307e12, 5.3e12, "AMD Instinct MI300X datasheet: 1,307 TFLOPS BF16 dense, 2,615 FP8, 5.3 TB/s, "
                                      "192 GB", 192e9, 2615e12),
    "mi325x": Device(1307e12, 6.0e12, "AMD Instinct MI325X datasheet: 1,307 TFLOPS BF16 dense, 2,615 FP8, 6 TB/s, "
                                      "256 GB", 256e9, 2615e12),
    "mi355x": Device(2500e12, 8.0e12, "AMD Instinct MI355X (CDNA 4; ISC 2025 launch, ISSCC 2026): about 2.5 PFLOPS "
                                      "BF16 dense, 5 FP8, 10 MXFP4 (20.1 with sparsity), 8 TB/s, 288 GB HBM3E", 288e9,
                     5000e12, 10000e12),
    "gaudi3": Device(1835e12, 3.7e12, "Intel Gaudi 3 white paper: 1,835 TFLOPS BF16 and FP8 (matrix), 3.7 TB/s "
                                      "HBM2e, 128 GB", 128e9),
    "gb200": Device(2500e12, 8.0e12, "NVIDIA GB200 NVL72 datasheet, per Blackwell GPU: 5 PFLOPS FP16/BF16, 10 FP8, "
                                     "20 FP4 (with sparsity; half dense), 8 TB/s, 186 GB HBM3E", 186e9, 5000e12,
                    10000e12),
    "l40": Device(181e12, 0.864e12, "NVIDIA L40 datasheet: 181 TFLOPS BF16 dense (362 with sparsity), 362 FP8, "
                                    "864 GB/s, 48 GB GDDR6", 48e9, 362e12),
    "mi250x": Device(383e12, 3.2e12, "AMD Instinct MI250X datasheet: 383 TFLOPS BF16/FP16 dense (no FP8), "
                                     "383 TOPS INT8, 3.2 TB/s, 128 GB HBM2e (two dies, one device here)", 128e9,
                     int8_ops=383e12),
    "gaudi2": Device(432e12, 2.46e12, "Intel Gaudi 2 (Intel's Hot Chips 2024 table and product brief): 432 TFLOPS "
                                      "BF16, 865 FP8 (matrix), 2.46 TB/s HBM2e, 96 GB", 96e9, 865e12),
    "tpu-v5e": Device(197e12, 0.819e12, "Google Cloud TPU v5e page: per chip 197 TFLOPS BF16 (393 TOPS INT8), "
                                        "819 GB/s, 16 GB HBM2", 16e9, int8_ops=393e12),
    "tpu-v5p": Device(459e12, 2.765e12, "Google Cloud TPU v5p pages: per chip 459 TFLOPS BF16 (and FP8), 918 TOPS "
                                        "INT8, 2,765 GB/s, 95 GB HBM2e", 95e9, int8_ops=918e12),
    "tpu-v6e": Device(918e12, 1.64e12, "Google Cloud TPU v6e (Trillium) page: per chip 918 TFLOPS BF16 (1,836 TOPS "
                                       "INT8), 1,640 GB/s, 32 GB HBM", 32e9, int8_ops=1836e12),
    "tpu-v7": Device(2307e12, 7.37e12, "Google Cloud TPU7x (Ironwood) page: per chip 2,307 TFLOPS BF16, 4,614 FP8, "
                                       "7.37 TB/s, 192 GiB HBM", 206e9, 4614e12),
    "ascend910b": Device(280e12, 1.6e12, "Huawei Ascend 910B: 280 TFLOPS FP16 (Gitee AI's cluster docs; the press "
                                         "says 256-320), 64 GB HBM2e at about 1.6 TB/s (no vendor datasheet "
                                         "publishes it: the least certain entry)", 64e9),
}

#: Words a device's name may carry beside its table name (vendors, product lines), and other names of entries.
_VENDOR_WORDS = frozenset({"nvidia", "amd", "instinct", "intel", "habana", "google", "cloud", "huawei", "geforce",
                           "tesla", "radeon"})
_ALIASES = {"tpu7x": "tpu-v7", "ironwood": "tpu-v7", "trillium": "tpu-v6e", "v5litepod": "tpu-v5e",
            "910b": "ascend910b", "rtxa6000": "a6000",
            # export variants with the same peaks and memory (their NVLink is narrower: no cost here)
            "h800": "h100", "a800": "a100"}


@functools.lru_cache(maxsize=64)  # Hardware.device asks at every cost lookup of a fit
def device_key(name: str) -> str:
    """The :data:`GPUS` key ``name`` means, case, spaces, hyphens and vendor words aside (``NVIDIA A100-80GB``,
    ``RTX 4090``, ``gaudi-3``, ``TPU7x``); a variant word only where the entry is that variant (the table's A100
    is the 80 GB SXM: ``a100 sxm4 80gb`` is it, ``a100 40gb`` another device). Raises ValueError naming the
    known ones, or the entry a variant word did not match."""
    words = [w for w in re.split(r"[\s_\-/]+", name.lower()) if w and w not in _VENDOR_WORDS]
    keys = {re.sub(r"[^a-z0-9]", "", key): key for key in GPUS} | _ALIASES
    for end in range(len(words), 0, -1):
        key = keys.get("".join(words[:end]))
        if key is None:
            continue
        source = set(re.split(r"[^a-z0-9]+", re.sub(r"(\d)\s*gb\b", r"\1gb", GPUS[key].source.lower())))
        variant = words[end:]
        if all(word in source or any(word[:len(s)] == s and word[len(s):].isdigit() and s.isalpha()
                                     for s in source) for word in variant):
            return key
        entry = GPUS[key].source.split(":")[0].removesuffix(" datasheet")
        raise ValueError(f"unknown GPU {name!r}: the table's {key} is the {entry}; for another variant give "
                         f"--flops, --bandwidth and --memory")
    raise ValueError(f"unknown GPU {name!r}; known: {', '.join(GPUS)} (or give --flops and --bandwidth)")


#: Bytes per parameter (or per KV element) of a data type.
DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5, "fp4": 0.5,
               "mxfp4": 4.25 / 8, "nvfp4": 4.5 / 8,  # MX: an 8-bit scale per 32 values; NVFP4: FP8 per 16
               # integer weights by what they compute in (vLLM's compressed-tensors schemes): activations in 8
               # bits (INT8 tensor cores) or in 16 (the weights widened in the kernel; int8 and int4 mean these)
               "w8a8": 1.0, "w8a16": 1.0, "w4a16": 0.5}
#: Four-bit floating-point types, computed at a device's FP4 peak where it has one.
FP4_TYPES = ("fp4", "mxfp4", "nvfp4")


def expert_share(experts: int | None, experts_per_token: int | None) -> float | None:
    """The share of its routed experts a mixture of experts' token uses (``experts_per_token / experts``, the
    engine's ``expert_share_per_token``); None for a dense model (neither given). Raises ValueError for one
    without the other, or ``experts_per_token`` not in ``[1, experts)``."""
    if experts is None and experts_per_token is None:
        return None
    if experts is None or experts_per_token is None:
        raise ValueError("a mixture of experts needs both experts and experts per token (--experts and "
                         "--experts-per-token go together)")
    if not 1 <= experts_per_token < experts:
        raise ValueError("experts per token must be at least 1 and below --experts (the routed experts)")
    return experts_per_token / experts


@dataclass(frozen=True)
class Hardware:
    """What the measured server ran: a device (a :data:`~pytest_llmsim.calibration.priors.GPUS` name, or
    ``flops`` and ``bandwidth``), the tensor-parallel width, the model's parameters read per step and
    computed per token (billions), its data type and, if known, its KV cache bytes per token (all layers)."""

    params: float
    gpu: str | None = None
    tp: int = 1
    active_params: float | None = None
    dtype: str = "bf16"
    kv_bytes_per_token: float | None = None
    flops: float | None = None
    bandwidth: float | None = None
    experts: int | None = None
    experts_per_token: int | None = None
    #: a device's memory in bytes, over the table's (a device given by ``flops`` and ``bandwidth`` has none else)
    memory: float | None = None

    def __post_init__(self) -> None:
        if self.gpu is not None:
            device_key(self.gpu)  # raises for a name the table does not have
        if self.gpu is None and (self.flops is None or self.bandwidth is None):
            raise ValueError("hardware priors need a --gpu or both --flops and --bandwidth")
        if self.dtype not in DTYPE_BYTES:
            raise ValueError(f"unknown dtype {self.dtype!r}; known: {', '.join(DTYPE_BYTES)}")
        if self.params <= 0 or self.tp < 1 or (self.active_params is not None and self.active_params <= 0):
            raise ValueError("params and active params must be positive and tp at least 1")
        if self.memory is not None and not 0 < self.memory < math.inf:
            raise ValueError("a device's memory must be a positive number of bytes")
        if expert_share(self.experts, self.experts_per_token) is not None:
            if self.active_params is None or self.active_params >= self.params:
                raise ValueError("a mixture of experts needs active params below params")
            if self.expert_params() > self.params:
                raise ValueError(f"{self.active_params} B active of {self.params} B with {self.experts_per_token} "
                                 f"of {self.experts} experts per token leaves no room for the shared weights")

    def expert_params(self) -> float:
        """The routed experts' parameters (billions): ``params - active = experts' share unused per token``,
        so ``(params - active) / (1 - experts_per_token / experts)``; 0 for a dense model."""
        share = expert_share(self.experts, self.experts_per_token)
        if share is None or self.active_params is None:
            return 0.0
        return (self.params - self.active_params) / (1 - share)

    @property
    def mixture_of_experts(self) -> bool:
        """Whether its tokens route to experts (``experts`` given): the serving model's priors are a mixture's."""
        return self.expert_params() > 0

    @property
    def lean_stack(self) -> bool:
        """Whether the device's vendor's stack runs lean steps
        (:data:`~pytest_llmsim.calibration.priors.LEAN_STACK_VENDORS`): the serving model's priors for the fixed
        cost per step, and for the bandwidth and compute reached with each kind of model, are then those stacks'.
        A device given by its figures alone counts as one."""
        return self.gpu is None or GPUS[device_key(self.gpu)].source.split()[0] in LEAN_STACK_VENDORS

    @property
    def device(self) -> Device:
        known = GPUS[device_key(self.gpu)] if self.gpu is not None else None
        if known is not None and self.flops is None and self.bandwidth is None and self.memory is None:
            return known
        return Device(self.flops or (known.flops if known else 0.0),
                      self.bandwidth or (known.bandwidth if known else 0.0), known.source if known else "given",
                      self.memory or (known.memory if known else None),
                      None if self.flops or not known else known.fp8_flops,
                      None if self.flops or not known else known.fp4_flops)

    def kv_capacity_tokens(self, utilization: float) -> float | None:
        """Tokens the KV cache holds: ``utilization`` of the devices' memory less the weights, over the KV bytes
        per token; None where the device's memory or the KV bytes are not known (or nothing is left)."""
        memory = self.device.memory
        if memory is None or not self.kv_bytes_per_token:
            return None
        free = self.tp * memory * utilization - self.params * 1e9 * DTYPE_BYTES[self.dtype]
        return free / self.kv_bytes_per_token if free > 0 else None

    def costs(self, memory_efficiency: float, compute_efficiency: float) -> dict[str, float]:
        """The roofline's step costs at these fractions of peak bandwidth and compute."""
        device = self.device
        bandwidth = self.tp * device.bandwidth * memory_efficiency
        flops = self.tp * device.peak(self.dtype) * compute_efficiency
        weight_bytes = 1e9 * DTYPE_BYTES[self.dtype]
        experts = self.expert_params()
        costs = {"step_base": (self.params - experts) * weight_bytes / bandwidth,
                 "step_compute_per_token": 2 * (self.active_params or self.params) * 1e9 / flops}
        share = expert_share(self.experts, self.experts_per_token)
        if experts and share is not None:  # a step reads the experts its tokens route to
            costs["step_expert_weights"] = experts * weight_bytes / bandwidth
            costs["expert_share_per_token"] = share
        if self.kv_bytes_per_token is not None:
            costs["step_per_kv_token"] = self.kv_bytes_per_token / bandwidth
        return costs
