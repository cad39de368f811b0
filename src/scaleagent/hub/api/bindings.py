"""Which agent identity each account is bound to (docs/security.md, "Agent identities"), and how an
admin moves an account to another identity: release its binding, and the next identity to
stream it binds it.

    GET    /armory/agents/bindings            every binding
    DELETE /armory/agents/bindings/{account}  release one
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ..store import StoreError
from .common import HubRoute, error_response
from .deps import ApiDeps
from .schemas import FORBIDDEN, Binding, BindingReleased, error
from .security import audit, check_admin

__all__ = ["bindings_router"]


def bindings_router(deps: ApiDeps) -> APIRouter:
    api = APIRouter(tags=["agents"], route_class=HubRoute)
    registry = deps.registry

    @api.get(
        "/armory/agents/bindings",
        summary="The agent identity each account is bound to",
        response_class=JSONResponse,
        responses={200: {"model": list[Binding]}, 403: FORBIDDEN, 503: error("The database failed")},
    )
    async def bindings(request: Request) -> Response:
        check_admin(deps, request, "reading agent bindings")
        if registry.bindings is None:
            return JSONResponse([])
        try:
            rows = await registry.bindings.list()
        except StoreError as e:
            return error_response(503, f"cannot read the bindings from the database: {e}")
        return JSONResponse([r.document() for r in rows])

    @api.delete(
        "/armory/agents/bindings/{account}",
        summary="Release an account's binding: the next agent identity to stream it binds it",
        response_class=JSONResponse,
        responses={
            200: {"model": BindingReleased},
            403: FORBIDDEN,
            404: error("The account is not bound to any agent identity"),
            503: error("The database failed"),
        },
    )
    async def release(request: Request, account: str) -> Response:
        check_admin(deps, request, "releasing agent bindings")
        audit(request, account=account)
        try:
            released = await registry.release_binding(account)
        except StoreError as e:
            return error_response(503, f"cannot release the binding in the database: {e}")
        if not released:
            return error_response(404, f"account {account!r} is not bound to any agent identity")
        return JSONResponse({"account": account, "released": True})

    return api
