"""Agent identities: who a connecting agent is, what it may serve, and the identities file read
again when it changes (a broken file keeps the last good list)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from scaleagent.hub.auth.agents import AgentIdentities, hash_token, peer_address
from scaleagent.hub.config import AgentIdentityConfig, AgentsAuthConfig
from tests.helpers import write_yaml


def identities(**config: object) -> AgentIdentities:
    return AgentIdentities(AgentsAuthConfig.model_validate(config))


def entry(name: str, token: str | None = None, cn: str | None = None, zones=("a",), accounts=()) -> dict:
    doc: dict = {"name": name, "zones": list(zones)}
    if token is not None:
        doc["tokenHash"] = hash_token(token)
    if cn is not None:
        doc["commonName"] = cn
    if accounts:
        doc["accounts"] = list(accounts)
    return doc


def touch_changed(path: Path, doc: object) -> None:
    """Rewrite the file so that its stat differs for sure (size or mtime)."""
    before = path.stat() if path.exists() else None
    write_yaml(path, doc)  # type: ignore[arg-type]
    if before is not None and path.stat().st_size == before.st_size:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))


def test_a_token_or_a_certificate_names_the_identity_and_its_zones_and_accounts():
    ids = identities(
        identities=[
            entry("east", token="t-east", zones=["east", "east-2"], accounts=["prod-.*"]),
            entry("cert", cn="agent.west", zones=["*"]),
            entry("both", token="t-both", cn="agent.both", zones=["b"]),
        ]
    )
    east = ids.identify("t-east", None)
    assert east is not None and east.name == "east"
    assert east.allows_zone("east-2") and not east.allows_zone("west")
    assert east.allows_account("prod-eu") and not east.allows_account("staging") and not east.allows_account("xprod-eu")
    west = ids.identify(None, "agent.west")
    assert west is not None and west.allows_zone("anything") and west.allows_account("anything")
    assert ids.identify("wrong", None) is None and ids.identify(None, "agent.other") is None
    assert ids.identify(None, None) is None
    # An identity that names both proofs needs both.
    assert ids.identify("t-both", None) is None and ids.identify(None, "agent.both") is None
    both = ids.identify("t-both", "agent.both")
    assert both is not None and both.name == "both"


def test_without_identities_the_shared_token_certificate_or_address_stands_for_the_agent():
    ids = AgentIdentities()
    assert not ids.enabled and ids.max_sessions == 20
    by_cn, by_token, by_ip = (
        ids.identify("x", "agent.a", "ipv4:10.1.2.3:5555"),
        ids.identify("x", None),
        ids.identify(None, None, "ipv4:10.1.2.3:5555"),
    )
    assert by_cn is not None and by_token is not None and by_ip is not None
    assert (by_cn.name, by_token.name, by_ip.name) == ("cn:agent.a", "token", "ip:10.1.2.3")
    assert all(i.allows_zone("z") and i.allows_account("n") and not i.configured for i in (by_cn, by_token, by_ip))
    assert peer_address("ipv6:[::1]:443") == "::1"


def test_the_file_is_read_again_when_it_changes_and_a_broken_file_keeps_the_last_good_list(tmp_path, caplog):
    path = tmp_path / "agents.yaml"
    write_yaml(path, [entry("one", token="t-one")])  # type: ignore[arg-type]
    ids = identities(identitiesFile=str(path), identities=[entry("static", token="t-static")])
    assert ids.enabled and sorted(ids.names) == ["one", "static"]
    assert ids.identify("t-two", None) is None

    touch_changed(path, [entry("one", token="t-one"), entry("two", token="t-two", zones=["b"])])
    two = ids.identify("t-two", None)  # read again at the next agent's connection
    assert two is not None and two.name == "two" and two.allows_zone("b")

    caplog.set_level(logging.ERROR, logger="scaleagent.hub.auth.agents")
    secret = "do-not-log-this-token"
    broken = [entry("three", token="t-three"), {"name": "bad", "tokenHash": secret, "zones": ["a"]}]
    touch_changed(path, broken)
    kept = ids.identify("t-two", None)  # the last good list still stands
    assert kept is not None and kept.name == "two"
    assert ids.identify("t-three", None) is None
    assert "keeping the last good list" in caplog.text and "entry 1" in caplog.text and "tokenHash" in caplog.text
    assert secret not in caplog.text

    caplog.clear()
    path.write_text("- name: [unclosed\n")
    assert ids.identify("t-one", None) is not None
    assert "not valid YAML" in caplog.text

    path.unlink()
    assert ids.identify("t-one", None) is not None  # a file gone keeps the list too
    assert "cannot read it" in caplog.text

    touch_changed(path, [entry("three", token="t-three")])
    three = ids.identify("t-three", None)
    assert three is not None and ids.identify("t-one", None) is None  # the new good list replaces the old
    assert ids.identify("t-static", None) is not None


def test_file_entries_are_validated_like_the_configuration(tmp_path):
    path = tmp_path / "agents.yaml"
    write_yaml(path, [entry("ok", token="t")])  # type: ignore[arg-type]
    ids = identities(identitiesFile=str(path))
    for bad in (
        [{"name": "no-proof", "zones": ["a"]}],
        [{"name": "no-zone", "tokenHash": hash_token("x")}],
        [{"name": "bad-regex", "tokenHash": hash_token("x"), "zones": ["a"], "accounts": ["("]}],
        [entry("dup", token="x"), entry("dup", token="y")],
        {"name": "not-a-list"},
    ):
        touch_changed(path, bad)
        assert ids.identify("t", None) is not None and ids.names == ["ok"], bad
    AgentIdentityConfig.model_validate(entry("fine", token="z"))
