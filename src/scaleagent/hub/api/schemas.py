"""What the HTTP API's OpenAPI document says of bodies the routes build by hand: the models of
their answers, the JSON schemas of the bodies they read themselves (`openapi_extra`, so that
declaring them changes nothing of how a body is checked: routes read it with `read_json` and name
every problem in the hub's words), and `complete_openapi`, which adds what every route may
answer before it runs (401, the request guard's 403 and 421) and takes out FastAPI's 422, which
the hub never sends (its invalid parameters are a 400, `common.HubRoute`).

These models only describe: routes answer `Response`s they build, so FastAPI neither validates
nor filters anything through them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..numbers import INT32_MAX, INT64_MAX
from ..tasks import PHASES
from .common import MAX_BODY_BYTES, ErrorBody

__all__ = [
    "ERROR_REF",
    "EVENT_STREAM",
    "complete_openapi",
    "error",
    "body_schema",
]

ERROR_REF = {"$ref": "#/components/schemas/ErrorBody"}


def error(description: str) -> dict[str, Any]:
    """An error answer in the hub's shape, declared as JSON whatever the route's own media type."""
    return {"description": description, "content": {"application/json": {"schema": ERROR_REF}}}


def body_schema(schema: dict[str, Any], description: str = "", required: bool = True) -> dict[str, Any]:
    """`openapi_extra` declaring a JSON request body the route reads (and checks) itself
    (`required` False: the body may be left out)."""
    body: dict[str, Any] = {"required": required, "content": {"application/json": {"schema": schema}}}
    if description:
        body["description"] = description
    return {"requestBody": body}


TOO_LARGE = error(f"The body is larger than {MAX_BODY_BYTES} bytes (answered before it is read whole)")
NOT_JSON = error("The body is not sent as JSON (`Content-Type: application/json`)")
FORBIDDEN = error("The caller lacks a permission (named in `error`)")


# --- objects --------------------------------------------------------------------------------


class ListMeta(BaseModel):
    resourceVersion: str = Field(description="The last resourceVersion the hub applied for the account ('' if none)")


class KubernetesList(BaseModel):
    """Cached objects as a Kubernetes List."""

    apiVersion: Literal["v1"]
    kind: Literal["List"]
    metadata: ListMeta
    items: list[dict[str, Any]] = Field(
        description="Each object's JSON as the cluster served it (Secrets: metadata only)"
    )


class Moniker(BaseModel):
    app: str = Field(description="The `moniker.spinnaker.io/application` annotation ('' if none)")
    cluster: str = Field(description="The `moniker.spinnaker.io/cluster` annotation, or `kind name`")


class StatusFlag(BaseModel):
    state: bool
    message: str | None = Field(None, description="Why, when there is something to say (absent otherwise)")


class ManifestStatus(BaseModel):
    stable: StatusFlag
    paused: StatusFlag
    available: StatusFlag
    failed: StatusFlag


class ManifestView(BaseModel):
    """One object in Clouddriver's manifest shape."""

    account: str
    name: str = Field(description="`kind name`, the kind in lower case: `deployment frontend`")
    location: str = Field(description="The namespace ('' for cluster-scoped objects)")
    manifest: dict[str, Any] = Field(description="The object's JSON as the cluster served it")
    moniker: Moniker
    status: ManifestStatus = Field(
        description="Clouddriver's flags: computed for Deployments, ReplicaSets, StatefulSets and DaemonSets; "
        "other kinds are always stable"
    )
    artifacts: list[Any]
    events: list[Any]
    warnings: list[Any]
    metrics: list[Any]


WATCH_EVENTS = """Server-Sent Events (`text/event-stream`), one per change in the cache, for as long as the
client reads:

* `event: ADDED`, `event: MODIFIED` or `event: DELETED`, with `data:` one line of JSON:
  `{"account", "type", "kind", "group", "namespace", "name", "resourceVersion", "object"}`
  (`type` repeats the event's name; a deletion carries the last known object; `object` is
  absent when the hub has none).
* `event: error`, with `data: {"message": "..."}`, and the stream ends: the client read too
  slowly, its login stopped being valid, or (with replicas) a replica's stream broke or the set
  of replicas changed. Reread the objects and watch again.
* `: heartbeat` (a comment line) every 15 s on an idle stream.

The `data` of a change is the schema `WatchEvent`.

Only accounts the caller may READ are shown."""

