"""AES-GCM codec over a key ring file, so workflow input is never stored in the clear.

The key file is JSON: ``{"active": "k1", "keys": {"k1": "<base64 of 32 bytes>"}}``, mode
0600. Its ``active`` is where a deployment starts; once ``punctual keys activate`` has
recorded an active key id in the store, the store decides and every process follows it
(RT-2). Keys are added with ``punctual keys create`` and removed with ``punctual keys
retire`` only when nothing stored needs them; the file is always replaced whole, so a
reader never sees half a ring.
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from punctual.errors import (
    ConfigurationError,
    Conflict,
    HostUnavailable,
    InvalidRequest,
    NotFound,
)
from punctual.ports.codec import ActiveKeyNotHeld, InputKeyUnknown, InputUndecryptable
from punctual.ports.records import EncryptedInput

_NONCE_BYTES = 12
_KEY_BYTES = 32
_KEY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""Key ids are stored beside every ciphertext (64 characters) and printed in messages."""


def check_key_id(key_id: str) -> str:
    """``key_id`` if it is a valid key id (1-64 letters, digits, ``.``, ``_``, ``-``)."""
    if not _KEY_ID.fullmatch(key_id):
        raise InvalidRequest(
            "a codec key id is 1-64 letters, digits, '.', '_' or '-', starting with a letter "
            "or digit"
        )
    return key_id


class KeyRingCodec:
    def __init__(self, keys: dict[str, bytes], active: str) -> None:
        if active not in keys:
            raise ConfigurationError(f"codec.active_key {active!r} is not in the key ring")
        for key_id, key in keys.items():
            if len(key) != _KEY_BYTES:
                raise ConfigurationError(f"codec key {key_id!r} must be 32 bytes (AES-256)")
        self._ciphers = {key_id: AESGCM(key) for key_id, key in keys.items()}
        self._active = active
        self._missing: str | None = None

    @property
    def active_key_id(self) -> str:
        return self._active

    @property
    def missing_active_key(self) -> str | None:
        return self._missing

    def key_ids(self) -> list[str]:
        return sorted(self._ciphers)

    def switch_active(self, key_id: str) -> None:
        if key_id not in self._ciphers:
            self._missing = key_id
            raise self._refusal(key_id)
        # One assignment each: a concurrent encrypt sees the old key or the new one.
        self._active = key_id
        self._missing = None

    def encrypt(self, value: Any, aad: str) -> EncryptedInput:
        plaintext = json.dumps(value, separators=(",", ":"), sort_keys=True).encode()
        return self._seal(plaintext, aad)

    def decrypt(self, encrypted: EncryptedInput, aad: str) -> Any:
        return json.loads(self._open(encrypted, aad))

    def reseal(self, encrypted: EncryptedInput, aad: str) -> EncryptedInput:
        return self._seal(self._open(encrypted, aad), aad)

    def _seal(self, plaintext: bytes, aad: str) -> EncryptedInput:
        missing = self._missing
        if missing is not None:
            raise self._refusal(missing)
        active = self._active
        nonce = secrets.token_bytes(_NONCE_BYTES)
        sealed = self._ciphers[active].encrypt(nonce, plaintext, aad.encode())
        return EncryptedInput(active, nonce + sealed)

    def _open(self, encrypted: EncryptedInput, aad: str) -> bytes:
        cipher = self._ciphers.get(encrypted.key_id)
        if cipher is None:
            raise InputKeyUnknown(
                f"codec key {encrypted.key_id!r} is not in the key ring; restore it to read "
                "this input"
            )
        data = encrypted.ciphertext
        try:
            return cipher.decrypt(data[:_NONCE_BYTES], data[_NONCE_BYTES:], aad.encode())
        except InvalidTag:
            raise InputUndecryptable(
                f"the input sealed with codec key {encrypted.key_id!r} fails authentication: "
                "it is damaged or was sealed with a different key under that id"
            ) from None

    @staticmethod
    def _refusal(key_id: str) -> ActiveKeyNotHeld:
        return ActiveKeyNotHeld(
            f"the active codec key {key_id!r} is not in this process's key ring, so it "
            "encrypts nothing; add the key to its key file and restart it (see "
            "docs/operations.md, 'Keys')"
        )


@dataclass
class KeyRing:
    """A key file's content: the keys by id and the id the file names active."""

    active: str
    keys: dict[str, bytes]


