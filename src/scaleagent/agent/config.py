"""The agent's configuration file (`armory-agent.yml`-compatible), validated into frozen models.

`load_config(path)` reads a YAML file, applies `SCALE_AGENT_*` environment overrides and returns an
`AgentConfig`; `parse_config(text)` does the same for text already in memory. Every problem is
reported as a `ConfigError` whose `str()` is a complete, human message naming the source (file or
environment variable), the key path (`kubernetes.accounts[1].omitKinds`) and what is wrong; all
problems found in one pass are reported together, one per line.

The YAML keys are camelCase (as in Armory's Scale Agent); the Python attributes are snake_case.
The hub token is a `SecretStr`: it never appears in `repr()`, `str()` or any error message.
See docs/agent-config.md for the user-facing reference.
"""

from __future__ import annotations

import datetime
import difflib
import ipaddress
import logging
import os
import re
import types
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

import yaml
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from ..kube.credentials import SERVICE_ACCOUNT_DIR_ENV

__all__ = [
    "AccountConfig",
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
    "load_config",
    "parse_config",
]

MAX_CONFIG_BYTES = 5 * 1024 * 1024
"""Configuration files (and texts) larger than this are refused."""

MAX_VALUES = 1_000_000
"""A document expanding to more values than this (e.g. through YAML aliases) is refused."""

ENV_PREFIX = "SCALE_AGENT_"
"""Environment variables starting with this override configuration values (see `parse_config`)."""

NON_CONFIG_ENV_VARS = frozenset({"SCALE_AGENT_EXTRA_KUBECTLS", SERVICE_ACCOUNT_DIR_ENV})
"""`SCALE_AGENT_*` variables that belong to the project's tooling, not to the configuration."""

NON_CONFIG_ENV_PREFIXES = ("SCALE_AGENT_E2E_",)
"""Prefixes of `SCALE_AGENT_*` variables that belong to the project's tooling (the e2e tests)."""

_ERROR = "scale_agent_config"  # the pydantic error type of this module's own checks
_CONTEXT_BASE_DIR = "base_dir"
_CONTEXT_FROM_TEXT = "from_text"
_CONTEXT_IGNORED = "ignored"
log = logging.getLogger("scaleagent.agent.config")
_MAX_PROBLEMS = 20

_ACCOUNT_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,251}[A-Za-z0-9])?")
_DNS_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_KIND = re.compile(r"[A-Za-z][A-Za-z0-9]{0,62}")
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"  # a DNS label, any case
_GROUP = re.compile(rf"(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*")
_HOST_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"  # '_' occurs in real host names
_HOSTNAME = re.compile(rf"(?=.{{1,253}}$){_HOST_LABEL}(?:\.{_HOST_LABEL})*\.?")


class ConfigError(Exception):
    """An invalid or unreadable configuration. `str()` is the full human message (one problem per
    line); `problems` holds the lines. It never contains the hub token."""

    def __init__(self, problems: str | list[str] | tuple[str, ...]) -> None:
        if isinstance(problems, str):
            problems = (problems,)
        self.problems: tuple[str, ...] = tuple(problems)
        shown = list(self.problems[:_MAX_PROBLEMS])
        if len(self.problems) > _MAX_PROBLEMS:
            shown.append(f"... and {len(self.problems) - _MAX_PROBLEMS} more problems")
        super().__init__("\n".join(shown))


def _fail(message: str, *at: str | int) -> PydanticCustomError:
    """A validation error carrying a finished message; `at` continues the error's key path."""
    return PydanticCustomError(_ERROR, "{message}", {"message": message, "at": at})


# --- field helpers --------------------------------------------------------------------------------


def _to_path(value: Any, info: ValidationInfo) -> Path | None:
    """A file path: '' and null mean unset; `~` expands; relative paths resolve against the
    config file's directory (the current directory when there is none)."""
    if value is None or value == "":
        return None
    if isinstance(value, os.PathLike) and not isinstance(value, str):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise _fail(f"expected a file path (a string), got {_describe(value)}")
    if "\0" in value:
        raise _fail("a file path cannot contain a NUL character")
    path = Path(value).expanduser()
    if not path.is_absolute():
        base = (info.context or {}).get(_CONTEXT_BASE_DIR) or Path.cwd()
        path = Path(base) / path
    return Path(os.path.normpath(path))


