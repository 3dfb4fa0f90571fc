"""The serving model a fit with hardware priors moves: its shape from physics, a few free numbers from the rows.

A step's memory time, compute time and the experts it reads follow from the device and the model
(:class:`~pytest_llmsim.calibration.priors.Hardware`); the KV cache's size, and so when requests start to
wait for room, from the device's memory less the weights. What no datasheet gives is seven numbers
(:data:`PARAMETERS`): the fractions of peak bandwidth and compute reached, a fixed cost per step (kernel
launches, collectives), the API server's time per request, the host's time per decoding sequence, the extra
cost of a step with a prefill in it and the API server's serial turn. Each has a prior, the geometric median
of what the development sweeps' fits found (``benchmarks/calibration_holdout.py --manifest``), one for dense
models and one for mixtures of experts where the two kinds' fits differ (14x in compute efficiency), and a fit
frees never more of them than it has rows (:func:`free_parameters`: two with one or two rows, all seven with
seven), those the rows say most about (``fit._identified``). A free number is also pulled towards its prior
(:data:`PRIOR_WIDTH`), so a fit to a few rows stays near the priors where the rows say nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from ..sim.config import SimConfig
from .priors import Hardware, device_key
from .sweep import SweepRow
from .workload import prompts_of

__all__ = ["GPU_MEMORY_UTILIZATION", "PARAMETERS", "PRIOR_WIDTH", "Parameter", "ServingModel", "default_budget",
           "free_parameters", "in_flight", "lone_itl", "lone_ttft", "weights_read"]


@dataclass(frozen=True)
class Parameter:
    """One number the datasheets do not give: its name, its prior and what it is. With ``scale`` the prior is a
    share of the fitted rows' lightest figure of that metric (``"itl"``: its ITL, ``"ttft"``: its TTFT, each as one
    request alone would see it: ``lone_itl``, ``lone_ttft``), as
    fixed costs differ across servers by more than their share of what they cost does. ``moe`` and
    ``moe_seconds``: the priors for a mixture of experts, where they differ from a dense model's (its grouped
    expert matmuls and routing reach a smaller share of the peaks). ``heavy_reads``: where given, the prior in
    reads goes by the device's stack instead of the model's kind (``reads`` on a lean stack,
    :attr:`~pytest_llmsim.calibration.Hardware.lean_stack`, this on another); ``heavy_factor``: the kind's prior
    goes by the stack too, times this on another."""

    name: str
    prior: float
    meaning: str
    scale: str | None = None
    seconds: float | None = None  # a scaled number's prior where no row gives the figure (priors alone)
    moe: float | None = None
    moe_seconds: float | None = None
    #: where no row gives the figure: the prior as a multiple of the weights' read at peak bandwidth (bigger
    #: models launch more and larger kernels per step), over ``seconds``
    reads: float | None = None
    moe_reads: float | None = None
    #: where no row gives the figure: its share of the lone ITL the priors themselves predict
    #: (:meth:`ServingModel.priors_lone_itl`), over ``seconds`` and given seconds
    of_priors_lone_itl: bool = False
    heavy_reads: float | None = None
    #: where given, the kind's prior (``prior``, ``moe``: a lean stack's) times this on a stack that is not lean
    heavy_factor: float | None = None

    @property
    def stack_keys(self) -> tuple[str, ...]:
        """Its priors that go by the device's stack (lean or not) rather than the model's kind, as
        :meth:`ServingModel.as_priors` names them."""
        return (f"{self.name}_reads",) if self.heavy_reads is not None else ()

    def default(self, experts: bool, lean: bool = True) -> float:
        """The shipped prior (a share where scaled) for a dense model or, ``experts``, a mixture of experts (for a
        number that goes by the stack: on a lean stack or, ``lean`` false, another)."""
        found = self.moe if experts and self.moe is not None else self.prior
        return found * self.heavy_factor if self.heavy_factor is not None and not lean else found

    def default_reads(self, experts: bool, lean: bool = True) -> float | None:
        """A scaled number's shipped prior in reads of the weights at peak, where no row gives its figure."""
        if self.heavy_reads is not None:
            return self.reads if lean else self.heavy_reads
        return self.moe_reads if experts and self.moe_reads is not None else self.reads

    def default_seconds(self, experts: bool, lean: bool = True) -> float:
        """A scaled number's shipped prior in seconds, where no row gives the figure it is a share of."""
        found = self.moe_seconds if experts and self.moe_seconds is not None else self.seconds
        return found if found is not None else self.default(experts, lean)


