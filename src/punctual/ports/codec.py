"""Codec port: protects workflow input at rest (OS-9)."""

from __future__ import annotations

from typing import Any, Protocol

from punctual.errors import ConfigurationError
from punctual.ports.records import EncryptedInput


class InputKeyUnknown(ConfigurationError):
    """The input's key id is not in this process's key ring; another process may hold it
    (a rolling rotation), so the item is retried rather than failed (FT-1)."""

    code = "input_key_unknown"


class InputUndecryptable(ConfigurationError):
    """The ciphertext fails authentication with the key its id names: damaged, or sealed
    with another key under the same id. Retrying cannot help (FT-1)."""

    code = "input_undecryptable"


class Codec(Protocol):
    """Encrypts inputs with the active key of a key ring and decrypts with any known key.

    ``aad`` binds a ciphertext to its tenant: it cannot be replayed into another tenant.
    ``decrypt`` raises ``InputKeyUnknown`` naming the key id when the key is not in the
    ring, and ``InputUndecryptable`` when the ciphertext fails authentication; both are
    ``ConfigurationError``s and neither message carries any of the input.
    """

    @property
    def active_key_id(self) -> str: ...

    def key_ids(self) -> list[str]: ...

    def encrypt(self, value: Any, aad: str) -> EncryptedInput: ...

    def decrypt(self, encrypted: EncryptedInput, aad: str) -> Any: ...
