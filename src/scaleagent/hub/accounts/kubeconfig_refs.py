"""Resolve an account's `kubeconfigFile` reference into the kubeconfig's content.

Two forms, as Spinnaker accounts write them:

- a file path (`/home/spinnaker/.kube/prod.yml`): the hub reads the file, only when it is under
  one of the hub config's `dynamicAccounts.kubeconfigDirectories` once `..` and symbolic links
  are resolved; with none configured (the default) plain paths are refused. Whoever may create
  accounts must not be able to make the hub read, or tell apart, any file it can read
  (`/etc/shadow`): every refusal of a file (outside the directories, missing, unreadable, not a
  kubeconfig) has the same message, and the precise reason goes to the hub's log only;
- `encryptedFile:k8s!n:<secret>!k:<key>!ns:<namespace>`: Spinnaker's secret engine syntax for a
  Kubernetes Secret. The hub reads the Secret through its own Kubernetes credentials (hub config
  `kubernetes.kubeconfigFile`/`context`, or its in-cluster service account) and decodes the key.
  `!ns:` may be left out when `kubernetes.namespace` is set or the hub runs in a pod (its own
  namespace). `encrypted:` is accepted as a synonym of `encryptedFile:`.

Every failure is a `KubeconfigRefError` whose message names the reference and what went wrong,
never the content: a kubeconfig holds credentials, and even a YAML error message can quote a
line of it.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml

from ...kube.client import KubeClient
from ...kube.credentials import SERVICE_ACCOUNT_DIR, SERVICE_ACCOUNT_DIR_ENV, load_credentials
from ...kube.errors import APIError, ConnectionFailed, CredentialsError
from .errors import KubeconfigRefError

# libyaml's parser where PyYAML was built with it (its wheels are): each account's kubeconfig is
# read when the account is resolved, and the pure-Python parser was 6% of a hub activating 100.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

__all__ = [
    "DIRECTORIES_SETTING",
    "MAX_KUBECONFIG_BYTES",
    "UNUSABLE_FILE",
    "FileRef",
    "KubeconfigResolver",
    "SecretRef",
    "check_kubeconfig",
    "parse_reference",
]

MAX_KUBECONFIG_BYTES = 1024 * 1024
"""A kubeconfig larger than this is refused: it would be stored, and sent to agents, whole."""

DIRECTORIES_SETTING = "dynamicAccounts.kubeconfigDirectories"
"""The hub setting that lists where kubeconfig files may be read from."""

UNUSABLE_FILE = (
    "the kubeconfig file cannot be used: it must be a readable kubeconfig file under one of the directories in "
    f"the hub's {DIRECTORIES_SETTING} (the hub's log tells its operator why this one is not)"
)
"""Every refusal of a file an account names, whatever the reason, so that it tells nothing of
the file (the reference is not repeated either: the same words for every file)."""

_PREFIXES = ("encryptedFile:", "encrypted:")
_PARAMS = {"n": "name", "k": "key", "ns": "namespace"}
_DNS_LABEL_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789-")

log = logging.getLogger("scaleagent.hub.kubeconfig")


@dataclass(frozen=True)
class FileRef:
    """A kubeconfig in a file the hub can read."""

    path: Path

    def __str__(self) -> str:
        return str(self.path)


@dataclass(frozen=True)
class SecretRef:
    """A kubeconfig in key `key` of the Secret `name` in `namespace` (None: the default one)."""

    name: str
    key: str
    namespace: str | None = None

    def __str__(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"secret {where} key {self.key!r}"


def parse_reference(reference: str) -> FileRef | SecretRef:
    """Parse a `kubeconfigFile` value. Raises KubeconfigRefError naming the problem: an unknown
    secret engine, a missing or repeated parameter, a name Kubernetes would not accept."""
    if not isinstance(reference, str) or not reference.strip():
        raise KubeconfigRefError("the kubeconfig reference is empty")
    if "\0" in reference:
        raise KubeconfigRefError("the kubeconfig reference contains a NUL character")
    prefix = next((p for p in _PREFIXES if reference.startswith(p)), None)
    if prefix is None:
        return FileRef(Path(reference).expanduser())
    body = reference[len(prefix) :]
    engine, _, rest = body.partition("!")
    if engine != "k8s":
        raise KubeconfigRefError(
            f"{reference!r}: the secret engine {engine!r} is not supported; the hub reads Kubernetes Secrets: "
            "'encryptedFile:k8s!n:<secret>!k:<key>!ns:<namespace>'"
        )
    found: dict[str, str] = {}
    for part in filter(None, rest.split("!")):
        param, colon, value = part.partition(":")
        if not colon or param not in _PARAMS:
            raise KubeconfigRefError(
                f"{reference!r}: {part!r} is not a parameter; use n:<secret name>, k:<key> and optionally "
                "ns:<namespace>, separated by '!'"
            )
        if param in found:
            raise KubeconfigRefError(f"{reference!r}: {param}: is given twice")
        if not value:
            raise KubeconfigRefError(f"{reference!r}: {param}: has no value")
        found[param] = value
    for param in ("n", "k"):
        if param not in found:
            raise KubeconfigRefError(f"{reference!r}: the {_PARAMS[param]} is missing ({param}:<{_PARAMS[param]}>)")
    name, key, namespace = found["n"], found["k"], found.get("ns")
    if not _is_subdomain(name):
        raise KubeconfigRefError(
            f"{reference!r}: {name!r} is not a Secret name (lowercase letters, digits, '-' "
            "and '.', at most 253 characters)"
        )
    if len(key) > 253 or not all(c.isascii() and (c.isalnum() or c in "-_.") for c in key):
        raise KubeconfigRefError(f"{reference!r}: {key!r} is not a Secret key (letters, digits, '-', '_' and '.')")
    if namespace is not None and not _is_label(namespace):
        raise KubeconfigRefError(f"{reference!r}: {namespace!r} is not a namespace name")
    return SecretRef(name=name, key=key, namespace=namespace)


def check_kubeconfig(content: bytes, origin: str, context: str | None = None) -> None:
    """Raise KubeconfigRefError unless `content` looks like a kubeconfig (YAML with clusters,
    and `context` among its contexts when given). The agent parses it for real; checking here
    makes a wrong key or file fail at once, with a message that names where it came from.
    Messages give positions, never text: YAML errors quote the offending line otherwise."""
    if len(content) > MAX_KUBECONFIG_BYTES:
        raise KubeconfigRefError(
            f"{origin}: {len(content)} bytes is larger than a kubeconfig can be here ({MAX_KUBECONFIG_BYTES} bytes)"
        )
    try:
        text = content.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise KubeconfigRefError(
            f"{origin}: not a kubeconfig: not UTF-8 text (invalid byte at offset {e.start})"
        ) from None
    try:
        doc = yaml.load(text, Loader=_YAML_LOADER)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise KubeconfigRefError(f"{origin}: not a kubeconfig: invalid YAML{where}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("clusters"), list) or not doc["clusters"]:
        raise KubeconfigRefError(f"{origin}: not a kubeconfig: it has no 'clusters' list")
    if context is not None:
        names = [c.get("name") for c in doc.get("contexts") or [] if isinstance(c, dict)]
        if context not in names:
            raise KubeconfigRefError(
                f"{origin}: the kubeconfig has no context {context!r} (it has {', '.join(map(repr, names)) or 'none'})"
            )


class KubeconfigResolver:
    """Reads kubeconfig references: files directly, Secrets through the hub's Kubernetes access.

    The Kubernetes client is made at the first Secret reference and kept (credentials with
    token rotation refresh themselves); `close()` ends it."""

    def __init__(
        self,
        *,
        kubeconfig_file: Path | None = None,
        context: str | None = None,
        namespace: str | None = None,
        service_account_dir: Path | None = None,
        directories: tuple[Path, ...] | None = None,
    ) -> None:
        """`kubeconfig_file`/`context`: the hub's own credentials (hub config `kubernetes`);
        without a file, the in-cluster service account (from `service_account_dir`, by default
        the standard mount). `namespace`: for references without `!ns:`. `directories`: where
        file references may point (`dynamicAccounts.kubeconfigDirectories`; empty: nowhere);
        None, for a resolver built from parts in a test or tool, reads any path."""
        self.directories = directories
        self._kubeconfig_file = kubeconfig_file
        self._context = context
        self._namespace = namespace
        self._service_account_dir = service_account_dir
        self._client: KubeClient | None = None
        self._lock = asyncio.Lock()

    @classmethod
    def from_config(cls, kubernetes: Any, directories: tuple[Path, ...] = ()) -> KubeconfigResolver:
        """From the hub config's `kubernetes` section (a `KubernetesConfig`) and
        `dynamicAccounts.kubeconfigDirectories`."""
        return cls(
            kubeconfig_file=kubernetes.kubeconfig_file,
            context=kubernetes.context,
            namespace=kubernetes.namespace,
            directories=tuple(directories),
        )

    def refusal(self, reference: str | None) -> str | None:
        """Why `reference` is refused before anything is read, or None: a plain path when no
        kubeconfigDirectories are configured. Says nothing of any file."""
        if reference is None or self.directories is None:
            return None
        if not isinstance(reference, str) or reference.startswith(_PREFIXES):
            return None
        if not self.directories:
            return (
                "plain file paths are disabled on this hub: give a Kubernetes Secret, "
                "'encryptedFile:k8s!n:<secret>!k:<key>!ns:<namespace>', or have the hub's operator list the "
                f"directories kubeconfig files may be read from in {DIRECTORIES_SETTING}"
            )
        # Checked as written, without touching the file system (which would tell what exists);
        # symbolic links are followed when the file is read, with the same rule.
        written = os.path.normpath(os.path.abspath(reference))
        roots = [os.path.normpath(os.path.abspath(d)) for d in self.directories]
        if any(os.path.commonpath([written, root]) == root for root in roots):
            return None
        return f"the path is outside the directories this hub reads kubeconfig files from ({DIRECTORIES_SETTING})"

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def resolve(self, reference: str, context: str | None = None) -> bytes:
        """The kubeconfig `reference` points at, checked to be one (see `check_kubeconfig`).
        Raises KubeconfigRefError with the reason."""
        ref = parse_reference(reference)
        if isinstance(ref, FileRef) and self.directories is not None:
            if not self.directories:
                raise KubeconfigRefError(f"kubeconfig file {reference!r}: {self.refusal(reference)}")
            # Judged as read (links followed), every refusal with the same message.
            content = await asyncio.to_thread(_read_allowed, ref.path, self.directories, reference)
            origin = f"kubeconfig file {reference!r}"
        elif isinstance(ref, FileRef):
            content = await asyncio.to_thread(_read_file, ref.path)
            origin = f"kubeconfig file {ref.path}"
        else:
            content = await self._read_secret(ref)
            origin = f"kubeconfig in {self._describe(ref)}"
        check_kubeconfig(content, origin, context)
        return content

    def _describe(self, ref: SecretRef) -> str:
        namespace = ref.namespace or self._namespace or "?"
        return f"secret {namespace}/{ref.name} key {ref.key!r}"

    async def _read_secret(self, ref: SecretRef) -> bytes:
        namespace = ref.namespace or self._namespace or await asyncio.to_thread(self._own_namespace)
        if namespace is None:
            raise KubeconfigRefError(
                f"{ref}: no namespace: add '!ns:<namespace>' to the reference, or set kubernetes.namespace in the hub "
                "configuration"
            )
        where = f"secret {namespace}/{ref.name}"
        client = await self._kube()
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/secrets/{quote(ref.name, safe='')}"
        try:
            secret = await client.get(path)
        except APIError as e:
            if e.status == 404:
                raise KubeconfigRefError(f"{where}: not found in the hub's cluster ({client.server})") from None
            if e.status in (401, 403):
                raise KubeconfigRefError(
                    f"{where}: the hub may not read it ({e.status} {e.reason}); its Kubernetes credentials "
                    f"({client.credentials.source}) need 'get' on secrets in namespace {namespace}"
                ) from None
            raise KubeconfigRefError(f"{where}: the Kubernetes API answered {e.status} {e.reason}") from None
        except ConnectionFailed as e:
            raise KubeconfigRefError(f"{where}: cannot reach the hub's cluster: {e}") from None
        data = secret.get("data") if isinstance(secret, dict) else None
        data = data if isinstance(data, dict) else {}
        if ref.key not in data:
            keys = ", ".join(sorted(map(repr, data))) or "none"
            raise KubeconfigRefError(f"{where}: has no key {ref.key!r} (its keys: {keys})")
        try:
            return base64.b64decode(data[ref.key], validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise KubeconfigRefError(f"{where}: the value of key {ref.key!r} is not base64 data") from None

    async def _kube(self) -> KubeClient:
        async with self._lock:
            if self._client is None:
                try:
                    if self._kubeconfig_file is not None:
                        credentials = await load_credentials(kubeconfig=self._kubeconfig_file, context=self._context)
                    else:
                        credentials = await load_credentials(
                            in_cluster=True, service_account_dir=self._service_account_dir
                        )
                except CredentialsError as e:
                    hint = (
                        ""
                        if self._kubeconfig_file
                        else ("; outside a cluster, give the hub a kubeconfig in kubernetes.kubeconfigFile")
                    )
                    raise KubeconfigRefError(f"the hub has no Kubernetes access to read Secrets: {e}{hint}") from None
                self._client = KubeClient(credentials, timeout=15.0)
                log.info("kubeconfig references: reading Secrets from %s (%s)", credentials.server, credentials.source)
            return self._client

    def _own_namespace(self) -> str | None:
        """The namespace of the hub's pod, when it runs in one with a kubeconfig of its own."""
        if self._kubeconfig_file is not None:
            return None
        directory = self._service_account_dir or Path(os.environ.get(SERVICE_ACCOUNT_DIR_ENV, SERVICE_ACCOUNT_DIR))
        try:
            return (directory / "namespace").read_text().strip() or None
        except OSError:
            return None


