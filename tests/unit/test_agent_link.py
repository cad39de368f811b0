"""How the agent packs events for the hub: batches stay under the hub's message limit."""

from __future__ import annotations

import asyncio
import contextlib

from scaleagent.agent.link import HubLink, LinkError, LinkSettings
from scaleagent.agent.sinks import AccountAnswer, AccountDescription
from scaleagent.kube.events import ObjectEvent
from scaleagent.protocol import pb


def event(name: str, size: int) -> ObjectEvent:
    return ObjectEvent("a", "", "v1", "ConfigMap", "ns", name, "uid", "1", "ADDED", b"x" * size)


def sent(messages) -> list[list[pb.Event]]:
    """The events of each message, as the hub reads them."""
    return [list(pb.CachingMessage.FromString(m.wire(i)).events.events) for i, m in enumerate(messages, 1)]


def test_a_batch_is_split_below_the_hubs_limit_in_order():
    link = HubLink(LinkSettings(target="localhost:1"))
    link._max_bytes = 10_000
    messages = link._split([event(f"o{i}", 3_000) for i in range(7)])
    assert [len(m) for m in sent(messages)] == [3, 3, 1]
    assert [e.name for m in sent(messages) for e in m] == [f"o{i}" for i in range(7)]
    assert all(len(m.wire(1)) <= 10_000 + 16 for m in messages)


def test_an_event_larger_than_the_limit_is_counted_not_sent():
    link = HubLink(LinkSettings(target="localhost:1"))
    link._max_bytes = 10_000
    messages = link._split([event("small", 10), event("huge", 20_000), event("after", 10)])
    assert [[e.name for e in m] for m in sent(messages)] == [["small", "after"]]
    assert link.dropped_oversize == 1


class HeldStream:
    """The Caching stream as the writer sees it; its first write waits until the test lets it go,
    as a gRPC write waits for flow control while other tasks run."""

    def __init__(self) -> None:
        self.written: list = []
        self.writing = asyncio.Event()
        self.release = asyncio.Event()

    async def write(self, message) -> None:
        self.writing.set()
        await self.release.wait()
        self.written.append(message)


class DeletingAccounts:
    """The account manager's answer to a DeleteAccounts: every name was followed and is now stopped."""

    async def delete_dynamic(self, names):
        return [AccountAnswer(name, True, removed=True) for name in names]


async def test_accounts_removed_while_their_descriptions_are_written_do_not_break_the_link():
    # Under a burst of dynamic-account changes the reader removes descriptions (DeleteAccounts)
    # while the writer is sending them: the writer must neither crash nor resend what it sent.
    link = HubLink(LinkSettings(target="localhost:1"))
    link.accounts = DeletingAccounts()
    for name in ("a", "b", "c"):
        link.describe(AccountDescription(name, "watching"))
    stream = HeldStream()
    writer = asyncio.create_task(link._flush_descriptions(stream))
    await stream.writing.wait()  # the writer is now inside its first write
    await link._delete_accounts(pb.DeleteAccounts(request_id="r1", names=["b", "c"]))
    stream.release.set()
    await writer
    written = [m.account.name for m in stream.written]
    assert sorted(written) == ["a", "b", "c"] and len(written) == 3
    assert link._described == {}
    # The hub is then told that b and c are gone, after their last description.
    await link._flush_control(stream)
    assert [m.account_removed.name for m in stream.written if m.HasField("account_removed")] == ["b", "c"]


