"""The Dynamic Accounts REST API, with the seeds' paths and bodies:

    POST   /armory/accounts                        create (stored INACTIVE)               201
    PATCH  /armory/accounts                        migrate (state ACTIVE), deactivate
                                                   (state INACTIVE), change settings       202
    GET    /armory/accounts?state=&zoneId=&name=   list                                   200
    GET    /armory/accounts/{name}                 one                                    200
    GET    /agents/kubernetes/accounts/{name}      one (the seeds' path for checking state) 200
    DELETE /armory/accounts                        delete (body: a list of names)         200
    DELETE /armory/accounts/{name}                 delete one                             200
    POST   /armory/accounts/dynamic                Armory's definition of one account (or a
                                                   list): created INACTIVE                  201
    PUT    /armory/accounts/dynamic                Armory's definition of one account: replaces
                                                   its settings (200), or creates it (201)

Bodies are read and validated here rather than by FastAPI's parameter binding, so that the
messages name the account and the field in words (`accounts[1] ('account-02'): zoneId: expected
a string, got a number (5)`) and every problem of a body is reported at once. Errors have the
hub's shape, `{"error": "...", "status": N}`, whatever app the router is mounted in.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, Field

from ..accounts.errors import InvalidRequest, UnknownAccounts
from ..accounts.models import (
    ACCOUNT_NAME_SCHEMA,
    ARMORY_IGNORED,
    MAX_ACCOUNTS_PER_REQUEST,
    AccountChange,
    AccountIn,
    AccountView,
    account_view,
    armory_definition,
    parse_accounts,
    parse_names,
)
from ..accounts.service import AccountsService
from ..states import AccountState
from .common import MAX_BODY_BYTES, ErrorBody, HubRoute, answer, read_json

__all__ = ["DeleteResult", "accounts_router"]


class DeleteResult(BaseModel):
    deleted: list[str] = Field(description="The accounts deleted")
    warnings: list[str] = Field(description="Agents that did not confirm they stopped following an account")


def _list_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The OpenAPI request body of a JSON list of `model` (documented, validated by hand)."""
    schema = {
        "type": "array",
        "minItems": 1,
        "maxItems": MAX_ACCOUNTS_PER_REQUEST,
        "items": model.model_json_schema(),
        "example": [
            {"name": "account-01"},
            {
                "name": "account-02",
                "zoneId": "agent-1_namespace1",
                "kubeconfigFile": "encryptedFile:k8s!n:kubeconfig!k:config!ns:spinnaker",
            },
        ],
    }
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


_NAMES_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": MAX_ACCOUNTS_PER_REQUEST,
                    "items": ACCOUNT_NAME_SCHEMA,
                    "uniqueItems": True,
                    "example": ["account-01", "account-02"],
                }
            }
        },
    }
}
_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "The body or a parameter is invalid; nothing was changed"},
    403: {"model": ErrorBody, "description": "The caller is not an admin (managing dynamic accounts)"},
    404: {"model": ErrorBody, "description": "No such dynamic account; nothing was changed"},
    409: {"model": ErrorBody, "description": "The state does not allow it, or the name exists; nothing was changed"},
    413: {"model": ErrorBody, "description": f"The body is larger than {MAX_BODY_BYTES} bytes; nothing was changed"},
    415: {"model": ErrorBody, "description": "The body is not sent as JSON (Content-Type: application/json)"},
    503: {"model": ErrorBody, "description": "The database failed"},
}


AccountName = Annotated[str, Path(json_schema_extra=ACCOUNT_NAME_SCHEMA)]
"""An account's name in a path: its rule documented, checked by the service with its message."""
_STATE = "|".join(AccountState.__members__)
_STATES_PATTERN = f"^,*(?:(?:{_STATE})(?:,+(?:{_STATE}))*)?,*$"
"""A `state` parameter: states separated by commas (empty ones left out)."""


