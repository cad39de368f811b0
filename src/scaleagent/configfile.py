"""Reading YAML configuration files into frozen pydantic models, with messages a person can act on.

The agent and the hub each have a configuration file, and they must not import each other; this
module is what they share. A program describes its file once, as a `ConfigFormat` (the root model,
the environment prefix, ...), and gets `load()` and `parse()` that:

- read YAML safely: duplicate keys, non-string keys, alias bombs and oversized files are refused;
- apply environment overrides (`<PREFIX><KEY>__<KEY>=value`), so that containers can change any
  scalar setting without a file;
- validate with models derived from `ConfigModel` (camelCase keys, unknown keys are errors with a
  "did you mean");
- report every problem at once as a `ConfigError` whose lines each name the file or variable, the
  key path (`kubernetes.accounts[1].omitKinds`) and what is wrong, and never show a secret.

Validators in the models raise `invalid(message, *at)` to report a finished message at a key path.
"""

from __future__ import annotations

import datetime
import difflib
import ipaddress
import logging
import os
import re
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import IO, Annotated, Any, ClassVar, Generic, TypeVar, Union, get_args, get_origin

import yaml
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

__all__ = [
    "MAX_CONFIG_BYTES",
    "MAX_VALUES",
    "ConfigError",
    "ConfigFormat",
    "ConfigModel",
    "check_readable_file",
    "describe",
    "invalid",
    "is_host",
    "is_loopback",
    "normalize_permissions",
    "normalize_roles",
    "readable_file",
    "split_host_port",
    "to_path",
]

MAX_CONFIG_BYTES = 5 * 1024 * 1024
"""Configuration files (and texts) larger than this are refused."""

MAX_VALUES = 1_000_000
"""A document expanding to more values than this (e.g. through YAML aliases) is refused."""

_ERROR = "scale_agent_config"  # the pydantic error type of `invalid()`
_CONTEXT_BASE_DIR = "base_dir"
_CONTEXT_FROM_TEXT = "from_text"
_CONTEXT_IGNORED = "ignored"
_CONTEXT_ROOT = "root"
_MAX_PROBLEMS = 20
_WARNED: set[tuple[str, str, str]] = set()  # (file, key, why): each ignored key said once per process

_HOST_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"  # '_' occurs in real host names
_HOSTNAME = re.compile(rf"(?=.{{1,253}}$){_HOST_LABEL}(?:\.{_HOST_LABEL})*\.?")


class ConfigError(Exception):
    """An invalid or unreadable configuration. `str()` is the full human message (one problem per
    line); `problems` holds the lines. It never contains a secret value."""

    def __init__(self, problems: str | list[str] | tuple[str, ...]) -> None:
        if isinstance(problems, str):
            problems = (problems,)
        self.problems: tuple[str, ...] = tuple(problems)
        shown = list(self.problems[:_MAX_PROBLEMS])
        if len(self.problems) > _MAX_PROBLEMS:
            shown.append(f"... and {len(self.problems) - _MAX_PROBLEMS} more problems")
        super().__init__("\n".join(shown))


def invalid(message: str, *at: str | int) -> PydanticCustomError:
    """A validation error carrying a finished message, for validators to raise. `at` continues the
    error's key path, so that a model-level rule can point at the key that breaks it."""
    return PydanticCustomError(_ERROR, "{message}", {"message": message, "at": at})


# --- field helpers --------------------------------------------------------------------------------


def to_path(value: Any, info: ValidationInfo) -> Path | None:
    """A file path for a `mode="before"` validator: '' and null mean unset; `~` expands; relative
    paths resolve against the config file's directory (the current directory when there is none),
    because a file's meaning must not depend on where the program was started."""
    if value is None or value == "":
        return None
    if isinstance(value, os.PathLike) and not isinstance(value, str):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise invalid(f"expected a file path (a string), got {describe(value)}")
    if "\0" in value:
        raise invalid("a file path cannot contain a NUL character")
    path = Path(value).expanduser()
    if not path.is_absolute():
        base = (info.context or {}).get(_CONTEXT_BASE_DIR) or Path.cwd()
        path = Path(base) / path
    return Path(os.path.normpath(path))


