"""The CLI's login: the config file `scale-agent login` writes, and which credentials a command sends.

The file is `$SCALE_AGENT_CONFIG`, else `$XDG_CONFIG_HOME/scale-agent/config.yaml`, else
`~/.config/scale-agent/config.yaml`: a small YAML mapping, with kubeconfig's names for the
credentials (file paths are absolute)

    hub: https://hub.example.com:7002
    token: ...                                  # a bearer token (a Kubernetes or a static token)
    certificate-authority: /etc/hub/ca.crt      # verifies an HTTPS hub's certificate
    client-certificate: /home/me/.hub/me.crt    # logs in with a client certificate instead
    client-key: /home/me/.hub/me.key

It is written with mode 0600 in a directory of mode 0700. It holds a secret, so it must not be
readable by anyone else: a file found with looser permissions is set back to 0600 with a warning
that says the token may have been read (its owner may fix it: refusing would only make them run
chmod, and the warning is what tells them to rotate the token); a file that is not the user's own
and is open to others is refused.

The file's credentials belong to the file's hub: they are sent only to that hub, never to one named
otherwise by `--hub` or `$SCALE_AGENT_HUB` (which win over the file's hub, as for every command).
A token comes from `--token`, else `$SCALE_AGENT_TOKEN`, else the file. Tokens are never printed.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from dataclasses import dataclass, field, fields
from pathlib import Path

from .errors import CliError

__all__ = [
    "CONFIG_ENV",
    "TOKEN_ENV",
    "Login",
    "absolute",
    "config_path",
    "load",
    "remove_credentials",
    "same_hub",
    "save",
]

CONFIG_ENV = "SCALE_AGENT_CONFIG"
TOKEN_ENV = "SCALE_AGENT_TOKEN"

_KEYS = {
    "hub": "hub",
    "token": "token",
    "certificate_authority": "certificate-authority",
    "client_certificate": "client-certificate",
    "client_key": "client-key",
}
_CREDENTIALS = ("token", "client_certificate", "client_key")


@dataclass(frozen=True)
class Login:
    """What the config file holds (every field optional)."""

    hub: str = ""
    token: str = field(default="", repr=False)
    certificate_authority: str = ""
    client_certificate: str = ""
    client_key: str = ""

    @property
    def has_credentials(self) -> bool:
        return bool(self.token or self.client_certificate)


def config_path() -> Path:
    """Where the login lives: $SCALE_AGENT_CONFIG, else under $XDG_CONFIG_HOME (or ~/.config)."""
    explicit = os.environ.get(CONFIG_ENV, "").strip()
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME", "").strip()
    # XDG: a relative XDG_CONFIG_HOME is invalid and must be ignored
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".config"
    return root / "scale-agent" / "config.yaml"


def same_hub(a: str, b: str) -> bool:
    """Whether two hub URLs name the same hub (case of scheme and host, a trailing slash aside)."""

    def norm(u: str) -> str:
        u = u.strip().rstrip("/")
        scheme, sep, rest = u.partition("://")
        if not sep:
            return u.lower()
        host, slash, path = rest.partition("/")
        return f"{scheme.lower()}://{host.lower()}{slash}{path}"

    return norm(a) == norm(b)


def _check_permissions(path: Path) -> None:
    """Never use a file others can read: fix our own (with a warning), refuse anyone else's."""
    st = path.stat()
    loose = stat.S_IMODE(st.st_mode) & 0o077
    if not loose:
        return
    if st.st_uid != os.getuid():
        raise CliError(
            f"error: {path} is readable or writable by others (mode {stat.S_IMODE(st.st_mode):04o}) and is not "
            "yours: not using it (it holds credentials; see docs/cli.md)"
        )
    os.chmod(path, 0o600)
    print(
        f"warning: {path} was open to others (mode {stat.S_IMODE(st.st_mode):04o}); it is now 0600. "
        "Anyone who could read it may have its token: consider logging in with a new one.",
        file=sys.stderr,
    )


def load(path: Path | None = None, *, check: bool = True) -> Login:
    """The saved login, or an empty one when there is no file. `check=False` skips the check of
    its permissions, for a caller that reads only the hub's address."""
    import yaml

    path = path or config_path()
    try:
        if check:
            _check_permissions(path)
        text = path.read_text()
    except FileNotFoundError:
        return Login()
    except OSError as e:
        raise CliError(f"error: cannot read {path}: {e.strerror or e}") from None
    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise CliError(f"error: {path} is not valid YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(doc, dict):
        raise CliError(f"error: {path} must be a YAML mapping (hub, token, ...)")
    values: dict[str, str] = {}
    for attr, key in _KEYS.items():
        value = doc.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise CliError(f"error: {path}: {key} must be a string")
        values[attr] = value.strip()
    return Login(**values)


def save(login: Login, path: Path | None = None) -> Path:
    """Write the login atomically: a 0600 file in a 0700 directory, never readable by others even
    for a moment (created with its mode, then renamed over the old one)."""
    import yaml

    path = path or config_path()
    directory = path.parent
    if not directory.exists():
        directory.mkdir(mode=0o700, parents=True)
        os.chmod(directory, 0o700)  # against the umask
    elif directory.name == "scale-agent" and stat.S_IMODE(directory.stat().st_mode) & 0o077:
        os.chmod(directory, 0o700)  # our own directory; not a shared one named by SCALE_AGENT_CONFIG
    doc = {key: getattr(login, attr) for attr, key in _KEYS.items() if getattr(login, attr)}
    text = "# written by `scale-agent login` (docs/cli.md); keep it private\n" + yaml.safe_dump(
        doc, default_flow_style=False, sort_keys=False
    )
    fd, tmp = tempfile.mkstemp(prefix=".config-", suffix=".yaml", dir=directory)  # mkstemp: mode 0600
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def remove_credentials(path: Path | None = None) -> tuple[Login, Path, bool]:
    """Forget the token and client certificate (the hub and its CA stay, for the next login).
    Returns the old login, the path, and whether anything was removed."""
    path = path or config_path()
    old = load(path)
    if not old.has_credentials:
        return old, path, False
    kept = Login(**{f.name: "" if f.name in _CREDENTIALS else getattr(old, f.name) for f in fields(Login)})
    if kept == Login():
        path.unlink()
    else:
        save(kept, path)
    return old, path, True


def absolute(value: str | None) -> str:
    """A file option as the config file keeps it: an absolute path ('' for none)."""
    return str(Path(value).expanduser().resolve()) if value else ""
