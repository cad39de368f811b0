"""Parsing `kubeconfigFile` references and checking what they point at, without a cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from scaleagent.hub.accounts.errors import KubeconfigRefError
from scaleagent.hub.accounts.kubeconfig_refs import (
    FileRef,
    KubeconfigResolver,
    SecretRef,
    check_kubeconfig,
    parse_reference,
)

GOOD = b"""apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: 'https://127.0.0.1:6443'}}]
contexts: [{name: ctx, context: {cluster: c, user: u}}]
users: [{name: u, user: {token: s3cr3t-t0ken}}]
current-context: ctx
"""


def test_the_seeds_reference():
    assert parse_reference("encryptedFile:k8s!n:kubeconfig!k:config!ns:spinnaker") == SecretRef(
        "kubeconfig", "config", "spinnaker"
    )


@pytest.mark.parametrize(
    ("reference", "expected"),
    [
        ("encryptedFile:k8s!ns:spinnaker!k:config!n:kubeconfig", SecretRef("kubeconfig", "config", "spinnaker")),
        ("encryptedFile:k8s!n:kc!k:kube.config", SecretRef("kc", "kube.config", None)),
        ("encrypted:k8s!n:kc!k:config", SecretRef("kc", "config", None)),
        ("/etc/kube/prod.yml", FileRef(Path("/etc/kube/prod.yml"))),
        ("relative/prod.yml", FileRef(Path("relative/prod.yml"))),
    ],
)
def test_forms(reference, expected):
    assert parse_reference(reference) == expected


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        ("", "the kubeconfig reference is empty"),
        (
            "encryptedFile:s3!b:bucket!f:file",
            "the secret engine 's3' is not supported; the hub reads Kubernetes Secrets",
        ),
        ("encryptedFile:k8s!n:kc", "the key is missing (k:<key>)"),
        ("encryptedFile:k8s!k:config", "the name is missing (n:<name>)"),
        ("encryptedFile:k8s!n:kc!k:config!n:other", "n: is given twice"),
        ("encryptedFile:k8s!n:kc!k:", "k: has no value"),
        ("encryptedFile:k8s!n:kc!k:config!namespace:x", "'namespace:x' is not a parameter"),
        ("encryptedFile:k8s!n:Bad_Name!k:config", "'Bad_Name' is not a Secret name"),
        ("encryptedFile:k8s!n:kc!k:a/b", "'a/b' is not a Secret key"),
        ("encryptedFile:k8s!n:kc!k:config!ns:Spin", "'Spin' is not a namespace name"),
    ],
)
def test_malformed_references_say_what_is_wrong(reference, message):
    with pytest.raises(KubeconfigRefError) as caught:
        parse_reference(reference)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            b"clusters: [\n  - {name: c\n users: token-abc123",
            "origin: not a kubeconfig: invalid YAML (line 2, column 3)",
        ),
        (b"\xff\xfe", "origin: not a kubeconfig: not UTF-8 text (invalid byte at offset 0)"),
        (b"password: hunter2\n", "origin: not a kubeconfig: it has no 'clusters' list"),
    ],
)
def test_content_that_is_not_a_kubeconfig_is_refused_without_quoting_it(content, message):
    with pytest.raises(KubeconfigRefError) as caught:
        check_kubeconfig(content, "origin")
    assert str(caught.value) == message
    assert "hunter2" not in str(caught.value) and "abc123" not in str(caught.value)


def test_a_context_must_exist():
    check_kubeconfig(GOOD, "o", "ctx")
    with pytest.raises(KubeconfigRefError, match=r"o: the kubeconfig has no context 'other' \(it has 'ctx'\)"):
        check_kubeconfig(GOOD, "o", "other")


async def test_files(tmp_path):
    resolver = KubeconfigResolver()
    path = tmp_path / "prod.yml"
    path.write_bytes(GOOD)
    assert await resolver.resolve(str(path)) == GOOD
    with pytest.raises(
        KubeconfigRefError, match=rf"kubeconfig file {tmp_path / 'nope.yml'}: the file does not exist on the hub"
    ):
        await resolver.resolve(str(tmp_path / "nope.yml"))
    with pytest.raises(KubeconfigRefError, match=r"a directory, not a file"):
        await resolver.resolve(str(tmp_path))
    path.write_bytes(b"a" * (1024 * 1024 + 1))
    with pytest.raises(KubeconfigRefError, match=r"larger than a kubeconfig can be here"):
        await resolver.resolve(str(path))


async def test_without_kubernetes_access_a_secret_reference_says_how_to_give_it(tmp_path):
    resolver = KubeconfigResolver(service_account_dir=tmp_path)  # no token there: not in a cluster
    with pytest.raises(KubeconfigRefError) as caught:
        await resolver.resolve("encryptedFile:k8s!n:kc!k:config!ns:spinnaker")
    message = str(caught.value)
    assert message.startswith("the hub has no Kubernetes access to read Secrets: in-cluster service account")
    assert message.endswith("give the hub a kubeconfig in kubernetes.kubeconfigFile")


async def test_a_reference_without_namespace_needs_one_from_somewhere(tmp_path):
    resolver = KubeconfigResolver(kubeconfig_file=tmp_path / "absent")
    with pytest.raises(KubeconfigRefError, match=r"no namespace: add '!ns:<namespace>' to the reference"):
        await resolver.resolve("encryptedFile:k8s!n:kc!k:config")
