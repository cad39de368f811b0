"""The agent <-> hub protocol: generated messages (`v1`) and the few constants both sides share.

The `.proto` is `v1/agent.proto`; `scripts/gen-protocol` regenerates the code beside it.
"""

from __future__ import annotations

from .v1 import agent_pb2 as pb
from .v1 import agent_pb2_grpc as pb_grpc

PROTOCOL_VERSION = 1
"""Raised only for changes old peers cannot understand; fields are added without raising it."""

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["AgentLink"].full_name

EVENT_TYPES: dict[str, pb.EventType] = {
    "ADDED": pb.ADDED,
    "MODIFIED": pb.MODIFIED,
    "DELETED": pb.DELETED,
    "SNAPSHOT_BEGIN": pb.SNAPSHOT_BEGIN,
    "SNAPSHOT_END": pb.SNAPSHOT_END,
}
EVENT_TYPE_NAMES: dict[pb.EventType, str] = {v: k for k, v in EVENT_TYPES.items()}

__all__ = ["pb", "pb_grpc", "PROTOCOL_VERSION", "SERVICE_NAME", "EVENT_TYPES", "EVENT_TYPE_NAMES"]
