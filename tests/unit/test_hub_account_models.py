"""Request bodies of the Dynamic Accounts API: the same rules as the agent's file, clear messages."""

from __future__ import annotations

import pytest

from scaleagent.agent import config as agent_config
from scaleagent.hub.accounts.errors import InvalidRequest
from scaleagent.hub.accounts.models import ACCOUNT_NAME, AccountChange, AccountIn, parse_accounts, parse_names


def test_the_account_name_rule_is_the_agents():
    assert ACCOUNT_NAME.pattern == agent_config._ACCOUNT_NAME.pattern


@pytest.mark.parametrize("name", ["a", "account-01", "prod.eu_1", "A" * 253])
def test_valid_names(name):
    assert parse_accounts([{"name": name}], AccountIn)[0].name == name


@pytest.mark.parametrize("name", ["", "-a", "a-", "a b", "é", "a" * 254, "a/b"])
def test_invalid_names(name):
    with pytest.raises(InvalidRequest, match=r"is not a valid account name"):
        parse_accounts([{"name": name}], AccountIn)


def test_settings_follow_the_agents_rules():
    [account] = parse_accounts(
        [
            {
                "name": "a",
                "kinds": ["Deployment", "Widget.example.com"],
                "customResourceDefinitions": ["Widget.example.com"],
                "onlyNamespacedResources": True,
                "namespaces": ["web"],
                "kubeconfigFile": "/k",
                "context": "c",
            }
        ],
        AccountIn,
    )
    assert account.given() == {
        "kinds": ["Deployment", "Widget.example.com"],
        "customResourceDefinitions": ["Widget.example.com"],
        "onlyNamespacedResources": True,
        "namespaces": ["web"],
        "kubeconfigFile": "/k",
        "context": "c",
    }
    with pytest.raises(InvalidRequest, match=r"customResourceDefinitions: 'Widget' has no API group"):
        parse_accounts([{"name": "a", "customResourceDefinitions": ["Widget"]}], AccountIn)
    with pytest.raises(InvalidRequest, match=r"kinds: 'deploy ment' is not a kind"):
        parse_accounts([{"name": "a", "kinds": ["deploy ment"]}], AccountIn)
    with pytest.raises(
        InvalidRequest, match=r"onlyNamespacedResources: expected true or false, got a string \('yes'\)"
    ):
        parse_accounts([{"name": "a", "onlyNamespacedResources": "yes"}], AccountIn)
    with pytest.raises(InvalidRequest, match=r"zoneId: a zone id is 1-253 printable characters"):
        parse_accounts([{"name": "a", "zoneId": " z"}], AccountIn)


def test_a_change_tells_null_from_absent():
    [change] = parse_accounts([{"name": "a", "zoneId": None, "state": "ACTIVE"}], AccountChange)
    assert change.given() == {"zoneId": None} and change.state == "ACTIVE"


def test_every_problem_is_reported_with_its_account():
    with pytest.raises(InvalidRequest) as caught:
        parse_accounts([{"name": "ok"}, {"name": "x", "zoneId": [1]}, 7, {"name": "ok"}, {"nme": "y"}], AccountIn)
    assert caught.value.problems == [
        "accounts[1] ('x'): zoneId: expected a string, got a list",
        'accounts[2]: expected an object such as {"name": "account-01"}, got a number (7)',
        "accounts[3] ('ok'): the name 'ok' is also accounts[0]: each account may appear once per request",
        "accounts[4]: name: required",
        "accounts[4]: nme: unknown field (did you mean 'name'?)",
    ]


def test_delete_bodies():
    assert parse_names(["a", "b"]) == ["a", "b"]
    with pytest.raises(InvalidRequest) as caught:
        parse_names(["a", "a", 3, "b c"])
    assert caught.value.problems == [
        "names[1]: 'a' is given twice",
        "names[2]: expected an account name (a string), got a number (3)",
        "names[3]: 'b c' is not a valid account name: use 1-253 letters, digits, '-', '_' or '.', starting and "
        "ending with a letter or digit",
    ]
    with pytest.raises(InvalidRequest, match=r"the body is an empty list: name at least one account"):
        parse_names([])
