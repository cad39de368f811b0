"""`scale-agent describe`, `logs` and `diff`: kubectl's verbs for looking closer at objects.

`describe` reads the object, its Events and what its section needs (a Deployment's ReplicaSets, a
Service's Endpoints) from the hub's cache. `logs` asks the hub for a pod's log, which the hub reads
through the account's agent (`GET /api/v1/accounts/{a}/namespaces/{ns}/pods/{pod}/log`). `diff`
does what `kubectl diff` does: the API server applies the files as a dry run (a `deployManifest`
with `dryRun`, through the agent), and the result is compared with the live object, here the
one in the hub's cache.
"""

from __future__ import annotations

import argparse
import difflib
import io
import urllib.parse
from typing import Any, TextIO

from . import hub as hub_api
from .describe import describe, events_for
from .errors import CliError
from .kinds import KNOWN_KINDS, KindInfo, group_of, meta, parse_resource_args, plural, resolve_kind
from .kubectl import add_force_conflicts, check_account, hub_options, read_object, read_objects
from .manifests import apply_output, build_deploy_operation, check_namespaces, read_manifest_files
from .parsing import UsageError, parse_duration, run_command, verb_parser
from .printers import dump

__all__ = ["add_parsers", "diff_objects"]

DEFAULT_TIMEOUT = 300.0


# --- describe ------------------------------------------------------------------------------------


