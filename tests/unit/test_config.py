"""The operator's command line (README's flag table)."""

from __future__ import annotations

import pytest

from controller.config import Options, parse, split_bind


def test_defaults(monkeypatch):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    monkeypatch.setenv("POD_NAME", "op-0")
    o = parse([])
    assert o == Options(identity="op-0")
    assert (o.worker_backend, o.namespace, o.leader_elect, o.log_format) == ("job", "", False, "console")


def test_defaults_are_the_readme_table(monkeypatch):
    """Spelled out rather than compared with Options(): a default changed in both places is still caught."""
    for var in ("KUBECONFIG", "POD_NAMESPACE"):
        monkeypatch.delenv(var, raising=False)
    o = parse([])
    assert {
        "kubeconfig": o.kubeconfig, "worker_backend": o.worker_backend, "namespace": o.namespace,
        "threadiness": o.threadiness, "kube_api_qps": o.kube_api_qps, "kube_api_burst": o.kube_api_burst,
        "resync_period": o.resync_period, "metrics_bind_address": o.metrics_bind_address,
        "health_probe_bind_address": o.health_probe_bind_address, "leader_elect": o.leader_elect,
        "leader_election_namespace": o.leader_election_namespace, "leader_election_id": o.leader_election_id,
        "cluster_domain": o.cluster_domain, "controller_name": o.controller_name, "log_format": o.log_format,
        "log_level": o.log_level,
    } == {
        "kubeconfig": None, "worker_backend": "job", "namespace": "", "threadiness": 4, "kube_api_qps": 50.0,
        "kube_api_burst": 100, "resync_period": 300.0, "metrics_bind_address": ":8080",
        "health_probe_bind_address": ":8081", "leader_elect": False, "leader_election_namespace": "mpi-operator",
        "leader_election_id": "mpi-operator", "cluster_domain": "", "controller_name": "kubeflow.org/mpi-operator",
        "log_format": "console", "log_level": "info",
    }


@pytest.mark.parametrize("argv,field,value", [
    (["--kubeconfig=/k"], "kubeconfig", "/k"),
    (["--worker-backend=statefulset"], "worker_backend", "statefulset"),
    (["--namespace=team-a"], "namespace", "team-a"),
    (["--threadiness=16"], "threadiness", 16),
    (["--kube-api-qps=7.5"], "kube_api_qps", 7.5),
    (["--kube-api-burst=9"], "kube_api_burst", 9),
    (["--resync-period=0"], "resync_period", 0.0),
    (["--metrics-bind-address=127.0.0.1:9090"], "metrics_bind_address", "127.0.0.1:9090"),
    (["--metrics-bind-address=0"], "metrics_bind_address", "0"),
    (["--health-probe-bind-address=:0"], "health_probe_bind_address", ":0"),
    (["--leader-elect"], "leader_elect", True),
    (["--leader-election-namespace=ops"], "leader_election_namespace", "ops"),
    (["--leader-election-id=lease-x"], "leader_election_id", "lease-x"),
    (["--cluster-domain=cluster.local"], "cluster_domain", "cluster.local"),
    (["--controller-name=example.com/other"], "controller_name", "example.com/other"),
    (["--log-format=json"], "log_format", "json"),
    (["--log-level=debug"], "log_level", "debug"),
    (["--log-level=error"], "log_level", "error"),
    (["--worker-backend=job"], "worker_backend", "job"),
    (["--threadiness", "1"], "threadiness", 1),
    (["--resync-period=30.5"], "resync_period", 30.5),
    (["--health-probe-bind-address=0"], "health_probe_bind_address", "0"),
    (["--health-probe-bind-address="], "health_probe_bind_address", "0"),
    (["--metrics-bind-address=localhost:65535"], "metrics_bind_address", "localhost:65535"),
    (["--queue-qps=2.5"], "queue_qps", 2.5),
    (["--queue-burst=7"], "queue_burst", 7),
    (["--gang-scheduling=volcano"], "gang_scheduling", "volcano"),
    (["--gang-scheduling=scheduler-plugins-scheduler"], "gang_scheduling", "scheduler-plugins-scheduler"),
    ([], "gang_scheduling", ""),
    ([], "network_isolation", True),
    (["--network-isolation=false"], "network_isolation", False),
    (["--network-isolation=False"], "network_isolation", False),
    (["--network-isolation=0"], "network_isolation", False),
    (["-network-isolation=false"], "network_isolation", False),
    (["--network-isolation", "false"], "network_isolation", False),
    (["--network-isolation=true"], "network_isolation", True),
    (["--network-isolation"], "network_isolation", True),
])
def test_each_flag(argv, field, value):
    assert getattr(parse(argv), field) == value


