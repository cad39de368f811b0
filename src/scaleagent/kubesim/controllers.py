"""Controller behaviour that makes a simulated cluster look alive to watchers and deployers.

Controllers react to store changes like informers do, but run their reconciles on the event loop
after the write that triggered them (never inside it), so a client first sees its own write and
then the status and dependents the controllers produce, in the order a real cluster shows them.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
from typing import Any

import orjson

from .cluster import Cluster, now_rfc3339
from .errors import StatusError
from .resources import ResourceType
from .store import ADDED, DELETED, Event

log = logging.getLogger("scaleagent.kubesim.controllers")

REVISION = "deployment.kubernetes.io/revision"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
MANAGER = "kube-controller-manager"
# Pods a ReplicaSet reconcile creates or deletes before it requeues itself: reconciles run on the
# event loop, and scaling to thousands of replicas in one go would stall every client for seconds.
POD_BATCH = 100


def template_hash(template: dict[str, Any]) -> str:
    """A stable pod-template-hash (Kubernetes uses an FNV hash; any stable, short hash serves)."""
    t = {**template, "metadata": {**(template.get("metadata") or {})}}
    labels = {k: v for k, v in (t["metadata"].get("labels") or {}).items() if k != "pod-template-hash"}
    t["metadata"]["labels"] = labels
    digest = hashlib.sha256(orjson.dumps(t, option=orjson.OPT_SORT_KEYS)).hexdigest()
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    n = int(digest[:16], 16)
    out = ""
    for _ in range(10):
        n, r = divmod(n, len(alphabet))
        out += alphabet[r]
    return out


def _max_surge(spec: dict[str, Any], replicas: int) -> int:
    """The Deployment's maxSurge as a number of pods (a percentage rounds up; Recreate: none)."""
    strategy = spec.get("strategy") or {}
    if strategy.get("type", "RollingUpdate") != "RollingUpdate":
        return 0
    surge = (strategy.get("rollingUpdate") or {}).get("maxSurge", "25%")
    if isinstance(surge, str) and surge.endswith("%"):
        try:
            return math.ceil(replicas * int(surge[:-1]) / 100)
        except ValueError:
            return 0
    return int(surge) if isinstance(surge, int) else 0


def _owner_ref(obj: dict[str, Any], *, controller: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": controller,
        "blockOwnerDeletion": True,
    }


# The one node kubesim pretends to have (there is no Node object): every pod that can be placed
# runs there. Its labels are what a nodeSelector or a required node affinity is matched against.
NODE_NAME = "kubesim-node"
NODE_LABELS = {
    "kubernetes.io/hostname": NODE_NAME,
    "kubernetes.io/os": "linux",
    "kubernetes.io/arch": "amd64",
    "beta.kubernetes.io/os": "linux",
    "beta.kubernetes.io/arch": "amd64",
}
# kube-scheduler's FitError for one node that does not fit, followed by DefaultPreemption's verdict
# (pkg/scheduler/framework/types.go, plugins/nodeaffinity: ErrReasonPod).
UNSCHEDULABLE = (
    "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. "
    "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
)
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
# What the root CA publisher (1.22+) annotates its ConfigMap with.
ROOT_CA_DESCRIPTION = (
    "Contains a CA bundle that can be used to verify the kube-apiserver when using internal "
    "endpoints such as the internal service IP or kubernetes.default.svc. No other usage is "
    "guaranteed across distributions of Kubernetes clusters."
)


def unschedulable(spec: dict[str, Any]) -> str:
    """Why the scheduler leaves a pod of this spec Pending ("" if it binds it to kubesim-node).

    A nodeSelector or a required node affinity that kubesim-node's labels (NODE_LABELS) do not
    satisfy leaves the pod Pending and unschedulable, as on a real cluster where no node matches:
    the way for a test to make a Job or a rollout hang. A pod that names its node skips the
    scheduler altogether (see _pod).
    """
    if spec.get("nodeName"):
        return ""
    selector = spec.get("nodeSelector") or {}
    if any(NODE_LABELS.get(k) != v for k, v in selector.items()):
        return UNSCHEDULABLE
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required is not None and not any(_term_matches(t) for t in required.get("nodeSelectorTerms") or []):
        return UNSCHEDULABLE
    return ""


