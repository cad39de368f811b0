"""`scale-agent`: one command, with a subcommand per process or tool."""

from __future__ import annotations

import argparse
import logging
import os

# gRPC's fork handlers ran whenever the agent started a tokenCommand while its streams were busy
# ("Other threads are currently calling into gRPC, skipping fork() handlers"), and now and then
# the child died of SIGSEGV before its exec. Set before gRPC is loaded: the children exec at once
# and need no gRPC state.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

from .. import __version__
from .. import demo as demo_command
from ..agent import command as agent_command
from ..hub import command as hub_command
from ..kubesim import command as kubesim_command
from . import accounts, fleet, inspect, kubectl, login, rollout


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="scale-agent", description=__doc__)
    parser.add_argument("--version", action="version", version=f"scale-agent {__version__}")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    agent_command.add_parser(sub)
    hub_command.add_parser(sub)
    demo_command.add_parser(sub)
    accounts.add_parser(sub)
    kubectl.add_parsers(sub)
    inspect.add_parsers(sub)
    rollout.add_parsers(sub)
    fleet.add_parsers(sub)
    login.add_parsers(sub)
    kubesim_command.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    return int(args.func(args) or 0)
