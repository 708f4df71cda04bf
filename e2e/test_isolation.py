"""Network isolation enforced for real (docs/architecture.md section 10): on the real node,
sigs.k8s.io/kube-network-policies (hack/realnode/network-policies.sh) decides every new connection
from the NetworkPolicies the operator makes, and this module tries connections and reads their fate.

- Each MPI (Open MPI 4 and 5, MPICH, Intel MPI), both worker backends, one MPIJob each, all at once
  in one namespace: while they run (each launcher holds its `mpirun` until the probes are done), a
  pod in another namespace and the launcher of another MPIJob of the namespace cannot open a TCP
  connection to a worker's sshd (port 2222: the connect times out), the launcher of the same MPIJob
  can (it reads sshd's banner); then every `mpirun` runs to Succeeded with its policy in force (the
  ranks' own TCP ports between the workers included).
- Isolation off, by the MPIJob's annotation (a fifth MPIJob beside the four) or the operator's flag:
  the same connections open.
- The operator's own /metrics policy (manifests/operator/networkpolicy.yaml, as shipped) on a pod that
  stands for the operator: a pod the policy admits as Prometheus reads /metrics; an unlabelled pod, a
  labelled one in a namespace the policy does not select, and the admitted one on another port cannot.

Every probe is `bash` connecting to `/dev/tcp/<pod IP>/<port>` inside a pod, with a timeout: "open"
(and the first bytes the server sent), "refused" or "timeout"; `pytest -s` prints each. Run alone
with `-k isolation`."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from reconcilers import names as n
from testsupport.kubectl import namespaced_service_account_kubeconfig, release_held_pods
from testsupport.paths import CLUSTER_DIR, ROOT
from testsupport.realnode_mpi import (
    IMPLEMENTATION,
    ON_REAL_NODE,
    apply,
    launcher_logs,
    load_images,
    mpijob,
    pods,
    ready_workers,
    wait_finished,
)
from testsupport.waiting import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.realnode, pytest.mark.builds("mpi-images")]
AGENT = ROOT / "hack" / "realnode" / "network-policies.sh"
SSH_PORT = 2222
# Seconds a probe waits for its connection and the server's first bytes: a dropped SYN never
# answers; an allowed one is answered once kube-network-policies' agent has judged it, and sshd's
# banner follows its fork, both slower on a busy machine (3 s timed an open sshd out under a load of 20).
CONNECT_TIMEOUT = 8
# The launcher waits for /tmp/go before it runs mpirun: the probes run while the workers serve sshd.
HOLD = "until [ -e /tmp/go ]; do sleep 0.2; done; exec mpirun -n 4 /opt/pi"
# One probe per target, all at once: prints "<ip>:<port> open <first bytes>|refused|timeout|error ...".
PROBE = r"""
for t in "$@"; do
  (
    out=$(timeout @TIMEOUT@ bash -c 'exec 3<>/dev/tcp/${0%:*}/${0##*:} && head -c 8 <&3 | tr -cd "[:print:]"' "$t" 2>&1)
    rc=$?
    case $rc:$out in
      0:*) echo "$t open $out" ;;
      124:*) echo "$t timeout" ;;
      *refused*) echo "$t refused" ;;
      *) echo "$t error $rc $out" ;;
    esac
  ) &
