"""The Kustomize manifests of deploy/, rendered with `kubectl kustomize` and read with the product's
own command-line parser and configuration loaders: what they ship is what the code accepts.

Every kustomization under deploy/ is found, not listed, so a new overlay is held to the same
checks. The real control plane applies them in tests/e2e/test_deploy_manifests.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from scaleagent.agent.config import load_config
from scaleagent.cli import build_parser
from scaleagent.hub.config import load_hub_config
from tests.deploy_helpers import (
    AGENT_TOKEN,
    DEPLOY,
    LABELS,
    REPLICAS_TOKEN,
    SELECTOR_LABELS,
    Pod,
    cli_arguments,
    find,
    kustomizations,
    needed_secrets,
    only,
    render,
    user_secrets,
)

pytestmark = pytest.mark.kubectl

KUSTOMIZATIONS = kustomizations()
IDS = [str(p.relative_to(DEPLOY)) for p in KUSTOMIZATIONS]
WITH_DEPLOYMENT = [p for p in KUSTOMIZATIONS if p.name != "base" or p.parent.name == "hub"]


@pytest.fixture(scope="module", autouse=True)
def _kubectl() -> None:
    if shutil.which("kubectl") is None:
        pytest.fail("kubectl is not installed: scripts/test installs it (Debian package kubernetes-client)")


_RENDERED: dict[Path, list[dict]] = {}


def rendered(path: Path) -> list[dict]:
    if path not in _RENDERED:
        _RENDERED[path] = render(path)
    return _RENDERED[path]


def pod_of(path: Path, tmp: Path) -> Pod:
    objects = rendered(path)
    deployment = only(objects, "Deployment")
    return Pod(objects, deployment, tmp / "root", secrets=user_secrets(objects, deployment, tmp / "probe"))


@pytest.mark.parametrize("path", KUSTOMIZATIONS, ids=IDS)
def test_every_kustomization_renders_with_the_common_labels(path: Path):
    objects = rendered(path)
    assert objects, f"{path} renders nothing"
    for obj in objects:
        labels = obj["metadata"].get("labels") or {}
        missing = [label for label in LABELS if label not in labels]
        assert not missing, f"{obj['kind']} {obj['metadata']['name']} lacks {missing}"
    for deployment in find(objects, "Deployment"):
        selector = deployment["spec"]["selector"]["matchLabels"]
        assert set(SELECTOR_LABELS) <= set(selector)
        assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()


@pytest.mark.parametrize("path", KUSTOMIZATIONS, ids=IDS)
def test_no_kustomization_ships_a_secret(path: Path):
    # Secrets are the user's (secret.example.yaml shows each): a known value must never deploy.
    assert find(rendered(path), "Secret") == []


def test_every_secret_the_manifests_need_is_documented_in_an_example():
    examples: set[str] = set()
    for example in DEPLOY.rglob("*.example.yaml"):
        examples |= {d["metadata"]["name"] for d in yaml.safe_load_all(example.read_text()) if d}
    for path in KUSTOMIZATIONS:
        for name in needed_secrets(rendered(path)):
            assert name in examples, f"{path}: Secret {name} is needed but no *.example.yaml shows it"
    for kustomization in DEPLOY.rglob("kustomization.yaml"):
        # An example is never part of what gets applied.
        assert ".example.yaml" not in "\n".join(
            line for line in kustomization.read_text().splitlines() if not line.lstrip().startswith("#")
        ), kustomization


@pytest.mark.parametrize("path", KUSTOMIZATIONS, ids=IDS)
def test_every_container_runs_locked_down_with_probes_on_its_own_port(path: Path):
    for deployment in find(rendered(path), "Deployment"):
        spec = deployment["spec"]["template"]["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] == 65532
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        # Service links would add NAME_SERVICE_HOST-style variables; the product refuses
        # SCALE_AGENT_* variables it does not know, and a Service named scale-agent-... makes some.
        assert spec["enableServiceLinks"] is False
        for container in spec["containers"]:
            sc = container["securityContext"]
            assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 65532
            assert sc["readOnlyRootFilesystem"] is True
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"]["drop"] == ["ALL"]
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
            assert container["resources"]["requests"]["cpu"] and container["resources"]["requests"]["memory"]
            assert container["resources"]["limits"]["memory"]
            ports = {p["name"]: p["containerPort"] for p in container["ports"]}
            for probe in ("livenessProbe", "readinessProbe"):
                get = container[probe]["httpGet"]
                assert get["port"] in ports, f"{probe} probes a port the container does not declare"


@pytest.mark.parametrize("path", WITH_DEPLOYMENT, ids=[str(p.relative_to(DEPLOY)) for p in WITH_DEPLOYMENT])
def test_the_container_command_and_configuration_are_the_products(path: Path, tmp_path: Path):
    pod = pod_of(path, tmp_path)
    args = build_parser().parse_args(cli_arguments(pod.container))
    config_file = pod.config_file()
    ports = {p["name"]: p["containerPort"] for p in pod.container["ports"]}
    probes = {pod.container[p]["httpGet"]["path"] for p in ("livenessProbe", "readinessProbe")}
    if args.command == "agent":
        config = load_config(config_file, environ=pod.rooted_env())
        assert config.server.host == "0.0.0.0"  # the kubelet probes it from outside the pod
        assert config.server.port == ports["health"]
        assert probes == {"/health", "/ready"}
        assert config.clouddriver.auth.token.get_secret_value() == AGENT_TOKEN
    else:
        assert args.command == "hub"
        hub = load_hub_config(config_file, environ=pod.rooted_env())
        assert hub.server.grpc_port == ports["grpc"] and hub.server.http_port == ports["http"]
        assert probes == {"/health", "/ready"}
        assert hub.tls.enabled and hub.replicas.cluster == "kubernetes"
        assert hub.database.url.startswith("postgresql")
        assert hub.replicas.token.get_secret_value() == REPLICAS_TOKEN
        assert hub.auth.token.get_secret_value() == AGENT_TOKEN
        assert hub.dynamic_accounts.encryption_key.get_secret_value()


def agent_overlay(name: str) -> Path:
    return DEPLOY / "agent" / "overlays" / name


def test_agent_mode_uses_the_pods_service_account_bound_to_the_cluster_role(tmp_path: Path):
    path = agent_overlay("agent-mode")
    objects = rendered(path)
    pod = pod_of(path, tmp_path)
    config = load_config(pod.config_file(), environ=pod.rooted_env())
    assert [a.service_account for a in config.kubernetes.accounts] == [True]
    account = only(objects, "ServiceAccount")["metadata"]["name"]
    assert pod.pod_spec["serviceAccountName"] == account and pod.pod_spec["automountServiceAccountToken"] is True
    binding = only(objects, "ClusterRoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": pod.namespace}]
    assert binding["roleRef"]["name"] == only(objects, "ClusterRole")["metadata"]["name"]


def rules(role: dict) -> set[tuple[str, str, str]]:
    return {
        (g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]
    }


def test_the_namespace_variant_has_the_cluster_roles_rules_in_a_role_for_its_own_namespace(tmp_path: Path):
    cluster_role = only(rendered(agent_overlay("agent-mode")), "ClusterRole")
    path = agent_overlay("agent-mode-namespace")
    objects = rendered(path)
    assert find(objects, "ClusterRole") == [] and find(objects, "ClusterRoleBinding") == []
    # The same rules, but for namespaces, which are cluster-scoped: a Role cannot grant them.
    cluster_scoped = {"namespaces"}
    assert rules(only(objects, "Role")) == {r for r in rules(cluster_role) if r[1] not in cluster_scoped}
    pod = pod_of(path, tmp_path)
    config = load_config(pod.config_file(), environ=pod.rooted_env())
    (account,) = config.kubernetes.accounts
    assert account.service_account and account.only_namespaced_resources
    # No namespace written in the file: the agent follows its service account's own namespace.
    assert not account.namespaces
    binding = only(objects, "RoleBinding")
    assert binding["subjects"][0]["name"] == pod.pod_spec["serviceAccountName"]
    assert binding["metadata"]["namespace"] == pod.namespace


def test_the_cluster_roles_read_every_kind_and_can_deploy():
    granted = rules(only(rendered(agent_overlay("agent-mode")), "ClusterRole"))
    assert {("*", "*", "list"), ("*", "*", "watch")} <= granted
    # What the seeds' Kubernetes Permissions example grants for deploying Pods, and what
    # operations use: server-side apply (patch), scale (the scale subresource), pod logs.
    for verb in ("get", "create", "update", "patch", "delete"):
        assert ("", "pods", verb) in granted and ("apps", "deployments", verb) in granted
    assert ("apps", "deployments/scale", "patch") in granted and ("", "pods/log", "get") in granted


@pytest.mark.parametrize("mode", ["infrastructure-mode", "service-mode"])
def test_kubeconfig_modes_read_their_accounts_from_mounted_secret_files(mode: str, tmp_path: Path):
    path = agent_overlay(mode)
    objects = rendered(path)
    pod = pod_of(path, tmp_path)
    assert pod.pod_spec["automountServiceAccountToken"] is False  # no rights in its own cluster
    assert find(objects, "ServiceAccount") == [] and not any(find(objects, k) for k in ("Role", "ClusterRole"))
    config = load_config(pod.config_file(), environ=pod.rooted_env())
    assert config.kubernetes.accounts and all(a.kubeconfig_file for a in config.kubernetes.accounts)
    for account in config.kubernetes.accounts:
        assert account.kubeconfig_file is not None and account.kubeconfig_file.is_file(), (
            f"{account.name}: {account.kubeconfig_file} is not a file of the mounted Secret"
        )


def test_service_mode_keeps_its_configmap_name_so_edits_reach_the_running_agent():
    objects = rendered(agent_overlay("service-mode"))
    config_map = only(objects, "ConfigMap")
    assert config_map["metadata"]["name"] == "scale-agent-config"  # no hash suffix: edited in place
    spec = only(objects, "Deployment")["spec"]["template"]["spec"]
    volume = next(v for v in spec["volumes"] if v.get("configMap", {}).get("name") == "scale-agent-config")
    mount = next(m for c in spec["containers"] for m in c["volumeMounts"] if m["name"] == volume["name"])
    assert "subPath" not in mount, "a subPath mount never sees the kubelet's updates"


def test_the_hubs_services_rbac_and_budget_fit_its_configuration(tmp_path: Path):
    path = DEPLOY / "hub" / "base"
    objects = rendered(path)
    pod = pod_of(path, tmp_path)
    hub = load_hub_config(pod.config_file(), environ=pod.rooted_env())
    deployment = only(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    ports = {p["name"]: p["containerPort"] for p in pod.container["ports"]}
    prefix, port_name = hub.replicas.kubernetes.clouddriver_service_name_prefix, hub.replicas.kubernetes.http_port_name
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    services = {s["metadata"]["name"]: s for s in find(objects, "Service")}
    for service in services.values():
        assert service["spec"]["selector"].items() <= pod_labels.items()
    # The Service the replicas find each other by: its name starts with the prefix, and it has
    # the HTTP API's port under the configured name (the seeds: spin-clouddriver, port http).
    http = services["spin-clouddriver"]
    assert http["metadata"]["name"].startswith(prefix)
    (port,) = [p for p in http["spec"]["ports"] if p["name"] == port_name]
    assert ports[port["targetPort"]] == hub.server.http_port
    (grpc,) = services["spin-clouddriver-grpc"]["spec"]["ports"]
    assert grpc["name"] == "grpc" and ports[grpc["targetPort"]] == hub.server.grpc_port
    role = only(objects, "Role")
    assert {("", "endpoints", v) for v in ("get", "list", "watch")} <= rules(role)
    binding = only(objects, "RoleBinding")
    assert binding["subjects"][0]["name"] == pod.pod_spec["serviceAccountName"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    if hub.auth.token_review.enabled:
        delegator = only(objects, "ClusterRoleBinding")
        assert delegator["roleRef"]["name"] == "system:auth-delegator"
        assert delegator["subjects"][0]["name"] == pod.pod_spec["serviceAccountName"]
    budget = only(objects, "PodDisruptionBudget")
    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
