"""kubectl's JSONPath templates (`-o jsonpath=...`, `custom-columns`, `--sort-by`).

kubectl does not use JSONPath as the libraries of that name do: it has its own template language
(client-go's util/jsonpath) where text outside braces is printed as is, `{...}` evaluates a path,
several results are joined by spaces, `{range ...}{end}` loops, `{"\\n"}` is a quoted string, and a
missing key prints nothing (kubectl get sets allowMissingKeys). jsonpath-ng and its kin implement
the Goessner syntax, without the template layer, ranges or kubectl's printing of values, so the
dialect is written here, small and pure:

    {.items[*].metadata.name}                   a b c
    {range .items[*]}{.metadata.name}{"\\n"}{end}  a line per item
    {.items[0].spec.containers[*].image}         indexes, slices [1:3], [-1], [*], unions [0,2]
    {..image}  {.metadata.labels.app\\.kubernetes\\.io/name}  {.metadata.labels['app.kubernetes.io/name']}
    {.items[?(@.status.phase=="Running")].metadata.name}   filters: == != < > <= >=, or @.field alone
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .errors import CliError

__all__ = [
    "JSONPathError",
    "Template",
    "evaluate",
    "go_value",
    "parse",
    "relaxed",
    "render",
    "text_value",
]


class JSONPathError(CliError):
    """A template that does not parse, or a path that cannot be evaluated (an index out of range);
    printed as kubectl prints it, after `error: `."""

    def __init__(self, message: str) -> None:
        super().__init__(message if message.startswith("error: ") else f"error: {message}")


# --- the syntax tree -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Field:
    name: str  # '*': every value of a map


@dataclass(frozen=True)
class Recursive:
    name: str  # '..name': that key at any depth; '..*': everything below


@dataclass(frozen=True)
class Index:
    """`[n]`, `[a:b:c]`, `[*]`; several of them (`[0,2]`) or keys (`['a','b']`) are a union."""

    items: tuple[int | slice | str, ...]


@dataclass(frozen=True)
class Filter:
    left: Path
    op: str  # '' : `[?(@.x)]`, the field exists and is not empty
    right: Path | Any = None


@dataclass(frozen=True)
class Path:
    root: str  # '@' the current value, '$' the whole input
    steps: tuple[Field | Recursive | Index | Filter, ...] = ()


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Range:
    path: Path
    body: tuple[Node, ...] = ()


Node = Text | Path | Range


@dataclass(frozen=True)
class Template:
    """A parsed template; `source` is what the user typed, for messages."""

    source: str
    nodes: tuple[Node, ...] = field(default_factory=tuple)


# --- parsing -------------------------------------------------------------------------------------


def relaxed(path: str) -> str:
    """kubectl's RelaxedJSONPathExpression: `.metadata.name`, `metadata.name` and
    `{.metadata.name}` all mean `{.metadata.name}` (custom-columns and --sort-by take any)."""
    text = path.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    if not text.startswith((".", "$", "@", "[")):
        text = "." + text
    return "{" + text + "}"


def parse(source: str) -> Template:
    """Parse a template; errors are kubectl's `error parsing jsonpath ...`."""
    nodes: list[Node] = []
    stack: list[tuple[Path, list[Node]]] = []
    current = nodes
    i = 0
    while i < len(source):
        start = source.find("{", i)
        if start < 0:
            current.append(Text(source[i:]))
            break
        if start > i:
            current.append(Text(source[i:start]))
        end = _closing_brace(source, start)
        if end < 0:
            raise JSONPathError(f"error parsing jsonpath {source}, unclosed action")
        inner = source[start + 1 : end].strip()
        i = end + 1
        if inner == "end":
            if not stack:
                raise JSONPathError(f"error parsing jsonpath {source}, not in range, nothing to end")
            path, outer = stack.pop()
            outer.append(Range(path, tuple(current)))
            current = outer
        elif inner.startswith("range ") or inner == "range":
            path = _Parser(inner[5:].strip(), source).path()
            stack.append((path, current))
            current = []
        elif inner.startswith('"') or inner.startswith("'"):
            current.append(Text(_unquote(inner, source)))
        else:
            current.append(_Parser(inner, source).path())
    if stack:
        raise JSONPathError(f"error parsing jsonpath {source}, unclosed range")
    return Template(source, tuple(nodes))


def _closing_brace(source: str, start: int) -> int:
    """The `}` that closes the action at `start`, skipping quoted strings (`{"}"}`)."""
    i, quote = start + 1, ""
    while i < len(source):
        c = source[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c == "}":
            return i
        i += 1
    return -1


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "0": "\0"}


def _unquote(text: str, source: str) -> str:
    quote = text[0]
    if len(text) < 2 or text[-1] != quote:
        raise JSONPathError(f"error parsing jsonpath {source}, unterminated string {text}")
    out, i, body = [], 0, text[1:-1]
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            out.append(_ESCAPES.get(body[i + 1], "\\" + body[i + 1]))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


