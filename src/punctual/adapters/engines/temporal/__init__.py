"""The Temporal engine: runs execute as Temporal workflow executions (docs/decisions/0003).

Deliberately empty of imports: the Temporal workflow sandbox re-imports the workflow
module and its parents, so this package's ``__init__`` must stay free of the client,
the store and the executor. Import the parts from their modules:

* ``engine.TemporalEngine`` — the Engine port, used by the runner and the run use cases;
* ``worker.run_temporal_worker`` / ``worker.TemporalWorker`` — the process that executes runs;
* ``sync.sync_runs`` / ``sync.SyncLoop`` — brings Temporal's view of runs back into the store;
* ``workflow.PunctualRun`` — the one generic Temporal workflow.
"""