def test_environment_defaults(monkeypatch):
    monkeypatch.setenv("KUBECONFIG", "/env/kubeconfig")
    monkeypatch.setenv("POD_NAMESPACE", "ops")
    monkeypatch.setenv("POD_NAME", "mpi-operator-abc")
    o = parse([])
    assert (o.kubeconfig, o.leader_election_namespace, o.identity) == ("/env/kubeconfig", "ops", "mpi-operator-abc")


def test_identity_without_pod_name_is_unique(monkeypatch):
    monkeypatch.delenv("POD_NAME", raising=False)
    assert parse([]).identity != parse([]).identity


@pytest.mark.parametrize("argv", [
    ["--threadiness=0"], ["--kube-api-burst=-1"], ["--worker-backend=pods"], ["--metrics-bind-address=foo"],
    ["--health-probe-bind-address=host:port"], ["--log-format=xml"], ["--no-such-flag"],
    ["--threadiness=-3"], ["--threadiness=two"], ["--threadiness=1.5"], ["--kube-api-burst=0"],
    ["--kube-api-qps=fast"], ["--resync-period=soon"], ["--queue-burst=0"], ["--log-level=trace"],
    ["--metrics-bind-address=8080"], ["--metrics-bind-address=:"], ["--metrics-bind-address=:http"],
    ["--metrics-bind-address=:65536"], ["--health-probe-bind-address=:-1"], ["--leader-elect=yes"],
    ["--worker-backend="], ["--worker-backend=StatefulSet"], ["--network-isolation=off"], ["--network-isolation="],
])
def test_invalid_values_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as e:
        parse(argv)
    assert e.value.code == 2
    assert "error" in capsys.readouterr().err


@pytest.mark.parametrize("address,want", [
    (":8080", ("0.0.0.0", 8080)), ("127.0.0.1:0", ("127.0.0.1", 0)), ("0", None),
    ("localhost:9443", ("localhost", 9443)), (":0", ("0.0.0.0", 0)),
])
def test_split_bind(address, want):
    assert split_bind(address) == want


# -- the Kubeflow MPI Operator's flags (controller/upstream_flags.py) --------------------------------

@pytest.mark.parametrize("argv,want", [
    (["-alsologtostderr", "--lock-namespace=mpi-operator"],
     {"leader_elect": True, "leader_election_namespace": "mpi-operator", "ignored_flags": ("--alsologtostderr",)}),
    (["--kubeConfig=/k"], {"kubeconfig": "/k"}),
    (["-kubeConfig", "/k"], {"kubeconfig": "/k"}),
    (["--master=https://10.0.0.1:6443"], {"master": "https://10.0.0.1:6443"}),
    (["--monitoring-port=8443"], {"metrics_bind_address": ":8443"}),
    (["--monitoring-port=0"], {"metrics_bind_address": "0"}),
    (["--controller-queue-rate-limit=20", "--controller-queue-burst=200"], {"queue_qps": 20.0, "queue_burst": 200}),
    (["-threadiness=2", "-kube-api-qps=5", "-kube-api-burst=10"],
     {"threadiness": 2, "kube_api_qps": 5.0, "kube_api_burst": 10}),
    (["--cluster-domain=cluster.local", "--namespace=ns"], {"cluster_domain": "cluster.local", "namespace": "ns"}),
    (["-v=4"], {"log_level": "debug"}),
    (["-v", "2"], {"log_level": "info"}),
    (["-logtostderr=false", "-log_dir=/tmp", "--stderrthreshold=INFO"],
     {"ignored_flags": ("--logtostderr", "--log_dir", "--stderrthreshold")}),
])
def test_upstream_flags_have_their_upstream_meaning(argv, want, monkeypatch):
    monkeypatch.delenv("KUBEFLOW_NAMESPACE", raising=False)
    o = parse(argv)
    assert {k: getattr(o, k) for k in want} == want


def test_kubeflow_namespace_env_is_the_default_namespace(monkeypatch):
    monkeypatch.setenv("KUBEFLOW_NAMESPACE", "kubeflow")
    assert parse([]).namespace == "kubeflow"
    assert parse(["--namespace=other"]).namespace == "other"


@pytest.mark.parametrize("argv", [["--monitoring-port=70000"], ["-alsologtostderr=maybe"], ["-v=high"]])
def test_invalid_upstream_values_are_refused(argv):
    with pytest.raises(SystemExit) as e:
        parse(argv)
    assert e.value.code == 2