def check_readable_file(path: Path) -> Path:
    """`path` if it is a file that can be opened for reading. For settings whose file is needed at
    startup anyway: a mistake is then reported with its key, not later as a TLS or I/O failure."""
    try:
        with open(path, "rb"):
            pass
    except OSError as e:
        raise invalid(f"{path}: {_os_error_message(e)}") from None
    return path


def readable_file(value: Any, info: ValidationInfo) -> Path | None:
    """`to_path`, then `check_readable_file`: the `mode="before"` validator of a setting whose file
    the program needs at start (certificates, token files)."""
    path = to_path(value, info)
    return None if path is None else check_readable_file(path)


def _os_error_message(error: OSError) -> str:
    """'the file does not exist', 'not readable: Permission denied', ... (without the path)."""
    if isinstance(error, FileNotFoundError):
        return "the file does not exist"
    if isinstance(error, IsADirectoryError):
        return "a directory, not a file"
    if isinstance(error, PermissionError):
        return f"not readable: {error.strerror or 'Permission denied'}"
    return f"cannot be read: {error.strerror or type(error).__name__}"


def is_host(value: str) -> bool:
    """Whether `value` is an IP address or a host name (without a port)."""
    try:
        ipaddress.ip_address(value)
        return True
    except ValueError:
        return bool(_HOSTNAME.fullmatch(value))


def split_host_port(value: str) -> tuple[str, int]:
    """'host:port' or '[v6]:port' -> (host, port); raises `invalid()` with an example otherwise."""
    example = "expected host:port, e.g. 'localhost:9091' or '[::1]:9091'"
    if value.startswith("["):
        host, sep, port = value[1:].partition("]:")
        valid_host = bool(sep) and _is_ipv6(host)
    else:
        host, sep, port = value.rpartition(":")
        valid_host = bool(sep) and ":" not in host and is_host(host)
    if not valid_host:
        raise invalid(f"{value!r}: {example}")
    if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        raise invalid(f"{value!r}: the port must be a number from 1 to 65535")
    return host, int(port)


def _is_ipv6(value: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(value), ipaddress.IPv6Address)
    except ValueError:
        return False


# --- the base model -------------------------------------------------------------------------------


