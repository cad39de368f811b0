"""Start project processes the way a user does, and wait for them on conditions, never on sleeps."""

from __future__ import annotations

import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CLI = [sys.executable, "-m", "scaleagent.cli"]


def read_until(proc: subprocess.Popen, pattern: str, timeout: float = 60.0) -> list[str]:
    """Read the process's stdout lines until one matches `pattern`; fail if it exits or times out.

    Reads the raw descriptor (select() cannot see lines already inside a Python buffer) and keeps
    any partial line on the process object for the next call.
    """
    lines: list[str] = []
    fd = proc.stdout.fileno()
    pending: bytes = getattr(proc, "_pending_output", b"")
    deadline = time.monotonic() + timeout
    sel = selectors.DefaultSelector()
    sel.register(fd, selectors.EVENT_READ)
    try:
        while True:
            while b"\n" in pending:
                raw, pending = pending.split(b"\n", 1)
                line = raw.decode(errors="replace")
                lines.append(line)
                if re.search(pattern, line):
                    proc._pending_output = pending  # type: ignore[attr-defined]
                    return lines
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no line matching {pattern!r} within {timeout}s; got: {lines}")
            if not sel.select(remaining):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                raise RuntimeError(f"process exited ({proc.wait()}) before {pattern!r}; output: {lines}")
            pending += chunk
    finally:
        sel.close()


