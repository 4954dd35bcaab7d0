"""The operator page at ``/ui/`` (SPEC IF-4): server-rendered templates over the use cases."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from punctual.adapters.http.ui.rendering import PREFIX, STATIC_DIR, PageHeaders
from punctual.adapters.http.ui.routes import router


def install(app: FastAPI) -> None:
    """Serve the page, its stylesheet and its headers. The stylesheet is mounted first so
    that the page's catch-all route (unknown pages) does not shadow it."""
    app.mount(PREFIX + "/static", StaticFiles(directory=STATIC_DIR), name="ui-static")
    app.include_router(router)
    app.add_middleware(PageHeaders)
