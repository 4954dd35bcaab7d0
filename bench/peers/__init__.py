"""Side-by-side benchmarks against other Python schedulers and queues (see bench/README.md)."""
