"""Encryption at rest of the kubeconfigs the hub resolves for dynamic accounts.

A migrated account's kubeconfig is a snapshot taken from its credential source (a file or a
Kubernetes Secret). The hub keeps it in `kubesvc_accounts.kubeconfig_encrypted`, so that it can
send the account again to an agent that reconnects, or after its own restart, without reading the
source again. Whoever can read the database must not be able to read the clusters' credentials:
the snapshot is encrypted with Fernet (AES-128-CBC and HMAC-SHA256, from `cryptography`) and never
stored in plain text.

The key comes from `dynamicAccounts.encryptionKey` (or its environment override
`SCALE_AGENT_HUB_DYNAMIC_ACCOUNTS__ENCRYPTION_KEY`). Several keys separated by commas rotate it:
the first encrypts, all decrypt. Without one:

- with an SQLite database (a single hub), a key is generated into a file beside it
  (`<database>.key`, mode 0600), and the log says where, never what;
- with a shared database (PostgreSQL, MySQL, MariaDB), every replica must decrypt what another
  encrypted, so a key one replica makes up would break the others: the key must be configured,
  and the accounts that need it fail with a message saying so.

The key is looked for at first use, not at hub start: a hub that never stores a kubeconfig
needs none.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import os
import secrets
import stat
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from .errors import DecryptionError, EncryptionKeyError

__all__ = [
    "KEY_FILE_SUFFIX",
    "SecretBox",
    "generate_key",
    "key_file_for",
    "parse_keys",
]

KEY_FILE_SUFFIX = ".key"
"""The generated key file is the SQLite database's path plus this: `scale-agent-hub.db.key`."""

log = logging.getLogger("scaleagent.hub.secrets")


def generate_key() -> str:
    """A new random key, in the form `dynamicAccounts.encryptionKey` takes."""
    return Fernet.generate_key().decode()


def parse_keys(text: str) -> list[bytes]:
    """The Fernet keys in `text` (comma-separated; the first one encrypts). Raises
    EncryptionKeyError naming which key is malformed, without showing any."""
    parts = [part.strip() for part in text.split(",")]
    if not any(parts):
        raise EncryptionKeyError("the encryption key is empty")
    keys = []
    for i, part in enumerate(parts, 1):
        which = f"key {i} of {len(parts)}" if len(parts) > 1 else "the encryption key"
        if not part:
            raise EncryptionKeyError(f"{which} is empty (a stray comma?)")
        try:
            raw = base64.urlsafe_b64decode(part.encode("ascii"))
        except (binascii.Error, UnicodeEncodeError, ValueError):
            raw = b""
        if len(raw) != 32:
            raise EncryptionKeyError(
                f"{which} is not a Fernet key: it must be 32 random bytes in URL-safe base64 (44 characters "
                "ending in '='), e.g. from `scale-agent accounts generate-key`; the value is not shown"
            )
        keys.append(part.encode("ascii"))
    return keys


def key_file_for(database_url: str) -> Path | None:
    """Where a generated key lives for this database: beside an SQLite file; None for a server
    database (whose replicas must share a configured key)."""
    from sqlalchemy.engine import make_url

    try:
        url = make_url(database_url)
    except Exception:
        return None
    if url.get_backend_name() != "sqlite" or not url.database or url.database.startswith("file:"):
        return None
    return Path(url.database + KEY_FILE_SUFFIX)


