"""Which worker backend (Indexed Job or StatefulSet) runs one MPIJob's workers.

An MPIJob keeps the backend it started with until it ends, whatever `--worker-backend` says now
(docs/architecture.md, "Worker backends"), so an operator restarted with the other flag never
makes a second set of workers for a job in flight. In order:
1. the worker object that exists and this MPIJob controls (a Job or a StatefulSet
   `<name>-worker`); if both exist (left by an operator before this rule), the one the ConfigMap
   records, else the older one;
2. the backend recorded on the MPIJob's ConfigMap (BACKEND_ANNOTATION, written when the ConfigMap is
   created): it keeps the choice while the workers are being recreated;
3. the MPIJob's own annotation BACKEND_ANNOTATION (a per-MPIJob choice over the flag);
4. for an elastic MPIJob (reconcilers/discovery.py is_elastic), the StatefulSet: it replaces a lost
   worker alone, where the Job backend recreates the whole worker Job (an Indexed Job never runs a
   completed index again), so an elastic launcher would see every worker go at once and horovodrun
   would blacklist every host (docs/architecture.md section 9.2);
5. the operator's `--worker-backend`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reconcilers import names
from reconcilers.types import Obj

BACKENDS = ("job", "statefulset")
_KIND_OF = {"job": "Job", "statefulset": "StatefulSet"}


@dataclass(frozen=True)
class Choice:
    backend: str
    workers: Obj | None  # the worker object of that backend, if observed
    stray: Obj | None  # an owned worker object of the other backend: a second set to remove


def backend_of_kind(obj: Any) -> str | None:
    kind = obj.get("kind") if isinstance(obj, dict) else None
    return next((b for b, k in _KIND_OF.items() if k == kind), None)


def annotation(obj: Any) -> str | None:
    """The backend named by BACKEND_ANNOTATION on `obj`, if it names one."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    ann = meta.get("annotations") if isinstance(meta, dict) else None
    value = ann.get(names.BACKEND_ANNOTATION) if isinstance(ann, dict) else None
    return value if value in BACKENDS else None


def _created(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("creationTimestamp") or "")


def choose(mpijob: Obj, candidates: list[Obj | None], config_map: Obj | None, default: str,
           elastic: bool = False) -> Choice:
    """The backend for `mpijob`, given the worker objects found under its worker name (either kind),
    its ConfigMap (if it controls it), the operator's default, and whether its launcher is elastic."""
    owned = [o for o in candidates if o is not None and names.is_controlled_by(o, mpijob)]
    recorded = annotation(config_map) if config_map is not None and names.is_controlled_by(config_map, mpijob) else None
    if owned:
        owned.sort(key=lambda o: (backend_of_kind(o) != recorded, _created(o)))
        keep = owned[0]
        backend = backend_of_kind(keep) or default
        stray = next((o for o in owned[1:] if backend_of_kind(o) != backend), None)
        return Choice(backend, keep, stray)
    backend = recorded or annotation(mpijob) or ("statefulset" if elastic else default)
    found = next((o for o in candidates if o is not None and backend_of_kind(o) == backend), None)
    return Choice(backend, found, None)
