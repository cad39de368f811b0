"""`scale-agent demo`: three simulated clusters, a hub and an agent, started as a user would start them.

Each piece is its own process with its own log file, so what the demo shows is exactly what the
separate commands do. The hub listens with TLS (a throwaway CA made for the demo), on loopback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import secrets
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

CLUSTERS = 3


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="run kubesim (3 clusters), a hub and an agent together",
        description="Start three simulated clusters with churn, a hub (SQLite, TLS) and an agent "
        "following all three; print where to look. Ctrl-C stops everything.",
    )
    p.add_argument(
        "--dir",
        type=Path,
        default=Path(".scale-agent-demo"),
        metavar="DIR",
        help="where kubeconfigs, certificates, the database and logs go (default .scale-agent-demo)",
    )
    p.add_argument("--grpc-port", type=int, default=9091, metavar="PORT", help="hub gRPC port (default 9091)")
    p.add_argument("--http-port", type=int, default=7002, metavar="PORT", help="hub HTTP port (default 7002)")
    p.add_argument(
        "--churn", type=float, default=5.0, metavar="RATE", help="object changes per second per cluster (default 5)"
    )
    p.set_defaults(func=run)


@dataclass
class Child:
    name: str
    proc: asyncio.subprocess.Process
    log: Path
    lines: list[str] = field(default_factory=list)
    pump: asyncio.Task[None] | None = None


def run(args: argparse.Namespace) -> int:
    return asyncio.run(Demo(args).run())


class Demo:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.dir: Path = args.dir.resolve()
        self.children: list[Child] = []
        self.stop = asyncio.Event()

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.stop.set)
        (self.dir / "logs").mkdir(parents=True, exist_ok=True)
        try:
            urls = await self._start()
        except DemoFailed as e:
            print(f"scale-agent demo: {e}", file=sys.stderr)
            await self._shutdown()
            return 1
        if urls is None:  # interrupted while starting
            await self._shutdown()
            return 0
        self._print_welcome(*urls)
        ended = [asyncio.create_task(c.proc.wait()) for c in self.children]
        stopping = asyncio.create_task(self.stop.wait())
        done, _ = await asyncio.wait([stopping, *ended], return_when=asyncio.FIRST_COMPLETED)
        code = 0
        if stopping not in done:
            dead = next(c for c, t in zip(self.children, ended) if t in done)
            print(f"scale-agent demo: {dead.name} exited ({dead.proc.returncode}); see {dead.log}", file=sys.stderr)
            code = 1
        stopping.cancel()
        print("\nstopping: agent, hub, kubesim...", file=sys.stderr)
        await self._shutdown()
        return code

    async def _start(self) -> tuple[str, str, str] | None:
        kube_dir = self.dir / "kubesim"
        kubesim = await self._spawn(
            "kubesim",
            [
                "kubesim",
                "--clusters",
                str(CLUSTERS),
                "--churn",
                str(self.args.churn),
                "--kubeconfig-dir",
                str(kube_dir),
            ],
        )
        if await self._ready(kubesim, r"kubesim: ready") is None:
            return None
        hub_config = self._write_hub_config()
        hub = await self._spawn(
            "hub",
            [
                "hub",
                "--config",
                str(hub_config),
                "--grpc-port",
                str(self.args.grpc_port),
                "--http-port",
                str(self.args.http_port),
            ],
        )
        line = await self._ready(hub, r"gRPC on \S+, HTTP on http://\S+")
        if line is None:
            return None
        m = re.search(r"gRPC on (\S+), HTTP on (http://\S+)", line)
        assert m is not None
        grpc_target, http_url = m.group(1), m.group(2)
        agent_config = self._write_agent_config(kube_dir, grpc_target.rsplit(":", 1)[1])
        agent = await self._spawn("agent", ["agent", "--config", str(agent_config)])
        line = await self._ready(agent, r"health on (http://\S+)/health")
        if line is None:
            return None
        health = re.search(r"health on (http://\S+)/health", line).group(1)  # type: ignore[union-attr]
        return http_url, grpc_target, health

    def _write_hub_config(self) -> Path:
        import trustme

        # Here, not at the top: every `scale-agent` command imports this module to build its
        # parser, and the hub's auth module costs half a second of an agent's start.
        from .hub.auth.callers import hash_token

        pki = self.dir / "pki"
        pki.mkdir(exist_ok=True)
        if not (pki / "hub.pem").exists():
            ca = trustme.CA()
            cert = ca.issue_cert("localhost", "127.0.0.1")
            ca.cert_pem.write_to_path(str(pki / "ca.pem"))
            cert.cert_chain_pems[0].write_to_path(str(pki / "hub.pem"))
            cert.private_key_pem.write_to_path(str(pki / "hub-key.pem"))
            (pki / "hub-key.pem").chmod(0o600)
        admin_token, agent_token = self._token("admin.token"), self._token("agent.token")
        tokens = self.dir / "tokens.yml"
        tokens.write_text(
            yaml.safe_dump([{"name": "demo-admin", "groups": ["admins"], "tokenHash": hash_token(admin_token)}])
        )
        doc = {
            "tls": {"certFile": str(pki / "hub.pem"), "keyFile": str(pki / "hub-key.pem")},
            "database": {"url": f"sqlite:///{self.dir / 'hub.db'}"},
            "sessions": {"graceSeconds": 30},
            # Logins on, as in production: an admin token for the API, the agent's own identity.
            "auth": {
                "staticTokensFile": str(tokens),
                "admins": {"groups": ["admins"]},
                "agents": {
                    "identities": [{"name": "demo-agent", "tokenHash": hash_token(agent_token), "zones": ["*"]}]
                },
            },
        }
        return _private(self.dir / "hub.yml", yaml.safe_dump(doc, sort_keys=False))

    def _write_agent_config(self, kube_dir: Path, grpc_port: str) -> Path:
        accounts = [
            {"name": f"cluster-{i}", "kubeConfigFile": str(kube_dir / f"kubesim-{i}.yaml")} for i in range(CLUSTERS)
        ]
        doc = {
            "kubernetes": {"accounts": accounts},
            "server": {"port": 0},
            "clouddriver": {
                "grpc": f"localhost:{grpc_port}",
                "tls": {"cacertFile": str(self.dir / "pki" / "ca.pem")},
                "auth": {"token": self._token("agent.token")},
            },
        }
        return _private(self.dir / "agent.yml", yaml.safe_dump(doc, sort_keys=False))

    def _token(self, name: str) -> str:
        """A random token kept in the demo's directory (readable by its owner only)."""
        path = self.dir / name
        if not path.exists():
            path.touch(mode=0o600)
            path.write_text(secrets.token_urlsafe(32))
        return path.read_text().strip()

    async def _spawn(self, name: str, args: list[str]) -> Child:
        log = self.dir / "logs" / f"{name}.log"
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "scaleagent.cli",
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )  # Ctrl-C reaches the demo only: it stops them in order
        child = Child(name, proc, log)
        self.children.append(child)
        print(f"started {name} (pid {proc.pid}), log: {log}", file=sys.stderr)
        return child

    async def _ready(self, child: Child, pattern: str) -> str | None:
        """The child's first output line matching pattern; None if the demo was interrupted first."""
        found: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        child.pump = asyncio.create_task(_pump(child, pattern, found))
        stopping = asyncio.create_task(self.stop.wait())
        waits: list[asyncio.Future[Any]] = [found, stopping]
        done, _ = await asyncio.wait(waits, timeout=120, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if found in done:
            return found.result()
        if stopping in done:
            return None
        raise DemoFailed(f"{child.name} did not start within 120s; see {child.log}")

    async def _shutdown(self) -> None:
        for child in reversed(self.children):
            if child.proc.returncode is None:
                child.proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(child.proc.wait(), 20)
                except TimeoutError:
                    child.proc.kill()
                    await child.proc.wait()
            if child.pump is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await child.pump

    def _write_example(self) -> Path:
        """A manifest to deploy through the hub, so the welcome's apply line works as printed."""
        path = self.dir / "hello.yaml"
        path.write_text(HELLO_MANIFEST)
        return path

    def _print_welcome(self, http: str, grpc_target: str, health: str) -> None:
        example = self._write_example()
        cli = f"{Path(sys.executable).parent / 'scale-agent'}"
        print(
            f"""
Scale Agent demo is running: 3 simulated clusters -> 1 agent -> 1 hub.

  hub HTTP API      {http}        (OpenAPI docs: {http}/docs)
  dashboard         {http}/       (in a browser; paste the admin token below)
  hub gRPC (TLS)    {grpc_target}
  agent health      {health}/health
  kubeconfigs       {self.dir / "kubesim"}/kubesim-{{0,1,2}}.yaml
  logs              {self.dir / "logs"}/

The API asks for a login (docs/security.md); the demo made an admin token:
  export SCALE_AGENT_TOKEN=$(cat {self.dir / "admin.token"})

Try:
  curl -s {http}/api/v1/accounts                        # 401: who are you?
  curl -s -H "Authorization: Bearer $SCALE_AGENT_TOKEN" {http}/api/v1/accounts
  curl -s -H "Authorization: Bearer $SCALE_AGENT_TOKEN" {http}/armory/agents
  curl -s -H "Authorization: Bearer $SCALE_AGENT_TOKEN" '{http}/api/v1/accounts/cluster-0/objects?kind=Deployment'
  curl -sN -H "Authorization: Bearer $SCALE_AGENT_TOKEN" '{http}/api/v1/watch?kind=Deployment'  # Ctrl-C stops
  kubectl --kubeconfig {self.dir / "kubesim"}/kubesim-0.yaml get deployments -A

Deploy through the hub (the CLI reads SCALE_AGENT_TOKEN; the task completes once the hub's cache shows it):
  {cli} apply -f {example} --account cluster-1 --hub {http}
  {cli} get deployments --all-accounts -l app=hello --hub {http}
  {cli} delete -f {example} --account cluster-1 --hub {http}

Ctrl-C stops everything.
""",
            flush=True,
        )


HELLO_MANIFEST = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: hello
  labels: {app: hello}
data:
  greeting: hello from Scale Agent
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: hello
  labels: {app: hello}
spec:
  replicas: 2
  selector:
    matchLabels: {app: hello}
  template:
    metadata:
      labels: {app: hello}
    spec:
      containers:
        - name: hello
          image: nginx:1.27
"""


def _private(path: Path, text: str) -> Path:
    """A file only its owner may read (the demo's configurations hold tokens)."""
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(text)
    return path


class DemoFailed(Exception):
    pass


async def _pump(child: Child, pattern: str, found: asyncio.Future[str]) -> None:
    """Copy the child's output to its log file, and resolve `found` at the first matching line."""
    assert child.proc.stdout is not None
    with child.log.open("ab") as out:
        async for raw in child.proc.stdout:
            out.write(raw)
            out.flush()
            if not found.done():
                line = raw.decode(errors="replace")
                if re.search(pattern, line):
                    found.set_result(line)
    if not found.done():
        found.set_exception(
            DemoFailed(f"{child.name} exited ({await child.proc.wait()}) before it was ready; see {child.log}")
        )