done
wait
""".replace("@TIMEOUT@", str(CONNECT_TIMEOUT))
CLOSED = ("timeout", "refused")


@pytest.fixture(scope="session")
def network_policies(realnode) -> str:
    """kube-network-policies enforcing on the real node (hack/realnode/network-policies.sh, started by
    `make cluster-up`). Skipped, with the reason, only where this machine cannot run it."""
    env = {"CLUSTER_DIR": str(CLUSTER_DIR), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    status = _run([str(AGENT), "status"], env)
    if status.returncode != 0:
        check = _run([str(AGENT), "--check"], env)
        if check.returncode != 0:
            pytest.skip(f"NetworkPolicies are not enforced on this machine: {check.stdout.strip()}")
        pytest.fail(f"this machine can enforce NetworkPolicies but the cluster does not ({status.stdout.strip()}): "
                    "run hack/realnode/network-policies.sh up")
    return status.stdout.strip()


def _run(argv: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture(scope="session")
def images(realnode) -> dict[str, str]:
    return load_images(CLUSTER_DIR, *IMPLEMENTATION)


def pod_manifest(name: str, image: str, command: list[str], labels: dict | None = None,
                 ports: list[dict] | None = None) -> dict:
    # Non-root and restricted (the Pod Security Standard of the operator's namespace), as mpiuser.
    container = {"name": "c", "image": image, "imagePullPolicy": "IfNotPresent", "command": command,
                 "securityContext": {"runAsUser": 1000, "runAsGroup": 1000, "runAsNonRoot": True,
                                     "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                     "seccompProfile": {"type": "RuntimeDefault"}}}
    if ports:
        container["ports"] = ports
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
            "spec": {**ON_REAL_NODE, "terminationGracePeriodSeconds": 0, "containers": [container]}}


def start_pods(kubectl, ns: str, *manifests: dict) -> dict[str, str]:
    """The pods created and Ready: name -> pod IP."""
    for m in manifests:
        apply(kubectl, ns, m)
    ips = {}
    for m in manifests:
        name = m["metadata"]["name"]
        kubectl("-n", ns, "wait", "--for=condition=Ready", f"pod/{name}", "--timeout=120s", timeout=130)
        ips[name] = json.loads(kubectl("-n", ns, "get", "pod", name, "-o", "json").stdout)["status"]["podIP"]
    return ips


def probe(kubectl, ns: str, pod: str, targets: list[str]) -> dict[str, str]:
    """target "ip:port" -> "open <bytes>", "timeout", "refused" (or "error ..."), tried from inside `pod`."""
    r = kubectl("-n", ns, "exec", pod, "--", "bash", "-c", PROBE, "probe", *targets, timeout=60)
    got = {}
    for line in r.stdout.splitlines():
        target, _, result = line.partition(" ")
        got[target] = result
    assert set(got) == set(targets), r.stdout + r.stderr
    return got


def outcome(result: str) -> str:
    return result.split(" ")[0]


def report(what: str, results: dict[str, str], names: dict[str, str]) -> None:
    for target, result in sorted(results.items()):
        print(f"[isolation] {what} -> {names.get(target, target)}: {result}")


def worker_ips(kubectl, ns: str, name: str, count: int = 2) -> list[str]:
    ws = wait_until(lambda: (r := ready_workers(kubectl, ns, name)) and len(r) == count and all(
        p["status"].get("podIP") for p in r) and r, 240, what=f"{count} Ready workers of {ns}/{name}")
    return [p["status"]["podIP"] for p in ws]


def held_launcher(kubectl, ns: str, name: str) -> str:
    """The name of the MPIJob's launcher pod, Running and holding its mpirun."""
    def running() -> str | None:
        ps = [p for p in pods(kubectl, ns, name, "launcher") if p["status"].get("phase") == "Running"
              and not p["metadata"].get("deletionTimestamp")]
        return ps[0]["metadata"]["name"] if ps else None

    return wait_until(running, 240, what=f"the launcher of {ns}/{name} Running")


def start_namespaced_operator(start_operator, kubectl, namespace: str, backend: str, tmp_path: Path, *extra: str):
    """The operator for `namespace` alone, as manifests/rbac-namespaced/ grants it (the Role's
    networkpolicies verbs included): no cluster-wide grant, so nothing outside the test changes it."""
    kc = namespaced_service_account_kubeconfig(kubectl, namespace, tmp_path / "kubeconfig")
    return start_operator(backend, namespace, f"--leader-election-namespace={namespace}", *extra, kubeconfig=kc)


def isolation_job(name: str, flavour: str, image: str, isolated: bool = True) -> dict:
    job = mpijob(name, flavour, image, args=["bash", "-c", HOLD])
    if not isolated:
        job["metadata"]["annotations"] = {n.NETWORK_ISOLATION_ANNOTATION: "false"}
    return job


