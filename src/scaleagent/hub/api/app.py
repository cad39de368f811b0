"""The hub's HTTP API app (port 7002): the routers of each API, health, readiness and metrics,
one error shape for everything FastAPI itself refuses, and the API's description: `/openapi.json`
(completed by `schemas.complete_openapi`) and its pages, `/docs` and `/redoc` (docs.py)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route

from ... import __version__
from .accounts import accounts_router
from .armory import armory_router
from .bindings import bindings_router
from .common import HubRoute, invalid_parameters
from .credentials import credentials_router
from .dashboard import add_dashboard
from .deps import ApiDeps
from .docs import add_docs
from .guard import RequestGuard
from .metrics import add_metrics
from .objects import objects_router
from .operations import operations_router
from .replicas import AccountForwarding, replicas_router
from .schemas import Health, Ready, Whoami, complete_openapi
from .security import OPEN_PATHS, Authentication, admin_only, principal_of


def create_app(deps: ApiDeps) -> FastAPI:
    app = FastAPI(
        title="Scale Agent hub",
        version=__version__,
        description="Connected agents, their accounts, and a real-time cache of every cluster's objects.",
        docs_url=None,  # served by add_docs, from files in the package
        redoc_url=None,
    )
    app.router.route_class = HubRoute  # invalid parameters are the hub's 400, naming the parameter and its range
    routers = [objects_router(deps), accounts_router(deps.accounts), credentials_router(deps.credentials)]
    routers += [operations_router(deps), replicas_router(deps), bindings_router(deps), armory_router(deps)]
    app.include_router(routers[0])
    app.include_router(routers[1], dependencies=[admin_only(deps, "managing dynamic accounts")])
    app.include_router(routers[2], dependencies=[admin_only(deps, "managing credentials")])
    for router in routers[3:]:  # armory's after bindings': /armory/agents/bindings keeps its meaning
        app.include_router(router)
    app.add_middleware(AccountForwarding, deps=deps)  # forwards with the caller found below
    app.add_middleware(Authentication, security=deps.security)  # outside: every request has its caller
    app.add_middleware(RequestGuard, settings=deps.guard)  # outermost: Host and Origin checked before all
    add_docs(app)
    add_metrics(app, deps)
    add_dashboard(app, deps)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            app.openapi_schema = complete_openapi(doc, OPEN_PATHS)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to complete the document

    @app.get(
        "/health",
        tags=["health"],
        summary="Liveness, with a summary of sessions and the cache",
        response_model=None,
        responses={200: {"model": Health}},
    )
    async def health(request: Request) -> dict[str, Any]:
        doc = {
            "status": "ok",
            "replica": deps.replica,
            "agents": len(deps.registry.sessions),
            "accounts": len(deps.registry.accounts),
            "replicas": len(deps.peers.all()),
            "cache": deps.cache.stats(),
        }
        if deps.reload_status is not None:
            configuration = deps.reload_status.document()
            if not principal_of(request).admin:
                # Answered without a login: where the file lives and why it was refused (which
                # names it) are for admins; the counts are enough for a probe or an alert.
                configuration.pop("file", None)
                configuration.pop("refused", None)
            doc["configuration"] = configuration
        return doc

    @app.get(
        "/api/v1/whoami",
        tags=["auth"],
        summary="Who the hub takes the caller for",
        response_model=None,
        responses={200: {"model": Whoami}},
    )
    async def whoami(request: Request) -> dict[str, Any]:
        return {**principal_of(request).document(), "authentication": deps.security.enabled}

    @app.get(
        "/ready",
        tags=["health"],
        summary="Ready to serve (both ports listening)",
        response_model=None,
        responses={200: {"model": Ready}},
    )
    async def ready() -> dict[str, bool]:
        return {"ready": True}

    def allowed_methods(path: str) -> list[str]:
        """The methods some route of `path` takes: the app's own routes and the included routers'
        (mounted without a prefix), which FastAPI keeps apart from `app.routes`."""
        routes = [r for r in app.router.routes if isinstance(r, Route)] + [r for x in routers for r in x.routes]
        methods = {m for r in routes if isinstance(r, Route) and r.path_regex.match(path) for m in r.methods or ()}
        return sorted(methods)

    @app.exception_handler(StarletteHTTPException)  # also FastAPI's HTTPException, and routing's 404/405
    async def http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
        headers, message = dict(e.headers or {}), e.detail
        if e.status_code == 405:  # RFC 9110: a 405 says which methods the path takes
            path = request.scope["path"]
            allowed = allowed_methods(path)
            headers["Allow"] = ", ".join(allowed)
            shown = path if len(path) <= 200 else path[:197] + "..."
            message = f"{request.method} is not a method of {shown}: it takes {', '.join(allowed)}"
        return JSONResponse({"error": message, "status": e.status_code}, status_code=e.status_code, headers=headers)

    @app.exception_handler(RequestValidationError)  # routes are HubRoutes; this is for any that is not
    async def invalid_request(request: Request, e: RequestValidationError) -> JSONResponse:
        return invalid_parameters(request.scope.get("route"), e)

    return app
