"""The built objects: snapshots for both backends, hostfile formats, MPI environment, DNS names."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconcilers import desired as dz
from reconcilers import names as n
from reconcilers.defaults import with_defaults
from reconcilers.types import Config, Observed
from tests.unit.sim import BACKENDS, KeyGen, container, mpijob, pod, run

SNAPSHOTS = Path(__file__).parent / "snapshots"


def snapshot(name: str, got: object) -> None:
    """Compares with tests/unit/snapshots/<name>.json; UPDATE_SNAPSHOTS=1 rewrites it."""
    path = SNAPSHOTS / f"{name}.json"
    text = json.dumps(got, indent=1, sort_keys=True) + "\n"
    if os.environ.get("UPDATE_SNAPSHOTS") == "1" or not path.exists():
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(text)
    assert json.loads(path.read_text()) == got, f"{path} differs (UPDATE_SNAPSHOTS=1 to accept)"


def job_of(**kw):
    return with_defaults(mpijob(**kw))


@pytest.mark.parametrize("backend", BACKENDS)
def test_snapshot_of_every_child(backend):
    p = run(mpijob(), backend=backend, keygen=KeyGen())
    snapshot(f"children-{backend}", {c.obj["kind"] + "/" + c.obj["metadata"]["name"]: c.obj for c in p.creates})


@pytest.mark.parametrize("backend", BACKENDS)
def test_labels_and_owner_on_every_object_and_pod_template(backend):
    p = run(mpijob(), backend=backend)
    for c in p.creates:
        meta = c.obj["metadata"]
        assert meta["labels"][n.JOB_NAME_LABEL] == "pi"
        assert meta["labels"][n.OPERATOR_NAME_LABEL] == "mpi-operator"
        (ref,) = meta["ownerReferences"]
        assert ref == {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "pi", "uid": "uid-pi",
                       "controller": True, "blockOwnerDeletion": True}
        assert n.owner_key(c.obj) == "ns/pi"
        if "template" in c.obj.get("spec", {}):
            role = "launcher" if meta["name"] == "pi-launcher" else "worker"
            assert meta["labels"][n.JOB_ROLE_LABEL] == role
            assert c.obj["spec"]["template"]["metadata"]["labels"] == n.job_labels(mpijob(), role)


def test_statefulset_workers():
    w = dz.workers(job_of(workers=3), Config(worker_backend="statefulset"))
    spec = w["spec"]
    assert (spec["replicas"], spec["serviceName"], spec["podManagementPolicy"]) == (3, "pi", "Parallel")
    assert spec["template"]["spec"]["restartPolicy"] == "Always"
    assert spec["selector"]["matchLabels"] == n.job_labels(mpijob(), "worker")
    assert dz.workers(job_of(workers=3), Config(worker_backend="statefulset"), running=False)["spec"]["replicas"] == 0


@pytest.mark.parametrize("restart", [None, "OnFailure"])
def test_indexed_job_workers(restart):
    job = mpijob(workers=3)
    if restart:
        job["spec"]["mpiReplicaSpecs"]["Worker"]["restartPolicy"] = restart
    w = dz.workers(with_defaults(job), Config(worker_backend="job"))
    spec = w["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 3, 3)
    assert spec["backoffLimit"] == 2**31 - 1 and spec["suspend"] is False
    assert spec["template"]["spec"]["subdomain"] == "pi"
    assert spec["template"]["spec"]["restartPolicy"] == (restart or "Never")


def test_launcher_job():
    job = job_of(run_policy={"backoffLimit": 3, "activeDeadlineSeconds": 100, "ttlSecondsAfterFinished": 5})
    lau = dz.launcher(job, Config())
    spec = lau["spec"]
    # runPolicy.backoffLimit + 1: the operator counts the retries, the Job's limit is a net under it
    assert (spec["backoffLimit"], spec["activeDeadlineSeconds"]) == (3 + 1, 100)
    assert "ttlSecondsAfterFinished" not in spec
    pod_spec = spec["template"]["spec"]
    assert (pod_spec["hostname"], pod_spec["subdomain"], pod_spec["restartPolicy"]) == ("pi-launcher", "pi", "Never")
    mounts = {m["name"]: m["mountPath"] for m in pod_spec["containers"][0]["volumeMounts"]}
    assert mounts == {"ssh-auth": "/root/.ssh", "mpi-job-config": "/etc/mpi"}


def test_ssh_secret_volume_as_the_real_node_image_expects():
    job = job_of(spec={"sshAuthMountPath": "/home/mpiuser/.ssh"})
    for tmpl in (dz.launcher_template(job, Config()), dz.worker_template(job, Config())):
        vol = next(v for v in tmpl["spec"]["volumes"] if v["name"] == "ssh-auth")["secret"]
        assert vol["secretName"] == "pi-ssh" and "defaultMode" not in vol
        assert [(i["key"], i["path"]) for i in vol["items"]] == [
            ("ssh-privatekey", "id_rsa"), ("ssh-publickey", "id_rsa.pub"), ("ssh-publickey", "authorized_keys")]
        assert {"name": "ssh-auth", "mountPath": "/home/mpiuser/.ssh"} in tmpl["spec"]["containers"][0]["volumeMounts"]
    root = dz.worker_template(job_of(), Config())
    assert next(v for v in root["spec"]["volumes"] if v["name"] == "ssh-auth")["secret"]["defaultMode"] == 0o600


def test_user_template_fields_are_kept():
    job = mpijob()
    tmpl = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
    tmpl["metadata"] = {"labels": {"team": "a", n.JOB_ROLE_LABEL: "spoofed"}, "annotations": {"x": "y"}}
    tmpl["spec"].update(nodeSelector={"gpu": "yes"}, tolerations=[{"key": "k", "operator": "Exists"}],
                        volumes=[{"name": "data", "emptyDir": {}}],
                        dnsConfig={"searches": ["example.com"]})
    tmpl["spec"]["containers"][0]["env"] = [{"name": "K_MPI_JOB_ROLE", "value": "mine"}, {"name": "A", "value": "1"}]
    for backend in BACKENDS:
        t = dz.worker_template(with_defaults(job), Config(worker_backend=backend))
        assert t["metadata"]["labels"]["team"] == "a" and t["metadata"]["labels"][n.JOB_ROLE_LABEL] == "worker"
        assert t["metadata"]["annotations"] == {"x": "y"}
        assert t["spec"]["nodeSelector"] == {"gpu": "yes"} and t["spec"]["tolerations"][0]["key"] == "k"
        assert [v["name"] for v in t["spec"]["volumes"]] == ["data", "ssh-auth"]
        assert t["spec"]["dnsConfig"]["searches"] == ["example.com", "pi.ns.svc.cluster.local"]
        assert t["spec"]["containers"][0]["env"] == [{"name": "K_MPI_JOB_ROLE", "value": "mine"},
                                                    {"name": "A", "value": "1"}]
    assert job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["volumes"] == [
        {"name": "data", "emptyDir": {}}]  # the MPIJob itself is not modified


@pytest.mark.parametrize("backend", BACKENDS)
def test_explicit_null_lists_in_templates_are_empty(backend):
    """`volumes: null` or `env: null` in a user's template (valid YAML) are treated as empty."""
    job = mpijob()
    for rtype in ("Launcher", "Worker"):
        spec = job["spec"]["mpiReplicaSpecs"][rtype]["template"]["spec"]
        spec["volumes"] = None
        spec["dnsConfig"] = {"searches": None}
        spec["containers"][0].update(env=None, volumeMounts=None)
    cfg = Config(worker_backend=backend)
    for obj in (dz.workers(with_defaults(job), cfg), dz.launcher(with_defaults(job), cfg)):
        pod_spec = obj["spec"]["template"]["spec"]
        assert [v["name"] for v in pod_spec["volumes"]][:1] == [dz.SSH_VOLUME]
        assert pod_spec["dnsConfig"]["searches"] == ["pi.ns.svc.cluster.local"]
        assert pod_spec["containers"][0]["volumeMounts"]