class ConfigModel(BaseModel):
    """Base of configuration sections: frozen, camelCase YAML keys, unknown keys refused.

    `ignored_keys` names keys that are accepted in a file and dropped with a warning (settings of
    the product this one replaces), so that a migrated file still loads. `holds_secret` hides the
    values in and at a section from messages when a field holds a secret that is not a `SecretStr`
    (a password inside a URL); sections with a `SecretStr` field are hidden anyway."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        populate_by_name=True,
        alias_generator=to_camel,
        hide_input_in_errors=True,
    )

    ignored_keys: ClassVar[frozenset[str]] = frozenset()
    # Why a key of `ignored_keys` does nothing here, said in its warning instead of the format's
    # general reason; and keys that are refused with a reason (a setting whose absence would change
    # what the program does, e.g. secret references it cannot resolve).
    ignored_reasons: ClassVar[Mapping[str, str]] = {}
    refused_keys: ClassVar[Mapping[str, str]] = {}
    # Where the section sits in the file ('kubernetes.accounts[]'), so that a warning names the
    # whole key path; empty at the top level.
    section: ClassVar[str] = ""
    holds_secret: ClassVar[bool] = False

    @classmethod
    def refusal(cls, key: str, value: Any) -> str | None:
        """Why this key (with this value) is refused, or None: `refused_keys` by default; a section
        may refuse a key only for some values and ignore it otherwise."""
        return cls.refused_keys.get(key)

    @model_validator(mode="before")
    @classmethod
    def _prepare(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        context = info.context or {}
        from_text = bool(context.get(_CONTEXT_FROM_TEXT))
        ignored = context.get(_CONTEXT_IGNORED)
        for key in list(data):
            refusal = cls.refusal(key, data[key]) if from_text and isinstance(key, str) else None
            if refusal is not None:
                raise invalid(refusal, key)
            if from_text and isinstance(key, str) and (key in cls.ignored_keys or key in cls.ignored_reasons):
                del data[key]
                if ignored is not None:
                    path = f"{cls.section}.{key}" if cls.section else key
                    ignored.append((path, cls.ignored_reasons.get(key)))
                continue
            name = _field_name_for_key(cls, key, allow_names=not from_text)
            if name is None:
                if from_text and key in cls.model_fields:
                    # A snake_case attribute name written in YAML: only the camelCase keys exist there.
                    raise invalid(_unknown_key_message(context.get(_CONTEXT_ROOT, cls), cls, key), key)
                continue
            if data[key] is None and _null_means_default(cls, name):
                del data[key]
        for model_field in cls.model_fields.values():
            given = [k for k in _keys_of(model_field) if k in data]
            if len(given) > 1:
                raise invalid(f"the same setting as {given[0]!r} (another spelling); give it only once", given[1])
        return data


class ReloadConfig(ConfigModel):
    """`reload`: how often the file is looked at for changes (a mounted ConfigMap changes by a
    symlink swap, within about a minute of an edit); 0 means only on SIGHUP."""

    period_seconds: float = Field(2.0, ge=0, le=3600)


# The variables the kubelet gives a pod for each Service of its namespace (service links): a
# Service named `scale-agent` or `scale-agent-hub` would otherwise read as unknown settings.
# Known by name and by value both, so that a mistyped setting (one `_` for `__`) is still refused.
_SERVICE_LINK = re.compile(
    r"(?!.*__)[A-Z0-9_]+?_(?P<kind>SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT|PORT_[0-9]+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)"
)
_LINK_URL = re.compile(r"(tcp|udp|sctp)://\[?[0-9a-fA-F.:]+\]?:[0-9]+")


def _is_service_link(var: str, value: str) -> bool:
    m = _SERVICE_LINK.fullmatch(var)
    if m is None:
        return False
    if m["kind"] == "SERVICE_HOST" or var.endswith("_ADDR"):
        return _is_ip(value)
    if m["kind"].startswith("SERVICE_PORT") or var.endswith(("_TCP_PORT", "_UDP_PORT", "_SCTP_PORT")):
        return value.isdigit()
    if var.endswith("_PROTO"):
        return value in ("tcp", "udp", "sctp")
    return _LINK_URL.fullmatch(value) is not None  # X_PORT and X_PORT_N_TCP


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


# --- one kind of configuration file ---------------------------------------------------------------

M = TypeVar("M", bound=ConfigModel)
Opener = Callable[[Path, str], IO[bytes]]


@dataclass(frozen=True)
class ConfigFormat(Generic[M]):
    """Everything that differs between two programs' configuration files.

    `env_prefix` starts the override variables; `non_config_env_vars` and
    `non_config_env_prefixes` are variables under that prefix that are not settings (tooling, or
    another program whose prefix extends this one). `env_example` is a key path shown when a
    variable is malformed (`SERVER__PORT`). `list_descriptions` maps a list key to what its items
    are, for "expected ..." messages. `ignored_reason` ends the warning for `ignored_keys`."""

    root: type[M]
    env_prefix: str
    env_example: str
    logger: logging.Logger
    non_config_env_vars: frozenset[str] = frozenset()
    non_config_env_prefixes: tuple[str, ...] = ()
    list_descriptions: Mapping[str, str] = field(default_factory=dict)
    ignored_reason: str = "a setting this program does not use"

    def load(
        self,
        path: str | os.PathLike[str],
        environ: Mapping[str, str] | None = None,
        *,
        opener: Opener | None = None,
    ) -> M:
        """Read and validate a configuration file (see `parse`); relative paths in it resolve
        against its directory. `opener` replaces `open`. Raises ConfigError."""
        source = os.fspath(path)
        file = Path(source)
        try:
            if file.is_dir():
                raise ConfigError(f"{source}: a directory, not a file")
            with (opener or open)(file, "rb") as f:
                raw = f.read(MAX_CONFIG_BYTES + 1)
        except OSError as e:
            raise ConfigError(f"{source}: {_os_error_message(e)}") from None
        if len(raw) > MAX_CONFIG_BYTES:
            raise ConfigError(f"{source}: larger than {MAX_CONFIG_BYTES // (1024 * 1024)} MiB; refusing to read it")
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as e:
            raise ConfigError(f"{source}: not UTF-8 text (invalid byte at offset {e.start})") from None
        return self.parse(text, source=source, base_dir=Path(os.path.abspath(file)).parent, environ=environ)

    def parse(
        self,
        text: str,
        source: str = "<string>",
        base_dir: Path | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> M:
        """Parse configuration text. `source` names it in messages; relative paths resolve against
        `base_dir` (default: the current directory); `environ` (default: `os.environ`) supplies
        the overrides. Raises ConfigError."""
        data = _read_yaml(source, text)
        origins, problems = self._apply_env(data, os.environ if environ is None else environ)
        if problems:
            raise ConfigError(problems)
        base = Path(os.path.abspath(base_dir if base_dir is not None else Path.cwd()))
        return self._validate(data, source, origins, base)

    def revise(self, config: M, changes: Mapping[tuple[str, ...], tuple[Any, str]]) -> M:
        """A new, validated config with values replaced: {YAML key path: (value, origin)}, where
        the origin (e.g. "command-line option --db") starts the message of an error at that path.
        For command-line options, which must get the same checks as the file."""
        data = config.model_dump(by_alias=True)
        origins: dict[tuple[str | int, ...], str] = {}
        for loc, (value, origin) in changes.items():
            container = data
            for key in loc[:-1]:
                container = container.setdefault(key, {})
            container[loc[-1]] = value
            origins[loc] = origin
        return self._validate(data, "configuration", origins, Path.cwd())

    def validate(self, data: dict[str, Any], source: str, base_dir: Path | None = None) -> M:
        """Validate settings that arrive as data rather than as a file (e.g. over the network), with
        the same rules and messages as a file's; no environment overrides apply. `source` starts
        each message. Raises ConfigError."""
        return self._validate(data, source, {}, Path(os.path.abspath(base_dir if base_dir is not None else Path.cwd())))

    def _validate(
        self, data: dict[str, Any], source: str, origins: Mapping[tuple[str | int, ...], str], base_dir: Path
    ) -> M:
        ignored: list[tuple[str, str | None]] = []
        context = {
            _CONTEXT_BASE_DIR: base_dir,
            _CONTEXT_FROM_TEXT: True,
            _CONTEXT_IGNORED: ignored,
            _CONTEXT_ROOT: self.root,
        }
        try:
            config = self.root.model_validate(data, context=context)
        except ValidationError as e:
            lines = []
            for error in e.errors():
                loc, message = _problem(self.root, self.list_descriptions, error)
                origin = next((o for at, o in origins.items() if loc[: len(at)] == at), None)
                prefix = f"{origin}: " if origin else f"{source}: "
                lines.append(f"{prefix}{_format_loc(loc)}: {message}" if loc else f"{prefix}{message}")
            raise ConfigError(lines) from None
        for key, reason in sorted(set(ignored), key=lambda item: item[0]):
            said = (source, key, reason or self.ignored_reason)
            if said in _WARNED:  # the file read again (the reload watch's first look): said already
                continue
            _WARNED.add(said)
            self.logger.warning("%s: ignoring %r: %s", *said)
        return config

    def _is_config_var(self, var: str, environ: Mapping[str, str]) -> bool:
        return (
            var.startswith(self.env_prefix)
            and var not in self.non_config_env_vars
            and not var.startswith(self.non_config_env_prefixes)
            and not _is_service_link(var, environ[var])
        )

    def _apply_env(
        self, data: dict[str, Any], environ: Mapping[str, str]
    ) -> tuple[dict[tuple[str | int, ...], str], list[str]]:
        """Set the override variables' values into `data`; returns {key path: origin} and the problems."""
        origins: dict[tuple[str | int, ...], str] = {}
        problems: list[str] = []
        for var in sorted(v for v in environ if self._is_config_var(v, environ)):
            where = f"environment variable {var}"
            segments = var[len(self.env_prefix) :].split("__")
            if not all(segments):
                problems.append(
                    f"{where}: not a key path: levels are separated by exactly two underscores, "
                    f"e.g. {self.env_prefix}{self.env_example}"
                )
                continue
            loc, problem = self._set_from_env(data, segments, var, environ[var])
            if problem:
                problems.append(f"{where}: {problem}")
            elif loc:
                origins[loc] = where
        return origins, problems

    def _set_from_env(
        self, data: dict[str, Any], segments: list[str], var: str, raw: str
    ) -> tuple[tuple[str, ...] | None, str | None]:
        """Follow `segments` down the models and set the value; (key path, None) or (None, problem)."""
        model: type[BaseModel] = self.root
        container: dict[str, Any] | None = data
        loc: tuple[str, ...] = ()
        for depth, segment in enumerate(segments):
            last = depth == len(segments) - 1
            fields = {_env_key(_alias(f)): f for f in model.model_fields.values()}
            if _env_key(segment) not in fields:
                section = f"in {_format_loc(loc)}" if loc else "at the top level"
                close = difflib.get_close_matches(_env_key(segment), list(fields), n=1, cutoff=0.6)
                hint = ""
                if close:
                    path = "__".join([*segments[:depth], _alias(fields[close[0]]).upper()])
                    hint = f" (did you mean {self.env_prefix}{path}?)"
                return None, f"{segment!r} is not a configuration key {section}{hint}"
            model_field = fields[_env_key(segment)]
            annotation = _unwrap(model_field.annotation)
            loc += (_alias(model_field),)
            if _is_list(annotation):
                return None, f"{_format_loc(loc)} is a list; lists cannot be set from the environment"
            if _is_model(annotation) and last:
                first = _alias(next(iter(annotation.model_fields.values()))).upper()
                return None, f"{_format_loc(loc)} is a section, not a value; set one of its keys, e.g. {var}__{first}"
            if not _is_model(annotation) and not last:
                return None, f"{_format_loc(loc)} is a value, not a section"
            if container is not None:
                for other in _keys_of(model_field)[1:]:
                    container.pop(other, None)
            if last:
                if container is None:
                    return None, None  # the file's section is not a mapping: reported as a file error
                container[_alias(model_field)] = _env_value(raw, annotation)
                return loc, None
            if container is not None:
                child = container.get(_alias(model_field))
                if child is None:
                    child = container[_alias(model_field)] = {}
                container = child if isinstance(child, dict) else None
            model = annotation
        return None, None


