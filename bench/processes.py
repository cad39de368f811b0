"""The hub and the agent for the hub benchmarks, started as a user does (`python -m scaleagent.cli hub|agent
--config FILE`): their standard error drained by a thread, their addresses read from what they print."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class Proc:
    """A `scale-agent` process whose standard error is drained (and kept) by a thread."""

    def __init__(self, args: list[str], cwd: Path = ROOT) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "scaleagent.cli", "--log-level", "WARNING", *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd,
            env=env,
        )
        self.pid = self.proc.pid
        self.log: list[str] = []
        self.times: list[float] = []  # time.monotonic() when each log line arrived
        self._new = threading.Condition()
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        for line in self.proc.stderr:
            with self._new:
                self.log.append(line.rstrip())
                self.times.append(time.monotonic())
                self._new.notify_all()
        with self._new:
            self._new.notify_all()

    def wait_line(self, pattern: str, timeout: float = 60.0) -> re.Match[str]:
        return self.wait_line_at(pattern, timeout)[0]

    def wait_line_at(self, pattern: str, timeout: float = 60.0) -> tuple[re.Match[str], float]:
        """The first log line matching pattern, and when it arrived (time.monotonic)."""
        deadline = time.monotonic() + timeout
        with self._new:
            while True:
                for line, t in zip(self.log, self.times):
                    if m := re.search(pattern, line):
                        return m, t
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.proc.poll() is not None:
                    raise RuntimeError(f"no {pattern!r} from {self.proc.args[3:5]}: " + "\n".join(self.log[-20:]))
                self._new.wait(remaining)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def make_pki(directory: Path) -> dict[str, Path]:
    """A CA and the hub's certificate for localhost (trustme), as PEM files."""
    import trustme

    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    server = ca.issue_cert("localhost", "127.0.0.1")
    files = {"ca": directory / "ca.pem", "cert": directory / "hub.pem", "key": directory / "hub-key.pem"}
    ca.cert_pem.write_to_path(str(files["ca"]))
    server.cert_chain_pems[0].write_to_path(str(files["cert"]))
    server.private_key_pem.write_to_path(str(files["key"]))
    return files


class Hub(Proc):
    """`scale-agent hub --config FILE` with TLS on the gRPC port, both ports picked free."""

    def __init__(self, tmp: Path, pki: dict[str, Path], name: str = "hub") -> None:
        import yaml

        config = tmp / f"{name}.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "server": {"grpcPort": 0, "httpPort": 0},
                    "tls": {"certFile": str(pki["cert"]), "keyFile": str(pki["key"])},
                    "database": {"url": f"sqlite:///{tmp / (name + '.db')}"},
                }
            )
        )
        super().__init__(["hub", "--config", str(config)])
        m = self.wait_line(r"gRPC on \S+:(\d+), HTTP on (http://\S+)")
        self.grpc_port, self.url = int(m.group(1)), m.group(2)

    def get(self, path: str) -> object:
        return get_json(self.url + path)


class Agent(Proc):
    """`scale-agent agent --config FILE`, sending to a hub over TLS."""

    def __init__(self, tmp: Path, hub: Hub, pki: dict[str, Path], accounts: list[dict], name: str = "agent") -> None:
        import yaml

        config = tmp / f"{name}.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "kubernetes": {"accounts": accounts, "discoveryIntervalSeconds": 600},
                    "server": {"port": 0},
                    "clouddriver": {"grpc": f"localhost:{hub.grpc_port}", "tls": {"cacertFile": str(pki["ca"])}},
                }
            )
        )
        super().__init__(["agent", "--config", str(config)])


def get_json(url: str, timeout: float = 30.0) -> object:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())
