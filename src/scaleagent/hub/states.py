"""An account's state in the hub's two vocabularies, side by side, and every lifecycle transition
in one place.

- `AccountState`, the **lifecycle** (the seeds' eight states): stored in `kubesvc_accounts.state`
  and shown as `state` by `/armory/accounts` and `/credentials`. The accounts service moves
  dynamic accounts through it; the registry moves static ones (those an agent's own file names)
  through the same table, restricted to what agents can cause (`AGENT_TRANSITIONS`).
- `Presence`: whether an agent serves the account on this hub now, the registry's view, shown as
  `state` by `/api/v1/accounts`. It is never stored. An account can be ACTIVE in its lifecycle
  and DISCONNECTED in presence (its agent is gone, within the grace period); ORPHANED in both
  means the same thing: no agent came back within the grace period.

What an agent says of an account (`agentState`: watching, syncing, error...) is the third word,
shared with the agent: `scaleagent.protocol.states.AgentAccountState`.

The seeds name eight states. Four last (INACTIVE, ACTIVE, FAILED, ORPHANED); four are steps of
a migration or a deactivation in progress (TO_MIGRATE, ACTIVATING, TO_DEACTIVATE, DEACTIVATING).
Everything that changes an account's state (a REST request, an agent's answer, the retry loop,
orphan recovery) asks `check_transition()` first, so that the rules live here and nowhere else,
and an illegal request is refused with a reason the API returns as a 409.

    INACTIVE ──PATCH ACTIVE──▶ TO_MIGRATE ──sent──▶ ACTIVATING ──watching──▶ ACTIVE
                                   │                    │                    │ agents gone
                                   └──unresolvable──▶ FAILED ◀──error───────┘ past grace
                                     no agent accepts   │ retry              ▼
                                                        └──▶ TO_MIGRATE     ORPHANED ──watching──▶ ACTIVE
    ACTIVE/FAILED/ORPHANED/... ──PATCH INACTIVE──▶ TO_DEACTIVATE ──sent──▶ DEACTIVATING ──stopped──▶ INACTIVE
    any state but DELETING ──DELETE──▶ DELETING ──agents stopped, row deleted──▶ (gone)
                                          │ the database failed, or the hub restarted
                                          ▼
                                    DELETE_FAILED ──DELETE again──▶ DELETING

DELETING and DELETE_FAILED are the two states Armory's plugin added for deletions (its swagger's
`KubesvcAccount.status`): a deletion that stops half-way leaves the row visible as DELETE_FAILED
instead of an account that looks ACTIVE while no agent follows it. Only a DELETE moves an account
out of DELETE_FAILED.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "ACTIVATION_STATES",
    "AGENT_TRANSITIONS",
    "Presence",
    "DEACTIVATION_STATES",
    "LASTING",
    "TRANSIENT",
    "TRANSITIONS",
    "AccountState",
    "TransitionError",
    "allowed_from",
    "check_transition",
    "is_allowed",
]


class AccountState(StrEnum):
    """An account's state as stored in `kubesvc_accounts.state` (the seeds' names)."""

    INACTIVE = "INACTIVE"
    """Stored, waiting for a migration: no agent is asked to follow it (a new account's state)."""
    ACTIVE = "ACTIVE"
    """An agent watches and manages it."""
    FAILED = "FAILED"
    """Adding it to (or removing it from) an agent failed; `error_message` says why."""
    ORPHANED = "ORPHANED"
    """Every agent serving it went away past the grace period; recovered when one comes back."""
    TO_MIGRATE = "TO_MIGRATE"
    """A migration was asked for; the hub is resolving its kubeconfig and choosing agents."""
    ACTIVATING = "ACTIVATING"
    """Sent to an agent (AddAccounts), which took it; waiting for it to report `watching`."""
    TO_DEACTIVATE = "TO_DEACTIVATE"
    """A deactivation was asked for; not yet sent to the agents."""
    DEACTIVATING = "DEACTIVATING"
    """DeleteAccounts was sent to the agents serving it; waiting for them to stop."""
    DELETING = "DELETING"
    """A DELETE is in progress: its agents are told to stop, then its row is deleted."""
    DELETE_FAILED = "DELETE_FAILED"
    """A DELETE stopped half-way (the database failed, or the hub restarted); DELETE it again."""


S = AccountState


class Presence(StrEnum):
    """Whether an agent serves an account on this hub now (never stored)."""

    ACTIVE = "ACTIVE"
    """An agent connected to this hub serves it."""
    DISCONNECTED = "DISCONNECTED"
    """Every agent serving it went away; still served from the cache during the grace period."""
    ORPHANED = "ORPHANED"
    """No agent came back within the grace period; its objects left the cache."""


LASTING = frozenset({S.INACTIVE, S.ACTIVE, S.FAILED, S.ORPHANED, S.DELETE_FAILED})
"""States an account stays in until something happens to it."""

TRANSIENT = frozenset({S.TO_MIGRATE, S.ACTIVATING, S.TO_DEACTIVATE, S.DEACTIVATING, S.DELETING})
"""States of a request in progress; an account's settings cannot change while in one."""

ACTIVATION_STATES = frozenset({S.TO_MIGRATE, S.ACTIVATING})
DEACTIVATION_STATES = frozenset({S.TO_DEACTIVATE, S.DEACTIVATING})

TRANSITIONS: dict[tuple[AccountState, AccountState], str] = {
    # migration, asked by PATCH state ACTIVE or by the retry loop
    (S.INACTIVE, S.TO_MIGRATE): "migration requested",
    (S.FAILED, S.TO_MIGRATE): "migration requested again (a PATCH, or an automatic retry)",
    (S.ACTIVE, S.TO_MIGRATE): "migration requested again: the agents get the account's current settings",
    (S.ORPHANED, S.TO_MIGRATE): "migration requested while no agent serves it",
    (S.TO_MIGRATE, S.ACTIVATING): "an agent took the account (AddAccounts accepted)",
    (S.TO_MIGRATE, S.FAILED): "the kubeconfig could not be resolved, or no agent took the account",
    (S.ACTIVATING, S.ACTIVE): "an agent reports it watching",
    (S.ACTIVATING, S.FAILED): "the agents that took it report an error, or went away",
    # what agents report at any time
    (S.ACTIVE, S.ORPHANED): "every agent serving it went away past the grace period",
    (S.ORPHANED, S.ACTIVE): "an agent serves it again",
    (S.FAILED, S.ACTIVE): "an agent reports it watching after all",
    # deactivation, asked by PATCH state INACTIVE
    (S.ACTIVE, S.TO_DEACTIVATE): "deactivation requested",
    (S.FAILED, S.TO_DEACTIVATE): "deactivation requested",
    (S.ORPHANED, S.TO_DEACTIVATE): "deactivation requested",
    (S.TO_MIGRATE, S.TO_DEACTIVATE): "deactivation requested during a migration",
    (S.ACTIVATING, S.TO_DEACTIVATE): "deactivation requested during a migration",
    (S.TO_DEACTIVATE, S.DEACTIVATING): "DeleteAccounts sent to the agents serving it",
    (S.TO_DEACTIVATE, S.INACTIVE): "no agent serves it: nothing to stop",
    (S.TO_DEACTIVATE, S.FAILED): "the deactivation could not be carried out (the hub restarted first)",
    (S.DEACTIVATING, S.INACTIVE): "the agents stopped following it",
    (S.DEACTIVATING, S.FAILED): "an agent did not stop following it",
    # deletion, asked by DELETE: from any state but DELETING itself
    **{(state, S.DELETING): "deletion requested" for state in S if state != S.DELETING},
    (S.DELETING, S.DELETE_FAILED): "the deletion stopped half-way (the database failed, or the hub restarted)",
}
"""Every allowed (from, to) pair, with what causes it. Nothing else is allowed."""

AGENT_TRANSITIONS: dict[tuple[AccountState, AccountState], str] = {
    (S.INACTIVE, S.ACTIVE): "an agent's own file names it again",
    (S.ACTIVE, S.ORPHANED): TRANSITIONS[(S.ACTIVE, S.ORPHANED)],
    (S.ORPHANED, S.ACTIVE): TRANSITIONS[(S.ORPHANED, S.ACTIVE)],
    (S.ACTIVE, S.INACTIVE): "its agent stopped following it (its file no longer names it)",
    (S.ORPHANED, S.INACTIVE): "its agent stopped following it (its file no longer names it)",
}
"""The moves of a static account (one an agent's own file names, not the REST API): only what
agents cause. No request ever moves it, so none of the transient states is reached."""

_WHY_NOT: dict[tuple[AccountState, AccountState], str] = {
    (S.TO_MIGRATE, S.TO_MIGRATE): "a migration is already in progress; wait until it is ACTIVE or FAILED",
    (S.ACTIVATING, S.TO_MIGRATE): "a migration is already in progress; wait until it is ACTIVE or FAILED",
    (S.TO_DEACTIVATE, S.TO_MIGRATE): "a deactivation is in progress; migrate it once it is INACTIVE",
    (S.DEACTIVATING, S.TO_MIGRATE): "a deactivation is in progress; migrate it once it is INACTIVE",
    (S.INACTIVE, S.ACTIVE): "an account becomes ACTIVE through a migration (PATCH state ACTIVE), not directly",
    (S.DELETING, S.DELETING): "a deletion is already in progress",
    **{
        (S.DELETE_FAILED, state): "a deletion of it failed half-way: DELETE it again (nothing else moves it)"
        for state in S
        if state != S.DELETING
    },
    **{
        (S.DELETING, state): "a deletion is in progress; once it ends the account is gone"
        for state in S
        if state not in (S.DELETING, S.DELETE_FAILED)
    },
}


class TransitionError(Exception):
    """A state change the lifecycle does not allow. `reason` is said to the user (a 409)."""

    def __init__(self, name: str, from_state: str, to_state: str, reason: str) -> None:
        super().__init__(f"account {name!r} cannot go from {from_state} to {to_state}: {reason}")
        self.name = name
        self.from_state = from_state
        self.to_state = to_state
        self.reason = reason


def is_allowed(from_state: str, to_state: str) -> bool:
    """Whether `from_state` -> `to_state` is a transition of the lifecycle."""
    try:
        return (S(from_state), S(to_state)) in TRANSITIONS
    except ValueError:
        return False


def allowed_from(from_state: str) -> list[AccountState]:
    """The states an account in `from_state` may move to, in declaration order."""
    return [to for (fr, to) in TRANSITIONS if fr == from_state]


def check_transition(name: str, from_state: str, to_state: str) -> None:
    """Raise TransitionError, with a reason a user can act on, unless the move is allowed."""
    try:
        pair = (S(from_state), S(to_state))
    except ValueError:
        bad = from_state if from_state not in S.__members__ else to_state
        raise TransitionError(name, from_state, to_state, f"{bad!r} is not an account state ({', '.join(S)})") from None
    if pair in TRANSITIONS:
        return
    reason = _WHY_NOT.get(pair)
    if reason is None:
        # A DELETE is allowed from every state but DELETING: not worth naming in every refusal.
        targets = [to for to in allowed_from(pair[0]) if to != S.DELETING]
        reason = (
            f"from {pair[0]} an account can only go to {', '.join(targets)}" if targets else f"{pair[0]} has no way out"
        )
    raise TransitionError(name, from_state, to_state, reason)
