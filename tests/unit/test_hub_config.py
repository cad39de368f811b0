"""The hub configuration file: defaults, validation rules, messages, overrides, secrets."""

from __future__ import annotations

import builtins
import socket
import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError

from scaleagent import configfile
from scaleagent.agent.config import parse_config
from scaleagent.hub.config import DEFAULT_DATABASE_URL, ConfigError, HubConfig, load_hub_config
from scaleagent.hub.store.urls import redact_url

TOKEN = "hub-t0ken-8f14e45fceea167a"
PASSWORD = "db-pa55word-c9f0f895fb98"


@pytest.fixture
def hub_dir(tmp_path: Path) -> Path:
    """A directory with the TLS files a hub configuration may name (contents don't matter here)."""
    for name in ("hub.pem", "hub-key.pem", "ca.pem"):
        (tmp_path / name).write_text("-----BEGIN CERTIFICATE-----\n")
    return tmp_path


def load(directory: Path, text: str, environ: dict[str, str] | None = None) -> HubConfig:
    path = directory / "hub.yml"
    path.write_text(textwrap.dedent(text))
    return load_hub_config(path, environ=environ or {})


def error_of(directory: Path, text: str, environ: dict[str, str] | None = None) -> str:
    """The ConfigError message, with the file's full path shortened to 'hub.yml'."""
    with pytest.raises(ConfigError) as info:
        load(directory, text, environ)
    return str(info.value).replace(f"{directory / 'hub.yml'}:", "hub.yml:").replace(str(directory), "<dir>")


# ---------------------------------------------------------------- valid configurations


def test_no_file_means_defaults():
    config = load_hub_config(None, environ={})
    assert (config.server.host, config.server.grpc_port, config.server.http_port) == ("127.0.0.1", 9091, 7002)
    assert config.server.replica_name == socket.gethostname()
    assert not config.tls.enabled and config.tls.client_ca_file is None
    assert config.auth.token.get_secret_value() == ""
    assert config.database.url == DEFAULT_DATABASE_URL == "sqlite:///scale-agent-hub.db"
    assert config.sessions.grace_seconds == 60
    assert (config.grpc.max_message_bytes, config.grpc.keep_alive_seconds) == (16 * 1024 * 1024, 30)
    assert config.grpc.max_pending_calls == 10_000


def test_an_empty_file_and_empty_sections_mean_defaults(tmp_path):
    assert load(tmp_path, "") == load(tmp_path, "server:\ntls:\nauth:\n") == load_hub_config(None, environ={})


def test_full_file(hub_dir):
    config = load(
        hub_dir,
        f"""\
        server:
          host: 0.0.0.0
          grpcPort: 0
          httpPort: 0
          replicaName: hub-a
        tls:
          certFile: hub.pem
          keyFile: {hub_dir / "hub-key.pem"}
          clientCaFile: ca.pem
        auth:
          token: {TOKEN}
          anonymous: true
        database:
          url: postgresql+asyncpg://hub:{PASSWORD}@db.example.com:5432/hub
        sessions:
          graceSeconds: 2.5
        grpc:
          maxMessageBytes: 1024
          keepAliveSeconds: 0
          maxPendingCalls: 50000
        """,
    )
    assert (config.server.host, config.server.grpc_port, config.server.http_port) == ("0.0.0.0", 0, 0)
    assert config.server.replica_name == "hub-a"
    assert config.tls.enabled
    assert (config.tls.cert_file, config.tls.key_file, config.tls.client_ca_file) == (
        hub_dir / "hub.pem",
        hub_dir / "hub-key.pem",
        hub_dir / "ca.pem",
    )
    assert config.auth.token.get_secret_value() == TOKEN
    assert config.database.url == f"postgresql+asyncpg://hub:{PASSWORD}@db.example.com:5432/hub"
    assert config.sessions.grace_seconds == 2.5
    assert (config.grpc.max_message_bytes, config.grpc.keep_alive_seconds) == (1024, 0)
    assert config.grpc.max_pending_calls == 50_000


def test_relative_paths_resolve_against_the_files_directory_not_the_working_directory(
    hub_dir, tmp_path_factory, monkeypatch
):
    monkeypatch.chdir(tmp_path_factory.mktemp("elsewhere"))
    config = load(hub_dir, "tls:\n  certFile: hub.pem\n  keyFile: ./sub/../hub-key.pem\n")
    assert (config.tls.cert_file, config.tls.key_file) == (hub_dir / "hub.pem", hub_dir / "hub-key.pem")


