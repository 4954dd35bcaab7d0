"""Route modules, one per resource family."""
