"""The agent's one outbound connection to the hub, and the watch engine's sink while it runs.

Events are queued per connection ("epoch"): whatever was queued or in flight when a connection
broke is dropped, and after a reconnect every account relists, so the hub converges on a fresh
snapshot rather than on a replay of what might have been missed. Awaiting `send` is the
backpressure: it blocks while there is no connection, while the queue is full, and (through the
acknowledgement window) while the hub is behind.

The hub also sends requests down the stream: AddAccounts and DeleteAccounts (dynamic accounts)
are carried out by the account manager as they are read, and their answers go out through the
writer (the stream's only writer), ahead of account descriptions and events written after them.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import random
import re
import socket
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import grpc
from google.protobuf import struct_pb2
from google.protobuf.json_format import MessageToDict

from .. import __version__
from ..kube.events import ObjectEvent
from ..protocol import PROTOCOL_VERSION, pb, pb_grpc
from ..protocol.wire import EventsMessage, PackedMessage
from .sinks import AccountAnswer, AccountDescription, DynamicAccountRequest
from .token import TokenCommand, TokenCommandError

log = logging.getLogger("scaleagent.agent.link")

# A Welcome that does not come within this time means the peer is not a hub (or is stuck). A hub
# takes the streams of agents connecting together one at a time, in the order they came: 5,000
# agents reconnecting at once waited up to 29 s, so at 15 s half of them gave up, went to the back
# of the queue after their backoff, and left the hub a call more to take. A stream the hub has not
# taken within 30 s is cancelled by its gRPC (grpc.server_max_unrequested_time_in_server), which
# the agent sees at once; this wait is longer than that, so an agent never gives up on a call that
# is still in the queue, and it stays the last resort for a peer that took the stream and never
# answers (a dead connection is found sooner, by the HTTP/2 pings).
WELCOME_TIMEOUT = 60.0
# After a session that lasted ends (its hub stopped, failed over, or the network dropped every
# connection), the first attempt to connect again waits a random time from 0 to this ("full
# jitter", as client-go's and gRPC's reconnect backoffs jitter theirs): agents that lost their hub
# together come back spread over these seconds, and their later attempts stay spread, rather than
# all in the same instant behind one another in the hub's queue.
RECONNECT_SPREAD_SECONDS = 5.0
# A session that lasted this long starts a new round of the hub's addresses when it ends, so the
# next address is tried at once. A shorter one counts as a failed attempt: hubs that accept and
# drop the agent at once are then retried with backoff, not in a tight loop.
STABLE_SESSION_SECONDS = 5.0
# Room left in a message for the batch's own framing when filling it up to the hub's limit.
FRAMING_MARGIN = 64 * 1024


class Accounts(Protocol):
    """What the link needs from the account manager."""

    def descriptions(self) -> list[AccountDescription]: ...

    async def resync(self, name: str | None = None) -> None: ...

    async def reject(self, name: str, reason: str) -> None: ...

    async def add_dynamic(self, requests: Sequence[DynamicAccountRequest]) -> list[AccountAnswer]: ...

    async def delete_dynamic(self, names: Sequence[str]) -> list[AccountAnswer]: ...


class Operations(Protocol):
    """What the link needs from the operation executor (executor.py)."""

    async def serve(self, call: grpc.aio.StreamStreamCall, max_result_bytes: int) -> None: ...


@dataclass
class LinkSettings:
    """`targets` are the hub's addresses (replicas), tried in turn; `target` is the one in use
    (the link sets it when it moves on). Given only `target`, it is the one address."""

    target: str = ""
    targets: list[str] = field(default_factory=list)
    insecure: bool = False
    server_name: str = ""
    insecure_skip_verify: bool = False
    client_cert_file: Path | None = None
    client_key_file: Path | None = None
    cacert_file: Path | None = None
    token: str = field(default="", repr=False)
    token_command: TokenCommand | None = None  # a program giving the token (clouddriver.auth.tokenCommand)
    client_key_password: str = field(default="", repr=False)  # of an encrypted client key
    no_proxy: bool = False  # ignore HTTP(S)_PROXY for the hub connection
    # Reconnect backoff (clouddriver.backoff), in seconds.
    backoff_base: float = 0.5
    backoff_multiplier: float = 2.0
    backoff_jitter: float = 0.2
    backoff_max: float = 30.0
    # The first reconnect after a session that lasted waits a random time up to this (seconds).
    reconnect_spread_seconds: float = RECONNECT_SPREAD_SECONDS
    keep_alive_seconds: int = 10  # heartbeats (and HTTP/2 pings) to the hub; 0: none
    keep_alive_timeout_seconds: int = 10  # silence after a heartbeat that ends the link
    agent_id: str = ""
    zone_id: str = ""
    dynamic_accounts_enabled: bool = True
    batch_events: int = 1000
    linger_seconds: float = 0.002
    window: int = 8
    queue_batches: int = 64

    def __post_init__(self) -> None:
        if not self.targets:
            if not self.target:
                raise ValueError("LinkSettings needs a target")
            self.targets = [self.target]
        self.targets = list(self.targets)
        if not self.target:
            self.target = self.targets[0]


class LinkError(Exception):
    """The hub refused this agent or answered something that is not the protocol."""


class LinkBackoff:
    """gRPC's connection backoff, as Armory's `clouddriver.backoff` sets it: `base` times
    `multiplier` per failed round, at most `maximum`, randomised by +/- `jitter` of itself."""

    def __init__(self, base: float, multiplier: float, jitter: float, maximum: float) -> None:
        self.base, self.multiplier, self.jitter, self.maximum = base, multiplier, jitter, maximum
        self.attempt = 0

    def next(self) -> float:
        delay = min(self.maximum, self.base * (self.multiplier**self.attempt))
        self.attempt += 1
        return max(0.0, delay * (1 + self.jitter * random.uniform(-1, 1)))

    def reset(self) -> None:
        self.attempt = 0


class HubLink:
    """Connects, says Hello, streams batches, and starts over when anything breaks: at the next of
    the hub's addresses at once, with backoff only after every address failed in a row."""

    def __init__(self, settings: LinkSettings) -> None:
        self.settings = settings
        self.accounts: Accounts | None = None
        self.operations: Operations | None = None
        self.state = "connecting"
        self.reason = ""
        self.session_id = ""
        self.connected_since = 0.0
        self.connects = 0
        self.disconnects = 0  # sessions that ended (Armory's kubesvc_disconnection_total)
        self.batches_acked = 0
        self.events_sent = 0
        self.event_bytes_sent = 0  # bytes of event messages written (kubesvc_events_bytes_sent_total)
        self.dropped_oversize = 0
        self._epoch = 0
        self._connected = asyncio.Event()
        self._queue: asyncio.Queue[tuple[int, list[ObjectEvent]]] = asyncio.Queue(settings.queue_batches)
        # name -> (latest description, how many queue items preceded it)
        self._described: dict[str, tuple[AccountDescription, int]] = {}
        self._enqueued = 0  # queue items put, ever
        self._taken = 0  # queue items taken by the writer (written, or dropped as stale)
        self._written = 0  # items up to this position are on the wire (or were dropped)
        # Answers and AccountRemoved messages of the current connection, in the order they happened.
        self._control: collections.deque[pb.CachingMessage] = collections.deque()
        self._task: asyncio.Task[None] | None = None
        self._max_bytes = 4 * 1024 * 1024
        self._heads: dict[tuple[str, str, str, str, str], bytes] = {}  # see EventsMessage
        self._packed = False  # whether the hub's Welcome offered packed_events
        self._heard_at = 0.0  # monotonic: when the hub last said anything on this connection

    # --- the sink side, called by the watch engine ------------------------------------------------

    async def send(self, events: list[ObjectEvent]) -> None:
        while True:
            await self._connected.wait()
            epoch = self._epoch
            await self._queue.put((epoch, events))
            self._enqueued += 1  # in the same step as the put: the count is the item's position
            if epoch == self._epoch:
                return
            # The connection changed while we waited for room: this account will be resynced.

    def describe(self, account: AccountDescription) -> None:
        """Sent once every event queued before it is written, and before any queued after it.

        So the hub knows an account before its first events, and hears "watching" only after
        the snapshot that made it so (its SNAPSHOT_END was queued first).
        """
        self._described[account.name] = (account, self._enqueued)
        self._wake_writer()

    def removed(self, name: str) -> None:
        """Tell the hub the account is no longer followed (it lets it go: INACTIVE, its objects
        out of the cache). Its last description ("stopped") is not sent: it would register it again.
        Queued while disconnected, it is dropped with the rest of that connection's control
        messages: the next hello does not name the account, and the hub orphans it after its grace
        period."""
        self._described.pop(name, None)
        self._send_control(pb.CachingMessage(account_removed=pb.AccountRemoved(name=name)))

    def _wake_writer(self) -> None:
        """Make the writer run even when no event follows (a full queue means it is running anyway)."""
        if self._connected.is_set() and not self._queue.full():
            self._queue.put_nowait((self._epoch, []))
            self._enqueued += 1

    def _send_control(self, message: pb.CachingMessage) -> None:
        self._control.append(message)
        self._wake_writer()

    # --- lifecycle --------------------------------------------------------------------------------

    def start(self, accounts: Accounts, operations: Operations | None = None) -> None:
        self.accounts = accounts
        self.operations = operations
        self._task = asyncio.get_running_loop().create_task(self._run(), name="hub link")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait([self._task])

    def health(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "hub": self.settings.target,
            "addresses": list(self.settings.targets),
            "state": self.state,
            "sessionId": self.session_id,
            "connects": self.connects,
            "batchesAcknowledged": self.batches_acked,
            "eventsSent": self.events_sent,
        }
        if self.reason:
            doc["reason"] = self.reason
        if self.connected_since:
            doc["connectedSince"] = self.connected_since
        return doc

    async def _run(self) -> None:
        s = self.settings
        backoff = LinkBackoff(s.backoff_base, s.backoff_multiplier, s.backoff_jitter, s.backoff_max)
        targets = self.settings.targets
        index = 0
        tried = 0  # attempts since the last pause; a round is one attempt at each address
        while True:
            target = self.settings.target = targets[index]
            began = self.connects
            started = time.monotonic()
            try:
                await self._session(target, backoff)
            except asyncio.CancelledError:
                raise
            except (LinkError, TokenCommandError) as e:
                self._down(str(e))
            except grpc.aio.AioRpcError as e:
                if e.code() == grpc.StatusCode.UNAUTHENTICATED and self.settings.token_command is not None:
                    self.settings.token_command.invalidate()  # the next attempt runs the program again
                reason = _rpc_reason(e)
                if "WRONG_VERSION_NUMBER" in reason and not self.settings.insecure:
                    reason += (
                        " (the hub answered without TLS: if it serves plaintext, set clouddriver.insecure: "
                        "true, which Armory's agent has by default; ours speaks TLS unless told)"
                    )
                self._down(reason)
            except asyncio.InvalidStateError:  # a write after the call ended: the stream is gone
                self._down("the stream to the hub ended")
            except (OSError, ssl.SSLError, ValueError) as e:
                self._down(f"{type(e).__name__}: {e}")
            except Exception as e:
                log.exception("hub link: unexpected failure")
                self._down(f"unexpected failure: {type(e).__name__}: {e}")
            lasted = self.connects > began and time.monotonic() - started >= STABLE_SESSION_SECONDS
            if lasted:
                tried = 0  # a session that lasted: the round starts again from the address that ended
            tried += 1
            index = (index + 1) % len(targets)
            if lasted:
                # Every agent of that hub lost it at the same moment: come back at a random point of
                # the spread (in place of the round's first backoff), not all in the same instant.
                if tried >= len(targets):
                    tried = 0
                wait = random.uniform(0.0, max(0.0, s.reconnect_spread_seconds))
                log.info("hub link: connecting again in %.1fs (to %s)", wait, targets[index])
                await self._pause(wait)
            elif tried >= len(targets):
                tried = 0
                await self._pause(backoff.next())

    async def _pause(self, seconds: float) -> None:
        """The wait between two attempts to connect (a backoff or the spread, not a wait for anything)."""
        await asyncio.sleep(seconds)

    def _down(self, reason: str) -> None:
        if self.state == "connected":
            self.disconnects += 1
        if self._connected.is_set() or self.state != "disconnected" or reason != self.reason:
            log.warning("hub link to %s: %s", self.settings.target, reason)
        self._connected.clear()
        self._epoch += 1
        self.state, self.reason, self.session_id, self.connected_since = "disconnected", reason, "", 0.0

    async def _session(self, target: str, backoff: LinkBackoff) -> None:
        assert self.accounts is not None
        s = self.settings
        token = await s.token_command.token() if s.token_command is not None else s.token
        presented = None
        if s.insecure_skip_verify and not s.insecure:
            presented = await asyncio.to_thread(_presented_certificate, target)
        channel = _channel(s, target, presented)
        try:
            stub = pb_grpc.AgentLinkStub(channel)
            metadata = (("authorization", f"Bearer {token}"),) if token else ()
            # Events go out as the wire bytes EventsMessage made; other messages as protobufs.
            caching = channel.stream_stream(
                CACHING_METHOD, request_serializer=_to_wire, response_deserializer=pb.CachingControl.FromString
            )(metadata=metadata)
            self._described.clear()
            self._control.clear()  # answers to requests of a former connection: that hub session is gone
            await caching.write(
                pb.CachingMessage(
                    hello=pb.Hello(
                        protocol_version=PROTOCOL_VERSION,
                        agent_id=s.agent_id,
                        zone_id=s.zone_id,
                        agent_version=__version__,
                        dynamic_accounts_enabled=s.dynamic_accounts_enabled,
                        heartbeat_seconds=max(0, s.keep_alive_seconds),
                        heartbeat_timeout_seconds=max(1, s.keep_alive_timeout_seconds),
                        accounts=[_account_message(d) for d in self.accounts.descriptions()],
                    )
                )
            )
            try:
                welcome = await asyncio.wait_for(caching.read(), WELCOME_TIMEOUT)
            except TimeoutError:
                raise LinkError(f"no welcome from the hub within {WELCOME_TIMEOUT:g}s") from None
            if welcome is grpc.aio.EOF or not welcome.HasField("welcome"):
                raise LinkError("the hub did not answer the hello with a welcome")
            w = welcome.welcome
            self.session_id = w.session_id
            if w.max_message_bytes:
                self._max_bytes = max(1024, w.max_message_bytes - FRAMING_MARGIN)
            self._packed = w.packed_events  # a hub that reads packed batches reads them faster
            operations = stub.Operations(metadata=metadata)
            await operations.write(
                pb.OperationsMessage(
                    hello=pb.OperationsHello(
                        protocol_version=PROTOCOL_VERSION, agent_id=s.agent_id, session_id=w.session_id
                    )
                )
            )
            first = self.connects == 0
            self.connects += 1
            log.info("hub link: connected to %s (replica %s, session %s)", target, w.hub_replica, w.session_id)
            if not first:
                # Whatever was in flight on the old connection is lost: every account relists.
                await self.accounts.resync()
            self._epoch += 1
            self._drain_stale()
            window = asyncio.Semaphore(s.window)
            self.state, self.reason, self.connected_since = "connected", "", time.time()
            self._connected.set()
            backoff.reset()
            self._heard_at = time.monotonic()
            tasks = [
                asyncio.create_task(self._write(caching, window), name="hub link writer"),
                asyncio.create_task(self._read(caching, window), name="hub link reader"),
                asyncio.create_task(
                    self.operations.serve(operations, self._max_bytes)
                    if self.operations is not None
                    else _refuse_operations(operations),
                    name="hub link operations",
                ),
            ]
            if w.heartbeats and s.keep_alive_seconds > 0:
                tasks.append(asyncio.create_task(self._heartbeats(), name="hub link heartbeats"))
            if s.token_command is not None and s.token_command.refresh_interval > 0:
                tasks.append(asyncio.create_task(self._refresh_token(), name="hub link token refresh"))
            try:
                done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                failures = [f for f in (t.exception() for t in done) if f is not None]
                # The reader's status says why the hub ended the stream; a writer's error only that it ended.
                failures.sort(key=lambda e: not isinstance(e, grpc.aio.AioRpcError))
                if failures:
                    raise failures[0]
                raise LinkError("the hub closed the stream")
            finally:
                self._connected.clear()
                for t in tasks:
                    t.cancel()
                await asyncio.wait(tasks)
        finally:
            await channel.close(grace=None)

    async def _refresh_token(self) -> None:
        """Run the token program every refresh interval, so that the next connection has a fresh
        token at hand; a failure is logged (without output) and tried again at the next interval.
        The running session keeps the token it was accepted with: the hub checks it on connecting."""
        command = self.settings.token_command
        assert command is not None
        while True:
            await asyncio.sleep(command.refresh_interval)
            try:
                await command.token()
            except TokenCommandError as e:
                log.warning("hub link: %s", e)

    def _drain_stale(self) -> None:
        while not self._queue.empty():
            self._queue.get_nowait()
            self._taken += 1
        self._written = self._taken

    async def _next_batch(self) -> list[ObjectEvent]:
        """Events of the current epoch, coalesced up to `batch_events` or `linger_seconds`."""
        s = self.settings
        while True:
            epoch, events = await self._queue.get()
            self._taken += 1
            if epoch == self._epoch:
                break
        batch = list(events)
        deadline = asyncio.get_running_loop().time() + s.linger_seconds
        while len(batch) < s.batch_events:
            try:
                epoch, events = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining <= 0:
                    break
                try:
                    epoch, events = await asyncio.wait_for(self._queue.get(), remaining)
                except TimeoutError:
                    break
            self._taken += 1
            if epoch == self._epoch:
                batch.extend(events)
        return batch

    async def _write(self, call: grpc.aio.StreamStreamCall, window: asyncio.Semaphore) -> None:
        sequence = 0
        while True:
            batch = await self._next_batch()
            await self._flush_control(call)
            await self._flush_descriptions(call)  # those made before any of this batch was queued
            for message in self._split(batch):
                await window.acquire()
                sequence += 1
                wire = message.wire(sequence)
                await call.write(wire)
                self.events_sent += len(message)
                self.event_bytes_sent += len(wire)
            self._written = self._taken
            await self._flush_descriptions(call)  # and those that waited for this batch

    async def _flush_control(self, call: grpc.aio.StreamStreamCall) -> None:
        """Answers first: the hub learns that an account was accepted before it hears it described."""
        while self._control:
            await call.write(self._control.popleft())

    async def _flush_descriptions(self, call: grpc.aio.StreamStreamCall) -> None:
        """The descriptions whose preceding events are all written (or dropped with their connection)."""
        # Taken out before the first write: while a write waits, the reader may remove accounts
        # (DeleteAccounts) or the watch engine describe them again, and both change `_described`.
        ready = [
            self._described.pop(name)[0] for name, (_, after) in list(self._described.items()) if after <= self._written
        ]
        for description in ready:
            await call.write(pb.CachingMessage(account=_account_message(description)))

    def _split(self, batch: Sequence[ObjectEvent]) -> list[EventsMessage | PackedMessage]:
        """Protocol messages that stay below the hub's message size limit: packed batches for a
        hub that reads them (`PackedMessage`), event messages in wire format for one that does not.

        Each event is added once to its message, which knows its size as it grows: an event that
        would take a message past the limit starts the next one; one that is over the limit alone
        is not sent (and logged)."""
        make = PackedMessage if self._packed else EventsMessage
        messages: list[EventsMessage | PackedMessage] = []
        current: EventsMessage | PackedMessage | None = None
        limit = self._max_bytes
        heads = self._heads
        for e in batch:
            if current is None:
                current = make(heads)
                messages.append(current)
            mark = current.mark()
            taken = current.add(e)
            if current.size <= limit:
                continue
            current.drop_last(mark, taken)
            if taken > limit:
                self.dropped_oversize += 1
                log.error(
                    "hub link: %s %s/%s of account %s is %d bytes, over the hub's message limit; not sent",
                    e.kind,
                    e.namespace,
                    e.name,
                    e.account,
                    taken,
                )
                if not current:
                    messages.pop()
                    current = None
                continue
            current = make(heads)
            messages.append(current)
            current.add(e)
        return messages

    async def _read(self, call: grpc.aio.StreamStreamCall, window: asyncio.Semaphore) -> None:
        assert self.accounts is not None
        acked = 0
        while True:
            msg = await call.read()
            if msg is grpc.aio.EOF:
                return
            self._heard_at = time.monotonic()
            which = msg.WhichOneof("message")
            if which == "ack":
                for _ in range(msg.ack.sequence - acked):
                    window.release()
                self.batches_acked += msg.ack.sequence - acked
                acked = msg.ack.sequence
            elif which == "account_rejected":
                r = msg.account_rejected
                log.error("hub link: the hub rejected account %s: %s", r.name, r.reason)
                await self.accounts.reject(r.name, r.reason)
            elif which == "resync":
                await self.accounts.resync(msg.resync.account or None)
            elif which == "add_accounts":
                await self._add_accounts(msg.add_accounts)
            elif which == "delete_accounts":
                await self._delete_accounts(msg.delete_accounts)

    async def _heartbeats(self) -> None:
        """Send a Heartbeat every `keep_alive_seconds`; end the link (LinkError) when the hub has
        said nothing for `keep_alive_timeout_seconds` after one. TCP and HTTP/2 keepalives take a
        minute or more to give up on a frozen network; meanwhile the hub would show the account
        fine and the agent would queue changes for nobody."""
        s = self.settings
        period, timeout = float(s.keep_alive_seconds), float(max(1, s.keep_alive_timeout_seconds))
        tick = min(1.0, period)
        sequence = 0
        unanswered_since: float | None = None  # when the oldest heartbeat not answered yet was sent
        next_beat = time.monotonic() + period
        while True:
            await asyncio.sleep(tick)
            now = time.monotonic()
            if unanswered_since is not None and self._heard_at >= unanswered_since:
                unanswered_since = None
            if unanswered_since is not None and now - unanswered_since > timeout:
                raise LinkError(
                    f"no answer from the hub for {now - unanswered_since:.0f}s after a heartbeat "
                    f"(keepAliveTimeOutSeconds is {timeout:g}): the connection is taken for dead"
                )
            if now >= next_beat:
                sequence += 1
                self._send_control(pb.CachingMessage(heartbeat=pb.Heartbeat(sequence=sequence)))
                if unanswered_since is None:
                    unanswered_since = now
                next_beat = now + period

    async def _add_accounts(self, request: pb.AddAccounts) -> None:
        """Carried out before the next message is read, so requests take effect in the hub's order."""
        assert self.accounts is not None
        requests: list[DynamicAccountRequest] = []
        refused: list[AccountAnswer | None] = []  # in the request's order; None: the manager answers
        for a in request.accounts:
            try:
                properties = MessageToDict(a.properties) if a.HasField("properties") else {}
            except ValueError:  # NaN or infinity: not JSON, so no setting can hold it
                refused.append(AccountAnswer(a.name, False, "properties hold a number that is not finite"))
                continue
            refused.append(None)
            requests.append(DynamicAccountRequest(a.name, a.kubeconfig_base64, a.context, properties))
        answered = iter(await self.accounts.add_dynamic(requests))
        self._answer(request.request_id, [r or next(answered) for r in refused])

    async def _delete_accounts(self, request: pb.DeleteAccounts) -> None:
        assert self.accounts is not None
        answers = await self.accounts.delete_dynamic(list(request.names))
        for answer in answers:
            if answer.removed:
                # Said before the answer, so that the hub has let the account go once it reads it.
                self.removed(answer.name)
        self._answer(request.request_id, answers)

    def _answer(self, request_id: str, answers: list[AccountAnswer]) -> None:
        self._send_control(
            pb.CachingMessage(
                accounts_answer=pb.AccountsAnswer(
                    request_id=request_id,
                    answers=[pb.AccountAnswer(name=a.name, accepted=a.accepted, reason=a.reason) for a in answers],
                )
            )
        )


