"""`scale-agent kubesim`: run simulated clusters until interrupted."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path
from typing import Any


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "kubesim",
        help="run simulated Kubernetes clusters (for tests and the demo)",
        description="Serve N simulated Kubernetes API servers over TLS on loopback, "
        "each with its own CA, and write kubeconfigs to reach them.",
    )
    p.add_argument("--clusters", type=_positive, default=1, help="number of clusters (default 1)")
    p.add_argument(
        "--kubeconfig-dir",
        type=Path,
        default=Path(".kubesim"),
        help="where to write <cluster>.yaml (admin) and <cluster>-limited.yaml (default ./.kubesim)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument(
        "--port",
        type=_port,
        default=0,
        help="port of the first cluster, the others follow; 0 picks free ports (default)",
    )
    p.add_argument(
        "--churn",
        type=_non_negative,
        default=0.0,
        metavar="RATE",
        help="create/update/delete objects at RATE operations per second per cluster",
    )
    p.add_argument(
        "--watch-history",
        type=_positive,
        default=10_000,
        metavar="N",
        help="changes kept per resource for watches to resume from; older ones get 410 Gone",
    )
    p.add_argument(
        "--bookmark-interval",
        type=_positive_float,
        default=60.0,
        metavar="SECONDS",
        help="how often watches that allow bookmarks get one (default 60)",
    )
    p.add_argument("--kube-version", default="v1.30.0", help="version reported by /version (default v1.30.0)")
    p.set_defaults(func=run)


def _number(kind: type, low: float, high: float | None = None, *, exclusive_low: bool = False) -> Any:
    """An argparse type for a number in a range, with an error that says which range."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a{'n integer' if kind is int else ' number'}: {text!r}") from None
        if value < low or (exclusive_low and value == low) or (high is not None and value > high):
            bound = f"more than {low:g}" if exclusive_low else f"at least {low:g}"
            raise argparse.ArgumentTypeError(
                f"must be {bound}{f' and at most {high:g}' if high is not None else ''}, got {value:g}"
            )
        return value

    return parse


_positive = _number(int, 1)
_port = _number(int, 0, 65535)
_non_negative = _number(float, 0)
_positive_float = _number(float, 0, exclusive_low=True)


def run(args: argparse.Namespace) -> int:
    import re

    if not re.fullmatch(r"v\d+\.\d+\.\d+", args.kube_version):
        print(f"kubesim: --kube-version must look like v1.30.0, got {args.kube_version!r}", file=sys.stderr)
        return 2
    return asyncio.run(_serve(args))


async def _serve(args: argparse.Namespace) -> int:
    from .simulator import Simulator  # here: every `scale-agent` command builds this parser

    sim = Simulator(
        clusters=args.clusters,
        host=args.host,
        base_port=args.port,
        history=args.watch_history,
        bookmark_interval=args.bookmark_interval,
        version=args.kube_version,
    )
    try:
        await sim.start()
    except OSError as e:
        print(f"kubesim: cannot listen on {args.host}:{args.port}: {e.strerror or e}", file=sys.stderr)
        await sim.stop()
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    paths = sim.write_kubeconfigs(args.kubeconfig_dir)
    if args.churn:
        sim.start_churn(args.churn)
    for m, (admin, limited) in zip(sim.members, paths):
        print(f"kubesim: cluster {m.name} at {m.url}  admin kubeconfig: {admin}  limited kubeconfig: {limited}")
    first = paths[0][0]
    print(f"kubesim: try   kubectl --kubeconfig {first} get namespaces")
    print(
        f"kubesim: ready ({len(sim.members)} cluster{'s' if len(sim.members) > 1 else ''}"
        f"{f', churn {args.churn:g} ops/s each' if args.churn else ''}); Ctrl-C stops",
        flush=True,
    )
    await stop.wait()
    await sim.stop()
    print("kubesim: stopped", flush=True)
    return 0
