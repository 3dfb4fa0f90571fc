"""The serving model with hardware priors, the benchmark's own behaviour, and what a fit cannot know."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from pytest_llmsim import SimConfig
from pytest_llmsim.calibration import Hardware, SweepRow, calibrate, from_priors, predict, predict_row
from pytest_llmsim.calibration.benchmark import Benchmark, told_of
from pytest_llmsim.calibration.model import (
    PARAMETERS,
    ServingModel,
    default_budget,
    free_parameters,
    in_flight,
    lone_itl,
    lone_ttft,
    weights_read,
)
from pytest_llmsim.calibration.priors import GPUS, device_key
from pytest_llmsim.calibration.report import render_svg
from pytest_llmsim.calibration.uncertainty import BANDS, UNREACHED, FittedRange, fitted_range_of, unreached
from pytest_llmsim.cli import main

L4_QWEN = Hardware(0.494, "l4", kv_bytes_per_token=12288)
ROWS = [SweepRow(c, None, 256, 128, ttft, itl, rps, e2e) for c, ttft, itl, rps, e2e in
        ((1, 27.0, 5.1, 1.3, 679), (4, 50.1, 5.3, 5.4, 722), (16, 103.8, 6.0, 17.8, 880), (32, 135.3, 7.1, 29.5, 1082))]


def test_a_fit_frees_no_more_numbers_than_it_has_rows_and_says_which() -> None:
    assert [free_parameters(n) for n in (0, 1, 2, 3, 8, 20)] == [2, 2, 2, 3, 7, 7]
    one = calibrate(ROWS[1:2], hardware=L4_QWEN)
    assert len(one.fitted) == 2  # what this row says most about (its Jacobian's largest columns)
    assert set(one.from_priors) == {p.name for p in PARAMETERS} - set(one.fitted)
    model = ServingModel.for_rows(L4_QWEN, ROWS[1:2])
    for name in one.from_priors:  # left where the priors put them
        assert one.efficiencies[name] == pytest.approx(model.prior(name))
    assert one.config.max_num_batched_tokens == default_budget(L4_QWEN) == 2048  # a 24 GB GPU: vLLM's 2,048
    assert len(calibrate(ROWS, hardware=L4_QWEN, budgets=(2048,)).fitted) == 4


def test_the_default_budget_is_what_vllm_gives_the_device() -> None:
    """vLLM's online server where ``--max-num-batched-tokens`` is not given (``EngineArgs.get_batch_defaults``):
    8,192 on a device of 70 GiB or more that is not an A100 (a large budget cost the A100 throughput), else 2,048;
    TPUs v6e, v5e and v5p by chip."""
    def budget(gpu: str) -> int:
        return default_budget(Hardware(8.0, gpu))

    assert [budget(gpu) for gpu in ("h100", "h200", "mi300x", "b200")] == [8192] * 4
    assert budget("a100") == budget("NVIDIA A100-SXM4-80GB") == 2048  # 80 GB, but an A100
    assert [budget(gpu) for gpu in ("l4", "l40s", "a10", "rtx4090", "v100")] == [2048] * 5
    assert [budget(gpu) for gpu in ("tpu-v6e", "tpu-v5e", "tpu-v5p")] == [1024, 512, 256]


def test_a_fit_frees_what_its_rows_say_something_about() -> None:
    """Rows with only their ITL (memory-bound decodes) say nothing of compute or the API server: the two numbers
    freed are the decode step's."""
    itl_only = [SweepRow(c, None, 256, 128, None, itl) for c, itl in ((4, 5.3), (16, 6.0))]
    fit = calibrate(itl_only, hardware=L4_QWEN, budgets=(2048,))
    assert len(fit.fitted) == 2
    assert not {"compute_efficiency", "request_overhead", "request_serial", "step_prefill_base"} & set(fit.fitted)


def test_scaled_priors_follow_the_lightest_row_and_fall_back_to_seconds() -> None:
    model = ServingModel.for_rows(L4_QWEN, ROWS, {"step_overhead": 0.5, "step_overhead_seconds": 0.007})
    assert model.prior("step_overhead") == pytest.approx(0.5 * 5.1e-3)  # half the lightest row's ITL
    alone = ServingModel.for_rows(L4_QWEN, [], {"step_overhead": 0.5, "step_overhead_seconds": 0.007})
    assert alone.prior("step_overhead") == pytest.approx(0.007)  # no row: the prior in seconds
    shipped = ServingModel.for_rows(L4_QWEN, [])  # no row, none given: reads of the weights at peak bandwidth
    assert shipped.prior("step_overhead") == pytest.approx(0.49 * 0.494e9 * 2 / 300e9)  # a lean stack's
    assert ServingModel.for_rows(L4_QWEN, [], {"step_overhead_reads": 2.0}).prior("step_overhead") == (
        pytest.approx(2 * weights_read(L4_QWEN)))
    kept = model.as_priors({"step_overhead": 2.55e-3, "memory_efficiency": 0.6})
    assert kept == pytest.approx({"step_overhead": 0.5, "step_overhead_seconds": 2.55e-3, "memory_efficiency": 0.6,
                                  "step_overhead_reads": 2.55e-3 / weights_read(L4_QWEN)})


