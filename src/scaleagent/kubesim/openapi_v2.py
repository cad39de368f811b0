"""OpenAPI v2 (Swagger 2.0) for clients that predate OpenAPI v3, such as kubectl before 1.27.

Those clients ask only for the protobuf form (gnostic's `openapi.v2.Document`), so it is served
that way too. The encoder below writes the protobuf wire format for the part of that message
family kubesim's documents use; field numbers follow gnostic's OpenAPIv2.proto. Vendor
extensions travel as YAML text inside `Any`, which is how kube-openapi reads them back.
"""

from __future__ import annotations

import functools
import struct
from typing import Any

import orjson
import yaml

from . import openapi
from .resources import Registry, ResourceType

PROTOBUF = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
V3_REF = openapi.REF
V2_REF = "#/definitions/"


# -- the Swagger 2.0 document -----------------------------------------------------------------


def _to_v2(node: Any) -> Any:
    """v3 component schemas to v2 definitions: direct $refs under #/definitions/."""
    if isinstance(node, list):
        return [_to_v2(v) for v in node]
    if not isinstance(node, dict):
        return node
    # A property may itself be named "$ref" (JSONSchemaProps): only a string value is a reference.
    ref = node.get("$ref")
    one = node.get("allOf")
    if isinstance(one, list) and len(one) == 1 and isinstance(one[0].get("$ref"), str):
        ref = one[0]["$ref"]
    if isinstance(ref, str):
        return {"$ref": V2_REF + ref[len(V3_REF) :]}
    return {k: _to_v2(v) for k, v in node.items()}


def _query(name: str, kind: str = "string") -> dict[str, Any]:
    return {"name": name, "in": "query", "type": kind, "uniqueItems": True}


def _op(
    rt: ResourceType,
    action: str,
    body: str | None,
    response: str | None,
    consumes: list[str],
    params: list[dict[str, Any]],
    gvk: tuple[str, str, str] | None = None,
) -> dict[str, Any]:
    group, version, kind = gvk or (rt.group, rt.version, rt.kind)
    parameters = list(params)
    if body:
        parameters.append({"name": "body", "in": "body", "required": True, "schema": {"$ref": V2_REF + body}})
    op: dict[str, Any] = {
        "operationId": f"{action}{rt.kind}",
        "consumes": consumes,
        "produces": ["application/json", "application/yaml"],
        "schemes": ["https"],
        "parameters": parameters,
        "responses": {
            "200": {"description": "OK", **({"schema": {"$ref": V2_REF + response}} if response else {})},
            "401": {"description": "Unauthorized"},
        },
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": group, "kind": kind, "version": version},
    }
    return op


def _paths(rt: ResourceType, name: str, list_name: str | None) -> dict[str, Any]:
    prefix = f"/apis/{rt.group}/{rt.version}" if rt.group else f"/api/{rt.version}"
    scoped = f"{prefix}/namespaces/{{namespace}}/{rt.plural}" if rt.namespaced else f"{prefix}/{rt.plural}"
    ns = (
        [{"name": "namespace", "in": "path", "required": True, "type": "string", "uniqueItems": True}]
        if rt.namespaced
        else []
    )
    write = [_query("dryRun"), _query("fieldManager"), _query("fieldValidation")]
    patch_types = list(openapi.PATCH_TYPES_CUSTOM if rt.custom else openapi.PATCH_TYPES_BUILTIN)
    out: dict[str, Any] = {}
    coll: dict[str, Any] = {"parameters": ns}
    if "list" in rt.verbs:
        coll["get"] = _op(rt, "list", None, list_name, ["*/*"], [_query("labelSelector"), _query("limit", "integer")])
    if "create" in rt.verbs:
        coll["post"] = _op(rt, "post", name, name, ["*/*"], write)
    out[scoped] = coll
    if "get" in rt.verbs:
        out[scoped + "/{name}"] = {
            "parameters": [
                *ns,
                {"name": "name", "in": "path", "required": True, "type": "string", "uniqueItems": True},
            ],
            "get": _op(rt, "get", None, name, ["*/*"], []),
            "put": _op(rt, "put", name, name, ["*/*"], write),
            "patch": _op(rt, "patch", openapi.META + "Patch", name, patch_types, [*write, _query("force", "boolean")]),
            "delete": _op(
                rt,
                "delete",
                openapi.META + "DeleteOptions",
                openapi.META + "Status",
                ["*/*"],
                [_query("propagationPolicy")],
            ),
        }
    return out