def _describe(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    check_account(args)
    if args.all_namespaces:
        args.namespace = None
    first = True
    for target in parse_resource_args(args.resources, "describe"):
        kind = target.kind
        # as `get`: without -n every namespace (an account has no current namespace)
        namespace = args.namespace if kind.namespaced is not False else None
        found: list[dict[str, Any]] = []
        for name in target.names or [None]:
            matches = read_objects(args.hub, args.account, kind, namespace=namespace, name=name, selector=args.selector)
            if name is not None and not matches:
                # kubectl describe NAME also describes the objects whose names start with NAME
                everything = read_objects(args.hub, args.account, kind, namespace=namespace)
                matches = sorted(
                    (o for o in everything if str(meta(o).get("name", "")).startswith(name)),
                    key=lambda o: str(meta(o).get("name", "")),
                )
                if not matches:
                    raise CliError(f'Error from server (NotFound): {kind.resource_ref} "{name}" not found')
            found += matches
        if not found:
            where = f" in {namespace} namespace" if namespace else ""
            err.write(f"No resources found{where}.\n")
            continue
        for obj in found:
            text = _describe_one(args, kind, obj)
            out.write(text if first else f"\n\n{text}")
            first = False
    out.flush()
    return 0


def _describe_one(args: argparse.Namespace, kind: KindInfo, obj: dict[str, Any]) -> str:
    namespace = str(meta(obj).get("namespace") or "")
    events = read_objects(
        args.hub, args.account, resolve_kind("events"), namespace=namespace or None, unknown_kind_ok=True
    )
    related: list[dict[str, Any]] = []
    if obj.get("kind") == "Deployment":
        related = read_objects(
            args.hub, args.account, resolve_kind("replicasets"), namespace=namespace, unknown_kind_ok=True
        )
    elif obj.get("kind") == "Service":
        related = read_objects(
            args.hub,
            args.account,
            resolve_kind("endpoints"),
            namespace=namespace,
            name=str(meta(obj).get("name", "")),
            unknown_kind_ok=True,
        )
    return describe(obj, events=events_for(obj, events), related=related, namespaced=kind.namespaced is not False)


# --- logs ----------------------------------------------------------------------------------------

_POD_OWNERS = {"deployment", "replicaset", "statefulset", "daemonset", "job"}


def _logs(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.follow:
        raise CliError(
            "error: --follow is not supported: the hub reads the log through the agent as it is now "
            "(run the command again, or with --tail)"
        )
    check_account(args)
    if not args.target:
        raise CliError(
            "error: expected 'logs (POD | TYPE/NAME) [-c CONTAINER]'.\nPOD or TYPE/NAME is a required argument "
            "for the logs command\nSee 'scale-agent logs --help' for usage."
        )
    namespace = args.namespace or "default"
    pod = _pod_for(args, args.target, namespace, err)
    name = str(meta(pod).get("name", ""))
    container = args.container or _default_container(pod, err)
    params = [("container", container)] if container else []
    if args.tail is not None and args.tail >= 0:
        params.append(("tailLines", str(args.tail)))
    path = "/api/v1/accounts/{}/namespaces/{}/pods/{}/log".format(
        *(urllib.parse.quote(p, safe="") for p in (args.account, namespace, name))
    )
    with hub_api.open_stream(
        args.hub, "GET", path, params=params, timeout=args.request_timeout, accept="text/plain"
    ) as r:
        while chunk := r.read(65536):
            out.write(chunk.decode("utf-8", errors="replace"))
    out.flush()
    return 0


def _pod_for(args: argparse.Namespace, target: str, namespace: str, err: TextIO) -> dict[str, Any]:
    """The pod of `POD`, `pod/NAME`, or of a workload (`deploy/web`): one of its pods, as kubectl picks."""
    kind_text, slash, name = target.partition("/")
    if not slash:
        return read_object(args.hub, args.account, resolve_kind("pods"), target, namespace)
    kind = resolve_kind(kind_text)
    if kind.kind == "Pod":
        return read_object(args.hub, args.account, kind, name, namespace)
    if kind.kind.lower() not in _POD_OWNERS:
        raise CliError(f"error: cannot get the logs of {kind.resource_ref}: not a pod or a workload with pods")
    owner = read_object(args.hub, args.account, kind, name, namespace)
    labels = ((owner.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    if kind.kind == "Job" and not labels:
        labels = {"job-name": name}
    selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    pods = read_objects(args.hub, args.account, resolve_kind("pods"), namespace=namespace, selector=selector or None)
    if not pods:
        raise CliError(f"error: no pods found for {kind.token}/{name} in namespace {namespace}")
    # kubectl prefers a running, ready pod, then the newest
    pods.sort(key=lambda p: ((p.get("status") or {}).get("phase") != "Running", str(meta(p).get("name", ""))))
    if len(pods) > 1:
        err.write(f"Found {len(pods)} pods, using pod/{meta(pods[0]).get('name', '')}\n")
        err.flush()
    return pods[0]


def _default_container(pod: dict[str, Any], err: TextIO) -> str:
    """kubectl's choice without -c: the default-container annotation, else the first container,
    said on stderr when there were several."""
    names = [str(c.get("name", "")) for c in (pod.get("spec") or {}).get("containers") or []]
    if len(names) <= 1:
        return ""
    chosen = (meta(pod).get("annotations") or {}).get("kubectl.kubernetes.io/default-container") or names[0]
    err.write(f'Defaulted container "{chosen}" out of: {", ".join(names)}\n')
    err.flush()
    return str(chosen)


# --- diff ----------------------------------------------------------------------------------------


def _comparable(obj: dict[str, Any] | None) -> dict[str, Any] | None:
    """What `kubectl diff` compares: the object without metadata.managedFields. Secrets lose their
    data on both sides: the hub holds them as metadata only."""
    if obj is None:
        return None
    out = dict(obj)
    out["metadata"] = {k: v for k, v in meta(obj).items() if k != "managedFields"}
    if obj.get("kind") == "Secret" and obj.get("apiVersion") == "v1":
        out.pop("data", None)
        out.pop("stringData", None)
    return out


def _yaml(obj: dict[str, Any] | None) -> list[str]:
    if obj is None:
        return []
    buffer = io.StringIO()
    dump(obj, "yaml", buffer)
    return buffer.getvalue().splitlines(keepends=True)


def diff_objects(live: dict[str, Any] | None, merged: dict[str, Any]) -> str:
    """kubectl diff's text for one object: `diff -u -N LIVE/... MERGED/...` then the unified diff
    of the two as YAML; '' when they are the same."""
    api_version = str(merged.get("apiVersion") or "v1")
    name = ".".join(
        p
        for p in (
            api_version.replace("/", "."),
            str(merged.get("kind", "")),
            str(meta(merged).get("namespace") or ""),
            str(meta(merged).get("name", "")),
        )
        if p
    )
    before, after = _yaml(_comparable(live)), _yaml(_comparable(merged))
    lines = list(difflib.unified_diff(before, after, f"LIVE/{name}", f"MERGED/{name}"))
    if not lines:
        return ""
    body = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
    return f"diff -u -N LIVE/{name} MERGED/{name}\n{body}"


def _diff(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Exit status as kubectl diff's: 0 the same, 1 different, 2 (more than 1) an error."""
    try:
        return _diff_files(args, out)
    except CliError as e:
        e.exit_status = 2  # type: ignore[attr-defined]  # a mistake too: 1 would read as "different"
        raise


def _diff_files(args: argparse.Namespace, out: TextIO) -> int:
    if not args.filename:
        raise UsageError("error: must specify -f", args.prog)
    check_account(args)
    manifests = read_manifest_files(args.filename, verb="diff")
    check_namespaces(manifests, args.namespace)
    body = build_deploy_operation(
        args.account,
        manifests,
        namespace=args.namespace,
        field_manager=args.field_manager,
        dry_run=True,
        force_conflicts=args.force_conflicts,
    )
    task = hub_api.run_task(args.hub, body, args.timeout)
    merged, _, error = apply_output(task)
    if error is not None:
        raise CliError(f"error: {error}")
    if not all(r.get("dryRun") for r in task.get("resultObjects") or [] if r.get("manifests")):
        raise CliError(
            f"error: the agent serving account {args.account} does not know dry runs: the objects WERE applied; "
            "upgrade the agent"
        )
    different = False
    for obj in merged:
        group, kind_name = group_of(obj), str(obj.get("kind", ""))
        kind = KNOWN_KINDS.get((group, kind_name)) or KindInfo(kind_name, group, plural(kind_name.lower()), None)
        namespace = str(meta(obj).get("namespace") or "")
        live = read_objects(
            args.hub, args.account, kind, namespace=namespace or None, name=str(meta(obj).get("name", ""))
        )
        if namespace:
            live = [o for o in live if meta(o).get("namespace") == namespace]
        text = diff_objects(live[0] if live else None, obj)
        if text:
            different = True
            out.write(text)
    out.flush()
    return 1 if different else 0


# --- command line --------------------------------------------------------------------------------


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Register `describe`, `logs` and `diff` on the `scale-agent` parser."""
    parent = hub_options()
    p = verb_parser(
        sub,
        "describe",
        parents=[parent],
        usage="scale-agent describe KIND [NAME...] | KIND/NAME... --account A [-n NS | -A] [-l SELECTOR]",
        help="show an object in detail, with its Events, like kubectl describe",
        description="An object's details and Events from the hub's cache (docs/cli.md).",
    )
    p.add_argument("resources", nargs="*", metavar="KIND [NAME...]", help="a kind, then names (or a name prefix)")
    p.add_argument("--account", help="the account (cluster)")
    p.add_argument("-n", "--namespace", help="the namespace (default: all namespaces, as get)")
    p.add_argument("-A", "--all-namespaces", action="store_true", help="all namespaces")
    p.add_argument("-l", "--selector", metavar="SELECTOR", help="only objects with these labels")
    p.set_defaults(func=run_command(_describe), prog=p.prog)

    p = verb_parser(
        sub,
        "logs",
        parents=[parent],
        usage="scale-agent logs (POD | TYPE/NAME) --account A [-n NS] [-c CONTAINER] [--tail N]",
        help="print a pod's log, read through the account's agent, like kubectl logs",
        description="A pod's log through the hub and the agent serving the account (docs/cli.md).",
    )
    p.add_argument("target", nargs="?", metavar="POD | TYPE/NAME", help="a pod, or deploy/NAME, job/NAME, ...")
    p.add_argument("--account", help="the account (cluster)")
    p.add_argument("-n", "--namespace", help="the namespace (default: default)")
    p.add_argument("-c", "--container", help="the container (default: the pod's default container, else its first)")
    p.add_argument("--tail", type=int, default=-1, metavar="N", help="only the last N lines (default -1: all)")
    p.add_argument("-f", "--follow", action="store_true", help="not supported (the hub returns the log as it is)")
    p.add_argument(
        "--request-timeout", type=float, default=120.0, metavar="SECONDS", help="how long to wait for the log"
    )
    p.set_defaults(func=run_command(_logs), prog=p.prog)

    p = verb_parser(
        sub,
        "diff",
        parents=[parent],
        usage="scale-agent diff -f FILE [-f FILE...] --account A [-n NS] [--field-manager NAME]",
        help="compare manifests with the live objects, like kubectl diff (exit 1 when they differ)",
        description="The API server applies the files as a dry run, through the agent; the result is "
        "compared with the objects in the hub's cache (docs/cli.md). Exit 0: the same; 1: different; "
        "2: an error.",
    )
    p.add_argument("-f", "--filename", action="append", metavar="FILE", help="YAML or JSON file, directory, or -")
    p.add_argument("--account", help="the account (cluster)")
    p.add_argument("-n", "--namespace", help="namespace for manifests that do not name one")
    p.add_argument("--field-manager", default="scale-agent", metavar="NAME", help="as apply's (default scale-agent)")
    add_force_conflicts(p)
    p.add_argument(
        "--timeout",
        type=parse_duration,
        default=DEFAULT_TIMEOUT,
        metavar="DURATION",
        help="how long to wait: 90s, 5m or seconds",
    )
    p.usage_status = 2
    p.set_defaults(func=run_command(_diff), prog=p.prog)
