"""How the agent packs events for the hub: batches stay under the hub's message limit."""

from __future__ import annotations

import asyncio

from scaleagent.agent.link import HubLink, LinkSettings
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
