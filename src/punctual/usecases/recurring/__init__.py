"""Recurring schedules: their lifecycle, controls, the generation pass, occurrence rows,
ownership transfer (RS-*).
"""
