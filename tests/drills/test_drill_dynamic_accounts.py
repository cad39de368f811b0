"""Drill: the hub's database restarts, twice, while users change dynamic accounts ten times a second.

Users create accounts, migrate them (PATCH ACTIVE), deactivate them (PATCH INACTIVE) and delete
them through the REST API of docs/accounts.md, as fast as a script would. Meanwhile the database
goes away twice (3 s, then 6 s). A request the database cannot serve must be refused at once
with a 503 that names the database; none may hang, and the hub and the agent's link must stay
up. Once the load stops, every account must end as its user last asked (ACTIVE, INACTIVE or
gone), none left half-way, and every ACTIVE account's objects in the hub must be exactly its
cluster's: none lost, none phantom, none stale.

The restart is a TCP proxy between the hub and the real server, which cuts every connection and
refuses new ones, then lets them in again. From the hub's side that is what a restart is (its
connections break, new ones are refused until the server is up), and it spares the machine's
real PostgreSQL and MariaDB, which other tests use at the same time.
"""

from __future__ import annotations

import json
import random
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.helpers import (
    AgentProcess,
    HubProcess,
    KubesimProcess,
    TcpProxy,
    dynamic_hub_and_agent,
    start_kubesim,
)

pytestmark = pytest.mark.drill

CLUSTERS = 3
KINDS = ["Namespace", "ConfigMap"]
WORKERS = 4  # each owns its accounts, so one account's requests never overlap and "last asked" is exact
ACCOUNTS_PER_WORKER = 3
RATE = 10.0  # change requests per second, all workers together
LOAD_SECONDS = 18.0
# (seconds into the load, the request whose acceptance starts it, how long the database stays away):
# the first cuts a migration in flight, the second a deactivation.
OUTAGES = [(3.0, "ACTIVE", 3.0), (9.0, "INACTIVE", 6.0)]
CLIENT_TIMEOUT = 20.0  # seconds a user's request may take; the hub's agent timeout is 15 s
CONVERGENCE_BOUND = 45.0  # seconds after the load stopped (the database is back by then)

Key = tuple[str, str, str, str, str]  # kind, namespace, name, uid, resourceVersion


def via(url: str, proxy: TcpProxy) -> str:
    """The database URL with the server reached through the proxy."""
    parts = urlsplit(url)
    credentials = parts.netloc.rpartition("@")[0]
    netloc = f"127.0.0.1:{proxy.port}"
    return urlunsplit(parts._replace(netloc=f"{credentials}@{netloc}" if credentials else netloc))


@dataclass
class Call:
    """One request as the user saw it."""

    method: str
    account: str
    status: int  # 0: no answer within CLIENT_TIMEOUT (or the connection failed)
    error: str
    database_down: bool  # the proxy refused at the start or at the end of the request


@dataclass
class Model:
    """What each account's user last asked for: the set of outcomes still possible.

    An accepted request leaves one outcome; a refused one (503) may or may not have been written
    before the database went away, so both the old and the asked outcome stay possible, until
    the next accepted request settles it. GONE means deleted (or never created)."""

    possible: dict[str, set[str]] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)  # an account the hub said was gone though a user kept it
    phantom: list[str] = field(default_factory=list)  # one it said existed though a user deleted it
    lock: threading.Lock = field(default_factory=threading.Lock)


