"""An RBAC authorizer over stored RBAC objects, with kube-apiserver semantics.

Mirrors ``k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac`` (``RBACAuthorizer``,
``RuleAllows``), ``pkg/registry/rbac/validation`` (``DefaultRuleResolver``:
``VisitRulesFor``, ``appliesTo``, the "allowed by" source describers),
``pkg/apis/rbac/v1/evaluation_helpers.go`` (verb / group / resource / name /
URL matching) and the bootstrap policy of a fresh cluster
(``plugin/pkg/auth/authorizer/rbac/bootstrappolicy``).

In front of RBAC the apiserver puts the privileged-group authorizer: members
of ``system:masters`` are allowed everything with an empty reason, whether or
not any RBAC object exists. That is reproduced here.

ClusterRole aggregation: a real cluster runs the clusterrole-aggregation
controller, which rewrites the ``rules`` of every ClusterRole that has an
``aggregationRule`` to the union of the rules of the ClusterRoles its
``clusterRoleSelectors`` match. Because the simulator may not run that
controller, ``Authorizer`` by default evaluates aggregation itself when it
reads such a role (``aggregate=True``), which yields the controller's steady
state. With ``aggregate=False`` the ``aggregationRule`` is ignored and the
stored ``rules`` are used as they are. ``aggregated_rules`` is the controller's
one-step computation for code that wants to persist the result.

Not modelled (they are separate authorizers or live outside the authorizer):
the Node authorizer for ``system:nodes``, webhook/ABAC authorizers, the RBAC
storage's escalation checks (``escalate`` / ``bind`` verbs on role writes),
and request-info derivation (e.g. the apiserver treating a list/watch with a
``metadata.name=`` field selector as naming that object).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..kube.errors import SelectorError
from ..kube.selectors import go_quote, label_selector_from_dict

__all__ = [
    "UserInfo",
    "Attributes",
    "Authorizer",
    "bootstrap_objects",
    "rule_allows",
    "verb_matches",
    "api_group_matches",
    "resource_matches",
    "resource_name_matches",
    "non_resource_url_matches",
    "applies_to_user",
    "aggregated_rules",
    "forbidden_message",
    "service_account_username",
    "service_account_user",
    "SYSTEM_MASTERS",
    "ALL_AUTHENTICATED",
    "ALL_UNAUTHENTICATED",
]

SYSTEM_MASTERS = "system:masters"
ALL_AUTHENTICATED = "system:authenticated"
ALL_UNAUTHENTICATED = "system:unauthenticated"
ALL_SERVICE_ACCOUNTS = "system:serviceaccounts"
SERVICE_ACCOUNT_USERNAME_PREFIX = "system:serviceaccount:"

RBAC_GROUP = "rbac.authorization.k8s.io"
RBAC_API_VERSION = "rbac.authorization.k8s.io/v1"


@dataclass(frozen=True)
class UserInfo:
    """``user.Info``: the authenticated user's name and groups."""

    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""


@dataclass(frozen=True)
class Attributes:
    """``authorizer.Attributes`` for one request.

    For resource requests set ``resource_request=True`` and api_group /
    resource / subresource / name / namespace; ``verb`` is the API verb
    (get, list, watch, create, update, patch, delete, deletecollection, or a
    custom one such as impersonate, bind, escalate, use, approve).
    For non-resource requests set ``resource_request=False``, ``path`` and the
    lower-cased HTTP method as ``verb``.
    """

    user: UserInfo
    verb: str
    resource_request: bool
    api_group: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    namespace: str = ""
    path: str = ""


def service_account_username(namespace: str, name: str) -> str:
    return f"{SERVICE_ACCOUNT_USERNAME_PREFIX}{namespace}:{name}"


def service_account_user(namespace: str, name: str) -> UserInfo:
    """The user a ServiceAccount token authenticates as (name and groups)."""
    return UserInfo(
        service_account_username(namespace, name),
        (ALL_SERVICE_ACCOUNTS, f"{ALL_SERVICE_ACCOUNTS}:{namespace}", ALL_AUTHENTICATED),
    )


