"""Server-side apply and field ownership: a port of sigs.k8s.io/structured-merge-diff (merge,
ToFieldSet, Compare, prune, conflicts) and of the apiserver's fieldmanager chain (managedFields)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from functools import lru_cache
from typing import Any

from .errors import ApplyConflict, PatchError, _SchemaError
from .schema import _T, _elem, _field, _granular_map, _list_type, _schema, _zero_object
from .values import _EMPTIED, _MISSING, _canon_json, _eq, _fresh_top, _hkey

# --------------------------------------------------------------------------- field sets
#
# A field set is a Python set of paths; a path is a tuple of path elements spelled the
# way FieldsV1 spells them: "f:<field>", 'k:{"name":"nginx"}', 'v:"value"', "i:<index>".


@lru_cache(maxsize=16384)
def _scalar_pe(tag: str, hkey: tuple) -> str:
    return tag + _canon_json(hkey[1] if len(hkey) > 1 else None)


@lru_cache(maxsize=16384)
def _key_pe(key: tuple) -> str:
    return "k:" + _canon_json({name: (h[1] if len(h) > 1 else None) for name, h in key})


def _item_pe(t: _T, item: Any) -> str:
    if t.lt == "set":
        if isinstance(item, (dict, list)):
            raise _SchemaError("set list items must be scalars")
        return _scalar_pe("v:", _hkey(item))
    if not isinstance(item, dict):
        raise _SchemaError("associative list with keys may not have non-map elements")
    key = []
    for name in t.keys:
        v = item.get(name)
        if v is None:
            if name not in t.defaults:
                raise _SchemaError(f"associative list with keys had an element that lacks a key: {name}")
            v = t.defaults[name]
        if isinstance(v, (dict, list)):
            return "k:" + _canon_json({n: item.get(n, t.defaults.get(n)) for n in t.keys})
        key.append((name, _hkey(v)))
    return _key_pe(tuple(sorted(key)))


@lru_cache(maxsize=4096)
def _pe_string(pe: str) -> str:
    """One path element the way fieldpath.PathElement.String() prints it."""
    tag, body = pe[:2], pe[2:]
    if tag == "f:":
        return "." + body
    if tag == "i:":
        return f"[{body}]"
    value = json.loads(body)
    if tag == "v:":
        return f"[={_value_string(value)}]"
    return "[" + ",".join(f"{k}={_value_string(value[k])}" for k in sorted(value)) + "]"


def _value_string(v: Any) -> str:
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    return _canon_json(v)


def _path_string(path: tuple) -> str:
    return "".join(_pe_string(pe) for pe in path)


def _value_order(v: Any) -> tuple:
    if isinstance(v, bool):
        return (2, v)
    if isinstance(v, (int, float)):
        return (0, v)
    if isinstance(v, str):
        return (1, v)
    if isinstance(v, list):
        return (3, _canon_json(v))
    if isinstance(v, dict):
        return (4, _canon_json(v))
    return (5,)


@lru_cache(maxsize=4096)
def _pe_order(pe: str) -> tuple:
    """Sort key matching fieldpath.PathElement.Compare: fields, keys, values, indexes."""
    tag, body = pe[:2], pe[2:]
    if tag == "f:":
        return (0, body)
    if tag == "k:":
        value = json.loads(body)
        return (1, tuple((k, _value_order(value[k])) for k in sorted(value)))
    if tag == "v:":
        return (2, _value_order(json.loads(body)))
    return (3, int(body))


def _normalize_pe(pe: str) -> str:
    tag, body = pe[:2], pe[2:]
    if tag == "f:":
        return pe
    if tag in ("k:", "v:"):
        value = json.loads(body)
        if tag == "k:" and not isinstance(value, dict):
            raise ValueError(pe)
        return tag + _canon_json(value)
    if tag == "i:":
        return f"i:{int(body)}"
    raise ValueError(f"unknown path element {pe!r}")


def _trie(paths: Iterable[tuple]) -> dict:
    """Nested dicts of path elements; the key ``None`` marks a member of the set."""
    root: dict = {}
    for p in paths:
        node = root
        for pe in p:
            node = node.setdefault(pe, {})
        node[None] = True
    return root


def _fields_v1(paths: set) -> dict:
    def render(node: dict) -> dict:
        children = sorted((k for k in node if k is not None), key=_pe_order)
        out: dict = {}
        if None in node and children:
            out["."] = {}
        for k in children:
            out[k] = render(node[k])
        return out

    return render(_trie(paths))


def _parse_fields_v1(node: Any, prefix: tuple, out: set) -> None:
    if not isinstance(node, dict):
        raise ValueError("fieldsV1 must be a JSON object")
    if not node:
        if prefix:
            out.add(prefix)
        return
    for k, v in node.items():
        if k == ".":
            if prefix:
                out.add(prefix)
            continue
        _parse_fields_v1(v, prefix + (_normalize_pe(k),), out)


def _sorted_paths(paths: set) -> list[tuple]:
    """Set iteration order of structured-merge-diff: members first, then children, sorted."""
    out: list[tuple] = []

    def walk(node: dict, prefix: tuple) -> None:
        keys = sorted((k for k in node if k is not None), key=_pe_order)
        for k in keys:
            if None in node[k]:
                out.append(prefix + (k,))
        for k in keys:
            if len(node[k]) > (1 if None in node[k] else 0):
                walk(node[k], prefix + (k,))

    walk(_trie(paths), ())
    return out


def _to_set(v: Any, t: _T, path: tuple, out: set) -> None:
    """structured-merge-diff's ToFieldSet: the fields an applied configuration sets."""
    if isinstance(v, dict):
        if not _granular_map(t):
            out.add(path)
            return
        for key, val in v.items():
            ct, declared = _field(t, key)
            p = path + ("f:" + key,)
            _to_set(val, ct, p, out)
            if not declared or val is None or (isinstance(val, dict) and not val):
                out.add(p)
        return
    if isinstance(v, list):
        if _list_type(t) == "atomic":
            out.add(path)
            return
        seen = set()
        for item in v:
            try:
                pe = _item_pe(t, item)
            except _SchemaError as exc:
                raise _SchemaError(f"{_path_string(path)}: {exc}") from None
            if pe in seen:
                raise _SchemaError(f"{_path_string(path)}: duplicate entries for key {_pe_string(pe)}")
            seen.add(pe)
            p = path + (pe,)
            _to_set(item, t.elem, p, out)
            out.add(p)
        return
    if path:
        out.add(path)


