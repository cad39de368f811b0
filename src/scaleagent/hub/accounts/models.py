"""The shapes of dynamic accounts on the REST API: what a request may say, and what is answered.

A request body is a JSON list of accounts, camelCase as in the seeds:

    [{"name": "account-01"},
     {"name": "account-02", "zoneId": "agent-1_namespace1",
      "kubeconfigFile": "encryptedFile:k8s!n:kubeconfig!k:config!ns:spinnaker"}]

Besides `name`, `zoneId`, `kubeconfigFile` (and `state` in a PATCH), an account takes the settings a
Kubernetes account has in the agent's file (`context`, `namespaces`, `omitNamespaces`, `kinds`,
`omitKinds`, `onlyNamespacedResources`, `customResourceDefinitions`); they are checked by the
same rules, and sent to the agent as the account's properties.

Validation is done here, before anything is stored, and a rejected body changes nothing: every
problem of the body is reported at once, each naming the account (by position and name), the
field and what is wrong. The answer never holds a kubeconfig, only its reference.
"""

from __future__ import annotations

import difflib
import re
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from ...configfile import normalize_permissions
from ..store import AccountRow
from .errors import InvalidRequest, KubeconfigRefError
from .kubeconfig_refs import parse_reference

__all__ = [
    "ACCOUNT_NAME",
    "ACCOUNT_NAME_SCHEMA",
    "MAX_ACCOUNTS_PER_REQUEST",
    "SETTINGS",
    "AccountChange",
    "AccountIn",
    "AccountView",
    "account_view",
    "check_account_name",
    "check_settings",
    "armory_definition",
    "parse_accounts",
    "parse_names",
]

ACCOUNT_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,251}[A-Za-z0-9])?")
"""The agent's rule for account names (agent/config.py): 1-253 letters, digits, '-', '_', '.',
starting and ending with a letter or digit. Repeated here because hub and agent must not import
each other; a test checks both agree."""
ACCOUNT_NAME_SCHEMA: dict[str, Any] = {
    "type": "string",
    "pattern": f"^{ACCOUNT_NAME.pattern}$",
    "minLength": 1,
    "maxLength": 253,
}
"""ACCOUNT_NAME in the API's description (`check_account_name` checks it, with the hub's message)."""

MAX_ACCOUNTS_PER_REQUEST = 10_000
"""More accounts than this in one request are refused: each becomes rows, secrets to read and
agent messages, and a request that large is more likely a mistake than a migration."""

SETTINGS = (
    "context",
    "namespaces",
    "omitNamespaces",
    "kinds",
    "omitKinds",
    "onlyNamespacedResources",
    "customResourceDefinitions",
    "permissions",
)
"""The account settings kept in the `properties` column and sent to the agent with the account
(`context` travels in its own field of the message)."""

_DNS_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_KIND = re.compile(r"[A-Za-z][A-Za-z0-9]{0,62}")
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_GROUP = re.compile(rf"(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*")
_MAX_ZONE = 253
# The same rules in the API's description (JSON Schema's patterns; the validators below check them).
_KIND_PATTERN = rf"{_KIND.pattern}(?:\.(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*)"
_NAMESPACES: dict[str, Any] = {"items": {"type": "string", "pattern": f"^{_DNS_LABEL.pattern}$"}}
_KINDS: dict[str, Any] = {"items": {"type": "string", "pattern": f"^{_KIND_PATTERN}?$"}}
_GROUP_KINDS: dict[str, Any] = {"items": {"type": "string", "pattern": f"^{_KIND_PATTERN}$"}}