# --------------------------------------------------------------------------
# Rule matching (pkg/apis/rbac/v1/evaluation_helpers.go)
# --------------------------------------------------------------------------


def _list(rule: Mapping[str, Any], key: str) -> list[str]:
    v = rule.get(key)
    return list(v) if v else []


def verb_matches(rule: Mapping[str, Any], verb: str) -> bool:
    return any(v == "*" or v == verb for v in _list(rule, "verbs"))


def api_group_matches(rule: Mapping[str, Any], group: str) -> bool:
    return any(g == "*" or g == group for g in _list(rule, "apiGroups"))


def resource_matches(rule: Mapping[str, Any], combined_resource: str, subresource: str) -> bool:
    """``*``, an exact ``resource`` / ``resource/subresource``, or ``*/subresource``.

    As upstream, ``pods/*`` is *not* a wildcard: it only matches a subresource
    literally named ``*``; and plain ``pods`` does not match ``pods/log``.
    """
    for r in _list(rule, "resources"):
        if r == "*" or r == combined_resource:
            return True
        if not subresource:
            continue
        if len(r) == len(subresource) + 2 and r.startswith("*/") and r.endswith(subresource):
            return True
    return False


def resource_name_matches(rule: Mapping[str, Any], name: str) -> bool:
    """Empty ``resourceNames`` matches every name; otherwise the request must name one.

    Requests that carry no name (list, watch, create, deletecollection) have
    name "" and so are never allowed by a rule that lists resourceNames.
    """
    names = _list(rule, "resourceNames")
    return not names or name in names


def non_resource_url_matches(rule: Mapping[str, Any], path: str) -> bool:
    for u in _list(rule, "nonResourceURLs"):
        if u == "*" or u == path:
            return True
        if u.endswith("*") and path.startswith(u.rstrip("*")):
            return True
    return False


def rule_allows(attrs: Attributes, rule: Mapping[str, Any]) -> bool:
    """``RuleAllows``: resource rules only for resource requests, URL rules only for the rest."""
    if attrs.resource_request:
        combined = attrs.resource + ("/" + attrs.subresource if attrs.subresource else "")
        return (
            verb_matches(rule, attrs.verb)
            and api_group_matches(rule, attrs.api_group)
            and resource_matches(rule, combined, attrs.subresource)
            and resource_name_matches(rule, attrs.name)
        )
    return verb_matches(rule, attrs.verb) and non_resource_url_matches(rule, attrs.path)


# --------------------------------------------------------------------------
# Subjects (pkg/registry/rbac/validation/rule.go)
# --------------------------------------------------------------------------


def applies_to_user(user: UserInfo, subject: Mapping[str, Any], namespace: str) -> bool:
    """Does a binding subject denote ``user``?

    ``namespace`` is the binding's namespace ("" for ClusterRoleBindings); a
    ServiceAccount subject without a namespace defaults to it, and never
    matches inside a ClusterRoleBinding. The subject's apiGroup is not
    consulted (upstream neither).
    """
    kind = subject.get("kind")
    name = subject.get("name") or ""
    if kind == "User":
        return user.name == name
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        sa_ns = subject.get("namespace") or namespace
        if not sa_ns:
            return False
        return user.name == service_account_username(sa_ns, name)
    return False


def _describe_subject(subject: Mapping[str, Any], binding_namespace: str) -> str:
    kind = subject.get("kind") or ""
    name = subject.get("name") or ""
    if kind == "ServiceAccount":
        ns = subject.get("namespace") or binding_namespace
        return f"{kind} {go_quote(name + '/' + ns)}"
    return f"{kind} {go_quote(name)}"


def _describe_source(binding: Mapping[str, Any], subject: Mapping[str, Any], cluster: bool) -> str:
    meta = binding.get("metadata") or {}
    ref = binding.get("roleRef") or {}
    name = meta.get("name") or ""
    if cluster:
        return (
            f"ClusterRoleBinding {go_quote(name)} of {ref.get('kind', '')} "
            f"{go_quote(ref.get('name') or '')} to {_describe_subject(subject, '')}"
        )
    ns = meta.get("namespace") or ""
    return (
        f"RoleBinding {go_quote(name + '/' + ns)} of {ref.get('kind', '')} "
        f"{go_quote(ref.get('name') or '')} to {_describe_subject(subject, ns)}"
    )


