"""Strategic merge patch: a port of k8s.io/apimachinery/pkg/util/strategicpatch (mergeMap /
mergeSlice / normalizeElementOrder)."""

from __future__ import annotations

from typing import Any

from .errors import PatchError
from .schema import _SCHEMAS, _T, _field, has_strategic_schema
from .values import _MISSING, _eq, _fresh_top, _hkey

# --------------------------------------------------------------------------- strategic merge patch

_DIRECTIVE = "$patch"
_RETAIN_KEYS = "$retainKeys"
_DELETE_PRIMITIVE = "$deleteFromPrimitiveList"
_SET_ORDER = "$setElementOrder"


def _extract_key(key: str, prefix: str) -> str:
    head, sep, rest = key.partition("/")
    if not sep or head != prefix:
        if prefix == _DELETE_PRIMITIVE:
            raise PatchError("invalid patch format of primitive list", 400)
        raise PatchError("invalid patch format of setElementOrder list", 400)
    return rest


def _is_directive(key: str) -> bool:
    # Only these are directives; other "$" keys are data (e.g. "$ref" in a CRD schema).
    return key in (_DIRECTIVE, _RETAIN_KEYS) or key.startswith(_SET_ORDER) or key.startswith(_DELETE_PRIMITIVE)


def _smp_clean(v: Any) -> Any:
    """A patch value taken as is: copied, with directives and nulls dropped."""
    if isinstance(v, dict):
        return {k: _smp_clean(x) for k, x in v.items() if x is not None and not _is_directive(k)}
    if isinstance(v, list):
        out = []
        for x in v:
            if isinstance(x, dict) and _DIRECTIVE in x and (x[_DIRECTIVE] == "delete" or len(x) == 1):
                continue
            out.append(_smp_clean(x))
        return out
    return v


def _smp_map(orig: dict | None, patch: dict, t: _T) -> dict:
    directive = patch.get(_DIRECTIVE, _MISSING)
    if directive is not _MISSING:
        rest = {k: v for k, v in patch.items() if k != _DIRECTIVE}
        if directive == "replace":
            return _smp_map({}, rest, t)
        if directive == "delete":
            return {}
        if directive != "merge":  # apimachinery rejects "merge" on maps; kubesim treats it as the default
            raise PatchError(f"unknown patch type: {directive} in map: {patch}", 400)
        patch = rest

    out = dict(orig) if orig else {}
    patch = dict(patch)

    retain = patch.pop(_RETAIN_KEYS, _MISSING)
    if retain is not _MISSING:
        if not isinstance(retain, list):
            raise PatchError("invalid patch format of retainKeys", 400)
        keep = {_hkey(x) for x in retain}
        for k, v in patch.items():
            if v is None or k.startswith(_DELETE_PRIMITIVE) or k.startswith(_SET_ORDER):
                continue
            if _hkey(k) not in keep:
                raise PatchError("patch content doesn't match retainKeys list", 422)
        for k in list(out):
            if _hkey(k) not in keep:
                del out[k]

    for key in [k for k in patch if k.startswith(_SET_ORDER)]:
        _smp_set_element_order(out, patch, key, t)

    for k, pv in patch.items():
        delete_list = False
        if k.startswith(_DELETE_PRIMITIVE):
            k = _extract_key(k, _DELETE_PRIMITIVE)
            delete_list = True
        if pv is None:
            out.pop(k, None)
            continue
        ov = out.get(k, _MISSING)
        if ov is _MISSING:
            if not delete_list:
                out[k] = _smp_clean(pv)
            continue
        ct = _field(t, k)[0]
        if isinstance(ov, dict) and isinstance(pv, dict):
            out[k] = _smp_map(ov, pv, ct)
        elif isinstance(ov, list) and isinstance(pv, list):
            out[k] = _smp_list(ov, pv, ct, delete_list)
        elif not delete_list:
            out[k] = _smp_clean(pv)
    return out