def _check_kind(value: str, *, need_group: bool) -> str:
    kind, dot, group = value.partition(".")
    if not _KIND.fullmatch(kind) or (dot and not _GROUP.fullmatch(group)):
        raise _fail(
            f"{value!r} is not a kind: expected a singular kind such as 'Deployment', "
            "optionally with its API group ('Widget.example.com')"
        )
    if need_group and not dot:
        raise _fail(f"{value!r} has no API group: custom resources are named 'Kind.group', e.g. 'Widget.example.com'")
    return value


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        populate_by_name=True,
        alias_generator=to_camel,
        hide_input_in_errors=True,
    )

    @model_validator(mode="before")
    @classmethod
    def _prepare(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        from_text = bool((info.context or {}).get(_CONTEXT_FROM_TEXT))
        ignored = (info.context or {}).get(_CONTEXT_IGNORED)
        for key in list(data):
            if from_text and isinstance(key, str) and key in _FOREIGN_KEYS.get(cls.__name__, ()):
                # Valid in Armory's agent or Clouddriver, not used here: a migrated file still loads.
                del data[key]
                if ignored is not None:
                    ignored.append(key)
                continue
            name = _field_name_for_key(cls, key, allow_names=not from_text)
            if name is None:
                if from_text and key in cls.model_fields:
                    # A snake_case attribute name written in YAML: only the camelCase keys exist there.
                    raise _fail(_unknown_key_message(cls, key), key)
                continue
            if data[key] is None and _null_means_default(cls, name):
                del data[key]
        for name, field in cls.model_fields.items():
            choices = _keys_of(field)
            given = [k for k in choices if k in data]
            if len(given) > 1:
                raise _fail(f"the same setting as {given[0]!r} (another spelling); give it only once", given[1])
        return data


# --- the models -----------------------------------------------------------------------------------


class AccountConfig(_Model):
    """One Kubernetes cluster ("account") to watch."""

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

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _ACCOUNT_NAME.fullmatch(value):
            raise _fail(
                f"{value!r} is not a valid account name: use 1-253 letters, digits, '-', '_' or '.', "
                "starting and ending with a letter or digit"
            )
        return value

    @field_validator("kubeconfig_file", mode="before")
    @classmethod
    def _kubeconfig_file(cls, value: Any, info: ValidationInfo) -> Path | None:
        return _to_path(value, info)

    @field_validator("context", mode="before")
    @classmethod
    def _context(cls, value: Any) -> Any:
        return None if value == "" else value

    @field_validator("namespaces", "omit_namespaces")
    @classmethod
    def _namespaces(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for i, namespace in enumerate(value):
            if not _DNS_LABEL.fullmatch(namespace):
                raise _fail(
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
                raise _fail(e.context["message"], i) from None
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
                    raise _fail(f"unknown key {unknown[0]!r}: an item here has only 'kind'", i, unknown[0])
                if "kind" not in item:
                    raise _fail("required key 'kind' is missing", i)
                item = item["kind"]
                if not isinstance(item, str):
                    raise _fail(f"expected a string, got {_describe(item)}", i, "kind")
            items.append(item)
        return tuple(items)

    @model_validator(mode="after")
    def _rules(self) -> AccountConfig:
        if self.kubeconfig_file is not None and self.service_account:
            raise _fail(
                "cannot be true when kubeConfigFile is also set: an account uses either a kubeconfig "
                "file or the in-cluster service account",
                "serviceAccount",
            )
        if self.kubeconfig_file is None and not self.service_account:
            raise _fail("needs either kubeConfigFile (a kubeconfig path) or serviceAccount: true")
        if self.context is not None and self.service_account:
            raise _fail("only applies with kubeConfigFile, not with serviceAccount: true", "context")
        if self.namespaces and self.omit_namespaces:
            raise _fail("cannot be combined with namespaces: give one list or the other", "omitNamespaces")
        if self.kinds and self.omit_kinds:
            raise _fail("cannot be combined with kinds: give one list or the other", "omitKinds")
        return self


class KubernetesConfig(_Model):
    """The accounts and how they are listed and discovered."""

    accounts: tuple[AccountConfig, ...] = ()
    page_size: StrictInt = Field(500, ge=1, le=10000)
    discovery_interval_seconds: StrictFloat = Field(60.0, gt=0)

    @model_validator(mode="after")
    def _unique_names(self) -> KubernetesConfig:
        first: dict[str, int] = {}
        for i, account in enumerate(self.accounts):
            if account.name in first:
                raise _fail(
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


class TasksConfig(_Model):
    """Limits on the initial LIST tasks running at once (0 = unlimited)."""

    total_budget: StrictInt = Field(32, ge=0)
    budget_per_account: StrictInt = Field(8, ge=0)


class ServerConfig(_Model):
    """The local health/metrics endpoint."""

    host: StrictStr = "127.0.0.1"
    port: StrictInt = Field(8082, ge=0, le=65535)

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        if not _is_host(value):
            raise _fail(f"{value!r} is not a host name or IP address (give the port separately, in server.port)")
        return value


class TlsConfig(_Model):
    """TLS settings of the hub connection."""

    server_name: StrictStr = ""
    insecure_skip_verify: StrictBool = False
    client_cert_file: Path | None = None
    client_key_file: Path | None = None
    cacert_file: Path | None = None

    @field_validator("client_cert_file", "client_key_file", "cacert_file", mode="before")
    @classmethod
    def _files(cls, value: Any, info: ValidationInfo) -> Path | None:
        return _to_path(value, info)

    @model_validator(mode="after")
    def _pair(self) -> TlsConfig:
        if self.client_cert_file is not None and self.client_key_file is None:
            raise _fail("required when clientCertFile is set (a client certificate needs its key)", "clientKeyFile")
        if self.client_key_file is not None and self.client_cert_file is None:
            raise _fail("required when clientKeyFile is set (a client key needs its certificate)", "clientCertFile")
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


class AuthConfig(_Model):
    """Credentials sent to the hub."""

    token: SecretStr = SecretStr("")

    @field_validator("token", mode="before")
    @classmethod
    def _token(cls, value: Any) -> Any:
        if isinstance(value, SecretStr | str):
            return value
        raise _fail(f"expected a string, got {_describe(value, secret=True)}")


class ClouddriverConfig(_Model):
    """The connection to the hub."""

    grpc: StrictStr = "localhost:9091"
    insecure: StrictBool = False
    tls: TlsConfig = Field(default_factory=TlsConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    keep_alive_heartbeat_seconds: StrictInt = Field(10, ge=0)

    @field_validator("grpc")
    @classmethod
    def _grpc(cls, value: str) -> str:
        _split_host_port(value)
        return value

    @model_validator(mode="after")
    def _plaintext(self) -> ClouddriverConfig:
        files = self.tls.files
        if self.insecure and files:
            keys = ", ".join(f"tls.{k}" for k in files)
            verb = "is" if len(files) == 1 else "are"
            raise _fail(f"cannot be true when {keys} {verb} set: plaintext gRPC uses no TLS files", "insecure")
        return self

    @property
    def grpc_host(self) -> str:
        """The host part of `grpc` (without IPv6 brackets)."""
        return _split_host_port(self.grpc)[0]

    @property
    def grpc_port(self) -> int:
        """The port part of `grpc`."""
        return _split_host_port(self.grpc)[1]


class AgentConfig(_Model):
    """The whole agent configuration."""

    kubernetes: KubernetesConfig = Field(default_factory=KubernetesConfig)
    zone_id: StrictStr | None = None
    dynamic_accounts_enabled: StrictBool = True
    tasks: TasksConfig = Field(default_factory=TasksConfig)
    server: ServerConfig = Field(default_factory=ServerConfig)
    clouddriver: ClouddriverConfig = Field(default_factory=ClouddriverConfig)

    @field_validator("zone_id", mode="before")
    @classmethod
    def _zone_id(cls, value: Any) -> Any:
        return None if value == "" else value


def _is_host(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
        return True
    except ValueError:
        return bool(_HOSTNAME.fullmatch(value))


def _split_host_port(value: str) -> tuple[str, int]:
    example = "expected host:port, e.g. 'localhost:9091' or '[::1]:9091'"
    if value.startswith("["):
        host, sep, port = value[1:].partition("]:")
        valid_host = bool(sep) and _is_ipv6(host)
    else:
        host, sep, port = value.rpartition(":")
        valid_host = bool(sep) and ":" not in host and _is_host(host)
    if not valid_host:
        raise _fail(f"{value!r}: {example}")
    if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        raise _fail(f"{value!r}: the port must be a number from 1 to 65535")
    return host, int(port)


def _is_ipv6(value: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(value), ipaddress.IPv6Address)
    except ValueError:
        return False


# --- model introspection (for messages and environment overrides) ---------------------------------


def _unwrap(annotation: Any) -> Any:
    """The annotation without `Annotated[...]` and `| None`."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            rest = [a for a in get_args(annotation) if a is not type(None)]
            if len(rest) != 1:
                return annotation
            annotation = rest[0]
        else:
            return annotation


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _is_list(annotation: Any) -> bool:
    return get_origin(annotation) is tuple


def _is_stringy(annotation: Any) -> bool:
    return annotation in (str, SecretStr, Path)


def _keys_of(field: Any) -> list[str]:
    """The YAML keys of a field: its alias first, then any other accepted spelling."""
    keys = [field.alias]
    if isinstance(field.validation_alias, AliasChoices):
        keys += [c for c in field.validation_alias.choices if isinstance(c, str) and c not in keys]
    return keys


def _field_name_for_key(model: type[BaseModel], key: Any, *, allow_names: bool) -> str | None:
    """The field a mapping key sets: by YAML key, or also by attribute name when `allow_names`."""
    for name, field in model.model_fields.items():
        if key in _keys_of(field) or (allow_names and key == name):
            return name
    return None


def _null_means_default(model: type[BaseModel], name: str) -> bool:
    """null stands for the default in sections, lists and strings; numbers and booleans need a value."""
    field = model.model_fields[name]
    annotation = _unwrap(field.annotation)
    return not field.is_required() and (_is_model(annotation) or _is_list(annotation) or _is_stringy(annotation))


def _annotation_at(loc: tuple[str | int, ...]) -> Any:
    """The (unwrapped) type of the value at a key path; None when the path leaves the models."""
    annotation: Any = AgentConfig
    for part in loc:
        if isinstance(part, int):
            if not _is_list(annotation):
                return None
            annotation = _unwrap(get_args(annotation)[0])
        else:
            name = _field_name_for_key(annotation, part, allow_names=True) if _is_model(annotation) else None
            if name is None:
                return None
            annotation = _unwrap(annotation.model_fields[name].annotation)
    return annotation


@cache
def _sections() -> tuple[dict[str, tuple[str, ...]], dict[type[BaseModel], str]]:
    """(every YAML key, lowercased -> the dotted paths of the sections that have it;
    every model -> its dotted path, '' for the top level)."""
    keys: dict[str, list[str]] = {}
    paths: dict[type[BaseModel], str] = {}

    def visit(model: type[BaseModel], prefix: str) -> None:
        paths.setdefault(model, prefix)
        for field in model.model_fields.values():
            keys.setdefault(field.alias.lower(), []).append(prefix)
            annotation = _unwrap(field.annotation)
            path = f"{prefix}.{field.alias}" if prefix else field.alias
            if _is_list(annotation):
                annotation, path = _unwrap(get_args(annotation)[0]), path + "[]"
            if _is_model(annotation):
                visit(annotation, path)

    visit(AgentConfig, "")
    return {k: tuple(v) for k, v in keys.items()}, paths


# Settings of Armory's agent or of Clouddriver's Kubernetes accounts that this implementation does
# not have; named specifically so that a migrated file gets a clear message.
_FOREIGN_KEYS = {
    "AccountConfig": {
        "permissions", "requiredGroupMembership", "providerVersion", "dockerRegistries",
        "configureImagePullSecrets", "cacheThreads", "cachingPolicies", "oAuthScopes",
        "onlySpinnakerManaged", "primaryAccount", "environment", "metrics", "namingStrategy",
        "liveManifestCalls", "checkPermissionsOnStartup", "cacheIntervalSeconds",
        "kubectlExecutable", "kubectlRequestTimeoutSeconds",
    },
    "ClouddriverConfig": {"keepAliveTimeOutSeconds", "keepAliveOperationSeconds", "noProxy", "backoff"},
    "TlsConfig": {"clientKeyPassword"},
    "AuthConfig": {"tokenCommand"},
}


def _unknown_key_message(model: type[BaseModel] | None, key: Any) -> str:
    if model is None:
        return "unknown key"
    canonical = [f.alias for f in model.model_fields.values()]
    if isinstance(key, str):
        lowered = {c.lower(): c for c in canonical}
        close = difflib.get_close_matches(key.lower(), list(lowered), n=1, cutoff=0.6)
        if close:
            return f"unknown key (did you mean {lowered[close[0]]!r}?)"
        keys, paths = _sections()
        elsewhere = [p for p in keys.get(key.lower(), ()) if p != paths.get(model)]
        if elsewhere:
            where = " or ".join(repr(p) if p else "the top level" for p in elsewhere)
            return f"unknown key here (it belongs under {where})"
    return f"unknown key (known keys: {', '.join(canonical)})"


# --- messages -------------------------------------------------------------------------------------


def _kind_of(value: Any) -> str:
    """'a string', 'an integer', 'a list', 'null'..."""
    if value is None:
        return "null"
    for types_, kind in (
        (bool, "a boolean"),
        (int, "an integer"),
        (float, "a number"),
        (str, "a string"),
        (datetime.datetime, "a timestamp"),
        (datetime.date, "a date"),
        (list | tuple, "a list"),
        (dict, "a mapping"),
        (bytes, "binary data"),
    ):
        if isinstance(value, types_):
            return kind
    return f"a {type(value).__name__}"


def _describe(value: Any, *, secret: bool = False) -> str:
    """'a string ('abc')', 'an integer (5)', 'a list', 'null'... (never the value when secret)."""
    kind = _kind_of(value)
    if secret or not isinstance(value, bool | int | float | str | datetime.date):
        return kind
    if isinstance(value, bool):
        shown = "true" if value else "false"
    elif isinstance(value, datetime.date):
        shown = value.isoformat()
    else:
        shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return f"{kind} ({shown})"


def _format_loc(loc: tuple[str | int, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


_EXPECTED = {
    "string_type": "a string",
    "int_type": "an integer",
    "int_from_float": "an integer",
    "int_parsing": "an integer",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "float_type": "a number",
    "float_parsing": "a number",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "dict_type": "a mapping",
}
_LIST_EXPECTED = {
    "accounts": "a list of accounts (mappings)",
    "customResourceDefinitions": "a list of kinds ('Kind.group' strings or {kind: 'Kind.group'} mappings)",
}
_BOUNDS = {
    "greater_than": "must be greater than {gt}",
    "greater_than_equal": "must be at least {ge}",
    "less_than": "must be less than {lt}",
    "less_than_equal": "must be at most {le}",
}


def _problem(error: Mapping[str, Any]) -> tuple[tuple[str | int, ...], str]:
    """One pydantic error -> (key path, message)."""
    loc = tuple(error["loc"])
    kind = error["type"]
    ctx = error.get("ctx") or {}
    value = error.get("input")
    if kind == _ERROR:
        return loc + tuple(ctx.get("at", ())), ctx["message"]
    # Never show a value at or inside clouddriver.auth: `auth: <the token>` is an easy mistake.
    secret = any(_annotation_at(loc[:i]) in (SecretStr, AuthConfig) for i in range(1, len(loc) + 1))
    if kind == "extra_forbidden":
        parent = _annotation_at(loc[:-1])
        return loc, _unknown_key_message(parent if _is_model(parent) else None, loc[-1])
    if kind == "missing":
        return loc, "required key is missing"
    if kind in ("tuple_type", "list_type"):
        key = next((p for p in reversed(loc) if isinstance(p, str)), "")
        expected = _LIST_EXPECTED.get(key, "a list of strings")
        return loc, f"expected {expected}, got {_describe(value, secret=secret)}"
    if kind in _EXPECTED:
        message = f"expected {_EXPECTED[kind]}, got {_describe(value, secret=secret)}"
        if kind == "string_type" and isinstance(value, bool | int | float | datetime.date):
            message += "; put it in quotes to make it a string"
        return loc, message
    if kind in _BOUNDS:
        bound = _BOUNDS[kind].format(**{k: _plain_number(v) for k, v in ctx.items()})
        return loc, f"{bound}, got {_plain_number(value)}"
    return loc, str(error.get("msg", "invalid value"))


def _plain_number(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


# --- reading and parsing --------------------------------------------------------------------------


class _DuplicateKeyError(yaml.constructor.ConstructorError):
    pass


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys in a mapping (PyYAML silently keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node)
            try:
                earlier = seen.get((type(key), key))  # the type too: 1 and true are different keys
            except TypeError:
                continue
            if earlier is not None:
                first = earlier.start_mark.line + 1
                raise _DuplicateKeyError(None, None, f"duplicate key {key!r} (first at line {first})", key_node.start_mark)
            seen[(type(key), key)] = key_node
        return super().construct_mapping(node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _Loader.construct_yaml_map)


def _yaml_problem(source: str, text: str, error: yaml.YAMLError) -> str:
    if isinstance(error, yaml.reader.ReaderError):
        line = text.count("\n", 0, error.position) + 1
        column = error.position - (text.rfind("\n", 0, error.position) + 1) + 1
        detail = f"{error.reason} (character U+{error.character:04X})"
        return f"{source} line {line}, column {column}: YAML syntax error: {detail}"
    if isinstance(error, yaml.MarkedYAMLError) and error.problem_mark is not None:
        mark = error.problem_mark
        where = f"{source} line {mark.line + 1}, column {mark.column + 1}"
        if isinstance(error, _DuplicateKeyError):
            return f"{where}: {error.problem}"
        detail = error.problem or "invalid YAML"
        if error.context:
            at = f" started at line {error.context_mark.line + 1}" if error.context_mark is not None else ""
            detail += f" ({error.context}{at})"
        return f"{where}: YAML syntax error: {detail}"
    return f"{source}: YAML syntax error: {type(error).__name__}"


def _check_plain(source: str, data: Any) -> None:
    """Refuse non-string keys and documents that expand to too many values (YAML alias bombs)."""
    budget = [MAX_VALUES]

    def visit(value: Any, loc: tuple[str | int, ...]) -> None:
        budget[0] -= 1
        if budget[0] < 0:
            raise ConfigError(
                f"{source}: the document expands to more than {MAX_VALUES} values (through YAML aliases?)"
            )
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    where = f"{_format_loc(loc)}: " if loc else ""
                    shown = _describe(key).partition(" (")[2].rstrip(")") or _kind_of(key)
                    raise ConfigError(
                        f"{source}: {where}the key {shown} is {_kind_of(key)}, not a string; put it in quotes"
                    )
                visit(item, loc + (key,))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                visit(item, loc + (i,))

    visit(data, ())


def _env_key(name: str) -> str:
    return name.replace("_", "").lower()


def _apply_env(data: dict[str, Any], environ: Mapping[str, str]) -> tuple[dict[tuple[str | int, ...], str], list[str]]:
    """Set `SCALE_AGENT_*` values into `data`; returns {key path: variable} and the problems."""
    origins: dict[tuple[str | int, ...], str] = {}
    problems: list[str] = []
    for var in sorted(environ):
        if not var.startswith(ENV_PREFIX) or var in NON_CONFIG_ENV_VARS or var.startswith(NON_CONFIG_ENV_PREFIXES):
            continue
        segments = var[len(ENV_PREFIX):].split("__")
        where = f"environment variable {var}"
        if not all(segments):
            problems.append(
                f"{where}: not a key path: levels are separated by exactly two underscores, "
                f"e.g. {ENV_PREFIX}SERVER__PORT"
            )
            continue
        model: type[BaseModel] = AgentConfig
        container: dict[str, Any] | None = data
        loc: tuple[str, ...] = ()
        for depth, segment in enumerate(segments):
            last = depth == len(segments) - 1
            fields = {_env_key(f.alias): (n, f) for n, f in model.model_fields.items()}
            if _env_key(segment) not in fields:
                section = f"in {_format_loc(loc)}" if loc else "at the top level"
                close = difflib.get_close_matches(_env_key(segment), list(fields), n=1, cutoff=0.6)
                hint = ""
                if close:
                    alias = fields[close[0]][1].alias
                    hint = f" (did you mean {ENV_PREFIX}{'__'.join([*segments[:depth], alias.upper()])}?)"
                problems.append(f"{where}: {segment!r} is not a configuration key {section}{hint}")
                break
            name, field = fields[_env_key(segment)]
            annotation = _unwrap(field.annotation)
            loc += (field.alias,)
            if _is_list(annotation):
                problems.append(f"{where}: {_format_loc(loc)} is a list; lists cannot be set from the environment")
                break
            if _is_model(annotation) and last:
                problems.append(
                    f"{where}: {_format_loc(loc)} is a section, not a value; set one of its keys, "
                    f"e.g. {var}__{next(iter(annotation.model_fields.values())).alias.upper()}"
                )
                break
            if not _is_model(annotation) and not last:
                problems.append(f"{where}: {_format_loc(loc)} is a value, not a section")
                break
            for other in _keys_of(field)[1:]:
                if container is not None:
                    container.pop(other, None)
            if last:
                if container is not None:
                    container[field.alias] = _env_value(environ[var], annotation)
                    origins[loc] = var
                break
            if container is not None:
                child = container.get(field.alias)
                if child is None:
                    child = container[field.alias] = {}
                # A section that is not a mapping in the file is reported as a file error.
                container = child if isinstance(child, dict) else None
            model = annotation
    return origins, problems


def _env_value(raw: str, annotation: Any) -> Any:
    """Strings stay as written; other values are read as YAML scalars (`true`, `9000`, `1.5`)."""
    if _is_stringy(annotation):
        return raw
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw
    return raw if isinstance(value, dict | list) else value


def parse_config(
    text: str,
    source: str = "<string>",
    base_dir: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> AgentConfig:
    """Parse configuration text. `source` names it in messages; relative paths resolve against
    `base_dir` (default: the current directory); `environ` (default: `os.environ`) supplies
    `SCALE_AGENT_*` overrides. Raises ConfigError."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{source}: larger than {MAX_CONFIG_BYTES // (1024 * 1024)} MiB; refusing to read it")
    try:
        data = yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: the top level must be a mapping, not {_kind_of(data)}")
        _check_plain(source, data)
    except yaml.YAMLError as e:
        raise ConfigError(_yaml_problem(source, text, e)) from None
    except RecursionError:
        raise ConfigError(f"{source}: the document is nested too deeply") from None

    origins, problems = _apply_env(data, os.environ if environ is None else environ)
    if problems:
        raise ConfigError(problems)

    base = Path(os.path.abspath(base_dir if base_dir is not None else Path.cwd()))
    ignored: list[str] = []
    try:
        config = AgentConfig.model_validate(data, context={_CONTEXT_BASE_DIR: base, _CONTEXT_FROM_TEXT: True,
                                                           _CONTEXT_IGNORED: ignored})
        for key in sorted(set(ignored)):
            log.warning("%s: ignoring %r: an Armory/Clouddriver setting that Scale Agent does not use", source, key)
        return config
    except ValidationError as e:
        lines = []
        for error in e.errors():
            loc, message = _problem(error)
            var = next((v for at, v in origins.items() if loc[: len(at)] == at), None)
            prefix = f"environment variable {var}: " if var else f"{source}: "
            lines.append(f"{prefix}{_format_loc(loc)}: {message}" if loc else f"{prefix}{message}")
        raise ConfigError(lines) from None


def load_config(path: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> AgentConfig:
    """Read and validate a configuration file; see `parse_config`. Raises ConfigError."""
    source = os.fspath(path)
    file = Path(source)
    try:
        if file.is_dir():
            raise ConfigError(f"{source}: a directory, not a file")
        with open(file, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"{source}: the file does not exist") from None
    except PermissionError as e:
        raise ConfigError(f"{source}: not readable: {e.strerror or 'Permission denied'}") from None
    except OSError as e:
        raise ConfigError(f"{source}: cannot be read: {e.strerror or type(e).__name__}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{source}: larger than {MAX_CONFIG_BYTES // (1024 * 1024)} MiB; refusing to read it")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{source}: not UTF-8 text (invalid byte at offset {e.start})") from None
    return parse_config(text, source=source, base_dir=Path(os.path.abspath(file)).parent, environ=environ)
