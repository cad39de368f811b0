"""Where the CLI's login lives, how it is written, and which credentials go to which hub."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from scaleagent.cli import credentials, hub
from scaleagent.cli.errors import CliError


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("SCALE_AGENT_CONFIG", "SCALE_AGENT_HUB", "SCALE_AGENT_TOKEN", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def test_the_config_path_follows_xdg_and_the_override(home, monkeypatch):
    assert credentials.config_path() == home / ".config" / "scale-agent" / "config.yaml"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "xdg"))
    assert credentials.config_path() == home / "xdg" / "scale-agent" / "config.yaml"
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/ignored")  # the XDG spec: only absolute paths count
    assert credentials.config_path() == home / ".config" / "scale-agent" / "config.yaml"
    monkeypatch.setenv("SCALE_AGENT_CONFIG", str(home / "elsewhere.yaml"))
    assert credentials.config_path() == home / "elsewhere.yaml"


def test_save_writes_a_private_file_in_a_private_directory_and_load_reads_it(home):
    login = credentials.Login("https://hub:7002", "s3cret", "/ca.pem")
    path = credentials.save(login)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert credentials.load() == login
    assert "s3cret" not in repr(login)
    assert [p.name for p in path.parent.iterdir()] == ["config.yaml"]  # no temporary file left


def test_a_file_open_to_others_is_fixed_with_a_warning(home, capsys):
    path = credentials.save(credentials.Login("http://hub", "s3cret"))
    path.chmod(0o640)
    assert credentials.load().token == "s3cret"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    err = capsys.readouterr().err
    assert "warning:" in err and "0640" in err and "s3cret" not in err


@pytest.mark.parametrize("text", ["[1, 2]", "hub: [a]", "hub: {"])
def test_a_malformed_file_is_a_clear_error(home, text):
    path = credentials.config_path()
    path.parent.mkdir(parents=True)
    path.write_text(text)
    path.chmod(0o600)
    with pytest.raises(CliError, match=str(path)):
        credentials.load()


def test_logout_keeps_the_hub_and_its_ca(home):
    credentials.save(credentials.Login("https://hub", "s3cret", "/ca.pem"))
    old, path, removed = credentials.remove_credentials()
    assert removed and old.token == "s3cret"
    assert credentials.load() == credentials.Login("https://hub", "", "/ca.pem")
    assert credentials.remove_credentials()[2] is False
    credentials.save(credentials.Login("", "s3cret"))
    credentials.remove_credentials()
    assert not path.exists()  # nothing left to keep


def test_the_hub_and_token_come_from_flags_then_environment_then_file(monkeypatch):
    assert hub.connect() == hub.Hub(hub.DEFAULT_HUB)
    credentials.save(credentials.Login("http://saved:7002/", "from-file", "/ca.pem"))
    saved = hub.connect()
    assert (saved.url, saved.token, saved.certificate_authority) == ("http://saved:7002/", "from-file", "/ca.pem")
    assert "config.yaml" in saved.token_source
    monkeypatch.setenv("SCALE_AGENT_TOKEN", "from-env")
    assert (hub.connect().token, hub.connect().token_source) == ("from-env", "$SCALE_AGENT_TOKEN")
    assert hub.connect(token="from-flag").token_source == "--token"
    monkeypatch.delenv("SCALE_AGENT_TOKEN")
    # the file's credentials (and CA) are for the file's hub only
    assert hub.connect("http://SAVED:7002").token == "from-file"
    other = hub.connect("http://other:7002")
    assert (other.token, other.certificate_authority) == ("", "")
    monkeypatch.setenv("SCALE_AGENT_HUB", "http://other:7002")
    assert hub.connect().url == "http://other:7002" and hub.connect().token == ""
    assert "from-file" not in repr(saved) and str(saved) == "http://saved:7002/"


def test_a_client_certificate_needs_its_key():
    with pytest.raises(CliError, match="go together"):
        hub.connect("https://hub", client_certificate="/me.pem")


def test_same_hub():
    assert credentials.same_hub("HTTPS://Hub.example:7002/", "https://hub.example:7002")
    assert not credentials.same_hub("https://hub.example:7002", "http://hub.example:7002")
    assert not credentials.same_hub("https://hub.example", "https://hub.example.evil")