def swagger_document(registry: Registry, kube_version: str) -> dict[str, Any]:
    """The cluster's Swagger 2.0 document, for its built-in kinds."""
    schemas = openapi.definitions()
    paths: dict[str, Any] = {}
    for rt in registry.types:
        if rt.custom:
            continue
        name = openapi.schema_name(rt)
        if name is None:
            continue
        paths.update(_paths(rt, name, openapi._by_gvk().get((rt.group, rt.version, rt.list_kind))))
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": kube_version},
        "paths": paths,
        "definitions": {n: _to_v2(s) for n, s in sorted(schemas.items())},
    }


# -- protobuf wire format ---------------------------------------------------------------------


def _varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _bytes(field: int, data: bytes) -> bytes:
    return _key(field, 2) + _varint(len(data)) + data


def _str(field: int, value: str | None) -> bytes:
    return _bytes(field, value.encode()) if value else b""


def _strs(field: int, values: list[str] | None) -> bytes:
    return b"".join(_bytes(field, v.encode()) for v in values or ())


def _bool(field: int, value: bool | None) -> bytes:
    return _key(field, 0) + b"\x01" if value else b""


def _int(field: int, value: int | None) -> bytes:
    return _key(field, 0) + _varint(int(value)) if value else b""


def _double(field: int, value: float | None) -> bytes:
    return _key(field, 1) + struct.pack("<d", float(value)) if value else b""


def _msg(field: int, data: bytes, always: bool = False) -> bytes:
    return _bytes(field, data) if (data or always) else b""


def _any(value: Any) -> bytes:
    """gnostic Any: the YAML text of the value in field 2."""
    return _str(2, yaml.safe_dump(value, default_flow_style=False, sort_keys=True))


def _named(field: int, name: str, value: bytes) -> bytes:
    return _bytes(field, _str(1, name) + _msg(2, value, always=True))


def _extensions(field: int, node: dict[str, Any]) -> bytes:
    return b"".join(_named(field, k, _any(v)) for k, v in node.items() if k.startswith("x-"))


def _schema(s: dict[str, Any]) -> bytes:
    t = s.get("type")
    types = [t] if isinstance(t, str) else list(t or ())
    extra = s.get("additionalProperties")
    extra_msg = b""
    if isinstance(extra, dict):
        extra_msg = _msg(1, _schema(extra), always=True)
    elif isinstance(extra, bool):
        extra_msg = _key(2, 0) + (b"\x01" if extra else b"\x00")
    items = s.get("items")
    items_msg = (
        b"".join(_msg(1, _schema(i), always=True) for i in (items if isinstance(items, list) else [items]))
        if items
        else b""
    )
    props = s.get("properties") or {}
    return b"".join(
        [
            _str(1, s.get("$ref")),
            _str(2, s.get("format")),
            _str(3, s.get("title")),
            _str(4, s.get("description")),
            _msg(5, _any(s["default"])) if "default" in s else b"",
            _double(7, s.get("maximum")),
            _double(9, s.get("minimum")),
            _int(11, s.get("maxLength")),
            _int(12, s.get("minLength")),
            _str(13, s.get("pattern")),
            _int(14, s.get("maxItems")),
            _int(15, s.get("minItems")),
            _bool(16, s.get("uniqueItems")),
            _strs(19, s.get("required")),
            b"".join(_msg(20, _any(v), always=True) for v in s.get("enum") or ()),
            _msg(21, extra_msg, always=extra is not None),
            _msg(22, _strs(1, types)),
            _msg(23, items_msg, always=bool(items)),
            b"".join(_msg(24, _schema(a), always=True) for a in s.get("allOf") or ()),
            _msg(25, b"".join(_named(1, k, _schema(v)) for k, v in props.items()), always="properties" in s),
            _bool(27, s.get("readOnly")),
            _extensions(31, s),
        ]
    )


