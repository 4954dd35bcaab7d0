"""The operator page's session cookie and CSRF tokens, sealed with the host's key ring.

Every API process holds the codec key ring (it reads workflow input with it), so a value
sealed by one process opens in any other: the session needs no table and no sticky
routing. Values are sealed with AES-GCM under a purpose of their own (the codec's
associated data), so a session cannot be passed off as a CSRF token or as stored input.

The session carries the SHA-256 digest of the token, never the token: whoever opens a
cookie still holds nothing that ``/v1`` accepts, and the digest is looked up on every
request, so a revoked or expired token ends its sessions at once.

Retiring a codec key (``punctual keys retire``) ends the sessions sealed with it: they no
longer open, and their holders sign in again.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from punctual.errors import Forbidden, PunctualError
from punctual.ports.codec import Codec
from punctual.ports.records import EncryptedInput

SESSION_COOKIE = "punctual_session"
SIGN_IN_COOKIE = "punctual_sign_in"
COOKIE_PATH = "/ui"
SESSION_LIFETIME = timedelta(hours=8)
"""How long a sign-in lasts; the token's own expiry or revocation ends it sooner."""
FORM_LIFETIME = timedelta(hours=8)
"""How long a rendered form's CSRF token is accepted: a form older than this is reloaded."""
SIGN_IN_LIFETIME = timedelta(hours=1)

_SESSION_PURPOSE = "punctual/ui/session/v1"
_CSRF_PURPOSE = "punctual/ui/csrf/v1"
_MAX_SEALED_LENGTH = 4096


@dataclass(frozen=True)
class Session:
    token_digest: str
    tenant: str
    csrf_binding: str
    """A random value of this sign-in; the session's CSRF tokens are bound to it."""
    expires_at: datetime


def new_binding() -> str:
    return secrets.token_urlsafe(24)


def is_binding(value: str) -> bool:
    """Looks like what ``new_binding`` makes (a sign-in cookie sent back is reused)."""
    return len(value) == 32 and all(ch.isascii() and (ch.isalnum() or ch in "-_") for ch in value)


class Sealer:
    """Seals small JSON values for the browser; opens only what it sealed, unchanged."""

    def __init__(self, codec: Codec) -> None:
        self._codec = codec

    def seal(self, purpose: str, value: Any) -> str:
        sealed = self._codec.encrypt(value, purpose)
        payload = base64.urlsafe_b64encode(sealed.ciphertext).decode().rstrip("=")
        return f"{sealed.key_id}.{payload}"

    def open(self, purpose: str, text: str | None) -> Any | None:
        """The sealed value, or None for anything else: malformed, altered, sealed for
        another purpose, or with a key this process does not hold."""
        if not text or len(text) > _MAX_SEALED_LENGTH:
            return None
        key_id, _, payload = text.partition(".")
        try:
            # Strict: the lenient decoder drops characters outside the alphabet, so a
            # sealed value with anything appended would still open.
            ciphertext = base64.b64decode(
                payload + "=" * (-len(payload) % 4), altchars=b"-_", validate=True
            )
            return self._codec.decrypt(EncryptedInput(key_id, ciphertext), purpose)
        except (binascii.Error, ValueError, PunctualError):
            return None

    def seal_session(self, session: Session) -> str:
        return self.seal(
            _SESSION_PURPOSE,
            {
                "digest": session.token_digest,
                "tenant": session.tenant,
                "binding": session.csrf_binding,
                "expires_at": session.expires_at.timestamp(),
            },
        )

    def open_session(self, text: str | None, now: datetime) -> Session | None:
        """The session in the cookie, or None when there is none or it has expired."""
        value = self.open(_SESSION_PURPOSE, text)
        if not isinstance(value, dict):
            return None
        try:
            session = Session(
                token_digest=str(value["digest"]),
                tenant=str(value["tenant"]),
                csrf_binding=str(value["binding"]),
                expires_at=datetime.fromtimestamp(float(value["expires_at"]), tz=now.tzinfo),
            )
        except (KeyError, TypeError, ValueError, OverflowError):
            return None
        return session if session.expires_at > now else None

    def csrf_token(self, binding: str, now: datetime) -> str:
        """A token for one rendered form, valid with ``binding`` only, for a while."""
        expires_at = (now + FORM_LIFETIME).timestamp()
        return self.seal(_CSRF_PURPOSE, {"binding": binding, "expires_at": expires_at})

    def check_csrf(self, token: str | None, binding: str | None, now: datetime) -> None:
        """Raise ``Forbidden`` unless ``token`` was made for ``binding`` and is current.

        The binding comes from a ``SameSite=Strict`` cookie (the session, or before sign-in
        the sign-in cookie), which another site's form cannot send along: a forged request
        lacks either the cookie or a token that matches it.
        """
        value = self.open(_CSRF_PURPOSE, token)
        valid = (
            isinstance(value, dict)
            and binding is not None
            and isinstance(value.get("binding"), str)
            and hmac.compare_digest(value["binding"].encode(), binding.encode())
            and isinstance(value.get("expires_at"), int | float)
            and value["expires_at"] > now.timestamp()
        )
        if not valid:
            raise Forbidden(
                "the form's CSRF token is missing, expired or not this browser's; reload "
                "the page and submit the form again",
                code="csrf_token_invalid",
            )
