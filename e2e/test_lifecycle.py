"""Every MPIJob lifecycle of docs/architecture.md section 1, end to end on the local cluster, for both worker
backends: the operator runs as a separate process with the ServiceAccount of manifests/, the
Job, StatefulSet and garbage-collector controllers of kube-controller-manager do the rest, and
kwok plays the pods (annotations steer how long a launcher runs and how it exits)."""

from __future__ import annotations

import json
import time

import pytest

from reconcilers.names import JOB_NAME_LABEL, OPERATOR_NAME_LABEL
from testsupport.builders import simulated_mpijob
from testsupport.kubectl import apply, conditions, events, get, items, live, pods, wait_condition, wait_event
from testsupport.waiting import wait_until

pytestmark = pytest.mark.cluster
POLICY = "pi-mpijob-isolation"  # the MPIJob's NetworkPolicy (reconcilers/names.py network_policy_name)


def workers_kind(backend: str) -> str:
    return "statefulset" if backend == "statefulset" else "job"


def test_happy_path_children_hostfile_and_success(kubectl, operator, namespace, backend):
    apply(kubectl, namespace, simulated_mpijob("pi", workers=3, slots=2, launcher_runs="4s"))
    wait_condition(kubectl, namespace, "pi", "Created")

    labels = {JOB_NAME_LABEL: "pi", OPERATOR_NAME_LABEL: "mpi-operator"}
    cm = wait_until(lambda: get(kubectl, namespace, "configmap", "pi-config"), 30, what="ConfigMap")
    assert cm["data"]["hostfile"].split("\n")[:3] == [
        f"pi-worker-{i}.pi.{namespace}.svc slots=2" for i in range(3)
    ]
    secret = get(kubectl, namespace, "secret", "pi-ssh")
    assert secret["type"] == "kubernetes.io/ssh-auth" and "ssh-privatekey" in secret["data"]
    svc = get(kubectl, namespace, "service", "pi")
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    workers = get(kubectl, namespace, workers_kind(backend), "pi-worker")
    # Isolation is on by default: the MPIJob's NetworkPolicy admits its own pods (docs/architecture.md 10).
    policy = get(kubectl, namespace, "networkpolicy", POLICY)
    own = {"matchLabels": {JOB_NAME_LABEL: "pi", OPERATOR_NAME_LABEL: "mpi-operator"}}
    assert policy["spec"]["podSelector"] == own
    assert policy["spec"]["ingress"] == [{"from": [{"podSelector": own}]}]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    for obj in (cm, secret, svc, workers, policy):
        assert labels.items() <= obj["metadata"]["labels"].items(), obj["metadata"]
        (owner,) = [o for o in obj["metadata"]["ownerReferences"] if o.get("controller")]
        assert (owner["kind"], owner["name"]) == ("MPIJob", "pi")

    # Workers Ready before the launcher exists (WaitForWorkersReady), with stable names.
    ready = wait_until(lambda: [p for p in live(pods(kubectl, namespace, "pi", "worker"))
                                if any(c["type"] == "Ready" and c["status"] == "True"
                                       for c in p["status"].get("conditions", []))], 60, what="workers")
    wait_until(lambda: len(live(pods(kubectl, namespace, "pi", "worker"))) == 3, 60, what="3 workers")
    ws = live(pods(kubectl, namespace, "pi", "worker"))
    assert sorted(p["spec"]["hostname"] for p in ws) == [f"pi-worker-{i}" for i in range(3)]
    assert {p["spec"]["subdomain"] for p in ws} == {"pi"}
    assert ready
    launcher = wait_until(lambda: get(kubectl, namespace, "job", "pi-launcher"), 60, what="launcher Job")
    launcher_created = launcher["metadata"]["creationTimestamp"]
    assert all(p["metadata"]["creationTimestamp"] <= launcher_created for p in ws)
    lp = wait_until(lambda: pods(kubectl, namespace, "pi", "launcher"), 30, what="launcher pod")[0]
    assert lp["spec"]["hostname"] == "pi-launcher" and lp["spec"]["subdomain"] == "pi"

    done = wait_condition(kubectl, namespace, "pi", "Succeeded", timeout=90)
    assert done["reason"]
    status = get(kubectl, namespace, "mpijob", "pi")["status"]
    assert status.get("startTime") and status.get("completionTime")
    assert "Running" in {c["type"] for c in status["conditions"]}, status["conditions"]
    assert status["replicaStatuses"]["Launcher"].get("succeeded") == 1
    # cleanPodPolicy Running: no worker keeps running.
    wait_until(lambda: not live(pods(kubectl, namespace, "pi", "worker")), 60, what="workers stopped")
    reasons = {e["reason"] for e in events(kubectl, namespace, "pi")}
    assert {"MPIJobCreated", "MPIJobSucceeded"} <= reasons, reasons
    assert operator.metric("mpi_operator_jobs_successful_total") >= 1
    assert operator.metric("mpi_operator_jobs_created_total") >= 1


