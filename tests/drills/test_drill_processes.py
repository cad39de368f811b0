"""Drills of issue 12 on kubesim, with real processes: an agent killed in the middle of its first
snapshot, a hub killed under churn, watches cut while the history is compacted (410 Gone), and the
network frozen between agent and hub and between agent and API server. Each ends with the hub
compared exactly with the cluster (drill.py) and prints how long that took."""

from __future__ import annotations

import re
import signal
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.drills.drill import Churn, agent_config, converge, create_configmaps, report
from tests.e2e.e2e_stack import through
from tests.helpers import (
    AgentProcess,
    HubPki,
    HubProcess,
    KubesimProcess,
    TcpProxy,
    free_port,
    start_kubesim,
    tls_hub,
)

pytestmark = pytest.mark.drill

KINDS = ["ConfigMap", "Namespace"]
BOUND = 30.0  # seconds: every drill converges within this once its fault is over
ACCOUNT = "drill"
CUTS = 2
HEARTBEAT = {"keepAliveHeartbeatSeconds": 1, "keepAliveTimeOutSeconds": 2}


@pytest.fixture
def kubesim_of(tmp_path: Path) -> Iterator:
    """Starts one kubesim (with the drill's flags) and stops it at the end."""
    started: list[KubesimProcess] = []

    def start(*args: str) -> KubesimProcess:
        started.append(start_kubesim(tmp_path / "kubesim", *args))
        return started[-1]

    yield start
    for k in started:
        k.stop()


def follower(directory: Path, pki: HubPki, grpc_port: int, kubeconfig: Path, **settings: Any) -> AgentProcess:
    """An agent following the drill's account, connected to the hub (or a proxy) at `grpc_port`."""
    return AgentProcess(
        agent_config(
            directory,
            pki,
            grpc_port,
            [{"name": ACCOUNT, "kinds": KINDS, "kubeConfigFile": str(kubeconfig)}],
            **settings,
        ),
        print_events=False,
    )


def account(hub: HubProcess) -> dict:
    status, doc = hub.get(f"/api/v1/accounts/{ACCOUNT}")
    return doc if status == 200 else {}  # type: ignore[return-value]


def wait_churned(churn: Churn, operations: int, timeout: float = 30.0) -> None:
    """Until the churn has made `operations` more changes: the cluster moved on meanwhile."""
    target = churn.operations + operations
    deadline = time.monotonic() + timeout
    while churn.operations < target:
        assert time.monotonic() < deadline, f"churn stuck at {churn.operations} operations: {churn.errors[-3:]}"
        time.sleep(0.05)


def frozen(proxy: TcpProxy, churn: Churn, seconds: float, *, half_open: bool = False) -> float:
    """Freezes the proxy for `seconds` while the cluster keeps changing; returns the moment of the thaw."""
    before = churn.operations
    proxy.freeze()
    try:
        time.sleep(seconds)  # the length of the fault, not a wait for a condition
    finally:
        proxy.thaw(half_open=half_open)
    assert churn.operations >= before + 5 * seconds, f"the cluster hardly changed during the freeze: {churn.errors}"
    return time.monotonic()


def metric(agent: AgentProcess, name: str, labels: str = "") -> int:
    """A sum of the agent's own figures, as an operator reads them from /metrics."""
    with urllib.request.urlopen(agent.health_url() + "/metrics", timeout=10) as r:
        text = r.read().decode()
    pattern = rf"^{name}\{{[^}}]*{re.escape(labels)}[^}}]*\}} (\S+)$"
    return sum(int(float(m.group(1))) for m in re.finditer(pattern, text, re.M))


def relists(agent: AgentProcess) -> int:
    """Relists after 410 Gone."""
    return metric(agent, "scale_agent_relists_total")


def watching(agent: AgentProcess) -> int:
    """Watches streaming now."""
    return metric(agent, "scale_agent_watches", 'state="watching"')


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"no {what} within {timeout:g}s"
        time.sleep(0.1)  # a poll interval