class Load:
    """Users changing dynamic accounts at RATE requests per second for LOAD_SECONDS."""

    def __init__(self, hub: HubProcess, kubesim: KubesimProcess, db: TcpProxy, seed: int) -> None:
        self.hub, self.kubesim, self.db = hub, kubesim, db
        self.model = Model()
        self.random = random.Random(seed)
        self.stop = threading.Event()
        self.accepted = {"ACTIVE": threading.Event(), "INACTIVE": threading.Event()}  # a PATCH to that state
        self.names = [[f"drill-{w}-{i}" for i in range(ACCOUNTS_PER_WORKER)] for w in range(WORKERS)]
        for name in (n for names in self.names for n in names):
            self.model.possible[name] = {"GONE"}

    def cluster_of(self, name: str) -> int:
        """Each account follows one cluster, fixed by its name, so its expected objects are known."""
        worker, index = map(int, name.removeprefix("drill-").split("-"))
        return (worker * ACCOUNTS_PER_WORKER + index) % CLUSTERS

    def run(self) -> list[threading.Thread]:
        threads = [
            threading.Thread(target=self._worker, args=(names, random.Random(self.random.random())), daemon=True)
            for names in self.names
        ]
        for t in threads:
            t.start()
        return threads

    def _worker(self, names: list[str], rnd: random.Random) -> None:
        interval = WORKERS / RATE
        next_at = time.monotonic()
        while not self.stop.is_set():
            self._change(rnd.choice(names), rnd)
            next_at += interval
            self.stop.wait(max(0.0, next_at - time.monotonic()))  # the load's pace, not a synchronisation

    def _change(self, name: str, rnd: random.Random) -> None:
        possible = self.model.possible[name]
        if "GONE" in possible:
            body = [{"name": name, "kubeconfigFile": str(self.kubesim.admin(self.cluster_of(name))), "kinds": KINDS}]
            call, outcome = self._call("POST", "/armory/accounts", body, name), "INACTIVE"
        else:
            what = rnd.choices(["ACTIVE", "INACTIVE", "GONE"], weights=[6, 2, 2])[0]
            if what == "GONE":
                call = self._call("DELETE", f"/armory/accounts/{name}", None, name)
            else:
                call = self._call("PATCH", "/armory/accounts", [{"name": name, "state": what}], name)
            outcome = what
        with self.model.lock:
            self.model.calls.append(call)
            if call.status in (200, 201, 202):
                self.model.possible[name] = {outcome}
                if call.method == "PATCH":
                    self.accepted[outcome].set()
            elif call.status == 409 and call.method == "POST":
                if possible == {"GONE"}:
                    self.model.phantom.append(f"POST {name}: 409 though its user deleted it")
                self.model.possible[name] = (possible - {"GONE"}) or {"ACTIVE", "INACTIVE"}
            elif call.status == 404:
                if "GONE" not in possible:
                    self.model.lost.append(f"{call.method} {name}: 404 though its user kept it")
                self.model.possible[name] = {"GONE"}
            elif call.status >= 500 or call.status == 0:
                # A DELETE refused half-way leaves the account DELETE_FAILED (docs/accounts.md).
                self.model.possible[name] = possible | {outcome} | ({"DELETE_FAILED"} if outcome == "GONE" else set())
            # 409 on PATCH: the lifecycle refused it (a migration in progress); nothing changed.

    def _call(self, method: str, path: str, body: object, name: str) -> Call:
        down_before = self.db.refusing
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.hub.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        status, error = 0, ""
        try:
            with urllib.request.urlopen(request, timeout=CLIENT_TIMEOUT) as r:
                status = r.status
        except urllib.error.HTTPError as e:
            status = e.code
            try:
                error = str(json.loads(e.read() or b"null").get("error", ""))
            except (ValueError, AttributeError):
                error = "(not the hub's JSON error)"
        except OSError as e:  # a timeout or a refused connection: no answer
            error = f"{type(e).__name__}: {e}"
        return Call(method, name, status, error, down_before or self.db.refusing)


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        capture_output=True,
        check=False,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def seed_cluster(kubeconfig: Path, index: int) -> None:
    """A namespace and a few ConfigMaps of the cluster's own, so that each account has objects to hold."""
    docs = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"drill-{index}"}}]
    docs += [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"cm-{i}", "namespace": f"drill-{index}"},
            "data": {"i": str(i)},
        }
        for i in range(4 + index)
    ]
    kubectl(kubeconfig, "create", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))


def cluster_state(kubeconfig: Path) -> set[Key]:
    out: set[Key] = set()
    for kind in KINDS:
        for item in json.loads(kubectl(kubeconfig, "get", kind, "-A", "-o", "json"))["items"]:
            m = item["metadata"]
            out.add((kind, m.get("namespace", ""), m["name"], m["uid"], m["resourceVersion"]))
    return out


