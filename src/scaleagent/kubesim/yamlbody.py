"""Request bodies sent as YAML, read the way kube-apiserver reads them (sigs.k8s.io/yaml over go-yaml).

* JSON is tried first: it is what kubectl sends even as `application/apply-patch+yaml`, and orjson
  reads a 2 MB body in milliseconds where a pure-Python YAML parser blocks the event loop for seconds.
* Aliases are bounded as go-yaml bounds them since CVE-2019-11253 ("document contains excessive
  aliasing"): a few hundred bytes of nested aliases would otherwise expand to gigabytes when the
  object is serialised. Sizes are counted on the parsed node graph, without expanding it.
* Map keys become strings as sigs.k8s.io/yaml makes them (`1: a` is `"1": a`), and timestamps stay
  strings, as go-yaml keeps them when decoding into interface{}.
"""

from __future__ import annotations

import math
from typing import Any

import orjson
import yaml

_TIMESTAMP = "tag:yaml.org,2002:timestamp"


class _Loader(yaml.composer.Composer, getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """The C parser when PyYAML has it, without timestamp resolution.

    Nodes are composed in Python: libyaml's composer recurses in C and crashes the process on a
    deeply nested document, where Python's recursion limit raises an error we can answer with a 400.
    """

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != _TIMESTAMP]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def __init__(self, stream: bytes) -> None:
        super(yaml.composer.Composer, self).__init__(stream)
        yaml.composer.Composer.__init__(self)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[str, Any]:
        """Keys become strings as they are read: `1` and `true` are different keys, though 1 == True in Python."""
        self.flatten_mapping(node)
        mapping = {}
        for key_node, value_node in node.value:
            value = self.construct_object(value_node, deep=deep)
            mapping[_key(self.construct_object(key_node, deep=deep), value)] = value
        return mapping


def loads(raw: bytes, max_nodes: int) -> Any:
    """Parse a JSON or YAML body. Raises yaml.YAMLError (JSON errors included) on bad input."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    loader = _Loader(raw)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        nodes, expansions = _expanded_size(node)
        if nodes > max_nodes or (
            expansions > 100 and nodes > 1000 and expansions / nodes > _allowed_alias_ratio(nodes)
        ):
            raise yaml.YAMLError("document contains excessive aliasing")
        return loader.construct_document(node)
    except RecursionError:
        raise yaml.YAMLError("the document is nested too deeply") from None
    finally:
        loader.dispose()


def _allowed_alias_ratio(decoded: int) -> float:
    """go-yaml's limit: up to 99% of a small document may come from aliases, 10% of a huge one."""
    low, high = 400_000, 4_000_000
    if decoded <= low:
        return 0.99
    if decoded >= high:
        return 0.10
    return 0.99 - 0.89 * (decoded - low) / (high - low)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _expanded_size(root: yaml.Node) -> tuple[int, int]:
    """(nodes, alias expansions) the document would have with its aliases expanded.

    The composer makes every alias the very node its anchor names, so a node met a second time is an
    alias, worth that node's whole (already computed) expansion. Iterative: nesting may be deep.
    """
    totals: dict[int, tuple[int, int]] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, Any, list[int]]] = [(root, iter(_children(root)), [1, 0])]
    on_path.add(id(root))
    while stack:
        node, children, acc = stack[-1]
        child = next(children, None)
        if child is None:
            stack.pop()
            on_path.discard(id(node))
            totals[id(node)] = (acc[0], acc[1])
            if stack:
                stack[-1][2][0] += acc[0]
                stack[-1][2][1] += acc[1]
        elif id(child) in on_path:
            raise yaml.YAMLError("anchor value contains itself")
        elif id(child) in totals:
            nodes, expansions = totals[id(child)]
            acc[0] += nodes
            acc[1] += expansions + 1
        else:
            on_path.add(id(child))
            stack.append((child, iter(_children(child)), [1, 0]))
    return totals[id(root)]


def _key(key: Any, value: Any) -> str:
    """sigs.k8s.io/yaml's convertToJSONableObject: bools, ints and floats become strings; nothing else may be a key."""
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, int):
        return str(key)
    if isinstance(key, float):
        if math.isnan(key):
            return ".nan"
        if math.isinf(key):
            return ".inf" if key > 0 else "-.inf"
        return str(int(key)) if key.is_integer() and abs(key) < 1e21 else repr(key)
    raise yaml.YAMLError(f"unsupported map key of type: {type(key).__name__}, key: {key!r}, value: {value!r}")