def accounts_router(service: AccountsService) -> APIRouter:
    """The Dynamic Accounts routes, to `include_router` into the hub's app."""
    router = APIRouter(tags=["dynamic accounts"], responses=_ERRORS, route_class=HubRoute)

    @router.post(
        "/armory/accounts",
        status_code=201,
        response_model=list[AccountView],
        summary="Create accounts (stored INACTIVE)",
        openapi_extra=_list_schema(AccountIn),
        description="A list of accounts; only `name` is required. All are created, or none (an invalid "
        "account or an existing name refuses the whole request). Migrate them with PATCH.",
    )
    async def create(request: Request) -> Response:
        async def work() -> list[dict[str, Any]]:
            accounts = parse_accounts(await read_json(request), AccountIn)
            return [account_view(row) for row in await service.create(accounts)]

        return await answer(201, work)

    @router.patch(
        "/armory/accounts",
        status_code=202,
        response_model=list[AccountView],
        summary="Migrate (state ACTIVE), deactivate (state INACTIVE) or change accounts",
        openapi_extra=_list_schema(AccountChange),
        description="Answers once the request is recorded (TO_MIGRATE, TO_DEACTIVATE); migration goes on "
        "in the background: GET the account until it is ACTIVE or FAILED. All changes are "
        "applied, or none.",
    )
    async def patch(request: Request) -> Response:
        async def work() -> list[dict[str, Any]]:
            changes = parse_accounts(await read_json(request), AccountChange)
            return [account_view(row) for row in await service.patch(changes)]

        return await answer(202, work)

    @router.get("/armory/accounts", response_model=list[AccountView], summary="List dynamic accounts")
    async def list_accounts(
        state: Annotated[
            list[str],
            Query(
                description="Only these states (repeat, or separate with commas)",
                json_schema_extra={"items": {"type": "string", "pattern": _STATES_PATTERN}},
            ),
        ] = [],  # noqa: B006
        zoneId: Annotated[str | None, Query(description="Only this zone ('' = accounts without one)")] = None,
        name: Annotated[str | None, Query(description="A name, or a pattern with * and ?")] = None,
    ) -> Response:
        states = [s for value in state for s in value.split(",") if s]

        async def work() -> list[dict[str, Any]]:
            return [account_view(row) for row in await service.list_accounts(states=states, zone_id=zoneId, name=name)]

        return await answer(200, work)

    async def one(name: str) -> Response:
        async def work() -> dict[str, Any]:
            return account_view(await service.get(name))

        return await answer(200, work)

    @router.get("/armory/accounts/{accountName}", response_model=AccountView, summary="One dynamic account")
    async def get_one(accountName: AccountName) -> Response:
        return await one(accountName)

    @router.get(
        "/agents/kubernetes/accounts/{accountName}",
        response_model=AccountView,
        summary="One dynamic account (the seeds' path for checking that it is ACTIVE)",
    )
    async def get_agent_account(accountName: AccountName) -> Response:
        return await one(accountName)

    @router.delete(
        "/armory/accounts",
        response_model=DeleteResult,
        openapi_extra=_NAMES_BODY,
        summary="Delete accounts: their agents stop following them, then their rows go",
        description="A list of names; all must exist, or nothing is deleted.",
    )
    async def delete_many(request: Request) -> Response:
        async def work() -> dict[str, Any]:
            deleted, warnings = await service.delete(parse_names(await read_json(request)))
            return {"deleted": deleted, "warnings": warnings}

        return await answer(200, work)

    @router.delete("/armory/accounts/{accountName}", response_model=DeleteResult, summary="Delete one account")
    async def delete_one(accountName: AccountName) -> Response:
        async def work() -> dict[str, Any]:
            deleted, warnings = await service.delete(parse_names([accountName]))
            return {"deleted": deleted, "warnings": warnings}

        return await answer(200, work)

    @router.post(
        "/armory/accounts/dynamic",
        status_code=201,
        response_model=list[AccountView],
        summary="Create an account from Armory's definition (stored INACTIVE)",
        openapi_extra=_ARMORY_BODY,
        description="Armory's body: one account object (or a list of them) with `name` and one of "
        "`kubeconfigFile`, `kubeconfigContents` (a Secret reference) or `serviceAccount: true`, plus "
        "`zoneId` and the settings of an agent's `kubernetes.accounts[]`. Created INACTIVE, all or "
        "none; migrate with PATCH /armory/accounts. Answers the accounts created.",
    )
    async def create_dynamic(request: Request) -> Response:
        async def work() -> list[dict[str, Any]]:
            body = await read_json(request, "the body is empty: send an account definition (a JSON object)")
            items = body if isinstance(body, list) else [body]
            translated, problems = [], []
            for i, item in enumerate(items):
                fields, found = armory_definition(item, _label(i, item))
                translated.append(fields)
                problems += found
            if problems:
                raise InvalidRequest(problems)
            accounts = parse_accounts(translated, AccountIn)
            return [account_view(row) for row in await service.create(accounts)]

        return await answer(201, work)

    @router.put(
        "/armory/accounts/dynamic",
        response_model=AccountView,
        summary="Replace an account's definition (Armory's body), or create it",
        openapi_extra=_ARMORY_ONE_BODY,
        responses={201: {"model": AccountView, "description": "There was no such account: created INACTIVE"}},
        description="One account object, as for POST. An existing account takes the definition: "
        "settings left out are cleared, `zoneId` and the kubeconfig are kept unless given "
        "(`kubeconfigAgent` replaces the kubeconfig the agent is sent; `serviceAccount: true` clears it); "
        "an ACTIVE account is sent to its agents again. 200 with the account, or 201 when it was created.",
    )
    async def put_dynamic(request: Request) -> Response:
        created = False

        async def work() -> dict[str, Any]:
            nonlocal created
            body = await read_json(request, "the body is empty: send an account definition (a JSON object)")
            if isinstance(body, list):
                raise InvalidRequest("the body is a list: PUT takes one account definition (a JSON object)")
            label = _label(0, body)
            name = body.get("name") if isinstance(body, dict) else None
            exists = False
            if isinstance(name, str):
                try:
                    await service.get(name)
                    exists = True
                except (UnknownAccounts, InvalidRequest):
                    exists = False  # an invalid name is reported by the model below
            fields, problems = armory_definition(body, label, replace=exists)
            if problems:
                raise InvalidRequest(problems)
            if not exists:
                created = True
                (row,) = await service.create(parse_accounts([fields], AccountIn))
                return account_view(row)
            (row,) = await service.patch(parse_accounts([fields], AccountChange))
            return account_view(row)

        response = await answer(200, work)
        if created and response.status_code == 200:
            response.status_code = 201
        return response

    return router


