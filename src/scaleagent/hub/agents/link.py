"""The hub's end of the agent link: the `AgentLink` gRPC service.

Every refusal (bad token, no hello, a protocol version we do not speak, a malformed stream) ends
only that agent's stream, with a status that says why, and is logged with the agent's address:
other agents never notice.

Each agent proves an identity (hub/auth/agents.py): with `auth.agents` configured, its own token
or its client certificate's CN, which decides the zones it may declare and the accounts it may
stream; without, the shared token (or certificate, or its address) stands for it. One identity
holds at most `auth.agents.maxSessionsPerIdentity` Caching sessions on this replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import time
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf.json_format import MessageToDict

from ...protocol import PROTOCOL_VERSION, SERVICE_NAME, pb, pb_grpc
from ...protocol.states import AgentAccountState
from ...protocol.wire import PackedBatch, read_packed_batch
from ..auth.agents import AgentIdentities, AgentIdentity, hash_token
from ..cache.cache import Cache
from ..metrics import HubMetrics
from ..store import StoreError
from .registry import Registry, Session

if TYPE_CHECKING:
    from .dispatch import AccountDispatcher
    from .routing import OperationRouter

log = logging.getLogger("scaleagent.hub.link")

HELLO_TIMEOUT = 15.0
MAX_NAME = 253
# gRPC is told to accept messages up to this multiple of the configured limit, so that the hub
# itself sees (and logs) a message that is too large; beyond it gRPC cuts the stream silently.
GRPC_LIMIT_FACTOR = 4


def sized_caching_message(data: bytes) -> tuple[int, pb.CachingMessage | PackedBatch]:
    """The Caching stream's request deserializer: the message with its size on the wire; a
    packed batch as the agent writes it is read in place (`read_packed_batch`), the rest by
    protobuf.

    The hub refuses a message over its limit itself (gRPC's own cut-off, GRPC_LIMIT_FACTOR times
    higher, ends the stream without a word). Asking the parsed message its ByteSize() serializes it
    all over again, which cost the hub more than parsing it; the length gRPC hands over is free."""
    return len(data), read_packed_batch(data) or pb.CachingMessage.FromString(data)


def _sized(read: Any) -> tuple[int, Any]:
    """(size, message) from what `context.read()` gave: a pair from `sized_caching_message`, or a
    bare message (or EOF) where the servicer was registered with the generated deserializer."""
    if isinstance(read, tuple):
        return read[0], read[1]
    if isinstance(read, pb.CachingMessage):
        return read.ByteSize(), read
    return 0, read


def add_agent_link_to_server(link: AgentLinkService, server: grpc.aio.Server) -> None:
    """Register `link` as the AgentLink service, as the generated add_AgentLinkServicer_to_server
    does but with the Caching stream's messages read by `sized_caching_message`."""
    handlers = {
        "Caching": grpc.stream_stream_rpc_method_handler(
            link.Caching,
            request_deserializer=sized_caching_message,
            response_serializer=pb.CachingControl.SerializeToString,
        ),
        "Operations": grpc.stream_stream_rpc_method_handler(
            link.Operations,
            request_deserializer=pb.OperationsMessage.FromString,
            response_serializer=pb.Operation.SerializeToString,
        ),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))


class LinkRefused(Exception):
    def __init__(self, code: grpc.StatusCode, reason: str) -> None:
        super().__init__(reason)
        self.code, self.reason = code, reason


class LinkSilent(LinkRefused):
    """The agent said nothing for longer than its own heartbeat settings allow: the connection is
    taken for dead, and its accounts start their grace period now rather than when TCP gives up."""

    def __init__(self, reason: str) -> None:
        super().__init__(grpc.StatusCode.UNAVAILABLE, reason)


class LinkEnded(LinkSilent):
    """The hub was asked to end the session (POST /armory/agent/{id}/disconnect): the agent is
    told UNAVAILABLE, like a dead link, so it reconnects at once."""


