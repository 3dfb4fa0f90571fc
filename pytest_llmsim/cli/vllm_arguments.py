"""``vllm serve``'s command line (and llm-d-inference-sim's) on ``llmsim serve``.

A compose file, chart or script written for vLLM or llm-d-inference-sim runs this backend with only the
program or image changed. Three kinds of flag:

- the ones with a meaning here: settings' own names and their declared aliases (``--max-num-seqs`` is
  ``max_batch_size``, :mod:`pytest_llmsim.sim.config`), and the ones this module reads: the positional
  ``MODEL``, ``--served-model-name``, ``--lora-modules``, ``--enable-prefix-caching``,
  ``--enable-chunked-prefill``, ``--api-key``,
  llm-d-inference-sim's latencies in milliseconds, ``--mode``, ``--failure-injection-rate`` and
  ``--failure-types``;
- the ones that shape nothing a simulator has (``--dtype``, ``--tensor-parallel-size``, ...,
  :mod:`.vllm_flags`): accepted, each with its value, and listed in one warning line;
- any other: refused by argparse, naming it.

``--config FILE.yaml`` reads a YAML file of those flags (vLLM's and llm-d-inference-sim's format: a
mapping of flag names, with or without dashes, to values) as if given before the command line's own.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .vllm_flags import (
    SHORT_WITHOUT_EFFECT_SWITCHES,
    SHORT_WITHOUT_EFFECT_VALUES,
    VLLM_RELEASE,
    WITHOUT_EFFECT_SWITCHES,
    WITHOUT_EFFECT_VALUES,
)

__all__ = ["VLLM_RELEASE", "add_vllm_arguments", "is_yaml_config", "vllm_settings", "yaml_config_arguments"]

#: llm-d-inference-sim's failure types, as this backend's fault kinds (``invalid_request`` is a 400).
FAILURE_KINDS: dict[str, tuple[str, dict[str, Any]]] = {
    "rate_limit": ("rate_limit", {}),
    "invalid_api_key": ("invalid_api_key", {}),
    "context_length": ("context_length", {}),
    "server_error": ("server_error", {}),
    "model_not_found": ("model_not_found", {}),
    "invalid_request": ("http_error", {"status": 400}),
}

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ns|us|µs|ms|s|m|h)?\s*$")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def milliseconds(text: str) -> float:
    """llm-d-inference-sim's latency: milliseconds as a number, or a Go duration (``250ms``, ``1.5s``);
    in seconds."""
    match = _DURATION.match(text)
    if match is None:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r} (milliseconds, or a duration such as 250ms)")
    number, unit = match.groups()
    return float(number) * (_UNIT_SECONDS[unit] if unit else 1e-3)


class _WithoutEffect(argparse.Action):
    """A flag that shapes nothing here: remember its name for the warning."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        names = getattr(namespace, self.dest) or []
        if option_string not in names:
            names.append(option_string)
        setattr(namespace, self.dest, names)


