"""The agent's connections to the API server, counted as the operating system sees them.

Over HTTP/2 (which every real kube-apiserver offers) all of an account's watches and requests
share one TCP connection, as client-go's do; kubesim speaks HTTP/1.1 only, where each watch holds
a connection of its own. The agent says which protocol it uses in `/health`.
"""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import urlparse

import yaml

from tests.e2e.e2e_stack import Stack


def _server_port(kubeconfig: Path) -> int:
    server = urlparse(yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"])
    return server.port or 443


def tcp_connections(pid: int, port: int) -> int:
    """Established TCP connections of process `pid` to `port` on any address (Linux /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().name
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if remote_port == port and fields[3] == "01" and fields[9] in inodes:  # 01: ESTABLISHED
                count += 1
    return count


def _settled(stack: Stack, port: int, wanted: int, timeout: float = 30.0) -> int:
    """The count once it is `wanted` (LIST connections close once every kind is watched), or the last
    count seen when `timeout` ran out."""
    deadline = time.monotonic() + timeout
    while True:
        count = tcp_connections(stack.agent.proc.pid, port)
        if count == wanted or time.monotonic() > deadline:
            return count
        time.sleep(0.2)


def test_a_clusters_watches_share_one_connection(stack: Stack) -> None:
    # "limited" reaches the API server directly, "admin" through the test's TCP proxy.
    for name, port in (("limited", _server_port(stack.cluster.limited)), ("admin", stack.proxy.port)):
        account = stack.account(name)
        watches = sum(account["watches"].values())
        assert account["state"] == "watching" and watches >= 10, account
        if stack.cluster.name == "real":
            assert account["protocol"] == "HTTP/2"
            assert _settled(stack, port, 1) == 1, f"{name}: {watches} watches"
        else:
            assert account["protocol"] == "HTTP/1.1"
            assert tcp_connections(stack.agent.proc.pid, port) >= watches
