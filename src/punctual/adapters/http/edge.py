"""The HTTP edge: authentication, idempotency keys, body parsing, all in the contract's order.

Order for a mutation (API.md): replay, authentication, tenant and existence, validation,
role, state, version. Authentication is what names the key's owner, so it runs first;
right after it, a recorded answer for the key is replayed before anything else is
looked at; the rest happens inside the mutation.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ValidationError

from punctual.adapters.http.errors import response_for
from punctual.adapters.http.status import envelope
from punctual.domain.permissions import Principal
from punctual.domain.starts import HOST_OWNED_FIELDS
from punctual.errors import BadRequest, InvalidRequest, PunctualError
from punctual.usecases.kernel import audit
from punctual.usecases.kernel.audit import AuditedRequest
from punctual.usecases.kernel.context import Services
from punctual.usecases.kernel.idempotency import (
    IdempotentRequest,
    Mutation,
    MutationRunner,
    Outcome,
    RecordedError,
)
from punctual.usecases.kernel.mutations import Subject, check_tenant, in_order
from punctual.usecases.kernel.paging import BIGINT_MAX
from punctual.usecases.tenancy import identity

log = logging.getLogger("punctual.http")

M = TypeVar("M", bound=BaseModel)
_MAX_KEY_LENGTH = 255
# Body fields whose content is protected input: a problem inside one is located at the field,
# never at the input's own keys, which can be personal data (SPEC FT-4).
_PROTECTED_FIELDS = frozenset({"input"})


@dataclass
class Edge:
    services: Services
    mutations: MutationRunner

    def principal(self, request: Request, tenant: str | None = None) -> Principal:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        bearer = token.strip() if scheme.lower() == "bearer" else None
        principal = identity.authenticate(self.services, bearer)
        refuse_unstorable_parameters(request)
        if request.method in _MUTATING_METHODS:
            audit.serving(audited_request(request, principal, identity.digest(bearer or "")))
        if tenant is not None:
            check_tenant(principal, tenant)
        return principal


_MUTATING_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_SUBJECT_KINDS = {
    "scheduled-starts": "start",
    "schedules": "schedule",
    "by-name": "schedule",
    "occurrences": "occurrence",
    "runs": "run",
    "members": "member",
    "tokens": "token",
    "findings": "finding",
    "notifications": "notification",
    "webhooks": "webhook",
    "deliveries": "delivery",
    "holds": "hold",
}
"""Collections in ``/v1`` paths and the kind of subject their items are (CR-8)."""


def audited_request(request: Request, principal: Principal, token_digest: str) -> AuditedRequest:
    """What the audit log keeps of a mutation request: the route's name as its action, the
    path without the query, and the subject the path names; for a create, the kind of what
    it creates (its id comes from the decided outcome). The batch create answers 200 for
    any mix of item outcomes, so its entry carries 200."""
    route = request.scope.get("route")
    template = getattr(route, "path", request.url.path)
    kind, subject_id = _subject_of(template, request.path_params)
    return AuditedRequest(
        tenant=principal.tenant,
        actor=principal.subject,
        token_digest=token_digest,
        action=getattr(route, "name", None) or "unknown",
        method=request.method,
        path=request.url.path,
        subject_kind=kind,
        subject_id=subject_id,
        status=200 if template.endswith("/batch") else None,
    )


def _subject_of(template: str, params: dict[str, Any]) -> tuple[str | None, str | None]:
    """The last ``collection/{id}`` pair of the route's path names the subject; a path that
    ends at a collection (a create) names only the kind; a name (not an id) in the path
    leaves the id to the outcome."""
    segments = [s for s in template.split("/") if s][3:]  # after v1/tenants/{tenant}
    kind: str | None = None
    subject_id: str | None = None
    for previous, segment in zip([None, *segments], segments, strict=False):
        if segment.startswith("{"):
            if previous is not None and not previous.startswith("{"):
                kind = _SUBJECT_KINDS.get(previous, previous)
            name = segment.strip("{}").split(":")[0]
            value = params.get(name)
            subject_id = value if name.endswith("_id") or name == "subject" else None
        elif kind is None:
            kind = _SUBJECT_KINDS.get(segment, segment)
    return kind, subject_id


def refuse_unstorable_parameters(request: Request) -> None:
    """Path and query strings with U+0000 are 422 on every store (SPEC FT-3).

    PostgreSQL's text and JSONB cannot hold U+0000, so such a string would fail in the
    store (a 500) on one store only. Checked once here, right after authentication, for
    every ``/v1`` route (and by every page under ``/ui``), so no route lets one reach the
    store or an error message.
    """
    refuse_unstorable_fields("path", list(request.path_params.items()))
    refuse_unstorable_fields("query", request.query_params.multi_items())


def refuse_unstorable_fields(location: str, items: Iterable[tuple[str, Any]]) -> None:
    """A name or string value with U+0000 among ``items`` (from ``location``: path,
    query, form) is a 422, as for every ``/v1`` parameter (SPEC FT-3)."""
    for name, value in items:
        if "\x00" in name:
            raise _nul_error(location, [location])
        if isinstance(value, str) and "\x00" in value:
            raise _nul_error(location, [location, name])


def _nul_error(location: str, loc: list[str]) -> InvalidRequest:
    return InvalidRequest(
        f"a {location} parameter contains the character U+0000, which punctual does not "
        "store; details.errors names it",
        errors=[{"loc": loc, "msg": "contains U+0000", "type": "string_unstorable"}],
    )


def idempotency_key(request: Request) -> str:
    key = request.headers.get("idempotency-key")
    if key is None or key == "":
        raise BadRequest(
            "this request changes state and needs an 'Idempotency-Key' header: a unique value "
            "you persist with the request and reuse when you retry it",
            code="idempotency_key_required",
        )
    if not valid_key(key):
        raise BadRequest(
            "Idempotency-Key must be 1-255 visible ASCII characters",
            code="idempotency_key_required",
        )
    return key


def valid_key(key: str) -> bool:
    """1-255 visible ASCII characters (API.md "Conventions")."""
    return 0 < len(key) <= _MAX_KEY_LENGTH and all(33 <= ord(ch) <= 126 for ch in key)


def canonical_body(raw: bytes) -> str:
    """Canonical JSON when the body parses (key order and spacing do not matter), else bytes."""
    if not raw.strip():
        return ""
    try:
        return json.dumps(json.loads(raw), sort_keys=True, separators=(",", ":"))
    except (ValueError, RecursionError):
        return "raw:" + hashlib.sha256(raw).hexdigest()


def fingerprint(request: Request, raw_body: bytes) -> str:
    route = request.scope.get("route")
    return fingerprint_of(
        request.method,
        getattr(route, "path", request.url.path),
        request.path_params,
        request.query_params.multi_items(),
        canonical_body(raw_body),
    )


def fingerprint_of(
    method: str,
    route: str,
    path: dict[str, Any],
    query: list[tuple[str, str]],
    canonical: str,
) -> str:
    """The request fingerprint of OS-4: method, route, path parameters, query and canonical
    JSON body. A batch create item is fingerprinted as the single create it stands for."""
    material = {
        "method": method,
        "route": route,
        "path": dict(sorted(path.items())),
        "query": sorted(query),
        "body": canonical,
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def load_json(raw: bytes) -> Any:
    """The body's JSON, refusing what no store and no field can take (SPEC FT-3, FT-7).

    Python's ``json`` accepts ``NaN``, ``Infinity`` and ``-Infinity``, which are not JSON
    (RFC 8259) and no numeric field can hold; they are refused while parsing. Strings
    (object keys included) with U+0000 or an unpaired surrogate are refused here too:
    PostgreSQL cannot store the first, no store can encode the second.
    """
    data = parse_json(raw)
    refuse_unstorable_text(data)
    return data


def parse_json(raw: bytes) -> Any:
    """The body's JSON; ``NaN`` and the infinities are not JSON and refused (RFC 8259)."""
    try:
        return json.loads(raw, parse_constant=_refuse_constant) if raw.strip() else None
    except (ValueError, RecursionError) as exc:
        reason = "it is nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise InvalidRequest(
            f"the body is not valid JSON: {reason}",
            errors=[{"loc": ["body"], "msg": "malformed JSON", "type": "json_invalid"}],
        ) from exc


