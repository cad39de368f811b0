"""The README's main-job command does what the README says."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))
from helpers import read_until  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent.parent


def test_demo_starts_clusters_reachable_with_the_written_kubeconfig(tmp_path):
    kubectl_bin = shutil.which("kubectl") or "kubectl"
    proc = subprocess.Popen([str(ROOT / "scripts" / "demo"), "--kubeconfig-dir", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        lines = read_until(proc, r"kubesim: ready", timeout=300)
        assert sum("kubesim: cluster" in line for line in lines) == 3
        out = subprocess.run([kubectl_bin, "--kubeconfig", str(tmp_path / "kubesim-0.yaml"), "get", "namespaces"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and "default" in out.stdout
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=30) == 0
