"""validate(): every rule, with its field path and an actionable message; defaults; names."""

from __future__ import annotations

import pytest

from reconcilers import names as n
from reconcilers.defaults import with_defaults
from reconcilers.validation import FieldError, validate
from tests.unit.sim import mpijob


def paths(job) -> list[str]:
    return [e.path for e in validate(job)]


def test_a_valid_mpijob_has_no_errors():
    assert validate(mpijob()) == []
    assert validate(mpijob(workers=None)) == []
    assert validate(mpijob(workers=0)) == []


def test_defaults_follow_upstream_v2beta1_with_documented_differences():
    job = with_defaults(mpijob(workers=None))
    spec = job["spec"]
    assert (spec["slotsPerWorker"], spec["runLauncherAsWorker"], spec["sshAuthMountPath"]) == (1, False, "/root/.ssh")
    assert (spec["launcherCreationPolicy"], spec["mpiImplementation"]) == ("AtStartup", "OpenMPI")
    assert spec["runPolicy"] == {"cleanPodPolicy": "Running", "backoffLimit": 6, "suspend": False}
    assert spec["mpiReplicaSpecs"]["Launcher"]["restartPolicy"] == "Never"
    original = mpijob()
    with_defaults(original)
    assert "sshAuthMountPath" not in original["spec"]  # a deep copy


def mutate(path: str, value):
    job = mpijob()
    obj = job
    keys = path.split(".")
    for k in keys[:-1]:
        obj = obj.setdefault(k, {})
    if value is _DELETE:
        obj.pop(keys[-1], None)
    else:
        obj[keys[-1]] = value
    return job


_DELETE = object()
L, W = "spec.mpiReplicaSpecs.Launcher", "spec.mpiReplicaSpecs.Worker"


@pytest.mark.parametrize(("path", "value", "error_path", "hint"), [
    ("metadata.name", "", "metadata.name", "name"),
    ("metadata.name", "Pi_1", "metadata.name", "DNS-1035"),
    ("metadata.name", "1pi", "metadata.name", "DNS-1035"),
    ("metadata.name", "a" * 55, "metadata.name", "shorten the name to 54"),
    ("spec.mpiReplicaSpecs", _DELETE, "spec.mpiReplicaSpecs", "Launcher"),
    (L, _DELETE, L, "add a Launcher"),
    (f"{L}.replicas", 2, f"{L}.replicas", "set it to 1"),
    (f"{L}.replicas", "1", f"{L}.replicas", "integer"),
    (f"{W}.replicas", -1, f"{W}.replicas", ">= 0"),
    (f"{W}.replicas", True, f"{W}.replicas", "integer"),
    (f"{W}.restartPolicy", "Always", f"{W}.restartPolicy", "Never, OnFailure"),
    (f"{W}.restartPolicy", "ExitCode", f"{W}.restartPolicy", "Never, OnFailure"),
    (f"{L}.restartPolicy", "Always", f"{L}.restartPolicy", "Never, OnFailure, ExitCode"),
    (f"{L}.template", _DELETE, f"{L}.template", "containers"),
    (f"{L}.template.spec.containers", [], f"{L}.template.spec.containers", "at least one"),
    (f"{W}.template.spec.volumes", [{"name": "ssh-auth"}], f"{W}.template.spec.volumes[0].name", "rename"),
    ("spec.mpiReplicaSpecs.Chief", {}, "spec.mpiReplicaSpecs.Chief", "only Launcher and Worker"),
    ("spec.slotsPerWorker", 0, "spec.slotsPerWorker", "set it to 1"),
    ("spec.slotsPerWorker", "2", "spec.slotsPerWorker", "whole number"),
    ("spec.sshAuthMountPath", "relative/.ssh", "spec.sshAuthMountPath", "absolute"),
    ("spec.launcherCreationPolicy", "Later", "spec.launcherCreationPolicy", "WaitForWorkersReady"),
    ("spec.mpiImplementation", "MVAPICH", "spec.mpiImplementation", "OpenMPI, Intel, MPICH"),
    ("spec.runLauncherAsWorker", "yes", "spec.runLauncherAsWorker", "true or false"),
    ("spec.runPolicy.cleanPodPolicy", "Some", "spec.runPolicy.cleanPodPolicy", "Running, All, None"),
    ("spec.runPolicy.ttlSecondsAfterFinished", -1, "spec.runPolicy.ttlSecondsAfterFinished", ">= 0"),
    ("spec.runPolicy.activeDeadlineSeconds", 0, "spec.runPolicy.activeDeadlineSeconds", ">= 1"),
    ("spec.runPolicy.backoffLimit", -1, "spec.runPolicy.backoffLimit", ">= 0"),
    ("spec.runPolicy.suspend", "true", "spec.runPolicy.suspend", "true or false"),
    ("spec.runPolicy", [], "spec.runPolicy", "object"),
])
def test_each_rule(path, value, error_path, hint):
    errors = validate(mutate(path, value))
    assert error_path in [e.path for e in errors], errors
    message = next(e.message for e in errors if e.path == error_path)
    assert hint in message