# --------------------------------------------------------------------------
# ClusterRole aggregation (pkg/controller/clusterroleaggregation)
# --------------------------------------------------------------------------


def _rule_key(rule: Mapping[str, Any]) -> tuple:
    # equality.Semantic.DeepEqual: nil and empty lists compare equal, order matters.
    return tuple(tuple(_list(rule, k)) for k in ("verbs", "apiGroups", "resources", "resourceNames", "nonResourceURLs"))


def _selected_roles(cluster_role: Mapping[str, Any], cluster_roles: Iterable[Mapping[str, Any]]) -> list[Mapping]:
    """Roles matched by each selector, per selector sorted by name, self excluded."""
    agg = cluster_role.get("aggregationRule") or {}
    own = (cluster_role.get("metadata") or {}).get("name")
    roles = list(cluster_roles)
    out: list[Mapping] = []
    for sel in agg.get("clusterRoleSelectors") or []:
        selector = label_selector_from_dict(sel if sel is not None else {})
        matched = [r for r in roles if selector.matches((r.get("metadata") or {}).get("labels") or {})]
        matched.sort(key=lambda r: (r.get("metadata") or {}).get("name") or "")
        out.extend(r for r in matched if (r.get("metadata") or {}).get("name") != own)
    return out


def aggregated_rules(cluster_role: Mapping[str, Any], cluster_roles: Iterable[Mapping[str, Any]]) -> list[dict]:
    """One sync of the clusterrole-aggregation controller for ``cluster_role``.

    Returns the rules the controller would write: for each selector of
    ``aggregationRule.clusterRoleSelectors`` in order, the rules of the matching
    ClusterRoles (sorted by name, the role itself excluded), without
    duplicates. A role with no ``aggregationRule`` gets its own rules back.
    Raises SelectorError for an invalid selector (the controller errors too).
    """
    if cluster_role.get("aggregationRule") is None:
        return [dict(r) for r in cluster_role.get("rules") or []]
    rules: list[dict] = []
    seen: set[tuple] = set()
    for role in _selected_roles(cluster_role, cluster_roles):
        for rule in role.get("rules") or []:
            k = _rule_key(rule)
            if k not in seen:
                seen.add(k)
                rules.append(copy.deepcopy(dict(rule)))
    return rules


# --------------------------------------------------------------------------
# The authorizer
# --------------------------------------------------------------------------

Lookup = Callable[[str, "str | None"], Iterable[Mapping[str, Any]]]
# visitor(source_description | None, rule | None, error | None) -> keep going?
Visitor = Callable[["str | None", "Mapping[str, Any] | None", "str | None"], bool]


