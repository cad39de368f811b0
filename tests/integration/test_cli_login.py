"""The real `scale-agent` command logs in to a hub that checks bearer tokens (and, over HTTPS,
client certificates): token from --token, SCALE_AGENT_TOKEN or the file `login` writes; 401 and
403 in clear words; `logout`. The hub here is a small HTTP server that answers as the hub's API
does: 401/403 with `{"error": ..., "status": N}`."""

from __future__ import annotations

import json
import os
import ssl
import stat
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import trustme

from tests.helpers import CLI

GOOD = "good-token-1234567890"
WEAK = "weak-token-0987654321"
HINT = "the hub asks you to log in: scale-agent login, --token or SCALE_AGENT_TOKEN"


@dataclass
class FakeHub:
    """A hub's HTTP API reduced to what the CLI's login needs."""

    url: str
    seen: list[str | None] = field(default_factory=list)  # the Authorization header of each request
    whoami: bool = True


def _handler(state: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # quiet
            pass

        def _answer(self, code: int, body: object) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if code == 401:
                self.send_header("WWW-Authenticate", 'Bearer realm="scale-agent"')
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            auth = self.headers.get("Authorization")
            state.seen.append(auth)
            user = {f"Bearer {GOOD}": "alice", f"Bearer {WEAK}": "bob"}.get(auth or "")
            cert = self.connection.getpeercert() if isinstance(self.connection, ssl.SSLSocket) else None
            if user is None and cert:
                user = dict(x[0] for x in cert["subject"])["commonName"]
            if user is None:
                message = "invalid bearer token" if auth else "authentication required"
                return self._answer(401, {"error": message, "status": 401})
            path = self.path.split("?")[0]
            if path == "/api/v1/whoami" and state.whoami:
                return self._answer(200, {"username": user, "groups": ["devs"]})
            if user == "bob" and path.startswith(("/api/v1/accounts", "/armory/accounts")):
                return self._answer(
                    403, {"error": "bob may not do this: READ on account prod is needed", "status": 403}
                )
            if path == "/api/v1/accounts":
                return self._answer(200, [{"name": "prod"}])
            if path == "/armory/accounts":
                return self._answer(200, [{"name": "prod", "state": "ACTIVE"}])
            if path == "/api/v1/accounts/prod/objects":
                return self._answer(200, {"items": []})
            return self._answer(404, {"error": "Not Found", "status": 404})

    return Handler


def _start(state: FakeHub, tls: ssl.SSLContext | None = None) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    state.url = f"{'https' if tls else 'http'}://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def hub() -> Iterator[FakeHub]:
    state = FakeHub("")
    server = _start(state)
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """An environment with no hub, token or config of the machine's: a home of the test's own."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SCALE_AGENT_") and k != "XDG_CONFIG_HOME"}
    return {**clean, "HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}


def run(env: dict[str, str], *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*CLI, *args], env=env, input=stdin, capture_output=True, text=True, timeout=60)
    for token in (GOOD, WEAK, "wrong-token-5555"):
        assert token not in done.stdout and token not in done.stderr, "a token was printed"
    return done


def config_file(env: dict[str, str]) -> Path:
    return Path(env["XDG_CONFIG_HOME"]) / "scale-agent" / "config.yaml"


def test_token_from_the_flag_and_from_the_environment(hub, env):
    done = run(env, "accounts", "list", "--hub", hub.url, "--token", GOOD, "-o", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [{"name": "prod", "state": "ACTIVE"}]
    assert hub.seen[-1] == f"Bearer {GOOD}"

    done = run({**env, "SCALE_AGENT_TOKEN": GOOD, "SCALE_AGENT_HUB": hub.url}, "get", "cm", "--account", "prod")
    assert done.returncode == 0, done.stderr
    assert hub.seen[-1] == f"Bearer {GOOD}"
    # the flag wins over the environment
    run({**env, "SCALE_AGENT_TOKEN": WEAK}, "get", "cm", "--account", "prod", "--hub", hub.url, "--token", GOOD)
    assert hub.seen[-1] == f"Bearer {GOOD}"


def test_login_checks_the_token_saves_it_privately_and_later_commands_use_it(hub, env):
    done = run(env, "login", "--hub", hub.url, "--token-stdin", stdin=GOOD + "\n")
    assert done.returncode == 0, done.stderr
    assert "Logged in to" in done.stdout and "as alice" in done.stdout
    assert hub.seen == [f"Bearer {GOOD}"]  # checked with GET /api/v1/whoami before saving
    path = config_file(env)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    import yaml

    assert yaml.safe_load(path.read_text()) == {"hub": hub.url, "token": GOOD}

    # no --hub, no token: both come from the file
    done = run(env, "get", "cm", "--account", "prod")
    assert done.returncode == 0, done.stderr
    assert "No resources found" in done.stderr
    assert hub.seen[-1] == f"Bearer {GOOD}"
    # the environment's token wins over the file's
    run({**env, "SCALE_AGENT_TOKEN": WEAK}, "get", "cm", "--account", "prod")
    assert hub.seen[-1] == f"Bearer {WEAK}"


def test_the_saved_token_is_never_sent_to_another_hub(hub, env):
    assert run(env, "login", "--hub", hub.url, "--token", GOOD).returncode == 0
    other = FakeHub("")
    server = _start(other)
    try:
        done = run(env, "get", "cm", "--account", "prod", "--hub", other.url)
        assert other.seen == [None]
        assert done.returncode == 1 and HINT in done.stderr
    finally:
        server.shutdown()
        server.server_close()


def test_login_refuses_a_token_the_hub_rejects_and_saves_nothing(hub, env):
    done = run(env, "login", "--hub", hub.url, "--token", "wrong-token-5555")
    assert done.returncode == 1
    # One line: what the hub said, and that nothing was kept.
    assert done.stderr == "error: the hub refused these credentials (invalid bearer token): nothing saved\n"
    assert not config_file(env).exists()


def test_login_falls_back_to_the_accounts_when_the_hub_has_no_whoami(hub, env):
    hub.whoami = False
    done = run(env, "login", "--hub", hub.url, "--token", GOOD)
    assert done.returncode == 0, done.stderr
    assert config_file(env).exists()
    assert len(hub.seen) == 2  # whoami (404), then /api/v1/accounts


def test_login_without_a_token_and_without_a_terminal_asks_for_one(hub, env):
    done = run(env, "login", "--hub", hub.url)
    assert done.returncode == 1
    assert "--token-stdin" in done.stderr
    assert hub.seen == []


def test_401_and_403_say_what_to_do_and_what_the_hub_said(hub, env):
    done = run(env, "get", "cm", "--account", "prod", "--hub", hub.url)
    assert done.returncode == 1
    assert done.stderr.strip() == f"error: {HINT} (hub: authentication required)"

    done = run({**env, "SCALE_AGENT_TOKEN": "wrong-token-5555"}, "accounts", "list", "--hub", hub.url)
    assert done.returncode == 1
    assert HINT in done.stderr and "$SCALE_AGENT_TOKEN" in done.stderr and "invalid bearer token" in done.stderr

    done = run(env, "get", "cm", "--account", "prod", "--hub", hub.url, "--token", WEAK)
    assert done.returncode == 1
    assert done.stderr.strip() == ("Error from server (Forbidden): bob may not do this: READ on account prod is needed")


def test_logout_forgets_the_credentials(hub, env):
    assert run(env, "login", "--hub", hub.url, "--token", GOOD).returncode == 0
    done = run(env, "logout")
    assert done.returncode == 0 and "Logged out" in done.stdout
    path = config_file(env)
    assert GOOD not in path.read_text()  # the hub's address stays for the next login
    done = run(env, "get", "cm", "--account", "prod")
    assert done.returncode == 1 and HINT in done.stderr
    assert hub.seen[-1] is None
    assert "Not logged in" in run(env, "logout").stdout


def test_a_config_file_open_to_others_is_made_private_with_a_warning(hub, env):
    assert run(env, "login", "--hub", hub.url, "--token", GOOD).returncode == 0
    path = config_file(env)
    os.chmod(path, 0o644)
    done = run(env, "get", "cm", "--account", "prod")
    assert done.returncode == 0
    assert "warning:" in done.stderr and "0644" in done.stderr
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_https_hub_with_a_certificate_authority_and_a_client_certificate(env, tmp_path):
    ca = trustme.CA()
    server_cert = ca.issue_cert("127.0.0.1")
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_cert.configure_cert(tls)
    ca.configure_trust(tls)
    tls.verify_mode = ssl.CERT_OPTIONAL  # tokens or a client certificate, as the hub
    state = FakeHub("")
    server = _start(state, tls)
    ca_file, cert_file, key_file = tmp_path / "ca.pem", tmp_path / "me.pem", tmp_path / "me.key"
    ca.cert_pem.write_to_path(str(ca_file))
    me = ca.issue_cert("carol@example.com", common_name="carol")
    me.cert_chain_pems[0].write_to_path(str(cert_file))
    me.private_key_pem.write_to_path(str(key_file))
    try:
        done = run(env, "login", "--hub", state.url, "--token", GOOD)
        assert done.returncode == 1 and "not trusted" in done.stderr and "--certificate-authority" in done.stderr
        assert not config_file(env).exists()

        done = run(
            env,
            "login",
            "--hub",
            state.url,
            "--certificate-authority",
            str(ca_file),
            "--client-certificate",
            str(cert_file),
            "--client-key",
            str(key_file),
        )
        assert done.returncode == 0, done.stderr
        assert "as carol" in done.stdout
        assert state.seen == [None]  # no token: the certificate logged in
        done = run(env, "accounts", "list", "-o", "json")  # hub, CA and certificate from the file
        assert done.returncode == 0, done.stderr
    finally:
        server.shutdown()
        server.server_close()
