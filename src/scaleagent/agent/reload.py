"""The agent's configuration file applied again while it runs (the seeds' service mode: accounts in
a ConfigMap, "reflected within seconds").

What changes at run time is `kubernetes.accounts`: an account the file adds starts, one it no
longer names stops (and the hub lets it go: INACTIVE), one whose settings changed starts over with
them (a fresh connection and snapshot); the others are not touched. An account the hub added
(dynamic) under a name the file now names is taken over by the file. Every other setting (the hub
address, ports, budgets, the agent id) is read at start only: a change to it is reported, by key,
as waiting for a restart.

A file that does not load (bad YAML, a failed check) is refused as a whole, with the reason, and
the running accounts keep going; so is one that would name an account twice.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from ..configwatch import ConfigReloader, changed_keys
from .accounts import AccountManager
from .config import AgentConfig, parse_config
from .sinks import Sink

log = logging.getLogger("scaleagent.agent.config")


def _settings(config: AgentConfig) -> dict[str, Any]:
    """What is read at start only, as documents (accounts left out)."""
    doc = config.model_dump(by_alias=True)
    doc["kubernetes"].pop("accounts", None)
    doc.pop("reload", None)  # the period applies at once (below)
    return doc


class AgentReloader(ConfigReloader[AgentConfig]):
    """Watches the configuration file and applies its accounts; `/health` shows how it went."""

    process = "agent"
    keeps_going = "the running accounts keep going"

    def __init__(
        self, path: Path, started: AgentConfig, accounts: AccountManager, sink: Sink, environ: dict[str, str] | None
    ) -> None:
        super().__init__(path, started, log)
        self.accounts, self.sink, self.environ = accounts, sink, environ

    def parse(self, text: str) -> AgentConfig:
        return parse_config(
            text, source=str(self.path), base_dir=Path(os.path.abspath(self.path)).parent, environ=self.environ
        )

    async def apply(self, new: AgentConfig) -> None:
        old = {a.name: a for a in self.running.kubernetes.accounts}
        wanted = {a.name: a for a in new.kubernetes.accounts}
        removed = [n for n in old if n not in wanted]
        added = [n for n in wanted if n not in old]
        changed = [n for n in wanted if n in old and wanted[n] != old[n]]
        for name in removed:
            await self.accounts.remove(name)
            self.sink.removed(name)
        for name in changed + added:
            current = self.accounts.runners.get(name)
            if current is not None:
                if name in added:
                    log.info("account %s: added by the hub until now; the configuration file takes it over", name)
                await self.accounts.remove(name)
            runner = self.accounts.add(wanted[name])
            self.sink.describe(runner.description())  # `connecting`: the hub hears of it at once
        self.restart_needed(changed_keys(_settings(self.started), _settings(new)))
        if removed or added or changed:
            self.status.was_applied()
            steps = (("added", added), ("removed", removed), ("restarted with new settings", changed))
            log.info(
                "configuration %s applied: %s",
                self.path,
                "; ".join(f"{what} {', '.join(names)}" for what, names in steps if names),
            )
