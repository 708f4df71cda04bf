"""Test helpers: MPIJob factories, a JSON merge patch, and `apply_plan`, a pure simulation of what the
executor does with a Plan against the observed state (creates, merge patches, deletes, status)."""

from __future__ import annotations

import copy
import itertools
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from reconcilers import names as n
from reconcilers.failure.evidence import LauncherReport
from reconcilers.plan import plan
from reconcilers.types import Config, Inputs, Observed, Plan, SSHKey
from testsupport import builders

NOW = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
BACKENDS = ("job", "statefulset")
_uids = itertools.count(1)


def at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


class KeyGen:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> SSHKey:
        self.calls += 1
        return SSHKey(f"-----BEGIN EC PRIVATE KEY-----\nkey{self.calls}\n-----END EC PRIVATE KEY-----\n",
                      f"ecdsa-sha2-nistp521 AAAA{self.calls}\n")


def container(name: str, **kw: Any) -> dict:
    return {"name": name, "image": builders.IMAGE, **kw}


def mpijob(name: str = "pi", ns: str = "ns", workers: int | None = 2, *, spec: dict | None = None,
           run_policy: dict | None = None, uid: str = "uid-pi") -> dict:
    """The unit tests' MPIJob (testsupport.builders): as the API server would hold it, no defaults."""
    return builders.mpijob(name, namespace=ns, uid=uid, workers=workers, run_policy=run_policy, spec=spec,
                           launcher=builders.container("launcher", ["mpirun"], ["-n", "2", "/home/mpiuser/pi"]),
                           worker=builders.container("worker", ["/usr/sbin/sshd"], ["-De"]))


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


SLOTS = {"Service": "service", "ConfigMap": "config_map", "Secret": "secret"}


def slot_of(job: dict, kind: str, name: str) -> str | None:
    if kind in SLOTS:
        return SLOTS[kind]
    if kind == "PodGroup":
        return "pod_group"
    if kind == "Workload":
        return "workload"
    if kind == "NetworkPolicy":
        return "legacy_network_policy" if name == n.legacy_network_policy_name(job) else "network_policy"
    if name == n.launcher_name(job):
        return "launcher"
    if name == n.worker_name(job):
        return "workers"
    return None


def apply_plan(job: dict, observed: Observed, p: Plan) -> tuple[dict, Observed]:
    """What the API server would hold after the executor applied `p` (no controllers run)."""
    job = copy.deepcopy(job)
    obs = copy.deepcopy(observed)
    for c in p.creates:
        obj = copy.deepcopy(c.obj)
        obj["metadata"]["uid"] = f"uid-{next(_uids)}"
        slot = slot_of(job, obj["kind"], obj["metadata"]["name"])
        assert slot is not None, obj["metadata"]["name"]
        assert getattr(obs, slot) is None, f"create of an existing {slot}"
        setattr(obs, slot, obj)
    for pa in p.patches:
        if pa.ref.kind == "Pod":
            obs.pods = [merge_patch(x, pa.patch) if x["metadata"]["name"] == pa.ref.name else x for x in obs.pods]
            continue
        slot = slot_of(job, pa.ref.kind, pa.ref.name)
        assert slot is not None and getattr(obs, slot) is not None, pa
        setattr(obs, slot, merge_patch(getattr(obs, slot), pa.patch))
    for d in p.deletes:
        if d.ref.kind == "Pod":
            obs.pods = [x for x in obs.pods if x["metadata"]["name"] != d.ref.name]
            continue
        slot = slot_of(job, d.ref.kind, d.ref.name)
        assert slot is not None and getattr(obs, slot) is not None, d
        setattr(obs, slot, None)
    if p.status is not None:
        job["status"] = copy.deepcopy(p.status)
    return job, obs


def run(job: dict, observed: Observed | None = None, backend: str = "job", now: datetime = NOW,
        keygen: KeyGen | None = None, reports: dict | None = None, gone_workers: tuple = (),
        **config: Any) -> Plan:
    """One plan; `reports` (launcher pod uid -> LauncherReport) and `gone_workers` as the controller
    would pass them (reconcilers/failure/evidence.py, reconcilers/failure/workerloss.py)."""
    return plan(Inputs(job, observed or Observed(), Config(worker_backend=backend, **config), now,
                       keygen or KeyGen(), reports=reports or {}, gone_workers=gone_workers))