def test_worker_without_command_runs_sshd():
    job = mpijob()
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"] = [container("w")]
    c = dz.worker_template(with_defaults(job), Config())["spec"]["containers"][0]
    assert c["command"] == ["/usr/sbin/sshd", "-De"]
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"] = [container("w", args=["x"])]
    assert "command" not in dz.worker_template(with_defaults(job), Config())["spec"]["containers"][0]


@pytest.mark.parametrize(("impl", "line", "env"), [
    ("OpenMPI", "pi-worker-0.pi.ns.svc slots=4", {
        "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile", "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
        "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10", "OMPI_MCA_orte_set_default_slots": "4",
        "PRTE_MCA_prte_default_hostfile": "/etc/mpi/hostfile", "PRTE_MCA_plm_ssh_args": "-o ConnectionAttempts=10",
        "PRTE_MCA_prte_set_default_slots": "4", "PRTE_MCA_prte_keep_fqdn_hostnames": "true"}),
    ("Intel", "pi-worker-0.pi.ns.svc:4", {"I_MPI_HYDRA_HOST_FILE": "/etc/mpi/hostfile", "I_MPI_PERHOST": "4"}),
    # Hydra reads HYDRA_LAUNCHER_EXTRA_ARGS (upstream's HYDRA_LAUNCH_EXTRA_ARGS is kept but read by none)
    ("MPICH", "pi-worker-0.pi.ns.svc:4", {"HYDRA_HOST_FILE": "/etc/mpi/hostfile",
                                          "HYDRA_LAUNCHER_EXTRA_ARGS": "-o ConnectionAttempts=10"}),
])
def test_hostfile_and_environment_per_mpi_implementation(impl, line, env):
    job = job_of(spec={"mpiImplementation": impl, "slotsPerWorker": 4})
    assert dz.hostfile(job, Config()).splitlines()[0] == line
    got = {e["name"]: e["value"] for e in dz.launcher_template(job, Config())["spec"]["containers"][0]["env"]}
    assert env.items() <= got.items()
    assert got["K_MPI_JOB_ROLE"] == "launcher" and got["NVIDIA_VISIBLE_DEVICES"] == ""
    worker_env = dz.worker_template(job, Config())["spec"]["containers"][0]["env"]
    assert {"name": "K_MPI_JOB_ROLE", "value": "worker"} in worker_env


