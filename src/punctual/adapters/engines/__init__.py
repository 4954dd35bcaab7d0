"""Engines: where runs execute."""
