"""Drill: an operation in flight when its replica dies is resent to a standby agent, and the cluster
still changes once (issue 29, item 1; docs/reliability.md "Nothing applied twice").

Three hub replicas on PostgreSQL and two agents of the same account: agent-1 knows hub-a alone
and streams the account; agent-2 knows hub-c alone and stands by. A runJob with `generateName`
is sent through hub-b, which forwards it to hub-a; once agent-1 has created the Job, hub-a is
killed. hub-b sends the operation again, with its id, to hub-c, whose agent-2 took the account
over and never saw the first run. The drill compares the Jobs in the cluster with the task's
report: one Job, and the task reports that one.
"""

from __future__ import annotations

import signal
import time
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config

from tests.databases import emptied
from tests.drills.replicas import start_replicas, stop
from tests.helpers import AgentProcess, HubProcess, write_yaml

pytestmark = pytest.mark.drill

WAIT = 90.0
NO_NODE = {"scale-agent.io/no-such-node": "true"}  # kubesim leaves the pod Pending (docs/kubesim.md)


def start_agent(tmp: Path, name: str, hub: HubProcess, kubeconfig: Path) -> AgentProcess:
    doc = {
        "agentId": name,
        "kubernetes": {
            "accounts": [{"name": "shared", "kubeconfigFile": str(kubeconfig), "kinds": ["Namespace", "Job", "Pod"]}]
        },
        "server": {"port": 0},
        "clouddriver": {
            "grpc": f"localhost:{hub.grpc_port}",
            "insecure": True,
            "keepAliveHeartbeatSeconds": 1,
            "keepAliveTimeOutSeconds": 2,
        },
    }
    return AgentProcess(write_yaml(tmp / f"{name}.yaml", doc), print_events=False)


def in_flight(agent: AgentProcess) -> list[dict]:
    import json
    import urllib.request

    with urllib.request.urlopen(agent.health_url() + "/operations", timeout=10) as r:
        return json.loads(r.read())["inFlight"]


def until(condition, what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g}s"
        time.sleep(0.2)  # a poll interval: the condition is checked again, never assumed


class Namespace:
    """The drill's namespace in kubesim's first cluster, and its Jobs, read with the official client."""

    def __init__(self, kubeconfig: Path, prefix: str) -> None:
        api = config.new_client_from_config(config_file=str(kubeconfig))
        self.core, self.batch = client.CoreV1Api(api), client.BatchV1Api(api)
        self.name, self.run = f"{prefix}-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex[:8]
        self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=self.name)))

    def job(self, generate_name: str) -> dict:
        """A Job whose pod kubesim never places: it runs until the drill finishes it."""
        pod = {"restartPolicy": "Never", "nodeSelector": NO_NODE, "containers": [{"name": "c", "image": "busybox"}]}
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"generateName": generate_name, "labels": {"drill": self.run}},
            "spec": {"backoffLimit": 0, "template": {"spec": pod}},
        }

    def jobs(self) -> list[str]:
        items = self.batch.list_namespaced_job(self.name, label_selector=f"drill={self.run}").items
        return sorted(j.metadata.name for j in items)

    def finish(self, job: str) -> None:
        """The Job's pod succeeds, as a kubelet would report it."""
        pod = self.core.list_namespaced_pod(self.name, label_selector=f"job-name={job}").items[0]
        self.core.patch_namespaced_pod_status(pod.metadata.name, self.name, {"status": {"phase": "Succeeded"}})

    def delete(self) -> None:
        self.core.delete_namespace(self.name)


def ended(hub: HubProcess, created: dict) -> tuple[dict, list[str]]:
    """The task once it has ended, read from `hub`, and the objects its results name."""
    deadline = time.monotonic() + WAIT
    while True:
        status, task = hub.get(f"{created['resourceUri']}?waitSeconds=10", timeout=40)
        assert status == 200, task
        if task["state"] != "running":
            return task, [m["metadata"]["name"] for r in task["resultObjects"] for m in r.get("manifests", [])]
        assert time.monotonic() < deadline, "the task never ended"