def test_without_rows_host_time_per_sequence_is_a_share_of_the_priors_lone_itl() -> None:
    """No row to take a share of: the host's time per decoding sequence is its share of the lone ITL the priors
    predict (one sequence's read at the prior bandwidth, and the fixed cost), so a 0.5 B model's is a fraction
    of an 8 B model's (one figure in seconds for both had a tiny model's ITL at 32 streams 2.7x its own)."""
    small = ServingModel.for_rows(L4_QWEN, [])
    large = ServingModel.for_rows(Hardware(8.03, "a100", kv_bytes_per_token=131072), [])
    for model in (small, large):
        lone = weights_read(model.hardware) / model.default("memory_efficiency") + model.prior("step_overhead")
        assert model.priors_lone_itl() == pytest.approx(lone)
        assert model.prior("step_per_decode_seq") == pytest.approx(model.default("step_per_decode_seq") * lone)
    assert small.prior("step_per_decode_seq") < large.prior("step_per_decode_seq") / 2
    given = ServingModel.for_rows(L4_QWEN, [], {"step_per_decode_seq": 0.02, "step_per_decode_seq_seconds": 1e-3})
    assert given.prior("step_per_decode_seq") == pytest.approx(0.02 * given.priors_lone_itl())


def test_a_mixture_of_experts_starts_from_the_priors_of_its_kind() -> None:
    """The shipped priors differ by kind: the development sweeps' mixtures of experts reach a far smaller share of
    the peaks than their dense models (20x in compute) and carry more fixed time per step."""
    dense = ServingModel.for_rows(Hardware(8.0, "h100", kv_bytes_per_token=131072), [])
    moe = ServingModel.for_rows(Hardware(355, "gaudi3", 8, active_params=32, experts=160, experts_per_token=8), [])
    assert moe.prior("compute_efficiency") < dense.prior("compute_efficiency") / 5
    assert moe.prior("memory_efficiency") < dense.prior("memory_efficiency")
    assert moe.prior("step_overhead") > dense.prior("step_overhead")  # in seconds: no row to take a share of
    given = ServingModel.for_rows(moe.hardware, [], {"compute_efficiency": 0.3})
    assert given.prior("compute_efficiency") == 0.3  # priors given win over either kind's


def test_the_compute_efficiency_goes_by_the_models_kind_and_the_devices_stack() -> None:
    """The development sweeps on MI300X and Gaudi 3 reached a smaller share of peak compute than those on NVIDIA's
    and the TPU's stacks, dense models (0.22 against 0.60-0.94) and mixtures (0.03-0.05 against 0.08) alike: a
    dense model on MI300Xs starts from neither the H100's 60 % nor the mixtures' few per cent."""
    def dense(gpu: str) -> float:
        return ServingModel.for_rows(Hardware(405.0, gpu, 8), []).prior("compute_efficiency")

    def mixture(gpu: str) -> float:
        hardware = Hardware(671.0, gpu, 8, active_params=37.0, experts=256, experts_per_token=8)
        return ServingModel.for_rows(hardware, []).prior("compute_efficiency")

    assert dense("mi300x") == pytest.approx(dense("h100") * 0.36)
    assert mixture("mi300x") == pytest.approx(mixture("tpu-v7") * 0.36)
    assert mixture("mi300x") < dense("mi300x") / 5  # the kinds still differ on one stack
    assert dense("gaudi3") == pytest.approx(dense("mi300x"))


