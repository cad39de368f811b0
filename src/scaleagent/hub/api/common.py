"""Bad input to the hub's HTTP API is a 4xx that names what was wrong, never a 500.

Every number a route takes has bounds, declared where the number is read: `Query(ge=..., le=...)`
for parameters, `whole_number` for numbers inside JSON bodies. Unbounded, a number goes on until
something cannot hold it (a protobuf or JSON int64, a Kubernetes int32, Python's 4,300-digit limit
on `int()`) and fails there, as a 500 or as a task that "failed unexpectedly": a fuzzer found
`tailLines=26179136912079257600` answered 500.

FastAPI answers a parameter that fails its declaration with a 422 in a shape of its own, which
says `Input should be less than or equal to 10000000` but not what would have been accepted.
`HubRoute` answers it as the rest of the hub answers bad input: a 400 in the hub's shape,
`{"error", "status"}`, whose message names the parameter, its whole range and the value given
(`tailLines: expected a whole number from 0 to 10000000, got '26179136912079257600'`). It is a
route class rather than an app's exception handler so that a router mounted in any app (the
tests mount them in bare ones) answers the same way.

Bodies: `read_body` refuses one larger than MAX_BODY_BYTES with a 413 before holding it whole,
rather than reading gigabytes into memory to find out they are too many; `read_json` says why a
body is not JSON without echoing it, and takes one only with a JSON Content-Type
(`application/json`, parameters allowed, or `application/*+json`), else 415: a web page can send
`text/plain` to any address without the browser asking first (a "simple" CORS request), never
`application/json`, so this is what keeps a page the user has open from posting operations.

Nesting: `read_json` refuses a body whose arrays and objects are nested more than
MAX_JSON_DEPTH levels deep (a 400 naming where), before anything is created from it. orjson reads
1,024 levels but writes only 254, and the hub writes what it was sent again, inside more levels
of its own: an operation to its agent or to another replica, an account's settings in a list.
Taken, such a body was a task failing with a 500 later, or a stored account no list could show.

Errors: one shape for every API (`ErrorBody`: `error`, `status`, and `problems` when there are
several), built by `error_response`; `answer` runs a request's work and turns what the accounts
and credentials services raise into their statuses (400, 404, 409, 413, 503).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from itertools import islice
from typing import Any, get_args

import orjson
from annotated_types import Ge, Gt, Le, Lt
from fastapi import HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, Field

from ..accounts.errors import Conflict, InvalidRequest, UnknownAccounts
from ..numbers import MAX_DIGITS, describe_range, shown
from ..states import TransitionError
from ..store import StoreError

__all__ = [
    "MAX_BODY_BYTES",
    "MAX_JSON_DEPTH",
    "BodyRefused",
    "BodyTooLarge",
    "HubRoute",
    "UnsupportedMediaType",
    "error_response",
    "invalid_parameters",
    "json_body",
    "read_body",
]

MAX_BODY_BYTES = 16 * 1024 * 1024
"""A request body larger than this is refused (413) before it is read whole."""

MAX_JSON_DEPTH = 200
"""The most levels of arrays and objects within one another a JSON body may have (400 beyond).
Kubernetes objects need a few dozen; the hub writes a body again inside up to a few dozen levels
of its own (a manifest inside an operation inside a forwarded request, an object from the API
server inside a task inside a list of tasks), and orjson writes at most ORJSON_WRITES_DEPTH."""
ORJSON_WRITES_DEPTH = 254
"""orjson.dumps refuses arrays and objects nested deeper (`Recursion limit reached`), where
orjson.loads reads 1,024 (tests/unit/test_hub_operations.py holds orjson to both)."""
_PATH_SHOWN = 6
"""How many steps of the path to a body's too deep part its 400 names."""


class BodyRefused(Exception):
    """The request body is refused before it is read as JSON; answered `status`."""

    status = 400


class BodyTooLarge(BodyRefused):
    """The request body is larger than the hub takes; answered 413."""

    status = 413


class UnsupportedMediaType(BodyRefused):
    """The request body is not declared as JSON (its Content-Type); answered 415."""

    status = 415