#: In the order the search ranks them when the rows identify them equally. Priors: the geometric medians of the
#: development sweeps' all-row fits, the dense models' and the mixtures of experts' apart (a scaled number's as
#: its share, and in seconds for priors alone), as ``python benchmarks/calibration_holdout.py --manifest
#: benchmarks/development_sweeps.toml`` prints them first (2026-12-06: four dense sweeps, four of experts; by
#: stack, for the fixed cost in reads, four lean, NVIDIA's and TPU's, four not, MI300X's and
#: Gaudi 3's). The compute efficiency and the bandwidth go by both (2026-12-07, ``heavy_factor``): each kind's on
#: a lean stack, times the mean in logarithms of the kinds' ratios of another stack's to a lean one's
#: (``holdout_manifest.kind_and_stack_prior``; from the fits before: compute 0.60, 0.077, x0.42, bandwidth 0.93,
#: 0.80, x0.755; the fits these priors give print 0.603, 0.083, x0.40 and 0.935, 0.805, x0.75). 2026-12-07 night,
#: with three engines told to take prompts whole, the fits printed compute 0.68, 0.087, x0.36 and a lean stack's
#: fixed cost 0.49 reads, which these are; the fits these give print 0.825, 0.128, x0.27: the A100's and TPU v7's
#: fits of four and five rows move with their priors, so there is no fixed point to chase.
PARAMETERS: tuple[Parameter, ...] = (
    Parameter("memory_efficiency", 0.93, "fraction of peak memory bandwidth a step's reads reach", moe=0.80,
              heavy_factor=0.755),
    Parameter("compute_efficiency", 0.68, "fraction of peak compute a step's tokens reach", moe=0.087,
              heavy_factor=0.36),
    Parameter("step_overhead", 0.40, "fixed time per step beside its reads (launches, collectives), seconds",
              "itl", moe=0.89, reads=0.49, heavy_reads=1.88),
    Parameter("request_overhead", 0.074, "the API server's time before a request reaches the scheduler, seconds",
              "ttft", 0.0068, moe=0.076, moe_seconds=0.10),
    Parameter("step_per_decode_seq", 0.0096, "the host's time per decoding sequence in a step, seconds", "itl",
              moe=0.0054, of_priors_lone_itl=True),
    Parameter("step_prefill_base", 0.015, "extra fixed cost of a step with a prefill chunk in it, seconds",
              moe=0.0053),
    Parameter("request_serial", 0.001, "the API server's serial time per request (one event loop), seconds"),
)
_BY_NAME = {p.name: p for p in PARAMETERS}
#: A free number's pull towards its prior: moving it by a factor ``e`` costs as much as one fitted value missed by
#: ``1 / PRIOR_WIDTH`` in log terms (10 %: about what a benchmark's figure moves from one run to the next), so
#: the rows move what they identify and leave the rest near its prior.
PRIOR_WIDTH = 10.0
#: The share of device memory an engine gives its weights and KV cache (vLLM's ``--gpu-memory-utilization``).
GPU_MEMORY_UTILIZATION = 0.9
#: The step's fixed share of the lightest ITL that the other searches start from (:meth:`ServingModel.start_points`).
OTHER_SHARES = (0.15, 0.85)
#: Free numbers with one row (a row has a TTFT and an ITL to say two).
ONE_ROW_FREE = 2


def free_parameters(rows: int) -> int:
    """How many of :data:`PARAMETERS` a fit to ``rows`` rows frees: at most one per row (two with one row)."""
    return min(len(PARAMETERS), max(ONE_ROW_FREE, rows))


def lightest(rows: Sequence[SweepRow]) -> SweepRow | None:
    return min(rows, key=lambda r: r.concurrency if r.concurrency is not None else r.rate or 0.0, default=None)


def light_figures(light: SweepRow | None) -> dict[str, float]:
    """The lightest row's ITL and TTFT (seconds), where it has them (scaled priors are shares of these)."""
    if light is None:
        return {}
    return {name: value / 1000 for name, value in (("itl", light.itl_p50_ms), ("ttft", light.ttft_p50_ms))
            if value}


def weights_read(hardware: Hardware) -> float:
    """Seconds to read every weight once at the devices' peak bandwidth (a dense decode step's floor)."""
    at_peak = hardware.costs(1.0, 1.0)
    return at_peak["step_base"] + at_peak.get("step_expert_weights", 0.0)


def in_flight(row: SweepRow) -> float:
    """About how many sequences the row's server decodes at once: its concurrency (closed loop; a burst's N), or
    at a rate what Little's law says (arrivals times each request's time), at most the benchmark's prompts."""
    if row.concurrency is not None:
        return float(max(row.concurrency, 1))
    if not row.rate or not row.itl_p50_ms:
        return 1.0
    seconds = ((row.ttft_p50_ms or 0.0) + row.itl_p50_ms * row.output_tokens) / 1000
    return min(max(row.rate * seconds, 1.0), float(prompts_of(row)))