def _term_matches(term: dict[str, Any]) -> bool:
    """One nodeSelectorTerm against kubesim-node (its requirements ANDed; an empty term matches nothing)."""
    exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not exprs and not fields:
        return False
    return all(_requirement(e, NODE_LABELS) for e in exprs) and all(
        _requirement(f, {"metadata.name": NODE_NAME}) for f in fields
    )


def _requirement(req: dict[str, Any], labels: dict[str, str]) -> bool:
    key, op, values = req.get("key", ""), req.get("operator", ""), req.get("values") or []
    have = labels.get(key)
    if op == "In":
        return have in values
    if op == "NotIn":
        return have not in values
    if op == "Exists":
        return have is not None
    if op == "DoesNotExist":
        return have is None
    if op in ("Gt", "Lt") and have is not None and values:
        try:
            return int(have) > int(values[0]) if op == "Gt" else int(have) < int(values[0])
        except ValueError:
            return False
    return False


def _owned_by(obj: dict[str, Any], owner_uid: str) -> bool:
    return any(o.get("uid") == owner_uid and o.get("controller") for o in obj["metadata"].get("ownerReferences") or [])


class Controllers:
    """Namespace lifecycle, garbage collection, Deployment → ReplicaSet → Pod, Job → Pod, and what
    every namespace of a real cluster holds: the `default` ServiceAccount and the
    `kube-root-ca.crt` ConfigMap (the controller-manager's root CA publisher)."""

    def __init__(self, cluster: Cluster, root_ca: str = "") -> None:
        self.c = cluster
        self.root_ca = root_ca
        self._queue: asyncio.Queue[tuple[str, ...]] = asyncio.Queue()
        self._pending: set[tuple[str, ...]] = set()
        self._task: asyncio.Task[None] | None = None
        cluster.store.listen(self._on_change)
        self._rt = {
            "deployments": cluster.rt("apps", "v1", "deployments"),
            "replicasets": cluster.rt("apps", "v1", "replicasets"),
            "pods": cluster.rt("", "v1", "pods"),
            "namespaces": cluster.rt("", "v1", "namespaces"),
            "jobs": cluster.rt("batch", "v1", "jobs"),
            "configmaps": cluster.rt("", "v1", "configmaps"),
            "serviceaccounts": cluster.rt("", "v1", "serviceaccounts"),
        }

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())
        for ns in self.c.store.items("/namespaces"):
            self._enqueue("namespace-content", "", ns["metadata"]["name"])

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def idle(self) -> None:
        """Wait until every queued reconcile has run (for the churn generator and tests)."""
        await self._queue.join()

    def _enqueue(self, *key: str) -> None:
        if key not in self._pending:
            self._pending.add(key)
            self._queue.put_nowait(key)

    def _on_change(self, resource: str, ev: Event) -> None:
        meta = ev.obj.get("metadata", {})
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        if resource == "apps/deployments":
            self._enqueue("deployment", ns, name)
        elif resource == "apps/replicasets":
            self._enqueue("replicaset", ns, name)
            for o in meta.get("ownerReferences") or []:
                if o.get("kind") == "Deployment":
                    self._enqueue("deployment", ns, o["name"])
        elif resource == "/pods":
            if ev.type == ADDED:
                self._enqueue("pod", ns, name)
            for o in meta.get("ownerReferences") or []:
                if o.get("kind") == "ReplicaSet":
                    self._enqueue("replicaset", ns, o["name"])
                elif o.get("kind") == "Job":
                    self._enqueue("job", ns, o["name"])
        elif resource == "batch/jobs":
            self._enqueue("job", ns, name)
        if resource == "/namespaces" and meta.get("deletionTimestamp"):
            self._enqueue("namespace", "", name)
        elif resource == "/namespaces" and ev.type != DELETED:
            self._enqueue("namespace-content", "", name)
        elif ((resource, name) == ("/serviceaccounts", "default") and ev.type == DELETED) or (
            (resource, name) == ("/configmaps", ROOT_CA_CONFIGMAP)
        ):
            self._enqueue("namespace-content", "", ns)  # recreated or set right, as the controllers do
        if ev.type == DELETED:
            self._requeue_terminating_owners(meta)
            if ns and (self.c.store.get("/namespaces", "", ns) or {}).get("metadata", {}).get("deletionTimestamp"):
                self._enqueue("namespace", "", ns)  # its last held object may just have gone
        if ev.type == DELETED or meta.get("deletionTimestamp"):
            uid = meta.get("uid", "")
            if self.c.store.dependents(uid) or {"orphan", "foregroundDeletion"} & set(meta.get("finalizers") or ()):
                self._enqueue("gc", resource, ns, name, uid)

    def _requeue_terminating_owners(self, meta: dict[str, Any]) -> None:
        """A dependent is gone: an owner waiting in foreground deletion may now be finished."""
        for ref in meta.get("ownerReferences") or ():
            found = self._owner(meta, ref)
            if found is not None and found[1]["metadata"].get("deletionTimestamp"):
                rt, owner = found
                self._enqueue(
                    "gc", rt.storage_key, owner["metadata"].get("namespace", ""), ref["name"], owner["metadata"]["uid"]
                )

    def _owner(self, meta: dict[str, Any], ref: dict[str, Any]) -> tuple[ResourceType, dict[str, Any]] | None:
        """The stored object an ownerReference of `meta` names (same uid), with its type; None if gone."""
        group = ref.get("apiVersion", "").rpartition("/")[0]
        for rt in self.c.registry.by_kind(group, ref.get("kind", ""))[:1]:
            ns = meta.get("namespace", "") if rt.namespaced else ""
            owner = self.c.store.get(rt.storage_key, ns, ref.get("name", ""))
            if owner is not None and owner["metadata"].get("uid") == ref.get("uid"):
                return rt, owner
        return None

    def _solid(self, meta: dict[str, Any], ref: dict[str, Any]) -> bool:
        """An owner that still holds its dependents: it exists and is not being deleted in the foreground."""
        found = self._owner(meta, ref)
        if found is None:
            return False
        owner_meta = found[1]["metadata"]
        return not (
            owner_meta.get("deletionTimestamp") and "foregroundDeletion" in (owner_meta.get("finalizers") or ())
        )

    async def _run(self) -> None:
        while True:
            key = await self._queue.get()
            self._pending.discard(key)
            try:
                kind, a, b = key[0], key[1], key[2]
                if kind == "gc":
                    self._collect(key[1], key[2], key[3], key[4])
                elif kind == "namespace":
                    self._finalize_namespace(b)
                elif kind == "namespace-content":
                    self._namespace_content(b)
                elif kind == "deployment":
                    self._deployment(a, b)
                elif kind == "replicaset":
                    self._replicaset(a, b)
                elif kind == "job":
                    self._job(a, b)
                elif kind == "pod":
                    self._pod(a, b)
            except StatusError as e:
                # Conflicts and races with clients are normal: the next change requeues the object.
                log.debug("reconcile %s: %s", key, e.message)
            except Exception:
                log.exception("controller failed on %s", key)
            finally:
                self._queue.task_done()
            await asyncio.sleep(0)

    # -- garbage collector and namespace lifecycle ----------------------------------------------

    def _collect(self, resource: str, ns: str, name: str, uid: str) -> None:
        owner = self.c.store.get(resource, ns, name)
        if owner is not None and owner["metadata"].get("uid") != uid:
            owner = None
        finalizers = (owner or {}).get("metadata", {}).get("finalizers") or []
        dependents = self.c.store.dependents(uid)
        if owner is not None and "orphan" in finalizers:
            for res, dep in dependents:
                refs = [r for r in dep["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
                self._put(res, {**dep, "metadata": {**dep["metadata"], "ownerReferences": refs}})
            self._drop_finalizer(resource, owner, "orphan")
            return
        if owner is not None and "foregroundDeletion" not in finalizers:
            return  # still alive, or held by someone else's finalizer
        for res, dep in dependents:
            if dep["metadata"].get("deletionTimestamp"):
                continue
            refs = dep["metadata"].get("ownerReferences") or []
            solid = [r for r in refs if self._solid(dep["metadata"], r)]
            if solid:
                # Collected only when all its owners are gone; meanwhile it just loses the dangling references.
                self._put(res, {**dep, "metadata": {**dep["metadata"], "ownerReferences": solid}})
                continue
            rt = self._type_of(res, dep)
            if rt is not None:
                self._delete(rt, dep, "Foreground" if owner is not None else "Background")
        if owner is not None and not self.c.store.dependents(uid):
            self._drop_finalizer(resource, owner, "foregroundDeletion")

    def _namespace_content(self, name: str) -> None:
        """The service account controller's `default` ServiceAccount (without the token Secret the
        1.20 tokens controller adds: 1.24+ has none) and the root CA publisher's ConfigMap, which it
        also sets back when someone edits it."""
        ns = self.c.store.get("/namespaces", "", name)
        if ns is None or ns["metadata"].get("deletionTimestamp"):
            return
        if self.c.store.get("/serviceaccounts", name, "default") is None:
            self.c.create(
                self._rt["serviceaccounts"],
                name,
                {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}},
                manager=MANAGER,
            )
        if not self.root_ca:
            return
        cm = self.c.store.get("/configmaps", name, ROOT_CA_CONFIGMAP)
        data = {"ca.crt": self.root_ca}
        if cm is None:
            self.c.create(
                self._rt["configmaps"],
                name,
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {
                        "name": ROOT_CA_CONFIGMAP,
                        "annotations": {"kubernetes.io/description": ROOT_CA_DESCRIPTION},
                    },
                    "data": data,
                },
                manager=MANAGER,
            )
        elif cm.get("data") != data or not (cm["metadata"].get("annotations") or {}).get("kubernetes.io/description"):
            annotations = {
                **(cm["metadata"].get("annotations") or {}),
                "kubernetes.io/description": ROOT_CA_DESCRIPTION,
            }
            self.c.update(
                self._rt["configmaps"],
                name,
                ROOT_CA_CONFIGMAP,
                {**cm, "metadata": {**cm["metadata"], "annotations": annotations}, "data": data},
                manager=MANAGER,
            )

    def _finalize_namespace(self, name: str) -> None:
        ns = self.c.store.get("/namespaces", "", name)
        if ns is None or not ns["metadata"].get("deletionTimestamp"):
            return
        remaining = 0
        for rt in self.c.registry.types:
            if (
                not rt.namespaced
                or "delete" not in rt.verbs
                or (rt.custom and rt != self.c.registry.custom_types(rt.group, rt.plural)[0])
            ):
                continue
            for obj in list(self.c.store.items(rt.storage_key, name)):
                remaining += 1
                if not obj["metadata"].get("deletionTimestamp"):
                    self._delete(rt, obj, "Background")
        if remaining and any(
            True for rt in self.c.registry.types if rt.namespaced for _ in self.c.store.items(rt.storage_key, name)
        ):
            return  # finalizers elsewhere still hold objects; their deletion requeues us
        new = {**ns, "spec": {**ns.get("spec", {}), "finalizers": []}}
        self.c.update(self._rt["namespaces"], "", name, new, subresource="finalize", manager=MANAGER)

    def _type_of(self, resource: str, obj: dict[str, Any]) -> ResourceType | None:
        group, _, version = obj.get("apiVersion", "").rpartition("/")
        for rt in self.c.registry.types:
            if rt.storage_key == resource and rt.version == version:
                return rt
        return None

    def _delete(self, rt: ResourceType, obj: dict[str, Any], propagation: str) -> None:
        try:
            self.c.delete(rt, obj["metadata"].get("namespace", ""), obj["metadata"]["name"], propagation=propagation)
        except StatusError:
            pass

    def _drop_finalizer(self, resource: str, obj: dict[str, Any], finalizer: str) -> None:
        fin = [f for f in obj["metadata"].get("finalizers") or [] if f != finalizer]
        self._put(resource, {**obj, "metadata": {**obj["metadata"], "finalizers": fin}})

    def _put(self, resource: str, obj: dict[str, Any]) -> None:
        rt = self._type_of(resource, obj)
        if rt is not None:
            meta = obj["metadata"]
            self.c.update(rt, meta.get("namespace", ""), meta["name"], obj, manager=MANAGER)

    # -- workloads -----------------------------------------------------------------------------

    def _deployment(self, ns: str, name: str) -> None:
        d = self.c.store.get("apps/deployments", ns, name)
        if d is None or d["metadata"].get("deletionTimestamp"):
            return
        spec = d.get("spec") or {}
        template = spec.get("template") or {}
        owned = [rs for rs in self.c.store.items("apps/replicasets", ns) if _owned_by(rs, d["metadata"]["uid"])]
        h = template_hash(template)
        current = next((rs for rs in owned if rs["metadata"].get("labels", {}).get("pod-template-hash") == h), None)
        revisions = [int(rs["metadata"].get("annotations", {}).get(REVISION, "0")) for rs in owned]
        max_rev = max(revisions, default=0)
        replicas = int(spec.get("replicas", 1))
        rs_rt = self._rt["replicasets"]
        if spec.get("paused") and current is None:
            self._deployment_status(d, owned, None)
            return
        if current is None:
            labels = {**(template.get("metadata") or {}).get("labels", {}), "pod-template-hash": h}
            sel = spec.get("selector") or {}
            rs: dict[str, Any] = {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {
                    "name": f"{name}-{h}",
                    "namespace": ns,
                    "labels": labels,
                    "annotations": {
                        REVISION: str(max_rev + 1),
                        "deployment.kubernetes.io/desired-replicas": str(replicas),
                        MAX_REPLICAS: str(replicas + _max_surge(spec, replicas)),
                    },
                    "ownerReferences": [_owner_ref(d)],
                },
                "spec": {
                    "replicas": replicas,
                    "selector": {**sel, "matchLabels": {**sel.get("matchLabels", {}), "pod-template-hash": h}},
                    "template": {**template, "metadata": {**(template.get("metadata") or {}), "labels": labels}},
                },
            }
            current = self.c.create(rs_rt, ns, rs, manager=MANAGER)
        else:
            ann = current["metadata"].get("annotations", {})
            want = {
                **ann,
                "deployment.kubernetes.io/desired-replicas": str(replicas),
                MAX_REPLICAS: str(replicas + _max_surge(spec, replicas)),
            }
            if int(ann.get(REVISION, "0")) < max_rev:
                want[REVISION] = str(max_rev + 1)  # a rollback makes the old ReplicaSet the newest revision
            if current["spec"].get("replicas") != replicas or want != ann:
                current = self.c.update(
                    rs_rt,
                    ns,
                    current["metadata"]["name"],
                    {
                        **current,
                        "metadata": {**current["metadata"], "annotations": want},
                        "spec": {**current["spec"], "replicas": replicas},
                    },
                    manager=MANAGER,
                )
        if not spec.get("paused"):
            for rs in owned:
                if rs["metadata"]["uid"] != current["metadata"]["uid"] and rs["spec"].get("replicas", 0) != 0:
                    self.c.update(
                        rs_rt,
                        ns,
                        rs["metadata"]["name"],
                        {**rs, "spec": {**rs["spec"], "replicas": 0}},
                        manager=MANAGER,
                    )
            self._prune_history(d, owned, current)
        self._deployment_status(self.c.store.get("apps/deployments", ns, name) or d, owned, current)

    def _prune_history(self, d: dict[str, Any], owned: list[dict[str, Any]], current: dict[str, Any]) -> None:
        limit = int((d.get("spec") or {}).get("revisionHistoryLimit", 10))
        old = [
            rs
            for rs in owned
            if rs["metadata"]["uid"] != current["metadata"]["uid"]
            and rs["spec"].get("replicas", 0) == 0
            and (rs.get("status") or {}).get("replicas", 0) == 0
        ]
        old.sort(key=lambda rs: int(rs["metadata"].get("annotations", {}).get(REVISION, "0")))
        for rs in old[: max(0, len(old) - limit)]:
            self._delete(self._rt["replicasets"], rs, "Background")

    def _deployment_status(
        self, d: dict[str, Any], owned: list[dict[str, Any]], current: dict[str, Any] | None
    ) -> None:
        ns = d["metadata"]["namespace"]
        all_rs = [self.c.store.get("apps/replicasets", ns, rs["metadata"]["name"]) for rs in owned]
        if current is not None and all(
            rs is None or rs["metadata"]["uid"] != current["metadata"]["uid"] for rs in all_rs
        ):
            all_rs.append(current)
        live = [rs for rs in all_rs if rs is not None]
        st = lambda rs, k: int((rs.get("status") or {}).get(k, 0))  # noqa: E731
        cur = self.c.store.get("apps/replicasets", ns, current["metadata"]["name"]) if current else None
        replicas = int((d.get("spec") or {}).get("replicas", 1))
        status: dict[str, Any] = {
            "observedGeneration": d["metadata"].get("generation", 1),
            "replicas": sum(st(rs, "replicas") for rs in live),
            "updatedReplicas": st(cur, "replicas") if cur else 0,
            "readyReplicas": sum(st(rs, "readyReplicas") for rs in live),
            "availableReplicas": sum(st(rs, "availableReplicas") for rs in live),
        }
        status["unavailableReplicas"] = max(0, replicas - status["availableReplicas"])
        status = {k: v for k, v in status.items() if v or k == "observedGeneration"}
        old_status = d.get("status") or {}
        now = now_rfc3339()
        available = status.get("availableReplicas", 0) >= replicas
        complete = cur is not None and status.get("updatedReplicas", 0) == replicas and available
        paused = bool((d.get("spec") or {}).get("paused"))
        conds = {c["type"]: c for c in old_status.get("conditions") or []}
        want = [
            (
                "Available",
                "True" if available else "False",
                "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
                "Deployment has minimum availability."
                if available
                else "Deployment does not have minimum availability.",
            ),
            (
                "Progressing",
                "Unknown" if paused else "True",
                "DeploymentPaused" if paused else ("NewReplicaSetAvailable" if complete else "ReplicaSetUpdated"),
                "Deployment is paused"
                if paused
                else (
                    f'ReplicaSet "{cur["metadata"]["name"]}" has successfully progressed.'
                    if complete and cur
                    else f'ReplicaSet "{cur["metadata"]["name"] if cur else ""}" is progressing.'
                ),
            ),
        ]
        out = []
        for type_, s, reason, message in want:
            prev = conds.get(type_)
            same = prev and prev.get("status") == s and prev.get("reason") == reason
            out.append(
                {
                    "type": type_,
                    "status": s,
                    "lastUpdateTime": prev["lastUpdateTime"] if same and prev else now,
                    "lastTransitionTime": prev["lastTransitionTime"] if prev and prev.get("status") == s else now,
                    "reason": reason,
                    "message": message,
                }
            )
        status["conditions"] = out
        if {k: v for k, v in old_status.items()} != status:
            annotations = d["metadata"].get("annotations") or {}
            if cur is not None:
                annotations = {**annotations, REVISION: cur["metadata"].get("annotations", {}).get(REVISION, "1")}
            if annotations != (d["metadata"].get("annotations") or {}):
                d = self.c.update(
                    self._rt["deployments"],
                    ns,
                    d["metadata"]["name"],
                    {**d, "metadata": {**d["metadata"], "annotations": annotations}},
                    manager=MANAGER,
                )
            self.c.update(
                self._rt["deployments"],
                ns,
                d["metadata"]["name"],
                {**d, "status": status},
                subresource="status",
                manager=MANAGER,
            )

    def _replicaset(self, ns: str, name: str) -> None:
        rs = self.c.store.get("apps/replicasets", ns, name)
        if rs is None or rs["metadata"].get("deletionTimestamp"):
            return
        uid = rs["metadata"]["uid"]
        pods = [
            p
            for p in self.c.store.items("/pods", ns)
            if _owned_by(p, uid) and not p["metadata"].get("deletionTimestamp")
        ]
        want = int((rs.get("spec") or {}).get("replicas", 1))
        template = (rs.get("spec") or {}).get("template") or {}
        pods_rt = self._rt["pods"]
        for _ in range(min(want - len(pods), POD_BATCH)):
            pods.append(self._create_pod(rs, template, "Running"))
        for p in sorted(pods, key=lambda p: p["metadata"]["name"])[want:][:POD_BATCH]:
            self._delete(pods_rt, p, "Background")
            pods.remove(p)
        if len(pods) != want:
            self._enqueue("replicaset", ns, name)  # the rest after whatever else is waiting
        n = len(pods)
        ready = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running")
        status = {
            "replicas": n,
            "fullyLabeledReplicas": n,
            "readyReplicas": ready,
            "availableReplicas": ready,
            "observedGeneration": rs["metadata"].get("generation", 1),
        }
        status = {k: v for k, v in status.items() if v or k in ("replicas", "observedGeneration")}
        if (rs.get("status") or {}) != status:
            self.c.update(
                self._rt["replicasets"], ns, name, {**rs, "status": status}, subresource="status", manager=MANAGER
            )

    def _create_pod(self, owner: dict[str, Any], template: dict[str, Any], phase: str) -> dict[str, Any]:
        """Create a pod, then report its status as the scheduler (a pod no node fits stays Pending)
        or the kubelet would (creation resets status). A pod that fits is created bound to
        kubesim-node, in one step rather than a binding: the kubelet's status follows at once."""
        spec = template.get("spec") or {}
        why = unschedulable(spec)
        pod = self._pod_for(owner, template, bound=not why and not spec.get("nodeName"))
        created = self.c.create(self._rt["pods"], owner["metadata"]["namespace"], pod, manager=MANAGER)
        return self._place(created, phase, why)

    def _place(self, pod: dict[str, Any], phase: str, why: str) -> dict[str, Any]:
        """The status the scheduler (unschedulable) or the kubelet (running on kubesim-node) writes;
        a pod bound to another node is left as created: no kubelet there will ever report."""
        meta, spec = pod["metadata"], pod.get("spec") or {}
        status = pod.get("status") or {}
        if why:
            new_status, manager = _unschedulable_status(status, why), "kube-scheduler"
        elif spec.get("nodeName") == NODE_NAME:
            new_status, manager = _kubelet_status(status, spec, phase), "kubelet"
        else:
            return pod
        return self.c.update(
            self._rt["pods"],
            meta["namespace"],
            meta["name"],
            {**pod, "status": new_status},
            subresource="status",
            manager=manager,
        )

    def _pod(self, ns: str, name: str) -> None:
        """A pod a client created itself: scheduled to kubesim-node and run there, left Pending as
        unschedulable, or, bound to a node that is not kubesim's, left Pending as created."""
        pod = self.c.store.get("/pods", ns, name)
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return
        status = pod.get("status") or {}
        if status.get("conditions") or status.get("phase") not in (None, "Pending"):
            return  # placed already (controllers place their pods as they create them)
        spec = pod.get("spec") or {}
        why = unschedulable(spec)
        if not why and not spec.get("nodeName"):  # the scheduler's binding
            pod = self.c.update(
                self._rt["pods"], ns, name, {**pod, "spec": {**spec, "nodeName": NODE_NAME}}, manager="kube-scheduler"
            )
        self._place(pod, "Running", why)

    def _pod_for(self, owner: dict[str, Any], template: dict[str, Any], bound: bool) -> dict[str, Any]:
        template_meta = template.get("metadata") or {}
        meta: dict[str, Any] = {"generateName": owner["metadata"]["name"] + "-", "ownerReferences": [_owner_ref(owner)]}
        for key in ("labels", "annotations"):  # a real pod carries no empty maps
            if template_meta.get(key):
                meta[key] = dict(template_meta[key])
        spec = dict(template.get("spec") or {})
        if bound:
            spec["nodeName"] = NODE_NAME
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}

    def _job(self, ns: str, name: str) -> None:
        """A Job runs one pod to completion at once: pods here have no processes to wait for. A pod
        no node fits stays Pending, and so the Job stays active and never completes."""
        job = self.c.store.get("batch/jobs", ns, name)
        if job is None or job["metadata"].get("deletionTimestamp") or (job.get("spec") or {}).get("suspend"):
            return
        uid = job["metadata"]["uid"]
        pods = [p for p in self.c.store.items("/pods", ns) if _owned_by(p, uid)]
        template = (job.get("spec") or {}).get("template") or {}
        if not pods:  # labelled by the template, which the Job's creation gave its job-name and controller-uid
            pods = [self._create_pod(job, template, "Succeeded")]
        phases = [(p.get("status") or {}).get("phase") for p in pods]
        succeeded = phases.count("Succeeded")
        active = sum(1 for ph in phases if ph not in ("Succeeded", "Failed"))
        old = job.get("status") or {}
        now = now_rfc3339()
        status: dict[str, Any] = {
            "startTime": old.get("startTime", now),
            "active": active,
            "succeeded": succeeded,
            "ready": sum(1 for p in pods if _ready(p)),
            "terminating": 0,
            "uncountedTerminatedPods": {},
        }
        status = {
            k: v
            for k, v in status.items()
            if v or k in ("startTime", "ready", "terminating", "uncountedTerminatedPods")
        }
        completions = int((job.get("spec") or {}).get("completions", 1))
        if succeeded >= completions:
            status["completionTime"] = old.get("completionTime", now)
            status["conditions"] = old.get("conditions") or [
                {"type": "SuccessCriteriaMet", "status": "True", "lastProbeTime": now, "lastTransitionTime": now},
                {"type": "Complete", "status": "True", "lastProbeTime": now, "lastTransitionTime": now},
            ]
        if old == status:
            return
        self.c.update(self._rt["jobs"], ns, name, {**job, "status": status}, subresource="status", manager=MANAGER)


