"""The API server goes away and comes back: the agent says so while it lasts, logs it in a few
lines, and the hub converges with no lost and no phantom object."""

from __future__ import annotations

import re
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.e2e.e2e_stack import Cluster, Stack
from tests.helpers import account_health, free_port

SCRIPT = Path(__file__).parent.parent.parent / "scripts" / "real-cluster"


def admin_state(stack: Stack) -> str:
    return stack.account("admin")["state"]


def hub_state(doc: list, account: str) -> str:
    return next(a["agentState"] for a in doc if a["name"] == account)


def configmap(stack: Stack, cluster: Cluster, namespace: str, name: str) -> None:
    cluster.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}})
    stack.hub.wait_until(
        f"/api/v1/accounts/admin/objects?kind=ConfigMap&namespace={namespace}&name={name}",
        lambda d: len(d["items"]) == 1,
        what=f"ConfigMap {name} in the hub",
    )


def test_an_outage_reads_as_not_watching_until_every_watch_is_back_and_logs_a_few_lines(stack, cluster, namespace):
    doomed = f"doomed-{uuid.uuid4().hex[:6]}"
    configmap(stack, cluster, namespace, doomed)
    watches = sum(stack.account("admin")["watches"].values())
    assert watches >= 10
    first_line = len(stack.agent.stderr)

    stack.proxy.refusing = True  # the API server is unreachable: every watch breaks and retries
    stack.proxy.cut()
    # Retried at least three times by one watch (the account's `error`), all the while not `watching`.
    stack.agent.wait_health(
        lambda d: account_health(d, "admin")["state"] == "error",
        timeout=90,
        what="the account reporting its failing watches",
    )
    stack.hub.wait_until("/api/v1/accounts", lambda d: hub_state(d, "admin") == "error", what="the hub showing it")
    cluster.kubectl("delete", "configmap", doomed, "-n", namespace)  # behind the agent's back

    stack.proxy.refusing = False
    seen_states = set()

    def back(doc: dict) -> bool:
        account = account_health(doc, "admin")
        seen_states.add(account["state"])
        return account["state"] == "watching"

    doc = stack.agent.wait_health(back, timeout=120, what="every watch established again")
    assert account_health(doc, "admin").get("retrying") is None
    stack.hub.wait_until(
        f"/api/v1/accounts/admin/objects?kind=ConfigMap&namespace={namespace}&name={doomed}",
        lambda d: d["items"] == [],
        timeout=15,
        what="the deletion made during the outage",
    )

    # One account, one cause: a few lines, not one per watch and retry.
    lines = [line for line in stack.agent.stderr[first_line:] if not re.search(r" DEBUG ", line)]
    about_admin = [line for line in lines if "admin" in line]
    assert len(about_admin) <= 8, "\n".join(about_admin)
    assert any(re.search(r"account admin: \d+ watch(es)? retrying: .*\(\d+\)", line) for line in about_admin), lines
    assert any("every watch is established again" in line for line in about_admin), lines


def real_cluster(cluster: Cluster) -> Path:
    if cluster.is_kubesim or cluster.real_dir is None:
        pytest.skip("needs the control plane of scripts/real-cluster (kubesim's 410s: tests/integration)")
    return cluster.real_dir


def script(real_dir: Path, *args: str) -> None:
    subprocess.run([str(SCRIPT), *args, "--dir", str(real_dir)], check=True, capture_output=True, timeout=180)


def test_an_apiserver_restart_with_etcd_compacted_in_between_converges(stack, cluster, namespace):
    real_dir = real_cluster(cluster)
    kept, doomed = f"kept-{uuid.uuid4().hex[:6]}", f"doomed-{uuid.uuid4().hex[:6]}"
    configmap(stack, cluster, namespace, kept)
    configmap(stack, cluster, namespace, doomed)
    born = f"born-{uuid.uuid4().hex[:6]}"

    script(real_dir, "apiserver-stop")
    try:
        # While the agent cannot reach it, the cluster changes (through the same etcd, on another
        # port), and etcd forgets the history: every version the agent holds is compacted away.
        side_port = str(free_port())
        script(real_dir, "apiserver-start", "--port", side_port)
        side = ["--server", f"https://127.0.0.1:{side_port}"]
        cluster.kubectl(*side, "delete", "configmap", doomed, "-n", namespace)
        cluster.kubectl(*side, "create", "configmap", born, "-n", namespace)
        cluster.kubectl(*side, "label", "configmap", kept, "-n", namespace, "changed=yes")
        script(real_dir, "apiserver-stop")
        script(real_dir, "compact")
    finally:
        script(real_dir, "apiserver-start")

    server = {
        (i["metadata"]["name"], i["metadata"]["resourceVersion"])
        for i in cluster.json("get", "configmaps", "-n", namespace)["items"]
    }
    assert {name for name, _ in server} >= {kept, born} and doomed not in {name for name, _ in server}
    stack.hub.wait_until(
        f"/api/v1/accounts/admin/objects?kind=ConfigMap&namespace={namespace}",
        lambda d: {(i["metadata"]["name"], i["metadata"]["resourceVersion"]) for i in d["items"]} == server,
        timeout=120,
        what="exactly what the server holds (nothing lost, no phantom)",
    )
    stack.agent.wait_health(
        lambda d: account_health(d, "admin")["state"] == "watching", timeout=120, what="the account watching again"
    )
    assert stack.account("admin")["state"] == "watching"
