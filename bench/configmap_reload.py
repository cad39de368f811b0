"""Time from a ConfigMap change to the new account's objects in the hub (service mode).

kubesim (its own process, several simulated clusters), a hub (TLS gRPC, SQLite) and an agent whose
configuration file is a ConfigMap volume laid out and changed as the kubelet does it (the `..data`
symlink swapped in one rename). Each round swaps in a file that adds one account and measures, from
the swap (made at a random point of the polling period, as an edit lands), until (1) the hub lists
the account and (2) the hub lists it `watching` with its objects cached; then a swap that removes
it, until the hub no longer lists it. The baseline is what a user did before reload existed:
restart the agent with the new file, timed from the restart to the same point, with the other
accounts to relist as well.

The kubelet's own delay (its sync period, up to about a minute after `kubectl apply`) comes before
this and is not ours: it is the same for any reader of the volume.

    .venv/bin/python bench/configmap_reload.py --rounds 5 --accounts 4
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.helpers: the kubelet's volume

from common import machine, median
from processes import Hub, Proc, make_pki

from tests.helpers import ConfigMapVolume


def agent_yaml(hub: Hub, pki: dict[str, Path], accounts: list[dict], period: float) -> str:
    return yaml.safe_dump(
        {
            "kubernetes": {"accounts": accounts, "discoveryIntervalSeconds": 600},
            "server": {"port": 0},
            "clouddriver": {"grpc": f"localhost:{hub.grpc_port}", "tls": {"cacertFile": str(pki["ca"])}},
            "reload": {"periodSeconds": period},
        }
    )


def until(predicate, timeout: float = 120.0) -> float:
    """Poll every 5 ms; the monotonic time at which predicate first held."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return time.monotonic()
        if time.monotonic() > deadline:
            raise RuntimeError("timed out")
        time.sleep(0.005)


def accounts_of(hub: Hub) -> dict[str, dict]:
    return {a["name"]: a for a in hub.get("/api/v1/accounts")}  # type: ignore[union-attr]


def synced(hub: Hub, name: str) -> bool:
    a = accounts_of(hub).get(name)
    return a is not None and a["agentState"] == "watching" and a["objects"] > 0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--accounts", type=int, default=4, help="accounts already followed (they must not be disturbed)")
    p.add_argument("--period", type=float, default=2.0, help="reload.periodSeconds (default 2, the default)")
    args = p.parse_args()
    clusters = 2
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        kubesim = Proc(["kubesim", "--clusters", str(clusters), "--kubeconfig-dir", str(tmp / "kube")])
        pki = make_pki(tmp / "pki")
        hub = agent = None
        try:
            deadline = time.monotonic() + 60
            while not (tmp / "kube" / f"kubesim-{clusters - 1}-limited.yaml").exists():
                assert time.monotonic() < deadline, "kubesim wrote no kubeconfig"
                time.sleep(0.05)
            hub = Hub(tmp, pki)
            kube = [tmp / "kube" / f"kubesim-{i}.yaml" for i in range(clusters)]
            base = [{"name": f"base-{i}", "kubeconfigFile": str(kube[i % clusters])} for i in range(args.accounts)]
            volume = ConfigMapVolume(tmp / "cm", {"agent.yaml": agent_yaml(hub, pki, base, args.period)})
            agent = Proc(["agent", "--config", str(volume.path("agent.yaml"))])
            until(lambda: all(synced(hub, a["name"]) for a in base))
            print(
                f"configmap reload: {args.accounts} accounts followed, every kind, reload.periodSeconds "
                f"{args.period:g}, {args.rounds} rounds ({machine()})"
            )
            listed, cached, removed, undisturbed = [], [], [], True
            for r in range(args.rounds):
                new = {"name": f"new-{r}", "kubeconfigFile": str(kube[r % clusters])}
                objects_before = {n: a["objects"] for n, a in accounts_of(hub).items()}
                # A user's edit lands anywhere in the polling period, not just after the last poll.
                time.sleep(random.uniform(0, args.period))
                swapped = time.monotonic()
                volume.update({"agent.yaml": agent_yaml(hub, pki, [*base, new], args.period)})
                name = new["name"]
                listed.append(until(lambda name=name: name in accounts_of(hub)) - swapped)
                cached.append(until(lambda name=name: synced(hub, name)) - swapped)
                after = accounts_of(hub)
                undisturbed &= all(after[a["name"]]["agentState"] == "watching" for a in base)
                undisturbed &= all(after[a["name"]]["objects"] == objects_before[a["name"]] for a in base)
                swapped = time.monotonic()
                volume.update({"agent.yaml": agent_yaml(hub, pki, base, args.period)})
                removed.append(until(lambda name=name: name not in accounts_of(hub)) - swapped)
            print(
                f"  reload:  listed {median(listed):.2f} s, objects cached {median(cached):.2f} s "
                f"(rounds: {', '.join(f'{t:.2f}' for t in cached)}); removed {median(removed):.2f} s; "
                f"other accounts undisturbed: {'yes' if undisturbed else 'NO'}"
            )
            restarts = []
            for r in range(min(args.rounds, 3)):
                new = {"name": f"restart-{r}", "kubeconfigFile": str(kube[r % clusters])}
                volume.update({"agent.yaml": agent_yaml(hub, pki, [*base, new], 0)})
                started = time.monotonic()
                agent.stop()
                agent = Proc(["agent", "--config", str(volume.path("agent.yaml"))])
                restarts.append(until(lambda name=new["name"]: synced(hub, name)) - started)
            print(
                f"  restart: objects cached {median(restarts):.2f} s (rounds: "
                f"{', '.join(f'{t:.2f}' for t in restarts)}); reload/restart {median(cached) / median(restarts):.2f}x"
            )
        finally:
            for proc in (agent, hub, kubesim):
                if proc is not None:
                    proc.stop()


if __name__ == "__main__":
    main()
