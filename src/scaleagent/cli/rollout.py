"""`scale-agent scale` and `scale-agent rollout status|history|undo|pause|resume|restart`.

The changes are the hub's operations (`scaleManifest`, `undoRolloutManifest`,
`pauseRolloutManifest`, `resumeRolloutManifest`, `rollingRestartManifest`), run by the agent
serving the account, which sends the patches `kubectl rollout` sends. What is read comes from the
hub's cache: `rollout status` follows the hub's watch as kubectl follows the API server's, with
kubectl's status messages; `rollout history` lists a Deployment's ReplicaSets (a StatefulSet's or
DaemonSet's ControllerRevisions) as the cache holds them.
"""

from __future__ import annotations

import argparse
import http.client
import json
import time
from collections.abc import Sequence
from typing import Any, TextIO

from . import hub as hub_api
from .describe import pod_template_lines, tabwrite
from .errors import CliError
from .kinds import KindInfo, group_of, kind_token, meta, resolve_kind
from .kubectl import (
    check_account,
    hub_options,
    named_targets,
    namespace_for,
    read_object,
    read_objects,
    sse_events,
)
from .manifests import task_error
from .parsing import KubectlParser, UsageError, parse_bool, parse_duration, run_command, verb_parser
from .progress import Progress

__all__ = ["add_parsers", "rollout_status"]

REVISION = "deployment.kubernetes.io/revision"
CHANGE_CAUSE = "kubernetes.io/change-cause"
DEFAULT_TIMEOUT = 300.0
WATCH_READ_TIMEOUT = 60.0
"""The hub sends a heartbeat every 15 s on an idle watch: this much silence means the watch is lost."""


def _ref(kind: KindInfo, obj: dict[str, Any]) -> str:
    """`deployment.apps/web`: how kubectl names the object in its lines."""
    token = kind_token(str(obj.get("kind") or kind.kind), group_of(obj) if obj else kind.group or "")
    return f"{token}/{meta(obj).get('name', '')}"


def _operation(args: argparse.Namespace, type_: str, kind: KindInfo, name: str, **fields: Any) -> dict[str, Any]:
    task = hub_api.run_task(
        args.hub,
        [
            {
                type_: {
                    "account": args.account,
                    "manifestName": f"{kind.token} {name}",
                    "location": namespace_for(kind, args.namespace),
                    **fields,
                }
            }
        ],
        args.timeout,
    )
    error = task_error(task)
    if error is not None:
        raise CliError(f"error: {error}")
    return task


# --- scale ---------------------------------------------------------------------------------------


