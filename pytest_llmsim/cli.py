"""``llmsim serve``: the same simulator standalone, in the foreground.

Every setting ``LLMBackend.configure()`` accepts is a flag
(``--ttft 0.1 --itl 0.01 --max-batch-size 64 --speed 1``). Ctrl-C (or
SIGTERM) stops it cleanly within about a second; a second Ctrl-C exits at once.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib
from typing import Any

from .backend import LLMBackend
from .config import SETTING_HELP, SETTING_NAMES, ConfigError, SimConfig, parse_setting
from .content.replies import Rule, load_conversation
from .faults import Fault, FaultError

__all__ = ["main"]


def _setting_type(name: str) -> Any:
    def convert(text: str) -> Any:
        try:
            return parse_setting(name, text)
        except ConfigError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    convert.__name__ = name  # argparse names the type in its messages
    return convert


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"invalid port {text!r} (expected an integer from 0 to 65535)")
    return port


def _host(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("the host must not be empty (an empty host listens on every "
                                         "interface; say 0.0.0.0 if that is what you want)")
    return text


def _fault(text: str) -> tuple[str, dict[str, Any]]:
    """``KIND[:key=value,...]``, values parsed as JSON where they parse (numbers, true, null)."""
    kind, _, rest = text.partition(":")
    params: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, equals, raw = item.partition("=")
        if not equals:
            raise argparse.ArgumentTypeError(f"invalid fault {text!r}: expected KIND[:key=value,...]")
        try:
            params[key.strip()] = json.loads(raw)
        except ValueError:
            params[key.strip()] = raw
    try:
        Fault.build(kind.strip(), **params)
    except FaultError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return kind.strip(), params


def load_config_file(path: str) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    """Settings and faults from a TOML file::

        ttft = 0.1
        itl = 0.01
        speed = "inf"

        [[faults]]
        kind = "rate_limit"
        times = 2

        [[rules]]
        prompt = "weather"
        tool_call = { name = "get_weather", arguments = { city = "Paris" } }

    Raises ValueError naming what is wrong (an unknown setting, a bad fault or rule).
    """
    return _load_config_file(path)[:2]


def load_config_rules(path: str) -> list[Rule]:
    """The ``[[rules]]`` tables of a TOML config file (see :meth:`Rule.from_json` for their keys)."""
    return _load_config_file(path)[2]


def _load_config_file(path: str) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]], list[Rule]]:
    with open(path, "rb") as handle:
        data = tomllib.load(handle)
    rules_data = data.pop("rules", [])
    if not isinstance(rules_data, list):
        raise ValueError("'rules' must be an array of tables ([[rules]])")
    rules = []
    for number, table in enumerate(rules_data, 1):
        try:
            rules.append(Rule.from_json(table))
        except ValueError as error:
            raise ValueError(f"rules #{number}: {error}") from None
    faults_data = data.pop("faults", [])
    if not isinstance(faults_data, list) or not all(isinstance(f, dict) and "kind" in f for f in faults_data):
        raise ValueError("'faults' must be an array of tables, each with a 'kind'")
    SimConfig().replace(**data)  # validates: ConfigError (a ValueError) names the key
    faults = []
    for fault in faults_data:
        params = {key: value for key, value in fault.items() if key != "kind"}
        Fault.build(fault["kind"], **params)  # FaultError (a ValueError) names the problem
        faults.append((fault["kind"], params))
    return data, faults, rules


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llmsim", description="A simulated OpenAI-compatible LLM backend.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="Serve the simulator in the foreground until Ctrl-C")
    serve.add_argument("--host", type=_host, default="127.0.0.1",
                       help="Address to listen on (default: 127.0.0.1)")
    serve.add_argument("--port", type=_port, default=8000, help="Port to listen on, 0 to 65535; 0 picks a "
                                                                "free one (default: 8000)")
    serve.add_argument("--config", default=None, metavar="FILE",
                       help="TOML file of settings, [[faults]] and [[rules]]; flags win over it")
    serve.add_argument("--replay", dest="replays", action="append", default=[], metavar="FILE.jsonl",
                       help="Answer as a recorded conversation did: one rule per JSONL line "
                            "({'messages': [...], 'reply': ...}) (repeatable)")
    serve.add_argument("--control-token", default=None, metavar="TOKEN",
                       help="Require 'Authorization: Bearer TOKEN' on the control API (/llmsim/v1/...)")
    serve.add_argument("--fault", dest="faults", action="append", default=[], type=_fault, metavar="KIND[:K=V,...]",
                       help="Arm a fault at start, e.g. --fault rate_limit:times=2,retry_after=0.5 (repeatable)")
    defaults = SimConfig()
    for name in SETTING_NAMES:
        serve.add_argument(f"--{name.replace('_', '-')}", dest=name, type=_setting_type(name),
                           default=None, metavar=name.upper(),
                           help=f"{SETTING_HELP[name]} (default: {getattr(defaults, name)})")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``llmsim`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    file_settings: dict[str, Any] = {}
    file_faults: list[tuple[str, dict[str, Any]]] = []
    rules: list[Rule] = []
    if args.config is not None:
        try:
            file_settings, file_faults, rules = _load_config_file(args.config)
        except (OSError, ValueError) as error:
            parser.error(f"--config {args.config}: {error}")
    for replay in args.replays:
        try:
            rules.extend(load_conversation(replay))
        except (OSError, ValueError) as error:
            parser.error(f"--replay {replay}: {error}")
    flags = {name: getattr(args, name) for name in SETTING_NAMES if getattr(args, name) is not None}
    try:
        config = SimConfig().replace(**{**file_settings, **flags})  # flags win over the file
    except ConfigError as error:
        parser.error(f"--config {args.config}: {error}")
    backend = LLMBackend(config, host=args.host, port=args.port, control_token=args.control_token)
    for kind, params in [*file_faults, *args.faults]:
        backend.add_fault(kind, **params)
    for rule in rules:
        backend.add_rule(rule)
    try:
        backend.start()
    except OSError as error:  # its message names the address
        print(f"llmsim: {error.strerror or error}", file=sys.stderr)
        return 1
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():  # a second Ctrl-C: do not wait for the clean stop
            os._exit(128 + signum)
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    print(f"llmsim serving {backend.config.model!r} at {backend.base_url} (Ctrl-C to stop)", flush=True)
    while not stop.wait(0.5):
        pass
    backend.stop()
    print("llmsim stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
