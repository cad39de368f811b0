"""Whole numbers in requests, bounded where they are read: Kubernetes holds replicas as an int32
and grace periods and revisions as int64s, and a number past those limits fails somewhere deep
(an encoder, the API server) unless it is refused where it enters, naming its range."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["INT32_MAX", "INT64_MAX", "MAX_DIGITS", "describe_range", "shown", "whole_number"]

INT32_MAX = 2**31 - 1
"""The largest Kubernetes int32 (replicas): the API server refuses more."""
INT64_MAX = 2**63 - 1
"""The largest int64 (Kubernetes' gracePeriodSeconds, revisions; protobuf's int64)."""

# A whole number written with more digits than this is out of every range here; refusing it
# before int() also keeps clear of int()'s 4,300-digit limit (a ValueError of its own).
MAX_DIGITS = 30
_WHOLE = re.compile(r"\s*[+-]?\d+\s*")


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


def describe_range(low: float | None, high: float | None) -> str:
    if low is not None and high is not None:
        return f" from {low} to {high}"
    if low is not None:
        return f" of at least {low}"
    if high is not None:
        return f" of at most {high}"
    return ""


def whole_number(value: Any, low: int, high: int) -> int:
    """`value` as an int from `low` to `high`: a JSON integer (`3.0` too: JSON and JSON Schema
    tell no difference), or a string of one (Clouddriver's clients send `"replicas": "3"`);
    anything else is a ValueError saying the range and what was given. A JSON number too large for
    64 bits arrives as a float, and is refused as out of range."""
    n: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        n = value
    elif isinstance(value, float) and value.is_integer():  # JSON's 3.0 is 3 (JSON Schema's "integer" too)
        n = int(value)
    elif isinstance(value, str) and _WHOLE.fullmatch(value) and len(value.strip().lstrip("+-")) <= MAX_DIGITS:
        n = int(value)
    if n is None or not low <= n <= high:
        raise ValueError(f"expected a whole number{describe_range(low, high)}, got {shown(value)}")
    return n
