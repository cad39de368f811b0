"""Label and field selectors behave like k8s.io/apimachinery and the apiserver."""

import pytest

from scaleagent.kube.errors import SelectorError
from scaleagent.kube.selectors import (
    LabelSelector,
    label_selector_from_dict,
    label_selector_from_set,
    parse_label_selector,
)
from scaleagent.kubesim.field_selectors import (
    FieldSelector,
    escape_field_value,
    object_fields,
    parse_field_selector,
    supported_fields,
)

# ---------------------------------------------------------------- label selectors


def test_empty_label_selector_matches_everything():
    sel = parse_label_selector("")
    assert sel.empty
    assert sel.matches({})
    assert sel.matches(None)
    assert sel.matches({"app": "web"})
    assert str(sel) == ""


def test_equality_based_requirements():
    sel = parse_label_selector("app=web,tier==frontend,env!=prod")
    assert sel.matches({"app": "web", "tier": "frontend"})
    assert sel.matches({"app": "web", "tier": "frontend", "env": "dev"})
    assert not sel.matches({"app": "web", "tier": "frontend", "env": "prod"})
    assert not sel.matches({"app": "web"})


def test_not_equals_matches_when_key_is_absent():
    assert parse_label_selector("env!=prod").matches({})


def test_set_based_requirements():
    sel = parse_label_selector("env in (prod, staging),tier notin (cache)")
    assert sel.matches({"env": "prod"})
    assert sel.matches({"env": "staging", "tier": "web"})
    assert not sel.matches({"env": "dev"})
    assert not sel.matches({"env": "prod", "tier": "cache"})
    # notin also matches when the key is missing; in does not
    assert parse_label_selector("tier notin (cache)").matches({})
    assert not parse_label_selector("env in (prod)").matches({})


def test_exists_and_does_not_exist():
    assert parse_label_selector("app").matches({"app": ""})
    assert not parse_label_selector("app").matches({"other": "x"})
    assert parse_label_selector("!canary").matches({"app": "web"})
    assert not parse_label_selector("!canary").matches({"canary": "true"})


def test_integer_comparison_operators():
    sel = parse_label_selector("replicas>2")
    assert sel.matches({"replicas": "3"})
    assert not sel.matches({"replicas": "2"})
    assert not sel.matches({"replicas": "many"})
    assert parse_label_selector("replicas<2").matches({"replicas": "1"})


def test_whitespace_is_tolerated_and_output_is_canonical():
    sel = parse_label_selector("  tier != fe ,  env in ( prod ,dev )  , app ")
    # sorted by key, set values sorted, no whitespace
    assert str(sel) == "app,env in (dev,prod),tier!=fe"


def test_keywords_are_plain_identifiers_in_value_position():
    sel = parse_label_selector("in in (in,notin)")
    assert sel.matches({"in": "notin"})


def test_empty_values():
    assert parse_label_selector("a=").matches({"a": ""})
    assert parse_label_selector("a in ()").matches({"a": ""})


def test_prefixed_keys_are_valid():
    sel = parse_label_selector("app.kubernetes.io/name=web")
    assert sel.matches({"app.kubernetes.io/name": "web"})


def test_requires_exact_match():
    sel = parse_label_selector("app=web,env in (prod),tier in (a,b)")
    assert sel.requires_exact_match("app") == "web"
    assert sel.requires_exact_match("env") == "prod"
    assert sel.requires_exact_match("tier") is None


@pytest.mark.parametrize(
    "text, message",
    [
        ("a=b,", "found '', expected: identifier after ','"),
        ("a=b c", "found 'c', expected: ',' or 'end of string'"),
        ("a b", "unable to parse requirement: found 'b', expected: '=', '!=', '==', 'in', notin'"),
        ("a in x", "unable to parse requirement: found 'x' expected: '('"),
        ("=b", "found '=', expected: !, identifier, or 'end of string'"),
        ("!a=b", "found '=', expected: ',' or 'end of string'"),
    ],
)
def test_syntax_errors_carry_apiserver_messages(text, message):
    with pytest.raises(SelectorError) as exc:
        parse_label_selector(text)
    assert str(exc.value) == message


