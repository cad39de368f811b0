"""`scale-agent agents token`: a new agent token, and the identity entry that lets it in.

Runs offline: it prints a random token on standard output (give it to the agent, as its
`clouddriver.auth.token`) and, on standard error, the YAML entry to add to the hub's
`auth.agents.identities` or to its identities file. The hub keeps only the token's SHA-256
(`tokenHash`), so the token cannot be read back from the hub: store it where the agent reads it.
"""

from __future__ import annotations

import argparse
import re
import secrets
import sys

import yaml

from ..hub.auth.agents import hash_token


def add_token_parser(agents_sub: argparse._SubParsersAction) -> None:
    """Register `token` under `scale-agent agents` (whose own parser, listing the connected
    agents, is fleet.py's)."""
    p = agents_sub.add_parser(
        "token",
        help="print a new agent token, and the identity entry for the hub (offline)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--zone",
        action="append",
        required=True,
        metavar="ZONE",
        help="a zone the agent may serve (repeat for more; '*' for any)",
    )
    p.add_argument("--name", help="the identity's name (default: agent-<zone>-<random>)")
    p.add_argument(
        "--accounts",
        nargs="+",
        default=[],
        metavar="REGEX",
        help="account names the agent may stream (regular expressions, whole names; default: any)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    for pattern in args.accounts:
        try:
            re.compile(pattern)
        except re.error as e:
            print(f"scale-agent agents token: --accounts {pattern!r} is not a regular expression: {e}", file=sys.stderr)
            return 2
    zones = list(dict.fromkeys(args.zone))
    name = (
        args.name or f"agent-{re.sub(r'[^a-z0-9-]+', '-', zones[0].lower()).strip('-') or 'any'}-{secrets.token_hex(3)}"
    )
    token = secrets.token_urlsafe(32)
    entry: dict[str, object] = {"name": name, "tokenHash": hash_token(token), "zones": zones}
    if args.accounts:
        entry["accounts"] = list(args.accounts)
    block = yaml.safe_dump([entry], sort_keys=False).rstrip()
    print(
        "# Add this identity to the hub's auth.agents.identities (or to its auth.agents.identitiesFile);\n"
        "# give the agent the token printed on standard output as its clouddriver.auth.token.\n"
        f"{block}",
        file=sys.stderr,
    )
    print(token)
    return 0
