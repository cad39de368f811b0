"""`scale-agent hub`: accept agents on the gRPC port and serve the HTTP API until interrupted."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

log = logging.getLogger("scaleagent.hub")

# glibc's thresholds for the hub (see scaleagent.allocator): blocks under 4 MiB (an agent's batch
# is typically 1-2 MiB) come from the heap, and up to 64 MiB of freed memory stays there for the next batches
# instead of going back to the system and being faulted in again. Measured with
# bench/hub_ingest_grpc.py: page faults a third of the default's, 8-13% less CPU per event, 30 MB
# more resident after 300,000 objects (4%).
MMAP_THRESHOLD = 4 << 20
TRIM_THRESHOLD = 64 << 20


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "hub",
        help="accept agents and serve the multi-cluster cache and API",
        description="Accept agent connections (gRPC) and serve the cache and REST API (HTTP).",
    )
    p.add_argument("--config", type=Path, metavar="FILE", help="hub configuration (YAML); defaults otherwise")
    p.add_argument("--grpc-port", type=int, metavar="PORT", help="gRPC port for agents (default 9091; 0 = any free)")
    p.add_argument("--http-port", type=int, metavar="PORT", help="HTTP API port (default 7002; 0 = any free)")
    p.add_argument("--db", metavar="URL", help="database URL (default: a SQLite file, sqlite:///scale-agent-hub.db)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Alembic logs each plugin it sets up as it is imported (with the store, below): every start.
    logging.getLogger("alembic").setLevel(logging.WARNING)
    from ..allocator import tune_unless_set
    from ..configfile import ConfigError
    from .config import load_hub_config

    try:
        config = load_hub_config(args.config).with_overrides(
            grpc_port=args.grpc_port, http_port=args.http_port, database_url=args.db
        )
    except ConfigError as e:
        print(f"scale-agent hub: {e}", file=sys.stderr)
        return 2
    overrides = {"grpc_port": args.grpc_port, "http_port": args.http_port, "database_url": args.db}
    tune_unless_set("hub", mmap_threshold=MMAP_THRESHOLD, trim_threshold=TRIM_THRESHOLD)
    return asyncio.run(serve(config, args.config, overrides))


async def serve(config, path: Path | None = None, overrides: dict | None = None) -> int:
    """`path`: the file `config` came from, applied again when it changes (or on SIGHUP), with the
    same command-line `overrides`."""
    from .reload import HubReloader
    from .replicas.discovery import DiscoveryError
    from .service import Hub
    from .store import StoreError

    try:
        hub = await Hub.open(config)
    except (OSError, RuntimeError, StoreError, ValueError) as e:
        print(f"scale-agent hub: cannot start: {e}", file=sys.stderr)
        return 1
    reloader = HubReloader(hub, path, overrides or {}) if path is not None else None
    if reloader is not None:
        hub.reload_status = reloader.status
    try:
        await hub.start()
    except (OSError, RuntimeError, StoreError, DiscoveryError) as e:
        print(f"scale-agent hub: cannot start: {e}", file=sys.stderr)
        await hub.stop()
        return 1
    print(f"scale-agent hub: gRPC on {hub.grpc_target}, HTTP on {hub.http_url}", file=sys.stderr, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if reloader is not None:
        reloader.start()
        loop.add_signal_handler(signal.SIGHUP, reloader.poke)
    await stop.wait()
    if reloader is not None:
        await reloader.stop()
    await hub.stop()
    return 0