def _smp_set_element_order(out: dict, patch: dict, key: str, t: _T) -> None:
    """apimachinery's mergePatchIntoOriginal: merge one list and enforce ``$setElementOrder``."""
    order = patch.pop(key)
    name = _extract_key(key, _SET_ORDER)
    if not isinstance(order, list):
        raise PatchError("invalid patch format of setElementOrder list", 400)
    ov = out.get(name, _MISSING)
    pv = patch.get(name, _MISSING)
    if ov is not _MISSING and not isinstance(ov, list):
        raise PatchError(f"invalid patch: {name} is not a list in the object", 400)
    if pv is not _MISSING and not isinstance(pv, list):
        raise PatchError(f"invalid patch: {name} is not a list in the patch", 400)
    lt = _field(t, name)[0]
    key_field = None
    if any(isinstance(x, dict) for x in order):
        key_field = lt.smp_key if lt.kind == "list" and lt.smp_merge and lt.smp_key else _common_key(order)
    _validate_set_order(pv if pv is not _MISSING else [], order, key_field)

    if ov is _MISSING and pv is _MISSING:
        return
    if pv is _MISSING:
        merged = list(ov)
    elif ov is _MISSING:
        merged = _smp_list([], pv, lt, False)
    else:
        merged = _smp_list(ov, pv, lt, False)
    original = ov if ov is not _MISSING else []
    patch_items, server_only = _partition(merged, order, key_field)
    out[name] = _normalize_order(patch_items, server_only, order, original, key_field)
    patch.pop(name, None)


def _common_key(order: list) -> str | None:
    for x in order:
        if isinstance(x, dict) and len(x) == 1:
            return next(iter(x))
    return None


def _validate_set_order(patch_list: list, order: list, mk: str | None) -> None:
    if not order or not patch_list:
        return
    items = [x for x in patch_list if not (isinstance(x, dict) and x.get(_DIRECTIVE) == "delete")] if mk else patch_list
    pi = oi = 0
    while pi < len(items) and oi < len(order):
        item = items[pi]
        if isinstance(item, dict) and _DIRECTIVE in item:
            pi += 1
            continue
        if mk:
            if not isinstance(item, dict) or mk not in item:
                raise PatchError(f"map: {item} does not contain declared merge key: {mk}", 400)
            o = order[oi]
            if not isinstance(o, dict) or mk not in o:
                raise PatchError(f"map: {o} does not contain declared merge key: {mk}", 400)
            equal = _eq(item[mk], o[mk])
        else:
            equal = _eq(item, order[oi])
        if equal:
            pi += 1
        oi += 1
    if pi < len(items):
        raise PatchError(
            f"The order in patch list:\n{patch_list}\n doesn't match $setElementOrder list:\n{order}\n", 400
        )


def _smp_list(orig: list, patch: list, t: _T, delete_list: bool) -> list:
    if t.kind != "list" or not t.smp_merge:
        if delete_list:
            return _delete_from_slice(orig, patch)
        return _smp_clean(patch)
    return _merge_slice(orig, patch, t, delete_list)


def _delete_from_slice(current: list, to_delete: list) -> list:
    gone = {_hkey(x) for x in to_delete}
    return [x for x in current if _hkey(x) not in gone]


def _merge_slice(original: list, patch: list, t: _T, delete_list: bool) -> list:
    if not original and not patch:
        return list(original)
    kinds = {
        ("map" if isinstance(x, dict) else "list" if isinstance(x, list) else "scalar") for x in (*original, *patch)
    }
    if "list" in kinds:
        raise PatchError("lists of lists are not supported", 422)
    if len(kinds) > 1:
        raise PatchError(f"list element types are not identical: {original} {patch}", 400)
    if "scalar" in kinds:
        if delete_list:
            return _delete_from_slice(original, patch)
        merged, seen = [], set()
        for x in (*original, *patch):
            h = _hkey(x)
            if h not in seen:
                seen.add(h)
                merged.append(x)
        mk = None
    else:
        mk = t.smp_key
        if not mk:
            raise PatchError("cannot merge lists without merge key for type map", 400)
        original, patch = _special_elements(original, patch, mk)
        merged = _merge_by_key(original, patch, mk, t.elem)
    patch_items, server_only = _partition(merged, patch, mk)
    return _normalize_order(patch_items, server_only, patch, original, mk)


def _special_elements(original: list, patch: list, mk: str) -> tuple[list, list]:
    """apimachinery's mergeSliceWithSpecialElements: ``$patch`` on list elements."""
    rest: list = []
    replace = False
    for v in patch:
        directive = v.get(_DIRECTIVE, _MISSING)
        if directive is _MISSING:
            rest.append(v)
        elif directive == "delete":
            if mk not in v:
                raise PatchError(f"map: {v} does not contain declared merge key: {mk}", 400)
            key = _hkey(v[mk])
            original = [o for o in original if not (isinstance(o, dict) and mk in o and _hkey(o[mk]) == key)]
        elif directive == "replace":
            replace = True
        elif directive == "merge":  # rejected by apimachinery; kubesim merges the element
            rest.append({k: x for k, x in v.items() if k != _DIRECTIVE})
        else:
            raise PatchError(f"unknown patch type: {directive} in map: {v}", 400)
    if replace:
        return [_smp_clean(v) for v in rest], []
    return original, rest