async def _refuse_operations(call: grpc.aio.StreamStreamCall) -> None:
    """A link started without an executor (tests of the link alone) refuses every operation."""
    while True:
        op = await call.read()
        if op is grpc.aio.EOF:
            return
        await call.write(
            pb.OperationsMessage(
                result=pb.OperationResult(
                    id=op.id,
                    ok=False,
                    error=pb.Status(code=501, reason="NotImplemented", message="this agent runs no operations"),
                )
            )
        )


CACHING_METHOD = f"/{pb.DESCRIPTOR.services_by_name['AgentLink'].full_name}/Caching"


def _to_wire(message: bytes | pb.CachingMessage) -> bytes:
    """The Caching stream's serializer: events come already encoded (EventsMessage.wire)."""
    return message if type(message) is bytes else message.SerializeToString()  # type: ignore[union-attr]


def _account_message(d: AccountDescription) -> pb.Account:
    props = struct_pb2.Struct()
    props.update(d.properties)
    return pb.Account(
        name=d.name,
        state=d.state,
        reason=d.reason,
        api_host=d.host,
        certificate_fingerprint=d.fingerprint,
        server_version=d.version,
        properties=props,
        kinds=list(d.kinds),
        kinds_not_watching=list(d.kinds_not_watching),
    )


def _rpc_reason(e: grpc.aio.AioRpcError) -> str:
    details = e.details() or ""
    code = e.code().name if e.code() else "UNKNOWN"
    return f"{code}: {details}" if details else code


