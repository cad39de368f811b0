"""The HTTPS face of a simulated cluster: kube-apiserver's paths, verbs, content types and errors."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import re
import ssl
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import orjson
import yaml
from aiohttp import web

from ..kube.errors import SelectorError
from ..kube.selectors import parse_label_selector
from . import events, openapi, openapi_v2, patching, tables, yamlbody
from .cluster import PATCH_TYPES, Cluster
from .errors import StatusError, bad_request, forbidden, invalid, no_resource, not_found, status_body
from .field_selectors import FieldSelector, object_fields, parse_field_selector, supported_fields
from .rbac import Attributes, UserInfo
from .resources import SUBRESOURCE_VERBS, ResourceType
from .store import BOOKMARK, ERROR, TooLargeResourceVersion

log = logging.getLogger("scaleagent.kubesim")
# Initial watch events go out in writes of about this size (see the watch handler).
WATCH_CHUNK_BYTES = 64 * 1024

MAX_BODY = 3 * 1024 * 1024  # kube-apiserver's default --max-request-body-bytes
DEFAULT_WATCH_TIMEOUT = 1800  # kube-apiserver's --min-request-timeout
JSON = "application/json"


@dataclass
class Request:
    """A parsed resource request: which kind, where, and what to do."""

    rt: ResourceType
    verb: str
    namespace: str
    name: str
    subresource: str


@dataclass
class Rendering:
    """What representation the client negotiated with its Accept header."""

    as_: str = ""  # "", "Table", "PartialObjectMetadata", "PartialObjectMetadataList"


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type=JSON)


def _error(e: StatusError) -> web.Response:
    return _json(e.status(), e.code)


def negotiate(accept: str) -> Rendering:
    """Pick the first JSON representation we serve from the Accept list, as the apiserver does."""
    if not accept:
        return Rendering()
    for part in accept.split(","):
        fields = [p.strip() for p in part.split(";")]
        media, params = fields[0].lower(), dict(p.split("=", 1) for p in fields[1:] if "=" in p)
        if media not in ("application/json", "*/*", "application/*"):
            continue
        as_ = params.get("as", "")
        if not as_:
            return Rendering()
        if (
            params.get("g") == "meta.k8s.io"
            and params.get("v") in ("v1", "v1beta1")
            and as_ in ("Table", "PartialObjectMetadata", "PartialObjectMetadataList")
        ):
            return Rendering(as_)
    # Upstream's wording, listing what is actually served here: JSON only.
    raise StatusError(406, "only the following media types are accepted: application/json", reason="NotAcceptable")


class PageNotFound(Exception):
    """A path no handler of the apiserver serves (an unknown API group): a plain-text 404."""


def _untyped(rt: ResourceType, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A real apiserver leaves `apiVersion` and `kind` out of the items of a list of built-in kinds
    (the list's own kind names them); custom resources keep theirs."""
    if rt.custom:
        return items
    return [{k: v for k, v in o.items() if k not in ("apiVersion", "kind")} for o in items]


def _partial(obj: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}


