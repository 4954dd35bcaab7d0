"""punctual: a durable scheduler for workflow runs.

``App``, ``Canceled``, ``Occurrence`` and ``RunContext`` are imported on first use, so a
process that never defines workflows (the CLI over HTTP, the typed client) does not load
what they need.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from punctual.workflows import App, Canceled, Occurrence, RunContext

__all__ = ["App", "Canceled", "Occurrence", "RunContext"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in __all__:
        from punctual import workflows

        return getattr(workflows, name)
    raise AttributeError(f"module 'punctual' has no attribute {name!r}")
