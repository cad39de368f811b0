"""JSON value helpers shared by every patch type: Go's equality, hashing and copying."""

from __future__ import annotations

import json
from typing import Any

# --------------------------------------------------------------------------- JSON helpers

_MISSING: Any = object()  # "absent", as opposed to an explicit null
_EMPTIED: Any = object()  # a container that pruning left empty


def _eq(a: Any, b: Any) -> bool:
    """JSON equality as Go sees it: 1 == 1.0, but True != 1."""
    if a is b:
        return True
    if isinstance(a, dict):
        if not isinstance(b, dict) or len(a) != len(b):
            return False
        for k, v in a.items():
            w = b.get(k, _MISSING)
            if w is _MISSING or not _eq(v, w):
                return False
        return True
    if isinstance(a, list):
        if not isinstance(b, list) or len(a) != len(b):
            return False
        return all(_eq(x, y) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (dict, list)) or isinstance(b, (dict, list)):
        return False
    return a == b


def _hkey(v: Any) -> Any:
    """Hashable identity of a JSON value (bools apart from numbers, 80 == 80.0)."""
    if isinstance(v, bool):
        return ("b", v)
    if isinstance(v, (int, float)):
        return ("n", v)
    if isinstance(v, str):
        return ("s", v)
    if v is None:
        return ("z",)
    return ("j", json.dumps(v, sort_keys=True))


def _intify(v: Any) -> Any:
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, dict):
        return {k: _intify(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_intify(x) for x in v]
    return v


def _canon_json(v: Any) -> str:
    """Compact JSON with sorted keys and Go's HTML-safe escaping, as managedFields keys use."""
    s = json.dumps(_intify(v), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    if any(c in s for c in "<>&\u2028\u2029"):
        s = (
            s.replace("<", "\\u003c")
            .replace(">", "\\u003e")
            .replace("&", "\\u0026")
            .replace("\u2028", "\\u2028")
            .replace("\u2029", "\\u2029")
        )
    return s


def _copy_json(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _copy_json(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_copy_json(x) for x in v]
    return v


def _fresh_top(obj: dict) -> dict:
    """Copy the top level and metadata, the parts callers routinely mutate."""
    out = dict(obj)
    meta = out.get("metadata")
    if isinstance(meta, dict):
        out["metadata"] = dict(meta)
    return out