class _Resolution:
    """Per-call cache of ClusterRoles / Roles read through ``lookup``."""

    def __init__(self, lookup: Lookup, aggregate: bool) -> None:
        self._lookup = lookup
        self._aggregate = aggregate
        self._cluster_roles: dict[str, Mapping[str, Any]] | None = None
        self._roles: dict[str, dict[str, Mapping[str, Any]]] = {}
        self._effective: dict[str, list[Mapping[str, Any]]] = {}

    def cluster_roles(self) -> dict[str, Mapping[str, Any]]:
        if self._cluster_roles is None:
            self._cluster_roles = {}
            for obj in self._lookup("ClusterRole", None) or ():
                name = (obj.get("metadata") or {}).get("name")
                if name:
                    self._cluster_roles[name] = obj
        return self._cluster_roles

    def roles(self, namespace: str) -> dict[str, Mapping[str, Any]]:
        if namespace not in self._roles:
            d: dict[str, Mapping[str, Any]] = {}
            for obj in self._lookup("Role", namespace) or ():
                name = (obj.get("metadata") or {}).get("name")
                if name:
                    d[name] = obj
            self._roles[namespace] = d
        return self._roles[namespace]

    def _cluster_role_rules(self, name: str, visiting: frozenset[str]) -> list[Mapping[str, Any]]:
        if name in self._effective:
            return self._effective[name]
        role = self.cluster_roles()[name]
        stored = list(role.get("rules") or [])
        if not self._aggregate or role.get("aggregationRule") is None or name in visiting:
            return stored
        try:
            matched = _selected_roles(role, self.cluster_roles().values())
        except SelectorError:
            return stored  # the controller would fail to sync and leave the rules alone
        rules: list[Mapping[str, Any]] = []
        seen: set[tuple] = set()
        inner = visiting | {name}
        for m in matched:
            m_name = (m.get("metadata") or {}).get("name") or ""
            for rule in self._cluster_role_rules(m_name, inner):
                k = _rule_key(rule)
                if k not in seen:
                    seen.add(k)
                    rules.append(rule)
        if not visiting:
            self._effective[name] = rules
        return rules

    def role_ref_rules(self, ref: Mapping[str, Any], binding_namespace: str) -> tuple[list[Mapping], str | None]:
        """``GetRoleReferenceRules``: (rules, error message)."""
        kind = ref.get("kind")
        name = ref.get("name") or ""
        if kind == "Role":
            role = self.roles(binding_namespace).get(name) if binding_namespace else None
            if role is None:
                return [], f"role.rbac.authorization.k8s.io {go_quote(name)} not found"
            return list(role.get("rules") or []), None
        if kind == "ClusterRole":
            if name not in self.cluster_roles():
                return [], f"clusterrole.rbac.authorization.k8s.io {go_quote(name)} not found"
            return self._cluster_role_rules(name, frozenset()), None
        return [], f"unsupported role reference kind: {go_quote(str(kind))}"


