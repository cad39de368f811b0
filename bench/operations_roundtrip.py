"""The deployManifest round trip: `POST /kubernetes/ops` -> applied in the cluster -> in the hub's cache ->
task completed.

kubesim (its own process, one simulated cluster per account), a hub (TLS gRPC, SQLite,
`operations.operationWaitMs: 60000`) and one agent following every account (every kind unless
`--kinds` says otherwise: what users get by default), all started as a user does. A task completes
only once the agent applied the manifest (server-side apply) and the hub's cache shows the
resourceVersion it produced, so a client that sees `completed` may read its write from the hub.

Measured, in this order, in one run:

1. **single**: one Deployment deployed through the hub, sequentially (`--ops`, after `--warmup`
   ones), each apply changing the pod template's image (a rollout: kubesim's controllers then make a
   ReplicaSet and a Pod, which the agent streams too) or, with `--change label`, only a label of the
   Deployment. Client side: `POST /kubernetes/ops`, then `GET /task/{id}?waitSeconds=30` until the
   task has ended, on one kept-alive HTTP connection (http.client). Right after each completion,
   `GET /api/v1/accounts/c0/objects?kind=Deployment&namespace=...&name=...` must show a
   resourceVersion >= the task's `resultObjects[0].manifests[0].metadata.resourceVersion`
   (read-your-writes); violations are counted. Alternating with each one, the **direct** floor:
   the same server-side apply PATCH (same parameters as the agent's) sent straight to kubesim on a
   kept-alive TLS connection with the admin certificate: the request alone.
2. **kubectl**: `kubectl apply -f` and `kubectl apply --server-side -f` of the same manifest
   against cluster 0 with its admin kubeconfig, alternately, `--kubectl-ops` times each (process
   start included: that is what a user pays). Skipped with a note when kubectl is not found.
3. **burst**: `--concurrency` deployManifest tasks fired at once (asyncio + aiohttp, one connection
   each), spread over `--accounts` accounts (distinct Deployments), waiting for all to complete;
   `--rounds` rounds after one uncounted warm-up round (which creates the Deployments). Each
   operation is also checked for read-your-writes right after its completion.

    .venv/bin/python bench/operations_roundtrip.py                 # the full run
    .venv/bin/python bench/operations_roundtrip.py --quick         # smoke run, well under a minute
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import http.client
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import orjson
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import cpu_seconds, machine, machine_busy, percentiles
from processes import Proc, get_json, make_pki

NAMESPACE = "bench"
IMAGE = "registry.example.com/shop/web"


def deployment(name: str, serial: int, change: str, namespace: str | None = None) -> dict:
    """A one-replica Deployment; `serial` changes its image (a rollout) or one of its labels."""
    meta: dict = {"name": name, "labels": {"app": name}}
    if namespace:
        meta["namespace"] = namespace
    if change == "label":
        meta["labels"]["bench-serial"] = str(serial)
    image = f"{IMAGE}:{serial if change == 'image' else 0}"
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": image}]},
            },
        },
    }


def deploy_op(account: str, manifest: dict) -> list[dict]:
    return [{"deployManifest": {"account": account, "manifests": [manifest], "namespaceOverride": NAMESPACE}}]


class Http:
    """JSON over one kept-alive HTTP(S) connection; reconnects (and counts it) if the server closed it."""

    def __init__(self, url: str, context: ssl.SSLContext | None = None) -> None:
        u = urlsplit(url)
        self.host, self.port, self.context = u.hostname, u.port, context
        self.conn: http.client.HTTPConnection | None = None
        self.reconnects = -1  # the first connection is not a reconnection

    def request(
        self,
        method: str,
        path: str,
        body: object = None,
        content_type: str = "application/json",
        raw_body: bytes | None = None,
    ) -> tuple[int, object]:
        data = raw_body if raw_body is not None else (orjson.dumps(body) if body is not None else None)
        headers = {"Content-Type": content_type, "Accept": "application/json"} if data is not None else {}
        for attempt in range(2):
            if self.conn is None:
                self.reconnects += 1
                self.conn = (
                    http.client.HTTPSConnection(self.host, self.port, timeout=120, context=self.context)
                    if self.context
                    else http.client.HTTPConnection(self.host, self.port, timeout=120)
                )
            try:
                self.conn.request(method, path, body=data, headers=headers)
                r = self.conn.getresponse()
                raw = r.read()
            except (
                http.client.RemoteDisconnected,
                http.client.CannotSendRequest,
                ConnectionResetError,
                BrokenPipeError,
            ):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise
                continue
            return r.status, orjson.loads(raw) if raw else None
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


def kube_http(kubeconfig: Path, tmp: Path) -> Http:
    """A kept-alive TLS connection to a kubesim cluster, with the admin kubeconfig's client certificate."""
    cfg = yaml.safe_load(kubeconfig.read_text())
    cluster, user = cfg["clusters"][0]["cluster"], cfg["users"][0]["user"]
    files = {}
    for key in ("certificate-authority-data", "client-certificate-data", "client-key-data"):
        files[key] = tmp / f"{kubeconfig.stem}-{key}.pem"
        files[key].write_bytes(base64.b64decode(cluster.get(key) or user.get(key)))
    os.chmod(files["client-key-data"], 0o600)
    ctx = ssl.create_default_context(cafile=str(files["certificate-authority-data"]))
    ctx.load_cert_chain(str(files["client-certificate-data"]), str(files["client-key-data"]))
    return Http(cluster["server"], ctx)