class Clock:
    """time.monotonic for the link, moved by the test: a session "lasts" without anyone waiting."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


class ScriptedLink(HubLink):
    """A link whose attempts to connect go as the script says ("session": connected, lasted a
    minute, then the hub went away; "refused": the attempt failed), and whose waits between
    attempts are written down instead of slept. What it did, in order, is in `happened`."""

    def __init__(self, settings: LinkSettings, script: list[str], clock: Clock) -> None:
        super().__init__(settings)
        self.script, self.clock = list(script), clock
        self.happened: list[tuple[str, object]] = []

    async def _session(self, target, backoff) -> None:
        if not self.script:
            raise asyncio.CancelledError  # the agent stops
        self.happened.append(("attempt", target))
        if self.script.pop(0) == "session":
            self.connects += 1
            backoff.reset()
            self.clock.now += 60
            raise LinkError("the hub closed the stream")
        raise LinkError("connection refused")

    async def _pause(self, seconds: float) -> None:
        self.happened.append(("wait", seconds))


async def run_script(monkeypatch, script: list[str], targets: list[str], spread: float = 5.0) -> ScriptedLink:
    import types

    from scaleagent.agent import link as link_module

    clock = Clock()
    monkeypatch.setattr(
        link_module, "time", types.SimpleNamespace(monotonic=clock.monotonic, time=link_module.time.time)
    )
    link = ScriptedLink(LinkSettings(targets=targets, reconnect_spread_seconds=spread), script, clock)
    with contextlib.suppress(asyncio.CancelledError):
        await link._run()
    return link


async def test_an_agent_whose_hub_went_away_comes_back_at_a_random_point_of_the_spread_then_backs_off(monkeypatch):
    """5,000 agents reconnecting at once waited up to 29 s for their Welcome: the hub takes their
    streams one at a time. An agent that loses an established session now waits a random time
    within the spread (5 s) before its first attempt, so agents that lost their hub together come
    back spread out; a starting agent connects at once, and failed attempts back off as before."""
    link = await run_script(monkeypatch, ["session", "refused", "refused", "session"], ["hub:9091"])
    kinds = [kind for kind, _ in link.happened]
    assert kinds == ["attempt", "wait", "attempt", "wait", "attempt", "wait", "attempt", "wait"]
    waits = [seconds for kind, seconds in link.happened if kind == "wait"]
    assert 0 <= waits[0] <= 5.0  # the spread, after the session ended
    assert 0.4 <= waits[1] <= 0.6 and 0.8 <= waits[2] <= 1.2  # the backoff (0.5 s doubling, +/- 20%)
    assert 0 <= waits[3] <= 5.0  # connected again, then lost again: the spread again


async def test_with_several_addresses_the_spread_comes_before_the_next_one_and_the_backoff_after_a_round(monkeypatch):
    """The ended session counts as the round's attempt at its address: after the spread the next
    address is tried, and once it failed too (a whole round), the backoff."""
    link = await run_script(monkeypatch, ["session", "refused", "refused"], ["hub-a:9091", "hub-b:9091"])
    (a, spread, b, backoff, again) = link.happened
    assert (a, b, again) == (("attempt", "hub-a:9091"), ("attempt", "hub-b:9091"), ("attempt", "hub-a:9091"))
    assert spread[0] == "wait" and 0 <= spread[1] <= 5.0
    assert backoff[0] == "wait" and 0.4 <= backoff[1] <= 0.6


async def test_agents_that_lost_their_hub_together_spread_over_the_whole_window(monkeypatch):
    """What the hub sees: the agents' first attempts fill the spread rather than bunching at its start."""
    firsts = []
    for _ in range(500):
        link = await run_script(monkeypatch, ["session"], ["hub:9091"])
        firsts.append(link.happened[1][1])
    assert all(0 <= w <= 5.0 for w in firsts)
    assert min(firsts) < 0.5 and max(firsts) > 4.5
    assert 1.5 < sorted(firsts)[250] < 3.5  # half of them before the middle, half after


async def test_no_spread_when_it_is_set_to_zero(monkeypatch):
    link = await run_script(monkeypatch, ["session"], ["hub:9091"], spread=0.0)
    assert link.happened == [("attempt", "hub:9091"), ("wait", 0.0)]


def test_an_agent_waits_for_its_welcome_longer_than_the_hubs_grpc_keeps_a_stream_waiting():
    """A stream the hub has not taken within 30 s (gRPC's grpc.server_max_unrequested_time_in_server)
    is cancelled by the hub's gRPC, which the agent sees at once: giving up sooner (it did at 15 s)
    only sent it to the back of the queue and gave the hub another call to take."""
    from scaleagent.agent.link import WELCOME_TIMEOUT

    assert WELCOME_TIMEOUT > 30
