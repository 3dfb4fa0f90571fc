"""``llmsim calibrate`` and ``llmsim predict``: their arguments and what they run (``pytest_llmsim.calibration``)."""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
from collections.abc import Mapping
from typing import Any

from ..calibration import (
    BUDGETS,
    EVERY_PROMPT,
    SweepRow,
    calibrate,
    from_priors,
    read_sweeps,
    render_profile,
    render_svg,
    render_table,
    with_client_gap,
)
from ..calibration import predict as predict_sweep
from ..calibration.benchmark import ITL_PER, LOADS, STATISTICS, Benchmark, told_of
from ..calibration.cassette_fit import fit_cassettes
from ..calibration.cassettes import cassette_rows
from ..calibration.engines import ENGINES
from ..calibration.model import PARAMETERS
from ..calibration.priors import DTYPE_BYTES, GPUS, Hardware, expert_share
from ..calibration.report import LABELS, render_csv, render_json
from ..calibration.uncertainty import UNREACHED, FittedRange, fitted_range_of, unreached
from ..recording.cassette import is_cassette
from ..sim.config import ConfigError, SimConfig
from ..sim.setting_checks import STEP_POLICIES

__all__ = ["add_calibration_commands", "run_calibrate", "run_predict"]

INPUT_SPREAD_HELP = ("prompt lengths uniform within mean * (1 +- R), as current vllm bench serve --random-range-ratio "
                     "R sends them, for every row; default: each row's own where its file measured one (input_lens, "
                     "a std_input_len column, guidellm's std_dev), else fixed")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _float_list(text: str) -> list[float]:
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"expected positive numbers, got {text!r}")
    return values


