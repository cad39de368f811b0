"""The hub's HTTP API as the CLI uses it: one place for the address, the requests, their errors in
kubectl's words, and waiting for a task.

The address comes from `--hub`, else the `SCALE_AGENT_HUB` environment variable, else
http://127.0.0.1:7002. Standard library only: a CLI must start fast and needs no event loop.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

from .errors import CliError, HubError

__all__ = ["DEFAULT_HUB", "HUB_ENV", "TASK_POLL_SECONDS", "default_hub", "open_stream", "run_task", "send", "url"]

DEFAULT_HUB = "http://127.0.0.1:7002"
HUB_ENV = "SCALE_AGENT_HUB"
TASK_POLL_SECONDS = 20
"""The longest single `GET /task/{id}?waitSeconds=` (the hub answers as soon as the task ends)."""


def default_hub() -> str:
    """`--hub`'s default: the environment's, so a shell or a CI job names its hub once."""
    return os.environ.get(HUB_ENV, "").strip() or DEFAULT_HUB


def url(hub: str, path: str, params: Sequence[tuple[str, str]] = ()) -> str:
    """The hub's URL for a path and its query."""
    return hub.rstrip("/") + path + (f"?{urllib.parse.urlencode(params)}" if params else "")


def open_stream(
    hub: str,
    method: str,
    path: str,
    *,
    body: Any = None,
    params: Sequence[tuple[str, str]] = (),
    timeout: float = 60.0,
    accept: str = "application/json",
) -> Any:
    """The open response (for a stream such as the watch), or HubError with the hub's own message."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        url(hub, path, params), data=data, method=method, headers={"Content-Type": "application/json", "Accept": accept}
    )
    try:
        return urllib.request.urlopen(req, timeout=timeout)
    except urllib.error.HTTPError as e:
        raw = e.read()
        reason = ""
        try:
            body = json.loads(raw)
            message = body["error"]
            reason = str(body.get("reason") or "")
        except (ValueError, KeyError, TypeError, AttributeError):
            message = raw[:300].decode(errors="replace").strip() or str(e.reason)
        if message in ("Not Found", "Method Not Allowed") or not isinstance(message, str):
            # a route this hub does not have (an older hub, or --hub naming something else)
            message = f"the hub answered {e.code} {message} to {method} {path}"
        raise HubError(f"error: {message}", e.code, reason) from None
    except (urllib.error.URLError, OSError) as e:
        cause = e.reason if isinstance(e, urllib.error.URLError) else e
        raise HubError(f"error: cannot reach the hub at {hub}: {cause} (is it running? see --hub)") from None


def send(
    hub: str, method: str, path: str, *, body: Any = None, params: Sequence[tuple[str, str]] = (), timeout: float = 60.0
) -> Any:
    """One request; its JSON answer, or HubError with the hub's own message."""
    with open_stream(hub, method, path, body=body, params=params, timeout=timeout) as response:
        try:
            return json.loads(response.read() or b"null")
        except ValueError:
            raise HubError(f"error: {method} {path}: the hub answered something that is not JSON") from None
        except (TimeoutError, OSError) as e:
            raise HubError(f"error: {method} {path}: {e}") from None


def run_task(hub: str, operations: list[dict[str, Any]], timeout: float) -> dict[str, Any]:
    """Send the operations and wait for their task to end (or the timeout), as one CLI command does."""
    answer = send(hub, "POST", "/kubernetes/ops", body=operations)
    if not isinstance(answer, dict) or not answer.get("id"):
        raise CliError(f"error: POST /kubernetes/ops: unexpected answer {str(answer)[:300]}")
    task_id = str(answer["id"])
    path = str(answer.get("resourceUri") or f"/task/{urllib.parse.quote(task_id, safe='')}")
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        wait = max(0, min(TASK_POLL_SECONDS, int(remaining)))
        task = send(hub, "GET", path, params=[("waitSeconds", str(wait))], timeout=wait + 60)
        status = task.get("status") or {}
        if task.get("state") in ("completed", "failed") or status.get("completed") or status.get("failed"):
            return task
        if time.monotonic() >= deadline:
            raise CliError(
                f"error: timed out after {timeout:g}s waiting for task {task_id} "
                f"(it may still finish: GET {path}); last status: {status.get('status', '')}"
            )
