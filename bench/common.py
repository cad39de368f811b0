"""Shared pieces of the benchmarks: starting the seeded kubesim and reading process memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def start_seeded_kubesim(kubeconfig_dir: Path, *args: str) -> tuple[subprocess.Popen, dict]:
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "seeded_kubesim.py"), "--kubeconfig-dir", str(kubeconfig_dir), *args],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    if not line.startswith("ready "):
        proc.kill()
        raise RuntimeError(f"seeded kubesim failed to start: {line!r}")
    return proc, json.loads(line[len("ready ") :])


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


def run(main) -> None:
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


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, all cores, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / tick, sum(fields[:8]) / tick


def stolen_seconds() -> float:
    """CPU seconds the hypervisor gave other guests while this machine's vCPUs wanted to run
    (`steal` in /proc/stat), all cores, so far. On a shared host it varies from run to run, and
    a run that lost seconds to it is slower for no reason of its own."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    return int(fields[8]) / os.sysconf("SC_CLK_TCK") if len(fields) > 8 else 0.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def minor_faults(pid: int) -> int:
    """Minor page faults a process has taken so far (/proc/<pid>/stat): mostly pages of
    anonymous memory touched for the first time since they were mapped, each zeroed by the
    kernel first (file pages and copies on write count too)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[7])


def percentiles(xs: list[float], *ps: float) -> list[float]:
    """Nearest-rank percentiles (0 < p <= 100) of xs."""
    s = sorted(xs)
    return [s[min(len(s) - 1, max(0, int(-(-len(s) * p // 100)) - 1))] for p in ps] if s else [float("nan")] * len(ps)


# Benchmarks that compare this tree with an earlier version of one module read it from git:
# SCALE_AGENT_BENCH_BASE names the revision (default HEAD, i.e. the tree's uncommitted changes
# against the last commit; docs/benchmarks.md gives the revision each recorded figure used).
BASE_ENV = "SCALE_AGENT_BENCH_BASE"


def baseline_name() -> str:
    return f"git {os.environ.get(BASE_ENV, 'HEAD')}"


def load_baseline_module(relpath: str, name: str) -> Any:
    """The module at `relpath` (under src/) as it was at the baseline revision, imported under
    `name`; None without git or when the file did not exist then."""
    import importlib.util
    import tempfile

    rev = os.environ.get(BASE_ENV, "HEAD")
    root = Path(__file__).resolve().parent.parent
    try:
        src = subprocess.run(["git", "show", f"{rev}:src/{relpath}"], cwd=root, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    folder = Path(tempfile.mkdtemp(prefix="scaleagent-bench-base-"))
    path = folder / Path(relpath).name
    path.write_bytes(src)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module
