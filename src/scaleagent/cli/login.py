"""`scale-agent login` and `scale-agent logout`: save (or forget) how this user reaches the hub.

    scale-agent login [--hub URL] [--token T | --token-stdin] [--certificate-authority FILE]
                      [--client-certificate FILE --client-key FILE]
    scale-agent logout

`login` first asks the hub who the credentials are (`GET /api/v1/whoami`; a hub without it:
`GET /api/v1/accounts`) and saves nothing the hub refuses; then it writes the config file
(credentials.py: mode 0600). Without `--token`, `--token-stdin` or a client certificate it asks
for the token on the terminal, without echo. The token is never printed.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from typing import Any

from . import credentials
from . import hub as hub_api
from .errors import CliError, HubError

__all__ = ["WHOAMI", "add_parsers", "identity"]

WHOAMI = "/api/v1/whoami"
FALLBACK = "/api/v1/accounts"


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Register `login` and `logout` on the `scale-agent` parser."""
    p = sub.add_parser(
        "login",
        help="check credentials against the hub and save them for the next commands",
        description="Check a token (or a client certificate) against the hub and save it, with the hub's "
        f"address, in {credentials.config_path()} (mode 0600; ${credentials.CONFIG_ENV} moves it). "
        "See docs/cli.md.",
    )
    p.add_argument(
        "--hub",
        metavar="URL",
        help=f"the hub's HTTP API (default: ${hub_api.HUB_ENV}, else the saved one, else {hub_api.DEFAULT_HUB})",
    )
    given = p.add_mutually_exclusive_group()
    given.add_argument("--token", help="the token (visible to other users in the process list: prefer the prompt)")
    given.add_argument("--token-stdin", action="store_true", help="read the token from standard input")
    p.add_argument("--certificate-authority", metavar="FILE", help="CA certificate(s) to verify an https hub with")
    p.add_argument("--client-certificate", metavar="FILE", help="log in with this client certificate")
    p.add_argument("--client-key", metavar="FILE", help="the client certificate's key")
    p.set_defaults(func=_run(_login))

    p = sub.add_parser(
        "logout",
        help="forget the saved credentials",
        description=f"Remove the token and client certificate from {credentials.config_path()} "
        "(the hub's address and CA stay).",
    )
    p.set_defaults(func=_run(_logout))


def identity(answer: Any) -> str:
    """Who the whoami answer says we are ('' when it does not say)."""
    if not isinstance(answer, dict):
        return ""
    for key in ("username", "name", "user", "subject"):
        value = answer.get(key)
        if isinstance(value, str) and value:
            return value
        if isinstance(value, dict):
            inner = identity(value)
            if inner:
                return inner
    return ""


def _read_token(args: argparse.Namespace, hub: str) -> str:
    if args.token is not None:
        return str(args.token).strip()
    if args.token_stdin:
        return sys.stdin.readline().strip()
    if args.client_certificate:
        return ""  # a certificate login
    if not sys.stdin.isatty():
        raise CliError("error: no token: give --token or --token-stdin (standard input is not a terminal)")
    try:
        return getpass.getpass(f"Token for {hub}: ").strip()
    except (EOFError, KeyboardInterrupt):
        raise CliError("error: no token given") from None


def _login(args: argparse.Namespace) -> int:
    saved = credentials.load()
    address = (args.hub or "").strip() or os.environ.get(hub_api.HUB_ENV, "").strip() or saved.hub
    address = address or hub_api.DEFAULT_HUB
    if bool(args.client_certificate) != bool(args.client_key):
        raise CliError("error: --client-certificate and --client-key go together")
    token = _read_token(args, address)
    if not token and not args.client_certificate:
        raise CliError("error: no token given")
    ca = credentials.absolute(args.certificate_authority)
    if not ca and saved.hub and credentials.same_hub(saved.hub, address):
        ca = saved.certificate_authority  # a new token for the same hub keeps its CA
    for path in (ca, args.client_certificate, args.client_key):
        if path and not os.path.isfile(os.path.expanduser(path)):
            raise CliError(f"error: {path}: no such file")
    hub = hub_api.Hub(
        address,
        token,
        "--token" if args.token is not None else "the token given",
        ca,
        credentials.absolute(args.client_certificate),
        credentials.absolute(args.client_key),
    )
    who = _check(hub)
    path = credentials.save(
        credentials.Login(hub.url, hub.token, hub.certificate_authority, hub.client_certificate, hub.client_key)
    )
    print(f"Logged in to {hub.url}{f' as {who}' if who else ''}; saved in {path}")
    return 0


def _check(hub: hub_api.Hub) -> str:
    """Ask the hub who these credentials are; a refusal is an error and nothing is saved."""
    try:
        try:
            return identity(hub_api.send(hub, "GET", WHOAMI))
        except HubError as e:
            if e.status != 404:
                raise
        hub_api.send(hub, "GET", FALLBACK)  # an older hub: any authenticated read will do
        return ""
    except HubError as e:
        if e.status == 403:
            return ""  # authenticated, only not allowed that read: the credentials are good
        detail = str(e).removeprefix("error: ")
        if e.status == 401:
            hub_said = detail.rsplit("(hub: ", 1)[-1].rstrip(")") if "(hub: " in detail else detail
            raise CliError(f"error: the hub refused these credentials ({hub_said}): nothing saved") from None
        raise CliError(f"error: could not check the credentials with the hub ({detail}): nothing saved") from None


def _logout(args: argparse.Namespace) -> int:
    old, path, removed = credentials.remove_credentials()
    if removed:
        print(f"Logged out of {old.hub or 'the hub'}: credentials removed from {path}")
    else:
        print(f"Not logged in (no credentials in {path})")
    if os.environ.get(credentials.TOKEN_ENV, "").strip():
        print(f"note: ${credentials.TOKEN_ENV} is still set in this environment", file=sys.stderr)
    return 0


def _run(command: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        try:
            return int(command(args))
        except CliError as e:
            print(e, file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return 130

    return run
