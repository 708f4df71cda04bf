"""The operator process: CLI, work queue, MPIJob controller, executor, leader election, metrics."""