def test_launcher_fails_until_backoff_limit(kubectl, operator, namespace, backend):
    job = simulated_mpijob("bad", launcher_runs="1s", launcher_exit=1, run_policy={"backoffLimit": 1})
    apply(kubectl, namespace, job)
    failed = wait_condition(kubectl, namespace, "bad", "Failed", timeout=120)
    assert failed["reason"] == "BackoffLimitExceeded", failed
    launchers = pods(kubectl, namespace, "bad", "launcher")
    assert len([p for p in launchers if p["status"].get("phase") == "Failed"]) == 2
    wait_until(lambda: not live(pods(kubectl, namespace, "bad", "worker")), 60, what="workers stopped")
    assert "Succeeded" not in conditions(kubectl, namespace, "bad") or \
        conditions(kubectl, namespace, "bad")["Succeeded"]["status"] != "True"


def test_worker_deleted_mid_run_comes_back_same_name(kubectl, operator, namespace, backend):
    apply(kubectl, namespace, simulated_mpijob("pi", launcher_runs=None))
    wait_condition(kubectl, namespace, "pi", "Running", timeout=60)
    victim = [p for p in live(pods(kubectl, namespace, "pi", "worker")) if p["spec"]["hostname"] == "pi-worker-0"]
    assert victim
    kubectl("-n", namespace, "delete", "pod", victim[0]["metadata"]["name"], "--wait=false")
    if backend == "job":
        # The worker Job is recreated, which takes more than one reconcile: the loss is always seen and
        # Restarting set, with its Warning Event. Running, read from the Ready pods, clears it once the
        # new workers are Ready, which kwok makes them within a fraction of a second: sooner than a
        # poll may look, so the Event is what is waited for. A StatefulSet may replace the pod before
        # any reconcile sees it gone, and then there is nothing to show.
        wait_event(kubectl, namespace, "pi", "MPIJobRestarting", "Warning", timeout=60)

    def back() -> bool:
        ws = [p for p in live(pods(kubectl, namespace, "pi", "worker"))
              if p["metadata"]["uid"] != victim[0]["metadata"]["uid"] and p["spec"]["hostname"] == "pi-worker-0"]
        return bool(ws)

    wait_until(back, 60, what="worker 0 back under the same hostname")
    wait_condition(kubectl, namespace, "pi", "Running", timeout=60)
    assert conditions(kubectl, namespace, "pi").get("Restarting", {}).get("status", "False") == "False"