class SecretBox:
    """Encrypts and decrypts kubeconfig snapshots with the hub's key.

    Create it with `SecretBox.for_hub(configured_key, database_url)`; `await ready()` finds or
    makes the key (raising EncryptionKeyError) before `encrypt()`/`decrypt()` are used.
    """

    def __init__(
        self,
        keys: list[bytes] | None = None,
        *,
        source: str = "the given key",
        key_file: Path | None = None,
        database_display: str = "",
    ) -> None:
        """`keys` (parsed by `parse_keys`) or, without them, a `key_file` to read or create at
        `ready()`; with neither, `ready()` explains that a key must be configured."""
        self.source = source
        self._key_file = key_file
        self._database_display = database_display
        self._fernet: MultiFernet | None = MultiFernet([Fernet(k) for k in keys]) if keys else None
        self._lock = asyncio.Lock()

    @classmethod
    def for_hub(cls, configured: str, database_url: str, database_display: str = "") -> SecretBox:
        """The box of a hub: the configured key(s) if any (already checked by the configuration),
        else the key file beside an SQLite database."""
        if configured:
            return cls(parse_keys(configured), source="dynamicAccounts.encryptionKey")
        path = key_file_for(database_url)
        return cls(
            source=f"key file {path}" if path else "no key",
            key_file=path,
            database_display=database_display or "the shared database",
        )

    def __repr__(self) -> str:
        return f"SecretBox(source={self.source!r})"

    async def ready(self) -> None:
        """Make sure a key is loaded: read or generate the key file the first time (in a
        thread: it is file I/O). Raises EncryptionKeyError when there is no key to be had."""
        if self._fernet is not None:
            return
        async with self._lock:
            if self._fernet is None:
                if self._key_file is None:
                    raise EncryptionKeyError(
                        f"no encryption key for kubeconfigs: set dynamicAccounts.encryptionKey (or the environment "
                        f"variable SCALE_AGENT_HUB_DYNAMIC_ACCOUNTS__ENCRYPTION_KEY). With {self._database_display}, "
                        "every hub replica must use the same key, so none is generated; make one with "
                        "`scale-agent accounts generate-key`"
                    )
                keys = await asyncio.to_thread(_load_or_create_key_file, self._key_file)
                self._fernet = MultiFernet([Fernet(k) for k in keys])

    def encrypt(self, plaintext: bytes) -> bytes:
        """The Fernet token of `plaintext` under the first key."""
        return self._ready().encrypt(plaintext)

    def decrypt(self, token: bytes) -> bytes:
        """The plaintext of a token made by `encrypt` with any of the keys."""
        try:
            return self._ready().decrypt(token)
        except InvalidToken:
            raise DecryptionError(
                f"the stored kubeconfig cannot be decrypted with the encryption key ({self.source}): it was encrypted "
                "with another key, or altered. Restore the old key (list it after the new one to rotate), or "
                "migrate the account again (PATCH state ACTIVE) to store a new snapshot"
            ) from None

    def _ready(self) -> MultiFernet:
        if self._fernet is None:
            raise EncryptionKeyError("the encryption key is not loaded yet: call `await box.ready()` first")
        return self._fernet


def _load_or_create_key_file(path: Path) -> list[bytes]:
    """Read the key file, or create it with a new key (mode 0600) if there is none.

    Two hubs starting on one SQLite file may both find no key: each writes its key to a
    temporary file and links it into place, which fails for the second; it then reads the
    first one's. A key file others may read is used, with a warning."""
    try:
        return _read_key_file(path)
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(8)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(generate_key() + "\n")
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(temporary, path)
        except FileExistsError:
            return _read_key_file(path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
    log.warning(
        "generated a new encryption key for dynamic accounts' kubeconfigs in %s (mode 0600); keep it with "
        "the database: without it their stored kubeconfigs cannot be read. Set "
        "dynamicAccounts.encryptionKey to choose the key yourself",
        path,
    )
    return _read_key_file(path)


def _read_key_file(path: Path) -> list[bytes]:
    try:
        text = path.read_text(encoding="ascii")
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else type(e).__name__
        raise EncryptionKeyError(f"key file {path}: cannot be read: {reason}") from None
    try:
        keys = parse_keys(text.strip())
    except EncryptionKeyError as e:
        raise EncryptionKeyError(f"key file {path}: {e}") from None
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        log.warning("key file %s can be read by other users (mode %o): run chmod 600 on it", path, mode)
    log.info("dynamic accounts: kubeconfigs are encrypted with the key in %s", path)
    return keys
