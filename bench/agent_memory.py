"""Agent memory while following many objects: peak during initial sync and steady state.

kubesim (its own process) serves N clusters, each seeded with K kinds x M objects (0.5-2 KB each).
The agent, a real `scale-agent agent` process with one account per cluster restricted to those
kinds, syncs everything and keeps watching; its events go to the counting sink (no hub yet). RSS
is read from /proc: the peak (VmHWM) once every account reports `watching`, then the current RSS
after a settling period. Run once without a LIST budget and once with one.

    .venv/bin/python bench/agent_memory.py --clusters 100 --kinds 10 --objects 1000

With `--kubeconfig`, a real API server instead (scripts/real-cluster): K kinds x M objects are
seeded into it once (bench/real_seed.py, one namespace), and N accounts, each with its own copy of
the kubeconfig (so its own client and connections), follow those kinds in that namespace: N x K
watches and N x K x M objects in the agent. The budgeted run is made twice, over HTTP/2 (the
default against a real server) and with `kubernetes.http2: false`. `--floor` adds what the floor
is made of, on an empty namespace: the process with no account, N accounts of one kind, N
accounts of K kinds.

    .venv/bin/python bench/agent_memory.py --kubeconfig .real-cluster/admin.yaml \
        --clusters 100 --kinds 10 --objects 1000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_seconds, machine, machine_busy, memory_kb, start_seeded_kubesim

ROOT = Path(__file__).resolve().parent.parent


def run_agent(
    tmp: Path,
    info: dict,
    total: int,
    per_account: int,
    settle: float,
    http2: bool = True,
    namespace: str = "",
    server_pid: int | None = None,
) -> dict:
    accounts = [
        {"name": f"acct-{i:03d}", "kubeConfigFile": kc, "kinds": info["kinds"]}
        for i, kc in enumerate(info["kubeconfigs"])
    ]
    for account in accounts:
        if namespace:
            account["namespaces"] = [namespace]
    config = tmp / f"agent-{total}-{per_account}-{http2}-{len(accounts)}-{len(info['kinds'])}.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "kubernetes": {"accounts": accounts, "discoveryIntervalSeconds": 600, "http2": http2},
                "tasks": {"totalBudget": total, "budgetPerAccount": per_account},
                "server": {"port": 0},
            }
        )
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "scaleagent.cli",
            "--log-level",
            "WARNING",
            "agent",
            "--no-hub",
            "--config",
            str(config),
        ],
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    url = ""
    while not url:
        line = proc.stderr.readline()
        if not line:
            raise RuntimeError("agent exited")
        if "health on " in line:
            url = line.split("health on ", 1)[1].strip().removesuffix("/health")
    start = time.monotonic()
    busy0, elapsed0 = machine_busy()
    server0 = cpu_seconds(server_pid) if server_pid else 0.0
    while True:  # the condition is the user-visible one: /ready answers 200 once all accounts are watching
        try:
            with urllib.request.urlopen(url + "/ready", timeout=30) as r:
                if r.status == 200:
                    break
        except urllib.error.HTTPError:
            pass
        time.sleep(0.5)
    synced_in = time.monotonic() - start
    sync_cpu = cpu_seconds(proc.pid)
    server_cpu = cpu_seconds(server_pid) - server0 if server_pid else None
    busy1, elapsed1 = machine_busy()
    _, peak = memory_kb(proc.pid)
    time.sleep(settle)
    steady, _ = memory_kb(proc.pid)
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        metrics = r.read().decode()
    with urllib.request.urlopen(url + "/health", timeout=30) as r:
        events = sum(a["events"] for a in json.loads(r.read())["accounts"])
    lists_peak = next(
        float(line.split()[-1]) for line in metrics.splitlines() if line.startswith("scale_agent_lists_peak")
    )
    proc.terminate()
    proc.wait()
    return {
        "synced_s": synced_in,
        "sync_cpu_s": sync_cpu,  # the agent's CPU until every account was watching
        "server_cpu_s": server_cpu,  # the API server's meanwhile (scripts/real-cluster's, when known)
        # all cores, everything running, meanwhile
        "machine_busy": (busy1 - busy0) / (elapsed1 - elapsed0) if elapsed1 > elapsed0 else 0.0,
        "peak_mb": peak / 1024,
        "steady_mb": steady / 1024,
        "events": events,
        "lists_peak": int(lists_peak),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clusters", type=int, default=100)
    p.add_argument("--kinds", type=int, default=10)
    p.add_argument("--objects", type=int, default=1000)
    p.add_argument("--budget", default="8,1", help="totalBudget,budgetPerAccount for the budgeted run")
    p.add_argument("--settle", type=float, default=150.0, help="seconds after sync before reading steady RSS")
    p.add_argument("--kubeconfig", type=Path, help="a real API server (see above) instead of kubesim")
    p.add_argument("--floor", action="store_true", help="with --kubeconfig: also measure what the floor is made of")
    p.add_argument("--http11-first", action="store_true", help="with --kubeconfig: the HTTP/1.1 run first")
    p.add_argument("--http2-only", action="store_true", help="with --kubeconfig: no HTTP/1.1 run")
    p.add_argument("--floor-only", action="store_true", help="with --kubeconfig: what the floor is made of, only")
    args = p.parse_args()
    total, per_account = (int(x) for x in args.budget.split(","))
    if args.kubeconfig:
        real_server(args, total, per_account)
        return
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        t = time.monotonic()
        kubesim, info = start_seeded_kubesim(
            tmp / "kc", "--clusters", str(args.clusters), "--kinds", str(args.kinds), "--objects", str(args.objects)
        )
        print(
            f"kubesim seeded {args.clusters} x {args.kinds} x {args.objects} = "
            f"{args.clusters * args.kinds * args.objects:,} objects in {time.monotonic() - t:.0f}s "
            f"(kubesim RSS {memory_kb(kubesim.pid)[0] / 1024:,.0f} MB)",
            flush=True,
        )
        try:
            results = {
                "no budget": run_agent(tmp, info, 0, 0, args.settle),
                f"budget {total}/{per_account}": run_agent(tmp, info, total, per_account, args.settle),
            }
        finally:
            kubesim.terminate()
            kubesim.wait()
    print(f"agent memory, {args.clusters} accounts x {args.kinds} kinds x {args.objects} objects ({machine()})")
    for name, r in results.items():
        print(
            f"  {name:14s} initial sync {r['synced_s']:6.1f}s  peak RSS {r['peak_mb']:6.0f} MB  "
            f"steady RSS {r['steady_mb']:6.0f} MB  concurrent LISTs at most {r['lists_peak']}  "
            f"events {r['events']:,}"
        )


def real_server(args: argparse.Namespace, total: int, per_account: int) -> None:
    import asyncio

    from real_seed import seed

    kinds = asyncio.run(seed(args.kubeconfig, args.kinds, args.objects))
    n, k, m = args.clusters, len(kinds), args.objects
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        copies = []
        for i in range(n):  # a file each: each account loads its own credentials and client
            copies.append(str(tmp / f"account-{i:03d}.yaml"))
            Path(copies[-1]).write_bytes(args.kubeconfig.read_bytes())
        info = {"kubeconfigs": copies, "kinds": kinds}
        print(f"agent memory against {args.kubeconfig}: {n} accounts x {k} kinds x {m} objects ({machine()})")
        server = _apiserver_pid()
        protocols = (True,) if args.http2_only else (True, False) if not args.http11_first else (False, True)
        if args.floor_only:
            protocols = ()
        for http2 in protocols:
            r = run_agent(tmp, info, total, per_account, args.settle, http2, "scale-agent-bench", server)
            _line(f"budget {total}/{per_account}, {'HTTP/2' if http2 else 'HTTP/1.1'}", r)
        if not (args.floor or args.floor_only):
            return
        empty = "scale-agent-bench-empty"
        asyncio.run(seed(args.kubeconfig, 1, 0, empty))
        print(f"what the floor is made of (namespace {empty}, no objects):")
        none = run_agent(tmp, {"kubeconfigs": [], "kinds": kinds}, total, per_account, args.settle)
        for http2 in (True, False):
            proto = "HTTP/2" if http2 else "HTTP/1.1"
            one = run_agent(
                tmp, {"kubeconfigs": copies, "kinds": kinds[:1]}, total, per_account, args.settle, http2, empty
            )
            all_ = run_agent(tmp, info, total, per_account, args.settle, http2, empty)
            per_account_kb = (one["steady_mb"] - none["steady_mb"]) * 1024 / n
            per_watch_kb = (all_["steady_mb"] - one["steady_mb"]) * 1024 / (n * (k - 1)) if k > 1 else 0.0
            print(
                f"  {proto:8s} no account {none['steady_mb']:5.0f} MB; {n} accounts x 1 kind "
                f"{one['steady_mb']:5.0f} MB; {n} x {k} kinds {all_['steady_mb']:5.0f} MB: "
                f"{per_account_kb:.0f} KB per account (its first watch included), "
                f"{per_watch_kb:.1f} KB per further watch"
            )


def _apiserver_pid() -> int | None:
    """scripts/real-cluster's API server, when `scripts/real-cluster env`'s variables are set."""
    directory = os.environ.get("SCALE_AGENT_E2E_REAL_CLUSTER_DIR")
    try:
        return int((Path(directory) / "apiserver.pid").read_text()) if directory else None
    except (OSError, ValueError):
        return None


def _line(name: str, r: dict) -> None:
    server = f", API server CPU {r['server_cpu_s']:.0f} s" if r["server_cpu_s"] is not None else ""
    print(
        f"  {name:22s} initial sync {r['synced_s']:6.1f}s (agent CPU {r['sync_cpu_s']:.0f} s{server}, machine "
        f"{r['machine_busy']:.0%} busy)  peak RSS {r['peak_mb']:6.0f} MB  steady RSS {r['steady_mb']:6.0f} MB  "
        f"concurrent LISTs at most {r['lists_peak']}  events {r['events']:,}",
        flush=True,
    )


if __name__ == "__main__":
    main()