EVENT_STREAM = {
    "description": WATCH_EVENTS,
    "content": {
        "text/event-stream": {
            "schema": {"type": "string", "description": "Events as described above"},
            "example": 'event: MODIFIED\ndata: {"account": "prod-east", "type": "MODIFIED", "kind": "Deployment", '
            '"group": "apps", "namespace": "web", "name": "frontend", "resourceVersion": "48214", '
            '"object": {"apiVersion": "apps/v1", "kind": "Deployment"}}\n\n',
        }
    },
}


class WatchEvent(BaseModel):
    """The `data` of an ADDED, MODIFIED or DELETED event of `/api/v1/watch`."""

    account: str
    type: Literal["ADDED", "MODIFIED", "DELETED"]
    kind: str
    group: str = Field(description="'' for the core group")
    namespace: str = Field(description="'' for cluster-scoped objects")
    name: str
    resourceVersion: str
    object: dict[str, Any] | None = Field(None, description="The object's JSON (absent when the hub has none)")


# --- operations and tasks -------------------------------------------------------------------


def _description(title: str, properties: dict[str, Any], text: str) -> dict[str, Any]:
    """One operation type's description: `account` and its own fields (Clouddriver's `credentials`
    is accepted in place of `account`: one of the two is required); other fields are accepted (and
    ignored, as Clouddriver's clients send many)."""
    return {
        "title": title,
        "type": "object",
        "description": text,
        "properties": {
            "account": {"type": "string", "minLength": 1, "description": "The account to change"},
            "credentials": {
                "type": "string",
                "minLength": 1,
                "description": "Clouddriver's name for `account`, accepted in its place",
            },
            **properties,
        },
        "anyOf": [{"required": ["account"]}, {"required": ["credentials"]}],
        "additionalProperties": True,
    }


_MANIFEST_NAME = {"type": "string", "description": "`kind name`: `deployment web`, `configMap settings`"}
_LOCATION = {"type": "string", "description": "The namespace (`default` when empty; ignored for cluster-scoped kinds)"}
_OBJECT = {"type": "object", "additionalProperties": True, "description": "A Kubernetes object"}
_WHOLE_STRING = {"type": "string", "pattern": "^[+-]?[0-9]+$", "description": "The same number as a string"}


def _whole(low: int, high: int, text: str) -> dict[str, Any]:
    return {
        "description": f"{text} (from {low} to {high}; a JSON integer or a string of one)",
        "anyOf": [
            {"type": "integer", "minimum": low, "maximum": high},
            {  # the range itself is the integer's to say: a pattern cannot
                **_WHOLE_STRING,
                "pattern": "^[+-]?[0-9]+$" if low < 0 else "^[+]?[0-9]+$" if low == 0 else "^[+]?0*[1-9][0-9]*$",
                "maxLength": len(str(high)) + 1,
            },
        ],
    }


_TARGET = {"manifestName": _MANIFEST_NAME, "location": _LOCATION}

