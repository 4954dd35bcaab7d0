"""The local engine: workers that claim runs from the store and execute them in child processes."""