def check_account_name(name: str) -> str:
    """`name` if it is a valid account name; ValueError saying the rule otherwise."""
    if not ACCOUNT_NAME.fullmatch(name):
        shown = name if len(name) <= 60 else name[:57] + "..."
        raise ValueError(
            f"{shown!r} is not a valid account name: use 1-253 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    return name


def _check_kinds(values: list[str] | None, *, need_group: bool) -> list[str] | None:
    for value in values or ():
        kind, dot, group = value.partition(".")
        if not _KIND.fullmatch(kind) or (dot and not _GROUP.fullmatch(group)):
            raise ValueError(
                f"{value!r} is not a kind: expected a singular kind such as 'Deployment', "
                "optionally with its API group ('Widget.example.com')"
            )
        if need_group and not dot:
            raise ValueError(f"{value!r} has no API group: custom resources are named 'Kind.group'")
    return values


class _AccountFields(BaseModel):
    """The fields of an account common to creation and change."""

    model_config = ConfigDict(extra="forbid", strict=True, hide_input_in_errors=True)

    zoneId: str | None = Field(
        None,
        description="Only agents of this zone are sent the account; without one, "
        "the first connected agent that accepts it, whose zone is then "
        "recorded",
    )
    kubeconfigFile: str | None = Field(
        None,
        description="A path on the hub, or 'encryptedFile:k8s!n:<secret>!k:<key>!ns:<namespace>' (a Kubernetes "
        "Secret the hub reads). Without one, the agent uses its own service account",
    )
    context: str | None = Field(
        None,
        description="The kubeconfig context to use (default: its current context)",
        json_schema_extra={"minLength": 1, "maxLength": 253},
    )
    namespaces: list[str] | None = Field(None, description="Only these namespaces", json_schema_extra=_NAMESPACES)
    omitNamespaces: list[str] | None = Field(
        None, description="Every namespace but these", json_schema_extra=_NAMESPACES
    )
    kinds: list[str] | None = Field(
        None, description="Only these kinds ('Deployment', 'Widget.example.com')", json_schema_extra=_KINDS
    )
    omitKinds: list[str] | None = Field(None, description="Every kind but these", json_schema_extra=_KINDS)
    onlyNamespacedResources: bool | None = Field(None, description="Skip cluster-scoped kinds")
    customResourceDefinitions: list[str] | None = Field(
        None, description="Custom kinds to follow, as 'Kind.group'", json_schema_extra=_GROUP_KINDS
    )
    permissions: dict[str, list[str]] | None = Field(
        None,
        description="Who may see and change the account through the hub: {READ: [groups], WRITE: [groups]} "
        "(Spinnaker's account permissions; docs/security.md)",
    )

    @field_validator("permissions", mode="before")
    @classmethod
    def _permissions(cls, value: Any) -> Any:
        try:
            normalized = normalize_permissions(value)
        except PydanticCustomError as e:
            raise ValueError(str(e)) from None
        return None if value is None else {key: list(roles) for key, roles in normalized.items()}

    @field_validator("zoneId")
    @classmethod
    def _zone(cls, value: str | None) -> str | None:
        if value is not None and (
            not value or len(value) > _MAX_ZONE or not value.isprintable() or value.strip() != value
        ):
            raise ValueError(f"a zone id is 1-{_MAX_ZONE} printable characters without surrounding spaces")
        return value

    @field_validator("kubeconfigFile")
    @classmethod
    def _reference(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                parse_reference(value)
            except KubeconfigRefError as e:
                raise ValueError(str(e)) from None
        return value

    @field_validator("context")
    @classmethod
    def _context(cls, value: str | None) -> str | None:
        if value is not None and (not value or len(value) > 253):
            raise ValueError("a context name is 1-253 characters")
        return value

    @field_validator("namespaces", "omitNamespaces")
    @classmethod
    def _namespaces(cls, values: list[str] | None) -> list[str] | None:
        for value in values or ():
            if not _DNS_LABEL.fullmatch(value):
                raise ValueError(
                    f"{value!r} is not a namespace name: use at most 63 lowercase letters, digits and "
                    "'-', starting and ending with a letter or digit"
                )
        return values

    @field_validator("kinds", "omitKinds")
    @classmethod
    def _kinds(cls, values: list[str] | None) -> list[str] | None:
        return _check_kinds(values, need_group=False)

    @field_validator("customResourceDefinitions", mode="before")
    @classmethod
    def _crd_items(cls, values: Any) -> Any:
        """Armory's form, `{kind: Kind.group, scope: Cluster|Namespaced}`, as the agent's file takes
        it: the kind is kept; the scope is the cluster's to say (discovery)."""
        if not isinstance(values, list):
            return values
        out = []
        for item in values:
            if isinstance(item, dict) and set(item) <= {"kind", "scope"} and isinstance(item.get("kind"), str):
                if item.get("scope") not in (None, "Cluster", "Namespaced"):
                    raise ValueError(
                        f"scope of {item['kind']!r}: expected Cluster or Namespaced, got {item['scope']!r}"
                    )
                item = item["kind"]
            out.append(item)
        return out

    @field_validator("customResourceDefinitions")
    @classmethod
    def _crds(cls, values: list[str] | None) -> list[str] | None:
        return _check_kinds(values, need_group=True)

    def given(self) -> dict[str, Any]:
        """The fields the request gave (null included: it clears), without name and state."""
        return {key: getattr(self, key) for key in self.model_fields_set if key not in ("name", "state")}


class AccountIn(_AccountFields):
    """An account to create (POST /armory/accounts): only `name` is required. It is stored
    INACTIVE; a PATCH with `state: ACTIVE` migrates it."""

    name: str = Field(
        description="Unique across the installation; 1-253 letters, digits, '-', '_', '.'",
        json_schema_extra=ACCOUNT_NAME_SCHEMA,
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_account_name(value)

    @model_validator(mode="after")
    def _rules(self) -> AccountIn:
        check_settings(self.given())
        return self


class AccountChange(_AccountFields):
    """A change to an account (PATCH /armory/accounts): `state` ACTIVE migrates it, INACTIVE
    deactivates it; the other fields given replace the stored ones (null clears one)."""

    name: str = Field(description="The account to change", json_schema_extra=ACCOUNT_NAME_SCHEMA)
    state: Literal["ACTIVE", "INACTIVE"] | None = Field(
        None, description="ACTIVE: migrate to an agent (again); INACTIVE: stop the agents following it"
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_account_name(value)


def check_settings(fields: dict[str, Any]) -> None:
    """The rules between settings (ValueError), on an account's settings as they will be after a
    request: the combination counts, not what one request happens to give."""
    if fields.get("namespaces") and fields.get("omitNamespaces"):
        raise ValueError("namespaces and omitNamespaces cannot be combined: give one list or the other")
    if fields.get("kinds") and fields.get("omitKinds"):
        raise ValueError("kinds and omitKinds cannot be combined: give one list or the other")
    if fields.get("context") is not None and not fields.get("kubeconfigFile"):
        raise ValueError(
            "context only applies with a kubeconfigFile (without one, the agent uses its own service "
            "account, which has no contexts)"
        )


_MESSAGES = {
    "string_type": "a string",
    "bool_type": "true or false",
    "list_type": "a list",
    "model_type": "an object",
    "dict_type": "an object",
}


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return f"a number ({value})"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"a string ({shown!r})"
    if isinstance(value, list):
        return "a list"
    return "an object"


def _problem(error: Any, item: Any, fields: list[str]) -> str:
    """One pydantic error as a sentence a user can act on: the field and what is wrong."""
    loc = [part for part in error["loc"] if part != "__root__"]
    field = ".".join(str(p) if isinstance(p, str) else f"[{p}]" for p in loc).replace(".[", "[")
    kind = error["type"]
    if kind == "extra_forbidden":
        key = str(loc[-1])
        close = difflib.get_close_matches(key, fields, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else f" (the fields are: {', '.join(fields)})"
        return f"{key}: unknown field{hint}"
    if kind == "missing":
        return f"{field}: required"
    value = item
    for part in loc:
        try:
            value = value[part]
        except (KeyError, IndexError, TypeError):
            value = None
            break
    if kind in _MESSAGES:
        return f"{field}: expected {_MESSAGES[kind]}, got {_json_kind(value)}"
    if kind == "literal_error":
        return f"{field}: must be ACTIVE or INACTIVE, got {_json_kind(value)}"
    message = str(error.get("msg", "invalid"))
    message = message.removeprefix("Value error, ")
    return f"{field}: {message}" if field else message


def parse_accounts(body: Any, model: type[AccountIn] | type[AccountChange]) -> list[Any]:
    """Validate a request body (decoded JSON) as a list of `model`. Raises InvalidRequest with
    every problem: not a list, an item that is not an object, unknown fields, wrong types,
    invalid values, the same name twice."""
    if not isinstance(body, list):
        raise InvalidRequest(f"the body must be a JSON list of accounts, got {_json_kind(body)}")
    if not body:
        raise InvalidRequest("the body is an empty list: give at least one account")
    if len(body) > MAX_ACCOUNTS_PER_REQUEST:
        raise InvalidRequest(f"{len(body)} accounts in one request; the most is {MAX_ACCOUNTS_PER_REQUEST}")
    fields = list(model.model_fields)
    problems: list[str] = []
    accounts: list[Any] = []
    first: dict[str, int] = {}
    for i, item in enumerate(body):
        name = item.get("name") if isinstance(item, dict) else None
        label = f"accounts[{i}]" + (f" ({name!r})" if isinstance(name, str) and len(name) <= 253 else "")
        if not isinstance(item, dict):
            problems.append(f'{label}: expected an object such as {{"name": "account-01"}}, got {_json_kind(item)}')
            continue
        try:
            account = model.model_validate(item, strict=True)
        except ValidationError as e:
            problems.extend(f"{label}: {_problem(err, item, fields)}" for err in e.errors())
            continue
        if account.name in first:
            problems.append(
                f"{label}: the name {account.name!r} is also accounts[{first[account.name]}]: "
                "each account may appear once per request"
            )
            continue
        first[account.name] = i
        accounts.append(account)
    if problems:
        raise InvalidRequest(problems)
    return accounts


ARMORY_IGNORED = frozenset(
    {"insecure", "maxResumableResourceAgeMs", "metrics", "noProxy", "oAuthScopes", "onlySpinnakerManaged"}
)
"""Keys of an Armory account definition (its agent's `kubernetes.accounts[]`) the hub accepts in
`/armory/accounts/dynamic` bodies and does not use: scripts written for Armory send them."""

_KUBECONFIG_KEYS = ("kubeconfigFile", "kubeConfigFile", "kubeconfigContents", "kubeconfigAgent")


def armory_definition(item: Any, label: str, *, replace: bool = False) -> tuple[dict[str, Any], list[str]]:
    """One account of Armory's `/armory/accounts/dynamic` (a JSON object: `name` plus one of
    `kubeconfigContents`, `kubeconfigFile` or `serviceAccount`, `zoneId`, and any setting of an
    agent's `kubernetes.accounts[]`) as the fields of AccountIn, with the problems only this
    translation finds (the model finds the rest). Armory's spellings are read: `kubeConfigFile`
    (its CSV's), `kubeconfigContents` (a Secret reference, as in Armory's example),
    `kubeconfigAgent` (PUT: the kubeconfig the agent is sent; it wins over the others). With
    `replace` (PUT), settings left out are cleared (null), as a full definition replaces one."""
    if not isinstance(item, dict):
        return {}, [f'{label}: expected an account object such as {{"name": "account-01"}}, got {_json_kind(item)}']
    problems: list[str] = []
    fields = {k: v for k, v in item.items() if k not in ARMORY_IGNORED and k not in _KUBECONFIG_KEYS}
    kind = fields.pop("type", "kubernetes")
    if kind != "kubernetes":
        problems.append(f"{label}: type: only 'kubernetes' accounts are served, got {_json_kind(kind)}")
    service_account = fields.pop("serviceAccount", None)
    if service_account is not None and not isinstance(service_account, bool):
        problems.append(f"{label}: serviceAccount: expected true or false, got {_json_kind(service_account)}")
    given = {k: item[k] for k in _KUBECONFIG_KEYS if item.get(k) is not None}
    for key in ("kubeconfigContents", "kubeconfigAgent"):
        value = given.get(key)
        if value is not None and (not isinstance(value, str) or not value.startswith(("encrypted:", "encryptedFile:"))):
            problems.append(
                f"{label}: {key}: expected a Kubernetes Secret reference "
                "('encryptedFile:k8s!n:<secret>!k:<key>!ns:<namespace>'): the hub does not take a kubeconfig's "
                "content in a request; store it in a Secret and name it here"
            )
    chosen = given.get("kubeconfigAgent")
    sources = {k: v for k, v in given.items() if k != "kubeconfigAgent"}
    if len(set(map(str, sources.values()))) > 1:
        problems.append(f"{label}: give one of {', '.join(sources)}, not several")
    if chosen is None and sources:
        chosen = next(iter(sources.values()))
    if service_account is True and chosen is not None:
        problems.append(
            f"{label}: serviceAccount: true uses the agent's own service account: give no kubeconfig with it"
        )
    if chosen is not None:
        fields["kubeconfigFile"] = chosen
    elif service_account is True or replace and service_account is not None:
        fields["kubeconfigFile"] = None
    if service_account is False and chosen is None:
        problems.append(f"{label}: serviceAccount: false needs kubeconfigFile or kubeconfigContents")
    if replace:
        for key in SETTINGS:
            fields.setdefault(key, None)
    return fields, problems


def parse_names(body: Any) -> list[str]:
    """Validate a DELETE body: a JSON list of account names, each once."""
    if not isinstance(body, list) or not body:
        raise InvalidRequest(
            f"the body must be a non-empty JSON list of account names, got {_json_kind(body)}"
            if not isinstance(body, list)
            else "the body is an empty list: name at least one account"
        )
    problems: list[str] = []
    seen: set[str] = set()
    for i, name in enumerate(body):
        if not isinstance(name, str):
            problems.append(f"names[{i}]: expected an account name (a string), got {_json_kind(name)}")
            continue
        try:
            check_account_name(name)
        except ValueError as e:
            problems.append(f"names[{i}]: {e}")
            continue
        if name in seen:
            problems.append(f"names[{i}]: {name!r} is given twice")
        seen.add(name)
    if problems:
        raise InvalidRequest(problems)
    return list(body)


class AccountView(BaseModel):
    """An account as the API answers it: never a kubeconfig, only its reference."""

    name: str
    state: str = Field(
        description="INACTIVE, ACTIVE, FAILED, ORPHANED, DELETE_FAILED, or in progress: TO_MIGRATE, "
        "ACTIVATING, TO_DEACTIVATE, DEACTIVATING, DELETING"
    )
    zoneId: str | None = None
    kubeconfigFile: str | None = Field(None, description="The reference as given (never the content)")
    context: str | None = None
    namespaces: list[str] | None = None
    omitNamespaces: list[str] | None = None
    kinds: list[str] | None = None
    omitKinds: list[str] | None = None
    onlyNamespacedResources: bool | None = None
    customResourceDefinitions: list[str] | None = None
    permissions: dict[str, list[str]] | None = None
    errorMessage: str | None = Field(None, description="Why it is FAILED (or what went wrong last)")
    failedCount: int = Field(description="Failed attempts since the last manual migration")
    agentId: str | None = Field(None, description="The agent serving it (or that served it last)")
    kubeHost: str | None = Field(None, description="The API server the agent reached")
    createdAt: str
    updatedAt: str
    # Armory's names (KubesvcAccount in the plugin's swagger), so that its users' scripts read them.
    status: str = Field(description="The same as `state`, under the name Armory's plugin gives it")
    retryCount: int = Field(description="The same as `failedCount`, under Armory's name")


def account_view(row: AccountRow) -> dict[str, Any]:
    """The API's view of a stored account (see AccountView). Only the known settings of
    `properties` are shown, so that nothing else stored there can leak out."""
    view: dict[str, Any] = {
        "name": row.name,
        "state": row.state,
        "zoneId": row.zone_id,
        "kubeconfigFile": row.kubeconfig_file,
    }
    for key in SETTINGS:
        if key in row.properties:
            view[key] = row.properties[key]
    view |= {
        "errorMessage": row.error_message,
        "failedCount": row.failed_count,
        "agentId": row.agent_id or None,
        "kubeHost": row.kube_host or None,
        "createdAt": _iso(row.created_at),
        "updatedAt": _iso(row.updated_at),
        "status": row.state,
        "retryCount": row.failed_count,
    }
    return view


def _iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