def _read(path: Path | None) -> bytes | None:
    return path.read_bytes() if path is not None else None


def _channel(s: LinkSettings, target: str, presented: tuple[bytes, str] | None) -> grpc.aio.Channel:
    """A channel to `target`: without `tls.serverName`, its host is the name the certificate must have."""
    options: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", 64 * 1024 * 1024),
        ("grpc.enable_retries", 0),
        # One connection, never a pool: the hub sees this agent as one session.
        ("grpc.use_local_subchannel_pool", 1),
    ]
    if s.no_proxy:
        options.append(("grpc.enable_http_proxy", 0))
    if s.keep_alive_seconds > 0:
        options += [
            ("grpc.keepalive_time_ms", s.keep_alive_seconds * 1000),
            ("grpc.keepalive_timeout_ms", 20_000),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
        ]
    if s.insecure:
        return grpc.aio.insecure_channel(target, options=options)
    roots = _read(s.cacert_file)
    if presented is not None:
        # gRPC has no "don't verify": trust whatever certificate the hub presents right now.
        roots, name = presented
        options.append(("grpc.ssl_target_name_override", s.server_name or name))
    elif s.server_name:
        options.append(("grpc.ssl_target_name_override", s.server_name))
    key = _read(s.client_key_file)
    if key is not None and s.client_key_password:
        key = decrypt_key(key, s.client_key_password, s.client_key_file)
    creds = grpc.ssl_channel_credentials(
        root_certificates=roots, private_key=key, certificate_chain=_read(s.client_cert_file)
    )
    return grpc.aio.secure_channel(target, creds, options=options)


