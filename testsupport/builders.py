"""MPIJob manifests for every kind of test: one shape, presets for where each runs.

- `mpijob`: the MPIJob itself, launcher and workers from `container()`s.
- `simulated_mpijob`: for kwok pods (the e2e tests, the benchmarks): the annotations of
  hack/kwok/kwok.yaml's stages say how long the launcher 'runs' and how it exits.
Label names are reconcilers.names'; nothing here talks to a cluster.
"""

from __future__ import annotations

import copy
from typing import Any

IMAGE = "mpioperator/mpi-pi:openmpi"
# What the simulated pods do (hack/kwok/kwok.yaml): run for a duration, then exit with a code;
# fail after a duration; exit with a code when deleted (a worker without it plays sshd: exit 0).
RUN_FOR = "sim.mpijob-operator.dev/run-for"
EXIT_CODE = "sim.mpijob-operator.dev/exit-code"
FAIL_AFTER = "sim.mpijob-operator.dev/fail-after"
EXIT_ON_DELETE = "sim.mpijob-operator.dev/exit-code-on-delete"
SMALL = {"cpu": "10m"}


def container(name: str = "c", command: list[str] | None = None, args: list[str] | None = None, *,
              image: str = IMAGE, requests: dict | None = None, limits: dict | None = None) -> dict:
    c: dict[str, Any] = {"name": name, "image": image}
    if command is not None:
        c["command"] = list(command)
    if args is not None:
        c["args"] = list(args)
    resources = {k: dict(v) for k, v in (("requests", requests), ("limits", limits)) if v}
    if resources:
        c["resources"] = resources
    return c


def launcher_container(**kw: Any) -> dict:
    return container(kw.pop("name", "c"), kw.pop("command", ["mpirun", "/pi"]), requests=kw.pop("requests", SMALL),
                     **kw)


def worker_container(**kw: Any) -> dict:
    return container(kw.pop("name", "c"), kw.pop("command", ["/usr/sbin/sshd", "-De"]),
                     requests=kw.pop("requests", SMALL), **kw)


def _replica(count: int, c: dict, annotations: dict | None) -> dict:
    template: dict[str, Any] = {"spec": {"containers": [copy.deepcopy(c)]}}
    if annotations:
        template["metadata"] = {"annotations": dict(annotations)}
    return {"replicas": count, "template": template}


def mpijob(name: str = "pi", *, namespace: str | None = None, uid: str | None = None, labels: dict | None = None,
           workers: int | None = 2, slots: int = 1, launcher: dict | None = None, worker: dict | None = None,
           launcher_annotations: dict | None = None, worker_annotations: dict | None = None,
           policy: str | None = None, run_policy: dict | None = None, spec: dict | None = None) -> dict:
    """An MPIJob of one launcher and `workers` workers (None: no Worker replica spec at all).
    `spec` entries are set over the built spec last."""
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    if uid is not None:
        meta["uid"] = uid
    if labels:
        meta["labels"] = dict(labels)
    replicas = {"Launcher": _replica(1, launcher or launcher_container(), launcher_annotations)}
    if workers is not None:
        replicas["Worker"] = _replica(workers, worker or worker_container(), worker_annotations)
    body: dict[str, Any] = {"slotsPerWorker": slots, "runPolicy": dict(run_policy or {}),
                            "mpiReplicaSpecs": replicas}
    if policy is not None:
        body["launcherCreationPolicy"] = policy
    body.update(copy.deepcopy(spec or {}))
    return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": meta, "spec": body}


def simulated_mpijob(name: str, *, workers: int = 2, launcher_runs: str | None = "3s", launcher_exit: int = 0,
                     policy: str = "WaitForWorkersReady", run_policy: dict | None = None, slots: int = 1,
                     labels: dict | None = None, launcher_log: str | None = None) -> dict:
    """An MPIJob for kwok pods: the launcher 'runs' `launcher_runs` then exits `launcher_exit`
    (None: it runs until deleted); workers run until stopped. `launcher_log`: what its log shows,
    kwok's simulated logs by container name (hack/kwok/logs/README.md: "cut-short", "chatty-cut-short");
    None: a run whose ranks finished."""
    # mpirun stopped by SIGTERM exits 1 (seen on the real node: the image's mpirun in a deleted pod);
    # a worker with no annotation plays sshd, which exits 0 when its pod is deleted.
    launcher_ann = {EXIT_ON_DELETE: "1"}
    if launcher_runs is not None:
        launcher_ann = {RUN_FOR: launcher_runs, EXIT_CODE: str(launcher_exit)}
    launcher = launcher_container(name=f"sim-{launcher_log}") if launcher_log else None
    return mpijob(name, workers=workers, slots=slots, labels=labels, policy=policy, launcher=launcher,
                  launcher_annotations=launcher_ann,
                  run_policy={"cleanPodPolicy": "Running", **(run_policy or {})})


def refuse_jobs_policy(name: str, namespace: str, who: str) -> dict:
    """A ValidatingAdmissionPolicy and its binding (as a List) that refuse, with 403 Forbidden, every
    Job named blocked-* created in `namespace`: what a webhook or a quota that refuses does, a
    transient refusal for the operator (Blocked, retried with backoff)."""
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {"failurePolicy": "Fail",
                 "matchConstraints": {"resourceRules": [{"apiGroups": ["batch"], "apiVersions": ["v1"],
                                                         "operations": ["CREATE"], "resources": ["jobs"]}]},
                 "validations": [{"expression": "!object.metadata.name.startsWith('blocked-')",
                                  "message": f"blocked by {who}'s admission policy", "reason": "Forbidden"}]}}
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchLabels": {
                     "kubernetes.io/metadata.name": namespace}}}}}
    return {"apiVersion": "v1", "kind": "List", "items": [policy, binding]}