_NUMBER = re.compile(r"-?\d+(\.\d+)?")


class _Parser:
    """One path inside braces: `.a.b[0]`, `..c`, `$.a`, `@`, `[?(@.x=="y")]`."""

    def __init__(self, text: str, source: str) -> None:
        self.text, self.source, self.i = text, source, 0

    def fail(self, why: str) -> JSONPathError:
        return JSONPathError(f"error parsing jsonpath {self.source}, {why}")

    def peek(self, n: int = 1) -> str:
        return self.text[self.i : self.i + n]

    def path(self, stop: str = "") -> Path:
        root = "@"
        if self.peek() in ("$", "@"):
            root = self.peek()
            self.i += 1
        steps: list[Field | Recursive | Index | Filter] = []
        while self.i < len(self.text) and self.peek() not in stop:
            c = self.peek()
            if c == " " and stop:
                break
            if self.peek(2) == "..":
                self.i += 2
                steps.append(Recursive(self.name() or "*"))
            elif c == ".":
                self.i += 1
                name = self.name()
                if name:
                    steps.append(Field(name))
            elif c == "[":
                keyed = self._dict_key()
                if keyed is not None:
                    steps.extend(keyed)
                else:
                    steps.append(self.bracket())
            else:
                raise self.fail(f"unrecognized character in action: {self.text[self.i :]!r}")
        return Path(root, tuple(steps))

    def name(self) -> str:
        out = []
        while self.i < len(self.text):
            c = self.peek()
            if c == "\\" and self.i + 1 < len(self.text):
                out.append(self.text[self.i + 1])
                self.i += 2
                continue
            if c in ".[]()=!<>, \"'":
                break
            out.append(c)
            self.i += 1
        return "".join(out)

    def _dict_key(self) -> list[Field | Recursive | Index | Filter] | None:
        """`['a.b']`, as kubectl reads it: the quoted text is a path, `.a.b` (so a key with dots is
        written `['app\\.kubernetes\\.io/name']`, as kubectl wants). None: another bracket."""
        end = self._matching("[", "]")
        inner = self.text[self.i + 1 : end].strip()
        quoted = len(inner) >= 2 and inner[0] in "'\"" and inner[-1] == inner[0]
        if not quoted or len(_split_outside_quotes(inner, ",")) > 1:
            return None
        self.i = end + 1
        return list(_Parser("." + inner[1:-1], self.source).path().steps)

    def bracket(self) -> Index | Filter:
        end = self._matching("[", "]")
        inner = self.text[self.i + 1 : end].strip()
        self.i = end + 1
        if inner.startswith("?"):
            return self.filter(inner[1:].strip())
        if inner == "*":
            return Index((slice(None),))
        items: list[int | slice | str] = []
        for part in _split_outside_quotes(inner, ","):
            part = part.strip()
            if part[:1] in ("'", '"'):
                items.append(_unquote(part, self.source))
            elif ":" in part:
                bounds = [b.strip() for b in part.split(":")]
                if len(bounds) > 3 or not all(b == "" or re.fullmatch(r"-?\d+", b) for b in bounds):
                    raise self.fail(f"invalid array slice [{inner}]")
                nums = [int(b) if b else None for b in bounds] + [None] * (3 - len(bounds))
                if nums[2] == 0:
                    raise self.fail("step of a slice cannot be 0")
                items.append(slice(nums[0], nums[1], nums[2]))
            elif re.fullmatch(r"-?\d+", part):
                items.append(int(part))
            elif part:
                items.append(part)  # [name]: a key, as kubectl allows
            else:
                raise self.fail(f"empty array index in [{inner}]")
        return Index(tuple(items))

    def _matching(self, open_: str, close: str) -> int:
        depth, quote, i = 0, "", self.i
        while i < len(self.text):
            c = self.text[i]
            if quote:
                if c == "\\":
                    i += 1
                elif c == quote:
                    quote = ""
            elif c in "\"'":
                quote = c
            elif c == open_:
                depth += 1
            elif c == close:
                depth -= 1
                if depth == 0:
                    return i
            i += 1
        raise self.fail(f"unclosed array expect {close}")

    def filter(self, text: str) -> Filter:
        if not (text.startswith("(") and text.endswith(")")):
            raise self.fail(f"invalid filter {text!r}: expected ?(...)")
        body = text[1:-1].strip()
        m = re.search(r"(==|!=|<=|>=|<|>)", _mask_quotes(body))
        if m is None:
            return Filter(_Parser(body, self.source).path(), "")
        left = _Parser(body[: m.start()].strip(), self.source).path()
        right_text = body[m.end() :].strip()
        right: Path | Any
        if right_text[:1] in ("'", '"'):
            right = _unquote(right_text, self.source)
        elif _NUMBER.fullmatch(right_text):
            right = float(right_text) if "." in right_text else int(right_text)
        elif right_text in ("true", "false"):
            right = right_text == "true"
        else:
            right = _Parser(right_text, self.source).path()
        return Filter(left, m.group(1), right)


