"""RFC 6902 JSON patch and RFC 7386 merge patch."""

from __future__ import annotations

from typing import Any

import jsonpatch
import jsonpointer

from .errors import PatchError
from .values import _copy_json, _fresh_top

# --------------------------------------------------------------------------- JSON patch


def apply_json_patch(obj: dict, patch: object) -> dict:
    """Apply an RFC 6902 JSON patch (``application/json-patch+json``).

    Like the apiserver: a document that is not a list of operation objects is a 400;
    an operation that cannot be applied (failed ``test``, missing path, unknown op) is
    a 422.
    """
    if not isinstance(patch, list) or not all(isinstance(op, dict) for op in patch):
        raise PatchError("json: cannot unmarshal the patch: expected a JSON array of operation objects", 400)
    try:
        jp = jsonpatch.JsonPatch(patch)
        result = jp.apply(obj, in_place=False)
    except jsonpatch.JsonPatchTestFailed as exc:
        raise PatchError(f"the test operation failed: {exc}", 422) from None
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
        raise PatchError(f"the JSON patch could not be applied: {exc}", 422) from None
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise PatchError(f"the JSON patch could not be applied: {exc}", 422) from None
    if not isinstance(result, dict):
        raise PatchError("the JSON patch did not produce a JSON object", 422)
    return result


# --------------------------------------------------------------------------- merge patch


def _merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return _copy_json(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = _merge_patch(out.get(k), v)
    return out


def apply_merge_patch(obj: dict, patch: object) -> dict:
    """Apply an RFC 7386 JSON merge patch (``application/merge-patch+json``).

    Maps merge recursively, ``null`` deletes a key, every other value (lists included)
    replaces what was there.
    """
    if not isinstance(patch, dict):
        raise PatchError("json: cannot unmarshal the merge patch: expected a JSON object", 400)
    return _fresh_top(_merge_patch(obj, patch))
