"""Three hub replicas sharing one database, finding each other through the Endpoints of their
Service, with agents spread over them (issue 14, docs/ha.md).

Every replica answers every API the same; a replica killed with `kill -9` in the middle of 100
operations leaves no task running and no operation applied twice, and the accounts its agents
streamed are served again by the others.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from tests.databases import emptied
from tests.helpers import AgentProcess, HubProcess, KubesimProcess, free_port, start_kubesim, write_yaml

NAMES = ("hub-a", "hub-b", "hub-c")
HEARTBEAT_SECONDS = 1.0
E2E_ENV = "SCALE_AGENT_E2E_KUBECONFIG"  # the real API server scripts/test starts (docs/real-cluster.md)


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def service_and_endpoints(name: str, ip: str, ports: dict[str, int]) -> dict:
    """A Service without a selector (so the endpoints controller leaves its Endpoints alone) and
    the Endpoints the controller would write for three hub pods, one subset per pod (here all on
    one host, each with its own HTTP port)."""
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"ports": [{"name": "http", "port": 7002}, {"name": "grpc", "port": 9091}]},
    }
    endpoints = {
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {"name": name, "namespace": "default"},
        "subsets": [
            {
                "addresses": [{"ip": ip, "targetRef": {"kind": "Pod", "name": hub, "namespace": "default"}}],
                "ports": [
                    {"name": "http", "port": port, "protocol": "TCP"},
                    {"name": "grpc", "port": 1, "protocol": "TCP"},
                ],
            }
            for hub, port in ports.items()
        ],
    }
    return {"apiVersion": "v1", "kind": "List", "items": [service, endpoints]}


def host_address() -> str:
    """This machine's address on its network: a real API server refuses loopback Endpoints."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("10.255.255.255", 1))  # no packet is sent: this only picks the outbound interface
        return s.getsockname()[0]


class Replicas:
    """Three hubs on one database, discovering each other in the cluster of `discovery`."""

    def __init__(self, directory: Path, database_url: str, discovery: Path, ip: str) -> None:
        self.http = {name: free_port() for name in NAMES}
        manifest = service_and_endpoints("spin-clouddriver-ha", ip, self.http)
        kubectl(discovery, "apply", "-f", "-", stdin=json.dumps(manifest))
        self.hubs: dict[str, HubProcess] = {}
        for name in NAMES:
            self.hubs[name] = HubProcess(
                write_yaml(
                    directory / f"{name}.yaml",
                    {
                        "server": {
                            "grpcPort": 0,
                            "httpPort": self.http[name],
                            "httpHost": ip,
                            "replicaName": name,
                        },
                        "database": {"url": database_url},
                        "sessions": {"graceSeconds": 30},
                        # The API listens on this host's address: open on purpose, as this test
                        # is about replicas (logins across replicas: test_hub_replicas_auth.py).
                        "auth": {"anonymous": True},
                        "replicas": {
                            "cluster": "kubernetes",
                            "heartbeat": {"periodSeconds": HEARTBEAT_SECONDS, "missedPeriods": 3},
                            "kubernetes": {"kubeconfigFile": str(discovery), "namespace": "default"},
                        },
                    },
                )
            )

    def live(self) -> list[HubProcess]:
        return [h for h in self.hubs.values() if h.proc.poll() is None]

    def stop(self) -> None:
        for hub in self.live():
            hub.stop()


class Watch:
    """`GET /api/v1/watch` read on a thread: its Server-Sent Events, as they arrive."""

    def __init__(self, url: str) -> None:
        self.events: list[dict] = []
        self._new = threading.Condition()
        self._response = urllib.request.urlopen(url, timeout=120)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        event: dict = {}
        for raw in self._response:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                event = {"event": line[7:]}
            elif line.startswith("data: "):
                event["data"] = json.loads(line[6:])
            elif not line and event:
                with self._new:
                    self.events.append(event)
                    self._new.notify_all()
                event = {}
        with self._new:
            self._new.notify_all()

    def wait(self, predicate, timeout: float = 30.0) -> dict:
        deadline = time.monotonic() + timeout
        with self._new:
            while True:
                found = next((e for e in self.events if predicate(e)), None)
                if found is not None:
                    return found
                remaining = deadline - time.monotonic()
                assert remaining > 0, f"no such event within {timeout}s: {self.events[-5:]}"
                self._new.wait(remaining)


