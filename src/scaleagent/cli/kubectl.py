"""`scale-agent get`, `apply` and `delete`: kubectl's three verbs, through the hub instead of a cluster.

    scale-agent get KIND[,KIND...] [NAME...] (--account A | --all-accounts) [-n NS | -A] [-l SEL] [-o FMT] [-w]
    scale-agent apply -f FILE [-f FILE...] --account A [-n NS] [--field-manager NAME] [--timeout S] [-o json|yaml]
    scale-agent delete (KIND NAME... | -f FILE | KIND -l SEL) --account A [-n NS] [--cascade C] [--grace-period N]

A platform engineer who knows kubectl should not have to learn anything new, so names, tables,
messages and exit codes are kubectl's. What differs is where the answers come from: `get` reads
the hub's real-time cache (`/api/v1/accounts/{account}/objects`, `/api/v1/watch`), and `apply`
and `delete` send operations to the hub (`POST /kubernetes/ops`), which routes them to the agent
serving the account and reports through a task (`GET /task/{id}`). The commands never talk to a
Kubernetes API server, so they need no kubeconfig, only the hub's address (`--hub`).

Like `scale-agent accounts`, this is standard library plus PyYAML (imported only when YAML is read
or written): a CLI must start fast and needs no event loop.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import urllib.parse
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TextIO

from . import hub as hub_api
from . import jsonpath
from .errors import UNKNOWN_KIND, CliError, HubError
from .formats import OutputFormat, column_cells, label_cells, parse_output, sort_rows
from .kinds import (
    KNOWN_KINDS,
    KindInfo,
    ResourceArg,
    group_of,
    manifest_name,
    meta,
    object_name,
    parse_resource_args,
    plural,
)
from .manifests import (
    CASCADE,
    DeleteTarget,
    apply_output,
    build_delete_operations,
    build_deploy_operation,
    check_namespaces,
    delete_output,
    read_manifest_files,
)
from .parsing import UsageError, parse_bool, parse_duration, run_command, verb_parser
from .printers import TablePrinter, dump, dump_one, list_document, table_columns
from .progress import Progress

__all__ = ["add_parsers", "hub_options", "main", "sse_events", "watch_rows"]

DEFAULT_TIMEOUT = 300.0
"""How long apply and delete wait for their task by default: a rollout of many manifests can take minutes."""
WATCH_READ_TIMEOUT = 60.0
"""The hub sends a heartbeat every 15 s on an idle watch; this much silence means the hub is gone."""
ACCOUNT_QUERY_THREADS = 16
"""`--all-accounts` asks the hub once per account; in parallel, or hundreds of accounts take seconds."""


def _accounts(args: argparse.Namespace) -> list[str]:
    if not args.all_accounts:
        return [args.account]
    return [a["name"] for a in hub_api.send(args.hub, "GET", "/api/v1/accounts")]


def _query(
    hub: hub_api.Hub,
    account: str,
    kind: KindInfo,
    *,
    namespace: str | None,
    name: str | None,
    selector: str | None,
    tolerate_missing_account: bool,
) -> list[dict[str, Any]]:
    params = [("kind", kind.query)]
    if namespace is not None and kind.namespaced is not False:
        params.append(("namespace", namespace))
    if name is not None:
        params.append(("name", name))
    if selector:
        params.append(("labelSelector", selector))
    try:
        doc = hub_api.send(
            hub, "GET", f"/api/v1/accounts/{urllib.parse.quote(account, safe='')}/objects", params=params
        )
    except HubError as e:
        if tolerate_missing_account and e.status == 404 and e.reason != UNKNOWN_KIND:
            return []  # an account gone since --all-accounts listed them
        raise
    items = doc.get("items") or []
    if kind.group is not None:  # the hub's bare core kinds ("Event") match every group
        items = [o for o in items if group_of(o) == kind.group]
    return items


# --- get -----------------------------------------------------------------------------------------


Row = tuple[str, dict[str, Any]]
"""(account, object): what a table row shows."""


def _fetch(
    args: argparse.Namespace, accounts: list[str], target: ResourceArg, progress: Progress | None = None
) -> tuple[list[Row], list[str]]:
    """Rows for one kind and its names, and the names found nowhere.

    A listing is sorted by account, namespace and name (what kubectl shows, the API server's key
    order); names asked for come in the order asked, as kubectl prints them. With several
    accounts the requests run in parallel, and `progress` (a terminal's) counts them.
    """
    from concurrent.futures import ThreadPoolExecutor, as_completed

    names: Sequence[str | None] = target.names or [None]
    jobs = [(account, name) for account in accounts for name in names]

    unknown: list[HubError] = []

    def one(job: tuple[str, str | None]) -> list[Row]:
        account, name = job
        try:
            return [
                (account, o)
                for o in _query(
                    args.hub,
                    account,
                    target.kind,
                    namespace=args.namespace,
                    name=name,
                    selector=args.selector,
                    tolerate_missing_account=args.all_accounts,
                )
            ]
        except HubError as e:
            if e.reason != UNKNOWN_KIND:
                raise
            unknown.append(e)  # this account does not follow the kind; another may
            return []

    if len(jobs) > 1:
        with ThreadPoolExecutor(min(ACCOUNT_QUERY_THREADS, len(jobs))) as pool:
            futures = [pool.submit(one, job) for job in jobs]
            for done, _ in enumerate(as_completed(futures), 1):
                if progress is not None:
                    progress.update(f"reading {target.kind.resource_ref}: {done}/{len(jobs)} requests")
            results = [f.result() for f in futures]
    else:
        results = [one(j) for j in jobs]
    if unknown and len(unknown) == len(jobs):
        # No account follows it: kubectl's answer for a kind the server does not serve.
        raise CliError(f'error: the server doesn\'t have a resource type "{target.kind.typed_ref}"')
    unique: dict[tuple[str, str, str, str, str], Row] = {}  # a name asked twice is shown once
    for found in results:
        for account, obj in found:
            unique.setdefault(_object_key(account, obj), (account, obj))
    order = {name: i for i, name in reversed(list(enumerate(target.names)))}

    def key(row: Row) -> tuple[str, int, str, str]:
        account, obj = row
        name = str(meta(obj).get("name", ""))
        return account, order.get(name, 0), str(meta(obj).get("namespace", "")), name

    rows = sorted(unique.values(), key=key)
    found_names = {meta(o).get("name") for _, o in rows}
    return rows, [name for name in dict.fromkeys(target.names) if name not in found_names]


def _no_resources(args: argparse.Namespace) -> str:
    if args.namespace is not None:
        return f"No resources found in {args.namespace} namespace."
    return "No resources found"


def _printer(
    args: argparse.Namespace, group: str, kind: str, namespaced: bool, out: TextIO, *, name_prefix: bool
) -> TablePrinter:
    fmt: OutputFormat = args.format
    if fmt.kind == "custom-columns":  # kubectl's custom columns: only the columns asked for
        return TablePrinter(column_cells(fmt.columns), out, account=args.all_accounts, headers=not args.no_headers)
    columns = table_columns(group, kind, wide=args.output == "wide")
    return TablePrinter(
        columns + label_cells(args.label_columns, args.show_labels),
        out,
        account=args.all_accounts,
        namespace=args.namespace is None and namespaced,
        name_prefix=name_prefix,
        headers=not args.no_headers,
    )


def _label_columns(values: list[str] | None) -> list[str]:
    """`-L a,b -L c` -> [a, b, c]."""
    return [key.strip() for value in values or [] for key in value.split(",") if key.strip()]


def _check_account(args: argparse.Namespace) -> None:
    """--account or --all-accounts, checked after the flags (so an unknown flag is reported first)."""
    if getattr(args, "all_accounts", False):
        if args.account:
            raise UsageError("error: --account and --all-accounts cannot be used together", args.prog)
        return
    if not args.account:
        raise UsageError(
            "error: an account is required: --account NAME"
            + (" (or --all-accounts)" if hasattr(args, "all_accounts") else "")
            + " (scale-agent clusters lists them)",
            args.prog,
        )


def _get(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    _check_account(args)
    args.format = parse_output(args.output)
    args.output = args.format.kind
    args.label_columns = _label_columns(args.label_columns)
    if args.sort_by:
        jsonpath.parse(jsonpath.relaxed(args.sort_by))  # a bad expression fails before any request
    if args.all_namespaces:
        args.namespace = None
    if args.selector:
        _check_selector(args.selector)
    targets = parse_resource_args(args.resources)
    if args.selector and any(t.names for t in targets):
        raise CliError("error: name cannot be provided when a selector is specified")
    if args.watch and len(targets) > 1:
        raise CliError("error: you may only specify a single resource type with --watch")
    accounts = _accounts(args)
    stream = _open_watch(args, targets[0].kind) if args.watch else None
    try:
        rows_by_target, missing = [], []
        with Progress(err) as progress:
            for target in targets:
                rows, not_found = _fetch(args, accounts, target, progress)
                if args.sort_by:
                    rows = sort_rows(rows, args.sort_by)
                rows_by_target.append((target, rows))
                missing += [(target.kind, n) for n in not_found]
        seen = _print_get(args, rows_by_target, out, err)
        for kind, name in missing:
            err.write(f'Error from server (NotFound): {kind.resource_ref} "{name}" not found\n')
        if stream is None:
            return 1 if missing else 0
        _follow(args, targets[0], stream, seen, out)
        return 0
    finally:
        if stream is not None:
            stream.close()


def _single(rows_by_target: list[tuple[ResourceArg, list[Row]]]) -> bool:
    """kubectl prints an object as itself (not a List) when one name was asked for and one found."""
    names = [n for t, _ in rows_by_target for n in t.names]
    return len(names) == 1 and sum(len(rows) for _, rows in rows_by_target) == 1


class _WatchState:
    """What `-w` needs from the first listing: the printer, and the resourceVersion shown per object."""

    def __init__(self) -> None:
        self.printer: TablePrinter | None = None
        self.versions: dict[tuple[str, str, str, str, str], str] = {}


def _object_key(account: str, obj: dict[str, Any]) -> tuple[str, str, str, str, str]:
    return (
        account,
        group_of(obj),
        str(obj.get("kind", "")),
        str(meta(obj).get("namespace", "")),
        str(meta(obj).get("name", "")),
    )


def _print_get(
    args: argparse.Namespace, rows_by_target: list[tuple[ResourceArg, list[Row]]], out: TextIO, err: TextIO
) -> _WatchState:
    state = _WatchState()
    all_rows = [row for _, rows in rows_by_target for row in rows]
    for account, obj in all_rows:
        state.versions[_object_key(account, obj)] = str(meta(obj).get("resourceVersion", ""))
    if args.output in ("json", "yaml", "jsonpath"):
        objects = [_shown(args, o) for _, o in all_rows]
        if args.output == "jsonpath":
            if args.watch:
                for obj in objects:
                    _print_jsonpath(args, obj, out)
            else:
                _print_jsonpath(args, objects[0] if _single(rows_by_target) else list_document(objects), out)
        elif args.watch:  # a stream of objects follows: kubectl prints each as itself
            for obj in objects:
                dump_one(obj, args.output, out)
        else:
            dump(objects[0] if _single(rows_by_target) else list_document(objects), args.output, out)
        return state
    if args.output == "custom-columns":
        printer = _printer(args, "", "", False, out, name_prefix=False)
        printer.print_rows(all_rows)
        state.printer = printer
        if not all_rows and not any(t.names for t, _ in rows_by_target):
            err.write(_no_resources(args) + "\n")
        return state
    if args.output == "name":
        for _, obj in all_rows:
            out.write(object_name(obj) + "\n")
        out.flush()
        if not all_rows and not any(t.names for t, _ in rows_by_target):
            err.write(_no_resources(args) + "\n")
        return state
    # tables: one per kind found (kubectl prints a blank line between them, and kind/name names)
    by_kind: dict[tuple[str, str], list[Row]] = {}
    for account, obj in all_rows:
        by_kind.setdefault((group_of(obj), str(obj.get("kind", ""))), []).append((account, obj))
    several = len(rows_by_target) > 1 or len(by_kind) > 1
    for i, ((group, kind), rows) in enumerate(by_kind.items()):
        if i:
            out.write("\n")
        namespaced = any(meta(o).get("namespace") for _, o in rows)
        printer = _printer(args, group, kind, namespaced, out, name_prefix=several)
        printer.print_rows(rows)
        state.printer = printer
    if not all_rows and not any(t.names for t, _ in rows_by_target):
        err.write(_no_resources(args) + "\n")
        err.flush()
    return state


def _print_jsonpath(args: argparse.Namespace, doc: dict[str, Any], out: TextIO) -> None:
    template = args.format.template
    try:
        text = jsonpath.render(template, doc)
    except jsonpath.JSONPathError as e:
        raise CliError(
            f"error: error executing jsonpath {template.source!r}: {str(e).removeprefix('error: ')}"
        ) from None
    out.write(text)
    out.flush()


def _check_selector(selector: str) -> None:
    from ..kube.errors import SelectorError
    from ..kube.selectors import parse_label_selector

    try:
        parse_label_selector(selector)
    except SelectorError as e:
        raise CliError(f"error: invalid label selector {selector!r}: {e}") from None


# --- get -w --------------------------------------------------------------------------------------


def _open_watch(args: argparse.Namespace, kind: KindInfo) -> Any:
    """Open the hub's watch before listing, so no change between the listing and the watch is lost."""
    params = [("kind", kind.query.lower())]
    if not args.all_accounts:
        params.append(("account", args.account))
    if args.namespace is not None and kind.namespaced is not False:
        params.append(("namespace", args.namespace))
    return hub_api.open_stream(
        args.hub, "GET", "/api/v1/watch", params=params, timeout=WATCH_READ_TIMEOUT, accept="text/event-stream"
    )


def sse_events(lines: Iterable[bytes]) -> Iterator[tuple[str, str]]:
    """(event, data) of a Server-Sent Events stream; comments (heartbeats) are skipped."""
    event, data = "message", list[str]()
    for raw in lines:
        line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data = "message", []
        elif line.startswith(":"):
            continue
        else:
            key, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if key == "event":
                event = value
            elif key == "data":
                data.append(value)


def _newer(rv: str, shown: str | None) -> bool:
    """Whether a change is newer than what is on screen (resourceVersions compare as integers when they are)."""
    if shown is None:
        return True
    if rv.isdigit() and shown.isdigit():
        return int(rv) > int(shown)
    return rv != shown


def watch_rows(
    events: Iterable[tuple[str, str]],
    target: ResourceArg,
    selector: Any,
    versions: dict[tuple[str, str, str, str, str], str],
) -> Iterator[tuple[str, dict[str, Any]]]:
    """The (account, object) rows `-w` prints: the changes that pass the filters the hub's watch
    does not apply (names, label selector, group), newer than what was already shown."""
    for event, data in events:
        if event == "error":
            try:
                message = json.loads(data).get("message", data)
            except ValueError:
                message = data
            raise CliError(f"error: the hub ended the watch: {message}")
        try:
            change = json.loads(data)
        except ValueError:
            continue
        obj = change.get("object")
        if not isinstance(obj, dict):
            continue
        if target.names and meta(obj).get("name") not in target.names:
            continue
        if target.kind.group is not None and group_of(obj) != target.kind.group:
            continue
        if selector is not None and not selector.matches(meta(obj).get("labels") or {}):
            continue
        account = str(change.get("account", ""))
        key = _object_key(account, obj)
        rv = str(change.get("resourceVersion") or meta(obj).get("resourceVersion", ""))
        if change.get("type") != "DELETED" and not _newer(rv, versions.get(key)):
            continue  # already in the listing printed before the watch
        versions[key] = rv
        yield account, obj


def _shown(args: argparse.Namespace, obj: dict[str, Any]) -> dict[str, Any]:
    """The object as `-o json|yaml` prints it: without managedFields unless asked, as kubectl."""
    if getattr(args, "show_managed_fields", False) or "managedFields" not in meta(obj):
        return obj
    return {**obj, "metadata": {k: v for k, v in meta(obj).items() if k != "managedFields"}}


def _follow(args: argparse.Namespace, target: ResourceArg, stream: Any, state: _WatchState, out: TextIO) -> None:
    selector = None
    if args.selector:
        from ..kube.selectors import parse_label_selector

        selector = parse_label_selector(args.selector)
    try:
        for account, obj in watch_rows(sse_events(stream), target, selector, state.versions):
            if args.output in ("json", "yaml"):
                dump_one(_shown(args, obj), args.output, out)
            elif args.output == "jsonpath":
                _print_jsonpath(args, obj, out)
            elif args.output == "name":
                out.write(object_name(obj) + "\n")
                out.flush()
            else:
                if state.printer is None:
                    state.printer = _printer(
                        args,
                        group_of(obj),
                        str(obj.get("kind", "")),
                        bool(meta(obj).get("namespace")) or target.kind.namespaced is True,
                        out,
                        name_prefix=False,
                    )
                state.printer.print_rows([(account, obj)])
    except TimeoutError:
        raise CliError(
            f"error: no news from the hub for {WATCH_READ_TIMEOUT:g}s (it sends a heartbeat every "
            f"15s): the watch is lost"
        ) from None
    except (OSError, http.client.HTTPException) as e:  # IncompleteRead: the chunked stream broke off
        raise CliError(f"error: the watch was cut: {e}") from None
    raise CliError("error: the hub closed the watch")


# --- apply and delete ----------------------------------------------------------------------------


def _apply(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if not args.filename:
        raise UsageError("error: must specify -f (scale-agent has no -k)", args.prog)
    _check_account(args)
    manifests = read_manifest_files(args.filename)
    check_namespaces(manifests, args.namespace)
    if args.dry_run == "client":
        # Only this side: the files are read and checked, nothing is sent (kubectl's client dry run).
        local = [_with_namespace(m, args.namespace) for m in manifests]
        if args.output in ("json", "yaml"):
            dump(local[0] if len(local) == 1 else list_document(local), args.output, out)
        else:
            for m in local:
                out.write(f"{object_name(m)} serverside-applied (dry run)\n")
        out.flush()
        return 0
    dry_run = args.dry_run == "server"
    body = build_deploy_operation(
        args.account,
        manifests,
        namespace=args.namespace,
        field_manager=args.field_manager,
        dry_run=dry_run,
        force_conflicts=args.force_conflicts,
    )
    task = hub_api.run_task(args.hub, body, args.timeout)
    applied, lines, error = apply_output(task)
    if dry_run:
        if applied and not all(r.get("dryRun") for r in task.get("resultObjects") or [] if r.get("manifests")):
            # An agent from before dry runs ignores the field and applies: say so, loudly.
            raise CliError(
                f"error: the agent serving account {args.account} does not know dry runs: the objects "
                f"WERE applied ({', '.join(object_name(o) for o in applied)}); upgrade the agent"
            )
        lines = [f"{line} (server dry run)" for line in lines]
    if args.output in ("json", "yaml"):
        if applied:
            dump(applied[0] if len(applied) == 1 else list_document(applied), args.output, out)
    else:
        for line in lines:
            out.write(line + "\n")
    out.flush()
    if error is not None:
        err.write(f"error: {error}\n")
        return 1
    return 0


def _with_namespace(obj: dict[str, Any], namespace: str | None) -> dict[str, Any]:
    """The object as a client dry run shows it: with `-n`'s namespace when it names none."""
    if not namespace or meta(obj).get("namespace"):
        return obj
    known = KNOWN_KINDS.get((group_of(obj), str(obj.get("kind", ""))))
    if known is not None and known.namespaced is False:
        return obj
    return {**obj, "metadata": {**meta(obj), "namespace": namespace}}


def _location(args: argparse.Namespace, kind: KindInfo, own_namespace: str | None) -> str:
    """Where to delete: the object's namespace, -n, or kubectl's `default`; '' for cluster-scoped kinds.

    A kind the table does not know may be cluster-scoped: it gets a namespace all the same, which
    the agent ignores for cluster-scoped kinds (docs/operations.md), as the API server does.
    """
    if kind.namespaced is False:
        return ""
    return own_namespace or args.namespace or "default"


def _delete(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    _check_account(args)
    if args.selector:
        _check_selector(args.selector)
    if args.filename and args.resources:
        raise CliError("error: a resource cannot be given both by arguments and with -f")
    if args.filename and args.selector:
        raise CliError("error: -l cannot be combined with -f")
    if args.filename:
        objects = read_manifest_files(args.filename, verb="delete")
        check_namespaces(objects, args.namespace)
        targets = []
        for obj in objects:
            kind = KNOWN_KINDS.get((group_of(obj), str(obj["kind"]))) or KindInfo(
                str(obj["kind"]), group_of(obj), plural(str(obj["kind"]).lower()), None
            )
            targets.append(DeleteTarget(manifest_name(obj), _location(args, kind, meta(obj).get("namespace"))))
        body = build_delete_operations(
            args.account, targets=targets, cascade=args.cascade, grace_period=args.grace_period
        )
    elif not args.resources:
        raise CliError("error: You must provide one or more resources by argument or filename.")
    else:
        resources = parse_resource_args(args.resources)
        if args.selector:
            if any(r.names for r in resources):
                raise CliError("error: name cannot be provided when a selector is specified")
            body = []
            for r in resources:
                location = _location(args, r.kind, None)
                body += build_delete_operations(
                    args.account,
                    kind=r.kind,
                    selector=args.selector,
                    location=location,
                    cascade=args.cascade,
                    grace_period=args.grace_period,
                )
        else:
            if not all(r.names for r in resources):
                raise CliError("error: resource(s) were provided, but no name was specified")
            targets = [
                DeleteTarget(f"{r.kind.token} {name}", _location(args, r.kind, None))
                for r in resources
                for name in r.names
            ]
            body = build_delete_operations(
                args.account, targets=targets, cascade=args.cascade, grace_period=args.grace_period
            )
    task = hub_api.run_task(args.hub, body, args.timeout)
    lines, not_found, error = delete_output(task)
    for line in lines:
        out.write(line + "\n")
    out.flush()
    for line in not_found:
        err.write(line + "\n")
    if error is not None:
        err.write(f"error: {error}\n")
    return 1 if error is not None or not_found else 0


# --- command line --------------------------------------------------------------------------------


def add_force_conflicts(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--force-conflicts",
        nargs="?",
        const=True,
        default=True,
        type=parse_bool,
        metavar="true|false",
        help="take over fields another field manager owns (default true, as Spinnaker's deploys; "
        "--force-conflicts=false fails on a conflict, as kubectl apply --server-side does)",
    )


def hub_options() -> argparse.ArgumentParser:
    """A parent parser with `--hub`, `--token` and the TLS options, for every verb that talks to the hub."""
    parent = argparse.ArgumentParser(add_help=False)
    hub_api.add_connection_options(parent)
    return parent


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Register `get`, `apply` and `delete` on the `scale-agent` parser."""
    hub_option = hub_options()

    p = verb_parser(
        sub,
        "get",
        parents=[hub_option],
        usage="scale-agent get KIND[,KIND...] [NAME...] | KIND/NAME... "
        "(--account A | --all-accounts) [-n NS | -A] [-l SELECTOR] "
        "[-o yaml|json|wide|name|jsonpath=...|custom-columns=...] [--sort-by PATH] [--show-labels] [-L KEY] [-w]",
        help="show objects from the hub's cache, like kubectl get",
        description="Objects of one or all accounts, from the hub's real-time cache (docs/cli.md).",
    )
    p.add_argument(
        "resources",
        nargs="*",
        metavar="KIND [NAME...]",
        help="a kind (deployment, deploy, Deployment.apps, pods, svc, ...), several separated by commas, "
        "then names; or KIND/NAME...",
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument("--account", help="the account (cluster) to read")
    which.add_argument("--all-accounts", action="store_true", help="every account the hub knows (adds ACCOUNT)")
    p.add_argument("-n", "--namespace", help="only this namespace (default: all namespaces)")
    p.add_argument("-A", "--all-namespaces", action="store_true", help="all namespaces (the default here)")
    p.add_argument("-l", "--selector", metavar="SELECTOR", help="label selector: app=web, 'tier in (a,b)', !canary")
    p.add_argument(
        "-o",
        "--output",
        metavar="FORMAT",
        help="yaml, json, wide, name, jsonpath=TEMPLATE, jsonpath-file=FILE, custom-columns=SPEC, "
        "custom-columns-file=FILE (default: a table)",
    )
    p.add_argument("--sort-by", metavar="JSONPATH", help="sort by a field: .metadata.name, {.spec.replicas}")
    p.add_argument("--show-labels", action="store_true", help="a LABELS column, last")
    p.add_argument(
        "--show-managed-fields",
        action="store_true",
        help="keep metadata.managedFields in -o json|yaml (left out by default, as kubectl does)",
    )
    p.add_argument(
        "-L",
        "--label-columns",
        action="append",
        metavar="KEY[,KEY...]",
        help="a column per label key (repeatable)",
    )
    p.add_argument("-w", "--watch", action="store_true", help="after the list, print a row per change (Ctrl-C stops)")
    p.add_argument("--no-headers", action="store_true", help="tables without their header line")
    p.set_defaults(func=run_command(_get, interrupted=0), prog=p.prog)

    p = verb_parser(
        sub,
        "apply",
        parents=[hub_option],
        usage="scale-agent apply -f FILE [-f FILE...] --account A [-n NS] [--dry-run=none|server|client] "
        "[--field-manager NAME] [--timeout SECONDS] [-o json|yaml]",
        help="apply manifests to an account through the hub (server-side)",
        description="Send manifests to an account's agent as one deployManifest operation and wait "
        "for it (docs/cli.md).",
    )
    p.add_argument(
        "-f",
        "--filename",
        action="append",
        metavar="FILE",
        help="YAML or JSON file, directory, or - for stdin (repeatable)",
    )
    p.add_argument("--account", help="the account (cluster) to apply to")
    p.add_argument("-n", "--namespace", help="namespace for manifests that do not name one")
    p.add_argument(
        "--dry-run",
        nargs="?",
        const="client",
        default="none",
        choices=["none", "server", "client"],
        help="server: the API server checks and defaults the objects, nothing is stored; "
        "client: the files are only read and checked here; none (default): apply",
    )
    p.add_argument(
        "--field-manager",
        default="scale-agent",
        metavar="NAME",
        help="server-side apply field manager (default scale-agent)",
    )
    add_force_conflicts(p)
    p.add_argument(
        "--timeout",
        type=parse_duration,
        default=DEFAULT_TIMEOUT,
        metavar="DURATION",
        help=f"how long to wait for the operation: 90s, 5m or seconds (default {DEFAULT_TIMEOUT:g})",
    )
    p.add_argument("-o", "--output", choices=["json", "yaml"], help="print the applied objects instead")
    p.set_defaults(func=run_command(_apply), prog=p.prog)

    p = verb_parser(
        sub,
        "delete",
        parents=[hub_option],
        usage="scale-agent delete (KIND NAME... | KIND/NAME... | -f FILE | "
        "KIND -l SELECTOR) --account A [-n NS] [--cascade background|foreground|orphan] "
        "[--grace-period N] [--timeout SECONDS]",
        help="delete objects of an account through the hub",
        description="Delete objects by kind and name, by file, or by label selector, as "
        "deleteManifest operations (docs/cli.md).",
    )
    p.add_argument("resources", nargs="*", metavar="KIND [NAME...]", help="a kind and names, or KIND/NAME...")
    p.add_argument(
        "-f",
        "--filename",
        action="append",
        metavar="FILE",
        help="delete the objects this file describes (repeatable, - for stdin)",
    )
    p.add_argument("-l", "--selector", metavar="SELECTOR", help="delete every object of KIND matching this selector")
    p.add_argument("--account", help="the account (cluster) to delete from")
    p.add_argument("-n", "--namespace", help="namespace (default: the object's own, else default)")
    p.add_argument(
        "--cascade",
        choices=sorted(CASCADE),
        default="background",
        help="what happens to dependents (default background)",
    )
    p.add_argument(
        "--grace-period",
        type=int,
        metavar="N",
        help="seconds for the objects to terminate (default: each object's own)",
    )
    p.add_argument(
        "--timeout",
        type=parse_duration,
        default=DEFAULT_TIMEOUT,
        metavar="DURATION",
        help=f"how long to wait for the operation: 90s, 5m or seconds (default {DEFAULT_TIMEOUT:g})",
    )
    p.set_defaults(func=run_command(_delete), prog=p.prog)


def main(argv: Sequence[str] | None = None) -> int:
    """The kubectl verbs alone, as the tests run them in-process."""
    from . import fleet, inspect, rollout

    parser = argparse.ArgumentParser(prog="scale-agent")
    sub = parser.add_subparsers(dest="command")
    add_parsers(sub)
    inspect.add_parsers(sub)
    rollout.add_parsers(sub)
    fleet.add_parsers(sub)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


# --- one object, for the verbs that act on named objects (describe, scale, rollout, logs, diff) ---


def namespace_for(kind: KindInfo, namespace: str | None) -> str:
    """Where a named object is looked for: `-n`, else kubectl's `default`; '' when cluster-scoped."""
    return "" if kind.namespaced is False else (namespace or "default")


def read_objects(
    hub: hub_api.Hub,
    account: str,
    kind: KindInfo,
    *,
    namespace: str | None,
    name: str | None = None,
    selector: str | None = None,
    unknown_kind_ok: bool = False,
) -> list[dict[str, Any]]:
    """Objects of one account from the hub's cache; a kind the account does not follow is
    kubectl's `the server doesn't have a resource type` (or nothing, `unknown_kind_ok`: the
    Events `describe` shows, an account may not follow them). `namespace` '' or None: every
    namespace (a kind of unknown scope is read everywhere, then its namespaced objects filtered)."""
    try:
        items = _query(
            hub,
            account,
            kind,
            namespace=namespace if namespace and kind.namespaced else None,
            name=name,
            selector=selector,
            tolerate_missing_account=False,
        )
    except HubError as e:
        if e.reason == UNKNOWN_KIND:
            if unknown_kind_ok:
                return []
            raise CliError(f'error: the server doesn\'t have a resource type "{kind.typed_ref}"') from None
        raise
    if namespace and kind.namespaced is None:
        items = [o for o in items if meta(o).get("namespace") in (None, "", namespace)]
    return items


def read_object(hub: hub_api.Hub, account: str, kind: KindInfo, name: str, namespace: str) -> dict[str, Any]:
    """One object from the hub's cache, or kubectl's NotFound."""
    found = read_objects(hub, account, kind, namespace=namespace, name=name)
    if not found:
        raise CliError(f'Error from server (NotFound): {kind.resource_ref} "{name}" not found')
    return found[0]


def named_targets(resources: Sequence[str], verb: str) -> list[tuple[KindInfo, str]]:
    """`KIND NAME...` or `KIND/NAME...` as (kind, name) pairs; every one must have a name."""
    if not resources:
        raise CliError("error: required resource not specified")
    parsed = parse_resource_args(resources)
    if not all(r.names for r in parsed):
        raise CliError(
            f"error: resource(s) were provided, but no name was specified (scale-agent {verb} KIND NAME or KIND/NAME)"
        )
    return [(r.kind, name) for r in parsed for name in r.names]


def check_account(args: argparse.Namespace) -> None:
    """The verbs' `--account` check, after the flags (public for the other verb modules)."""
    _check_account(args)
