"""Every key of Armory's agent option table, held against this agent: implemented (no warning),
accepted with a warning that says why it does nothing, or refused with the reason.

tests/fixtures/armory-agent.yml sets every key of Armory's table
(armory/docs static/csv/agent/agent-config-options.csv); `CSV_KEYS` below is that table's key
column, copied, so that a key dropped from the fixture is noticed.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml

from scaleagent.agent.config import ConfigError, load_config, parse_config
from scaleagent.agent.health import QueryError, select_accounts
from scaleagent.agent.link import LinkBackoff, default_zone_id
from scaleagent.agent.service import link_settings
from scaleagent.kube.client import RetryPolicy
from scaleagent.kube.errors import ConnectionFailed
from scaleagent.kube.operations import armory_annotation_problem

FIXTURE = Path(__file__).parent.parent / "fixtures" / "armory-agent.yml"

# What Scale Agent does with each key of Armory's table: "implemented" (no warning), or the
# warning's key path (accepted, does nothing, a reason is given).
CSV_KEYS: dict[str, str] = {
    "clouddriver.auth.token": "implemented",  # not in the fixture: tokenCommand excludes it; see below
    "clouddriver.auth.tokenCommand.command": "implemented",
    "clouddriver.auth.tokenCommand.args": "implemented",
    "clouddriver.auth.tokenCommand.format": "implemented",
    "clouddriver.auth.tokenCommand.refreshIntervalSeconds": "implemented",
    "clouddriver.grpc": "implemented",
    "clouddriver.backoff.baseDelay": "implemented",
    "clouddriver.backoff.multiplier": "implemented",
    "clouddriver.backoff.jitter": "implemented",
    "clouddriver.backoff.maxDelay": "implemented",
    "clouddriver.keepAliveHeartbeatSeconds": "implemented",
    "clouddriver.keepAliveOperationSeconds": "implemented",  # 0 is ours; > 0 warns (test below)
    "clouddriver.keepAliveTimeOutSeconds": "implemented",
    "clouddriver.insecure": "implemented",
    "clouddriver.noProxy": "implemented",
    "clouddriver.responseRetries.enabled": "clouddriver.responseRetries",
    "clouddriver.responseRetries.maxRetries": "clouddriver.responseRetries",
    "clouddriver.responseRetries.backOffMs": "clouddriver.responseRetries",
    "clouddriver.tls.serverName": "implemented",
    "clouddriver.tls.insecureSkipVerify": "implemented",
    "clouddriver.tls.clientCertFile": "implemented",
    "clouddriver.tls.clientKeyFile": "implemented",
    "clouddriver.tls.clientKeyFilePassword": "implemented",
    "clouddriver.tls.cacertFile": "implemented",
    "dynamicAccounts.interceptor.enabled": "dynamicAccounts",
    "dynamicAccounts.enabled": "dynamicAccounts",
    "dynamicAccounts.scanBatchSize": "dynamicAccounts",
    "dynamicAccounts.scanFrequencySeconds": "dynamicAccounts",
    "dynamicAccounts.namePatterns": "dynamicAccounts",
    "dynamicAccounts.credentialScanNamePatterns": "dynamicAccounts",
    "kubernetes.noProxy": "implemented",
    "kubernetes.reconnectTimeoutMs": "implemented",
    "kubernetes.cacheGroupSize": "implemented",
    "kubernetes.cacheGroupDelayMs": "implemented",
    "kubernetes.accounts[].context": "implemented",
    "kubernetes.accounts[].customResourceDefinitions": "implemented",
    "kubernetes.accounts[].customResourceDefinitions.scope": "implemented",
    "kubernetes.accounts[].kinds": "implemented",
    "kubernetes.accounts[].kubeConfigFile": "implemented",
    "kubernetes.accounts[].insecure": "implemented",
    "kubernetes.accounts[].metrics": "kubernetes.accounts[].metrics",
    "kubernetes.accounts[].name": "implemented",
    "kubernetes.accounts[].namespaces": "implemented",
    "kubernetes.accounts[].noProxy": "implemented",
    "kubernetes.accounts[].oAuthScopes": "kubernetes.accounts[].oAuthScopes",
    "kubernetes.accounts[].omitKinds": "implemented",
    "kubernetes.accounts[].omitNamespaces": "implemented",
    "kubernetes.accounts[].onlyNamespacedResources": "implemented",
    "kubernetes.accounts[].onlySpinnakerManaged": "kubernetes.accounts[].onlySpinnakerManaged",
    "kubernetes.accounts[].permissions": "implemented",
    "kubernetes.accounts[].maxResumableResourceAgeMs": "kubernetes.accounts[].maxResumableResourceAgeMs",
    "kubernetes.accounts[].serviceAccount": "implemented",
    "kubernetes.serverSideApply.enabled": "implemented",
    "kubernetes.serverSideApply.clearManagedFields": "implemented",
    "kubernetes.serverSideApply.manifestDefaults": "implemented",
    "kubernetes.serverSideApply.kinds[].kind": "implemented",
    "kubernetes.serverSideApply.kinds[].enabled": "implemented",
    "kubernetes.serverSideApply.kinds[].clearManagedFields": "implemented",
    "kubernetes.serverSideApply.kinds[].manifestDefaults": "implemented",
    "kubernetes.retries.enabled": "implemented",
    "kubernetes.retries.maxRetries": "implemented",
    "kubernetes.retries.backOffMs": "implemented",
    "kubernetes.retries.retryAnyError": "implemented",
    "kubernetes.retries.retryableErrors": "implemented",
    "logging.file": "implemented",
    "logging.format": "implemented",
    "logging.level": "implemented",
    "logging.multiWrite": "implemented",
    "logging.maxSizeMb": "implemented",
    "logging.maxAgeDays": "logging.maxAgeDays",
    "logging.maxBackups": "implemented",
    "logging.localTime": "implemented",
    "logging.compress": "logging.compress",
    "logging.fields": "implemented",
    "pprof.enabled": "pprof",
    "pprof.port": "pprof",
    "prometheus.enabled": "implemented",
    "prometheus.port": "implemented",
    "server.host": "implemented",
    "server.port": "implemented",
    "server.ssl.enabled": "implemented",
    "server.ssl.certFile": "implemented",
    "server.ssl.keyFile": "implemented",
    "server.ssl.keyPassword": "implemented",
    "server.ssl.caCertFile": "implemented",
    "server.ssl.keyFilePassword": "implemented",
    "server.ssl.clientAuth": "implemented",
    "secrets.vault.*": "secrets",  # disabled: warned; enabled: refused (below)
    "tasks.totalBudget": "implemented",
    "tasks.budgetPerAccount": "implemented",
    "tasks.queueCheckFrequencyMs": "tasks.queueCheckFrequencyMs",
    "timeoutSeconds": "timeoutSeconds",
}


def _has(doc: object, path: list[str]) -> bool:
    """Whether `path` (keys; `x[]` a list's items) is set somewhere in doc."""
    if not path:
        return True
    head, rest = path[0], path[1:]
    if head == "*":
        return isinstance(doc, dict) and bool(doc)
    if head.endswith("[]"):
        items = doc.get(head[:-2]) if isinstance(doc, dict) else None
        return isinstance(items, list) and any(_has(item, rest) for item in items)
    if isinstance(doc, list):  # customResourceDefinitions.scope: a key of the list's items
        return any(_has(item, path) for item in doc)
    return isinstance(doc, dict) and head in doc and _has(doc[head], rest)


@pytest.fixture(scope="module")
def fixture_doc() -> dict:
    return yaml.safe_load(FIXTURE.read_text())


@pytest.fixture(scope="module")
def loaded() -> tuple[object, list[str]]:
    """The fixture loaded once, with the warnings it gave."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep(logging.WARNING)
    logger = logging.getLogger("scaleagent.agent.config")
    logger.addHandler(handler)
    try:
        config = load_config(FIXTURE, environ={})
    finally:
        logger.removeHandler(handler)
    return config, [r.getMessage() for r in records]


@pytest.mark.parametrize("key", sorted(k for k in CSV_KEYS if k != "clouddriver.auth.token"))
def test_the_fixture_sets_every_key_of_armorys_table(fixture_doc, key):
    assert _has(fixture_doc, key.split(".")), f"{key} is not set in {FIXTURE.name}"


@pytest.mark.parametrize("key, status", sorted(CSV_KEYS.items()))
def test_each_key_is_implemented_without_a_warning_or_warned_with_a_reason(loaded, key, status):
    _, warnings = loaded
    mentioning = [w for w in warnings if f"'{key.split('[]')[0].split('.*')[0]}" in w or f"'{status}'" in w]
    if status == "implemented":
        named = [w for w in warnings if f"ignoring '{key}'" in w or w.startswith(key + ":")]
        assert named == [], f"{key} is implemented, yet warned about: {named}"
    else:
        ours = [w for w in mentioning if f"ignoring '{status}': " in w]
        assert len(ours) == 1, (key, warnings)
        reason = ours[0].split(f"ignoring '{status}': ", 1)[1]
        assert len(reason) > 20 and "does not use" not in reason, f"{key}: the warning gives no reason: {reason}"


def test_the_fixture_gives_no_other_warning(loaded):
    _, warnings = loaded
    expected = {s for s in CSV_KEYS.values() if s != "implemented"}
    seen = {w.split("ignoring '", 1)[1].split("'", 1)[0] for w in warnings if "ignoring '" in w}
    assert seen == expected
    assert all("ignoring '" in w for w in warnings), warnings


def test_the_fixture_values_arrive_where_they_act(loaded):
    config, _ = loaded
    c = config.clouddriver
    assert c.auth.token_command.command == "/usr/local/bin/get-token"
    assert c.auth.token_command.args == ("--audience", "spinnaker")
    assert (c.auth.token_command.format, c.auth.token_command.refresh_interval_seconds) == ("json", 300)
    assert c.tls.client_key_file_password.get_secret_value() == "changeit"
    settings = link_settings(config)
    assert (settings.backoff_base, settings.backoff_multiplier, settings.backoff_max) == (1.0, 1.6, 120.0)
    assert settings.no_proxy is True and settings.client_key_password == "changeit"
    assert settings.token_command is not None and settings.token == ""
    k = config.kubernetes
    assert (k.reconnect_timeout_ms, k.cache_group_size, k.cache_group_delay_ms) == (5000, 10, 1000)
    assert k.retries.retryable_errors == ("timeout", "deadline exceeded")
    prod = k.accounts[0]
    assert prod.permissions == {"READ": ("dev", "1234"), "WRITE": ("ops",)}
    assert prod.custom_resource_definitions == ("Rollout.argoproj.io",)
    assert config.logging.level == "WARNING" and config.logging.format == "json"
    assert (config.prometheus.enabled, config.prometheus.port) == (True, 8008)
    assert config.server.ssl.client_auth == "want" and config.server.ssl.password == "changeit"
    assert (config.tasks.total_budget, config.tasks.budget_per_account) == (1000, 50)


# --------------------------------------------------------------------------- refusals, one by one


def _with(change: str) -> str:
    """The fixture with one more document merged on top (YAML: the later key wins)."""
    doc = yaml.safe_load(FIXTURE.read_text())
    for path, value in yaml.safe_load(change).items():
        *parents, last = path.split(".")
        node = doc
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return yaml.safe_dump(doc)


@pytest.mark.parametrize(
    "change, message",
    [
        (
            "secrets.vault: {enabled: true, url: 'https://v'}",
            "armory-agent.yml: secrets: vault.enabled is true: secret references (encrypted:vault!...) are not "
            "resolved by Scale Agent",
        ),
        (
            "kubernetes.serverSideApply: {enabled: never}",
            "armory-agent.yml: kubernetes.serverSideApply.enabled: 'never' (client-side apply) is not implemented",
        ),
        (
            "kubernetes.serverSideApply: {kinds: [{kind: Secret, enabled: never}]}",
            "armory-agent.yml: kubernetes.serverSideApply.kinds[0].enabled: 'never' (client-side apply) is not",
        ),
        (
            "kubernetes.serverSideApply: {clearManagedFields: always}",
            "armory-agent.yml: kubernetes.serverSideApply.clearManagedFields: 'always' is not implemented: "
            "Scale Agent never clears metadata.managedFields",
        ),
        (
            "kubernetes.serverSideApply: {manifestDefaults: always}",
            "armory-agent.yml: kubernetes.serverSideApply.manifestDefaults: 'always' is not implemented",
        ),
        (
            "kubernetes.accounts: [{name: a, serviceAccount: true, skipServerSideApply: true}]",
            "armory-agent.yml: kubernetes.accounts[0].skipServerSideApply: Scale Agent deploys by server-side "
            "apply only",
        ),
        (
            "clouddriver.auth: {token: abc, tokenCommand: {command: /bin/echo}}",
            "armory-agent.yml: clouddriver.auth.tokenCommand: cannot be combined with auth.token",
        ),
        (
            "clouddriver.auth: {tokenCommand: {command: /bin/echo, format: yaml}}",
            "armory-agent.yml: clouddriver.auth.tokenCommand.format: expected one of",
        ),
        (
            "clouddriver.backoff: {baseDelay: 2000000000, maxDelay: 1000000000}",
            "armory-agent.yml: clouddriver.backoff.maxDelay: 1000000000 ns is less than baseDelay",
        ),
        (
            "logging.level: verbose",
            "armory-agent.yml: logging.level: 'verbose' is not a log level: expected panic, fatal, error, warn,",
        ),
        ("logging.format: xml", "armory-agent.yml: logging.format: expected one of"),
        (
            "server.ssl: {enabled: true}",
            "armory-agent.yml: server.ssl.certFile: required when server.ssl.enabled is true",
        ),
        (
            "kubernetes.accounts: [{name: a, serviceAccount: true, permissions: [{READ: [a]}, {READ: [b]}]}]",
            "armory-agent.yml: kubernetes.accounts[0].permissions[1].READ: 'READ' is given twice",
        ),
    ],
)
def test_what_cannot_be_honoured_is_refused_naming_the_key_and_why(tmp_path, change, message):
    path = tmp_path / "armory-agent.yml"
    path.write_text(_with(change))
    with pytest.raises(ConfigError) as e:
        load_config(path, environ={})
    assert message in str(e.value).replace(str(tmp_path) + "/", "")


def test_a_quiet_operations_reconnect_above_zero_is_warned(caplog):
    caplog.set_level(logging.WARNING)
    parse_config("clouddriver:\n  keepAliveOperationSeconds: 60\n", environ={})
    assert "clouddriver.keepAliveOperationSeconds: 60: not used" in caplog.text


def test_ssa_allowed_said_explicitly_is_warned_as_meaning_always(caplog):
    caplog.set_level(logging.WARNING)
    parse_config("kubernetes:\n  serverSideApply:\n    enabled: allowed\n", environ={})
    assert "'allowed' deploys by server-side apply here" in caplog.text


# --------------------------------------------------------------------------- option parsing


@pytest.mark.parametrize(
    "given, level",
    [("panic", "CRITICAL"), ("FATAL", "CRITICAL"), ("Error", "ERROR"), ("warn", "WARNING"), ("warning", "WARNING")]
    + [("info", "INFO"), ("debug", "DEBUG"), ("TRACE", "DEBUG")],
)
def test_armorys_log_level_names_in_any_case(given, level):
    assert parse_config(f"logging:\n  level: {given}\n", environ={}).logging.level == level


def test_permissions_as_a_map_or_armorys_list_of_maps_with_numeric_roles():
    base = "kubernetes:\n  accounts:\n    - name: a\n      serviceAccount: true\n      permissions: "
    as_map = parse_config(base + "{READ: [Dev, 42], WRITE: [ops]}\n", environ={})
    as_list = parse_config(base + "[{READ: [dev, 42]}, {WRITE: [ops]}]\n", environ={})
    assert as_map.kubernetes.accounts[0].permissions == as_list.kubernetes.accounts[0].permissions
    assert as_list.kubernetes.accounts[0].permissions == {"READ": ("dev", "42"), "WRITE": ("ops",)}


def test_the_old_key_password_name_is_the_same_setting():
    text = "clouddriver:\n  tls:\n    clientKeyPassword: pw\n"
    assert parse_config(text, environ={}).clouddriver.tls.client_key_file_password.get_secret_value() == "pw"


def test_token_command_format_defaults_to_json_and_accepts_armorys_empty_list():
    cfg = parse_config("clouddriver:\n  auth:\n    tokenCommand:\n      command: x\n      format: []\n", environ={})
    assert cfg.clouddriver.auth.token_command.format == ""


def test_backoff_defaults_are_ours_and_armorys_units_are_nanoseconds():
    s = link_settings(parse_config("", environ={}))
    assert (s.backoff_base, s.backoff_multiplier, s.backoff_jitter, s.backoff_max) == (0.5, 2.0, 0.2, 30.0)


def test_link_backoff_grows_by_the_multiplier_within_the_jitter_and_stops_at_the_maximum():
    b = LinkBackoff(base=1.0, multiplier=1.6, jitter=0.2, maximum=3.0)
    delays = [b.next() for _ in range(6)]
    for n, delay in enumerate(delays):
        nominal = min(3.0, 1.6**n)
        assert nominal * 0.8 <= delay <= nominal * 1.2
    b.reset()
    assert b.next() <= 1.2


@pytest.mark.parametrize(
    "hostname, namespace, zone",
    [
        ("armory-agent-7d9f8b6c5d-x2x9k", "spinnaker", "armory-agent_spinnaker"),
        ("agent-5b7c9-abcde", "ns1", "agent_ns1"),
        ("standalone", "ns1", "standalone_ns1"),
        ("laptop", "", ""),
    ],
)
def test_default_zone_is_deployment_and_namespace_in_a_pod_and_none_elsewhere(hostname, namespace, zone):
    assert default_zone_id(hostname, namespace) == zone


def test_zone_id_empty_means_no_zone_and_unset_means_the_computed_one(tmp_path, monkeypatch):
    (tmp_path / "namespace").write_text("spinnaker\n")
    monkeypatch.setenv("SCALE_AGENT_SERVICE_ACCOUNT_DIR", str(tmp_path))
    monkeypatch.setenv("HOSTNAME", "armory-agent-7d9f8b6c5d-x2x9k")
    assert link_settings(parse_config("", environ={})).zone_id == "armory-agent_spinnaker"
    assert link_settings(parse_config("zoneId: ''\n", environ={})).zone_id == ""
    assert link_settings(parse_config("zoneId: z1\n", environ={})).zone_id == "z1"


def test_retry_policy_retries_matching_errors_and_never_a_post():
    policy = RetryPolicy(max_retries=3, backoff=0, retryable_errors=("timeout",))
    slow = ConnectionFailed("https://k did not answer in time (timeout)")
    assert policy.retries("PATCH", slow) and not policy.retries("POST", slow)
    assert not policy.retries("GET", ConnectionFailed("https://k closed the connection"))
    assert RetryPolicy(retry_any_error=True).retries("GET", ConnectionFailed("anything"))


@pytest.mark.parametrize(
    "annotations, problem",
    [
        ({"agent-k8s.armory.io/serverside-apply": "disabled"}, "client-side apply is not implemented"),
        ({"agent-k8s.armory.io/serverside-apply": "false"}, "client-side apply is not implemented"),
        ({"agent-k8s.armory.io/ssa-clear-managed-fields": "true"}, "does not clear managedFields"),
        ({"agent-k8s.armory.io/ssa-manifest-defaults": "enabled"}, "adds no field defaults"),
        ({"agent-k8s.armory.io/serverside-apply": "enabled"}, None),
        ({"agent-k8s.armory.io/ssa-clear-managed-fields": "disabled"}, None),
        ({}, None),
    ],
)
def test_armorys_per_object_annotations(annotations, problem):
    manifest = {"kind": "ConfigMap", "metadata": {"name": "c", "annotations": annotations}}
    found = armory_annotation_problem(0, manifest)
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found and "manifest 1 (ConfigMap c)" in found


# --------------------------------------------------------------------------- GET /accounts


ACCOUNTS = [
    {"name": "b-prod", "state": "watching", "dynamic": True},
    {"name": "a-dev", "state": "error", "reason": "cannot connect"},
    {"name": "c-test", "state": "syncing"},
]


@pytest.mark.parametrize(
    "query, names",
    [
        ({}, ["a-dev", "b-prod", "c-test"]),
        ({"Config.Name": "b-prod"}, ["b-prod"]),
        ({"Config.Name": "*-d*"}, ["a-dev"]),
        ({"Config.Dynamic": "true"}, ["b-prod"]),
        ({"Config.Dynamic": "false"}, ["a-dev", "c-test"]),
        ({"State.Name": "Healthy"}, ["b-prod"]),
        ({"State.Name": "DiscoveryError,ConfigLoaded"}, ["a-dev", "c-test"]),
        ({"State.Name": "syncing"}, ["c-test"]),
        ({"limit": "1", "offset": "1"}, ["b-prod"]),
        ({"limit": "2", "offtset": "2"}, ["c-test"]),
    ],
)
def test_accounts_filters_and_paging(query, names):
    doc = select_accounts(ACCOUNTS, query)
    assert [a["name"] for a in doc["items"]] == names
    item = doc["items"][0]
    assert item["Config"]["Name"] == item["name"] and "Name" in item["State"]


def test_accounts_total_counts_the_matches_before_paging():
    doc = select_accounts(ACCOUNTS, {"limit": "1"})
    assert (doc["total"], doc["limit"], doc["offset"], len(doc["items"])) == (3, 1, 0, 1)


@pytest.mark.parametrize(
    "query, message",
    [
        ({"limit": "0"}, "query parameter limit='0': expected a whole number from 1 to 10000"),
        ({"offset": "-1"}, "query parameter offset='-1': expected a whole number"),
        ({"Config.Dynamic": "yes"}, "query parameter Config.Dynamic='yes': expected true or false"),
        ({"State.Name": "Broken"}, "query parameter State.Name='Broken': 'broken' is not a state"),
    ],
)
def test_accounts_refuses_a_bad_query_naming_the_parameter(query, message):
    with pytest.raises(QueryError) as e:
        select_accounts(ACCOUNTS, query)
    assert message in str(e.value)


# --------------------------------------------------------------------------- tokenCommand, for real


def _script(tmp_path: Path, body: str) -> str:
    import stat
    import sys

    path = tmp_path / "token-program"
    path.write_text(f"#!{sys.executable}\nimport sys\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def _run(coro):
    import asyncio

    return asyncio.run(coro)


def test_token_command_raw_and_json_outputs(tmp_path):
    from scaleagent.agent.token import TokenCommand

    raw = TokenCommand(_script(tmp_path, "print('  abc.def  ')"), format="raw")
    assert _run(raw.token()) == "abc.def"
    as_json = TokenCommand(_script(tmp_path, 'print(\'{"token": "t-1"}\')'), format="")
    assert _run(as_json.token()) == "t-1"


def test_token_command_runs_again_only_when_due_or_refused(tmp_path):
    from scaleagent.agent.token import TokenCommand

    counter = tmp_path / "n"
    body = (
        f"p = {str(counter)!r}\n"
        "import os\n"
        "n = int(open(p).read()) + 1 if os.path.exists(p) else 1\n"
        "open(p, 'w').write(str(n))\n"
        "print('token-%d' % n)"
    )
    command = TokenCommand(_script(tmp_path, body), format="raw", refresh_interval=0)

    async def twice() -> list[str]:
        return [await command.token(), await command.token()]

    assert _run(twice()) == ["token-1", "token-1"]  # interval 0: once, until refused
    command.invalidate()
    assert _run(command.token()) == "token-2"
    command.refresh_interval = 1e-9  # due at once
    assert command.due()
    assert _run(command.token()) == "token-3"


@pytest.mark.parametrize(
    "body, fmt, message",
    [
        ("print('secret-value'); sys.exit(3)", "raw", "exited with status 3"),
        ("sys.stderr.write('no credentials'); sys.exit(1)", "raw", "exited with status 1: no credentials"),
        ("print('secret-value')", "json", "the output is not JSON (format is json; set format: raw"),
        ('print(\'{"tok": "secret-value"}\')', "json", 'the JSON output has no "token" string'),
        ("print('secret value')", "raw", "is not printable ASCII without spaces"),
        ("print('')", "raw", "the output is empty"),
        ("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", "raw", "was killed by signal 11 (SIGSEGV)"),
    ],
)
def test_token_command_failures_say_why_and_never_show_the_output(tmp_path, body, fmt, message):
    from scaleagent.agent.token import TokenCommand, TokenCommandError

    with pytest.raises(TokenCommandError) as e:
        _run(TokenCommand(_script(tmp_path, body), format=fmt).token())
    assert message in str(e.value)
    assert "secret" not in str(e.value).replace("no credentials", "")


def test_token_command_that_cannot_run(tmp_path):
    from scaleagent.agent.token import TokenCommand, TokenCommandError

    with pytest.raises(TokenCommandError, match="cannot be run"):
        _run(TokenCommand(str(tmp_path / "missing")).token())


# --------------------------------------------------------------------------- encrypted client key


def test_an_encrypted_client_key_is_decrypted_in_memory_and_a_wrong_password_is_named(tmp_path):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from scaleagent.agent.link import decrypt_key

    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"s3cret"),
    )
    plain = decrypt_key(pem, "s3cret", tmp_path / "agent.key")
    assert b"ENCRYPTED" not in plain and plain.startswith(b"-----BEGIN PRIVATE KEY-----")
    with pytest.raises(ValueError, match=r"clouddriver.tls.clientKeyFile .*agent.key: cannot be decrypted"):
        decrypt_key(pem, "wrong", tmp_path / "agent.key")


# --------------------------------------------------------------------------- log lines


def test_json_log_lines_carry_armorys_keys_and_the_fields(tmp_path):
    import json

    from scaleagent.agent.logs import JsonFormatter

    record = logging.LogRecord("scaleagent.agent", logging.WARNING, __file__, 1, "two\nlines %s", ("x",), None)
    line = JsonFormatter({"agentCluster": "c1"}, local_time=False).format(record)
    assert "\n" not in line
    doc = json.loads(line)
    assert doc["level"] == "warning" and doc["msg"] == "two\nlines x" and doc["agentCluster"] == "c1"
    assert doc["logger"] == "scaleagent.agent" and doc["time"].endswith("+00:00")


def test_logging_to_a_rotated_file_and_stderr(tmp_path):
    from scaleagent.agent.logs import configure_logging

    cfg = parse_config(
        f"logging:\n  file: {tmp_path}/a.log\n  multiWrite: true\n  level: error\n  maxSizeMb: 2\n  maxBackups: 3\n",
        environ={},
    ).logging
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        configure_logging(cfg)
        kinds = sorted(type(h).__name__ for h in root.handlers)
        assert kinds == ["RotatingFileHandler", "StreamHandler"] and root.level == logging.ERROR
        rotating = next(h for h in root.handlers if type(h).__name__ == "RotatingFileHandler")
        assert (rotating.maxBytes, rotating.backupCount) == (2 * 1024 * 1024, 3)
        logging.getLogger("scaleagent.test").error("written")
        rotating.flush()
        assert "written" in (tmp_path / "a.log").read_text()
    finally:
        for h in list(root.handlers):
            root.removeHandler(h)
            h.close()
        for h in saved[0]:
            root.addHandler(h)
        root.setLevel(saved[1])


# --------------------------------------------------------------------------- cacheGroupSize


def test_accounts_start_in_groups_of_cache_group_size(tmp_path):
    import asyncio

    from scaleagent.agent.service import Agent
    from scaleagent.agent.sinks import CountingSink

    accounts = "".join(f"    - name: a{i}\n      kubeConfigFile: {tmp_path}/missing-{i}\n" for i in range(5))
    text = "server:\n  port: 0\nkubernetes:\n  cacheGroupSize: 2\n  cacheGroupDelayMs: 1\n  accounts:\n" + accounts
    config = parse_config(text, environ={})

    async def run() -> tuple[list[str], list[str]]:
        agent = Agent(config, CountingSink())
        await agent.start()
        try:
            first = sorted(agent.accounts.runners)
            assert agent._starting is not None
            await agent._starting  # the later groups, each after its delay
            return first, sorted(agent.accounts.runners)
        finally:
            await agent.stop()

    first, everything = asyncio.run(run())
    assert first == ["a0", "a1"]
    assert everything == ["a0", "a1", "a2", "a3", "a4"]


# --------------------------------------------------------------------------- server.ssl


def test_the_health_port_over_tls_with_client_certificates_required(tmp_path):
    import asyncio
    import ssl
    import urllib.error
    import urllib.request

    import trustme

    from scaleagent.agent.service import Agent
    from scaleagent.agent.sinks import CountingSink

    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    server.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "server.pem"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    client = ca.issue_cert("client")
    text = (
        "server:\n  port: 0\n  ssl:\n    enabled: true\n"
        f"    certFile: {tmp_path}/server.pem\n    caCertFile: {tmp_path}/ca.pem\n    clientAuth: need\n"
    )
    config = parse_config(text, environ={})

    def fetch(url: str, with_client_cert: bool) -> int:
        ctx = ssl.create_default_context()
        ca.configure_trust(ctx)
        if with_client_cert:
            client.configure_cert(ctx)
        try:
            with urllib.request.urlopen(url + "/ready", context=ctx, timeout=10) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code
        except (urllib.error.URLError, ssl.SSLError, ConnectionError):
            return -1

    async def run() -> tuple[str, int, int]:
        agent = Agent(config, CountingSink())
        await agent.start()
        try:
            with_cert = await asyncio.to_thread(fetch, agent.health_url, True)
            without = await asyncio.to_thread(fetch, agent.health_url, False)
            return agent.health_url, with_cert, without
        finally:
            await agent.stop()

    url, with_cert, without = asyncio.run(run())
    assert url.startswith("https://127.0.0.1:")
    assert with_cert == 200
    assert without == -1  # the handshake is refused without a client certificate


def test_a_taken_metrics_port_is_named_in_the_error(tmp_path):
    import asyncio
    import socket

    from scaleagent.agent.service import Agent, StartError
    from scaleagent.agent.sinks import CountingSink

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = parse_config(f"server:\n  port: 0\nprometheus:\n  enabled: true\n  port: {port}\n", environ={})

        async def run() -> str:
            agent = Agent(config, CountingSink())
            try:
                await agent.start()
            except StartError as e:
                return str(e)
            finally:
                await agent.stop()
            return "started"

        assert asyncio.run(run()).startswith(f"prometheus: cannot listen on 127.0.0.1:{port}: ")


def test_a_health_port_on_loopback_in_a_pod_is_said_to_be_out_of_the_probes_reach(tmp_path, monkeypatch, caplog):
    from scaleagent.agent.service import _warn_if_unreachable_in_a_pod

    caplog.set_level("WARNING", "scaleagent.agent")
    monkeypatch.setenv("SCALE_AGENT_SERVICE_ACCOUNT_DIR", str(tmp_path))
    _warn_if_unreachable_in_a_pod("server.host", "127.0.0.1", "the kubelet's probes")
    assert caplog.messages == []  # no namespace file: not in a pod
    (tmp_path / "namespace").write_text("spinnaker\n")
    _warn_if_unreachable_in_a_pod("server.host", "0.0.0.0", "the kubelet's probes")
    assert caplog.messages == []
    _warn_if_unreachable_in_a_pod("server.host", "127.0.0.1", "the kubelet's probes")
    assert caplog.messages == [
        "server.host is 127.0.0.1: in this pod, the kubelet's probes cannot reach it; set server.host: 0.0.0.0 "
        "to serve the pod's network"
    ]
