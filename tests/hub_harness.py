"""The hub's accounts half in-process, for the accounts and credentials tests: a real store on
each database, the registry, the dispatcher, the accounts service (and, when asked, the
credentials service), their routers served by uvicorn on a real socket and called over HTTP. The
agents are `ScriptedAgent`s: they stand where an agent's Caching stream ends in the hub and answer
as an agent does, each account as the test decides.

Nothing waits by sleeping: `until` waits on the accounts service's change notifications.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import uvicorn
from fastapi import FastAPI
from kubernetes import client
from kubernetes.client.rest import ApiException

from scaleagent.hub.accounts.credentials import CredentialsService
from scaleagent.hub.accounts.kubeconfig_refs import KubeconfigResolver
from scaleagent.hub.accounts.secrets_box import SecretBox, generate_key, parse_keys
from scaleagent.hub.accounts.service import AccountsService
from scaleagent.hub.agents.dispatch import AccountDispatcher
from scaleagent.hub.agents.registry import Registry, Session
from scaleagent.hub.api.accounts import accounts_router
from scaleagent.hub.api.credentials import credentials_router
from scaleagent.hub.cache.cache import Cache
from scaleagent.hub.config import DynamicAccountsConfig
from scaleagent.hub.store import AccountRow, Store
from scaleagent.protocol import pb

ROOT = Path(__file__).resolve().parent.parent
WAIT = 20.0


@dataclass
class ScriptedAgent:
    """An agent as the hub sees it: a session in the registry, receiving control messages and
    answering them. `behaviour[name]` decides an account: "watch" (the default: take it, report
    it watching), "error:<reason>" (take it, report an error), "refuse:<reason>", "silent"
    (take it, report nothing yet)."""

    registry: Registry
    dispatcher: AccountDispatcher
    agent_id: str
    zone_id: str = ""
    dynamic: bool = True
    behaviour: dict[str, str] = field(default_factory=dict)
    default: str = "watch"
    added: list[pb.DynamicAccount] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    session: Session | None = None

    def connect(self) -> ScriptedAgent:
        self.session = self.registry.open(
            Session(
                agent_id=self.agent_id,
                zone_id=self.zone_id,
                agent_version="test",
                peer="test",
                replica="r",
                dynamic_accounts_enabled=self.dynamic,
            )
        )
        self.session.control = self._control
        return self

    def disconnect(self) -> None:
        assert self.session is not None
        self.registry.close(self.session)

    def _control(self, message: pb.CachingControl) -> None:
        loop = asyncio.get_running_loop()
        which = message.WhichOneof("message")
        if which == "add_accounts":
            request = message.add_accounts
            answers, reports = [], []
            for account in request.accounts:
                self.added.append(account)
                verdict, _, reason = self.behaviour.get(account.name, self.default).partition(":")
                answers.append(pb.AccountAnswer(name=account.name, accepted=verdict != "refuse", reason=reason))
                if verdict in ("watch", "error"):
                    reports.append((account.name, "watching" if verdict == "watch" else "error", reason))
            loop.call_soon(self._answer, request.request_id, answers, reports)
        elif which == "delete_accounts":
            request = message.delete_accounts
            self.deleted.extend(request.names)
            answers = [pb.AccountAnswer(name=n, accepted=True, reason="") for n in request.names]
            loop.call_soon(self._removed, request.request_id, answers, list(request.names))

    def _answer(self, request_id: str, answers: list[pb.AccountAnswer], reports: list[tuple[str, str, str]]) -> None:
        assert self.session is not None
        self.dispatcher.answer(self.session, pb.AccountsAnswer(request_id=request_id, answers=answers))
        for name, state, reason in reports:
            self.describe(name, state, reason)

    def describe(self, name: str, state: str, reason: str = "") -> None:
        assert self.session is not None
        self.registry.describe(
            self.session,
            name,
            api_host=f"https://{name}.clusters.test:6443",
            fingerprint="AB:CD",
            server_version="v1.30.0",
            agent_state=state,
            reason=reason,
            kinds=["ConfigMap"],
            properties={},
        )

    def _removed(self, request_id: str, answers: list[pb.AccountAnswer], names: list[str]) -> None:
        assert self.session is not None
        for name in names:
            self.registry.remove(self.session, name)
        self.dispatcher.answer(self.session, pb.AccountsAnswer(request_id=request_id, answers=answers))

    def kubeconfig_of(self, name: str) -> bytes:
        sent = [a for a in self.added if a.name == name]
        assert sent, f"{self.agent_id} was never sent {name}"
        return base64.b64decode(sent[-1].kubeconfig_base64)


class AccountsHub:
    """The hub's accounts half on a real database, with its REST APIs on a real socket:
    `/armory/accounts`, and `/credentials` when `credentials` is set."""

    def __init__(
        self,
        db_url: str,
        kubeconfig: Path,
        settings: DynamicAccountsConfig,
        *,
        key: str | None = None,
        grace: float = 60.0,
        credentials: bool = False,
    ) -> None:
        self.db_url = db_url
        self.kubeconfig = kubeconfig
        self.settings = settings
        self.key = key or generate_key()
        self.grace = grace
        self.with_credentials = credentials
        self.agents: list[ScriptedAgent] = []

    async def start(self) -> AccountsHub:
        self.store = await Store.open(self.db_url)
        self.registry = Registry(Cache(), grace_seconds=self.grace, replica="r", store=self.store)
        await self.registry.start()
        self.dispatcher = AccountDispatcher(self.registry)
        self.accounts = AccountsService(
            self.store,
            self.registry,
            self.dispatcher,
            config=self.settings,
            box=SecretBox(parse_keys(self.key)),
            resolver=KubeconfigResolver(kubeconfig_file=self.kubeconfig),
        )
        await self.accounts.start()
        app = FastAPI()
        app.include_router(accounts_router(self.accounts))
        self.credentials: CredentialsService | None = None
        if self.with_credentials:
            self.credentials = CredentialsService(self.store, self.accounts, config=self.settings)
            await self.credentials.start()
            app.include_router(credentials_router(self.credentials))
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False, lifespan="off"))
        self.server_task = asyncio.get_running_loop().create_task(self.server.serve(sockets=[sock]))
        self.http = aiohttp.ClientSession()
        return self

    async def stop(self) -> None:
        await self.http.close()
        self.server.should_exit = True
        await asyncio.wait([self.server_task])
        if self.credentials is not None:
            await self.credentials.stop()
        await self.accounts.stop()
        await self.registry.stop()
        await self.store.close()

    def agent(self, agent_id: str, zone_id: str = "", **kw: Any) -> ScriptedAgent:
        a = ScriptedAgent(self.registry, self.dispatcher, agent_id, zone_id, **kw).connect()
        self.agents.append(a)
        return a

    async def call(self, method: str, path: str, body: Any = None, **params: Any) -> tuple[int, Any]:
        data = body if isinstance(body, str | bytes) or body is None else json.dumps(body)
        async with self.http.request(
            method, self.url + path, data=data, params=params or None, headers={"Content-Type": "application/json"}
        ) as r:
            return r.status, await r.json()

    async def row(self, name: str) -> AccountRow | None:
        return await self.store.get_account(name)

    async def until(self, name: str, check: Callable[[AccountRow], bool], what: str) -> AccountRow:
        """Wait until the account's row passes `check` (the service says when anything changed)."""
        found: list[AccountRow] = []

        async def ok() -> bool:
            row = await self.store.get_account(name)
            found[:] = [row] if row else []
            return row is not None and check(row)

        try:
            await self.accounts.wait_for(ok, WAIT)
        except TimeoutError:
            raise AssertionError(f"{name}: not {what} within {WAIT}s; last: {found}") from None
        return found[0]

    async def state(self, name: str, state: str) -> AccountRow:
        return await self.until(name, lambda r: r.state == state, state)

    async def snapshot(self) -> tuple[list[Any], list[Any]]:
        """Both tables, to show a refused request changed nothing."""
        accounts = [
            (r.name, r.state, r.zone_id, r.kubeconfig_file, r.properties) for r in await self.store.list_accounts()
        ]
        definitions = [(r.name, r.body, r.migrated_at) for r in await self.store.list_credentials()]
        return accounts, definitions


