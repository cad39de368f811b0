"""`scale-agent agent`: follow the configured accounts until interrupted."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import signal
import sys
from pathlib import Path

log = logging.getLogger("scaleagent.agent")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "agent",
        help="watch Kubernetes accounts and stream their changes",
        description="Follow every kind of every configured account (an armory-agent.yml file).",
    )
    p.add_argument("--config", type=Path, required=True, metavar="FILE", help="agent configuration (YAML)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--print-events",
        action="store_true",
        help="write one JSON line per event to stdout instead of sending it to the hub (for debugging; jq-friendly)",
    )
    mode.add_argument(
        "--no-hub",
        action="store_true",
        help="count events and drop them instead of sending them to the hub (for measuring the watch engine alone)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .config import ConfigError, load_config

    try:
        config = load_config(args.config)
    except ConfigError as e:
        print(f"scale-agent agent: {e}", file=sys.stderr)
        return 2
    if "logging" in config.model_fields_set:
        from .logs import configure_logging

        try:
            configure_logging(config.logging)
        except OSError as e:
            print(f"scale-agent agent: logging.file {config.logging.file}: {e.strerror or e}", file=sys.stderr)
            return 2
    return asyncio.run(_serve(config, args.config, args.print_events, args.no_hub))


async def _serve(config, path: Path, print_events: bool, no_hub: bool) -> int:
    from .link import HubLink
    from .memory import tune_agent_allocator
    from .service import Agent, StartError, link_settings
    from .sinks import CountingSink, PrintSink

    tune_agent_allocator()
    # What is imported by now lives as long as the process: out of the garbage collector's sight,
    # its full collections (which a burst of new objects brings on) do not walk it each time; and
    # collections less often than every 700 new objects (CPython's default), as the hub does.
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    sink = PrintSink() if print_events else CountingSink() if no_hub else HubLink(link_settings(config))
    agent = Agent(config, sink, path)
    try:
        await agent.start()
    except StartError as e:
        print(f"scale-agent agent: {e}", file=sys.stderr)
        await agent.stop()
        return 1
    print(f"scale-agent agent: health on {agent.health_url}/health", file=sys.stderr, flush=True)
    if agent.metrics_url:
        print(f"scale-agent agent: metrics on {agent.metrics_url}/metrics", file=sys.stderr, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if agent.reloader is not None:
        loop.add_signal_handler(signal.SIGHUP, agent.reloader.poke)
    await stop.wait()
    await agent.stop()
    return 0
