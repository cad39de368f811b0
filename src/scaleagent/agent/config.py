"""The agent's configuration file (`armory-agent.yml`-compatible), validated into frozen models.

`load_config(path)` reads a YAML file, applies `SCALE_AGENT_*` environment overrides and returns an
`AgentConfig`; `parse_config(text)` does the same for text already in memory. Every problem is
reported as a `ConfigError` whose `str()` is a complete, human message naming the source (file or
environment variable), the key path (`kubernetes.accounts[1].omitKinds`) and what is wrong; all
problems found in one pass are reported together, one per line.

The reading, the messages and the overrides are shared with the hub (`scaleagent.configfile`);
this module holds what is the agent's own: its models, account and kind rules, and the Armory
settings that a migrated file may still contain (ignored with a warning).

The YAML keys are camelCase (as in Armory's Scale Agent); the Python attributes are snake_case.
The hub token is a `SecretStr`: it never appears in `repr()`, `str()` or any error message.
See docs/agent-config.md for the user-facing reference.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    AliasChoices,
    Field,
    SecretStr,
    SkipValidation,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from ..configfile import (
    MAX_CONFIG_BYTES,
    ConfigError,
    ConfigFormat,
    ConfigModel,
    ReloadConfig,
    _read_yaml,  # the same safe reading as a configuration file's
    describe,
    invalid,
    is_host,
    normalize_permissions,
    secret_text,
    split_host_port,
    to_path,
)
from ..kube.credentials import CONTENT_SOURCE, SERVICE_ACCOUNT_DIR_ENV, check_kubeconfig
from ..kube.errors import CredentialsError

__all__ = [
    "AccountConfig",
    "DYNAMIC_PROPERTIES",
    "DynamicAccountConfig",
    "AgentConfig",
    "AuthConfig",
    "ClouddriverConfig",
    "ConfigError",
    "ENV_PREFIX",
    "KubernetesConfig",
    "MAX_CONFIG_BYTES",
    "NON_CONFIG_ENV_PREFIXES",
    "NON_CONFIG_ENV_VARS",
    "ServerConfig",
    "TasksConfig",
    "TlsConfig",
    "dynamic_account",
    "load_config",
    "parse_config",
]

ENV_PREFIX = "SCALE_AGENT_"
"""Environment variables starting with this override configuration values (see `parse_config`)."""

NON_CONFIG_ENV_VARS = frozenset(
    {
        "SCALE_AGENT_EXTRA_KUBECTLS",
        "SCALE_AGENT_HUB",
        "SCALE_AGENT_TOKEN",
        "SCALE_AGENT_CONFIG",
        SERVICE_ACCOUNT_DIR_ENV,
    }
)
"""`SCALE_AGENT_*` variables that belong to the project's tooling, not to the configuration:
SCALE_AGENT_HUB, SCALE_AGENT_TOKEN and SCALE_AGENT_CONFIG are the CLI's hub address, login and
credentials file (docs/cli.md), set once in a shell that may also run an agent."""

NON_CONFIG_ENV_PREFIXES = ("SCALE_AGENT_E2E_", "SCALE_AGENT_HUB_")
"""Prefixes of `SCALE_AGENT_*` variables that are not the agent's settings: the e2e tests' and the
hub's (`scaleagent.hub.config`), which may be set in the same environment (the demo, a pod)."""

log = logging.getLogger("scaleagent.agent.config")

_ACCOUNT_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,251}[A-Za-z0-9])?")
_DNS_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_KIND = re.compile(r"[A-Za-z][A-Za-z0-9]{0,62}")
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"  # a DNS label, any case
_GROUP = re.compile(rf"(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*")


def _check_kind(value: str, *, need_group: bool) -> str:
    kind, dot, group = value.partition(".")
    if not _KIND.fullmatch(kind) or (dot and not _GROUP.fullmatch(group)):
        raise invalid(
            f"{value!r} is not a kind: expected a singular kind such as 'Deployment', "
            "optionally with its API group ('Widget.example.com')"
        )
    if need_group and not dot:
        raise invalid(f"{value!r} has no API group: custom resources are named 'Kind.group', e.g. 'Widget.example.com'")
    return value


# --- the models -----------------------------------------------------------------------------------


