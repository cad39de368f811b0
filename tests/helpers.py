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
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


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
