"""The FastAPI application: routes, error envelope, body limits, probes and metrics."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import swagger_ui
from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.types import ASGIApp, Receive, Scope, Send

import punctual
from punctual.adapters.http import errors, status, ui
from punctual.adapters.http.edge import Edge
from punctual.adapters.http.openapi import Refusals, answers, openapi_document, operation_id
from punctual.adapters.http.routes import (
    holds,
    internal,
    notifications,
    runs,
    schedules,
    starts,
    tenant,
    webhooks,
)
from punctual.adapters.http.timing import Observer, RequestTiming
from punctual.resources import Liveness, Readiness
from punctual.usecases.tenancy import health


class BodyLimit:
    """Refuse bodies over the limit before reading them into memory (SEC-4)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            await self._too_large(scope, receive, send)
            return
        received = 0

        async def limited() -> Any:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise _BodyTooLarge
            return message

        try:
            await self.app(scope, limited, send)
        except _BodyTooLarge:
            await self._too_large(scope, receive, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = JSONResponse(
            status.envelope(
                "body_too_large",
                f"the request body is larger than {self.max_bytes} bytes",
                {"limit": self.max_bytes},
            ),
            status_code=413,
        )
        await response(scope, receive, send)


class _BodyTooLarge(Exception):
    pass


_STORE_DOWN: Refusals = ("store_unavailable",)


def create_app(
    edge: Edge,
    metrics: CollectorRegistry,
    *,
    max_body_bytes: int = 1_048_576,
    internal_token: str | None = None,
    request_durations: Observer | None = None,
) -> FastAPI:
    """The API; with ``internal_token``, the host's ``/internal`` tree too (without one,
    or when the tree is served on its own address, ``/internal/…`` is ``404``). With
    ``request_durations`` (a histogram labelled method, route, status), every request is
    timed."""
    app = FastAPI(
        title="punctual",
        version=punctual.__version__,
        description="A durable scheduler for workflow runs.",
        generate_unique_id_function=operation_id,
        docs_url=None,  # served below from the package's own copy, not a CDN
    )
    _offline_docs(app)
    # FastAPI's documented way to complete the document it generates.
    app.openapi = partial(openapi_document, app)  # type: ignore[method-assign]
    app.state.edge = edge
    errors.install(app)
    app.include_router(starts.router)
    app.include_router(runs.router)
    app.include_router(schedules.router)
    app.include_router(tenant.router)
    app.include_router(notifications.router)
    app.include_router(webhooks.router)
    app.include_router(holds.router)
    if internal_token is not None:
        app.mount(internal.PREFIX, internal.internal_tree(edge, internal_token), name="internal")

    @app.get("/healthz", tags=["probes"], response_model=None, responses=answers(200, Liveness))
    def healthz() -> dict[str, str]:
        """The process is up."""
        return {"status": "ok"}

    @app.get(
        "/readyz",
        tags=["probes"],
        response_model=None,
        responses=answers(200, Readiness, _STORE_DOWN),
    )
    def readyz(request: Request) -> Response:
        """The process can reach its store."""
        try:
            health.store_ready(edge.services)
        except Exception as exc:
            # Anyone may call the probe: the detail (URL, host, driver text) goes to the log.
            errors.log.warning("event=readiness_failed detail=%s", exc)
            return JSONResponse(
                status.envelope("store_unavailable", status.GENERIC_MESSAGES["store_unavailable"]),
                status_code=503,
            )
        return JSONResponse({"status": "ready"})

    @app.get(
        "/metrics",
        tags=["probes"],
        response_model=None,
        responses={
            200: {
                "description": "Prometheus text exposition",
                "content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}},
            }
        },
    )
    def prometheus_metrics() -> Response:
        return Response(generate_latest(metrics), media_type=CONTENT_TYPE_LATEST)

    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    # Installed last, so its security headers wrap every /ui answer, the body limit's 413s too.
    ui.install(app)
    _timed(app, request_durations)
    return app


def _timed(app: FastAPI, request_durations: Observer | None) -> None:
    """Outermost of the middleware (added last): a request refused on its way in is
    timed too."""
    if request_durations is not None:
        app.add_middleware(RequestTiming, histogram=request_durations, routes=app.routes)


def create_internal_app(
    edge: Edge,
    internal_token: str,
    *,
    max_body_bytes: int = 1_048_576,
    request_durations: Observer | None = None,
) -> FastAPI:
    """The ``/internal`` tree alone, for its own listen address (``internal_listen``):
    every other path is ``404``."""
    app = FastAPI(
        title="punctual internal routes",
        version=punctual.__version__,
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
    )
    errors.install(app)
    app.mount(internal.PREFIX, internal.internal_tree(edge, internal_token), name="internal")
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    _timed(app, request_durations)
    return app


DOCS_ASSETS = "/docs-assets"


def _offline_docs(app: FastAPI) -> None:
    """``/docs``, the interactive API page, with Swagger UI's files served from the
    ``swagger-ui-py`` package (Swagger UI 5, which reads OpenAPI 3.1): it works without
    internet (a CDN would leave it blank)."""
    app.mount(DOCS_ASSETS, StaticFiles(directory=_swagger_ui_files()), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} API",
            swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{DOCS_ASSETS}/favicon-32x32.png",
        )


def _swagger_ui_files() -> Path:
    """Where the ``swagger-ui-py`` package keeps Swagger UI's own files."""

    return Path(swagger_ui.__file__).parent / "static"
