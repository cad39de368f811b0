"""Time from `PATCH /armory/accounts` (state ACTIVE) to the accounts being ACTIVE, for 1 and for N at once.

kubesim (its own process, several simulated clusters), a hub (TLS gRPC, SQLite) and an agent with
no accounts of its own, all started as a user does. Each round creates the accounts (POST, stored
INACTIVE), then PATCHes them to ACTIVE in one request and polls `GET /armory/accounts` every
`--poll` seconds (0.1) until every one is ACTIVE; the accounts are deleted before the next round.
The poll is the benchmark's own load: answered every 10 ms with a hundred accounts, it took a
third of the hub's CPU, on the cores the agent and the API servers share. An account is ACTIVE
once the agent has listed every kind it may read in its cluster (its first snapshot), so the time
includes the hub resolving and encrypting the kubeconfig, the AddAccounts round trip, the agent
connecting to the API server, discovery, access reviews and the initial lists.

    .venv/bin/python bench/accounts_activation.py --accounts 1 100 --rounds 3

`--kubeconfig` points every account at a real API server instead (scripts/real-cluster's admin
kubeconfig, say; HTTP/2 there), each account with its own client and connections.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import cpu_seconds, machine, median, stolen_seconds
from processes import Agent, Hub, Proc, make_pki


def call(url: str, method: str, body: object) -> tuple[int, object]:
    req = urllib.request.Request(
        url, method=method, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.status, json.loads(r.read())


class _Hub(Hub):
    """The benchmark hub, with the kubesim kubeconfig directory allowed for `kubeconfigFile`
    (plain file paths are refused unless the operator lists their directory)."""

    def __init__(self, tmp: Path, pki: dict[str, Path], kube_dir: Path) -> None:
        import yaml

        config = tmp / "hub.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "server": {"grpcPort": 0, "httpPort": 0},
                    "tls": {"certFile": str(pki["cert"]), "keyFile": str(pki["key"])},
                    "database": {"url": f"sqlite:///{tmp / 'hub.db'}"},
                    "dynamicAccounts": {"kubeconfigDirectories": [str(kube_dir)]},
                }
            )
        )
        Proc.__init__(self, ["hub", "--config", str(config)])
        m = self.wait_line(r"gRPC on \S+:(\d+), HTTP on (http://\S+)")
        self.grpc_port, self.url = int(m.group(1)), m.group(2)


def one_round(
    hub: Hub, kubeconfigs: list[Path], n: int, kinds: list[str], tag: str, poll: float = 0.1
) -> tuple[float, float, list[float]]:
    """(PATCH answer time, time until all ACTIVE, per-account times), in seconds."""
    names = [f"bench-{tag}-{i}" for i in range(n)]
    accounts = [
        {"name": name, "kubeconfigFile": str(kubeconfigs[i % len(kubeconfigs)]), **({"kinds": kinds} if kinds else {})}
        for i, name in enumerate(names)
    ]
    call(hub.url + "/armory/accounts", "POST", accounts)
    start = time.monotonic()
    status, _ = call(hub.url + "/armory/accounts", "PATCH", [{"name": name, "state": "ACTIVE"} for name in names])
    answered = time.monotonic() - start
    assert status == 202, status
    active: dict[str, float] = {}
    while len(active) < n:
        for a in hub.get("/armory/accounts"):  # type: ignore[union-attr]
            if a["name"] in names and a["name"] not in active:
                if a["state"] == "ACTIVE":
                    active[a["name"]] = time.monotonic() - start
                elif a["state"] == "FAILED":
                    raise RuntimeError(f"{a['name']} FAILED: {a.get('errorMessage')}")
        if time.monotonic() - start > 600:
            raise RuntimeError(f"only {len(active)} of {n} ACTIVE after 600 s")
        time.sleep(poll)
    total = max(active.values())
    call(hub.url + "/armory/accounts", "DELETE", names)
    return answered, total, sorted(active.values())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--accounts", type=int, nargs="+", default=[1, 100], help="accounts per round (default 1 100)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--clusters", type=int, default=3, help="simulated clusters the accounts are spread over")
    p.add_argument("--kinds", nargs="*", default=[], help="restrict each account to these kinds (default: all)")
    p.add_argument("--poll", type=float, default=0.1, help="seconds between two polls of the accounts' states")
    p.add_argument("--kubeconfig", type=Path, help="a real API server's kubeconfig, for every account (no kubesim)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        kubesim = None
        if args.kubeconfig is None:
            kubesim = Proc(["kubesim", "--clusters", str(args.clusters), "--kubeconfig-dir", str(tmp / "kube")])
        else:
            (tmp / "kube").mkdir()
            (tmp / "kube" / "real.yaml").write_bytes(args.kubeconfig.read_bytes())
        pki = make_pki(tmp / "pki")
        hub = agent = None
        try:
            if kubesim is not None:
                _wait_file(tmp / "kube" / f"kubesim-{args.clusters - 1}-limited.yaml")
                kubeconfigs = [tmp / "kube" / f"kubesim-{i}.yaml" for i in range(args.clusters)]
                where = f"{args.clusters} kubesim clusters"
            else:
                kubeconfigs = [tmp / "kube" / "real.yaml"]
                where = f"the API server of {args.kubeconfig}"
            hub = _Hub(tmp, pki, tmp / "kube")
            agent = Agent(tmp, hub, pki, [])
            _wait_agent(hub)
            scope = f"kinds {', '.join(args.kinds)}" if args.kinds else "every kind"
            print(
                f"accounts activation: PATCH -> ACTIVE over {where}, {scope}, polled every {args.poll:g} s, "
                f"median of {args.rounds} rounds ({machine()})"
            )
            pids = {name: proc.pid for name, proc in (("kubesim", kubesim), ("hub", hub), ("agent", agent)) if proc}
            if kubesim is None and os.environ.get("SCALE_AGENT_E2E_REAL_CLUSTER_DIR"):  # scripts/real-cluster's
                directory = Path(os.environ["SCALE_AGENT_E2E_REAL_CLUSTER_DIR"])
                for name in ("apiserver", "etcd"):
                    with contextlib.suppress(OSError, ValueError):
                        pids[name] = int((directory / f"{name}.pid").read_text())
            for n in args.accounts:
                before = {name: cpu_seconds(pid) for name, pid in pids.items()}
                stolen = stolen_seconds()
                rounds = [one_round(hub, kubeconfigs, n, args.kinds, f"{n}x{r}", args.poll) for r in range(args.rounds)]
                cpu = {name: (cpu_seconds(pid) - before[name]) / args.rounds for name, pid in pids.items()}
                stolen = (stolen_seconds() - stolen) / args.rounds
                totals = [r[1] for r in rounds]
                answers = [r[0] for r in rounds]
                firsts = [r[2][0] for r in rounds]
                medians = [median(r[2]) for r in rounds]
                print(
                    f"  {n:4d} account(s): all ACTIVE {median(totals):6.2f} s (rounds: "
                    f"{', '.join(f'{t:.2f}' for t in totals)}); first ACTIVE {median(firsts):.2f} s, "
                    f"median account {median(medians):.2f} s; PATCH answered in {median(answers) * 1000:.0f} ms"
                )
                print(
                    "        CPU per round (includes the deletion): "
                    + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in cpu.items())
                    + f"; stolen by the hypervisor {stolen:.1f} s"
                )
        finally:
            for proc in (agent, hub, kubesim):
                if proc is not None:
                    proc.stop()


def _wait_file(path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"kubesim wrote no {path.name}")
        time.sleep(0.05)


def _wait_agent(hub: Hub, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not hub.get("/armory/agents"):
        if time.monotonic() > deadline:
            raise RuntimeError("the agent did not connect")
        time.sleep(0.05)


if __name__ == "__main__":
    main()
