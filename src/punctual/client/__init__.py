"""A typed HTTP client for punctual's API (IF-2): ``PunctualClient`` (sync) and
``AsyncPunctualClient`` (asyncio), over every tenant route, answering with the models of
``punctual.resources``.

Idempotency (API.md "Conventions"): every mutation sends an ``Idempotency-Key``. Pass
``idempotency_key=`` to choose it (persist it with your request first, then a retry after
a crash acts once), or let the client make one. Either way the client keeps the key across
its own retries of an ambiguous failure (a connection error or timeout, a 5xx, a
``202 in_progress``) and exposes it: on the answer (``answer.idempotency_key``) and on
every exception a mutation raises (``error.idempotency_key``), so the caller can retry the
same request later and learn its outcome.

Errors are typed by status and carry the envelope's ``code``, ``message`` and ``details``::

    ClientError                    idempotency_key
    ├── ApiError                   status, code, message, details, envelope
    │   ├── InvalidRequestError    400, 413, 422 (and any other 4xx)
    │   ├── AuthenticationError    401
    │   ├── PermissionDeniedError  403
    │   ├── NotFoundError          404
    │   ├── ConflictError          409
    │   └── UnavailableError       429 and 5xx: retry later
    ├── InProgress                 still 202 after the client's retries
    └── ServerUnreachable          no answer after the client's retries

Every answer keeps the JSON the server sent in ``.raw`` (for ``--json`` printing).
"""

from punctual.client.clients import (
    AsyncPunctualClient,
    PunctualClient,
    aiterate,
    iterate,
    retry_until_decided,
)
from punctual.client.errors import (
    ApiError,
    AuthenticationError,
    ClientError,
    ConflictError,
    InProgress,
    InvalidRequestError,
    NotFoundError,
    PermissionDeniedError,
    ServerUnreachable,
    UnavailableError,
    api_error,
)
from punctual.client.wire import KEEP, new_idempotency_key

__all__ = [
    "KEEP",
    "ApiError",
    "AsyncPunctualClient",
    "AuthenticationError",
    "ClientError",
    "ConflictError",
    "InProgress",
    "InvalidRequestError",
    "NotFoundError",
    "PermissionDeniedError",
    "PunctualClient",
    "ServerUnreachable",
    "UnavailableError",
    "aiterate",
    "api_error",
    "iterate",
    "new_idempotency_key",
    "retry_until_decided",
]