def refuse_unstorable_text(data: Any) -> None:
    """A string with U+0000 or an unpaired surrogate anywhere in ``data`` is a 422."""
    problem = _unstorable_text(data, [])
    if problem is not None:
        loc, kind = problem
        if loc and loc[0] in _PROTECTED_FIELDS:
            loc = loc[:1]
        where = ".".join(str(part) for part in loc) or "the body"
        raise InvalidRequest(
            f"{where} contains {kind}, which punctual does not store",
            errors=[
                {"loc": ["body", *loc], "msg": f"contains {kind}", "type": "string_unstorable"}
            ],
        )


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number; send a finite number")


def _unstorable_text(value: Any, loc: list[str | int]) -> tuple[list[str | int], str] | None:
    """The location of the first string U+0000 or an unpaired surrogate, if any."""
    if isinstance(value, str):
        kind = _text_problem(value)
        return (loc, kind) if kind else None
    if isinstance(value, dict):
        for key, item in value.items():
            kind = _text_problem(key)
            if kind:
                return (loc, f"a key with {kind}")
            found = _unstorable_text(item, [*loc, key])
            if found:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _unstorable_text(item, [*loc, index])
            if found:
                return found
    return None


def _text_problem(text: str) -> str | None:
    if "\x00" in text:
        return "the character U+0000"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "an unpaired surrogate"
    return None


