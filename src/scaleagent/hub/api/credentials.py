"""Clouddriver's Account Management API, with Clouddriver's paths and bodies:

    GET    /credentials?expand=true|false            list (without expand: a summary of each)  200
    GET    /credentials/type/{type}?limit=&startingAccountName=
                                                     definitions of a type, by name            200
    GET    /credentials/{accountName}                one definition                            200
    POST   /credentials                              create (one definition, with "type")      200
    PUT    /credentials                              replace                                   200
    DELETE /credentials/{accountName}                delete                                    200

POST and PUT answer the definition, as Clouddriver does (200, not 201: tools written against
Clouddriver expect its answers). What the requests do besides storing definitions depends on
`dynamicAccounts.interceptor.enabled`: see hub/credentials.py. Errors have the hub's shape,
`{"error": "...", "status": N}`, as on `/armory/accounts`.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, Field

from ..accounts.credentials import KUBERNETES, CredentialsService, definition_schema, definition_view
from ..accounts.errors import InvalidRequest
from ..accounts.models import ACCOUNT_NAME_SCHEMA
from .common import MAX_BODY_BYTES, ErrorBody, HubRoute, answer, read_json
from .schemas import CredentialsDefinition, CredentialsSummary

__all__ = ["credentials_router"]

DEFAULT_LIMIT = 100
"""Clouddriver's default page size for `GET /credentials/type/{type}`."""
MAX_LIMIT = 10_000
"""The largest page: beyond int64 a database refuses the query with an error of its own, and a
page of more definitions than this is a dump, which `GET /credentials?expand=true` is for."""


class CredentialsDeleted(BaseModel):
    deleted: list[str] = Field(description="The account deleted")
    dynamicAccount: bool = Field(description="Whether a dynamic account was deleted too (interceptor on)")
    warnings: list[str] = Field(description="Agents that did not confirm they stopped following the account")


_DEFINITION_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    **definition_schema(),
                    "description": "A Clouddriver Kubernetes account definition "
                    "(KubernetesAccountProperties.ManagedAccount) with the Scale Agent's own settings; only "
                    "type 'kubernetes' is accepted, and kubeconfigContents is refused (use kubeconfigFile with an "
                    "encryptedFile: reference). Any other field is refused by name",
                    "example": {
                        "type": "kubernetes",
                        "name": "prod-east",
                        "kubeconfigFile": "encryptedFile:k8s!n:kubeconfig!k:config!ns:spinnaker",
                        "namespaces": ["web"],
                        "onlySpinnakerManaged": True,
                    },
                }
            }
        },
    }
}
AccountName = Annotated[str, Path(json_schema_extra=ACCOUNT_NAME_SCHEMA)]
"""An account's name in a path: its rule documented, checked by the service with its message."""
_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "The body or a parameter is invalid; nothing was changed"},
    403: {"model": ErrorBody, "description": "The caller is not an admin (managing credentials)"},
    404: {"model": ErrorBody, "description": "No such account; nothing was changed"},
    409: {"model": ErrorBody, "description": "The name exists, or the account is in the middle of a migration"},
    413: {"model": ErrorBody, "description": f"The body is larger than {MAX_BODY_BYTES} bytes; nothing was changed"},
    415: {"model": ErrorBody, "description": "The body is not sent as JSON (Content-Type: application/json)"},
    503: {"model": ErrorBody, "description": "The database failed"},
}


async def _object(request: Request) -> Any:
    """The request body as JSON, or InvalidRequest saying why not (without echoing it)."""
    return await read_json(request, 'the body is empty: send one account definition, a JSON object with its "type"')


def _flag(name: str, value: str | None) -> bool:
    if value is None:
        return False
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise InvalidRequest(f"{name}: expected true or false, got {value[:40]!r}")


def credentials_router(service: CredentialsService) -> APIRouter:
    """The Account Management routes, to `include_router` into the hub's app."""
    router = APIRouter(tags=["account management (Clouddriver)"], responses=_ERRORS, route_class=HubRoute)

    @router.get(
        "/credentials",
        summary="List stored account definitions, and every other account the hub serves",
        description="Without `expand`, each as Clouddriver lists accounts: name, type, environment, "
        "accountType, requiredGroupMembership, permissions. With `expand=true`, whole. Accounts with no "
        "stored definition (registered by agents from their own files, or created through /armory/accounts) "
        "are listed too unless INACTIVE, DELETING or DELETE_FAILED; expanded, they show their settings, "
        "`source` and `state`.",
        response_model=list[CredentialsSummary | CredentialsDefinition],
    )
    async def list_all(
        expand: Annotated[
            str | None,
            Query(description="true: whole definitions (any case)", json_schema_extra={"enum": ["true", "false"]}),
        ] = None,
    ) -> Response:
        async def work() -> list[dict[str, Any]]:
            return await service.list_served(expand=_flag("expand", expand))

        return await answer(200, work)

    @router.get(
        "/credentials/type/{accountType}",
        summary="Definitions of one type, by name, a page at a time",
        response_model=list[CredentialsDefinition],
    )
    async def list_type(
        accountType: str,
        limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="At most this many")] = DEFAULT_LIMIT,
        startingAccountName: Annotated[str | None, Query(description="From this name on (inclusive)")] = None,
    ) -> Response:
        async def work() -> list[dict[str, Any]]:
            rows = await service.list_definitions(type=accountType, start=startingAccountName, limit=limit)
            return [definition_view(row) for row in rows]

        return await answer(200, work)

    @router.get(
        "/credentials/{accountName}", summary="One stored account definition", response_model=CredentialsDefinition
    )
    async def get_one(accountName: AccountName) -> Response:
        async def work() -> dict[str, Any]:
            return definition_view(await service.get(accountName))

        return await answer(200, work)

    @router.post(
        "/credentials",
        summary="Create an account (with the interceptor on: a dynamic account, migrated)",
        openapi_extra=_DEFINITION_BODY,
        description=f"One definition; only type {KUBERNETES!r}. Answers the definition as stored.",
        response_model=CredentialsDefinition,
    )
    async def create(request: Request) -> Response:
        async def work() -> dict[str, Any]:
            return definition_view(await service.create(await _object(request)))

        return await answer(200, work)

    @router.put(
        "/credentials",
        summary="Replace an account (with the interceptor on: its dynamic account too)",
        openapi_extra=_DEFINITION_BODY,
        description="The whole definition: settings it leaves out are cleared. With the interceptor on, "
        "a dynamic account by that name is changed and its agents sent the new settings.",
        response_model=CredentialsDefinition,
    )
    async def update(request: Request) -> Response:
        async def work() -> dict[str, Any]:
            return definition_view(await service.update(await _object(request)))

        return await answer(200, work)

    @router.delete(
        "/credentials/{accountName}",
        response_model=CredentialsDeleted,
        summary="Delete an account (with the interceptor on: its dynamic account too, agents told first)",
    )
    async def delete_one(accountName: AccountName) -> Response:
        async def work() -> dict[str, Any]:
            deleted, warnings, dynamic = await service.delete(accountName)
            return {"deleted": deleted, "dynamicAccount": dynamic, "warnings": warnings}

        return await answer(200, work)

    return router
