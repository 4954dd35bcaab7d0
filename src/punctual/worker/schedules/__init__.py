"""The Temporal Schedules driver's fire worker (SPEC CR-6): ``worker.FireWorker`` serves the
fire workflow, whose activities (``activities.FireActivities``) fire through the store."""
