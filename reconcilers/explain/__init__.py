"""Every MPIJob explains itself (docs/operations.md, "Why is my MPIJob not running?"): what holds it
before it runs (`waiting.py`, the condition `Waiting`, from `pods.py`'s holds of each pod), what ended
a pod of it (`ends.py`, for the Restarting, Failed and worker-loss messages), the failure's cause as a
metric label (`causes.py`); `facts.py` names a pod. Pure functions over the pods the operator caches.
"""
