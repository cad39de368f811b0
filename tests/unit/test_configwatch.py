"""Noticing a configuration file's changes as the kubelet makes them (configwatch.py), and telling
which changed keys the hub applies at run time."""

from __future__ import annotations

import asyncio
import logging
import os

from scaleagent.configwatch import FileWatch, changed_keys
from scaleagent.hub.reload import at_runtime
from tests.helpers import ConfigMapVolume


class Seen:
    def __init__(self) -> None:
        self.texts: list[str] = []
        self.new = asyncio.Event()

    async def __call__(self, text: str) -> None:
        self.texts.append(text)
        self.new.set()

    async def next(self) -> str:
        await asyncio.wait_for(self.new.wait(), 10)
        self.new.clear()
        return self.texts[-1]


async def test_a_symlink_swap_is_seen_and_the_same_bytes_are_not_handed_over_twice(tmp_path):
    volume = ConfigMapVolume(tmp_path / "cm", {"agent.yaml": "a: 1\n"})
    seen = Seen()
    watch = FileWatch(volume.path("agent.yaml"), seen, period=0.02)
    watch.start()
    try:
        assert await seen.next() == "a: 1\n"  # read once at start: the caller finds nothing new
        volume.update({"agent.yaml": "a: 2\n"})
        assert await seen.next() == "a: 2\n"
        volume.update({"agent.yaml": "a: 2\n"})  # a new inode, the same bytes
        watch.poke()
        volume.update({"agent.yaml": "a: 3\n"})
        assert await seen.next() == "a: 3\n"
        assert seen.texts == ["a: 1\n", "a: 2\n", "a: 3\n"]
    finally:
        await watch.stop()


async def test_without_polling_only_a_poke_reads_the_file(tmp_path):
    path = tmp_path / "hub.yaml"
    path.write_text("x: 1\n")
    seen = Seen()
    watch = FileWatch(path, seen, period=0)
    watch.start()
    try:
        await seen.next()
        path.write_text("x: 22\n")
        watch.poke()
        assert await seen.next() == "x: 22\n"
    finally:
        await watch.stop()


async def test_a_file_that_disappears_is_reported_once_and_its_return_is_seen(tmp_path, caplog):
    path = tmp_path / "agent.yaml"
    path.write_text("a: 1\n")
    seen = Seen()
    watch = FileWatch(path, seen, period=0.02)
    watch.start()
    try:
        await seen.next()
        with caplog.at_level(logging.ERROR, "scaleagent.config"):
            os.remove(path)
            for _ in range(3):
                watch.poke()
                await watch.check()
            path.write_text("a: 5\n")
            assert await seen.next() == "a: 5\n"
        assert [r.getMessage() for r in caplog.records].count(
            f"configuration {path}: cannot read it (No such file or directory); the running configuration stays"
        ) == 1
    finally:
        await watch.stop()


def test_changed_keys_name_settings_by_their_dotted_keys_never_their_values():
    old = {"auth": {"admins": {"users": ["a"]}, "token": "s3cret"}, "server": {"grpcPort": 1}}
    new = {"auth": {"admins": {"users": ["a", "b"]}, "token": "other"}, "server": {"grpcPort": 1}, "reload": {}}
    assert changed_keys(old, new) == ["auth.admins.users", "auth.token", "reload"]


def test_the_hub_applies_rules_at_run_time_and_structure_at_start():
    assert at_runtime("auth.admins.groups") and at_runtime("auth.defaultPermissions.READ")
    assert at_runtime("auth.defaultPermissions")  # from none ({}) to some: the section's own key
    assert at_runtime("server.allowedHosts") and at_runtime("sessions.graceSeconds")
    assert not at_runtime("server.grpcPort") and not at_runtime("database.url")
    assert not at_runtime("auth.agents.identitiesFile") and not at_runtime("dynamicAccounts.encryptionKey")