def add_vllm_arguments(serve: argparse.ArgumentParser) -> None:
    """Add vLLM's and llm-d-inference-sim's flags to ``llmsim serve``'s parser (hidden from ``--help``,
    which points at the docs)."""
    hidden = argparse.SUPPRESS
    serve.add_argument("model_tag", nargs="?", default=None, metavar="MODEL",
                       help="The model name to serve, as vLLM's positional MODEL (same as --model)")
    serve.add_argument("--served-model-name", dest="vllm_served_names", nargs="+", default=None, help=hidden)
    serve.add_argument("--lora-modules", dest="vllm_lora_modules", nargs="+", action="extend", default=None,
                       help=hidden)
    serve.add_argument("--enable-prefix-caching", dest="vllm_prefix_caching", action=argparse.BooleanOptionalAction,
                       default=None, help=hidden)
    serve.add_argument("--enable-lora", dest="vllm_enable_lora", action=argparse.BooleanOptionalAction,
                       default=None, help=hidden)
    serve.add_argument("--enable-chunked-prefill", dest="vllm_chunked_prefill", action=argparse.BooleanOptionalAction,
                       default=None, help=hidden)
    serve.add_argument("--api-key", dest="vllm_api_keys", nargs="+", action="extend", default=None, help=hidden)
    serve.add_argument("--uvicorn-log-level", dest="vllm_log_level", default=None, help=hidden,
                       choices=("critical", "debug", "error", "info", "trace", "warning"))
    serve.add_argument("--time-to-first-token", dest="llmd_ttft", type=milliseconds, default=None, help=hidden)
    serve.add_argument("--inter-token-latency", dest="llmd_itl", type=milliseconds, default=None, help=hidden)
    serve.add_argument("--prefill-time-per-token", dest="llmd_prefill", type=milliseconds, default=None,
                       help=hidden)
    serve.add_argument("--time-to-first-token-std-dev", dest="llmd_ttft_std", type=milliseconds, default=None,
                       help=hidden)
    serve.add_argument("--inter-token-latency-std-dev", dest="llmd_itl_std", type=milliseconds, default=None,
                       help=hidden)
    serve.add_argument("--mode", dest="llmd_mode", choices=("echo", "random"), default=None, help=hidden)
    serve.add_argument("--failure-injection-rate", dest="llmd_failure_rate", type=float, default=None, help=hidden)
    serve.add_argument("--failure-types", dest="llmd_failure_types", nargs="+", action="extend", default=None,
                       choices=tuple(FAILURE_KINDS), help=hidden)
    for name in sorted(WITHOUT_EFFECT_VALUES):
        serve.add_argument(f"--{name}", dest="vllm_without_effect", action=_WithoutEffect, help=hidden)
    for name in sorted(WITHOUT_EFFECT_SWITCHES):
        serve.add_argument(f"--{name}", f"--no-{name}", dest="vllm_without_effect", action=_WithoutEffect,
                           nargs=0, help=hidden)
    for short in sorted(SHORT_WITHOUT_EFFECT_VALUES):
        serve.add_argument(short, dest="vllm_without_effect", action=_WithoutEffect, help=hidden)
    for short in sorted(SHORT_WITHOUT_EFFECT_SWITCHES):
        serve.add_argument(short, dest="vllm_without_effect", action=_WithoutEffect, nargs=0, help=hidden)
    serve.set_defaults(vllm_without_effect=None)


def _adapter_name(text: str) -> str:
    """A ``--lora-modules`` entry's name: ``name=path`` or vLLM's JSON ``{"name": ..., "path": ...}``."""
    if text.lstrip().startswith("{"):
        try:
            entry = json.loads(text)
        except ValueError:
            entry = None
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
            raise ValueError(f"--lora-modules {text!r}: expected JSON with a 'name' (and a 'path')")
        return str(entry["name"])
    name = text.partition("=")[0].strip()
    if not name:
        raise ValueError(f"--lora-modules {text!r}: expected NAME=PATH or a JSON object")
    return name