def _env_key(name: str) -> str:
    return name.replace("_", "").lower()


def _env_value(raw: str, annotation: Any) -> Any:
    """Strings stay as written; other values are read as YAML scalars (`true`, `9000`, `1.5`)."""
    if _is_stringy(annotation):
        return raw
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw
    return raw if isinstance(value, dict | list) else value


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


def _holds_secret(annotation: Any) -> bool:
    """A secret, or a section holding one directly (`auth: <the token>` is an easy mistake)."""
    if annotation is SecretStr:
        return True
    if not _is_model(annotation):
        return False
    if getattr(annotation, "holds_secret", False):
        return True
    return any(_unwrap(f.annotation) is SecretStr for f in annotation.model_fields.values())


def _keys_of(model_field: Any) -> list[str]:
    """The YAML keys of a field: its alias first, then any other accepted spelling."""
    keys = [_alias(model_field)]
    if isinstance(model_field.validation_alias, AliasChoices):
        keys += [c for c in model_field.validation_alias.choices if isinstance(c, str) and c not in keys]
    return keys


def _field_name_for_key(model: type[BaseModel], key: Any, *, allow_names: bool) -> str | None:
    """The field a mapping key sets: by YAML key, or also by attribute name when `allow_names`."""
    for name, model_field in model.model_fields.items():
        if key in _keys_of(model_field) or (allow_names and key == name):
            return name
    return None


