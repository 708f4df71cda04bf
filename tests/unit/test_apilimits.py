"""validate() refuses what the API server would refuse in a child (apilimits.py), naming the field."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconcilers import apilimits as lim
from reconcilers import desired as dz
from reconcilers.defaults import with_defaults
from reconcilers.types import Config
from reconcilers.validation import validate
from tests.unit.sim import container, mpijob

W = "spec.mpiReplicaSpecs.Worker.template"
L = "spec.mpiReplicaSpecs.Launcher.template"


def worker_pod(job: dict) -> dict:
    return job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]


def with_worker(**changes) -> dict:
    job = mpijob()
    tpl = worker_pod(job)
    for key, value in changes.items():
        if key == "metadata":
            tpl["metadata"] = value
        elif key == "container":
            tpl["spec"]["containers"][0].update(value)
        else:
            tpl["spec"][key] = value
    return job


LONG = "c" * 64


@pytest.mark.parametrize(("job", "path", "hint"), [
    (with_worker(initContainers=[container("worker")]), f"{W}.spec.containers[0].name", "duplicate"),
    (with_worker(containers=[container("a"), container("a")]), f"{W}.spec.containers[1].name", "duplicate"),
    (with_worker(container={"name": LONG}), f"{W}.spec.containers[0].name", "DNS-1123"),
    (with_worker(container={"name": "wörker"}), f"{W}.spec.containers[0].name", "DNS-1123"),
    (with_worker(container={"name": "Worker"}), f"{W}.spec.containers[0].name", "DNS-1123"),
    (with_worker(container={"env": [{"name": "A=B", "value": "1"}]}), f"{W}.spec.containers[0].env[0].name", "'='"),
    (with_worker(container={"env": [{"name": "1A"}]}), f"{W}.spec.containers[0].env[0].name", "environment"),
    (with_worker(metadata={"labels": {"a": "wért"}}), f"{W}.metadata.labels", "value"),
    (with_worker(metadata={"labels": {"a": "x" * 64}}), f"{W}.metadata.labels", "63"),
    (with_worker(metadata={"labels": {"-a": "x"}}), f"{W}.metadata.labels", "key"),
    (with_worker(metadata={"labels": {"Ex.com/a": "x"}}), f"{W}.metadata.labels", "prefix"),
    (with_worker(metadata={"annotations": {"ä": "x"}}), f"{W}.metadata.annotations", "key"),
    (with_worker(metadata={"annotations": {"a": "x" * (256 * 1024)}}), f"{W}.metadata.annotations", "256 KiB"),
    (with_worker(volumes=[{"name": "v", "emptyDir": {}}, {"name": "v", "emptyDir": {}}]),
     f"{W}.spec.volumes[1].name", "duplicate"),
    (with_worker(volumes=[{"name": "V_1", "emptyDir": {}}]), f"{W}.spec.volumes[0].name", "DNS-1123"),
    (with_worker(container={"volumeMounts": [{"name": "nope", "mountPath": "/x"}]}),
     f"{W}.spec.containers[0].volumeMounts[0].name", "names no volume"),
    (with_worker(container={"volumeMounts": [{"name": "ssh-auth"}]}),
     f"{W}.spec.containers[0].volumeMounts[0].mountPath", "required"),
    (with_worker(container={"resources": {"requests": {"cpu": "lots"}}}),
     f"{W}.spec.containers[0].resources.requests.cpu", "quantity"),
    (with_worker(container={"resources": {"limits": {"memory": "-1Gi"}}}),
     f"{W}.spec.containers[0].resources.limits.memory", "quantity"),
    (with_worker(container={"resources": {"limits": "big"}}), f"{W}.spec.containers[0].resources.limits", "map"),
    (with_worker(container={"resources": "big"}), f"{W}.spec.containers[0].resources", "object"),
    (mpijob(workers=100_000), "spec.mpiReplicaSpecs.Worker.replicas", "at most"),
    (mpijob(workers=25_000), "spec.mpiReplicaSpecs.Worker.replicas", "ConfigMap"),
])
def test_what_the_api_server_refuses_is_refused_first(job, path, hint):
    errors = [e for e in validate(job) if e.path == path]
    assert errors, (path, validate(job))
    assert hint in errors[0].message, errors[0].message


@pytest.mark.parametrize("changes", [
    {"container": {"name": "a" * 63, "env": [{"name": "_a.b-C", "value": ""}]}},
    {"metadata": {"labels": {"example.com/a": "", "b": "A.b-c_d"}, "annotations": {"Example.com/Key": "é"}}},
    {"volumes": [{"name": "data", "emptyDir": {}}],
     "container": {"volumeMounts": [{"name": "data", "mountPath": "/d"}, {"name": "ssh-auth", "mountPath": "/s"}]}},
    {"container": {"resources": {"requests": {"cpu": "500m", "memory": "1Gi", "x/y": 2},
                                 "limits": {"cpu": 1.5, "memory": "1e9", "e": ".5", "f": "+1k"}}}},
    {"initContainers": [container("init")]},
])
def test_what_the_api_server_accepts_passes(changes):
    assert validate(with_worker(**changes)) == []


@pytest.mark.parametrize(("name", "ns", "domain", "slots", "impl", "lw"), [
    ("pi", "ns", "", 1, "OpenMPI", False),
    ("a-much-longer-name", "some-namespace", "cluster.local", 16, "Intel", True),
    ("x", "n", "example.org.", 128, "MPICH", False),
])
def test_config_map_size_is_exactly_what_desired_writes(name, ns, domain, slots, impl, lw):
    for workers in (0, 1, 9, 10, 11, 101, 1234):
        job = mpijob(name, ns, workers=workers, spec={"slotsPerWorker": slots, "mpiImplementation": impl,
                                                    "runLauncherAsWorker": lw})
        job = with_defaults(job)
        config = Config(cluster_domain=domain)
        pods = [{"metadata": {"labels": {"training.kubeflow.org/job-role": "worker"}, "name": h},
                 "spec": {"hostname": f"{name}-worker-{i}"}, "status": {"phase": "Running"}}
                for i, h in enumerate([f"{name}-worker-{i}" for i in range(workers)])]
        data = dz.config_map(job, config, pods)["data"]
        size = sum(len(k) + len(v.encode()) for k, v in data.items())
        assert lim.config_map_bytes(name, ns, domain, slots, impl, lw, workers) == size


def test_the_worker_limit_is_the_largest_count_that_fits():
    job = mpijob("pi", "ns", workers=0)
    errors = validate(mpijob("pi", "ns", workers=50_000))
    most = int(errors[0].message.split("at most ")[1].split()[0])
    assert validate(mpijob("pi", "ns", workers=most)) == []
    assert validate(mpijob("pi", "ns", workers=most + 1))
    assert lim.config_map_bytes("pi", "ns", "", 1, "OpenMPI", False, most) <= lim.MAX_CONFIG_MAP_BYTES
    assert lim.config_map_bytes("pi", "ns", "", 1, "OpenMPI", False, most + 1) > lim.MAX_CONFIG_MAP_BYTES
    # a cluster domain lengthens every name: fewer workers fit
    longer = validate(mpijob("pi", "ns", workers=most), Config(cluster_domain="cluster.local"))
    assert longer and "at most" in longer[0].message
    assert validate(job) == []


@settings(max_examples=150, deadline=None)
@given(name=st.from_regex(r"[a-z]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True),
       ns=st.from_regex(r"[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?", fullmatch=True),
       domain=st.sampled_from(["", "cluster.local", "a.b.example.org."]), slots=st.integers(1, 10**6),
       impl=st.sampled_from(["OpenMPI", "Intel", "MPICH"]), lw=st.booleans(), workers=st.integers(0, 300))
def test_config_map_size_property(name, ns, domain, slots, impl, lw, workers):
    """config_map_bytes is exact for any name, namespace, domain, slots and count the CRD admits."""
    job = with_defaults(mpijob(name, ns, workers=workers, spec={
        "slotsPerWorker": slots, "mpiImplementation": impl, "runLauncherAsWorker": lw}))
    config = Config(cluster_domain=domain)
    pods = [{"metadata": {"labels": {"training.kubeflow.org/job-role": "worker"}, "name": f"{name}-worker-{i}"},
             "spec": {"hostname": f"{name}-worker-{i}"}, "status": {"phase": "Running"}} for i in range(workers)]
    data = dz.config_map(job, config, pods)["data"]
    assert lim.config_map_bytes(name, ns, domain, slots, impl, lw, workers) == sum(
        len(k) + len(v.encode()) for k, v in data.items())