@pytest.mark.parametrize("backend", ["job"])  # the operator's flag: the Job backend, the default
def test_elastic_job_backend_a_lost_worker_takes_no_other_worker_with_it(kubectl, operator, namespace, backend):
    """Issue 42 item 5: an elastic MPIJob (its launcher runs horovodrun with discover_hosts.sh) under
    --worker-backend=job gets a StatefulSet, so deleting worker 1 brings worker 1 back alone: worker 0
    and 2 keep their pods, which the Job backend's recreated worker Job would all have replaced."""
    elastic = simulated_mpijob("pi", workers=3, launcher_runs=None)
    elastic["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"] = [
        "horovodrun", "--min-np", "1", "--host-discovery-script", "/etc/mpi/discover_hosts.sh", "python", "t.py"]
    apply(kubectl, namespace, elastic)
    wait_condition(kubectl, namespace, "pi", "Running", timeout=60)
    assert get(kubectl, namespace, "statefulset", "pi-worker") is not None
    assert get(kubectl, namespace, "job", "pi-worker") is None
    before = {p["spec"]["hostname"]: p["metadata"]["uid"] for p in live(pods(kubectl, namespace, "pi", "worker"))}
    assert sorted(before) == ["pi-worker-0", "pi-worker-1", "pi-worker-2"], before
    kubectl("-n", namespace, "delete", "pod", "pi-worker-1", "--wait=false")

    def back() -> dict | None:
        now_ = {p["spec"]["hostname"]: p["metadata"]["uid"] for p in live(pods(kubectl, namespace, "pi", "worker"))}
        return now_ if len(now_) == 3 and now_["pi-worker-1"] != before["pi-worker-1"] else None

    after = wait_until(back, 60, what="worker 1 back")
    assert {h: after[h] for h in ("pi-worker-0", "pi-worker-2")} == \
        {h: before[h] for h in ("pi-worker-0", "pi-worker-2")}, "the other workers kept their pods"


def test_policy_clash_an_older_versions_policy_is_replaced_a_users_is_not(kubectl, start_operator, namespace, backend):
    """Issue 42 item 1, from an older version of this operator, which named the MPIJob's policy `pi`
    (controlled by the MPIJob, our labels, job-name alone): the operator replaces it by
    pi-mpijob-isolation with the new selectors; a policy of the user's labelled like ours but not
    controlled by the MPIJob is left as it was."""
    apply(kubectl, namespace, simulated_mpijob("pi", launcher_runs=None))
    uid = get(kubectl, namespace, "mpijob", "pi")["metadata"]["uid"]
    old_selector = {"matchLabels": {JOB_NAME_LABEL: "pi"}}
    labels = {JOB_NAME_LABEL: "pi", OPERATOR_NAME_LABEL: "mpi-operator"}
    older = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
             "metadata": {"name": "pi", "labels": labels, "ownerReferences": [
                 {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "pi", "uid": uid,
                  "controller": True, "blockOwnerDeletion": True}]},
             "spec": {"podSelector": old_selector, "policyTypes": ["Ingress"],
                      "ingress": [{"from": [{"podSelector": old_selector}]}]}}
    users = {**older, "metadata": {"name": "users-pi", "labels": labels}}
    for pol in (older, users):
        apply(kubectl, namespace, pol)
    theirs = get(kubectl, namespace, "networkpolicy", "users-pi")["metadata"]["resourceVersion"]
    start_operator(backend, namespace)
    wait_condition(kubectl, namespace, "pi", "Running", timeout=60)
    wait_until(lambda: get(kubectl, namespace, "networkpolicy", "pi") is None, 30, what="the older policy gone")
    policy = get(kubectl, namespace, "networkpolicy", POLICY)
    assert policy["spec"]["podSelector"] == {"matchLabels": labels}, policy["spec"]
    assert get(kubectl, namespace, "networkpolicy", "users-pi")["metadata"]["resourceVersion"] == theirs