def test_agent_killed_in_the_middle_of_its_first_snapshot(kubesim_of, tmp_path: Path):
    cluster = kubesim_of()
    create_configmaps(cluster.admin(), "seed", 4000, padding=2000)  # a snapshot of 8 MB
    hub, pki = tls_hub(tmp_path)
    agent = follower(tmp_path, pki, hub.grpc_port, cluster.admin(), kubernetes={"pageSize": 50})  # 80 pages
    try:
        # The snapshot is under way once the hub holds some of the seeded objects.
        hub.wait_until(f"/api/v1/accounts/{ACCOUNT}", lambda d: d["objects"] > 0, what="the snapshot under way")
        agent.proc.send_signal(signal.SIGKILL)
        agent.proc.wait()
        seen = account(hub)
        assert seen["objects"] < 4000, f"the snapshot was complete before the kill: {seen}"
        agent = AgentProcess(tmp_path / "agent.yaml", print_events=False)  # the same configuration
        started = time.monotonic()
        converge(hub, ACCOUNT, cluster.admin(), KINDS, BOUND)
        report(
            f"agent SIGKILL mid-snapshot ({seen['objects']} objects held at the kill)",
            time.monotonic() - started,
            "the new agent started",
            BOUND,
        )
        assert account(hub)["state"] == "ACTIVE"
    finally:
        agent.stop()
        hub.stop()


def test_hub_killed_under_churn(kubesim_of, tmp_path: Path):
    cluster = kubesim_of()
    hub, pki = tls_hub(tmp_path, server={"grpcPort": free_port(), "httpPort": free_port()})
    agent = follower(tmp_path, pki, hub.grpc_port, cluster.admin())
    try:
        with Churn(cluster.admin(), "churn", rate=40) as churn:
            hub.wait_until(f"/api/v1/accounts/{ACCOUNT}", lambda d: d["state"] == "ACTIVE", what="the account ACTIVE")
            wait_churned(churn, 40)
            hub.proc.send_signal(signal.SIGKILL)
            hub.proc.wait()
            wait_churned(churn, 40)  # changes the dead hub never sees
            hub = HubProcess(tmp_path / "hub.yaml")  # same ports, same database
            restarted = time.monotonic()
            wait_churned(churn, 20)
        converge(hub, ACCOUNT, cluster.admin(), KINDS, BOUND)
        report("hub SIGKILL under churn", time.monotonic() - restarted, "the hub restarted", BOUND)
        assert account(hub)["state"] == "ACTIVE" and not churn.errors
    finally:
        agent.stop()
        hub.stop()


def test_watches_cut_while_the_history_is_compacted(kubesim_of, tmp_path: Path):
    # Each cut makes the agent wait longer before it resumes (its backoff, as client-go's, resets
    # after a quiet while): two cuts keep the drill short.
    cluster = kubesim_of("--watch-history", "10", "--bookmark-interval", "1")
    proxy = TcpProxy("127.0.0.1", int(cluster.urls[0].rsplit(":", 1)[1]))
    hub, pki = tls_hub(tmp_path)
    agent = follower(tmp_path, pki, hub.grpc_port, through(cluster.admin(), proxy, tmp_path / "admin.yaml"))
    try:
        with Churn(cluster.admin(), "churn", rate=40) as churn:
            hub.wait_until(f"/api/v1/accounts/{ACCOUNT}", lambda d: d["state"] == "ACTIVE", what="the account ACTIVE")
            for _ in range(CUTS):
                wait_for(lambda: watching(agent) == len(KINDS), "the agent watching every kind")
                before = relists(agent)
                proxy.cut()
                proxy.freeze()  # the agent's attempts to resume hang (a refusal would add to its backoff)...
                wait_churned(churn, 20)  # ...while more changes are made than the history keeps
                proxy.thaw()
                wait_for(lambda: relists(agent) > before, "the agent relisting after 410 Gone")  # noqa: B023  (waited for here)
        stopped = time.monotonic()
        converge(hub, ACCOUNT, cluster.admin(), KINDS, BOUND)
        report(
            f"watches cut {CUTS} times, history compacted (410)", time.monotonic() - stopped, "the churn stopped", BOUND
        )
    finally:
        agent.stop()
        hub.stop()
        proxy.close()


