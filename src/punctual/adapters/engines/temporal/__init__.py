"""The Temporal engine: runs execute as Temporal workflow executions (docs/decisions/0003).

Deliberately empty of imports: the Temporal workflow sandbox re-imports the workflow
module and its parents, so this package's ``__init__`` must stay free of the client,
the store and the executor. Import the parts from their modules:

* ``engine.TemporalEngine`` — the Engine port, used by the runner and the run use cases;
* ``workflow.PunctualRun`` — the one generic Temporal workflow.

The process that executes runs and the loop that syncs them are in ``punctual.worker.temporal``.
"""
