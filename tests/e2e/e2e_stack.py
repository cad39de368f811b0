"""The pieces of the e2e stack that tests use directly: a cluster and the processes following it."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import yaml

from tests.helpers import AgentProcess, HubProcess, TcpProxy, account_health


@dataclass
class Cluster:
    """A Kubernetes API: its admin and limited kubeconfigs, and, for scripts/real-cluster's, its folder."""

    name: str
    admin: Path
    limited: Path
    real_dir: Path | None = None

    @property
    def is_kubesim(self) -> bool:
        return self.name == "kubesim"

    def kubectl(self, *args: str, identity: str = "admin", check: bool = True) -> subprocess.CompletedProcess:
        kubeconfig = self.admin if identity == "admin" else self.limited
        return subprocess.run(
            ["kubectl", "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True, check=check, timeout=60
        )

    def json(self, *args: str, identity: str = "admin") -> dict:
        return json.loads(self.kubectl(*args, "-o", "json", identity=identity).stdout)

    def apply(self, doc: dict, identity: str = "admin") -> None:
        subprocess.run(
            ["kubectl", "--kubeconfig", str(self.admin if identity == "admin" else self.limited), "apply", "-f", "-"],
            input=json.dumps(doc),
            text=True,
            check=True,
            capture_output=True,
        )


def through(kubeconfig: Path, proxy: TcpProxy, out: Path) -> Path:
    """The same kubeconfig, with the server reached through the proxy (same host, so TLS still verifies)."""
    doc = yaml.safe_load(kubeconfig.read_text())
    for entry in doc["clusters"]:
        url = urlparse(entry["cluster"]["server"])
        entry["cluster"]["server"] = f"{url.scheme}://{url.hostname}:{proxy.port}"
    out.write_text(yaml.safe_dump(doc))
    out.chmod(0o600)
    return out


@dataclass
class Stack:
    cluster: Cluster
    hub: HubProcess
    agent: AgentProcess
    proxy: TcpProxy

    def account(self, name: str) -> dict:
        return account_health(self.agent.health(), name)