def _mask_quotes(text: str) -> str:
    """The text with quoted strings blanked, so operators inside them are not taken as operators."""
    return re.sub(r"\"(\\.|[^\"])*\"|'(\\.|[^'])*'", lambda m: " " * len(m.group(0)), text)


def _split_outside_quotes(text: str, sep: str) -> list[str]:
    masked = _mask_quotes(text)
    parts, start = [], 0
    for i, c in enumerate(masked):
        if c == sep:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


# --- evaluation ----------------------------------------------------------------------------------

_MISSING = object()


def _walk(path: Path, current: Any, root: Any) -> list[Any]:
    values = [root if path.root == "$" else current]
    for step in path.steps:
        values = list(_step(step, values, root))
    return values


def _step(step: Field | Recursive | Index | Filter, values: list[Any], root: Any) -> Iterator[Any]:
    for value in values:
        if isinstance(step, Field):
            if step.name == "*":
                yield from _children(value)
            elif isinstance(value, dict) and step.name in value:
                yield value[step.name]
        elif isinstance(step, Recursive):
            yield from _recursive(value, step.name)
        elif isinstance(step, Index):
            yield from _index(step, value)
        else:
            items = value if isinstance(value, list) else [value]
            yield from (item for item in items if _matches(step, item, root))


def _children(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [value[k] for k in sorted(value)]
    if isinstance(value, list):
        return list(value)
    return []


def _recursive(value: Any, name: str) -> Iterator[Any]:
    if name == "*":
        for child in _children(value):
            yield child
            yield from _recursive(child, name)
        return
    if isinstance(value, dict) and name in value:
        yield value[name]
    for child in _children(value):
        yield from _recursive(child, name)


def _index(step: Index, value: Any) -> Iterator[Any]:
    for item in step.items:
        if isinstance(item, str):
            if isinstance(value, dict) and item in value:
                yield value[item]
        elif not isinstance(value, list):
            continue
        elif isinstance(item, slice):
            yield from value[item]
        else:
            n = item + len(value) if item < 0 else item
            if not 0 <= n < len(value):
                raise JSONPathError(f"array index out of bounds: index {item}, length {len(value)}")
            yield value[n]


def _matches(f: Filter, item: Any, root: Any) -> bool:
    left = _walk(f.left, item, root)
    if not f.op:
        return any(v not in (None, "", False, [], {}) for v in left)
    right = _walk(f.right, item, root) if isinstance(f.right, Path) else [f.right]
    for a in left:
        for b in right:
            if _compare(a, f.op, b):
                return True
    return False


def _compare(a: Any, op: str, b: Any) -> bool:
    if op in ("==", "!="):
        equal = a == b or (_is_number(a) and _is_number(b) and float(a) == float(b))
        return equal if op == "==" else not equal
    if not (_is_number(a) and _is_number(b)):
        if isinstance(a, str) and isinstance(b, str):
            pass
        else:
            return False
    try:
        return {"<": a < b, ">": a > b, "<=": a <= b, ">=": a >= b}[op]
    except TypeError:
        return False


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def evaluate(template: Template, data: Any) -> list[list[Any]]:
    """The values of each `{...}` of the template in order, text nodes as one-string lists:
    what `text_value` prints, and what custom columns and --sort-by read."""
    out: list[list[Any]] = []
    _run(template.nodes, data, data, out)
    return out


def _run(nodes: tuple[Node, ...], current: Any, root: Any, out: list[list[Any]]) -> None:
    for node in nodes:
        if isinstance(node, Text):
            out.append([node.text])
        elif isinstance(node, Path):
            out.append(_walk(node, current, root))
        else:
            for item in _walk(node.path, current, root):
                for each in item if isinstance(item, list) else [item]:
                    _run(node.body, each, root, out)


def text_value(value: Any) -> str:
    """A value as `-o jsonpath` prints it: strings as they are, maps and lists as compact JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def go_value(value: Any) -> str:
    """A value as Go's `%v` prints it: what custom columns show for a map or a list."""
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{go_value(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, list):
        return "[" + " ".join(go_value(v) for v in value) + "]"
    if value is None:
        return "<nil>"
    return text_value(value)


def render(template: Template, data: Any) -> str:
    """The template's output for `data`, as `kubectl get -o jsonpath=...` prints it."""
    parts: list[str] = []
    for values in evaluate(template, data):
        parts.append(" ".join(text_value(v) for v in values))
    return "".join(parts)