def test_scaled_priors_are_shares_of_a_lone_streams_itl() -> None:
    """An open loop's lightest rate decodes many sequences at once (Little's law: arrivals times each request's
    time): the fixed costs' priors are shares of what one sequence alone would see, not of that loaded ITL."""
    a100 = Hardware(8.03, "a100", kv_bytes_per_token=131072)
    loaded = SweepRow(None, 10.0, 280, 310, 80.0, 49.0, num_prompts=300)
    lone = SweepRow(1, None, 280, 310, 30.0, 12.0)
    assert in_flight(loaded) == pytest.approx(10 * (0.080 + 0.049 * 310))  # ~153 sequences
    assert in_flight(SweepRow(None, 50.0, 280, 310, 80.0, 49.0, num_prompts=30)) == 30  # at most the prompts
    assert lone_itl(a100, lone, 0.9, 0.01) == pytest.approx(0.012)  # alone already
    assert 0.2 * 0.049 <= lone_itl(a100, loaded, 0.9, 0.01) < 0.049 / 2
    model = ServingModel.for_rows(a100, [loaded])
    assert model.prior("step_overhead") < model.default("step_overhead") * 0.049 / 2
    # a short prompt's TTFT is mostly waiting: the compute efficiency starts at its kind's prior, not below
    assert model.prior("compute_efficiency") == pytest.approx(model.default("compute_efficiency"))


def test_the_api_servers_prior_is_a_share_of_a_lone_requests_ttft() -> None:
    """The DeepSeek-R1 sweeps' 16 clients of 3,200-token prompts wait 4.9 s for a first token, most of it behind
    the others' prefills: the API server's time is a share of what one request alone would wait (its prefill and
    a step), not of that; a lone row's own TTFT stands as it is."""
    mi300x = Hardware(671, "mi300x", tp=8, active_params=37, dtype="fp8", kv_bytes_per_token=562176, experts=256,
                      experts_per_token=8)
    loaded = SweepRow(16, None, 3200, 800, 4890.0, 54.8)
    model = ServingModel.for_rows(mi300x, [loaded])
    assert model.light["ttft"] == pytest.approx(lone_ttft(mi300x, loaded, model.light["itl"],
                                                          model.default("compute_efficiency"),
                                                          model.default("request_overhead")))
    assert model.light["ttft"] < 4.89 / 5
    assert model.prior("request_overhead") < model.default("request_overhead") * 4.89 / 5
    lone = SweepRow(1, None, 3200, 800, 900.0, 40.0)
    assert lone_ttft(mi300x, lone, 0.04, 0.05, 0.07) == 0.9
    assert ServingModel.for_rows(mi300x, [lone]).light["ttft"] == 0.9
    quick = SweepRow(2, None, 256, 128, 8.0, 5.2)  # loaded, but no slower than a lone prefill and step: its own
    l4 = Hardware(0.494, "l4", kv_bytes_per_token=12288)
    assert lone_ttft(l4, quick, 0.005, 0.6, 0.074) == pytest.approx(0.008)


def test_a_device_is_found_by_the_names_people_write() -> None:
    """``--gpu`` as a sweep's source writes it: case, spaces, hyphens and vendor words aside; a variant word only
    where the table's entry is that variant (its A100 is the 80 GB SXM, not the 40 GB or a PCIe card)."""
    for name, key in (("NVIDIA A100-SXM4-80GB", "a100"), ("H100 SXM5", "h100"), ("GeForce RTX 4090", "rtx4090"),
                      ("Intel Gaudi 3", "gaudi3"), ("AMD Instinct MI300X", "mi300x"), ("TPU7x", "tpu-v7"),
                      ("Ascend-910B", "ascend910b"), ("rtx a6000", "a6000"), ("L40S", "l40s"), ("L40", "l40"),
                      ("TPU v6e", "tpu-v6e"), ("Trillium", "tpu-v6e"), ("v5litepod", "tpu-v5e"),
                      ("TPU v5p", "tpu-v5p"), ("Intel Gaudi 2", "gaudi2"), ("GB200", "gb200"),
                      ("AMD Instinct MI250X", "mi250x"), ("NVIDIA H800 SXM5", "h100"), ("A800-SXM4-80GB", "a100")):
        assert device_key(name) == key, name
        assert Hardware(8.0, name).device == GPUS[key]
    for variant in ("a100-40gb", "H100 PCIe"):
        with pytest.raises(ValueError, match="for another variant give --flops, --bandwidth and --memory"):
            device_key(variant)
    with pytest.raises(ValueError, match="known: v100, a100"):
        Hardware(8.0, "tpu9")