@pytest.mark.parametrize(("impl", "first"), [
    ("OpenMPI", "pi-launcher.pi.ns.svc slots=2"),  # PRRTE strips it (prte_keep_fqdn_hostnames false)
    # Hydra forks a local proxy only for the exact hostname; any other name of itself it ssh-es to
    ("MPICH", "pi-launcher:2"),
    ("Intel", "pi-launcher:2"),
])
def test_run_launcher_as_worker_names_the_launcher_as_its_mpi_finds_itself(impl, first):
    job = job_of(workers=2, spec={"runLauncherAsWorker": True, "slotsPerWorker": 2, "mpiImplementation": impl})
    lines = dz.hostfile(job, Config()).splitlines()
    assert lines[0] == first and len(lines) == 3 and lines[1].startswith("pi-worker-0.pi.ns.svc")
    assert dz.discover_hosts(job, [], Config()).splitlines()[1] == f"echo {first.split()[0].split(':')[0]}"


@pytest.mark.parametrize(("impl", "var"), [("MPICH", "HYDRA_IFACE"), ("Intel", "I_MPI_HYDRA_IFACE"),
                                           ("OpenMPI", None)])
@pytest.mark.parametrize("host_network", [None, "Launcher", "Worker"])
def test_hydra_dials_back_to_the_launcher_by_its_pod_address(impl, var, host_network):
    """Hydra's proxies reach the launcher by the address of eth0, not its (retried, not yet in DNS)
    name; not on the host network, whose interfaces have other names."""
    job = job_of(spec={"mpiImplementation": impl})
    if host_network:
        job["spec"]["mpiReplicaSpecs"][host_network]["template"]["spec"]["hostNetwork"] = True
    env = {e["name"]: e["value"] for e in dz.launcher_template(job, Config())["spec"]["containers"][0]["env"]}
    ifaces = {k: v for k, v in env.items() if k.endswith("_IFACE")}
    assert ifaces == ({var: "eth0"} if var and not host_network else {})


def test_run_launcher_as_worker_and_cluster_domain():
    job = job_of(workers=2, spec={"runLauncherAsWorker": True, "slotsPerWorker": 2})
    cfg = Config(cluster_domain="example.org")
    assert dz.hostfile(job, cfg) == ("pi-launcher.pi.ns.svc.example.org slots=2\n"
                                     "pi-worker-0.pi.ns.svc.example.org slots=2\n"
                                     "pi-worker-1.pi.ns.svc.example.org slots=2\n")
    tmpl = dz.launcher_template(job, cfg)
    assert tmpl["spec"]["dnsConfig"]["searches"] == ["pi.ns.svc.example.org"]
    env = {e["name"]: e["value"] for e in tmpl["spec"]["containers"][0]["env"]}
    assert "NVIDIA_VISIBLE_DEVICES" not in env and env["PRTE_MCA_prte_keep_fqdn_hostnames"] == "false"