def test_suspend_then_resume(kubectl, operator, namespace, backend):
    apply(kubectl, namespace, simulated_mpijob("pi", launcher_runs="3s", run_policy={"suspend": True}))
    wait_condition(kubectl, namespace, "pi", "Suspended", timeout=60)
    for _ in range(6):  # while suspended, no pod is started
        assert not items(kubectl, namespace, "pods", f"{JOB_NAME_LABEL}=pi")
        time.sleep(0.5)
    kubectl("-n", namespace, "patch", "mpijob", "pi", "--type=merge", "-p", '{"spec":{"runPolicy":{"suspend":false}}}')
    wait_condition(kubectl, namespace, "pi", "Suspended", timeout=60, status="False")
    wait_condition(kubectl, namespace, "pi", "Succeeded", timeout=90)


def test_suspend_running_job_stops_every_pod(kubectl, operator, namespace, backend):
    apply(kubectl, namespace, simulated_mpijob("pi", launcher_runs=None))
    wait_condition(kubectl, namespace, "pi", "Running", timeout=60)
    kubectl("-n", namespace, "patch", "mpijob", "pi", "--type=merge", "-p", '{"spec":{"runPolicy":{"suspend":true}}}')
    wait_condition(kubectl, namespace, "pi", "Suspended", timeout=60)
    wait_until(lambda: not live(pods(kubectl, namespace, "pi", "worker"))
               and not live(pods(kubectl, namespace, "pi", "launcher")), 60, what="every pod stopped")


def test_active_deadline_fails_the_job(kubectl, operator, namespace, backend):
    apply(kubectl, namespace, simulated_mpijob("slow", launcher_runs=None, run_policy={"activeDeadlineSeconds": 8}))
    failed = wait_condition(kubectl, namespace, "slow", "Failed", timeout=90)
    assert failed["reason"] == "DeadlineExceeded", failed
    wait_until(lambda: not live(pods(kubectl, namespace, "slow", "worker")), 60, what="workers stopped")


def test_ttl_deletes_the_finished_job_and_children(kubectl, operator, namespace, backend):
    apply(kubectl, namespace, simulated_mpijob("pi", launcher_runs="2s", run_policy={"ttlSecondsAfterFinished": 3}))
    wait_condition(kubectl, namespace, "pi", "Succeeded", timeout=90)
    wait_until(lambda: get(kubectl, namespace, "mpijob", "pi") is None, 60, what="MPIJob deleted by TTL")
    wait_until(lambda: get(kubectl, namespace, "configmap", "pi-config") is None, 60, what="children collected")


def test_deleting_the_mpijob_collects_every_child(kubectl, operator, namespace, backend):
    apply(kubectl, namespace, simulated_mpijob("pi", launcher_runs=None))
    wait_condition(kubectl, namespace, "pi", "Running", timeout=60)
    kubectl("-n", namespace, "delete", "mpijob", "pi", "--wait=false")

    def gone() -> bool:
        left = [f"{k}/{o['metadata']['name']}" for k in ("configmap", "secret", "service", "job", "statefulset",
                                                         "networkpolicy")
                for o in items(kubectl, namespace, k, f"{JOB_NAME_LABEL}=pi")]
        left += [p["metadata"]["name"] for p in live(items(kubectl, namespace, "pods", f"{JOB_NAME_LABEL}=pi"))]
        return not left

    wait_until(gone, 90, what="children garbage-collected")


