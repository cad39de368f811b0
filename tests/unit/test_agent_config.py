"""The agent configuration file: parsing, validation rules, messages, environment overrides."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError

from scaleagent.agent import config as config_module
from scaleagent.agent.config import (
    MAX_CONFIG_BYTES,
    AccountConfig,
    AgentConfig,
    ConfigError,
    load_config,
    parse_config,
)

TOKEN = "s3cr3t-hub-token-d41d8cd9"


def parse(text: str, environ: dict[str, str] | None = None, base_dir: Path | None = None) -> AgentConfig:
    return parse_config(
        textwrap.dedent(text), source="agent.yml", base_dir=base_dir or Path("/etc/agent"), environ=environ or {}
    )


def error_of(text: str, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        parse(text, environ)
    return str(info.value)


def account(extra: str = "", name: str = "a") -> str:
    """A one-account file with `extra` lines added to the account."""
    lines = "".join(f"      {line}\n" for line in textwrap.dedent(extra).splitlines())
    return f"kubernetes:\n  accounts:\n    - name: {name}\n{lines}"


# ---------------------------------------------------------------- valid files


def test_full_armory_style_file():
    cfg = parse(
        f"""\
        kubernetes:
          accounts:
            - name: prod-east
              kubeConfigFile: /kubeconfigfiles/prod-east.yaml
              context: prod-east-admin
              namespaces: [web, api]
              kinds: [Deployment, ConfigMap, Widget.example.com]
              customResourceDefinitions:
                - Widget.example.com
                - kind: Gadget.example.com
            - name: in-cluster
              serviceAccount: true
              omitNamespaces: [kube-system]
              omitKinds: [Event]
              onlyNamespacedResources: true
          pageSize: 250
          discoveryIntervalSeconds: 30
        zoneId: zone-a
        dynamicAccountsEnabled: false
        tasks:
          totalBudget: 16
          budgetPerAccount: 4
        server:
          host: 0.0.0.0
          port: 8090
        clouddriver:
          grpc: hub.example.com:9091
          insecure: false
          tls:
            serverName: hub.internal
            insecureSkipVerify: true
            clientCertFile: /certs/client.pem
            clientKeyFile: /certs/client.key
            cacertFile: /certs/ca.pem
          auth:
            token: {TOKEN}
          keepAliveHeartbeatSeconds: 20
        """
    )
    east, local = cfg.kubernetes.accounts
    assert east == AccountConfig(
        name="prod-east",
        kubeconfig_file=Path("/kubeconfigfiles/prod-east.yaml"),
        context="prod-east-admin",
        namespaces=("web", "api"),
        kinds=("Deployment", "ConfigMap", "Widget.example.com"),
        custom_resource_definitions=("Widget.example.com", "Gadget.example.com"),
    )
    assert local.service_account and local.kubeconfig_file is None
    assert local.omit_namespaces == ("kube-system",) and local.omit_kinds == ("Event",)
    assert local.only_namespaced_resources is True
    assert cfg.kubernetes.page_size == 250 and cfg.kubernetes.discovery_interval_seconds == 30
    assert cfg.kubernetes.account("in-cluster") is local
    assert cfg.zone_id == "zone-a" and cfg.dynamic_accounts_enabled is False
    assert (cfg.tasks.total_budget, cfg.tasks.budget_per_account) == (16, 4)
    assert (cfg.server.host, cfg.server.port) == ("0.0.0.0", 8090)
    hub = cfg.clouddriver
    assert (hub.grpc, hub.grpc_host, hub.grpc_port, hub.insecure) == (
        "hub.example.com:9091",
        "hub.example.com",
        9091,
        False,
    )
    assert hub.tls.server_name == "hub.internal" and hub.tls.insecure_skip_verify
    assert hub.tls.client_cert_file == Path("/certs/client.pem")
    assert hub.tls.client_key_file == Path("/certs/client.key")
    assert hub.tls.cacert_file == Path("/certs/ca.pem")
    assert hub.auth.token.get_secret_value() == TOKEN
    assert hub.keep_alive_heartbeat_seconds == 20


def test_defaults_from_an_empty_file(tmp_path):
    (tmp_path / "agent.yml").write_text("# nothing configured yet\n")
    cfg = load_config(tmp_path / "agent.yml", environ={})
    assert cfg == AgentConfig()
    assert cfg.kubernetes.accounts == ()
    assert (cfg.kubernetes.page_size, cfg.kubernetes.discovery_interval_seconds) == (500, 60)
    assert cfg.zone_id is None and cfg.dynamic_accounts_enabled is True
    assert (cfg.tasks.total_budget, cfg.tasks.budget_per_account) == (32, 8)
    assert (cfg.server.host, cfg.server.port) == ("127.0.0.1", 8082)
    assert (cfg.clouddriver.grpc, cfg.clouddriver.insecure, cfg.clouddriver.keep_alive_heartbeat_seconds) == (
        "localhost:9091",
        False,
        10,
    )
    assert cfg.clouddriver.tls.files == {} and cfg.clouddriver.tls.server_name == ""
    assert cfg.clouddriver.auth.token.get_secret_value() == ""


def test_http2_is_on_unless_the_file_or_the_environment_turns_it_off():
    assert parse("kubernetes: {}\n").kubernetes.http2 is True
    assert parse("kubernetes:\n  http2: false\n").kubernetes.http2 is False
    assert parse("kubernetes: {}\n", environ={"SCALE_AGENT_KUBERNETES__HTTP2": "false"}).kubernetes.http2 is False
    assert error_of("kubernetes:\n  http2: 'no'\n").startswith("agent.yml: kubernetes.http2: ")


def test_null_sections_and_lists_mean_defaults():
    cfg = parse("kubernetes:\n  accounts:\ntasks:\nclouddriver:\n  tls:\n    serverName:\n  auth:\n    token:\n")
    assert cfg == AgentConfig()


def test_both_kubeconfig_spellings():
    upper = parse(account("kubeConfigFile: /k/one.yaml"))
    lower = parse(account("kubeconfigFile: /k/one.yaml"))
    assert upper.kubernetes.accounts[0].kubeconfig_file == Path("/k/one.yaml")
    assert lower == upper


def test_both_spellings_at_once_is_an_error():
    message = error_of(account("kubeConfigFile: /a\nkubeconfigFile: /b"))
    assert message == (
        "agent.yml: kubernetes.accounts[0].kubeconfigFile: the same setting as 'kubeConfigFile' "
        "(another spelling); give it only once"
    )


def test_relative_paths_resolve_against_the_files_directory(tmp_path, monkeypatch):
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "agent.yml").write_text(
        account("kubeConfigFile: kube/prod.yaml")
        + "clouddriver:\n  tls:\n    cacertFile: ../certs/ca.pem\n    clientCertFile: ./c.pem\n    clientKeyFile: c.key\n"
    )
    monkeypatch.chdir(tmp_path)  # a relative path to the file itself works too
    cfg = load_config(Path("conf/agent.yml"), environ={})
    assert cfg.kubernetes.accounts[0].kubeconfig_file == conf_dir / "kube" / "prod.yaml"
    assert cfg.clouddriver.tls.cacert_file == tmp_path / "certs" / "ca.pem"
    assert cfg.clouddriver.tls.client_cert_file == conf_dir / "c.pem"
    assert cfg.clouddriver.tls.client_key_file == conf_dir / "c.key"


def test_crd_items_are_normalised_to_strings():
    cfg = parse(account("serviceAccount: true\ncustomResourceDefinitions: [A.x.io, {kind: B.y.io}]"))
    assert cfg.kubernetes.accounts[0].custom_resource_definitions == ("A.x.io", "B.y.io")


def test_yaml_anchors_and_merge_keys_work():
    cfg = parse(
        """\
        kubernetes:
          accounts:
            - &base
              name: one
              serviceAccount: true
              omitKinds: [Event]
            - <<: *base
              name: two
        """
    )
    assert [a.name for a in cfg.kubernetes.accounts] == ["one", "two"]
    assert cfg.kubernetes.accounts[1].omit_kinds == ("Event",)


def test_models_are_frozen():
    cfg = parse(account("serviceAccount: true"))
    with pytest.raises(ValidationError):
        cfg.zone_id = "z"  # type: ignore[misc]
    assert isinstance(cfg.kubernetes.accounts, tuple)
    assert isinstance(cfg.kubernetes.accounts[0].namespaces, tuple)


# ---------------------------------------------------------------- file reading


def test_missing_file():
    with pytest.raises(ConfigError) as info:
        load_config("/nonexistent/agent.yml", environ={})
    assert str(info.value) == "/nonexistent/agent.yml: the file does not exist"


def test_unreadable_file(tmp_path, monkeypatch):
    path = tmp_path / "agent.yml"
    path.write_text("")

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(config_module, "open", denied, raising=False)
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    assert str(info.value) == f"{path}: not readable: Permission denied"


def test_directory_instead_of_file(tmp_path):
    with pytest.raises(ConfigError, match="a directory, not a file"):
        load_config(tmp_path, environ={})


def test_too_large_file_is_refused(tmp_path):
    path = tmp_path / "agent.yml"
    path.write_bytes(b"#" * (MAX_CONFIG_BYTES + 1))
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    assert str(info.value) == f"{path}: larger than 5 MiB; refusing to read it"


def test_not_utf8(tmp_path):
    path = tmp_path / "agent.yml"
    path.write_bytes(b"zoneId: \xff\n")
    with pytest.raises(ConfigError, match=r"not UTF-8 text \(invalid byte at offset 8\)"):
        load_config(path, environ={})


def test_top_level_must_be_a_mapping():
    assert error_of("- a\n- b\n") == "agent.yml: the top level must be a mapping, not a list"
    assert error_of("just text\n") == "agent.yml: the top level must be a mapping, not a string"


def test_yaml_syntax_error_has_line_and_column():
    message = error_of("server:\n  port: 8082\n   host: x\n")
    assert message.startswith("agent.yml line 3, column 8: YAML syntax error: mapping values are not allowed here")


def test_duplicate_yaml_keys_are_an_error():
    assert (
        error_of("server:\n  port: 1\n  port: 2\n")
        == "agent.yml line 3, column 3: duplicate key 'port' (first at line 2)"
    )


def test_non_string_keys_are_an_error():
    assert error_of("server:\n  1: x\n") == "agent.yml: server: the key 1 is an integer, not a string; put it in quotes"


def test_alias_bombs_are_refused():
    levels = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 8):
        prev, cur = chr(96 + i), chr(97 + i)
        levels.append(f"{cur}: &{cur} [" + ", ".join([f"*{prev}"] * 10) + "]")
    assert "expands to more than" in error_of("\n".join(levels) + "\n")


# ---------------------------------------------------------------- types and unknown keys


def test_string_where_a_list_is_expected():
    text = (
        account("serviceAccount: true", name="ok")
        + "    - name: b\n      serviceAccount: true\n      omitKinds: Secret\n"
    )
    assert (
        error_of(text)
        == "agent.yml: kubernetes.accounts[1].omitKinds: expected a list of strings, got a string ('Secret')"
    )


def test_unknown_key_suggests_the_close_one():
    assert error_of(account("kubeconfig: /k")) == (
        "agent.yml: kubernetes.accounts[0].kubeconfig: unknown key (did you mean 'kubeConfigFile'?)"
    )


def test_snake_case_keys_are_unknown_in_yaml():
    assert (
        error_of("kubernetes:\n  page_size: 5\n")
        == "agent.yml: kubernetes.page_size: unknown key (did you mean 'pageSize'?)"
    )


def test_key_in_the_wrong_section_says_where_it_belongs():
    assert error_of("pageSize: 5\n") == "agent.yml: pageSize: unknown key here (it belongs under 'kubernetes')"


def test_armory_settings_this_agent_does_not_use_are_ignored_with_a_warning(caplog):
    cfg = parse_config(account("serviceAccount: true\ncacheThreads: 4"), source="agent.yml", environ={})
    assert cfg.kubernetes.accounts[0].service_account is True
    assert "agent.yml: ignoring 'kubernetes.accounts[].cacheThreads': an Armory/Clouddriver setting" in caplog.text


def test_permissions_are_kept_trimmed_and_lowercased_for_the_hub_to_enforce():
    cfg = parse_config(
        account("serviceAccount: true\npermissions: {READ: [' Dev ', ops], WRITE: 'ops, SRE'}"),
        source="agent.yml",
        environ={},
    )
    assert cfg.kubernetes.accounts[0].permissions == {"READ": ("dev", "ops"), "WRITE": ("ops", "sre")}


@pytest.mark.parametrize(
    ("permissions", "message"),
    [
        ("{ADMIN: [x]}", "'ADMIN' is not a permission"),
        ("{READ: [dev, '']}", "an empty group name"),
        ("{READ: 5}", "expected a list of group names"),
    ],
)
def test_permissions_that_would_silently_match_nothing_are_refused(permissions, message):
    assert message in error_of(account(f"serviceAccount: true\npermissions: {permissions}"))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("server:\n  port: '80'\n", "server.port: expected an integer, got a string ('80')"),
        ("server:\n  port: 8.5\n", "server.port: expected an integer, got a number (8.5)"),
        ("server:\n  port: true\n", "server.port: expected an integer, got a boolean (true)"),
        ("dynamicAccountsEnabled: 'no'\n", "dynamicAccountsEnabled: expected true or false, got a string ('no')"),
        ("zoneId: 2024\n", "zoneId: expected a string, got an integer (2024); put it in quotes to make it a string"),
        ("server: [a]\n", "server: expected a mapping, got a list"),
        ("kubernetes:\n  accounts: {}\n", "kubernetes.accounts: expected a list of accounts (mappings), got a mapping"),
        ("kubernetes:\n  pageSize: 0\n", "kubernetes.pageSize: must be at least 1, got 0"),
        ("kubernetes:\n  pageSize: 10001\n", "kubernetes.pageSize: must be at most 10000, got 10001"),
        ("kubernetes:\n  pageSize:\n", "kubernetes.pageSize: expected an integer, got null"),
        (
            "kubernetes:\n  discoveryIntervalSeconds: 0\n",
            "kubernetes.discoveryIntervalSeconds: must be greater than 0, got 0",
        ),
        ("tasks:\n  totalBudget: -1\n", "tasks.totalBudget: must be at least 0, got -1"),
        ("server:\n  port: 70000\n", "server.port: must be at most 65535, got 70000"),
        (
            "server:\n  host: 'localhost:80'\n",
            "server.host: 'localhost:80' is not a host name or IP address (give the port separately, in server.port)",
        ),
        (
            "clouddriver:\n  keepAliveHeartbeatSeconds: -5\n",
            "clouddriver.keepAliveHeartbeatSeconds: must be at least 0, got -5",
        ),
    ],
)
def test_type_and_range_errors(text, expected):
    assert error_of(text) == f"agent.yml: {expected}"


def test_all_problems_are_reported_together():
    message = error_of("server:\n  port: x\n  hots: y\nzoneId: [a]\n")
    assert message.splitlines() == [
        "agent.yml: zoneId: expected a string, got a list",
        "agent.yml: server.port: expected an integer, got a string ('x')",
        "agent.yml: server.hots: unknown key (did you mean 'host'?)",
    ]


# ---------------------------------------------------------------- account rules


def test_account_needs_a_name():
    assert error_of("kubernetes:\n  accounts:\n    - serviceAccount: true\n") == (
        "agent.yml: kubernetes.accounts[0].name: required key is missing"
    )


@pytest.mark.parametrize("name", ["-lead", "trail.", "has space", "x" * 254, "ünï"])
def test_invalid_account_names(name):
    assert "is not a valid account name" in error_of(account("serviceAccount: true", name=repr(name)))


@pytest.mark.parametrize("name", ["a", "prod-east_1.b", "A9", "x" * 253])
def test_valid_account_names(name):
    assert parse(account("serviceAccount: true", name=name)).kubernetes.accounts[0].name == name


def test_kubeconfig_or_service_account_is_required():
    assert error_of(account("namespaces: [a]")) == (
        "agent.yml: kubernetes.accounts[0]: needs either kubeConfigFile (a kubeconfig path) or serviceAccount: true"
    )


def test_kubeconfig_and_service_account_are_exclusive():
    assert error_of(account("kubeConfigFile: /k\nserviceAccount: true")) == (
        "agent.yml: kubernetes.accounts[0].serviceAccount: cannot be true when kubeConfigFile is also set: "
        "an account uses either a kubeconfig file or the in-cluster service account"
    )


def test_context_needs_a_kubeconfig():
    assert error_of(account("serviceAccount: true\ncontext: c")) == (
        "agent.yml: kubernetes.accounts[0].context: only applies with kubeConfigFile, not with serviceAccount: true"
    )


def test_namespaces_and_omit_namespaces_are_exclusive():
    assert error_of(account("serviceAccount: true\nnamespaces: [a]\nomitNamespaces: [b]")) == (
        "agent.yml: kubernetes.accounts[0].omitNamespaces: cannot be combined with namespaces: give one list or the other"
    )


def test_kinds_and_omit_kinds_are_exclusive():
    assert error_of(account("serviceAccount: true\nkinds: [Pod]\nomitKinds: [Event]")) == (
        "agent.yml: kubernetes.accounts[0].omitKinds: cannot be combined with kinds: give one list or the other"
    )


def test_an_empty_list_does_not_conflict():
    cfg = parse(account("serviceAccount: true\nnamespaces: []\nomitNamespaces: [b]"))
    assert cfg.kubernetes.accounts[0].omit_namespaces == ("b",)


def test_duplicate_account_names_name_both_positions():
    text = "kubernetes:\n  accounts:\n" + "".join(
        f"    - name: {n}\n      serviceAccount: true\n" for n in ("a", "b", "a")
    )
    assert error_of(text) == (
        "agent.yml: kubernetes.accounts[2].name: duplicate account name 'a': "
        "kubernetes.accounts[0] and kubernetes.accounts[2] both use it"
    )


def test_namespace_and_kind_names_are_checked():
    assert error_of(account("serviceAccount: true\nnamespaces: [ok, Prod]")).startswith(
        "agent.yml: kubernetes.accounts[0].namespaces[1]: 'Prod' is not a namespace name"
    )
    assert error_of(account("serviceAccount: true\nkinds: [deployment, 'Bad Kind']")).startswith(
        "agent.yml: kubernetes.accounts[0].kinds[1]: 'Bad Kind' is not a kind"
    )


def test_crd_items_need_a_group_and_only_kind_and_scope():
    assert error_of(account("serviceAccount: true\ncustomResourceDefinitions: [Widget]")) == (
        "agent.yml: kubernetes.accounts[0].customResourceDefinitions[0]: 'Widget' has no API group: "
        "custom resources are named 'Kind.group', e.g. 'Widget.example.com'"
    )
    assert error_of(account("serviceAccount: true\ncustomResourceDefinitions: [{name: W.x.io}]")) == (
        "agent.yml: kubernetes.accounts[0].customResourceDefinitions[0].name: unknown key 'name': an item here has only 'kind' and 'scope'"
    )
    assert error_of(account("serviceAccount: true\ncustomResourceDefinitions: [{kind: W.x.io, scope: Global}]")) == (
        "agent.yml: kubernetes.accounts[0].customResourceDefinitions[0].scope: 'Global' is not a scope: "
        "expected 'Cluster' or 'Namespaced'"
    )


# ---------------------------------------------------------------- clouddriver rules


def test_client_cert_and_key_go_together():
    assert error_of("clouddriver:\n  tls:\n    clientCertFile: /c.pem\n") == (
        "agent.yml: clouddriver.tls.clientKeyFile: required when clientCertFile is set (a client certificate needs its key)"
    )
    assert error_of("clouddriver:\n  tls:\n    clientKeyFile: /c.key\n") == (
        "agent.yml: clouddriver.tls.clientCertFile: required when clientKeyFile is set (a client key needs its certificate)"
    )


@pytest.mark.parametrize(
    "grpc", ["hub", "hub:", ":9091", "hub:0", "hub:65536", "hub:http", "::1:9091", "[hub]:9091", "a b:1"]
)
def test_grpc_must_be_host_and_port(grpc):
    message = error_of(f"clouddriver:\n  grpc: '{grpc}'\n")
    assert message.startswith(f"agent.yml: clouddriver.grpc: '{grpc}': ")


@pytest.mark.parametrize(
    ("grpc", "host", "port"), [("hub:1", "hub", 1), ("10.0.0.1:9091", "10.0.0.1", 9091), ("[::1]:443", "::1", 443)]
)
def test_valid_grpc_addresses(grpc, host, port):
    hub = parse(f"clouddriver:\n  grpc: '{grpc}'\n").clouddriver
    assert (hub.grpc_host, hub.grpc_port) == (host, port)


def test_insecure_with_tls_files_is_an_error():
    assert error_of("clouddriver:\n  insecure: true\n  tls:\n    cacertFile: /ca.pem\n") == (
        "agent.yml: clouddriver.insecure: cannot be true when tls.cacertFile is set: plaintext gRPC uses no TLS files"
    )
    assert parse("clouddriver:\n  insecure: true\n").clouddriver.insecure is True


# ---------------------------------------------------------------- environment overrides


def test_env_overrides_with_types_and_nesting():
    cfg = parse(
        "server:\n  port: 8082\n",
        {
            "SCALE_AGENT_SERVER__PORT": "9000",
            "SCALE_AGENT_ZONEID": "z",
            "SCALE_AGENT_TASKS__TOTALBUDGET": "0",
            "SCALE_AGENT_DYNAMICACCOUNTSENABLED": "false",
            "SCALE_AGENT_KUBERNETES__DISCOVERYINTERVALSECONDS": "2.5",
            "SCALE_AGENT_CLOUDDRIVER__TLS__CACERTFILE": "ca.pem",
            "SCALE_AGENT_CLOUDDRIVER__AUTH__TOKEN": TOKEN,
            "UNRELATED": "1",
        },
    )
    assert cfg.server.port == 9000
    assert cfg.zone_id == "z"
    assert cfg.tasks.total_budget == 0 and cfg.tasks.budget_per_account == 8
    assert cfg.dynamic_accounts_enabled is False
    assert cfg.kubernetes.discovery_interval_seconds == 2.5
    assert cfg.clouddriver.tls.cacert_file == Path("/etc/agent/ca.pem")
    assert cfg.clouddriver.auth.token.get_secret_value() == TOKEN


def test_env_key_names_are_case_and_underscore_insensitive():
    cfg = parse("", {"SCALE_AGENT_ZONE_ID": "z", "SCALE_AGENT_Tasks__Budget_Per_Account": "3"})
    assert cfg.zone_id == "z" and cfg.tasks.budget_per_account == 3


def test_env_strings_stay_strings():
    cfg = parse("", {"SCALE_AGENT_ZONEID": "123", "SCALE_AGENT_CLOUDDRIVER__AUTH__TOKEN": "true"})
    assert cfg.zone_id == "123"
    assert cfg.clouddriver.auth.token.get_secret_value() == "true"


def test_env_overrides_the_files_value_and_keeps_the_rest():
    cfg = parse("clouddriver:\n  grpc: hub:1\n  insecure: true\n", {"SCALE_AGENT_CLOUDDRIVER__INSECURE": "false"})
    assert (cfg.clouddriver.grpc, cfg.clouddriver.insecure) == ("hub:1", False)


def test_env_unknown_key_names_the_variable():
    assert error_of("", {"SCALE_AGENT_SERVER__PROT": "1"}) == (
        "environment variable SCALE_AGENT_SERVER__PROT: 'PROT' is not a configuration key in server "
        "(did you mean SCALE_AGENT_SERVER__PORT?)"
    )
    assert error_of("", {"SCALE_AGENT_NOPE": "1"}) == (
        "environment variable SCALE_AGENT_NOPE: 'NOPE' is not a configuration key at the top level"
    )


def test_the_variables_kubernetes_gives_a_pod_for_a_service_named_like_the_agent_are_not_settings():
    """A Service `scale-agent` (or `scale-agent-metrics`) in the pod's namespace adds these."""
    links = {
        "SCALE_AGENT_SERVICE_HOST": "10.0.0.1",
        "SCALE_AGENT_SERVICE_PORT": "8082",
        "SCALE_AGENT_SERVICE_PORT_METRICS": "8082",
        "SCALE_AGENT_PORT": "tcp://10.0.0.1:8082",
        "SCALE_AGENT_PORT_8082_TCP": "tcp://10.0.0.1:8082",
        "SCALE_AGENT_PORT_8082_TCP_PROTO": "tcp",
        "SCALE_AGENT_METRICS_PORT_8082_TCP_ADDR": "10.0.0.1",
    }
    assert parse_config("server: {port: 9000}", environ=links).server.port == 9000
    assert "'SERVER_PORT' is not a configuration key" in error_of("", {"SCALE_AGENT_SERVER_PORT": "1"})


