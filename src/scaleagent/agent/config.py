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
from typing import Any

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
    ignored_keys = frozenset(
        {
            "requiredGroupMembership",
            "providerVersion",
            "dockerRegistries",
            "configureImagePullSecrets",
            "cacheThreads",
            "cachingPolicies",
            "oAuthScopes",
            "onlySpinnakerManaged",
            "primaryAccount",
            "environment",
            "metrics",
            "namingStrategy",
            "liveManifestCalls",
            "checkPermissionsOnStartup",
            "cacheIntervalSeconds",
            "kubectlExecutable",
            "kubectlRequestTimeoutSeconds",
        }
    )

    name: StrictStr
    kubeconfig_file: Path | None = Field(
        None, alias="kubeConfigFile", validation_alias=AliasChoices("kubeConfigFile", "kubeconfigFile")
    )
    context: StrictStr | None = None
    service_account: StrictBool = False
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
                unknown = [k for k in item if k != "kind"]
                if unknown:
                    raise invalid(f"unknown key {unknown[0]!r}: an item here has only 'kind'", i, unknown[0])
                if "kind" not in item:
                    raise invalid("required key 'kind' is missing", i)
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


class KubernetesConfig(ConfigModel):
    """The accounts and how they are listed and discovered."""

    accounts: tuple[AccountConfig, ...] = ()
    page_size: StrictInt = Field(500, ge=1, le=10000)
    discovery_interval_seconds: StrictFloat = Field(60.0, gt=0)
    # A watch that receives nothing for this long is taken for dead and resumed. Servers send a
    # bookmark every minute (Kubernetes 1.27 and later; kubesim's --bookmark-interval), so only a
    # connection the network left half-open, or a server too old for periodic bookmarks, is silent.
    watch_idle_timeout_seconds: StrictFloat = Field(90.0, gt=0)

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

    total_budget: StrictInt = Field(32, ge=0)
    budget_per_account: StrictInt = Field(8, ge=0)


class OperationsConfig(ConfigModel):
    """How the agent runs the hub's operations (deploy, delete, scale...)."""

    max_concurrent: StrictInt = Field(16, ge=1, le=1024)


class ServerConfig(ConfigModel):
    """The local health/metrics endpoint."""

    host: StrictStr = "127.0.0.1"
    port: StrictInt = Field(8082, ge=0, le=65535)

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        if not is_host(value):
            raise invalid(f"{value!r} is not a host name or IP address (give the port separately, in server.port)")
        return value


class TlsConfig(ConfigModel):
    """TLS settings of the hub connection."""

    ignored_keys = frozenset({"clientKeyPassword"})

    server_name: StrictStr = ""
    insecure_skip_verify: StrictBool = False
    client_cert_file: Path | None = None
    client_key_file: Path | None = None
    cacert_file: Path | None = None

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


class AuthConfig(ConfigModel):
    """Credentials sent to the hub."""

    ignored_keys = frozenset({"tokenCommand"})

    token: SecretStr = SecretStr("")

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


class ClouddriverConfig(ConfigModel):
    """The connection to the hub."""

    ignored_keys = frozenset({"keepAliveOperationSeconds", "noProxy", "backoff"})

    # One address or several (hub replicas, tried in order): a YAML list, or one string with
    # commas so that the environment can set it. Kept as that string, normalised ('a:1,b:1');
    # `targets` is the list.
    grpc: StrictStr = "localhost:9091"
    insecure: StrictBool = False
    tls: TlsConfig = Field(default_factory=TlsConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    keep_alive_heartbeat_seconds: StrictInt = Field(10, ge=0, le=3600)
    keep_alive_time_out_seconds: StrictInt = Field(10, ge=1, le=3600)

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


class AgentConfig(ConfigModel):
    """The whole agent configuration."""

    kubernetes: KubernetesConfig = Field(default_factory=KubernetesConfig)
    agent_id: StrictStr | None = Field(None, max_length=253)
    zone_id: StrictStr | None = None
    dynamic_accounts_enabled: StrictBool = True
    tasks: TasksConfig = Field(default_factory=TasksConfig)
    operations: OperationsConfig = Field(default_factory=OperationsConfig)
    server: ServerConfig = Field(default_factory=ServerConfig)
    clouddriver: ClouddriverConfig = Field(default_factory=ClouddriverConfig)
    reload: ReloadConfig = Field(default_factory=ReloadConfig)

    @field_validator("zone_id", "agent_id", mode="before")
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
    doc = _read_yaml("the kubeconfig", text)
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