def test_name_length_counts_the_last_worker_hostname():
    # "<name>-worker-<N-1>" must fit in 63 characters: 10 workers allow a 54-character name, 11 do not
    assert validate(mpijob(name="a" * 54, workers=10)) == []
    (err,) = validate(mpijob(name="a" * 54, workers=11))
    assert err.path == "metadata.name" and "aaaa-worker-10" in err.message and "to 53 characters" in err.message
    assert validate(mpijob(name="a" * 54, workers=None)) == []  # a-launcher is the longest
    assert paths(mpijob(name="a" * 55, workers=None)) == ["metadata.name"]


@pytest.mark.parametrize("garbage", [None, 1, "x", [], {}, {"spec": None}, {"metadata": 3, "spec": []},
                                     {"spec": {"mpiReplicaSpecs": {"Launcher": 7, "Worker": []}}},
                                     {"spec": {"mpiReplicaSpecs": {"Launcher": {"template": {"spec": {
                                         "containers": [1, {"env": "x"}]}}}}}}])
def test_garbage_gives_errors_not_exceptions(garbage):
    errors = validate(garbage)
    assert errors and all(isinstance(e, FieldError) and e.message for e in errors)


def test_names():
    job = mpijob()
    assert n.child_names(job) == {"service": "pi", "config_map": "pi-config", "secret": "pi-ssh",
                                  "launcher": "pi-launcher", "workers": "pi-worker"}
    assert (n.service_name(job), n.config_map_name(job), n.secret_name(job)) == ("pi", "pi-config", "pi-ssh")
    assert (n.launcher_name(job), n.worker_name(job)) == ("pi-launcher", "pi-worker")


@pytest.mark.parametrize(("refs", "key"), [
    ([{"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "pi", "controller": True}], "ns/pi"),
    ([{"apiVersion": "kubeflow.org/v1", "kind": "MPIJob", "name": "pi", "controller": True}], "ns/pi"),
    ([{"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "pi"}], None),  # not the controller
    ([{"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "pi", "controller": False}], None),
    ([{"apiVersion": "batch/v1", "kind": "Job", "name": "pi", "controller": True}], None),
    ([{"apiVersion": "example.com/v1", "kind": "MPIJob", "name": "pi", "controller": True}], None),
    ([{"apiVersion": "kubeflow.org/v2beta1", "kind": "PyTorchJob", "name": "pi", "controller": True}], None),
    (None, None), ("garbage", None), ([3], None),
])
def test_owner_key(refs, key):
    obj = {"metadata": {"name": "pi-config", "namespace": "ns", "ownerReferences": refs}}
    assert n.owner_key(obj) == key
    assert n.owner_key(None) is None and n.owner_key({"metadata": "x"}) is None


def test_is_controlled_by_checks_the_uid():
    ref = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "pi", "controller": True, "uid": "u1"}
    obj = {"metadata": {"name": "pi-config", "namespace": "ns", "ownerReferences": [ref]}}
    assert n.is_controlled_by(obj, mpijob(uid="u1"))
    assert not n.is_controlled_by(obj, mpijob(uid="u2"))
    assert not n.is_controlled_by(obj, mpijob(name="other", uid="u1"))
