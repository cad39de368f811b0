"""Account Management definitions (`/credentials` bodies) as the hub checks them, and the
configuration of interception and the namePatterns scan. The requests themselves, on real
databases, are in tests/integration/test_hub_credentials.py."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from scaleagent.hub.accounts.credentials import parse_definition, summary_view
from scaleagent.hub.accounts.errors import InvalidRequest
from scaleagent.hub.config import ConfigError, load_hub_config
from scaleagent.hub.store import CredentialsRow

REF = "encryptedFile:k8s!n:kubeconfig!k:config!ns:spinnaker"

# A definition as Clouddriver itself serialises one: every field, unset lists empty, unset strings null.
CLOUDDRIVER_SERIALISED = {
    "type": "kubernetes",
    "name": "prod-east",
    "environment": None,
    "accountType": None,
    "context": None,
    "oAuthServiceAccount": None,
    "oAuthScopes": None,
    "kubeconfigFile": REF,
    "kubeconfigContents": None,
    "kubectlExecutable": None,
    "kubectlRequestTimeoutSeconds": None,
    "serviceAccount": False,
    "namespaces": ["web", "api"],
    "omitNamespaces": [],
    "cacheThreads": 1,
    "requiredGroupMembership": [],
    "permissions": {"READ": ["dev"], "WRITE": ["ops"]},
    "namingStrategy": "kubernetesAnnotations",
    "debug": False,
    "metrics": True,
    "checkPermissionsOnStartup": True,
    "customResources": [
        {
            "kubernetesKind": "Widget.example.com",
            "spinnakerKind": "unclassified",
            "deployPriority": "100",
            "versioned": False,
            "namespaced": True,
        }
    ],
    "cachingPolicies": [],
    "kinds": [],
    "omitKinds": ["Secret"],
    "onlySpinnakerManaged": True,
    "cacheIntervalSeconds": None,
    "cacheAllApplicationRelationships": False,
    "rawResourcesEndpointConfig": {"kindExpressions": [], "omitKindExpressions": []},
}


def test_a_clouddriver_definition_maps_onto_a_dynamic_account() -> None:
    definition = parse_definition(CLOUDDRIVER_SERIALISED)
    assert (definition.name, definition.type) == ("prod-east", "kubernetes")
    assert definition.body == CLOUDDRIVER_SERIALISED  # stored as given
    assert definition.account == {
        "name": "prod-east",
        "kubeconfigFile": REF,
        "namespaces": ["web", "api"],
        "omitKinds": ["Secret"],
        "customResourceDefinitions": ["Widget.example.com"],
    }
    account = definition.account_in()
    assert (account.name, account.kubeconfigFile, account.namespaces, account.context) == (
        "prod-east",
        REF,
        ["web", "api"],
        None,
    )


def test_the_scale_agent_settings_are_accepted_too() -> None:
    definition = parse_definition(
        {
            "type": "kubernetes",
            "name": "z",
            "zoneId": "eu",
            "onlyNamespacedResources": True,
            "customResourceDefinitions": ["Widget.example.com"],
            "customResources": [{"kubernetesKind": "Widget.example.com"}, {"kubernetesKind": "Gadget.example.com"}],
        }
    )
    assert definition.account == {
        "name": "z",
        "zoneId": "eu",
        "onlyNamespacedResources": True,
        "customResourceDefinitions": ["Widget.example.com", "Gadget.example.com"],
    }


def test_a_put_clears_what_it_leaves_out_but_the_zone() -> None:
    change = parse_definition({"type": "kubernetes", "name": "p", "namespaces": ["web"]}).account_change(migrate=False)
    given = change.given()
    assert given["namespaces"] == ["web"] and given["kubeconfigFile"] is None and given["kinds"] is None
    assert "zoneId" not in given and change.state is None
    assert parse_definition({"type": "kubernetes", "name": "p"}).account_change(migrate=True).state == "ACTIVE"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"type": "aws", "name": "a"},
            "account 'a': type: 'aws' accounts are not accepted here: the hub manages 'kubernetes' accounts only",
        ),
        ({"name": "a"}, "account 'a': type: required: the account's type, \"kubernetes\""),
        ({"type": 7, "name": "a"}, "account 'a': type: expected a string, got a number (7)"),
        (
            [{"type": "kubernetes", "name": "a"}],
            'the body must be a JSON object (one account definition with its "type"), got a list',
        ),
        ({"type": "kubernetes"}, "the account: name: required"),
        (
            {"type": "kubernetes", "name": "a", "namespace": ["web"]},
            "account 'a': namespace: unknown field (did you mean 'namespaces'?)",
        ),
        (
            {"type": "kubernetes", "name": "a", "cacheThreads": "4"},
            "account 'a': cacheThreads: expected an integer, got a string ('4')",
        ),
        (
            {"type": "kubernetes", "name": "a", "cacheThreads": 0},
            "account 'a': cacheThreads: expected a whole number from 1 to 2147483647, got a number (0)",
        ),
        (
            {"type": "kubernetes", "name": "a", "cacheThreads": 2**31},  # Clouddriver's int would refuse it
            "account 'a': cacheThreads: expected a whole number from 1 to 2147483647, got a number (2147483648)",
        ),
        (
            {"type": "kubernetes", "name": "a", "cacheIntervalSeconds": 2**64 - 1},  # and its Long this
            (
                "account 'a': cacheIntervalSeconds: expected a whole number from 0 to 9223372036854775807, got a number "
                "(18446744073709551615)"
            ),
        ),
        (
            {"type": "kubernetes", "name": "a", "onlySpinnakerManaged": "yes"},
            "account 'a': onlySpinnakerManaged: expected true or false, got a string ('yes')",
        ),
        (
            {"type": "kubernetes", "name": "a", "permissions": {"ADMIN": ["x"]}},
            "account 'a': permissions: 'ADMIN': not an authorization; use READ, WRITE, EXECUTE, CREATE",
        ),
        (
            {"type": "kubernetes", "name": "a", "namespaces": ["web"], "omitNamespaces": ["kube-system"]},
            "account 'a': namespaces and omitNamespaces cannot be combined: give one list or the other",
        ),
        (
            {"type": "kubernetes", "name": "a", "namespaces": ["Web"]},
            "account 'a': namespaces: 'Web' is not a namespace name",
        ),
        (
            {"type": "kubernetes", "name": "a", "kubeconfigFile": "encryptedFile:k8s!n:kc"},
            "account 'a': kubeconfigFile: 'encryptedFile:k8s!n:kc': the key is missing (k:<key>)",
        ),
        (
            {"type": "kubernetes", "name": "a", "context": "c"},
            "account 'a': context only applies with a kubeconfigFile",
        ),
        (
            {"type": "kubernetes", "name": "a", "serviceAccount": True, "kubeconfigFile": "/k"},
            "account 'a': serviceAccount: cannot be true when kubeconfigFile is also set",
        ),
        (
            {"type": "kubernetes", "name": "a", "customResources": [{"kubernetesKind": "Widget"}]},
            "account 'a': customResources[].kubernetesKind: 'Widget' has no API group",
        ),
        (
            {"type": "kubernetes", "name": "a", "customResources": [{"kind": "Widget.example.com"}]},
            "account 'a': customResources[0].kubernetesKind: required",
        ),
        ({"type": "kubernetes", "name": "-a b"}, "account '-a b': name: '-a b' is not a valid account name"),
    ],
)
def test_invalid_definitions_name_the_problem(body: Any, message: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_definition(body)
    assert str(caught.value).startswith(message), str(caught.value)


def test_every_problem_is_reported_and_an_inline_kubeconfig_is_never_repeated() -> None:
    secret = "apiVersion: v1\nusers:\n- user:\n    token: s3cr3t-token\n"
    with pytest.raises(InvalidRequest) as caught:
        parse_definition(
            {"type": "kubernetes", "name": "a", "kubeconfigContents": secret, "debug": 1, "omitKinds": "Secret"}
        )
    problems = caught.value.problems
    assert len(problems) == 3, problems
    assert problems[0].startswith("account 'a': kubeconfigContents: an inline kubeconfig is not accepted")
    assert "encryptedFile:k8s!n:<secret>" in problems[0]
    assert "s3cr3t" not in str(caught.value)
    with pytest.raises(InvalidRequest) as caught:  # of a wrong type too: named, not shown
        parse_definition({"type": "kubernetes", "name": "a", "kubeconfigContents": {"token": "s3cr3t"}})
    assert "s3cr3t" not in str(caught.value) and "kubeconfigContents" in str(caught.value)


def test_the_summary_is_what_clouddriver_lists() -> None:
    from datetime import UTC, datetime

    now = datetime.now(UTC)
    row = CredentialsRow(1, "prod-east", "kubernetes", CLOUDDRIVER_SERIALISED, now, now, None)
    assert summary_view(row) == {
        "name": "prod-east",
        "type": "kubernetes",
        "cloudProvider": "kubernetes",
        "environment": "prod-east",
        "accountType": "prod-east",
        "requiredGroupMembership": [],
        "permissions": {"READ": ["dev"], "WRITE": ["ops"]},
    }


# --- configuration ---------------------------------------------------------------------------------


def _load(tmp_path: Path, text: str) -> Any:
    path = tmp_path / "hub.yml"
    path.write_text(textwrap.dedent(text))
    return load_hub_config(path, environ={})


def test_scan_settings_and_defaults(tmp_path: Path) -> None:
    d = load_hub_config(None, environ={}).dynamic_accounts
    assert (d.scan_frequency_seconds, d.name_patterns, d.interceptor.enabled) == (30, (), False)
    d = _load(
        tmp_path,
        """\
        dynamicAccounts:
          scanFrequencySeconds: 2.5
          namePatterns: ['prod-.*']
          interceptor:
            enabled: true
        """,
    ).dynamic_accounts
    assert (d.scan_frequency_seconds, d.name_patterns, d.interceptor.enabled) == (2.5, ("prod-.*",), True)
    env = load_hub_config(None, environ={"SCALE_AGENT_HUB_DYNAMIC_ACCOUNTS__SCAN_FREQUENCY_SECONDS": "10"})
    assert env.dynamic_accounts.scan_frequency_seconds == 10


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "dynamicAccounts:\n  scanFrequencySeconds: 0\n",
            "dynamicAccounts.scanFrequencySeconds: must be greater than 0, got 0",
        ),
        (
            "dynamicAccounts:\n  namePatterns: ['ok', '[prod']\n",
            "dynamicAccounts.namePatterns[1]: '[prod' is not a regular expression: unterminated character set at position 0",
        ),
        (
            "dynamicAccounts:\n  scanFrequency: 5\n",
            "dynamicAccounts.scanFrequency: unknown key (did you mean 'scanFrequencySeconds'?)",
        ),
    ],
)
def test_scan_settings_errors_name_the_key(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, text)
    assert str(caught.value) == f"{tmp_path / 'hub.yml'}: {expected}"