def parse_body(raw: bytes, model: type[M], *, host_owned_check: bool = False) -> M:
    return parse_object(load_json(raw), model, host_owned_check=host_owned_check)


def parse_object(data: Any, model: type[M], *, host_owned_check: bool = False) -> M:
    """A parsed JSON body validated into ``model``, with the contract's error codes."""
    if not isinstance(data, dict):
        raise InvalidRequest(
            "the body must be a JSON object",
            errors=[{"loc": ["body"], "msg": "expected an object", "type": "object_type"}],
        )
    if host_owned_check:
        owned = sorted(set(data) & set(HOST_OWNED_FIELDS))
        if owned:
            raise InvalidRequest(
                f"{', '.join(owned)} {'is' if len(owned) == 1 else 'are'} decided by the host "
                "(through the workload class) and cannot be set in a request",
                code="host_owned_field",
                fields=owned,
            )
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = [
            {"loc": ["body", *[str(p) for p in err["loc"]]], "msg": err["msg"], "type": err["type"]}
            for err in exc.errors()
        ]
        summary = "; ".join(f"{'.'.join(err['loc'][1:])}: {err['msg']}" for err in errors)
        raise InvalidRequest(f"invalid request body: {summary}", errors=errors) from None


def parse_limit(value: str | None, default: int = 50, name: str = "limit") -> int:
    """Parsed here, after authentication, so a bad query never answers before a 401."""
    if value is None:
        return default
    if not _is_whole_number(value):
        raise InvalidRequest(
            f"{name} must be a whole number from 1 to 100",
            errors=[{"loc": ["query", name], "msg": "not an integer", "type": "int_parsing"}],
        )
    return int(value)


def parse_whole_number(
    value: str, name: str, *, minimum: int = 0, maximum: int = BIGINT_MAX
) -> int:
    """A whole number from a query parameter: ASCII digits only, within the bounds.

    ``int()`` alone also takes ``+1``, `` 1``, ``1_0`` and other scripts' digits, and
    ``str.isdigit`` passes ``²``, which ``int()`` then refuses; neither may reach a 500.
    """
    if not _is_whole_number(value) or not minimum <= int(value) <= maximum:
        raise InvalidRequest(
            f"{name} must be a whole number from {minimum} to {maximum}",
            errors=[{"loc": ["query", name], "msg": "not a whole number", "type": "int_parsing"}],
        )
    return int(value)


def _is_whole_number(value: str) -> bool:
    return value.isascii() and value.isdigit() and len(value) <= 20


def json_response(outcome: Outcome) -> Response:
    if outcome.status == 204:
        return Response(status_code=204)
    return JSONResponse(outcome.body, status_code=outcome.status)


def mutate(
    edge: Edge,
    request: Request,
    raw_body: bytes,
    tenant: str,
    decide: Callable[[Principal], Mutation],
    subject: Subject | None = None,
) -> Response:
    """Authenticate, then replay or run the mutation under the request's key: the tenant
    checked, then ``subject`` (a ``404`` before the body is read), then ``decide``, which
    reads the body and names the use case's mutation (``punctual.usecases.kernel.mutations``)."""
    try:
        principal = edge.principal(request)
        key = idempotency_key(request)
        claim = IdempotentRequest(
            principal.tenant, principal.subject, key, fingerprint(request, raw_body)
        )
        mutation = in_order(principal, tenant, subject, partial(decide, principal))
        outcome = edge.mutations.run(claim, mutation)
    except RecordedError as recorded:
        return JSONResponse(recorded.body, status_code=recorded.status)
    except PunctualError as exc:
        return response_for(exc)
    return json_response(outcome)


def not_found_body(message: str) -> dict[str, Any]:
    return envelope("not_found", message)