def _null_means_default(model: type[BaseModel], name: str) -> bool:
    """null stands for the default in sections, lists and strings; numbers and booleans need a value."""
    model_field = model.model_fields[name]
    annotation = _unwrap(model_field.annotation)
    return not model_field.is_required() and (_is_model(annotation) or _is_list(annotation) or _is_stringy(annotation))


def _annotation_at(root: type[BaseModel], loc: tuple[str | int, ...]) -> Any:
    """The (unwrapped) type of the value at a key path; None when the path leaves the models."""
    annotation: Any = root
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


def _alias(model_field: FieldInfo) -> str:
    """A field's YAML key: every model here has an alias generator (camelCase), so each has one."""
    if model_field.alias is None:
        raise TypeError("a configuration model without an alias generator")
    return model_field.alias


@cache
def _sections(root: type[BaseModel]) -> tuple[dict[str, tuple[str, ...]], dict[type[BaseModel], str]]:
    """(every YAML key, lowercased -> the dotted paths of the sections that have it;
    every model -> its dotted path, '' for the top level)."""
    keys: dict[str, list[str]] = {}
    paths: dict[type[BaseModel], str] = {}

    def visit(model: type[BaseModel], prefix: str) -> None:
        paths.setdefault(model, prefix)
        for model_field in model.model_fields.values():
            keys.setdefault(_alias(model_field).lower(), []).append(prefix)
            annotation = _unwrap(model_field.annotation)
            path = f"{prefix}.{_alias(model_field)}" if prefix else _alias(model_field)
            if _is_list(annotation):
                annotation, path = _unwrap(get_args(annotation)[0]), path + "[]"
            if _is_model(annotation):
                visit(annotation, path)

    visit(root, "")
    return {k: tuple(v) for k, v in keys.items()}, paths


