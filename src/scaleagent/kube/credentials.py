"""Credentials for one cluster, resolved by the official Kubernetes client's config loader.

The loader understands every kubeconfig form users have (client certificates, bearer tokens and
token files, exec credential plugins, auth providers, `insecure-skip-tls-verify`,
`tls-server-name`, contexts) and the in-cluster service account with token rotation. We take
what it resolves and build our own TLS context, because requests go through aiohttp with raw
JSON rather than through the generated client.

A kubeconfig comes from a file (the agent's configuration) or as content already in memory (a
dynamic account the hub sent). Either way, certificates and keys embedded in it
(`certificate-authority-data`, `client-certificate-data`, `client-key-data`) are kept in memory:
the loader would write them to temporary files, so they are hidden from it while it resolves the
cluster and handed to the TLS context directly (the client key through an anonymous memory file,
`memfd_create`, as Python's `ssl` only reads keys from a path).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import copy
import datetime
import hashlib
import os
import ssl
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .errors import CredentialsError

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# Where to find the service account files instead (tests, unusual mounts).
SERVICE_ACCOUNT_DIR_ENV = "SCALE_AGENT_SERVICE_ACCOUNT_DIR"
# How often a token that may rotate (exec plugins, projected service account tokens) is re-checked.
REFRESH_EVERY = 30.0


@dataclass
class Credentials:
    server: str
    ssl_context: ssl.SSLContext
    server_hostname: str | None
    source: str
    _configuration: Any = field(repr=False)
    # Who these credentials authenticate as, at which server (a digest of the server, the CA and the
    # client certificate; a bearer token is read apart, it may rotate): accounts with equal
    # identities and tokens get the same discovery and access-review answers. Empty: unknown.
    identity: str = field(default="", repr=False)
    _checked: float = field(default=0.0, repr=False)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    @property
    def host(self) -> str:
        return urlsplit(self.server).netloc

    async def authorization(self) -> str | None:
        """The Authorization header value, refreshed off the event loop when it may have rotated."""
        hook = self._configuration.refresh_api_key_hook
        if hook is not None and time.monotonic() - self._checked > REFRESH_EVERY:
            async with self._lock:
                if time.monotonic() - self._checked > REFRESH_EVERY:
                    try:
                        await asyncio.to_thread(hook, self._configuration)
                    except Exception as e:  # an exec plugin that fails, a token file that vanished
                        raise CredentialsError(f"{self.source}: refreshing credentials failed: {e}") from None
                    self._checked = time.monotonic()
        return self._current()

    def _current(self) -> str | None:
        keys = self._configuration.api_key
        token = keys.get("BearerToken") or keys.get("authorization")
        if not token:
            return None
        return token if token.lower().startswith("bearer ") else f"Bearer {token}"

    def invalidate(self, rejected: str | None = None) -> None:
        """After a 401: make the loader re-run its exec plugin or re-read its token file next time.

        `rejected` is the Authorization value the server refused. When many watches get a 401 at
        once, only the first makes a refresh happen; the others find the credentials already
        renewed since they sent theirs, and leave them alone.
        """
        if rejected is not None and rejected != self._current():
            return
        self._checked = 0.0
        loader = getattr(self._configuration, "_scale_agent_loader", None)
        if loader is None:
            return
        if hasattr(loader, "token_expires_at"):  # in-cluster loader
            loader.token_expires_at = datetime.datetime.min
        else:  # kubeconfig loader: an expiry in the past makes its hook reload the credentials
            loader.expiry = datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)


@dataclass
class _Embedded:
    """Certificate data a kubeconfig holds inline (PEM), kept out of the loader's temporary files."""

    ca: bytes | None = None
    cert: bytes | None = None
    key: bytes | None = None


_EMBEDDED_KEYS = (
    ("ca", "_cluster", "certificate-authority-data"),
    ("cert", "_user", "client-certificate-data"),
    ("key", "_user", "client-key-data"),
)


