"""kubectl's output: per-kind tables (columns from kube/printing.py, widths remembered for `-w`),
`-o json|yaml|name`, and the List document."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

from ..kube.printing import (
    as_int,
    job_completions,
    job_duration,
    job_status,
    pod_ready,
    pod_restarts,
    pod_status,
    readiness_gates,
    ready_replicas,
    service_external_ip,
    service_ports,
    since,
    spec_of,
    status_of,
)
from .kinds import meta, object_name

__all__ = ["Cell", "TablePrinter", "dump", "dump_one", "list_document", "table_columns"]


def _age(o: dict[str, Any], now: datetime) -> str:
    return since(meta(o).get("creationTimestamp"), now)


def _selector_text(selector: Any) -> str:
    """A structured selector as kubectl's wide output writes it (`app=web,tier in (a,b)`)."""
    if not selector:
        return "<none>"
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for e in selector.get("matchExpressions") or []:
        op, values = e.get("operator", ""), ",".join(sorted(e.get("values") or []))
        parts.append(
            {
                "In": f"{e.get('key')} in ({values})",
                "NotIn": f"{e.get('key')} notin ({values})",
                "Exists": f"{e.get('key')}",
                "DoesNotExist": f"!{e.get('key')}",
            }.get(op, f"{e.get('key')} {op}")
        )
    return ",".join(parts) or "<none>"


def _containers(o: dict[str, Any]) -> list[dict[str, Any]]:
    template = spec_of(o).get("template") or {}
    return (template.get("spec") or {}).get("containers") or []


def _containers_col(o: dict[str, Any]) -> str:
    return ",".join(str(c.get("name", "")) for c in _containers(o))


def _images_col(o: dict[str, Any]) -> str:
    return ",".join(str(c.get("image", "")) for c in _containers(o))


Cell = Callable[[dict[str, Any], datetime], str]
"""One column's value for an object, given the time ages are measured against."""

_NAME: tuple[str, Cell] = ("NAME", lambda o, now: str(meta(o).get("name", "")))
_AGE: tuple[str, Cell] = ("AGE", _age)
_WORKLOAD_WIDE: list[tuple[str, Cell]] = [
    ("CONTAINERS", lambda o, now: _containers_col(o)),
    ("IMAGES", lambda o, now: _images_col(o)),
    ("SELECTOR", lambda o, now: _selector_text(spec_of(o).get("selector"))),
]

# (group, Kind) -> (columns, extra columns of -o wide), as kubectl's printers (pkg/printers/internalversion).
_COLUMNS: dict[tuple[str, str], tuple[list[tuple[str, Cell]], list[tuple[str, Cell]]]] = {
    ("apps", "Deployment"): (
        [
            _NAME,
            (
                "READY",
                lambda o, now: ready_replicas(o),
            ),
            ("UP-TO-DATE", lambda o, now: str(as_int(status_of(o).get("updatedReplicas")))),
            ("AVAILABLE", lambda o, now: str(as_int(status_of(o).get("availableReplicas")))),
            _AGE,
        ],
        _WORKLOAD_WIDE,
    ),
    ("apps", "ReplicaSet"): (
        [
            _NAME,
            ("DESIRED", lambda o, now: str(as_int(spec_of(o).get("replicas", 1)))),
            ("CURRENT", lambda o, now: str(as_int(status_of(o).get("replicas")))),
            ("READY", lambda o, now: str(as_int(status_of(o).get("readyReplicas")))),
            _AGE,
        ],
        _WORKLOAD_WIDE,
    ),
    ("apps", "StatefulSet"): (
        [
            _NAME,
            (
                "READY",
                lambda o, now: ready_replicas(o),
            ),
            _AGE,
        ],
        _WORKLOAD_WIDE[:2],
    ),
    ("apps", "DaemonSet"): (
        [
            _NAME,
            ("DESIRED", lambda o, now: str(as_int(status_of(o).get("desiredNumberScheduled")))),
            ("CURRENT", lambda o, now: str(as_int(status_of(o).get("currentNumberScheduled")))),
            ("READY", lambda o, now: str(as_int(status_of(o).get("numberReady")))),
            ("UP-TO-DATE", lambda o, now: str(as_int(status_of(o).get("updatedNumberScheduled")))),
            ("AVAILABLE", lambda o, now: str(as_int(status_of(o).get("numberAvailable")))),
            (
                "NODE SELECTOR",
                lambda o, now: (
                    ",".join(
                        f"{k}={v}"
                        for k, v in sorted(
                            ((spec_of(o).get("template") or {}).get("spec") or {}).get("nodeSelector", {}).items()
                        )
                    )
                    or "<none>"
                ),
            ),
            _AGE,
        ],
        _WORKLOAD_WIDE,
    ),
    ("", "Pod"): (
        [
            _NAME,
            ("READY", lambda o, now: pod_ready(o)),
            ("STATUS", lambda o, now: pod_status(o)),
            ("RESTARTS", pod_restarts),
            _AGE,
        ],
        [
            ("IP", lambda o, now: status_of(o).get("podIP") or "<none>"),
            ("NODE", lambda o, now: spec_of(o).get("nodeName") or "<none>"),
            ("NOMINATED NODE", lambda o, now: status_of(o).get("nominatedNodeName") or "<none>"),
            ("READINESS GATES", lambda o, now: readiness_gates(o)),
        ],
    ),
    ("batch", "Job"): (
        [
            _NAME,
            ("STATUS", lambda o, now: job_status(o)),
            ("COMPLETIONS", lambda o, now: job_completions(o)),
            ("DURATION", job_duration),
            _AGE,
        ],
        [
            ("CONTAINERS", lambda o, now: _containers_col(o)),
            ("IMAGES", lambda o, now: _images_col(o)),
            ("SELECTOR", lambda o, now: _selector_text(spec_of(o).get("selector"))),
        ],
    ),
    ("", "Service"): (
        [
            _NAME,
            ("TYPE", lambda o, now: spec_of(o).get("type") or "ClusterIP"),
            ("CLUSTER-IP", lambda o, now: spec_of(o).get("clusterIP") or "<none>"),
            ("EXTERNAL-IP", lambda o, now: service_external_ip(o)),
            ("PORT(S)", lambda o, now: service_ports(o)),
            _AGE,
        ],
        [
            (
                "SELECTOR",
                lambda o, now: (
                    ",".join(f"{k}={v}" for k, v in sorted((spec_of(o).get("selector") or {}).items())) or "<none>"
                ),
            ),
        ],
    ),
    ("", "ConfigMap"): (
        [_NAME, ("DATA", lambda o, now: str(len(o.get("data") or {}) + len(o.get("binaryData") or {}))), _AGE],
        [],
    ),
    ("", "Secret"): (
        [
            _NAME,
            ("TYPE", lambda o, now: str(o.get("type") or "Opaque")),
            # the hub holds Secrets as metadata only (docs/agent.md): their data is not counted
            _AGE,
        ],
        [],
    ),
    ("", "Namespace"): ([_NAME, ("STATUS", lambda o, now: status_of(o).get("phase") or "Active"), _AGE], []),
}


