"""The shared children of a plan (Service, ConfigMap, Secret) go out together; every other write
after them, one at a time in the plan's order (controller/executor.py)."""

from __future__ import annotations

import threading

import pytest

from client.errors import ApiError
from controller.executor import Executor
from reconcilers.types import Create, Plan
from testsupport.fake_api import FakeApi


def child(kind: str, api_version: str = "v1") -> Create:
    return Create({"apiVersion": api_version, "kind": kind, "metadata": {"name": f"pi-{kind.lower()}",
                                                                          "namespace": "ns"}})


PLAN = Plan(creates=[child("Service"), child("ConfigMap"), child("Secret"), child("Job", "batch/v1"),
                     child("Job", "batch/v1")])
MPIJOB = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
          "metadata": {"name": "pi", "namespace": "ns", "uid": "u1"}}


class Server:
    """Answers a create once `together` creates are in flight at the same time (a barrier): a
    sequential executor never gets its first answer and the test fails on the barrier's timeout."""

    def __init__(self, together: int, refuse: str | None = None) -> None:
        self.barrier = threading.Barrier(together, timeout=5)
        self.refuse = refuse
        self.order: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, method: str, path: str, body: dict) -> dict:
        kind = body["kind"]
        if kind in ("Service", "ConfigMap", "Secret", "NetworkPolicy"):
            self.barrier.wait()
        with self.lock:
            self.order.append(kind)
        if kind == self.refuse:
            raise ApiError(422, "Invalid", f"{kind} refused")
        return {**body, "metadata": {**body["metadata"], "resourceVersion": str(len(self.order))}}


def test_shared_children_are_created_together_then_the_jobs_one_by_one():
    server = Server(3)
    api = FakeApi(respond=server)
    res = Executor(api, is_leader=lambda: True, component="c", instance="i").apply(MPIJOB, PLAN)
    assert res.refused is None
    assert sorted(server.order[:3]) == ["ConfigMap", "Secret", "Service"]
    assert server.order[3:] == ["Job", "Job"]
    assert set(res.written) == {("services", "ns", "pi-service"), ("configmaps", "ns", "pi-configmap"),
                                ("secrets", "ns", "pi-secret"), ("jobs", "ns", "pi-job")}


@pytest.mark.parametrize("refuse", ["Service", "ConfigMap", "Secret"])
def test_a_refused_shared_child_sends_no_job_and_keeps_what_was_written(refuse):
    server = Server(3, refuse=refuse)
    res = Executor(FakeApi(respond=server), is_leader=lambda: True, component="c",
                   instance="i").apply(MPIJOB, PLAN)
    assert res.refused is not None and res.refused.kind == refuse
    assert "Job" not in server.order, "no pod owner is created without what its pods read"
    assert {k[0] for k in res.written} == {"services", "configmaps", "secrets"} - {refuse.lower() + "s"}


def test_one_shared_child_alone_is_created_in_the_calling_thread():
    seen: list[str] = []

    def respond(method: str, path: str, body: dict) -> dict:
        seen.append(threading.current_thread().name)
        return {**body, "metadata": {**body["metadata"], "resourceVersion": "1"}}

    Executor(FakeApi(respond=respond), is_leader=lambda: True, component="c",
             instance="i").apply(MPIJOB, Plan(creates=[child("ConfigMap")]))
    assert seen == [threading.current_thread().name]


def test_isolation_policy_goes_with_the_shared_children_and_its_refusal_sends_no_job():
    """The NetworkPolicy is sent with the Service, ConfigMap and Secret, before any pod's owner; refused
    (RBAC without networkpolicies, say), no worker or launcher Job is created: no pod runs unprotected
    while isolation is asked for (docs/architecture.md section 10)."""
    plan = Plan(creates=[*PLAN.creates[:3], child("NetworkPolicy", "networking.k8s.io/v1"), *PLAN.creates[3:]])
    server = Server(4)
    res = Executor(FakeApi(respond=server), is_leader=lambda: True, component="c", instance="i").apply(MPIJOB, plan)
    assert res.refused is None and sorted(server.order[:4]) == ["ConfigMap", "NetworkPolicy", "Secret", "Service"]
    assert server.order[4:] == ["Job", "Job"]
    server = Server(4, refuse="NetworkPolicy")
    res = Executor(FakeApi(respond=server), is_leader=lambda: True, component="c", instance="i").apply(MPIJOB, plan)
    assert res.refused is not None and res.refused.kind == "NetworkPolicy"
    assert "Job" not in server.order