OPERATION_DESCRIPTIONS: dict[str, dict[str, Any]] = {
    "deployManifest": _description(
        "deployManifest",
        {
            "manifests": {"type": "array", "items": _OBJECT, "description": "The objects to apply"},
            "manifest": {**_OBJECT, "description": "One object, in place of `manifests`"},
            "namespaceOverride": {"type": "string"},
            "moniker": {
                "type": "object",
                "properties": {"app": {"type": "string"}, "cluster": {"type": "string"}},
                "additionalProperties": True,
            },
            "fieldManager": {"type": "string", "default": "scale-agent"},
            "forceConflicts": {"type": "boolean", "default": True},
            "dryRun": {
                "type": "boolean",
                "default": False,
                "description": "Apply with the API's dryRun=All: checked and defaulted by the API server, "
                "stored nowhere; the task's result has `dryRun: true`",
            },
        },
        "Server-side apply of every manifest, in dependency order; nothing is applied if one is invalid.",
    ),
    "deleteManifest": _description(
        "deleteManifest",
        {
            **_TARGET,
            "kinds": {"type": "array", "items": {"type": "string"}},
            "labelSelector": {"type": "string"},
            "labelSelectors": {"type": "object", "additionalProperties": True},
            "options": {
                "type": "object",
                "properties": {
                    "propagationPolicy": {"type": "string", "enum": ["Background", "Foreground", "Orphan"]},
                    "cascading": {"type": "boolean"},
                    "gracePeriodSeconds": _whole(0, INT64_MAX, "Seconds"),
                },
                "additionalProperties": True,
            },
        },
        "Deletes `manifestName`, or `kinds` matching a label selector, and waits until every one is gone.",
    ),
    "patchManifest": _description(
        "patchManifest",
        {
            **_TARGET,
            "patchBody": {"description": "The patch (an object, or a list for a JSON patch)"},
            "options": {
                "type": "object",
                "properties": {"mergeStrategy": {"type": "string", "enum": ["strategic", "merge", "json"]}},
                "additionalProperties": True,
            },
        },
        "One patch of the object.",
    ),
    "scaleManifest": _description(
        "scaleManifest",
        {**_TARGET, "replicas": _whole(0, INT32_MAX, "Replicas")},
        "A patch of the object's `scale` subresource.",
    ),
    "undoRolloutManifest": _description(
        "undoRolloutManifest",
        {
            **_TARGET,
            "revision": _whole(0, INT64_MAX, "The revision to go back to; 0: the previous one"),
            "numRevisionsBack": _whole(1, INT64_MAX, "How many revisions back (default 1)"),
        },
        "`kubectl rollout undo` of a Deployment.",
    ),
    "pauseRolloutManifest": _description("pauseRolloutManifest", _TARGET, "Pauses a Deployment's rollout."),
    "resumeRolloutManifest": _description("resumeRolloutManifest", _TARGET, "Resumes a Deployment's rollout."),
    "rollingRestartManifest": _description(
        "rollingRestartManifest", _TARGET, "`kubectl rollout restart` of a Deployment, StatefulSet or DaemonSet."
    ),
    "runJob": _description(
        "runJob",
        {
            "manifest": {**_OBJECT, "description": "A batch/v1 Job, with metadata.name or generateName"},
            "namespace": {"type": "string"},
            "waitForCompletion": {"type": "boolean", "default": True},
        },
        "Creates the Job and (by default) waits until it completes, with its pods' logs.",
    ),
}
assert list(OPERATION_DESCRIPTIONS) == list(PHASES), "every operation type the hub runs is described"

OPERATIONS_BODY = body_schema(
    {
        "type": "array",
        "minItems": 1,
        "description": "Operations run in order as one task, each an object with one key, its type.",
        "items": {
            "oneOf": [
                {
                    "title": name,
                    "type": "object",
                    "properties": {name: schema},
                    "required": [name],
                    "additionalProperties": False,
                }
                for name, schema in OPERATION_DESCRIPTIONS.items()
            ]
        },
        "example": [
            {
                "deployManifest": {
                    "account": "prod-east",
                    "moniker": {"app": "shop"},
                    "manifests": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}}],
                }
            }
        ],
    }
)
ONE_OPERATION_BODY = body_schema(
    {"anyOf": list(OPERATION_DESCRIPTIONS.values())},
    "The description of one operation of the type the path names",
)


class TaskRef(BaseModel):
    id: str = Field(description="The task's id")
    resourceUri: str = Field(description="`/task/{id}`, where the task is read")


class TaskStatus(BaseModel):
    phase: str
    status: str
    completed: bool
    failed: bool
    retryable: bool


class TaskEvent(BaseModel):
    phase: str = Field(description="`ORCHESTRATION`, or the phase of an operation: " + ", ".join(PHASES.values()))
    status: str
    timestamp: int = Field(description="Milliseconds since the epoch")


class TaskException(BaseModel):
    model_config = ConfigDict(extra="allow")

    message: str
    code: int = Field(description="The Kubernetes status code: 403, 422, 503, 504...")
    reason: str = Field(description="The Kubernetes reason: Forbidden, Invalid, Timeout...")
    operation: str | None = Field(None, description="The operation that failed (absent when the hub stopped)")
    account: str | None = None
    details: Any = None