def _index_items(t: _T, items: list, path: tuple) -> tuple[list, dict]:
    order, found = [], {}
    for item in items:
        try:
            pe = _item_pe(t, item)
        except _SchemaError as exc:
            raise _SchemaError(f"{_path_string(path)}: {exc}") from None
        if pe not in found:  # duplicates: the first one wins
            found[pe] = item
            order.append(pe)
    return order, found


def _compare(left: Any, r: Any, t: _T, path: tuple, added: set, modified: set, removed: set) -> None:
    """structured-merge-diff's Compare: which fields ``r`` added, modified or removed."""
    if left is r:
        return  # shared, unchanged subtree (results of this module share what they do not change)
    if isinstance(left, dict) or isinstance(r, dict):
        if (
            (left is _MISSING or left is None or isinstance(left, dict))
            and (r is _MISSING or r is None or isinstance(r, dict))
            and _granular_map(t)
        ):
            ld = left if isinstance(left, dict) else {}
            rd = r if isinstance(r, dict) else {}
            if ld or rd:
                for key, lv in ld.items():
                    _compare(
                        lv, rd.get(key, _MISSING), _field(t, key)[0], path + ("f:" + key,), added, modified, removed
                    )
                for key, rv in rd.items():
                    if key not in ld:
                        _compare(_MISSING, rv, _field(t, key)[0], path + ("f:" + key,), added, modified, removed)
                if left is _MISSING:
                    added.add(path)
                elif r is _MISSING:
                    removed.add(path)
                return
    elif isinstance(left, list) or isinstance(r, list):
        if (
            (left is _MISSING or left is None or isinstance(left, list))
            and (r is _MISSING or r is None or isinstance(r, list))
            and _list_type(t) != "atomic"
        ):
            ll = left if isinstance(left, list) else []
            rl = r if isinstance(r, list) else []
            if left is not _MISSING and r is not _MISSING and _eq(ll, rl):
                return  # equal lists: skip computing the item keys
            if ll or rl:
                l_order, l_items = _index_items(t, ll, path)
                r_order, r_items = _index_items(t, rl, path)
                for pe in r_order:
                    _compare(l_items.get(pe, _MISSING), r_items[pe], t.elem, path + (pe,), added, modified, removed)
                for pe in l_order:
                    if pe not in r_items:
                        _compare(l_items[pe], _MISSING, t.elem, path + (pe,), added, modified, removed)
                if left is _MISSING:
                    added.add(path)
                elif r is _MISSING:
                    removed.add(path)
                return
    if left is _MISSING:
        added.add(path)
    elif r is _MISSING:
        removed.add(path)
    elif not _eq(left, r):
        modified.add(path)


