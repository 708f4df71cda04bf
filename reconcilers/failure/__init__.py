"""The failure policy: what a failed or cut-short run means and how it runs again, side by side as the
Job controller keeps its policies (docs/architecture.md sections 9.1 and 11).

- `workerloss.py`: a worker lost while a launcher pod ran, and the verdict on that pod's exit 0;
- `evidence.py`: what the launcher's own log says, and the MPIJob's worker-loss policy;
- `retries.py`: the launcher's failed attempts told apart by cause and counted against backoffLimit;
- `ledger.py`: their count, kept on the launcher Job (and carried to one made afresh);
- `restartpolicy.py`: how the launcher pod runs again (a new pod, or its container in place).

Nothing is imported here, so that a module of the planner can import one of these without the rest.
"""