class TaskDocument(BaseModel):
    """A task, in Clouddriver's shape, plus a plain `state`."""

    id: str
    state: Literal["running", "completed", "failed"]
    status: TaskStatus
    history: list[TaskEvent]
    resultObjects: list[dict[str, Any]] = Field(
        description="One per operation that ran: `manifests`, `manifestNamesByNamespace`, and what the "
        "operation reports (`createdArtifacts`, `deletedManifests`, `alreadyGone`, `jobStatus`, `logs`...)"
    )
    startTimeMs: int
    endTimeMs: int | None = Field(None, description="Absent while the task runs")
    exception: TaskException | None = Field(None, description="Why it failed (absent unless failed)")
    accounts: list[str] | None = Field(None, description="The accounts its operations change")
    user: str | None = Field(None, description="Who sent it, when logins are on")


KIND_NAME = r"^([^ \t\n\r\f\v]+)[ \t\n\r\f\v]+([^ \t\n\r\f\v]+)$"
"""`kind name`, two words: the one pattern both the refresh route and its schema use (`\\s` is
not the same set in Python and in the document's ECMAScript regular expressions)."""

CACHE_REFRESH_BODY = body_schema(
    {
        "type": "object",
        "properties": {
            "account": {"type": "string", "minLength": 1},
            "credentials": {"type": "string", "minLength": 1, "description": "Another name for `account`"},
            "location": {"type": "string", "description": "The namespace ('' for cluster-scoped objects)"},
            "name": {"type": "string", "pattern": KIND_NAME, "description": "`kind name`"},
            "resourceVersion": {
                "type": "string",
                "maxLength": 64,
                "description": "The version an operation produced: answered from the cache once it holds it",
            },
        },
        "required": ["name"],
        "anyOf": [{"required": ["account"]}, {"required": ["credentials"]}],
        "additionalProperties": True,
    }
)


class CacheRefresh(BaseModel):
    account: str
    location: str
    name: str
    status: str = Field(
        description="`cached`; `pending` (202); `absent` (no such live object); or `not cached: ...` (its agent "
        "does not follow the kind or namespace)"
    )
    resourceVersion: str | None = Field(None, description="The version the cache holds (with `cached`)")


AGENT_ERRORS: dict[int | str, dict[str, Any]] = {
    "4XX": error(
        "The request is invalid, or the account's agent or its API server refused it (the status is theirs: "
        "404 no agent serves the account or no such object, 403 its identity may not...)"
    ),
    "5XX": error("The account's agent is gone, failed, or did not answer in time (503, 504, 502)"),
}


# --- replicas and bindings ------------------------------------------------------------------


class ReplicaInfo(BaseModel):
    baseUrl: str
    id: str
    lastUpdated: str = Field(description="RFC 3339, UTC")
    ready: bool


class Assignment(BaseModel):
    account: str
    replica: str
    agent: str
    connections: int
    caching: bool
    lastUpdated: str = Field(description="RFC 3339, UTC")


FORWARDED_OPERATION_BODY = body_schema(
    {
        "type": "object",
        "required": ["operation"],
        "properties": {
            "operation": {
                "type": "object",
                "required": ["id", "account", "type", "timeoutMs"],
                "properties": {
                    "id": {"type": "string", "minLength": 1, "maxLength": 253},
                    "account": {"type": "string", "minLength": 1, "maxLength": 253},
                    "type": {"type": "string", "minLength": 1, "maxLength": 253},
                    "request": {"type": "object", "additionalProperties": True},
                    "timeoutMs": {"type": "integer", "minimum": 1, "maximum": 3_600_000},
                    "task": {
                        "type": "object",
                        "description": "The task the operation belongs to, and where in it: the replica "
                        "running the operation records its result for the task (docs/ha.md)",
                        "required": ["id", "position", "count"],
                        "properties": {
                            "id": {"type": "string", "minLength": 1, "maxLength": 64},
                            "position": {"type": "integer", "minimum": 0, "maximum": 9_999},
                            "count": {"type": "integer", "minimum": 1, "maximum": 10_000},
                        },
                    },
                },
            }
        },
    }
)