def run_to_succeeded(kubectl, ns: str, names: list[str]) -> None:
    for name in names:
        kubectl("-n", ns, "exec", held_launcher(kubectl, ns, name), "--", "touch", "/tmp/go")
    for name in names:
        result = wait_finished(kubectl, ns, name, 300)
        logs = launcher_logs(kubectl, ns, name)
        assert result == "Succeeded" and "pi is approximately 3.14159" in logs, (name, result, logs)
        assert len(pods(kubectl, ns, name, "launcher")) == 1, f"{name}: the launcher was retried"


@pytest.fixture
def outsider(kubectl, images, network_policies, tmp_path_factory):
    """A pod in a namespace of its own on the real node, to probe from."""
    ns = f"outside-{uuid.uuid4().hex[:8]}"
    kubectl("create", "namespace", ns)
    start_pods(kubectl, ns, pod_manifest("prober", images["openmpi4"], ["sleep", "infinity"]))
    yield ns, "prober"
    kubectl("delete", "namespace", ns, "--wait=false", check=False)
    release_held_pods(kubectl, ns)


@pytest.mark.parametrize("backend", ["job", "statefulset"])
def test_isolation_every_mpi_runs_with_its_policy_and_nobody_else_reaches_its_workers(
        kubectl, images, network_policies, start_operator, namespace, outsider, backend, tmp_path):
    t0 = time.monotonic()
    start_namespaced_operator(start_operator, kubectl, namespace, backend, tmp_path)
    jobs = {f"iso-{flavour}": flavour for flavour in IMPLEMENTATION}
    for name, flavour in jobs.items():
        apply(kubectl, namespace, isolation_job(name, flavour, images[flavour]))
    # Beside them, the same MPIJob with isolation turned off by its annotation.
    apply(kubectl, namespace, isolation_job("open", "openmpi4", images["openmpi4"], isolated=False))
    workers = {name: worker_ips(kubectl, namespace, name) for name in [*jobs, "open"]}
    launchers = {name: held_launcher(kubectl, namespace, name) for name in [*jobs, "open"]}
    policies = {p["metadata"]["name"] for p in json.loads(kubectl("-n", namespace, "get", "networkpolicies", "-o",
                                                                  "json").stdout)["items"]}
    assert policies == {n.network_policy_name({"metadata": {"name": j}}) for j in jobs}, policies  # none for "open"
    names = {f"{ip}:{SSH_PORT}": f"{job} worker {i} sshd" for job, ips in workers.items()
             for i, ip in enumerate(ips)}
    ssh = {job: [f"{ip}:{SSH_PORT}" for ip in ips] for job, ips in workers.items()}
    order = list(jobs)

    def from_launcher(i: int) -> tuple[str, list[str], dict[str, str]]:
        """Its own worker, both of the next MPIJob's, the open MPIJob's."""
        job = order[i]
        targets = [ssh[job][0], *ssh[order[(i + 1) % len(order)]], ssh["open"][0]]
        return job, targets, probe(kubectl, namespace, launchers[job], targets)

    with ThreadPoolExecutor(6) as pool:
        outside = pool.submit(probe, kubectl, *outsider, [t for ts in ssh.values() for t in ts])
        from_open = pool.submit(probe, kubectl, namespace, launchers["open"], [ssh[j][1] for j in jobs])
        inside = list(pool.map(from_launcher, range(len(order))))
    print()
    report(f"pod {outsider[0]}/{outsider[1]} (another namespace)", outside.result(), names)
    for job, _, results in inside:
        report(f"{job}'s launcher", results, names)
    report("open's launcher (another MPIJob, not isolated)", from_open.result(), names)

    for target, result in outside.result().items():
        want = "open" if target in ssh["open"] else CLOSED
        assert outcome(result) in want, (names[target], result)
    for job, targets, results in inside:
        own, *others, unisolated = targets
        assert results[own].startswith("open SSH-2.0"), (job, names[own], results[own])
        for t in others:
            assert outcome(results[t]) in CLOSED, (job, names[t], results[t])
        assert results[unisolated].startswith("open SSH-2.0"), (job, names[unisolated], results[unisolated])
    for target, result in from_open.result().items():
        assert outcome(result) in CLOSED, ("open's launcher", names[target], result)

    t_run = time.monotonic()
    run_to_succeeded(kubectl, namespace, [*jobs, "open"])
    print(f"[isolation] {backend}: {len(jobs)} isolated MPIJobs and 1 open, workers up and probed in "
          f"{t_run - t0:.1f}s, then every mpirun to Succeeded in {time.monotonic() - t_run:.1f}s")


