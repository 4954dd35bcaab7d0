"""Codec port: protects workflow input at rest (OS-9) and follows the key lifecycle (RT-2)."""

from __future__ import annotations

from typing import Any, Protocol

from punctual.errors import ConfigurationError, Unavailable
from punctual.ports.records import EncryptedInput


class InputKeyUnknown(ConfigurationError):
    """The input's key id is not in this process's key ring; another process may hold it
    (a rolling rotation), so the item is retried rather than failed (FT-1)."""

    code = "input_key_unknown"


class InputUndecryptable(ConfigurationError):
    """The ciphertext fails authentication with the key its id names: damaged, or sealed
    with another key under the same id. Retrying cannot help (FT-1)."""

    code = "input_undecryptable"


class ActiveKeyNotHeld(Unavailable):
    """The store's active key is not in this process's key ring, so it seals nothing: a
    key of its own might be one that other processes cannot read (RT-2). Retrying helps
    once the operator adds the key and restarts the process, or the request reaches
    another process."""

    code = "codec_key_unavailable"


class Codec(Protocol):
    """Encrypts inputs with the active key of a key ring and decrypts with any known key.

    ``aad`` binds a ciphertext to its tenant: it cannot be replayed into another tenant.
    ``decrypt`` raises ``InputKeyUnknown`` naming the key id when the key is not in the
    ring, and ``InputUndecryptable`` when the ciphertext fails authentication; both are
    ``ConfigurationError``s and neither message carries any of the input.
    """

    @property
    def active_key_id(self) -> str:
        """The key ``encrypt`` seals with: the last one switched to that the ring holds."""

    @property
    def missing_active_key(self) -> str | None:
        """The active key id this ring lacks (``encrypt`` refuses meanwhile), or None."""

    def key_ids(self) -> list[str]: ...

    def switch_active(self, key_id: str) -> None:
        """Seal with ``key_id`` from now on. A key id the ring lacks raises
        ``ActiveKeyNotHeld``, and ``encrypt`` raises it too until a switch to a key the
        ring holds: a process never seals with a key the others may not hold."""

    def encrypt(self, value: Any, aad: str) -> EncryptedInput:
        """Seal ``value`` (JSON) with the active key; ``ActiveKeyNotHeld`` while refusing."""

    def decrypt(self, encrypted: EncryptedInput, aad: str) -> Any: ...

    def reseal(self, encrypted: EncryptedInput, aad: str) -> EncryptedInput:
        """The same plaintext, byte for byte, sealed again with the active key (rewrap).
        Raises what ``decrypt`` and ``encrypt`` raise."""