def test_invalid_key_is_reported_like_the_apiserver():
    with pytest.raises(SelectorError) as exc:
        parse_label_selector("app:monolith")
    assert str(exc.value) == (
        'unable to parse requirement: <nil>: Invalid value: "app:monolith": name part must consist of '
        "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character "
        "(e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
        "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
    )


def test_invalid_key_prefix_is_rejected():
    with pytest.raises(SelectorError, match="prefix part a lowercase RFC 1123 subdomain"):
        parse_label_selector("Example.com/app=x")


def test_invalid_value_is_reported_with_its_field_path():
    with pytest.raises(SelectorError) as exc:
        parse_label_selector("app=-web")
    assert str(exc.value).startswith(
        'unable to parse requirement: values[0][app]: Invalid value: "-web": a valid label'
    )


def test_too_long_value_is_rejected():
    with pytest.raises(SelectorError, match="must be no more than 63 characters"):
        parse_label_selector("app=" + "x" * 64)


def test_gt_requires_an_integer():
    with pytest.raises(SelectorError, match="for 'Gt', 'Lt' operators, the value must be an integer"):
        parse_label_selector("replicas>abc")


# ---------------------------------------------------------------- metav1.LabelSelector


def test_nil_selector_matches_nothing_and_empty_selector_matches_everything():
    nothing = label_selector_from_dict(None)
    assert nothing.matches_nothing
    assert not nothing.empty
    assert not nothing.matches({})
    assert not nothing.matches({"app": "web"})

    for empty in ({}, {"matchLabels": {}, "matchExpressions": []}):
        everything = label_selector_from_dict(empty)
        assert everything.empty
        assert everything.matches({"anything": "goes"})


def test_match_labels_and_expressions():
    sel = label_selector_from_dict(
        {
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "env", "operator": "In", "values": ["prod", "staging"]},
                {"key": "tier", "operator": "NotIn", "values": ["cache"]},
                {"key": "team", "operator": "Exists"},
                {"key": "canary", "operator": "DoesNotExist"},
            ],
        }
    )
    assert sel.matches({"app": "web", "env": "prod", "team": "a"})
    assert not sel.matches({"app": "web", "env": "prod"})  # team missing
    assert not sel.matches({"app": "web", "env": "prod", "team": "a", "canary": "1"})
    assert str(sel) == "app=web,!canary,env in (prod,staging),team,tier notin (cache)"