def agent(directory: Path, name: str, account: str, kubeconfig: Path, hubs: list[HubProcess]) -> AgentProcess:
    return AgentProcess(
        write_yaml(
            directory / f"{name}.yaml",
            {
                "agentId": name,
                "kubernetes": {"accounts": [{"name": account, "kubeconfigFile": str(kubeconfig)}]},
                "server": {"port": 0},
                "clouddriver": {
                    "grpc": [f"localhost:{h.grpc_port}" for h in hubs],
                    "insecure": True,
                    "keepAliveHeartbeatSeconds": 1,
                    "keepAliveTimeOutSeconds": 2,
                },
            },
        ),
        print_events=False,
    )


def all_active(doc: object, accounts: list[str]) -> bool:
    """Every account ACTIVE, its agent watching (its first snapshot in)."""
    states = {a["name"]: (a["state"], a["agentState"]) for a in doc}  # type: ignore[union-attr]
    return all(states.get(a) == ("ACTIVE", "watching") for a in accounts)


def comparable_accounts(doc: list[dict]) -> list[dict]:
    """What must be equal from every replica (counts move with the cluster's own churn)."""
    return [{k: a[k] for k in ("name", "state", "agentId", "apiHost", "kinds")} for a in doc]


def job(op: int) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"generateName": f"op-{op}-", "namespace": "default", "labels": {"ha-op": str(op)}},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}},
    }


@pytest.fixture
def cluster(tmp_path: Path) -> KubesimProcess:
    proc = start_kubesim(tmp_path / "kubesim", "--clusters", "3", "--bookmark-interval", "1")
    yield proc
    proc.stop()