def _scale(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.replicas is None:
        raise UsageError('error: required flag(s) "replicas" not set', args.prog)
    if args.replicas < 0:
        raise CliError("error: The --replicas=COUNT flag is required, and COUNT must be greater than or equal to 0")
    check_account(args)
    for kind, name in named_targets(args.resources, "scale"):
        obj = read_object(args.hub, args.account, kind, name, namespace_for(kind, args.namespace))
        if args.current_replicas is not None:
            current = (obj.get("spec") or {}).get("replicas", 1)
            if current != args.current_replicas:
                raise CliError(f"error: Expected replicas to be {args.current_replicas}, was {current}")
        _operation(args, "scaleManifest", kind, name, replicas=args.replicas)
        out.write(f"{_ref(kind, obj)} scaled\n")
        out.flush()
    return 0


# --- rollout status ------------------------------------------------------------------------------


def _generation_observed(o: dict[str, Any]) -> bool:
    observed = (o.get("status") or {}).get("observedGeneration")
    return observed is not None and int(meta(o).get("generation") or 0) <= int(observed)


def rollout_status(o: dict[str, Any]) -> tuple[str, bool]:
    """kubectl's status viewers: the message to print and whether the rollout is complete.
    A rollout that can no longer finish (a Deployment past its progress deadline, a strategy
    without rollouts) is a CliError, as kubectl reports it."""
    kind, name = o.get("kind"), meta(o).get("name", "")
    spec, status = o.get("spec") or {}, o.get("status") or {}
    if kind == "Deployment":
        if not _generation_observed(o):
            return "Waiting for deployment spec update to be observed...", False
        for c in status.get("conditions") or []:
            if c.get("type") == "Progressing" and c.get("reason") == "ProgressDeadlineExceeded":
                raise CliError(f'error: deployment "{name}" exceeded its progress deadline')
        replicas = int(spec.get("replicas", 1))
        updated = int(status.get("updatedReplicas") or 0)
        total = int(status.get("replicas") or 0)
        available = int(status.get("availableReplicas") or 0)
        if updated < replicas:
            return (
                f'Waiting for deployment "{name}" rollout to finish: {updated} out of {replicas} new replicas '
                "have been updated...",
                False,
            )
        if total > updated:
            return (
                f'Waiting for deployment "{name}" rollout to finish: {total - updated} old replicas are pending '
                "termination...",
                False,
            )
        if available < updated:
            return (
                f'Waiting for deployment "{name}" rollout to finish: {available} of {updated} updated replicas '
                "are available...",
                False,
            )
        return f'deployment "{name}" successfully rolled out', True
    if kind == "DaemonSet":
        if (spec.get("updateStrategy") or {}).get("type", "RollingUpdate") != "RollingUpdate":
            raise CliError("error: rollout status is only available for RollingUpdate strategy type")
        if not _generation_observed(o):
            return "Waiting for daemon set spec update to be observed...", False
        desired = int(status.get("desiredNumberScheduled") or 0)
        updated = int(status.get("updatedNumberScheduled") or 0)
        available = int(status.get("numberAvailable") or 0)
        if updated < desired:
            return (
                f'Waiting for daemon set "{name}" rollout to finish: {updated} out of {desired} new pods have '
                "been updated...",
                False,
            )
        if available < desired:
            return (
                f'Waiting for daemon set "{name}" rollout to finish: {available} of {desired} updated pods are '
                "available...",
                False,
            )
        return f'daemon set "{name}" successfully rolled out', True
    if kind == "StatefulSet":
        strategy = spec.get("updateStrategy") or {}
        if strategy.get("type", "RollingUpdate") != "RollingUpdate":
            raise CliError("error: rollout status is only available for RollingUpdate strategy type")
        if not status.get("observedGeneration") or not _generation_observed(o):
            return "Waiting for statefulset spec update to be observed...", False
        replicas = int(spec.get("replicas", 1))
        ready = int(status.get("readyReplicas") or 0)
        if ready < replicas:
            return f"Waiting for {replicas - ready} pods to be ready...", False
        partition = (strategy.get("rollingUpdate") or {}).get("partition")
        updated = int(status.get("updatedReplicas") or 0)
        if partition:
            if updated < replicas - int(partition):
                return (
                    f"Waiting for partitioned roll out to finish: {updated} out of {replicas - int(partition)} "
                    "new pods have been updated...",
                    False,
                )
            return f"partitioned roll out complete: {updated} new pods have been updated...", True
        if status.get("updateRevision") != status.get("currentRevision"):
            return (
                f"waiting for statefulset rolling update to complete {updated} pods at revision "
                f"{status.get('updateRevision', '')}...",
                False,
            )
        return (
            f"statefulset rolling update complete {int(status.get('currentReplicas') or 0)} pods at revision "
            f"{status.get('currentRevision', '')}...",
            True,
        )
    raise CliError(f"error: no status viewer has been implemented for {kind}")


def _status(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    check_account(args)
    targets = named_targets(args.resources, "rollout status")
    for kind, name in targets:
        _follow_status(args, kind, name, out, err)
    return 0


def _follow_status(args: argparse.Namespace, kind: KindInfo, name: str, out: TextIO, err: TextIO) -> None:
    """Print the status as it changes until the rollout completes, as `kubectl rollout status`
    does: the hub's watch is opened before the object is read, so no change in between is missed;
    if the watch is cut it is opened again and the object read again."""
    namespace = namespace_for(kind, args.namespace)
    deadline = time.monotonic() + args.timeout if args.timeout else None
    last = ""
    with Progress(err, ticking=True) as progress:

        def show(obj: dict[str, Any]) -> bool:
            nonlocal last
            message, done = rollout_status(obj)
            if message != last:
                progress.clear()
                out.write(message + "\n")
                out.flush()
                last = message
            progress.update(f"waiting for {_ref(kind, obj)} in account {args.account}")
            return done

        while True:
            stream = None
            if args.watch:
                remaining = WATCH_READ_TIMEOUT if deadline is None else max(0.1, deadline - time.monotonic())
                params = [("kind", kind.query.lower()), ("account", args.account)]
                if namespace:
                    params.append(("namespace", namespace))
                stream = hub_api.open_stream(
                    args.hub,
                    "GET",
                    "/api/v1/watch",
                    params=params,
                    timeout=min(WATCH_READ_TIMEOUT, remaining),
                    accept="text/event-stream",
                )
            try:
                if show(read_object(args.hub, args.account, kind, name, namespace)) or stream is None:
                    return
                for event, data in sse_events(stream):
                    if event == "error":
                        break
                    try:
                        change = json.loads(data)
                    except ValueError:
                        continue
                    obj = change.get("object")
                    if not isinstance(obj, dict) or meta(obj).get("name") != name:
                        continue
                    if kind.group is not None and group_of(obj) != kind.group:
                        continue
                    if change.get("type") == "DELETED":
                        raise CliError("error: object has been deleted")
                    if show(obj):
                        return
                    if deadline is not None and time.monotonic() >= deadline:
                        break
            except (TimeoutError, OSError, http.client.HTTPException):
                pass  # the watch went silent or was cut: read again, unless the time is up
            finally:
                if stream is not None:
                    stream.close()
            if deadline is not None and time.monotonic() >= deadline:
                raise CliError("error: timed out waiting for the condition")


# --- rollout history -----------------------------------------------------------------------------


def _owned(obj: dict[str, Any], candidates: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    uid = meta(obj).get("uid")
    return [
        c
        for c in candidates
        if any(r.get("uid") == uid and r.get("controller") for r in meta(c).get("ownerReferences") or [])
    ]


def revisions(obj: dict[str, Any], owned: Sequence[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Revision number -> the ReplicaSet (Deployment) or ControllerRevision (StatefulSet,
    DaemonSet) that holds it: what `kubectl rollout history` lists."""
    out: dict[int, dict[str, Any]] = {}
    for item in _owned(obj, owned):
        if item.get("kind") == "ControllerRevision":
            number = item.get("revision")
        else:
            number = (meta(item).get("annotations") or {}).get(REVISION)
        try:
            out[int(str(number))] = item
        except ValueError:
            continue
    return out


def history_text(ref: str, history: dict[int, dict[str, Any]], revision: int = 0) -> str:
    """kubectl's `rollout history` text: the revisions and their change causes, or one revision's
    pod template."""
    if revision:
        if revision not in history:
            raise CliError("error: unable to find the specified revision")
        item = history[revision]
        if item.get("kind") == "ControllerRevision":
            template = ((item.get("data") or {}).get("spec") or {}).get("template") or {}
        else:
            template = (item.get("spec") or {}).get("template") or {}
        return f"{ref} with revision #{revision}\n" + tabwrite(pod_template_lines(template)) + "\n"
    lines = ["REVISION\tCHANGE-CAUSE"]
    for number in sorted(history):
        cause = (meta(history[number]).get("annotations") or {}).get(CHANGE_CAUSE) or "<none>"
        lines.append(f"{number}\t{cause}")
    return f"{ref} \n" + tabwrite(lines) + "\n"


def _history(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    check_account(args)
    for kind, name in named_targets(args.resources, "rollout history"):
        namespace = namespace_for(kind, args.namespace)
        obj = read_object(args.hub, args.account, kind, name, namespace)
        if obj.get("kind") == "Deployment":
            owned_kind = resolve_kind("ReplicaSet.apps")
        elif obj.get("kind") in ("StatefulSet", "DaemonSet"):
            owned_kind = resolve_kind("ControllerRevision.apps")
        else:
            raise CliError(f"error: no history viewer has been implemented for {obj.get('kind')}")
        owned = read_objects(args.hub, args.account, owned_kind, namespace=namespace)
        out.write(history_text(_ref(kind, obj), revisions(obj, owned), args.revision or 0))
        out.flush()
    return 0


# --- undo, pause, resume, restart ----------------------------------------------------------------


def _undo(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    check_account(args)
    for kind, name in named_targets(args.resources, "rollout undo"):
        obj = read_object(args.hub, args.account, kind, name, namespace_for(kind, args.namespace))
        task = _operation(args, "undoRolloutManifest", kind, name, revision=args.to_revision)
        skipped = next((r.get("skipped") for r in task.get("resultObjects") or [] if r.get("skipped")), None)
        if skipped:
            revision = next((r.get("revision") for r in task.get("resultObjects") or [] if r.get("revision")), "")
            out.write(f"{_ref(kind, obj)} skipped rollback (current template already matches revision {revision})\n")
        else:
            out.write(f"{_ref(kind, obj)} rolled back\n")
        out.flush()
    return 0


def _pause_or_resume(args: argparse.Namespace, out: TextIO, pause: bool) -> int:
    check_account(args)
    for kind, name in named_targets(args.resources, "rollout pause" if pause else "rollout resume"):
        obj = read_object(args.hub, args.account, kind, name, namespace_for(kind, args.namespace))
        paused = bool((obj.get("spec") or {}).get("paused"))
        if paused == pause:
            raise CliError(f'error: {kind.resource_ref} "{name}" is {"already paused" if pause else "not paused"}')
        _operation(args, "pauseRolloutManifest" if pause else "resumeRolloutManifest", kind, name)
        out.write(f"{_ref(kind, obj)} {'paused' if pause else 'resumed'}\n")
        out.flush()
    return 0


def _restart(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    check_account(args)
    for kind, name in named_targets(args.resources, "rollout restart"):
        obj = read_object(args.hub, args.account, kind, name, namespace_for(kind, args.namespace))
        _operation(args, "rollingRestartManifest", kind, name)
        out.write(f"{_ref(kind, obj)} restarted\n")
        out.flush()
    return 0


# --- command line --------------------------------------------------------------------------------


def _common(p: argparse.ArgumentParser, *, timeout_help: str = "how long to wait for the operation") -> None:
    p.add_argument("resources", nargs="*", metavar="KIND NAME | KIND/NAME", help="deployment web, deploy/web, ...")
    p.add_argument("--account", help="the account (cluster)")
    p.add_argument("-n", "--namespace", help="the namespace (default: default)")
    p.add_argument(
        "--timeout",
        type=parse_duration,
        default=DEFAULT_TIMEOUT,
        metavar="DURATION",
        help=f"{timeout_help} (90s, 5m; default {DEFAULT_TIMEOUT:g}s)",
    )


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Register `scale` and `rollout` on the `scale-agent` parser."""
    parent = hub_options()
    p = verb_parser(
        sub,
        "scale",
        parents=[parent],
        usage="scale-agent scale (KIND NAME | KIND/NAME) --replicas N --account A [-n NS] [--current-replicas N]",
        help="set the replicas of a Deployment, ReplicaSet or StatefulSet, like kubectl scale",
        description="Set the number of replicas through the hub's scaleManifest operation (docs/cli.md).",
    )
    _common(p)
    p.add_argument("--replicas", type=int, metavar="N", help="the new number of replicas (required)")
    p.add_argument(
        "--current-replicas",
        type=int,
        metavar="N",
        help="only scale if the hub's cache shows this many replicas now",
    )
    p.set_defaults(func=run_command(_scale), prog=p.prog)

    rollout = verb_parser(
        sub,
        "rollout",
        help="manage the rollout of a Deployment (StatefulSet, DaemonSet), like kubectl rollout",
        description="status, history, undo, pause, resume, restart (docs/cli.md).",
    )
    verbs = rollout.add_subparsers(dest="rollout_command", metavar="SUBCOMMAND")
    rollout.set_defaults(func=lambda args: _help(rollout), prog=rollout.prog)

    def verb(name: str, help_: str) -> KubectlParser:
        return verb_parser(verbs, name, parents=[parent], help=help_, description=help_ + " (docs/cli.md).")

    p = verb("status", "wait for a rollout to finish, printing its progress")
    _common(p, timeout_help="how long to wait; 0: forever")
    p.set_defaults(timeout=0.0)
    p.add_argument(
        "-w",
        "--watch",
        type=parse_bool,
        nargs="?",
        const=True,
        default=True,
        metavar="BOOL",
        help="follow until done (default); --watch=false prints the status once",
    )
    p.set_defaults(func=run_command(_status), prog=p.prog)

    p = verb("history", "the revisions of a rollout")
    _common(p)
    p.add_argument("--revision", type=int, default=0, metavar="N", help="show this revision's pod template")
    p.set_defaults(func=run_command(_history), prog=p.prog)

    p = verb("undo", "roll back to the previous revision, or --to-revision")
    _common(p)
    p.add_argument("--to-revision", type=int, default=0, metavar="N", help="the revision (default 0: the previous)")
    p.set_defaults(func=run_command(_undo), prog=p.prog)

    p = verb("pause", "pause a Deployment's rollout")
    _common(p)
    p.set_defaults(func=run_command(lambda a, o, e: _pause_or_resume(a, o, True)), prog=p.prog)

    p = verb("resume", "resume a paused Deployment's rollout")
    _common(p)
    p.set_defaults(func=run_command(lambda a, o, e: _pause_or_resume(a, o, False)), prog=p.prog)

    p = verb("restart", "restart every pod of a Deployment, StatefulSet or DaemonSet, by a rollout")
    _common(p)
    p.set_defaults(func=run_command(_restart), prog=p.prog)


def _help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 0
