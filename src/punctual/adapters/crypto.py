"""AES-GCM codec over a key ring file, so workflow input is never stored in the clear.

The key file is JSON: ``{"active": "k1", "keys": {"k1": "<base64 of 32 bytes>"}}``.
Rotation adds a key and makes it active; old keys stay in the file while anything
still references them (``punctual definitions check`` lists them).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from punctual.errors import ConfigurationError
from punctual.ports.codec import InputKeyUnknown, InputUndecryptable
from punctual.ports.records import EncryptedInput

_NONCE_BYTES = 12


class KeyRingCodec:
    def __init__(self, keys: dict[str, bytes], active: str) -> None:
        if active not in keys:
            raise ConfigurationError(f"codec.active_key {active!r} is not in the key ring")
        for key_id, key in keys.items():
            if len(key) != 32:
                raise ConfigurationError(f"codec key {key_id!r} must be 32 bytes (AES-256)")
        self._ciphers = {key_id: AESGCM(key) for key_id, key in keys.items()}
        self._active = active

    @property
    def active_key_id(self) -> str:
        return self._active

    def key_ids(self) -> list[str]:
        return sorted(self._ciphers)

    def encrypt(self, value: Any, aad: str) -> EncryptedInput:
        nonce = secrets.token_bytes(_NONCE_BYTES)
        plaintext = json.dumps(value, separators=(",", ":"), sort_keys=True).encode()
        sealed = self._ciphers[self._active].encrypt(nonce, plaintext, aad.encode())
        return EncryptedInput(self._active, nonce + sealed)

    def decrypt(self, encrypted: EncryptedInput, aad: str) -> Any:
        cipher = self._ciphers.get(encrypted.key_id)
        if cipher is None:
            raise InputKeyUnknown(
                f"codec key {encrypted.key_id!r} is not in the key ring; restore it to read "
                "this input"
            )
        data = encrypted.ciphertext
        try:
            plaintext = cipher.decrypt(data[:_NONCE_BYTES], data[_NONCE_BYTES:], aad.encode())
        except InvalidTag:
            raise InputUndecryptable(
                f"the input sealed with codec key {encrypted.key_id!r} fails authentication: "
                "it is damaged or was sealed with a different key under that id"
            ) from None
        return json.loads(plaintext)


def generate_key_file(path: Path, key_id: str = "k1") -> None:
    """Write a new key ring with one random key, readable by its owner only."""
    ring = {"active": key_id, "keys": {key_id: base64.b64encode(AESGCM.generate_key(256)).decode()}}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(ring, handle, indent=2)


def load_key_file(path: Path, active_override: str | None = None) -> KeyRingCodec:
    try:
        ring = json.loads(path.read_text())
        keys = {key_id: base64.b64decode(value) for key_id, value in ring["keys"].items()}
        active = active_override or ring["active"]
    except FileNotFoundError as exc:
        raise ConfigurationError(f"codec.key_file {path} does not exist") from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigurationError(f"codec.key_file {path} is not a valid key ring: {exc}") from exc
    return KeyRingCodec(keys, active)
