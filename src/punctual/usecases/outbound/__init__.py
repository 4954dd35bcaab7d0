"""What leaves punctual: the outbox of notifications and webhook deliveries, the personal feed,
webhooks (CR-4).
"""
