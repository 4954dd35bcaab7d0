"""What every use case shares: the services handed in, the idempotent mutation runner and its
audit entry, paging, the public projections, admission limits.
"""