def _unknown_key_message(root: type[BaseModel], model: type[BaseModel] | None, key: Any) -> str:
    if model is None:
        return "unknown key"
    canonical = [_alias(f) for f in model.model_fields.values()]
    if isinstance(key, str):
        lowered = {c.lower(): c for c in canonical}
        close = difflib.get_close_matches(key.lower(), list(lowered), n=1, cutoff=0.6)
        if close:
            return f"unknown key (did you mean {lowered[close[0]]!r}?)"
        keys, paths = _sections(root)
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


ROLE_KEYS = ("READ", "WRITE", "EXECUTE", "CREATE")
"""Fiat's authorizations. Accounts use READ and WRITE; EXECUTE and CREATE (for applications) are
kept as given, so that a Clouddriver definition moves over unchanged."""


def regular_expressions(value: tuple[str, ...]) -> tuple[str, ...]:
    """A list of regular expressions, each compiled once here so a bad one is named at load."""
    for i, pattern in enumerate(value):
        try:
            re.compile(pattern)
        except re.error as e:
            raise invalid(f"{pattern!r} is not a regular expression: {e}", i) from None
    return value


def normalize_roles(value: Any, *at: str | int) -> tuple[str, ...]:
    """Group names as a tuple: a list, or one comma-separated string; each stripped of spaces and
    lowercased (Spinnaker's roles are case-insensitive). Armory once let `' ops'` silently match
    nothing: here a name is trimmed, and an empty one is an error."""
    items: list[Any]
    if isinstance(value, str):
        items = value.split(",")
    elif isinstance(value, list | tuple):
        items = list(value)
    else:
        raise invalid(f"expected a list of group names, got {describe(value)}", *at)
    roles = []
    for i, item in enumerate(items):
        if isinstance(item, int) and not isinstance(item, bool):
            item = str(item)  # numeric role names, as Armory accepts them (YAML reads `- 1234` as a number)
        if not isinstance(item, str):
            raise invalid(f"expected a group name (a string), got {describe(item)}", *at, i)
        role = item.strip().lower()
        if not role:
            raise invalid("an empty group name (check for a stray comma)", *at, i)
        roles.append(role)
    return tuple(dict.fromkeys(roles))


