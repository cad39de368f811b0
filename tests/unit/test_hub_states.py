"""The dynamic accounts' lifecycle: the table of transitions is the only authority."""

from __future__ import annotations

import pytest

from scaleagent.hub.states import (
    LASTING,
    TRANSIENT,
    TRANSITIONS,
    AccountState,
    TransitionError,
    allowed_from,
    check_transition,
    is_allowed,
)
from scaleagent.hub.store import STATES

S = AccountState


def test_the_states_are_the_seeds_and_the_stores():
    assert [s.value for s in S] == list(STATES)
    assert LASTING == {S.INACTIVE, S.ACTIVE, S.FAILED, S.ORPHANED, S.DELETE_FAILED}
    assert TRANSIENT == {S.TO_MIGRATE, S.ACTIVATING, S.TO_DEACTIVATE, S.DEACTIVATING, S.DELETING}


@pytest.mark.parametrize(
    ("path"),
    [
        # a migration that succeeds, as the seeds' PATCH drives it
        [S.INACTIVE, S.TO_MIGRATE, S.ACTIVATING, S.ACTIVE],
        # fails, is retried, succeeds
        [
            S.INACTIVE,
            S.TO_MIGRATE,
            S.FAILED,
            S.TO_MIGRATE,
            S.ACTIVATING,
            S.FAILED,
            S.TO_MIGRATE,
            S.ACTIVATING,
            S.ACTIVE,
        ],
        # orphaned and recovered with no manual step
        [S.ACTIVE, S.ORPHANED, S.ACTIVE],
        # deactivated, with agents to tell and without
        [S.ACTIVE, S.TO_DEACTIVATE, S.DEACTIVATING, S.INACTIVE],
        [S.FAILED, S.TO_DEACTIVATE, S.INACTIVE],
        # a deactivation an agent refuses is FAILED (and retried)
        [S.ACTIVE, S.TO_DEACTIVATE, S.DEACTIVATING, S.FAILED, S.TO_DEACTIVATE, S.DEACTIVATING, S.INACTIVE],
        # a deletion from any state, failing half-way and asked again (Armory's DELETING, DELETE_FAILED)
        [S.ACTIVE, S.DELETING],
        [S.ACTIVATING, S.DELETING, S.DELETE_FAILED, S.DELETING],
    ],
)
def test_the_lifecycles_of_the_seeds_are_allowed(path):
    for before, after in zip(path, path[1:]):
        check_transition("acc", before, after)


@pytest.mark.parametrize(
    ("before", "after", "reason"),
    [
        (S.ACTIVATING, S.TO_MIGRATE, "a migration is already in progress; wait until it is ACTIVE or FAILED"),
        (S.DEACTIVATING, S.TO_MIGRATE, "a deactivation is in progress; migrate it once it is INACTIVE"),
        (S.INACTIVE, S.ACTIVE, "an account becomes ACTIVE through a migration (PATCH state ACTIVE), not directly"),
        (S.INACTIVE, S.ORPHANED, "from INACTIVE an account can only go to TO_MIGRATE"),
        (S.ACTIVE, S.INACTIVE, "from ACTIVE an account can only go to TO_MIGRATE, ORPHANED, TO_DEACTIVATE"),
        (S.DELETING, S.DELETING, "a deletion is already in progress"),
        (S.DELETING, S.ACTIVE, "a deletion is in progress; once it ends the account is gone"),
        (S.DELETE_FAILED, S.TO_MIGRATE, "a deletion of it failed half-way: DELETE it again (nothing else moves it)"),
    ],
)
def test_an_illegal_transition_says_why(before, after, reason):
    with pytest.raises(TransitionError) as caught:
        check_transition("prod-eu", before, after)
    e = caught.value
    assert (e.name, e.from_state, e.to_state, e.reason) == ("prod-eu", before, after, reason)
    assert str(e) == f"account 'prod-eu' cannot go from {before} to {after}: {reason}"


def test_unknown_states_are_named():
    with pytest.raises(TransitionError, match=r"'RUNNING' is not an account state"):
        check_transition("a", "RUNNING", "ACTIVE")
    assert not is_allowed("ACTIVE", "RUNNING")


def test_every_state_is_reachable_and_none_is_a_dead_end():
    reachable = {S.INACTIVE}
    for _ in S:
        reachable |= {to for (fr, to) in TRANSITIONS if fr in reachable}
    assert reachable == set(S)
    assert all(allowed_from(s) for s in S)


def test_transient_states_always_lead_on():
    """A request in progress ends in a lasting state (or another step), whatever happens."""
    for state in TRANSIENT:
        assert any(to in LASTING for to in allowed_from(state)), state


def test_a_static_account_moves_only_as_agents_can_make_it():
    from scaleagent.hub.states import AGENT_TRANSITIONS, TRANSITIONS, AccountState

    s = AccountState
    # what agents cause is the lifecycle's own wording wherever the two meet
    for pair in set(AGENT_TRANSITIONS) & set(TRANSITIONS):
        assert AGENT_TRANSITIONS[pair] == TRANSITIONS[pair]
    # no request moves a static account: none of the transient states is reachable
    reached = {to for _, to in AGENT_TRANSITIONS} | {fr for fr, _ in AGENT_TRANSITIONS}
    assert reached == {s.INACTIVE, s.ACTIVE, s.ORPHANED}
