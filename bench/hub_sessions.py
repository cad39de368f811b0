"""One hub holding many agent sessions: its memory, its CPU while they connect and while they idle, and how
long until every account is ACTIVE.

`scale-agent hub` runs as a process of its own (plaintext gRPC on loopback, free ports), on a fresh SQLite
file (`--database sqlite`, the default) or a fresh PostgreSQL database created for the run and dropped after
(`--database postgresql://...`; the hub then also gets `replicas: {cluster: static, heartbeat:
{periodSeconds: 5}}`, with no peers: one replica doing its replica bookkeeping. If the hub refuses that, the
run says so and measures without `replicas`).

This process simulates N agents (asyncio on uvloop, grpc.aio), each speaking the protocol as
`scaleagent.agent.link` does, each on its OWN channel (its own TCP connection, as a real agent has; a local
subchannel pool and the agent's own keepalive options):

* the Caching stream opens with a Hello: agent_id `bench-i`, one account `acct-i` described `connecting`
  (api_host `https://10.0.<i/256>.<i%256>:6443`, a SHA-256 fingerprint, server version, kinds
  `["ConfigMap"]`), heartbeats every 10 s with a 10 s timeout;
* after the Welcome, the Operations stream opens with its hello (the Welcome's session id); operations that
  arrive are refused as an agent without an executor does (none are sent in this benchmark);
* one batch (sequence 1) with the snapshot: SNAPSHOT_BEGIN, `--objects` ConfigMaps as ADDED (about 0.3 KB
  each), SNAPSHOT_END; then the account described again, `watching`;
* then a Heartbeat every 10 s; everything the hub sends (acks, heartbeat echoes) is read.

At most `--concurrency` sessions are being opened at once (channel, Hello, Welcome, Operations hello,
snapshot written). The clock starts when the first session starts connecting. A thread polls the hub's
`GET /api/v1/accounts` every `--poll` seconds, or after 9 times the last poll's own time when that is longer
(POLL_QUIET: the polls must not be what slows the hub), until every account's `state` is `ACTIVE` (the
figure), and goes on until every account is also `agentState: watching` with all its objects counted. Hub
CPU is read from `/proc/<pid>/stat` (user + system), RSS from `/proc/<pid>/status`: before the first session
(the hub idle for 2 s after start), once everything is ACTIVE and counted, and after `--hold` seconds of
heartbeats only (nothing else happens: no polling during the hold). What one poll of `/api/v1/accounts`
costs the hub is measured at the end on its own, since polling runs during the connect phase.

    .venv/bin/python bench/hub_sessions.py --quick                      # smoke run, 100 sessions, under a minute
    .venv/bin/python bench/hub_sessions.py                              # 1,000 sessions, SQLite
    .venv/bin/python bench/hub_sessions.py --database postgresql://postgres@127.0.0.1:5432/test
    .venv/bin/python bench/hub_sessions.py --database postgresql://postgres@127.0.0.1:5432/test --no-replicas

`--concurrency 2000` (as many as `--sessions`) opens them all at once, as agents reconnecting to a restarted
hub do; "Caching call -> Welcome" says how long they waited for the hub to take their streams.
`--hub-log FILE` keeps the hub's whole log (`--hub-log-level INFO` for each session's lines).

To tell apart what the idle sessions cost: `--heartbeat 60` (a heartbeat a minute instead of the agent's
10 s) and `--no-keepalive` (no HTTP/2 pings from the sessions; the agent sends one every 10 s).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import resource
import shlex
import socket
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import grpc
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import cpu_seconds, machine, machine_busy, memory_kb, run
from processes import Proc, get_json

from scaleagent import __version__
from scaleagent.protocol import PROTOCOL_VERSION, pb, pb_grpc

HEARTBEAT_SECONDS = 10
# The agent's channel options (agent/link.py `_channel`): one connection of its own, its keepalive.
# (`--keepalive 0` leaves the HTTP/2 pings out, to tell their cost from the heartbeats'.)
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.enable_retries", 0),
    ("grpc.use_local_subchannel_pool", 1),
]
KEEPALIVE_OPTIONS = [
    ("grpc.keepalive_time_ms", HEARTBEAT_SECONDS * 1000),
    ("grpc.keepalive_timeout_ms", 20_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def config_map(account: str, j: int) -> bytes:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": f"cm-{j}",
                "namespace": "default",
                "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{account}/cm-{j}")),
                "resourceVersion": str(1000 + j),
                "creationTimestamp": "2026-11-24T00:00:00Z",
                "labels": {"app": "bench", "index": str(j)},
            },
            "data": {"key": "v" * 128},
        },
        separators=(",", ":"),
    ).encode()


# Seconds a session waits for the hub's Welcome before the bench gives it up, as an agent does
# (agent/link.py WELCOME_TIMEOUT, 60 s; it was 15 s), to count a slow Welcome as slow rather than
# lost. A stream still waiting for the hub to take it after 30 s is cancelled by the hub's gRPC
# itself before that (CANCELLED, its grpc.server_max_unrequested_time_in_server), and streams
# beyond the hub's grpc.maxPendingCalls waiting are refused the same way: neither reaches the
# hub's log.
WELCOME_WAIT = 60.0


class Session:
    """One simulated agent: its own channel, its Caching and Operations streams."""

    def __init__(self, i: int, target: str, objects: int, keepalive: bool = True, heartbeat: int = 10) -> None:
        self.i, self.target, self.objects, self.heartbeat = i, target, objects, heartbeat
        self.options = CHANNEL_OPTIONS + (KEEPALIVE_OPTIONS if keepalive else [])
        self.agent_id, self.account = f"bench-{i}", f"acct-{i}"
        digest = hashlib.sha256(self.account.encode()).hexdigest().upper()
        self.fingerprint = ":".join(digest[k : k + 2] for k in range(0, 64, 2))
        self.api_host = f"https://10.0.{i // 256}.{i % 256}:6443"
        self.channel: grpc.aio.Channel | None = None
        self.caching: grpc.aio.StreamStreamCall | None = None
        self.operations: grpc.aio.StreamStreamCall | None = None
        self.session_id = ""
        self.tasks: list[asyncio.Task] = []
        self.acked = asyncio.Event()
        self.beats_sent = self.echoes = self.other = self.ops_refused = 0
        self.last_beat = 0.0  # time.monotonic() of the last heartbeat sent
        self.rejected = ""
        self.ended = ""  # why a stream ended, if one did
        # time.monotonic(): the Caching call started, and its Welcome read (the hub's handler took the call)
        self.started = self.welcomed = 0.0
        self.stage = "not started"  # where open() is: a failure says at which step it came

    def describe(self, state: str) -> pb.Account:
        return pb.Account(
            name=self.account,
            state=state,
            api_host=self.api_host,
            certificate_fingerprint=self.fingerprint,
            server_version="v1.30.0",
            kinds=["ConfigMap"],
        )

    async def open(self) -> None:
        self.started = time.monotonic()
        self.channel = grpc.aio.insecure_channel(self.target, options=self.options)
        stub = pb_grpc.AgentLinkStub(self.channel)
        self.caching = stub.Caching()
        self.stage = "writing the Hello"
        await self.caching.write(
            pb.CachingMessage(
                hello=pb.Hello(
                    protocol_version=PROTOCOL_VERSION,
                    agent_id=self.agent_id,
                    agent_version=__version__,
                    dynamic_accounts_enabled=True,
                    heartbeat_seconds=self.heartbeat,
                    heartbeat_timeout_seconds=HEARTBEAT_SECONDS,
                    accounts=[self.describe("connecting")],
                )
            )
        )
        self.stage = "waiting for the Welcome"
        try:
            first = await asyncio.wait_for(self.caching.read(), WELCOME_WAIT)
        except TimeoutError:
            # The bench then cancels the call itself: the hub logs a session cancelled by its
            # client. Said here so that a lost session is never of unknown cause again.
            raise RuntimeError(f"no Welcome within {WELCOME_WAIT:.0f} s (the bench cancelled the call)") from None
        if first is grpc.aio.EOF or first.WhichOneof("message") != "welcome":
            raise RuntimeError(f"{self.agent_id}: no Welcome but {first!r}")
        self.welcomed = time.monotonic()
        self.session_id = first.welcome.session_id
        self.operations = stub.Operations()
        self.stage = "writing the Operations hello"
        await self.operations.write(
            pb.OperationsMessage(
                hello=pb.OperationsHello(
                    protocol_version=PROTOCOL_VERSION, agent_id=self.agent_id, session_id=self.session_id
                )
            )
        )
        self.tasks = [
            asyncio.create_task(self._read()),
            asyncio.create_task(self._serve_operations()),
        ]
        marker = {"account": self.account, "version": "v1", "kind": "ConfigMap"}
        events = [pb.Event(type=pb.SNAPSHOT_BEGIN, **marker)]
        events += [
            pb.Event(
                type=pb.ADDED,
                namespace="default",
                name=f"cm-{j}",
                resource_version=str(1000 + j),
                object=config_map(self.account, j),
                **marker,
            )
            for j in range(self.objects)
        ]
        events.append(pb.Event(type=pb.SNAPSHOT_END, **marker))
        self.stage = "writing the snapshot"
        await self.caching.write(pb.CachingMessage(events=pb.EventBatch(sequence=1, events=events)))
        self.stage = "writing `watching`"
        await self.caching.write(pb.CachingMessage(account=self.describe("watching")))
        self.stage = "open"
        self.tasks.append(asyncio.create_task(self._heartbeats()))

    async def _read(self) -> None:
        try:
            while True:
                msg = await self.caching.read()
                if msg is grpc.aio.EOF:
                    self.ended = self.ended or "the hub ended the Caching stream"
                    return
                which = msg.WhichOneof("message")
                if which == "ack":
                    if msg.ack.sequence >= 1:
                        self.acked.set()
                elif which == "heartbeat":
                    self.echoes += 1
                elif which == "account_rejected":
                    self.rejected = msg.account_rejected.reason
                else:
                    self.other += 1
        except grpc.aio.AioRpcError as e:
            self.ended = self.ended or f"Caching: {e.code().name}: {e.details()}"

    async def _serve_operations(self) -> None:
        try:
            while True:
                op = await self.operations.read()
                if op is grpc.aio.EOF:
                    self.ended = self.ended or "the hub ended the Operations stream"
                    return
                self.ops_refused += 1
                await self.operations.write(
                    pb.OperationsMessage(
                        result=pb.OperationResult(
                            id=op.id,
                            ok=False,
                            error=pb.Status(code=501, reason="NotImplemented", message="a benchmark agent"),
                        )
                    )
                )
        except grpc.aio.AioRpcError as e:
            self.ended = self.ended or f"Operations: {e.code().name}: {e.details()}"

    async def _heartbeats(self) -> None:
        sequence = 0
        try:
            while True:
                await asyncio.sleep(self.heartbeat)
                sequence += 1
                await self.caching.write(pb.CachingMessage(heartbeat=pb.Heartbeat(sequence=sequence)))
                self.beats_sent += 1
                self.last_beat = time.monotonic()
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as e:
            self.ended = self.ended or f"heartbeat write: {type(e).__name__}"

    async def close(self) -> None:
        for t in self.tasks:
            t.cancel()
        if self.tasks:
            await asyncio.wait(self.tasks)
        if self.channel is not None:
            await self.channel.close(grace=None)


# A poll of `GET /api/v1/accounts` costs the hub time in proportion to its accounts (0.6 s of hub CPU
# for 5,000): back to back, polls took about half of the hub's CPU while 5,000 sessions connected,
# slowing what they measure. After a poll that took d seconds the poller waits at least
# POLL_QUIET * d, so that polling holds the hub's event loop at most 1 / (1 + POLL_QUIET) of the time.
POLL_QUIET = 9.0


class Poller:
    """Polls `GET /api/v1/accounts` in a thread of its own (the event loop keeps serving the sessions)."""

    def __init__(self, url: str, n: int, objects: int, interval: float) -> None:
        self.url, self.n, self.objects, self.interval = url, n, objects, interval
        self.all_active: float | None = None  # time.monotonic() when first seen
        self.all_counted: float | None = None  # every account ACTIVE, watching, every object counted
        self.polls = 0
        self.last = ""
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            began = time.monotonic()
            try:
                docs = get_json(self.url + "/api/v1/accounts", timeout=60)
            except OSError as e:
                self.last = f"poll failed: {e}"
                self.stop.wait(self.interval)
                continue
            now = time.monotonic()
            self.polls += 1
            mine = [d for d in docs if str(d.get("name", "")).startswith("acct-")]
            active = sum(d.get("state") == "ACTIVE" for d in mine)
            counted = sum(
                d.get("state") == "ACTIVE" and d.get("agentState") == "watching" and d.get("objects") == self.objects
                for d in mine
            )
            self.last = f"{len(mine)} accounts listed, {active} ACTIVE, {counted} watching with all objects"
            if self.all_active is None and active == self.n:
                self.all_active = now
            if counted == self.n:
                self.all_counted = now
                return
            self.stop.wait(max(self.interval, POLL_QUIET * (now - began)))


def raise_open_files(needed: int) -> str:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= needed:
        return f"open files: limit {soft} (hard {hard}), enough"
    target = needed if hard == resource.RLIM_INFINITY else min(hard, needed)
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    note = f"open files: raised from {soft} to {target} (hard {hard})"
    if target < needed:
        note += f"; the machine's hard limit is below the {needed} wanted"
    return note


async def make_database(url: str) -> tuple[str, str]:
    """A fresh database on the server of `url`: (the hub's URL for it, its name)."""
    import asyncpg

    parts = urllib.parse.urlsplit(url)
    name = f"scaleagent_hubsessions_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    conn = await asyncpg.connect(_asyncpg_dsn(url))
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return urllib.parse.urlunsplit(parts._replace(path="/" + name)), name


async def drop_database(url: str, name: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(_asyncpg_dsn(url))
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


def _asyncpg_dsn(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(scheme="postgresql"))


def start_hub(tmp: Path, database_url: str, replicas: bool, log_level: str = "WARNING") -> Proc:
    grpc_port, http_port = free_port(), free_port()
    config: dict = {
        "server": {"grpcPort": grpc_port, "httpPort": http_port, "replicaName": "bench-hub"},
        "database": {"url": database_url},
        # Every simulated agent connects from this machine, without a token: one identity, whose
        # session limit (20 by default) is lifted for the benchmark.
        "auth": {"agents": {"maxSessionsPerIdentity": 100_000}},
    }
    if replicas:
        config["replicas"] = {"cluster": "static", "heartbeat": {"periodSeconds": 5}}
    path = tmp / ("hub-replicas.yaml" if replicas else "hub.yaml")
    path.write_text(yaml.safe_dump(config))
    hub = Proc(["--log-level", log_level, "hub", "--config", str(path)])
    try:
        m = hub.wait_line(r"gRPC on (\S+), HTTP on (http://\S+)")
    except RuntimeError:
        hub.stop()
        raise
    hub.grpc_target, hub.url = m.group(1), m.group(2)  # type: ignore[attr-defined]
    hub.config_text = path.read_text()  # type: ignore[attr-defined]
    return hub


def mib(kb: int) -> str:
    return f"{kb / 1024:.1f} MiB"


async def bench(args: argparse.Namespace) -> None:
    n = args.sessions
    limit_note = raise_open_files(4 * n + 1024)  # this process's n sockets (and gRPC's own fds) and the hub's
    command = ".venv/bin/python bench/hub_sessions.py " + shlex.join(sys.argv[1:])
    notes: list[str] = [limit_note]
    db_name = ""
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        if args.database == "sqlite":
            database_url, replicas = f"sqlite:///{tmp / 'hub.db'}", False
            db_label = "SQLite file"
        else:
            database_url, db_name = await make_database(args.database)
            replicas = not args.no_replicas
            db_label = f"PostgreSQL (fresh database {db_name})"
        hub: Proc | None = None
        sessions: list[Session] = []
        try:
            try:
                hub = start_hub(tmp, database_url, replicas, args.hub_log_level)
            except RuntimeError as e:
                if not replicas:
                    raise
                notes.append(
                    "the hub refused or failed with `replicas: {cluster: static, heartbeat: {periodSeconds: 5}}`: "
                    + str(e).replace("\n", " | ")[-600:]
                    + " -- measured WITHOUT replicas"
                )
                replicas = False
                hub = start_hub(tmp, database_url, False, args.hub_log_level)
            url, target = hub.url, hub.grpc_target  # type: ignore[attr-defined]
            deadline = time.monotonic() + 30
            while True:
                try:
                    get_json(url + "/health", timeout=5)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.1)
            await asyncio.sleep(2)
            # A peer for the hold: the same hub with no session at all, for as long (at most --idle s).
            idle_s = min(args.hold, args.idle)
            cpu_idle0 = cpu_seconds(hub.pid)
            await asyncio.sleep(idle_s)
            cpu_idle = cpu_seconds(hub.pid) - cpu_idle0
            rss_before, _ = memory_kb(hub.pid)
            cpu_start = cpu_seconds(hub.pid)
            busy0, total0 = machine_busy()

            sessions = [Session(i, target, args.objects, args.keepalive, args.heartbeat) for i in range(n)]
            poller = Poller(url, n, args.objects, args.poll)
            slots = asyncio.Semaphore(args.concurrency)
            opened: list[float] = []
            failures: list[str] = []

            async def open_one(s: Session) -> None:
                async with slots:
                    try:
                        await s.open()
                        opened.append(time.monotonic())
                    except Exception as e:  # one refused session is a figure, not the end of the run
                        if isinstance(e, grpc.aio.AioRpcError):
                            why = f"gRPC {e.code().name}: {e.details()}"
                        else:
                            why = f"{type(e).__name__}: {e}"
                        waited = time.monotonic() - s.started if s.started else 0.0
                        failures.append(f"{s.agent_id}: {why} ({s.stage}, after {waited:.1f} s)")
                        # as it happens, with the time: the cause is whatever was going on then
                        print(
                            f"[{time.monotonic() - t0:7.1f} s] {s.agent_id} failed to open, {s.stage}, after "
                            f"{waited:.1f} s: {why}",
                            file=sys.stderr,
                        )

            t0 = time.monotonic()
            own0 = time.process_time()
            poller.thread.start()
            await asyncio.gather(*(open_one(s) for s in sessions))
            t_opened = time.monotonic()
            cpu_opened = cpu_seconds(hub.pid)
            if failures:
                notes.append(f"{len(failures)} session(s) failed to open, e.g. {failures[0]}")
            live = [s for s in sessions if s.session_id]
            try:
                await asyncio.wait_for(asyncio.gather(*(s.acked.wait() for s in live)), args.timeout)
            except TimeoutError:
                notes.append(f"only {sum(s.acked.is_set() for s in live)} snapshots acknowledged")
            t_acked = time.monotonic()
            while poller.thread.is_alive() and time.monotonic() - t0 < args.timeout:
                await asyncio.sleep(0.05)
            poller.stop.set()
            t_counted = poller.all_counted or time.monotonic()
            cpu_connected = cpu_seconds(hub.pid)
            own_connect = time.process_time() - own0
            busy1, total1 = machine_busy()
            rss_connected, peak_connected = memory_kb(hub.pid)
            if poller.all_active is None:
                notes.append(f"not every account ACTIVE within {args.timeout:g} s: {poller.last}")
            elif poller.all_counted is None:
                notes.append(f"not every account watching with its objects within {args.timeout:g} s: {poller.last}")

            # The hold: heartbeats only.
            beats0 = sum(s.beats_sent for s in sessions)
            echoes0 = sum(s.echoes for s in sessions)
            cpu_hold0 = cpu_seconds(hub.pid)
            own_hold0 = time.process_time()
            busy2, total2 = machine_busy()
            await asyncio.sleep(args.hold)
            cpu_hold1 = cpu_seconds(hub.pid)
            own_hold = time.process_time() - own_hold0
            busy3, total3 = machine_busy()
            rss_after, peak_after = memory_kb(hub.pid)
            beats = sum(s.beats_sent for s in sessions) - beats0
            echoes = sum(s.echoes for s in sessions) - echoes0
            # Every heartbeat is echoed; the last one of a session may still be on its way.
            beats_total = sum(s.beats_sent for s in sessions)
            echoes_total = sum(s.echoes for s in sessions)
            unanswered = sum(max(0, s.beats_sent - s.echoes) for s in sessions)
            in_flight = sum(s.beats_sent - s.echoes == 1 and time.monotonic() - s.last_beat < 10 for s in sessions)

            # Afterwards: what the hub says of its sessions, and what one poll costs it.
            agents = get_json(url + "/armory/agents", timeout=60)
            mine = [a for a in agents if str(a.get("agentId", "")).startswith("bench-")]
            with_ops = sum(bool(a.get("operationsStream")) for a in mine)
            poll_cpu0, poll_t0 = cpu_seconds(hub.pid), time.monotonic()
            for _ in range(10):
                get_json(url + "/api/v1/accounts", timeout=60)
            poll_cost_cpu = (cpu_seconds(hub.pid) - poll_cpu0) / 10
            poll_cost_wall = (time.monotonic() - poll_t0) / 10
            ended = [s for s in sessions if s.ended]
            rejected = [s for s in sessions if s.rejected]
            if ended:
                notes.append(f"{len(ended)} session(s) ended, e.g. {ended[0].agent_id}: {ended[0].ended}")
            if rejected:
                notes.append(f"{len(rejected)} account(s) rejected, e.g. {rejected[0].account}: {rejected[0].rejected}")
            warnings = [line for line in hub.log if "WARNING" in line or "ERROR" in line]
            if warnings:
                notes.append(f"hub logged {len(warnings)} warning/error line(s), the first 5:")
                notes += [f"  {line[:300]}" for line in warnings[:5]]
        finally:
            await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)
            if hub is not None:
                hub.stop()
                if args.hub_log:
                    Path(args.hub_log).write_text("\n".join(hub.log) + "\n")
                    notes.append(f"the hub's whole log: {args.hub_log}")
            if db_name:
                await drop_database(args.database, db_name)

    def spread(waits: list[float]) -> str:
        if not waits:
            return "-"
        waits = sorted(waits)

        def at(q: float) -> float:
            return waits[min(len(waits) - 1, int(q * len(waits)))]

        return f"median {at(0.5):.2f} s, p99 {at(0.99):.2f} s, max {waits[-1]:.2f} s"

    def pct(cpu: float, seconds: float) -> str:
        return f"{100 * cpu / seconds:.0f}% of a core" if seconds > 0 else "-"

    def machine_pct(b0: float, b1: float, t0_: float, t1_: float) -> str:
        return f"{100 * (b1 - b0) / max(1e-9, t1_ - t0_) * (os.cpu_count() or 1):.0f}%"

    connect_s = t_counted - t0
    hold_s = args.hold
    objects_total = n * args.objects
    mode = "with replicas (cluster: static, heartbeat 5 s, no peers)" if replicas else "no replicas"
    if not args.keepalive:
        mode += "; sessions without HTTP/2 keepalive pings"
    if args.heartbeat != HEARTBEAT_SECONDS:
        mode += f"; heartbeats every {args.heartbeat} s"
    print()
    print(
        f"hub sessions: {n:,} agent sessions, each its own channel, 1 account and {args.objects} ConfigMaps; "
        f"{db_label}, {mode}; plaintext gRPC on loopback ({machine()})"
    )
    print(f"  command: {command}")
    rows = [
        ("sessions opened (Welcome, Operations hello, snapshot written)", f"{len(opened):,} of {n:,}"),
        ("  Caching call -> Welcome (the hub's handler took the call)", spread([s.welcomed - s.started for s in live])),
        (f"  all opened, {args.concurrency} at a time", f"{t_opened - t0:.2f} s"),
        ("  all snapshots acknowledged", f"{t_acked - t0:.2f} s"),
        (
            "first connection -> all accounts ACTIVE (GET /api/v1/accounts)",
            f"{poller.all_active - t0:.2f} s" if poller.all_active else "not reached",
        ),
        (
            f"  -> all watching with their {args.objects} objects counted ({objects_total:,})",
            f"{poller.all_counted - t0:.2f} s" if poller.all_counted else "not reached",
        ),
        (
            f"  polls of /api/v1/accounts meanwhile (every {args.poll:g} s, or {POLL_QUIET:g}x a poll's time)",
            f"{poller.polls}",
        ),
        ("hub RSS before the first session (idle)", mib(rss_before)),
        ("hub RSS once all ACTIVE and counted", f"{mib(rss_connected)} (peak {mib(peak_connected)})"),
        (f"hub RSS after the {hold_s:g} s hold", f"{mib(rss_after)} (peak {mib(peak_after)})"),
        ("  RSS added per session (after hold - before)", f"{(rss_after - rss_before) / n:.1f} KiB"),
        (
            "hub CPU while the sessions connect (until all counted)",
            f"{cpu_connected - cpu_start:.2f} s over {connect_s:.2f} s = {pct(cpu_connected - cpu_start, connect_s)}"
            f" (until all opened: {cpu_opened - cpu_start:.2f} s)",
        ),
        (
            "  whole machine meanwhile (100% = one core)",
            f"{machine_pct(busy0, busy1, total0, total1)}, of which this bench process {pct(own_connect, connect_s)}",
        ),
        (
            f"hub CPU during the {hold_s:g} s hold (heartbeats only)",
            f"{cpu_hold1 - cpu_hold0:.2f} s = {pct(cpu_hold1 - cpu_hold0, hold_s)} "
            f"({1e6 * (cpu_hold1 - cpu_hold0) / n / hold_s:.0f} us per session per second)",
        ),
        (
            f"  the same hub with no session, {idle_s:g} s before they connected",
            f"{cpu_idle:.2f} s = {pct(cpu_idle, idle_s)}",
        ),
        ("  heartbeats sent / echoed during the hold", f"{beats:,} / {echoes:,}"),
        (
            "  heartbeats sent / echoed since the sessions opened",
            f"{beats_total:,} / {echoes_total:,} "
            f"({unanswered:,} unanswered, of which {in_flight:,} sent under 10 s before)",
        ),
        (
            "  whole machine meanwhile (100% = one core)",
            f"{machine_pct(busy2, busy3, total2, total3)}, of which this bench process {pct(own_hold, hold_s)}",
        ),
        ("sessions the hub lists afterwards / with an Operations stream", f"{len(mine):,} / {with_ops:,}"),
        (
            "one GET /api/v1/accounts on the idle hub (mean of 10)",
            f"{poll_cost_wall * 1000:.0f} ms, hub CPU {poll_cost_cpu * 1000:.0f} ms",
        ),
    ]
    width = max(len(r[0]) for r in rows)
    for label, value in rows:
        print(f"  {label:<{width}}  {value}")
    for note in notes:
        print(f"  note: {note}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sessions", type=int, default=1000)
    p.add_argument("--objects", type=int, default=10, help="ConfigMaps in each account's snapshot")
    p.add_argument("--hold", type=float, default=60.0, help="seconds of heartbeats only after all are ACTIVE")
    p.add_argument("--idle", type=float, default=20.0, help="seconds of the hub alone measured first (<= --hold)")
    p.add_argument(
        "--heartbeat", type=int, default=HEARTBEAT_SECONDS, help="seconds between a session's heartbeats (agent: 10)"
    )
    p.add_argument(
        "--no-keepalive",
        dest="keepalive",
        action="store_false",
        help="sessions send no HTTP/2 keepalive pings (the agent sends one every 10 s): their cost apart",
    )
    p.add_argument("--concurrency", type=int, default=50, help="sessions being opened at once")
    p.add_argument("--poll", type=float, default=0.25, help="seconds between polls of /api/v1/accounts")
    p.add_argument("--timeout", type=float, default=600.0, help="give up waiting for ACTIVE after this")
    p.add_argument(
        "--database", default="sqlite", help="`sqlite` (a temp file) or a PostgreSQL URL (a fresh database on it)"
    )
    p.add_argument("--no-replicas", action="store_true", help="with PostgreSQL: leave `replicas` out of the config")
    p.add_argument("--quick", action="store_true", help="100 sessions, 15 s hold: a smoke run")
    p.add_argument("--hub-log", default="", help="write the hub's whole log (its standard error) to this file")
    p.add_argument("--hub-log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    args = p.parse_args()
    if args.quick:
        args.sessions, args.hold = 100, 15.0
    run(lambda: bench(args))


if __name__ == "__main__":
    main()
