"""Drill: the cluster comes back fresh. Its API server returns, at the same address with the same
certificates, on new storage: empty, or with a resourceVersion already past the agent's.

A watch that resumes from a resourceVersion of the old storage is wrong either way: below the new
storage's history the real server says 410 (the kind is listed again), but a version inside it is
served, and every object of the new cluster older than that version is never seen, while the old
cluster's objects stay (issue 12 measured 10 lost and 34 phantom, still wrong after 90 s). The
agent must notice that the cluster was replaced and list everything again; the hub must take the
new objects even when a name and resourceVersion happen to match an old one (another uid).

Runs on a control plane of its own (scripts/real-cluster start, about 10 s with the binaries
cached), since it wipes its storage.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.drills.drill import cluster_state, converge, create_configmaps, report
from tests.e2e.e2e_stack import through
from tests.helpers import AgentProcess, HubProcess, TcpProxy, agent_of, tls_hub

ROOT = Path(__file__).resolve().parents[2]
REAL_CLUSTER = ROOT / "scripts" / "real-cluster"
KINDS = ["ConfigMap", "Namespace", "Secret"]
CONVERGENCE_BOUND = 120.0  # seconds after the cluster is reachable again

pytestmark = [pytest.mark.e2e, pytest.mark.drill]


def real_cluster(*args: str, directory: Path) -> str:
    done = subprocess.run(
        [str(REAL_CLUSTER), *args, "--dir", str(directory)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"scripts/real-cluster {' '.join(args)} failed:\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture
def control_plane(tmp_path: Path):
    if os.environ.get("SCALE_AGENT_E2E_REAL_CLUSTER") == "0" or not os.environ.get("SCALE_AGENT_E2E_KUBECONFIG"):
        pytest.skip("no real control plane in this run (scripts/test starts one)")
    directory = tmp_path / "control-plane"
    real_cluster("start", directory=directory)
    try:
        yield directory
    finally:
        real_cluster("stop", directory=directory)


def follow(directory: Path, tmp_path: Path) -> tuple[TcpProxy, HubProcess, AgentProcess]:
    """A hub, and an agent following the cluster through a proxy the drill can close."""
    server = yaml.safe_load((directory / "admin.yaml").read_text())["clusters"][0]["cluster"]["server"]
    proxy = TcpProxy("127.0.0.1", int(server.rsplit(":", 1)[1]))
    hub, pki = tls_hub(tmp_path)
    agent = agent_of(
        hub,
        pki,
        tmp_path,
        [
            {
                "name": "drill",
                "kinds": KINDS,
                "kubeConfigFile": str(through(directory / "admin.yaml", proxy, tmp_path / "admin.yaml")),
            }
        ],
    )
    return proxy, hub, agent


def converged(hub: HubProcess, directory: Path, what: str) -> None:
    took = converge(hub, "drill", directory / "admin.yaml", KINDS, CONVERGENCE_BOUND)
    report(what, took, "the cluster came back", CONVERGENCE_BOUND)
    assert hub.json("/api/v1/accounts/drill")["state"] == "ACTIVE"


@pytest.mark.parametrize("storage", ["empty", "ahead"])
def test_a_cluster_back_on_fresh_storage_is_listed_again(control_plane: Path, tmp_path: Path, storage: str):
    directory = control_plane
    if storage == "empty":
        # The old storage is far ahead: the agent's versions are all beyond the new cluster's.
        real_cluster("revision", "--at-least", "3000", directory=directory)
    proxy, hub, agent = follow(directory, tmp_path)
    try:
        create_configmaps(directory / "admin.yaml", "before", 20)
        converge(hub, "drill", directory / "admin.yaml", KINDS, CONVERGENCE_BOUND)
        # About where the agent's watches are:
        last = max(int(key[4]) for key in cluster_state(directory / "admin.yaml", KINDS))

        proxy.refusing = True  # the agent loses the cluster...
        proxy.cut()
        # ...which comes back on new storage. "ahead": the new API server's watch history starts
        # just below the agent's last version, so resuming from it is served, not refused.
        reset = ["reset"] if storage == "empty" else ["reset", "--revision", str(max(1, last - 20))]
        real_cluster(*reset, directory=directory)
        create_configmaps(directory / "admin.yaml", "after", 10)
        if storage == "ahead":
            assert int(real_cluster("revision", directory=directory)) > last, "the new storage is not past the old"
        proxy.refusing = False

        converged(hub, directory, f"fresh cluster ({storage} storage)")
    finally:
        agent.stop()
        hub.stop()
        proxy.close()


def test_a_cluster_restored_from_a_backup_is_listed_again(control_plane: Path, tmp_path: Path):
    # Same cluster (same kube-system uid), back in time: the agent's versions are ahead of it, and
    # a real 1.20 server answers a watch from such a version with 200 and silence.
    directory = control_plane
    proxy, hub, agent = follow(directory, tmp_path)
    try:
        create_configmaps(directory / "admin.yaml", "before", 10)
        converge(hub, "drill", directory / "admin.yaml", KINDS, CONVERGENCE_BOUND)
        real_cluster("backup", directory=directory)
        create_configmaps(directory / "admin.yaml", "between", 30)  # what the restore will forget
        converge(hub, "drill", directory / "admin.yaml", KINDS, CONVERGENCE_BOUND)
        last = max(int(key[4]) for key in cluster_state(directory / "admin.yaml", KINDS))

        proxy.refusing = True
        proxy.cut()
        real_cluster("restore", directory=directory)
        create_configmaps(directory / "admin.yaml", "after", 3)
        assert int(real_cluster("revision", directory=directory)) < last, "the restored cluster is not behind"
        proxy.refusing = False

        converged(hub, directory, "cluster restored from a backup")
    finally:
        agent.stop()
        hub.stop()
        proxy.close()
