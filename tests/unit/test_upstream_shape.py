"""plan() for an MPIJob the upstream operator started (docs/architecture.md section 6.3): run out on
upstream's shape, with its launcher Job and bare worker pods, neither a second launcher nor workers."""

from __future__ import annotations

import copy

import pytest

from reconcilers import desired as dz
from reconcilers import names as n
from reconcilers import status as st
from reconcilers.defaults import with_defaults
from reconcilers.types import Config, Observed
from tests.unit.sim import BACKENDS, job_finished, mpijob, run, with_status

pytestmark = pytest.mark.parametrize("backend", BACKENDS)


def upstream_state(job: dict) -> Observed:
    """What the upstream operator made: our shared children (same names), a launcher Job without our
    template hash, and bare worker pods controlled by the MPIJob, Running and Ready."""
    full = with_defaults(job)
    cfg = Config()
    launcher = dz.launcher(full, cfg)
    launcher["metadata"].pop("annotations")
    owner = dz.owner_reference(full)
    pods = []
    for i in range(2):
        pods.append({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": f"pi-worker-{i}", "namespace": "ns", "uid": f"w{i}",
                                  "ownerReferences": [copy.deepcopy(owner)],
                                  "labels": n.job_labels(full, n.ROLE_WORKER)},
                     "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
    return Observed(service=dz.service(full), config_map=dz.config_map(full, cfg), secret=None,
                    launcher=with_status(launcher, active=1, ready=1), workers=None, pods=pods)


def test_no_second_launcher_and_no_workers(backend):
    job = mpijob()
    obs = upstream_state(job)
    obs.secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "pi-ssh", "namespace": "ns",
                  "labels": n.job_labels(with_defaults(job)), "ownerReferences": obs.pods[0]["metadata"][
                      "ownerReferences"]}, "data": {"ssh-privatekey": "a", "ssh-publickey": "b"}}
    p = run(job, obs, backend)
    assert not [c for c in p.creates if c.obj["kind"] in ("Job", "StatefulSet")]
    assert not [x for x in p.patches if x.ref.kind == "Job"] and not p.deletes
    assert st.is_true(p.status, st.CREATED)


def test_the_end_stops_the_bare_workers(backend):
    job = mpijob()
    obs = upstream_state(job)
    obs.launcher = job_finished(obs.launcher, "Complete")
    p = run(job, obs, backend)
    assert st.is_true(p.status, st.SUCCEEDED)
    assert sorted(d.ref.name for d in p.deletes) == ["pi-worker-0", "pi-worker-1"]
    assert all(d.uid for d in p.deletes), "uid preconditions"