def _merge_by_key(original: list, patch: list, mk: str, elem: _T) -> list:
    out = list(original)
    index: dict = {}
    for i, o in enumerate(out):
        if isinstance(o, dict) and mk in o:
            index.setdefault(_hkey(o[mk]), i)
    for v in patch:
        if mk not in v:
            raise PatchError(f"map: {v} does not contain declared merge key: {mk}", 400)
        h = _hkey(v[mk])
        at = index.get(h)
        if at is None:
            index[h] = len(out)
            out.append(_smp_clean(v))
        else:
            out[at] = _smp_map(out[at], v, elem)
    return out


def _order_key(x: Any, mk: str | None) -> Any:
    if mk is None:
        return _hkey(x)
    if isinstance(x, dict):
        return _hkey(x.get(mk))
    return ("?", id(x))


def _partition(merged: list, by: list, mk: str | None) -> tuple[list, list]:
    keys = {_order_key(x, mk) for x in by}
    inside: list[Any] = []
    server_only: list[Any] = []
    for v in merged:
        (inside if _order_key(v, mk) in keys else server_only).append(v)
    return inside, server_only


def _positions(order: list, mk: str | None) -> dict:
    pos: dict = {}
    for i, x in enumerate(order):
        pos.setdefault(_order_key(x, mk), i)
    return pos


def _normalize_slice_order(to_sort: list, order: list, mk: str | None) -> list:
    pos = _positions(order, mk)
    idx = [pos.get(_order_key(x, mk), -1) for x in to_sort]
    if all(i >= 0 for i in idx):
        return [x for _, x in sorted(zip(idx, to_sort), key=lambda p: p[0])]
    # Go's sort.SliceStable with apimachinery's comparator, which calls an item that is
    # missing from ``order`` "less" than anything: an insertion sort moves it to the front.
    items = list(zip(idx, to_sort))
    for i in range(1, len(items)):
        j = i
        while j > 0:
            a, b = items[j][0], items[j - 1][0]
            if a >= 0 and b >= 0 and not a < b:
                break
            items[j], items[j - 1] = items[j - 1], items[j]
            j -= 1
    return [x for _, x in items]


def _normalize_order(
    patch_items: list, server_only: list, patch_order: list, server_order: list, mk: str | None
) -> list:
    """apimachinery's normalizeElementOrder + mergeSortedSlice.

    Patch items keep the patch's order, server-only items the live order; the two are
    interleaved by live position, and patch items that are new come first.
    """
    right = _normalize_slice_order(patch_items, patch_order, mk)
    left = _normalize_slice_order(server_only, server_order, mk)
    pos = _positions(server_order, mk)
    out = []
    i = j = 0
    while i < len(left) or j < len(right):
        if i >= len(left):
            out.append(right[j])
            j += 1
        elif j >= len(right):
            out.append(left[i])
            i += 1
        else:
            li = pos.get(_order_key(left[i], mk), -1)
            ri = pos.get(_order_key(right[j], mk), -1)
            if li >= 0 and ri >= 0 and li < ri:
                out.append(left[i])
                i += 1
            else:
                out.append(right[j])
                j += 1
    return out


def apply_strategic_merge_patch(obj: dict, patch: object, group: str, kind: str) -> dict:
    """Apply a strategic merge patch (``application/strategic-merge-patch+json``).

    Follows apimachinery's ``StrategicMergeMapPatch``: maps merge recursively and ``null``
    deletes a key; lists merge by their ``patchMergeKey`` where the Go type says
    ``patchStrategy:"merge"`` (containers by name, container ports by containerPort,
    Service ports by port, finalizers as a set of scalars, ...) and are replaced
    otherwise. Directives: ``$patch: replace|delete|merge``, ``$retainKeys``,
    ``$deleteFromPrimitiveList/<field>``, ``$setElementOrder/<field>``. Kinds without Go
    types (custom resources) answer 415, as the apiserver does.
    """
    if not has_strategic_schema(group, kind):
        raise PatchError(
            "the body of the request was in an unknown format - accepted media types include: "
            "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
            415,
        )
    if not isinstance(patch, dict):
        raise PatchError("json: cannot unmarshal the strategic merge patch: expected a JSON object", 400)
    return _fresh_top(_smp_map(obj, patch, _SCHEMAS[(group, kind)]))