# What the Training Operator puts on a PyTorchJob `pi`'s master pod: job-name, as on an MPIJob's.
PYTORCH_LABELS = {n.JOB_NAME_LABEL: "pi", n.OPERATOR_NAME_LABEL: "pytorchjob-controller",
                  "training.kubeflow.org/replica-type": "master", "training.kubeflow.org/replica-index": "0"}
HTTP = "mkdir -p /tmp/www && cd /tmp/www && echo ok >metrics && exec python3 -m http.server 8080"  # GET /metrics: _http


def test_foreign_job_name_another_operators_pod_of_the_same_name_keeps_its_ingress_and_is_not_admitted(
        kubectl, images, network_policies, start_operator, namespace, outsider, tmp_path):
    """Issue 42 item 2: beside MPIJob `pi`, a pod labelled as the Training Operator labels a PyTorchJob
    `pi`'s (training.kubeflow.org/job-name: pi, its own operator-name) that serves HTTP. The MPIJob's
    policy selects its own pods only: a pod of another namespace still reaches the PyTorchJob pod, and
    the PyTorchJob pod cannot reach the MPIJob's workers' sshd, which its own launcher reads; mpirun
    then runs to Succeeded."""
    start_namespaced_operator(start_operator, kubectl, namespace, "job", tmp_path)
    apply(kubectl, namespace, isolation_job("pi", "openmpi4", images["openmpi4"]))
    other = start_pods(kubectl, namespace, pod_manifest("pytorch-pi-master", images["openmpi5"], ["bash", "-c", HTTP],
                                                        PYTORCH_LABELS, [{"containerPort": 8080}]))
    workers = worker_ips(kubectl, namespace, "pi")
    launcher = held_launcher(kubectl, namespace, "pi")
    (policy,) = json.loads(kubectl("-n", namespace, "get", "networkpolicies", "-o", "json").stdout)["items"]
    names = {f"{ip}:{SSH_PORT}": f"pi worker {i} sshd" for i, ip in enumerate(workers)}
    web = f"{other['pytorch-pi-master']}:8080"
    names[web] = "the PyTorchJob pod's port 8080"
    # HTTP: the server speaks only when spoken to (probe() waits for a banner, as sshd sends one)
    # (a refused connection is its server not listening yet, never the policy, which drops: timeout)
    from_outside = {web: _http_listening(kubectl, *outsider, web)}
    from_pytorch = probe(kubectl, namespace, "pytorch-pi-master", list(names.keys() - {web}))
    from_launcher = probe(kubectl, namespace, launcher, list(names.keys() - {web}))
    print(f"\n[isolation] pi's policy {policy['metadata']['name']} selects {policy['spec']['podSelector']}")
    report(f"pod {outsider[0]}/{outsider[1]} (another namespace)", from_outside, names)
    report("the PyTorchJob pod labelled job-name: pi", from_pytorch, names)
    report("pi's launcher", from_launcher, names)
    assert from_outside[web].startswith("open HTTP/1.0 200"), ("its ingress cut by the MPIJob's policy", from_outside)
    assert all(outcome(r) in CLOSED for r in from_pytorch.values()), ("admitted to pi's sshd", from_pytorch)
    assert all(r.startswith("open SSH-2.0") for r in from_launcher.values()), from_launcher
    run_to_succeeded(kubectl, namespace, ["pi"])