def _read(at_peak: Mapping[str, float], batch: float, context: float) -> float:
    """A decode step's reads at peak bandwidth with ``batch`` sequences of ``context`` tokens each: the weights,
    the experts their tokens route to, the KV cache they attend."""
    return float(at_peak["step_base"] + at_peak.get("step_per_kv_token", 0.0) * batch * context
                 + at_peak.get("step_expert_weights", 0.0) * (
                     1 - (1 - at_peak.get("expert_share_per_token", 0.0)) ** batch))


def _context(row: SweepRow) -> float:
    """The tokens a decoding sequence of the row attends on average: its prompt and half its output."""
    return row.input_tokens + row.output_tokens / 2


def lone_itl(hardware: Hardware, row: SweepRow, memory_efficiency: float, per_seq_share: float) -> float:
    """The row's ITL (seconds) as one sequence alone would see it: less what its other sequences add to a step
    (their KV and experts at ``memory_efficiency``, their host time at ``per_seq_share`` of the lone ITL). The
    scaled priors are shares of a lone stream's step; a loaded row's (an open loop's lightest rate, a sweep's
    middle row) is several times longer and would scale them up by that. Never below a fifth of the row's."""
    itl = (row.itl_p50_ms or 0.0) / 1000
    batch = in_flight(row)
    if batch <= 1 or not itl:
        return itl
    at_peak = hardware.costs(1.0, 1.0)
    extra = (_read(at_peak, batch, _context(row)) - _read(at_peak, 1.0, _context(row))) / max(memory_efficiency, 1e-3)
    return max((itl - extra) / (1 + per_seq_share * (batch - 1)), itl / 5)


def lone_ttft(hardware: Hardware, row: SweepRow, lone_step: float, compute_efficiency: float,
              overhead_share: float) -> float:
    """The row's TTFT (seconds) as one request alone would see it: where the row is loaded (several in flight), at
    most its prompt's prefill at ``compute_efficiency`` and one step (``lone_step``), over the share of it the API
    server's time does not take (``overhead_share``). A loaded row's TTFT is mostly waiting (16 clients of
    3,200-token prompts on the DeepSeek-R1 sweeps: 4.9 s, a lone prefill some 0.3 s) and would scale the API
    server's time up by that, as :func:`lone_itl` says of the step's."""
    ttft = (row.ttft_p50_ms or 0.0) / 1000
    if in_flight(row) <= 1 or not ttft:
        return ttft
    prefill = hardware.costs(1.0, 1.0)["step_compute_per_token"] * row.input_tokens / max(compute_efficiency, 1e-3)
    return min(ttft, (prefill + lone_step) / max(1.0 - overhead_share, 0.5))


#: A search's start for the efficiencies, clamped to this range.
EFFICIENCY_RANGE = (0.005, 0.95)
#: Where a search starts, the share of the lightest row's TTFT its prefill takes.
PREFILL_SHARE = 0.5


def efficiency_starts(hardware: Hardware, light: SweepRow | None, overhead: float, per_seq: float = 0.0,
                      compute_prior: float = 0.0) -> dict[str, float]:
    """The efficiencies' priors where rows are fitted: what makes the ``light`` row's decode step its ITL (beside
    the step's fixed ``overhead`` and host time ``per_seq`` per sequence, seconds) and its prefill half its TTFT,
    or ``compute_prior`` where that is more (a short prompt's TTFT is mostly waiting and overheads, and says only
    how slow its prefill can be at most). The search starts there too: the roofline's ``max`` is flat where the
    other side dominates, and a search started on the flat side stays there; and a number the rows do not free
    stays where the rows put it, not at a datasheet-wide guess."""
    if light is None:
        return {}
    at_peak = hardware.costs(1.0, 1.0)
    low, high = EFFICIENCY_RANGE
    found = {}
    batch = in_flight(light)
    if light.itl_p50_ms:
        itl = light.itl_p50_ms / 1000
        reading = max(itl - overhead - per_seq * batch, itl / 10)
        found["memory_efficiency"] = min(max(_read(at_peak, batch, _context(light)) / reading, low), high)
    if light.ttft_p50_ms:
        prefill = at_peak["step_compute_per_token"] * light.input_tokens
        found["compute_efficiency"] = min(max(prefill / (light.ttft_p50_ms / 1000 * PREFILL_SHARE), compute_prior,
                                              low), high)
    return found


