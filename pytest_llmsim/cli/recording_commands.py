"""``llmsim record`` and ``llmsim replay``: record a real provider through a proxy, replay the cassette."""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path
from typing import Any

from ..recording.cassette import Cassette, read_cassette
from ..recording.proxy import RecordingProxy, serve_in_thread
from ..recording.replay import ReplayApp

__all__ = ["add_recording_commands", "run_record", "run_replay"]


def add_recording_commands(commands: Any) -> None:
    """Add the ``record`` and ``replay`` subcommands."""
    record = commands.add_parser(
        "record", help="Record a real provider: a proxy that passes requests through and writes a cassette",
        description="Listens on loopback and forwards every request to --upstream unchanged (the one address "
                    "this package contacts besides loopback), writing each exchange, chunk by chunk with its "
                    "arrival time, to a cassette with credentials replaced by fingerprints.")
    record.add_argument("--upstream", required=True, help="The provider's base URL, e.g. https://api.openai.com")
    record.add_argument("--out", required=True, help="A directory for the cassette (created if missing)")
    record.add_argument("--cassette", default="cassette.jsonl", help="The cassette's file name in --out")
    record.add_argument("--host", default="127.0.0.1")
    record.add_argument("--port", type=int, default=0, help="0: any free port (printed)")
    record.add_argument("--tls", action="store_true",
                        help="Serve the recorder over HTTPS with a throwaway certificate authority (its file is "
                             "printed): for clients that speak only TLS (google-genai's Gemini Live)")
    record.add_argument("--upstream-ca", default=None, metavar="FILE",
                        help="Trust this certificate authority for the upstream (another llmsim's, a proxy's)")
    record.add_argument("--resign-aws", action="store_true",
                        help="Sign AWS SigV4 requests (Bedrock) again for the upstream, with the credentials botocore "
                             "finds (a client signs for the recorder's address, which AWS refuses)")
    replay = commands.add_parser("replay", help="Answer from a cassette, byte for byte at its recorded times")
    replay.add_argument("cassette", help="A cassette written by llmsim record")
    replay.add_argument("--mode", choices=("exact", "content", "simulate"), default="exact",
                        help="exact (the default): the recorded bytes at the recorded times; content: the recorded "
                             "requests' answers, timed by the simulator; simulate: the recorded answers for any "
                             "request with the recorded prompt, the simulator for the rest (llmsim serve --replay)")
    replay.add_argument("--speed", type=float, default=1.0,
                        help="Divide every recorded time by this (content, simulate: the simulator's speed)")
    replay.add_argument("--tls", action="store_true",
                        help="exact mode: serve over HTTPS with a throwaway certificate authority (its file is "
                             "printed)")
    replay.add_argument("--host", default="127.0.0.1")
    replay.add_argument("--port", type=int, default=0, help="0: any free port (printed)")


def _wait(server: Any, url: str, what: str) -> int:
    print(f"llmsim {what} on {url}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
    return 0


def run_record(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if not args.upstream.startswith(("http://", "https://")):
        parser.error("--upstream is an http:// or https:// URL")
    cassette = Cassette(Path(args.out) / args.cassette, args.upstream)
    proxy = RecordingProxy(args.upstream, cassette, resign_aws=args.resign_aws, upstream_ca=args.upstream_ca)
    server, url = serve_in_thread(proxy, args.host, args.port, args.tls)
    if server.ca_file:
        print(f"the recorder's certificate authority: {server.ca_file}", file=sys.stderr)
    print(f"recording {args.upstream} into {cassette.path}", file=sys.stderr)
    try:
        return _wait(server, url, "record")
    finally:
        proxy.close()


def run_replay(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.speed <= 0:
        parser.error("--speed must be positive")
    try:
        exchanges = list(read_cassette(args.cassette))
    except (OSError, ValueError) as error:
        parser.error(f"{args.cassette}: {error}")
    server, url = serve_in_thread(ReplayApp(exchanges, args.speed), args.host, args.port, args.tls)
    if server.ca_file:
        print(f"the replay's certificate authority: {server.ca_file}", file=sys.stderr)
    return _wait(server, url, "replay")