def server_side_apply(kube: Http, manifest: dict) -> dict:
    """The PATCH the agent sends for a deployManifest (same parameters), straight to the cluster."""
    name = manifest["metadata"]["name"]
    status, obj = kube.request(
        "PATCH",
        f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{name}"
        "?fieldManager=bench-direct&fieldValidation=Strict&force=true",
        content_type="application/apply-patch+yaml",
        raw_body=orjson.dumps(manifest),
    )
    if status != 200 and status != 201:
        raise RuntimeError(f"direct apply answered {status}: {obj}")
    return obj  # type: ignore[return-value]


def stats(xs: list[float]) -> str:
    p50, p90, p99 = percentiles(xs, 50, 90, 99)
    return f"p50 {p50:7.1f}   p90 {p90:7.1f}   p99 {p99:7.1f}   max {max(xs):7.1f} ms"


class Cpu:
    """CPU seconds of the bench's processes, and of the whole machine, over a phase."""

    def __init__(self, procs: dict[str, int]) -> None:
        self.procs = procs
        self.start()

    def start(self) -> None:
        self.t0 = time.monotonic()
        self.c0 = {k: cpu_seconds(pid) for k, pid in self.procs.items()}
        self.m0 = machine_busy()[0]
        self.k0 = _children_cpu()

    def line(self) -> str:
        wall = time.monotonic() - self.t0
        used = {k: cpu_seconds(pid) - self.c0[k] for k, pid in self.procs.items()}
        kubectl = _children_cpu() - self.k0  # only the kubectl runs are reaped while the bench runs
        if kubectl > 0:
            used["kubectl"] = kubectl
        whole = machine_busy()[0] - self.m0
        parts = ", ".join(f"{k} {v / wall:.0%}" for k, v in used.items())
        return (
            f"CPU (100% = one core): {parts}; whole machine {whole / wall:.0%}, of which other processes "
            f"{max(0.0, whole - sum(used.values())) / wall:.0%}"
        )


def _children_cpu() -> float:
    t = os.times()
    return t.children_user + t.children_system


# ---- 1. single operations, alternating with the direct PATCH -------------------------------------


def single_phase(hub_http: Http, kube: Http, hub: Proc, agent: Proc, args: argparse.Namespace) -> dict:
    rt: list[float] = []
    direct: list[float] = []
    windows: list[tuple[float, float, float, float, dict]] = []  # monotonic t0/t1, wall t0/t1, task
    violations: list[str] = []
    failed: list[str] = []
    for i in range(args.warmup + args.ops):
        counted = i >= args.warmup
        manifest = deployment("rt", i + 1, args.change)
        w0, t0 = time.time(), time.monotonic()
        status, doc = hub_http.request("POST", "/kubernetes/ops", deploy_op("c0", manifest))
        if status != 200:
            raise RuntimeError(f"POST /kubernetes/ops answered {status}: {doc}")
        task = _wait_task(hub_http, doc["id"])  # type: ignore[index]
        t1, w1 = time.monotonic(), time.time()
        if task["state"] != "completed":
            failed.append(f"op {i}: {task.get('exception')}")
            continue
        violation = _check_ryw(hub_http, "c0", task)
        if violation:
            violations.append(f"op {i}: {violation}")
        if counted:
            rt.append((t1 - t0) * 1000)
            windows.append((t0, t1, w0, w1, task))
        d0 = time.monotonic()
        server_side_apply(kube, deployment("direct", i + 1, args.change, NAMESPACE))
        if counted:
            direct.append((time.monotonic() - d0) * 1000)
    return {
        "rt": rt,
        "direct": direct,
        "violations": violations,
        "failed": failed,
        "breakdown": _breakdown(windows, agent),
    }


