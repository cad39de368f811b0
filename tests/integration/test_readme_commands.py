"""The README's main-job command does what the README says."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.helpers import free_port, read_until

ROOT = Path(__file__).resolve().parent.parent.parent


def _get(url: str, token: str | None = None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as r:
        return json.loads(r.read())


def test_demo_shows_three_clusters_in_one_hub_and_stops_cleanly_on_ctrl_c(tmp_path):
    proc = subprocess.Popen(
        [
            str(ROOT / "scripts" / "demo"),
            "--dir",
            str(tmp_path),
            "--grpc-port",
            str(free_port()),
            "--http-port",
            str(free_port()),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        lines = read_until(proc, r"Ctrl-C stops everything", timeout=300)
        text = "\n".join(lines)
        pids = [int(p) for p in re.findall(r"started \w+ \(pid (\d+)\)", text)]
        assert len(pids) == 3
        http = re.search(r"hub HTTP API\s+(http://\S+)", text).group(1)
        assert f'curl -s -H "Authorization: Bearer $SCALE_AGENT_TOKEN" {http}/api/v1/accounts' in text
        token_file = re.search(r"export SCALE_AGENT_TOKEN=\$\(cat (\S+)\)", text).group(1)
        token = Path(token_file).read_text().strip()
        for secret in (Path(token_file), tmp_path / "agent.yml", tmp_path / "hub.yml"):  # tokens: the owner's alone
            assert secret.stat().st_mode & 0o077 == 0, secret
        with pytest.raises(urllib.error.HTTPError) as refused:  # logins are on: no token, no data
            _get(http + "/api/v1/accounts")
        assert refused.value.code == 401
        deadline = time.monotonic() + 120
        while True:  # the user's view: every cluster's objects readable from the hub
            accounts = _get(http + "/api/v1/accounts", token)
            if len(accounts) == 3 and all(a["agentState"] == "watching" and a["objects"] > 0 for a in accounts):
                break
            assert time.monotonic() < deadline, accounts
            time.sleep(0.2)
        assert {a["name"] for a in accounts} == {"cluster-0", "cluster-1", "cluster-2"}
        assert _get(http + "/api/v1/accounts/cluster-0/objects?kind=Namespace", token)["items"]
        apply_line = re.search(r"^\s+(\S+ apply -f .*)$", text, re.M).group(1)
        applied = subprocess.run(
            apply_line.split(),
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "SCALE_AGENT_TOKEN": token},
        )
        assert applied.returncode == 0, applied.stderr
        assert "deployment.apps/hello serverside-applied" in applied.stdout
        assert [
            d["metadata"]["name"]
            for d in _get(http + "/api/v1/accounts/cluster-1/objects?kind=Deployment&labelSelector=app%3Dhello", token)[
                "items"
            ]
        ] == ["hello"]
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    for pid in pids:  # nothing left behind
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        raise AssertionError(f"child {pid} still running after the demo stopped")