def normalize_permissions(value: Any) -> dict[str, tuple[str, ...]]:
    """Spinnaker's account `permissions` (`{READ: [groups], WRITE: [groups]}`), normalized; keys
    other than READ and WRITE are refused rather than ignored."""
    if value is None:
        return {}
    if isinstance(value, list | tuple) and all(isinstance(item, Mapping) for item in value):
        # Armory's documented form: a list of one-key maps (`- READ: [...]`, `- WRITE: [...]`).
        merged: dict[Any, Any] = {}
        for i, item in enumerate(value):
            for key, roles in item.items():
                if key in merged:
                    raise invalid(f"{key!r} is given twice in the list; give each permission once", i, str(key))
                merged[key] = roles
        value = merged
    if not isinstance(value, Mapping):
        raise invalid(
            f"expected READ and WRITE lists of groups (a mapping, or a list of one-key mappings), got {describe(value)}"
        )
    out: dict[str, tuple[str, ...]] = {}
    for key, roles in value.items():
        name = str(key).strip().upper()
        if name not in ROLE_KEYS:
            raise invalid(f"{key!r} is not a permission: use READ and WRITE (or EXECUTE, CREATE)", str(key))
        out[name] = normalize_roles(roles if roles is not None else [], str(key))
    return out


def secret_text(value: Any) -> Any:
    """A `mode="before"` check for SecretStr settings: a string, or an error that never shows the value."""
    if isinstance(value, SecretStr | str):
        return value
    raise invalid(f"expected a string, got {describe(value, secret=True)}")


def describe(value: Any, *, secret: bool = False) -> str:
    """'a string ('abc')', 'an integer (5)', 'a list', 'null'... (never the value when secret),
    so that a message shows what was found without dumping a whole section."""
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
_BOUNDS = {
    "greater_than": "must be greater than {gt}",
    "greater_than_equal": "must be at least {ge}",
    "less_than": "must be less than {lt}",
    "less_than_equal": "must be at most {le}",
}


def _problem(
    root: type[BaseModel], list_descriptions: Mapping[str, str], error: Mapping[str, Any]
) -> tuple[tuple[str | int, ...], str]:
    """One pydantic error -> (key path, message)."""
    loc = tuple(error["loc"])
    kind = error["type"]
    ctx = error.get("ctx") or {}
    value = error.get("input")
    if kind == _ERROR:
        return loc + tuple(ctx.get("at", ())), ctx["message"]
    secret = any(_holds_secret(_annotation_at(root, loc[:i])) for i in range(1, len(loc) + 1))
    if kind == "extra_forbidden":
        parent = _annotation_at(root, loc[:-1])
        return loc, _unknown_key_message(root, parent if _is_model(parent) else None, loc[-1])
    if kind == "missing":
        return loc, "required key is missing"
    if kind in ("tuple_type", "list_type"):
        key = next((p for p in reversed(loc) if isinstance(p, str)), "")
        expected = list_descriptions.get(key, "a list of strings")
        return loc, f"expected {expected}, got {describe(value, secret=secret)}"
    if kind in _EXPECTED:
        message = f"expected {_EXPECTED[kind]}, got {describe(value, secret=secret)}"
        if kind == "string_type" and isinstance(value, bool | int | float | datetime.date):
            message += "; put it in quotes to make it a string"
        return loc, message
    if kind == "literal_error":
        return loc, f"expected one of {ctx.get('expected', '')}, got {describe(value, secret=secret)}"
    if kind in _BOUNDS:
        bound = _BOUNDS[kind].format(**{k: _plain_number(v) for k, v in ctx.items()})
        return loc, f"{bound}, got {_plain_number(value)}"
    return loc, str(error.get("msg", "invalid value"))


