"""Hub replicas: forwarding overhead and failover time (docs/ha.md).

Hubs run as `scale-agent hub` processes sharing one fresh PostgreSQL database, peers listed
statically (`replicas.cluster: static`: discovery is not on these paths), heartbeat every second;
kubesim (its own process) holds the cluster; one agent follows it, given every hub's address.

1. **forwarding**: the agent streams through hub-a. Alternately, a deployManifest task (a
   ConfigMap whose data changes each time) is submitted to hub-a (direct) and to hub-b (which
   forwards the operation to hub-a: `POST /armory/agent/operations`), and the client waits for the
   task to complete (`GET /task/{id}?waitSeconds=30` on the hub it submitted to). Then the same
   for a read: `GET /api/v1/accounts/c0/objects?kind=ConfigMap&name=...` from hub-a and hub-b.
   Medians, p95 and the ratio forwarded/direct.
2. **failover**: the hub streaming the account is killed with SIGKILL; measured from the kill to
   the moment another hub serves the account again, whole: ACTIVE, its agent watching, and at
   least as many objects cached as before the kill (`GET /api/v1/accounts/c0`, polled every 20 ms
   from a surviving hub). The killed hub is started again (same name and ports) before the next
   round. With `--objects N` the cluster is seeded with N ConfigMaps (bench/seeded_kubesim.py): the
   time then includes the agent's relist and snapshot of a larger account.

    .venv/bin/python bench/hub_replicas.py              # the full run
    .venv/bin/python bench/hub_replicas.py --quick      # smoke run, under a minute
    .venv/bin/python bench/hub_replicas.py --objects 20000 --ops 50 --reads 100   # a larger account
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine, percentiles, start_seeded_kubesim
from processes import Proc

ROOT = Path(__file__).resolve().parent.parent
PG = "postgresql://postgres@127.0.0.1:5432"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_database() -> tuple[str, callable]:
    import asyncpg

    name = f"scaleagent_bench_{os.getpid()}_{uuid.uuid4().hex[:6]}"

    async def run(sql: str) -> None:
        conn = await asyncpg.connect(host="127.0.0.1", user="postgres", database="test")
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(run(f'CREATE DATABASE "{name}"'))
    return f"{PG}/{name}", lambda: asyncio.run(run(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


class Client:
    """One kept-alive HTTP connection to a hub."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=60)

    def call(self, method: str, path: str, body: object = None) -> tuple[int, object]:
        data = json.dumps(body).encode() if body is not None else None
        self.conn.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
        r = self.conn.getresponse()
        return r.status, json.loads(r.read() or b"null")


class Hubs:
    def __init__(self, tmp: Path, database: str, names: list[str]) -> None:
        self.tmp, self.database = tmp, database
        self.ports = {n: (free_port(), free_port()) for n in names}
        self.procs: dict[str, Proc] = {}
        for n in names:
            self.start(n)

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[name][1]}"

    def start(self, name: str) -> None:
        grpc, http_port = self.ports[name]
        config = self.tmp / f"{name}.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "server": {"grpcPort": grpc, "httpPort": http_port, "replicaName": name},
                    "database": {"url": self.database},
                    "sessions": {"graceSeconds": 30},
                    "replicas": {
                        "cluster": "static",
                        "heartbeat": {"periodSeconds": 1, "missedPeriods": 3},
                        "static": [{"id": n, "baseUrl": self.url(n)} for n in self.ports if n != name],
                    },
                }
            )
        )
        proc = Proc(["hub", "--config", str(config)])
        proc.wait_line(r"gRPC on \S+, HTTP on http://")
        self.procs[name] = proc

    def kill(self, name: str) -> None:
        self.procs[name].proc.send_signal(signal.SIGKILL)
        self.procs[name].proc.wait()

    def stop(self) -> None:
        for p in self.procs.values():
            p.stop()


def wait(predicate, timeout: float = 60.0, step: float = 0.02) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            if predicate():
                return time.monotonic() - start
        except (OSError, http.client.HTTPException, ValueError):
            pass
        time.sleep(step)  # polling what a user would poll: this is the measurement
    raise TimeoutError("condition not reached")


def served(url: str, account: str, objects: int = 1) -> bool:
    """The account ACTIVE on the hub at `url`, its agent's snapshot in: at least `objects` cached."""
    status, doc = Client(url).call("GET", f"/api/v1/accounts/{account}")
    return (
        status == 200
        and doc.get("state") == "ACTIVE"
        and doc.get("agentState") == "watching"
        and doc["objects"] >= objects
    )


def holder(url: str, account: str) -> str:
    status, rows = Client(url).call("GET", "/armory/replicas/assignments")
    return next(r["replica"] for r in rows if r["account"] == account)