def _wait_task(conn: Http, task_id: str) -> dict:
    while True:
        status, task = conn.request("GET", f"/task/{task_id}?waitSeconds=30")
        if status != 200:
            raise RuntimeError(f"GET /task/{task_id} answered {status}: {task}")
        if task["state"] != "running":  # type: ignore[index]
            return task  # type: ignore[return-value]


def _applied_rv(task: dict) -> tuple[str, str]:
    m = task["resultObjects"][0]["manifests"][0]
    return m["metadata"]["name"], m["metadata"]["resourceVersion"]


def _check_ryw(conn: Http, account: str, task: dict) -> str:
    """'' if the hub's cache shows the task's Deployment at its applied resourceVersion or later."""
    name, rv = _applied_rv(task)
    status, lst = conn.request(
        "GET", f"/api/v1/accounts/{account}/objects?kind=Deployment&namespace={NAMESPACE}&name={name}"
    )
    items = lst.get("items") if status == 200 and isinstance(lst, dict) else None
    if not items:
        return f"{account}/{name}: not in the hub's cache (HTTP {status}) after completion at rv {rv}"
    cached = items[0]["metadata"]["resourceVersion"]
    return "" if int(cached) >= int(rv) else f"{account}/{name}: cache at rv {cached}, task applied rv {rv}"


def _phases(task: dict, w0: float, w1: float) -> dict[str, float] | None:
    """Where one operation's time went (ms), from the task's history (the hub's clock, ms
    resolution) and the client's wall clock when it sent the POST (w0) and had the answer (w1)."""
    hist = task["history"]
    # The hub truncates its timestamps to the millisecond: +0.5 puts each in the middle of its ms.
    replied = next((h["timestamp"] + 0.5 for h in hist if h["status"].startswith("Agent ")), None)
    cached = next((h["timestamp"] + 0.5 for h in hist if h["status"].startswith("The hub's cache shows")), replied)
    if replied is None:
        return None
    started = task["startTimeMs"] + 0.5
    return {
        "submit": started - w0 * 1000,  # POST sent -> task created
        "agent_rt": replied - started,  # -> the agent's reply received by the hub
        "cache": cached - replied,  # -> the hub's cache shows the change
        "answer": w1 * 1000 - cached,
    }  # -> the client has `completed`


def _describe(phases: list[dict[str, float]], agent_ms: list[float]) -> str:
    mean = {k: sum(p[k] for p in phases) / len(phases) for k in phases[0]}
    agent = f" (agent's own timer {sum(agent_ms) / len(agent_ms):.1f})" if agent_ms else ""
    return (
        f"POST -> task created {mean['submit']:.1f}; -> agent's reply in the hub {mean['agent_rt']:.1f}{agent}; "
        f"-> cache shows it {mean['cache']:.1f}; -> client has `completed` {mean['answer']:.1f}"
    )


def _agent_times(agent: Proc, t0: float, t1: float) -> list[float]:
    """The agent's "done in N ms" (INFO) of the operations it finished between t0 and t1."""
    return [
        float(m.group(1))
        for m, t in _lines(agent, r"operation \w+: deployManifest on \S+ done in (\d+) ms")
        if t0 <= t <= t1
    ]


def _breakdown(windows: list, agent: Proc) -> list[tuple[float, dict[str, float], float]]:
    """(round trip, phases, agent's own timer) of each sequential operation."""
    out = []
    for t0, t1, w0, w1, task in windows:
        phases, agent_ms = _phases(task, w0, w1), _agent_times(agent, t0, t1)
        if phases is not None and len(agent_ms) == 1:
            out.append(((t1 - t0) * 1000, phases, agent_ms[0]))
    return out


def _lines(proc: Proc, pattern: str) -> list[tuple[re.Match[str], float]]:
    with proc._new:
        pairs = list(zip(proc.log, proc.times))
    return [(m, t) for line, t in pairs if (m := re.search(pattern, line))]


# ---- 2. kubectl ------------------------------------------------------------------------------------


