"""The hub's configuration file applied again while it runs (a mounted ConfigMap, or SIGHUP).

Only settings that are rules rather than structure change at run time; they are listed in
RUNTIME, by the dotted keys of the file. Every other key (ports, TLS, the database, replicas'
discovery, the encryption key...) is read at start only: a change to one is reported as waiting
for a restart, and nothing of it is applied. A file that does not load, or whose new rules would
make the hub refuse to start (an open API beyond loopback, say), is refused as a whole with the
reason, and the running settings stay.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..configwatch import ConfigReloader, changed_keys
from .config import HubConfig, parse_hub_config

if TYPE_CHECKING:
    from .service import Hub

log = logging.getLogger("scaleagent.hub.config")

# Keys (or their prefixes, ending in ".") applied at run time.
RUNTIME = (
    "auth.admins.",
    "auth.defaultPermissions.",
    "auth.decisionCacheSeconds",
    "auth.agents.identities",
    "auth.agents.maxSessionsPerIdentity",
    "server.allowedHosts",
    "server.allowedOrigins",
    "sessions.graceSeconds",
    "operations.operationWaitMs",
    "operations.maxTasks",
    "reload.periodSeconds",
)


def at_runtime(key: str) -> bool:
    """`auth.defaultPermissions` itself is one too: an empty section is a key of its own."""
    return any(key == k.rstrip(".") or (k.endswith(".") and key.startswith(k)) for k in RUNTIME)


def _document(config: HubConfig) -> dict[str, Any]:
    return config.model_dump(by_alias=True)


class HubReloader(ConfigReloader[HubConfig]):
    """Watches the hub's file; `status` is what `/health` and `/metrics` show."""

    process = "hub"
    keeps_going = "the running settings stay"

    def __init__(self, hub: Hub, path: Path, overrides: dict[str, Any]) -> None:
        super().__init__(path, hub.config, log)
        self.hub, self.overrides = hub, overrides

    def parse(self, text: str) -> HubConfig:
        return parse_hub_config(text, self.path).with_overrides(**self.overrides)

    async def apply(self, new: HubConfig) -> None:
        since_start = changed_keys(_document(self.started), _document(new))
        restart = [k for k in since_start if not at_runtime(k)]
        before, after = self.started.auth.agents, new.auth.agents
        identities_held = before.enabled != after.enabled or before.identities_file != after.identities_file
        if identities_held:
            # Turning identities on or off changes how every agent is admitted: only at start.
            restart += [k for k in since_start if k.startswith("auth.agents.") and k not in restart]
        applied = [k for k in changed_keys(_document(self.running), _document(new)) if at_runtime(k)]
        applied = [k for k in applied if k not in restart]
        if applied:
            self._set(new, identities=not identities_held)
            self.status.was_applied()
            log.info("configuration %s applied: %s", self.path, ", ".join(applied))
        self.restart_needed(sorted(restart))

    def _set(self, new: HubConfig, *, identities: bool) -> None:
        hub, a = self.hub, new.auth
        hub.security.access.configure(
            admin_users=a.admins.users,
            admin_groups=a.admins.groups,
            default_permissions=a.default_permissions,
            cache_seconds=a.decision_cache_seconds,
        )
        if identities:
            hub.link.identities.update(a.agents)
        hub.guard.allowed_hosts = new.server.allowed_hosts
        hub.guard.allowed_origins = new.server.allowed_origins
        hub.registry.grace_seconds = new.sessions.grace_seconds
        hub.tasks.operation_wait = new.operations.operation_wait_ms / 1000
        hub.tasks.max_tasks = new.operations.max_tasks
