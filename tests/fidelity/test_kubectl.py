"""kubectl, unchanged, against kubesim (and a real cluster with e2e)."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.helpers import read_until


def kubectl(kubectl_bin: str, kubeconfig: Path, *args: str, check: bool = True, input: str | None = None):
    result = subprocess.run(
        [kubectl_bin, "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True, timeout=120, input=input
    )
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr}")
    return result


@pytest.fixture
def ns(target, kubectl_bin):
    name = f"kc-{uuid.uuid4().hex[:8]}"
    kubectl(kubectl_bin, target.kubeconfig, "create", "namespace", name)
    yield name
    kubectl(kubectl_bin, target.kubeconfig, "delete", "namespace", name, "--wait=false", check=False)


MANIFEST = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: web-config
  namespace: {ns}
data:
  greeting: {greeting}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: {ns}
  labels: {{app: web}}
spec:
  replicas: {replicas}
  selector:
    matchLabels: {{app: web}}
  template:
    metadata:
      labels: {{app: web}}
    spec:
      containers:
      - name: web
        image: nginx:1.25
        ports:
        - containerPort: 80
        env:
        - name: GREETING
          value: {greeting}
"""


def test_get_namespaces(target, kubectl_bin):
    out = kubectl(kubectl_bin, target.kubeconfig, "get", "namespaces").stdout
    header, *rows = out.splitlines()
    assert header.split()[:2] == ["NAME", "STATUS"]
    assert any(r.split()[:2] == ["default", "Active"] for r in rows)


