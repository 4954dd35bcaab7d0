"""Protocols whose docstrings are the specification every adapter must meet."""
