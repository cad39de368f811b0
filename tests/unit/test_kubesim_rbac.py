"""The RBAC authorizer follows kubernetes/plugin/pkg/auth/authorizer/rbac."""

import pytest

from scaleagent.kubesim.rbac import (
    Attributes,
    Authorizer,
    UserInfo,
    aggregated_rules,
    bootstrap_objects,
    forbidden_message,
    service_account_user,
)

ALICE = UserInfo("alice", ("system:authenticated",))


def cluster_role(name, rules, labels=None, aggregate=None):
    obj = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": rules,
    }
    if labels:
        obj["metadata"]["labels"] = labels
    if aggregate is not None:
        obj["aggregationRule"] = {"clusterRoleSelectors": aggregate}
    return obj


def role(name, namespace, rules):
    return {"kind": "Role", "metadata": {"name": name, "namespace": namespace}, "rules": rules}


def binding(kind, name, role_kind, role_name, subjects, namespace=None):
    meta = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {
        "kind": kind,
        "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role_name},
        "subjects": subjects,
    }


def user(name):
    return {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": name}


def rule(verbs, resources, groups=("",), names=None):
    r = {"verbs": list(verbs), "apiGroups": list(groups), "resources": list(resources)}
    if names:
        r["resourceNames"] = list(names)
    return r


class Store:
    """A minimal lookup(kind, namespace) over a list of objects."""

    def __init__(self, *objects):
        self.objects = list(objects)

    def __call__(self, kind, namespace):
        return [
            o
            for o in self.objects
            if o["kind"] == kind and (namespace is None or o["metadata"].get("namespace") == namespace)
        ]


def can(authz, u, verb, resource, namespace="", *, group="", sub="", name=""):
    attrs = Attributes(
        u, verb, True, api_group=group, resource=resource, subresource=sub, name=name, namespace=namespace
    )
    return authz.authorize(attrs)[0]


POD_READER = role("pod-reader", "dev", [rule(["get", "list", "watch"], ["pods"])])


def test_role_binding_grants_only_in_its_namespace():
    authz = Authorizer(Store(POD_READER, binding("RoleBinding", "rb", "Role", "pod-reader", [user("alice")], "dev")))
    assert can(authz, ALICE, "list", "pods", "dev")
    assert not can(authz, ALICE, "list", "pods", "prod")
    assert not can(authz, ALICE, "list", "pods")  # cluster-wide list
    assert not can(authz, ALICE, "delete", "pods", "dev")
    assert not can(authz, UserInfo("bob"), "list", "pods", "dev")


def test_allow_reason_names_the_binding():
    authz = Authorizer(Store(POD_READER, binding("RoleBinding", "rb", "Role", "pod-reader", [user("alice")], "dev")))
    allowed, reason = authz.authorize(Attributes(ALICE, "get", True, resource="pods", name="x", namespace="dev"))
    assert allowed
    assert reason == 'RBAC: allowed by RoleBinding "rb/dev" of Role "pod-reader" to User "alice"'


def test_cluster_role_via_role_binding_is_limited_to_that_namespace():
    authz = Authorizer(
        Store(
            cluster_role("secret-reader", [rule(["get"], ["secrets"])]),
            binding("RoleBinding", "rb", "ClusterRole", "secret-reader", [user("alice")], "dev"),
        )
    )
    assert can(authz, ALICE, "get", "secrets", "dev", name="s")
    assert not can(authz, ALICE, "get", "secrets", "prod", name="s")


def test_cluster_role_binding_grants_everywhere():
    authz = Authorizer(
        Store(
            cluster_role("node-reader", [rule(["get", "list"], ["nodes", "pods"])]),
            binding("ClusterRoleBinding", "crb", "ClusterRole", "node-reader", [{"kind": "Group", "name": "ops"}]),
        )
    )
    ops = UserInfo("carol", ("ops",))
    assert can(authz, ops, "list", "nodes")
    assert can(authz, ops, "list", "pods", "any-namespace")
    reason = authz.authorize(Attributes(ops, "list", True, resource="nodes"))[1]
    assert reason == 'RBAC: allowed by ClusterRoleBinding "crb" of ClusterRole "node-reader" to Group "ops"'


def test_verb_group_and_resource_wildcards():
    authz = Authorizer(
        Store(
            cluster_role("apps-all", [rule(["*"], ["*"], groups=["apps"])]),
            binding("ClusterRoleBinding", "crb", "ClusterRole", "apps-all", [user("alice")]),
        )
    )
    assert can(authz, ALICE, "patch", "deployments", "x", group="apps")
    assert can(authz, ALICE, "update", "deployments", "x", group="apps", sub="scale")
    assert not can(authz, ALICE, "get", "pods", "x")
    assert not can(authz, ALICE, "get", "jobs", "x", group="batch")


def test_resource_names_restrict_named_requests_only():
    authz = Authorizer(
        Store(
            role(
                "one-cm",
                "dev",
                [rule(["get", "list", "watch", "update", "create"], ["configmaps"], names=["app-config"])],
            ),
            binding("RoleBinding", "rb", "Role", "one-cm", [user("alice")], "dev"),
        )
    )
    assert can(authz, ALICE, "get", "configmaps", "dev", name="app-config")
    assert can(authz, ALICE, "update", "configmaps", "dev", name="app-config")
    assert not can(authz, ALICE, "get", "configmaps", "dev", name="other")
    # requests without a name never match a rule that lists resourceNames
    assert not can(authz, ALICE, "list", "configmaps", "dev")
    assert not can(authz, ALICE, "watch", "configmaps", "dev")
    assert not can(authz, ALICE, "create", "configmaps", "dev")


def test_subresources():
    authz = Authorizer(
        Store(
            role(
                "r",
                "dev",
                [
                    rule(["get"], ["pods"]),
                    rule(["get"], ["pods/log"]),
                    rule(["update"], ["*/status"]),
                    rule(["create"], ["pods/*"]),
                ],
            ),
            binding("RoleBinding", "rb", "Role", "r", [user("alice")], "dev"),
        )
    )
    assert can(authz, ALICE, "get", "pods", "dev", name="p")
    assert can(authz, ALICE, "get", "pods", "dev", name="p", sub="log")
    # a plain resource does not cover its subresources
    assert not can(authz, ALICE, "get", "pods", "dev", name="p", sub="exec")
    # */status covers the status subresource of any resource
    assert can(authz, ALICE, "update", "deployments", "dev", group="", name="d", sub="status")
    assert not can(authz, ALICE, "update", "deployments", "dev", name="d")
    # "pods/*" is not a wildcard upstream: it only names a subresource literally called "*"
    assert not can(authz, ALICE, "create", "pods", "dev", name="p", sub="exec")


def test_service_account_subjects():
    sa_subject_without_ns = {"kind": "ServiceAccount", "name": "builder"}
    sa_subject_other_ns = {"kind": "ServiceAccount", "name": "deployer", "namespace": "ci"}
    authz = Authorizer(
        Store(
            role("pods", "dev", [rule(["list"], ["pods"])]),
            binding("RoleBinding", "rb", "Role", "pods", [sa_subject_without_ns, sa_subject_other_ns], "dev"),
        )
    )
    builder = service_account_user("dev", "builder")
    assert builder.name == "system:serviceaccount:dev:builder"
    assert "system:serviceaccounts:dev" in builder.groups
    assert can(authz, builder, "list", "pods", "dev")
    assert can(authz, service_account_user("ci", "deployer"), "list", "pods", "dev")
    # the namespace defaults to the binding's, so builder in another namespace is someone else
    assert not can(authz, service_account_user("ci", "builder"), "list", "pods", "dev")
    reason = authz.authorize(Attributes(builder, "list", True, resource="pods", namespace="dev"))[1]
    assert reason == 'RBAC: allowed by RoleBinding "rb/dev" of Role "pods" to ServiceAccount "builder/dev"'


def test_service_account_subject_without_namespace_never_matches_in_cluster_role_binding():
    authz = Authorizer(
        Store(
            cluster_role("view-pods", [rule(["list"], ["pods"])]),
            binding(
                "ClusterRoleBinding", "crb", "ClusterRole", "view-pods", [{"kind": "ServiceAccount", "name": "builder"}]
            ),
        )
    )
    assert not can(authz, service_account_user("dev", "builder"), "list", "pods", "dev")


def test_non_resource_urls():
    authz = Authorizer(
        Store(
            cluster_role(
                "urls",
                [
                    {"verbs": ["get"], "nonResourceURLs": ["/healthz", "/logs/*"]},
                    rule(["get"], ["*"]),
                ],
            ),
            binding("ClusterRoleBinding", "crb", "ClusterRole", "urls", [user("alice")]),
        )
    )

    def get(path, verb="get"):
        return authz.authorize(Attributes(ALICE, verb, False, path=path))[0]

    assert get("/healthz")
    assert not get("/healthz/etcd")  # no prefix match without a trailing *
    assert get("/logs/")
    assert get("/logs/kube-apiserver.log")
    assert not get("/logs", "get")  # prefix is "/logs/"
    assert not get("/healthz", "post")
    # resource rules never grant non-resource paths
    assert not get("/api/v1/pods")


def test_system_masters_is_allowed_without_any_objects():
    authz = Authorizer(Store())
    admin = UserInfo("kubernetes-admin", ("system:masters", "system:authenticated"))
    assert authz.authorize(Attributes(admin, "delete", True, resource="nodes", name="n1")) == (True, "")
    assert authz.authorize(Attributes(admin, "get", False, path="/metrics")) == (True, "")
    assert not can(authz, ALICE, "get", "pods", "default")


def test_denial_reason_reports_missing_roles():
    authz = Authorizer(
        Store(
            binding("RoleBinding", "rb", "Role", "gone", [user("alice")], "dev"),
            binding("ClusterRoleBinding", "crb", "ClusterRole", "also-gone", [user("alice")]),
        )
    )
    allowed, reason = authz.authorize(Attributes(ALICE, "get", True, resource="pods", name="p", namespace="dev"))
    assert not allowed
    assert reason == (
        'RBAC: [clusterrole.rbac.authorization.k8s.io "also-gone" not found, '
        'role.rbac.authorization.k8s.io "gone" not found]'
    )
    assert authz.authorize(Attributes(UserInfo("bob"), "get", True, resource="pods", namespace="dev")) == (False, "")


def test_forbidden_message():
    attrs = Attributes(UserInfo("bob"), "get", True, resource="pods", name="web", namespace="default")
    assert forbidden_message(attrs) == (
        'pods "web" is forbidden: User "bob" cannot get resource "pods" in API group "" in the namespace "default"'
    )
    attrs = Attributes(UserInfo("bob"), "list", True, api_group="apps", resource="deployments", subresource="scale")
    assert forbidden_message(attrs) == (
        'deployments.apps is forbidden: User "bob" cannot list resource "deployments/scale" '
        'in API group "apps" at the cluster scope'
    )
    attrs = Attributes(UserInfo("bob"), "get", False, path="/metrics")
    assert forbidden_message(attrs, "RBAC: oops") == 'forbidden: User "bob" cannot get path "/metrics": RBAC: oops'


def test_rules_for_lists_cluster_and_namespace_rules():
    authz = Authorizer(
        Store(
            POD_READER,
            binding("RoleBinding", "rb", "Role", "pod-reader", [user("alice")], "dev"),
            cluster_role(
                "mixed",
                [
                    rule(["get"], ["configmaps"], names=["cfg"]),
                    {"verbs": ["get"], "nonResourceURLs": ["/version"]},
                ],
            ),
            binding("ClusterRoleBinding", "crb", "ClusterRole", "mixed", [user("alice")]),
        )
    )
    resource_rules, non_resource_rules, incomplete = authz.rules_for(ALICE, "dev")
    assert resource_rules == [
        {"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["cfg"]},
        {"verbs": ["get", "list", "watch"], "apiGroups": [""], "resources": ["pods"]},
    ]
    assert non_resource_rules == [{"verbs": ["get"], "nonResourceURLs": ["/version"]}]
    assert incomplete is False
    # another namespace only sees the cluster-wide rules
    assert len(authz.rules_for(ALICE, "prod")[0]) == 1


def test_rules_review_status_reports_evaluation_errors():
    authz = Authorizer(Store(binding("RoleBinding", "rb", "Role", "gone", [user("alice")], "dev")))
    status = authz.rules_review_status(ALICE, "dev")
    assert status == {
        "resourceRules": [],
        "nonResourceRules": [],
        "incomplete": False,
        "evaluationError": 'role.rbac.authorization.k8s.io "gone" not found',
    }


def test_cluster_role_aggregation_is_evaluated():
    objs = [
        cluster_role("monitoring", [], aggregate=[{"matchLabels": {"example.com/aggregate-to-monitoring": "true"}}]),
        cluster_role(
            "metrics-reader",
            [rule(["get"], ["pods"], groups=["metrics.k8s.io"])],
            labels={"example.com/aggregate-to-monitoring": "true"},
        ),
        binding("ClusterRoleBinding", "crb", "ClusterRole", "monitoring", [user("alice")]),
    ]
    assert can(Authorizer(Store(*objs)), ALICE, "get", "pods", "x", group="metrics.k8s.io")
    # with aggregation off the stored (empty) rules are used
    assert not can(Authorizer(Store(*objs), aggregate=False), ALICE, "get", "pods", "x", group="metrics.k8s.io")
    assert aggregated_rules(objs[0], objs[:2]) == [rule(["get"], ["pods"], groups=["metrics.k8s.io"])]


# ---------------------------------------------------------------- bootstrap policy


@pytest.fixture
def bootstrap():
    return Authorizer(Store(*bootstrap_objects()))


def test_bootstrap_objects_shape():
    objs = bootstrap_objects()
    names = {(o["kind"], o["metadata"]["name"]) for o in objs}
    for n in (
        "cluster-admin",
        "admin",
        "edit",
        "view",
        "system:discovery",
        "system:basic-user",
        "system:public-info-viewer",
    ):
        assert ("ClusterRole", n) in names
    for n in ("cluster-admin", "system:discovery", "system:basic-user", "system:public-info-viewer"):
        assert ("ClusterRoleBinding", n) in names
    for o in objs:
        assert o["apiVersion"] == "rbac.authorization.k8s.io/v1"
        assert o["metadata"]["labels"]["kubernetes.io/bootstrapping"] == "rbac-defaults"
        assert o["metadata"]["annotations"]["rbac.authorization.kubernetes.io/autoupdate"] == "true"
    by_name = {(o["kind"], o["metadata"]["name"]): o for o in objs}
    assert by_name[("ClusterRoleBinding", "cluster-admin")]["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:masters"}
    ]
    assert [s["name"] for s in by_name[("ClusterRoleBinding", "system:public-info-viewer")]["subjects"]] == [
        "system:authenticated",
        "system:unauthenticated",
    ]
    assert by_name[("ClusterRole", "view")]["aggregationRule"]["clusterRoleSelectors"] == [
        {"matchLabels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}}
    ]
    assert by_name[("ClusterRole", "view")]["rules"]  # pre-filled as the aggregation controller would
    assert bootstrap_objects() is not objs and bootstrap_objects() == objs


def test_bootstrap_basic_user_and_discovery(bootstrap):
    def create(group, resource):
        return bootstrap.authorize(Attributes(ALICE, "create", True, api_group=group, resource=resource))[0]

    assert create("authorization.k8s.io", "selfsubjectaccessreviews")
    assert create("authorization.k8s.io", "selfsubjectrulesreviews")
    assert create("authentication.k8s.io", "selfsubjectreviews")
    assert not create("authorization.k8s.io", "subjectaccessreviews")
    assert bootstrap.authorize(Attributes(ALICE, "get", False, path="/apis/apps/v1"))[0]
    assert not bootstrap.authorize(Attributes(ALICE, "get", True, resource="pods", namespace="default"))[0]
    anonymous = UserInfo("system:anonymous", ("system:unauthenticated",))
    assert bootstrap.authorize(Attributes(anonymous, "get", False, path="/version"))[0]
    assert not bootstrap.authorize(Attributes(anonymous, "get", False, path="/api"))[0]


def test_bootstrap_admin_edit_view(bootstrap):
    objs = bootstrap_objects() + [
        binding("RoleBinding", "viewers", "ClusterRole", "view", [user("v")], "team"),
        binding("RoleBinding", "editors", "ClusterRole", "edit", [user("e")], "team"),
        binding("RoleBinding", "admins", "ClusterRole", "admin", [user("a")], "team"),
    ]
    authz = Authorizer(Store(*objs))
    v, e, a = UserInfo("v"), UserInfo("e"), UserInfo("a")
    assert can(authz, v, "list", "deployments", "team", group="apps")
    assert not can(authz, v, "get", "secrets", "team", name="s")
    assert not can(authz, v, "create", "pods", "team")
    assert can(authz, e, "create", "pods", "team")
    assert can(authz, e, "get", "secrets", "team", name="s")
    assert not can(authz, e, "create", "rolebindings", "team", group="rbac.authorization.k8s.io")
    assert can(authz, a, "create", "rolebindings", "team", group="rbac.authorization.k8s.io")
    assert can(authz, a, "list", "pods", "team")
    assert not can(authz, a, "list", "pods", "elsewhere")


def test_masters_rules_come_from_the_cluster_admin_binding(bootstrap):
    masters = UserInfo("admin", ("system:masters", "system:authenticated"))
    resource_rules, non_resource_rules, _ = bootstrap.rules_for(masters, "default")
    assert {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]} in resource_rules
    assert {"verbs": ["*"], "nonResourceURLs": ["*"]} in non_resource_rules