def stop_process(proc: subprocess.Popen, timeout: float = 20) -> int:
    """SIGTERM, as a service manager would; SIGKILL only if it does not exit in time."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


@dataclass
class KubesimProcess:
    proc: subprocess.Popen
    kubeconfig_dir: Path
    urls: list[str] = field(default_factory=list)

    def admin(self, i: int = 0) -> Path:
        return self.kubeconfig_dir / f"kubesim-{i}.yaml"

    def limited(self, i: int = 0) -> Path:
        return self.kubeconfig_dir / f"kubesim-{i}-limited.yaml"

    def stop(self) -> int:
        return stop_process(self.proc)


def start_kubesim(kubeconfig_dir: Path, *args: str) -> KubesimProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [*CLI, "kubesim", "--kubeconfig-dir", str(kubeconfig_dir), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
    )
    try:
        lines = read_until(proc, r"kubesim: ready")
    except BaseException:
        proc.kill()
        raise
    urls = [m.group(1) for line in lines if (m := re.search(r"cluster \S+ at (https://\S+)", line))]
    return KubesimProcess(proc, kubeconfig_dir, urls)


class AgentProcess:
    """`scale-agent agent` with its event lines (`--print-events`) or its log collected as they arrive."""

    def __init__(
        self, config_path: Path, extra_env: dict[str, str] | None = None, *, print_events: bool = True
    ) -> None:
        import json
        import threading

        self._json = json
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **(extra_env or {})}
        mode = ["--print-events"] if print_events else []
        self.proc = subprocess.Popen(
            [*CLI, "--log-level", "DEBUG", "agent", "--config", str(config_path), *mode],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        self.events: list[dict] = []
        self.stderr: list[str] = []
        self._new = threading.Condition()
        threading.Thread(target=self._read_events, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_events(self) -> None:
        for line in self.proc.stdout:
            event = self._json.loads(line)
            with self._new:
                self.events.append(event)
                self._new.notify_all()
        with self._new:
            self._new.notify_all()

    def _read_stderr(self) -> None:
        for line in self.proc.stderr:
            with self._new:
                self.stderr.append(line.decode(errors="replace").rstrip())
                self._new.notify_all()
        with self._new:
            self._new.notify_all()

    def wait_for(self, predicate, timeout: float = 60.0, what: str = "an event") -> dict:
        """The first event (from the start) matching predicate, waiting for it as events arrive."""
        deadline = time.monotonic() + timeout
        seen = 0
        with self._new:
            while True:
                for event in self.events[seen:]:
                    if predicate(event):
                        return event
                seen = len(self.events)
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.proc.poll() is not None:
                    tail = "\n".join(self.stderr[-15:])
                    raise TimeoutError(f"no {what} within {timeout}s ({len(self.events)} events); agent log:\n{tail}")
                self._new.wait(remaining)

    def wait_log(self, pattern: str, timeout: float = 30.0, what: str = "a log line") -> str:
        """The first line of the agent's log (standard error) matching pattern, waiting for it."""
        deadline = time.monotonic() + timeout
        with self._new:
            while True:
                for line in self.stderr:
                    if re.search(pattern, line):
                        return line
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.proc.poll() is not None:
                    raise TimeoutError(
                        f"no {what} ({pattern!r}) within {timeout}s; agent log:\n" + "\n".join(self.stderr[-20:])
                    )
                self._new.wait(remaining)

    def count(self, predicate) -> int:
        with self._new:
            return sum(1 for e in self.events if predicate(e))

    def health_url(self, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        with self._new:
            while True:
                for line in self.stderr:
                    m = re.search(r"health on (http://\S+)/health", line)
                    if m:
                        return m.group(1)
                remaining = deadline - time.monotonic()
                if self.proc.poll() is not None or remaining <= 0:
                    raise RuntimeError("agent did not report its health address: " + "\n".join(self.stderr[-15:]))
                self._new.wait(remaining)

    def health(self) -> dict:
        import urllib.request

        with urllib.request.urlopen(self.health_url() + "/health", timeout=10) as r:
            return self._json.loads(r.read())

    def wait_health(self, predicate, timeout: float = 60.0, what: str = "a health state") -> dict:
        """Poll /health until predicate holds: the endpoint is the user-visible condition."""
        deadline = time.monotonic() + timeout
        doc: dict = {}
        while time.monotonic() < deadline:
            doc = self.health()
            if predicate(doc):
                return doc
            with self._new:
                self._new.wait(0.1)
        raise TimeoutError(f"no {what} within {timeout}s; last health: {doc}")

    def stop(self) -> int:
        return stop_process(self.proc)


def account_health(doc: dict, name: str) -> dict:
    return next(a for a in doc["accounts"] if a["name"] == name)


class TcpProxy:
    """A loopback TCP proxy the test controls: cut live connections, refuse new ones, let them in
    again, or freeze every connection (new ones too) and thaw them, as a network that stops
    delivering and then recovers."""

    def __init__(self, target_host: str, target_port: int) -> None:
        import socket
        import threading

        self.target = (target_host, target_port)
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.port = self.listener.getsockname()[1]
        self.refusing = False
        self.connections: list = []
        self._flowing = threading.Event()
        self._flowing.set()
        self._half_open: list = []  # sockets of connections left half-open: never touched again
        self._lock = threading.Lock()
        self._socket = socket
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import threading

        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.refusing:
                client.close()
                continue
            try:
                upstream = self._socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self.connections += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src, dst) -> None:
        try:
            # While frozen nothing is read: bytes wait in the kernel's buffers and senders block,
            # as TCP does while a network drops everything and retransmits.
            while self._flowing.wait() and (data := src.recv(65536)):
                self._flowing.wait()
                if dst in self._half_open:
                    return
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst) if src not in self._half_open and dst not in self._half_open else ():
                try:
                    s.shutdown(self._socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        """Break every live connection, as a network failure would."""
        with self._lock:
            conns, self.connections = self.connections, []
        for s in conns:
            try:
                s.shutdown(self._socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass

    def freeze(self) -> None:
        """Stop forwarding bytes both ways; connections stay open and silent (new ones too)."""
        self._flowing.clear()

    def thaw(self, *, half_open: bool = False) -> None:
        """Forward again, what waited first. `half_open`: the server gave up on every connection
        during the freeze (closed its end), but its client never hears of it: the client's end
        stays open and silent for good, as after a long outage. New connections work."""
        if half_open:
            with self._lock:
                conns, self.connections = self.connections, []
            self._half_open += conns
            for upstream in conns[1::2]:
                try:
                    upstream.shutdown(self._socket.SHUT_RDWR)
                except OSError:
                    pass
        self._flowing.set()

    def close(self) -> None:
        self.refusing = True
        self.cut()
        self.thaw()
        for s in self._half_open:
            s.close()
        self.listener.close()


class HubProcess:
    """`scale-agent hub` on free ports, its log collected, its HTTP API at hand."""

    def __init__(self, config_path: Path | None = None, *args: str, extra_env: dict[str, str] | None = None) -> None:
        import threading

        env = {**os.environ, "PYTHONUNBUFFERED": "1", **(extra_env or {})}
        config = ["--config", str(config_path)] if config_path else []
        self.proc = subprocess.Popen(
            [*CLI, "--log-level", "DEBUG", "hub", *config, *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
        )
        self.log: list[str] = []
        self._new = threading.Condition()
        threading.Thread(target=self._read_log, daemon=True).start()
        line = self.wait_log(r"gRPC on \S+, HTTP on https?://", 30, "the hub's start line")
        m = re.search(r"gRPC on (\S+), HTTP on (https?://\S+)", line)
        self.grpc_target, self.url = m.group(1), m.group(2)
        self.grpc_port = int(self.grpc_target.rsplit(":", 1)[1])

    def _read_log(self) -> None:
        for line in self.proc.stderr:
            with self._new:
                self.log.append(line.decode(errors="replace").rstrip())
                self._new.notify_all()
        with self._new:
            self._new.notify_all()

    def wait_log(self, pattern: str, timeout: float = 30.0, what: str = "a log line") -> str:
        deadline = time.monotonic() + timeout
        with self._new:
            while True:
                for line in self.log:
                    if re.search(pattern, line):
                        return line
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.proc.poll() is not None:
                    raise TimeoutError(
                        f"no {what} ({pattern!r}) within {timeout}s; hub log:\n" + "\n".join(self.log[-20:])
                    )
                self._new.wait(remaining)

    def get(self, path: str, timeout: float = 10.0) -> tuple[int, object]:
        import json
        import urllib.error
        import urllib.request

        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def post(self, path: str, body: object) -> tuple[int, object]:
        import json
        import urllib.error
        import urllib.request

        request = urllib.request.Request(
            self.url + path, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def call(self, method: str, path: str, body: object = None, token: str | None = None) -> tuple[int, Any]:
        """Any request, as an API client makes it: (status, the JSON answer), errors included. A
        body of bytes is sent as it is (to send what is not JSON)."""
        import json
        import urllib.error
        import urllib.request

        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        request = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=30) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def run_task(self, operations: list, timeout: float = 60.0) -> dict:
        """POST /kubernetes/ops and the task document once it has ended."""
        status, created = self.post("/kubernetes/ops", operations)
        assert status == 200, (status, created)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            # The long poll holds up to 10 s; the client waits longer, so an answer at 10 s is read.
            status, task = self.get(f"{created['resourceUri']}?waitSeconds=10", timeout=40)  # type: ignore[index]
            assert status == 200, (created, status, task)
            if task["state"] != "running":  # type: ignore[index]
                return task  # type: ignore[return-value]
        raise TimeoutError(f"task {created} still running after {timeout}s; hub log:\n" + "\n".join(self.log[-20:]))

    def json(self, path: str, timeout: float = 10.0) -> object:
        status, doc = self.get(path, timeout)
        assert status == 200, (path, status, doc)
        return doc

    def wait_until(self, path: str, predicate, timeout: float = 60.0, what: str = "a state") -> object:
        """Poll a read endpoint until predicate holds on its answer: what a user of the API would see."""
        deadline = time.monotonic() + timeout
        doc: object = None
        while time.monotonic() < deadline:
            status, doc = self.get(path)
            if status == 200 and predicate(doc):
                return doc
            if self.proc.poll() is not None:
                break
            with self._new:
                self._new.wait(0.05)
        raise TimeoutError(
            f"no {what} at {path} within {timeout}s; last answer: {str(doc)[:2000]}\nhub log:\n"
            + "\n".join(self.log[-20:])
        )

    def objects(self, account: str, query: str = "") -> list[dict]:
        return self.json(f"/api/v1/accounts/{account}/objects{query}")["items"]  # type: ignore[index]

    def stop(self) -> int:
        return stop_process(self.proc)


@dataclass
class HubPki:
    """A CA, the hub's certificate for localhost, a client certificate it signed, and one it did not."""

    dir: Path
    ca: Path
    cert: Path
    key: Path
    client_cert: Path
    client_key: Path
    stranger_cert: Path
    stranger_key: Path


def make_hub_pki(directory: Path, client_cn: str | None = None) -> HubPki:
    """`client_cn`: the subject CN of the client certificate (none by default)."""
    import trustme

    ca, other = trustme.CA(), trustme.CA()
    server = ca.issue_cert("localhost", "127.0.0.1")
    client = ca.issue_cert(client_cn or "agent.scale-agent.test", common_name=client_cn)
    stranger = other.issue_cert("agent.scale-agent.test")
    files = {}
    for name, blob in (
        ("ca.pem", ca.cert_pem),
        ("hub.pem", server.cert_chain_pems[0]),
        ("hub-key.pem", server.private_key_pem),
        ("agent.pem", client.cert_chain_pems[0]),
        ("agent-key.pem", client.private_key_pem),
        ("stranger.pem", stranger.cert_chain_pems[0]),
        ("stranger-key.pem", stranger.private_key_pem),
    ):
        files[name] = directory / name
        blob.write_to_path(str(files[name]))
    return HubPki(
        directory,
        files["ca.pem"],
        files["hub.pem"],
        files["hub-key.pem"],
        files["agent.pem"],
        files["agent-key.pem"],
        files["stranger.pem"],
        files["stranger-key.pem"],
    )


def write_yaml(path: Path, doc: dict) -> Path:
    import yaml

    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tls_hub(directory: Path, **config: object) -> tuple[HubProcess, HubPki]:
    """A hub over TLS on free ports with its database in `directory`; `config` adds or replaces
    top-level sections of its configuration."""
    pki = make_hub_pki(directory)
    doc = {
        "server": {"grpcPort": 0, "httpPort": 0},
        "tls": {"certFile": str(pki.cert), "keyFile": str(pki.key)},
        "database": {"url": f"sqlite:///{directory / 'hub.db'}"},
        **config,
    }
    return HubProcess(write_yaml(directory / "hub.yaml", doc)), pki


def agent_of(
    hub: HubProcess, pki: HubPki, directory: Path, accounts: list[dict], **clouddriver: object
) -> AgentProcess:
    """An agent following `accounts`, connected to `hub` over TLS; `clouddriver` adds settings."""
    return AgentProcess(
        write_yaml(
            directory / "agent.yaml",
            {
                "kubernetes": {"accounts": accounts},
                "server": {"port": 0},
                "clouddriver": {
                    "grpc": f"localhost:{hub.grpc_port}",
                    "tls": {"cacertFile": str(pki.ca)},
                    **clouddriver,
                },
            },
        ),
        print_events=False,
    )


def dynamic_hub_and_agent(
    directory: Path, database_url: str, *, retry_seconds: float
) -> tuple[HubProcess, AgentProcess]:
    """A hub with dynamic accounts on `database_url` (a fresh encryption key; failed accounts
    retried every `retry_seconds`), and one agent connected to it in plaintext, taking dynamic
    accounts. The agent's link is up when this returns; the caller stops both."""
    from cryptography.fernet import Fernet

    hub = HubProcess(
        write_yaml(
            directory / "hub.yaml",
            {
                "server": {"grpcPort": 0, "httpPort": 0},
                "database": {"url": database_url},
                "dynamicAccounts": {
                    "encryptionKey": Fernet.generate_key().decode(),
                    "retryFrequencySeconds": retry_seconds,
                    # The tests name kubeconfig files anywhere (kubesim's, their own); confining
                    # them is tested in tests/integration/test_hub_http_hardening.py.
                    "kubeconfigDirectories": ["/"],
                },
            },
        )
    )
    agent = AgentProcess(
        write_yaml(
            directory / "agent.yaml",
            {"server": {"port": 0}, "clouddriver": {"grpc": f"localhost:{hub.grpc_port}", "insecure": True}},
        ),
        print_events=False,
    )
    try:
        agent.wait_health(lambda d: d["hub"]["state"] == "connected", what="the agent connected")
    except BaseException:
        agent.stop()
        hub.stop()
        raise
    return hub, agent


class ConfigMapVolume:
    """A directory laid out as the kubelet mounts a ConfigMap, changed as the kubelet changes it:
    the files live in a timestamped directory, `..data` points at it, each key is a symlink
    through `..data`; an update writes a new directory and renames a new `..data` link over the
    old one (one atomic step), then removes the old directory."""

    def __init__(self, directory: Path, files: dict[str, str]) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.generation = 0
        self.update(files)
        for key in files:
            (directory / key).symlink_to(Path("..data") / key)

    def path(self, key: str) -> Path:
        return self.directory / key

    def update(self, files: dict[str, str]) -> None:
        self.generation += 1
        data = self.directory / f"..2026_11_24_00_00_00.{self.generation}"
        data.mkdir()
        for key, text in files.items():
            (data / key).write_text(text)
        old = os.readlink(self.directory / "..data") if (self.directory / "..data").is_symlink() else None
        tmp = self.directory / "..data_tmp"
        tmp.symlink_to(data.name)
        os.rename(tmp, self.directory / "..data")
        if old is not None:
            shutil.rmtree(self.directory / old)


def admin_hub(directory: Path, token: str, **extra: object) -> HubProcess:
    """A hub (SQLite, free ports) whose only caller is an admin logging in with `token`."""
    return login_hub(directory, {"admin": (["platform"], token)}, **extra)


def login_hub(directory: Path, users: dict[str, tuple[list[str], str]], **extra: object) -> HubProcess:
    """A hub (SQLite, free ports) with static-token logins: user name -> (groups, token); the
    group `platform` is the admins'."""
    from scaleagent.hub.auth.callers import hash_token

    tokens = write_yaml(
        directory / "tokens.yaml",
        [  # type: ignore[arg-type]
            {"name": name, "groups": groups, "tokenHash": hash_token(token)} for name, (groups, token) in users.items()
        ],
    )
    auth = {"staticTokensFile": str(tokens), "admins": {"groups": ["platform"]}, **extra.pop("auth", {})}  # type: ignore[dict-item]
    return HubProcess(
        write_yaml(
            directory / "hub.yaml",
            {
                "server": {"grpcPort": 0, "httpPort": 0},
                "database": {"url": f"sqlite:///{directory / 'hub.db'}"},
                "auth": auth,
                **extra,
            },
        )
    )
