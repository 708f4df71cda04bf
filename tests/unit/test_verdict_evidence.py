"""The verdict on an Open MPI launcher's exit 0 read from the launcher's own log, whatever the operator
happened to see (issue 41, docs/architecture.md section 9.1): `no_loss_seen` (item 1),
`failed_before_launch` (item 6), `discover_mention` and the self-retrying launcher (item 7). The
helpers are test_worker_loss.py's."""

from __future__ import annotations

from dataclasses import replace

import pytest

from reconcilers import context, discovery
from reconcilers import status as st
from reconcilers.context import JobContext
from reconcilers.defaults import with_defaults
from reconcilers.failure import evidence
from reconcilers.failure import workerloss as wl
from reconcilers.types import Config, Inputs, Observed
from tests.unit.sim import (
    BACKENDS,
    at,
    converge,
    job_finished,
    mpijob,
    pod,
    run,
    running_state,
    with_status,
    workers_ready,
)
from tests.unit.test_worker_loss import (
    CLEAN,
    CUT,
    PRRTE_LINE,
    UNREADABLE,
    assert_clean_success,
    assert_unread_success,
    cond,
    exits,
    judged,
    launcher,
    open_mpi,
    step,
    t,
    verdict,
)

# -- no_loss_seen: ranks cut short while no worker pod ended ------------------------------------------------------


def _restarted_in_place(job: dict, backend: str, index: int) -> dict:
    """A worker whose container was restarted in place (StatefulSet pods are restartPolicy Always):
    the pod never ended, it only counts a restart."""
    return pod(job, "worker", index, backend=backend, containerStatuses=[{
        "name": "worker", "restartCount": 1, "ready": True, "state": {"running": {"startedAt": t(30)}},
        "lastState": {"terminated": {"exitCode": 137, "reason": "Error", "finishedAt": t(29)}}}])


def _node_lost(job: dict, backend: str, index: int) -> dict:
    """A worker on a node that stopped answering: Running, NotReady, until the 300 s toleration."""
    return pod(job, "worker", index, backend=backend,
               conditions=[{"type": "Ready", "status": "False", "reason": "NodeNotReady"}])