def _merge(left: Any, r: Any, t: _T) -> Any:
    """structured-merge-diff's merge of an applied configuration ``r`` into ``left``.

    A null in the configuration stays null in the result (so that nulling a field owned
    by someone else is a conflict, as in Kubernetes); :func:`_drop_nulls` removes them
    once ownership is settled, as the apiserver's typed round-trip does.
    """
    if r is None:
        if (isinstance(left, dict) and left and _granular_map(t)) or (
            isinstance(left, list) and left and _list_type(t) != "atomic"
        ):
            return left
        return None
    if isinstance(r, dict):
        if not _granular_map(t):
            return r
        ld = left if isinstance(left, dict) else {}
        out = dict(ld)
        for k, rv in r.items():
            out[k] = _merge(ld.get(k, _MISSING), rv, _field(t, k)[0])
        return out
    if isinstance(r, list):
        if _list_type(t) == "atomic":
            return r
        return _merge_list(left if isinstance(left, list) else [], r, t)
    return r


def _merge_list(ll: list, rl: list, t: _T) -> list:
    """Merge of associative lists and sets, with structured-merge-diff's item order."""
    l_order, l_items = _index_items(t, ll, ())
    r_order, r_items = _index_items(t, rl, ())
    is_set = t.lt == "set"

    def take(pe: str) -> None:
        rv = r_items.get(pe, _MISSING)
        if rv is _MISSING:
            out.append(l_items[pe])
            return
        v = rv if is_set else _merge(l_items.get(pe, _MISSING), rv, t.elem)
        if v is not None:
            out.append(v)

    shared = [pe for pe in r_order if pe in l_items]
    si = 0
    next_shared = shared[0] if shared else None
    out: list = []
    li = ri = 0
    nl, nr = len(l_order), len(r_order)
    while li < nl or ri < nr:
        if li < nl and ri < nr:
            pe = l_order[li]
            if pe == r_order[ri]:
                take(pe)
                li += 1
                ri += 1
                si += 1
                next_shared = shared[si] if si < len(shared) else None
                continue
            if pe in r_items and next_shared is not None and next_shared != pe:
                li += 1
                continue
        if li < nl and l_order[li] not in r_items:
            take(l_order[li])
            li += 1
            continue
        if ri < nr:
            pe = r_order[ri]
            take(pe)
            ri += 1
            if next_shared is not None and next_shared == pe:
                si += 1
                next_shared = shared[si] if si < len(shared) else None
            continue
        li += 1  # an already merged item: never reached with well-formed input, but never loop
    return out


