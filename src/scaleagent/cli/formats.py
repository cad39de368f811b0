"""`get`'s output forms beyond the per-kind tables: `-o jsonpath=`, `-o custom-columns=`, `--sort-by`,
`--show-labels` and `-L`, as kubectl spells and prints them. Pure functions over objects, so they
are tested without a hub."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import jsonpath
from .errors import CliError
from .kinds import meta
from .printers import Cell

__all__ = [
    "OUTPUT_FORMATS",
    "OutputFormat",
    "custom_columns",
    "label_cells",
    "natural_key",
    "parse_output",
    "sort_rows",
]

OUTPUT_FORMATS = (
    "custom-columns",
    "custom-columns-file",
    "json",
    "jsonpath",
    "jsonpath-file",
    "name",
    "wide",
    "yaml",
)
"""What `-o` takes, in the order kubectl lists them when refusing another."""


@dataclass(frozen=True)
class OutputFormat:
    """`-o` read: `kind` is '', json, yaml, wide, name, jsonpath or custom-columns."""

    kind: str = ""
    template: jsonpath.Template | None = None
    columns: tuple[tuple[str, jsonpath.Template], ...] = ()


def parse_output(value: str | None) -> OutputFormat:
    """`-o` as kubectl takes it; a `-file` form reads its file now, so a bad file fails before any request."""
    if not value:
        return OutputFormat()
    name, sep, arg = value.partition("=")
    if name in ("json", "yaml", "wide", "name") and not sep:
        return OutputFormat(name)
    if name in ("jsonpath", "jsonpath-file"):
        text = _read(arg, "jsonpath-file") if name == "jsonpath-file" and arg else arg
        if not text:
            raise CliError("error: template format specified but no template given")
        return OutputFormat("jsonpath", template=jsonpath.parse(text))
    if name == "custom-columns" and sep:
        return OutputFormat("custom-columns", columns=custom_columns(arg))
    if name == "custom-columns-file" and sep:
        lines = [line for line in _read(arg, "custom-columns-file").splitlines() if line.strip()]
        if len(lines) != 2:
            raise CliError(
                f"error: custom-columns-file {arg}: expected two lines, the headers and the paths, got {len(lines)}"
            )
        headers, paths = lines[0].split(), lines[1].split()
        if len(headers) != len(paths):
            raise CliError(
                f"error: custom-columns-file {arg}: {len(headers)} headers but {len(paths)} paths "
                "(they pair up in order)"
            )
        return OutputFormat(
            "custom-columns", columns=tuple((h, jsonpath.parse(jsonpath.relaxed(p))) for h, p in zip(headers, paths))
        )
    if name in ("custom-columns", "custom-columns-file"):
        raise CliError("error: custom-columns format specified but no custom columns given")
    raise CliError(
        f'error: unable to match a printer suitable for the output format "{value}", allowed formats are: '
        + ",".join(OUTPUT_FORMATS)
    )


def _read(path: str, what: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise CliError(f"error: error reading {what} {path}: {e}") from None


def custom_columns(spec: str) -> tuple[tuple[str, jsonpath.Template], ...]:
    """`NAME:.metadata.name,IMAGE:.spec.containers[*].image` -> (header, template) pairs."""
    if not spec.strip():
        raise CliError("error: custom-columns format specified but no custom columns given")
    columns = []
    for part in _split_columns(spec):
        header, sep, path = part.partition(":")
        if not sep or not header:
            raise CliError(f"error: unexpected custom-columns spec: {part}, expected <header>:<json-path-expr>")
        columns.append((header, jsonpath.parse(jsonpath.relaxed(path))))
    return tuple(columns)


def _split_columns(spec: str) -> list[str]:
    """Split on commas outside brackets: `A:.x[0,1],B:.y` is two columns."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(spec):
        if c in "[(":
            depth += 1
        elif c in "])":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(spec[start:i])
            start = i + 1
    parts.append(spec[start:])
    return [p for p in parts if p]


def column_value(template: jsonpath.Template, obj: dict[str, Any]) -> str:
    """One custom-columns cell: the values found joined by commas, `<none>` when none."""
    values = [v for found in jsonpath.evaluate(template, obj) for v in found]
    if not values:
        return "<none>"
    return ",".join(jsonpath.go_value(v) for v in values)


def _column_cell(template: jsonpath.Template) -> Cell:
    return lambda o, now: column_value(template, o)


def _label_cell(key: str) -> Cell:
    return lambda o, now: str((meta(o).get("labels") or {}).get(key, ""))


def column_cells(columns: Sequence[tuple[str, jsonpath.Template]]) -> list[tuple[str, Cell]]:
    """Custom columns as the table printer's (header, cell) pairs."""
    return [(header, _column_cell(template)) for header, template in columns]


def label_cells(label_columns: Sequence[str], show_labels: bool) -> list[tuple[str, Cell]]:
    """kubectl's `-L key` columns (headed by the key's last `/` segment, upper-cased; empty when
    the label is absent), then `--show-labels`' LABELS (`k=v,...`, `<none>`)."""
    cells: list[tuple[str, Cell]] = []
    for key in label_columns:
        header = key.split("/")[-1].upper()
        cells.append((header, _label_cell(key)))
    if show_labels:
        cells.append(("LABELS", lambda o, now: _labels(o)))
    return cells


def _labels(o: dict[str, Any]) -> str:
    labels = meta(o).get("labels") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "<none>"


_DIGITS = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple[Any, ...]:
    """kubectl sorts strings naturally (`web-2` before `web-10`), as its sorter's NaturalLess does."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in _DIGITS.split(text) if p)


def _sort_key(value: Any) -> tuple[Any, ...]:
    if isinstance(value, bool):
        return (1, int(value))
    if isinstance(value, (int, float)):
        return (1, value)
    if isinstance(value, str):
        return (2, natural_key(value))
    return (3, jsonpath.text_value(value))


def sort_rows(rows: Sequence[tuple[str, dict[str, Any]]], expression: str) -> list[tuple[str, dict[str, Any]]]:
    """Rows ordered by a field, as `--sort-by` does: numbers as numbers, strings naturally,
    objects without the field first; ties keep their order. No object with the field is kubectl's
    error."""
    template = jsonpath.parse(jsonpath.relaxed(expression))
    keyed: list[tuple[tuple[Any, ...], int, tuple[str, dict[str, Any]]]] = []
    found = False
    for i, row in enumerate(rows):
        values = [v for found_values in jsonpath.evaluate(template, row[1]) for v in found_values]
        if values:
            found = True
            keyed.append(((1, _sort_key(values[0])), i, row))
        else:
            keyed.append(((0,), i, row))
    if rows and not found:
        raise CliError(f'error: couldn\'t find any field with path "{template.source}" in the list of objects')
    try:
        keyed.sort(key=lambda k: (k[0], k[1]))
    except TypeError:  # values of different types: compare their text
        keyed.sort(key=lambda k: (str(k[0]), k[1]))
    return [row for _, _, row in keyed]
