"""Store adapters."""
