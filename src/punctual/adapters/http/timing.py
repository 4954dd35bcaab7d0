"""How long HTTP requests take, by route template and status (SPEC OP-4).

``RequestTiming`` wraps the whole application, so a request refused on its way in (a
body over the limit, the ``/internal`` guard) is timed too. The ``route`` label is the
template of the route that answered (``/v1/tenants/{tenant}/runs/{run_id}``), as the
router recorded it in the request's scope, behind the path of the mount it is in
(``/internal``); never the raw path, so no tenant and no id ever becomes a label value.
A mount that answers without routes of its own (static files) is ``<mount>/{path}``; a
request no route answered (an unknown path, a body refused before routing) is
``UNMATCHED``, and a method outside HTTP's usual ones ``OTHER``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Protocol

from starlette.routing import BaseRoute, Match, Mount, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

UNMATCHED = "<unmatched>"
"""The route label of a request no route answered."""
OTHER = "OTHER"
"""The method label of a method outside ``METHODS``."""
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class Observer(Protocol):
    """A ``prometheus_client.Histogram`` labelled ``method``, ``route``, ``status``."""

    def labels(self, method: str, route: str, status: str) -> Any: ...


class RequestTiming:
    def __init__(self, app: ASGIApp, histogram: Observer, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        self.histogram = histogram
        self.routes = routes
        """The application's own routes: asked only when routing recorded none (FastAPI
        records its API routes, not every plain route such as ``/openapi.json``)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # As it arrives: routing writes the route and the mounts' paths into the scope.
        arrived = {k: scope[k] for k in ("type", "method", "path") if k in scope}
        arrived["root_path"] = scope.get("root_path", "")
        status = 500  # what the client gets if the app raises before it answers
        began = time.perf_counter()

        async def noting_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, noting_status)
        finally:
            method = arrived["method"] if arrived["method"] in METHODS else OTHER
            route = route_template(scope, arrived["root_path"]) or self._plain_route(arrived)
            self.histogram.labels(method, route, str(status)).observe(time.perf_counter() - began)

    def _plain_route(self, arrived: Scope) -> str:
        for route in self.routes:
            if isinstance(route, Route) and route.matches(arrived)[0] is not Match.NONE:
                return route.path
        return UNMATCHED


def route_template(scope: Scope, root_path: str = "") -> str | None:
    """The template of the route that answered, from the scope as routing left it: the
    route (``scope["route"]``) and the mounts' paths it went through (what routing added
    to ``root_path``, which never holds a path parameter here: no mount has one). None
    when routing recorded nothing."""
    mounted = str(scope.get("root_path", ""))[len(root_path) :]
    route = scope.get("route")
    path = getattr(route, "path", None)
    if isinstance(path, str) and not isinstance(route, Mount):
        return mounted + path
    if mounted:
        return f"{mounted}/{{path}}"
    return None
