"""Manifest files as `kubectl apply -f` reads them, and the operations and outputs of `apply` and
`delete`."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from .errors import CliError
from .kinds import KNOWN_KINDS, KindInfo, group_of, kind_token, manifest_name, meta, object_name, plural

__all__ = [
    "CASCADE",
    "DeleteTarget",
    "apply_output",
    "build_delete_operations",
    "build_deploy_operation",
    "check_namespaces",
    "delete_output",
    "load_manifests",
    "read_manifest_files",
    "task_error",
]


def _yaml_loader() -> Any:
    """A safe loader that keeps timestamps as strings: objects go back out as JSON, as kubectl sends them."""
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Loader(base):  # type: ignore[misc, valid-type]
        pass

    Loader.yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in base.yaml_implicit_resolvers.items()
    }
    return Loader


def load_manifests(text: str, source: str) -> list[dict[str, Any]]:
    """The objects in one YAML/JSON file's text: `---` documents, `List` items, empty documents skipped.

    Errors name the file and line (kubectl's `error parsing FILE`), or the document that is not a
    Kubernetes object, so a user of a 40-document file knows where to look.
    """
    import yaml

    try:
        docs = list(yaml.load_all(text, Loader=_yaml_loader()))
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = " ".join(p for p in (e.context, e.problem) if p) or str(e)
        raise CliError(f"error: error parsing {source}: {where}{problem}") from None
    except yaml.YAMLError as e:
        raise CliError(f"error: error parsing {source}: {e}") from None
    objects: list[dict[str, Any]] = []
    for n, doc in enumerate(docs, 1):
        if doc is None:
            continue
        where = f'"{source}"' + (f" (document {n})" if len(docs) > 1 else "")
        if not isinstance(doc, dict):
            raise CliError(
                f"error: error validating {where}: not a Kubernetes object (a mapping with apiVersion "
                f"and kind), got {type(doc).__name__}"
            )
        kind = doc.get("kind")
        if isinstance(kind, str) and kind.endswith("List") and isinstance(doc.get("items"), list):
            for i, item in enumerate(doc["items"]):
                objects.append(_check_object(item, f"{where} item {i}"))
        else:
            objects.append(_check_object(doc, where))
    return objects


def _check_object(obj: Any, where: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise CliError(f"error: error validating {where}: not a Kubernetes object, got {type(obj).__name__}")
    missing = [f"{key} not set" for key in ("apiVersion", "kind") if not obj.get(key)]
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict) or not metadata.get("name"):
        missing.append("metadata.name not set")
    if missing:
        raise CliError(f"error: error validating {where}: error validating data: [{', '.join(missing)}]")
    return obj


def read_manifest_files(paths: Sequence[str], stdin: TextIO | None = None, verb: str = "apply") -> list[dict[str, Any]]:
    """Every object of every -f: files, `-` (stdin), or directories (their .yaml/.yml/.json files)."""
    objects: list[dict[str, Any]] = []
    for path in paths:
        if path == "-":
            objects += load_manifests((stdin or sys.stdin).read(), "STDIN")
            continue
        p = Path(path)
        if p.is_dir():
            files = sorted(f for f in p.iterdir() if f.is_file() and f.suffix in (".yaml", ".yml", ".json"))
        elif p.exists():
            files = [p]
        else:
            raise CliError(f'error: the path "{path}" does not exist')
        for f in files:
            try:
                text = f.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as e:
                raise CliError(f'error: cannot read "{f}": {e}') from None
            objects += load_manifests(text, str(f))
    if not objects:
        raise CliError(f"error: no objects passed to {verb}")
    return objects


def check_namespaces(objects: Sequence[dict[str, Any]], namespace: str | None) -> None:
    """kubectl refuses -n that contradicts a manifest's own namespace, rather than move it silently."""
    if not namespace:
        return
    for obj in objects:
        own = meta(obj).get("namespace")
        if own and own != namespace:
            raise CliError(
                f'error: the namespace from the provided object "{own}" does not match the namespace '
                f"\"{namespace}\". You must pass '--namespace={own}' to perform this operation."
            )


# --- operations ----------------------------------------------------------------------------------


def build_deploy_operation(
    account: str,
    manifests: Sequence[dict[str, Any]],
    *,
    namespace: str | None = None,
    field_manager: str | None = None,
    dry_run: bool = False,
    force_conflicts: bool = True,
) -> list[dict[str, Any]]:
    """The `POST /kubernetes/ops` body of `apply`: one deployManifest with every object, so the hub
    applies them as one task, in order, and reports what it applied if one fails. `dry_run`: the
    agent applies with the API's `dryRun=All` (`apply --dry-run=server`, `diff`)."""
    description: dict[str, Any] = {"account": account, "manifests": list(manifests)}
    if dry_run:
        description["dryRun"] = True
    if namespace:
        description["namespaceOverride"] = namespace
    if field_manager:
        description["fieldManager"] = field_manager
    if not force_conflicts:  # the operation's default is to force, as Spinnaker's deploys do
        description["forceConflicts"] = False
    return [{"deployManifest": description}]


CASCADE = {"background": "Background", "foreground": "Foreground", "orphan": "Orphan"}


def _delete_options(cascade: str, grace_period: int | None) -> dict[str, Any]:
    options: dict[str, Any] = {"propagationPolicy": CASCADE[cascade]}
    if grace_period is not None and grace_period >= 0:
        options["gracePeriodSeconds"] = grace_period
    return options


@dataclass(frozen=True)
class DeleteTarget:
    """One object to delete: `manifestName` (`deployment.apps nginx`) and its namespace ('' cluster-scoped)."""

    manifest_name: str
    location: str


def build_delete_operations(
    account: str,
    *,
    targets: Sequence[DeleteTarget] = (),
    kind: KindInfo | None = None,
    selector: str | None = None,
    location: str = "",
    cascade: str = "background",
    grace_period: int | None = None,
) -> list[dict[str, Any]]:
    """The `POST /kubernetes/ops` body of `delete`: one deleteManifest per object, or one by selector."""
    options = _delete_options(cascade, grace_period)
    if selector is not None:
        if kind is None:
            raise CliError("error: a label selector needs a resource type")
        return [
            {
                "deleteManifest": {
                    "account": account,
                    "kinds": [kind.token],
                    "labelSelector": selector,
                    "location": location,
                    "options": options,
                }
            }
        ]
    return [
        {
            "deleteManifest": {
                "account": account,
                "manifestName": t.manifest_name,
                "location": t.location,
                "options": dict(options),
            }
        }
        for t in targets
    ]


def task_error(task: dict[str, Any]) -> str | None:
    """Why the task failed (its exception's message, else its last status), or None if it did not."""
    status = task.get("status") or {}
    if task.get("state") != "failed" and not status.get("failed"):
        return None
    exception = task.get("exception") or {}
    return str(exception.get("message") or status.get("status") or f"task {task.get('id', '')} failed")


def _applied(task: dict[str, Any]) -> list[dict[str, Any]]:
    applied: list[dict[str, Any]] = []
    for result in task.get("resultObjects") or []:
        skip = {result.get("failedManifest"), *(result.get("notApplied") or [])} - {None}
        skip_lower = {str(s).lower() for s in skip}
        for obj in result.get("manifests") or []:
            kind = str(obj.get("kind") or "").lower()
            name = meta(obj).get("name", "")
            if {f"{kind} {name}", manifest_name(obj).lower()} & skip_lower:
                continue
            applied.append(obj)
    return applied


def apply_output(task: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str], str | None]:
    """A deployManifest task as `kubectl apply --server-side` reports it: the objects applied, a
    `deployment.apps/nginx serverside-applied` line for each, and the error if the task failed."""
    applied = _applied(task)
    return applied, [f"{object_name(o)} serverside-applied" for o in applied], task_error(task)


def delete_output(task: dict[str, Any]) -> tuple[list[str], list[str], str | None]:
    """A deleteManifest task as `kubectl delete` reports it: `deployment.apps "nginx" deleted` per
    object; kubectl's NotFound error per object that was already gone (the operation does not fail
    for those, kubectl does); and the error if the task failed."""
    lines, not_found = [], []
    for result in task.get("resultObjects") or []:
        for d in result.get("deletedManifests") or []:
            lines.append(f'{kind_token(str(d.get("kind") or ""), group_of(d))} "{d.get("name", "")}" deleted')
        for d in result.get("alreadyGone") or []:
            kind, group = str(d.get("kind") or ""), group_of(d)
            known = KNOWN_KINDS.get((group, kind))
            resource = known.resource if known else plural(kind.lower())
            not_found.append(
                f"Error from server (NotFound): {resource}{'.' + group if group else ''} "
                f'"{d.get("name", "")}" not found'
            )
    return lines, not_found, task_error(task)
