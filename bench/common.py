"""Shared pieces of the benchmarks: starting the seeded kubesim and reading process memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def start_seeded_kubesim(kubeconfig_dir: Path, *args: str) -> tuple[subprocess.Popen, dict]:
    proc = subprocess.Popen([sys.executable, str(HERE / "seeded_kubesim.py"), "--kubeconfig-dir", str(kubeconfig_dir),
                             *args], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line.startswith("ready "):
        proc.kill()
        raise RuntimeError(f"seeded kubesim failed to start: {line!r}")
    return proc, json.loads(line[len("ready "):])


def memory_kb(pid: int) -> tuple[int, int]:
    """(current RSS, peak RSS) of a process, in KiB, from /proc."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0])
    return values["VmRSS"], values["VmHWM"]


def median(xs: list[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2


def run(main) -> None:  # noqa: ANN001 - a coroutine function
    """Run a benchmark's main coroutine on uvloop, as the agent runs."""
    import asyncio

    try:
        import uvloop  # type: ignore[import-not-found]

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(main())


def machine() -> str:
    return f"{os.cpu_count()} cores, Python {sys.version.split()[0]}"