class AgentLinkService(pb_grpc.AgentLinkServicer):
    def __init__(
        self,
        registry: Registry,
        cache: Cache,
        *,
        dispatcher: AccountDispatcher,
        router: OperationRouter,
        token: str,
        max_message_bytes: int,
        identities: AgentIdentities | None = None,
        metrics: HubMetrics | None = None,
    ) -> None:
        self.registry, self.cache = registry, cache
        self.metrics = metrics if metrics is not None else HubMetrics()
        # Matches agents' answers to AddAccounts/DeleteAccounts with the requests (dispatch.py),
        # and their operation results with the operations (routing.py).
        self.dispatcher, self.router = dispatcher, router
        self._token = token
        self.identities = identities if identities is not None else AgentIdentities()
        self.max_message_bytes = max_message_bytes
        self.refused = 0

    async def Caching(self, request_iterator: Any, context: grpc.aio.ServicerContext) -> None:
        session: Session | None = None
        try:
            identity = self._authorize(context)
            hello = await self._hello(context)
            self._check_zone(identity, hello)
            self._check_sessions(identity)  # nothing awaited from here to open: the count holds
            session = self.registry.open(
                Session(
                    agent_id=hello.agent_id,
                    zone_id=hello.zone_id,
                    agent_version=hello.agent_version,
                    peer=context.peer(),
                    replica=self.registry.replica,
                    dynamic_accounts_enabled=hello.dynamic_accounts_enabled,
                    grant=identity,
                    proof=self._proof(context),
                    checked_generation=self.identities.generation,
                )
            )
            outbox: asyncio.Queue[pb.CachingControl] = asyncio.Queue()
            session.control = outbox.put_nowait
            ended: asyncio.Future[str] = asyncio.get_running_loop().create_future()
            session.end = lambda why: None if ended.done() else ended.set_result(why)
            await context.write(
                pb.CachingControl(
                    welcome=pb.Welcome(
                        session_id=session.id,
                        hub_replica=self.registry.replica,
                        protocol_version=PROTOCOL_VERSION,
                        max_message_bytes=self.max_message_bytes,
                        heartbeats=True,
                        packed_events=True,
                    )
                )
            )
            for account in hello.accounts:
                await self._account(session, account)
            sender = asyncio.create_task(_send_all(context, outbox))
            heard = _Heard()
            tasks = [asyncio.create_task(self._receive(session, context, heard)), asyncio.create_task(_ended(ended))]
            if hello.heartbeat_seconds:
                tasks.append(
                    asyncio.create_task(
                        _watch_silence(heard, hello.heartbeat_seconds, max(1, hello.heartbeat_timeout_seconds))
                    )
                )
            try:
                await _first_of(tasks)
            finally:
                for task in [*tasks, sender]:
                    task.cancel()
                for task in [*tasks, sender]:
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
        except LinkSilent as e:
            log.warning(
                "ended the session of agent %s at %s: %s",
                session.agent_id if session else "?",
                context.peer(),
                e.reason,
            )
            await context.abort(e.code, e.reason)
        except LinkRefused as e:
            self.refused += 1
            who = session.agent_id if session else "an agent"
            log.warning("refused %s from %s: %s", who, context.peer(), e.reason)
            await context.abort(e.code, e.reason)
        finally:
            if session is not None:
                self.registry.close(session)

    def _authorize(self, context: grpc.aio.ServicerContext) -> AgentIdentity:
        """The identity the agent proves with its bearer token and client certificate."""
        given = dict(context.invocation_metadata() or ()).get("authorization", "")
        token = given[7:] if given.startswith("Bearer ") and len(given) > 7 else None
        common_name = _common_name(context)
        if self.identities.enabled:
            identity = self.identities.identify(token, common_name, context.peer())
            if identity is None:
                proofs = ["a bearer token" if token else "no bearer token"]
                proofs.append(
                    f"a client certificate with CN {common_name!r}" if common_name else "no client certificate"
                )
                raise LinkRefused(
                    grpc.StatusCode.UNAUTHENTICATED,
                    f"no agent identity (auth.agents) matches this agent ({' and '.join(proofs)}); with agent "
                    "identities configured the shared auth.token alone is not enough: give the agent its own "
                    "token (scale-agent agents token) or a client certificate whose CN an identity names",
                )
            return identity
        if self._token and not (token is not None and hmac.compare_digest(token.encode(), self._token.encode())):
            raise LinkRefused(
                grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token (the agent's clouddriver.auth.token)"
            )
        identity = self.identities.identify(token if self._token else None, common_name, context.peer())
        assert identity is not None  # without configured identities every agent has a stand-in one
        return identity

    @staticmethod
    def _proof(context: grpc.aio.ServicerContext) -> tuple[str | None, str | None]:
        given = dict(context.invocation_metadata() or ()).get("authorization", "")
        token = given[7:] if given.startswith("Bearer ") and len(given) > 7 else None
        return (hash_token(token) if token else None), _common_name(context)

    def _check_again(self, session: Session) -> None:
        """The identities changed while the agent is connected: it keeps its session only if its
        proof still names the same identity, and that identity still allows its zone and every
        account it streams. Otherwise the session ends, saying why; the agent reconnects and is
        judged like a new one (refused, or refused the accounts it may no longer serve)."""
        session.checked_generation = self.identities.generation
        token_hash, common_name = session.proof
        now = self.identities.identify_hashed(token_hash, common_name)
        was = session.identity
        if now is None or now.name != was:
            why = (
                f"agent identity {was!r} was removed from auth.agents"
                if now is None
                else f"its proof now names agent identity {now.name!r}, not {was!r}"
            )
        elif not now.allows_zone(session.zone_id):
            zones = now.allowed_zones()
            why = f"agent identity {was!r} may no longer serve zone {session.zone_id!r} (its zones: {zones})"
        else:
            lost = sorted(a for a in session.accounts if not now.allows_account(a))
            if not lost:
                session.grant = now
                return
            names, allowed = ", ".join(map(repr, lost)), now.allowed_accounts()
            why = f"agent identity {was!r} may no longer stream {names} (its accounts: {allowed})"
        raise LinkRefused(grpc.StatusCode.PERMISSION_DENIED, f"the agent identities changed: {why}")

    def _check_zone(self, identity: AgentIdentity, hello: pb.Hello) -> None:
        if not identity.allows_zone(hello.zone_id):
            declared = (
                f"zone {hello.zone_id!r}"
                if hello.zone_id
                else "no zone (set the agent's zoneId, or give the identity zones: ['*'])"
            )
            raise LinkRefused(
                grpc.StatusCode.PERMISSION_DENIED,
                f"agent {hello.agent_id!r} proved agent identity {identity.name!r}, which may not serve "
                f"{declared} (its zones: {identity.allowed_zones()})",
            )

    def _check_sessions(self, identity: AgentIdentity) -> None:
        limit = self.identities.max_sessions
        held = self.registry.sessions_of(identity.name)
        if held >= limit:
            raise LinkRefused(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"agent identity {identity.name!r} already holds {held} session(s) on this hub replica, "
                f"its limit (auth.agents.maxSessionsPerIdentity: {limit})",
            )

    async def _hello(self, context: grpc.aio.ServicerContext) -> pb.Hello:
        try:
            size, first = _sized(await asyncio.wait_for(context.read(), HELLO_TIMEOUT))
        except TimeoutError:
            raise LinkRefused(grpc.StatusCode.DEADLINE_EXCEEDED, f"no hello within {HELLO_TIMEOUT:g}s") from None
        if first is grpc.aio.EOF or type(first) is PackedBatch or first.WhichOneof("message") != "hello":
            raise LinkRefused(grpc.StatusCode.INVALID_ARGUMENT, "the first message of a Caching stream must be a hello")
        hello = first.hello
        if size > self.max_message_bytes:
            raise LinkRefused(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"a hello of {size} bytes is over this hub's limit of {self.max_message_bytes}",
            )
        if hello.protocol_version != PROTOCOL_VERSION:
            raise LinkRefused(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"protocol version {hello.protocol_version} is not supported: this hub speaks "
                f"version {PROTOCOL_VERSION} (upgrade the older side)",
            )
        if not hello.agent_id or len(hello.agent_id) > MAX_NAME:
            raise LinkRefused(grpc.StatusCode.INVALID_ARGUMENT, "the hello needs an agent_id of 1-253 characters")
        return hello

    async def _receive(self, session: Session, context: grpc.aio.ServicerContext, heard: _Heard) -> None:
        expected = 1
        while True:
            size, msg = _sized(await context.read())
            heard.now()
            if self.identities.enabled and self.identities.refresh() != session.checked_generation:
                self._check_again(session)
            if msg is grpc.aio.EOF:
                # Also what gRPC itself leaves us with after cutting a message over its own limit.
                log.info(
                    "agent %s ended its Caching stream (gRPC ends a stream the same way when a message is over "
                    "its transport limit, %d bytes: %dx grpc.maxMessageBytes)",
                    session.agent_id,
                    GRPC_LIMIT_FACTOR * self.max_message_bytes,
                    GRPC_LIMIT_FACTOR,
                )
                return
            if size > self.max_message_bytes:
                raise LinkRefused(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"a message of {size} bytes is over this hub's limit of {self.max_message_bytes} "
                    "(grpc.maxMessageBytes); the agent must split its batches",
                )
            which = "events" if type(msg) is PackedBatch else msg.WhichOneof("message")
            if which == "events":
                batch = msg if type(msg) is PackedBatch else msg.events
                if batch.sequence != expected:
                    raise LinkRefused(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"batch sequence {batch.sequence} where {expected} was expected",
                    )
                expected += 1
                self._apply(session, batch)
                assert session.control is not None
                session.control(pb.CachingControl(ack=pb.Ack(sequence=batch.sequence)))
            elif which == "account":
                await self._account(session, msg.account)
            elif which == "account_removed":
                self.registry.remove(session, msg.account_removed.name)
            elif which == "accounts_answer":
                self.dispatcher.answer(session, msg.accounts_answer)
            elif which == "heartbeat":
                assert session.control is not None
                session.control(pb.CachingControl(heartbeat=pb.Heartbeat(sequence=msg.heartbeat.sequence)))
            elif which == "hello":
                raise LinkRefused(grpc.StatusCode.INVALID_ARGUMENT, "a second hello on the same stream")
            else:
                raise LinkRefused(grpc.StatusCode.INVALID_ARGUMENT, "an empty or unknown message")

    async def _account(self, session: Session, a: pb.Account) -> None:
        if not a.name or len(a.name) > MAX_NAME:
            raise LinkRefused(grpc.StatusCode.INVALID_ARGUMENT, "an account needs a name of 1-253 characters")
        if a.state == AgentAccountState.STANDBY:
            return  # the agent says it stands by, as told: nothing to register
        try:
            standing_by = await self.registry.admit(session, a.name, a.api_host, a.certificate_fingerprint)
        except StoreError as e:
            # Without the shared table no replica can tell who streams it: ask again later.
            unclaimed = f"the hub cannot reach its database to claim the account ({e})"
            delay = self.registry.ask_again_later(session, a.name, unclaimed)
            log.error("account %s of agent %s: %s; asking again in %gs", a.name, session.agent_id, unclaimed, delay)
            _refuse(session, a.name, f"{unclaimed}; it will ask again")
            return
        if standing_by is not None:
            _refuse(session, a.name, standing_by)
            return
        try:
            properties = MessageToDict(a.properties) if a.HasField("properties") else {}
        except ValueError as e:  # e.g. NaN, which JSON cannot hold
            raise LinkRefused(
                grpc.StatusCode.INVALID_ARGUMENT, f"account {a.name!r}: invalid properties: {e}"
            ) from None
        why = self.registry.describe(
            session,
            a.name,
            api_host=a.api_host,
            fingerprint=a.certificate_fingerprint,
            server_version=a.server_version,
            agent_state=a.state,
            reason=a.reason,
            kinds=list(a.kinds),
            properties=properties,
            kinds_not_watching=list(a.kinds_not_watching),
        )
        if why is not None:
            _refuse(session, a.name, why)

    def _apply(self, session: Session, batch: pb.EventBatch | PackedBatch) -> None:
        """The batch goes to the cache in one pass; events of accounts not accepted are dropped."""
        session.batches += 1
        stamps: list[int] = []
        try:
            done = self.cache.apply_batch(batch, session.accounts, stamps)
        except ValueError as e:
            raise LinkRefused(grpc.StatusCode.INVALID_ARGUMENT, f"batch {batch.sequence}: {e}") from None
        session.events += done.objects + done.dropped  # objects' events only, as /api/v1/stats counts them
        session.dropped += done.dropped
        self.metrics.applied(done.objects, stamps, time.time() * 1000)

    async def Operations(self, request_iterator: Any, context: grpc.aio.ServicerContext) -> None:
        """Attached to its Caching session: operations go down it, their results come back."""
        session: Session | None = None
        sender: asyncio.Task[None] | None = None
        try:
            identity = self._authorize(context)
            first = await asyncio.wait_for(context.read(), HELLO_TIMEOUT)
            if first is grpc.aio.EOF or first.WhichOneof("message") != "hello":
                raise LinkRefused(
                    grpc.StatusCode.INVALID_ARGUMENT, "the first message of an Operations stream must be a hello"
                )
            hello = first.hello
            session = self.registry.sessions.get(hello.session_id)
            if session is None or session.agent_id != hello.agent_id or session.identity != identity.name:
                # Another identity's session is not this agent's, whatever agent id it declares.
                raise LinkRefused(
                    grpc.StatusCode.FAILED_PRECONDITION, "no Caching session with that id for this agent on this hub"
                )
            if session.operate is not None:
                raise LinkRefused(
                    grpc.StatusCode.ALREADY_EXISTS,
                    "this session already has an Operations stream; open one per session",
                )
            outbox: asyncio.Queue[pb.Operation] = asyncio.Queue()
            sender = asyncio.create_task(_send_all(context, outbox))
            session.operations_attached = True
            session.operate = outbox.put_nowait
            while (msg := await context.read()) is not grpc.aio.EOF:
                which = msg.WhichOneof("message")
                if which != "result":
                    raise LinkRefused(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"only results may follow the hello on an Operations stream, not {which or 'an empty message'}",
                    )
                self.router.result(session, msg.result)
        except TimeoutError:
            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, f"no hello within {HELLO_TIMEOUT:g}s")
        except LinkRefused as e:
            self.refused += 1
            log.warning("refused an Operations stream from %s: %s", context.peer(), e.reason)
            await context.abort(e.code, e.reason)
        finally:
            if sender is not None:
                sender.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await sender
                if session is not None:
                    session.operations_attached = False
                    session.operate = None
                    self.router.detached(session)