def _read_file(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            content = f.read(MAX_KUBECONFIG_BYTES + 1)
    except FileNotFoundError:
        raise KubeconfigRefError(f"kubeconfig file {path}: the file does not exist on the hub") from None
    except IsADirectoryError:
        raise KubeconfigRefError(f"kubeconfig file {path}: a directory, not a file") from None
    except PermissionError:
        raise KubeconfigRefError(f"kubeconfig file {path}: the hub may not read it (permission denied)") from None
    except OSError as e:
        raise KubeconfigRefError(f"kubeconfig file {path}: cannot be read: {e.strerror or type(e).__name__}") from None
    return content


def _read_allowed(path: Path, directories: tuple[Path, ...], reference: str) -> bytes:
    """The kubeconfig at `path`, which must resolve (symbolic links and `..` followed) under one
    of `directories` and be a kubeconfig. Every refusal raises the same KubeconfigRefError, so
    that an API caller learns nothing of the file; the reason is logged for the operator."""
    real = os.path.realpath(path)
    roots = [os.path.realpath(d) for d in directories]
    try:
        if not any(os.path.commonpath([real, root]) == root for root in roots):
            raise KubeconfigRefError(
                f"kubeconfig file {path}: resolves to {real}, outside {DIRECTORIES_SETTING} ({', '.join(roots)})"
            )
        content = _read_file(Path(real))
        check_kubeconfig(content, f"kubeconfig file {path}")
    except KubeconfigRefError as e:
        log.warning("kubeconfigFile %r refused: %s", reference, e)
        raise KubeconfigRefError(UNUSABLE_FILE) from None
    return content


def _is_label(value: str) -> bool:
    return 0 < len(value) <= 63 and set(value) <= _DNS_LABEL_CHARS and value[0] != "-" and value[-1] != "-"


def _is_subdomain(value: str) -> bool:
    return 0 < len(value) <= 253 and all(_is_label(part) for part in value.split("."))