def add_calibration_commands(commands: Any) -> None:
    """The ``calibrate`` and ``predict`` subcommands, on ``llmsim``'s subparsers."""
    calibrate = commands.add_parser("calibrate", help="Fit step costs to a measured load sweep; print a profile")
    calibrate.add_argument("sweep", metavar="SWEEP", nargs="*",
                           help="files or directories: CSV, vllm bench serve --save-result JSON (files, a list, JSON "
                                "lines), SGLang bench_serving JSON lines, guidellm reports; none, with hardware "
                                "priors (--gpu, --params): a profile from the priors alone")
    calibrate.add_argument("--output", "-o", metavar="PROFILE.toml", help="also write the profile to this file")
    priors = calibrate.add_argument_group("hardware and model priors (the roofline's costs up to two fitted "
                                          "efficiencies: one or two rows are enough)")
    priors.add_argument("--params", type=float, metavar="B", help="parameters a decode step reads, in billions")
    priors.add_argument("--active-params", type=float, metavar="B",
                        help="parameters a token computes with (a mixture of experts' active ones), billions")
    priors.add_argument("--gpu", help=f"the device: {', '.join(GPUS)}")
    priors.add_argument("--tp", type=_positive_int, default=1, metavar="N", help="tensor-parallel devices")
    priors.add_argument("--dtype", default="bf16", help=f"the weights' type: {', '.join(DTYPE_BYTES)}")
    priors.add_argument("--kv-bytes-per-token", type=float, metavar="BYTES",
                        help="KV cache bytes per token, all layers (else step_per_kv_token is fitted)")
    priors.add_argument("--flops", type=float, metavar="FLOP/S", help="a device's peak, instead of --gpu")
    priors.add_argument("--bandwidth", type=float, metavar="BYTES/S", help="a device's memory bandwidth")
    priors.add_argument("--memory", type=float, metavar="GB",
                        help="a device's memory in GB (with --flops and --bandwidth: the KV cache's size follows)")
    model = calibrate.add_argument_group("a mixture of experts (with or without priors): a step reads only the "
                                         "experts its tokens route to, so ITL bends up as the batch grows")
    model.add_argument("--experts", type=_positive_int, metavar="E", help="routed experts per layer")
    model.add_argument("--experts-per-token", type=_positive_int, metavar="K",
                       help="routed experts each token uses (below --experts)")
    calibrate.add_argument("--output-spread", type=float, default=None, metavar="S",
                           help="output lengths uniform within mean * (1 +- S), as answers that end at EOS (a "
                                "sweep without ignore-eos), for every row; default: each row's own where its file "
                                "measured one (output_lens, a std_output_len column, guidellm's std_dev), else 0")
    calibrate.add_argument("--input-spread", type=float, default=None, metavar="R", help=INPUT_SPREAD_HELP)
    calibrate.add_argument("--budget", type=_positive_int, default=None, metavar="TOKENS",
                           help="the measured server's max_num_batched_tokens (in vLLM's start-up log), kept as "
                                "given instead of fitted among 512-8192")
    told = calibrate.add_argument_group("what the benchmark did (else each row's own, as its file says)")
    _benchmark_arguments(told)
    told.add_argument("--output-tokens", type=_positive_int, metavar="N",
                      help="the mean output length where the rows leave it out (answers that stop at EOS)")
    calibrate.add_argument("--engine", choices=ENGINES, default="vllm",
                           help="the measured server, for how it composes a step by default (the three below; "
                                "they win where given): vllm is vLLM V1, vllm-v0 without chunked prefill, "
                                "tensorrt-llm also NIM on it, vllm-gaudi without unified attention")
    calibrate.add_argument("--policy", choices=STEP_POLICIES, default=None,
                           help="how the server composes a step while prompts wait: mixed (vLLM V1, chunked prefill), "
                                "prefill_first (SGLang, vLLM V0 without chunked prefill) or prefill_when_due (TGI); "
                                "default: the engine's")
    calibrate.add_argument("--no-chunked-prefill", dest="chunked_prefill", action="store_false", default=None,
                           help="the server takes prompts whole, never split across steps (TensorRT-LLM without "
                                "chunked context, its default; vLLM V0 without chunked prefill)")
    calibrate.add_argument("--separate-prefill-pass", action="store_true", default=None,
                           help="the server runs a step's prompts and its decodes as two forward passes, each "
                                "reading the weights (vllm-gaudi without unified attention, its default)")
    calibrate.add_argument("--jobs", "-j", type=_positive_int, default=os.cpu_count() or 1, metavar="N",
                           help="processes searching in parallel (default: one per core; the fit does not "
                                "depend on it)")
    predict = commands.add_parser("predict", help="Predict a load sweep in virtual time (no HTTP, no waiting)")
    predict.add_argument("--config", metavar="PROFILE", default=None,
                         help="settings: a preset name (e.g. qwen2.5-0.5b-l4) or a TOML file")
    loads = predict.add_mutually_exclusive_group()
    loads.add_argument("--concurrency", type=_int_list, help="closed-loop clients, e.g. 1,2,4,8")
    loads.add_argument("--rate", type=_float_list, help="open-loop Poisson arrivals per second, e.g. 1,5,10")
    loads.add_argument("--burst", type=_int_list, help="N requests sent at once, one each, counted until all end "
                                                         "(a burst benchmark), e.g. 1,64,512")
    predict.add_argument("--input", type=int, metavar="N", help="prompt tokens per request")
    predict.add_argument("--output", type=int, metavar="M", help="generated tokens per request")
    predict.add_argument("--num-prompts", type=_positive_int, default=None, metavar="N",
                         help="requests per level, counted from a cold start (default: 10 per client, or a minute "
                              "of arrivals)")
    predict.add_argument("--output-spread", type=float, default=None, metavar="S",
                         help="output lengths uniform within mean * (1 +- S) (default: a compared row's own, else 0)")
    predict.add_argument("--input-spread", type=float, default=None, metavar="R", help=INPUT_SPREAD_HELP)
    predict.add_argument("--client-gap", type=float, default=None, metavar="MS",
                         help="closed loop: each client's own time between an answer and its next request, in ms "
                              "(llmsim calibrate fits it from req/s); default 0")
    predict.add_argument("--compare", metavar="SWEEP", nargs="+",
                         help="measured sweep files: show each prediction's error (without --concurrency or "
                              "--rate, predict the sweep's own rows)")
    predict.add_argument("--itl-per", choices=ITL_PER, default=None,
                         help="the ITL to predict: the median of every gap (vLLM, SGLang) or of each request's mean "
                              "gap (TPOT)")
    predict.add_argument("--statistic", choices=STATISTICS, default=None, help="medians (default) or means")
    predict.add_argument("--format", choices=("table", "csv", "json"), default="table", help="how to print the rows")
    predict.add_argument("--plot", metavar="FILE.svg", help="also draw measured vs predicted per metric (SVG)")


