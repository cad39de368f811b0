"""glibc's allocator settings of the agent and the hub (scaleagent.allocator)."""

from __future__ import annotations

import logging
import platform

import pytest

from scaleagent.allocator import release_free_memory, set_in_environment, tune_allocator, tune_unless_set

glibc_only = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt and malloc_trim are glibc's")

# glibc's own values, restored after a test changed them (its thresholds then stay fixed: what a
# test process loses is only their adjusting to large frees).
DEFAULT_THRESHOLD = 128 * 1024


@pytest.fixture
def restore_allocator():
    from scaleagent.agent.memory import ALLOCATOR

    yield
    tune_allocator(mmap_threshold=DEFAULT_THRESHOLD, trim_threshold=DEFAULT_THRESHOLD)
    ALLOCATOR.wide = None  # not enabled: the agent's accounts in later tests leave it be


@glibc_only
def test_the_agent_and_the_hub_can_set_their_thresholds_and_memory_can_be_handed_back(restore_allocator, monkeypatch):
    from scaleagent.agent.memory import tune_agent_allocator
    from scaleagent.hub.command import MMAP_THRESHOLD, TRIM_THRESHOLD

    for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "GLIBC_TUNABLES"):
        monkeypatch.delenv(name, raising=False)
    assert tune_agent_allocator() is True
    assert tune_unless_set("hub", mmap_threshold=MMAP_THRESHOLD, trim_threshold=TRIM_THRESHOLD) is True
    assert release_free_memory() is True


def test_an_operators_settings_in_the_environment_are_recognised():
    assert set_in_environment({}) == []
    assert set_in_environment({"MALLOC_TRIM_THRESHOLD_": "1000000", "PATH": "/bin"}) == ["MALLOC_TRIM_THRESHOLD_"]
    assert set_in_environment({"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=65536"}) == ["GLIBC_TUNABLES"]
    # Tunables of other parts of glibc are not the allocator's thresholds.
    assert set_in_environment({"GLIBC_TUNABLES": "glibc.pthread.rseq=0"}) == []


def test_an_operators_settings_are_left_as_they_are_and_the_log_says_so(monkeypatch, caplog):
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "1048576")
    with caplog.at_level(logging.INFO, logger="scaleagent.allocator"):
        assert tune_unless_set("hub", mmap_threshold=4 << 20, trim_threshold=64 << 20) is False
    assert "hub: glibc's allocator is left as MALLOC_TRIM_THRESHOLD_ set it" in caplog.text


def test_the_agent_maps_large_blocks_afresh_only_once_it_holds_many_connections(monkeypatch, caplog):
    from scaleagent.agent import memory

    settings: list[int] = []  # glibc's mmap threshold as set, in order
    monkeypatch.setattr(
        memory, "tune_allocator", lambda mmap_threshold, trim_threshold: settings.append(mmap_threshold)
    )
    allocator = memory.AllocatorSetting()
    allocator.follow(1000)
    assert settings == []  # not the agent's process (or the environment chose): left alone
    allocator.enable(wide=True)
    allocator.follow(memory.WIDE_UP_TO)
    assert settings == []  # unchanged: glibc is not asked again
    with caplog.at_level(logging.INFO, logger="scaleagent.agent.memory"):
        allocator.follow(memory.WIDE_UP_TO + 1)
    assert settings == [memory.MMAP_THRESHOLD]
    assert f"{memory.WIDE_UP_TO + 1} TLS connections to API servers" in caplog.text
    allocator.follow(memory.WIDE_UP_TO)  # a watch less: not back and forth around the limit
    assert settings == [memory.MMAP_THRESHOLD]
    allocator.follow(memory.WIDE_AGAIN_AT)
    assert settings == [memory.MMAP_THRESHOLD, memory.WIDE_MMAP_THRESHOLD]