def test_structured_selector_errors():
    with pytest.raises(SelectorError) as exc:
        label_selector_from_dict({"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["b"]}]})
    assert str(exc.value) == '"Equals" is not a valid label selector operator'

    with pytest.raises(SelectorError) as exc:
        label_selector_from_dict({"matchExpressions": [{"key": "a", "operator": "In"}]})
    assert str(exc.value) == (
        "values: Invalid value: []string(nil): for 'in', 'notin' operators, values set can't be empty"
    )

    with pytest.raises(SelectorError, match=r'^key: Invalid value: "a b"'):
        label_selector_from_dict({"matchLabels": {"a b": "c"}})


def test_selector_from_set():
    assert label_selector_from_set(None).empty
    sel = label_selector_from_set({"b": "2", "a": "1"})
    assert str(sel) == "a=1,b=2"
    assert sel.matches({"a": "1", "b": "2", "c": "3"})
    assert not sel.matches({"a": "1"})


def test_label_selector_is_immutable_and_hashable():
    a = parse_label_selector("b=2,a=1")
    b = parse_label_selector("a=1,b=2")
    assert a == b and hash(a) == hash(b)
    with pytest.raises(AttributeError):
        a.foo = 1  # type: ignore[attr-defined]
    assert LabelSelector.everything() != LabelSelector.nothing()


# ---------------------------------------------------------------- field selectors

POD_FIELDS = supported_fields("Pod")


def test_field_selector_equality_and_inequality():
    sel = parse_field_selector("status.phase=Running,spec.nodeName!=node-1", POD_FIELDS)
    assert sel.requirements == [("spec.nodeName", "!=", "node-1"), ("status.phase", "=", "Running")]
    assert sel.matches({"status.phase": "Running", "spec.nodeName": "node-2"})
    assert not sel.matches({"status.phase": "Running", "spec.nodeName": "node-1"})
    assert not sel.matches({"status.phase": "Pending"})


def test_double_equals_is_plain_equality():
    assert parse_field_selector("metadata.name==web", POD_FIELDS).requirements == [("metadata.name", "=", "web")]


def test_empty_field_selector_and_trailing_comma():
    assert parse_field_selector("", POD_FIELDS).empty
    assert parse_field_selector("metadata.name=a,", POD_FIELDS).requirements == [("metadata.name", "=", "a")]


def test_missing_field_reads_as_empty_string():
    sel = parse_field_selector("spec.nodeName=", POD_FIELDS)
    assert sel.matches({})
    assert not sel.matches({"spec.nodeName": "n1"})


def test_field_selector_escapes():
    sel = parse_field_selector(r"metadata.name=a\,b\=c\\d", POD_FIELDS)
    assert sel.requirements == [("metadata.name", "=", "a,b=c\\d")]
    assert str(sel) == r"metadata.name=a\,b\=c\\d"
    assert escape_field_value("a,b=c\\d") == r"a\,b\=c\\d"
    # '!' needs no escape: the first operator in a term wins
    assert parse_field_selector("metadata.name!=a!b", POD_FIELDS).requirements == [("metadata.name", "!=", "a!b")]


@pytest.mark.parametrize(
    "text, message",
    [
        ("metadata.name", "invalid selector: 'metadata.name'; can't understand 'metadata.name'"),
        ("metadata.name=a,b", "invalid selector: 'metadata.name=a,b'; can't understand 'b'"),
        ("metadata.name=a=b", "invalid field selector: unescaped character in value: 61"),
        (r"metadata.name=a\x", "invalid field selector: invalid escape sequence: \\x"),
        ("metadata.name=a\\", "invalid field selector: invalid escape sequence: \\"),
    ],
)
def test_field_selector_syntax_errors(text, message):
    with pytest.raises(SelectorError) as exc:
        parse_field_selector(text, POD_FIELDS)
    assert str(exc.value) == message


def test_unsupported_field_label():
    with pytest.raises(SelectorError) as exc:
        parse_field_selector("spec.foo=bar", POD_FIELDS)
    assert str(exc.value) == "field label not supported: spec.foo"


def test_unsupported_field_messages_follow_the_kind():
    with pytest.raises(SelectorError) as exc:
        parse_field_selector("status.replicas=1", supported_fields("ReplicaSet"), kind="ReplicaSet")
    assert str(exc.value) == (
        '"status.replicas" is not a known field selector: only "metadata.name", "metadata.namespace"'
    )
    with pytest.raises(SelectorError) as exc:
        parse_field_selector("status.active=1", supported_fields("Job"), kind="Job")
    assert str(exc.value) == 'field label "status.active" not supported for Job'


def test_cluster_scoped_builtins_reject_metadata_namespace():
    with pytest.raises(SelectorError, match="field label not supported: metadata.namespace"):
        parse_field_selector("metadata.namespace=x", supported_fields("Node"), kind="Node")


def test_legacy_spec_host_alias():
    sel = parse_field_selector("spec.host=node-1", POD_FIELDS, kind="Pod")
    assert sel.requirements == [("spec.nodeName", "=", "node-1")]


def test_none_supported_skips_field_validation():
    sel = parse_field_selector("anything.at.all=x", None)
    assert sel.requirements == [("anything.at.all", "=", "x")]


def test_field_selector_requires_exact_match():
    sel = parse_field_selector("metadata.name=web,status.phase!=Failed", POD_FIELDS)
    assert sel.requires_exact_match("metadata.name") == "web"
    assert sel.requires_exact_match("status.phase") is None
    assert FieldSelector.everything().matches({"x": "y"})


# ---------------------------------------------------------------- object fields


def test_pod_object_fields():
    pod = {
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "nodeName": "n1",
            "restartPolicy": "Always",
            "serviceAccountName": "sa",
            "schedulerName": "default-scheduler",
        },
        "status": {"phase": "Running", "podIP": "10.0.0.9", "podIPs": [{"ip": "10.0.0.7"}]},
    }
    f = object_fields(pod, "Pod")
    assert f["metadata.name"] == "web"
    assert f["metadata.namespace"] == "default"
    assert f["spec.nodeName"] == "n1"
    assert f["spec.restartPolicy"] == "Always"
    assert f["spec.schedulerName"] == "default-scheduler"
    assert f["spec.serviceAccountName"] == "sa"
    assert f["spec.hostNetwork"] == "false"
    assert f["status.phase"] == "Running"
    assert f["status.podIP"] == "10.0.0.7"  # first of podIPs, as upstream
    assert f["status.nominatedNodeName"] == ""
    assert object_fields({"metadata": {}, "spec": {"hostNetwork": True}}, "Pod")["spec.hostNetwork"] == "true"


def test_field_selector_against_objects():
    pods = [
        {"metadata": {"name": "a", "namespace": "ns"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}},
        {"metadata": {"name": "b", "namespace": "ns"}, "spec": {}, "status": {"phase": "Pending"}},
    ]
    sel = parse_field_selector("spec.nodeName=,status.phase!=Running", POD_FIELDS)
    assert [p["metadata"]["name"] for p in pods if sel.matches(object_fields(p, "Pod"))] == ["b"]


def test_other_kinds_object_fields():
    assert (
        object_fields({"metadata": {"name": "n"}, "spec": {"unschedulable": True}}, "Node")["spec.unschedulable"]
        == "true"
    )
    assert (
        object_fields({"metadata": {"name": "s"}, "type": "kubernetes.io/tls"}, "Secret")["type"] == "kubernetes.io/tls"
    )
    assert (
        object_fields({"metadata": {"name": "ns"}, "status": {"phase": "Active"}}, "Namespace")["status.phase"]
        == "Active"
    )
    assert object_fields({"metadata": {}, "status": {"succeeded": 3}}, "Job")["status.successful"] == "3"
    assert object_fields({"metadata": {}, "status": {}}, "ReplicationController")["status.replicas"] == "0"
    svc = object_fields({"metadata": {}, "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.1"}}, "Service")
    assert (svc["spec.type"], svc["spec.clusterIP"]) == ("ClusterIP", "10.96.0.1")


