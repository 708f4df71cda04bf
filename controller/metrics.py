"""The operator's Prometheus metrics (names as the Kubeflow MPI Operator exports them)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

jobs_created = Counter("mpi_operator_jobs_created", "MPIJobs whose children the operator created")
jobs_successful = Counter("mpi_operator_jobs_successful", "MPIJobs that ended Succeeded")
jobs_failed = Counter("mpi_operator_jobs_failed", "MPIJobs that ended Failed")
job_info = Gauge("mpi_operator_job_info", "One series per MPIJob the operator runs", ["launcher", "namespace"])
is_leader = Gauge("mpi_operator_is_leader", "1 while this replica holds the leader Lease")
reconcile_duration = Histogram(
    "mpi_operator_reconcile_duration_seconds",
    "Time to plan and apply one MPIJob",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
reconcile_errors = Counter("mpi_operator_reconcile_errors", "Reconciles that ended in an error", ["reason"])
api_writes = Counter("mpi_operator_api_writes", "Writes the executor sent", ["verb", "kind"])
# For the alert "an MPIJob stuck without progress" (manifests/monitoring/prometheusrule.yaml): one
# series per active MPIJob (not finished, not suspended) that is not Running, with the time since
# which it has not been; removed once it runs, ends, is suspended or deleted.
job_not_running_since = Gauge("mpi_operator_job_not_running_since_timestamp_seconds",
                              "Since when an active MPIJob has not been Running (unix time)",
                              ["namespace", "mpijob"])
# The grants the operator found missing at start-up (controller/access.py), each with what it does
# about it: "refuse" (not started), "held" (every MPIJob Blocked) or the feature turned off.
rbac_missing = Gauge("mpi_operator_rbac_missing", "1 per grant the operator's RBAC lacks (found at start-up)",
                     ["verb", "resource", "group", "effect"])
# Issue 51 (docs/operations.md, "Metrics"): why MPIJobs fail and wait, and how long they take to run.
# `reason` is one of a bounded set: reconcilers/explain/causes.py REASONS for failures (each Warning
# Event MPIJobRestarting or MPIJobFailed), the Waiting condition's reasons for waits.
failures = Counter("mpi_operator_failures", "Launcher attempts failed, workers lost and MPIJobs failed, by cause",
                   ["reason"])
waits = Counter("mpi_operator_waits", "Causes that held an MPIJob from running (the condition Waiting), by reason",
                ["reason"])
_START_BUCKETS = (1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600)
creation_to_running = Histogram("mpi_operator_job_creation_to_running_seconds",
                                "From an MPIJob's creation to its first Running", buckets=_START_BUCKETS)
restart_to_running = Histogram("mpi_operator_job_restart_to_running_seconds",
                               "From Restarting (a worker lost, a launcher failed) to Running again",
                               buckets=_START_BUCKETS)
