"""One simulated cluster: the API semantics over the store.

This is where Kubernetes' object rules live (uid, creationTimestamp, generation, resourceVersion
preconditions, status subresources, finalizers and graceful deletion, dry-run), independent of
HTTP so that controllers and the churn generator use the same path as clients do.
"""

from __future__ import annotations

import copy
import secrets
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from . import events, patching, validation
from .authn import API_AUDIENCES, Token, TokenResult, review_token, token_review
from .errors import StatusError, already_exists, bad_request, conflict, not_found
from .openapi import FieldValidator
from .rbac import Attributes, Authorizer, UserInfo, bootstrap_objects
from .resources import Registry, ResourceType
from .store import ADDED, DELETED, MODIFIED, Store

SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
# Fields a client may not change: the server owns them.
_SERVER_META = (
    "uid",
    "creationTimestamp",
    "resourceVersion",
    "generation",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
)

PATCH_TYPES = {
    "application/json-patch+json": "json",
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
    "application/apply-patch+yaml": "apply",
    "application/apply-patch+cbor": "apply",
}


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _strip_for_compare(obj: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in obj.get("metadata", {}).items() if k not in ("resourceVersion", "managedFields")}
    return {**obj, "metadata": meta}


def _spec_changed(rt: ResourceType, old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Generation counts changes to anything but metadata and status, and for a custom resource
    without a status subresource, status too: only metadata is exempt there."""
    exempt = {"metadata", "apiVersion", "kind"}
    if not rt.custom or "status" in rt.subresources:
        exempt.add("status")
    return any(old.get(k) != new.get(k) for k in (set(old) | set(new)) - exempt)


def _finalized(rt: ResourceType, obj: dict[str, Any]) -> bool:
    """A deleted object goes once its finalizers are gone; a namespace also waits for spec.finalizers."""
    meta = obj["metadata"]
    if not meta.get("deletionTimestamp") or meta.get("finalizers"):
        return False
    return not (rt.kind == "Namespace" and rt.group == "" and (obj.get("spec") or {}).get("finalizers"))


class Cluster:
    def __init__(
        self, name: str, *, history: int = 10_000, watch_queue: int = 10_000, version: str = "v1.30.0"
    ) -> None:
        self.name = name
        self.version = version
        self.registry = Registry()
        self.store = Store(history=history, watch_queue=watch_queue)
        self.authorizer = Authorizer(self._rbac_lookup)
        self.tokens: dict[str, Token] = {}
        self.api_audiences: tuple[str, ...] = API_AUDIENCES
        """The API server's own audiences: tokens used against this cluster must carry one."""
        self.fields = FieldValidator(
            self.registry, lambda: self.store.items("apiextensions.k8s.io/customresourcedefinitions")
        )
        for ns in SYSTEM_NAMESPACES:
            self.create(
                self.rt("", "v1", "namespaces"),
                "",
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
                manager="kube-apiserver",
            )
        for obj in bootstrap_objects():
            rt = self.rt_for(obj)
            self.create(rt, obj["metadata"].get("namespace", ""), obj, manager="kube-apiserver")

    # -- lookups -------------------------------------------------------------------------------

    def rt(self, group: str, version: str, plural: str) -> ResourceType:
        rt = self.registry.lookup(group, version, plural)
        if rt is None:
            raise StatusError(404, "the server could not find the requested resource", details={})
        return rt

    def rt_for(self, obj: dict[str, Any]) -> ResourceType:
        """The resource type of a manifest, by its apiVersion and kind."""
        api_version = obj.get("apiVersion", "")
        group, _, version = api_version.rpartition("/")
        for rt in self.registry.types:
            if rt.group == group and rt.version == version and rt.kind == obj.get("kind"):
                return rt
        raise StatusError(404, f'no matches for kind "{obj.get("kind")}" in version "{api_version}"')

    def _rbac_lookup(self, kind: str, namespace: str | None) -> Iterable[dict[str, Any]]:
        plural = kind.lower() + "s"
        return self.store.items(f"rbac.authorization.k8s.io/{plural}", namespace or "")

    def authenticate_token(self, token: str) -> UserInfo | None:
        """The user a request's bearer token authenticates as (None: 401)."""
        known = self.tokens.get(token)
        if known is not None and known.service_account is None:  # the common case, kept cheap
            return known.user
        return self.review_token(token).user

    def review_token(self, token: str, audiences: Iterable[str] = ()) -> TokenResult:
        """What the token authenticators say of `token` for `audiences` (none: this API server's)."""

        def uid(namespace: str, name: str) -> str | None:
            sa = self.store.get("/serviceaccounts", namespace, name)
            return None if sa is None else str(sa["metadata"].get("uid", ""))

        return review_token(self.tokens.get(token), tuple(audiences), self.api_audiences, uid)

    def add_token(
        self, user: str, groups: tuple[str, ...] = ("system:authenticated",), token: str | None = None
    ) -> str:
        """A token for `user` with exactly these groups (kubesim's own identities use it)."""
        token = token or secrets.token_urlsafe(24)
        self.tokens[token] = Token(UserInfo(user, groups))
        return token

    def add_user_token(self, name: str, groups: Iterable[str] = (), *, uid: str = "", token: str | None = None) -> str:
        """A static token (a line of kube-apiserver's `--token-auth-file`) for user `name`; its
        groups get `system:authenticated` as every authenticated user's do. Returns the token."""
        token = token or secrets.token_urlsafe(24)
        self.tokens[token] = Token.static(name, tuple(groups), uid)
        return token

    def add_service_account_token(
        self, namespace: str, name: str, *, audiences: Iterable[str] = (), token: str | None = None
    ) -> str:
        """A ServiceAccount token, as `TokenRequest` hands out (`kubectl create token NAME
        --audience A`): user `system:serviceaccount:<namespace>:<name>`, valid only while that
        ServiceAccount exists and only for its audiences (none: this API server's). Returns it."""
        token = token or secrets.token_urlsafe(32)
        self.tokens[token] = Token.for_service_account(namespace, name, tuple(audiences))
        return token

    def get(self, rt: ResourceType, namespace: str, name: str) -> dict[str, Any]:
        obj = self.store.get(rt.storage_key, namespace, name)
        if obj is None:
            raise not_found(rt.group, rt.plural, name)
        return self._as_version(rt, obj)

    def _as_version(self, rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        """A stored object as `rt` serves it: custom resources stored at one version are served at
        any served version (conversion: None); core Events are converted to events.k8s.io/v1."""
        if obj.get("apiVersion") == rt.api_version:
            return obj
        if events.is_events_v1(rt.group):
            return events.to_events_v1(obj)
        return {**obj, "apiVersion": rt.api_version}

    def _to_storage(self, rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        """What is stored for an object written through `rt` (the inverse of _as_version)."""
        return events.to_core(obj) if events.is_events_v1(rt.group) else obj

    def _require_namespace(self, rt: ResourceType, namespace: str, creating: bool) -> None:
        if not rt.namespaced:
            return
        if not namespace:
            raise bad_request("the server could not find the requested resource: a namespace is required")
        ns = self.store.get("/namespaces", "", namespace)
        if ns is None:
            raise not_found("", "namespaces", namespace)
        if creating and ns.get("metadata", {}).get("deletionTimestamp"):
            raise StatusError(
                403,
                f'{rt.plural} "" is forbidden: unable to create new content in namespace {namespace} '
                "because it is being terminated",
                details={
                    "causes": [
                        {
                            "reason": "NamespaceTerminating",
                            "field": "metadata.namespace",
                            "message": f"namespace {namespace} is being terminated",
                        }
                    ]
                },
            )

    # -- writes --------------------------------------------------------------------------------

    def _identity(self, rt: ResourceType, namespace: str, obj: dict[str, Any], name: str | None = None) -> None:
        if obj.get("apiVersion") not in (None, rt.api_version):
            raise bad_request(
                f"the API version in the data ({obj.get('apiVersion')}) does not match the expected API version "
                f"({rt.api_version})"
            )
        if obj.get("kind") not in (None, rt.kind):
            raise bad_request(f"the kind in the data ({obj.get('kind')}) does not match the expected kind ({rt.kind})")
        obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
        meta = obj.get("metadata")
        if meta is None:
            meta = obj["metadata"] = {}
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        if rt.namespaced:
            if meta.get("namespace") not in (None, "", namespace):
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if name is not None and meta.get("name") not in (None, name):
            raise bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})"
            )
        if name is not None:
            meta["name"] = name

    def create(
        self,
        rt: ResourceType,
        namespace: str,
        obj: dict[str, Any],
        *,
        manager: str = "",
        dry_run: bool = False,
        subresource: str = "",
        field_validation: str | None = None,
        warnings: list[str] | None = None,
    ) -> dict[str, Any]:
        """Create an object. `field_validation` None (internal writers) skips the unknown-field check."""
        if "create" not in rt.verbs:
            raise StatusError(405, "the server does not allow this method on the requested resource")
        obj = copy.deepcopy(validation.check_type(obj))
        self._identity(rt, namespace, obj)
        obj = self._known_fields(rt, obj, field_validation, warnings)
        meta = obj["metadata"]
        if not meta.get("name"):
            if meta.get("generateName"):
                meta["name"] = meta["generateName"] + secrets.token_hex(3)[:5]
            else:
                raise StatusError(
                    422,
                    f'{rt.kind}{"." + rt.group if rt.group else ""} "" is invalid: metadata.name: Required value: '
                    "name or generateName is required",
                    details={
                        "kind": rt.kind,
                        "group": rt.group,
                        "causes": [
                            {
                                "reason": "FieldValueRequired",
                                "message": "Required value: name or generateName is required",
                                "field": "metadata.name",
                            }
                        ],
                    },
                )
        self._require_namespace(rt, namespace, creating=True)
        if self.store.get(rt.storage_key, namespace, meta["name"]) is not None:
            raise already_exists(rt.group, rt.plural, meta["name"])
        for k in _SERVER_META:
            meta.pop(k, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        if rt.generation or rt.custom:
            meta["generation"] = 1
        validation.prepare_for_create(rt, obj)
        if "status" in rt.subresources:
            if rt.custom:
                obj.pop("status", None)
            elif rt.kind != "Namespace":
                obj["status"] = self._initial_status(rt, obj)
        if (rt.group, rt.kind) == ("", "Pod") and isinstance(obj.get("spec"), dict):
            validation.admit_pod(obj["spec"], secrets.token_hex(3)[:5])
        validation.apply_defaults(rt, obj)
        if (rt.group, rt.kind) == ("", "Service"):
            self._allocate_service(obj, None)
        validation.validate(rt, obj)
        if manager:
            obj = patching.record_update(
                None,
                obj,
                manager=manager,
                group=rt.group,
                version=rt.version,
                kind=rt.kind,
                now=now_rfc3339(),
                subresource=subresource,
            )
        if dry_run:
            return obj
        self.store.commit(rt.storage_key, ADDED, self._to_storage(rt, obj), None)
        if rt.group == "apiextensions.k8s.io" and rt.plural == "customresourcedefinitions":
            self._crd_established(obj)
        created = self.store.get(rt.storage_key, namespace, meta["name"])
        assert created is not None, "just committed"
        return self._as_version(rt, created)

    def _initial_status(self, rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        """The status a strategy's PrepareForCreate leaves (whatever the client sent is dropped)."""
        if (rt.group, rt.kind) == ("", "Pod"):
            return {"phase": "Pending", "qosClass": validation.qos_class(obj.get("spec") or {})}
        if (rt.group, rt.kind) in (("", "Service"), ("networking.k8s.io", "Ingress")):
            return {"loadBalancer": {}}
        return {}

    def _allocate_service(self, svc: dict[str, Any], old: dict[str, Any] | None) -> None:
        """The Service REST storage's allocations: a cluster IP (kept across updates that leave it
        out, as kubectl apply does), its IP family, and node ports for NodePort and LoadBalancer."""
        spec = svc.get("spec")
        if not isinstance(spec, dict):
            return
        before = (old or {}).get("spec") or {}
        if spec.get("type") == "ExternalName":
            return
        for key in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"):
            if key not in spec and key in before:
                spec[key] = before[key]
        if not spec.get("clusterIP"):
            taken = {(o.get("spec") or {}).get("clusterIP") for o in self.store.items("/services")}
            n = 2  # from 10.96.0.0/12 (kubeadm's range); .1 is the `kubernetes` Service's
            while f"10.96.{n // 256}.{n % 256}" in taken:
                n += 1
            spec["clusterIP"] = f"10.96.{n // 256}.{n % 256}"
        spec.setdefault("clusterIPs", [spec["clusterIP"]])
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        if spec.get("type") in ("NodePort", "LoadBalancer"):
            old_ports = {
                (p.get("port"), p.get("protocol")): p.get("nodePort")
                for p in before.get("ports") or []
                if isinstance(p, dict)
            }
            taken_ports = {
                p.get("nodePort")
                for o in self.store.items("/services")
                for p in (o.get("spec") or {}).get("ports") or []
                if isinstance(p, dict)
            }
            for port in spec.get("ports") or []:
                if isinstance(port, dict) and not port.get("nodePort"):
                    port["nodePort"] = old_ports.get((port.get("port"), port.get("protocol"))) or next(
                        n for n in range(30000, 32768) if n not in taken_ports
                    )
                    taken_ports.add(port["nodePort"])

    def update(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        obj: dict[str, Any],
        *,
        subresource: str = "",
        manager: str = "",
        dry_run: bool = False,
        _record: bool = True,
        field_validation: str | None = None,
        warnings: list[str] | None = None,
    ) -> dict[str, Any]:
        """PUT semantics: optimistic concurrency on metadata.resourceVersion, status kept apart."""
        obj = copy.deepcopy(validation.check_type(obj))
        self._identity(rt, namespace, obj, name)
        old = self.store.get(rt.storage_key, namespace, name)
        if old is None:
            raise not_found(rt.group, rt.plural, name)
        want_rv = obj["metadata"].get("resourceVersion")
        if want_rv and want_rv != old["metadata"]["resourceVersion"]:
            raise conflict(
                rt.group,
                rt.plural,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            )
        obj = self._known_fields(rt, obj, field_validation, warnings)
        return self._write(rt, old, obj, subresource=subresource, manager=manager, dry_run=dry_run, record=_record)

    def _known_fields(
        self, rt: ResourceType, obj: dict[str, Any], mode: str | None, warnings: list[str] | None
    ) -> dict[str, Any]:
        """Drop unknown fields as the apiserver's decoder does, reporting them per fieldValidation."""
        if mode is None:
            return obj
        obj, unknown = self.fields.check(rt, obj, mode)
        if warnings is not None:
            warnings.extend(unknown)
        return obj

    def _write(
        self,
        rt: ResourceType,
        old: dict[str, Any],
        new: dict[str, Any],
        *,
        subresource: str,
        manager: str,
        dry_run: bool,
        record: bool = True,
    ) -> dict[str, Any]:
        stored = old  # as stored; the rest compares and records in the shape `rt` serves
        old = self._as_version(rt, old)
        meta, old_meta = new["metadata"], old["metadata"]
        for k in _SERVER_META:
            if k in old_meta:
                meta[k] = old_meta[k]
            else:
                meta.pop(k, None)
        if subresource == "status":
            new = {**old, "status": new.get("status", {}), "metadata": {**old_meta}}
        elif subresource == "scale":
            pass
        elif "status" in rt.subresources:
            if "status" in old:
                new["status"] = old["status"]
            else:
                new.pop("status", None)
        if rt.kind == "Namespace" and subresource != "finalize":
            new["spec"] = old.get("spec", {})
        elif rt.kind == "Namespace":
            new = {**old, "spec": new.get("spec", {}), "metadata": {**old_meta}}
        if old_meta.get("deletionTimestamp") and set(new["metadata"].get("finalizers") or []) - set(
            old_meta.get("finalizers") or []
        ):
            raise StatusError(
                422,
                f'{rt.kind} "{old_meta["name"]}" is invalid: metadata.finalizers: Forbidden: '
                "no new finalizers can be added if the object is being deleted",
            )
        validation.apply_defaults(rt, new)
        if (rt.group, rt.kind) == ("", "Service") and subresource != "status":
            self._allocate_service(new, old)
        validation.validate(rt, new, old)
        if (rt.generation or rt.custom) and subresource != "status" and _spec_changed(rt, old, new):
            meta["generation"] = int(old_meta.get("generation", 1)) + 1
        if record and manager:
            new = patching.record_update(
                old,
                new,
                manager=manager,
                group=rt.group,
                version=rt.version,
                kind=rt.kind,
                now=now_rfc3339(),
                subresource=subresource,
            )
        if _strip_for_compare(new) == _strip_for_compare(old):
            return self._as_version(rt, old)  # a no-op write does not bump resourceVersion
        if dry_run:
            new["metadata"]["resourceVersion"] = old_meta["resourceVersion"]
            return new
        if _finalized(rt, new):
            self.store.commit(rt.storage_key, DELETED, self._to_storage(rt, new), stored)
            self._after_delete(rt, new)
            return self._as_version(rt, new)
        self.store.commit(rt.storage_key, MODIFIED, self._to_storage(rt, new), stored)
        if rt.group == "apiextensions.k8s.io" and rt.plural == "customresourcedefinitions" and not subresource:
            self.registry.set_custom(new)
        return self._as_version(rt, new)

    def patch(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        patch_type: str,
        body: Any,
        *,
        manager: str = "",
        force: bool = False,
        subresource: str = "",
        dry_run: bool = False,
        field_validation: str | None = None,
        warnings: list[str] | None = None,
    ) -> dict[str, Any]:
        old = self.store.get(rt.storage_key, namespace, name)
        now = now_rfc3339()
        if patch_type == "apply":
            if not manager:
                raise bad_request("PATCH, application/apply-patch+yaml requires fieldManager parameter")
            applied = copy.deepcopy(validation.check_type(body, "apply configuration"))
            self._identity(rt, namespace, applied, name)
            applied = self._known_fields(rt, applied, field_validation, warnings)
            if old is None:
                self._require_namespace(rt, namespace, creating=True)
                merged = self._ssa(rt, None, applied, manager, force, now, subresource)
                return self.create(rt, namespace, merged, manager="", dry_run=dry_run)
            merged = self._ssa(rt, self._as_version(rt, old), applied, manager, force, now, subresource)
            return self._write(rt, old, merged, subresource=subresource, manager=manager, dry_run=dry_run, record=False)
        if old is None:
            raise not_found(rt.group, rt.plural, name)
        base = self._as_version(rt, old)
        try:
            if patch_type == "json":
                new = patching.apply_json_patch(base, body)
            elif patch_type == "merge":
                new = patching.apply_merge_patch(base, body)
            elif patch_type == "strategic":
                if rt.custom:
                    raise patching.PatchError("", 415)
                new = patching.apply_strategic_merge_patch(base, body, rt.group, rt.kind)
            else:
                raise StatusError(415, f"unsupported patch type {patch_type!r}")
        except patching.PatchError as e:
            if e.code == 415:
                raise StatusError(
                    415,
                    "the body of the request was in an unknown format - accepted media types include: "
                    "application/json-patch+json, application/merge-patch+json, "
                    "application/apply-patch+yaml",
                ) from None
            raise StatusError(e.code, e.message) from None
        new = validation.check_type(new, "patched object")
        want_rv = (new.get("metadata") or {}).get("resourceVersion")
        if want_rv and want_rv != old["metadata"]["resourceVersion"]:
            raise conflict(
                rt.group,
                rt.plural,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            )
        self._identity(rt, namespace, new, name)
        new = self._known_fields(rt, new, field_validation, warnings)
        return self._write(rt, old, new, subresource=subresource, manager=manager, dry_run=dry_run)

    def _ssa(
        self,
        rt: ResourceType,
        live: dict[str, Any] | None,
        applied: dict[str, Any],
        manager: str,
        force: bool,
        now: str,
        subresource: str,
    ) -> dict[str, Any]:
        try:
            return patching.server_side_apply(
                live,
                applied,
                manager=manager,
                force=force,
                group=rt.group,
                version=rt.version,
                kind=rt.kind,
                now=now,
                subresource=subresource,
            )
        except patching.ApplyConflict as e:
            raise StatusError(
                409,
                str(e),
                details={
                    "causes": [
                        {"reason": "FieldManagerConflict", "message": f'conflict with "{m}"', "field": f}
                        for m, f in e.conflicts
                    ]
                },
            ) from None
        except patching.PatchError as e:
            raise StatusError(e.code, e.message) from None

    def delete(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        *,
        propagation: str | None = None,
        preconditions: dict[str, Any] | None = None,
        dry_run: bool = False,
        orphan_dependents: bool | None = None,
    ) -> tuple[int, dict[str, Any]]:
        """DELETE, answered as the generic store does.

        While finalizers (or a namespace's spec.finalizers) hold it: 200 with the object (202 only when
        the client sent orphanDependents=false, kept for old clients). Once gone: 200 with a Status, or
        with the object for the kinds whose storage returns it (Pods, Services, Namespaces...).
        """
        old = self.store.get(rt.storage_key, namespace, name)
        if old is None:
            raise not_found(rt.group, rt.plural, name)
        meta = old["metadata"]
        pre = preconditions or {}
        if pre.get("uid") and pre["uid"] != meta.get("uid"):
            raise conflict(
                rt.group,
                rt.plural,
                name,
                f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: {meta.get('uid')}",
            )
        if pre.get("resourceVersion") and pre["resourceVersion"] != meta.get("resourceVersion"):
            raise conflict(
                rt.group,
                rt.plural,
                name,
                f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, "
                f"ResourceVersion in object meta: {meta.get('resourceVersion')}",
            )
        if propagation not in (None, "", "Background", "Foreground", "Orphan"):
            raise StatusError(
                422,
                f'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: '
                f'"{propagation}": supported values: "Foreground", "Background", "Orphan", "nil"',
            )
        if orphan_dependents is not None:
            if propagation:
                raise StatusError(
                    422,
                    'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Invalid value: '
                    f'"{propagation}": orphanDependents and deletionPropagation cannot be both set',
                )
            propagation = "Orphan" if orphan_dependents else "Background"
        held = 202 if orphan_dependents is False else 200
        finalizers = list(meta.get("finalizers") or [])
        if propagation == "Foreground" and "foregroundDeletion" not in finalizers:
            finalizers.append("foregroundDeletion")
        if propagation == "Orphan" and "orphan" not in finalizers:
            finalizers.append("orphan")
        is_namespace = rt.kind == "Namespace" and rt.group == ""
        if meta.get("deletionTimestamp"):
            if meta.get("finalizers") or (is_namespace and (old.get("spec") or {}).get("finalizers")):
                return held, self._as_version(rt, old)
        elif finalizers or is_namespace:  # a namespace is always emptied first
            new_meta = {
                **meta,
                "finalizers": finalizers,
                "deletionTimestamp": now_rfc3339(),
                "deletionGracePeriodSeconds": 0,
            }
            new = {**old, "metadata": new_meta}
            if rt.generation or rt.custom:
                new_meta["generation"] = int(meta.get("generation", 1)) + 1
            if is_namespace:
                new["status"] = {**old.get("status", {}), "phase": "Terminating"}
            if not dry_run:
                self.store.commit(rt.storage_key, MODIFIED, new, old)
            return held, self._as_version(rt, new)
        gone = {**old, "metadata": {**meta}}
        if not dry_run:
            self.store.commit(rt.storage_key, DELETED, gone, old)
            self._after_delete(rt, gone)
        if rt.returns_deleted:
            return 200, self._as_version(rt, gone)
        details = {"name": name, "kind": rt.plural, "uid": meta.get("uid")}
        if rt.group:
            details["group"] = rt.group
        return 200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}

    def _after_delete(self, rt: ResourceType, obj: dict[str, Any]) -> None:
        if rt.group == "apiextensions.k8s.io" and rt.plural == "customresourcedefinitions":
            spec = obj.get("spec", {})
            group, plural = spec.get("group", ""), spec.get("names", {}).get("plural", "")
            for custom in self.registry.custom_types(group, plural)[:1]:
                for cr in list(self.store.items(custom.storage_key)):
                    m = cr["metadata"]
                    self.store.commit(custom.storage_key, DELETED, {**cr, "metadata": {**m}}, cr)
            self.registry.remove_custom(group, plural)

    def _crd_established(self, crd: dict[str, Any]) -> None:
        """The apiextensions controller accepts names and establishes the CRD at once."""
        self.registry.set_custom(crd)
        now = now_rfc3339()
        status = {
            "acceptedNames": crd["spec"]["names"],
            "storedVersions": [v["name"] for v in crd["spec"]["versions"] if v.get("storage")],
            "conditions": [
                {
                    "type": "NamesAccepted",
                    "status": "True",
                    "reason": "NoConflicts",
                    "message": "no conflicts found",
                    "lastTransitionTime": now,
                },
                {
                    "type": "Established",
                    "status": "True",
                    "reason": "InitialNamesAccepted",
                    "message": "the initial names have been accepted",
                    "lastTransitionTime": now,
                },
            ],
        }
        # A new metadata dict: commit stamps the resourceVersion into it, and the ADDED event shares crd's.
        established = {**crd, "metadata": {**crd["metadata"]}, "status": status}
        self.store.commit("apiextensions.k8s.io/customresourcedefinitions", MODIFIED, established, crd)

    # -- reviews -------------------------------------------------------------------------------

    def _token_review(self, rt: ResourceType, body: dict[str, Any]) -> dict[str, Any]:
        """`POST tokenreviews`: decoded as the apiserver decodes a TokenReview (a body of another
        kind, or fields of the wrong type, is a 400), then the token authenticators' verdict."""
        kind, api_version = body.get("kind"), body.get("apiVersion")
        if kind not in (None, "", rt.kind) or api_version not in (None, "", rt.api_version):
            version = str(api_version or "").rpartition("/")[2]
            raise bad_request(f'{kind} in version "{version}" cannot be handled as a {rt.kind}')
        body, _ = self.fields.check(rt, body, "Ignore")
        return token_review(body, self.review_token)

    def review(self, rt: ResourceType, user: UserInfo, body: dict[str, Any]) -> dict[str, Any]:
        body = validation.check_type(body)
        spec = body.get("spec") or {}
        out: dict[str, Any] = {
            "kind": rt.kind,
            "apiVersion": rt.api_version,
            "metadata": {"creationTimestamp": None},
            "spec": spec,
        }
        if rt.kind == "TokenReview":
            return self._token_review(rt, body)
        if rt.kind == "SelfSubjectAccessReview":
            ra, nra = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
            if bool(ra) == bool(nra):
                raise StatusError(
                    422,
                    'SelfSubjectAccessReview.authorization.k8s.io "" is invalid: spec: Invalid value: '
                    "exactly one of nonResourceAttributes or resourceAttributes must be specified",
                )
            if ra:
                attrs = Attributes(
                    user,
                    ra.get("verb", ""),
                    True,
                    api_group=ra.get("group", ""),
                    resource=ra.get("resource", ""),
                    subresource=ra.get("subresource", ""),
                    name=ra.get("name", ""),
                    namespace=ra.get("namespace", ""),
                )
            else:
                nra = nra or {}  # exactly one of the two is set (checked above)
                attrs = Attributes(user, nra.get("verb", ""), False, path=nra.get("path", ""))
            allowed, reason = self.authorizer.authorize(attrs)
            out["status"] = {"allowed": allowed}
            if reason:
                out["status"]["reason"] = reason
        elif rt.kind == "SelfSubjectRulesReview":
            rules, non_resource, incomplete = self.authorizer.rules_for(user, spec.get("namespace", ""))
            out["status"] = {"resourceRules": rules, "nonResourceRules": non_resource, "incomplete": incomplete}
        else:  # SelfSubjectReview
            out.pop("spec")
            out["status"] = {"userInfo": {"username": user.name, "groups": list(user.groups)}}
        return out