def read_ring(path: Path) -> KeyRing:
    try:
        ring = json.loads(path.read_text())
        keys = {key_id: base64.b64decode(value) for key_id, value in ring["keys"].items()}
        active = ring["active"]
    except FileNotFoundError as exc:
        raise ConfigurationError(f"codec.key_file {path} does not exist") from exc
    except OSError as exc:
        raise _file_unavailable(path, "read", exc) from exc
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigurationError(f"codec.key_file {path} is not a valid key ring: {exc}") from exc
    if not isinstance(active, str) or active not in keys:
        raise ConfigurationError(f"codec.key_file {path}: its 'active' is not one of its keys")
    return KeyRing(active, keys)


def write_ring(path: Path, ring: KeyRing) -> None:
    """Replace the file atomically, readable by its owner only: a process reading it
    meanwhile sees the old ring or the new one, never a torn one."""
    content = {
        "active": ring.active,
        "keys": {key_id: base64.b64encode(key).decode() for key_id, key in ring.keys.items()},
    }
    draft = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise _file_unavailable(path, "written", exc) from exc
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(content, handle, indent=2)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(draft, path)
    except BaseException:
        draft.unlink(missing_ok=True)
        raise


def generate_key_file(path: Path, key_id: str = "k1") -> None:
    """Write a new key ring with one random key, readable by its owner only."""
    ring = {"active": key_id, "keys": {key_id: base64.b64encode(AESGCM.generate_key(256)).decode()}}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise _file_unavailable(path, "written", exc) from exc
    with os.fdopen(fd, "w") as handle:
        json.dump(ring, handle, indent=2)


def _file_unavailable(path: Path, doing: str, exc: OSError) -> HostUnavailable:
    """A key file the file system refuses (a directory, no permission, a read-only
    place): the host cannot start, and the message says which file and why."""
    return HostUnavailable(
        f"codec.key_file {path} cannot be {doing} ({exc.strerror or type(exc).__name__}); "
        "fix its path or permissions (codec.key_file, --key-file)",
        code="file_unavailable",
    )


def _next_key_id(existing: dict[str, bytes]) -> str:
    numbers = [int(k[1:]) for k in existing if re.fullmatch(r"k\d{1,9}", k)]
    return f"k{max(numbers, default=0) + 1}"


def add_key(path: Path, key_id: str | None = None, material: bytes | None = None) -> str:
    """Add a key to the ring at ``path`` (a new random one unless ``material`` is given)
    without making it active; an absent file becomes a new ring whose only key is active.
    Returns the key id (``k<N+1>`` by default)."""
    if key_id is not None:
        check_key_id(key_id)
    key = material if material is not None else AESGCM.generate_key(256)
    if len(key) != _KEY_BYTES:
        raise ConfigurationError("a codec key must be 32 bytes (AES-256)")
    if not path.exists():
        chosen = key_id or "k1"
        write_ring(path, KeyRing(chosen, {chosen: key}))
        return chosen
    ring = read_ring(path)
    chosen = key_id or _next_key_id(ring.keys)
    if chosen in ring.keys:
        raise Conflict(f"codec key {chosen!r} is already in {path}", code="key_exists")
    ring.keys[chosen] = key
    write_ring(path, ring)
    return chosen


def key_material(path: Path, key_id: str) -> bytes:
    """The key ``key_id`` of the ring at ``path`` (to copy it into another ring)."""
    ring = read_ring(path)
    if key_id not in ring.keys:
        raise NotFound(f"codec key {key_id!r} is not in {path}")
    return ring.keys[key_id]


def remove_key(path: Path, key_id: str, store_active: str | None) -> None:
    """Take ``key_id`` out of the ring. When the file names it active, the store's active
    key (which the file must hold) takes its place; a ring is never left without one."""
    ring = read_ring(path)
    if key_id not in ring.keys:
        raise NotFound(f"codec key {key_id!r} is not in {path}")
    if ring.active == key_id:
        if store_active is None or store_active == key_id or store_active not in ring.keys:
            raise Conflict(
                f"codec key {key_id!r} is the active key of {path} and the store names no "
                "other active key that this file holds; activate another key first (punctual "
                "keys activate)",
                code="key_active",
            )
        ring.active = store_active
    del ring.keys[key_id]
    write_ring(path, ring)


def load_key_file(path: Path, active_override: str | None = None) -> KeyRingCodec:
    ring = read_ring(path)
    return KeyRingCodec(ring.keys, active_override or ring.active)
