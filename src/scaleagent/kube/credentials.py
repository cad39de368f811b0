"""Credentials for one cluster, resolved by the official Kubernetes client's config loader.

The loader understands every kubeconfig form users have (client certificates, bearer tokens and
token files, exec credential plugins, auth providers, `insecure-skip-tls-verify`,
`tls-server-name`, contexts) and the in-cluster service account with token rotation. We take
what it resolves and build our own TLS context, because requests go through aiohttp with raw
JSON rather than through the generated client.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# Where to find the service account files instead (tests, unusual mounts).
SERVICE_ACCOUNT_DIR_ENV = "SCALE_AGENT_SERVICE_ACCOUNT_DIR"
# How often a token that may rotate (exec plugins, projected service account tokens) is re-checked.
REFRESH_EVERY = 30.0


class CredentialsError(Exception):
    """The credentials cannot be resolved; the message says which file or setting and why."""


@dataclass
class Credentials:
    server: str
    ssl_context: ssl.SSLContext
    server_hostname: str | None
    source: str
    _configuration: Any = field(repr=False)
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
            loader.expiry = datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)


def _ssl_context(cfg: Any) -> ssl.SSLContext:
    if cfg.verify_ssl:
        ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert) if cfg.ssl_ca_cert else ssl.create_default_context()
    else:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cfg.cert_file and cfg.key_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
    return ctx


def _finish(cfg: Any, source: str) -> Credentials:
    host = cfg.host or ""
    if not host.startswith(("https://", "http://")):
        raise CredentialsError(f"{source}: the server address {host!r} is not an http(s) URL")
    try:
        ctx = _ssl_context(cfg)
    except (ssl.SSLError, OSError) as e:
        raise CredentialsError(f"{source}: cannot load TLS certificates: {e}") from None
    return Credentials(server=host.rstrip("/"), ssl_context=ctx, server_hostname=getattr(cfg, "tls_server_name", None),
                       source=source, _configuration=cfg)


def _load_kubeconfig(path: Path, context: str | None) -> Credentials:
    from kubernetes.client import Configuration
    from kubernetes.config import kube_config
    from kubernetes.config.config_exception import ConfigException

    source = f"kubeconfig {path}" + (f" (context {context})" if context else "")
    if not path.exists():
        raise CredentialsError(f"{source}: the file does not exist")
    if not os.access(path, os.R_OK):
        raise CredentialsError(f"{source}: the file is not readable")
    cfg = Configuration()
    try:
        loader = kube_config._get_kube_config_loader(filename=str(path), active_context=context, persist_config=False)
        loader.load_and_set(cfg)
    except ConfigException as e:
        raise CredentialsError(f"{source}: {e}") from None
    except Exception as e:  # YAML errors, exec plugins that fail, unreadable certificate files
        raise CredentialsError(f"{source}: {type(e).__name__}: {e}") from None
    cfg._scale_agent_loader = loader
    return _finish(cfg, source)


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


async def load_credentials(
    *, kubeconfig: Path | None = None, context: str | None = None, in_cluster: bool = False,
    service_account_dir: Path | None = None, environ: dict[str, str] | None = None,
) -> Credentials:
    """Resolve credentials in a thread: loaders read files and may run exec plugins."""
    if in_cluster:
        env = dict(os.environ if environ is None else environ)
        directory = service_account_dir or Path(env.get(SERVICE_ACCOUNT_DIR_ENV, SERVICE_ACCOUNT_DIR))
        return await asyncio.to_thread(_load_in_cluster, directory, env)
    if kubeconfig is None:
        raise CredentialsError("no kubeconfig file and no service account: nothing to connect with")
    return await asyncio.to_thread(_load_kubeconfig, Path(kubeconfig), context)