def test_env_cannot_set_lists_or_sections():
    assert error_of("", {"SCALE_AGENT_KUBERNETES__ACCOUNTS": "[]"}) == (
        "environment variable SCALE_AGENT_KUBERNETES__ACCOUNTS: kubernetes.accounts is a list; "
        "lists cannot be set from the environment"
    )
    assert "server is a section, not a value" in error_of("", {"SCALE_AGENT_SERVER": "x"})
    assert "zoneId is a value, not a section" in error_of("", {"SCALE_AGENT_ZONEID__X": "x"})


def test_env_value_errors_name_the_variable():
    assert error_of("", {"SCALE_AGENT_SERVER__PORT": "http"}) == (
        "environment variable SCALE_AGENT_SERVER__PORT: server.port: expected an integer, got a string ('http')"
    )


def test_project_tooling_variables_are_not_config():
    cfg = parse(
        "",
        {
            "SCALE_AGENT_E2E_KUBECONFIG": "/k",
            "SCALE_AGENT_EXTRA_KUBECTLS": "/bin/kubectl",
            "SCALE_AGENT_HUB": "http://127.0.0.1:7002",  # the CLI's hub address, set in the same shell
        },
    )
    assert cfg == AgentConfig()


def test_load_config_reads_os_environ_by_default(tmp_path, monkeypatch):
    (tmp_path / "agent.yml").write_text("")
    monkeypatch.setenv("SCALE_AGENT_SERVER__PORT", "9123")
    assert load_config(tmp_path / "agent.yml").server.port == 9123


