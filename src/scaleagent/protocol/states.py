"""What an agent says of each account it follows (`Account.state` on the link), shared by both
ends so that neither spells it by hand. The hub keeps two more vocabularies of its own, side by
side in `scaleagent.hub.states`: an account's lifecycle and its presence."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["AgentAccountState"]


class AgentAccountState(StrEnum):
    CONNECTING = "connecting"
    """Reading its credentials and reaching its API server."""
    SYNCING = "syncing"
    """Listing its kinds, or watches not all established again after an outage."""
    WATCHING = "watching"
    """Every kind listed and watched: the hub's picture of the cluster is current."""
    ERROR = "error"
    """Its API server cannot be used (the reason says why); the agent keeps retrying."""
    STOPPED = "stopped"
    """The agent stopped following it (DeleteAccounts, or its file no longer names it)."""
    STANDBY = "standby"
    """Another agent streams the account (through this hub or another replica): this one stopped
    watching it and is asked back (a resync) when that agent goes."""
    REJECTED = "rejected"
    """Set by the hub, never sent by an agent: the hub refused the agent's claim to the account."""