def hub_state(hub: HubProcess, account: str) -> set[Key]:
    """The account's objects in the hub; empty when the hub does not know the account (404)."""
    out: set[Key] = set()
    for kind in KINDS:
        status, doc = hub.get(f"/api/v1/accounts/{account}/objects?kind={kind}")
        for item in doc["items"] if status == 200 else []:  # type: ignore[index]
            m = item["metadata"]
            out.add((kind, m.get("namespace", ""), m["name"], m["uid"], m["resourceVersion"]))
    return out


@dataclass
class Verdict:
    lost: list[str] = field(default_factory=list)
    phantom: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)

    def ok(self) -> bool:
        return not (self.lost or self.phantom or self.stale or self.stuck)

    def __str__(self) -> str:
        return "; ".join(f"{len(v)} {k} {v[:6]}" for k, v in vars(self).items())


def judge(hub: HubProcess, load: Load, clusters: dict[int, set[Key]]) -> Verdict:
    """Every account against what its user asked: its state, and its objects against its cluster's.

    An account in any state its user did not ask for (a transient one, FAILED, ORPHANED) is
    stuck; gone though kept is lost; there though deleted, or serving objects while not ACTIVE,
    is phantom."""
    verdict = Verdict(lost=list(load.model.lost), phantom=list(load.model.phantom))
    status, listed = hub.get("/armory/accounts")
    assert status == 200, (status, listed)
    states = {a["name"]: a for a in listed}  # type: ignore[union-attr]
    for name in sorted(set(states) - set(load.model.possible)):
        verdict.phantom.append(f"account {name} (no user created it)")
    for name, possible in sorted(load.model.possible.items()):
        row = states.get(name)
        state = row["state"] if row else "GONE"
        if state not in possible:
            where = verdict.lost if state == "GONE" else verdict.phantom if "GONE" in possible else verdict.stuck
            reason = f" ({row['errorMessage']})" if row and row.get("errorMessage") else ""
            where.append(f"account {name} is {state}, asked {'/'.join(sorted(possible))}{reason}")
            continue
        have = hub_state(hub, name)
        if state == "DELETE_FAILED":
            # The deletion stopped half-way (docs/accounts.md): whether its agent had stopped yet
            # depends on where. Its objects may still be served, and are the cluster's own.
            continue
        if state != "ACTIVE":
            if have:
                verdict.phantom.append(f"account {name} ({state}) serves {len(have)} objects")
            continue
        want = clusters[load.cluster_of(name)]
        verdict.lost += [f"{name}: {k}" for k in sorted(_named(want) - _named(have))]
        verdict.phantom += [f"{name}: {k}" for k in sorted(_named(have) - _named(want))]
        verdict.stale += [f"{name}: {k}" for k in sorted(want - have) if k[:3] in _named(have)]
    return verdict


def _named(keys: set[Key]) -> set[tuple[str, str, str]]:
    """Objects by kind, namespace and name: the same object whatever its uid and resourceVersion."""
    return {k[:3] for k in keys}


def outages(db: TcpProxy, load: Load, started: float) -> None:
    """The database restarts: every connection cut, new ones refused for a while, then let in.

    Each restart comes just as a request of the kind it names was accepted, so that the hub is
    in the middle of carrying it out (or waits at most a few seconds for one)."""
    for at, after, seconds in OUTAGES:
        time.sleep(max(0.0, started + at - time.monotonic()))  # the fault's schedule
        load.accepted[after].clear()
        load.accepted[after].wait(5.0)
        db.refusing = True
        db.cut()
        time.sleep(seconds)  # the fault's duration
        db.refusing = False