def test_isolation_off_by_the_operators_flag_the_same_connections_open(
        kubectl, images, network_policies, start_operator, namespace, outsider, tmp_path):
    t0 = time.monotonic()
    start_namespaced_operator(start_operator, kubectl, namespace, "job", tmp_path, "--network-isolation=false")
    for name in ("a", "b"):
        apply(kubectl, namespace, isolation_job(name, "openmpi4", images["openmpi4"]))
    workers = {name: worker_ips(kubectl, namespace, name) for name in ("a", "b")}
    launcher = held_launcher(kubectl, namespace, "a")
    held_launcher(kubectl, namespace, "b")
    items = json.loads(kubectl("-n", namespace, "get", "networkpolicies", "-o", "json").stdout)["items"]
    assert items == [], "no NetworkPolicy with --network-isolation=false"
    names = {f"{ip}:{SSH_PORT}": f"{job} worker {i} sshd" for job, ips in workers.items() for i, ip in enumerate(ips)}
    targets = list(names)
    outside = probe(kubectl, *outsider, targets)
    inside = probe(kubectl, namespace, launcher, [f"{ip}:{SSH_PORT}" for ip in workers["b"]])
    print()
    report(f"pod {outsider[0]}/{outsider[1]} (another namespace)", outside, names)
    report("a's launcher (another MPIJob)", inside, names)
    assert all(r.startswith("open SSH-2.0") for r in [*outside.values(), *inside.values()]), (outside, inside)
    run_to_succeeded(kubectl, namespace, ["a", "b"])
    print(f"[isolation] --network-isolation=false: 2 MPIJobs probed and Succeeded in {time.monotonic() - t0:.1f}s")


# -- the operator's /metrics policy ------------------------------------------------------------------------

POLICY = ROOT / "manifests" / "operator" / "networkpolicy.yaml"
# What the stand-in serves: /metrics on the port named `metrics` (8080, the Deployment's), and a
# second port (8081, the probes' `health`) that the policy does not open.
SERVE = ("mkdir -p /tmp/www && echo 'mpi_operator_is_leader 1' >/tmp/www/metrics && cd /tmp/www && "
         "(python3 -m http.server 8081 &) && exec python3 -m http.server 8080")
GET = "GET /metrics HTTP/1.0\r\n\r\n"


def _http(kubectl, ns: str, pod: str, target: str) -> str:
    """"open <status line>" or the probe's failure, for an HTTP GET of /metrics from `pod`."""
    script = (f"out=$(timeout {CONNECT_TIMEOUT} bash -c 'exec 3<>/dev/tcp/${{0%:*}}/${{0#*:}} && "
              f"printf \"{GET.encode('unicode_escape').decode()}\" >&3 && head -n 1 <&3 | tr -d \"\\r\"' \"$1\" 2>&1); "
              "rc=$?; case $rc:$out in 0:*) echo \"open $out\";; 124:*) echo timeout;; *refused*) echo refused;; "
              "*) echo \"error $rc $out\";; esac")
    return kubectl("-n", ns, "exec", pod, "--", "bash", "-c", script, "http", target, timeout=30).stdout.strip()


def _http_listening(kubectl, ns: str, pod: str, target: str, timeout: float = 60) -> str:
    """_http once the target's server listens: a refused connection (nothing listens yet: python's
    http.server starts in a second or ten on a busy node) is tried again; any other answer stands."""
    deadline = time.monotonic() + timeout
    while True:
        got = _http(kubectl, ns, pod, target)
        if got != "refused" or time.monotonic() > deadline:
            return got
        time.sleep(1)


