"""The committed protocol code is what the .proto generates, and the messages carry what both sides need."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from scaleagent.protocol import EVENT_TYPE_NAMES, EVENT_TYPES, pb

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ("agent_pb2.py", "agent_pb2.pyi", "agent_pb2_grpc.py")


def test_the_generated_code_is_current(tmp_path):
    subprocess.run(
        [str(ROOT / "scripts" / "gen-protocol"), str(tmp_path)],
        check=True,
        env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
    )
    for name in GENERATED:
        fresh = (tmp_path / "scaleagent" / "protocol" / "v1" / name).read_text()
        committed = (ROOT / "src" / "scaleagent" / "protocol" / "v1" / name).read_text()
        assert fresh == committed, f"{name} is stale: run scripts/gen-protocol and commit the result"


def test_event_types_round_trip_by_name():
    assert {EVENT_TYPE_NAMES[v] for v in EVENT_TYPES.values()} == set(EVENT_TYPES)
    assert pb.EventType.Name(EVENT_TYPES["SNAPSHOT_BEGIN"]) == "SNAPSHOT_BEGIN"


def test_an_event_batch_keeps_object_bytes_untouched():
    raw = b'{"kind":"ConfigMap","metadata":{"name":"x"},"data":{"k":"\\u00e9"}}'
    batch = pb.EventBatch(sequence=7, events=[pb.Event(type=pb.ADDED, account="a", kind="ConfigMap", object=raw)])
    again = pb.EventBatch.FromString(batch.SerializeToString())
    assert again.sequence == 7 and again.events[0].object == raw
