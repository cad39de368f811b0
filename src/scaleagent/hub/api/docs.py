"""The API's browsable docs, `/docs` (Swagger UI) and `/redoc` (ReDoc), served whole by the hub:
their scripts, styles and icon come from files shipped in this package (`static/`, see its
README), so the pages work on networks that cannot reach the internet, where hubs usually run.

Only the files named in `ASSETS` are served, each at its own fixed path under `/docs/assets/`:
no directory is mounted, so no other file of the package can be asked for. They are open
without a login, as the pages and `/openapi.json` are (`security.OPEN_PATHS`).

ReDoc's bundle names one file on another host, the Redocly logo beside "API docs by Redocly" at
the foot of its menu (a real browser test found it). The file stays as released; the hub serves
it with that address replaced by an empty image (`OFFLINE_REWRITES`), and the words stay.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import FileResponse, HTMLResponse, Response

__all__ = ["ASSETS", "ASSETS_PREFIX", "DOCS_PATHS", "add_docs"]

STATIC = Path(__file__).parent / "static"
ASSETS_PREFIX = "/docs/assets/"

ASSETS: dict[str, tuple[Path, str]] = {
    "swagger-ui-bundle.js": (STATIC / "swagger-ui" / "swagger-ui-bundle.js", "text/javascript; charset=utf-8"),
    "swagger-ui.css": (STATIC / "swagger-ui" / "swagger-ui.css", "text/css; charset=utf-8"),
    "favicon.png": (STATIC / "swagger-ui" / "favicon-32x32.png", "image/png"),
    "redoc.standalone.js": (STATIC / "redoc" / "redoc.standalone.js", "text/javascript; charset=utf-8"),
}
"""URL name -> (file, media type): everything the two pages load besides `/openapi.json`."""

OFFLINE_REWRITES: dict[str, tuple[bytes, bytes]] = {
    "redoc.standalone.js": (
        b"https://cdn.redoc.ly/redoc/logo-mini.svg",
        b"data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg'/%3E",
    ),
}
"""URL name -> (address on another host, what the hub serves in its place)."""


def served_bytes(name: str) -> bytes:
    """An asset as the hub serves it: the packaged file, with its OFFLINE_REWRITES applied."""
    body = ASSETS[name][0].read_bytes()
    if name in OFFLINE_REWRITES:
        old, new = OFFLINE_REWRITES[name]
        body = body.replace(old, new)
    return body


DOCS_URL, REDOC_URL, OAUTH2_REDIRECT_URL = "/docs", "/redoc", "/docs/oauth2-redirect"
DOCS_PATHS = frozenset({DOCS_URL, REDOC_URL, OAUTH2_REDIRECT_URL, *(ASSETS_PREFIX + name for name in ASSETS)})
"""Every path of the docs, open without a login."""


def add_docs(app: FastAPI, openapi_url: str = "/openapi.json") -> None:
    """The docs' routes on an app created with `docs_url=None, redoc_url=None`."""
    title = f"{app.title} - API"

    @app.get(DOCS_URL, include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=title,
            swagger_js_url=ASSETS_PREFIX + "swagger-ui-bundle.js",
            swagger_css_url=ASSETS_PREFIX + "swagger-ui.css",
            swagger_favicon_url=ASSETS_PREFIX + "favicon.png",
            oauth2_redirect_url=OAUTH2_REDIRECT_URL,
            # Swagger UI would otherwise send the document to an online validator for its badge.
            swagger_ui_parameters={"validatorUrl": None},
        )

    @app.get(OAUTH2_REDIRECT_URL, include_in_schema=False)
    async def oauth2_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get(REDOC_URL, include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=openapi_url,
            title=title,
            redoc_js_url=ASSETS_PREFIX + "redoc.standalone.js",
            redoc_favicon_url=ASSETS_PREFIX + "favicon.png",
            with_google_fonts=False,
        )

    for name, (path, media_type) in ASSETS.items():
        app.add_api_route(
            ASSETS_PREFIX + name, _asset(name, path, media_type), methods=["GET"], include_in_schema=False
        )


def _asset(name: str, path: Path, media_type: str) -> Callable[[], Awaitable[Response]]:
    if name in OFFLINE_REWRITES:
        body = served_bytes(name)

        async def rewritten() -> Response:
            return Response(body, media_type=media_type)

        return rewritten

    async def asset() -> Response:
        return FileResponse(path, media_type=media_type)

    return asset
