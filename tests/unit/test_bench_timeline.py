"""bench/timeline.py: the stages each MPIJob's objects reach, and the table of them."""

from __future__ import annotations

from bench.timeline import Timeline, report

LABELS = "training.kubeflow.org/job-name", "training.kubeflow.org/job-role"


def pod(name: str, role: str, ns: str = "bench-a", node: str | None = None, phase: str = "Pending",
        ready: bool = False) -> dict:
    return {"metadata": {"name": f"{name}-{role}-{node}", "namespace": ns,
                         "labels": {LABELS[0]: name, LABELS[1]: role}},
            "spec": {"nodeName": node} if node else {},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def test_stages_are_marked_once_at_their_first_time_and_other_namespaces_are_left_out():
    tl = Timeline()
    tl.on_mpijob("ADDED", {"metadata": {"name": "mj", "namespace": "bench-a"}}, 10.0)
    tl.on_job("ADDED", {"metadata": {"name": "mj-worker", "namespace": "bench-a",
                                     "labels": {LABELS[0]: "mj", LABELS[1]: "worker"}},
                        "spec": {"parallelism": 2}, "status": {}}, 10.5)
    tl.on_pod("ADDED", pod("mj", "worker", node="n1", phase="Running", ready=True), 11.0)
    tl.on_pod("MODIFIED", pod("mj", "worker", node="n1", phase="Running", ready=True), 11.5)  # same pod
    tl.on_pod("ADDED", pod("mj", "worker", node="n2", phase="Running", ready=True), 12.0)
    tl.on_job("MODIFIED", {"metadata": {"name": "mj-worker", "namespace": "bench-a",
                                        "labels": {LABELS[0]: "mj", LABELS[1]: "worker"}},
                           "spec": {"parallelism": 2}, "status": {"ready": 2}}, 13.0)
    tl.on_mpijob("MODIFIED", {"metadata": {"name": "mj", "namespace": "bench-a"},
                              "status": {"conditions": [{"type": "Running", "status": "True"},
                                                        {"type": "Created", "status": "True"}]}}, 13.5)
    tl.on_pod("ADDED", pod("other", "worker", ns="default", node="n1", phase="Running", ready=True), 11.0)
    assert tl.dump() == {"bench-a/mj": {
        "mpijob_seen": 10.0, "worker_job_seen": 10.5, "worker_pod_seen": 11.0, "worker_pod_bound": 11.0,
        "worker_pod_running": 11.0, "worker_pod_ready": 11.0, "worker_ready_n1": 11.0, "worker_ready_n2": 12.0,
        "worker_job_allready": 13.0, "mj_Running": 13.5, "mj_Created": 13.5}}


def test_report_orders_stages_by_median_from_the_first_mpijob_seen():
    data = {f"bench-a/mj{i}": {"mpijob_seen": 100.0 + i, "mj_Running": 105.0 + 2 * i} for i in range(3)}
    data["bench-a/None"] = {"worker_pod_seen": 1.0}  # no MPIJob seen: left out
    lines = report(data).splitlines()
    assert lines[0] == "bench-a: 3 MPIJobs (seconds from the first seen)"
    assert lines[1].split()[0] == "mpijob_seen" and "p50    1.00" in lines[1] and "max    2.00" in lines[1]
    assert lines[2].split()[0] == "mj_Running" and "min    5.00" in lines[2] and "max    9.00" in lines[2]
