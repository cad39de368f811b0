"""The OpenAPI documents clients read to validate and to compute apply patches."""

from __future__ import annotations

import yaml

from scaleagent.kubesim import openapi, openapi_v2
from scaleagent.kubesim.resources import BUILTIN, Registry

CRD = {
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {"spec": {"type": "object", "properties": {"size": {"type": "integer"}}}},
                    }
                },
            }
        ],
    },
}


def test_every_served_builtin_kind_has_kubernetes_schema():
    missing = [f"{rt.group}/{rt.version} {rt.kind}" for rt in BUILTIN if openapi.schema_name(rt) is None]
    assert missing == []


def test_apps_document_lets_kubectl_use_strategic_merge_and_server_validation():
    doc = openapi.gv_document(Registry(), [], "apps", "v1", "v1.30.0")
    patch = doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {"group": "apps", "version": "v1", "kind": "Deployment"}
    assert "application/strategic-merge-patch+json" in patch["requestBody"]["content"]
    assert any(p["name"] == "fieldValidation" and p["in"] == "query" for p in patch["parameters"])
    schemas = doc["components"]["schemas"]
    containers = schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"]
    assert containers["x-kubernetes-patch-merge-key"] == "name"
    assert containers["x-kubernetes-list-map-keys"] == ["name"]
    assert "io.k8s.api.batch.v1.Job" not in schemas  # only what the group's kinds reach


def test_custom_resources_get_their_crd_schema_and_no_strategic_merge():
    reg = Registry()
    reg.set_custom(CRD)
    doc = openapi.gv_document(reg, [CRD], "example.com", "v1", "v1.30.0")
    patch = doc["paths"]["/apis/example.com/v1/namespaces/{namespace}/widgets/{name}"]["patch"]
    assert "application/strategic-merge-patch+json" not in patch["requestBody"]["content"]
    assert doc["components"]["schemas"]["com.example.v1.Widget"]["properties"]["spec"]["properties"]["size"]


def test_unknown_fields_are_pruned_and_named():
    reg = Registry()
    validator = openapi.FieldValidator(reg, lambda: [])
    rt = reg.lookup("", "v1", "configmaps")
    obj, unknown = validator.check(
        rt, {"metadata": {"name": "x", "labelz": {}}, "data": {"a": "b"}, "extra": 1}, "Warn"
    )
    assert obj == {"metadata": {"name": "x"}, "data": {"a": "b"}}
    assert unknown == ['unknown field "metadata.labelz"', 'unknown field "extra"']


# A minimal protobuf wire reader, enough to look inside the encoded document.
def _read(data: bytes) -> list[tuple[int, int, object]]:
    out, i = [], 0

    def varint() -> int:
        nonlocal i
        shift = n = 0
        while True:
            b = data[i]
            i += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return n

    while i < len(data):
        key = varint()
        field, wire = key >> 3, key & 7
        if wire == 0:
            out.append((field, wire, varint()))
        elif wire == 2:
            n = varint()
            out.append((field, wire, data[i : i + n]))
            i += n
        elif wire == 1:
            out.append((field, wire, data[i : i + 8]))
            i += 8
        else:
            raise AssertionError(f"unexpected wire type {wire}")
    return out


def _fields(data: bytes, number: int) -> list:
    return [v for f, _, v in _read(data) if f == number]


def test_v2_protobuf_carries_definitions_with_their_extensions():
    doc = openapi_v2.render("v1.30.0", protobuf=True)
    assert _fields(doc, 1) == [b"2.0"]
    definitions = _fields(doc, 9)[0]
    named = {_fields(n, 1)[0].decode(): _fields(n, 2)[0] for n in _fields(definitions, 1)}
    deployment = named["io.k8s.api.apps.v1.Deployment"]
    extensions = {
        _fields(e, 1)[0].decode(): yaml.safe_load(_fields(_fields(e, 2)[0], 2)[0]) for e in _fields(deployment, 31)
    }
    assert extensions["x-kubernetes-group-version-kind"] == [{"group": "apps", "kind": "Deployment", "version": "v1"}]
    spec_ref = [p for p in _fields(_fields(deployment, 25)[0], 1) if _fields(p, 1)[0] == b"spec"][0]
    assert _fields(_fields(spec_ref, 2)[0], 1) == [b"#/definitions/io.k8s.api.apps.v1.DeploymentSpec"]