class OperationResult(BaseModel):
    """An agent's answer to a forwarded operation."""

    ok: bool
    objects: list[dict[str, Any]]
    output: dict[str, Any]
    agentId: str
    error: dict[str, Any] | None = Field(None, description="A Kubernetes Status: code, reason, message (on failure)")
    cacheMissed: list[str] | None = Field(None, description="Changes this replica's cache did not show in time")


ACCOUNTS_BODY = body_schema(
    {
        "type": "object",
        "required": ["accounts"],
        "properties": {"accounts": {"type": "array", "items": {"type": "string"}}},
    }
)
NAMES_BODY = body_schema(
    {
        "type": "object",
        "required": ["names"],
        "properties": {"names": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 253}}},
    }
)


class Released(BaseModel):
    accounts: list[str]


class Taken(BaseModel):
    taken: list[str] = Field(description="The accounts sent to this replica's agents")


class Stopped(BaseModel):
    warnings: list[str] = Field(description="Agents that did not confirm they stopped following an account")


class Binding(BaseModel):
    account: str
    identity: str
    zone: str
    boundAt: str = Field(description="RFC 3339, UTC")


class BindingReleased(BaseModel):
    account: str
    released: bool


# --- credentials ----------------------------------------------------------------------------


class CredentialsDefinition(BaseModel):
    """A Clouddriver Kubernetes account definition, as it was given (never a kubeconfig's content)."""

    model_config = ConfigDict(extra="allow")

    type: str
    name: str


class CredentialsSummary(BaseModel):
    """A definition as `GET /credentials` lists it without `expand`."""

    name: str
    type: str
    cloudProvider: str
    environment: str
    accountType: str
    requiredGroupMembership: list[Any]
    permissions: dict[str, Any]


# --- health ---------------------------------------------------------------------------------


class CacheStats(BaseModel):
    accounts: int
    objects: int
    bytes: int
    staleEventsIgnored: int


class Health(BaseModel):
    status: Literal["ok"]
    replica: str
    agents: int = Field(description="Agent sessions on this replica")
    accounts: int
    replicas: int
    cache: CacheStats
    configuration: dict[str, Any] | None = Field(
        None, description="How applying the configuration file went (absent when the hub follows none)"
    )


class Whoami(BaseModel):
    name: str
    groups: list[str]
    method: str = Field(description="How the caller logged in: staticToken, tokenReview, clientCertificate, ...")
    admin: bool
    authentication: bool = Field(description="Whether logins are on")


class Ready(BaseModel):
    ready: bool


# --- the document as a whole ----------------------------------------------------------------

_GUARD_403 = "a request from another web origin (`Origin` not allowed, or `Sec-Fetch-Site: cross-site`)"


def complete_openapi(doc: dict[str, Any], open_paths: frozenset[str]) -> dict[str, Any]:
    """`doc` with what every operation may answer before its route runs, and without FastAPI's 422."""
    components = doc.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    schemas.setdefault("ErrorBody", ErrorBody.model_json_schema())
    schemas.setdefault("WatchEvent", WatchEvent.model_json_schema())
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    components["securitySchemes"] = {
        "bearer": {
            "type": "http",
            "scheme": "bearer",
            "description": "A token (`scale-agent login`); a client certificate is accepted too. Needed when logins "
            "are on (docs/security.md).",
        }
    }
    doc["security"] = [{"bearer": []}]
    for path, item in doc.get("paths", {}).items():
        for operation in item.values():
            responses = operation.setdefault("responses", {})
            responses.pop("422", None)
            if path in open_paths:
                operation["security"] = []
            else:
                responses.setdefault("401", error("No login, or one no method accepts (with logins on)"))
            if "403" in responses:
                responses["403"]["description"] += f"; or {_GUARD_403}"
            else:
                responses["403"] = error(_GUARD_403[0].upper() + _GUARD_403[1:])
            responses.setdefault(
                "421", error("The `Host` header names a host this hub does not answer to (`server.allowedHosts`)")
            )
    return doc