def _common_name(context: grpc.aio.ServicerContext) -> str | None:
    """The subject CN of the client certificate gRPC verified (mTLS), or None."""
    try:
        auth = context.auth_context() or {}
    except Exception:  # no TLS: nothing to read
        return None
    for value in auth.get("x509_common_name") or ():
        if value:
            return value.decode(errors="replace")
    for value in auth.get("x509_subject") or ():
        for part in value.decode(errors="replace").split(","):
            key, _, cn = part.strip().partition("=")
            if key == "CN" and cn:
                return cn
    return None


def _refuse(session: Session, name: str, why: str) -> None:
    """Tell the agent, once per reason: its answer (it stops the account and says so) must not be
    refused again, or the two would go back and forth for as long as the refusal stands."""
    if session.refused.get(name) == why or session.control is None:
        return
    session.refused[name] = why
    session.control(pb.CachingControl(account_rejected=pb.AccountRejected(name=name, reason=why)))


class _Heard:
    """When the agent last said anything (any message counts, not only heartbeats)."""

    def __init__(self) -> None:
        self.at = time.monotonic()

    def now(self) -> None:
        self.at = time.monotonic()


async def _watch_silence(heard: _Heard, heartbeat_seconds: int, timeout_seconds: int) -> None:
    """Raises LinkSilent once the agent has been silent for a heartbeat period plus its timeout."""
    limit = heartbeat_seconds + timeout_seconds
    while True:
        silent = time.monotonic() - heard.at
        if silent > limit:
            raise LinkSilent(
                f"no message from the agent for {silent:.0f}s (it sends a heartbeat every "
                f"{heartbeat_seconds}s, with a timeout of {timeout_seconds}s): the connection is "
                "taken for dead"
            )
        await asyncio.sleep(limit - silent + 0.05)


async def _ended(ended: asyncio.Future[str]) -> None:
    """Raises LinkEnded once the session is asked to end (Session.end)."""
    raise LinkEnded(await ended)


async def _first_of(tasks: list[asyncio.Task[None]]) -> None:
    """Wait until one task ends; raise its exception if it failed."""
    done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for task in done:
        task.result()


async def _send_all(context: grpc.aio.ServicerContext, outbox: asyncio.Queue[Any]) -> None:
    """The stream's only writer after the welcome: gRPC streams take one write at a time."""
    while True:
        await context.write(await outbox.get())