class APIServer:
    """aiohttp application serving one Cluster."""

    def __init__(self, cluster: Cluster, *, bookmark_interval: float = 60.0) -> None:
        self.cluster = cluster
        self.bookmark_interval = bookmark_interval
        self.app = web.Application(client_max_size=MAX_BODY + 1, middlewares=[self._errors])
        self.app.router.add_route("*", "/{tail:.*}", self.handle)
        self._openapi: dict[tuple[str, str], dict[str, Any]] = {}
        self._openapi_generation = -1

    # -- plumbing ------------------------------------------------------------------------------

    @web.middleware
    async def _errors(self, request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            return await handler(request)
        except PageNotFound:
            # Go's http.NotFound, from the handler chain's end: what a path under /apis/ that names
            # no served group gets from a real apiserver. Not a Status: clients must cope with text.
            return web.Response(
                text="404 page not found\n",
                status=404,
                content_type="text/plain",
                charset="utf-8",
                headers={"X-Content-Type-Options": "nosniff"},
            )
        except StatusError as e:
            return _error(e)
        except web.HTTPException as e:
            return _json(status_body(e.status, e.reason, e.reason), e.status)
        except (asyncio.CancelledError, ConnectionResetError):
            raise
        except Exception as e:  # never let a bug take the server down or leak a traceback to clients
            log.exception("internal error on %s %s", request.method, request.path)
            return _error(StatusError(500, f"Internal error occurred: {type(e).__name__}: {e}"))

    def _authenticate(self, request: web.Request) -> UserInfo:
        auth = request.headers.get("Authorization", "")
        if auth.lower().startswith("bearer "):
            user = self.cluster.authenticate_token(auth[7:].strip())
            if user is None:
                raise StatusError(401, "Unauthorized")
            return user
        cert = request.transport.get_extra_info("peercert") if request.transport else None
        if cert:
            subject = dict(x[0] for x in cert.get("subject", ()))
            groups = tuple(v for rdn in cert.get("subject", ()) for k, v in rdn if k == "organizationName")
            return UserInfo(subject.get("commonName", ""), groups + ("system:authenticated",))
        raise StatusError(401, "Unauthorized")

    def _authorize(self, attrs: Attributes) -> None:
        allowed, _ = self.cluster.authorizer.authorize(attrs)
        if allowed:
            return
        if not attrs.resource_request:
            raise StatusError(403, f'forbidden: User "{attrs.user.name}" cannot {attrs.verb} path "{attrs.path}"')
        resource = attrs.resource + (f"/{attrs.subresource}" if attrs.subresource else "")
        raise forbidden(attrs.user.name, attrs.verb, attrs.api_group, resource, attrs.namespace, attrs.name)

    async def _body(self, request: web.Request) -> Any:
        if request.content_length is not None and request.content_length > MAX_BODY:
            raise StatusError(413, f"Request entity too large: limit is {MAX_BODY}")
        raw = bytearray()
        async for chunk in request.content.iter_chunked(65536):
            raw += chunk
            if len(raw) > MAX_BODY:
                raise StatusError(413, f"Request entity too large: limit is {MAX_BODY}")
        if not raw:
            raise bad_request("the request body is empty: an object was expected")
        ctype = request.content_type.lower()
        try:
            if ctype in ("application/yaml", "application/apply-patch+yaml"):
                # No more nodes than a JSON body at the size limit could hold, however many aliases.
                return yamlbody.loads(bytes(raw), max_nodes=MAX_BODY // 2)
            return orjson.loads(raw)
        except (orjson.JSONDecodeError, yaml.YAMLError) as e:
            detail = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise bad_request(f"couldn't get version/kind; json parse error: {detail}") from None

    # -- routing -------------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        user = self._authenticate(request)
        segs = [s for s in request.path.split("/") if s]
        if (
            not segs
            or segs[0] not in ("api", "apis")
            or (segs[0] == "api" and len(segs) < 3)
            or (segs[0] == "apis" and len(segs) < 4)
        ):
            self._authorize(
                Attributes(user, request.method.lower() if request.method != "GET" else "get", False, path=request.path)
            )
            return self._non_resource(request, segs)
        if segs[0] == "apis" and segs[1] not in self.cluster.registry.groups():
            self._authorize(
                Attributes(
                    user,
                    "watch" if request.query.get("watch") in ("1", "true", "True") else request.method.lower(),
                    True,
                    api_group=segs[1],
                    resource=segs[5] if segs[3:4] == ["namespaces"] and len(segs) > 5 else segs[3],
                )
            )
            raise PageNotFound()
        req = self._parse(request, segs)
        verb = req.verb
        if verb in ("list", "watch") and request.query.get("watch") in ("1", "true", "True"):
            verb = "watch"
        self._authorize(
            Attributes(
                user,
                verb,
                True,
                api_group=req.rt.group,
                resource=req.rt.plural,
                subresource=req.subresource,
                name=req.name,
                namespace=req.namespace,
            )
        )
        if verb == "watch" and "watch" not in req.rt.verbs:
            raise StatusError(
                405, f'watch is not supported on resources of kind "{req.rt.plural}"', details={"kind": req.rt.plural}
            )
        req.verb = verb
        return await self._resource(request, req, user)

    def _non_resource(self, request: web.Request, segs: list[str]) -> web.Response:
        c, reg = self.cluster, self.cluster.registry
        if request.method != "GET":
            raise StatusError(405, "the server does not allow this method on the requested resource")
        path = "/".join(segs)
        if path == "version":
            major, minor = c.version.lstrip("v").split(".")[:2]
            return _json(
                {
                    "major": major,
                    "minor": minor,
                    "gitVersion": c.version,
                    "gitCommit": "kubesim",
                    "gitTreeState": "clean",
                    "buildDate": "2026-01-01T00:00:00Z",
                    "goVersion": "go1.22",
                    "compiler": "gc",
                    "platform": "linux/amd64",
                }
            )
        if segs[:2] == ["openapi", "v3"]:
            return self._openapi_v3(segs[2:])
        if path == "openapi/v2":
            protobuf = "protobuf" in request.headers.get("Accept", "")
            return web.Response(
                body=openapi_v2.render(c.version, protobuf),
                content_type="application/octet-stream" if protobuf else JSON,
            )
        if path in ("healthz", "livez", "readyz"):
            return web.Response(text="ok")
        if path == "":
            return _json(
                {
                    "paths": ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/version"]
                    + [f"/apis/{g}" for g in reg.groups()]
                }
            )
        if path == "api":
            return _json(
                {
                    "kind": "APIVersions",
                    "versions": ["v1"],
                    "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": request.host}],
                }
            )
        if path == "apis":
            return _json(
                {"kind": "APIGroupList", "apiVersion": "v1", "groups": [self._group_doc(g) for g in reg.groups()]}
            )
        if segs[0] == "apis" and segs[1:] and segs[1] not in reg.groups():
            raise PageNotFound()
        if segs[0] == "apis" and len(segs) == 2:
            return _json({"kind": "APIGroup", "apiVersion": "v1", **self._group_doc(segs[1])})
        if (segs[0] == "api" and len(segs) == 2) or (segs[0] == "apis" and len(segs) == 3):
            group, version = ("", segs[1]) if segs[0] == "api" else (segs[1], segs[2])
            types = reg.in_group_version(group, version)
            if not types:
                raise no_resource()
            # The legacy group's resource list carries no apiVersion (it is written by another codec).
            return _json(
                {
                    "kind": "APIResourceList",
                    **({"apiVersion": "v1"} if group else {}),
                    "groupVersion": f"{group}/{version}" if group else version,
                    "resources": [e for rt in types for e in rt.discovery_entries()],
                }
            )
        raise no_resource()

    def _openapi_docs(self) -> dict[tuple[str, str], dict[str, Any]]:
        reg = self.cluster.registry
        if self._openapi_generation != reg.generation:
            self._openapi = {}
            self._openapi_generation = reg.generation
        crds = list(self.cluster.store.items("apiextensions.k8s.io/customresourcedefinitions"))
        for group in [""] + reg.groups():
            for version in reg.versions(group):
                if (group, version) not in self._openapi:
                    self._openapi[(group, version)] = openapi.gv_document(
                        reg, crds, group, version, self.cluster.version
                    )
        return self._openapi

    def _openapi_v3(self, rest: list[str]) -> web.Response:
        docs = self._openapi_docs()
        if not rest:
            return _json(
                {
                    "paths": {
                        openapi.document_path(g, v): {
                            "serverRelativeURL": f"/openapi/v3/{openapi.document_path(g, v)}?hash={openapi.etag(doc)}"
                        }
                        for (g, v), doc in docs.items()
                    }
                }
            )
        key = (
            ("", rest[1])
            if rest[0] == "api" and len(rest) == 2
            else (rest[1], rest[2])
            if rest[0] == "apis" and len(rest) == 3
            else None
        )
        if key not in docs:
            raise no_resource()
        return _json(docs[key])

    def _group_doc(self, group: str) -> dict[str, Any]:
        versions = [{"groupVersion": f"{group}/{v}", "version": v} for v in self.cluster.registry.versions(group)]
        return {"name": group, "versions": versions, "preferredVersion": versions[0]}

    def _parse(self, request: web.Request, segs: list[str]) -> Request:
        if segs[0] == "api":
            group, version, rest = "", segs[1], segs[2:]
        else:
            group, version, rest = segs[1], segs[2], segs[3:]
        reg = self.cluster.registry
        namespace = ""
        if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] not in ("status", "finalize"):
            namespace, rest = rest[1], rest[2:]
        if len(rest) > 3:
            raise no_resource()
        rt = reg.lookup(group, version, rest[0])
        if rt is None or (namespace and not rt.namespaced):
            raise no_resource()
        name = rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        if sub and sub not in rt.subresources:
            raise no_resource()
        method = request.method
        if method == "GET":
            verb = "get" if name else "list"
        elif method == "POST":
            verb = "create"
            if name and rt.kind != "Namespace":
                raise StatusError(405, "the server does not allow this method on the requested resource")
        elif method == "PUT":
            verb = "update"
        elif method == "PATCH":
            verb = "patch"
        elif method == "DELETE":
            verb = "delete" if name else "deletecollection"
        else:
            raise StatusError(405, "the server does not allow this method on the requested resource")
        if verb in ("update", "patch") and not name:
            raise StatusError(405, "the server does not allow this method on the requested resource")
        if rt.namespaced and not namespace and verb not in ("list", "watch"):
            raise no_resource()
        allowed_verbs: Collection[str] = SUBRESOURCE_VERBS[sub] if sub else set(rt.verbs)
        if verb not in allowed_verbs:
            raise StatusError(405, "the server does not allow this method on the requested resource")
        return Request(rt, verb, namespace, name, sub)

    # -- resources -----------------------------------------------------------------------------

    def _predicate(self, rt: ResourceType, query: Any) -> Any:
        try:
            labels = parse_label_selector(query.get("labelSelector", ""))
            if events.is_events_v1(rt.group):  # its own labels, evaluated on the stored core Event
                fields = parse_field_selector(query.get("fieldSelector", ""), events.FIELD_LABELS)
                fields = FieldSelector((events.FIELD_LABELS[f], op, v) for f, op, v in fields.requirements)
            else:
                fields = parse_field_selector(
                    query.get("fieldSelector", ""),
                    supported_fields(rt.kind, namespaced=rt.namespaced),
                    kind=None if rt.custom else rt.kind,
                )
        except SelectorError as e:
            raise bad_request(str(e)) from None
        if labels.empty and not fields.requirements:
            return None
        kind = rt.kind

        def predicate(obj: dict[str, Any]) -> bool:
            return labels.matches(obj["metadata"].get("labels")) and (
                not fields.requirements or fields.matches(object_fields(obj, kind))
            )

        return predicate

    async def _resource(self, request: web.Request, req: Request, user: UserInfo) -> web.StreamResponse:
        c, rt, q = self.cluster, req.rt, request.query
        render = negotiate(request.headers.get("Accept", ""))
        manager = q.get("fieldManager", "") or _default_manager(request)
        dry_run = q.get("dryRun") == "All"
        if req.verb == "create" and rt.verbs == ("create",):
            return _json(c.review(rt, user, await self._body(request)), 201)
        if (rt.group, rt.plural) == ("", "componentstatuses"):
            return _warn(self._component_statuses(req, render), ["v1 ComponentStatus is deprecated in v1.19+"])
        if req.verb == "list":
            return self._list(req, q, render)
        if req.verb == "watch":
            return await self._watch(request, req, render)
        if req.subresource == "log":
            return self._log(req, q)
        if req.subresource == "scale":
            return await self._scale(request, req, manager, dry_run)
        if req.verb == "get":
            return self._render_one(rt, c.get(rt, req.namespace, req.name), render)
        warnings: list[str] = []
        fv = q.get("fieldValidation", "")
        if req.verb == "create":
            obj = c.create(
                rt,
                req.namespace,
                await self._body(request),
                manager=manager,
                dry_run=dry_run,
                field_validation=fv,
                warnings=warnings,
            )
            return _warn(self._render_one(rt, obj, render, 201), warnings)
        if req.verb == "update":
            obj = c.update(
                rt,
                req.namespace,
                req.name,
                await self._body(request),
                subresource=req.subresource,
                manager=manager,
                dry_run=dry_run,
                field_validation=fv,
                warnings=warnings,
            )
            return _warn(self._render_one(rt, obj, render), warnings)
        if req.verb == "patch":
            ptype = PATCH_TYPES.get(request.content_type.lower())
            if ptype is None:
                raise StatusError(
                    415,
                    f"the body of the request was in an unknown format - accepted media types include: "
                    f"{', '.join(PATCH_TYPES)}",
                )
            force = q.get("force") in ("true", "1")
            body = await self._body(request)
            existed = c.store.get(rt.storage_key, req.namespace, req.name) is not None
            obj = c.patch(
                rt,
                req.namespace,
                req.name,
                ptype,
                body,
                manager=q.get("fieldManager", "") if ptype == "apply" else manager,
                force=force,
                subresource=req.subresource,
                dry_run=dry_run,
                field_validation=fv,
                warnings=warnings,
            )
            return _warn(self._render_one(rt, obj, render, 200 if existed else 201), warnings)
        if req.verb == "delete":
            code, out = c.delete(rt, req.namespace, req.name, **await self._delete_options(request))
            return _json(out, code)
        if req.verb == "deletecollection":
            opts = await self._delete_options(request)
            pred = self._predicate(rt, q)
            deleted = []
            for obj in list(c.store.items(rt.storage_key, req.namespace)):
                if pred is None or pred(obj):
                    c.delete(rt, obj["metadata"].get("namespace", ""), obj["metadata"]["name"], **opts)
                    deleted.append(c._as_version(rt, obj))
            return _json(
                {
                    "kind": rt.list_kind,
                    "apiVersion": rt.api_version,
                    "metadata": {"resourceVersion": str(c.store.rv)},
                    "items": _untyped(rt, deleted),
                }
            )
        raise StatusError(405, "the server does not allow this method on the requested resource")

    async def _delete_options(self, request: web.Request) -> dict[str, Any]:
        """DeleteOptions as upstream's delete handlers decode them: from the body when there is one
        (kubectl and client-go send them there, `--dry-run=server` included), else from the query.
        Returned as Cluster.delete's keyword arguments. gracePeriodSeconds is checked and has no
        effect: without kubelets, nothing here waits for a grace period."""
        raw = await request.read() if request.can_read_body else b""
        if raw.strip():
            try:
                opts = orjson.loads(raw)
            except orjson.JSONDecodeError as e:
                raise bad_request(f"couldn't get version/kind; json parse error: {e}") from None
            if not isinstance(opts, dict):
                raise bad_request("DeleteOptions must be a JSON object")
        else:
            q = request.query
            opts = {"propagationPolicy": q["propagationPolicy"]} if "propagationPolicy" in q else {}
            if "dryRun" in q:
                opts["dryRun"] = q.getall("dryRun")
            if "orphanDependents" in q:
                opts["orphanDependents"] = _query_bool(q, "orphanDependents")
            if "gracePeriodSeconds" in q:
                opts["gracePeriodSeconds"] = _query_int(q, "gracePeriodSeconds")
        dry_run = opts.get("dryRun") or []
        if not isinstance(dry_run, list) or any(v != "All" for v in dry_run):
            raise StatusError(
                422,
                f'DeleteOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: '
                f'{orjson.dumps(dry_run).decode()}: supported values: "All"',
            )
        grace = opts.get("gracePeriodSeconds")
        orphan = opts.get("orphanDependents")
        if (
            (grace is not None and (not isinstance(grace, int) or isinstance(grace, bool)))
            or not isinstance(orphan, (bool, type(None)))
            or not isinstance(opts.get("preconditions"), (dict, type(None)))
        ):
            raise bad_request(
                "DeleteOptions: gracePeriodSeconds must be an integer, orphanDependents a boolean "
                "and preconditions an object"
            )
        return {
            "dry_run": bool(dry_run),
            "propagation": opts.get("propagationPolicy"),
            "preconditions": opts.get("preconditions"),
            "orphan_dependents": orphan,
        }

    def _render_one(self, rt: ResourceType, obj: dict[str, Any], render: Rendering, code: int = 200) -> web.Response:
        if render.as_ == "PartialObjectMetadata":
            return _json(_partial(obj), code)
        if render.as_ == "Table":
            return _json(tables.table(rt.group, rt.kind, [obj]), code)
        if render.as_ == "PartialObjectMetadataList":
            raise StatusError(406, "PartialObjectMetadataList is only served for lists", reason="NotAcceptable")
        return _json(obj, code)

    def _list(self, req: Request, q: Any, render: Rendering) -> web.Response:
        c, rt = self.cluster, req.rt
        try:
            limit = int(q.get("limit", "0") or 0)
        except ValueError:
            raise bad_request(f"invalid value for limit: {q.get('limit')!r}") from None
        if limit < 0:
            raise bad_request(f"limit must be non-negative, got {limit}")
        at = _list_rv(q, limit, c.store.rv)
        pred = self._predicate(rt, q)
        items, rv, token, remaining = c.store.list(
            rt.storage_key, req.namespace, pred, limit, q.get("continue", ""), at
        )
        items = [c._as_version(rt, o) for o in items]
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if token:
            meta["continue"] = token
        if remaining is not None:
            meta["remainingItemCount"] = remaining
        if render.as_ == "Table":
            return _json(tables.table(rt.group, rt.kind, items, q.get("includeObject", "Metadata"), meta))
        if render.as_ in ("PartialObjectMetadataList", "PartialObjectMetadata"):
            if render.as_ == "PartialObjectMetadata":
                raise StatusError(406, "only PartialObjectMetadataList is served for lists", reason="NotAcceptable")
            return _json(
                {
                    "kind": "PartialObjectMetadataList",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": meta,
                    "items": [_partial(o) for o in items],
                }
            )
        return _json(
            {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta, "items": _untyped(rt, items)}
        )

    def _component_statuses(self, req: Request, render: Rendering) -> web.Response:
        """The deprecated ComponentStatus API: probed on each read, never stored, so neither the list
        nor its items have a resourceVersion (and there is no watch)."""
        items: list[dict[str, Any]] = [
            {
                "kind": "ComponentStatus",
                "apiVersion": "v1",
                "metadata": {"name": n, "creationTimestamp": None},
                "conditions": [{"type": "Healthy", "status": "True", "message": "ok"}],
            }
            for n in ("scheduler", "controller-manager", "etcd-0")
        ]
        if req.verb == "get":
            found = [i for i in items if i["metadata"]["name"] == req.name]
            if not found:
                raise StatusError(
                    404,
                    f'componentstatuses "{req.name}" not found',
                    details={"name": req.name, "kind": "componentstatuses"},
                )
            return self._render_one(req.rt, found[0], render)
        if render.as_ == "Table":
            return _json(tables.table(req.rt.group, req.rt.kind, items, "Metadata", {}))
        if render.as_ == "PartialObjectMetadataList":
            return _json(
                {
                    "kind": "PartialObjectMetadataList",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": {},
                    "items": [_partial(o) for o in items],
                }
            )
        return _json(
            {"kind": "ComponentStatusList", "apiVersion": "v1", "metadata": {}, "items": _untyped(req.rt, items)}
        )

    def _log(self, req: Request, q: Any) -> web.Response:
        pod = self.cluster.get(req.rt, req.namespace, req.name)
        containers = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
        container = q.get("container") or (containers[0] if len(containers) == 1 else "")
        if not container:
            raise bad_request(f"a container name must be specified for pod {req.name}, choose one of: {containers}")
        if container not in containers:
            raise bad_request(f"container {container} is not valid for pod {req.name}")
        text = ((pod.get("metadata") or {}).get("annotations") or {}).get(f"kubesim.scale-agent.io/log.{container}")
        if text is None:
            text = f"kubesim: container {container} of pod {req.name} started\n"
        return web.Response(text=text, content_type="text/plain")

    async def _scale(self, request: web.Request, req: Request, manager: str, dry_run: bool) -> web.Response:
        c, rt = self.cluster, req.rt
        if c.store.get(rt.storage_key, req.namespace, req.name) is None:
            raise not_found(rt.group, f"{rt.plural}/scale", req.name)  # the scale REST names itself
        if req.verb == "get":
            return _json(_scale_of(c.get(rt, req.namespace, req.name)))
        body = await self._body(request)
        # Read only now: the object may have changed while the body arrived, and its
        # resourceVersion becomes the update's precondition unless the body names one.
        obj = c.get(rt, req.namespace, req.name)
        current = _scale_of(obj)
        if req.verb == "patch":
            ptype = PATCH_TYPES.get(request.content_type.lower())
            try:
                if ptype == "json":
                    wanted = patching.apply_json_patch(current, body)
                elif ptype in ("merge", "strategic", "apply"):
                    wanted = patching.apply_merge_patch(current, body)
                else:
                    raise StatusError(415, "unsupported patch type")
            except patching.PatchError as e:
                raise StatusError(e.code, e.message) from None
        else:
            wanted = body
        replicas = ((wanted or {}).get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or replicas < 0:
            raise StatusError(
                422,
                f'Scale.autoscaling "{req.name}" is invalid: spec.replicas: Invalid value: '
                f"{replicas!r}: must be greater than or equal to 0",
            )
        want_rv = ((wanted or {}).get("metadata") or {}).get("resourceVersion")
        new = {
            **obj,
            "spec": {**obj.get("spec", {}), "replicas": replicas},
            "metadata": {**obj["metadata"], "resourceVersion": want_rv or obj["metadata"]["resourceVersion"]},
        }
        updated = c.update(rt, req.namespace, req.name, new, manager=manager, dry_run=dry_run, subresource="scale")
        return _json(_scale_of(updated))

    async def _watch(self, request: web.Request, req: Request, render: Rendering) -> web.StreamResponse:
        c, rt, q = self.cluster, req.rt, request.query
        pred = self._predicate(rt, q)
        # An integer; 0 or none is the server's default, spread between one and two min-request-timeouts
        # as upstream does so that clients do not all come back at once. Negative: already over.
        timeout: float = _query_int(q, "timeoutSeconds") if q.get("timeoutSeconds") else 0
        if timeout == 0:
            timeout = DEFAULT_WATCH_TIMEOUT * (1 + random.random())
        bookmarks = q.get("allowWatchBookmarks") in ("true", "1")
        _check_watch_list_options(q)
        send_initial = _query_bool(q, "sendInitialEvents") if "sendInitialEvents" in q else None
        initial_events = bool(send_initial)
        rv_param = q.get("resourceVersion", "")
        if initial_events and not bookmarks:
            raise StatusError(422, "sendInitialEvents is forbidden for watch unless allowWatchBookmarks=true")
        if initial_events or (rv_param in ("", "0") and send_initial is None):
            from_rv = None  # synthetic ADDED events for the current state first
        elif rv_param in ("", "0"):
            from_rv = c.store.rv  # sendInitialEvents=false: only what changes from now on
        else:
            from_rv = _parse_rv(rv_param)
        resp = web.StreamResponse(headers={"Content-Type": JSON, "Cache-Control": "no-cache"})
        resp.enable_chunked_encoding()
        try:
            watcher, initial = c.store.watch(rt.storage_key, req.namespace, pred, from_rv)
        except StatusError as e:
            # Kubernetes answers a too-old watch with 200 and one ERROR event, not an HTTP error.
            await resp.prepare(request)
            await resp.write(_watch_line(ERROR, orjson.dumps(e.status())))
            await resp.write_eof()
            return resp
        start_rv = c.store.rv  # what the initial events show: read in the same step as they were
        loop = asyncio.get_running_loop()
        encode = self._encoder(rt, render, q.get("includeObject", "Metadata"))
        stream = watcher.stream(
            lambda: c.store.rv,
            timeout=timeout,
            clock=loop.time,
            bookmark_interval=self.bookmark_interval if bookmarks else None,
        )
        try:
            await resp.prepare(request)
            # An API server writes watch events as they are encoded, so clients see a stream of modest
            # chunks; one chunk of the whole initial state made readers that rescan their buffer per
            # line (the official Python client's) quadratic.
            chunk: list[bytes] = []
            size = 0
            for ev in initial:
                line = encode(ev)
                chunk.append(line)
                size += len(line)
                if size >= WATCH_CHUNK_BYTES:
                    await resp.write(b"".join(chunk))
                    chunk, size = [], 0
            if chunk:
                await resp.write(b"".join(chunk))
            if initial_events:
                await resp.write(self._bookmark(rt, render, start_rv, initial_end=True))
            async with contextlib.aclosing(stream):
                async for batch in stream:
                    await resp.write(
                        b"".join(self._bookmark(rt, render, e.rv) if e.type == BOOKMARK else encode(e) for e in batch)
                    )
            await resp.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            c.store.unwatch(watcher)
        return resp

    def _bookmark(self, rt: ResourceType, render: Rendering, rv: int, initial_end: bool = False) -> bytes:
        """A bookmark carries only a resourceVersion, in the representation the watch asked for."""
        meta: dict[str, Any] = {"resourceVersion": str(rv), "creationTimestamp": None}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        obj = {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta}
        if render.as_ in ("PartialObjectMetadata", "PartialObjectMetadataList"):
            obj = _partial(obj)
        return _watch_line(BOOKMARK, orjson.dumps(obj))

    def _encoder(self, rt: ResourceType, render: Rendering, include_object: str) -> Any:
        c = self.cluster
        if render.as_ in ("PartialObjectMetadata", "PartialObjectMetadataList"):
            return lambda ev: _watch_line(ev.type, orjson.dumps(_partial(ev.obj)))
        if render.as_ == "Table":
            return lambda ev: _watch_line(
                ev.type,
                orjson.dumps(
                    tables.table(rt.group, rt.kind, [c._as_version(rt, ev.obj)], include_object, with_headers=False)
                ),
            )
        if rt.custom or rt.storage_group is not None:  # served in another shape than stored
            return lambda ev: _watch_line(ev.type, orjson.dumps(c._as_version(rt, ev.obj)))
        return lambda ev: _watch_line(ev.type, ev.encoded())


def _warn(resp: web.Response, warnings: list[str]) -> web.Response:
    """Warnings travel as RFC 7234 Warning headers with code 299, which kubectl prints."""
    for w in warnings:
        resp.headers.add("Warning", '299 - "' + w.replace("\\", "\\\\").replace('"', '\\"') + '"')
    return resp


def _watch_line(type_: str, obj: bytes) -> bytes:
    return b'{"type":"' + type_.encode() + b'","object":' + obj + b"}\n"


def _query_int(q: Any, name: str) -> int:
    """An integer query parameter, as Go's strconv.ParseInt reads it (no fractions, no spaces)."""
    value = q[name]
    if not re.fullmatch(r"[+-]?[0-9]+", value):
        raise bad_request(f'invalid value for {name}: strconv.ParseInt: parsing "{value}": invalid syntax')
    return int(value)


def _query_bool(q: Any, name: str) -> bool:
    """A boolean query parameter, as Go's strconv.ParseBool reads it."""
    value = q[name]
    if value in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if value in ("0", "f", "F", "false", "FALSE", "False"):
        return False
    raise bad_request(f'invalid value for {name}: strconv.ParseBool: parsing "{value}": invalid syntax')


def _check_watch_list_options(q: Any) -> None:
    """Upstream's watch option validation, as with the WatchList feature gate on: sendInitialEvents
    (true or false) needs resourceVersionMatch=NotOlderThan, the only match a watch takes, and only with it."""
    match, causes = q.get("resourceVersionMatch", ""), []
    if "sendInitialEvents" in q and match != "NotOlderThan":
        causes.append(
            (
                "resourceVersionMatch",
                "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            )
        )
    if match and "sendInitialEvents" not in q:
        causes.append(
            (
                "resourceVersionMatch",
                "Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            )
        )
    if match and match != "NotOlderThan":
        causes.append(("resourceVersionMatch", f'Unsupported value: "{match}": supported values: "NotOlderThan"'))
    if causes:
        raise invalid("meta.k8s.io", "ListOptions", "", causes)


def _parse_rv(value: str) -> int:
    try:
        rv = int(value)
        if rv < 0:
            raise ValueError
        return rv
    except ValueError:
        raise bad_request(f"invalid resource version: {value!r}") from None


def _list_rv(q: Any, limit: int, current: int) -> int | None:
    """LIST resourceVersion semantics (api-concepts): unset = most recent; "0" = any (we serve the
    latest); N with Exact = exactly N; N with NotOlderThan = at least N, so the latest, and 504 while
    N is still in the future. N without a match is NotOlderThan, except with a limit, where the
    legacy semantics are Exact."""
    value, match = q.get("resourceVersion", ""), q.get("resourceVersionMatch", "")
    if match not in ("", "NotOlderThan", "Exact"):
        raise bad_request(f"invalid resourceVersionMatch: {match!r}")
    if q.get("continue") and value:
        raise bad_request("specifying resource version is not allowed when using continue")
    if value in ("", "0"):
        if match == "Exact":
            raise bad_request('resourceVersionMatch "Exact" is forbidden for resourceVersion "0"')
        if match and not value:
            raise bad_request("resourceVersionMatch is forbidden unless resourceVersion is provided")
        return None
    rv = _parse_rv(value)
    if match == "Exact" or (not match and limit):
        return rv
    if rv > current:
        raise TooLargeResourceVersion(rv, current)
    return None


def _scale_of(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    sel = ((obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp") if k in meta
        },
        "spec": {"replicas": (obj.get("spec") or {}).get("replicas", 0)},
        "status": {
            "replicas": (obj.get("status") or {}).get("replicas", 0),
            "selector": ",".join(f"{k}={v}" for k, v in sorted(sel.items())),
        },
    }


def _default_manager(request: web.Request) -> str:
    """The apiserver names an unnamed field manager after the client's user agent (before the '/')."""
    agent = request.headers.get("User-Agent", "")
    return agent.split("/")[0][:128] if agent else "unknown"


def ssl_context(cert_file: str, key_file: str, client_ca_file: str) -> ssl.SSLContext:
    """TLS for the API, verifying client certificates when presented (tokens need none)."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert_file, key_file)
    ctx.load_verify_locations(client_ca_file)
    ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx
