"""Tenants, members and tokens, codec keys, holds, retention and the health report (SEC-*,
RT-*, DP-4).
"""
