"""punctual: a durable scheduler for workflow runs."""

from punctual.workflows import App, Canceled, RunContext

__all__ = ["App", "Canceled", "RunContext"]
__version__ = "0.1.0"
