"""The hub's configuration file, validated into frozen models.

`load_hub_config(path)` reads a YAML file (or nothing: every setting has a default), applies
`SCALE_AGENT_HUB_*` environment overrides and returns a `HubConfig`; `HubConfig.with_overrides()`
applies the command-line options on top, with the same checks. Reading, messages and overrides
come from `scaleagent.configfile`, shared with the agent: the same mistakes get the same messages
in both programs (file or variable, key path, what is wrong, "did you mean").

Files named here (TLS) must exist when the configuration is loaded, because the hub needs them
to start listening: a wrong path is reported with its key rather than as a TLS failure.
Secrets (the agents' token, a password in the database URL) never appear in `repr()`, `str()` or
an error message. See docs/hub-config.md for the user-facing reference.
"""

from __future__ import annotations

import logging
import os
import re
import socket
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar, Self

from pydantic import (
    Field,
    SecretStr,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ..configfile import (
    ConfigError,
    ConfigFormat,
    ConfigModel,
    ReloadConfig,
    describe,
    invalid,
    is_host,
    is_loopback,
    readable_file,
    regular_expressions,
    secret_text,
    to_path,
)
from .accounts.errors import EncryptionKeyError
from .accounts.secrets_box import parse_keys
from .auth.settings import AgentIdentityConfig, normalize_permissions, normalize_roles
from .store.urls import check_database_url, redact_url

__all__ = [
    "DEFAULT_DATABASE_URL",
    "ENV_PREFIX",
    "AgentIdentityConfig",
    "AgentsAuthConfig",
    "AuthConfig",
    "ConfigError",
    "DatabaseConfig",
    "DynamicAccountsConfig",
    "FailedLoginsConfig",
    "GrpcConfig",
    "HttpConfig",
    "HttpTlsConfig",
    "HubConfig",
    "InterceptorConfig",
    "KubernetesConfig",
    "OperationsConfig",
    "ReplicasConfig",
    "ServerConfig",
    "SessionsConfig",
    "TlsConfig",
    "TokenReviewConfig",
    "UsersAndGroupsConfig",
    "is_loopback",
    "load_hub_config",
    "normalize_permissions",
    "normalize_roles",
]

ENV_PREFIX = "SCALE_AGENT_HUB_"
"""Environment variables starting with this override the hub's settings (`..._SERVER__GRPC_PORT`)."""

DEFAULT_DATABASE_URL = "sqlite:///scale-agent-hub.db"
"""An SQLite file in the working directory: a single hub works without any database setup."""


log = logging.getLogger("scaleagent.hub.config")

_DNS_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_REPLICA_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,251}[A-Za-z0-9])?")
# SQLAlchemy's own URL grammar (sqlalchemy.engine.url), so that what passes here parses there.


class TlsConfig(ConfigModel):
    """TLS for the gRPC port; with `clientCaFile`, agents must present a certificate (mTLS)."""

    ca_without_tls: ClassVar[str] = (
        "needs certFile and keyFile: client certificates (mTLS) are only checked on a TLS port"
    )

    cert_file: Path | None = None
    key_file: Path | None = None
    client_ca_file: Path | None = None

    @field_validator("cert_file", "key_file", "client_ca_file", mode="before")
    @classmethod
    def _files(cls, value: Any, info: ValidationInfo) -> Path | None:
        return readable_file(value, info)

    @model_validator(mode="after")
    def _together(self) -> Self:
        if self.cert_file is not None and self.key_file is None:
            raise invalid("required when certFile is set (a certificate needs its private key)", "keyFile")
        if self.key_file is not None and self.cert_file is None:
            raise invalid("required when keyFile is set (a private key needs its certificate)", "certFile")
        if self.client_ca_file is not None and self.cert_file is None:
            raise invalid(self.ca_without_tls, "clientCaFile")
        return self

    @property
    def enabled(self) -> bool:
        """Whether the port serves TLS (otherwise it is plaintext)."""
        return self.cert_file is not None


