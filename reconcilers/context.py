"""What one plan knows of its MPIJob, computed once (docs/architecture.md section 3).

`JobContext` is frozen: every policy module reads the same values, and none can depend on another
having run first. It is built after validation, so nothing here meets a spec `plan()` refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

from reconcilers import backend, discovery, names, ownership
from reconcilers.ownership import JobPods
from reconcilers.types import Config, Inputs, Obj, Observed


@dataclass(frozen=True)
class JobContext:
    inputs: Inputs
    job: Obj  # the MPIJob with its defaults filled in (reconcilers/defaults.py)
    key: str  # "<namespace>/<name>"
    namespace: str
    now: datetime
    config: Config  # worker_backend: this MPIJob's own backend, whatever the flag says now
    choice: backend.Choice
    observed: Observed
    pods: JobPods
    stale_children: tuple[Obj, ...]
    # id(child) -> (child, owned()): asked a dozen times per plan of the same few observed children,
    # which the plan never changes; the entry holds the child, so that its id is not reused meanwhile
    _owned: dict[int, tuple[Obj, bool]] = field(default_factory=dict, compare=False, repr=False)

    @property
    def workers(self) -> Obj | None:
        """The worker object of this MPIJob's backend, as observed."""
        return self.choice.workers

    @property
    def launcher(self) -> Obj | None:
        return self.observed.launcher

    @property
    def spec(self) -> Obj:
        return self.job["spec"]

    @property
    def run_policy(self) -> Obj:
        return self.job["spec"]["runPolicy"]

    def owned(self, obj: Obj | None) -> bool:
        if obj is None:
            return False
        known = self._owned.get(id(obj))
        if known is None or known[0] is not obj:
            known = self._owned[id(obj)] = (obj, ownership.owned(obj, self.job))
        return known[1]


def choose_backend(inputs: Inputs, job: Obj) -> tuple[backend.Choice, Config]:
    """The backend this MPIJob started with (reconcilers/backend.py), and the config that uses it."""
    obs = inputs.observed
    choice = backend.choose(job, [obs.workers, obs.other_workers], obs.config_map, inputs.config.worker_backend,
                            elastic=discovery.is_elastic(job))
    return choice, replace(inputs.config, worker_backend=choice.backend)


def job_key(job: Obj) -> str:
    return f"{names.job_namespace(job)}/{names.job_name(job)}"


def build(inputs: Inputs, job: Obj, choice: backend.Choice, config: Config) -> JobContext:
    return JobContext(
        inputs=inputs, job=job, key=job_key(job), namespace=names.job_namespace(job), now=inputs.now,
        config=config, choice=choice, observed=inputs.observed,
        pods=ownership.our_pods(job, inputs.observed, choice.workers),
        stale_children=ownership.stale_children(job, inputs.observed))
