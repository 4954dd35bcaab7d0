"""The Temporal engine's worker: ``worker.TemporalWorker`` executes runs as Temporal
activities (``activity.RunExecutor``); ``sync.sync_runs`` / ``sync.SyncLoop`` bring
Temporal's view of runs back into the store."""
