"""The hub's HTTP API as the CLI uses it: one place for the address, the credentials, the requests,
their errors in kubectl's words, and waiting for a task.

The address comes from `--hub`, else the `SCALE_AGENT_HUB` environment variable, else the hub of
`scale-agent login`'s config file, else http://127.0.0.1:7002. The credentials: `--token`, else
`SCALE_AGENT_TOKEN`, else the config file's (only when talking to the file's hub); an HTTPS hub's
certificate is checked against `--certificate-authority` (else the file's, else the system's CAs),
and `--client-certificate`/`--client-key` log in with a certificate (credentials.py). Standard
library only (and PyYAML for the file): a CLI must start fast and needs no event loop.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from . import credentials
from .credentials import TOKEN_ENV
from .errors import CliError, HubError

__all__ = [
    "DEFAULT_HUB",
    "HUB_ENV",
    "LOGIN_HINT",
    "TASK_POLL_SECONDS",
    "TOKEN_ENV",
    "Hub",
    "add_connection_options",
    "connect",
    "connect_args",
    "default_hub",
    "open_stream",
    "run_task",
    "send",
    "url",
]

DEFAULT_HUB = "http://127.0.0.1:7002"
HUB_ENV = "SCALE_AGENT_HUB"
TASK_POLL_SECONDS = 20
"""The longest single `GET /task/{id}?waitSeconds=` (the hub answers as soon as the task ends)."""


LOGIN_HINT = f"the hub asks you to log in: scale-agent login, --token or {TOKEN_ENV}"
"""What a 401 says first, before the hub's own message."""


def default_hub() -> str:
    """The hub without `--hub`: the environment's (a shell or a CI job names its hub once), else
    the one `scale-agent login` saved, else the local default. Never fails: a command that does not
    talk to the hub builds the same parser, and `connect` reports a bad file when it matters."""
    try:
        saved = credentials.load(check=False).hub
    except CliError:
        saved = ""
    return os.environ.get(HUB_ENV, "").strip() or saved or DEFAULT_HUB


@dataclass(frozen=True)
class Hub:
    """A hub and how to talk to it. Its repr and str never show the token."""

    url: str
    token: str = field(default="", repr=False)
    token_source: str = ""
    """Where the token came from, for messages: `--token`, `$SCALE_AGENT_TOKEN` or the file."""
    certificate_authority: str = ""
    client_certificate: str = ""
    client_key: str = ""

    def __str__(self) -> str:
        return self.url

    @cached_property
    def ssl_context(self) -> ssl.SSLContext | None:
        """For an https hub: verify it (with the CA given, else the system's), present the client
        certificate if any. None for http."""
        if not self.url.lower().startswith("https://"):
            return None
        try:
            context = ssl.create_default_context(cafile=self.certificate_authority or None)
            if self.client_certificate:
                context.load_cert_chain(self.client_certificate, self.client_key or None)
        except (OSError, ssl.SSLError) as e:
            what = f"{self.certificate_authority or ''} {self.client_certificate or ''}".strip()
            raise CliError(f"error: cannot load the TLS files ({what}): {e}") from None
        return context


def connect(
    hub: str | None = None,
    *,
    token: str | None = None,
    certificate_authority: str | None = None,
    client_certificate: str | None = None,
    client_key: str | None = None,
) -> Hub:
    """The hub to talk to and its credentials: the options given (from the command line) first,
    then the environment, then `scale-agent login`'s file, whose credentials are used only for
    the file's own hub."""
    address = (hub or "").strip() or os.environ.get(HUB_ENV, "").strip()
    saved = credentials.load()
    address = address or saved.hub or DEFAULT_HUB
    if not (saved.hub and credentials.same_hub(saved.hub, address)):
        saved = credentials.Login()  # another hub's login is not sent here
    if bool(client_certificate) != bool(client_key) and (client_certificate or client_key):
        raise CliError("error: --client-certificate and --client-key go together")
    source = ""
    if token:
        source = "--token"
    elif os.environ.get(TOKEN_ENV, "").strip():
        token, source = os.environ[TOKEN_ENV].strip(), f"${TOKEN_ENV}"
    elif saved.token:
        token, source = saved.token, f"the login saved in {credentials.config_path()}"
    if not client_certificate:
        client_certificate, client_key = saved.client_certificate, saved.client_key
    return Hub(
        address,
        token or "",
        source,
        certificate_authority or saved.certificate_authority,
        client_certificate or "",
        client_key or "",
    )


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    """`--hub`, `--token` and the TLS options every command that talks to the hub takes."""
    parser.add_argument(
        "--hub",
        default=default_hub(),
        metavar="URL",
        help=f"the hub's HTTP API (default: ${HUB_ENV}, else the hub of `scale-agent login`, else {DEFAULT_HUB})",
    )
    parser.add_argument(
        "--token",
        default=None,
        help=f"bearer token for the hub (default: ${TOKEN_ENV}, else the one `scale-agent login` saved)",
    )
    parser.add_argument(
        "--certificate-authority",
        default=None,
        metavar="FILE",
        help="CA certificate(s) to verify an https hub with (default: the login's, else the system's)",
    )
    parser.add_argument("--client-certificate", default=None, metavar="FILE", help="log in with this certificate")
    parser.add_argument("--client-key", default=None, metavar="FILE", help="the client certificate's key")


def connect_args(args: argparse.Namespace) -> Hub:
    """The Hub the parsed options of add_connection_options name."""
    hub = getattr(args, "hub", None)
    if isinstance(hub, Hub):
        return hub
    return connect(
        hub,
        token=getattr(args, "token", None),
        certificate_authority=getattr(args, "certificate_authority", None),
        client_certificate=getattr(args, "client_certificate", None),
        client_key=getattr(args, "client_key", None),
    )