def kubectl_phase(kubectl: str, kubeconfig: Path, tmp: Path, args: argparse.Namespace) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"kubectl apply": [], "kubectl apply --server-side": []}
    for i in range(2 + args.kubectl_ops):  # two uncounted: kubectl fills its discovery cache
        for mode, extra in (("kubectl apply", []), ("kubectl apply --server-side", ["--server-side"])):
            name = "kubectl-ssa" if extra else "kubectl-csa"
            path = tmp / f"{name}.json"
            path.write_text(json.dumps(deployment(name, i + 1, args.change, NAMESPACE)))
            t0 = time.monotonic()
            p = subprocess.run(
                [kubectl, "--kubeconfig", str(kubeconfig), "apply", *extra, "-f", str(path)],
                capture_output=True,
                text=True,
            )
            elapsed = (time.monotonic() - t0) * 1000
            if p.returncode != 0:
                raise RuntimeError(f"{mode} failed ({p.returncode}): {p.stderr.strip()}")
            if i >= 2:
                out[mode].append(elapsed)
    return out


# ---- 3. bursts of concurrent operations --------------------------------------------------------------


async def burst_phase(hub_url: str, agent: Proc, args: argparse.Namespace, report) -> list[dict]:
    import aiohttp

    rounds = []
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(hub_url, connector=connector, timeout=timeout) as session:

        async def one(k: int, serial: int) -> tuple[float, float, str, str]:
            account, name = f"c{k % args.accounts}", f"tp-{k // args.accounts}"
            t0, w0 = time.monotonic(), time.time()
            async with session.post(
                "/kubernetes/ops",
                data=orjson.dumps(deploy_op(account, deployment(name, serial, args.change))),
                headers={"Content-Type": "application/json"},
            ) as r:
                doc = orjson.loads(await r.read())
                if r.status != 200:
                    raise RuntimeError(f"POST /kubernetes/ops answered {r.status}: {doc}")
            while True:
                async with session.get(f"/task/{doc['id']}", params={"waitSeconds": "60"}) as r:
                    task = orjson.loads(await r.read())
                if task["state"] != "running":
                    break
            t1, w1 = time.monotonic(), time.time()
            phases.append(_phases(task, w0, w1))
            if task["state"] != "completed":
                return t0, t1, f"{account}/{name}: {task.get('exception')}", ""
            name, rv = _applied_rv(task)
            async with session.get(
                f"/api/v1/accounts/{account}/objects",
                params={"kind": "Deployment", "namespace": NAMESPACE, "name": name},
            ) as r:
                items = orjson.loads(await r.read()).get("items") or []
            cached = items[0]["metadata"]["resourceVersion"] if items else "0"
            violation = (
                "" if int(cached) >= int(rv) else f"{account}/{name}: cache at rv {cached}, task applied rv {rv}"
            )
            return t0, t1, "", violation

        for r in range(1 + args.rounds):  # round 0 is the warm-up: it creates the Deployments
            report.start()
            phases: list[dict[str, float] | None] = []
            start = time.monotonic()
            results = await asyncio.gather(*(one(k, 1000 + r) for k in range(args.concurrency)))
            wall = max(t1 for _, t1, _, _ in results) - start
            cpu = report.line()
            if r == 0:
                continue
            await asyncio.sleep(0.05)  # the agent's log lines of the round arrive
            rounds.append(
                {
                    "phases": [p for p in phases if p],
                    "agent": _agent_times(agent, start, start + wall),
                    "wall": wall,
                    "lat": [(t1 - t0) * 1000 for t0, t1, _, _ in results],
                    "failed": [f for _, _, f, _ in results if f],
                    "violations": [v for _, _, _, v in results if v],
                    "cpu": cpu,
                }
            )
    return rounds


# ---- the run ---------------------------------------------------------------------------------------


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", type=int, default=200, help="sequential round trips measured (and direct PATCHes)")
    p.add_argument("--warmup", type=int, default=5, help="uncounted sequential round trips first")
    p.add_argument("--rounds", type=int, default=3, help="bursts of concurrent operations, after one warm-up burst")
    p.add_argument("--concurrency", type=int, default=100, help="operations fired at once in each burst")
    p.add_argument(
        "--accounts", type=int, default=10, help="accounts (one kubesim cluster each) the burst spreads over"
    )
    p.add_argument("--kubectl-ops", type=int, default=50, help="kubectl applies of each kind (0: skip)")
    p.add_argument("--kubectl", default=shutil.which("kubectl"), help="kubectl binary (default: the one on PATH)")
    p.add_argument(
        "--change",
        choices=["image", "label"],
        default="image",
        help="what each apply changes: the image (a rollout) or a label of the Deployment",
    )
    p.add_argument("--kinds", nargs="*", default=[], help="restrict each account to these kinds (default: all)")
    p.add_argument(
        "--quick", action="store_true", help="smoke run: 20 sequential ops, 1 burst round, 5 kubectl applies of each"
    )
    args = p.parse_args()
    if args.quick:
        args.ops, args.warmup, args.rounds, args.kubectl_ops = 20, 3, 1, 5
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        procs: list[Proc] = []
        try:
            run(tmp, args, procs)
        finally:
            _stop_all(procs)