def _drop_nulls(v: Any) -> Any:
    """Remove null-valued keys, copying only the containers that hold one."""
    if isinstance(v, dict):
        out = None
        for k, x in v.items():
            nx = None if x is None else _drop_nulls(x)
            if nx is not x or x is None:
                if out is None:
                    out = dict(v)
                if x is None:
                    del out[k]
                else:
                    out[k] = nx
        return v if out is None else out
    if isinstance(v, list):
        new = [_drop_nulls(x) for x in v]
        return new if any(a is not b for a, b in zip(new, v)) else v
    return v


def _ensure_named(paths: set, root: _T) -> set:
    """fieldpath.Set.EnsureNamedFieldsAreMembers: declared struct fields on the way become members."""
    out = set(paths)

    def walk(node: dict, t: _T, prefix: tuple) -> None:
        for pe, child in node.items():
            if pe is None:
                continue
            p = prefix + (pe,)
            if pe[0] == "f":
                ct, declared = _field(t, pe[2:])
                if declared:
                    out.add(p)
            else:
                ct = _elem(t)
            walk(child, ct, p)

    walk(_trie(paths), root, ())
    return out


def _remove_paths(v: Any, t: _T, node: dict) -> Any:
    """structured-merge-diff's RemoveItems: drop the members of ``node`` with their subtrees."""
    if isinstance(v, dict):
        if not _granular_map(t):
            return v
        out = None
        for k, val in v.items():
            sub = node.get("f:" + k)
            if sub is None:
                continue
            if out is None:
                out = dict(v)
            if None in sub:
                del out[k]
                continue
            nv = _remove_paths(val, _field(t, k)[0], sub)
            if nv is _EMPTIED:
                del out[k]
            else:
                out[k] = nv
        if out is None:
            return v
        return out if out else _EMPTIED
    if isinstance(v, list) and v and _list_type(t) != "atomic":
        items: list = []
        changed = False
        for item in v:
            try:
                pe = _item_pe(t, item)
            except _SchemaError:
                items.append(item)
                continue
            sub = node.get(pe)
            if sub is None:
                items.append(item)
                continue
            changed = True
            if None in sub:
                continue
            nv = _remove_paths(item, t.elem, sub)
            items.append({} if nv is _EMPTIED else nv)
        if not changed:
            return v
        return items if items else _EMPTIED
    return v


# --------------------------------------------------------------------------- managedFields

# fieldmanager's stripMetaManager removes exactly these paths from every manager's set.
_STRIPPED = frozenset(
    [
        ("f:apiVersion",),
        ("f:kind",),
        ("f:metadata",),
        ("f:metadata", "f:name"),
        ("f:metadata", "f:namespace"),
        ("f:metadata", "f:creationTimestamp"),
        ("f:metadata", "f:selfLink"),
        ("f:metadata", "f:uid"),
        ("f:metadata", "f:clusterName"),
        ("f:metadata", "f:generation"),
        ("f:metadata", "f:managedFields"),
        ("f:metadata", "f:resourceVersion"),
    ]
)


class _Entry:
    __slots__ = ("manager", "operation", "api_version", "time", "subresource", "paths", "source")

    def __init__(
        self,
        manager: str,
        operation: str,
        api_version: str,
        time: str | None,
        subresource: str,
        paths: set,
        source: tuple | None = None,
    ):
        self.manager = manager
        self.operation = operation
        self.api_version = api_version
        self.time = time
        self.subresource = subresource
        self.paths = paths
        self.source = source  # (decoded paths, fieldsV1 dict) to reuse when unchanged

    def identifier(self) -> str:
        """fieldmanager's BuildManagerIdentifier (appliers are not told apart by version)."""
        d = {"manager": self.manager, "operation": self.operation}
        if self.operation == "Update":
            d["apiVersion"] = self.api_version
        if self.subresource:
            d["subresource"] = self.subresource
        return json.dumps(d, separators=(",", ":"))

    def display(self) -> str:
        """fieldmanager's printManager, as used in conflict messages."""
        s = json.dumps(self.manager, ensure_ascii=False)
        if self.subresource:
            s += f" with subresource {json.dumps(self.subresource, ensure_ascii=False)}"
        if self.operation == "Update":
            s += f" using {self.api_version}"
        return s