def _as_hub(hub: Hub | str | None) -> Hub:
    return hub if isinstance(hub, Hub) else connect(hub)


def url(hub: Hub | str, path: str, params: Sequence[tuple[str, str]] = ()) -> str:
    """The hub's URL for a path and its query."""
    base = hub.url if isinstance(hub, Hub) else hub
    return base.rstrip("/") + path + (f"?{urllib.parse.urlencode(params)}" if params else "")


def open_stream(
    hub: Hub | str | None,
    method: str,
    path: str,
    *,
    body: Any = None,
    params: Sequence[tuple[str, str]] = (),
    timeout: float = 60.0,
    accept: str = "application/json",
) -> Any:
    """The open response (for a stream such as the watch), or HubError with the hub's own message.

    `hub` is a Hub, or an address (None: the default one) whose credentials are found as
    `connect` finds them."""
    hub = _as_hub(hub)
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json", "Accept": accept}
    req = urllib.request.Request(url(hub, path, params), data=data, method=method, headers=headers)
    if hub.token:  # unredirected: a redirect to another server must not carry the token there
        req.add_unredirected_header("Authorization", f"Bearer {hub.token}")
    try:
        return urllib.request.urlopen(req, timeout=timeout, context=hub.ssl_context)
    except urllib.error.HTTPError as e:
        raw = e.read()
        reason = ""
        try:
            body = json.loads(raw)
            message = body["error"]
            reason = str(body.get("reason") or "")
        except (ValueError, KeyError, TypeError, AttributeError):
            # Not the hub's error shape: another server (the agent's health port, a proxy's page).
            raise HubError(
                f"error: {hub.url} answered {e.code} {e.reason} to {method} {path}, not as a Scale Agent hub "
                "does: is --hub (or SCALE_AGENT_HUB) the hub's HTTP address?",
                e.code,
            ) from None
        if not isinstance(message, str):
            message = str(message)
        if e.code == 401:
            refused = f"; it refused the token from {hub.token_source}" if hub.token else ""
            raise HubError(f"error: {LOGIN_HINT}{refused} (hub: {message})", e.code, reason) from None
        if e.code == 403:  # the hub's message names the permission missing
            raise HubError(f"Error from server (Forbidden): {message}", e.code, reason) from None
        if message in ("Not Found", "Method Not Allowed"):
            # a route this hub does not have (an older hub, or --hub naming something else)
            message = f"the hub answered {e.code} {message} to {method} {path}"
        raise HubError(f"error: {message}", e.code, reason) from None
    except http.client.HTTPException as e:  # not HTTP at all: the hub's gRPC port, say
        raise HubError(
            f"error: {hub.url} does not speak HTTP/1.1 ({type(e).__name__}): is --hub (or SCALE_AGENT_HUB) the "
            "hub's HTTP address? Its gRPC port is for agents"
        ) from None
    except (urllib.error.URLError, OSError) as e:
        cause = e.reason if isinstance(e, urllib.error.URLError) else e
        if isinstance(cause, ssl.SSLCertVerificationError):
            raise HubError(
                f"error: cannot reach the hub at {hub.url}: its certificate is not trusted: {cause.verify_message} "
                "(see --certificate-authority)"
            ) from None
        if not hub.url.startswith(("http://", "https://")):
            raise HubError(f"error: the hub address {hub.url!r} needs its scheme: http://... or https://...") from None
        if isinstance(cause, ssl.SSLError) or (
            hub.url.startswith("https://") and hub.client_certificate and "closed connection" in str(cause)
        ):
            raise HubError(
                f"error: the hub at {hub.url} ended the TLS handshake ({cause}): if you sent a client certificate, "
                "the hub may not trust the CA that signed it"
            ) from None
        raise HubError(f"error: cannot reach the hub at {hub.url}: {cause} (is it running? see --hub)") from None


def send(
    hub: Hub | str | None,
    method: str,
    path: str,
    *,
    body: Any = None,
    params: Sequence[tuple[str, str]] = (),
    timeout: float = 60.0,
) -> Any:
    """One request; its JSON answer, or HubError with the hub's own message."""
    with open_stream(hub, method, path, body=body, params=params, timeout=timeout) as response:
        try:
            return json.loads(response.read() or b"null")
        except ValueError:
            raise HubError(f"error: {method} {path}: the hub answered something that is not JSON") from None
        except (TimeoutError, OSError, http.client.HTTPException) as e:
            raise HubError(f"error: {method} {path}: {e}") from None


def run_task(hub: Hub | str | None, operations: list[dict[str, Any]], timeout: float) -> dict[str, Any]:
    """Send the operations and wait for their task to end (or the timeout), as one CLI command does."""
    hub = _as_hub(hub)
    answer = send(hub, "POST", "/kubernetes/ops", body=operations)
    if not isinstance(answer, dict) or not answer.get("id"):
        raise CliError(f"error: POST /kubernetes/ops: unexpected answer {str(answer)[:300]}")
    task_id = str(answer["id"])
    path = str(answer.get("resourceUri") or f"/task/{urllib.parse.quote(task_id, safe='')}")
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        wait = max(0, min(TASK_POLL_SECONDS, int(remaining)))
        task = send(hub, "GET", path, params=[("waitSeconds", str(wait))], timeout=wait + 60)
        status = task.get("status") or {}
        if task.get("state") in ("completed", "failed") or status.get("completed") or status.get("failed"):
            return task
        if time.monotonic() >= deadline:
            raise CliError(
                f"error: timed out after {timeout:g}s waiting for task {task_id} "
                f"(it may still finish: GET {path}); last status: {status.get('status', '')}"
            )