def _ready(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def _unschedulable_status(status: dict[str, Any], why: str) -> dict[str, Any]:
    """What kube-scheduler records on a pod it cannot place (handleSchedulingFailure)."""
    return {
        **status,
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "lastProbeTime": None,
                "lastTransitionTime": now_rfc3339(),
                "reason": "Unschedulable",
                "message": why,
            }
        ],
    }


def _kubelet_status(status: dict[str, Any], spec: dict[str, Any], phase: str) -> dict[str, Any]:
    """What the kubelet reports for a pod it started: Running and ready, or, for a Job's pod, done."""
    now = now_rfc3339()
    running = phase == "Running"
    state = (
        {"running": {"startedAt": now}}
        if running
        else {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}}
    )
    return {
        **status,
        "phase": phase,
        "hostIP": "10.0.0.1",
        "hostIPs": [{"ip": "10.0.0.1"}],
        "podIP": "10.244.0.10",
        "podIPs": [{"ip": "10.244.0.10"}],
        "startTime": now,
        "conditions": [
            {
                "type": t,
                "status": "True" if running or t == "PodScheduled" else "False",
                "lastProbeTime": None,
                "lastTransitionTime": now,
            }
            for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
        ],
        "containerStatuses": [
            {
                "name": c.get("name"),
                "image": c.get("image"),
                "ready": running,
                "restartCount": 0,
                "started": running,
                "state": state,
                "imageID": "",
                "containerID": f"kubesim://{c.get('name')}",
            }
            for c in spec.get("containers") or []
        ],
    }