def test_apply_creates_configures_and_is_idempotent(target, kubectl_bin, ns, tmp_path):
    f = tmp_path / "app.yaml"
    f.write_text(MANIFEST.format(ns=ns, greeting="hello", replicas=2))
    out = kubectl(kubectl_bin, target.kubeconfig, "apply", "-f", str(f)).stdout
    assert "configmap/web-config created" in out and "deployment.apps/web created" in out

    f.write_text(MANIFEST.format(ns=ns, greeting="bonjour", replicas=3))
    result = kubectl(kubectl_bin, target.kubeconfig, "apply", "-f", str(f))
    assert "configmap/web-config configured" in result.stdout and "deployment.apps/web configured" in result.stdout
    # kubectl computes the patch from the server's OpenAPI; a schema it cannot use shows as a warning.
    assert "warning" not in result.stderr.lower(), result.stderr
    out = kubectl(kubectl_bin, target.kubeconfig, "apply", "-f", str(f)).stdout
    assert "configmap/web-config unchanged" in out and "deployment.apps/web unchanged" in out

    dep = json.loads(kubectl(kubectl_bin, target.kubeconfig, "get", "deployment", "web", "-n", ns, "-o", "json").stdout)
    assert dep["spec"]["replicas"] == 3
    env = dep["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env == [{"name": "GREETING", "value": "bonjour"}]
    assert "kubectl.kubernetes.io/last-applied-configuration" in dep["metadata"]["annotations"]

    out = kubectl(kubectl_bin, target.kubeconfig, "delete", "-f", str(f)).stdout
    assert 'configmap "web-config" deleted' in out and 'deployment.apps "web" deleted' in out
    missing = kubectl(kubectl_bin, target.kubeconfig, "get", "deployment", "web", "-n", ns, check=False)
    assert missing.returncode != 0 and "NotFound" in missing.stderr


def server_minor(kubectl_bin: str, kubeconfig) -> int:
    version = json.loads(kubectl(kubectl_bin, kubeconfig, "get", "--raw", "/version").stdout)
    return int("".join(ch for ch in version["minor"] if ch.isdigit()) or 0)


def test_server_side_apply_and_scale(target, kubectl_bin, ns, tmp_path):
    f = tmp_path / "app.yaml"
    f.write_text(MANIFEST.format(ns=ns, greeting="hi", replicas=1))
    out = kubectl(kubectl_bin, target.kubeconfig, "apply", "--server-side", "-f", str(f)).stdout
    assert "serverside-applied" in out
    kubectl(kubectl_bin, target.kubeconfig, "scale", "deployment/web", "-n", ns, "--replicas=4")
    dep = json.loads(
        kubectl(kubectl_bin, target.kubeconfig, "get", "--raw", f"/apis/apps/v1/namespaces/{ns}/deployments/web").stdout
    )
    assert dep["spec"]["replicas"] == 4
    entries = {(m["manager"], m["operation"], m.get("subresource", "")) for m in dep["metadata"]["managedFields"]}
    assert ("kubectl", "Apply", "") in entries
    if server_minor(kubectl_bin, target.kubeconfig) < 22:
        return  # earlier servers did not record writes through /scale in managedFields, so nothing conflicts
    assert ("kubectl", "Update", "scale") in entries
    # kubectl scale changed a field the applier owns: re-applying the file conflicts until forced.
    again = kubectl(kubectl_bin, target.kubeconfig, "apply", "--server-side", "-f", str(f), check=False)
    assert again.returncode != 0 and "conflict" in again.stderr.lower()
    kubectl(kubectl_bin, target.kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", str(f))
    dep = json.loads(kubectl(kubectl_bin, target.kubeconfig, "get", "deploy", "web", "-n", ns, "-o", "json").stdout)
    assert dep["spec"]["replicas"] == 1


def test_server_dry_run_delete_keeps_the_object(target, kubectl_bin, ns):
    kubectl(kubectl_bin, target.kubeconfig, "create", "configmap", "kept", "-n", ns, "--from-literal=a=1")
    kubectl(kubectl_bin, target.kubeconfig, "delete", "configmap", "kept", "-n", ns, "--dry-run=server")
    kubectl(kubectl_bin, target.kubeconfig, "get", "configmap", "kept", "-n", ns)


def test_get_watch_prints_changes(target, kubectl_bin, ns):
    proc = subprocess.Popen(
        [
            kubectl_bin,
            "--kubeconfig",
            str(target.kubeconfig),
            "get",
            "configmaps",
            "-n",
            ns,
            "-w",
            "--output-watch-events",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        # kube-root-ca.crt exists in real namespaces; kubesim namespaces start empty, so wait for our own.
        kubectl(kubectl_bin, target.kubeconfig, "create", "configmap", "watched", "-n", ns, "--from-literal=a=1")
        read_until(proc, r"ADDED\s+watched", timeout=60)
        kubectl(kubectl_bin, target.kubeconfig, "patch", "configmap", "watched", "-n", ns, "-p", '{"data":{"a":"2"}}')
        read_until(proc, r"MODIFIED\s+watched", timeout=60)
        kubectl(kubectl_bin, target.kubeconfig, "delete", "configmap", "watched", "-n", ns)
        read_until(proc, r"DELETED\s+watched", timeout=60)
    finally:
        proc.kill()
        proc.wait()


def test_auth_can_i_for_both_identities(target, kubectl_bin):
    admin = kubectl(kubectl_bin, target.kubeconfig, "auth", "can-i", "list", "secrets", "--all-namespaces")
    assert admin.stdout.strip() == "yes"
    if target.limited_kubeconfig is None:
        pytest.skip("no limited identity configured for this target")
    limited = kubectl(
        kubectl_bin, target.limited_kubeconfig, "auth", "can-i", "list", "secrets", "--all-namespaces", check=False
    )
    assert limited.returncode == 1 and limited.stdout.strip() == "no"
    if target.is_kubesim:
        yes = kubectl(
            kubectl_bin, target.limited_kubeconfig, "auth", "can-i", "create", "deployments.apps", "-n", "team-a"
        )
        assert yes.stdout.strip() == "yes"
        listing = kubectl(kubectl_bin, target.limited_kubeconfig, "auth", "can-i", "--list", "-n", "team-a").stdout
        assert "deployments.apps" in listing


def test_api_resources_lists_builtin_groups(target, kubectl_bin):
    out = kubectl(kubectl_bin, target.kubeconfig, "api-resources").stdout
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    for name, version in [
        ("pods", "v1"),
        ("deployments", "apps/v1"),
        ("jobs", "batch/v1"),
        ("ingresses", "networking.k8s.io/v1"),
        ("roles", "rbac.authorization.k8s.io/v1"),
        ("customresourcedefinitions", "apiextensions.k8s.io/v1"),
    ]:
        assert name in rows and version in rows[name], f"{name} {version} missing from api-resources"
    assert "deploy" in rows["deployments"].split()
