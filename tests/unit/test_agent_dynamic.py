"""Dynamic accounts on the agent: what the hub sends is validated like the configuration file, and
its kubeconfig stays in memory (no file, not even the official loader's temporary ones)."""

from __future__ import annotations

import base64

import pytest
import trustme
import yaml
from kubernetes.config import kube_config

from scaleagent.agent.config import ConfigError, DynamicAccountConfig, dynamic_account
from scaleagent.kube.credentials import load_credentials
from scaleagent.kube.errors import CredentialsError

TOKEN = "s3cr3t-token-value"


def kubeconfig(**user: str) -> dict:
    ca = trustme.CA()
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "main",
        "contexts": [
            {"name": "main", "context": {"cluster": "k", "user": "u"}},
            {"name": "other", "context": {"cluster": "k2", "user": "u"}},
        ],
        "clusters": [
            {
                "name": "k",
                "cluster": {
                    "server": "https://127.0.0.1:6443",
                    "certificate-authority-data": base64.b64encode(ca.cert_pem.bytes()).decode(),
                },
            },
            {"name": "k2", "cluster": {"server": "https://127.0.0.2:6443", "insecure-skip-tls-verify": True}},
        ],
        "users": [{"name": "u", "user": user or {"token": TOKEN}}],
    }


def b64(doc: dict | bytes) -> str:
    raw = doc if isinstance(doc, bytes) else yaml.safe_dump(doc).encode()
    return base64.b64encode(raw).decode()


def refusal(*args) -> str:
    with pytest.raises(ConfigError) as e:
        dynamic_account(*args)
    return str(e.value)


def test_a_dynamic_account_keeps_its_kubeconfig_out_of_repr_and_dumps():
    account = dynamic_account("dyn", b64(kubeconfig()), "other", {"namespaces": ["a"], "permissions": {"READ": []}})
    assert isinstance(account, DynamicAccountConfig) and account.dynamic
    assert account.context == "other" and account.namespaces == ("a",) and not account.service_account
    assert account.kubeconfig["current-context"] == "main"
    assert TOKEN not in repr(account) and TOKEN not in str(account.model_dump())


def test_an_empty_kubeconfig_means_the_agents_own_service_account():
    account = dynamic_account("sa", "", "", {})
    assert account.service_account and account.kubeconfig is None
    assert refusal("sa", "", "ctx", {}) == (
        "account 'sa': context: only applies with a kubeconfig; an empty "
        "kubeconfig means this agent's own service account"
    )


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("not base64!", "the kubeconfig is not valid base64"),
        (b64(b"\xff\xfe"), "the kubeconfig is not UTF-8 text (invalid byte at offset 0)"),
        (b64(b"- a list"), "the kubeconfig: the top level must be a mapping, not a list"),
        (b64(b"users: [\n"), "the kubeconfig line 2, column 1: YAML syntax error"),
        # Read by libyaml's parser (see configfile._FastLoader) with the configuration files' rules.
        (b64(b"users: []\nusers: []\n"), "the kubeconfig line 2, column 1: duplicate key 'users' (first at line 1)"),
        (b64(b"users: " + b"[" * 5000 + b"]" * 5000), "the kubeconfig: the document is nested too deeply"),
        (b64(b"a: &x [*x, *x]\n"), "the kubeconfig: the document is nested too deeply"),
        (b64(b"{}"), "the kubeconfig is empty"),
        (b64({"clusters": []}), "Invalid kube-config file. Expected key current-context"),
    ],
)
def test_a_kubeconfig_that_cannot_be_read_is_refused_without_showing_it(content, reason):
    message = refusal("k", content, "", {})
    assert message.startswith("account 'k': ") and reason in message


def test_a_token_in_a_broken_kubeconfig_is_not_echoed():
    broken = yaml.safe_dump(kubeconfig()).replace("current-context: main", f"current-context: [{TOKEN}").encode()
    assert TOKEN not in refusal("k", b64(broken), "", {})


@pytest.mark.parametrize(
    ("properties", "reason"),
    [
        ({"kubeConfigFile": "/etc/k.yaml"}, "properties.kubeConfigFile: not a property"),
        ({"serviceAccount": True}, "properties.serviceAccount: not a property"),
        ({"name": "other"}, "properties.name: not a property"),
        ({"context": "a"}, "properties.context: 'a' differs from the account's context 'main'"),
        ({"kinds": ["Pod"], "omitKinds": ["Secret"]}, "omitKinds: cannot be combined with kinds"),
        ({"customResourceDefinitions": ["Widget"]}, "customResourceDefinitions[0]: 'Widget' has no API group"),
        ({"namespaces": ["Not_A_Namespace"]}, "namespaces[0]: 'Not_A_Namespace' is not a namespace name"),
    ],
)
def test_properties_are_validated_as_the_configuration_files_accounts_are(properties, reason):
    assert reason in refusal("p", b64(kubeconfig()), "main", properties)


def test_a_context_given_in_properties_is_the_accounts_context():
    assert dynamic_account("c", b64(kubeconfig()), "", {"context": "other"}).context == "other"


async def test_credentials_load_from_content_without_any_file():
    ca = trustme.CA()
    cert = ca.issue_cert("agent")
    doc = kubeconfig(
        **{
            "client-certificate-data": base64.b64encode(cert.cert_chain_pems[0].bytes()).decode(),
            "client-key-data": base64.b64encode(cert.private_key_pem.bytes()).decode(),
        }
    )
    before = dict(kube_config._temp_files)
    creds = await load_credentials(kubeconfig_content=doc)
    assert kube_config._temp_files == before, "the official loader wrote certificate data to temporary files"
    assert creds.server == "https://127.0.0.1:6443" and creds.source == "kubeconfig sent by the hub"
    assert len(creds.ssl_context.get_ca_certs()) == 1
    assert "client-key-data" in doc["users"][0]["user"], "the caller's document is left as it was"

    other = await load_credentials(kubeconfig_content=kubeconfig(), context="other")
    assert other.server == "https://127.0.0.2:6443" and await other.authorization() == f"Bearer {TOKEN}"
    with pytest.raises(CredentialsError, match=r"kubeconfig sent by the hub \(context nope\): .*nope"):
        await load_credentials(kubeconfig_content=kubeconfig(), context="nope")


async def test_a_kubeconfig_file_with_inline_certificates_writes_no_temporary_file(tmp_path):
    path = tmp_path / "kubeconfig.yaml"
    path.write_text(yaml.safe_dump(kubeconfig()))
    before = dict(kube_config._temp_files)
    creds = await load_credentials(kubeconfig=path)
    assert kube_config._temp_files == before and len(creds.ssl_context.get_ca_certs()) == 1


@pytest.mark.parametrize(
    "value", ["2001-13-45", "!!int abc", "!!timestamp nope", "9" * 5000], ids=["date", "int", "timestamp", "digits"]
)
def test_a_value_yaml_cannot_build_is_refused_without_showing_it(value):
    # A date that is no date, an explicit tag on the wrong scalar: PyYAML's constructor raises
    # ValueError and the like, which must not end the hub link (the reason names no value).
    doc = yaml.safe_dump(kubeconfig()) + f"extra: {value}\n"
    message = refusal("k", b64(doc.encode()), "", {})
    assert "cannot be read as the type YAML gives it" in message and value not in message