def _stop_all(procs: list[Proc]) -> None:
    """Agent, hub, kubesim, in that order; a Ctrl-C while one stops kills it and goes on with the others."""
    interrupted: BaseException | None = None
    for proc in reversed(procs):
        try:
            proc.stop()
        except BaseException as e:
            interrupted = interrupted or e
            proc.proc.kill()
    if interrupted is not None:
        raise interrupted


def run(tmp: Path, args: argparse.Namespace, procs: list[Proc]) -> None:
    kube_dir = tmp / "kube"
    kubesim = Proc(["kubesim", "--clusters", str(args.accounts), "--kubeconfig-dir", str(kube_dir)])
    procs.append(kubesim)
    _wait_file(kube_dir / f"kubesim-{args.accounts - 1}-limited.yaml")
    kubeconfigs = [kube_dir / f"kubesim-{i}.yaml" for i in range(args.accounts)]
    for kc in kubeconfigs:
        conn = kube_http(kc, tmp)
        status, body = conn.request(
            "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        )
        conn.close()
        if status != 201:
            raise RuntimeError(f"creating namespace {NAMESPACE} answered {status}: {body}")
    pki = make_pki(tmp / "pki")
    hub_config = tmp / "hub.yaml"
    hub_config.write_text(
        yaml.safe_dump(
            {
                "server": {"grpcPort": 0, "httpPort": 0},
                "tls": {"certFile": str(pki["cert"]), "keyFile": str(pki["key"])},
                "database": {"url": f"sqlite:///{tmp / 'hub.db'}"},
                "operations": {"operationWaitMs": 60000},
            }
        )
    )
    # INFO: the hub logs each operation it sends, the agent each one it ran and how long it took.
    hub = Proc(["--log-level", "INFO", "hub", "--config", str(hub_config)])
    procs.append(hub)
    m = hub.wait_line(r"gRPC on \S+:(\d+), HTTP on (http://\S+)")
    grpc_port, hub_url = int(m.group(1)), m.group(2)
    accounts = [
        {"name": f"c{i}", "kubeConfigFile": str(kc), **({"kinds": args.kinds} if args.kinds else {})}
        for i, kc in enumerate(kubeconfigs)
    ]
    agent_config = tmp / "agent.yaml"
    agent_config.write_text(
        yaml.safe_dump(
            {
                "kubernetes": {"accounts": accounts, "discoveryIntervalSeconds": 600},
                "server": {"port": 0},
                "clouddriver": {"grpc": f"localhost:{grpc_port}", "tls": {"cacertFile": str(pki["ca"])}},
            }
        )
    )
    started = time.monotonic()
    agent = Proc(["--log-level", "INFO", "agent", "--config", str(agent_config)])
    procs.append(agent)
    _wait_ready(hub_url, args.accounts)
    ready_s = time.monotonic() - started

    scope = f"kinds {', '.join(args.kinds)}" if args.kinds else "every kind"
    print(
        f"deployManifest round trip: {args.accounts} kubesim clusters, one agent following {args.accounts} accounts "
        f"({scope}), each apply changes the {args.change} ({machine()})"
    )
    print(f"  agent launch -> every account watching and the Operations stream up: {ready_s:.1f} s")
    cpu = Cpu({"kubesim": kubesim.pid, "hub": hub.pid, "agent": agent.pid, "bench": os.getpid()})
    table: list[tuple[str, list[float]]] = []

    hub_http, kube = Http(hub_url), kube_http(kubeconfigs[0], tmp)
    cpu.start()
    single = single_phase(hub_http, kube, hub, agent, args)
    print(
        f"\n1. sequential, {len(single['rt'])} operations on account c0 (after {args.warmup} warm-up), "
        "alternating with the direct PATCH"
    )
    print(f"  round trip (POST -> completed)   {stats(single['rt'])}")
    print(f"  direct server-side apply PATCH   {stats(single['direct'])}")
    b = single["breakdown"]
    if b:
        print(
            f"  where it goes (mean of {len(b)}, ms; the hub's task history has ms resolution): "
            + _describe([x[1] for x in b], [x[2] for x in b])
        )
        for rt, ph, ag in sorted(b, key=lambda x: -x[0])[:3]:
            print(f"    a slowest one, {rt:.1f} ms: " + _describe([ph], [ag]))
    print(
        f"  read-your-writes violations: {len(single['violations'])}; failed tasks: {len(single['failed'])}; "
        f"HTTP reconnections: hub {hub_http.reconnects}, kubesim {kube.reconnects}"
    )
    for line in (single["violations"] + single["failed"])[:5]:
        print(f"    {line}")
    print(f"  {cpu.line()}")
    table += [
        ("direct server-side apply PATCH (one request)", single["direct"]),
        ("deployManifest round trip, sequential", single["rt"]),
    ]
    hub_http.close()
    kube.close()

    kubectl_results: dict[str, list[float]] = {}
    if args.kubectl_ops <= 0:
        print("\n2. kubectl: skipped (--kubectl-ops 0)")
    elif not args.kubectl:
        print("\n2. kubectl: skipped, no kubectl on PATH")
    else:
        cpu.start()
        kubectl_results = kubectl_phase(args.kubectl, kubeconfigs[0], tmp, args)
        print(f"\n2. kubectl ({args.kubectl}), {args.kubectl_ops} applies of each, alternating, process start included")
        for mode, xs in kubectl_results.items():
            print(f"  {mode:32s} {stats(xs)}")
        print(f"  {cpu.line()}")
        table += list(kubectl_results.items())

    rounds = asyncio.run(burst_phase(hub_url, agent, args, cpu))
    print(
        f"\n3. bursts: {args.concurrency} deployManifest tasks at once over {args.accounts} accounts, "
        f"{args.rounds} round(s) after one warm-up; agent operations.maxConcurrent 16 (the default)"
    )
    all_lat: list[float] = []
    for i, r in enumerate(rounds):
        all_lat += r["lat"]
        p50, p99 = percentiles(r["lat"], 50, 99)
        print(
            f"  round {i + 1}: all completed in {r['wall'] * 1000:6.0f} ms = "
            f"{args.concurrency / r['wall']:6.1f} ops/s; "
            f"per operation p50 {p50:.0f} ms, p99 {p99:.0f} ms; failed {len(r['failed'])}, "
            f"read-your-writes violations {len(r['violations'])}"
        )
        for line in (r["failed"] + r["violations"])[:5]:
            print(f"    {line}")
        if r["phases"]:
            print("    where it goes (mean, ms): " + _describe(r["phases"], r["agent"]))
        print(f"    {r['cpu']}")
    table.append((f"deployManifest in bursts of {args.concurrency} (per operation)", all_lat))

    base = percentiles(kubectl_results["kubectl apply"], 50)[0] if kubectl_results else None
    direct50 = percentiles(single["direct"], 50)[0]
    print(f"\n{'measure':52s} {'p50 ms':>8s} {'p99 ms':>8s} {'/ kubectl apply':>16s} {'/ direct PATCH':>15s}")
    for name, xs in table:
        p50, p99 = percentiles(xs, 50, 99)
        ratio = f"{p50 / base:.2f}x" if base else "-"
        print(f"{name:52s} {p50:8.1f} {p99:8.1f} {ratio:>16s} {p50 / direct50:14.1f}x")
    walls = sorted(r["wall"] for r in rounds)
    if walls:
        print(
            f"bursts: median {args.concurrency / walls[len(walls) // 2]:.1f} ops/s "
            f"(rounds: {', '.join(format(args.concurrency / r['wall'], '.1f') for r in rounds)})"
        )


def _wait_file(path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"kubesim wrote no {path.name}")
        time.sleep(0.05)


def _wait_ready(hub_url: str, n: int, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            accounts = get_json(hub_url + "/api/v1/accounts")
            agents = get_json(hub_url + "/armory/agents")
        except OSError:
            accounts, agents = [], []
        watching = [a for a in accounts if a.get("agentState") == "watching"]  # type: ignore[union-attr]
        if len(watching) == n and agents and all(a.get("operationsStream") for a in agents):  # type: ignore[union-attr]
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(watching)} of {n} accounts watching after {timeout:g} s")
        time.sleep(0.1)


if __name__ == "__main__":
    main()