@pytest.mark.parametrize("db_url", ["postgresql", "mariadb"], indirect=True)
def test_drill_database_restarts_under_dynamic_account_churn(db_url: str, tmp_path: Path) -> None:
    """kubesim's clusters, a hub whose database is behind the proxy, one agent taking dynamic
    accounts; the load and the two restarts; then the bounded wait for every account to be what
    its user asked, its objects its cluster's."""
    backend = urlsplit(db_url).scheme.replace("mysql", "mariadb")
    parts = urlsplit(db_url)
    db = TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    kubesim: KubesimProcess | None = None
    hub: HubProcess | None = None
    agent: AgentProcess | None = None
    try:
        kubesim = start_kubesim(tmp_path / "kubesim", "--clusters", str(CLUSTERS), "--bookmark-interval", "1")
        for i in range(CLUSTERS):
            seed_cluster(kubesim.admin(i), i)
        hub, agent = dynamic_hub_and_agent(tmp_path, via(db_url, db), retry_seconds=1)
        session = agent.health()["hub"]["sessionId"]

        seed = int(time.time())  # the load's choices; a failure names it
        load = Load(hub, kubesim, db, seed)
        started = time.monotonic()
        threads = load.run()
        outages(db, load, started)
        load.stop.wait(max(0.0, started + LOAD_SECONDS - time.monotonic()))  # the load's length
        load.stop.set()
        for t in threads:
            t.join(CLIENT_TIMEOUT + 5)
        assert not any(t.is_alive() for t in threads), f"a request hung past its client timeout (seed {seed})"
        stopped = time.monotonic()
        assert hub.proc.poll() is None, "the hub exited under the load:\n" + "\n".join(hub.log[-30:])

        calls = load.model.calls
        hung = [c for c in calls if c.status == 0]
        unexplained = [c for c in calls if c.status >= 500 and not (c.status == 503 and "database" in c.error)]
        refused_up = [c for c in calls if c.status >= 500 and not c.database_down]
        odd = [c for c in calls if c.status not in (0, 200, 201, 202, 404, 409) and c.status < 500]
        assert not hung, f"{len(hung)} requests got no answer within {CLIENT_TIMEOUT:g}s: {hung[:5]}"
        assert not unexplained, f"{len(unexplained)} errors without the database named: {unexplained[:5]}"
        assert not refused_up, f"{len(refused_up)} requests refused while the database was up: {refused_up[:5]}"
        assert not odd, f"answers a user's valid request should not get: {odd[:5]}"
        refused = [c for c in calls if c.status == 503]
        assert refused, "no request met an outage: the drill did not drill"

        clusters = {i: cluster_state(kubesim.admin(i)) for i in range(CLUSTERS)}  # nothing changes them now
        while not (verdict := judge(hub, load, clusters)).ok():
            if time.monotonic() - stopped > CONVERGENCE_BOUND:
                pytest.fail(
                    f"not converged {CONVERGENCE_BOUND:g}s after the load stopped (seed {seed}): {verdict}"
                    "\nhub log:\n" + "\n".join(line for line in hub.log[-40:])
                )
            time.sleep(0.5)  # a poll interval: the condition is checked again, never assumed
        converged = time.monotonic() - stopped

        # The agent's link to the hub was never torn down: one session, no error, no traceback.
        health = agent.health()["hub"]
        problems = [line for line in agent.stderr if "Traceback" in line or "KeyError" in line or "hub link to" in line]
        assert health["state"] == "connected" and health["sessionId"] == session and health["connects"] == 1, health
        assert not problems, "the agent's link had trouble:\n" + "\n".join(problems[:10])
        assert hub.proc.poll() is None, "the hub exited:\n" + "\n".join(hub.log[-30:])

        print(
            f"\ndrill database restarted under dynamic-account churn ({backend}): {len(calls)} changes, "
            f"{len(refused)} refused during outages, converged {converged:.1f}s after the load stopped "
            f"(bound {CONVERGENCE_BOUND:g}s): 0 lost, 0 phantom, 0 stale, 0 stuck"
        )
    finally:
        if agent is not None:
            agent.stop()
        if hub is not None:
            hub.stop()
        db.close()
        if kubesim is not None:
            kubesim.stop()
