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
rather than reading gigabytes into memory to find out they are too many.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Coroutine
from typing import Any, get_args

from annotated_types import Ge, Gt, Le, Lt
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute

__all__ = [
    "INT32_MAX",
    "INT64_MAX",
    "MAX_BODY_BYTES",
    "BodyTooLarge",
    "HubRoute",
    "error_response",
    "invalid_parameters",
    "read_body",
    "shown",
    "whole_number",
]

INT32_MAX = 2**31 - 1
"""The largest Kubernetes int32 (replicas): the API server refuses more."""
INT64_MAX = 2**63 - 1
"""The largest int64 (Kubernetes' gracePeriodSeconds, revisions; protobuf's int64)."""
MAX_BODY_BYTES = 16 * 1024 * 1024
"""A request body larger than this is refused (413) before it is read whole."""

# A whole number written with more digits than this is out of every range here; refusing it
# before int() also keeps clear of int()'s 4,300-digit limit (a ValueError of its own).
_MAX_DIGITS = 30
_WHOLE = re.compile(r"\s*[+-]?\d+\s*")


class BodyTooLarge(Exception):
    """The request body is larger than the hub takes; answered 413."""


def error_response(status: int, message: str, problems: list[str] | None = None) -> JSONResponse:
    """The hub's error shape, with every problem listed when there are several."""
    body: dict[str, Any] = {"error": message, "status": status}
    if problems and len(problems) > 1:
        body["problems"] = problems
    return JSONResponse(body, status_code=status)


async def read_body(request: Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The request body, or BodyTooLarge naming the limit once more than `limit` bytes came (or
    were announced by Content-Length): a client cannot make the hub hold more than that."""
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and (len(declared) > _MAX_DIGITS or int(declared) > limit):
        raise BodyTooLarge(f"the body is {declared[:_MAX_DIGITS]} bytes; the most is {limit}")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise BodyTooLarge(f"the body is more than {limit} bytes, the most the hub takes")
    return bytes(body)


def shown(value: Any) -> str:
    """A value given, for a message: short, and in JSON's words for what is not a scalar."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value[:40] + ("..." if len(value) > 40 else ""))
    if isinstance(value, int):
        return str(value) if value.bit_length() <= 128 else f"a number of {value.bit_length()} bits"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _range(low: float | None, high: float | None) -> str:
    if low is not None and high is not None:
        return f" from {low} to {high}"
    if low is not None:
        return f" of at least {low}"
    if high is not None:
        return f" of at most {high}"
    return ""


def whole_number(value: Any, low: int, high: int) -> int:
    """`value` as an int from `low` to `high`: a JSON integer, or a string of one (Clouddriver's
    clients send `"replicas": "3"`); anything else is a ValueError saying the range and what was
    given. A JSON number too large for 64 bits arrives as a float, and is refused as not whole."""
    n: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        n = value
    elif isinstance(value, str) and _WHOLE.fullmatch(value) and len(value.strip().lstrip("+-")) <= _MAX_DIGITS:
        n = int(value)
    if n is None or not low <= n <= high:
        raise ValueError(f"expected a whole number{_range(low, high)}, got {shown(value)}")
    return n


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
            problems.append(f"{name}: expected a {what}{_range(low, high)}, got {shown(err['input'])}")
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