def test_discover_hosts_lists_only_running_workers():
    job = job_of(workers=3)
    pods = [pod(job, "worker", 2), pod(job, "worker", 0), pod(job, "worker", 1, phase="Pending"),
            pod(job, "launcher")]
    assert dz.discover_hosts(job, pods, Config()) == (
        "#!/bin/sh\necho pi-worker-0.pi.ns.svc\necho pi-worker-2.pi.ns.svc\n")
    sts_pods = [pod(job, "worker", i, backend="statefulset") for i in (10, 1)]
    assert dz.discover_hosts(with_defaults(mpijob(workers=11)), sts_pods, Config()).splitlines()[1:] == [
        "echo pi-worker-1.pi.ns.svc", "echo pi-worker-10.pi.ns.svc"]


def test_service_and_secret():
    job = job_of()
    svc = dz.service(job)
    assert svc["spec"] == {"clusterIP": "None", "publishNotReadyAddresses": True,
                           "selector": {n.JOB_NAME_LABEL: "pi"}}
    sec = dz.secret(job, KeyGen()())
    assert sec["type"] == "kubernetes.io/ssh-auth" and set(sec["data"]) == {"ssh-privatekey", "ssh-publickey"}


def test_the_secret_needs_a_keygen():
    p = run(mpijob(), Observed(), keygen=None)
    assert "Secret" in [c.obj["kind"] for c in p.creates]  # run() supplies a KeyGen by default


# -- property: the hostfile names exactly the DNS names the backend's pods get ------------------------------


def pod_dns_names(obj: dict, ns: str, domain: str) -> list[str]:
    """What the StatefulSet / Indexed Job controllers make of `obj`: each pod's hostname.subdomain."""
    spec = obj["spec"]
    if obj["kind"] == "StatefulSet":
        pods = [(f"{obj['metadata']['name']}-{i}", spec["serviceName"]) for i in range(spec["replicas"])]
    else:
        assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"]
        pods = [(f"{obj['metadata']['name']}-{i}", spec["template"]["spec"]["subdomain"])
                for i in range(spec["completions"])]
    suffix = f".{domain}" if domain else ""
    return [f"{h}.{sub}.{ns}.svc{suffix}" for h, sub in pods]


@settings(max_examples=60, deadline=None)
@given(name=st.from_regex(r"\A[a-z][a-z0-9]{0,20}\Z"), ns=st.from_regex(r"\A[a-z][a-z0-9-]{0,10}[a-z0-9]\Z"),
       workers=st.integers(0, 40), domain=st.sampled_from(["", "cluster.local", "corp.example"]),
       backend=st.sampled_from(BACKENDS), impl=st.sampled_from(["OpenMPI", "Intel", "MPICH"]))
def test_hostfile_lists_the_dns_names_of_the_backends_pods(name, ns, workers, domain, backend, impl):
    job = with_defaults(mpijob(name=name, ns=ns, workers=workers, spec={"mpiImplementation": impl}))
    cfg = Config(worker_backend=backend, cluster_domain=domain)
    hosts = [line.split()[0].split(":")[0] for line in dz.hostfile(job, cfg).splitlines()]
    assert hosts == pod_dns_names(dz.workers(job, cfg), ns, domain)
    assert all(len(h.split(".")[0]) <= 63 for h in hosts)


@pytest.mark.parametrize("backend", ["job", "statefulset"])
@pytest.mark.parametrize("launcher_as_worker", [False, True])
def test_replica_index_as_upstream(backend, launcher_as_worker):
    """The launcher's replica-index label is in its template (0, only with runLauncherAsWorker); the
    workers' comes at admission (manifests/admission/) with the offset their template announces."""
    job = job_of(workers=2, spec={"runLauncherAsWorker": launcher_as_worker})
    cfg = Config(worker_backend=backend)
    launcher = dz.launcher_template(job, cfg)["metadata"]
    worker = dz.worker_template(job, cfg)["metadata"]
    assert launcher["labels"].get(n.REPLICA_INDEX_LABEL) == ("0" if launcher_as_worker else None)
    assert n.REPLICA_INDEX_LABEL not in worker["labels"]
    assert (worker.get("annotations") or {}).get(n.REPLICA_INDEX_OFFSET_ANNOTATION) == (
        "1" if launcher_as_worker else None)
