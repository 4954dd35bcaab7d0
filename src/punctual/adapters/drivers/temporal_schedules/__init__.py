"""The Temporal Schedules driver (SPEC CR-6): each punctual schedule is also a Temporal
Schedule whose action starts a punctual fire workflow; the store stays the source of truth."""