def _presented_certificate(target: str) -> tuple[bytes, str]:
    """The hub's certificate as a trust root, and a name it is valid for."""
    host, _, port = target.rpartition(":")
    host = host.strip("[]")
    pem = ssl.get_server_certificate((host, int(port)), timeout=10)
    name = host
    with contextlib.suppress(Exception):
        from cryptography import x509  # present with trustme; only used for this rarely used setting

        cert = x509.load_pem_x509_certificate(pem.encode())
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        dns = sans.get_values_for_type(x509.DNSName)
        ips = [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)]
        name = dns[0] if dns else (ips[0] if ips else host)
    return pem.encode(), name


def decrypt_key(pem: bytes, password: str, path: Path | None = None) -> bytes:
    """An encrypted PEM private key (`clouddriver.tls.clientKeyFilePassword`) as an unencrypted
    PEM, in memory only: gRPC takes no password. Raises ValueError naming the file, not the key."""
    from cryptography.hazmat.primitives import serialization

    try:
        key = serialization.load_pem_private_key(pem, password=password.encode())
    except (ValueError, TypeError) as e:
        raise ValueError(
            f"clouddriver.tls.clientKeyFile {path}: cannot be decrypted with clientKeyFilePassword ({e})"
        ) from None
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def default_agent_id() -> str:
    """The host name: in Kubernetes the pod name, stable enough to recognise a restarted agent."""
    return socket.gethostname()


# A pod of a Deployment is named <deployment>-<replicaset hash>-<5 characters>.
_POD_SUFFIXES = re.compile(r"^(?P<deployment>.+)-[a-z0-9]{1,10}-[a-z0-9]{5}$")


def default_zone_id(hostname: str | None = None, namespace: str | None = None) -> str:
    """Armory's default zone: `<deployment>_<namespace>` in a pod (the deployment is the pod name
    without its two generated suffixes, the namespace the service account's); "" (no zone)
    elsewhere, so that an agent outside Kubernetes serves the accounts that name no zone."""
    from ..kube.credentials import service_account_namespace

    name = hostname if hostname is not None else os.environ.get("HOSTNAME") or socket.gethostname()
    ns = namespace if namespace is not None else service_account_namespace()
    if not ns:
        return ""
    m = _POD_SUFFIXES.match(name)
    return f"{m['deployment'] if m else name}_{ns}"