class Authorizer:
    """RBAC authorization over objects returned by ``lookup``.

    ``lookup(kind, namespace)`` must return the stored objects of ``kind`` --
    "ClusterRole" and "ClusterRoleBinding" with namespace None, "Role" and
    "RoleBinding" for the given namespace -- as JSON-shaped mappings. It is
    called afresh for every decision, so changes to RBAC objects take effect
    immediately (the apiserver's informer lag is not simulated).

    ``aggregate`` -- evaluate ClusterRole ``aggregationRule`` on the fly (see
    the module docstring); ``privileged_groups`` -- groups allowed everything
    before RBAC is consulted (the apiserver hard-wires ``system:masters``).
    """

    def __init__(
        self,
        lookup: Lookup,
        *,
        aggregate: bool = True,
        privileged_groups: Iterable[str] = (SYSTEM_MASTERS,),
    ) -> None:
        self._lookup = lookup
        self._aggregate = aggregate
        self._privileged = frozenset(privileged_groups)

    # -- rule resolution -------------------------------------------------

    def visit_rules_for(self, user: UserInfo, namespace: str, visitor: Visitor) -> None:
        """``DefaultRuleResolver.VisitRulesFor``.

        Visits the rules of every ClusterRoleBinding that applies to ``user``,
        then (when ``namespace`` is non-empty) of every RoleBinding in that
        namespace that applies. ``visitor(source, rule, error)`` gets a
        description of the granting binding with each rule, or an error
        message for a dangling roleRef; returning False stops the walk.
        """
        res = _Resolution(self._lookup, self._aggregate)
        for binding in self._lookup("ClusterRoleBinding", None) or ():
            subject = _first_applying(user, binding, "")
            if subject is None:
                continue
            rules, err = res.role_ref_rules(binding.get("roleRef") or {}, "")
            if err is not None:
                if not visitor(None, None, err):
                    return
                continue
            source = _describe_source(binding, subject, cluster=True)
            for rule in rules:
                if not visitor(source, rule, None):
                    return
        if not namespace:
            return
        for binding in self._lookup("RoleBinding", namespace) or ():
            subject = _first_applying(user, binding, namespace)
            if subject is None:
                continue
            rules, err = res.role_ref_rules(binding.get("roleRef") or {}, namespace)
            if err is not None:
                if not visitor(None, None, err):
                    return
                continue
            source = _describe_source(binding, subject, cluster=False)
            for rule in rules:
                if not visitor(source, rule, None):
                    return

    # -- decisions -------------------------------------------------------

    def authorize(self, attrs: Attributes) -> tuple[bool, str]:
        """(allowed, reason).

        Allowed: reason is ``RBAC: allowed by ClusterRoleBinding "x" of
        ClusterRole "y" to Group "z"`` (or ``RoleBinding "x/ns" ...``), or ""
        for a privileged group. Denied: reason is "" or, when some binding
        refers to a missing role, ``RBAC: <error>`` / ``RBAC: [<e1>, <e2>]``.
        Use ``forbidden_message`` to build the 403 Status message.
        """
        if self._privileged.intersection(attrs.user.groups):
            return True, ""
        state: dict[str, Any] = {"allowed": False, "reason": "", "errors": []}

        def visit(source: str | None, rule: Mapping[str, Any] | None, err: str | None) -> bool:
            if rule is not None and rule_allows(attrs, rule):
                state["allowed"] = True
                state["reason"] = f"RBAC: allowed by {source}"
                return False
            if err is not None:
                state["errors"].append(err)
            return True

        self.visit_rules_for(attrs.user, attrs.namespace, visit)
        if state["allowed"]:
            return True, state["reason"]
        if state["errors"]:
            return False, "RBAC: " + _aggregate(state["errors"])
        return False, ""

    def _collect(self, user: UserInfo, namespace: str) -> tuple[list[Mapping[str, Any]], list[str]]:
        rules: list[Mapping[str, Any]] = []
        errors: list[str] = []

        def visit(source: str | None, rule: Mapping[str, Any] | None, err: str | None) -> bool:
            if rule is not None:
                rules.append(rule)
            if err is not None:
                errors.append(err)
            return True

        self.visit_rules_for(user, namespace, visit)
        return rules, errors

    def rules_for(self, user: UserInfo, namespace: str) -> tuple[list[dict], list[dict], bool]:
        """(resourceRules, nonResourceRules, incomplete) for a SelfSubjectRulesReview.

        Every rule of every applicable binding, in visiting order and without
        de-duplication (as the apiserver returns them). Items are shaped like
        authorization.k8s.io/v1 ``ResourceRule`` / ``NonResourceRule``: ``verbs``
        always present, ``apiGroups`` / ``resources`` / ``resourceNames`` /
        ``nonResourceURLs`` only when non-empty (they are ``omitempty``). A rule
        contributes to both lists if it has both resources and URLs.
        ``incomplete`` is False: RBAC can always enumerate its rules. Dangling
        role references are reported by ``rules_review_status`` as
        ``evaluationError``.
        """
        rules, _ = self._collect(user, namespace)
        return _split_rules(rules) + (False,)

    def rules_review_status(self, user: UserInfo, namespace: str) -> dict[str, Any]:
        """A complete ``SubjectRulesReviewStatus`` dict (with ``evaluationError`` if any)."""
        rules, errors = self._collect(user, namespace)
        resource_rules, non_resource_rules = _split_rules(rules)
        status: dict[str, Any] = {
            "resourceRules": resource_rules,
            "nonResourceRules": non_resource_rules,
            "incomplete": False,
        }
        if errors:
            status["evaluationError"] = _aggregate(errors)
        return status


def _first_applying(user: UserInfo, binding: Mapping[str, Any], namespace: str) -> Mapping[str, Any] | None:
    for subject in binding.get("subjects") or []:
        if subject and applies_to_user(user, subject, namespace):
            return subject
    return None


def _aggregate(errors: list[str]) -> str:
    seen: list[str] = []
    for e in errors:
        if e not in seen:
            seen.append(e)
    return seen[0] if len(seen) == 1 else "[" + ", ".join(seen) + "]"