def test_the_kv_cache_is_the_devices_memory_less_the_weights() -> None:
    nim = Hardware(70.6, "h100", 2, dtype="fp8", kv_bytes_per_token=163840)
    tokens = nim.kv_capacity_tokens(0.9)
    assert tokens == pytest.approx((2 * 80e9 * 0.9 - 70.6e9) / 163840)
    config = ServingModel.for_rows(nim, ROWS).config(SimConfig(), [math.log(0.5), math.log(0.3)])
    assert config.kv_cache_blocks == int(tokens // 16)
    assert Hardware(8, flops=1e15, bandwidth=2e12, kv_bytes_per_token=1000).kv_capacity_tokens(0.9) is None
    given = Hardware(8, flops=1e15, bandwidth=2e12, kv_bytes_per_token=1000, memory=32e9)  # a device not listed
    assert given.kv_capacity_tokens(0.9) == pytest.approx((32e9 * 0.9 - 16e9) / 1000)
    assert Hardware(8, "a40", memory=24e9).kv_capacity_tokens(0.9) is None  # no KV bytes: no capacity
    assert Hardware(8, "a40", memory=24e9).device.memory == 24e9 and Hardware(8, "a40").device.memory == 48e9
    with pytest.raises(ValueError, match="memory"):
        Hardware(8, "a40", memory=-1.0)
    # an FP8 model computes at the device's FP8 peak
    assert nim.costs(1.0, 1.0)["step_compute_per_token"] == pytest.approx(2 * 70.6e9 / (2 * 1979e12))
    # FP4 at the FP4 peak where the device has one (Blackwell, CDNA 4), else FP8's (Hopper); MX's scales are read
    assert GPUS["b200"].peak("nvfp4") == 9000e12 and GPUS["mi355x"].peak("mxfp4") == 10000e12
    assert GPUS["h100"].peak("fp4") == 1979e12 and GPUS["a100"].peak("fp4") == 312e12
    gpt_oss = Hardware(120, "b200", dtype="mxfp4")
    assert gpt_oss.costs(1.0, 1.0)["step_base"] == pytest.approx(120e9 * 4.25 / 8 / 8e12)
    # integer weights: weight-only types (w8a16, w4a16, and int8/int4) compute at the 16-bit peak; w8a8 at the
    # device's INT8 peak (Ampere's tensor cores: twice the 16-bit one; Hopper's: FP8's rate)
    a100_w8a8 = Hardware(8.03, "a100", dtype="w8a8").costs(1.0, 1.0)
    assert a100_w8a8["step_compute_per_token"] == pytest.approx(2 * 8.03e9 / 624e12)
    assert a100_w8a8["step_base"] == pytest.approx(8.03e9 / 2.039e12)
    w4a16 = Hardware(8.03, "a100", dtype="w4a16").costs(1.0, 1.0)
    assert w4a16["step_compute_per_token"] == pytest.approx(2 * 8.03e9 / 312e12)
    assert w4a16["step_base"] == pytest.approx(8.03e9 * 0.5 / 2.039e12)
    assert GPUS["h100"].peak("w8a8") == 1979e12 and GPUS["h100"].peak("w8a16") == GPUS["h100"].peak("int8") == 989e12
    assert GPUS["gaudi3"].peak("w8a8") == 1835e12  # no INT8 figure: the 16-bit peak
    assert GPUS["gb200"].peak("nvfp4") == 10000e12 and GPUS["gaudi2"].peak("fp8") == 865e12
    assert GPUS["tpu-v6e"].peak("fp8") == 918e12  # no FP8 peak listed: the 16-bit one
    for name in ("tpu-v7", "mi325x", "v100", "ascend910b", "tpu-v5e", "tpu-v5p", "tpu-v6e", "gaudi2", "gb200",
                 "l40", "mi250x"):
        assert GPUS[name].memory and GPUS[name].bandwidth and GPUS[name].source


def test_a_burst_is_one_wave_counted_until_its_last_answer() -> None:
    told = Benchmark(load="burst", output_tokens=60).rows([SweepRow(64, None, 80, 0)])
    assert told[0].num_prompts == 64 and told[0].output_tokens == 60
    with pytest.raises(ValueError, match="concurrency"):
        Benchmark(load="burst").rows([SweepRow(None, 2.0, 80, 60)])
    with pytest.raises(ValueError, match="unknown benchmark key"):
        Benchmark.from_mapping({"clients": 3})
    config = SimConfig().replace(scheduler="step", step_base=0.01, step_compute_per_token=1e-5)
    burst = predict_row(config, told[0])
    loop = predict_row(config, SweepRow(64, None, 80, 60))  # 640 requests by 64 clients
    assert burst.req_per_s is not None and loop.req_per_s is not None
    assert burst.req_per_s < loop.req_per_s  # the burst's ramp and drain are all it has


def test_means_are_predicted_where_the_source_reports_means() -> None:
    config = SimConfig().replace(scheduler="step", step_base=0.01, step_compute_per_token=2e-4, jitter=0.3)
    row = SweepRow(32, None, 512, 64)
    median, mean = predict(config, [row, Benchmark(statistic="mean").rows([row])[0]])
    assert mean.ttft_p50_ms != median.ttft_p50_ms and mean.itl_p50_ms != median.itl_p50_ms


def test_a_prediction_outside_the_fitted_range_warns_with_a_wider_band(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    sweep = tmp_path / "sweep.csv"
    sweep.write_text("concurrency,input_tokens,output_tokens,ttft_p50_ms,itl_p50_ms,req_per_s,e2e_p50_ms\n"
                     + "".join(f"{r.concurrency},256,128,{r.ttft_p50_ms},{r.itl_p50_ms},{r.req_per_s},"
                               f"{r.e2e_p50_ms}\n" for r in ROWS[:2]))
    profile = tmp_path / "profile.toml"
    assert main(["calibrate", str(sweep), "--gpu", "l4", "--params", "0.494", "--kv-bytes-per-token", "12288",
                 "--jobs", "1", "-o", str(profile)]) == 0
    err = capsys.readouterr().err
    assert "llmsim calibrate: fitted: " in err and "llmsim calibrate: from priors: " in err
    fitted = fitted_range_of(str(profile))
    assert fitted == FittedRange((1, 4), None, (256, 256), (128, 128))
    SimConfig().replace(profile=str(profile))  # the [calibration] table is not a setting
    assert main(["predict", "--config", str(profile), "--concurrency", "2,64", "--input", "256", "--output", "128",
                 "--plot", str(tmp_path / "plot.svg")]) == 0
    out, err = capsys.readouterr()
    inside, outside = out.strip().splitlines()[2:]
    assert BANDS["inside"]["itl_p50_ms"] != BANDS["outside"]["itl_p50_ms"]
    assert f"±{BANDS['inside']['itl_p50_ms']:.0%}" in inside and f"±{BANDS['outside']['itl_p50_ms']:.0%}" in outside
    assert "concurrency 64 is outside" in err and "concurrency 2 " not in err
    assert "<polygon" in (tmp_path / "plot.svg").read_text()
    assert main(["predict", "--config", str(profile), "--burst", "8,512", "--input", "256", "--output", "128"]) == 0
    out, err = capsys.readouterr()
    assert "| burst 8 |" in out and "burst 512 is outside" in err
    assert "missed its own rows" not in err  # a fit that reaches its rows widens nothing
    text = profile.read_text().replace("output_tokens = [128, 128]\n", "output_tokens = [128, 128]\n"
                                       'missed = { itl_p50_ms = 0.5, ttft_p50_ms = "far", req_per_s = -1 }\n')
    profile.write_text(text)  # edited by hand: what is not a share of 0 or more is left out
    assert fitted_range_of(str(profile)) == FittedRange((1, 4), None, (256, 256), (128, 128),
                                                        missed={"itl_p50_ms": 0.5})


def test_the_svg_band_spans_the_prediction() -> None:
    rows = [SweepRow(c, None, 10, 10, 100.0, 10.0, 1.0, 1000.0) for c in (1, 2)]
    assert "<polygon" in render_svg(rows, bands=[BANDS["inside"], BANDS["outside"]])
    assert "<polygon" not in render_svg(rows)


def test_calibrate_is_told_a_burst_and_its_mean_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A burst sweep whose answers stopped at EOS leaves the output length out: refused until it is told."""
    sweep = tmp_path / "burst.csv"
    sweep.write_text("concurrency,input_tokens,output_tokens,ttft_p50_ms,itl_p50_ms,req_per_s\n"
                     "1,80,,30.0,6.0,2.5\n8,80,,60.0,6.5,14.0\n")
    with pytest.raises(SystemExit):
        main(["calibrate", str(sweep), "--load", "burst", "--gpu", "l4", "--params", "0.494", "--jobs", "1"])
    assert "--output-tokens" in capsys.readouterr().err
    profile = tmp_path / "burst.toml"
    assert main(["calibrate", str(sweep), "--load", "burst", "--output-tokens", "56", "--gpu", "l4", "--params",
                 "0.494", "--kv-bytes-per-token", "12288", "--policy", "prefill_first", "--no-chunked-prefill",
                 "--separate-prefill-pass", "--jobs", "1", "-o", str(profile)]) == 0
    text = profile.read_text()
    assert 'step_policy = "prefill_first"' in text and "| burst 8 | 80 | 56 |" in text
    assert "chunked_prefill = false" in text  # the server's prompts whole, as it was fitted
    assert "separate_prefill_pass = true" in text  # ... and in a pass of their own
    loaded = SimConfig().replace(profile=str(profile))
    assert loaded.step_policy == "prefill_first" and loaded.chunked_prefill is False
    assert loaded.separate_prefill_pass is True


@pytest.mark.parametrize(("told", "policy", "chunked", "separate"), [
    (["--engine", "tensorrt-llm"], "mixed", False, False),
    (["--engine", "vllm-gaudi"], "mixed", True, True),
    (["--engine", "vllm-v0"], "prefill_first", False, False),
    (["--engine", "sglang", "--policy", "mixed"], "mixed", True, False),  # a flag beside it wins
    ([], "mixed", True, False),  # vLLM V1's, as before
])
def test_calibrate_told_the_engine_composes_steps_as_it_does(tmp_path: Path, told: list[str], policy: str,
                                                             chunked: bool, separate: bool) -> None:
    """``--engine`` sets how the measured server composes a step (``calibration.engines.ENGINES``), and the
    profile says so."""
    sweep = tmp_path / "sweep.csv"
    sweep.write_text("concurrency,input_tokens,output_tokens,ttft_p50_ms,itl_p50_ms,req_per_s\n"
                     "1,256,64,30.0,6.0,2.5\n8,256,64,60.0,6.5,14.0\n")
    profile = tmp_path / "profile.toml"
    assert main(["calibrate", str(sweep), "--gpu", "l4", "--params", "0.494", "--kv-bytes-per-token", "12288",
                 *told, "--jobs", "1", "-o", str(profile)]) == 0
    loaded = SimConfig().replace(profile=str(profile))
    assert (loaded.step_policy, loaded.chunked_prefill, loaded.separate_prefill_pass) == (policy, chunked, separate)


def test_calibrate_refuses_an_engine_it_does_not_know(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["calibrate", "--engine", "llama.cpp", "--gpu", "l4", "--params", "0.494"])
    err = capsys.readouterr().err
    assert "llama.cpp" in err and "tensorrt-llm" in err and "vllm-gaudi" in err


def test_the_worst_fitted_value_beyond_the_margin_is_named() -> None:
    measured = [SweepRow(1, None, 256, 128, 30.0, 5.0, 1.0), SweepRow(8, None, 256, 128, 60.0, 6.0, 7.0)]
    near = [SweepRow(1, None, 256, 128, 33.0, 5.5, 1.1), SweepRow(8, None, 256, 128, 66.0, 6.6, 6.3)]
    assert unreached(near, measured) is None  # every value within 20 %
    far = [near[0], SweepRow(8, None, 256, 128, 66.0, 4.2, 9.0)]  # ITL -30 %, req/s +29 %
    assert unreached(far, measured) == (measured[1], "itl_p50_ms", pytest.approx(-0.3))
    assert unreached(far, measured, margin=0.5) is None


def test_calibrate_says_when_the_numbers_it_freed_do_not_reach_its_rows(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two rows free two numbers and leave five at their priors: where no pair reaches the rows (here an ITL
    that falls as the batch grows, which no step cost gives), the fit's own rows are missed by tens of per cent.
    It says so, on stderr and in the profile, naming the row and metric; a fit that reaches its rows says
    nothing."""
    sweep = tmp_path / "sweep.csv"
    sweep.write_text("concurrency,input_tokens,output_tokens,ttft_p50_ms,itl_p50_ms,req_per_s\n"
                     "1,256,128,27.0,6.0,1.2\n64,256,128,30.0,3.0,60.0\n")
    hardware = ["--gpu", "l4", "--params", "0.494", "--kv-bytes-per-token", "12288", "--jobs", "1"]
    profile = tmp_path / "profile.toml"
    assert main(["calibrate", str(sweep), *hardware, "-o", str(profile)]) == 0
    err = capsys.readouterr().err
    assert "do not reach the rows given: concurrency 64 ITL p50 ms" in err, err
    assert "# warning: the 2 numbers freed do not reach the rows given" in profile.read_text()
    reached = tmp_path / "reached.csv"
    reached.write_text("concurrency,input_tokens,output_tokens,ttft_p50_ms,itl_p50_ms,req_per_s,e2e_p50_ms\n"
                       + "".join(f"{c},256,128,{ttft},{itl},{rps},{e2e}\n" for c, ttft, itl, rps, e2e in (
                           (1, 27.0, 5.1, 1.3, 679), (4, 50.1, 5.3, 5.4, 722))))
    assert main(["calibrate", str(reached), *hardware]) == 0
    assert "do not reach" not in capsys.readouterr().err
    # the profile keeps how far its fit missed its rows; llmsim predict's bands are at least that, and it says so
    fitted = fitted_range_of(str(profile))
    assert fitted is not None and fitted.missed["itl_p50_ms"] > 1.0 > UNREACHED
    assert fitted.band(SweepRow(8, None, 256, 128))["itl_p50_ms"] == fitted.missed["itl_p50_ms"]
    assert fitted.band(SweepRow(8, None, 256, 128))["e2e_p50_ms"] == BANDS["inside"]["e2e_p50_ms"]
    assert main(["predict", "--config", str(profile), "--concurrency", "8", "--input", "256", "--output", "128"]) == 0
    out, err = capsys.readouterr()
    assert f"±{fitted.missed['itl_p50_ms']:.0%}" in out
    assert "the profile's fit missed its own rows by up to" in err


def test_calibrate_without_a_sweep_writes_a_profile_from_the_priors(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """No rows, hardware given: the serving model at its priors, loadable and predicting; no hardware: refused."""
    with pytest.raises(SystemExit):
        main(["calibrate"])
    assert "hardware priors" in capsys.readouterr().err
    profile = tmp_path / "priors.toml"
    assert main(["calibrate", "--gpu", "a100", "--params", "8.03", "--kv-bytes-per-token", "131072",
                 "--policy", "prefill_first", "--budget", "4096", "--itl-per", "request", "-o", str(profile)]) == 0
    assert "fitted: none" in capsys.readouterr().err
    assert told_of(str(profile)) == {"itl_per": "request"}  # the benchmark it is to predict, told without a sweep
    config = SimConfig().replace(profile=str(profile))
    expected = from_priors(Hardware(8.03, "a100", kv_bytes_per_token=131072), budget=4096)
    assert config.step_base == pytest.approx(expected.step_base, rel=1e-5)
    assert config.step_policy == "prefill_first" and config.max_num_batched_tokens == 4096
    assert config.kv_cache_blocks == expected.kv_cache_blocks
    (row,) = predict(config, [SweepRow(1, None, 280, 64)])
    assert row.itl_p50_ms and 5 < row.itl_p50_ms < 100  # an A100 reading 16 GB a step, and its fixed costs
    assert fitted_range_of(str(profile)) == FittedRange.nothing()  # nothing fitted: every row outside, wide bands
    assert main(["predict", "--config", str(profile), "--concurrency", "1", "--input", "280", "--output", "64"]) == 0
    out, err = capsys.readouterr()
    assert f"±{BANDS['priors']['ttft_p50_ms']:.0%}" in out and "a profile from priors alone" in err


def test_predict_runs_the_benchmark_the_profile_was_fitted_to(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """What calibrate was told of the sweep's benchmark (means of TPOT, EOS-stopped lengths, prompts per level, the
    clients' own time) is in the profile, and ``predict --config`` runs it unless a flag says otherwise: a profile
    fitted to means predicted medians before, unless the user repeated every flag."""
    sweep = tmp_path / "closed.csv"
    sweep.write_text("concurrency,input_tokens,output_tokens,ttft_p50_ms,itl_p50_ms,req_per_s\n"
                     "1,256,128,30.0,5.4,1.3\n8,256,128,66.0,6.0,9.8\n")
    profile = tmp_path / "closed.toml"
    hardware = ["--gpu", "l4", "--params", "0.494", "--kv-bytes-per-token", "12288", "--jobs", "1"]
    assert main(["calibrate", str(sweep), *hardware, "-o", str(profile)]) == 0  # told nothing: says what it assumed
    err = capsys.readouterr().err
    assert "a closed-loop row says no prompt count; simulated as 10 requests per client" in err
    assert "token budget (max_num_batched_tokens) 2048: the device's default" in err  # not "given": it was not
    assert told_of(str(profile)) == {"load": "closed"}  # the rows' kind, so a prompt count told later has a load
    told = ["--statistic", "mean", "--itl-per", "request", "--output-spread", "0.4", "--num-prompts", "40"]
    assert main(["calibrate", str(sweep), "--load", "closed", *told, "--gpu", "l4", "--params", "0.494",
                 "--kv-bytes-per-token", "12288", "--budget", "2048", "--jobs", "1", "-o", str(profile)]) == 0
    err = capsys.readouterr().err
    assert "--statistic mean" in err and "prompt count" not in err and "2048: given" in err
    assert told_of(str(profile)) == {"load": "closed", "num_prompts": 40, "itl_per": "request",
                                     "statistic": "mean", "output_spread": 0.4}
    loads = ["predict", "--config", str(profile), "--concurrency", "1,8", "--input", "256", "--output", "128"]
    assert main(loads) == 0
    by_default, err = capsys.readouterr()
    assert "as the benchmark the profile was fitted to" in err
    assert main([*loads, *told]) == 0
    assert capsys.readouterr().out == by_default  # the same as every flag repeated
    assert main([*loads, "--statistic", "median"]) == 0
    assert capsys.readouterr().out != by_default  # a flag of the user's own wins
    compare = ["predict", "--config", str(profile), "--compare", str(sweep)]  # the sweep's rows say no count
    assert main(compare) == 0
    compared = capsys.readouterr().out
    assert main([*compare, *told]) == 0 and capsys.readouterr().out == compared
    assert main([*compare, "--num-prompts", "8"]) == 0 and capsys.readouterr().out != compared
    # a hand-edited table: what is not of its kind is left out, the rest kept
    edited = tmp_path / "edited.toml"
    edited.write_text(profile.read_text().replace('statistic = "mean"', 'statistic = "mode"').replace(
        "num_prompts = 40", "num_prompts = -3"))
    assert told_of(str(edited)) == {"load": "closed", "itl_per": "request", "output_spread": 0.4}
    assert SimConfig().replace(profile=str(edited)).step_policy == "mixed"  # still loads as a profile


def test_a_fit_is_searched_with_the_clients_own_time_it_predicts_with() -> None:
    """The L4 sweep's clients wait ~90 ms between requests (its req/s beside its E2E say so). The search
    simulated clients that never wait, then predicted with the time they do: its two end rows' TTFT came out 20
    and 15 % off the very rows it fitted (the middle rows' ~19 %). Searched again with that time, the fit holds
    its own rows."""
    from pytest_llmsim.calibration import read_sweep
    from pytest_llmsim.sim.profiles import PROFILES_DIR

    rows = read_sweep(PROFILES_DIR / "qwen2.5-0.5b-l4.csv")
    ends = [rows[0], rows[-1]]
    fit = calibrate(ends, hardware=Hardware(params=0.494, gpu="l4", kv_bytes_per_token=12288))
    assert fit.client_gap_ms is not None and fit.client_gap_ms > 30
    assert all(abs(error["ttft_p50_ms"]) < 0.05 for error in fit.row_errors()), fit.row_errors()


def test_the_fixed_cost_per_step_and_the_bandwidth_reached_go_by_the_devices_stack() -> None:
    """Over the development sweeps NVIDIA's and the TPU's stacks spent 0.5-0.8 weight reads per step beside the
    reads, the MI300X's and Gaudi 3's 1.4-2.6, dense models and mixtures alike. The bandwidth reached goes by the
    stack and the kind: on the lean stacks dense models reached 82-96 % of peak, the mixture 77-81 %; on the
    others each kind about three quarters of that (69-74 % dense, 60-67 % mixtures). A mixture of experts on
    H100s got the MI300X mixtures' priors (the TPU v7 sweep's priors-alone ITL was 218 % off); a dense model on
    MI300Xs got NVIDIA's."""
    mixture = {"params": 397.0, "active_params": 17.0, "experts": 512, "experts_per_token": 10, "dtype": "fp8"}
    for device, mixture_of_experts, reads, bandwidth in (
            ("h100", True, 0.49, 0.80), ("tpu-v7", True, 0.49, 0.80), ("mi300x", True, 1.88, 0.80 * 0.755),
            ("mi300x", False, 1.88, 0.93 * 0.755), ("a100", False, 0.49, 0.93)):
        hardware = Hardware(gpu=device, tp=8, **(mixture if mixture_of_experts else {"params": 70.0}))
        model = ServingModel.for_rows(hardware, [], None)
        assert model.prior("step_overhead") / weights_read(hardware) == pytest.approx(reads), device
        assert model.default("memory_efficiency") == pytest.approx(bandwidth), device
        assert model.default("compute_efficiency") == pytest.approx(
            (0.087 if mixture_of_experts else 0.68) * (1.0 if hardware.lean_stack else 0.36))
        # with a row, the fixed cost is a share of its ITL: a mixture's larger share goes by the kind
        assert model.default("step_overhead") == pytest.approx(0.89 if mixture_of_experts else 0.40)
    assert Hardware(flops=1e15, bandwidth=3e12, params=8.0).lean_stack
