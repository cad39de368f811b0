"""`encryptedFile:k8s!...` references read from a real Kubernetes API (kubesim), through the
hub's own credentials, as a hub configured with `kubernetes.kubeconfigFile` does."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client, config

from scaleagent.hub.accounts.errors import KubeconfigRefError
from scaleagent.hub.accounts.kubeconfig_refs import KubeconfigResolver


@pytest.fixture
def core(kubesim) -> Iterator[client.CoreV1Api]:
    api = config.new_client_from_config(config_file=str(kubesim.admin(0)))
    yield client.CoreV1Api(api)
    api.close()


@pytest.fixture
def namespace(core) -> Iterator[str]:
    name = f"refs-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


def put_secret(core: client.CoreV1Api, namespace: str, name: str, data: dict[str, bytes]) -> None:
    core.create_namespaced_secret(
        namespace,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name=name), data={k: base64.b64encode(v).decode() for k, v in data.items()}
        ),
    )


@pytest.fixture
async def resolver(kubesim) -> KubeconfigResolver:
    r = KubeconfigResolver(kubeconfig_file=kubesim.admin(0))
    yield r
    await r.close()


async def test_a_kubeconfig_in_a_secret_is_read_as_it_was_stored(kubesim, core, namespace, resolver):
    kubeconfig = kubesim.admin(1).read_bytes()  # the account's cluster: the second simulated one
    put_secret(core, namespace, "kubeconfig", {"config": kubeconfig, "other": b"x"})
    assert await resolver.resolve(f"encryptedFile:k8s!n:kubeconfig!k:config!ns:{namespace}") == kubeconfig


async def test_the_default_namespace_comes_from_the_hub_config(kubesim, core, namespace):
    put_secret(core, namespace, "kc", {"config": kubesim.admin(1).read_bytes()})
    r = KubeconfigResolver(kubeconfig_file=kubesim.admin(0), namespace=namespace)
    try:
        assert await r.resolve("encryptedFile:k8s!n:kc!k:config") == kubesim.admin(1).read_bytes()
    finally:
        await r.close()


async def test_missing_secret_and_missing_key_are_named(kubesim, core, namespace, resolver):
    put_secret(core, namespace, "kc", {"a": b"1", "b": b"2"})
    with pytest.raises(KubeconfigRefError) as caught:
        await resolver.resolve(f"encryptedFile:k8s!n:absent!k:config!ns:{namespace}")
    assert str(caught.value).startswith(f"secret {namespace}/absent: not found in the hub's cluster (https://")
    with pytest.raises(KubeconfigRefError) as caught:
        await resolver.resolve(f"encryptedFile:k8s!n:kc!k:config!ns:{namespace}")
    assert str(caught.value) == f"secret {namespace}/kc: has no key 'config' (its keys: 'a', 'b')"


async def test_a_value_that_is_not_a_kubeconfig_fails_without_showing_it(core, namespace, resolver):
    put_secret(core, namespace, "kc", {"config": b"token: hunter2-very-secret\n"})
    with pytest.raises(KubeconfigRefError) as caught:
        await resolver.resolve(f"encryptedFile:k8s!n:kc!k:config!ns:{namespace}")
    assert str(caught.value) == (
        f"kubeconfig in secret {namespace}/kc key 'config': not a kubeconfig: it has no 'clusters' list"
    )


async def test_a_hub_without_the_right_to_read_secrets_is_told_which_right(kubesim):
    r = KubeconfigResolver(kubeconfig_file=kubesim.limited(0))
    try:
        with pytest.raises(KubeconfigRefError) as caught:
            await r.resolve("encryptedFile:k8s!n:kc!k:config!ns:team-a")
    finally:
        await r.close()
    assert "secret team-a/kc: the hub may not read it (403 Forbidden)" in str(caught.value)
    assert "need 'get' on secrets in namespace team-a" in str(caught.value)


async def test_an_unreachable_cluster_is_named(tmp_path, kubesim):
    broken = tmp_path / "kubeconfig"
    text = kubesim.admin(0).read_text()
    server = kubesim.urls[0]
    broken.write_text(text.replace(server, "https://127.0.0.1:1"))
    r = KubeconfigResolver(kubeconfig_file=broken)
    try:
        with pytest.raises(KubeconfigRefError, match=r"secret ns1/kc: cannot reach the hub's cluster: cannot connect"):
            await r.resolve("encryptedFile:k8s!n:kc!k:config!ns:ns1")
    finally:
        await r.close()