def _label(i: int, item: Any) -> str:
    """How a problem names the account: as parse_accounts does."""
    name = item.get("name") if isinstance(item, dict) else None
    return f"accounts[{i}]" + (f" ({name!r})" if isinstance(name, str) and len(name) <= 253 else "")


_ARMORY_ACCOUNT: dict[str, Any] = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": ACCOUNT_NAME_SCHEMA,
        "type": {"type": "string", "enum": ["kubernetes"]},
        "zoneId": {"type": "string"},
        "kubeconfigFile": {"type": "string", "description": "A path on the hub, or a Secret reference"},
        "kubeConfigFile": {"type": "string", "description": "The same (the spelling of Armory's CSV)"},
        "kubeconfigContents": {"type": "string", "description": "A Secret reference: 'encryptedFile:k8s!n:...!k:...'"},
        "kubeconfigAgent": {"type": "string", "description": "PUT: the kubeconfig the agent is sent (a reference)"},
        "serviceAccount": {"type": "boolean", "description": "true: the agent's own service account"},
        **{k: v for k, v in AccountIn.model_json_schema()["properties"].items() if k not in ("name", "zoneId")},
        **{k: {"description": "Accepted and not used (an Armory agent setting)"} for k in sorted(ARMORY_IGNORED)},
    },
    "additionalProperties": False,
    "example": {"name": "demo-acc-02", "kubeconfigContents": "encryptedFile:k8s!n:kubeconfig-t!k:config!ns:spinnaker"},
}
_ARMORY_ONE_BODY = {"requestBody": {"required": True, "content": {"application/json": {"schema": _ARMORY_ACCOUNT}}}}
_ARMORY_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "oneOf": [
                        _ARMORY_ACCOUNT,
                        {
                            "type": "array",
                            "minItems": 1,
                            "maxItems": MAX_ACCOUNTS_PER_REQUEST,
                            "items": _ARMORY_ACCOUNT,
                        },
                    ]
                },
            }
        },
    }
}
