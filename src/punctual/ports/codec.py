"""Codec port: protects workflow input at rest (OS-9)."""

from __future__ import annotations

from typing import Any, Protocol

from punctual.ports.records import EncryptedInput


class Codec(Protocol):
    """Encrypts inputs with the active key of a key ring and decrypts with any known key.

    ``aad`` binds a ciphertext to its tenant: it cannot be replayed into another tenant.
    ``decrypt`` raises ``punctual.errors.ConfigurationError`` naming the key id when the
    key is no longer in the ring.
    """

    @property
    def active_key_id(self) -> str: ...

    def key_ids(self) -> list[str]: ...

    def encrypt(self, value: Any, aad: str) -> EncryptedInput: ...

    def decrypt(self, encrypted: EncryptedInput, aad: str) -> Any: ...