@pytest.mark.parametrize(
    "url",
    [
        "sqlite://",
        "sqlite:///hub.db",
        "sqlite:////var/lib/hub.db",
        "sqlite+aiosqlite:///hub.db",
        "postgresql://u:p@db/hub",
        "postgresql:///hub?host=/var/run/postgresql",
        "mysql+aiomysql://u@[::1]:3306/hub",
        "mariadb://db.example.com/hub",
    ],
)
def test_supported_database_urls(tmp_path, url):
    assert load(tmp_path, f"database:\n  url: '{url}'\n").database.url == url


# ---------------------------------------------------------------- environment and command line


def test_env_overrides_the_file(tmp_path):
    config = load(
        tmp_path,
        "server:\n  grpcPort: 9000\n  replicaName: from-file\n",
        {
            "SCALE_AGENT_HUB_SERVER__GRPC_PORT": "9092",
            "SCALE_AGENT_HUB_SERVER__REPLICANAME": "123",
            "SCALE_AGENT_HUB_AUTH__TOKEN": TOKEN,
            "SCALE_AGENT_HUB_SESSIONS__GRACE_SECONDS": "0",
            "SCALE_AGENT_SERVER__PORT": "1",  # the agent's variable: not the hub's
        },
    )
    assert (config.server.grpc_port, config.server.http_port, config.server.replica_name) == (9092, 7002, "123")
    assert config.auth.token.get_secret_value() == TOKEN
    assert config.sessions.grace_seconds == 0


def test_env_is_read_from_os_environ_by_default_and_without_a_file(monkeypatch):
    monkeypatch.setenv("SCALE_AGENT_HUB_DATABASE__URL", "sqlite:///other.db")
    assert load_hub_config(None).database.url == "sqlite:///other.db"


def test_env_errors_name_the_variable():
    with pytest.raises(ConfigError) as info:
        load_hub_config(None, environ={"SCALE_AGENT_HUB_SERVER__GRPC_PROT": "1"})
    assert str(info.value) == (
        "environment variable SCALE_AGENT_HUB_SERVER__GRPC_PROT: 'GRPC_PROT' is not a configuration key in server "
        "(did you mean SCALE_AGENT_HUB_SERVER__GRPCPORT?)"
    )
    with pytest.raises(ConfigError) as info:
        load_hub_config(None, environ={"SCALE_AGENT_HUB_GRPC__MAXMESSAGEBYTES": "x"})
    assert str(info.value) == (
        "environment variable SCALE_AGENT_HUB_GRPC__MAXMESSAGEBYTES: grpc.maxMessageBytes: "
        "expected an integer, got a string ('x')"
    )


def test_the_agent_does_not_take_the_hubs_variables_for_its_own():
    """Both prefixes start with SCALE_AGENT_; one environment may serve both programs (the demo)."""
    assert parse_config("", environ={"SCALE_AGENT_HUB_SERVER__GRPC_PORT": "9092"}).server.port == 8082


def test_command_line_overrides_win_and_are_validated(tmp_path):
    config = load(tmp_path, "server:\n  grpcPort: 9000\n", {"SCALE_AGENT_HUB_SERVER__HTTP_PORT": "7100"})
    changed = config.with_overrides(grpc_port=0, database_url="sqlite:///cli.db")
    assert (changed.server.grpc_port, changed.server.http_port, changed.database.url) == (0, 7100, "sqlite:///cli.db")
    assert config.server.grpc_port == 9000  # the original is left alone
    assert config.with_overrides() is config
    with pytest.raises(ConfigError) as info:
        config.with_overrides(http_port=70000, database_url="postgres://db/hub")
    assert str(info.value).splitlines() == [
        "command-line option --http-port: server.httpPort: must be at most 65535, got 70000",
        "command-line option --db: database.url: 'postgres' is not a supported database (SQLAlchemy calls it "
        "'postgresql'): use sqlite, postgresql, mysql or mariadb, optionally with a driver "
        "('postgresql+asyncpg', 'sqlite+aiosqlite')",
    ]