class AccountConfig(ConfigModel):
    """One Kubernetes cluster ("account") to watch."""

    # Settings of Armory's agent or of Clouddriver's Kubernetes accounts that this implementation
    # does not have (here and in the sections below): a migrated file still loads, with a warning.
    section = "kubernetes.accounts[]"
    ignored_keys = frozenset(
        {
            "requiredGroupMembership",
            "providerVersion",
            "dockerRegistries",
            "configureImagePullSecrets",
            "cacheThreads",
            "cachingPolicies",
            "primaryAccount",
            "environment",
            "namingStrategy",
            "liveManifestCalls",
            "checkPermissionsOnStartup",
            "cacheIntervalSeconds",
            "kubectlExecutable",
            "kubectlRequestTimeoutSeconds",
        }
    )
    ignored_reasons = {
        "oAuthScopes": "the gcp auth provider's scopes: kubeconfigs use an exec credential plugin instead "
        "(gke-gcloud-auth-plugin), which Scale Agent runs",
        "onlySpinnakerManaged": "a Clouddriver setting that Armory's agent does not implement either; "
        "every object is followed",
        "metrics": "pod metrics are not collected: the hub has no consumer for them",
        "maxResumableResourceAgeMs": "the agent keeps no resume point across reconnects: it relists and "
        "the hub reconciles the snapshot (mark and sweep), so no stale resume is possible",
        "serviceAccountName": "the pod's service account is chosen by the pod spec, not by the agent",
        "skipManifestDefaults": "Scale Agent never adds field defaults to manifests (the API server does)",
    }
    refused_keys = {
        "skipServerSideApply": "Scale Agent deploys by server-side apply only: client-side apply is not "
        "implemented; remove the key",
    }

    name: StrictStr
    kubeconfig_file: Path | None = Field(
        None, alias="kubeConfigFile", validation_alias=AliasChoices("kubeConfigFile", "kubeconfigFile")
    )
    context: StrictStr | None = None
    service_account: StrictBool = False
    # Don't verify the API server's certificate (Armory's `insecure`); as kubectl's
    # --insecure-skip-tls-verify, it overrides the kubeconfig's CA.
    insecure: StrictBool = False
    # Ignore HTTP(S)_PROXY for this cluster: the agent never proxies Kubernetes calls, so true is
    # what it does anyway, and false cannot be had (a warning says so when a proxy is set).
    no_proxy: StrictBool = False
    namespaces: tuple[StrictStr, ...] = ()
    omit_namespaces: tuple[StrictStr, ...] = ()
    kinds: tuple[StrictStr, ...] = ()
    omit_kinds: tuple[StrictStr, ...] = ()
    only_namespaced_resources: StrictBool = False
    custom_resource_definitions: tuple[StrictStr, ...] = ()
    # Spinnaker's account permissions ({READ: [groups], WRITE: [groups]}): the hub enforces them
    # on its API (docs/security.md); the agent only passes them on.
    permissions: dict[str, tuple[str, ...]] = Field(default_factory=dict)

    @field_validator("permissions", mode="before")
    @classmethod
    def _permissions(cls, value: Any) -> Any:
        return normalize_permissions(value)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _ACCOUNT_NAME.fullmatch(value):
            raise invalid(
                f"{value!r} is not a valid account name: use 1-253 letters, digits, '-', '_' or '.', "
                "starting and ending with a letter or digit"
            )
        return value

    @field_validator("kubeconfig_file", mode="before")
    @classmethod
    def _kubeconfig_file(cls, value: Any, info: ValidationInfo) -> Path | None:
        return to_path(value, info)

    @field_validator("context", mode="before")
    @classmethod
    def _context(cls, value: Any) -> Any:
        return None if value == "" else value

    @field_validator("namespaces", "omit_namespaces")
    @classmethod
    def _namespaces(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for i, namespace in enumerate(value):
            if not _DNS_LABEL.fullmatch(namespace):
                raise invalid(
                    f"{namespace!r} is not a namespace name: use at most 63 lowercase letters, digits "
                    "and '-', starting and ending with a letter or digit",
                    i,
                )
        return value

    @field_validator("kinds", "omit_kinds", "custom_resource_definitions")
    @classmethod
    def _kinds(cls, value: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        """`Kind` or `Kind.group`; custom resources always need their group."""
        need_group = info.field_name == "custom_resource_definitions"
        for i, kind in enumerate(value):
            try:
                _check_kind(kind, need_group=need_group)
            except PydanticCustomError as e:
                raise invalid((e.context or {}).get("message", str(e)), i) from None
        return value

    @field_validator("custom_resource_definitions", mode="before")
    @classmethod
    def _crds_before(cls, value: Any) -> Any:
        """Items are 'Kind.group' strings or {kind: 'Kind.group'} mappings; keep the strings."""
        if not isinstance(value, list | tuple):
            return value  # the type error names the expected shape
        items = []
        for i, item in enumerate(value):
            if isinstance(item, dict):
                unknown = [k for k in item if k not in ("kind", "scope")]
                if unknown:
                    raise invalid(
                        f"unknown key {unknown[0]!r}: an item here has only 'kind' and 'scope'", i, unknown[0]
                    )
                if "kind" not in item:
                    raise invalid("required key 'kind' is missing", i)
                # Armory's `scope` (Cluster or Namespaced) is checked, then left to discovery, which
                # learns each kind's scope from the API server.
                scope = item.get("scope")
                if scope is not None and scope not in ("Cluster", "Namespaced"):
                    raise invalid(f"{scope!r} is not a scope: expected 'Cluster' or 'Namespaced'", i, "scope")
                item = item["kind"]
                if not isinstance(item, str):
                    raise invalid(f"expected a string, got {describe(item)}", i, "kind")
            items.append(item)
        return tuple(items)

    @model_validator(mode="after")
    def _rules(self) -> AccountConfig:
        self._credential_rules()
        if self.namespaces and self.omit_namespaces:
            raise invalid("cannot be combined with namespaces: give one list or the other", "omitNamespaces")
        if self.kinds and self.omit_kinds:
            raise invalid("cannot be combined with kinds: give one list or the other", "omitKinds")
        return self

    def _credential_rules(self) -> None:
        """Where the credentials come from; a dynamic account (below) has its own source."""
        if self.kubeconfig_file is not None and self.service_account:
            raise invalid(
                "cannot be true when kubeConfigFile is also set: an account uses either a kubeconfig "
                "file or the in-cluster service account",
                "serviceAccount",
            )
        if self.kubeconfig_file is None and not self.service_account:
            raise invalid("needs either kubeConfigFile (a kubeconfig path) or serviceAccount: true")
        if self.context is not None and self.service_account:
            raise invalid("only applies with kubeConfigFile, not with serviceAccount: true", "context")

    @property
    def dynamic(self) -> bool:
        """Whether the hub sent this account (AddAccounts) rather than the configuration file."""
        return False


class DynamicAccountConfig(AccountConfig):
    """An account the hub sent (AddAccounts): the same settings as a file's account, validated by
    the same rules, with its kubeconfig held in memory instead of named by a path.

    `kubeconfig` is the parsed document (None: the agent's own service account). It is never
    validated field by field, shown in `repr()`, dumped, or written anywhere.
    """

    kubeconfig: SkipValidation[dict[str, Any] | None] = Field(None, repr=False, exclude=True)

    def _credential_rules(self) -> None:
        if self.kubeconfig_file is not None:
            raise invalid("a dynamic account's kubeconfig comes from the hub, not from a file", "kubeConfigFile")
        if self.kubeconfig is not None and self.service_account:
            raise invalid("cannot be true when a kubeconfig is given", "serviceAccount")
        if self.kubeconfig is None and not self.service_account:
            raise invalid("needs a kubeconfig or serviceAccount: true")
        if self.context is not None and self.kubeconfig is None:
            raise invalid(
                "only applies with a kubeconfig; an empty kubeconfig means this agent's own service account", "context"
            )

    @property
    def dynamic(self) -> bool:
        return True


SsaMode = Literal["always", "never", "allowed"]


class ServerSideApplyKind(ConfigModel):
    """`kubernetes.serverSideApply.kinds[]`: Armory's per-kind switches (see ServerSideApplyConfig)."""

    section = "kubernetes.serverSideApply.kinds[]"

    kind: StrictStr
    enabled: SsaMode = "allowed"
    clear_managed_fields: SsaMode = "allowed"
    manifest_defaults: SsaMode = "allowed"

    @model_validator(mode="after")
    def _supported(self) -> ServerSideApplyKind:
        _check_ssa(self.enabled, self.clear_managed_fields, self.manifest_defaults)
        return self


def _check_ssa(enabled: str, clear_managed_fields: str, manifest_defaults: str) -> None:
    """What Scale Agent can do: server-side apply always, never clearing managedFields, never adding
    defaults. `allowed` is accepted for all three (an object's annotation decides, and the
    annotations asking for what is not implemented fail that deploy, naming the annotation)."""
    if enabled == "never":
        raise invalid(
            "'never' (client-side apply) is not implemented: Scale Agent deploys by server-side apply "
            "only; use 'always' or 'allowed'",
            "enabled",
        )
    if clear_managed_fields == "always":
        raise invalid(
            "'always' is not implemented: Scale Agent never clears metadata.managedFields (it takes "
            "over conflicting fields with force instead); use 'never' or 'allowed'",
            "clearManagedFields",
        )
    if manifest_defaults == "always":
        raise invalid(
            "'always' is not implemented: Scale Agent adds no field defaults to manifests (the API "
            "server applies its defaults); use 'never' or 'allowed'",
            "manifestDefaults",
        )


class ServerSideApplyConfig(ConfigModel):
    """`kubernetes.serverSideApply`: Armory's switches between client- and server-side apply.

    Scale Agent deploys by server-side apply only, so `enabled` may be `always` or `allowed` (both
    mean server-side apply for every object here; Armory's `allowed` uses client-side apply unless
    asked); `never` is refused, as are the `always` forms of the two others."""

    section = "kubernetes.serverSideApply"

    enabled: SsaMode = "allowed"
    clear_managed_fields: SsaMode = "allowed"
    manifest_defaults: SsaMode = "allowed"
    kinds: tuple[ServerSideApplyKind, ...] = ()

    @model_validator(mode="after")
    def _supported(self) -> ServerSideApplyConfig:
        _check_ssa(self.enabled, self.clear_managed_fields, self.manifest_defaults)
        if "enabled" in self.model_fields_set and self.enabled == "allowed":
            log.warning(
                "kubernetes.serverSideApply.enabled: 'allowed' deploys by server-side apply here, like "
                "'always' (Armory's agent uses client-side apply unless an annotation or kinds[] asks)"
            )
        return self


class RetriesConfig(ConfigModel):
    """`kubernetes.retries`: retrying the operations' Kubernetes requests that fail with a
    transient error (a timeout, a dropped connection), as Armory does. 409 Conflicts have their own
    retry (kube/operations.py) and are not counted here; the watches have their own backoff."""

    enabled: StrictBool = True
    max_retries: StrictInt = Field(3, ge=0, le=100)
    back_off_ms: StrictInt = Field(3000, ge=0, le=600_000)
    retry_any_error: StrictBool = False
    retryable_errors: tuple[StrictStr, ...] = ("timeout", "deadline exceeded")


class KubernetesConfig(ConfigModel):
    """The accounts and how they are listed and discovered."""

    section = "kubernetes"

    accounts: tuple[AccountConfig, ...] = ()
    # The agent never proxies Kubernetes calls (see AccountConfig.no_proxy).
    no_proxy: StrictBool = False
    # Armory's first wait before a broken watch is restarted (then backoff). None: ours, 0.8 s.
    reconnect_timeout_ms: StrictInt | None = Field(None, ge=1, le=3_600_000)
    # Start the file's accounts in groups of this many, cacheGroupDelayMs apart (0: all at once),
    # so that an agent of many accounts does not list them all in the same second.
    cache_group_size: StrictInt = Field(0, ge=0)
    cache_group_delay_ms: StrictInt = Field(0, ge=0, le=3_600_000)
    retries: RetriesConfig = Field(default_factory=RetriesConfig)
    server_side_apply: ServerSideApplyConfig = Field(default_factory=ServerSideApplyConfig)
    page_size: StrictInt = Field(500, ge=1, le=10000)
    discovery_interval_seconds: StrictFloat = Field(60.0, gt=0)
    # A watch that receives nothing for this long is taken for dead and resumed. Servers send a
    # bookmark every minute (Kubernetes 1.27 and later; kubesim's --bookmark-interval), so only a
    # connection the network left half-open, or a server too old for periodic bookmarks, is silent.
    watch_idle_timeout_seconds: StrictFloat = Field(90.0, gt=0)
    # HTTP/2 to API servers that offer it (all real ones): one connection per cluster carries its
    # watches. False: one HTTP/1.1 connection per watch, as before (a proxy that breaks HTTP/2).
    http2: StrictBool = True

    @model_validator(mode="after")
    def _unique_names(self) -> KubernetesConfig:
        first: dict[str, int] = {}
        for i, account in enumerate(self.accounts):
            if account.name in first:
                raise invalid(
                    f"duplicate account name {account.name!r}: kubernetes.accounts[{first[account.name]}] "
                    f"and kubernetes.accounts[{i}] both use it",
                    "accounts",
                    i,
                    "name",
                )
            first[account.name] = i
        return self

    def account(self, name: str) -> AccountConfig | None:
        """The account with this name, if configured."""
        return next((a for a in self.accounts if a.name == name), None)


class TasksConfig(ConfigModel):
    """Limits on the initial LIST tasks running at once (0 = unlimited)."""

    section = "tasks"
    ignored_reasons = {
        "queueCheckFrequencyMs": "the budget is a semaphore that wakes waiting LISTs at once; nothing is polled",
    }

    # Armory's defaults are 1000 and 50: ours are lower because each LIST holds a page of objects
    # in memory while it runs (docs/agent-config.md).
    total_budget: StrictInt = Field(32, ge=0)
    budget_per_account: StrictInt = Field(8, ge=0)


class OperationsConfig(ConfigModel):
    """How the agent runs the hub's operations (deploy, delete, scale...)."""

    max_concurrent: StrictInt = Field(16, ge=1, le=1024)


class ServerSslConfig(ConfigModel):
    """`server.ssl`: TLS on the health/admin port (Armory's keys)."""

    section = "server.ssl"

    enabled: StrictBool = False
    cert_file: Path | None = None
    key_file: Path | None = None
    key_password: SecretStr = SecretStr("")
    key_file_password: SecretStr = SecretStr("")
    ca_cert_file: Path | None = None
    client_auth: Literal["none", "want", "need"] = "none"

    @field_validator("cert_file", "key_file", "ca_cert_file", mode="before")
    @classmethod
    def _files(cls, value: Any, info: ValidationInfo) -> Path | None:
        return to_path(value, info)

    @field_validator("key_password", "key_file_password", mode="before")
    @classmethod
    def _secret(cls, value: Any) -> Any:
        return secret_text(value)

    @field_validator("client_auth", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _complete(self) -> ServerSslConfig:
        if self.enabled and self.cert_file is None:
            raise invalid("required when server.ssl.enabled is true (the server's certificate)", "certFile")
        if self.client_auth != "none" and self.ca_cert_file is None:
            raise invalid("required when clientAuth is want or need (the CA of client certificates)", "caCertFile")
        return self

    @property
    def password(self) -> str:
        """The key's password, under either of Armory's names."""
        return self.key_file_password.get_secret_value() or self.key_password.get_secret_value()


class ServerConfig(ConfigModel):
    """The local health/metrics endpoint."""

    host: StrictStr = "127.0.0.1"
    port: StrictInt = Field(8082, ge=0, le=65535)
    ssl: ServerSslConfig = Field(default_factory=ServerSslConfig)

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        if not is_host(value):
            raise invalid(f"{value!r} is not a host name or IP address (give the port separately, in server.port)")
        return value


class TlsConfig(ConfigModel):
    """TLS settings of the hub connection."""

    server_name: StrictStr = ""
    insecure_skip_verify: StrictBool = False
    client_cert_file: Path | None = None
    client_key_file: Path | None = None
    # The password of an encrypted client key (Armory's name; `clientKeyPassword` is accepted too).
    client_key_file_password: SecretStr = Field(
        SecretStr(""),
        alias="clientKeyFilePassword",
        validation_alias=AliasChoices("clientKeyFilePassword", "clientKeyPassword"),
    )
    cacert_file: Path | None = None

    @field_validator("client_key_file_password", mode="before")
    @classmethod
    def _password(cls, value: Any) -> Any:
        return secret_text(value)

    @field_validator("client_cert_file", "client_key_file", "cacert_file", mode="before")
    @classmethod
    def _files(cls, value: Any, info: ValidationInfo) -> Path | None:
        return to_path(value, info)

    @model_validator(mode="after")
    def _pair(self) -> TlsConfig:
        if self.client_cert_file is not None and self.client_key_file is None:
            raise invalid("required when clientCertFile is set (a client certificate needs its key)", "clientKeyFile")
        if self.client_key_file is not None and self.client_cert_file is None:
            raise invalid("required when clientKeyFile is set (a client key needs its certificate)", "clientCertFile")
        return self

    @property
    def files(self) -> dict[str, Path]:
        """The TLS files that are set, by YAML key."""
        named = {
            "clientCertFile": self.client_cert_file,
            "clientKeyFile": self.client_key_file,
            "cacertFile": self.cacert_file,
        }
        return {k: v for k, v in named.items() if v is not None}


class TokenCommandConfig(ConfigModel):
    """`clouddriver.auth.tokenCommand`: a program whose output is the hub token, run before each
    connection and again every `refreshIntervalSeconds` (0: only when connecting). `format` raw:
    the output is the token; json (or empty, Armory's default): the output is `{"token": "..."}`."""

    command: StrictStr = ""
    args: tuple[StrictStr, ...] = ()
    format: Literal["", "raw", "json"] = ""
    refresh_interval_seconds: StrictInt = Field(0, ge=0, le=86400)
    timeout_seconds: StrictFloat = Field(30.0, gt=0, le=600)

    @field_validator("format", mode="before")
    @classmethod
    def _format(cls, value: Any) -> Any:
        if value is None or value == []:  # Armory's CSV shows the default as []
            return ""
        return value.lower() if isinstance(value, str) else value

    @field_validator("args", mode="before")
    @classmethod
    def _args(cls, value: Any) -> Any:
        return () if value is None else value


class AuthConfig(ConfigModel):
    """Credentials sent to the hub."""

    token: SecretStr = SecretStr("")
    token_command: TokenCommandConfig | None = None

    @model_validator(mode="after")
    def _one_source(self) -> AuthConfig:
        if self.token_command is not None and self.token_command.command and self.token.get_secret_value():
            raise invalid("cannot be combined with auth.token: give a token or a command, not both", "tokenCommand")
        if self.token_command is not None and not self.token_command.command:
            raise invalid("required: the program to run for the token", "tokenCommand", "command")
        return self

    @field_validator("token", mode="before")
    @classmethod
    def _token(cls, value: Any) -> Any:
        return secret_text(value)

    @field_validator("token")
    @classmethod
    def _header_safe(cls, value: SecretStr) -> SecretStr:
        """The token goes in an HTTP/2 header. The line break a YAML block (`token: |`) or a file
        from a Secret leaves at its end is dropped; anything else unprintable is refused here,
        not later as an obscure 'Invalid metadata' from gRPC on every connection attempt."""
        token = value.get_secret_value().strip()
        if not all("!" <= c <= "~" for c in token):
            raise invalid(
                "must be printable ASCII without spaces or line breaks inside (it is sent in a header); "
                "the value is not shown"
            )
        return SecretStr(token)


class BackoffConfig(ConfigModel):
    """`clouddriver.backoff`: the wait before reconnecting to the hub after every address failed,
    in nanoseconds as in Armory (gRPC's connection backoff): `baseDelay` times `multiplier` per
    failure, up to `maxDelay`, each randomised by +/- `jitter`. Our defaults (0.5 s, 2, 0.2, 30 s)
    reconnect sooner than Armory's (1 s, 1.6, 0.2, 120 s)."""

    base_delay: StrictInt = Field(500_000_000, ge=1_000_000, le=3_600_000_000_000)
    multiplier: StrictFloat | StrictInt = Field(2.0, ge=1.0, le=10.0)
    jitter: StrictFloat | StrictInt = Field(0.2, ge=0.0, le=1.0)
    max_delay: StrictInt = Field(30_000_000_000, ge=1_000_000, le=3_600_000_000_000)

    @model_validator(mode="after")
    def _order(self) -> BackoffConfig:
        if self.max_delay < self.base_delay:
            raise invalid(f"{self.max_delay} ns is less than baseDelay ({self.base_delay} ns)", "maxDelay")
        return self


class ClouddriverConfig(ConfigModel):
    """The connection to the hub."""

    section = "clouddriver"
    ignored_reasons = {
        "responseRetries": "a result is written on the stream its operation came on; when that stream "
        "breaks, the hub has already failed the operation (503, 'disconnected before answering') and takes "
        "no result from another connection, so there is nothing to retry. The agent remembers each result "
        "by operation id: the same operation sent again gets it without running twice",
    }

    # One address or several (hub replicas, tried in order): a YAML list, or one string with
    # commas so that the environment can set it. Kept as that string, normalised ('a:1,b:1');
    # `targets` is the list.
    grpc: StrictStr = "localhost:9091"
    insecure: StrictBool = False
    tls: TlsConfig = Field(default_factory=TlsConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    keep_alive_heartbeat_seconds: StrictInt = Field(10, ge=0, le=3600)
    keep_alive_time_out_seconds: StrictInt = Field(10, ge=1, le=3600)
    # Armory's reconnect after n quiet seconds on the operations stream; 0 (Armory's default) is
    # what this agent does. A value above 0 is accepted with a warning: heartbeats and HTTP/2
    # pings detect a dead link here, and a quiet stream is not a dead one.
    keep_alive_operation_seconds: StrictInt = Field(0, ge=0, le=86400)
    # Ignore HTTP(S)_PROXY and NO_PROXY for the hub connection (gRPC honours them otherwise).
    no_proxy: StrictBool = False
    backoff: BackoffConfig = Field(default_factory=BackoffConfig)

    @field_validator("grpc", mode="before")
    @classmethod
    def _grpc_list(cls, value: Any) -> Any:
        """A list of addresses becomes the comma-separated form; each item must be a string."""
        if not isinstance(value, list | tuple):
            return value
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise invalid(f"expected a string (host:port), got {describe(item)}", i)
            if "," in item:
                raise invalid(f"{item!r}: one address per list item (no commas)", i)
        if not value:
            raise invalid("the list is empty: give at least one host:port")
        return ",".join(item.strip() for item in value)

    @field_validator("grpc")
    @classmethod
    def _grpc(cls, value: str) -> str:
        entries = [entry.strip() for entry in value.split(",")] if "," in value else [value]
        seen: set[str] = set()
        for i, entry in enumerate(entries):
            where = f"address {i + 1} of {len(entries)}: " if len(entries) > 1 else ""
            if not entry:
                raise invalid(f"{where}empty: expected host:port, e.g. 'hub-1:9091,hub-2:9091'")
            try:
                split_host_port(entry)
            except PydanticCustomError as e:
                raise invalid(where + (e.context or {}).get("message", str(e))) from None
            if entry in seen:
                raise invalid(f"{where}{entry!r} is listed twice")
            seen.add(entry)
        return ",".join(entries)

    @model_validator(mode="after")
    def _quiet_operations(self) -> ClouddriverConfig:
        if self.keep_alive_operation_seconds > 0:
            log.warning(
                "clouddriver.keepAliveOperationSeconds: %d: not used: the link is not restarted when no "
                "operation arrives; heartbeats (keepAliveHeartbeatSeconds) detect a dead link instead",
                self.keep_alive_operation_seconds,
            )
        return self

    @model_validator(mode="after")
    def _plaintext(self) -> ClouddriverConfig:
        files = self.tls.files
        if self.insecure and files:
            keys = ", ".join(f"tls.{k}" for k in files)
            verb = "is" if len(files) == 1 else "are"
            raise invalid(f"cannot be true when {keys} {verb} set: plaintext gRPC uses no TLS files", "insecure")
        return self

    @property
    def targets(self) -> tuple[str, ...]:
        """The hub addresses of `grpc`, in the order given (one or more)."""
        return tuple(self.grpc.split(","))

    @property
    def grpc_host(self) -> str:
        """The host part of the first address of `grpc` (without IPv6 brackets)."""
        return split_host_port(self.targets[0])[0]

    @property
    def grpc_port(self) -> int:
        """The port part of the first address of `grpc`."""
        return split_host_port(self.targets[0])[1]


LogLevel = Literal["CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG"]
# Armory's (logrus) level names, any case, and Python's.
_LEVELS = {
    "panic": "CRITICAL",
    "fatal": "CRITICAL",
    "critical": "CRITICAL",
    "error": "ERROR",
    "warn": "WARNING",
    "warning": "WARNING",
    "info": "INFO",
    "debug": "DEBUG",
    "trace": "DEBUG",
}


class LoggingConfig(ConfigModel):
    """`logging`: where log lines go and in which form. `file` with `multiWrite` logs to the file and
    to standard error; `maxSizeMb` and `maxBackups` rotate the file; `fields` are added to every
    line (JSON lines carry them as keys, text lines at the end)."""

    section = "logging"
    ignored_reasons = {
        "maxAgeDays": "rotated files are kept by count (maxBackups), not by age",
        "compress": "rotated files are not compressed",
    }

    level: LogLevel | None = None
    format: Literal["text", "json"] = "text"
    file: Path | None = None
    multi_write: StrictBool = False
    max_size_mb: StrictInt = Field(1, ge=0, le=100_000)
    max_backups: StrictInt = Field(10, ge=0, le=10_000)
    local_time: StrictBool = True
    fields: dict[StrictStr, StrictStr | StrictInt | StrictFloat | StrictBool] = Field(default_factory=dict)

    @field_validator("level", mode="before")
    @classmethod
    def _level(cls, value: Any) -> Any:
        if isinstance(value, str):
            level = _LEVELS.get(value.strip().lower())
            if level is None:
                raise invalid(f"{value!r} is not a log level: expected panic, fatal, error, warn, info, debug or trace")
            return level
        return value

    @field_validator("format", mode="before")
    @classmethod
    def _format(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value

    @field_validator("file", mode="before")
    @classmethod
    def _file(cls, value: Any, info: ValidationInfo) -> Path | None:
        if value in ("", "stdout"):
            return None
        return to_path(value, info)


class PrometheusConfig(ConfigModel):
    """`prometheus`: a second listener for the metrics alone, at /metrics and /prometheus_metrics
    (Armory's port 8008). On `host` (default: `server.host`, so loopback unless configured)."""

    enabled: StrictBool = False
    port: StrictInt = Field(8008, ge=0, le=65535)
    host: StrictStr | None = None

    @field_validator("host")
    @classmethod
    def _host(cls, value: str | None) -> str | None:
        if value is not None and not is_host(value):
            raise invalid(f"{value!r} is not a host name or IP address (give the port separately)")
        return value


class AgentConfig(ConfigModel):
    """The whole agent configuration."""

    ignored_reasons = {
        "pprof": "Go's profiler; a Python agent has none (use py-spy on the process instead)",
        "timeoutSeconds": "operations end at the deadline the hub sends with each (timeoutMs)",
        "dynamicAccounts": "a setting of the hub (Armory's plugin): set it in the hub's configuration; "
        "the agent's own switch is dynamicAccountsEnabled",
        "secrets": "no secret engine is enabled in it (secrets.vault.enabled is not true)",
    }

    @classmethod
    def refusal(cls, key: str, value: Any) -> str | None:
        """`secrets` with Vault enabled is refused: the file's `encrypted:vault!...` references
        would be used as they are. A disabled Vault section is only ignored."""
        if key == "secrets":
            vault = value.get("vault") if isinstance(value, dict) else None
            if isinstance(vault, dict) and vault.get("enabled") is True:
                return (
                    "vault.enabled is true: secret references (encrypted:vault!...) are not resolved "
                    "by Scale Agent; put the values in the file or in SCALE_AGENT_* environment variables "
                    "from a Kubernetes Secret"
                )
        return super().refusal(key, value)

    kubernetes: KubernetesConfig = Field(default_factory=KubernetesConfig)
    # Default: the host name (the pod name in Kubernetes), as Armory's.
    agent_id: StrictStr | None = Field(None, max_length=253)
    # Unset: computed (see service.default_zone_id); "" says "no zone" explicitly.
    zone_id: StrictStr | None = None
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    prometheus: PrometheusConfig = Field(default_factory=PrometheusConfig)
    dynamic_accounts_enabled: StrictBool = True
    tasks: TasksConfig = Field(default_factory=TasksConfig)
    operations: OperationsConfig = Field(default_factory=OperationsConfig)
    server: ServerConfig = Field(default_factory=ServerConfig)
    clouddriver: ClouddriverConfig = Field(default_factory=ClouddriverConfig)
    reload: ReloadConfig = Field(default_factory=ReloadConfig)

    @field_validator("agent_id", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return None if value == "" else value


_FORMAT = ConfigFormat(
    root=AgentConfig,
    env_prefix=ENV_PREFIX,
    env_example="SERVER__PORT",
    logger=log,
    non_config_env_vars=NON_CONFIG_ENV_VARS,
    non_config_env_prefixes=NON_CONFIG_ENV_PREFIXES,
    list_descriptions={
        "accounts": "a list of accounts (mappings)",
        "customResourceDefinitions": "a list of kinds ('Kind.group' strings or {kind: 'Kind.group'} mappings)",
    },
    ignored_reason="an Armory/Clouddriver setting that Scale Agent does not use",
)


# --- dynamic accounts (sent by the hub) ----------------------------------------------------------

DYNAMIC_PROPERTIES = (
    "namespaces",
    "omitNamespaces",
    "kinds",
    "omitKinds",
    "customResourceDefinitions",
    "onlyNamespacedResources",
    "permissions",
)
"""The account settings a hub may send as a dynamic account's `properties` (YAML key names)."""

# Keys an account has in a file that a dynamic account carries elsewhere (its own fields), or not at all.
_NOT_PROPERTIES = {
    "name": "the account's name is its own field",
    "kubeConfigFile": "a dynamic account's kubeconfig is sent as content, not as a path on the agent",
    "kubeconfigFile": "a dynamic account's kubeconfig is sent as content, not as a path on the agent",
    "serviceAccount": "an empty kubeconfig means the agent's own service account",
    "kubeconfig": "the kubeconfig is the account's own field",
}

_DYNAMIC_FORMAT = ConfigFormat(
    root=DynamicAccountConfig,
    env_prefix=ENV_PREFIX,
    env_example="SERVER__PORT",
    logger=log,
    list_descriptions={
        "customResourceDefinitions": "a list of kinds ('Kind.group' strings or {kind: 'Kind.group'} mappings)",
    },
    ignored_reason="an Armory/Clouddriver setting that Scale Agent does not use",
)


def decode_kubeconfig(kubeconfig_base64: str) -> dict[str, Any]:
    """A kubeconfig sent as base64 text, parsed. Messages say what is wrong and where, never what
    the content is (it holds credentials). Raises ConfigError."""
    try:
        raw = base64.b64decode(kubeconfig_base64, validate=True)
    except (binascii.Error, ValueError) as e:
        raise ConfigError(f"the kubeconfig is not valid base64 ({e})") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"the kubeconfig is larger than {MAX_CONFIG_BYTES // (1024 * 1024)} MiB")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ConfigError(f"the kubeconfig is not UTF-8 text (invalid byte at offset {e.start})") from None
    # The configuration files' reader: safe, alias bombs refused, messages give positions, not content.
    doc = _read_yaml("the kubeconfig", text, fast=True)
    if not doc:
        raise ConfigError("the kubeconfig is empty")
    return doc


def dynamic_account(
    name: str, kubeconfig_base64: str, context: str, properties: Mapping[str, Any]
) -> DynamicAccountConfig:
    """Validate one account of an AddAccounts request as the configuration file's accounts are
    validated, so that the reasons read the same. An empty `kubeconfig_base64` means the agent's
    own service account. Raises ConfigError."""
    shown = name if len(name) <= 60 else name[:57] + "..."
    source = f"account {shown!r}"
    props = dict(properties)
    for key, why in _NOT_PROPERTIES.items():
        if key in props:
            raise ConfigError(f"{source}: properties.{key}: not a property: {why}")
    given_context = props.pop("context", None)
    if given_context not in (None, "") and context and given_context != context:
        raise ConfigError(
            f"{source}: properties.context: {given_context!r} differs from the account's context "
            f"{context!r}; give it once"
        )
    context = context or (given_context if isinstance(given_context, str) else "")
    kubeconfig = None
    if kubeconfig_base64:
        try:
            kubeconfig = decode_kubeconfig(kubeconfig_base64)
        except ConfigError as e:
            raise ConfigError(f"{source}: {e}") from None
    data: dict[str, Any] = {**props, "name": name, "context": context or None}
    if kubeconfig is None:
        data["serviceAccount"] = True
    else:
        data["kubeconfig"] = kubeconfig
    account = _DYNAMIC_FORMAT.validate(data, source)
    if kubeconfig is not None:
        try:
            check_kubeconfig(kubeconfig, account.context, CONTENT_SOURCE)
        except CredentialsError as e:
            raise ConfigError(f"{source}: {e}") from None
    return account


def parse_config(
    text: str,
    source: str = "<string>",
    base_dir: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> AgentConfig:
    """Parse configuration text. `source` names it in messages; relative paths resolve against
    `base_dir` (default: the current directory); `environ` (default: `os.environ`) supplies
    `SCALE_AGENT_*` overrides. Raises ConfigError."""
    return _FORMAT.parse(text, source=source, base_dir=base_dir, environ=environ)


def load_config(path: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> AgentConfig:
    """Read and validate a configuration file; see `parse_config`. Raises ConfigError."""
    # `open` is looked up here, at call time, so that it can be replaced in this module (tests).
    return _FORMAT.load(path, environ, opener=open)
