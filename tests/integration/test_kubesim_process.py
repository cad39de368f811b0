"""kubesim as a user runs it: several clusters, their own CAs, churn, 410 after compaction, clean stop."""

from __future__ import annotations

import subprocess

import pytest
import yaml
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from tests.helpers import CLI, start_kubesim


def test_clusters_have_their_own_ports_and_cas(tmp_path):
    sim = start_kubesim(tmp_path, "--clusters", "3")
    try:
        configs = [yaml.safe_load(sim.admin(i).read_text()) for i in range(3)]
        servers = {c["clusters"][0]["cluster"]["server"] for c in configs}
        cas = {c["clusters"][0]["cluster"]["certificate-authority-data"] for c in configs}
        assert len(servers) == 3 and len(cas) == 3
        assert all(s.startswith("https://127.0.0.1:") for s in servers)
        for i in range(3):
            assert (sim.kubeconfig_dir / f"kubesim-{i}-limited.yaml").stat().st_mode & 0o077 == 0
            api = config.new_client_from_config(config_file=str(sim.admin(i)))
            assert "default" in {n.metadata.name for n in client.CoreV1Api(api).list_namespace().items}
            api.close()
    finally:
        assert sim.stop() == 0


def test_churn_produces_a_steady_stream_of_changes(tmp_path):
    sim = start_kubesim(tmp_path, "--churn", "200")
    try:
        api = config.new_client_from_config(config_file=str(sim.admin()))
        core = client.CoreV1Api(api)
        types: set[str] = set()
        w = watch.Watch()
        for event in w.stream(core.list_namespaced_config_map, "churn", timeout_seconds=60):
            types.add(event["type"])
            if {"ADDED", "MODIFIED", "DELETED"} <= types:
                w.stop()
        assert {"ADDED", "MODIFIED", "DELETED"} <= types
        api.close()
    finally:
        sim.stop()


def test_watch_from_a_compacted_version_gets_410_gone(tmp_path):
    sim = start_kubesim(tmp_path, "--watch-history", "5")
    try:
        api = config.new_client_from_config(config_file=str(sim.admin()))
        core = client.CoreV1Api(api)
        old = core.list_namespaced_config_map("default").metadata.resource_version
        for i in range(10):
            core.create_namespaced_config_map("default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name=f"c{i}")))
        with pytest.raises(ApiException) as err:
            for _ in watch.Watch().stream(
                core.list_namespaced_config_map, "default", resource_version=old, timeout_seconds=30
            ):
                pass
        assert err.value.status == 410
        # A paginated list whose snapshot was compacted away is 410 too.
        first = core.list_namespaced_config_map("default", limit=2)
        for i in range(10):
            core.create_namespaced_config_map("default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name=f"d{i}")))
        with pytest.raises(ApiException) as err:
            core.list_namespaced_config_map("default", limit=2, _continue=first.metadata._continue)
        assert err.value.status == 410
        api.close()
    finally:
        sim.stop()


def test_bad_arguments_are_refused_clearly(tmp_path):
    result = subprocess.run(
        [*CLI, "kubesim", "--clusters", "0", "--kubeconfig-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "--clusters" in result.stderr and "at least 1" in result.stderr