def _admits(selector: dict, labels: dict) -> bool:
    """A label selector of the shipped policy (matchLabels only) against labels."""
    assert set(selector) <= {"matchLabels"}, f"the test reads matchLabels only; the policy has {selector}"
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def test_isolation_the_operators_metrics_policy_admits_prometheus_alone(kubectl, images, network_policies,
                                                                         namespace, outsider):
    """manifests/operator/networkpolicy.yaml as shipped, in a namespace of the test's (the policy's own
    namespace is the operator's), over a pod with the operator's labels and ports that serves
    /metrics: the scrapers it names read it; an unlabelled pod of their namespace cannot, nor a
    labelled one where the policy does not look (when it selects namespaces), nor anyone the port
    it does not open."""
    policy = yaml.safe_load(POLICY.read_text())
    (rule,) = policy["spec"]["ingress"]
    (peer,) = rule["from"]
    policy["metadata"] = {"name": policy["metadata"]["name"], "namespace": namespace}
    kubectl("apply", "-f", "-", input=json.dumps(policy))
    labels = policy["spec"]["podSelector"]["matchLabels"]
    server = pod_manifest("operator", images["openmpi5"], ["bash", "-c", SERVE], labels,
                          [{"name": "metrics", "containerPort": 8080}, {"name": "health", "containerPort": 8081}])
    op_ip = start_pods(kubectl, namespace, server)["operator"]
    # The namespace the scraper runs in: one the policy's namespaceSelector admits.
    ns_selector = peer.get("namespaceSelector")
    scrape_ns, made = namespace, False
    if ns_selector and ns_selector.get("matchLabels", {}).get("kubernetes.io/metadata.name"):
        scrape_ns = ns_selector["matchLabels"]["kubernetes.io/metadata.name"]
        made = kubectl("create", "namespace", scrape_ns, check=False).returncode == 0
    scrape_labels = (peer.get("podSelector") or {}).get("matchLabels") or {}
    scraper = f"scraper-{namespace}"
    start_pods(kubectl, scrape_ns, pod_manifest(scraper, images["openmpi4"], ["sleep", "infinity"], scrape_labels))
    cases = [(scrape_ns, scraper, f"{op_ip}:8080", "open HTTP/1.0 200 OK", "the scraper the policy names"),
             (scrape_ns, scraper, f"{op_ip}:8081", CLOSED, "the same scraper, to another port")]
    extra = [pod_manifest(f"unlabelled-{namespace}", images["openmpi4"], ["sleep", "infinity"])]
    start_pods(kubectl, scrape_ns, *extra)
    cases.append((scrape_ns, extra[0]["metadata"]["name"], f"{op_ip}:8080", CLOSED,
                  "an unlabelled pod of the scraper's namespace"))
    other_ns_labels = json.loads(kubectl("get", "namespace", outsider[0], "-o", "json").stdout)["metadata"]["labels"]
    # Without a namespaceSelector the peer is the policy's own namespace; with {} it is every namespace.
    if ns_selector is None or not _admits(ns_selector, other_ns_labels):
        start_pods(kubectl, outsider[0], pod_manifest("labelled", images["openmpi4"], ["sleep", "infinity"],
                                                      scrape_labels))
        cases.append((outsider[0], "labelled", f"{op_ip}:8080", CLOSED,
                      "a pod labelled as the scraper, in a namespace the policy does not select"))
    else:
        print(f"\n[isolation] the shipped policy admits {scrape_labels} pods of every namespace "
              f"(namespaceSelector {ns_selector}): no namespace to refuse them from")
    try:
        print()
        for ns, pod, target, want, who in cases:
            got = _http(kubectl, ns, pod, target)
            print(f"[isolation] {who} ({ns}/{pod}) -> the operator's {target}: {got}")
            assert got == want if isinstance(want, str) else outcome(got) in want, (who, got)
    finally:
        if made:
            kubectl("delete", "namespace", scrape_ns, "--wait=false", check=False)
        elif scrape_ns != namespace:
            kubectl("-n", scrape_ns, "delete", "pod", scraper, extra[0]["metadata"]["name"], "--wait=false",
                    check=False)


def test_isolation_the_agent_is_kube_network_policies(network_policies):
    """What enforces the policies above: the agent's own status line, and its pinned version."""
    versions = (ROOT / "hack" / "versions.sh").read_text()
    assert "KUBE_NETWORK_POLICIES_VERSION=0.8.0" in versions
    assert network_policies.startswith("kube-network-policies enforces NetworkPolicies on realnode"), \
        network_policies
    log = Path(CLUSTER_DIR / "logs" / "kube-network-policies.log").read_text(errors="replace")
    assert '"Starting controller" name="kube-network-policies"' in log
