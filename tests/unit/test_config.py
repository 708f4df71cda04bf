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
])
def test_invalid_values_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as e:
        parse(argv)
    assert e.value.code == 2
    assert "error" in capsys.readouterr().err


@pytest.mark.parametrize("address,want", [
    (":8080", ("0.0.0.0", 8080)), ("127.0.0.1:0", ("127.0.0.1", 0)), ("0", None),
])
def test_split_bind(address, want):
    assert split_bind(address) == want