def _split_rules(rules: list[Mapping[str, Any]]) -> tuple[list[dict], list[dict]]:
    resource_rules: list[dict] = []
    non_resource_rules: list[dict] = []
    for rule in rules:
        if _list(rule, "resources"):
            item: dict[str, Any] = {"verbs": _list(rule, "verbs")}
            for key in ("apiGroups", "resources", "resourceNames"):
                if _list(rule, key):
                    item[key] = _list(rule, key)
            resource_rules.append(item)
        if _list(rule, "nonResourceURLs"):
            non_resource_rules.append(
                {"verbs": _list(rule, "verbs"), "nonResourceURLs": _list(rule, "nonResourceURLs")}
            )
    return resource_rules, non_resource_rules


_SANITIZE = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})


def forbidden_message(attrs: Attributes, reason: str = "") -> str:
    """The ``message`` of the apiserver's 403 Status for a denied request.

    e.g. ``pods "web" is forbidden: User "bob" cannot get resource "pods" in API
    group "" in the namespace "default"`` or ``forbidden: User "bob" cannot get
    path "/metrics"``; ``: <reason>`` is appended when reason is non-empty.
    """
    user = attrs.user.name
    if not attrs.resource_request:
        msg = f"User {go_quote(user)} cannot {attrs.verb} path {go_quote(attrs.path)}"
    else:
        resource = attrs.resource + ("/" + attrs.subresource if attrs.subresource else "")
        msg = (
            f"User {go_quote(user)} cannot {attrs.verb} resource {go_quote(resource)} "
            f"in API group {go_quote(attrs.api_group)}"
        )
        if attrs.namespace:
            msg += f" in the namespace {go_quote(attrs.namespace)}"
        else:
            msg += " at the cluster scope"
    msg = msg.translate(_SANITIZE)
    if reason:
        msg = f"{msg}: {reason}"
    if not attrs.resource_request or not attrs.resource:
        return f"forbidden: {msg}"
    qualified = attrs.resource + ("." + attrs.api_group if attrs.api_group else "")
    if attrs.name:
        return f"{qualified} {go_quote(attrs.name)} is forbidden: {msg}"
    return f"{qualified} is forbidden: {msg}"


# --------------------------------------------------------------------------
# Bootstrap policy (plugin/pkg/auth/authorizer/rbac/bootstrappolicy)
# --------------------------------------------------------------------------

_READ = ["get", "list", "watch"]
_READ_WRITE = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
_WRITE = ["create", "delete", "deletecollection", "patch", "update"]


def _rule(verbs: list[str], groups: list[str], resources: list[str], names: list[str] | None = None) -> dict:
    r: dict[str, Any] = {"verbs": list(verbs), "apiGroups": list(groups), "resources": list(resources)}
    if names:
        r["resourceNames"] = list(names)
    return r


def _url_rule(verbs: list[str], urls: list[str]) -> dict:
    return {"verbs": list(verbs), "nonResourceURLs": list(urls)}


def _meta(name: str, extra_labels: Mapping[str, str] | None = None) -> dict:
    labels = {"kubernetes.io/bootstrapping": "rbac-defaults"}
    labels.update(extra_labels or {})
    return {
        "name": name,
        "labels": labels,
        "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
    }


def _cluster_role(
    name: str, rules: list[dict], labels: Mapping[str, str] | None = None, aggregate_to: str | None = None
) -> dict:
    role: dict[str, Any] = {
        "apiVersion": RBAC_API_VERSION,
        "kind": "ClusterRole",
        "metadata": _meta(name, labels),
        "rules": rules,
    }
    if aggregate_to:
        role["aggregationRule"] = {
            "clusterRoleSelectors": [
                {"matchLabels": {f"rbac.authorization.k8s.io/aggregate-to-{aggregate_to}": "true"}}
            ]
        }
    return role


def _cluster_role_binding(name: str, groups: list[str]) -> dict:
    return {
        "apiVersion": RBAC_API_VERSION,
        "kind": "ClusterRoleBinding",
        "metadata": _meta(name),
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": name},
        "subjects": [{"apiGroup": RBAC_GROUP, "kind": "Group", "name": g} for g in groups],
    }