# ---------------------------------------------------------------- the token stays secret


def test_token_never_in_repr_or_str():
    cfg = parse(f"clouddriver:\n  auth:\n    token: {TOKEN}\n")
    for text in (
        repr(cfg),
        str(cfg),
        repr(cfg.clouddriver),
        str(cfg.clouddriver.auth),
        cfg.model_dump_json(),
        str(cfg.model_dump()),
    ):
        assert TOKEN not in text
    assert cfg.clouddriver.auth.token.get_secret_value() == TOKEN


@pytest.mark.parametrize(
    ("text", "environ"),
    [
        (f"clouddriver:\n  auth:\n    token: [{TOKEN}]\n", {}),
        (f"clouddriver:\n  auth: {TOKEN}\n", {}),
        (f"clouddriver:\n  auth:\n    tokn: {TOKEN}\n", {}),
        (f"clouddriver:\n  auth:\n    token: {TOKEN}\n  grpc: nope\n", {}),
        (f'clouddriver:\n  auth:\n    token: "{TOKEN}\n', {}),
        (f"clouddriver:\n  auth:\n    token: {TOKEN}\n    token: {TOKEN}\n", {}),
        ("", {"SCALE_AGENT_CLOUDDRIVER__AUTH__TOKEN": TOKEN, "SCALE_AGENT_SERVER__PORT": "x"}),
        ("", {"SCALE_AGENT_CLOUDDRIVER__AUTH__TOKN": TOKEN}),
    ],
)
def test_token_never_in_error_messages(text, environ):
    message = error_of(text, environ)
    assert TOKEN not in message
    assert "agent.yml" in message or "environment variable" in message


def test_errors_are_plain_messages_without_chained_tracebacks(tmp_path):
    path = tmp_path / "agent.yml"
    path.write_text("server:\n  port: nope\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert info.value.problems == (f"{path}: server.port: expected an integer, got a string ('nope')",)
    assert os.fspath(path) in str(info.value)


def test_control_characters_and_deep_nesting_are_reported():
    assert error_of("zoneId: a\x07b\n") == (
        "agent.yml line 1, column 10: YAML syntax error: special characters are not allowed (character U+0007)"
    )
    assert error_of("zoneId: " + "[" * 600 + "]" * 600 + "\n") == "agent.yml: the document is nested too deeply"


def test_the_hub_token_loses_the_line_break_a_yaml_block_or_a_secret_file_leaves():
    cfg = parse_config("clouddriver:\n  auth:\n    token: |\n      s3cret-token\n", source="agent.yml", environ={})
    assert cfg.clouddriver.auth.token.get_secret_value() == "s3cret-token"


def test_a_hub_token_with_a_space_inside_is_refused_without_showing_it():
    message = error_of('clouddriver:\n  auth:\n    token: "s3cret token"\n')
    assert "clouddriver.auth.token: must be printable ASCII" in message and "s3cret" not in message