def test_event_object_fields_in_both_api_shapes():
    core = {
        "apiVersion": "v1",
        "metadata": {"name": "e", "namespace": "ns"},
        "involvedObject": {"kind": "Pod", "name": "web", "namespace": "ns"},
        "reason": "Scheduled",
        "type": "Normal",
        "reportingComponent": "default-scheduler",
        "source": {},
    }
    f = object_fields(core, "Event")
    assert f["involvedObject.kind"] == "Pod"
    assert f["involvedObject.name"] == "web"
    assert f["source"] == "default-scheduler"  # falls back to the reporting controller
    new = {
        "apiVersion": "events.k8s.io/v1",
        "metadata": {"name": "e", "namespace": "ns"},
        "regarding": {"kind": "Pod", "name": "web"},
        "reportingController": "kubelet",
        "reason": "Pulled",
        "type": "Normal",
    }
    f = object_fields(new, "Event")
    assert (f["involvedObject.name"], f["reportingComponent"], f["source"]) == ("web", "kubelet", "kubelet")


def test_supported_fields_lists():
    assert {"spec.nodeName", "status.phase", "status.podIP", "spec.hostNetwork"} <= supported_fields("Pod")
    assert supported_fields("Secret") == {"metadata.name", "metadata.namespace", "type"}
    assert supported_fields("Node") == {"metadata.name", "spec.unschedulable"}
    assert supported_fields("ConfigMap") == {"metadata.name", "metadata.namespace"}
    assert supported_fields("Widget", namespaced=False) == {"metadata.name"}
    assert "involvedObject.name" in supported_fields("Event")
