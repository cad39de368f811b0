"""Kubeconfigs encrypted at rest: keys from the configuration, or a key file beside SQLite."""

from __future__ import annotations

import asyncio
import logging
import os
import stat
from pathlib import Path

import pytest

from scaleagent.hub.accounts.errors import DecryptionError, EncryptionKeyError
from scaleagent.hub.accounts.secrets_box import SecretBox, generate_key, key_file_for, parse_keys
from scaleagent.hub.config import ConfigError, load_hub_config

KUBECONFIG = b"apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user: {token: s3cr3t-t0ken}\n"


async def test_round_trip_and_no_plaintext():
    box = SecretBox(parse_keys(generate_key()))
    await box.ready()
    token = box.encrypt(KUBECONFIG)
    assert b"s3cr3t" not in token and KUBECONFIG not in token
    assert box.decrypt(token) == KUBECONFIG
    assert box.encrypt(KUBECONFIG) != token  # a fresh IV each time


async def test_rotation_first_key_encrypts_all_decrypt():
    old, new = generate_key(), generate_key()
    stored = SecretBox(parse_keys(old)).encrypt(KUBECONFIG)
    rotated = SecretBox(parse_keys(f"{new}, {old}"))
    assert rotated.decrypt(stored) == KUBECONFIG
    assert SecretBox(parse_keys(new)).decrypt(rotated.encrypt(KUBECONFIG)) == KUBECONFIG


async def test_wrong_key_is_reported_without_the_key_or_content():
    key = generate_key()
    stored = SecretBox(parse_keys(generate_key())).encrypt(KUBECONFIG)
    with pytest.raises(DecryptionError) as caught:
        SecretBox(parse_keys(key), source="dynamicAccounts.encryptionKey").decrypt(stored)
    message = str(caught.value)
    assert "encrypted with another key" in message and "dynamicAccounts.encryptionKey" in message
    assert key not in message and "s3cr3t" not in message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "the encryption key is empty"),
        ("not-a-key", "the encryption key is not a Fernet key: it must be 32 random bytes in URL-safe base64"),
        ("{k},", "key 2 of 2 is empty (a stray comma?)"),
        ("{k},short", "key 2 of 2 is not a Fernet key"),
    ],
)
def test_malformed_keys_are_named_not_shown(text, message):
    with pytest.raises(EncryptionKeyError) as caught:
        parse_keys(text.format(k=generate_key()))
    assert str(caught.value).startswith(message)
    assert "short" not in str(caught.value) and "not-a-key" not in str(caught.value)


def test_the_key_comes_from_the_config_or_its_environment_variable_and_is_checked(tmp_path):
    key = generate_key()
    config = load_hub_config(None, environ={"SCALE_AGENT_HUB_DYNAMIC_ACCOUNTS__ENCRYPTION_KEY": key})
    assert config.dynamic_accounts.encryption_key.get_secret_value() == key
    assert key not in repr(config)
    with pytest.raises(ConfigError) as caught:
        load_hub_config(None, environ={"SCALE_AGENT_HUB_DYNAMIC_ACCOUNTS__ENCRYPTION_KEY": "hunter2"})
    assert str(caught.value).startswith(
        "environment variable SCALE_AGENT_HUB_DYNAMIC_ACCOUNTS__ENCRYPTION_KEY: "
        "dynamicAccounts.encryptionKey: the encryption key is not a Fernet key"
    )
    assert "hunter2" not in str(caught.value)
    box = SecretBox.for_hub(key, f"sqlite:///{tmp_path / 'hub.db'}")
    assert box.source == "dynamicAccounts.encryptionKey" and not list(tmp_path.iterdir())


async def test_without_a_key_sqlite_gets_a_0600_key_file_beside_it_and_the_log_says_where_not_what(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    url = f"sqlite:///{tmp_path / 'data' / 'hub.db'}"
    path = key_file_for(url)
    assert path == tmp_path / "data" / "hub.db.key"
    box = SecretBox.for_hub("", url)
    assert not path.exists()  # nothing is made until a kubeconfig needs it
    await box.ready()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    key = path.read_text().strip()
    assert parse_keys(key)
    assert str(path) in caplog.text and key not in caplog.text
    token = box.encrypt(KUBECONFIG)
    again = SecretBox.for_hub("", url)  # the next start reads the same key
    await again.ready()
    assert again.decrypt(token) == KUBECONFIG


async def test_two_hubs_making_the_key_at_once_end_with_one(tmp_path):
    """Each box looks for the file in its own thread, at the same time; all end with one key."""
    url = f"sqlite:///{tmp_path / 'hub.db'}"
    boxes = [SecretBox.for_hub("", url) for _ in range(4)]
    await asyncio.gather(*(b.ready() for b in boxes))
    token = boxes[0].encrypt(KUBECONFIG)
    assert all(b.decrypt(token) == KUBECONFIG for b in boxes)
    assert [p.name for p in tmp_path.iterdir()] == ["hub.db.key"]


async def test_a_shared_database_needs_a_configured_key():
    box = SecretBox.for_hub("", "postgresql://hub:pw@db/hub", "postgresql://hub:***@db/hub")
    with pytest.raises(EncryptionKeyError) as caught:
        await box.ready()
    message = str(caught.value)
    assert "set dynamicAccounts.encryptionKey" in message and "every hub replica must use the same key" in message
    assert "pw@" not in message


async def test_a_readable_key_file_is_used_with_a_warning(tmp_path, caplog):
    path = tmp_path / "hub.db.key"
    path.write_text(generate_key())
    os.chmod(path, 0o644)
    await SecretBox.for_hub("", f"sqlite:///{tmp_path / 'hub.db'}").ready()
    assert "can be read by other users (mode 644): run chmod 600" in caplog.text


async def test_a_broken_key_file_names_the_file(tmp_path):
    (tmp_path / "hub.db.key").write_text("garbage\n")
    with pytest.raises(EncryptionKeyError, match=rf"key file {tmp_path / 'hub.db.key'}: the encryption key is not"):
        await SecretBox.for_hub("", f"sqlite:///{tmp_path / 'hub.db'}").ready()


def test_the_box_repr_shows_no_key():
    key = generate_key()
    assert key not in repr(SecretBox(parse_keys(key))) and key not in repr(Path("x"))
