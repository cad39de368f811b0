"""Label selectors with kube-apiserver semantics, shared by the hub's cache and API, the CLI and
kubesim (field selectors, which only kubesim serves, are in kubesim/field_selectors.py).

This module mirrors two pieces of Kubernetes:

* ``k8s.io/apimachinery/pkg/labels`` -- the label selector grammar (lexer and
  recursive-descent parser), requirement validation, canonical string form and
  matching, including the rarely used ``key>N`` / ``key<N`` integer operators.
* ``metav1.LabelSelectorAsSelector`` -- conversion of the structured
  ``{matchLabels, matchExpressions}`` form (``label_selector_from_dict``).

Error messages are the apiserver's own texts so that clients (kubectl, the
official Python client) display what they would display against a real
cluster.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from .errors import SelectorError

__all__ = [
    "SelectorError",
    "Requirement",
    "LabelSelector",
    "parse_label_selector",
    "label_selector_from_dict",
    "label_selector_from_set",
    "go_quote",
]


# --------------------------------------------------------------------------
# Go-compatible formatting helpers (fmt %q, field.Error, utilerrors.Aggregate)
# --------------------------------------------------------------------------

_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def go_quote(s: str) -> str:
    """Approximates Go's ``strconv.Quote`` (what ``%q`` prints for a string)."""
    out = ['"']
    for ch in s:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        else:
            cp = ord(ch)
            if cp < 0x80:
                out.append(f"\\x{cp:02x}")
            elif cp <= 0xFFFF:
                out.append(f"\\u{cp:04x}")
            else:
                out.append(f"\\U{cp:08x}")
    out.append('"')
    return "".join(out)


def _go_string_slice(values: list[str] | None) -> str:
    """What Go's ``%#v`` prints for a ``[]string``."""
    if values is None:
        return "[]string(nil)"
    return "[]string{" + ", ".join(go_quote(v) for v in values) + "}"


def _invalid(path: str, bad_value: str, detail: str) -> str:
    """``field.Invalid(path, value, detail).Error()``; bad_value is pre-formatted."""
    return f"{path}: Invalid value: {bad_value}: {detail}"


def _aggregate(errors: list[str]) -> str:
    """``utilerrors.NewAggregate(errs).Error()``: one error verbatim, else [a, b] deduplicated."""
    seen: list[str] = []
    for e in errors:
        if e not in seen:
            seen.append(e)
    if len(seen) == 1:
        return seen[0]
    return "[" + ", ".join(seen) + "]"


# --------------------------------------------------------------------------
# k8s.io/apimachinery/pkg/util/validation
# --------------------------------------------------------------------------

_QNAME_CHAR_FMT = "[A-Za-z0-9]"
_QNAME_EXT_CHAR_FMT = "[-A-Za-z0-9_.]"
_QUALIFIED_NAME_FMT = "(" + _QNAME_CHAR_FMT + _QNAME_EXT_CHAR_FMT + "*)?" + _QNAME_CHAR_FMT
_QUALIFIED_NAME_ERR_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
)
_QUALIFIED_NAME_MAX_LENGTH = 63
_QUALIFIED_NAME_RE = re.compile(r"^" + _QUALIFIED_NAME_FMT + r"\Z")

_LABEL_VALUE_FMT = "(" + _QUALIFIED_NAME_FMT + ")?"
_LABEL_VALUE_ERR_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, "
    "'-', '_' or '.', and must start and end with an alphanumeric character"
)
_LABEL_VALUE_MAX_LENGTH = 63
_LABEL_VALUE_RE = re.compile(r"^" + _LABEL_VALUE_FMT + r"\Z")

_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_DNS1123_SUBDOMAIN_ERR_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character"
)
_DNS1123_SUBDOMAIN_MAX_LENGTH = 253
_DNS1123_SUBDOMAIN_RE = re.compile(r"^" + _DNS1123_SUBDOMAIN_FMT + r"\Z")


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    if not examples:
        return msg + " (regex used for validation is '" + fmt + "')"
    msg += " (e.g. "
    for i, ex in enumerate(examples):
        if i > 0:
            msg += " or "
        msg += "'" + ex + "', "
    return msg + "regex used for validation is '" + fmt + "')"


