"""Runs: what users do to them, what workers record, workflow definitions, follow-through of
every run end (WF-*, CR-4, CR-5).
"""