def _parameter(p: dict[str, Any]) -> bytes:
    if p.get("in") == "body":
        body = b"".join(
            [
                _str(1, p.get("description")),
                _str(2, p["name"]),
                _str(3, "body"),
                _bool(4, p.get("required")),
                _msg(5, _schema(p.get("schema") or {}), always=True),
            ]
        )
        parameter = _msg(1, body, always=True)
    elif p.get("in") == "path":
        sub = b"".join(
            [
                _bool(1, p.get("required")),
                _str(2, "path"),
                _str(3, p.get("description")),
                _str(4, p["name"]),
                _str(5, p.get("type")),
                _bool(19, p.get("uniqueItems")),
            ]
        )
        parameter = _msg(2, _msg(4, sub, always=True), always=True)
    else:
        sub = b"".join(
            [
                _bool(1, p.get("required")),
                _str(2, "query"),
                _str(3, p.get("description")),
                _str(4, p["name"]),
                _str(6, p.get("type")),
                _bool(20, p.get("uniqueItems")),
            ]
        )
        parameter = _msg(2, _msg(3, sub, always=True), always=True)
    return _msg(1, parameter, always=True)  # ParametersItem.parameter


def _operation(op: dict[str, Any]) -> bytes:
    responses = b"".join(
        _named(
            1,
            code,
            _msg(
                1,
                b"".join(
                    [
                        _str(1, r.get("description")),
                        _msg(2, _msg(1, _schema(r["schema"]), always=True)) if "schema" in r else b"",
                    ]
                ),
                always=True,
            ),
        )
        for code, r in op.get("responses", {}).items()
    )
    return b"".join(
        [
            _strs(1, op.get("tags")),
            _str(3, op.get("description")),
            _str(5, op.get("operationId")),
            _strs(6, op.get("produces")),
            _strs(7, op.get("consumes")),
            b"".join(_msg(8, _parameter(p), always=True) for p in op.get("parameters") or ()),
            _msg(9, responses, always=True),
            _strs(10, op.get("schemes")),
            _extensions(13, op),
        ]
    )


_METHODS = {"get": 2, "put": 3, "post": 4, "delete": 5, "patch": 8}


def _path_item(item: dict[str, Any]) -> bytes:
    ops = b"".join(_msg(f, _operation(item[m]), always=True) for m, f in _METHODS.items() if m in item)
    params = b"".join(_msg(9, _parameter(p), always=True) for p in item.get("parameters") or ())
    return ops + params


def encode(doc: dict[str, Any]) -> bytes:
    """gnostic openapi.v2.Document for a Swagger 2.0 document."""
    info = doc.get("info") or {}
    paths = b"".join(_named(2, p, _path_item(item)) for p, item in doc.get("paths", {}).items())
    definitions = b"".join(_named(1, n, _schema(s)) for n, s in doc.get("definitions", {}).items())
    return b"".join(
        [
            _str(1, doc.get("swagger")),
            _msg(2, _str(1, info.get("title")) + _str(2, info.get("version")), always=True),
            _msg(8, paths, always=True),
            _msg(9, definitions, always=True),
        ]
    )


@functools.lru_cache(maxsize=4)
def render(kube_version: str, protobuf: bool) -> bytes:
    """The document as bytes. It covers the built-in kinds only, so one serves every cluster."""
    doc = swagger_document(Registry(), kube_version)
    return encode(doc) if protobuf else orjson.dumps(doc)