def test_a_job_resent_to_a_standby_agent_after_its_replica_dies_is_created_once(postgres_db, kubesim, tmp_path):
    kubeconfig = kubesim.admin(0)
    ns = Namespace(kubeconfig, "drill-once")
    hubs = start_replicas(
        tmp_path, emptied(postgres_db), operations={"operationWaitMs": int(WAIT * 1000)}, sessions={"graceSeconds": 30}
    )
    a, b, c = hubs.values()
    agents: list[AgentProcess] = []
    try:
        agents.append(start_agent(tmp_path, "agent-1", a, kubeconfig))
        a.wait_until("/api/v1/accounts/shared", lambda d: d["agentState"] == "watching", what="agent-1 streams")
        agents.append(start_agent(tmp_path, "agent-2", c, kubeconfig))
        agents[1].wait_health(lambda d: d["hub"]["state"] == "connected", what="agent-2 standing by")
        run_job = {"account": "shared", "manifest": ns.job("migrate-"), "namespace": ns.name}
        status, created = b.post("/kubernetes/ops", [{"runJob": run_job}])
        assert status == 200, created

        until(lambda: len(ns.jobs()) == 1, "agent-1 creates the Job")
        first = ns.jobs()
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait()
        killed = time.monotonic()
        try:
            until(lambda: any(op["type"] == "runJob" for op in in_flight(agents[1])), "the runJob resent to agent-2")
        except AssertionError:
            context = [
                f"{n}: {line}" for n, h in hubs.items() for line in h.log if n != "hub-a" and "DEBUG" not in line
            ]
            raise AssertionError(
                "\n".join(context[-60:]) + "\nagent-2:\n" + "\n".join(agents[1].stderr[-30:])
            ) from None
        resent = time.monotonic() - killed
        after = ns.jobs()
        print(
            f"\ndrill failover once: Jobs before hub-a died {first}, after the resend to agent-2 {after} ({resent:.1f}s)"
        )
        assert after == first

        # The Job's pod finishes: the task completes, reporting the one Job there is.
        ns.finish(first[0])
        task, reported = ended(c, created)
        print(f"drill failover once: task {task['state']}, reporting {reported}; Jobs in the cluster {ns.jobs()}")
        assert task["state"] == "completed", yaml.safe_dump(task)
        assert reported == first == ns.jobs()
    finally:
        for agent in agents:
            agent.stop()
        stop(hubs)
        ns.delete()


@pytest.mark.parametrize("fault", ["killed", "killed and restarted", "stopped"])
def test_a_task_whose_replica_goes_ends_with_the_result_the_streaming_replica_received(
    postgres_db, kubesim, tmp_path, fault
):
    """Issue 29, item 5: the task is received by hub-b, its runJob runs on hub-a's agent, and hub-b
    goes while the Job runs: killed; killed and started again at once under the same name (before
    the others notice it died); or stopped cleanly (a rolling update). The Job completes; hub-a has
    the agent's result, and the task, read from hub-c, ends with it rather than "may have been
    carried out" (or, before the fix for the restart, stays running for ever)."""
    kubeconfig = kubesim.admin(0)
    ns = Namespace(kubeconfig, "drill-outcome")
    hubs = start_replicas(tmp_path, emptied(postgres_db), operations={"operationWaitMs": int(WAIT * 1000)})
    a, b, c = hubs.values()
    agent = None
    try:
        agent = start_agent(tmp_path, "agent-1", a, kubeconfig)
        a.wait_until("/api/v1/accounts/shared", lambda d: d["agentState"] == "watching", what="agent-1 streams")
        run_job = {"account": "shared", "manifest": ns.job("report-"), "namespace": ns.name}
        status, created = b.post("/kubernetes/ops", [{"runJob": run_job}])
        assert status == 200, created
        until(lambda: len(ns.jobs()) == 1, "agent-1 creates the Job")
        until(lambda: any(op["type"] == "runJob" for op in in_flight(agent)), "agent-1 waits for the Job")
        if fault == "stopped":
            b.stop()
        else:
            b.proc.send_signal(signal.SIGKILL)
            b.proc.wait()
        if fault == "killed and restarted":
            hubs["hub-b"] = HubProcess(tmp_path / "hub-b.yaml")
        ns.finish(ns.jobs()[0])
        task, reported = ended(c, created)
        print(
            f"\ndrill task outcome: hub-b (its replica) {fault}; the task read from hub-c is {task['state']}, "
            f"reporting {reported}; Jobs in the cluster {ns.jobs()}"
        )
        assert task["state"] == "completed", yaml.safe_dump(task)
        assert reported == ns.jobs()
        assert any("recorded by that replica" in h["status"] for h in task["history"]), task["history"]
    finally:
        if agent is not None:
            agent.stop()
        stop(hubs)
        ns.delete()