def is_json_media_type(content_type: str) -> bool:
    """Whether a Content-Type value declares JSON: `application/json` or `application/<x>+json`,
    with any parameters (`; charset=utf-8`)."""
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def check_json_content_type(request: Request) -> None:
    """UnsupportedMediaType unless the request declares a JSON body (see `is_json_media_type`)."""
    given = request.headers.get("content-type")
    if given is not None and is_json_media_type(given):
        return
    got = "no Content-Type" if given is None else f"Content-Type {given[:100]!r}"
    raise UnsupportedMediaType(f"the body must be JSON sent with Content-Type: application/json; the request has {got}")


def error_response(status: int, message: str, problems: list[str] | None = None) -> JSONResponse:
    """The hub's error shape, with every problem listed when there are several."""
    body: dict[str, Any] = {"error": message, "status": status}
    if problems and len(problems) > 1:
        body["problems"] = problems
    return JSONResponse(body, status_code=status)


DATABASE_RETRY_AFTER_SECONDS = 5
"""The Retry-After of a 503 given because the hub's database does not answer."""


def database_unreachable(message: str) -> HTTPException:
    """A 503 whose reason is the database (`message` says so), with a Retry-After."""
    return HTTPException(503, message, headers={"Retry-After": str(DATABASE_RETRY_AFTER_SECONDS)})


async def read_body(request: Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The request body, or BodyTooLarge naming the limit once more than `limit` bytes came (or
    were announced by Content-Length): a client cannot make the hub hold more than that."""
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and (len(declared) > MAX_DIGITS or int(declared) > limit):
        raise BodyTooLarge(f"the body is {declared[:MAX_DIGITS]} bytes; the most is {limit}")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise BodyTooLarge(f"the body is more than {limit} bytes, the most the hub takes")
    return bytes(body)


def _declared(route: Any, where: str, name: str) -> tuple[str, float | None, float | None] | None:
    """("whole number" or "number", low, high) as the route declares parameter `name` (in
    `where`: query, path, header, cookie); None if it is not a number."""
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return None
    for field in getattr(dependant, f"{where}_params", []):
        if field.alias != name:
            continue
        annotation = field.field_info.annotation
        types = set(get_args(annotation)) or {annotation}
        if int in types:
            what = "whole number"
        elif float in types:
            what = "number"
        else:
            return None
        low: Any = None
        high: Any = None
        for m in field.field_info.metadata:
            if isinstance(m, Ge):
                low = m.ge
            elif isinstance(m, Gt):
                low = m.gt + (1 if what == "whole number" else 0)  # type: ignore[operator]  # numbers here
            elif isinstance(m, Le):
                high = m.le
            elif isinstance(m, Lt):
                high = m.lt - (1 if what == "whole number" else 0)  # type: ignore[operator]  # numbers here
        return what, low, high
    return None


def invalid_parameters(route: Any, error: RequestValidationError) -> JSONResponse:
    """FastAPI's validation error as the hub's 400: each problem names its parameter and, for a
    number, the range it must be in and the value given."""
    problems: list[str] = []
    for err in error.errors():
        loc = [str(p) for p in err.get("loc", ())]
        name = loc[-1] if loc else "the request"
        number = _declared(route, loc[0], name) if len(loc) == 2 else None
        if number is not None and "input" in err:
            what, low, high = number
            problems.append(f"{name}: expected a {what}{describe_range(low, high)}, got {shown(err['input'])}")
        else:
            problems.append(f"{' '.join(loc) or 'the request'}: {err.get('msg', 'invalid')}")
    return error_response(400, "; ".join(problems), problems)


class HubRoute(APIRoute):
    """An APIRoute whose invalid parameters are the hub's 400 (see the module's docstring)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def checked(request: Request) -> Response:
            try:
                return await handler(request)
            except RequestValidationError as e:
                return invalid_parameters(self, e)

        return checked


class ErrorBody(BaseModel):
    error: str = Field(description="What was wrong, naming the account and field")
    status: int
    problems: list[str] | None = Field(None, description="Every problem found, when there are several")
    reason: str | None = Field(None, description="On some errors, a word for the cause: `UnknownKind`")