# ---------------------------------------------------------------- validation messages


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("server:\n  grpcPort: 65536\n", "server.grpcPort: must be at most 65535, got 65536"),
        ("server:\n  httpPort: -1\n", "server.httpPort: must be at least 0, got -1"),
        ("server:\n  grpcPort: '9091'\n", "server.grpcPort: expected an integer, got a string ('9091')"),
        ("server:\n  grpcPort: 7002\n", "server.httpPort: 7002 is also server.grpcPort: give each its own port (or 0)"),
        (
            "server:\n  host: 'h:1'\n",
            "server.host: 'h:1' is not a host name or IP address (give the ports separately, in server.grpcPort and "
            "server.httpPort)",
        ),
        (
            "server:\n  replicaName: 'a b'\n",
            "server.replicaName: 'a b' is not a valid replica name: use 1-253 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit",
        ),
        ("server:\n  grpcport: 1\n", "server.grpcport: unknown key (did you mean 'grpcPort'?)"),
        ("server:\n  grpc_port: 1\n", "server.grpc_port: unknown key (did you mean 'grpcPort'?)"),
        ("graceSeconds: 1\n", "graceSeconds: unknown key here (it belongs under 'sessions')"),
        ("sessions:\n  graceSeconds: -1\n", "sessions.graceSeconds: must be at least 0, got -1"),
        ("grpc:\n  maxMessageBytes: 1023\n", "grpc.maxMessageBytes: must be at least 1024, got 1023"),
        ("grpc:\n  maxMessageBytes: 268435457\n", "grpc.maxMessageBytes: must be at most 268435456, got 268435457"),
        ("grpc:\n  keepAliveSeconds: -1\n", "grpc.keepAliveSeconds: must be at least 0, got -1"),
        ("grpc:\n  maxPendingCalls: 0\n", "grpc.maxPendingCalls: must be at least 1, got 0"),
        ("grpc:\n  maxPendingCalls: 1000001\n", "grpc.maxPendingCalls: must be at most 1000000, got 1000001"),
        (
            "tls:\n  certFile: hub.pem\n",
            "tls.keyFile: required when certFile is set (a certificate needs its private key)",
        ),
        (
            "tls:\n  keyFile: hub-key.pem\n",
            "tls.certFile: required when keyFile is set (a private key needs its certificate)",
        ),
        (
            "tls:\n  clientCaFile: ca.pem\n",
            "tls.clientCaFile: needs certFile and keyFile: client certificates (mTLS) are only checked on a TLS port",
        ),
        (
            "tls:\n  certFile: missing.pem\n  keyFile: hub-key.pem\n",
            "tls.certFile: <dir>/missing.pem: the file does not exist",
        ),
        ("tls:\n  certFile: .\n  keyFile: hub-key.pem\n", "tls.certFile: <dir>: a directory, not a file"),
        (
            "auth:\n  token: 'two words'\n",
            "auth.token: must be printable ASCII without spaces or line breaks (it is sent in a header); the value is not shown",
        ),
        (
            "database:\n  url: 'oracle://db/hub'\n",
            "database.url: 'oracle' is not a supported database: use sqlite, postgresql, mysql or mariadb, optionally "
            "with a driver ('postgresql+asyncpg', 'sqlite+aiosqlite')",
        ),
        (
            "database:\n  url: 'hub.db'\n",
            "database.url: not a database URL (e.g. 'sqlite:///scale-agent-hub.db' or "
            "'postgresql+asyncpg://user:password@db.example.com:5432/hub'); the value is not shown, it may hold a password",
        ),
        (
            "database:\n  url: 'mysql://db:http/hub'\n",
            "database.url: the port in the URL must be a number from 1 to 65535",
        ),
        (
            "database:\n  url: 'sqlite://hub.db'\n",
            "database.url: an SQLite URL names a file, not a server: 'sqlite:///relative/path.db' (three slashes) or "
            "'sqlite:////absolute/path.db' (four)",
        ),
    ],
)
def test_validation_errors(hub_dir, text, expected):
    assert error_of(hub_dir, text) == f"hub.yml: {expected}"


def test_an_unreadable_tls_file_names_the_key_and_the_path(hub_dir, monkeypatch):
    key = hub_dir / "hub-key.pem"

    def open_except_the_key(file, *args, **kwargs):
        if Path(file) == key:
            raise PermissionError(13, "Permission denied")
        return builtins.open(file, *args, **kwargs)

    monkeypatch.setattr(configfile, "open", open_except_the_key, raising=False)
    assert error_of(hub_dir, "tls:\n  certFile: hub.pem\n  keyFile: hub-key.pem\n") == (
        "hub.yml: tls.keyFile: <dir>/hub-key.pem: not readable: Permission denied"
    )