def _benchmark_arguments(group: Any) -> None:
    group.add_argument("--load", choices=LOADS, default=None,
                       help="closed (clients in a loop), open (arrivals at a rate) or burst (each row's concurrency "
                            "sent at once, one request each)")
    group.add_argument("--num-prompts", type=_positive_int, default=None, metavar="N",
                       help="requests the benchmark sent per level (default: the rows' own, else 10 per client or a "
                            "minute of arrivals)")
    group.add_argument("--itl-per", choices=ITL_PER, default=None,
                       help="the rows' ITL: the median of every gap (vLLM, SGLang) or of each request's mean gap "
                            "(TPOT)")
    group.add_argument("--statistic", choices=STATISTICS, default=None,
                       help="the rows' latencies are medians (default) or means")


def _told(args: argparse.Namespace, rows: list[SweepRow], parser: argparse.ArgumentParser) -> list[SweepRow]:
    """The rows as the benchmark ran them, from the calibrate options that say it."""
    try:
        told = Benchmark(load=args.load, num_prompts=args.num_prompts, output_tokens=args.output_tokens,
                         itl_per=args.itl_per, statistic=args.statistic)
        rows = told.rows(rows)
    except ValueError as error:
        parser.error(str(error))
    if any(row.output_tokens < 1 for row in rows):
        parser.error("a row has no output length (answers that stop at EOS): give --output-tokens, their mean")
    uncounted = {("an open-loop" if row.rate is not None else "a closed-loop") for row in rows
                 if not row.num_prompts and args.load != "burst"}
    for kind in sorted(uncounted):  # a finite run past capacity is not the steady state a default count makes
        assumed = ("a minute of arrivals (at most 2,000)" if kind == "an open-loop"
                   else "10 requests per client")
        print(f"llmsim calibrate: note: {kind} row says no prompt count; simulated as {assumed}. A benchmark that "
              f"sent a fixed number per level (vllm bench serve --num-prompts, 1,000 by default) is fitted and "
              f"predicted as that run only when told: --num-prompts N", file=sys.stderr)
    return rows