HOW = {
    "node_lost": _node_lost,
    "restarted_in_place": _restarted_in_place,
    # a standby dropped the delete before it led: only the replacement is cached, no gone_workers
    "replaced_during_failover": lambda job, backend, index: pod(job, "worker", index, backend=backend),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("how", sorted(HOW))
@pytest.mark.parametrize("log,want", [(CUT, "Failed/WorkerLostDuringRun"), (CLEAN, "Succeeded"),
                                      (UNREADABLE, "Succeeded")])
def test_no_loss_seen_an_exit_0_is_judged_by_the_launchers_log(backend, how, log, want):
    """Worker 0 is lost in a way no pod shows as ended; PRRTE loses its daemon and exits 0. The exit 0
    waits for the launcher's log, read once: a lost daemon in it fails the run although no loss was
    seen; a clean log is a plain success; a log that cannot be read is a success said so, with a
    Warning Event (a healthy run is not failed because its log was rotated away). (Before: Succeeded
    at once, the log never read.)"""
    job, obs = running_state(open_mpi(), backend)
    a = launcher(job, 0)
    obs = replace(obs, pods=[a, HOW[how](job, backend, 0), pod(job, "worker", 1, backend=backend)])
    job, obs, _ = step(job, obs, backend, 31)
    assert cond(job, wl.WORKER_LOST) is None, "nothing the operator saw is a loss"
    p = judged(job, obs, backend, launcher(job, 0, end=40), now=41, log=log)
    assert verdict(p) == want, p.status
    if log == CUT:
        message = cond(p.status, st.FAILED)["message"]
        assert "no worker pod was seen to end" in message and PRRTE_LINE in message, message
        assert evidence.WORKER_LOSS_ANNOTATION in message
    elif log == CLEAN:
        assert_clean_success(p)
    else:
        assert_unread_success(p)


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_loss_seen_a_launcher_pod_gone_before_its_log_was_read_is_a_success_said_so(backend):
    """The launcher Job is Complete and its pod already gone (deleted by hand): no log to read, no loss
    seen: a success on its exit code, said so, with a Warning Event."""
    job, obs = running_state(open_mpi(), backend)
    obs = replace(obs, launcher=job_finished(obs.launcher, "Complete", when=t(40), succeeded=1, active=0),
                  pods=[w for w in obs.pods if w["metadata"]["labels"] != launcher(job, 0)["metadata"]["labels"]])
    p = exits(job, obs, backend, launcher(job, 0, end=40), now=41)
    assert [r.pod for r in p.read_logs] == ["pi-launcher-abc0"]  # the pod in the cache: read it
    gone = replace(obs, pods=[w for w in obs.pods if "launcher" not in w["metadata"]["name"]])
    assert_unread_success(run(job, gone, backend, now=at(41)))


def test_no_loss_seen_other_mpis_and_the_exit_code_policy_read_nothing():
    """MPICH's mpirun fails on a lost host, and ExitCode trusts the exit: neither reads a log."""
    for job in (mpijob(spec={"mpiImplementation": "MPICH"}),
                open_mpi(annotations={evidence.WORKER_LOSS_ANNOTATION: evidence.EXIT_CODE})):
        job, obs = running_state(job, "statefulset")
        p = exits(job, obs, "statefulset", launcher(job, 0, end=40), now=41)
        assert verdict(p) == "Succeeded" and not p.read_logs


# -- failed_before_launch: a worker that ended before the launcher pod was created -------------------------------


def _failed_then_replaced(job: dict, failed_at: float, replaced_at: float) -> tuple[dict, dict]:
    """Worker 0's first pod (Job backend) failed at `failed_at`, without a delete; the worker Job made
    its replacement at `replaced_at`. The Job backend keeps the failed pod as long as the worker Job."""
    first = pod(job, "worker", 0, phase="Failed", containerStatuses=[
        {"name": "worker", "state": {"terminated": {"exitCode": 1, "finishedAt": t(failed_at)}}}])
    first["metadata"].update(name="pi-worker-0-old", uid="pod-pi-worker-0-old", creationTimestamp=t(0))
    second = pod(job, "worker", 0)
    second["metadata"]["creationTimestamp"] = t(replaced_at)
    return first, second


@pytest.mark.parametrize("replaced_at,launcher_at,lost", [
    (4, 6, False),   # replaced before the launcher pod: ended before it, no loss of it
    (6, 6, False),   # in the same second: the replacement exists, so the old pod had ended
    (9, 6, True),    # replaced after the launcher pod was created: it may have ended during its run
])
def test_failed_before_launch_is_no_loss_of_the_attempt(replaced_at, launcher_at, lost):
    """(Before: an ended pod without a deletionTimestamp was never excluded by the time rule: the
    failed pod counted as lost in every attempt, recorded, and an unreadable log failed the run.)"""
    job, obs, _ = converge(open_mpi(), backend="job")
    first, second = _failed_then_replaced(job, 3, replaced_at)
    a = launcher(job, 0, created=launcher_at)
    obs = workers_ready(replace(obs, launcher=with_status(obs.launcher, active=1, ready=1),
                                pods=[a, first, second, pod(job, "worker", 1)]), 2)
    job, obs, _ = converge(job, obs, "job", now=at(12))
    assert (wl.recorded_attempt(job["status"]) == "pi-launcher-abc0") == lost, job["status"]
    assert wl.lost_workers(_ctx(job, obs), a) == (["pi-worker-0"] if lost else [])
    p = judged(job, obs, "job", launcher(job, 0, created=launcher_at, end=40), now=41, log=UNREADABLE)
    assert verdict(p) == ("Failed/WorkerLostDuringRun" if lost else "Succeeded"), p.status


def _ctx(job: dict, obs: Observed) -> JobContext:
    full = with_defaults(job)
    inputs = Inputs(full, obs, Config(worker_backend="job"), at(12))
    return context.build(inputs, full, *context.choose_backend(inputs, full))


# -- discover_mention: an elastic launcher is told by what it is --------------------------------------------------


@pytest.mark.parametrize("args,want", [
    (["-np", "2", "--host-discovery-script", "/etc/mpi/discover_hosts.sh", "python", "t.py"], True),
    (["--host-discovery-script=/etc/mpi/discover_hosts.sh", "python", "t.py"], True),
    (["sh", "-c", "horovodrun -np 2 --host-discovery-script /etc/mpi/discover_hosts.sh python t.py"], True),
    (["sh", "-c", "horovodrun --host-discovery-script '/etc/mpi/discover_hosts.sh' python t.py"], True),
    (["sh", "-c", "set -e\nhorovodrun --host-discovery-script=/etc/mpi/discover_hosts.sh python t.py"], True),
    (["sh", "-c", "horovodrun --host-discovery-script /etc/mpi/discover_hosts.sh python 't.py"], True),  # bad quoting
    (["sh", "-c", "cat /etc/mpi/discover_hosts.sh; mpirun -n 2 /opt/pi"], False),
    (["sh", "-c", "/etc/mpi/discover_hosts.sh > /tmp/h; mpirun --hostfile /tmp/h /opt/pi"], False),
    (["sh", "-c", "mpirun -n 2 /opt/pi # --host-discovery-script /etc/mpi/discover_hosts.sh"], False),
    (["--host-discovery-script", "/opt/my_hosts.sh", "python", "t.py"], False),  # another script: not ours
    (["--host-discovery-script"], False),
    (["-n", "2", "/opt/pi"], False),
])
def test_discover_mention_is_not_an_elastic_launcher(args, want):
    """(Before: any word naming discover_hosts.sh made a launcher elastic, its worker-loss policy
    ExitCode: `cat /etc/mpi/discover_hosts.sh; mpirun ...` that lost a worker and exited 0 Succeeded.)"""
    job = open_mpi(launcher_args=args)
    assert discovery.is_elastic(job) == want
    assert evidence.policy(job) == (evidence.EXIT_CODE if want else evidence.EVIDENCE)


@pytest.mark.parametrize("backend", BACKENDS)
def test_discover_mention_a_launcher_that_cats_the_script_and_loses_a_worker_fails(backend):
    job = open_mpi(launcher_args=["sh", "-c", "cat /etc/mpi/discover_hosts.sh; mpirun -n 2 /opt/pi"])
    job, obs = running_state(job, backend)
    p = judged(job, obs, backend, launcher(job, 0, end=40), now=41, log=CUT)
    assert verdict(p) == "Failed/WorkerLostDuringRun", p.status


SELF_RETRYING_LOG = "\n".join([
    "run 1",
    "--------------------------------------------------------------------------",
    PRRTE_LINE,
    "  HNP daemon   : [prterun-pi-launcher-1@0,0] on node pi-launcher",
    "--------------------------------------------------------------------------",
    "run 1 ended: exit 0; again",
    "run 2",
    "pi is approximately 3.1415926535897",
])


@pytest.mark.parametrize("backend", BACKENDS)
def test_discover_mention_a_launcher_that_retries_mpirun_itself_fails_pointing_to_the_annotation(backend):
    """A launcher script that runs mpirun again after a run cut short, whose last run finished: its log
    still shows the first run's lost daemon. Decided: Failed/WorkerLostDuringRun (the log cannot tell
    which run printed what), the message naming the annotation that trusts the exit code, which such a
    launcher sets."""
    job, obs = running_state(open_mpi(launcher_args=["sh", "-c", "until mpirun -n 2 /opt/pi; do :; done"]), backend)
    done = launcher(job, 0, end=60)
    uid = done["metadata"]["uid"]
    assert evidence.scan(uid, SELF_RETRYING_LOG).cut_short == PRRTE_LINE
    first = exits(job, obs, backend, done, now=61)
    assert [r.uid for r in first.read_logs] == [uid]
    p = exits(job, obs, backend, done, now=61.2, reports={uid: evidence.scan(uid, SELF_RETRYING_LOG)})
    assert verdict(p) == "Failed/WorkerLostDuringRun", p.status
    message = cond(p.status, st.FAILED)["message"]
    assert "runs mpirun again after a loss" in message and \
        f"{evidence.WORKER_LOSS_ANNOTATION}: {evidence.EXIT_CODE}" in message, message
    annotated = open_mpi(annotations={evidence.WORKER_LOSS_ANNOTATION: evidence.EXIT_CODE})
    job, obs = running_state(annotated, backend)
    assert verdict(exits(job, obs, backend, launcher(job, 0, end=60), now=61)) == "Succeeded"