def _plain_number(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


# --- YAML -----------------------------------------------------------------------------------------


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
                raise _DuplicateKeyError(
                    None, None, f"duplicate key {key!r} (first at line {first})", key_node.start_mark
                )
            seen[(type(key), key)] = key_node
        return yaml.constructor.SafeConstructor.construct_mapping(self, node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _Loader.construct_yaml_map)  # type: ignore[type-var]

_CSafeLoader = getattr(yaml, "CSafeLoader", None)


if _CSafeLoader is not None:

    class _FastLoader(yaml.composer.Composer, _CSafeLoader):  # type: ignore[misc,valid-type]
        """libyaml's scanner and parser (where PyYAML has them) under Python's composer, with
        _Loader's refusal of duplicate keys: libyaml's own composer recurses in C and would crash
        the process on a deeply nested document, where Python's raises RecursionError. The
        pure-Python parser was 3% of an agent activating a hundred accounts, each with its
        kubeconfig."""

        def __init__(self, stream: str) -> None:
            super(yaml.composer.Composer, self).__init__(stream)
            yaml.composer.Composer.__init__(self)

        construct_mapping = _Loader.construct_mapping

    _FastLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _FastLoader.construct_yaml_map)


def _read_yaml(source: str, text: str, fast: bool = False) -> dict[str, Any]:
    """The document as a mapping with string keys; everything else is a ConfigError.

    `fast`: parse with libyaml where PyYAML has it (as the hub reads kubeconfigs). libyaml follows
    the YAML spec where PyYAML's Python parser is stricter (a tab as separation, `?` inside a flow
    scalar), so a few documents are read here that a configuration file could not hold; a document
    libyaml refuses is read again by the Python parser, whose messages (positions, never content)
    are the ones given, except for a duplicate key, refused with libyaml's position."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{source}: larger than {MAX_CONFIG_BYTES // (1024 * 1024)} MiB; refusing to read it")
    data: Any = None
    if fast and _CSafeLoader is not None:
        try:
            data = yaml.load(text, Loader=_FastLoader)
        except _DuplicateKeyError as e:
            raise ConfigError(_yaml_problem(source, text, e)) from None
        except Exception:  # whatever libyaml refuses, the Python parser reads again and says why
            data = None
        else:
            if data is None:
                data = {}
    try:
        if data is None:
            data = yaml.load(text, Loader=_Loader)
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: the top level must be a mapping, not {_kind_of(data)}")
        _check_plain(source, data)
    except yaml.YAMLError as e:
        raise ConfigError(_yaml_problem(source, text, e)) from None
    except RecursionError:
        raise ConfigError(f"{source}: the document is nested too deeply") from None
    except (ValueError, TypeError, AttributeError, OverflowError) as e:
        # A scalar that cannot be the type YAML gives it (`2001-13-45` is a date, `!!int abc`):
        # the constructor's own message may quote the value, which could be a credential.
        raise ConfigError(
            f"{source}: a value cannot be read as the type YAML gives it (a date, a number, an "
            f"explicit !!tag): {type(e).__name__}; put it in quotes if it is a string"
        ) from None
    return data


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
                    shown = describe(key).partition(" (")[2].rstrip(")") or _kind_of(key)
                    raise ConfigError(
                        f"{source}: {where}the key {shown} is {_kind_of(key)}, not a string; put it in quotes"
                    )
                visit(item, loc + (key,))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                visit(item, loc + (i,))

    visit(data, ())


def is_loopback(host: str) -> bool:
    """Whether `host` only accepts connections from this machine."""
    import ipaddress

    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
