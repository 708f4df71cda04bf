"""Every MPIJob explains itself (docs/operations.md, "Why is my MPIJob not running?"): what holds it
before it runs (`waiting.py`, the condition `Waiting`) and what ended a pod of it (`pods.py`, for the
Restarting, Failed and worker-loss messages). Pure functions over the pods the operator caches.
"""
