"""What an account's watches reporting their states costs the agent, by how many watches it has.

Each watch of an account (a kind, or a kind in one namespace when the account names namespaces)
reports its state as it lists, watches, backs off; the account derives its own state (syncing,
watching, error) at each report. An account following 50 kinds in 100 namespaces has 5,000
watches, each reporting at least twice on the way up. This times those reports alone, on an
`AccountRunner` whose watches are stand-ins (no cluster): every watch reports `listing`, then
every one `watching`, and the account must end WATCHING. CPU time (time.process_time), median of
--runs.

    .venv/bin/python bench/account_watch_states.py --runs 3
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, median

from scaleagent.agent.accounts import WATCHING, AccountRunner, EngineSettings, Watch
from scaleagent.agent.budget import Budget
from scaleagent.kube.discovery import KindInfo


class _Sink:
    def describe(self, description: object) -> None:
        pass


class _Client:
    def lists_done(self) -> None:
        pass

    async def close(self) -> None:
        pass


async def one_start(kinds: int, namespaces: int) -> float:
    """CPU seconds of every watch reporting listing, then watching."""
    runner = AccountRunner(
        config=SimpleNamespace(name="bench"), settings=EngineSettings(), sink=_Sink(), budget=Budget(4, 4)
    )
    runner.description = lambda: None  # type: ignore[method-assign]  # the hub's view is not timed here
    runner._describe_watches = lambda: None  # type: ignore[method-assign]
    runner._client = _Client()  # type: ignore[assignment]
    task = asyncio.get_running_loop().create_future()
    keys = []
    for k in range(kinds):
        kind = KindInfo("bench.example", "v1", f"Kind{k}", f"kind{k}s", True)
        for n in range(namespaces):
            key = (kind, f"ns-{n}" if namespaces > 1 else None)
            runner.watches[key] = Watch(kind, key[1], SimpleNamespace(failures=0, relists=0), task)  # type: ignore[arg-type]
            keys.append(key)
    start = time.process_time()
    for key in keys:
        runner._on_watch_state(key, "listing", "")
    for key in keys:
        runner._on_watch_state(key, WATCHING, "")
    elapsed = time.process_time() - start
    if runner.state != WATCHING:
        raise RuntimeError(f"the account ended {runner.state}, not watching")
    task.cancel()
    return elapsed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    print(f"an account's watches reporting listing then watching, CPU, median of {args.runs} ({machine()})")
    for kinds, namespaces in ((47, 1), (50, 20), (50, 100)):
        times = [asyncio.run(one_start(kinds, namespaces)) for _ in range(args.runs)]
        n = kinds * namespaces
        print(f"  {kinds:3d} kinds x {namespaces:3d} namespaces = {n:5,d} watches: {median(times) * 1000:8.1f} ms")


if __name__ == "__main__":
    main()
