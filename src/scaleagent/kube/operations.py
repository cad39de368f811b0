"""The operations a deployment pipeline runs against a cluster, in Spinnaker's terms.

Each operation takes Clouddriver's description of it (a JSON object) and records what it did in
an `Outcome`: the objects as the API server returned them, what it reports besides (deleted
objects, job logs...), and every change it made (`Touched`), from which the agent tells the hub
what its cache will show. A failure is recorded, not just raised: what was done before it stays
in the outcome, so that a deploy of several manifests that fails half-way says which were applied.

Kubernetes is the reference for every behaviour: deploys are server-side applies with a field
manager and strict field validation (kubectl's default since 1.27); rollbacks, pauses and
restarts are the patches `kubectl rollout` sends; deletions wait until the object is gone, as
`kubectl delete --wait` does, by watching it rather than polling.

Whichever agent runs an operation, it changes the cluster once. Hub replicas resend an operation
with the same id when the replica holding it dies, and the resend may reach another agent of the
same accounts, which cannot know what the first did. So an operation that would not be the same
when applied twice leaves its id in the cluster, and a run with an id found there changes
nothing: a Job whose name only had a `generateName` is named from the id (a second create finds
it, marked with the id, and follows it); a rollback, a restart and a JSON patch write the id into
the object's `scale-agent.io/operations` annotation in the same write, guarded by the
resourceVersion they read. The others are the same applied twice: server-side apply, a merge or
strategic patch, a scale, a pause or resume, and a delete (a second finds the object gone).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from .client import KubeClient, describe_connection_error
from .discovery import KindInfo
from .errors import APIError, ConnectionFailed, KubeError, OperationFailed, UnknownKind
from .resources import ResourceMap

__all__ = ["OPERATIONS", "STATUS_REASONS", "ClusterOperations", "OperationFailed", "Outcome", "Touched", "api_failure"]

log = logging.getLogger("scaleagent.kube.operations")

DEFAULT_FIELD_MANAGER = "scale-agent"
APPLY = "application/apply-patch+yaml"
PATCH_TYPES = {
    "strategic": "application/strategic-merge-patch+json",
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
}
# Attempts of a write that the API server refused with 409 Conflict (an object changed between
# our read and our write, or a create raced a delete); a field-manager conflict is not retried.
CONFLICT_ATTEMPTS = 4
# The ids of the last operations that changed an object in a way that is not the same when
# applied twice (a rollback, a restart, a JSON patch), newest last; and of the operation that
# created a Job. See the module's docstring.
OPERATIONS_ANNOTATION = "scale-agent.io/operations"
REMEMBERED_OPERATION_IDS = 8
# What Kubernetes gives a generated name: at most 58 characters of the prefix, and 5 characters of
# this alphabet (apiserver's names.SimpleNameGenerator, k8s.io/apimachinery's rand.String).
GENERATED_PREFIX_MAX = 58
GENERATED_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
REVISION = "deployment.kubernetes.io/revision"
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"
# Annotations a rollback leaves as the Deployment has them (kubectl's annotationsToSkip).
UNDO_KEEPS = frozenset(
    {
        "kubectl.kubernetes.io/last-applied-configuration",
        REVISION,
        "deployment.kubernetes.io/revision-history",
        "deployment.kubernetes.io/desired-replicas",
        "deployment.kubernetes.io/max-replicas",
        "deprecated.deployment.rollback.to",
    }
)
# A job's logs are reported up to this size per container (the end of the log is kept).
MAX_LOG_BYTES = 256 * 1024
# A Job cut by its deadline: how many of its pods its message describes, and jobStatus.pods lists
# (a Job of a thousand pods must not make a message nobody reads, or a result the hub refuses).
MAX_PODS_IN_MESSAGE = 5
MAX_REPORTED_PODS = 100
# Kinds applied before the rest of a deploy, in this order: what others depend on. Everything
# else keeps the order it was given in.
APPLY_FIRST = (
    "Namespace",
    "CustomResourceDefinition",
    "PriorityClass",
    "StorageClass",
    "ResourceQuota",
    "LimitRange",
    "ServiceAccount",
    "Secret",
    "ConfigMap",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "NetworkPolicy",
    "Service",
)
_RANK = {kind: i for i, kind in enumerate(APPLY_FIRST)}


def bad_request(message: str) -> OperationFailed:
    return OperationFailed(400, "BadRequest", message)


# Armory's per-object switches. Scale Agent always deploys by server-side apply, never clears
# managedFields and never adds defaults: an object that asks otherwise is refused, not deployed
# differently from what its author asked. Armory's notes spell the values enabled/disabled and
# true/false; both are understood.
SSA_ANNOTATION = "agent-k8s.armory.io/serverside-apply"
SSA_CLEAR_ANNOTATION = "agent-k8s.armory.io/ssa-clear-managed-fields"
SSA_DEFAULTS_ANNOTATION = "agent-k8s.armory.io/ssa-manifest-defaults"
_ON, _OFF = ("enabled", "true"), ("disabled", "false")


def armory_annotation_problem(index: int, manifest: dict[str, Any]) -> str | None:
    """Why a manifest's Armory annotations cannot be honoured, or None."""
    annotations = (manifest.get("metadata") or {}).get("annotations") or {}
    what = f"manifest {index + 1} ({manifest.get('kind')} {(manifest.get('metadata') or {}).get('name')})"
    for key, refused, why in (
        (SSA_ANNOTATION, _OFF, "client-side apply is not implemented (Scale Agent deploys by server-side apply)"),
        (SSA_CLEAR_ANNOTATION, _ON, "Scale Agent does not clear managedFields (it applies with force instead)"),
        (SSA_DEFAULTS_ANNOTATION, _ON, "Scale Agent adds no field defaults to manifests"),
    ):
        value = annotations.get(key)
        if isinstance(value, str) and value.strip().lower() in refused:
            return f"{what}: annotation {key}: {value!r}: {why}; remove the annotation"
    return None


# The reason Kubernetes gives each status code, for answers that came without one.
STATUS_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Gone",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}
# What servers before fieldValidation (Kubernetes < 1.25) answer with a 500 to a server-side apply
# whose manifest has a field the schema does not know: the caller's manifest, not the server, is wrong.
_BAD_MANIFEST_500 = ("failed to create typed patch object", "field not declared in schema")


