"""The change records the watch engine produces: one per object change, plus snapshot markers."""

from __future__ import annotations

import msgspec

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"
SNAPSHOT_BEGIN, SNAPSHOT_END = "SNAPSHOT_BEGIN", "SNAPSHOT_END"


class ObjectEvent(msgspec.Struct, gc=False):
    """A change to one object, or a snapshot boundary for (account, kind, namespace scope).

    Between SNAPSHOT_BEGIN and SNAPSHOT_END come ADDED events for every object that exists; a
    consumer keeping a cache drops whatever it held in that scope and did not see again.
    `object` is the object's JSON, untouched unless it had to be scrubbed.

    A msgspec Struct the garbage collector does not track (it holds strings, bytes and a float:
    no cycle can go through it): one is made per object read, and made 2-3x faster than a
    dataclass with slots.
    """

    account: str
    group: str
    version: str
    kind: str
    namespace: str
    name: str
    uid: str
    resource_version: str
    type: str
    object: bytes | None = None
    # When the agent read the change from a watch (time.time()); 0.0 for list items and markers.
    read_at: float = 0.0