def test_drift_is_repaired(kubectl, operator, namespace, backend):
    apply(kubectl, namespace, simulated_mpijob("pi", workers=2, launcher_runs=None))
    wait_condition(kubectl, namespace, "pi", "Running", timeout=60)
    old = get(kubectl, namespace, "configmap", "pi-config")
    kubectl("-n", namespace, "delete", "configmap", "pi-config")
    cm = wait_until(lambda: get(kubectl, namespace, "configmap", "pi-config"), 30, what="ConfigMap recreated")
    assert cm["metadata"]["uid"] != old["metadata"]["uid"] and cm["data"]["hostfile"] == old["data"]["hostfile"]
    # The NetworkPolicy: its spec drifted by someone else is brought back exactly.
    policy = get(kubectl, namespace, "networkpolicy", POLICY)
    kubectl("-n", namespace, "patch", "networkpolicy", POLICY, "--type=merge", "-p",
            '{"spec":{"podSelector":{"matchLabels":{"extra":"x"}},"ingress":[{}]}}')
    wait_until(lambda: get(kubectl, namespace, "networkpolicy", POLICY)["spec"] == policy["spec"], 30,
               what="the NetworkPolicy's spec restored")

    if backend == "statefulset":
        kubectl("-n", namespace, "scale", "statefulset", "pi-worker", "--replicas=5")
        field = "replicas"
    else:
        kubectl("-n", namespace, "patch", "job", "pi-worker", "--type=merge", "-p", '{"spec":{"parallelism":5}}')
        field = "parallelism"
    wait_until(lambda: get(kubectl, namespace, workers_kind(backend), "pi-worker")["spec"][field] == 2, 30,
               what=f"{field} restored to 2")
    wait_until(lambda: len(live(pods(kubectl, namespace, "pi", "worker"))) == 2, 60, what="2 workers")


def test_invalid_spec_rejected_at_admission(kubectl, crd, namespace):
    job = simulated_mpijob("two-launchers")
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["replicas"] = 2
    r = kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(job), check=False)
    assert r.returncode != 0 and "Launcher" in r.stderr, r.stderr


def test_invalid_spec_beyond_the_schema_is_failed_with_event(kubectl, operator, namespace, backend):
    job = simulated_mpijob("nocontainers")
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"] = []
    apply(kubectl, namespace, job)
    failed = wait_condition(kubectl, namespace, "nocontainers", "Failed", timeout=60)
    assert failed["reason"] == "InvalidSpec" and "Worker" in failed["message"], failed
    # (its Event is sent after the status the same plan writes: waited for, not read at once)
    ev = wait_event(kubectl, namespace, "nocontainers", "InvalidSpec", "Warning", timeout=30)
    assert "containers" in ev["message"], ev
    assert not items(kubectl, namespace, "configmap", f"{JOB_NAME_LABEL}=nocontainers")


# -- least privilege: the namespaced Role (manifests/rbac-namespaced/, issue 36 item 9) ----------------------


def test_least_privilege_runs_an_mpijob_with_the_namespaced_role_alone(kubectl, crd, namespace, tmp_path,
                                                                     start_operator, backend):
    """The operator with --namespace, authenticated as a ServiceAccount that holds the shipped
    namespaced Role and nothing cluster-wide, runs an MPIJob to Succeeded (creates, patches, status,
    Events, the pod informer), and is refused Secrets elsewhere."""
    from testsupport.kubectl import namespaced_service_account_kubeconfig

    kc = namespaced_service_account_kubeconfig(kubectl, namespace, tmp_path / "kubeconfig")
    op = start_operator(backend, namespace, f"--leader-election-namespace={namespace}", kubeconfig=kc)
    apply(kubectl, namespace, simulated_mpijob("pi", workers=2, launcher_runs="3s"))
    wait_condition(kubectl, namespace, "pi", "Succeeded", timeout=90)
    assert wait_event(kubectl, namespace, "pi", "MPIJobSucceeded", "Normal")
    assert get(kubectl, namespace, "networkpolicy", POLICY), "the Role lets the operator isolate the MPIJob"
    log = op.tail(4000)
    assert "forbidden" not in log.lower() and "Unpermitted" not in log, log
    sa = f"system:serviceaccount:{namespace}:mpi-operator"
    for verb, res, where in (("list", "secrets", "default"), ("get", "secrets", "kube-system"),
                             ("list", "secrets", ""), ("list", "pods", "default")):
        r = kubectl("auth", "can-i", verb, res, f"--as={sa}", *(["-n", where] if where else ["-A"]), check=False)
        assert r.stdout.strip() == "no", (verb, res, where, r.stdout)
    r = kubectl("auth", "can-i", "list", "secrets", f"--as={sa}", "-n", namespace, check=False)
    assert r.stdout.strip() == "yes"
