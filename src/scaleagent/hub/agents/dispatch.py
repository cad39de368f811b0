"""Dynamic accounts on the link: the hub asks an agent to start or stop accounts and awaits its answer.

`AccountDispatcher.add` sends AddAccounts down one session's Caching stream, `delete` sends
DeleteAccounts, and each awaits the agent's AccountsAnswer for that request. What an account does
afterwards (connecting, `watching` once its first snapshot is in, `error` with a reason) arrives
as the usual account descriptions, through the registry; the answer only says whether the agent
took the account.

Every call returns one `(accepted, reason)` per account, never raises for what the agent or the
network did: a timeout, a session that ends, or an account the answer leaves out becomes
`(False, reason)` for that account, so that callers (the REST API's state machine) can record a
reason for each account without a special path.

An agent whose identity (hub/auth/agents.py) does not allow an account's name, or whose identity
is not the one the account is bound to, is never sent it: `add` answers `(False, reason)` for that
account without asking the agent. An unbound account is bound to the identity of the first
session it is sent to, before it is sent, so its kubeconfig reaches one identity's agents only
(`sessions` offers a zone's accounts only to sessions whose identity allows the zone; the hub
refuses a session that declares a zone its identity does not allow).

The kubeconfig is base64-encoded here, in memory, into the message and nowhere else; it is never
logged.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import struct_pb2

from ...protocol import pb
from ..store import StoreError
from .registry import AccountRecord, Registry, Session

log = logging.getLogger("scaleagent.hub.agents.dispatch")

DEFAULT_TIMEOUT = 15.0
NO_ANSWER = "no answer for this account"


@dataclass
class DynamicAccountSpec:
    """One account to send to an agent.

    `kubeconfig` is the resolved kubeconfig content (never a reference); None sends none, which
    the agent takes as "use my own service account". `properties` are the agent settings a file
    account has (namespaces, omitNamespaces, kinds, omitKinds, customResourceDefinitions,
    onlyNamespacedResources), with their YAML names; the agent validates them as it validates its
    file, and refuses the account with the same message if they are wrong.
    """

    name: str
    kubeconfig: bytes | None = field(repr=False)
    context: str | None = None
    properties: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Pending:
    """A request sent and not yet answered."""

    session_id: str
    agent_id: str
    names: list[str]
    answer: asyncio.Future[dict[str, tuple[bool, str]]]


class AccountDispatcher:
    """Sends AddAccounts/DeleteAccounts to sessions of this replica and matches the answers."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self._pending: dict[str, _Pending] = {}
        # A session that ends fails its requests at once, rather than when they time out.
        registry.listeners.append(self._on_registry)

    def sessions(self, zone_id: str | None = None) -> list[Session]:
        """Sessions on this replica that may be sent dynamic accounts, oldest first; with a zone,
        only that zone's ("" is the agents without a zone)."""
        found = [
            s
            for s in self.registry.sessions.values()
            if s.dynamic_accounts_enabled
            and s.control is not None
            and (zone_id is None or s.zone_id == zone_id)
            and (zone_id is None or s.grant is None or s.grant.allows_zone(zone_id))
        ]
        return sorted(found, key=lambda s: s.connected_at)

    async def add(
        self, session: Session, accounts: list[DynamicAccountSpec], timeout: float = DEFAULT_TIMEOUT
    ) -> dict[str, tuple[bool, str]]:
        """Ask the session's agent to follow these accounts (or to start them over with these
        settings); {name: (accepted, reason)}. Accepted means started, not yet watching."""
        names = _unique([a.name for a in accounts], "add")
        refused: dict[str, tuple[bool, str]] = {}
        for a in accounts:
            try:
                why = await self.registry.may_receive(session, a.name)
            except StoreError as e:
                why = f"cannot tell which agent identity account {a.name!r} is bound to: {e}"
            if why is not None:
                refused[a.name] = (False, why)
                log.warning("not sending account %s to agent %s: %s", a.name, session.agent_id, why)
        if refused:
            accounts = [a for a in accounts if a.name not in refused]
            names = [n for n in names if n not in refused]
        if not accounts:
            return refused
        request_id = uuid.uuid4().hex
        message = pb.CachingControl(
            add_accounts=pb.AddAccounts(request_id=request_id, accounts=[_dynamic_account(a) for a in accounts])
        )
        log.info("asking agent %s to add account(s) %s (request %s)", session.agent_id, ", ".join(names), request_id)
        return refused | await self._request(session, request_id, names, message, timeout)

    async def delete(
        self, session: Session, names: list[str], timeout: float = DEFAULT_TIMEOUT
    ) -> dict[str, tuple[bool, str]]:
        """Ask the session's agent to stop following these accounts; {name: (accepted, reason)}.
        The agent accepts names it does not follow (reason "not followed"); it refuses accounts
        of its own configuration file."""
        names = _unique(list(names), "delete")
        if not names:
            return {}
        request_id = uuid.uuid4().hex
        message = pb.CachingControl(delete_accounts=pb.DeleteAccounts(request_id=request_id, names=names))
        log.info("asking agent %s to delete account(s) %s (request %s)", session.agent_id, ", ".join(names), request_id)
        return await self._request(session, request_id, names, message, timeout)

    def answer(self, session: Session, answer: pb.AccountsAnswer) -> None:
        """An AccountsAnswer arrived on `session`'s stream (called by the gRPC service)."""
        pending = self._pending.get(answer.request_id)
        if pending is None:
            log.info(
                "agent %s answered request %s, which is no longer awaited (timed out?)",
                session.agent_id,
                answer.request_id or "(no id)",
            )
            return
        if pending.session_id != session.id:
            log.warning(
                "agent %s answered request %s, which was sent to another session; ignored",
                session.agent_id,
                answer.request_id,
            )
            return
        del self._pending[answer.request_id]
        given = {a.name: (a.accepted, a.reason) for a in answer.answers}
        results = {name: given.get(name, (False, NO_ANSWER)) for name in pending.names}
        for name, (accepted, reason) in results.items():
            if not accepted:
                log.warning("agent %s refused account %s: %s", session.agent_id, name, reason)
        if not pending.answer.done():
            pending.answer.set_result(results)

    def closed(self, session: Session) -> None:
        """The session ended: its unanswered requests fail now, naming why."""
        for request_id, pending in list(self._pending.items()):
            if pending.session_id == session.id:
                del self._pending[request_id]
                if not pending.answer.done():
                    reason = f"agent {session.agent_id} disconnected before answering"
                    pending.answer.set_result({name: (False, reason) for name in pending.names})

    def _on_registry(self, what: str, session: Session | None, record: AccountRecord | None) -> None:
        if what == "closed" and session is not None:
            self.closed(session)

    async def _request(
        self, session: Session, request_id: str, names: list[str], message: pb.CachingControl, timeout: float
    ) -> dict[str, tuple[bool, str]]:
        if self.registry.sessions.get(session.id) is not session or session.control is None:
            reason = f"agent {session.agent_id} is not connected to this hub (session {session.id} ended)"
            return {name: (False, reason) for name in names}
        future: asyncio.Future[dict[str, tuple[bool, str]]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = _Pending(session.id, session.agent_id, names, future)
        # Nothing awaits between the check above and here: the session cannot end in between.
        session.control(message)
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            reason = f"agent {session.agent_id} did not answer within {timeout:g}s"
            log.warning("request %s: %s", request_id, reason)
            return {name: (False, reason) for name in names}
        finally:
            self._pending.pop(request_id, None)


def _unique(names: list[str], what: str) -> list[str]:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"account {name!r} appears more than once in one {what} request")
        seen.add(name)
    return names


def _dynamic_account(spec: DynamicAccountSpec) -> pb.DynamicAccount:
    properties = struct_pb2.Struct()
    try:
        properties.update(spec.properties)
    except (TypeError, ValueError) as e:
        raise ValueError(f"account {spec.name!r}: properties cannot be sent: {e}") from None
    encoded = base64.b64encode(spec.kubeconfig).decode("ascii") if spec.kubeconfig else ""
    return pb.DynamicAccount(
        name=spec.name, kubeconfig_base64=encoded, context=spec.context or "", properties=properties
    )