def task(client: Client, i: int) -> float:
    manifest = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "bench", "namespace": "default"},
        "data": {"i": str(i)},
    }
    start = time.perf_counter()
    status, created = client.call(
        "POST", "/kubernetes/ops", [{"deployManifest": {"account": "c0", "manifests": [manifest]}}]
    )
    assert status == 200, created
    while True:
        status, doc = client.call("GET", f"/task/{created['id']}?waitSeconds=30")
        if doc["state"] != "running":
            assert doc["state"] == "completed", doc
            return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", type=int, default=200, help="tasks per path (direct, forwarded)")
    parser.add_argument("--reads", type=int, default=500, help="reads per path")
    parser.add_argument("--rounds", type=int, default=5, help="failover rounds")
    parser.add_argument("--objects", type=int, default=0, help="ConfigMaps seeded into the cluster (0: none)")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.ops, args.reads, args.rounds = 20, 50, 1
    drop = None
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        if args.objects:
            kubesim, info = start_seeded_kubesim(tmp / "kube", "--kinds", "1", "--objects", str(args.objects))
            kubeconfig = info["kubeconfigs"][0]
        else:
            kubesim = subprocess.Popen(
                [sys.executable, "-m", "scaleagent.cli", "kubesim", "--kubeconfig-dir", str(tmp / "kube")],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                cwd=ROOT,
            )
            for line in kubesim.stdout:
                if "kubesim: ready" in line:
                    break
            kubeconfig = str(tmp / "kube" / "kubesim-0.yaml")
        hubs = agent = None
        try:
            database, drop = make_database()
            hubs = Hubs(tmp, database, ["hub-a", "hub-b", "hub-c"])
            config = tmp / "agent.yaml"
            config.write_text(
                yaml.safe_dump(
                    {
                        "kubernetes": {"accounts": [{"name": "c0", "kubeconfigFile": kubeconfig}]},
                        "server": {"port": 0},
                        "clouddriver": {
                            "grpc": [f"localhost:{hubs.ports[n][0]}" for n in ("hub-a", "hub-b", "hub-c")],
                            "insecure": True,
                            "keepAliveHeartbeatSeconds": 1,
                            "keepAliveTimeOutSeconds": 2,
                        },
                    }
                )
            )
            agent = Proc(["agent", "--config", str(config)])
            wait(lambda: served(hubs.url("hub-b"), "c0"))
            assert holder(hubs.url("hub-b"), "c0") == "hub-a"
            total = Client(hubs.url("hub-a")).call("GET", "/api/v1/accounts/c0")[1]["objects"]
            print(f"# hub replicas: {machine()}; PostgreSQL; 3 hubs, 1 agent, kubesim; {total} objects in the account")

            # 1. forwarding
            direct, forwarded = Client(hubs.url("hub-a")), Client(hubs.url("hub-b"))
            for i in range(5):  # warm-up: connections, the first ConfigMap
                task(direct, i), task(forwarded, i)
            times: dict[str, list[float]] = {"direct": [], "forwarded": []}
            for i in range(args.ops):
                times["direct"].append(task(direct, 2 * i))
                times["forwarded"].append(task(forwarded, 2 * i + 1))
            reads: dict[str, list[float]] = {"direct": [], "forwarded": []}
            for _ in range(args.reads):
                for path, client in (("direct", direct), ("forwarded", forwarded)):
                    start = time.perf_counter()
                    status, doc = client.call("GET", "/api/v1/accounts/c0/objects?kind=ConfigMap&name=bench")
                    assert status == 200 and doc["items"], doc
                    reads[path].append(time.perf_counter() - start)
            print("\n## forwarding (agent on hub-a; direct = hub-a, forwarded = via hub-b)")
            print(f"{'':32}{'median ms':>12}{'p95 ms':>10}")
            for what, table in (("deployManifest task", times), ("object read", reads)):
                for path in ("direct", "forwarded"):
                    p50, p95 = percentiles(table[path], 50, 95)
                    print(f"{what + ' ' + path:32}{p50 * 1000:12.1f}{p95 * 1000:10.1f}")
                ratio = percentiles(table["forwarded"], 50)[0] / percentiles(table["direct"], 50)[0]
                print(f"{what + ' ratio':32}{ratio:12.2f}")

            # 2. failover
            print("\n## failover (SIGKILL of the hub streaming the account -> objects served by another)")
            results = []
            for r in range(args.rounds):
                victim = holder(hubs.url("hub-c" if hubs.procs["hub-c"].proc.poll() is None else "hub-a"), "c0")
                survivor = next(n for n in hubs.ports if n != victim)
                total = Client(hubs.url(survivor)).call("GET", "/api/v1/accounts/c0")[1]["objects"]
                killed = time.monotonic()
                hubs.kill(victim)
                wait(
                    lambda s=survivor, v=victim, n=total: (
                        served(hubs.url(s), "c0", n) and holder(hubs.url(s), "c0") != v
                    ),
                    timeout=300,
                )
                elapsed = time.monotonic() - killed
                results.append(elapsed)
                now = holder(hubs.url(survivor), "c0")
                print(f"round {r + 1}: killed {victim}; served by {now} after {elapsed:.2f} s")
                hubs.start(victim)
            p50 = percentiles(results, 50)[0]
            print(f"failover: median {p50:.2f} s, max {max(results):.2f} s over {len(results)} round(s)")
        finally:
            if agent is not None:
                agent.stop()
            if hubs is not None:
                hubs.stop()
            kubesim.terminate()
            kubesim.wait()
            if drop is not None:
                drop()


if __name__ == "__main__":
    main()