def _max_len_error(n: int) -> str:
    return f"must be no more than {n} characters"


def _is_dns1123_subdomain(value: str) -> list[str]:
    errs = []
    if len(value) > _DNS1123_SUBDOMAIN_MAX_LENGTH:
        errs.append(_max_len_error(_DNS1123_SUBDOMAIN_MAX_LENGTH))
    if not _DNS1123_SUBDOMAIN_RE.match(value):
        errs.append(_regex_error(_DNS1123_SUBDOMAIN_ERR_MSG, _DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errs


def _is_qualified_name(value: str) -> list[str]:
    """``validation.IsQualifiedName``: ``[dns-subdomain-prefix/]name``."""
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs.extend("prefix part " + m for m in _is_dns1123_subdomain(prefix))
    else:
        return [
            "a qualified name "
            + _regex_error(_QUALIFIED_NAME_ERR_MSG, _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > _QUALIFIED_NAME_MAX_LENGTH:
        errs.append("name part " + _max_len_error(_QUALIFIED_NAME_MAX_LENGTH))
    if not _QUALIFIED_NAME_RE.match(name):
        errs.append(
            "name part " + _regex_error(_QUALIFIED_NAME_ERR_MSG, _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
        )
    return errs


def _is_valid_label_value(value: str) -> list[str]:
    errs = []
    if len(value) > _LABEL_VALUE_MAX_LENGTH:
        errs.append(_max_len_error(_LABEL_VALUE_MAX_LENGTH))
    if not _LABEL_VALUE_RE.match(value):
        errs.append(_regex_error(_LABEL_VALUE_ERR_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errs


def _validate_label_key(key: str, path: str) -> str | None:
    errs = _is_qualified_name(key)
    if errs:
        return _invalid(path, go_quote(key), "; ".join(errs))
    return None


_INT64_RE = re.compile(r"^[+-]?[0-9]+\Z")


def _parse_int64(s: str) -> int | None:
    """``strconv.ParseInt(s, 10, 64)``; None on failure."""
    if not _INT64_RE.match(s):
        return None
    v = int(s)
    if not -(2**63) <= v < 2**63:
        return None
    return v


# --------------------------------------------------------------------------
# Label requirements and selectors
# --------------------------------------------------------------------------

# selection.Operator values, spelled exactly as upstream.
DOES_NOT_EXIST = "!"
EQUALS = "="
DOUBLE_EQUALS = "=="
IN = "in"
NOT_EQUALS = "!="
NOT_IN = "notin"
EXISTS = "exists"
GREATER_THAN = "gt"
LESS_THAN = "lt"

_VALID_OPERATORS = (IN, NOT_IN, EQUALS, DOUBLE_EQUALS, NOT_EQUALS, EXISTS, DOES_NOT_EXIST, GREATER_THAN, LESS_THAN)


class Requirement:
    """One label requirement (``labels.Requirement``). Immutable.

    ``operator`` is one of the ``selection.Operator`` spellings:
    ``"="``, ``"=="``, ``"!="``, ``"in"``, ``"notin"``, ``"exists"``, ``"!"``,
    ``"gt"``, ``"lt"``. ``values`` keeps the order given (the parser passes
    them sorted and de-duplicated, like ``sets.String.List()``).
    """

    __slots__ = ("_key", "_operator", "_values")
    _key: str
    _operator: str
    _values: tuple[str, ...]

    def __init__(self, key: str, operator: str, values: Iterable[str] = ()) -> None:
        object.__setattr__(self, "_key", key)
        object.__setattr__(self, "_operator", operator)
        object.__setattr__(self, "_values", tuple(values))

    def __setattr__(self, name: str, value: Any) -> None:  # pragma: no cover - immutability guard
        raise AttributeError("Requirement is immutable")

    @property
    def key(self) -> str:
        return self._key

    @property
    def operator(self) -> str:
        return self._operator

    @property
    def values(self) -> tuple[str, ...]:
        return self._values

    @classmethod
    def new(cls, key: str, operator: str, values: list[str] | None, *, path: str = "") -> Requirement:
        """``labels.NewRequirement``: validate and build, raising SelectorError.

        ``values`` may be None to reproduce Go's nil slice in messages.
        ``path`` is the field path prefix (empty like the parser's nil path).
        """
        errs: list[str] = []
        key_path = f"{path}.key" if path else "key"
        values_path = f"{path}.values" if path else "values"
        err = _validate_label_key(key, key_path)
        if err:
            errs.append(err)
        vals = list(values) if values is not None else []
        if operator in (IN, NOT_IN):
            if not vals:
                errs.append(
                    _invalid(
                        values_path, _go_string_slice(values), "for 'in', 'notin' operators, values set can't be empty"
                    )
                )
        elif operator in (EQUALS, DOUBLE_EQUALS, NOT_EQUALS):
            if len(vals) != 1:
                errs.append(
                    _invalid(
                        values_path, _go_string_slice(values), "exact-match compatibility requires one single value"
                    )
                )
        elif operator in (EXISTS, DOES_NOT_EXIST):
            if vals:
                errs.append(
                    _invalid(
                        values_path, _go_string_slice(values), "values set must be empty for exists and does not exist"
                    )
                )
        elif operator in (GREATER_THAN, LESS_THAN):
            if len(vals) != 1:
                errs.append(
                    _invalid(
                        values_path, _go_string_slice(values), "for 'Gt', 'Lt' operators, exactly one value is required"
                    )
                )
            for i, v in enumerate(vals):
                if _parse_int64(v) is None:
                    errs.append(
                        _invalid(
                            f"{values_path}[{i}]", go_quote(v), "for 'Gt', 'Lt' operators, the value must be an integer"
                        )
                    )
        else:
            supported = ", ".join(go_quote(o) for o in _VALID_OPERATORS)
            where = f"{path}." if path else ""
            errs.append(f"{where}operator: Unsupported value: {go_quote(operator)}: supported values: {supported}")
        for i, v in enumerate(vals):
            verrs = _is_valid_label_value(v)
            if verrs:
                errs.append(_invalid(f"{values_path}[{i}][{key}]", go_quote(v), "; ".join(verrs)))
        if errs:
            raise SelectorError(_aggregate(errs))
        return cls(key, operator, vals)

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self._operator
        if op in (IN, EQUALS, DOUBLE_EQUALS):
            return self._key in labels and labels[self._key] in self._values
        if op in (NOT_IN, NOT_EQUALS):
            return self._key not in labels or labels[self._key] not in self._values
        if op == EXISTS:
            return self._key in labels
        if op == DOES_NOT_EXIST:
            return self._key not in labels
        if op in (GREATER_THAN, LESS_THAN):
            if self._key not in labels or len(self._values) != 1:
                return False
            have = _parse_int64(labels[self._key])
            want = _parse_int64(self._values[0])
            if have is None or want is None:
                return False
            return have > want if op == GREATER_THAN else have < want
        return False

    def __str__(self) -> str:
        op = self._operator
        s = ("!" if op == DOES_NOT_EXIST else "") + self._key
        if op in (EXISTS, DOES_NOT_EXIST):
            return s
        s += {
            EQUALS: "=",
            DOUBLE_EQUALS: "==",
            NOT_EQUALS: "!=",
            IN: " in ",
            NOT_IN: " notin ",
            GREATER_THAN: ">",
            LESS_THAN: "<",
        }.get(op, "")
        vals = self._values[0] if len(self._values) == 1 else ",".join(sorted(self._values))
        if op in (IN, NOT_IN):
            return s + "(" + vals + ")"
        return s + vals

    def __repr__(self) -> str:
        return f"Requirement({self._key!r}, {self._operator!r}, {list(self._values)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Requirement):
            return NotImplemented
        return (self._key, self._operator, self._values) == (other._key, other._operator, other._values)

    def __hash__(self) -> int:
        return hash((self._key, self._operator, self._values))


class LabelSelector:
    """An immutable label selector (``labels.Selector``).

    Three flavours exist, as upstream:

    * a list of requirements (all must match; an empty list matches everything
      -- ``labels.Everything()``);
    * ``LabelSelector.nothing()`` -- matches no object (what a *nil*
      ``metav1.LabelSelector`` converts to).

    ``str()`` gives the canonical form (requirements sorted by key, set values
    sorted), which is what the apiserver echoes back.
    """

    __slots__ = ("_requirements", "_nothing")
    _requirements: tuple[Requirement, ...]
    _nothing: bool

    def __init__(self, requirements: Iterable[Requirement] = (), *, _nothing: bool = False) -> None:
        reqs = sorted(requirements, key=lambda r: r.key)  # stable, like sort.Sort(ByKey) for distinct keys
        object.__setattr__(self, "_requirements", tuple(reqs))
        object.__setattr__(self, "_nothing", _nothing)

    def __setattr__(self, name: str, value: Any) -> None:  # pragma: no cover - immutability guard
        raise AttributeError("LabelSelector is immutable")

    @classmethod
    def everything(cls) -> LabelSelector:
        return cls()

    @classmethod
    def nothing(cls) -> LabelSelector:
        return cls(_nothing=True)

    @property
    def requirements(self) -> tuple[Requirement, ...]:
        return self._requirements

    @property
    def empty(self) -> bool:
        """True when the selector does not restrict anything (``Selector.Empty()``).

        ``nothing()`` is *not* empty: it restricts everything away.
        """
        return not self._nothing and not self._requirements

    @property
    def matches_nothing(self) -> bool:
        return self._nothing

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        if self._nothing:
            return False
        lbls = labels or {}
        return all(r.matches(lbls) for r in self._requirements)

    def requires_exact_match(self, key: str) -> str | None:
        """The single value ``key`` must have (``=``, ``==`` or one-value ``in``), else None."""
        for r in self._requirements:
            if r.key == key and r.operator in (EQUALS, DOUBLE_EQUALS, IN) and len(r.values) == 1:
                return r.values[0]
        return None

    def __str__(self) -> str:
        return ",".join(str(r) for r in self._requirements)

    def __repr__(self) -> str:
        if self._nothing:
            return "LabelSelector.nothing()"
        return f"LabelSelector({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LabelSelector):
            return NotImplemented
        return (self._requirements, self._nothing) == (other._requirements, other._nothing)

    def __hash__(self) -> int:
        return hash((self._requirements, self._nothing))


# ---- lexer / parser (labels/selector.go) ---------------------------------

_T_ERROR = "error"
_T_EOS = "end of string"
_T_CLOSE = ")"
_T_COMMA = ","
_T_NOT = "!"
_T_DEQ = "=="
_T_EQ = "="
_T_GT = ">"
_T_ID = "identifier"
_T_IN = "in"
_T_LT = "<"
_T_NEQ = "!="
_T_NOTIN = "notin"
_T_OPEN = "("

_STRING2TOKEN = {
    ")": _T_CLOSE,
    ",": _T_COMMA,
    "!": _T_NOT,
    "==": _T_DEQ,
    "=": _T_EQ,
    ">": _T_GT,
    "in": _T_IN,
    "<": _T_LT,
    "!=": _T_NEQ,
    "notin": _T_NOTIN,
    "(": _T_OPEN,
}
_SPECIAL = frozenset("=!(),><")
_WHITESPACE = frozenset(" \t\r\n")


def _lex(s: str) -> list[tuple[str, str]]:
    items: list[tuple[str, str]] = []
    i, n = 0, len(s)
    while True:
        while i < n and s[i] in _WHITESPACE:
            i += 1
        if i >= n or s[i] == "\0":
            items.append((_T_EOS, ""))
            return items
        if s[i] in _SPECIAL:
            buf = ""
            last: tuple[str, str] | None = None
            while i < n and s[i] in _SPECIAL:
                buf += s[i]
                tok = _STRING2TOKEN.get(buf)
                if tok is not None:
                    last = (tok, buf)
                    i += 1
                elif last is not None:
                    break
                else:
                    i += 1
            items.append(last if last is not None else (_T_ERROR, f"error expected: keyword found '{buf}'"))
        else:
            start = i
            while i < n and s[i] not in _SPECIAL and s[i] not in _WHITESPACE and s[i] != "\0":
                i += 1
            word = s[start:i]
            items.append((_STRING2TOKEN.get(word, _T_ID), word))


class _Parser:
    # Contexts: in "values" context the keywords in/notin are plain identifiers.
    def __init__(self, text: str) -> None:
        self.items = _lex(text)
        self.pos = 0

    def _tok(self, idx: int, values_ctx: bool) -> tuple[str, str]:
        tok, lit = self.items[min(idx, len(self.items) - 1)]
        if values_ctx and tok in (_T_IN, _T_NOTIN):
            tok = _T_ID
        return tok, lit

    def lookahead(self, values_ctx: bool = True) -> tuple[str, str]:
        return self._tok(self.pos, values_ctx)

    def consume(self, values_ctx: bool = True) -> tuple[str, str]:
        t = self._tok(self.pos, values_ctx)
        self.pos += 1
        return t

    def parse(self) -> list[Requirement]:
        reqs: list[Requirement] = []
        while True:
            tok, lit = self.lookahead()
            if tok in (_T_ID, _T_NOT):
                try:
                    reqs.append(self.parse_requirement())
                except SelectorError as e:
                    raise SelectorError(f"unable to parse requirement: {e}") from None
                t, lit2 = self.consume()
                if t == _T_EOS:
                    return reqs
                if t == _T_COMMA:
                    t2, lit3 = self.lookahead()
                    if t2 not in (_T_ID, _T_NOT):
                        raise SelectorError(f"found '{lit3}', expected: identifier after ','")
                else:
                    raise SelectorError(f"found '{lit2}', expected: ',' or 'end of string'")
            elif tok == _T_EOS:
                return reqs
            else:
                raise SelectorError(f"found '{lit}', expected: !, identifier, or 'end of string'")

    def parse_requirement(self) -> Requirement:
        key, op = self.parse_key_and_infer_operator()
        if op in (EXISTS, DOES_NOT_EXIST):
            return Requirement.new(key, op, [])
        op = self.parse_operator()
        if op in (IN, NOT_IN):
            values = self.parse_values()
        else:
            values = self.parse_exact_value()
        return Requirement.new(key, op, sorted(values))

    def parse_key_and_infer_operator(self) -> tuple[str, str | None]:
        op: str | None = None
        tok, lit = self.consume()
        if tok == _T_NOT:
            op = DOES_NOT_EXIST
            tok, lit = self.consume()
        if tok != _T_ID:
            raise SelectorError(f"found '{lit}', expected: identifier")
        err = _validate_label_key(lit, "<nil>")
        if err:
            raise SelectorError(err)
        t, _ = self.lookahead()
        if t in (_T_EOS, _T_COMMA) and op != DOES_NOT_EXIST:
            op = EXISTS
        return lit, op

    def parse_operator(self) -> str:
        tok, lit = self.consume(values_ctx=False)
        op = {
            _T_IN: IN,
            _T_EQ: EQUALS,
            _T_DEQ: DOUBLE_EQUALS,
            _T_GT: GREATER_THAN,
            _T_LT: LESS_THAN,
            _T_NOTIN: NOT_IN,
            _T_NEQ: NOT_EQUALS,
        }.get(tok)
        if op is None:
            # (sic) the unbalanced quote is upstream's
            raise SelectorError(f"found '{lit}', expected: '=', '!=', '==', 'in', notin'")
        return op

    def parse_values(self) -> set[str]:
        tok, lit = self.consume()
        if tok != _T_OPEN:
            raise SelectorError(f"found '{lit}' expected: '('")
        tok, lit = self.lookahead()
        if tok in (_T_ID, _T_COMMA):
            s = self.parse_identifiers_list()
            tok2, _ = self.consume()
            if tok2 != _T_CLOSE:
                raise SelectorError(f"found '{lit}', expected: ')'")
            return s
        if tok == _T_CLOSE:
            self.consume()
            return {""}
        raise SelectorError(f"found '{lit}', expected: ',', ')' or identifier")

    def parse_identifiers_list(self) -> set[str]:
        s: set[str] = set()
        while True:
            tok, lit = self.consume()
            if tok == _T_ID:
                s.add(lit)
                tok2, lit2 = self.lookahead()
                if tok2 == _T_COMMA:
                    continue
                if tok2 == _T_CLOSE:
                    return s
                raise SelectorError(f"found '{lit2}', expected: ',' or ')'")
            if tok == _T_COMMA:
                if not s:
                    s.add("")  # "(,"
                tok2, _ = self.lookahead()
                if tok2 == _T_CLOSE:
                    s.add("")  # ",)"
                    return s
                if tok2 == _T_COMMA:
                    self.consume()
                    s.add("")  # ",,"
                continue
            raise SelectorError(f"found '{lit}', expected: ',', or identifier")

    def parse_exact_value(self) -> set[str]:
        tok, _ = self.lookahead()
        if tok in (_T_EOS, _T_COMMA):
            return {""}
        tok, lit = self.consume()
        if tok == _T_ID:
            return {lit}
        raise SelectorError(f"found '{lit}', expected: identifier")


def parse_label_selector(text: str) -> LabelSelector:
    """``labels.Parse``: the full string syntax of ``?labelSelector=``.

    Supports ``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``, ``a notin (x)``,
    ``a`` (exists), ``!a`` (does not exist), ``a>1`` / ``a<1`` (integer
    comparison), comma as AND, and whitespace between tokens. Keys must be
    qualified names with an optional DNS-subdomain prefix; values must be
    valid label values. The empty string matches everything.

    Raises SelectorError with the apiserver's message on any problem.
    """
    return LabelSelector(_Parser(text).parse())


def label_selector_from_set(labels: Mapping[str, str] | None) -> LabelSelector:
    """``labels.SelectorFromSet``: equality on every pair, no validation.

    None or an empty mapping gives ``everything()``. This is what a
    ``Service.spec.selector`` / ``ReplicationController.spec.selector`` map means.
    """
    if not labels:
        return LabelSelector.everything()
    return LabelSelector(Requirement(k, EQUALS, (v,)) for k, v in labels.items())


_LABEL_SELECTOR_OPS = {"In": IN, "NotIn": NOT_IN, "Exists": EXISTS, "DoesNotExist": DOES_NOT_EXIST}


def label_selector_from_dict(sel: Mapping[str, Any] | None) -> LabelSelector:
    """``metav1.LabelSelectorAsSelector`` for the JSON form of ``metav1.LabelSelector``.

    Faithful to upstream, which distinguishes *absent* from *empty*:

    * ``None`` (a nil selector, e.g. a missing ``spec.selector``) returns
      ``LabelSelector.nothing()`` -- it matches **no** object;
    * ``{}`` or a selector whose ``matchLabels`` and ``matchExpressions`` are
      both empty returns ``LabelSelector.everything()`` -- it matches **every**
      object.

    Callers that want the other common convention ("no selector means all")
    must map None to ``{}`` themselves; several Kubernetes APIs do exactly
    that (e.g. NetworkPolicy namespaceSelector semantics are API specific).

    ``matchExpressions`` operators are ``In``, ``NotIn``, ``Exists`` and
    ``DoesNotExist``; anything else raises
    ``SelectorError('"Foo" is not a valid label selector operator')``.
    Requirement validation errors carry ``key`` / ``values`` field paths as
    upstream's ``NewRequirement`` does.
    """
    if sel is None:
        return LabelSelector.nothing()
    match_labels = sel.get("matchLabels") or {}
    match_expressions = sel.get("matchExpressions") or []
    if not match_labels and not match_expressions:
        return LabelSelector.everything()
    reqs: list[Requirement] = []
    for k, v in match_labels.items():
        reqs.append(Requirement.new(k, EQUALS, [v]))
    for expr in match_expressions:
        op_name = expr.get("operator", "")
        op = _LABEL_SELECTOR_OPS.get(op_name)
        if op is None:
            raise SelectorError(f"{go_quote(str(op_name))} is not a valid label selector operator")
        raw_values = expr.get("values")
        values = list(raw_values) if raw_values else None  # append([]string(nil), ...) keeps nil
        reqs.append(Requirement.new(expr.get("key", ""), op, values))
    return LabelSelector(reqs)