def _aggregate_to_view_rules() -> list[dict]:
    return [
        _rule(
            _READ,
            [""],
            [
                "configmaps",
                "endpoints",
                "persistentvolumeclaims",
                "persistentvolumeclaims/status",
                "pods",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "serviceaccounts",
                "services",
                "services/status",
            ],
        ),
        _rule(
            _READ,
            [""],
            [
                "bindings",
                "events",
                "limitranges",
                "namespaces/status",
                "pods/log",
                "pods/status",
                "replicationcontrollers/status",
                "resourcequotas",
                "resourcequotas/status",
            ],
        ),
        _rule(_READ, [""], ["namespaces"]),
        _rule(_READ, ["discovery.k8s.io"], ["endpointslices"]),
        _rule(
            _READ,
            ["apps"],
            [
                "controllerrevisions",
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "statefulsets",
                "statefulsets/scale",
                "statefulsets/status",
            ],
        ),
        _rule(_READ, ["autoscaling"], ["horizontalpodautoscalers", "horizontalpodautoscalers/status"]),
        _rule(_READ, ["batch"], ["cronjobs", "cronjobs/status", "jobs", "jobs/status"]),
        _rule(
            _READ,
            ["extensions"],
            [
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "ingresses",
                "ingresses/status",
                "networkpolicies",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "replicationcontrollers/scale",
            ],
        ),
        _rule(_READ, ["policy"], ["poddisruptionbudgets", "poddisruptionbudgets/status"]),
        _rule(_READ, ["networking.k8s.io"], ["ingresses", "ingresses/status", "networkpolicies"]),
    ]


def _aggregate_to_edit_rules() -> list[dict]:
    return [
        _rule(
            _READ,
            [""],
            ["pods/attach", "pods/exec", "pods/portforward", "pods/proxy", "secrets", "services/proxy"],
        ),
        _rule(["impersonate"], [""], ["serviceaccounts"]),
        _rule(_WRITE, [""], ["pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy"]),
        _rule(["create"], [""], ["pods/eviction"]),
        _rule(
            _WRITE,
            [""],
            [
                "configmaps",
                "events",
                "persistentvolumeclaims",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "secrets",
                "serviceaccounts",
                "services",
                "services/proxy",
            ],
        ),
        _rule(["create"], [""], ["serviceaccounts/token"]),
        _rule(
            _WRITE,
            ["apps"],
            [
                "daemonsets",
                "deployments",
                "deployments/rollback",
                "deployments/scale",
                "replicasets",
                "replicasets/scale",
                "statefulsets",
                "statefulsets/scale",
            ],
        ),
        _rule(_WRITE, ["autoscaling"], ["horizontalpodautoscalers"]),
        _rule(_WRITE, ["batch"], ["cronjobs", "jobs"]),
        _rule(
            _WRITE,
            ["extensions"],
            [
                "daemonsets",
                "deployments",
                "deployments/rollback",
                "deployments/scale",
                "ingresses",
                "networkpolicies",
                "replicasets",
                "replicasets/scale",
                "replicationcontrollers/scale",
            ],
        ),
        _rule(_WRITE, ["policy"], ["poddisruptionbudgets"]),
        _rule(_WRITE, ["networking.k8s.io"], ["ingresses", "networkpolicies"]),
        _rule(_READ_WRITE, ["coordination.k8s.io"], ["leases"]),
    ]


def _aggregate_to_admin_rules() -> list[dict]:
    return [
        _rule(["create"], ["authorization.k8s.io"], ["localsubjectaccessreviews"]),
        _rule(_READ_WRITE, ["rbac.authorization.k8s.io"], ["rolebindings", "roles"]),
    ]


