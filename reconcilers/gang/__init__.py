"""Gang scheduling: every pod of an MPIJob placed at once or none (docs/architecture.md section 8).

- `lifecycle.py`: the gang objects' place in an MPIJob's life (created with it, released once its pods
  are off their nodes, made afresh on resume) and the WaitingForGang condition;
- `gang/podgroup.py`: scheduler-plugins' and Volcano's PodGroup;
- `gang/workload_gang.py`: Kubernetes' own Workload API (a Workload and its PodGroup).

Nothing is imported here, so that a module of the planner can import one of these without the rest.
"""
