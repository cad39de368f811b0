"""`scale-agent accounts`: dynamic accounts from the command line, through the hub's REST API.

    scale-agent accounts list [--state S] [--zone Z] [--name PATTERN] [-o json]
    scale-agent accounts get NAME
    scale-agent accounts add NAME [--zone Z] [--kubeconfig-file REF] [--namespaces a,b] ... [--activate]
    scale-agent accounts migrate NAME... [--wait]
    scale-agent accounts deactivate NAME...
    scale-agent accounts delete NAME...
    scale-agent accounts generate-key

Every command is one or two HTTP requests to the hub (`--hub`, else `$SCALE_AGENT_HUB`, else the
hub of `scale-agent login`, else http://127.0.0.1:7002; credentials as docs/cli.md says), so
what it can do and the checks it gets are exactly the API's (docs/accounts.md); errors print the
API's own message. Standard library only: the CLI must start fast and needs no event loop.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.parse
from typing import Any, TextIO

from . import hub as hub_api
from .errors import CliError

__all__ = ["add_parser"]

WAIT_POLL_SECONDS = 0.5
"""How often `migrate --wait` asks for the accounts' states (the API has no push for them)."""

_COLUMNS = (
    ("NAME", "name"),
    ("STATE", "state"),
    ("ZONE", "zoneId"),
    ("KUBECONFIG", "kubeconfigFile"),
    ("AGENT", "agentId"),
    ("FAILED", "failedCount"),
    ("ERROR", "errorMessage"),
)
_LIST_SETTINGS = (
    ("namespaces", "namespaces"),
    ("omit_namespaces", "omitNamespaces"),
    ("kinds", "kinds"),
    ("omit_kinds", "omitKinds"),
    ("custom_resource_definitions", "customResourceDefinitions"),
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register `accounts` and its subcommands on the `scale-agent` parser."""
    common = argparse.ArgumentParser(add_help=False)
    hub_api.add_connection_options(common)
    common.add_argument("-o", "--output", choices=["table", "json"], default="table", help="output format")

    p = sub.add_parser(
        "accounts",
        help="create, migrate and manage dynamic accounts on a hub",
        description="Dynamic accounts through the hub's REST API (see docs/accounts.md).",
    )
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
    commands = p.add_subparsers(dest="accounts_command", metavar="COMMAND")

    c = commands.add_parser("list", parents=[common], help="list accounts")
    c.add_argument("--state", action="append", default=[], help="only this state (repeatable, or comma-separated)")
    c.add_argument("--zone", help="only this zone ('' for accounts without one)")
    c.add_argument("--name", help="a name, or a pattern with * and ?")
    c.set_defaults(func=_run(_list))

    c = commands.add_parser("get", parents=[common], help="show one account")
    c.add_argument("name")
    c.set_defaults(func=_run(_get))

    c = commands.add_parser("add", parents=[common], help="create an account (INACTIVE; --activate migrates it too)")
    c.add_argument("name")
    _settings_options(c)
    c.add_argument("--activate", action="store_true", help="migrate it at once (PATCH state ACTIVE)")
    c.set_defaults(func=_run(_add))

    c = commands.add_parser("migrate", parents=[common], help="migrate accounts to agents (state ACTIVE)")
    c.add_argument("names", nargs="+", metavar="NAME")
    c.add_argument("--wait", action="store_true", help="wait until each is ACTIVE or FAILED (exit 1 if any FAILED)")
    c.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS", help="with --wait (default 300)")
    c.set_defaults(func=_run(_migrate))

    c = commands.add_parser("deactivate", parents=[common], help="stop the agents following accounts (state INACTIVE)")
    c.add_argument("names", nargs="+", metavar="NAME")
    c.set_defaults(func=_run(_deactivate))

    c = commands.add_parser("delete", parents=[common], help="delete accounts (their agents stop first)")
    c.add_argument("names", nargs="+", metavar="NAME")
    c.set_defaults(func=_run(_delete))

    c = commands.add_parser("generate-key", help="print a new dynamicAccounts.encryptionKey")
    c.set_defaults(func=_generate_key)


def _settings_options(c: argparse.ArgumentParser) -> None:
    c.add_argument("--zone", help="zoneId: only agents of this zone get it")
    c.add_argument(
        "--kubeconfig-file",
        metavar="REF",
        help="a path on the hub, or 'encryptedFile:k8s!n:<secret>!k:<key>!ns:<namespace>'",
    )
    c.add_argument("--context", help="the kubeconfig context")
    for option, _ in _LIST_SETTINGS:
        c.add_argument(f"--{option.replace('_', '-')}", metavar="A,B", help="comma-separated")
    c.add_argument("--only-namespaced-resources", action="store_true", help="skip cluster-scoped kinds")


def _account_body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {"name": args.name}
    if args.zone is not None:
        body["zoneId"] = args.zone
    if args.kubeconfig_file is not None:
        body["kubeconfigFile"] = args.kubeconfig_file
    if args.context is not None:
        body["context"] = args.context
    for option, key in _LIST_SETTINGS:
        value = getattr(args, option)
        if value is not None:
            body[key] = [v.strip() for v in value.split(",") if v.strip()]
    if args.only_namespaced_resources:
        body["onlyNamespacedResources"] = True
    return body


# --- commands ----------------------------------------------------------------------------------


def _list(args: argparse.Namespace, out: TextIO) -> int:
    params: list[tuple[str, str]] = [("state", s) for s in args.state]
    if args.zone is not None:
        params.append(("zoneId", args.zone))
    if args.name is not None:
        params.append(("name", args.name))
    _print(args, out, hub_api.send(args.hub, "GET", "/armory/accounts", params=params))
    return 0


def _get(args: argparse.Namespace, out: TextIO) -> int:
    account = hub_api.send(args.hub, "GET", f"/armory/accounts/{urllib.parse.quote(args.name, safe='')}")
    if args.output == "json":
        _print(args, out, account)
    else:
        for key, value in account.items():
            out.write(f"{key + ':':<26}{_cell(value)}\n")
    return 0


def _add(args: argparse.Namespace, out: TextIO) -> int:
    accounts = hub_api.send(args.hub, "POST", "/armory/accounts", body=[_account_body(args)])
    if args.activate:
        accounts = hub_api.send(args.hub, "PATCH", "/armory/accounts", body=[{"name": args.name, "state": "ACTIVE"}])
    _print(args, out, accounts)
    return 0


def _migrate(args: argparse.Namespace, out: TextIO) -> int:
    accounts = hub_api.send(
        args.hub, "PATCH", "/armory/accounts", body=[{"name": n, "state": "ACTIVE"} for n in args.names]
    )
    if not args.wait:
        _print(args, out, accounts)
        return 0
    deadline = time.monotonic() + args.timeout
    while True:
        accounts = [
            hub_api.send(args.hub, "GET", f"/armory/accounts/{urllib.parse.quote(n, safe='')}") for n in args.names
        ]
        if all(a["state"] in ("ACTIVE", "FAILED") for a in accounts):
            break
        if time.monotonic() > deadline:
            _print(args, out, accounts)
            raise CliError(f"error: not all ACTIVE or FAILED after {args.timeout:g}s")
        time.sleep(WAIT_POLL_SECONDS)
    _print(args, out, accounts)
    return 1 if any(a["state"] == "FAILED" for a in accounts) else 0


def _deactivate(args: argparse.Namespace, out: TextIO) -> int:
    _print(
        args,
        out,
        hub_api.send(
            args.hub, "PATCH", "/armory/accounts", body=[{"name": n, "state": "INACTIVE"} for n in args.names]
        ),
    )
    return 0


def _delete(args: argparse.Namespace, out: TextIO) -> int:
    result = hub_api.send(args.hub, "DELETE", "/armory/accounts", body=list(args.names))
    if args.output == "json":
        _print(args, out, result)
    else:
        out.write(f"deleted: {', '.join(result['deleted'])}\n")
        for warning in result["warnings"]:
            out.write(f"warning: {warning}\n")
    return 0


def _generate_key(args: argparse.Namespace) -> int:
    from ..hub.accounts.secrets_box import generate_key

    print(generate_key())
    return 0


# --- plumbing ------------------------------------------------------------------------------------


def _run(command: Any) -> Any:
    """Wrap a command: API errors become one line on stderr and exit status 1."""

    def run(args: argparse.Namespace) -> int:
        try:
            args.hub = hub_api.connect_args(args)
            return command(args, sys.stdout)
        except CliError as e:
            print(e, file=sys.stderr)  # already in kubectl's words: "error: ..."
            return 1

    return run


def _cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, list):
        return ",".join(map(str, value)) or "-"
    return str(value)


def _print(args: argparse.Namespace, out: TextIO, accounts: Any) -> None:
    if args.output == "json":
        out.write(json.dumps(accounts, indent=2) + "\n")
        return
    if isinstance(accounts, dict):
        accounts = [accounts]
    rows = [[h for h, _ in _COLUMNS]] + [
        [_cell(a.get(key)) for _, key in _COLUMNS[:-1]] + [a.get("errorMessage") or ""] for a in accounts
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(_COLUMNS) - 1)]
    for r in rows:
        out.write("  ".join([c.ljust(w) for c, w in zip(r, widths)] + [r[-1]]).rstrip() + "\n")