#: vLLM's online token budget for the TPUs it names (``EngineArgs.get_batch_defaults``, the OpenAI server's).
TPU_BUDGETS = {"tpu-v6e": 1024, "tpu-v5e": 512, "tpu-v5p": 256}


def default_budget(hardware: Hardware) -> int:
    """vLLM V1's online token budget on this device, a prior where the server's own is not given
    (``EngineArgs.get_batch_defaults``): 8,192 with 70 GiB or more but not on an A100 (vLLM's PR #17885: a large
    budget cost the A100 throughput), else 2,048; the TPUs vLLM names, by chip (``TPU_BUDGETS``)."""
    if hardware.gpu is not None and (key := device_key(hardware.gpu)) in TPU_BUDGETS:
        return TPU_BUDGETS[key]
    memory = hardware.device.memory
    an_a100 = hardware.gpu is not None and "a100" in hardware.gpu.lower()  # as vLLM tests the device's name
    return 8192 if memory is not None and memory >= 70 * 2**30 and not an_a100 else 2048


#: Fractions of a peak: searched as log-odds, so a fit never reads faster than the datasheet allows.
EFFICIENCIES = ("memory_efficiency", "compute_efficiency")


def _to_point(name: str, value: float) -> float:
    """A number as the search moves it: an efficiency's log-odds, a time's logarithm."""
    if name in EFFICIENCIES:
        value = min(max(value, 1e-4), 0.999)
        return math.log(value / (1 - value))
    return math.log(value)


def _from_point(name: str, x: float) -> float:
    if name in EFFICIENCIES:
        return 1 / (1 + math.exp(-x)) if x > -700 else 0.0
    return math.exp(x)


