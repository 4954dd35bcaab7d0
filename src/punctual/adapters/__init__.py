"""Implementations of the ports and the HTTP interface."""
