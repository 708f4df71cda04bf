"""The benchmark's meters: the audit-log count of the operator's requests (bench/apiserver_meter.py) and
the py-spy summary (bench/cpu_profile.py), on files shaped as the API server and py-spy write them;
the CPU of the cluster's processes (bench/bench_operator.py), from their pid files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bench import apiserver_meter as meter
from bench import cpu_profile
from bench.bench_operator import _cluster_ms, _cluster_total_ms, cluster_cpu

OP = meter.OPERATOR_USER


def event(verb: str, resource: str, ns: str | None = "ns", sub: str | None = None, user: str = OP,
          stage: str = "ResponseComplete") -> str:
    ref = {"resource": resource, "namespace": ns, "name": "x"}
    if sub:
        ref["subresource"] = sub
    if ns is None:
        del ref["namespace"]
    return json.dumps({"kind": "Event", "stage": stage, "verb": verb, "user": {"username": user}, "objectRef": ref})


def write(path: Path, *lines: str) -> None:
    with path.open("a") as f:
        f.write("".join(line + "\n" for line in lines))


@pytest.mark.parametrize(("ref", "kind"), [
    ({"resource": "mpijobs", "subresource": "status"}, "MPIJob/status"),
    ({"resource": "events"}, "Event"),
    ({"resource": "statefulsets"}, "StatefulSet"),
    ({"resource": "widgets"}, "widgets"),
    ({}, "?"),
])
def test_kind_of(ref: dict, kind: str) -> None:
    assert meter.kind_of(ref) == kind


def test_counts_only_what_follows_the_mark_for_the_operator_in_the_namespace(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    write(log, event("create", "jobs"))  # before the mark
    m = meter.AuditMeter(log)
    mark = m.mark()
    write(log,
          event("create", "jobs"), event("patch", "mpijobs", sub="status"), event("patch", "mpijobs", sub="status"),
          event("create", "events"), event("list", "pods"), event("watch", "pods"),
          event("create", "jobs", user="system:admin"),        # another user
          event("create", "jobs", ns="other"),                 # another namespace
          event("update", "leases", ns="mpi-operator"),
          event("get", "namespaces", ns=None),                 # cluster-scoped
          event("create", "jobs", stage="ResponseStarted"),    # not a completed request
          "not json")
    with log.open("a") as f:
        f.write(event("delete", "jobs"))  # being written: no newline yet
    counts = m.count(mark, "ns")
    assert counts == {("create", "Job"): 1, ("patch", "MPIJob/status"): 2, ("create", "Event"): 1,
                      ("list", "Pod"): 1, ("watch", "Pod"): 1}
    assert meter.writes(counts) == {("create", "Job"): 1, ("patch", "MPIJob/status"): 2, ("create", "Event"): 1}
    assert meter.per(meter.writes(counts), 2) == {"create Event": 0.5, "create Job": 0.5, "patch MPIJob/status": 1.0}
    anywhere = m.count(mark)
    assert anywhere[("update", "Lease")] == 1 and anywhere[("get", "Namespace")] == 1
    assert anywhere[("create", "Job")] == 2


def test_a_rotation_between_mark_and_count_loses_nothing(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    write(log, event("create", "jobs"))
    m = meter.AuditMeter(log)
    mark = m.mark()
    write(log, event("patch", "jobs"))
    os.rename(log, tmp_path / "audit-2026-12-04T02-00-00.000.log")  # what --audit-log-maxsize does
    write(log, event("delete", "jobs"))
    assert m.count(mark, "ns") == {("patch", "Job"): 1, ("delete", "Job"): 1}


def test_of_cluster_without_an_audit_log_says_how_to_get_one(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="cluster-down cluster-up"):
        meter.AuditMeter.of_cluster(tmp_path)


@pytest.mark.parametrize(("func", "file", "cat"), [
    ("JSONDecoder.raw_decode", "/usr/lib/python3.11/json/decoder.py", "json decode"),
    ("deepcopy", "/usr/lib/python3.11/copy.py", "deep copy"),
    ("BoundLogger.info", "/v/lib/python3.11/site-packages/structlog/_native.py", "logging (structlog)"),
    ("SSLSocket.recv_into", "/usr/lib/python3.11/ssl.py", "TLS and sockets"),
    ("plan", "/work/main/reconcilers/plan.py", "own code: reconcilers.plan"),
    ("f", "/v/site-packages/yaml/x.py", "YAML"),
    ("g", "/v/site-packages/cryptography/x.py", "other: cryptography"),
])
def test_category(func: str, file: str, cat: str) -> None:
    assert cpu_profile.category(func, file) == cat


def test_summarize_self_and_inclusive_shares(tmp_path: Path) -> None:
    raw = tmp_path / "op.raw"
    raw.write_text(
        "run (threading.py:982);sync (/w/controller/mpijob_controller.py:10);plan (/w/reconcilers/plan.py:5);"
        "deepcopy (/usr/lib/python3.11/copy.py:128) 30\n"
        "run (threading.py:982);_loop (/w/informers/reflector.py:3);"
        "raw_decode (/usr/lib/python3.11/json/decoder.py:353) 50\n"
        "run (threading.py:982);sync (/w/controller/mpijob_controller.py:10);"
        "sync (/w/controller/mpijob_controller.py:12) 20\n")
    s = cpu_profile.summarize(raw)
    assert s["samples"] == 100
    assert dict(s["self"]) == {"json decode": 0.5, "deep copy": 0.3, "own code: controller.mpijob_controller": 0.2}
    # a module twice on one stack counts once
    assert dict(s["inclusive"]) == {"informers.reflector": 0.5, "controller.mpijob_controller": 0.5,
                                    "reconcilers.plan": 0.3}
    assert "50.0 %  json decode" in cpu_profile.render(s, "t")


def test_cluster_cpu_reads_each_pid_file_and_skips_what_is_gone(tmp_path: Path) -> None:
    (tmp_path / "kube-apiserver.pid").write_text(f"{os.getpid()}\n")
    (tmp_path / "etcd.pid").write_text("999999999\n")  # no such process: a stopped cluster part
    (tmp_path / "kwok.pid").write_text("not a pid\n")
    got = cluster_cpu(tmp_path)
    assert list(got) == ["kube-apiserver"]
    assert got["kube-apiserver"] > 0  # this test process's CPU so far
    assert cluster_cpu(tmp_path / "absent") == {}  # not the local cluster


@pytest.mark.parametrize(("after", "before", "n", "want"), [
    ({"etcd": 2.0, "kwok": 1.5}, {"etcd": 1.0, "kwok": 1.0}, 100, {"etcd": 10.0, "kwok": 5.0}),
    # restarted between the readings (its counter began again): left out, not counted negative
    ({"etcd": 0.2, "kwok": 1.5}, {"etcd": 1.0, "kwok": 1.0}, 10, {"kwok": 50.0}),
    # idle, or started after the first reading: nothing to count
    ({"etcd": 1.0, "kubelet": 3.0}, {"etcd": 1.0}, 10, {}),
])
def test_cluster_ms_per_mpijob(after: dict, before: dict, n: int, want: dict) -> None:
    assert _cluster_ms(after, before, n) == want
    assert _cluster_total_ms(after, before, n) == round(sum(want.values()), 1)


def test_no_cluster_cpu_read_is_no_figure_not_zero() -> None:
    assert _cluster_total_ms({}, {}, 100) is None