@dataclass(frozen=True)
class ServingModel:
    """The parameter space of a fit with hardware priors: ``free`` numbers moved (their logarithms), the rest
    at ``priors`` (:data:`PARAMETERS`' own unless given)."""

    hardware: Hardware
    free: tuple[str, ...]
    priors: Mapping[str, float] = field(default_factory=dict)
    #: the fitted rows' lightest ITL and TTFT (seconds), which scaled priors are shares of
    light: Mapping[str, float] = field(default_factory=dict)
    #: the efficiencies' priors from the lightest fitted row (``efficiency_starts``), over ``priors``
    starts: Mapping[str, float] = field(default_factory=dict)
    light_row: SweepRow | None = None

    @classmethod
    def for_rows(cls, hardware: Hardware, rows: Sequence[SweepRow],
                 priors: Mapping[str, float] | None = None) -> ServingModel:
        """The first :func:`free_parameters` numbers free, for a fit to ``rows``."""
        light = lightest(rows)
        model = cls(hardware, tuple(p.name for p in PARAMETERS[:free_parameters(len(rows))]), dict(priors or {}),
                    light_figures(light), light_row=light)
        if model.light_row is not None and "itl" in model.light:  # shares of a lone stream's ITL
            model = replace(model, light={**model.light, "itl": lone_itl(
                hardware, model.light_row, model.default("memory_efficiency"), model.default("step_per_decode_seq"))})
        if model.light_row is not None and "ttft" in model.light:  # shares of a lone request's TTFT
            model = replace(model, light={**model.light, "ttft": lone_ttft(
                hardware, model.light_row, model.light.get("itl", 0.0), model.default("compute_efficiency"),
                model.default("request_overhead"))})
        overhead, per_seq = ((model.prior("step_overhead"), model.prior("step_per_decode_seq"))
                             if "itl" in model.light else (0.0, 0.0))
        return replace(model, starts=efficiency_starts(hardware, light, overhead, per_seq,
                                                       model.default("compute_efficiency")))

    def default(self, name: str) -> float:
        """A number's prior before any row: the given one, else the shipped one for the model's kind or, for a number
        that goes by it, the device's stack (a scaled one as its share)."""
        return self.priors.get(name) or _BY_NAME[name].default(self.hardware.mixture_of_experts,
                                                                self.hardware.lean_stack)

    def prior(self, name: str) -> float:
        """A number's prior (seconds or a fraction): a scaled one times the lightest row's figure."""
        parameter = _BY_NAME[name]
        if name in self.starts:  # an efficiency the lightest row puts (efficiency_starts)
            return self.starts[name]
        if parameter.scale and parameter.scale not in self.light:  # no row says the figure
            if parameter.of_priors_lone_itl:
                return self.default(name) * self.priors_lone_itl()
            experts = self.hardware.mixture_of_experts
            given = self.priors.get(f"{name}_reads")  # given priors first, reads before seconds
            if given or self.priors.get(f"{name}_seconds"):
                return given * weights_read(self.hardware) if given else self.priors[f"{name}_seconds"]
            lean = self.hardware.lean_stack
            reads = parameter.default_reads(experts, lean)
            return reads * weights_read(self.hardware) if reads else parameter.default_seconds(experts, lean)
        value = self.default(name)
        return value * self.light[parameter.scale] if parameter.scale else value

    def priors_lone_itl(self) -> float:
        """A lone stream's ITL (seconds) as the priors alone predict it: one sequence's weights and experts read
        at the prior bandwidth, and the step's fixed cost. Host time per sequence is a share of this (the
        development sweeps' fits spread 2.4x in that share and 8x in seconds: a 0.5 B model's host time per
        sequence is a sixth of a 70 B model's)."""
        one = _read(self.hardware.costs(1.0, 1.0), 1.0, 0.0)
        return one / self.default("memory_efficiency") + self.prior("step_overhead")

    def as_priors(self, values: Mapping[str, float]) -> dict[str, float]:
        """``values`` (a fit's numbers) as priors are kept: a scaled one as its share of the lightest figure
        (and in seconds, as ``NAME_seconds``, and where it has one in reads of the weights, ``NAME_reads``)."""
        found = {}
        for p in PARAMETERS:
            if p.name in values and p.scale and p.scale in self.light:
                found[p.name] = values[p.name] / self.light[p.scale]
                found[f"{p.name}_seconds"] = values[p.name]
                if p.reads is not None:
                    found[f"{p.name}_reads"] = values[p.name] / weights_read(self.hardware)
            elif p.name in values and not p.scale:
                found[p.name] = values[p.name]
        return found

    @property
    def fixed(self) -> tuple[str, ...]:
        return tuple(p.name for p in PARAMETERS if p.name not in self.free)

    def start(self) -> list[float]:
        return [_to_point(name, self.prior(name)) for name in self.free]

    def start_points(self) -> list[list[float]]:
        """Where searches start: at the priors, and, where the rows free the step's fixed cost or the bandwidth,
        with the fixed cost a small and a large share of the lightest ITL (the bandwidth making up the rest).
        A server whose steps are mostly launches and one whose steps are mostly reads fit the same lone stream;
        a search started on one side rarely crosses to the other."""
        points = [self.start()]
        if (self.light_row is None or "itl" not in self.light
                or not {"memory_efficiency", "step_overhead"} & set(self.free)):
            return points  # no lone ITL to take shares of, or neither number free
        for share in OTHER_SHARES:
            values = {name: self.prior(name) for name in self.free}
            values.update({name: value for name, value in efficiency_starts(
                self.hardware, self.light_row, share * self.light["itl"], self.prior("step_per_decode_seq"),
                self.starts.get("compute_efficiency", 0.0)).items() if name in values})
            if "step_overhead" in values:
                values["step_overhead"] = share * self.light["itl"]
            points.append([_to_point(name, values[name]) for name in self.free])
        return points

    def values(self, point: Sequence[float]) -> dict[str, float]:
        """Every parameter: the free ones at ``point``, the rest at their priors."""
        values = {p.name: self.prior(p.name) for p in PARAMETERS}
        values.update({name: _from_point(name, x) for name, x in zip(self.free, point)})
        return values

    def penalty(self, point: Sequence[float]) -> list[float]:
        """One residual per free number: its distance from its prior (in the search's terms) over
        :data:`PRIOR_WIDTH`."""
        return [(x - _to_point(name, self.prior(name))) / PRIOR_WIDTH for name, x in zip(self.free, point)]

    def config(self, base: SimConfig, point: Sequence[float]) -> SimConfig:
        """``base`` with the step costs these numbers and the hardware give, and its KV cache's size."""
        values = self.values(point)
        costs = self.hardware.costs(values.pop("memory_efficiency"), values.pop("compute_efficiency"))
        costs["step_base"] += values.pop("step_overhead")
        blocks = self.kv_cache_blocks(base.block_size)
        return base.replace(**costs, **values, **({"kv_cache_blocks": blocks} if blocks else {}))

    def kv_cache_blocks(self, block_size: int) -> int | None:
        """The KV cache's blocks: the devices' memory (``GPU_MEMORY_UTILIZATION`` of it) less the weights,
        over the KV bytes of a block; None where the device's memory or the KV bytes are not known."""
        tokens = self.hardware.kv_capacity_tokens(GPU_MEMORY_UTILIZATION)
        return max(1, int(tokens // block_size)) if tokens is not None else None