def _entry_key(manager: str, operation: str, subresource: str, api_version: str) -> tuple:
    return (manager, operation, subresource, api_version if operation == "Update" else "")


def _decode_managed(mf: Any) -> dict[tuple, _Entry] | None:
    """Decode metadata.managedFields; None when it is malformed."""
    if mf is None:
        return {}
    if not isinstance(mf, list):
        return None
    out: dict[tuple, _Entry] = {}
    try:
        for e in mf:
            if not isinstance(e, dict):
                return None
            op = e.get("operation")
            api_version = e.get("apiVersion")
            if op not in ("Apply", "Update") or not api_version or e.get("fieldsType") != "FieldsV1":
                return None
            fields = e.get("fieldsV1") or {}
            parsed = _parse_cached(json.dumps(fields, separators=(",", ":")))
            manager = e.get("manager") or ""
            subresource = e.get("subresource") or ""
            out[_entry_key(manager, op, subresource, api_version)] = _Entry(
                manager, op, api_version, e.get("time"), subresource, set(parsed), (parsed, fields)
            )
    except (ValueError, TypeError, AttributeError):
        return None
    return out


@lru_cache(maxsize=512)
def _parse_cached(fields_json: str) -> frozenset:
    paths: set = set()
    _parse_fields_v1(json.loads(fields_json), (), paths)
    return frozenset(paths)


def _time_seconds(t: str | None) -> float:
    if not t:
        return 0
    try:
        return int(datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp())
    except (ValueError, TypeError, AttributeError):
        return 0


def _encode_managed(managers: dict[tuple, _Entry]) -> list[dict]:
    entries = sorted(
        managers.values(),
        key=lambda e: (e.operation, _time_seconds(e.time), e.manager, e.api_version, e.subresource),
    )
    out = []
    for e in entries:
        d: dict = {"manager": e.manager, "operation": e.operation, "apiVersion": e.api_version}
        if e.time:
            d["time"] = e.time
        d["fieldsType"] = "FieldsV1"
        if e.source is not None and e.paths == e.source[0]:
            d["fieldsV1"] = e.source[1]
        else:
            d["fieldsV1"] = _fields_v1(e.paths)
        if e.subresource:
            d["subresource"] = e.subresource
        out.append(d)
    return out


def _finish_managers(managers: dict[tuple, _Entry]) -> None:
    for key in list(managers):
        e = managers[key]
        e.paths -= _STRIPPED
        if not e.paths:
            del managers[key]


def _with_managed(obj: dict, managers: dict[tuple, _Entry]) -> dict:
    out = _fresh_top(obj)
    meta = out.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
        out["metadata"] = meta
    if managers:
        meta["managedFields"] = _encode_managed(managers)
    else:
        meta.pop("managedFields", None)
    return out