def run_calibrate(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """The profile on stdout (the fit's table as TOML comments: ``> profile.toml`` is a valid profile);
    what each file's fields became, the errors and the budget note on stderr."""
    if args.sweep and all(is_cassette(path) for path in args.sweep):
        return _calibrate_recording(args, parser)
    try:
        share = expert_share(args.experts, args.experts_per_token)
    except ValueError as error:
        parser.error(str(error))
    base = SimConfig().replace(**ENGINES[args.engine].settings(  # its defaults; a flag given beside it wins
        args.policy, args.chunked_prefill, args.separate_prefill_pass))
    if share is not None:
        base = base.replace(expert_share_per_token=share)
    hardware = None
    if args.params is not None or args.gpu is not None:
        try:
            hardware = Hardware(args.params or 0.0, args.gpu, args.tp, args.active_params, args.dtype,
                                args.kv_bytes_per_token, args.flops, args.bandwidth, args.experts,
                                args.experts_per_token, args.memory * 1e9 if args.memory is not None else None)
        except ValueError as error:
            parser.error(str(error))
    if not args.sweep:
        if hardware is None:
            parser.error("give a SWEEP to fit, or hardware priors (--gpu and --params) for a profile from priors "
                         "alone")
        return _from_priors(args, hardware, base)
    try:
        rows, notes = read_sweeps(args.sweep)
    except (OSError, ValueError, KeyError) as error:
        parser.error(f"{' '.join(args.sweep)}: {error}")
    rows, spread = _spreads(args, _told(args, rows, parser), parser)
    for note in notes:
        print(f"llmsim calibrate: read {note}", file=sys.stderr)
    fit = calibrate(rows, base, spread=spread, budgets=(args.budget,) if args.budget else BUDGETS,
                    workers=args.jobs, hardware=hardware)
    budget_note = fit.budget_note()
    if budget_note == "given" and not args.budget:  # one candidate: the device's default, not the user's
        budget_note = "the device's default (vLLM V1's): too few rows to rank budgets; give --budget, the server's own"
    notes = [f"priors: {hardware}", "fitted: " + ", ".join(f"{k} {fit.efficiencies[k]:.3g}" for k in fit.fitted),
             "from priors: " + (", ".join(f"{k} {fit.efficiencies[k]:.3g}" for k in fit.from_priors) or "none")
             ] if hardware is not None else []
    if fit.client_gap_ms is not None:  # a property of the benchmark's clients, not of the server
        notes.append(f"the clients' own time between requests, from req/s: {fit.client_gap_ms:.3g} ms (not a "
                     f"server setting: llmsim predict --config simulates it, --client-gap 0 leaves it out)")
    missed = unreached(fit.predicted, rows)
    if missed is not None:  # what the fit cannot know, said where it is read: the profile and stderr
        row, metric, off = missed
        freed = f"the {len(fit.fitted)} numbers freed" if hardware is not None else "the step costs fitted"
        notes.append(f"warning: {freed} do not reach the rows given: {row.workload()} {LABELS[metric]} off by "
                     f"{off:+.0%} (more than {UNREACHED:.0%}); "
                     + ("more rows free more numbers (one each), the rest stay at their priors"
                        if hardware is not None and len(fit.fitted) < len(PARAMETERS)
                        else "this sweep has a shape the model does not"))
    kinds = {"closed" if row.concurrency is not None else "open" for row in rows}
    told = {**_benchmark_told(args), "client_gap_ms": fit.client_gap_ms,
            "load": args.load or (kinds.pop() if len(kinds) == 1 else None)}  # the rows' own where not told
    profile = render_profile(fit.config, f"fitted by llmsim calibrate {' '.join(args.sweep)} ({len(rows)} rows)",
                             budget_note, fit.predicted, rows, notes, FittedRange.of(rows, fit.predicted), told)
    print(profile, end="")
    for note in notes[1:] if hardware is not None else notes:
        print(f"llmsim calibrate: {note}", file=sys.stderr)
    errors = ", ".join(f"{name} {value:.1%}" for name, value in fit.median_abs_error().items())
    print(f"llmsim calibrate: median |error| per metric: {errors}", file=sys.stderr)
    if fit.client_gap_ms is not None:
        print(f"llmsim calibrate: the clients' own time between requests (closed-loop req/s beyond E2E), fitted "
              f"beside the server's costs: {fit.client_gap_ms:.3g} ms (llmsim predict --config simulates it)",
              file=sys.stderr)
    print(f"llmsim calibrate: token budget (max_num_batched_tokens) {fit.config.max_num_batched_tokens}: "
          f"{budget_note}", file=sys.stderr)
    _say_told(told)
    _write(args.output, profile)
    return 0


def _from_priors(args: argparse.Namespace, hardware: Hardware, base: SimConfig) -> int:
    """``llmsim calibrate --gpu ... --params ...`` without a sweep: the serving model at its priors."""
    config = from_priors(hardware, base, args.budget)
    notes = [f"priors: {hardware}", "fitted: none (no sweep); from priors: every number. Over the development "
             "sweeps such profiles missed TTFT, ITL or req/s by up to several times: fit at least one measured row"]
    budget = "given" if args.budget else "vLLM V1's default for the device; give --budget for the server's own"
    told = _benchmark_told(args)
    profile = render_profile(config, "from priors alone by llmsim calibrate (no sweep)", budget, notes=notes,
                             fitted_range=FittedRange.nothing(), told=told)
    print(profile, end="")
    print(f"llmsim calibrate: {notes[1]}", file=sys.stderr)
    _say_told(told)
    _write(args.output, profile)
    return 0


def _write(path: str | None, profile: str) -> None:
    if path:
        with open(path, "w") as handle:
            handle.write(profile)


def _calibrate_recording(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``llmsim calibrate CASSETTE...``: step costs from the recording's token gaps (see
    :mod:`pytest_llmsim.calibration.cassette_fit`), its load levels predicted beside what was recorded."""
    try:
        fit = fit_cassettes(args.sweep, args.budget)
        rows = [row for path in args.sweep for row in cassette_rows(path)]
    except (OSError, ValueError) as error:
        parser.error(f"{' '.join(args.sweep)}: {error}")
    priors = ", ".join(f"{name} {value}" for name, value in fit.priors.items())
    notes = [f"from {fit.gaps} token gaps and {fit.lone_answers} answers that ran alone (median |residual| "
             f"{fit.residual_ms:.3g} ms a step); priors: {priors}"]
    budget = "given" if args.budget else "prior (vLLM's online default); give --budget for the provider's own"
    profile = render_profile(fit.config, f"fitted by llmsim calibrate {' '.join(args.sweep)} (a recording)", budget,
                             predict_sweep(fit.config, rows) if rows else (), rows, notes)
    print(profile, end="")
    print(f"llmsim calibrate: {notes[0]}", file=sys.stderr)
    _write(args.output, profile)
    return 0


def _spreads(args: argparse.Namespace, rows: list[SweepRow],
                   parser: argparse.ArgumentParser) -> tuple[list[SweepRow], float]:
    """The rows and the spread to predict them with: ``--output-spread`` when given (for every row), else each
    row's own where its file measured one (per-request lengths, a standard deviation) and 0 for the rest; the
    rows carry ``--input-spread`` when given."""
    if args.input_spread is not None:
        if not 0 <= args.input_spread < 1:
            parser.error("--input-spread must be at least 0 and below 1")
        rows = [dataclasses.replace(row, input_spread=args.input_spread) for row in rows]
    if args.output_spread is None:
        return rows, 0.0
    if not 0 <= args.output_spread < 1:
        parser.error("--output-spread must be at least 0 and below 1")
    return [dataclasses.replace(row, output_spread=None) for row in rows], args.output_spread


def _benchmark_told(args: argparse.Namespace) -> dict[str, Any]:
    """What the calibrate flags say the sweep's benchmark did (the profile's ``[calibration.benchmark]``)."""
    return {"load": args.load, "num_prompts": args.num_prompts, "itl_per": args.itl_per, "statistic": args.statistic,
            "output_spread": args.output_spread, "input_spread": args.input_spread}


def _say_told(told: Mapping[str, Any]) -> None:
    if words := _told_words(told):
        print(f"llmsim calibrate: the benchmark, which llmsim predict --config runs unless told otherwise: {words}",
              file=sys.stderr)


def _told_words(told: Mapping[str, Any]) -> str:
    """``told`` as the flags that would say it (``--client-gap 20.1``)."""
    return ", ".join(f"--{key.removesuffix('_ms').replace('_', '-')} {value:.3g}" if isinstance(value, float)
                     else f"--{key.removesuffix('_ms').replace('_', '-')} {value}"
                     for key, value in told.items() if value is not None)


def _as_told(args: argparse.Namespace, told: Mapping[str, Any], compare: list[SweepRow] | None
             ) -> tuple[argparse.Namespace, dict[str, Any]]:
    """``args`` with what the profile's benchmark did where a flag does not say it (the prompts per level only
    for loads of its kind), and what was taken."""
    kind = ("closed" if args.concurrency else "open" if args.rate else "burst" if args.burst else
            told.get("load") if compare else None)
    taken = {key: told[key] for key in ("itl_per", "statistic", "output_spread", "input_spread")
             if key in told and getattr(args, key) is None}
    if "client_gap_ms" in told and args.client_gap is None and kind != "open":
        taken["client_gap"] = told["client_gap_ms"]
    if "num_prompts" in told and args.num_prompts is None and kind == told.get("load") and kind != "burst":
        taken["num_prompts"] = told["num_prompts"]
    return argparse.Namespace(**{**vars(args), **taken}), taken


def run_predict(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    try:
        config = SimConfig().replace(profile=args.config) if args.config else SimConfig()
        compare = read_sweeps(args.compare)[0] if args.compare else None
        told = told_of(args.config)
    except (ConfigError, OSError, ValueError) as error:
        parser.error(str(error))
    args, taken = _as_told(args, told, compare)
    if compare is not None and told.get("load") == "burst" and not (args.concurrency or args.rate or args.burst):
        compare = Benchmark(load="burst").rows(compare)  # a burst's rows: N requests at once, one each
    if taken:
        print(f"llmsim predict: as the benchmark the profile was fitted to: {_told_words(taken)} (a flag of "
              f"your own overrides it)", file=sys.stderr)
    if args.concurrency or args.rate:
        if args.input is None or args.output is None or args.input < 1 or args.output < 0:
            parser.error("--input (at least 1) and --output (at least 0) say each request's size")
        rows = ([SweepRow(c, None, args.input, args.output, num_prompts=args.num_prompts) for c in args.concurrency]
                if args.concurrency else
                [SweepRow(None, r, args.input, args.output, num_prompts=args.num_prompts) for r in args.rate])
    elif args.burst:
        if args.input is None or args.output is None or args.input < 1 or args.output < 0:
            parser.error("--input (at least 1) and --output (at least 0) say each request's size")
        rows = [SweepRow(n, None, args.input, args.output, num_prompts=n) for n in args.burst]
    elif compare is not None:
        rows = compare
        if args.num_prompts is not None:  # a flag: every row; the profile's benchmark: rows that say none
            rows = [dataclasses.replace(row, num_prompts=row.num_prompts if "num_prompts" in taken and row.num_prompts
                                        else args.num_prompts) for row in rows]
    else:
        parser.error("say the loads: --concurrency, --rate or --burst (with --input and --output), or --compare SWEEP")
    rows, spread = _spreads(args, rows, parser)
    rows = Benchmark(itl_per=args.itl_per, statistic=args.statistic).rows(rows)
    if args.client_gap is not None:
        if not 0 <= args.client_gap < math.inf:
            parser.error("--client-gap must be a number of milliseconds, at least 0")
        rows = with_client_gap(rows, args.client_gap)
    predicted = predict_sweep(config, rows, spread, waves=EVERY_PROMPT)  # every prompt, as counted
    measured = None
    if compare is not None:
        by_load = {(r.concurrency, r.rate): r for r in compare}
        measured = [by_load.get((r.concurrency, r.rate), r) for r in rows]
    fitted = fitted_range_of(args.config)
    bands = [fitted.band(row) for row in rows] if fitted is not None else None
    if args.format == "table":
        text = render_table(predicted, measured, bands)
    else:
        text = {"csv": render_csv, "json": render_json}[args.format](predicted, measured)
    print(text, end="" if text.endswith("\n") else "\n")
    if fitted is not None and fitted.missed:
        print("llmsim predict: warning: the profile's fit missed its own rows by up to "
              + ", ".join(f"{LABELS.get(name, name)} {value:.0%}" for name, value in fitted.missed.items())
              + ": every band is at least that", file=sys.stderr)
    for row in rows:
        if fitted is not None and (why := fitted.outside(row)):
            print(f"llmsim predict: warning: {row.workload()} is outside what the profile was fitted to "
                  f"({'; '.join(why)}): ±{max(fitted.band(row).values()):.0%} or more", file=sys.stderr)
    if args.plot:
        with open(args.plot, "w") as handle:
            handle.write(render_svg(predicted, measured, f"llmsim predict ({args.config or 'default settings'})",
                                    bands))
    return 0
