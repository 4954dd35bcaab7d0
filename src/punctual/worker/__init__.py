"""The processes that run bodies and fire schedules: the local worker (``local``), the
Temporal worker with its activity and the loop that brings Temporal's view of runs back
into the store (``temporal``), and the Temporal Schedules fire worker (``schedules``).

They sit above the adapters: each drives use cases and plugs adapters (the executor, a
Temporal client) into them, as the runner does for dispatch; the adapters themselves only
implement ports.
"""
