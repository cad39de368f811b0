"""OpenAPI v3 documents and unknown-field handling, as kube-apiserver does them.

Clients read `/openapi/v3`: kubectl checks that the server validates fields itself
(`fieldValidation` on PATCH) and computes apply patches from the `x-kubernetes-patch-*`
extensions. The schemas of built-in kinds are Kubernetes' own (data/openapi-definitions.json,
see scripts/gen-openapi-definitions); custom resources use their CRD's schema.

The same schemas decide which fields an object may carry: like the apiserver's decoder, unknown
fields are dropped, and reported per `fieldValidation` (Ignore, Warn: the default, Strict).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
from collections.abc import Iterable
from importlib import resources
from typing import Any

import orjson

from .errors import StatusError
from .resources import Registry, ResourceType

REF = "#/components/schemas/"
META = "io.k8s.apimachinery.pkg.apis.meta.v1."
PATCH_TYPES_BUILTIN = (
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
)
PATCH_TYPES_CUSTOM = PATCH_TYPES_BUILTIN[:3]
_GROUP_PREFIX = {"": "io.k8s.api.core", "apiextensions.k8s.io": "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions"}


@functools.cache
def definitions() -> dict[str, Any]:
    text = (resources.files("scaleagent.kubesim") / "data" / "openapi-definitions.json").read_text()
    return json.loads(text)["schemas"]


@functools.cache
def _by_gvk() -> dict[tuple[str, str, str], str]:
    out = {}
    for name, schema in definitions().items():
        for gvk in schema.get("x-kubernetes-group-version-kind", ()):
            out[(gvk["group"], gvk["version"], gvk["kind"])] = name
    return out


def schema_name(rt: ResourceType) -> str | None:
    if rt.custom:
        return custom_schema_name(rt.group, rt.version, rt.kind)
    return _by_gvk().get((rt.group, rt.version, rt.kind))


def custom_schema_name(group: str, version: str, kind: str) -> str:
    return ".".join(reversed(group.split("."))) + f".{version}.{kind}"


def _closure(schemas: dict[str, Any], names: Iterable[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in out or name not in schemas:
            continue
        out[name] = schemas[name]
        text = orjson.dumps(schemas[name]).decode()
        idx = 0
        while (idx := text.find(REF, idx)) != -1:
            end = text.index('"', idx)
            todo.append(text[idx + len(REF) : end])
            idx = end
    return out


def _ref(name: str) -> dict[str, Any]:
    return {"allOf": [{"$ref": REF + name}]}


def _param(name: str, where: str = "query", kind: str = "string") -> dict[str, Any]:
    return {
        "name": name,
        "in": where,
        "schema": {"type": kind, "uniqueItems": True},
        **({"required": True} if where == "path" else {}),
    }


_LIST_PARAMS = [
    _param(p) for p in ("continue", "fieldSelector", "labelSelector", "resourceVersion", "resourceVersionMatch")
] + [
    _param("allowWatchBookmarks", kind="boolean"),
    _param("limit", kind="integer"),
    _param("sendInitialEvents", kind="boolean"),
    _param("timeoutSeconds", kind="integer"),
    _param("watch", kind="boolean"),
]
_WRITE_PARAMS = [_param("dryRun"), _param("fieldManager"), _param("fieldValidation")]


def _op(
    rt: ResourceType,
    action: str,
    body: str | None,
    response: str | None,
    params: list[dict[str, Any]],
    patch_types: tuple[str, ...] = (),
    kind: tuple[str, str, str] | None = None,
) -> dict[str, Any]:
    group, version, k = kind or (rt.group, rt.version, rt.kind)
    op: dict[str, Any] = {
        "operationId": f"{action}{rt.kind}",
        "parameters": params,
        "responses": {"200": {"description": "OK"}, "401": {"description": "Unauthorized"}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": group, "version": version, "kind": k},
    }
    if response:
        op["responses"]["200"]["content"] = {"application/json": {"schema": {"$ref": REF + response}}}
    if body:
        op["requestBody"] = {"content": {"*/*": {"schema": {"$ref": REF + body}}}, "required": True}
    if patch_types:
        op["requestBody"] = {
            "content": {t: {"schema": {"$ref": REF + META + "Patch"}} for t in patch_types},
            "required": True,
        }
    return op


def _paths(rt: ResourceType, name: str, list_name: str | None) -> dict[str, Any]:
    prefix = f"/apis/{rt.group}/{rt.version}" if rt.group else f"/api/{rt.version}"
    scoped = f"{prefix}/namespaces/{{namespace}}/{rt.plural}" if rt.namespaced else f"{prefix}/{rt.plural}"
    ns = [_param("namespace", "path")] if rt.namespaced else []
    patch_types = PATCH_TYPES_CUSTOM if rt.custom else PATCH_TYPES_BUILTIN
    paths: dict[str, Any] = {}
    coll: dict[str, Any] = {"parameters": ns}
    if "list" in rt.verbs:
        coll["get"] = _op(rt, "list", None, list_name, _LIST_PARAMS)
        if rt.namespaced:
            paths[f"{prefix}/{rt.plural}"] = {"get": _op(rt, "list", None, list_name, _LIST_PARAMS)}
    if "create" in rt.verbs:
        coll["post"] = _op(rt, "post", name, name, _WRITE_PARAMS)
    if "deletecollection" in rt.verbs:
        coll["delete"] = _op(rt, "deletecollection", META + "DeleteOptions", META + "Status", _LIST_PARAMS)
    paths[scoped] = coll
    if "get" not in rt.verbs:
        return paths
    item = {
        "parameters": [*ns, _param("name", "path")],
        "get": _op(rt, "get", None, name, []),
        "put": _op(rt, "put", name, name, _WRITE_PARAMS),
        "patch": _op(rt, "patch", None, name, [*_WRITE_PARAMS, _param("force", kind="boolean")], patch_types),
        "delete": _op(
            rt,
            "delete",
            META + "DeleteOptions",
            META + "Status",
            [_param("dryRun"), _param("gracePeriodSeconds", kind="integer"), _param("propagationPolicy")],
        ),
    }
    paths[scoped + "/{name}"] = item
    for sub in rt.subresources:
        if sub in ("status", "scale"):
            kind = ("autoscaling", "v1", "Scale") if sub == "scale" else None
            body = "io.k8s.api.autoscaling.v1.Scale" if sub == "scale" else name
            paths[f"{scoped}/{{name}}/{sub}"] = {
                "parameters": item["parameters"],
                "get": _op(rt, "get", None, body, [], kind=kind),
                "put": _op(rt, "put", body, body, _WRITE_PARAMS, kind=kind),
                "patch": _op(
                    rt, "patch", None, body, [*_WRITE_PARAMS, _param("force", kind="boolean")], patch_types, kind=kind
                ),
            }
    return paths


def _custom_schemas(crds: Iterable[dict[str, Any]], group: str, version: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for crd in crds:
        spec = crd.get("spec") or {}
        if spec.get("group") != group:
            continue
        kind = spec.get("names", {}).get("kind", "")
        for v in spec.get("versions") or []:
            if v.get("name") != version:
                continue
            schema = copy.deepcopy(
                ((v.get("schema") or {}).get("openAPIV3Schema"))
                or {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
            )
            props = schema.setdefault("properties", {})
            props["apiVersion"] = {"type": "string"}
            props["kind"] = {"type": "string"}
            props["metadata"] = _ref(META + "ObjectMeta")
            schema["type"] = "object"
            schema["x-kubernetes-group-version-kind"] = [{"group": group, "version": version, "kind": kind}]
            out[custom_schema_name(group, version, kind)] = schema
            out[custom_schema_name(group, version, kind + "List")] = {
                "type": "object",
                "properties": {
                    "items": {"type": "array", "items": _ref(custom_schema_name(group, version, kind))},
                    "metadata": _ref(META + "ListMeta"),
                },
                "x-kubernetes-group-version-kind": [{"group": group, "version": version, "kind": kind + "List"}],
            }
    return out


def gv_document(
    registry: Registry, crds: Iterable[dict[str, Any]], group: str, version: str, kube_version: str
) -> dict[str, Any]:
    types = registry.in_group_version(group, version)
    if not types:
        raise StatusError(404, "the server could not find the requested resource")
    schemas = dict(definitions())
    if any(rt.custom for rt in types):
        schemas.update(_custom_schemas(crds, group, version))
    paths: dict[str, Any] = {}
    wanted: list[str] = [META + "Status", META + "DeleteOptions", META + "Patch"]
    for rt in types:
        name = schema_name(rt)
        if name is None or name not in schemas:
            continue
        list_name = (
            _by_gvk().get((rt.group, rt.version, rt.list_kind))
            if not rt.custom
            else custom_schema_name(rt.group, rt.version, rt.list_kind)
        )
        wanted += [name] + ([list_name] if list_name else [])
        if "scale" in rt.subresources:
            wanted.append("io.k8s.api.autoscaling.v1.Scale")
        paths.update(_paths(rt, name, list_name))
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": kube_version},
        "paths": paths,
        "components": {"schemas": _closure(schemas, wanted)},
    }


def document_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def etag(doc: dict[str, Any]) -> str:
    return hashlib.sha512(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)).hexdigest()[:64].upper()


# -- unknown fields ---------------------------------------------------------------------------


def _resolve(schema: dict[str, Any], schemas: dict[str, Any]) -> dict[str, Any]:
    while True:
        ref = schema.get("$ref") or (schema.get("allOf") or [{}])[0].get("$ref")
        if not ref:
            return schema
        schema = schemas.get(ref[len(REF) :], {})


def prune(obj: Any, schema: dict[str, Any], schemas: dict[str, Any], path: str = "") -> tuple[Any, list[str]]:
    """Drop fields the schema does not declare, returning (object, unknown field paths)."""
    schema = _resolve(schema, schemas)
    if schema.get("x-kubernetes-preserve-unknown-fields") or schema.get("x-kubernetes-embedded-resource"):
        return obj, []
    unknown: list[str] = []
    if isinstance(obj, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        if props is None and extra is None:
            return obj, []
        out = {}
        for k, v in obj.items():
            sub = f"{path}.{k}" if path else k
            if props is not None and k in props:
                out[k], u = prune(v, props[k], schemas, sub)
            elif isinstance(extra, dict):
                out[k], u = prune(v, extra, schemas, sub)
            elif extra is True:
                out[k], u = v, []
            else:
                unknown.append(sub)
                continue
            unknown += u
        return out, unknown
    if isinstance(obj, list) and isinstance(schema.get("items"), dict):
        out_list = []
        for i, v in enumerate(obj):
            item, u = prune(v, schema["items"], schemas, f"{path}[{i}]")
            out_list.append(item)
            unknown += u
        return out_list, unknown
    return obj, []


# -- decoding types ---------------------------------------------------------------------------

QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
# Types whose JSON decoding takes any value, whatever their schema says.
_ANY_JSON = {
    "io.k8s.apimachinery.pkg.runtime.RawExtension",
    "io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSON",
}
_INT_RANGE = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


def _resolve_named(schema: dict[str, Any], schemas: dict[str, Any]) -> tuple[dict[str, Any], str]:
    name = ""
    while True:
        ref = schema.get("$ref") or (schema.get("allOf") or [{}])[0].get("$ref")
        if not ref:
            return schema, name
        name = ref[len(REF) :]
        schema = schemas.get(name, {})


def _go_type(schema: dict[str, Any], schemas: dict[str, Any]) -> str:
    """The Go type a schema stands for, as encoding/json names it in errors (v1.DeploymentSpec, map[string]string)."""
    schema, name = _resolve_named(schema, schemas)
    if name:
        return ".".join(name.split(".")[-2:])
    kind = schema.get("type")
    if kind == "integer":
        return schema.get("format") or "int"
    if kind == "array":
        return "[]" + _go_type(schema.get("items") or {}, schemas)
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return "map[string]" + _go_type(schema["additionalProperties"], schemas)
    return {"number": "float64", "boolean": "bool", "string": "string"}.get(kind or "", "interface {}")


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def decode_error(
    obj: Any, schema: dict[str, Any], schemas: dict[str, Any], path: str = "", struct: str = ""
) -> str | None:
    """The first error Go's encoding/json reports decoding `obj` into the built-in type `schema` describes.

    Only fields the schema declares are checked (unknown ones are pruned, not decoded). Go names
    the innermost struct and the path of struct fields, without map keys or list indexes.
    """
    schema, name = _resolve_named(schema, schemas)
    if obj is None or name in _ANY_JSON:
        return None
    kind, fmt = schema.get("type"), schema.get("format")
    number = isinstance(obj, (int, float)) and not isinstance(obj, bool)
    if name == QUANTITY:
        ok = isinstance(obj, str) or number
    elif fmt == "int-or-string":
        ok = isinstance(obj, str) or (number and isinstance(obj, int))
    elif kind == "object" or "properties" in schema:
        if not isinstance(obj, dict):
            ok = False
        else:
            props = schema.get("properties") or {}
            extra = schema.get("additionalProperties")
            inner = name.rsplit(".", 1)[-1] if name and props else struct
            for k, v in obj.items():
                if k in props:
                    problem = decode_error(v, props[k], schemas, f"{path}.{k}" if path else k, inner)
                elif isinstance(extra, dict):
                    problem = decode_error(v, extra, schemas, path, struct)
                else:
                    continue
                if problem:
                    return problem
            return None
    elif kind == "array":
        if not isinstance(obj, list):
            ok = False
        else:
            for v in obj:
                problem = decode_error(v, schema.get("items") or {}, schemas, path, struct)
                if problem:
                    return problem
            return None
    elif kind == "integer":
        low, high = _INT_RANGE.get(fmt or "int64", _INT_RANGE["int64"])
        ok = number and isinstance(obj, int) and low <= obj <= high
    elif kind == "number":
        ok = number
    elif kind == "boolean":
        ok = isinstance(obj, bool)
    elif kind == "string":
        ok = isinstance(obj, str)
    else:
        ok = True
    if ok:
        return None
    # Go quotes the number only when it is one but does not fit the integer type.
    what = f"number {obj}" if number and kind == "integer" else _json_kind(obj)
    go_type = ".".join(name.split(".")[-2:]) if name else _go_type(schema, schemas)
    return f"json: cannot unmarshal {what} into Go struct field {struct}.{path} of type {go_type}"


class FieldValidator:
    """Per-cluster access to the schemas of its kinds, including its CRDs."""

    def __init__(self, registry: Registry, crds: Any) -> None:
        self.registry = registry
        self._crds = crds  # callable returning the stored CRDs

    def check(self, rt: ResourceType, obj: dict[str, Any], mode: str) -> tuple[dict[str, Any], list[str]]:
        """Prune unknown fields; Strict makes them a 400, Warn returns them as warnings."""
        if mode not in ("", "Ignore", "Warn", "Strict"):
            raise StatusError(
                400, f'fieldValidation: Unsupported value: "{mode}": supported values: "Ignore", "Strict", "Warn"'
            )
        name = schema_name(rt)
        schemas = definitions()
        if rt.custom:
            schemas = {**schemas, **_custom_schemas(self._crds(), rt.group, rt.version)}
        schema = schemas.get(name or "")
        if schema is None:
            return obj, []
        if not rt.custom:  # custom resources get their types checked by validation (422), not by decoding
            problem = decode_error(obj, schema, schemas, struct=rt.kind)
            if problem:
                raise StatusError(
                    400, f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: {problem}'
                )
        pruned, unknown = prune(obj, schema, schemas)
        if unknown and mode == "Strict":
            text = ", ".join(f'unknown field "{u}"' for u in unknown)
            raise StatusError(
                400,
                f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: strict decoding error: {text}',
            )
        return pruned, ([] if mode == "Ignore" else [f'unknown field "{u}"' for u in unknown])
