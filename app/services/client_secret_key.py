"""The server key that encrypts the client credentials' secrets at rest (Fernet: AES-128 with an
HMAC-SHA256 over it). A signature check needs the secret itself, so it cannot be hashed like an
API token; whoever copies the database alone still cannot read it.

The key is MQLENS_CLIENT_SECRET_KEY when set, else the file client-secret.key in the data
directory, made readable by its owner only on first start. A file lost while credentials exist
is not made again: every stored secret would be unreadable."""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Callable
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

from app.config import CLIENT_SECRET_KEY_FILE_NAME
from app.services.errors import ServiceError

log = logging.getLogger("mqlens.app")

KEY_FILE_MODE = 0o600
SETTING = "MQLENS_CLIENT_SECRET_KEY"


class SecretKeyError(ServiceError):
    """The client secret key is malformed, missing, or not the one the stored secrets were made with."""


class SecretCipher:
    """Encrypts and decrypts client secrets with the server key; `source` says where the key came from."""

    def __init__(self, key: str | bytes, source: str):
        try:
            self._fernet = Fernet(key)
        except ValueError:
            raise SecretKeyError(f"the client secret key in {source} is not a Fernet key (32 random bytes in "
                                 "URL-safe base64, 44 characters)") from None
        self.source = source

    def __repr__(self) -> str:
        return f"SecretCipher(source={self.source!r})"

    def encrypt(self, secret: str) -> str:
        return self._fernet.encrypt(secret.encode("utf-8")).decode("ascii")

    def decrypt(self, stored: str) -> str:
        try:
            return self._fernet.decrypt(stored.encode("ascii")).decode("utf-8")
        except (InvalidToken, UnicodeError):
            raise SecretKeyError(f"a stored client secret cannot be decrypted with the key in {self.source}: "
                                 f"it was made with another key. Give the server the key the credentials were "
                                 f"made with ({SETTING}, or the {CLIENT_SECRET_KEY_FILE_NAME} file of the data "
                                 "directory they were made in)") from None


def key_file(data_dir: Path) -> Path:
    return data_dir / CLIENT_SECRET_KEY_FILE_NAME


def _read_key_file(path: Path) -> SecretCipher:
    if stat.S_IMODE(path.stat().st_mode) & ~KEY_FILE_MODE:
        path.chmod(KEY_FILE_MODE)
        log.warning("%s was readable by others: made readable by its owner only", path)
    return SecretCipher(path.read_text(encoding="ascii", errors="replace").strip(), str(path))


def _new_key_file(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, KEY_FILE_MODE)
    try:
        os.write(descriptor, Fernet.generate_key() + b"\n")
        os.fsync(descriptor)
    except BaseException:
        os.close(descriptor)
        path.unlink()
        raise
    os.close(descriptor)
    log.info("made the client secret key %s (keep it with the database: the client credentials' secrets "
             "cannot be read without it)", path)


def load_cipher(configured: str | None, data_dir: Path, secrets_stored: Callable[[], bool]) -> SecretCipher:
    """The cipher of the configured key, else of the data directory's key file, made now when
    it is missing and no secret is stored yet."""
    if configured:
        return SecretCipher(configured, SETTING)
    path = key_file(data_dir)
    if not path.exists():
        if secrets_stored():
            raise SecretKeyError(f"client credentials are stored, but their key file {path} is missing: restore "
                                 f"it from a backup, or set {SETTING} to the key they were made with")
        with contextlib.suppress(FileExistsError):  # another process made it first: use theirs
            _new_key_file(path)
    return _read_key_file(path)