def test_a_missing_config_file_is_named():
    with pytest.raises(ConfigError) as info:
        load_hub_config(Path("/nonexistent/hub.yml"), environ={})
    assert str(info.value) == "/nonexistent/hub.yml: the file does not exist"


# ---------------------------------------------------------------- secrets stay secret


def test_secrets_are_not_in_repr_or_str(tmp_path):
    config = load(tmp_path, f"auth:\n  token: {TOKEN}\ndatabase:\n  url: 'mysql://hub:{PASSWORD}@db/hub'\n")
    for text in (repr(config), str(config), repr(config.auth), repr(config.database), str(config.database)):
        assert TOKEN not in text and PASSWORD not in text
    assert "mysql://hub:***@db/hub" in repr(config)


@pytest.mark.parametrize(
    ("text", "environ"),
    [
        (f"auth: {TOKEN}\n", {}),
        (f"auth:\n  token: [{TOKEN}]\n", {}),
        (f"auth:\n  tokn: {TOKEN}\n", {}),
        (f"auth:\n  token: '{TOKEN} '\n", {}),
        (f"database: 'postgresql://u:{PASSWORD}@db/hub'\n", {}),
        (f"database:\n  url: 'postgres://u:{PASSWORD}@db/hub'\n", {}),
        (f"database:\n  url: 'postgresql://u:{PASSWORD}@db:x/hub'\n", {}),
        (f"database:\n  url: 'u:{PASSWORD}@db/hub'\n", {}),
        (
            "",
            {
                "SCALE_AGENT_HUB_DATABASE__URL": f"sqlite://u:{PASSWORD}@db/hub",
                "SCALE_AGENT_HUB_AUTH__TOKEN": f"{TOKEN}\n",
            },
        ),
    ],
)
def test_secrets_are_not_in_error_messages(tmp_path, text, environ):
    message = error_of(tmp_path, text, environ)
    assert TOKEN not in message and PASSWORD not in message
    assert message.startswith(("hub.yml: ", "environment variable "))


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:pw@db/hub", "postgresql://u:***@db/hub"),
        ("postgresql://u:p@w@db/hub", "postgresql://u:***@db/hub"),
        ("mysql://u@db/hub?password=pw&charset=utf8", "mysql://u@db/hub?password=***&charset=utf8"),
        ("sqlite:///hub.db", "sqlite:///hub.db"),
    ],
)
def test_redact_url(url, shown):
    assert redact_url(url) == shown


# ---------------------------------------------------------------- dynamic accounts and the hub's Kubernetes access


KEY = "kH0g1L0OQ3u6s0v9yQqfX8H6yPzCkqZb3n1m2o4p5r8="  # a well-formed Fernet key, made for this test


def test_dynamic_accounts_defaults_are_the_seeds():
    config = load_hub_config(None, environ={})
    d = config.dynamic_accounts
    assert (d.retry_frequency_seconds, d.max_retries, d.agent_timeout_seconds) == (5, 3, 15)
    assert d.encryption_key.get_secret_value() == "" and not d.interceptor.enabled and d.name_patterns == ()
    assert (config.kubernetes.kubeconfig_file, config.kubernetes.context, config.kubernetes.namespace) == (
        None,
        None,
        None,
    )


