"""The FastAPI side of the error envelope: exception handlers and error responses."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from punctual import errors as e
from punctual.adapters.http.status import GENERIC_MESSAGES, body_for, envelope, status_for

log = logging.getLogger("punctual.http")


def response_for(error: e.PunctualError) -> JSONResponse:
    if error.code in GENERIC_MESSAGES:
        log.warning("event=http_unavailable code=%s detail=%s", error.code, error.message)
    headers = {"WWW-Authenticate": "Bearer"} if isinstance(error, e.Unauthenticated) else None
    return JSONResponse(body_for(error), status_code=status_for(error), headers=headers)


def _validation_errors(exc: RequestValidationError) -> list[dict[str, Any]]:
    return [
        {
            "loc": [str(p) for p in err.get("loc", ())],
            "msg": err.get("msg", ""),
            "type": err["type"],
        }
        for err in exc.errors()
    ]


_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 400: "bad_request"}


def install(app: FastAPI) -> None:
    @app.exception_handler(e.PunctualError)
    async def _punctual(_request: Request, exc: e.PunctualError) -> JSONResponse:
        return response_for(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = _validation_errors(exc)
        summary = "; ".join(f"{'.'.join(err['loc'])}: {err['msg']}" for err in errors)
        return JSONResponse(
            envelope("validation_error", f"invalid request: {summary}", {"errors": errors}),
            status_code=422,
        )

    @app.exception_handler(HTTPException)
    async def _http(_request: Request, exc: HTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        return JSONResponse(envelope(code, str(exc.detail)), status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.error(
            "event=http_unexpected_error method=%s path=%s",
            request.method,
            request.url.path,
            exc_info=exc,
        )
        return JSONResponse(
            envelope("internal_error", "punctual hit an unexpected error; it was logged"),
            status_code=500,
        )
