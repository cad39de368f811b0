"""Start project processes the way a user does, and wait for them on conditions, never on sleeps."""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

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
    proc = subprocess.Popen([*CLI, "kubesim", "--kubeconfig-dir", str(kubeconfig_dir), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    try:
        lines = read_until(proc, r"kubesim: ready")
    except BaseException:
        proc.kill()
        raise
    urls = [m.group(1) for line in lines if (m := re.search(r"cluster \S+ at (https://\S+)", line))]
    return KubesimProcess(proc, kubeconfig_dir, urls)


class AgentProcess:
    """`scale-agent agent --print-events` with its event lines collected as they arrive."""

    def __init__(self, config_path: Path, extra_env: dict[str, str] | None = None) -> None:
        import json
        import threading

        self._json = json
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **(extra_env or {})}
        self.proc = subprocess.Popen([*CLI, "--log-level", "DEBUG", "agent", "--config", str(config_path),
                                      "--print-events"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
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
    """A loopback TCP proxy the test controls: cut live connections, refuse new ones, let them in again."""

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
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
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

    def close(self) -> None:
        self.refusing = True
        self.cut()
        self.listener.close()
