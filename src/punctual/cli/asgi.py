"""The API as an ASGI app factory, for ``punctual serve --workers N``.

uvicorn starts N processes that each import this factory, so the settings travel in the
environment (the same ``PUNCTUAL_*`` variables as always, plus the configuration file's
path) and every process assembles its own system.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from punctual import bootstrap
from punctual.adapters.observability import configure_logging
from punctual.settings import load_settings

CONFIG_FILE_VARIABLE = "PUNCTUAL_CONFIG_FILE"


def create_app() -> FastAPI:
    settings = load_settings(os.environ.get(CONFIG_FILE_VARIABLE) or None)
    # Each API process writes its own lines, as the supervising ``serve`` does.
    configure_logging(**settings.logging.model_dump())
    system = bootstrap.build(settings)
    app = system.http_app()

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        system.close()

    app.router.lifespan_context = lifespan
    return app
