"""Drivers: what fires schedules besides the SQL runner (``ports.driver``)."""
