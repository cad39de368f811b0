"""Command lines read as kubectl reads them: flags anywhere, and mistakes reported in kubectl's words.

argparse's defaults differ from kubectl's in ways a platform engineer trips on: flags must come
after the positional arguments they follow (`get deploy -n web frontend` fails), a mistake exits
2 with a usage block, and a missing `--account` is reported before an unknown flag, so the user
fixes the wrong thing first. `KubectlParser` reads flags and arguments in any order, and ends
every mistake as kubectl does, on stderr with exit status 1:

    error: unknown flag: --foo
    See 'scale-agent get --help' for usage.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TextIO

from .errors import CliError

__all__ = [
    "KubectlParser",
    "UsageError",
    "kubectl_message",
    "parse_bool",
    "parse_duration",
    "run_command",
    "verb_parser",
]


class UsageError(CliError):
    """A mistake on the command line found after parsing (a missing --account...): like a flag
    error, it ends with the pointer to `--help`."""

    def __init__(self, message: str, prog: str) -> None:
        super().__init__(f"{message}\nSee '{prog} --help' for usage.")


def kubectl_message(message: str, args: Sequence[str] = ()) -> str:
    """argparse's message for a command-line mistake, in cobra's (kubectl's) words."""
    m = re.match(r"argument (\S+): expected one argument", message)
    if m:
        return f"flag needs an argument: {_typed(m.group(1), args)}"
    m = re.match(r"argument (\S+): invalid (\w+) value: '(.*)'", message)
    if m:
        kind = {"int": "strconv.ParseInt", "float": "strconv.ParseFloat"}.get(m.group(2), m.group(2))
        value, flag = m.group(3), _long(m.group(1))
        return f'invalid argument "{value}" for "{flag}" flag: {kind}: parsing "{value}": invalid syntax'
    m = re.match(r"argument (\S+): invalid choice: '(.*?)' \(choose from (.*)\)", message)
    if m:
        if not m.group(1).startswith("-"):  # a sub-verb (`rollout foo`)
            return f'unknown command "{m.group(2)}"'
        choices = m.group(3).replace("'", "")
        return f'invalid argument "{m.group(2)}" for "{_long(m.group(1))}" flag: must be one of {choices}'
    m = re.match(r"argument (\S+): not allowed with argument (\S+)", message)
    if m:
        return f"{_long(m.group(2))} and {_long(m.group(1))} cannot be used together"
    m = re.match(r"argument (\S+): (.*)", message)
    if m and m.group(1).startswith("-"):
        return f'invalid argument for "{_long(m.group(1))}" flag: {m.group(2)}'
    m = re.match(r"the following arguments are required: (.*)", message)
    if m:
        flags = [f.strip() for f in m.group(1).split(",")]
        named = [f'"{_long(f).lstrip("-")}"' for f in flags if f.startswith("-")]
        if named:
            return f"required flag(s) {', '.join(named)} not set"
        return f"required argument(s) {', '.join(flags)} not given"
    return message


def _long(option: str) -> str:
    """`-n/--namespace` -> `--namespace`."""
    names = option.split("/")
    return next((n for n in names if n.startswith("--")), names[-1])


def _typed(option: str, args: Sequence[str]) -> str:
    """The flag as cobra names it: `'n' in -n` when the short form was typed, else `--namespace`."""
    names = option.split("/")
    for name in names:
        if not name.startswith("--") and name in args:
            return f"'{name[1:]}' in {name}"
    return _long(option)


def _unknown(extras: Sequence[str]) -> str:
    first = extras[0]
    if first.startswith("--"):
        return f"unknown flag: {first.split('=', 1)[0]}"
    if first.startswith("-") and len(first) > 1:
        return f"unknown shorthand flag: '{first[1]}' in {first}"
    return f'unexpected argument "{first}"'


class KubectlParser(argparse.ArgumentParser):
    """An ArgumentParser with kubectl's habits: flags and arguments in any order, unknown flags
    refused by the verb itself (not later by `scale-agent`, with a message about the whole
    command), and every mistake one line plus `See '... --help' for usage.`, exit status 1."""

    _inner = False
    _argv: Sequence[str] = ()
    usage_status = 1  # kubectl's; `diff` sets 2, its 1 meaning "different"

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self._inner:
            return super().parse_known_args(args, namespace)
        self._argv = list(sys.argv[1:] if args is None else args)
        if self._subparsers is not None:  # `rollout`: its sub-verb parses the rest
            ns, extras = super().parse_known_args(self._argv, namespace)
        else:
            self._inner = True
            try:
                ns, extras = self.parse_known_intermixed_args(self._argv, namespace)
            finally:
                self._inner = False
        if extras:
            self.error(_unknown(extras), translated=True)
        return ns, extras

    def error(self, message: str, translated: bool = False) -> NoReturn:
        text = message if translated else kubectl_message(message, self._argv)
        self.exit(self.usage_status, f"error: {text}\nSee '{self.prog} --help' for usage.\n")


def verb_parser(sub: argparse._SubParsersAction, name: str, **kwargs: Any) -> KubectlParser:
    """`sub.add_parser(name, ...)`, as a KubectlParser whatever parser class `sub` makes."""
    saved = sub._parser_class
    sub._parser_class = KubectlParser
    try:
        parser = sub.add_parser(name, **kwargs)
    finally:
        sub._parser_class = saved
    assert isinstance(parser, KubectlParser)
    return parser


def run_command(
    command: Callable[[argparse.Namespace, TextIO, TextIO], int], *, interrupted: int = 130
) -> Callable[[argparse.Namespace], int]:
    """Errors become their message on stderr and exit status 1 (`CliError.status` when it has one);
    Ctrl-C exits `interrupted` (0 for `get -w`, whose normal end it is)."""
    import os

    from . import hub as hub_api

    def run(args: argparse.Namespace) -> int:
        try:
            args.hub = hub_api.connect_args(args)
            return command(args, sys.stdout, sys.stderr)
        except CliError as e:
            sys.stdout.flush()
            print(e, file=sys.stderr)
            return int(getattr(e, "exit_status", 1))
        except KeyboardInterrupt:
            return interrupted
        except BrokenPipeError:  # `scale-agent get ... | head`
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0

    return run


def parse_duration(text: str) -> float:
    """kubectl's `--timeout`: a Go duration (`90s`, `5m`, `1h30m`, `0`), or plain seconds."""
    text = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise argparse.ArgumentTypeError(f'time: invalid duration "{text}"')
    scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    return sum(float(n) * scale[u] for n, u in parts)


def parse_bool(text: str) -> bool:
    """A flag's value as Go's strconv.ParseBool reads it (`--watch=false`)."""
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f'strconv.ParseBool: parsing "{text}": invalid syntax')