def secret(core: Any, namespace: str, name: str, data: dict[str, bytes]) -> None:
    """Create or replace a Secret in the hub's cluster (kubesim cluster 0), as an admin would."""
    try:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    except ApiException as e:
        if e.status != 409:
            raise
    body = client.V1Secret(
        metadata=client.V1ObjectMeta(name=name), data={k: base64.b64encode(v).decode() for k, v in data.items()}
    )
    try:
        core.create_namespaced_secret(namespace, body)
    except ApiException as e:
        if e.status != 409:
            raise
        core.replace_namespaced_secret(name, namespace, body)


def seed_curl(method: str) -> str:
    """The seeds' curl command for `method`, verbatim, as docs/accounts.md quotes it."""
    text = (ROOT / "docs" / "accounts.md").read_text()
    blocks = re.findall(r"```sh\n( curl --request (\w+) \\\n.*?)```", text, re.S)
    found = [b for b, m in blocks if m == method]
    assert len(found) == 1, f"docs/accounts.md should quote the seeds' {method} example once"
    return found[0]


async def run_curl(command: str, port: int) -> tuple[int, Any]:
    """Run a curl command as written, sending its host:7002 to our server instead."""
    extra = (
        f" --connect-to clouddriver:7002:127.0.0.1:{port} --connect-to localhost:7002:127.0.0.1:{port}"
        " -sS -w '\\n%{http_code}'"
    )
    proc = await asyncio.create_subprocess_exec(
        "bash", "-c", command.rstrip() + extra, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    body, _, status = out.decode().rpartition("\n")
    return int(status), json.loads(body)