def test_dynamic_accounts_and_kubernetes_sections(tmp_path):
    (tmp_path / "kubeconfig").write_text("apiVersion: v1\n")
    config = load(
        tmp_path,
        f"""\
        dynamicAccounts:
          retryFrequencySeconds: 0.5
          maxRetries: 0
          agentTimeoutSeconds: 30
          encryptionKey: {KEY}
          interceptor:
            enabled: true
          namePatterns: ['^prod-.*', 'staging']
        kubernetes:
          kubeconfigFile: kubeconfig
          context: admin
          namespace: spinnaker
        """,
    )
    d = config.dynamic_accounts
    assert (d.retry_frequency_seconds, d.max_retries, d.agent_timeout_seconds) == (0.5, 0, 30)
    assert d.encryption_key.get_secret_value() == KEY and KEY not in repr(config) and KEY not in str(config)
    assert d.interceptor.enabled and d.name_patterns == ("^prod-.*", "staging")
    k = config.kubernetes
    assert (k.kubeconfig_file, k.context, k.namespace) == (tmp_path / "kubeconfig", "admin", "spinnaker")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "dynamicAccounts:\n  retryFrequencySeconds: 0\n",
            "dynamicAccounts.retryFrequencySeconds: must be greater than 0, got 0",
        ),
        ("dynamicAccounts:\n  maxRetries: -1\n", "dynamicAccounts.maxRetries: must be at least 0, got -1"),
        # the section holds a secret (encryptionKey): no value of it is shown
        ("dynamicAccounts:\n  maxRetries: '3'\n", "dynamicAccounts.maxRetries: expected an integer, got a string"),
        (
            "dynamicAccounts:\n  encryptionKey: hunter2\n",
            "dynamicAccounts.encryptionKey: the encryption key is not a Fernet key: it must be 32 random bytes in URL-safe "
            "base64 (44 characters ending in '='), e.g. from `scale-agent accounts generate-key`; the value is not shown",
        ),
        ("dynamicAccounts:\n  encryptionKey: 12\n", "dynamicAccounts.encryptionKey: expected a string, got an integer"),
        (
            "dynamicAccounts:\n  namePatterns: ['prod-(']\n",
            "dynamicAccounts.namePatterns[0]: 'prod-(' is not a regular expression: missing ), unterminated subpattern at "
            "position 5",
        ),
        (
            "dynamicAccounts:\n  retryFrequency: 5\n",
            "dynamicAccounts.retryFrequency: unknown key (did you mean 'retryFrequencySeconds'?)",
        ),
        (
            "kubernetes:\n  kubeconfigFile: missing.yml\n",
            "kubernetes.kubeconfigFile: <dir>/missing.yml: the file does not exist",
        ),
        (
            "kubernetes:\n  context: admin\n",
            "kubernetes.context: only applies with kubeconfigFile (the in-cluster service account has no contexts)",
        ),
        (
            "kubernetes:\n  namespace: Spinnaker\n",
            "kubernetes.namespace: 'Spinnaker' is not a namespace name: use at most 63 lowercase letters, digits and '-', "
            "starting and ending with a letter or digit",
        ),
    ],
)
def test_dynamic_accounts_validation_errors(tmp_path, text, expected):
    assert error_of(tmp_path, text) == f"hub.yml: {expected}"


def test_dynamic_accounts_from_the_environment():
    config = load_hub_config(
        None,
        environ={
            "SCALE_AGENT_HUB_DYNAMIC_ACCOUNTS__MAX_RETRIES": "7",
            "SCALE_AGENT_HUB_DYNAMIC_ACCOUNTS__INTERCEPTOR__ENABLED": "true",
            "SCALE_AGENT_HUB_KUBERNETES__NAMESPACE": "spinnaker",
        },
    )
    assert config.dynamic_accounts.max_retries == 7 and config.dynamic_accounts.interceptor.enabled
    assert config.kubernetes.namespace == "spinnaker"


def test_agents_proving_nothing_beyond_loopback_are_refused_unless_said_on_purpose():
    from scaleagent.hub.config import HubConfig

    base = {"server": {"host": "0.0.0.0", "httpHost": "127.0.0.1"}, "grpc": {"allowPlaintext": True}}
    with pytest.raises(ValidationError) as info:
        HubConfig.model_validate(base)
    assert "agents would connect to 0.0.0.0 proving nothing" in str(info.value)
    assert HubConfig.model_validate({**base, "auth": {"token": "t" * 32}}).auth.token.get_secret_value()
    assert HubConfig.model_validate({**base, "grpc": {"allowPlaintext": True, "allowAnonymousAgents": True}})
    assert HubConfig.model_validate({"server": {"host": "127.0.0.1"}})  # loopback: only this machine


def test_the_http_api_may_listen_apart_from_the_grpc_port():
    from scaleagent.hub.config import HubConfig

    open_grpc = {"allowPlaintext": True, "allowAnonymousAgents": True}
    both = HubConfig.model_validate(
        {"server": {"host": "0.0.0.0"}, "auth": {"anonymous": True}, "grpc": open_grpc}
    ).server
    assert both.http_address == "0.0.0.0"
    apart = HubConfig.model_validate({"server": {"host": "0.0.0.0", "httpHost": "127.0.0.1"}, "grpc": open_grpc}).server
    assert (apart.host, apart.http_address) == ("0.0.0.0", "127.0.0.1")