def vllm_settings(args: argparse.Namespace) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]], list[str]]:
    """The settings and faults vLLM's and llm-d-inference-sim's flags in ``args`` ask for, and the names of
    the flags accepted without effect. Raises :class:`ValueError` for a value that makes no sense here."""
    settings: dict[str, Any] = {}
    if args.model_tag is not None and args.model is None:
        settings["model"] = args.model_tag
    if args.vllm_served_names:  # vLLM answers to these names only; the first is the one responses carry
        settings["model"], settings["served_models"] = args.vllm_served_names[0], tuple(args.vllm_served_names[1:])
    if args.vllm_lora_modules:
        settings["lora_adapters"] = tuple(dict.fromkeys(_adapter_name(text) for text in args.vllm_lora_modules))
    if args.vllm_prefix_caching is False:
        settings["cache_capacity_blocks"] = 0
    if args.vllm_chunked_prefill is not None:  # step mode: prompts whole, as vLLM V0 without it
        settings["chunked_prefill"] = args.vllm_chunked_prefill
    if args.vllm_api_keys:
        keys = list(dict.fromkeys(args.vllm_api_keys))
        if len(keys) == 1:
            settings["required_api_key"] = keys[0]
        else:
            settings["api_keys"] = keys
    for dest, name in (("llmd_ttft", "ttft"), ("llmd_itl", "itl"), ("llmd_prefill", "prefill_per_token")):
        if getattr(args, dest) is not None:
            settings[name] = getattr(args, dest)
    # one relative jitter stands for both standard deviations: the larger share of its mean
    shares = [std / mean for std, mean in ((args.llmd_ttft_std, args.llmd_ttft), (args.llmd_itl_std, args.llmd_itl))
              if std is not None and mean]
    if shares:
        settings["jitter"] = max(shares)
    if args.llmd_mode is not None:
        settings["output"] = "echo" if args.llmd_mode == "echo" else "filler"
    return settings, _failures(args), sorted(args.vllm_without_effect or [])


def _failures(args: argparse.Namespace) -> list[tuple[str, dict[str, Any]]]:
    """llm-d-inference-sim's ``--failure-injection-rate`` (percent of requests) split evenly over its
    ``--failure-types`` (all of them when none is given), as faults drawn in turn."""
    rate = args.llmd_failure_rate
    if not rate:
        return []
    if not 0 < rate <= 100:
        raise ValueError(f"--failure-injection-rate {rate:g}: expected a percentage from 0 to 100")
    types = list(dict.fromkeys(args.llmd_failure_types or FAILURE_KINDS))
    share, faults = rate / 100 / len(types), []
    for index, name in enumerate(types):
        kind, params = FAILURE_KINDS[name]
        # fault k is drawn only when none before it fired: its own chance makes each type's share equal
        faults.append((kind, {**params, "rate": min(1.0, share / (1 - index * share))}))
    return faults


def is_yaml_config(path: str) -> bool:
    """Whether ``--config`` names a YAML file (vLLM's and llm-d-inference-sim's format) rather than TOML."""
    return Path(path).suffix.lower() in (".yaml", ".yml")


def yaml_config_arguments(path: str) -> list[str]:
    """A YAML config's mapping as command-line arguments (``max-num-seqs: 8`` -> ``--max-num-seqs 8``;
    a list repeats its values after one flag; ``true`` is a switch, ``false`` its ``--no-`` form).
    Raises :class:`OSError` or :class:`ValueError` (naming the problem)."""
    try:
        import yaml
    except ImportError:
        raise ValueError("a YAML config needs PyYAML: pip install 'pytest-llmsim[serve]'") from None
    with open(path, encoding="utf-8") as file:
        try:
            data = yaml.safe_load(file)
        except yaml.YAMLError as error:
            raise ValueError(f"not valid YAML: {error}") from None
    if data is None:
        return []
    if not isinstance(data, dict):
        raise ValueError("expected a mapping of flag names to values")
    arguments: list[str] = []
    for key, value in data.items():
        flag = "--" + str(key).lstrip("-").replace("_", "-")
        if value is True:
            arguments.append(flag)
        elif value is False:
            arguments.append("--no-" + flag[2:])
        elif isinstance(value, list):
            arguments.extend([flag, *(_text(item) for item in value)])
        elif value is not None:
            arguments.extend([flag, _text(value)])
    return arguments


def _text(value: Any) -> str:
    return json.dumps(value) if isinstance(value, dict) else str(value)


def format_without_effect(names: Sequence[str]) -> str:
    """The warning line for flags accepted without effect."""
    return (f"llmsim: accepted with no effect in a simulator (vLLM {VLLM_RELEASE}'s or llm-d-inference-sim's "
            f"flags): {', '.join(names)}")