def stays_active(hub: HubProcess, seconds: float) -> None:
    """Polls the account for `seconds` (the length of a short fault), failing as soon as it is not
    ACTIVE: a user reading it through the fault sees nothing wrong."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        state = account(hub).get("state")
        assert state == "ACTIVE", f"the account turned {state} during a short freeze"
        time.sleep(0.1)  # a poll interval


def connected_at(hub: HubProcess) -> str:
    return hub.json("/armory/agents")[0]["connectedAt"]  # type: ignore[index]


def test_network_frozen_between_agent_and_hub(kubesim_of, tmp_path: Path):
    cluster = kubesim_of()
    hub, pki = tls_hub(tmp_path, sessions={"graceSeconds": 4})
    proxy = TcpProxy("127.0.0.1", hub.grpc_port)
    agent = follower(tmp_path, pki, proxy.port, cluster.admin(), **HEARTBEAT)
    try:
        with Churn(cluster.admin(), "churn", rate=40) as churn:
            hub.wait_until(f"/api/v1/accounts/{ACCOUNT}", lambda d: d["state"] == "ACTIVE", what="the account ACTIVE")
            session = connected_at(hub)
            # Shorter than heartbeat detection (1 s heartbeats, 2 s timeout): nothing to notice.
            proxy.freeze()
            try:
                stays_active(hub, 0.8)
            finally:
                proxy.thaw()
            wait_churned(churn, 10)
        thawed = time.monotonic()
        converge(hub, ACCOUNT, cluster.admin(), KINDS, BOUND)
        report("agent-hub freeze of 0.8s", time.monotonic() - thawed, "the thaw", BOUND)
        assert connected_at(hub) == session, "the session was replaced by a short freeze"

        with Churn(cluster.admin(), "churn-2", rate=40) as churn:
            # Longer than the grace period (4 s): what the hub serves stops being trusted.
            proxy.freeze()
            try:
                hub.wait_until(
                    f"/api/v1/accounts/{ACCOUNT}",
                    lambda d: d["state"] == "DISCONNECTED",
                    timeout=15,
                    what="the account DISCONNECTED",
                )
                orphaned = hub.wait_until(
                    f"/api/v1/accounts/{ACCOUNT}",
                    lambda d: d["state"] == "ORPHANED",
                    timeout=15,
                    what="the account ORPHANED after the grace period",
                )
                assert orphaned["objects"] == 0, f"an ORPHANED account still serves its cache: {orphaned}"
            finally:
                proxy.thaw()
            thawed = time.monotonic()
            hub.wait_until(
                f"/api/v1/accounts/{ACCOUNT}",
                lambda d: d["state"] == "ACTIVE",
                timeout=BOUND,
                what="the account ACTIVE again",
            )
            wait_churned(churn, 10)
        converge(hub, ACCOUNT, cluster.admin(), KINDS, BOUND)
        report("agent-hub freeze past the grace period", time.monotonic() - thawed, "the thaw", BOUND)
    finally:
        agent.stop()
        hub.stop()
        proxy.close()


@pytest.mark.parametrize("seconds", [3, 20])
def test_network_frozen_between_agent_and_api_server(kubesim_of, tmp_path: Path, seconds: float):
    cluster = kubesim_of("--bookmark-interval", "1")
    proxy = TcpProxy("127.0.0.1", int(cluster.urls[0].rsplit(":", 1)[1]))
    hub, pki = tls_hub(tmp_path)
    agent = follower(tmp_path, pki, hub.grpc_port, through(cluster.admin(), proxy, tmp_path / "admin.yaml"))
    try:
        with Churn(cluster.admin(), "churn", rate=40) as churn:
            hub.wait_until(
                f"/api/v1/accounts/{ACCOUNT}", lambda d: d["agentState"] == "watching", what="the account watched"
            )
            thawed = frozen(proxy, churn, seconds)
        converge(hub, ACCOUNT, cluster.admin(), KINDS, BOUND)
        report(f"agent-API server freeze of {seconds}s", time.monotonic() - thawed, "the thaw", BOUND)
    finally:
        agent.stop()
        hub.stop()
        proxy.close()


def test_watches_left_half_open_by_a_long_freeze_are_noticed(kubesim_of, tmp_path: Path):
    """A freeze long enough for the API server to give up on the agent's connections: when the
    network comes back, the server's ends are gone but the agent's never hear of it, and a watch
    receives nothing, not even an error. The agent must notice the silence (bookmarks come every
    second here) rather than wait for its watch's timeout (5 to 10 minutes)."""
    cluster = kubesim_of("--bookmark-interval", "1")
    proxy = TcpProxy("127.0.0.1", int(cluster.urls[0].rsplit(":", 1)[1]))
    hub, pki = tls_hub(tmp_path)
    agent = follower(
        tmp_path,
        pki,
        hub.grpc_port,
        through(cluster.admin(), proxy, tmp_path / "admin.yaml"),
        kubernetes={"watchIdleTimeoutSeconds": 5},
    )
    try:
        with Churn(cluster.admin(), "churn", rate=40) as churn:
            hub.wait_until(
                f"/api/v1/accounts/{ACCOUNT}", lambda d: d["agentState"] == "watching", what="the account watched"
            )
            thawed = frozen(proxy, churn, 1, half_open=True)
        converge(hub, ACCOUNT, cluster.admin(), KINDS, BOUND)
        report("agent-API server connections left half-open by a freeze", time.monotonic() - thawed, "the thaw", BOUND)
    finally:
        agent.stop()
        hub.stop()
        proxy.close()
