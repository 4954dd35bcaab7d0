"""The punctual command line: a process entry point above the composition root."""