class HttpTlsConfig(TlsConfig):
    """TLS for the HTTP API; with `clientCaFile`, callers may log in with a client certificate
    (its subject's CN is the user, its O values the groups). A certificate is asked for, not
    required: callers with a token still connect."""

    ca_without_tls: ClassVar[str] = "needs certFile and keyFile: client certificates are only asked for over TLS"


class ServerConfig(ConfigModel):
    """Where the hub listens: gRPC for agents, HTTP for the REST API, health and metrics."""

    host: StrictStr = "127.0.0.1"
    # The HTTP API's own address when it differs from `host`: accepting remote agents on gRPC
    # need not expose every cluster's objects over HTTP too.
    http_host: StrictStr | None = None
    grpc_port: StrictInt = Field(9091, ge=0, le=65535)
    http_port: StrictInt = Field(7002, ge=0, le=65535)
    replica_name: StrictStr = Field("", validate_default=True)
    # Host header values the HTTP API answers besides loopback names and its own address (a
    # browser pointed at a rebinding DNS name must not reach it); '*' accepts any.
    allowed_hosts: tuple[StrictStr, ...] = ()
    # Web origins ('https://spinnaker.example.com') whose pages may call the API (CORS); without
    # any, a request sent by a page of another origin is refused.
    allowed_origins: tuple[StrictStr, ...] = ()
    http_tls: HttpTlsConfig = Field(default_factory=lambda: HttpTlsConfig())

    @property
    def http_address(self) -> str:
        """Where the HTTP API listens: `httpHost`, or `host` when it is not set."""
        return self.http_host or self.host

    @field_validator("host", "http_host")
    @classmethod
    def _host(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not is_host(value):
            raise invalid(
                f"{value!r} is not a host name or IP address "
                "(give the ports separately, in server.grpcPort and server.httpPort)"
            )
        return value

    @field_validator("allowed_hosts")
    @classmethod
    def _allowed_hosts(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for i, host in enumerate(value):
            name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host.strip("[]")
            if host != "*" and not is_host(name):
                raise invalid(f"{host!r} is not a host name, host:port or '*'", i)
        return tuple(h.lower() for h in value)

    @field_validator("allowed_origins")
    @classmethod
    def _allowed_origins(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        from urllib.parse import urlsplit

        for i, origin in enumerate(value):
            parts = urlsplit(origin)
            if parts.scheme not in ("http", "https") or not parts.hostname or parts.path or parts.query:
                raise invalid(f"{origin!r} is not an origin such as https://spinnaker.example.com (no path)", i)
        return tuple(o.lower().rstrip("/") for o in value)

    @field_validator("replica_name")
    @classmethod
    def _replica_name(cls, value: str) -> str:
        """Empty means the host name, which differs between replicas without any setting."""
        name = value or socket.gethostname()
        if not _REPLICA_NAME.fullmatch(name):
            raise invalid(
                f"{name!r} is not a valid replica name: use 1-253 letters, digits, '-', '_' or '.', "
                "starting and ending with a letter or digit"
            )
        return name

    @model_validator(mode="after")
    def _distinct_ports(self) -> ServerConfig:
        if self.grpc_port and self.grpc_port == self.http_port:
            raise invalid(f"{self.http_port} is also server.grpcPort: give each its own port (or 0)", "httpPort")
        return self


class TokenReviewConfig(ConfigModel):
    """Log in with a Kubernetes bearer token (a user's, or a ServiceAccount's from `kubectl create
    token`), checked by a TokenReview against the hub's own cluster (the `kubernetes` section)."""

    enabled: StrictBool = False
    # The audiences the token must be for; empty means the API server's own.
    audiences: tuple[StrictStr, ...] = ()
    # How long an answer is remembered, so that each request does not cost a review.
    cache_seconds: StrictFloat = Field(10.0, ge=0, le=600)


class FailedLoginsConfig(ConfigModel):
    """Failed HTTP logins (an invalid bearer token) allowed per client address in a window; past
    them, that address's logins get 429 until the window ends. Each may cost a TokenReview."""

    limit: StrictInt = Field(10, ge=1, le=1_000_000)
    window_seconds: StrictFloat = Field(60.0, gt=0, le=86_400)


class UsersAndGroupsConfig(ConfigModel):
    """Who holds a role: user names and group names."""

    users: tuple[StrictStr, ...] = ()
    groups: tuple[StrictStr, ...] = ()

    @field_validator("users", mode="before")
    @classmethod
    def _users(cls, value: Any) -> Any:
        return normalize_roles(value) if value is not None else ()

    @field_validator("groups", mode="before")
    @classmethod
    def _groups(cls, value: Any) -> Any:
        return normalize_roles(value) if value is not None else ()


class AgentsAuthConfig(ConfigModel):
    """Agent identities and what each may serve (docs/security.md). With none, any agent that
    passes the gRPC port's checks (token, mTLS) may claim any zone and account, as before."""

    identities: tuple[AgentIdentityConfig, ...] = ()
    # A YAML file with more identities (a list in the same shape), read again when it changes.
    identities_file: Path | None = None
    # Live sessions one identity may hold at once, across this replica.
    max_sessions_per_identity: StrictInt = Field(20, ge=1, le=100_000)

    @field_validator("identities_file", mode="before")
    @classmethod
    def _file(cls, value: Any, info: ValidationInfo) -> Path | None:
        return readable_file(value, info)

    @model_validator(mode="after")
    def _unique(self) -> AgentsAuthConfig:
        seen: set[str] = set()
        for i, identity in enumerate(self.identities):
            if identity.name in seen:
                raise invalid(f"identity {identity.name!r} is listed twice", "identities", i, "name")
            seen.add(identity.name)
        return self

    @property
    def enabled(self) -> bool:
        return bool(self.identities) or self.identities_file is not None


class AuthConfig(ConfigModel):
    """Who may call the HTTP API and what they may do, and how agents prove who they are.

    `token` is the one bearer token every agent sends (Armory's); `agents` gives each agent its
    own identity instead. The HTTP API authenticates with any of `tokenReview`,
    `staticTokensFile` and client certificates (`server.httpTls.clientCaFile`); `anonymous`
    opens it to anyone who reaches it, which must be said explicitly when it listens beyond
    loopback."""

    token: SecretStr = SecretStr("")
    anonymous: StrictBool | None = None
    token_review: TokenReviewConfig = Field(default_factory=TokenReviewConfig)
    # A YAML list of {name, groups, tokenHash}, read again when it changes.
    static_tokens_file: Path | None = None
    admins: UsersAndGroupsConfig = Field(default_factory=UsersAndGroupsConfig)
    # For accounts that name no permissions of their own; with none here either, every
    # authenticated caller may read and write them (Spinnaker's rule for unrestricted accounts).
    default_permissions: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    # How long an authorization decision about one caller and account is remembered.
    decision_cache_seconds: StrictFloat = Field(5.0, ge=0, le=600)
    failed_logins: FailedLoginsConfig = Field(default_factory=FailedLoginsConfig)
    agents: AgentsAuthConfig = Field(default_factory=AgentsAuthConfig)

    @field_validator("token", mode="before")
    @classmethod
    def _type(cls, value: Any) -> Any:
        return secret_text(value)

    @field_validator("token")
    @classmethod
    def _header_safe(cls, value: SecretStr) -> SecretStr:
        """Agents send it in an HTTP/2 header: a stray newline (from a YAML block) would only
        show up later as every agent being refused."""
        if not all("!" <= c <= "~" for c in value.get_secret_value()):
            raise invalid(
                "must be printable ASCII without spaces or line breaks (it is sent in a header); the value is not shown"
            )
        return value

    @field_validator("static_tokens_file", mode="before")
    @classmethod
    def _file(cls, value: Any, info: ValidationInfo) -> Path | None:
        return readable_file(value, info)

    @field_validator("default_permissions", mode="before")
    @classmethod
    def _permissions(cls, value: Any) -> Any:
        return normalize_permissions(value)

    def methods(self, http_tls: HttpTlsConfig) -> list[str]:
        """The HTTP authentication methods configured, by name."""
        found = []
        if self.token_review.enabled:
            found.append("tokenReview")
        if self.static_tokens_file is not None:
            found.append("staticTokensFile")
        if http_tls.client_ca_file is not None:
            found.append("clientCertificates")
        return found


class DatabaseConfig(ConfigModel):
    """The SQL database the replicas share (accounts); `url` is a SQLAlchemy URL."""

    holds_secret = True  # the URL may carry a password: values here never appear in messages

    url: StrictStr = DEFAULT_DATABASE_URL

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        check_database_url(value)
        return value

    def __repr_args__(self) -> Iterator[tuple[str, Any]]:
        """The URL without its password, so that logging the config cannot leak it."""
        yield "url", redact_url(self.url)


class SessionsConfig(ConfigModel):
    """What happens to an agent's accounts when its connection drops."""

    grace_seconds: StrictFloat = Field(60.0, ge=0)


class OperationsConfig(ConfigModel):
    """Operations sent to agents (POST /kubernetes/ops) and the tasks that report them."""

    # Armory's kubesvc.operationWaitMs: how long one operation may take, agent and cache included.
    operation_wait_ms: StrictInt = Field(30_000, ge=100, le=3_600_000)
    # Finished tasks kept for GET /task/{id}; the oldest go first.
    max_tasks: StrictInt = Field(10_000, ge=1)


class GrpcConfig(ConfigModel):
    """Limits of the gRPC server."""

    max_message_bytes: StrictInt = Field(16 * 1024 * 1024, ge=1024, le=256 * 1024 * 1024)
    keep_alive_seconds: StrictInt = Field(30, ge=0)
    # Streams that reached the hub and wait for its event loop to take them (agents connecting at
    # once: a restarted hub, a failover). gRPC's own default refuses some beyond 1,000 and all
    # beyond 3,000, silently: at 2,000 agents connecting at once a quarter were turned away. Each
    # waiting stream holds about 16 KiB; beyond this many, new ones are refused (the agent retries).
    max_pending_calls: StrictInt = Field(10_000, ge=1, le=1_000_000)
    # Plaintext gRPC on an address beyond loopback carries kubeconfigs and Secret values in
    # operations in the clear: refused unless said here (e.g. behind a mesh that encrypts).
    allow_plaintext: StrictBool = False
    # Agents proving nothing (no token, no identity, no client certificate) on an address beyond
    # loopback could feed the cache anything and receive operations: refused unless said here.
    allow_anonymous_agents: StrictBool = False
    # A connection that has not finished its TLS handshake and sent HTTP/2's preface and first
    # SETTINGS by then is closed (gRPC's own default: 120 s), so that connections that never
    # speak cannot hold the hub's descriptors. Generous for an agent: thousands of agents
    # reconnecting at once complete their handshakes within a few seconds.
    handshake_seconds: StrictFloat = Field(20.0, gt=0, le=600)


class HttpConfig(ConfigModel):
    """Limits of the HTTP API's server on its connections, so that clients that connect and say
    nothing (or say it a byte at a time) cannot hold its descriptors."""

    # A connection must send a whole request head (request line and headers) within this long of
    # connecting or of starting its next request; otherwise it is closed.
    request_head_seconds: StrictFloat = Field(10.0, gt=0, le=600)
    # A kept-alive connection with no request under way is closed after this long.
    keep_alive_seconds: StrictInt = Field(5, ge=1, le=3600)
    # Connections open at once (long-lived watches included); one beyond is closed on arrival.
    max_connections: StrictInt = Field(1000, ge=1, le=1_000_000)


class KubernetesConfig(ConfigModel):
    """The hub's own access to Kubernetes: where it reads the Secrets that `encryptedFile:`
    kubeconfig references name. Without `kubeconfigFile`, the hub uses its in-cluster service
    account (when it runs in a pod). Nothing is read until a reference needs it, so a hub that
    never resolves one needs no access at all."""

    kubeconfig_file: Path | None = None
    context: StrictStr | None = None
    namespace: StrictStr | None = None

    @field_validator("kubeconfig_file", mode="before")
    @classmethod
    def _file(cls, value: Any, info: ValidationInfo) -> Path | None:
        return readable_file(value, info)

    @field_validator("context", "namespace", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return None if value == "" else value

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str | None) -> str | None:
        if value is not None and not _DNS_LABEL.fullmatch(value):
            raise invalid(
                f"{value!r} is not a namespace name: use at most 63 lowercase letters, digits and '-', "
                "starting and ending with a letter or digit"
            )
        return value

    @model_validator(mode="after")
    def _context_needs_file(self) -> KubernetesConfig:
        if self.context is not None and self.kubeconfig_file is None:
            raise invalid(
                "only applies with kubeconfigFile (the in-cluster service account has no contexts)", "context"
            )
        return self


class InterceptorConfig(ConfigModel):
    """Clouddriver Account Management interception: with `enabled`, `POST/PUT/DELETE /credentials`
    of Kubernetes accounts create, change and delete dynamic accounts (hub/credentials.py)."""

    enabled: StrictBool = False


class DynamicAccountsConfig(ConfigModel):
    """Accounts created and migrated through the REST API (`/armory/accounts`): retries of failed
    ones, the key that encrypts their kubeconfigs at rest, and automatic migration: interception
    of Clouddriver's Account Management requests, and every `scanFrequencySeconds` a scan that
    migrates stored definitions whose names match one of `namePatterns` (whole-name matches)."""

    retry_frequency_seconds: StrictFloat = Field(5.0, gt=0)
    max_retries: StrictInt = Field(3, ge=0)
    agent_timeout_seconds: StrictFloat = Field(15.0, gt=0)
    encryption_key: SecretStr = SecretStr("")
    interceptor: InterceptorConfig = Field(default_factory=InterceptorConfig)
    name_patterns: tuple[StrictStr, ...] = ()
    scan_frequency_seconds: StrictFloat = Field(30.0, gt=0)
    # Directories on the hub under which an account's `kubeconfigFile` may name a file; none by
    # default, so that API callers can only use `encryptedFile:` references.
    kubeconfig_directories: tuple[Path, ...] = ()

    @field_validator("kubeconfig_directories", mode="before")
    @classmethod
    def _directories(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            return ()
        if not isinstance(value, list | tuple):
            raise invalid(f"expected a list of directories, got {describe(value)}")
        return tuple(to_path(v, info) for v in value)

    @field_validator("encryption_key", mode="before")
    @classmethod
    def _key_type(cls, value: Any) -> Any:
        return secret_text(value)

    @field_validator("encryption_key")
    @classmethod
    def _key_format(cls, value: SecretStr) -> SecretStr:
        """Checked now, not at the first kubeconfig: a wrong key must stop the hub at start."""
        if value.get_secret_value():
            try:
                parse_keys(value.get_secret_value())
            except EncryptionKeyError as e:
                raise invalid(str(e)) from None
        return value

    @field_validator("name_patterns")
    @classmethod
    def _patterns(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return regular_expressions(value)


class StaticPeerConfig(ConfigModel):
    """One other hub replica, for `replicas.cluster: static`."""

    id: StrictStr
    base_url: StrictStr

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if not _REPLICA_NAME.fullmatch(value):
            raise invalid(f"{value!r} is not a valid replica name (its server.replicaName)")
        return value

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, value: str) -> str:
        return check_base_url(value)


class ReplicasKubernetesConfig(ConfigModel):
    """Discovery of the other replicas through the Endpoints of the hub's Service (Armory's
    `kubesvc.cluster-kubernetes`): names starting with `clouddriverServiceNamePrefix`, the port
    named `httpPortName`. Without `kubeconfigFile`, the pod's service account."""

    kubeconfig_file: Path | None = None
    verify_ssl: StrictBool = True
    namespace: StrictStr | None = None
    http_port_name: StrictStr = "http"
    clouddriver_service_name_prefix: StrictStr = "spin-clouddriver"
    use_dns: StrictBool = False
    domain_name: StrictStr = "cluster.local"
    fail_fast: StrictBool = False

    @field_validator("kubeconfig_file", mode="before")
    @classmethod
    def _file(cls, value: Any, info: ValidationInfo) -> Path | None:
        return readable_file(value, info)

    @field_validator("namespace", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return None if value == "" else value


class HeartbeatConfig(ConfigModel):
    """How often a replica says it is alive (Armory's `kubesvc.heartbeat.period`, 60 s); one that
    misses `missedPeriods` periods is dead, and the others take its accounts and end its tasks."""

    period_seconds: StrictFloat = Field(60.0, ge=0.2, le=3600)
    missed_periods: StrictInt = Field(3, ge=2, le=100)


class ReplicasConfig(ConfigModel):
    """Hub replicas (docs/ha.md). `cluster` (Armory's `kubesvc.cluster`): `none` (one replica),
    `kubernetes` (peers from Endpoints) or `static` (peers listed in `static`). Replicas share
    PostgreSQL or MySQL/MariaDB; `baseUrl` is how the others reach this replica's HTTP API."""

    cluster: StrictStr = "none"
    base_url: StrictStr = ""
    # Shared by the replicas: proves a forwarded request comes from one of them (needed when
    # HTTP callers log in). Give it through the environment, like other secrets.
    token: SecretStr = SecretStr("")
    heartbeat: HeartbeatConfig = Field(default_factory=HeartbeatConfig)
    kubernetes: ReplicasKubernetesConfig = Field(default_factory=ReplicasKubernetesConfig)
    static: tuple[StaticPeerConfig, ...] = ()

    @field_validator("cluster")
    @classmethod
    def _cluster(cls, value: str) -> str:
        if value not in ("none", "kubernetes", "static"):
            raise invalid(f"{value!r} is not one of none, kubernetes, static")
        return value

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, value: str) -> str:
        return check_base_url(value) if value else value

    @field_validator("token", mode="before")
    @classmethod
    def _token(cls, value: Any) -> Any:
        return secret_text(value)

    @model_validator(mode="after")
    def _static_peers(self) -> ReplicasConfig:
        if self.static and self.cluster != "static":
            raise invalid(f"lists peers, but cluster is {self.cluster!r}: set cluster: static to use them", "static")
        seen: set[str] = set()
        for i, peer in enumerate(self.static):
            if peer.id in seen:
                raise invalid(f"replica {peer.id!r} is listed twice", "static", i, "id")
            seen.add(peer.id)
        return self

    @property
    def enabled(self) -> bool:
        return self.cluster != "none"


def check_base_url(value: str) -> str:
    """An http(s) URL of a replica's HTTP API, without a path; returned without a trailing slash."""
    from urllib.parse import urlsplit

    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path.strip("/") or parts.query:
        raise invalid(f"{value!r} is not a base URL such as http://10.0.15.246:7002 (scheme, host, port; no path)")
    try:
        parts.port  # noqa: B018 - urlsplit checks the port only when asked for it
    except ValueError:
        raise invalid(f"{value!r}: the port must be a number from 0 to 65535") from None
    return value.rstrip("/")


class HubConfig(ConfigModel):
    """The whole hub configuration."""

    server: ServerConfig = Field(default_factory=ServerConfig)
    tls: TlsConfig = Field(default_factory=TlsConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    database: DatabaseConfig = Field(default_factory=DatabaseConfig)
    sessions: SessionsConfig = Field(default_factory=SessionsConfig)
    grpc: GrpcConfig = Field(default_factory=GrpcConfig)
    http: HttpConfig = Field(default_factory=HttpConfig)
    operations: OperationsConfig = Field(default_factory=OperationsConfig)
    kubernetes: KubernetesConfig = Field(default_factory=KubernetesConfig)
    dynamic_accounts: DynamicAccountsConfig = Field(default_factory=DynamicAccountsConfig)
    replicas: ReplicasConfig = Field(default_factory=ReplicasConfig)
    reload: ReloadConfig = Field(default_factory=ReloadConfig)

    @model_validator(mode="after")
    def _never_open_by_accident(self) -> HubConfig:
        if not is_loopback(self.server.http_address) and not self.auth.methods(self.server.http_tls):
            if self.auth.anonymous is not True:
                raise invalid(
                    f"the HTTP API listens on {self.server.http_address}, beyond loopback, with no way to log in: "
                    "configure auth.tokenReview, auth.staticTokensFile or client certificates "
                    "(server.httpTls.clientCaFile), or set auth.anonymous: true to let anyone who reaches it "
                    "do anything (docs/security.md)",
                    "auth",
                )
        if self.auth.anonymous and self.auth.methods(self.server.http_tls):
            raise invalid(
                f"is true, but {', '.join(self.auth.methods(self.server.http_tls))} is configured: "
                "choose anonymous access or logins, not both",
                "auth",
                "anonymous",
            )
        agents_prove = (
            bool(self.auth.token.get_secret_value()) or self.auth.agents.enabled or self.tls.client_ca_file is not None
        )
        if not is_loopback(self.server.host) and not agents_prove and not self.grpc.allow_anonymous_agents:
            raise invalid(
                f"agents would connect to {self.server.host} proving nothing, and anyone who reaches the port could "
                "stream fake objects and receive operations: give auth.token (e.g. SCALE_AGENT_HUB_AUTH__TOKEN), "
                "auth.agents.identities or tls.clientCaFile, or set grpc.allowAnonymousAgents: true on purpose",
                "auth",
                "token",
            )
        if not is_loopback(self.server.host) and not self.tls.enabled and not self.grpc.allow_plaintext:
            raise invalid(
                f"agents would connect to {self.server.host} in plaintext, and operations carry kubeconfigs and "
                "Secret values: give tls.certFile and tls.keyFile, or set grpc.allowPlaintext: true if the "
                "network encrypts for you (a service mesh)",
                "tls",
                "certFile",
            )
        return self

    @model_validator(mode="after")
    def _replicas_prove_themselves(self) -> HubConfig:
        if self.replicas.enabled and self.http_auth and not self.replicas.token.get_secret_value():
            raise invalid(
                "is needed when HTTP callers log in: the replicas forward requests on their callers' behalf, "
                "and prove they are replicas with this shared secret (e.g. SCALE_AGENT_HUB_REPLICAS__TOKEN)",
                "replicas",
                "token",
            )
        return self

    @property
    def http_auth(self) -> bool:
        """Whether HTTP callers must log in (otherwise anyone who reaches the port is admin)."""
        return bool(self.auth.methods(self.server.http_tls))

    @model_validator(mode="after")
    def _replicas_share_a_server_database(self) -> HubConfig:
        if self.replicas.enabled and self.database.url.startswith("sqlite"):
            raise invalid(
                f"is {self.replicas.cluster!r}, but the database is an SQLite file, which replicas cannot share: "
                "give database.url a PostgreSQL or MySQL/MariaDB server (or set replicas.cluster: none)",
                "replicas",
                "cluster",
            )
        return self

    def with_overrides(
        self,
        *,
        grpc_port: int | None = None,
        http_port: int | None = None,
        database_url: str | None = None,
    ) -> HubConfig:
        """A new config with the command-line options `--grpc-port`, `--http-port` and `--db`
        applied (None = not given); they win over the file and the environment, and are checked
        like them. Raises ConfigError naming the option."""
        given: dict[tuple[str, ...], tuple[Any, str]] = {
            ("server", "grpcPort"): (grpc_port, "command-line option --grpc-port"),
            ("server", "httpPort"): (http_port, "command-line option --http-port"),
            ("database", "url"): (database_url, "command-line option --db"),
        }
        changes = {loc: change for loc, change in given.items() if change[0] is not None}
        return _FORMAT.revise(self, changes) if changes else self


_FORMAT = ConfigFormat(
    root=HubConfig,
    env_prefix=ENV_PREFIX,
    env_example="SERVER__GRPC_PORT",
    logger=log,
)


def load_hub_config(path: Path | None, environ: Mapping[str, str] = os.environ) -> HubConfig:
    """Read and validate the hub's configuration file, or only defaults and the environment when
    `path` is None; relative paths in the file resolve against its directory. Raises ConfigError."""
    if path is None:
        return _FORMAT.parse("", source="hub configuration (no file)", environ=environ)
    return _FORMAT.load(path, environ)


def parse_hub_config(text: str, path: Path, environ: Mapping[str, str] = os.environ) -> HubConfig:
    """The text of the file at `path` (read already, by the reloader), as `load_hub_config` reads it."""
    return _FORMAT.parse(text, source=str(path), base_dir=Path(os.path.abspath(path)).parent, environ=environ)
