"""``llmsim serve``: the same simulator standalone, in the foreground.

Every setting ``LLMBackend.configure()`` accepts is a flag
(``--ttft 0.1 --itl 0.01 --max-batch-size 64 --speed 1``). Ctrl-C (or
SIGTERM) stops it cleanly within about a second; a second Ctrl-C exits at once.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from ..backend import LLMBackend
from ..content.replies import Rule, load_conversation
from ..gc_pacing import CollectionPacer, freeze_startup
from ..recording.cassette import is_cassette
from ..recording.content import CASSETTE_MODES, rules_from_cassette
from ..server.cores import IO_REQUIREMENTS, missing_for_io
from ..server.listener import gevent_patched
from ..server.loopback import is_loopback
from ..sim.config import (
    SETTING_ALIASES,
    SETTING_HELP,
    SETTING_NAMES,
    ConfigError,
    SimConfig,
    environment_name,
    parse_setting,
    settings_from_environment,
)
from ..sim.faults import Fault, FaultError
from ..sim.scenario import Phase
from .calibration_commands import add_calibration_commands, run_calibrate, run_predict
from .config_file import load_config, load_config_file, load_config_rules
from .config_watch import ConfigWatcher
from .recording_commands import add_recording_commands, run_record, run_replay
from .replicas import heal, say, start_replicas, stop_replicas
from .stop_signals import StopSignals
from .vllm_arguments import (
    add_vllm_arguments,
    format_without_effect,
    is_yaml_config,
    vllm_settings,
    yaml_config_arguments,
)

__all__ = ["build_parser", "load_config_file", "load_config_rules", "main", "pace_collections"]

IO_MODES = ("threads", "gevent", "loop")


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llmsim", description="A simulated OpenAI-compatible LLM backend.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="Serve the simulator in the foreground until Ctrl-C")
    serve.add_argument("--host", type=_host, default="127.0.0.1",
                       help="Address to listen on (default: 127.0.0.1)")
    serve.add_argument("--port", type=_port, default=8000, help="Port to listen on, 0 to 65535; 0 picks a "
                                                                "free one (default: 8000)")
    serve.add_argument("--config", default=None, metavar="FILE",
                       help="TOML file of settings, [[faults]], [[rules]] and [[scenario]] phases; flags win over "
                            "it. A .yaml or .yml file is vLLM's and llm-d-inference-sim's format: flags, read as "
                            "if given first")
    serve.add_argument("--watch", action="store_true",
                       help="With --config: read the file again whenever it changes, while serving (its settings, "
                            "under the environment and the flags; its faults and rules in place of those before); "
                            "a file that does not validate changes nothing")
    serve.add_argument("--replicas", type=_replicas, default=1, metavar="N",
                       help="Serve N independent backends, each in its own process (its own batch, queue, cache "
                            "and metrics) on consecutive ports from --port (free ports with --port 0): a fleet for "
                            "router tests (default: 1)")
    serve.add_argument("--shared-port", action="store_true",
                       help="With --replicas: every replica listens on --port (SO_REUSEPORT: the kernel spreads "
                            "connections across them), and each also on a port of its own, printed at start "
                            "(consecutive after --port, or free ones with --port 0), for its metrics and control "
                            "API")
    serve.add_argument("--own-port", type=_port, default=None, help=argparse.SUPPRESS)  # a replica's, from its parent
    serve.add_argument("--replica-number", type=int, default=1, help=argparse.SUPPRESS)  # which one, from its parent
    serve.add_argument("--io", choices=IO_MODES, default="threads",
                       help="How connections are served: 'threads' (a handler thread per connection; the "
                            "default, as inside pytest) or 'loop' (one thread, a greenlet per connection on "
                            "gevent's loop: more requests per second and many more open streams and sessions; "
                            "needs gevent, the 'serve' extra). 'gevent' is another name for 'loop'. Every mode "
                            "frames connections the same way (httptools' parser)")
    serve.add_argument("--gc-pacing", choices=["on", "off"], default="on",
                       help="Collect garbage every few hundred requests, start-up objects frozen out of the way "
                            "('on', the default: no 35-80 ms collector pauses under load; after a wave of at least "
                            "256 connections has closed, a full collection and malloc_trim give its memory "
                            "back), or leave CPython's "
                            "own schedule ('off')")
    serve.add_argument("--replay", dest="replays", action="append", default=[], metavar="FILE.jsonl",
                       help="Answer as a recorded conversation did: one rule per JSONL line "
                            "({'messages': [...], 'reply': ...}), or per exchange of an llmsim record cassette "
                            "(repeatable)")
    serve.add_argument("--cassette-mode", choices=CASSETTE_MODES, default="simulate",
                       help="How a cassette given to --replay answers: 'simulate' (the default: a request with the "
                            "recorded last user message gets the recorded answer, whatever its model) or 'content' "
                            "(only the recorded request: its message, model and turn); the engine times both")
    serve.add_argument("--control-token", default=None, metavar="TOKEN",
                       help="Require 'Authorization: Bearer TOKEN' on the control API (/llmsim/v1/...)")
    serve.add_argument("--allowed-hosts", default="", metavar="NAME[,NAME...]",
                       help="Host names the control API answers to besides localhost, 127.0.0.1, [::1] and the "
                            "listen address (others get 403: DNS rebinding)")
    serve.add_argument("--allow-remote-control", action="store_true",
                       help="Serve the control API on a non-loopback address without --control-token (anyone "
                            "who can reach the port can then drive the backend)")
    serve.add_argument("--fault", dest="faults", action="append", default=[], type=_fault, metavar="KIND[:K=V,...]",
                       help="Arm a fault at start, e.g. --fault rate_limit:times=2,retry_after=0.5 (repeatable)")
    defaults = SimConfig()
    for name in SETTING_NAMES:
        aliases = [f"--{alias}" for alias in SETTING_ALIASES[name]]
        also = f"also {', '.join(aliases)}; " if aliases else ""
        serve.add_argument(f"--{name.replace('_', '-')}", *aliases, dest=name, type=_setting_type(name),
                           default=None, metavar=name.upper(),
                           help=f"{SETTING_HELP[name]} (default: {getattr(defaults, name)}; "
                                f"{also}environment: {environment_name(name)})")
    add_vllm_arguments(serve)
    add_calibration_commands(commands)
    add_recording_commands(commands)
    return parser


def _exec_under_gevent(argv: Sequence[str], parser: argparse.ArgumentParser, io: str) -> None:
    """Re-run this command in a process gevent patches before anything else is imported.

    Patching must come first (threads, sockets and locks created before it
    stay blocking), so the process execs itself through
    :mod:`pytest_llmsim.gevent_serve`; the PID stays (a parent's handle and
    a parent-death signal still apply).
    """
    missing = missing_for_io(io)
    if missing is not None:
        parser.error(f"--io {io} {missing}")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "pytest_llmsim.gevent_serve", *argv])


def _replicas(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 64:
        raise argparse.ArgumentTypeError(f"expected a number of replicas from 1 to 64, got {text!r}")
    return value


def pace_collections(backend: LLMBackend, pacer: CollectionPacer | None = None) -> CollectionPacer:
    """Schedule the garbage collector of a process that only serves ``backend`` (see :mod:`.gc_pacing`)."""
    pacer = pacer or CollectionPacer()
    freeze_startup()
    backend.on_request_done(pacer.request_done)
    return pacer


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``llmsim`` console script."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.command == "calibrate":
        return run_calibrate(args, parser)
    if args.command == "predict":
        return run_predict(args, parser)
    if args.command == "record":
        return run_record(args, parser)
    if args.command == "replay" and args.mode == "exact":
        return run_replay(args, parser)
    if args.command == "replay":  # content and simulate: the simulator serves the cassette's answers as rules
        return main(["serve", "--replay", args.cassette, "--cassette-mode", args.mode, "--host", args.host,
                     "--port", str(args.port), "--speed", str(args.speed)])
    if args.io in IO_REQUIREMENTS and not gevent_patched():
        _exec_under_gevent(argv, parser, args.io)
    yaml_config = args.config is not None and is_yaml_config(args.config)
    if yaml_config:  # vLLM's and llm-d-inference-sim's: its flags come first, the command line's own win
        try:
            config_arguments = yaml_config_arguments(args.config)
        except (OSError, ValueError) as error:
            parser.error(f"--config {args.config}: {error}")
        after_serve = argv.index("serve") + 1
        args = parser.parse_args([*argv[:after_serve], *config_arguments, *argv[after_serve:]])
    try:
        vllm, vllm_faults, without_effect = vllm_settings(args)
    except ValueError as error:
        parser.error(str(error))
    if without_effect:
        say(format_without_effect(without_effect), sys.stderr)
    file_settings: dict[str, Any] = {}
    file_faults: list[tuple[str, dict[str, Any]]] = []
    rules: list[Rule] = []
    phases: tuple[Phase, ...] = ()
    if args.config is not None and not yaml_config:
        try:
            file_settings, file_faults, rules, phases = load_config(args.config)
        except (OSError, ValueError) as error:
            parser.error(f"--config {args.config}: {error}")
    file_rules = len(rules)  # the file's come first; the --replay ones are the command line's
    for replay in args.replays:
        try:
            rules.extend(rules_from_cassette(replay, args.cassette_mode) if is_cassette(replay)
                         else load_conversation(replay))
        except (OSError, ValueError) as error:
            parser.error(f"--replay {replay}: {error}")
    flags = {**vllm, **{name: getattr(args, name) for name in SETTING_NAMES if getattr(args, name) is not None}}
    try:
        environment = settings_from_environment(os.environ)
    except ConfigError as error:
        parser.error(str(error))
    try:
        config = SimConfig().replace(**{**file_settings, **environment, **flags})  # flags > LLMSIM_* > the file
    except ConfigError as error:
        parser.error(f"--config {args.config}: {error}")
    if args.watch and args.config is None:
        parser.error("--watch reads the --config FILE again when it changes: give --config")
    if not is_loopback(args.host) and args.control_token is None and not args.allow_remote_control:
        parser.error(f"--host {args.host} serves the control API (/llmsim/v1/...) beyond this machine: set "
                     f"--control-token TOKEN, or say --allow-remote-control to serve it to anyone who can reach "
                     f"the port")
    allowed_hosts = [name.strip() for name in args.allowed_hosts.split(",") if name.strip()]
    if args.shared_port and not hasattr(socket, "SO_REUSEPORT"):
        parser.error("--shared-port needs SO_REUSEPORT, which this platform's sockets do not have")
    own_port = args.own_port if args.own_port is not None else (args.port + 1 if args.shared_port and args.port else 0)
    backend = LLMBackend(config, host=args.host, port=args.port, control_token=args.control_token,
                         allowed_hosts=allowed_hosts, shared_port=args.shared_port, own_port=own_port,
                         replica=args.replica_number)
    backend.httpserver.trim_memory = args.gc_pacing == "on"  # a process that only serves: see server/memory_trim
    for kind, params in [*file_faults, *vllm_faults, *args.faults]:
        backend.add_fault(kind, **params)
    for rule in rules:
        backend.add_rule(rule)
    try:
        backend.scenario(*phases)
    except ValueError as error:  # latency phases with the step scheduler
        parser.error(f"--config {args.config}: {error}")
    replicas: list[tuple[subprocess.Popen[str], str]] = []
    try:
        backend.start()
        shared = backend.port if args.shared_port else None
        replicas = start_replicas(argv[argv.index("serve") + 1:], args, shared)
    except OSError as error:  # its message names the address
        backend.stop()
        print(f"llmsim: {error.strerror or error}", file=sys.stderr)
        return 1
    first = backend.own_url or backend.root_url  # where this replica alone answers
    if replicas:  # the first replica answers for the fleet: GET /llmsim/v1/fleet
        backend.httpserver.control.fleet = (first, [url.removesuffix("/v1") for _, url in replicas])
    if args.gc_pacing == "on":
        pace_collections(backend)
    stop = StopSignals()  # its handler takes no lock (one that did could wait on the main thread forever)
    stop.install()
    own = f", its own port {backend.own_url}" if backend.own_url else ""
    say(f"llmsim serving {backend.config.model!r} at {backend.base_url}{own} (Ctrl-C to stop)")
    if backend.config.tls:
        say(f"llmsim: HTTPS certificate authority (trust it in clients, e.g. SSL_CERT_FILE): {backend.ca_file}")
    for number, (_, url) in enumerate(replicas, 2):
        at = f"{backend.base_url}, its own port {url}" if shared is not None else url
        say(f"llmsim replica {number} of {args.replicas} serving {backend.config.model!r} at {at}")
    # after the serving lines, which scripts read for the URLs
    say(f"llmsim: live page at {first}/llmsim/ui" + ("#token=TOKEN" if args.control_token else ""))
    if replicas:
        say(f"llmsim: the fleet's metrics, summed, at {first}/llmsim/v1/fleet")
    serve_argv = argv[argv.index("serve") + 1:]
    watcher = None
    if args.watch and args.config is not None:  # each replica runs with --watch too, and watches for itself
        watcher = ConfigWatcher(args.config, backend, {**environment, **flags}, list(args.faults), rules[file_rules:],
                                say)
    while not stop.wait(0.5):
        heal(replicas, serve_argv, shared)  # a dead replica comes back on its port; the others never stopped
        if watcher is not None:
            watcher.poll()
    stop_replicas(replicas)
    backend.stop()
    say("llmsim stopped")
    return 0

