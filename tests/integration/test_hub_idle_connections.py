"""Connections that never complete a request, against a real hub over real sockets: each held a
descriptor for ever (issue 29), so that an unauthenticated client could exhaust them.

The hub is configured with short limits (`http.requestHeadSeconds`, `http.keepAliveSeconds`,
`http.maxConnections`, `grpc.handshakeSeconds`); the tests wait for the hub to close each
connection with a generous bound, which only a failing run reaches.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.helpers import HubProcess, tls_hub, write_yaml

CLOSED_WITHIN = 30.0  # a bound for a failing run; a passing one sees the close within a second or two


def _hub(directory: Path, **http: object) -> HubProcess:
    return HubProcess(
        write_yaml(
            directory / "hub.yaml",
            {
                "server": {"grpcPort": 0, "httpPort": 0},
                "database": {"url": f"sqlite:///{directory / 'hub.db'}"},
                "http": {"requestHeadSeconds": 0.5, "keepAliveSeconds": 1, **http},
                "grpc": {"handshakeSeconds": 0.5},
            },
        )
    )


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    hub = _hub(tmp_path_factory.mktemp("idle"))
    yield hub
    hub.stop()


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=CLOSED_WITHIN)


def _http_port(hub: HubProcess) -> int:
    port = urlsplit(hub.url).port
    assert port is not None
    return port


def _closed_by_hub(sock: socket.socket) -> bytes:
    """Everything the hub sends until it closes the connection (raises TimeoutError if it does not
    within CLOSED_WITHIN in all: a hub that keeps sending, gRPC's pings say, must still close)."""
    deadline = time.monotonic() + CLOSED_WITHIN
    received = b""
    while True:
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        chunk = sock.recv(65536)
        if not chunk:
            return received
        received += chunk


def test_a_connection_that_sends_nothing_is_closed(hub):
    with _connect(_http_port(hub)) as sock:
        assert _closed_by_hub(sock) == b""


def test_a_request_head_sent_a_byte_at_a_time_is_closed_before_it_ends(hub):
    """Slowloris: the head keeps coming, never completes; the deadline is for the whole head."""
    with _connect(_http_port(hub)) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        sock.settimeout(0.1)
        for i in range(int(CLOSED_WITHIN / 0.1)):
            try:
                sock.sendall(b"X-Slow-%d: a\r\n" % i)
                if sock.recv(65536) == b"":
                    break
            except TimeoutError:
                continue  # nothing from the hub yet: one more header line
            except (BrokenPipeError, ConnectionResetError):
                break
        else:
            pytest.fail(f"the hub kept a request head that never ended open for {CLOSED_WITHIN}s")


def test_a_complete_request_is_answered_and_the_idle_connection_then_closed(hub):
    with _connect(_http_port(hub)) as sock:
        sock.sendall(b"GET /ready HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        answer = _closed_by_hub(sock)
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert answer.endswith(b'{"ready":true}')


def test_connections_beyond_the_limit_are_closed_on_arrival(tmp_path):
    hub = _hub(tmp_path, requestHeadSeconds=600, maxConnections=2)
    try:
        port = _http_port(hub)
        held = [_connect(port) for _ in range(2)]
        for sock in held:  # both accepted and counted: each answers a request
            sock.sendall(b"GET /ready HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
        with _connect(port) as third:
            assert _closed_by_hub(third) == b""
        for sock in held:
            sock.close()
        hub.wait_log(r"connection\(s\) closed on arrival: 2 are open, the limit \(http.maxConnections\)")
        # The slots are free again once the held connections are gone.
        status = 0
        for _ in range(100):
            try:
                status, _ = hub.get("/ready")
                break
            except OSError:  # closed on arrival: the hub has not seen the held connections go yet
                continue
        assert status == 200
    finally:
        hub.stop()


def test_a_grpc_connection_that_never_sends_the_http2_preface_is_closed(hub):
    with _connect(hub.grpc_port) as sock:
        _closed_by_hub(sock)  # the hub's own SETTINGS, then a GOAWAY, then the close


def test_a_grpc_connection_that_never_starts_tls_is_closed(tmp_path):
    hub, _ = tls_hub(tmp_path, grpc={"handshakeSeconds": 0.5})
    try:
        with _connect(hub.grpc_port) as sock:
            assert _closed_by_hub(sock) == b""
    finally:
        hub.stop()