async def answer(status: int, work: Callable[[], Awaitable[Any]]) -> Response:
    """Run the request and answer `status` with its JSON result, or the error it raised."""
    try:
        result = await work()
    except BodyRefused as e:
        return error_response(e.status, str(e))
    except InvalidRequest as e:
        return error_response(400, str(e), e.problems)
    except UnknownAccounts as e:
        return error_response(404, str(e))
    except Conflict as e:
        return error_response(409, str(e), [str(t) for t in e.transitions])
    except TransitionError as e:
        return error_response(409, str(e))
    except StoreError as e:
        return error_response(503, f"the accounts database failed: {e}")
    return Response(orjson.dumps(result), status_code=status, media_type="application/json")


async def read_json(request: Request, empty: str = "the body is empty: send a JSON list") -> Any:
    """The request body as JSON, or InvalidRequest saying why not (without echoing it); `empty`
    is the message for an empty body, saying what to send. UnsupportedMediaType unless the
    Content-Type says JSON (checked first, so that nothing is read); BodyTooLarge past
    MAX_BODY_BYTES."""
    check_json_content_type(request)
    raw = await read_body(request)
    if not raw.strip():
        raise InvalidRequest(empty)
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        if e.msg.startswith("depth limit exceeded"):  # past 1,024 levels
            raise InvalidRequest(
                f"the body is nested deeper than {MAX_JSON_DEPTH} levels (arrays and objects within one another), "
                f"the most the hub takes: more than 1024 at line {e.lineno}, column {e.colno}"
            ) from None
        raise InvalidRequest(f"the body is not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    if raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH and not nested_within(value, MAX_JSON_DEPTH):
        raise InvalidRequest(
            f"the body is nested deeper than {MAX_JSON_DEPTH} levels (arrays and objects within one another), "
            f"the most the hub takes: at {too_deep_path(value, MAX_JSON_DEPTH)}"
        )
    return value


def nested_within(value: Any, levels: int) -> bool:
    """Whether `value` (as orjson.loads reads JSON) has at most `levels` levels of arrays and
    objects within one another. orjson tells, at C speed: wrapped in ORJSON_WRITES_DEPTH - `levels`
    more arrays, the value can be written only if it is no deeper than `levels` (a value read by
    orjson.loads cannot fail to be written for any other reason)."""
    for _ in range(ORJSON_WRITES_DEPTH - levels):
        value = [value]
    try:
        orjson.dumps(value)
    except orjson.JSONEncodeError:
        return False
    return True


def too_deep_path(value: Any, levels: int) -> str:
    """Where `value` first nests deeper than `levels`, as a path from the body's top
    (`$[0].deployManifest.manifests[0].spec…`): its first steps, each child found by halving the
    children with `nested_within` (a walk in Python through every array and object of a 16 MiB
    body takes seconds)."""
    path, node = "$", value
    for _ in range(_PATH_SHOWN):
        if levels <= 0:
            return path  # `node` is the first level past the most
        levels -= 1
        values = list(node.values()) if isinstance(node, dict) else node
        if nested_within(values, levels + 1):  # the list of them is one level more
            return path
        low, high = 0, len(values)  # a child of values[low:high] is too deep
        while high - low > 1:
            middle = (low + high) // 2
            if nested_within(values[low:middle], levels + 1):
                low = middle
            else:
                high = middle
        key, node = (next(islice(node, low, None)), values[low]) if isinstance(node, dict) else (low, values[low])
        path += f"[{key}]" if isinstance(key, int) else f".{key}" if key.isidentifier() else f"[{key[:40]!r}]"
    return path if levels <= 0 else path + "…"


async def json_body(request: Request, empty: str) -> Any:
    """`read_json` for routes that answer a refused body at once: its refusal is raised as the
    HTTPException the app answers in the hub's error shape (413, 415, or 400 saying why)."""
    try:
        return await read_json(request, empty)
    except BodyRefused as e:
        raise HTTPException(e.status, str(e)) from None
    except InvalidRequest as e:
        raise HTTPException(400, str(e)) from None
