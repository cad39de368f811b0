"""Patch types and field ownership, the way kube-apiserver does them.

kubesim has to answer PATCH and server-side apply like a real API server: ``kubectl`` and
the official clients send strategic merge patches with directives, and read back
``metadata.managedFields``. This package holds that logic as pure functions on plain
JSON-like dicts:

One module per strategy (json_patch, strategic, apply), over the kinds' schema (schema) and
Go's value semantics (values):

* :func:`apply_json_patch` - RFC 6902 (``application/json-patch+json``).
* :func:`apply_merge_patch` - RFC 7386 (``application/merge-patch+json``).
* :func:`apply_strategic_merge_patch` - ``application/strategic-merge-patch+json``, a port
  of ``k8s.io/apimachinery/pkg/util/strategicpatch`` (mergeMap / mergeSlice /
  normalizeElementOrder), driven by a small path-aware schema of the built-in kinds.
* :func:`server_side_apply` - ``application/apply-patch+yaml``, a port of the parts of
  ``sigs.k8s.io/structured-merge-diff`` (merge, ToFieldSet, Compare, prune, conflicts)
  and of the apiserver's ``fieldmanager`` chain (strip meta fields, reset fields,
  ``before-first-apply``, managedFields encoding).
* :func:`record_update` - the ownership bookkeeping the apiserver does for every other
  write, so that a later apply conflicts where Kubernetes would.

Nothing here mutates its inputs. Results are built by copying along the changed paths,
so they share untouched sub-objects with the inputs; the top-level dict and
``metadata`` of every result are always fresh copies, so a caller may set
``resourceVersion`` and friends on a result without touching the input. Treat deeper
levels as read-only or copy them first.
"""

from __future__ import annotations

from .apply import record_update, server_side_apply
from .errors import ApplyConflict, PatchError
from .json_patch import apply_json_patch, apply_merge_patch
from .schema import has_strategic_schema
from .strategic import apply_strategic_merge_patch

__all__ = [
    "ApplyConflict",
    "PatchError",
    "apply_json_patch",
    "apply_merge_patch",
    "apply_strategic_merge_patch",
    "has_strategic_schema",
    "record_update",
    "server_side_apply",
]