def api_failure(e: APIError, what: str = "", done: str = "") -> OperationFailed:
    """An API server's refusal as an operation's failure: always a reason and a message that say
    what was wrong, never a bare 500 "Error"."""
    status, reason = e.status, e.reason if e.reason != "Error" else ""  # "Error": APIError's stand-in for none
    message = e.message or f"the API server answered {status}{' ' + reason if reason else ''} with no message"
    if status == 500 and any(marker in message for marker in _BAD_MANIFEST_500):
        status, reason = 400, "BadRequest"
        message = f"the API server rejected the manifest: {message}"
    if not reason:
        reason = STATUS_REASONS.get(status, "InternalError" if status >= 500 else "BadRequest")
    details = (e.body or {}).get("details") if isinstance(e.body, dict) else None
    return OperationFailed(status, reason, f"{what}: {message}{done}" if what else f"{message}{done}", details)


@dataclass
class Touched:
    """One change an operation made: the object's version after it, or that it is gone."""

    kind: KindInfo
    namespace: str
    name: str
    resource_version: str
    deleted: bool = False
    uid: str = ""  # of the deleted object: another object of the same name is a new one


@dataclass
class Outcome:
    objects: list[dict[str, Any]] = field(default_factory=list)
    output: dict[str, Any] = field(default_factory=dict)
    touched: list[Touched] = field(default_factory=list)
    error: OperationFailed | None = None
    # When the caller will cut the operation short (event loop time): an operation that waits can
    # stop a little before, to say what it was waiting for.
    deadline: float | None = None
    # What the operation is doing now: named when its deadline cuts it short.
    step: str = ""
    # The operation's id, left in the cluster by changes not the same when applied twice (see the
    # module's docstring); "" leaves none.
    operation: str = ""

    def record(self, kind: KindInfo, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        self.objects.append(obj)
        self.touched.append(
            Touched(kind, meta.get("namespace") or "", meta.get("name") or "", str(meta.get("resourceVersion") or ""))
        )


def describe(kind: KindInfo, name: str, namespace: str = "") -> str:
    """How messages name an object: `deployment.apps nginx in namespace web`."""
    where = f" in namespace {namespace}" if namespace and kind.namespaced else ""
    return f"{kind.kind.lower()}{'.' + kind.group if kind.group else ''} {name}{where}"


def manifest_name(kind: KindInfo | str, name: str) -> str:
    """Clouddriver's "kind name" (`deployment my-app`), as manifestNamesByNamespace lists them."""
    k = kind if isinstance(kind, str) else kind.kind
    return f"{k[:1].lower()}{k[1:]} {name}"


def _text(value: Any, what: str, *, required: bool = True) -> str:
    if value is None or value == "":
        if required:
            raise bad_request(f"{what} is required")
        return ""
    if not isinstance(value, str):
        raise bad_request(f"{what} must be a string, not {type(value).__name__}")
    return value


def _integer(value: Any, what: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise bad_request(f"{what} must be an integer")
    try:
        n = int(value)
    except ValueError:
        raise bad_request(f"{what} must be an integer, not {value!r}") from None
    if n < minimum:
        raise bad_request(f"{what} must be at least {minimum}, not {n}")
    return n


def _selector(match_labels: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(match_labels.items()))


def _is_field_manager_conflict(e: APIError) -> bool:
    causes = ((e.body or {}).get("details") or {}).get("causes") or [] if isinstance(e.body, dict) else []
    return any(c.get("reason") == "FieldManagerConflict" for c in causes if isinstance(c, dict))


class ClusterOperations:
    """The operations of one account, against its API server with its credentials."""

    def __init__(self, client: KubeClient, resources: ResourceMap) -> None:
        self.client = client
        self.resources = resources

    async def run(self, type_: str, request: dict[str, Any], out: Outcome) -> None:
        """Run operation `type_`; failures end up in `out.error` (a deadline is the caller's)."""
        try:
            handler = OPERATIONS.get(type_)
            if handler is None:
                raise bad_request(f"unknown operation type {type_!r}; this agent runs {', '.join(sorted(OPERATIONS))}")
            if not isinstance(request, dict):
                raise bad_request(f"the {type_} description must be a JSON object")
            await handler(self, request, out)
        except UnknownKind as e:
            out.error = OperationFailed(400, "BadRequest", str(e))
        except OperationFailed as e:
            out.error = e
        except APIError as e:
            # An answer without a message still says what was being done, even before any step.
            out.error = api_failure(e, out.step or ("" if e.message else f"running {type_}"))
        except ConnectionFailed as e:
            out.error = OperationFailed(503, "ServiceUnavailable", str(e))
        except Exception as e:
            log.exception("%s failed unexpectedly", type_)
            out.error = OperationFailed(
                500,
                "InternalError",
                f"the agent failed unexpectedly while {out.step or 'starting'}: {type(e).__name__}: {e}",
            )

    # ---- references ------------------------------------------------------------------------------

    async def _target(self, request: dict[str, Any]) -> tuple[KindInfo, str, str]:
        """The object named by `manifestName` ("kind name") and `location` (its namespace)."""
        ref = _text(request.get("manifestName"), "manifestName")
        kind_ref, _, name = ref.strip().partition(" ")
        if not name.strip():
            raise bad_request(f'manifestName {ref!r} must be "kind name", e.g. "deployment my-app"')
        kind = await self.resources.for_reference(kind_ref)
        namespace = _text(request.get("location"), "location", required=False) if kind.namespaced else ""
        return kind, (namespace or "default") if kind.namespaced else "", name.strip()

    @staticmethod
    def _path(kind: KindInfo, namespace: str, name: str, sub: str = "") -> str:
        return f"{kind.path(namespace or None)}/{name}" + (f"/{sub}" if sub else "")

    # ---- writes ----------------------------------------------------------------------------------

    async def _retrying(self, write: Callable[[], Awaitable[Any]]) -> Any:
        for attempt in range(CONFLICT_ATTEMPTS):
            try:
                return await write()
            except APIError as e:
                if e.status != 409 or attempt == CONFLICT_ATTEMPTS - 1 or _is_field_manager_conflict(e):
                    raise
                log.info("write conflicted (%s); retrying", e.message)
                await asyncio.sleep(0.05 * 2**attempt)

    async def _patch(
        self,
        kind: KindInfo,
        namespace: str,
        name: str,
        body: Any,
        content_type: str,
        field_manager: str = DEFAULT_FIELD_MANAGER,
        sub: str = "",
        **params: str,
    ) -> dict[str, Any]:
        return await self.client.request(
            "PATCH",
            self._path(kind, namespace, name, sub),
            body=body,
            content_type=content_type,
            params={"fieldManager": field_manager, "fieldValidation": "Strict", **params},
        )

    async def deploy_manifest(self, request: dict[str, Any], out: Outcome) -> None:
        """Server-side apply of every manifest, dependencies first; stops at the first refusal."""
        manifests = request.get("manifests")
        if manifests is None and isinstance(request.get("manifest"), dict):
            manifests = [request["manifest"]]
        if not isinstance(manifests, list) or not manifests:
            raise bad_request("manifests must be a non-empty list of Kubernetes objects")
        override = _text(request.get("namespaceOverride"), "namespaceOverride", required=False)
        manager = _text(request.get("fieldManager"), "fieldManager", required=False) or DEFAULT_FIELD_MANAGER
        force = request.get("forceConflicts", True)
        if not isinstance(force, bool):
            raise bad_request("forceConflicts must be true or false")
        # A dry run (`kubectl apply --dry-run=server`): the API server admits, defaults and
        # validates every object and stores none; nothing is recorded as touched, so the hub
        # does not wait for its cache to show changes that will never come.
        dry_run = request.get("dryRun", False)
        if not isinstance(dry_run, bool):
            raise bad_request("dryRun must be true or false")
        if dry_run:
            out.output["dryRun"] = True
        checked = [self._check_manifest(i, m) for i, m in enumerate(manifests)]
        refused = [p for i, m in enumerate(checked) if (p := armory_annotation_problem(i, m))]
        if refused:
            raise bad_request("nothing was applied: " + "; ".join(refused))
        # Every manifest is resolved before any is applied: a kind the cluster does not serve
        # fails the deploy with nothing applied, unless a CRD of this same deploy defines it.
        defined = {
            gvk
            for m in manifests
            if isinstance(m, dict) and m.get("kind") == "CustomResourceDefinition"
            for gvk in _crd_kinds(m)
        }
        kinds: list[KindInfo | None] = []
        problems = []
        for i, m in enumerate(checked):
            try:
                kinds.append(await self.resources.for_manifest(m["apiVersion"], m["kind"]))
            except UnknownKind as e:
                if (m["apiVersion"], m["kind"]) in defined:
                    kinds.append(None)
                else:
                    problems.append(f"manifest {i + 1} ({m['kind']} {m['metadata']['name']}): {e}")
        if problems:
            raise bad_request("nothing was applied: " + "; ".join(problems))
        order = sorted(range(len(checked)), key=lambda i: _RANK.get(checked[i]["kind"], len(_RANK)))
        for position, i in enumerate(order):
            m, kind = checked[i], kinds[i]
            if kind is None:
                if dry_run:  # its CRD is only dry-run too: the kind will never be served
                    raise bad_request(
                        f"{m['kind']} {m['metadata']['name']} cannot be dry-run: its CustomResourceDefinition "
                        "is in this same deploy, and a dry run does not create it"
                    )
                out.step = f"waiting for the CRD of {m['kind']} to be served"
                kind = await self._served(m["apiVersion"], m["kind"])
            body = dict(m)
            meta = body["metadata"] = dict(m["metadata"])
            if kind.namespaced:
                meta["namespace"] = override or meta.get("namespace") or "default"
            else:
                meta.pop("namespace", None)
            what = describe(kind, meta["name"], meta.get("namespace", ""))
            out.step = f"applying {what}"
            try:
                namespace, name = meta.get("namespace", ""), meta["name"]
                params = {"force": "true"} if force else {}
                if dry_run:
                    params["dryRun"] = "All"
                applied = await self._retrying(
                    functools.partial(self._patch, kind, namespace, name, body, APPLY, manager, **params)
                )
            except KubeError as e:
                rest = [
                    manifest_name(checked[j]["kind"], checked[j]["metadata"]["name"]) for j in order[position + 1 :]
                ]
                out.output |= {"failedManifest": manifest_name(kind, meta["name"]), "notApplied": rest}
                before = ", ".join(manifest_name(o["kind"], o["metadata"]["name"]) for o in out.objects)
                done = f"; applied before it: {before}" if out.objects else "; nothing was applied"
                if isinstance(e, APIError):
                    raise api_failure(e, what, done) from None
                raise OperationFailed(503, "ServiceUnavailable", f"{what}: {e}{done}") from None
            if dry_run:
                out.objects.append(applied)  # what would be: reported, not expected in the cache
            else:
                out.record(kind, applied)

    async def _served(self, api_version: str, kind: str) -> KindInfo:
        """A kind whose CRD this deploy just applied: established at once by some servers, soon by others."""
        delay = 0.1
        while True:
            try:
                return await self.resources.for_manifest(api_version, kind)
            except UnknownKind:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    @staticmethod
    def _check_manifest(i: int, m: Any) -> dict[str, Any]:
        where = f"manifest {i + 1}"
        if not isinstance(m, dict):
            raise bad_request(f"{where} is not a JSON object")
        kind, api_version = m.get("kind"), m.get("apiVersion")
        meta = m.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        label = f"{where} ({kind or '?'} {name or '?'})"
        if not isinstance(kind, str) or not kind:
            raise bad_request(f"{label}: kind is missing")
        if not isinstance(api_version, str) or not api_version:
            raise bad_request(f"{label}: apiVersion is missing")
        if not isinstance(meta, dict):
            raise bad_request(f"{label}: metadata is missing")
        if not isinstance(name, str) or not name:
            raise bad_request(
                f"{label}: metadata.name is missing (server-side apply needs a name; generateName is for runJob)"
            )
        return m

    async def patch_manifest(self, request: dict[str, Any], out: Outcome) -> None:
        kind, namespace, name = await self._target(request)
        options = request.get("options") or {}
        if not isinstance(options, dict):
            raise bad_request("options must be a JSON object")
        strategy = _text(options.get("mergeStrategy"), "options.mergeStrategy", required=False) or "strategic"
        if strategy not in PATCH_TYPES:
            raise bad_request(f"options.mergeStrategy {strategy!r} is not one of {', '.join(PATCH_TYPES)}")
        body = request.get("patchBody")
        if strategy == "json" and not isinstance(body, list):
            raise bad_request("patchBody must be a list of JSON patch operations for mergeStrategy json")
        if strategy != "json" and not isinstance(body, dict):
            raise bad_request(f"patchBody must be a JSON object for mergeStrategy {strategy}")
        manager = _text(request.get("fieldManager"), "fieldManager", required=False) or DEFAULT_FIELD_MANAGER
        out.step = f"patching {describe(kind, name, namespace)}"
        if strategy != "json" or not out.operation:
            # A merge or strategic patch is the same applied twice (RFC 7386); a JSON patch may not
            # be (an "add" to the end of a list), so it leaves the operation's id.
            patched = await self._retrying(
                lambda: self._patch(kind, namespace, name, body, PATCH_TYPES[strategy], manager)
            )
            out.record(kind, patched)
            return

        steps: list[Any] = body if isinstance(body, list) else []

        async def marked(current: dict[str, Any]) -> dict[str, Any]:
            meta = current.get("metadata") or {}
            guarded = [
                {"op": "replace", "path": "/metadata/resourceVersion", "value": meta.get("resourceVersion")},
                _mark_operation(current, out.operation),
                *steps,
            ]
            return await self._patch(kind, namespace, name, guarded, PATCH_TYPES["json"], manager)

        await self._once(kind, namespace, name, out, marked)

    async def scale_manifest(self, request: dict[str, Any], out: Outcome) -> None:
        kind, namespace, name = await self._target(request)
        replicas = _integer(request.get("replicas"), "replicas")
        out.step = f"scaling {describe(kind, name, namespace)}"
        await self._patch(kind, namespace, name, {"spec": {"replicas": replicas}}, PATCH_TYPES["merge"], sub="scale")
        out.record(kind, await self.client.get(self._path(kind, namespace, name)))

    async def _deployment(self, request: dict[str, Any], verb: str) -> tuple[KindInfo, str, str]:
        kind, namespace, name = await self._target(request)
        if (kind.group, kind.kind) != ("apps", "Deployment"):
            raise bad_request(f"{verb} is supported for Deployments only, not {kind.kind}")
        return kind, namespace, name

    async def pause_rollout_manifest(self, request: dict[str, Any], out: Outcome) -> None:
        await self._set_paused(request, out, True)

    async def resume_rollout_manifest(self, request: dict[str, Any], out: Outcome) -> None:
        await self._set_paused(request, out, False)

    async def _set_paused(self, request: dict[str, Any], out: Outcome, paused: bool) -> None:
        kind, namespace, name = await self._deployment(request, "pausing a rollout" if paused else "resuming a rollout")
        out.step = f"{'pausing' if paused else 'resuming'} {describe(kind, name, namespace)}"
        out.record(kind, await self._patch(kind, namespace, name, {"spec": {"paused": paused}}, PATCH_TYPES["merge"]))

    async def rolling_restart_manifest(self, request: dict[str, Any], out: Outcome) -> None:
        kind, namespace, name = await self._target(request)
        if (kind.group, kind.kind) not in {("apps", "Deployment"), ("apps", "StatefulSet"), ("apps", "DaemonSet")}:
            raise bad_request(
                f"a rolling restart is supported for Deployments, StatefulSets and DaemonSets, not {kind.kind}"
            )
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        restart = {"template": {"metadata": {"annotations": {RESTARTED_AT: now}}}}
        out.step = f"restarting {describe(kind, name, namespace)}"
        if not out.operation:
            out.record(kind, await self._patch(kind, namespace, name, {"spec": restart}, PATCH_TYPES["merge"]))
            return

        async def marked(current: dict[str, Any]) -> dict[str, Any]:
            meta = current.get("metadata") or {}
            patch = {
                "metadata": {
                    "resourceVersion": meta.get("resourceVersion"),
                    "annotations": {OPERATIONS_ANNOTATION: _operation_marks(current, out.operation)},
                },
                "spec": restart,
            }
            return await self._patch(kind, namespace, name, patch, PATCH_TYPES["merge"])

        await self._once(kind, namespace, name, out, marked)

    async def _once(
        self,
        kind: KindInfo,
        namespace: str,
        name: str,
        out: Outcome,
        write: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]],
    ) -> None:
        """`write(current)`, a change that leaves `out.operation`'s id on the object and is guarded
        by the resourceVersion it read, unless the object carries that id already: then this
        operation changed it before (on another agent, maybe) and it is not changed again."""
        what = describe(kind, name, namespace)
        for attempt in range(CONFLICT_ATTEMPTS):
            current = await self.client.get(self._path(kind, namespace, name))
            if _marked(current, out.operation):
                log.info("operation %s: %s already carries its change; not applied again", out.operation, what)
                out.output["alreadyApplied"] = (
                    f"{what} already carries this operation's change (it was sent again); nothing was changed again"
                )
                out.record(kind, current)
                return
            try:
                out.record(kind, await write(current))
                return
            except APIError as e:
                if e.status != 409 or attempt == CONFLICT_ATTEMPTS - 1 or _is_field_manager_conflict(e):
                    raise
                log.info("write conflicted (%s); reading %s again", e.message, what)
                await asyncio.sleep(0.05 * 2**attempt)

    async def undo_rollout_manifest(self, request: dict[str, Any], out: Outcome) -> None:
        """`kubectl rollout undo`: the Deployment's template becomes the one of the ReplicaSet of
        that revision (by default the previous one), and the controller makes that the newest."""
        kind, namespace, name = await self._deployment(request, "undoing a rollout")
        revision = request.get("revision")
        back = request.get("numRevisionsBack")
        wanted = _integer(revision, "revision") if revision not in (None, "") else 0
        back_n = _integer(back, "numRevisionsBack", 1) if back not in (None, "") else 1
        what = describe(kind, name, namespace)
        for attempt in range(CONFLICT_ATTEMPTS):
            out.step = f"reading the revisions of {what}"
            deployment = await self.client.get(self._path(kind, namespace, name))
            if _marked(deployment, out.operation):
                # Rolled back by this very operation before (it was sent again): a second undo
                # would roll the rollback back.
                out.output["alreadyApplied"] = (
                    f"{what} was rolled back by this operation already (it was sent again); nothing was changed again"
                )
                out.record(kind, deployment)
                return
            spec = deployment.get("spec") or {}
            if spec.get("paused"):
                raise OperationFailed(
                    400, "BadRequest", f"cannot undo the rollout of {what} while it is paused; resume it first"
                )
            history = await self._revisions(namespace, deployment)
            if not history:
                raise OperationFailed(404, "NotFound", f"{what} has no rollout history")
            current = max(history)
            if wanted:
                if wanted not in history:
                    raise OperationFailed(
                        404,
                        "NotFound",
                        f"revision {wanted} of {what} not found; revisions kept: "
                        f"{', '.join(map(str, sorted(history)))}",
                    )
                target = wanted
            else:
                older = sorted((r for r in history if r < current), reverse=True)
                if len(older) < back_n:
                    raise OperationFailed(
                        404,
                        "NotFound",
                        f"{what} has no revision {back_n} back from revision "
                        f"{current}; revisions kept: {', '.join(map(str, sorted(history)))}",
                    )
                target = older[back_n - 1]
            template = _without_hash(((history[target].get("spec") or {}).get("template")) or {})
            out.output["revision"] = target
            if template == _without_hash(spec.get("template") or {}):
                out.output["skipped"] = f"the template of {what} already matches revision {target}"
                out.record(kind, deployment)
                return
            meta = deployment.get("metadata") or {}
            # As kubectl: the Deployment takes the ReplicaSet's annotations (change-cause...), but
            # keeps its own of those the controller and kubectl manage.
            annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k in UNDO_KEEPS}
            annotations |= {
                k: v
                for k, v in ((history[target].get("metadata") or {}).get("annotations") or {}).items()
                if k not in UNDO_KEEPS
            }
            if out.operation:
                annotations[OPERATIONS_ANNOTATION] = _operation_marks(deployment, out.operation)
            patch = [
                {"op": "replace", "path": "/metadata/resourceVersion", "value": meta.get("resourceVersion")},
                {"op": "replace", "path": "/spec/template", "value": template},
                {"op": "add", "path": "/metadata/annotations", "value": annotations},
            ]
            out.step = f"rolling {what} back to revision {target}"
            try:
                out.record(kind, await self._patch(kind, namespace, name, patch, PATCH_TYPES["json"]))
                return
            except APIError as e:
                if e.status != 409 or attempt == CONFLICT_ATTEMPTS - 1:
                    raise
                await asyncio.sleep(0.05 * 2**attempt)

    async def _revisions(self, namespace: str, deployment: dict[str, Any]) -> dict[int, dict[str, Any]]:
        """The Deployment's ReplicaSets by revision (those it controls, by owner uid)."""
        uid = (deployment.get("metadata") or {}).get("uid")
        match = ((deployment.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        listed = await self.client.get(
            f"/apis/apps/v1/namespaces/{namespace}/replicasets",
            params={"labelSelector": _selector(match)} if match else None,
        )
        out: dict[int, dict[str, Any]] = {}
        for rs in (listed or {}).get("items") or []:
            meta = rs.get("metadata") or {}
            if not any(o.get("uid") == uid and o.get("controller") for o in meta.get("ownerReferences") or []):
                continue
            try:
                out[int((meta.get("annotations") or {}).get(REVISION, ""))] = rs
            except ValueError:
                continue
        return out

    # ---- deletes ---------------------------------------------------------------------------------

    async def delete_manifest(self, request: dict[str, Any], out: Outcome) -> None:
        """Delete by name or by label selector, then wait until every object is gone."""
        options = request.get("options") or {}
        if not isinstance(options, dict):
            raise bad_request("options must be a JSON object (Kubernetes DeleteOptions)")
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        # kubectl's default, Background: left unset, the server would orphan the pods of Jobs and
        # ReplicationControllers (their kinds' legacy default).
        policy = options.get("propagationPolicy") or ("Orphan" if options.get("cascading") is False else "Background")
        if policy not in ("Background", "Foreground", "Orphan"):
            raise bad_request(f"options.propagationPolicy {policy!r} is not Background, Foreground or Orphan")
        body["propagationPolicy"] = policy
        if options.get("gracePeriodSeconds") is not None:
            body["gracePeriodSeconds"] = _integer(options["gracePeriodSeconds"], "options.gracePeriodSeconds")
        targets = await self._delete_targets(request)
        deleted: list[dict[str, str]] = []
        gone: list[dict[str, str]] = []
        out.output["deletedManifests"] = deleted  # filled as it goes: a failure still tells what went
        uids: dict[tuple[KindInfo, str, str], str] = {}
        for kind, namespace, name in targets:
            what = describe(kind, name, namespace)
            out.step = f"deleting {what}"
            try:
                answer = await self.client.request("DELETE", self._path(kind, namespace, name), body=body)
            except APIError as e:
                if e.status == 404:
                    gone.append(_ref(kind, namespace, name))
                    continue
                raise
            answer = answer if isinstance(answer, dict) else {}
            meta = answer.get("metadata") or {}
            # The deleted object, or (once it is gone) a Status whose details name its uid. An
            # object of the same name with another uid, later, is a new one (a recreated pod).
            uid = (
                str(meta.get("uid") or "")
                if answer.get("kind") != "Status"
                else str((answer.get("details") or {}).get("uid") or "")
            )
            uids[(kind, namespace, name)] = uid
            deleted.append(_ref(kind, namespace, name))
            out.touched.append(
                Touched(kind, namespace, name, str(meta.get("resourceVersion") or ""), deleted=True, uid=uid)
            )
        if gone:
            out.output["alreadyGone"] = gone
        for (kind, namespace, name), uid in uids.items():
            out.step = f"waiting for {describe(kind, name, namespace)} to be deleted"
            await self._wait(kind, namespace, name, _gone_or_replaced(uid))

    async def _delete_targets(self, request: dict[str, Any]) -> list[tuple[KindInfo, str, str]]:
        if request.get("manifestName"):
            return [await self._target(request)]
        selector = request.get("labelSelector")
        selectors = request.get("labelSelectors")
        if selector is None and isinstance(selectors, dict):
            selector = _clouddriver_selector(selectors.get("selectors"))
        selector = _text(selector, "manifestName or labelSelector")
        kind_refs = request.get("kinds")
        if not isinstance(kind_refs, list) or not kind_refs or not all(isinstance(k, str) for k in kind_refs):
            raise bad_request("kinds must be a non-empty list of kinds when deleting by labelSelector")
        namespace = _text(request.get("location"), "location", required=False) or "default"
        targets = []
        for ref in kind_refs:
            kind = await self.resources.for_reference(ref)
            listed = await self.client.get(kind.path(namespace), params={"labelSelector": selector})
            for item in (listed or {}).get("items") or []:
                meta = item.get("metadata") or {}
                targets.append((kind, meta.get("namespace") or "", meta.get("name") or ""))
        return targets

    async def _wait(
        self, kind: KindInfo, namespace: str, name: str, done: Callable[[dict[str, Any] | None], bool]
    ) -> dict[str, Any] | None:
        """Until `done(object or None)`: a read, then a watch of that one object from the read's
        version; a watch that ends (timeout, 410 Gone) starts over with a read. The caller's
        deadline bounds it."""
        path = kind.path(namespace or None)
        pause = 0.0
        while True:
            if pause:
                await asyncio.sleep(pause)  # a watch that keeps ending at once must not spin
            pause = min(max(pause * 2, 0.1), 2.0)
            try:
                obj = await self.client.get(f"{path}/{name}")
            except APIError as e:
                if e.status != 404:
                    raise
                obj = None
            if done(obj):
                return obj
            assert obj is not None
            params = {
                "watch": "1",
                "fieldSelector": f"metadata.name={name}",
                "allowWatchBookmarks": "true",
                "resourceVersion": str((obj.get("metadata") or {}).get("resourceVersion") or ""),
                "timeoutSeconds": "300",
            }
            async with self.client.stream("GET", path, params=params) as resp:
                pending = b""
                try:
                    async for chunk in resp.content.iter_any():
                        *lines, pending = (pending + chunk).split(b"\n")
                        for line in lines:
                            try:
                                event = orjson.loads(line) if line.strip() else None
                            except orjson.JSONDecodeError:
                                event = None
                            if not isinstance(event, dict):
                                continue
                            pause = 0.0
                            kind_of = event.get("type")
                            if kind_of == "ERROR":
                                break
                            if kind_of in ("ADDED", "MODIFIED", "DELETED"):
                                current = None if kind_of == "DELETED" else event.get("object")
                                if done(current):
                                    return current
                        else:
                            continue
                        break
                except (aiohttp.ClientError, OSError) as e:
                    raise ConnectionFailed(describe_connection_error(self.client.server, e)) from e

    # ---- jobs and logs ---------------------------------------------------------------------------

    async def run_job(self, request: dict[str, Any], out: Outcome) -> None:
        """Create the Job, wait until it completes or fails, and report its pods' logs."""
        manifest = request.get("manifest")
        if not isinstance(manifest, dict):
            raise bad_request("manifest must be a Job object")
        kind = await self.resources.for_manifest(manifest.get("apiVersion"), manifest.get("kind"))
        if (kind.group, kind.kind) != ("batch", "Job"):
            raise bad_request(f"runJob runs a batch Job, not {kind.kind}")
        if not isinstance(manifest.get("metadata") or {}, dict):
            raise bad_request("the Job's metadata must be an object")
        meta = dict(manifest.get("metadata") or {})
        if not meta.get("name") and not meta.get("generateName"):
            raise bad_request("the Job needs metadata.name or metadata.generateName")
        for key in ("name", "generateName"):
            if meta.get(key) is not None and not isinstance(meta[key], str):
                raise bad_request(f"the Job's metadata.{key} must be a string, not {type(meta[key]).__name__}")
        if not isinstance(meta.get("annotations") or {}, dict):
            raise bad_request("the Job's metadata.annotations must be an object of strings")
        namespace = (
            _text(request.get("namespaceOverride") or request.get("namespace"), "namespace", required=False)
            or meta.get("namespace")
            or "default"
        )
        meta["namespace"] = namespace
        out.step = f"creating job {meta.get('name') or meta['generateName'] + '...'} in namespace {namespace}"
        created = await self._create_job(kind, namespace, manifest, meta, out.operation)
        name = created["metadata"]["name"]
        out.record(kind, created)
        if request.get("waitForCompletion", True) is False:
            return
        out.step = f"waiting for job {name} in namespace {namespace} to complete"
        try:
            async with asyncio.timeout_at(_before(out.deadline)):
                job = await self._wait(kind, namespace, name, lambda obj: obj is None or _job_finished(obj) is not None)
        except TimeoutError:
            raise await self._job_timed_out(kind, namespace, created, out) from None
        if job is None:
            raise OperationFailed(410, "Gone", f"job {name} in namespace {namespace} was deleted before it completed")
        out.record(kind, job)
        out.objects = [job]  # one object, at its last state
        out.touched = out.touched[-1:]
        outcome, reason = _job_finished(job) or ("", "")
        status = job.get("status") or {}
        out.output["jobStatus"] = {
            "name": name,
            "namespace": namespace,
            "status": outcome,
            "succeeded": status.get("succeeded", 0),
            "failed": status.get("failed", 0),
            "completionTime": status.get("completionTime"),
        }
        out.step = f"reading the logs of job {name}"
        out.output["logs"] = await self._job_logs(namespace, job)
        if outcome == "failed":
            raise OperationFailed(500, "JobFailed", f"job {name} in namespace {namespace} failed: {reason}")

    async def _create_job(
        self, kind: KindInfo, namespace: str, manifest: dict[str, Any], meta: dict[str, Any], op_id: str
    ) -> dict[str, Any]:
        """Create the Job once per operation id, whichever agent runs it and however often: the
        Job carries the id, and a `generateName` is completed from the id rather than by the API
        server, so that a second create meets the first Job and follows it. A name taken by a Job
        of another operation moves a generated name on; a name given in full stays refused."""
        params = {"fieldManager": DEFAULT_FIELD_MANAGER, "fieldValidation": "Strict"}
        if not op_id:
            return await self.client.request(
                "POST", kind.path(namespace), body={**manifest, "metadata": meta}, params=params
            )
        prefix = None if meta.get("name") else str(meta["generateName"])
        meta["annotations"] = {**(meta.get("annotations") or {}), OPERATIONS_ANNOTATION: op_id}
        for attempt in range(CONFLICT_ATTEMPTS):
            if prefix is not None:
                meta.pop("generateName", None)
                meta["name"] = generated_name(prefix, op_id, attempt)
            try:
                return await self.client.request(
                    "POST", kind.path(namespace), body={**manifest, "metadata": meta}, params=params
                )
            except APIError as e:
                if e.status != 409:
                    raise
                try:
                    existing = await self.client.get(self._path(kind, namespace, meta["name"]))
                except APIError as read:
                    if read.status == 404:  # deleted meanwhile: create it again
                        continue
                    raise
                if _marked(existing, op_id):
                    log.info(
                        "operation %s: job %s exists already, created by this operation; following it",
                        op_id,
                        meta["name"],
                    )
                    return existing
                if prefix is None or attempt == CONFLICT_ATTEMPTS - 1:
                    raise
        raise OperationFailed(
            409,
            "Conflict",
            f"job {meta['name']} in namespace {namespace} was reported to exist, then not found, "
            f"{CONFLICT_ATTEMPTS} times in a row (something deletes it as it is created); nothing was applied",
        )

    async def _job_timed_out(
        self, kind: KindInfo, namespace: str, created: dict[str, Any], out: Outcome
    ) -> OperationFailed:
        """The failure of a Job still running at the deadline: what each of its pods is doing, read
        in the time kept before the deadline (on a cluster with no node or no scheduler for them,
        "Pending" alone would not say why). The Job is kept, as Clouddriver keeps it: the user can
        inspect it, or let it finish. Reads that fail are said, never in place of the timeout."""
        name = created["metadata"]["name"]
        where = f"job {name} in namespace {namespace}"
        out.step = f"reading the pods of {where}"
        job = created
        try:
            job = await self.client.get(self._path(kind, namespace, name)) or created
        except KubeError:
            pass  # the state at creation still names the pods' selector
        status = job.get("status") or {}
        report: dict[str, Any] = {
            "name": name,
            "namespace": namespace,
            "status": "running",
            "active": status.get("active", 0),
            "succeeded": status.get("succeeded", 0),
            "failed": status.get("failed", 0),
        }
        out.output["jobStatus"] = report
        try:
            pods = await self._job_pods(namespace, job)
        except KubeError as e:
            doing = f"its pods could not be read ({e})"
        else:
            pods.sort(
                key=lambda p: (
                    str((p.get("metadata") or {}).get("creationTimestamp") or ""),
                    str((p.get("metadata") or {}).get("name") or ""),
                )
            )
            states = [_pod_state(p) for p in pods]
            report["pods"] = states[:MAX_REPORTED_PODS]
            shown = states[:MAX_PODS_IN_MESSAGE]
            if len(states) > len(shown):
                shown.append(f"and {len(states) - len(shown)} more pod(s) (see jobStatus.pods)")
            doing = (
                "; ".join(shown)
                if states
                else (
                    "it has created no pod: it is suspended (spec.suspend)"
                    if (job.get("spec") or {}).get("suspend")
                    else "it has created no pod yet"
                )
            )
        return OperationFailed(
            504,
            "Timeout",
            f"{where} did not complete before the operation's deadline: {doing}. "
            f"The Job {namespace}/{name} was left in place; delete it with a "
            f"deleteManifest of 'job {name}'",
        )

    async def _job_pods(self, namespace: str, job: dict[str, Any]) -> list[dict[str, Any]]:
        match = ((job.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        selector = _selector(match) if match else f"job-name={job['metadata']['name']}"
        pods = await self.client.get(f"/api/v1/namespaces/{namespace}/pods", params={"labelSelector": selector})
        return [p for p in (pods or {}).get("items") or [] if isinstance(p, dict)]

    async def _job_logs(self, namespace: str, job: dict[str, Any]) -> dict[str, dict[str, str]]:
        logs: dict[str, dict[str, str]] = {}
        for pod in await self._job_pods(namespace, job):
            pod_name = (pod.get("metadata") or {}).get("name", "")
            for c in (pod.get("spec") or {}).get("containers") or []:
                try:
                    text = await self.pod_log(namespace, pod_name, c.get("name", ""))
                except APIError as e:  # a pod not started, or already collected: the others still count
                    text = f"(log unavailable: {e})"
                logs.setdefault(pod_name, {})[c.get("name", "")] = text
        return logs

    async def pod_log(self, namespace: str, pod: str, container: str = "", tail_lines: int | None = None) -> str:
        """The log's last MAX_LOG_BYTES at most (the end is what says how a job ended)."""
        params = {}
        if container:
            params["container"] = container
        if tail_lines is not None:
            params["tailLines"] = str(tail_lines)
        kept = bytearray()
        async with self.client.stream(
            "GET", f"/api/v1/namespaces/{namespace}/pods/{pod}/log", params=params, accept="text/plain, */*", timeout=60
        ) as resp:
            try:
                async for chunk in resp.content.iter_any():
                    kept += chunk
                    if len(kept) > 2 * MAX_LOG_BYTES:
                        del kept[:-MAX_LOG_BYTES]
            except (aiohttp.ClientError, OSError) as e:
                raise ConnectionFailed(describe_connection_error(self.client.server, e)) from e
        return bytes(kept[-MAX_LOG_BYTES:]).decode(errors="replace")

    async def pod_logs(self, request: dict[str, Any], out: Outcome) -> None:
        """Read-only: one pod's log (one container's, when several)."""
        namespace = _text(request.get("namespace"), "namespace", required=False) or "default"
        pod = _text(request.get("name"), "name")
        container = _text(request.get("container"), "container", required=False)
        tail = request.get("tailLines")
        out.step = f"reading the log of pod {pod} in namespace {namespace}"
        out.output["log"] = await self.pod_log(
            namespace, pod, container, _integer(tail, "tailLines") if tail not in (None, "") else None
        )

    async def get_manifest(self, request: dict[str, Any], out: Outcome) -> None:
        """Read-only: the live object (what a forced cache refresh waits for), or that there is none."""
        kind, namespace, name = await self._target(request)
        out.step = f"reading {describe(kind, name, namespace)}"
        try:
            obj = await self.client.get(self._path(kind, namespace, name))
        except APIError as e:
            if e.status != 404:
                raise
            out.output["found"] = False
            out.touched.append(Touched(kind, namespace, name, "", deleted=True))
            return
        out.output["found"] = True
        out.record(kind, obj)


def generated_name(prefix: str, op_id: str, attempt: int = 0) -> str:
    """The name the API server could have generated from `prefix` (its length and alphabet), but
    derived from the operation's id: the same for every agent that runs the operation."""
    digest = hashlib.sha256(f"{op_id}/{attempt}".encode()).digest()
    suffix = "".join(GENERATED_ALPHABET[b % len(GENERATED_ALPHABET)] for b in digest[:5])
    return prefix[:GENERATED_PREFIX_MAX] + suffix


def _operation_ids(obj: dict[str, Any]) -> list[str]:
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(OPERATIONS_ANNOTATION)
    return [i for i in str(value or "").split(",") if i]


def _marked(obj: dict[str, Any], op_id: str) -> bool:
    """Whether `op_id` changed (or created) the object: its id is in OPERATIONS_ANNOTATION."""
    return bool(op_id) and op_id in _operation_ids(obj)


def _operation_marks(obj: dict[str, Any], op_id: str) -> str:
    """OPERATIONS_ANNOTATION's value with `op_id` added last (the oldest ids go beyond the limit)."""
    ids = [i for i in _operation_ids(obj) if i != op_id] + [op_id]
    return ",".join(ids[-REMEMBERED_OPERATION_IDS:])


def _mark_operation(obj: dict[str, Any], op_id: str) -> dict[str, Any]:
    """The JSON patch operation that leaves `op_id` in the object's annotations."""
    value = _operation_marks(obj, op_id)
    if isinstance((obj.get("metadata") or {}).get("annotations"), dict):
        return {
            "op": "add",
            "path": "/metadata/annotations/" + OPERATIONS_ANNOTATION.replace("/", "~1"),
            "value": value,
        }
    return {"op": "add", "path": "/metadata/annotations", "value": {OPERATIONS_ANNOTATION: value}}


def _ref(kind: KindInfo, namespace: str, name: str) -> dict[str, str]:
    return {"apiVersion": kind.api_version, "kind": kind.kind, "namespace": namespace, "name": name}


def _crd_kinds(crd: dict[str, Any]) -> list[tuple[str, str]]:
    """(apiVersion, kind) of every version a CRD serves."""
    spec = crd.get("spec")
    if not isinstance(spec, dict) or not isinstance(spec.get("names"), dict):
        return []
    group, kind = spec.get("group"), spec["names"].get("kind")
    versions = [v.get("name") for v in spec.get("versions") or [] if isinstance(v, dict)]
    return [(f"{group}/{v}", kind) for v in versions if group and kind and v]


def _gone_or_replaced(uid: str) -> Callable[[dict[str, Any] | None], bool]:
    """Whether a delete is done: the object is gone, or one of the same name with another uid is there."""
    return lambda obj: obj is None or _uid(obj) != uid


def _uid(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def _without_hash(template: dict[str, Any]) -> dict[str, Any]:
    meta = dict(template.get("metadata") or {})
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k != "pod-template-hash"}
    if labels:
        meta["labels"] = labels
    else:
        meta.pop("labels", None)
    return {**template, "metadata": meta}


def _before(deadline: float | None) -> float | None:
    """A moment before the deadline, kept to say what the operation was waiting for."""
    if deadline is None:
        return None
    left = deadline - asyncio.get_running_loop().time()
    return deadline - min(2.0, max(0.2, left * 0.1))


def _pod_state(pod: dict[str, Any]) -> str:
    """What a pod is doing, as `kubectl describe` would tell: its phase and why it is stuck."""
    name = (pod.get("metadata") or {}).get("name", "")
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    why = []
    if status.get("reason"):  # the pod's own verdict: Evicted, DeadlineExceeded, NodeLost...
        why.append(str(status["reason"]) + (f": {status['message']}" if status.get("message") else ""))
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        why.append("being deleted")
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
    for c in conditions:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            why.append(
                f"not scheduled: {c.get('reason') or 'Unschedulable'}"
                + (f": {c['message']}" if c.get("message") else "")
            )
    if (
        phase == "Pending"
        and not (pod.get("spec") or {}).get("nodeName")
        and not any(c.get("type") == "PodScheduled" for c in conditions)
    ):
        why.append("no node assigned yet: no scheduler has placed it (is one running, and is any node ready?)")
    for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        state = (cs.get("state") or {}) if isinstance(cs, dict) else {}
        if state.get("waiting"):
            w = state["waiting"]
            why.append(
                f"container {cs.get('name')} waiting: {w.get('reason') or 'unknown reason'}"
                + (f": {w['message']}" if w.get("message") else "")
            )
        elif (state.get("terminated") or {}).get("exitCode"):
            t = state["terminated"]
            why.append(
                f"container {cs.get('name')} exited with {t.get('exitCode')}"
                + (f" ({t['reason']})" if t.get("reason") else "")
            )
    return f"pod {name} {phase}" + (f" ({'; '.join(why)})" if why else "")


def _job_finished(job: dict[str, Any]) -> tuple[str, str] | None:
    """("succeeded"|"failed", reason) once the Job has a Complete or Failed condition."""
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("status") == "True" and c.get("type") == "Complete":
            return "succeeded", ""
        if c.get("status") == "True" and c.get("type") == "Failed":
            return "failed", str(c.get("message") or c.get("reason") or "the Job failed")
    return None


def _clouddriver_selector(selectors: Any) -> str | None:
    """Clouddriver's KubernetesSelectorList (`[{"kind": "EQUALS", "key": "app", "values": ["x"]}]`)
    as a label selector string."""
    if not isinstance(selectors, list):
        return None
    parts = []
    for s in selectors:
        if not isinstance(s, dict):
            raise bad_request("labelSelectors.selectors must be a list of objects")
        key, values, op = s.get("key"), [str(v) for v in s.get("values") or []], s.get("kind")
        if op == "EQUALS" and len(values) == 1:
            parts.append(f"{key}={values[0]}")
        elif op == "NOT_EQUALS" and len(values) == 1:
            parts.append(f"{key}!={values[0]}")
        elif op == "CONTAINS":
            parts.append(f"{key} in ({','.join(values)})")
        elif op == "NOT_CONTAINS":
            parts.append(f"{key} notin ({','.join(values)})")
        elif op == "EXISTS":
            parts.append(str(key))
        elif op == "NOT_EXISTS":
            parts.append(f"!{key}")
        else:
            raise bad_request(f"label selector kind {op!r} with {len(values)} value(s) is not understood")
    return ",".join(parts)


OPERATIONS: dict[str, Callable[[ClusterOperations, dict[str, Any], Outcome], Awaitable[None]]] = {
    "deployManifest": ClusterOperations.deploy_manifest,
    "deleteManifest": ClusterOperations.delete_manifest,
    "patchManifest": ClusterOperations.patch_manifest,
    "scaleManifest": ClusterOperations.scale_manifest,
    "undoRolloutManifest": ClusterOperations.undo_rollout_manifest,
    "pauseRolloutManifest": ClusterOperations.pause_rollout_manifest,
    "resumeRolloutManifest": ClusterOperations.resume_rollout_manifest,
    "rollingRestartManifest": ClusterOperations.rolling_restart_manifest,
    "runJob": ClusterOperations.run_job,
    "podLogs": ClusterOperations.pod_logs,
    "getManifest": ClusterOperations.get_manifest,
}
"""Every operation type an agent runs, by Clouddriver's name (podLogs and getManifest read only)."""
