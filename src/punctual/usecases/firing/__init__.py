"""Keeping the firing driver in step with the store: Temporal Schedules' fires and skips,
switching drivers, reconciliation (CR-6, CR-7).
"""