def bootstrap_objects() -> list[dict]:
    """The default RBAC policy of a fresh cluster, as full JSON-shaped objects.

    ClusterRoles: cluster-admin, admin, edit, view (with their
    ``aggregationRule`` and the rules the aggregation controller fills in),
    system:aggregate-to-admin / -edit / -view, system:discovery,
    system:basic-user, system:public-info-viewer, system:monitoring,
    system:service-account-issuer-discovery, system:auth-delegator.
    ClusterRoleBindings: cluster-admin (system:masters), system:discovery and
    system:basic-user (system:authenticated), system:public-info-viewer
    (system:authenticated + system:unauthenticated), system:monitoring
    (system:monitoring), system:service-account-issuer-discovery
    (system:serviceaccounts). Server-set metadata (uid, resourceVersion,
    creationTimestamp) is left to the store. A fresh deep copy every call.
    """
    roles: list[dict] = [
        _cluster_role(
            "cluster-admin",
            [_rule(["*"], ["*"], ["*"]), _url_rule(["*"], ["*"])],
        ),
        _cluster_role("admin", [], aggregate_to="admin"),
        _cluster_role("edit", [], {"rbac.authorization.k8s.io/aggregate-to-admin": "true"}, aggregate_to="edit"),
        _cluster_role("view", [], {"rbac.authorization.k8s.io/aggregate-to-edit": "true"}, aggregate_to="view"),
        _cluster_role(
            "system:aggregate-to-admin",
            _aggregate_to_admin_rules(),
            {"rbac.authorization.k8s.io/aggregate-to-admin": "true"},
        ),
        _cluster_role(
            "system:aggregate-to-edit",
            _aggregate_to_edit_rules(),
            {"rbac.authorization.k8s.io/aggregate-to-edit": "true"},
        ),
        _cluster_role(
            "system:aggregate-to-view",
            _aggregate_to_view_rules(),
            {"rbac.authorization.k8s.io/aggregate-to-view": "true"},
        ),
        _cluster_role(
            "system:discovery",
            [
                _url_rule(
                    ["get"],
                    [
                        "/api",
                        "/api/*",
                        "/apis",
                        "/apis/*",
                        "/healthz",
                        "/livez",
                        "/openapi",
                        "/openapi/*",
                        "/readyz",
                        "/version",
                        "/version/",
                    ],
                )
            ],
        ),
        _cluster_role(
            "system:basic-user",
            [
                _rule(["create"], ["authorization.k8s.io"], ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]),
                _rule(["create"], ["authentication.k8s.io"], ["selfsubjectreviews"]),
            ],
        ),
        _cluster_role(
            "system:public-info-viewer",
            [_url_rule(["get"], ["/healthz", "/livez", "/readyz", "/version", "/version/"])],
        ),
        _cluster_role(
            "system:monitoring",
            [
                _url_rule(
                    ["get"],
                    [
                        "/healthz",
                        "/healthz/*",
                        "/livez",
                        "/livez/*",
                        "/metrics",
                        "/metrics/slis",
                        "/readyz",
                        "/readyz/*",
                    ],
                )
            ],
        ),
        _cluster_role(
            "system:service-account-issuer-discovery",
            [_url_rule(["get"], ["/.well-known/openid-configuration", "/openid/v1/jwks"])],
        ),
        _cluster_role(
            "system:auth-delegator",
            [
                _rule(["create"], ["authentication.k8s.io"], ["tokenreviews"]),
                _rule(["create"], ["authorization.k8s.io"], ["subjectaccessreviews"]),
            ],
        ),
    ]
    # Fill admin/edit/view as the aggregation controller would (view first:
    # edit aggregates view, admin aggregates edit).
    by_name = {r["metadata"]["name"]: r for r in roles}
    for name in ("view", "edit", "admin"):
        by_name[name]["rules"] = aggregated_rules(by_name[name], roles)

    bindings = [
        _cluster_role_binding("cluster-admin", [SYSTEM_MASTERS]),
        _cluster_role_binding("system:discovery", [ALL_AUTHENTICATED]),
        _cluster_role_binding("system:basic-user", [ALL_AUTHENTICATED]),
        _cluster_role_binding("system:public-info-viewer", [ALL_AUTHENTICATED, ALL_UNAUTHENTICATED]),
        _cluster_role_binding("system:monitoring", ["system:monitoring"]),
        _cluster_role_binding("system:service-account-issuer-discovery", [ALL_SERVICE_ACCOUNTS]),
    ]
    return copy.deepcopy(roles + bindings)