def converge(job: dict, observed: Observed | None = None, backend: str = "job", now: datetime = NOW,
             rounds: int = 4, **config: Any) -> tuple[dict, Observed, list[Plan]]:
    """Plans and applies until a plan has no writes; fails if that takes more than `rounds`."""
    obs = observed or Observed()
    plans = []
    for _ in range(rounds):
        p = run(job, obs, backend, now, **config)
        plans.append(p)
        if p.writes == 0:
            return job, obs, plans
        job, obs = apply_plan(job, obs, p)
    raise AssertionError(f"no convergence in {rounds} rounds: last plan {plans[-1]}")


# -- what the cluster's controllers would do --------------------------------------------------------


def pod(job: dict, role: str, index: int = 0, phase: str = "Running", backend: str = "job", **status: Any) -> dict:
    owner = n.launcher_name(job) if role == "launcher" else n.worker_name(job)
    if role == "launcher":
        name, hostname = f"{owner}-abc{index}", n.launcher_name(job)
        kind = "Job"
    elif backend == "statefulset":
        name = hostname = f"{owner}-{index}"
        kind = "StatefulSet"
    else:
        name, hostname = f"{owner}-{index}-xyz", f"{owner}-{index}"
        kind = "Job"
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": n.job_namespace(job), "uid": f"pod-{name}",
                         "labels": n.job_labels(job, role),
                         "ownerReferences": [{"apiVersion": "batch/v1" if kind == "Job" else "apps/v1",
                                              "kind": kind, "name": owner, "controller": True}]},
            "spec": {"hostname": hostname, "subdomain": n.service_name(job)},
            "status": {"phase": phase, **status}}


def exited_0(observed: Observed) -> tuple[Observed, dict]:
    """The launcher pods that run have exited 0, and their logs were read and show no lost daemon: the
    observed state and the reports as the controller hands them to the plan. Every Open MPI exit 0
    waits for its launcher's log (reconcilers/failure/workerloss.py judge, docs/architecture.md 9.1)."""
    pods = [with_status(p, phase="Succeeded") if p["metadata"]["labels"].get(n.JOB_ROLE_LABEL) == "launcher"
            and p["status"].get("phase") == "Running" else p for p in observed.pods]
    reports = {p["metadata"]["uid"]: LauncherReport(p["metadata"]["uid"]) for p in pods
               if p["metadata"]["labels"].get(n.JOB_ROLE_LABEL) == "launcher"}
    return replace(observed, pods=pods), reports


def with_status(obj: dict | None, **status: Any) -> dict:
    assert obj is not None
    obj = copy.deepcopy(obj)
    obj["status"] = {**(obj.get("status") or {}), **status}
    return obj


def workers_ready(observed: Observed, ready: int) -> Observed:
    w = observed.workers
    key = "readyReplicas" if w["kind"] == "StatefulSet" else "ready"
    return replace(observed, workers=with_status(w, **{key: ready}))


def job_finished(job_obj: dict, ctype: str, reason: str = "", when: str = "2025-01-01T12:05:00Z",
                 **status: Any) -> dict:
    cond = {"type": ctype, "status": "True", "reason": reason, "message": f"{reason or ctype} happened",
            "lastTransitionTime": when}
    extra = {"completionTime": when} if ctype == "Complete" else {}
    return with_status(job_obj, conditions=[cond], **extra, **status)


def running_state(job: dict, backend: str, workers: int = 2) -> tuple[dict, Observed]:
    """An MPIJob converged, its workers Ready and its launcher pod Running; status Running."""
    job, obs, _ = converge(job, backend=backend)
    obs = workers_ready(obs, workers)
    obs = replace(obs, launcher=with_status(obs.launcher, active=1, ready=1),
                  pods=[pod(job, "launcher")] + [pod(job, "worker", i, backend=backend) for i in range(workers)])
    job, obs, _ = converge(job, obs, backend)
    return job, obs