def table_columns(group: str, kind: str, *, wide: bool = False) -> list[tuple[str, Cell]]:
    """The columns kubectl prints for a kind; NAME and AGE for every kind it has no printer for."""
    columns, extra = _COLUMNS.get((group, kind), ([_NAME, _AGE], []))
    return columns + extra if wide else list(columns)


class TablePrinter:
    """kubectl's tables: columns padded to the widest cell plus three spaces, widths remembered.

    kubectl's tabwriter keeps the widths of what it printed (RememberWidths), so the rows `-w`
    prints later line up with the table above them unless a cell is wider; this does the same.
    """

    MIN_WIDTH = 6
    PADDING = 3

    def __init__(
        self,
        columns: Sequence[tuple[str, Cell]],
        out: TextIO,
        *,
        account: bool = False,
        namespace: bool = False,
        name_prefix: bool = False,
        headers: bool = True,
    ) -> None:
        self.columns = list(columns)
        self.out = out
        self.account = account
        self.namespace = namespace
        self.name_prefix = name_prefix
        self.headers = headers
        self.widths: list[int] = []
        self.printed_header = False

    def header(self) -> list[str]:
        return (
            (["ACCOUNT"] if self.account else [])
            + (["NAMESPACE"] if self.namespace else [])
            + [h for h, _ in self.columns]
        )

    def cells(self, account: str, obj: dict[str, Any], now: datetime) -> list[str]:
        values = [fn(obj, now) for _, fn in self.columns]
        if self.name_prefix and self.columns and self.columns[0] is _NAME:
            values[0] = object_name(obj)
        return (
            ([account] if self.account else [])
            + ([str(meta(obj).get("namespace", ""))] if self.namespace else [])
            + values
        )

    def print_rows(self, rows: Iterable[tuple[str, dict[str, Any]]], now: datetime | None = None) -> None:
        """Print these rows (and the header before the first ones), aligned with all printed so far."""
        now = now or datetime.now(UTC)
        lines = [self.cells(account, obj, now) for account, obj in rows]
        if self.headers and not self.printed_header and lines:
            lines.insert(0, self.header())
            self.printed_header = True
        if not lines:
            return
        n = len(lines[0])
        widths = [max(len(line[i]) for line in lines) for i in range(n)]
        self.widths = [max(w, self.widths[i] if i < len(self.widths) else 0) for i, w in enumerate(widths)]
        for line in lines:
            padded = [c.ljust(max(self.widths[i] + self.PADDING, self.MIN_WIDTH)) for i, c in enumerate(line[:-1])]
            self.out.write(("".join(padded) + line[-1]).rstrip() + "\n")
        self.out.flush()


def list_document(items: list[dict[str, Any]]) -> dict[str, Any]:
    """kubectl's shape for several objects in -o json/yaml."""
    return {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}}


def dump(doc: Any, fmt: str, out: TextIO) -> None:
    """kubectl's JSON (4-space indent, the server's field order) or YAML (sorted keys, no wrapping)."""
    if fmt == "json":
        out.write(json.dumps(doc, indent=4, ensure_ascii=False) + "\n")
    else:
        import yaml

        out.write(
            yaml.dump(
                doc, Dumper=_yaml_dumper(), sort_keys=True, default_flow_style=False, allow_unicode=True, width=1 << 30
            )
        )
    out.flush()


def dump_one(obj: dict[str, Any], fmt: str, out: TextIO) -> None:
    """One object of a stream (`-w`): YAML documents are separated by `---`, as kubectl does."""
    if fmt == "yaml":
        out.write("---\n")
    dump(obj, fmt, out)


def _yaml_dumper() -> Any:
    import yaml

    return getattr(yaml, "CSafeDumper", yaml.SafeDumper)
