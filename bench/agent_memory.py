"""Agent memory while following many objects: peak during initial sync and steady state.

kubesim (its own process) serves N clusters, each seeded with K kinds x M objects (0.5-2 KB each).
The agent, a real `scale-agent agent` process with one account per cluster restricted to those
kinds, syncs everything and keeps watching; its events go to the counting sink (no hub yet). RSS
is read from /proc: the peak (VmHWM) once every account reports `watching`, then the current RSS
after a settling period. Run once without a LIST budget and once with one.

    .venv/bin/python bench/agent_memory.py --clusters 100 --kinds 10 --objects 1000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, memory_kb, start_seeded_kubesim

ROOT = Path(__file__).resolve().parent.parent


def run_agent(tmp: Path, info: dict, total: int, per_account: int, settle: float) -> dict:
    accounts = [
        {"name": f"acct-{i:03d}", "kubeConfigFile": kc, "kinds": info["kinds"]}
        for i, kc in enumerate(info["kubeconfigs"])
    ]
    config = tmp / f"agent-{total}-{per_account}.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "kubernetes": {"accounts": accounts, "discoveryIntervalSeconds": 600},
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
    while True:  # the condition is the user-visible one: /ready answers 200 once all accounts are watching
        try:
            with urllib.request.urlopen(url + "/ready", timeout=30) as r:
                if r.status == 200:
                    break
        except urllib.error.HTTPError:
            pass
        time.sleep(0.5)
    synced_in = time.monotonic() - start
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
    args = p.parse_args()
    total, per_account = (int(x) for x in args.budget.split(","))
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


if __name__ == "__main__":
    main()
