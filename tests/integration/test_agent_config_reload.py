"""Service mode: the agent's accounts live in a ConfigMap, and the agent follows its changes without
a restart. The ConfigMap is mounted and changed here exactly as the kubelet does it (a `..data`
symlink swapped in one rename), and the hub is the judge of what a user sees."""

from __future__ import annotations

import signal

import yaml

from tests.helpers import AgentProcess, ConfigMapVolume, HubProcess, account_health, write_yaml


def agent_yaml(hub: HubProcess, accounts: list[dict], period: float = 0.2) -> str:
    return yaml.safe_dump(
        {
            "kubernetes": {"accounts": accounts},
            "server": {"port": 0},
            "clouddriver": {"grpc": hub.grpc_target, "insecure": True},
            "reload": {"periodSeconds": period},
        }
    )


def account(name: str, kubeconfig, kinds: list[str]) -> dict:
    return {"name": name, "kubeconfigFile": str(kubeconfig), "kinds": kinds}


def states(doc) -> dict[str, tuple[str, str]]:
    return {a["name"]: (a["state"], a["agentState"]) for a in doc}


def test_a_configmap_change_adds_changes_and_removes_accounts_and_a_broken_one_is_refused(kubesim, tmp_path):
    hub = HubProcess(
        write_yaml(
            tmp_path / "hub.yaml",
            {"server": {"grpcPort": 0, "httpPort": 0}, "database": {"url": f"sqlite:///{tmp_path}/hub.db"}},
        )
    )
    agent = None
    try:
        one = account("one", kubesim.admin(0), ["ConfigMap"])
        volume = ConfigMapVolume(tmp_path / "config", {"agent.yaml": agent_yaml(hub, [one])})
        agent = AgentProcess(volume.path("agent.yaml"), print_events=False)
        hub.wait_until("/api/v1/accounts", lambda d: states(d) == {"one": ("ACTIVE", "watching")}, what="one")
        since = account_health(agent.health(), "one")["since"]

        # Added: the new account's objects reach the hub; the running one is left alone.
        two = account("two", kubesim.admin(1), ["Namespace"])
        volume.update({"agent.yaml": agent_yaml(hub, [one, two])})
        hub.wait_until(
            "/api/v1/accounts",
            lambda d: states(d) == {"one": ("ACTIVE", "watching"), "two": ("ACTIVE", "watching")},
            what="two added",
        )
        assert any(o["metadata"]["name"] == "kube-system" for o in hub.objects("two", "?kind=Namespace"))
        assert account_health(agent.health(), "one")["since"] == since

        # A broken file is refused with its reason; everything keeps running.
        volume.update({"agent.yaml": agent_yaml(hub, [one, two]).replace("kinds:", "kindz:", 1)})
        doc = agent.wait_health(lambda d: "refused" in d["configuration"], what="the refusal")
        assert "kindz" in doc["configuration"]["refused"], doc["configuration"]
        assert {a["name"]: a["state"] for a in doc["accounts"]} == {"one": "watching", "two": "watching"}
        assert account_health(doc, "one")["since"] == since
        agent.wait_log(r"configuration .*agent\.yaml refused, the running accounts keep going: .*kindz", 5)

        # Removed and changed in one step: the hub lets `one` go; `two` starts over with its new kinds.
        two_wider = account("two", kubesim.admin(1), ["Namespace", "ConfigMap"])
        volume.update({"agent.yaml": agent_yaml(hub, [two_wider])})
        hub.wait_until(
            "/api/v1/accounts",
            lambda d: (
                states(d) == {"two": ("ACTIVE", "watching")}
                and sorted(next(a for a in d if a["name"] == "two")["kinds"]) == ["ConfigMap", "Namespace"]
            ),
            what="one removed and two widened",
        )
        assert hub.objects("two", "?kind=ConfigMap"), "two's ConfigMaps are cached"
        doc = agent.health()
        assert [a["name"] for a in doc["accounts"]] == ["two"]
        assert "refused" not in doc["configuration"] and doc["configuration"]["changesRefused"] == 1
        assert hub.get("/api/v1/accounts/one")[0] == 404
        hub.wait_log(r"account one: agent \S+ stopped following it; INACTIVE, its objects leave the cache", 10)
    finally:
        if agent is not None:
            agent.stop()
        hub.stop()


def test_sighup_reads_the_file_at_once_and_settings_read_at_start_are_reported(kubesim, tmp_path):
    hub = HubProcess(
        write_yaml(
            tmp_path / "hub.yaml",
            {"server": {"grpcPort": 0, "httpPort": 0}, "database": {"url": f"sqlite:///{tmp_path}/hub.db"}},
        )
    )
    agent = None
    try:
        one = account("one", kubesim.admin(0), ["ConfigMap"])
        path = tmp_path / "agent.yaml"
        path.write_text(agent_yaml(hub, [one], period=0))  # no polling: only SIGHUP reads it
        agent = AgentProcess(path, print_events=False)
        hub.wait_until("/api/v1/accounts", lambda d: states(d) == {"one": ("ACTIVE", "watching")}, what="one")

        two = account("two", kubesim.admin(1), ["Namespace"])
        changed = yaml.safe_load(agent_yaml(hub, [one, two], period=0))
        changed["tasks"] = {"totalBudget": 7}
        path.write_text(yaml.safe_dump(changed))
        agent.proc.send_signal(signal.SIGHUP)
        hub.wait_until("/api/v1/accounts", lambda d: "two" in states(d), what="two after SIGHUP")
        doc = agent.wait_health(lambda d: "restartNeeded" in d["configuration"], what="restart needed")
        assert doc["configuration"]["restartNeeded"] == ["tasks.totalBudget"]
        assert agent.proc.poll() is None
    finally:
        if agent is not None:
            agent.stop()
        hub.stop()
