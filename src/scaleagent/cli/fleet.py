"""`scale-agent clusters` and `scale-agent agents`: the fleet behind a hub, as tables.

`clusters` is `GET /api/v1/accounts`: each account's presence and its agent's state, the cluster's
version, how many objects the cache holds, and how fresh they are (`freshness`: the age of the
newest event, and how many of the account's watches are established). `agents` is
`GET /armory/agents` (admin only): the connected agents, one row per session. A hub from before
`freshness` shows `<unknown>` in those columns rather than failing.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

from ..kube.printing import human_duration, since
from . import agents_token
from . import hub as hub_api
from .kubectl import hub_options
from .parsing import KubectlParser, run_command, verb_parser
from .printers import Cell, TablePrinter, dump

__all__ = ["add_parsers", "freshness_cell", "watches_cell"]


def freshness_cell(account: dict[str, Any], now: datetime) -> str:
    """The age of the account's newest event (`3s`, `12m`): `<none>` before any event, `<unknown>`
    from a hub that does not report freshness."""
    freshness = account.get("freshness")
    if not isinstance(freshness, dict):
        return "<unknown>"
    age = freshness.get("lastEventAgeSeconds")
    if isinstance(age, (int, float)) and not isinstance(age, bool):
        return human_duration(max(0.0, float(age)))
    if freshness.get("lastEventAt"):
        return since(freshness["lastEventAt"], now)
    return "<none>"


def watches_cell(account: dict[str, Any], now: datetime) -> str:
    """`34/34`: watches established of watches wanted; `<unknown>` from a hub without freshness."""
    freshness = account.get("freshness")
    if not isinstance(freshness, dict) or "watches" not in freshness:
        return "<unknown>"
    return f"{freshness.get('watchesEstablished', 0)}/{freshness.get('watches', 0)}"


def _agent_cell(account: dict[str, Any], now: datetime) -> str:
    agents = account.get("agents") or ([account["agentId"]] if account.get("agentId") else [])
    return ",".join(str(a) for a in agents) or "<none>"


_CLUSTER_COLUMNS: list[tuple[str, Cell]] = [
    ("NAME", lambda a, now: str(a.get("name", ""))),
    ("STATE", lambda a, now: str(a.get("state", "")) or "<unknown>"),
    ("AGENT-STATE", lambda a, now: str(a.get("agentState", "")) or "<unknown>"),
    ("AGENT", _agent_cell),
    ("VERSION", lambda a, now: str(a.get("serverVersion") or "<unknown>")),
    ("OBJECTS", lambda a, now: str(a.get("objects", 0))),
    ("FRESHNESS", freshness_cell),
    ("WATCHES", watches_cell),
]
_CLUSTER_WIDE: list[tuple[str, Cell]] = [
    ("ZONE", lambda a, now: str(a.get("zoneId") or "<none>")),
    ("API-HOST", lambda a, now: str(a.get("apiHost") or "<none>")),
    ("REASON", lambda a, now: str(a.get("reason") or "<none>")),
]

_AGENT_COLUMNS: list[tuple[str, Cell]] = [
    ("AGENT", lambda a, now: str(a.get("agentId", ""))),
    ("ZONE", lambda a, now: str(a.get("zoneId") or "<none>")),
    ("VERSION", lambda a, now: str(a.get("agentVersion", ""))),
    ("REPLICA", lambda a, now: str(a.get("replica", ""))),
    ("ACCOUNTS", lambda a, now: str(len(a.get("accounts") or []))),
    ("EVENTS", lambda a, now: str(a.get("events", 0))),
    ("AGE", lambda a, now: since(a.get("connectedAt"), now)),
]
_AGENT_WIDE: list[tuple[str, Cell]] = [
    ("PEER", lambda a, now: str(a.get("peer", ""))),
    ("SESSION", lambda a, now: str(a.get("sessionId", ""))),
    ("OPERATIONS", lambda a, now: "attached" if a.get("operationsStream") else "<none>"),
    ("REJECTED", lambda a, now: ",".join(sorted(a.get("rejectedAccounts") or {})) or "<none>"),
]


def _table(
    rows: Sequence[dict[str, Any]],
    columns: list[tuple[str, Cell]],
    args: argparse.Namespace,
    out: TextIO,
    err: TextIO,
    what: str,
) -> int:
    if args.output in ("json", "yaml"):
        dump(list(rows), args.output, out)
        return 0
    if args.output == "name":
        for row in rows:
            out.write(f"{row.get('name') or row.get('agentId', '')}\n")
        out.flush()
        return 0
    if not rows:
        err.write(f"No {what} found\n")
        return 0
    TablePrinter(columns, out, headers=not args.no_headers).print_rows(
        [("", row) for row in rows], now=datetime.now(UTC)
    )
    return 0


def _clusters(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    accounts = hub_api.send(args.hub, "GET", "/api/v1/accounts")
    if not isinstance(accounts, list):
        accounts = []
    if args.names:
        wanted = set(args.names)
        missing = [n for n in args.names if n not in {a.get("name") for a in accounts}]
        accounts = [a for a in accounts if a.get("name") in wanted]
        for name in missing:
            err.write(f"error: account '{name}' is not known to this hub\n")
        if missing and not accounts:
            return 1
    accounts.sort(key=lambda a: str(a.get("name", "")))
    columns = _CLUSTER_COLUMNS + (_CLUSTER_WIDE if args.output == "wide" else [])
    status = _table(accounts, columns, args, out, err, "accounts")
    return 1 if args.names and len(accounts) < len(set(args.names)) else status


def _agents(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    agents = hub_api.send(args.hub, "GET", "/armory/agents")
    if not isinstance(agents, list):
        agents = []
    agents.sort(key=lambda a: (str(a.get("agentId", "")), str(a.get("connectedAt", ""))))
    columns = _AGENT_COLUMNS + (_AGENT_WIDE if args.output == "wide" else [])
    return _table(agents, columns, args, out, err, "agents")


def _output_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", choices=["wide", "json", "yaml", "name"], help="output format (default: a table)")
    p.add_argument("--no-headers", action="store_true", help="the table without its header line")


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Register `clusters`, and `agents` (listing; `agents token` is agents_token.py's) on `scale-agent`."""
    parent = hub_options()
    p = verb_parser(
        sub,
        "clusters",
        parents=[parent],
        usage="scale-agent clusters [NAME...] [-o wide|json|yaml|name] [--no-headers]",
        help="the accounts (clusters) behind the hub: state, agent, version, objects, freshness",
        description="Every account the hub knows, from GET /api/v1/accounts (docs/cli.md).",
    )
    p.add_argument("names", nargs="*", metavar="NAME", help="only these accounts")
    _output_options(p)
    p.set_defaults(func=run_command(_clusters), prog=p.prog)

    agents: KubectlParser = verb_parser(
        sub,
        "agents",
        parents=[parent],
        usage="scale-agent agents [-o wide|json|yaml] | scale-agent agents token --zone ZONE",
        help="the agents connected to the hub (admin); `agents token` makes a token for a new agent",
        description="The agents connected to the hub, one row per session, from GET /armory/agents "
        "(admin only; docs/cli.md). `scale-agent agents token --zone Z` makes an agent token, offline.",
    )
    _output_options(agents)
    agents.set_defaults(func=run_command(_agents), prog=agents.prog)
    agents_token.add_token_parser(agents.add_subparsers(dest="agents_command", metavar="SUBCOMMAND"))
