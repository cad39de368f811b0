"""The hub's web dashboard at `/`: agents, replicas, accounts, sync progress, live charts, a search
across every cluster and recent tasks, in one page that reads the hub's own REST API
(docs/dashboard.md).

Why it is built this way:

- **Everything ships in the package** (`static/dashboard/`, its vendored libraries listed in
  `static/README.md`): hubs run where the internet is out of reach, so the page loads nothing
  from another host, and there is no build step: plain ES modules that browsers run as written.
- **Only named files are served**, each at a fixed path under `/dashboard/assets/`, as docs.py
  does: no directory is mounted, so no other file of the package can be asked for.
- **The page and its files hold no cluster data**, so they are open without a login
  (`security.OPEN_PATHS`), like `/docs`. Every piece of data comes from the API with the
  caller's own credentials, under the same rules as curl's: the page asks for a token when the
  hub answers 401 and shows a 403 as a message.
- **A strict Content-Security-Policy** on the page: scripts only from the hub (and the one inline
  import map, by its hash), requests only to the hub, no framing. Object bodies are shown as
  text, never as markup, but a page that shows what clusters hold should not be the weak spot.
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
from collections.abc import Awaitable, Callable
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from fastapi import FastAPI
from fastapi.responses import FileResponse, HTMLResponse

if TYPE_CHECKING:  # deps imports security, which imports this module for DASHBOARD_PATHS
    from .deps import ApiDeps

__all__ = ["ASSETS", "ASSETS_PREFIX", "DASHBOARD_PATHS", "DASHBOARD_URL", "add_dashboard"]

STATIC = Path(__file__).parent / "static" / "dashboard"
DASHBOARD_URL = "/"
ASSETS_PREFIX = "/dashboard/assets/"

_JS, _CSS = "text/javascript; charset=utf-8", "text/css; charset=utf-8"
ASSETS: dict[str, tuple[Path, str]] = {
    "app.js": (STATIC / "app.js", _JS),
    "charts.js": (STATIC / "charts.js", _JS),
    "yaml.js": (STATIC / "yaml.js", _JS),
    "dashboard.css": (STATIC / "dashboard.css", _CSS),
    "preact.mjs": (STATIC / "vendor" / "preact.mjs", _JS),
    "preact-hooks.mjs": (STATIC / "vendor" / "preact-hooks.mjs", _JS),
    "htm.mjs": (STATIC / "vendor" / "htm.mjs", _JS),
    "uPlot.iife.min.js": (STATIC / "vendor" / "uPlot.iife.min.js", _JS),
    "uPlot.min.css": (STATIC / "vendor" / "uPlot.min.css", _CSS),
    # The docs' icon (static/swagger-ui), so that browsers do not ask for /favicon.ico.
    "favicon.png": (STATIC.parent / "swagger-ui" / "favicon-32x32.png", "image/png"),
}
"""URL name -> (file, media type): everything the page loads besides the API's answers."""

DASHBOARD_PATHS = frozenset({DASHBOARD_URL, *(ASSETS_PREFIX + name for name in ASSETS)})
"""Every path of the dashboard, open without a login (they hold no cluster data)."""

# Served again on every load (`no-cache` revalidates): after an upgrade the page and its scripts
# must not mix versions.
_HEADERS = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}


@cache
def _page() -> tuple[str, str]:
    """index.html and the Content-Security-Policy that lets its one inline script (the import map
    that names the vendored modules) run, by hash, and nothing else inline."""
    text = (STATIC / "index.html").read_text(encoding="utf-8")
    found = re.search(r'<script type="importmap">(.*?)</script>', text, re.S)
    assert found is not None, "static/dashboard/index.html lost its import map"
    digest = base64.b64encode(hashlib.sha256(found.group(1).encode()).digest()).decode()
    policy = (
        "default-src 'none'; "
        f"script-src 'self' 'sha256-{digest}'; "
        # uPlot and the bars of the kinds table size elements with inline styles
        "style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; connect-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
    return text, policy


def add_dashboard(app: FastAPI, deps: ApiDeps) -> None:
    """The dashboard's routes: the page at `/` (titled with this replica's name, so that a tab
    says which replica it came from) and its assets."""
    replica = html.escape(deps.replica)

    @app.get(DASHBOARD_URL, include_in_schema=False)
    async def dashboard() -> HTMLResponse:
        text, policy = _page()
        return HTMLResponse(
            text.replace("{{replica}}", replica),
            headers={
                **_HEADERS,
                "Content-Security-Policy": policy,
                "Referrer-Policy": "no-referrer",
                "X-Frame-Options": "DENY",
            },
        )

    for name, (path, media_type) in ASSETS.items():
        app.add_api_route(ASSETS_PREFIX + name, _asset(path, media_type), methods=["GET"], include_in_schema=False)


def _asset(path: Path, media_type: str) -> Callable[[], Awaitable[FileResponse]]:
    async def asset() -> FileResponse:
        return FileResponse(path, media_type=media_type, headers=_HEADERS)

    return asset