def _without_managed(obj: dict) -> dict:
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        obj = dict(obj)
        obj["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    return obj


def _reset_prefixes(subresource: str) -> tuple[tuple, ...]:
    """Fields the strategy resets, which the apiserver leaves out of ownership."""
    return (("f:spec",),) if subresource == "status" else (("f:status",),)


def _drop_reset(paths: set, prefixes: tuple[tuple, ...]) -> set:
    if not paths:
        return paths
    heads = {x[0] for x in prefixes}  # reset fields are top-level fields
    return {p for p in paths if not p or p[0] not in heads}


def _api_version(group: str, version: str) -> str:
    return f"{group}/{version}" if group else version


def _diff(lhs: dict, rhs: dict, root: _T, reset: tuple[tuple, ...]) -> tuple[set, set, set]:
    added: set = set()
    modified: set = set()
    removed: set = set()
    _compare(lhs, rhs, root, (), added, modified, removed)
    return _drop_reset(added, reset), _drop_reset(modified, reset), _drop_reset(removed, reset)


def _track_update(
    managers: dict[tuple, _Entry],
    lhs: dict,
    rhs: dict,
    key: tuple,
    entry_args: tuple[str, str, str],
    root: _T,
    reset: tuple[tuple, ...],
    now: str,
) -> None:
    """An Update operation: the writer takes every field it changed, nobody keeps removed ones."""
    added, modified, removed = _diff(lhs, rhs, root, reset)
    changed = (added | modified) - _STRIPPED
    for e in managers.values():
        if changed:
            e.paths -= changed
        if removed:
            e.paths -= removed
    if changed:
        entry = managers.get(key)
        if entry is None:
            entry = managers[key] = _Entry(*entry_args, now, key[2], set())
        entry.paths |= changed
        entry.time = now


def _is_reset_request(mf: Any) -> bool:
    """An empty list, or a list of one empty entry, asks the apiserver to drop managedFields."""
    return isinstance(mf, list) and (not mf or (len(mf) == 1 and mf[0] == {}))


def record_update(
    old: dict | None, new: dict, *, manager: str, group: str, version: str, kind: str, now: str, subresource: str = ""
) -> dict:
    """Record the ownership of a non-apply write (create, update, patch) in ``new``.

    The fields that differ between ``old`` and ``new`` go to ``manager`` with operation
    ``Update`` and are taken from every other manager, as the apiserver's field manager
    does; a later apply by someone else then conflicts on them. ``old=None`` is a create:
    everything ``new`` sets goes to ``manager``. Returns ``new`` with
    ``metadata.managedFields`` set (or removed when nobody owns anything).

    As in Kubernetes: managedFields sent in ``new`` replace the live ones when they are
    valid (an empty list, or ``[{}]``, clears them), except on subresources; an existing
    object without managedFields is not tracked by updates; failures never fail the
    write, they leave the object without managedFields.
    """
    api_version = _api_version(group, version)
    root = _schema(group, kind)
    managers: dict[tuple, _Entry] | None = None
    if subresource:
        managers = _decode_managed((old.get("metadata") or {}).get("managedFields")) if old else {}
    else:
        new_meta = new.get("metadata")
        new_mf = new_meta.get("managedFields") if isinstance(new_meta, dict) else None
        if _is_reset_request(new_mf):
            managers = {}
        else:
            managers = _decode_managed(new_mf)
            if not managers and old is not None:
                managers = _decode_managed((old.get("metadata") or {}).get("managedFields"))
    if managers is None:
        managers = {}
    new_body = _without_managed(new)
    if old is not None and not managers:
        return _with_managed(new_body, {})
    lhs = _without_managed(old) if old is not None else _zero_object(group, kind)
    key = _entry_key(manager, "Update", subresource, api_version)
    try:
        _track_update(
            managers, lhs, new_body, key, (manager, "Update", api_version), root, _reset_prefixes(subresource), now
        )
    except _SchemaError:
        return _with_managed(new_body, {})
    _finish_managers(managers)
    return _with_managed(new_body, managers)


def _conflict_error(conflicts: list[tuple[_Entry, list[tuple]]]) -> ApplyConflict:
    pairs: list[tuple[str, str]] = []
    causes: list[dict[str, str]] = []
    flat: list[tuple[_Entry, str]] = []
    for e, paths in conflicts:
        for p in paths:
            ps = _path_string(p)
            pairs.append((e.manager, ps))
            causes.append({"reason": "FieldManagerConflict", "message": f"conflict with {e.display()}", "field": ps})
            flat.append((e, ps))
    if len(flat) == 1:
        e, ps = flat[0]
        message = f"Apply failed with 1 conflict: conflict with {e.display()}: {ps}"
    else:
        lines = []
        for e, paths in sorted(conflicts, key=lambda c: c[0].identifier()):
            lines.append(f"conflicts with {e.display()}:")
            lines.extend(f"- {_path_string(p)}" for p in paths)
        message = f"Apply failed with {len(flat)} conflicts: " + "\n".join(lines)
    return ApplyConflict(pairs, message, causes)


def server_side_apply(
    live: dict | None,
    applied: dict,
    *,
    manager: str,
    force: bool,
    group: str,
    version: str,
    kind: str,
    now: str,
    subresource: str = "",
) -> dict:
    """Server-side apply of the configuration ``applied`` onto ``live`` (None: create).

    The configuration is the manager's full intent. It is merged into the live object
    (associative lists by their keys, sets as sets, atomic lists and structs replaced);
    the manager then owns exactly the fields it sets. Fields it owned before and no
    longer sets are removed, unless another manager owns them. Changing a field owned by
    another manager raises :class:`ApplyConflict` unless ``force`` is set, in which case
    ownership moves. Returns the new object with ``metadata.managedFields``.

    Errors, as the apiserver's: 400 for a configuration of another kind or version, or
    one that carries ``metadata.managedFields``; 422 for a configuration that does not fit
    the schema (e.g. two containers with the same name).
    """
    if not isinstance(applied, dict):
        raise PatchError("error decoding YAML: the apply configuration must be an object", 400)
    api_version = _api_version(group, version)
    if applied.get("apiVersion") != api_version or applied.get("kind") != kind:
        av = applied.get("apiVersion")
        g, _, v = av.rpartition("/") if isinstance(av, str) else ("", "", "")
        raise PatchError(f"invalid object type: {g}/{v}, Kind={applied.get('kind') or ''}", 400)
    meta = applied.get("metadata")
    if isinstance(meta, dict) and meta.get("managedFields") is not None:
        raise PatchError("metadata.managedFields must be nil", 400)

    root = _schema(group, kind)
    reset = _reset_prefixes(subresource)
    managers: dict[tuple, _Entry] = {}
    live_body: dict | None = None
    if live is not None:
        managers = _decode_managed((live.get("metadata") or {}).get("managedFields")) or {}
        live_body = _without_managed(live)
    try:
        if live_body is not None and not managers:
            # Fields of an object nobody tracked yet belong to "before-first-apply".
            bfa = _entry_key("before-first-apply", "Update", subresource, api_version)
            _track_update(
                managers,
                _zero_object(group, kind),
                live_body,
                bfa,
                ("before-first-apply", "Update", api_version),
                root,
                reset,
                now,
            )

        base = live_body if live_body is not None else {}
        merged = _merge(base, applied, root)
        if merged is None:
            merged = {}
        applied_set: set = set()
        _to_set(applied, root, (), applied_set)
        applied_set = _drop_reset(applied_set, reset)

        key = _entry_key(manager, "Apply", subresource, api_version)
        previous = managers.get(key)
        entry = _Entry(
            manager,
            "Apply",
            api_version,
            previous.time if previous else None,
            subresource,
            applied_set,
            previous.source if previous else None,
        )
        managers[key] = entry

        if previous is not None and not previous.paths <= applied_set:
            owned: set = set()
            for e in managers.values():
                owned |= e.paths
            gone = _ensure_named(previous.paths, root) - _ensure_named(owned, root)
            if gone:
                merged = _remove_paths(merged, root, _trie(gone))
                if merged is _EMPTIED:
                    merged = {}

        others = [e for k, e in managers.items() if k != key and e.paths]
        if others:
            added, modified, removed = _diff(base, merged, root, reset)
            changed = added | modified
            conflicts = []
            for e in others:
                hit = e.paths & changed
                if hit:
                    conflicts.append((e, _sorted_paths(hit)))
            if conflicts and not force:
                raise _conflict_error(conflicts)
            for e in others:
                if changed:
                    e.paths -= changed
                if removed:
                    e.paths -= removed
    except _SchemaError as exc:
        raise PatchError(f"failed to create typed patch object ({group}/{version}, Kind={kind}): {exc}", 422) from None

    merged = _drop_nulls(merged)
    if live_body is None or previous is None or not _eq(base, merged):
        entry.time = now
    _finish_managers(managers)
    return _with_managed(merged, managers)
