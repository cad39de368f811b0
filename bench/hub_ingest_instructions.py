"""Hub ingest in instructions: what `Cache.apply_batch` costs per event, counted by callgrind.

Wall-clock figures of ingest move by 20% between runs, and between machines by more; instruction
counts do not. N ConfigMaps (bench/hub_serving.py's events) are encoded as the agent packs them
(protocol.wire, as bench/hub_ingest_grpc.py does) and applied to a fresh cache, ADDED then
MODIFIED, under `valgrind --tool=callgrind` three times: set-up only, set-up + ADDED, set-up +
both; the differences, divided by N, are printed. Needs valgrind (Debian's package); a few
minutes at the default N.

    .venv/bin/python bench/hub_ingest_instructions.py --objects 4000
"""

from __future__ import annotations

import argparse
import gc
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))


def apply(n: int, phase: str) -> None:
    """The measured process: encode, then apply what `phase` says (setup, added, both)."""
    from hub_ingest_grpc import encoded_batches

    from scaleagent.hub.cache.cache import Cache

    batches = [m.events for m in encoded_batches("acct", n, 1000, 1, "packed")]
    half = len(batches) // 2
    warm = Cache()  # first-call costs (imports, caches) out of the counts
    warm.apply_batch(batches[0], {"acct"}, [])
    cache = Cache()
    gc.collect()
    gc.disable()
    if phase in ("added", "both"):
        for b in batches[:half]:
            cache.apply_batch(b, {"acct"}, [])
    if phase == "both":
        for b in batches[half:]:
            cache.apply_batch(b, {"acct"}, [])
        assert cache.stats()["objects"] == n and cache.rejected == 0


def counted(n: int, phase: str) -> int:
    out = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, __file__, "--phase", phase]
        + ["--objects", str(n)],
        capture_output=True,
        text=True,
        check=True,
    )
    m = re.search(r"Collected : (\d+)", out.stderr)
    if m is None:
        raise RuntimeError(f"callgrind printed no count: {out.stderr[-500:]}")
    return int(m.group(1))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--objects", type=int, default=4000)
    p.add_argument("--phase", choices=("setup", "added", "both"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.phase:
        apply(a.objects, a.phase)
        return
    if shutil.which("valgrind") is None:
        sys.exit("hub_ingest_instructions: needs valgrind (apt-get install valgrind)")
    setup, added, both = (counted(a.objects, phase) for phase in ("setup", "added", "both"))
    print(f"hub cache apply, {a.objects} ConfigMaps packed in batches of 1000, instructions per event (callgrind)")
    print(f"  ADDED    {(added - setup) / a.objects:10,.0f}")
    print(f"  MODIFIED {(both - added) / a.objects:10,.0f}")


if __name__ == "__main__":
    main()
