"""The local engine: starts runs by recording them in the store, for workers
(``punctual.worker.local``) to claim and execute in child processes."""