@contextlib.contextmanager
def _embedded_taken(loader: Any, source: str) -> Iterator[_Embedded]:
    """The active context's inline certificate data, decoded, hidden from the loader meanwhile.

    The loader resolves the context (`_cluster`, `_user`: views of the document's own dicts), so
    which cluster and user apply is still decided by the official code; only where their inline
    data goes changes. The keys are put back afterwards, so that an exec plugin run again later
    (`provideClusterInfo`) still gets the whole cluster entry.
    """
    found = _Embedded()
    taken: list[tuple[dict[str, Any], str, Any]] = []
    try:
        for attr, part, key in _EMBEDDED_KEYS:
            value = getattr(getattr(loader, part, None), "value", None)
            if not isinstance(value, dict) or key not in value:
                continue
            data = value.pop(key)
            taken.append((value, key, data))
            if not data:
                continue
            try:
                setattr(found, attr, base64.standard_b64decode(data))  # as lenient as the loader itself
            except (binascii.Error, ValueError, TypeError):
                raise CredentialsError(f"{source}: {key} is not valid base64") from None
        yield found
    finally:
        for value, key, data in taken:
            value[key] = data


def _read_file(path: str, what: str, source: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise CredentialsError(f"{source}: cannot read the {what} {path}: {e.strerror or e}") from None


def _load_chain_from_memory(ctx: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """Give a client certificate and key to `ctx` without writing them to a filesystem.

    `SSLContext.load_cert_chain` only takes paths. An anonymous memory file (Linux `memfd_create`)
    has a path under /proc and no place on any disk, and is gone when closed. Where it does not
    exist, a private temporary file is used for the duration of the call only.
    """
    pem = cert.rstrip(b"\n") + b"\n" + key
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("scale-agent-client-credentials", getattr(os, "MFD_CLOEXEC", 0))
        try:
            view = memoryview(pem)
            while view:
                view = view[os.write(fd, view) :]
            ctx.load_cert_chain(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)
        return
    with tempfile.TemporaryDirectory(prefix="scale-agent-") as directory:  # 0700, removed at once
        path = os.path.join(directory, "client.pem")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
            f.write(pem)
        ctx.load_cert_chain(path)


def _ssl_context(cfg: Any, embedded: _Embedded, source: str) -> ssl.SSLContext:
    if cfg.verify_ssl:
        if embedded.ca:
            ctx = ssl.create_default_context(cadata=embedded.ca.decode("ascii", errors="replace"))
        elif cfg.ssl_ca_cert:
            ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
        else:
            ctx = ssl.create_default_context()
    else:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if embedded.cert or embedded.key:
        cert = embedded.cert or (_read_file(cfg.cert_file, "client certificate", source) if cfg.cert_file else None)
        key = embedded.key or (_read_file(cfg.key_file, "client key", source) if cfg.key_file else None)
        if cert and key:
            _load_chain_from_memory(ctx, cert, key)
    elif cfg.cert_file and cfg.key_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
    return ctx


def _finish(cfg: Any, source: str, embedded: _Embedded | None = None) -> Credentials:
    host = cfg.host or ""
    if not host.startswith(("https://", "http://")):
        raise CredentialsError(f"{source}: the server address {host!r} is not an http(s) URL")
    try:
        ctx = _ssl_context(cfg, embedded or _Embedded(), source)
    except (ssl.SSLError, OSError, ValueError) as e:
        raise CredentialsError(f"{source}: cannot load TLS certificates: {e}") from None
    return Credentials(
        server=host.rstrip("/"),
        ssl_context=ctx,
        server_hostname=getattr(cfg, "tls_server_name", None),
        source=source,
        _configuration=cfg,
        identity=_identity(cfg, host, embedded or _Embedded()),
    )


def _identity(cfg: Any, host: str, embedded: _Embedded) -> str:
    """A digest of what, besides a bearer token, says who is asking where (see Credentials.identity)."""
    digest = hashlib.sha256()
    for part in (
        host.rstrip("/"),
        str(getattr(cfg, "tls_server_name", None) or ""),
        str(bool(cfg.verify_ssl)),
        embedded.ca or str(cfg.ssl_ca_cert or ""),
        embedded.cert or str(cfg.cert_file or ""),
        embedded.key or str(cfg.key_file or ""),
    ):
        data = part if isinstance(part, bytes) else part.encode()
        digest.update(len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()


def _load_kubeconfig(path: Path, context: str | None) -> Credentials:
    from kubernetes.config import kube_config

    source = f"kubeconfig {path}" + (f" (context {context})" if context else "")
    if not path.exists():
        raise CredentialsError(f"{source}: the file does not exist")
    if not os.access(path, os.R_OK):
        raise CredentialsError(f"{source}: the file is not readable")
    return _load_with(
        lambda: kube_config._get_kube_config_loader(filename=str(path), active_context=context, persist_config=False),
        source,
    )


def _content_loader(content: Mapping[str, Any], context: str | None) -> Any:
    """A loader over a private copy of the document, which loading changes for a while."""
    from kubernetes.config import kube_config

    return kube_config._get_kube_config_loader(
        config_dict=copy.deepcopy(dict(content)), active_context=context, persist_config=False
    )


def _load_kubeconfig_content(content: Mapping[str, Any], context: str | None, source: str) -> Credentials:
    source += f" (context {context})" if context else ""
    return _load_with(lambda: _content_loader(content, context), source)


def _load_with(make_loader: Any, source: str) -> Credentials:
    from kubernetes.client import Configuration
    from kubernetes.config.config_exception import ConfigException

    cfg = Configuration()
    try:
        loader = make_loader()
        # What `loader.load_and_set(cfg)` does, with the inline certificates kept from its temp files.
        loader._load_authentication()
        with _embedded_taken(loader, source) as embedded:
            loader._load_cluster_info()
        loader._set_config(cfg)
    except CredentialsError:
        raise
    except ConfigException as e:
        raise CredentialsError(f"{source}: {e}") from None
    except Exception as e:  # YAML errors, exec plugins that fail, unreadable certificate files
        raise CredentialsError(f"{source}: {type(e).__name__}: {e}") from None
    cfg._scale_agent_loader = loader
    return _finish(cfg, source, embedded)


def check_kubeconfig(content: Mapping[str, Any], context: str | None, source: str) -> None:
    """Raise CredentialsError now if the document names no usable context, cluster or user.

    Only the document is looked at (nothing is read, run or contacted): a dynamic account whose
    kubeconfig cannot work is refused in the hub's request, not reported later as an error.
    """
    from kubernetes.config.config_exception import ConfigException

    where = source + (f" (context {context})" if context else "")
    try:
        loader = _content_loader(content, context)
    except ConfigException as e:
        raise CredentialsError(f"{where}: {e}") from None
    except Exception as e:  # a document of the wrong shape: a list where a mapping belongs...
        raise CredentialsError(f"{where}: not a usable kubeconfig ({type(e).__name__})") from None
    cluster = getattr(loader, "_cluster", None)
    if cluster is None or "server" not in cluster:
        raise CredentialsError(f"{where}: the context's cluster has no server address")


def _load_in_cluster(directory: Path, environ: dict[str, str]) -> Credentials:
    from kubernetes.client import Configuration
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.incluster_config import InClusterConfigLoader

    source = "in-cluster service account"
    cfg = Configuration()
    loader = InClusterConfigLoader(str(directory / "token"), str(directory / "ca.crt"), environ=environ)
    try:
        loader.load_and_set(cfg)
    except ConfigException as e:
        raise CredentialsError(f"{source}: {e} (looked in {directory} and KUBERNETES_SERVICE_HOST/PORT)") from None
    cfg._scale_agent_loader = loader
    return _finish(cfg, source)


def service_account_namespace(environ: Mapping[str, str] | None = None) -> str | None:
    """The namespace of the pod's service account (its mounted `namespace` file), or None."""
    env = os.environ if environ is None else environ
    path = Path(env.get(SERVICE_ACCOUNT_DIR_ENV, SERVICE_ACCOUNT_DIR)) / "namespace"
    try:
        name = path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return name or None


CONTENT_SOURCE = "kubeconfig sent by the hub"
"""How a kubeconfig given as content is named in messages (never its content)."""


async def load_credentials(
    *,
    kubeconfig: Path | None = None,
    context: str | None = None,
    in_cluster: bool = False,
    kubeconfig_content: Mapping[str, Any] | None = None,
    content_source: str = CONTENT_SOURCE,
    service_account_dir: Path | None = None,
    environ: dict[str, str] | None = None,
) -> Credentials:
    """Resolve credentials in a thread: loaders read files and may run exec plugins.

    `kubeconfig_content` is a kubeconfig document already parsed (a dynamic account's): it is
    used as it is, never written anywhere; `content_source` names it in messages.
    """
    if kubeconfig_content is not None:
        return await asyncio.to_thread(_load_kubeconfig_content, kubeconfig_content, context, content_source)
    if in_cluster:
        env = dict(os.environ if environ is None else environ)
        directory = service_account_dir or Path(env.get(SERVICE_ACCOUNT_DIR_ENV, SERVICE_ACCOUNT_DIR))
        return await asyncio.to_thread(_load_in_cluster, directory, env)
    if kubeconfig is None:
        raise CredentialsError("no kubeconfig file and no service account: nothing to connect with")
    return await asyncio.to_thread(_load_kubeconfig, Path(kubeconfig), context)