@pytest.mark.parametrize(
    ("database", "discovery"),
    [
        pytest.param("postgres_db", "kubesim", id="postgresql-kubesim"),
        pytest.param("mariadb_db", "kubesim", id="mariadb-kubesim"),
        pytest.param("postgres_db", "real", id="postgresql-real", marks=pytest.mark.e2e),
    ],
)
def test_three_replicas_answer_alike_and_survive_a_kill_in_the_middle_of_100_operations(
    tmp_path: Path, cluster: KubesimProcess, database: str, discovery: str, request: pytest.FixtureRequest
) -> None:
    """The hubs find each other through Endpoints in kubesim, or in the real API server of the
    e2e suite; the agents' clusters are kubesim's in both."""
    if discovery == "real":
        real = os.environ.get(E2E_ENV)
        if not real:
            pytest.skip(f"{E2E_ENV} is not set: no real API server for the hubs' discovery")
        where, ip = Path(real), host_address()
    else:
        where, ip = cluster.admin(0), "127.0.0.1"
    database_url = emptied(request.getfixturevalue(database))
    replicas = Replicas(tmp_path, database_url, where, ip)
    accounts = [f"acct-{i}" for i in range(3)]
    agents: list[AgentProcess] = []
    try:
        a, b, c = (replicas.hubs[n] for n in NAMES)
        for hub in (a, b, c):
            hub.wait_until(
                "/armory/clouddrivers", lambda d: sorted(p["id"] for p in d) == list(NAMES), what="three replicas"
            )
        order = [[a, b, c], [b, c, a], [c, a, b]]
        for i, account in enumerate(accounts):
            agents.append(agent(tmp_path, f"agent-{i}", account, cluster.admin(i), order[i]))
        for hub in (a, b, c):
            hub.wait_until("/api/v1/accounts", lambda d: all_active(d, accounts), what="every account ACTIVE")

        # Every API answers the same from every replica.
        def same(path: str, shape=lambda d: d) -> object:
            answers = [shape(hub.json(path)) for hub in (a, b, c)]
            assert answers[0] == answers[1] == answers[2], (path, answers)
            return answers[0]

        same("/armory/clouddrivers", lambda d: [(p["id"], p["baseUrl"], p["ready"]) for p in d])
        same("/api/v1/accounts", comparable_accounts)
        same("/armory/agents", lambda d: sorted((s["agentId"], s["replica"]) for s in d))
        same("/armory/replicas/assignments", lambda d: [(r["account"], r["replica"], r["agent"]) for r in d])
        for account in accounts:
            same(f"/api/v1/accounts/{account}", lambda d: (d["name"], d["state"], d["agentId"]))
            same(
                f"/api/v1/accounts/{account}/objects?kind=Namespace",
                lambda d: sorted(i["metadata"]["uid"] for i in d["items"]),
            )
        # An operation sent to hub-a for an account hub-b streams; its change seen in hub-c's watch.
        watch = Watch(c.url + "/api/v1/watch?account=acct-1&kind=ConfigMap")
        done = a.run_task([{"deployManifest": {"account": "acct-1", "manifests": [_config_map("via-a")]}}])
        assert done["state"] == "completed", done
        same(f"/task/{done['id']}", lambda d: (d["state"], d["resultObjects"][0]["manifestNamesByNamespace"]))
        assert [o["metadata"]["name"] for o in c.objects("acct-1", "?kind=ConfigMap&name=via-a")] == ["via-a"]
        event = watch.wait(lambda e: e["event"] == "ADDED" and e["data"]["name"] == "via-a")
        assert event["data"]["account"] == "acct-1"

        # 100 operations, submitted to the three replicas in turn; hub-b (holding agent-1's
        # session) is killed with SIGKILL after the 30th.
        submitted: dict[int, tuple[HubProcess, str, str]] = {}
        lock = threading.Lock()

        def submit(op: int) -> None:
            account = accounts[op % 3]
            for hub in [(a, b, c)[op % 3], a, c]:  # like a load balancer retrying a dead backend
                if hub.proc.poll() is not None:
                    continue
                try:
                    status, created = hub.post(
                        "/kubernetes/ops",
                        [{"runJob": {"account": account, "manifest": job(op), "waitForCompletion": False}}],
                    )
                except OSError:
                    continue
                assert status == 200, created
                with lock:
                    submitted[op] = (hub, account, created["id"])
                return

        threads = [threading.Thread(target=submit, args=(op,)) for op in range(100)]
        for t in threads[:30]:
            t.start()
        for t in threads[:30]:
            t.join()
        b.proc.send_signal(signal.SIGKILL)
        b.proc.wait()
        killed_at = time.monotonic()
        # The gathered watch says it lost a replica (the client rereads and watches again).
        assert "hub-b" in watch.wait(lambda e: e["event"] == "error")["data"]["message"]
        for t in threads[30:]:
            t.start()
        for t in threads[30:]:
            t.join()
        assert len(submitted) == 100

        # None stays RUNNING: each ends, read from a surviving replica.
        outcomes: dict[int, dict] = {}
        for op, (_, _account, task_id) in sorted(submitted.items()):
            deadline = time.monotonic() + 90
            while True:
                status, doc = a.get(f"/task/{task_id}?waitSeconds=10", timeout=40)
                assert status == 200, (op, status, doc)
                if doc["state"] != "running":
                    outcomes[op] = doc
                    break
                assert time.monotonic() < deadline, (op, doc)
        states = Counter(doc["state"] for doc in outcomes.values())
        assert set(states) <= {"completed", "failed"}, states

        # None applied twice: at most one Job per operation, exactly one for every completed one.
        jobs = Counter()
        for i in range(3):
            listed = json.loads(kubectl(cluster.admin(i), "get", "jobs", "-n", "default", "-l", "ha-op", "-o", "json"))
            jobs.update(j["metadata"]["labels"]["ha-op"] for j in listed["items"])
        assert max(jobs.values()) == 1, [op for op, n in jobs.items() if n > 1]
        for op, doc in outcomes.items():
            if doc["state"] == "completed":
                assert jobs[str(op)] == 1, (op, doc)
            else:  # failed only because hub-b died: its own tasks, or an operation it held in flight
                said = json.dumps(doc.get("exception"))
                account = (doc.get("accounts") or ["?"])[0]
                context = [f"{n}: {line}" for n, h in replicas.hubs.items() for line in h.log if account in line]
                assert "hub-b" in said or "replica" in said, (doc, context[-40:])

        # hub-b's agent is served again by the others: its account ACTIVE and readable everywhere.
        for hub in (a, c):
            hub.wait_until("/api/v1/accounts", lambda d: all_active(d, accounts), what="every account ACTIVE again")
            assert hub.objects("acct-1", "?kind=Namespace")
        failover = time.monotonic() - killed_at
        print(f"failover: hub-b killed; every account ACTIVE again on the others within {failover:.1f}s")
        assert agents[1].health()["hub"]["state"] == "connected"
    finally:
        for ag in agents:
            ag.stop()
        replicas.stop()


def _config_map(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"},
        "data": {"k": "v"},
    }
