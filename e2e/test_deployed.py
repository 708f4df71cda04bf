"""The operator deployed as users deploy it, scraped by a real Prometheus.

Its image (built without Docker here), the Deployment of manifests/ (through the manifests/local
overlay) with two replicas on the real node, in-cluster config through the `kubernetes` Service,
leader election, probes, non-root with a read-only root filesystem; an MPIJob runs `mpirun` to
Succeeded through it, and the standby takes over when the leader's pod is deleted. The overlay
scopes the operator to the namespace mpijob-deployed, so it never reconciles the MPIJobs of the
other tests' operators. The CRD and RBAC stay afterwards: the other tests' operators use that
ServiceAccount.

Monitoring: the Prometheus Operator (built from its Go module) runs against the local cluster with a
`Prometheus` resource that selects the project's ServiceMonitor and PrometheusRule as shipped
(manifests/monitoring/). Its StatefulSet cannot run here (no image registry), so a nodeSelector that
no node has keeps it Pending, and Debian's Prometheus runs on the host with the configuration the
Prometheus Operator generated (its Secret), given the local API server's credentials for service
discovery and a 2 s scrape interval for the test's sake; it scrapes the operator pods on the real
node's bridge, as an in-cluster Prometheus would."""

from __future__ import annotations

import base64
import gzip
import json
import os
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from testsupport.kubectl import wait_condition, wait_established
from testsupport.net import free_port
from testsupport.paths import CLUSTER_DIR, ROOT
from testsupport.waiting import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.realnode, pytest.mark.builds("operator-image", "prometheus")]
NS = "mpi-operator"
JOBS_NS = "mpijob-deployed"
SELECTOR = "app.kubernetes.io/name=mpi-operator"


def _hack(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CLUSTER_DIR": str(CLUSTER_DIR), "PIP_PYTHON": str(ROOT / ".venv" / "bin" / "python")}
    env.pop("KUBECONFIG", None)
    return subprocess.run([str(ROOT / "hack" / args[0]), *args[1:]], capture_output=True, text=True, env=env,
                          timeout=3600)  # may wait for the background build (testsupport/builds.py)


@pytest.fixture(scope="module")
def deployed(kubectl, realnode, crd) -> Iterator[str]:
    t0 = time.monotonic()
    r = _hack("deploy.sh", "deploy")
    assert r.returncode == 0, r.stdout + r.stderr
    print(f"\n[deployed] make deploy (image cached or built, rollout of 2 replicas): {time.monotonic() - t0:.1f}s")
    yield JOBS_NS
    kubectl("delete", "-k", str(ROOT / "manifests" / "local"), "--ignore-not-found", "--wait=true", timeout=180)


def operator_pods(kubectl) -> list[dict]:
    return json.loads(kubectl("-n", NS, "get", "pods", "-l", SELECTOR, "-o", "json").stdout)["items"]


def leader(kubectl) -> str:
    lease = json.loads(kubectl("-n", NS, "get", "lease", "mpi-operator", "-o", "json").stdout)
    return lease["spec"].get("holderIdentity") or ""


def ready(pod: dict) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and any(
        c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))


def pi_job(name: str) -> dict:
    job = yaml.safe_load((ROOT / "hack" / "realnode" / "pi-mpijob.yaml").read_text())
    job["metadata"] = {"name": name, "namespace": JOBS_NS}
    return job


def test_the_one_file_install_is_what_make_deploy_applied(kubectl, deployed):
    """deploy/mpijob-operator.yaml, as users apply it (kubectl apply --server-side -f): every object
    of the file is in the cluster, applied server-side by kubectl (its field manager), and the
    Deployment then carries the local cluster's overlay (manifests/local) over it."""
    objs = [d for d in yaml.safe_load_all((ROOT / "deploy" / "mpijob-operator.yaml").read_text()) if d]
    assert len(objs) > 10
    for obj in objs:
        meta = obj["metadata"]
        ns = ["-n", meta["namespace"]] if meta.get("namespace") else []
        kind = f"{obj['kind'].lower()}.{obj['apiVersion'].split('/')[0]}" if "/" in obj["apiVersion"] else obj["kind"]
        live = json.loads(kubectl(*ns, "get", kind, meta["name"], "--show-managed-fields", "-o", "json").stdout)
        managers = {(m.get("manager"), m.get("operation")) for m in live["metadata"].get("managedFields") or []}
        assert ("kubectl", "Apply") in managers, (obj["kind"], meta["name"], managers)


def test_two_replicas_ready_on_the_real_node_one_leader(kubectl, deployed):
    pods = wait_until(lambda: [p for p in operator_pods(kubectl) if ready(p)] if
                      len([p for p in operator_pods(kubectl) if ready(p)]) == 2 else None, 120, what="2 Ready")
    assert {p["spec"]["nodeName"] for p in pods} == {"realnode"}
    assert wait_until(lambda: leader(kubectl) in {p["metadata"]["name"] for p in pods}, 60, what="a leader")
    for p in pods:
        sc = p["spec"]["containers"][0]["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True and sc["runAsNonRoot"] is True, sc
        name = p["metadata"]["name"]
        uid = kubectl("-n", NS, "exec", name, "--", "id", "-u").stdout.strip()
        assert uid == "65532", uid
        ro = kubectl("-n", NS, "exec", name, "--", "touch", "/opt/x", check=False)
        assert ro.returncode != 0 and "Read-only file system" in ro.stderr, ro.stderr
        # in-cluster config: the ServiceAccount token, through the `kubernetes` Service
        env = kubectl("-n", NS, "exec", name, "--", "printenv", "KUBERNETES_SERVICE_HOST").stdout.strip()
        assert env == "10.96.0.1", env
    logs = kubectl("-n", NS, "logs", leader(kubectl)).stdout
    assert '"event": "caches synced"' in logs and '"event": "became leader"' in logs, logs[-2000:]


def test_pi_by_mpirun_through_the_deployed_operator(kubectl, deployed):
    t0 = time.monotonic()
    kubectl("apply", "-f", "-", input=json.dumps(pi_job("pi")))
    wait_condition(kubectl, JOBS_NS, "pi", "Succeeded", timeout=240)
    print(f"\n[deployed] real MPIJob submit -> Succeeded through the Deployment: {time.monotonic() - t0:.1f}s")
    pods = json.loads(kubectl("-n", JOBS_NS, "get", "pods", "-l", "training.kubeflow.org/job-name=pi,"
                              "training.kubeflow.org/job-role=launcher", "-o", "json").stdout)["items"]
    logs = "\n".join(kubectl("-n", JOBS_NS, "logs", p["metadata"]["name"]).stdout for p in pods)
    assert "pi is approximately 3.14159" in logs, logs
    print("[deployed] launcher:\n" + "\n".join(f"    {line}" for line in logs.strip().splitlines()))


def test_the_standby_takes_over_when_the_leader_pod_is_deleted(kubectl, deployed):
    old = wait_until(lambda: leader(kubectl), 60, what="a leader")
    t0 = time.monotonic()
    kubectl("-n", NS, "delete", "pod", old, "--wait=false")
    job = pi_job("after-failover")
    kubectl("apply", "-f", "-", input=json.dumps(job))
    wait_condition(kubectl, JOBS_NS, "after-failover", "Created", timeout=120)
    took = time.monotonic() - t0
    new = leader(kubectl)
    assert new and new != old, (old, new)
    print(f"\n[deployed] leader pod deleted -> first status write by the new leader ({new}): {took:.1f}s")
    wait_condition(kubectl, JOBS_NS, "after-failover", "Succeeded", timeout=240)


# -- Prometheus -------------------------------------------------------------------------------------------------------

PROM = "e2e"  # the Prometheus resource



def build_prometheus() -> tuple[Path, Path]:
    r = _hack("build-prometheus.sh")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.strip().splitlines()
    return Path(lines[-1]), Path(lines[-2].split(" ", 1)[1])


def local_config(generated: str, kubeconfig: str, rules_dir: Path) -> str:
    """The Prometheus Operator's configuration, for a Prometheus on the host: service discovery
    through the local API server, the rule files where the test writes them, a short interval."""
    # what the Prometheus Operator's config-reloader substitutes from the pod's environment
    generated = generated.replace("$(SHARD)", "0").replace("$(POD_NAME)", f"prometheus-{PROM}-0")
    cfg = yaml.safe_load(generated)
    cfg.setdefault("global", {}).update({"scrape_interval": "2s", "evaluation_interval": "2s"})
    for sc in cfg.get("scrape_configs") or []:
        sc["scrape_interval"], sc["scrape_timeout"] = "2s", "1s"
        for sd in sc.get("kubernetes_sd_configs") or []:
            sd["kubeconfig_file"] = kubeconfig
    cfg["rule_files"] = [str(rules_dir / "*.yaml")]
    return yaml.safe_dump(cfg)


@pytest.fixture(scope="module")
def prometheus(kubectl, kubeconfig, deployed, tmp_path_factory) -> Iterator[str]:
    t0 = time.monotonic()
    bin_dir, crds = build_prometheus()
    print(f"\n[monitoring] Prometheus Operator and Prometheus ready (built or cached): {time.monotonic() - t0:.1f}s")
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crds), timeout=120)
    wait_established(kubectl, *(f"{crd}.monitoring.coreos.com"
                                for crd in ("prometheuses", "servicemonitors", "prometheusrules")))
    tmp = tmp_path_factory.mktemp("prometheus")
    pki = CLUSTER_DIR / "pki"
    op_log = open(tmp / "prometheus-operator.log", "w")  # noqa: SIM115 - closed at teardown
    op = subprocess.Popen([str(bin_dir / "prometheus-operator"), "--apiserver=https://127.0.0.1:6443",
                           f"--cert-file={pki / 'admin.crt'}", f"--key-file={pki / 'admin.key'}",
                           f"--ca-file={pki / 'ca.crt'}", f"--namespaces={NS}",
                           f"--web.listen-address=127.0.0.1:{free_port()}"], stdout=op_log, stderr=subprocess.STDOUT)
    procs = [op]
    try:
        kubectl("apply", "-k", str(ROOT / "manifests" / "monitoring"))
        kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "monitoring.coreos.com/v1", "kind": "Prometheus",
            "metadata": {"name": PROM, "namespace": NS},
            "spec": {"replicas": 1,
                     "serviceMonitorSelector": {"matchLabels": {"app.kubernetes.io/name": "mpi-operator"}},
                     "ruleSelector": {"matchLabels": {"app.kubernetes.io/name": "mpi-operator"}},
                     "serviceMonitorNamespaceSelector": {}, "ruleNamespaceSelector": {},
                     # its own pods cannot run here (no registry): keep them Pending
                     "nodeSelector": {"mpijob-operator.dev/no-such-node": "x"}}}))

        def generated() -> dict | None:
            r = kubectl("-n", NS, "get", "secret", f"prometheus-{PROM}", "-o", "json", check=False)
            data = json.loads(r.stdout).get("data", {}) if r.returncode == 0 else {}
            cfg = gzip.decompress(base64.b64decode(data["prometheus.yaml.gz"])).decode() if data.get(
                "prometheus.yaml.gz") else ""
            return {"config": cfg} if "mpi-operator" in cfg else None

        cfg = wait_until(generated, 90, what="the Prometheus Operator's configuration with our ServiceMonitor")
        cfg = cfg["config"]
        rules = wait_until(lambda: json.loads(kubectl("-n", NS, "get", "configmap",
                                                      f"prometheus-{PROM}-rulefiles-0", "-o", "json",
                                                      check=False).stdout or "{}").get("data"), 60,
                           what="the rule files of the PrometheusRule")
        rules_dir = tmp / "rules"
        rules_dir.mkdir()
        for name, text in rules.items():
            (rules_dir / (name if name.endswith(".yaml") else name + ".yaml")).write_text(text)
        (tmp / "prometheus.yaml").write_text(local_config(cfg, kubeconfig, rules_dir))
        port = free_port()
        prom_log = open(tmp / "prometheus.log", "w")  # noqa: SIM115 - closed at teardown
        procs.append(subprocess.Popen([str(bin_dir / "prometheus"), f"--config.file={tmp / 'prometheus.yaml'}",
                                       f"--storage.tsdb.path={tmp / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                                      stdout=prom_log, stderr=subprocess.STDOUT))
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: _http(url + "/-/ready") is not None, 60, what="Prometheus ready")
        yield url
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=30)
        print(f"\n--- prometheus-operator log, last lines ---\n{(tmp / 'prometheus-operator.log').read_text()[-3000:]}")
        if (tmp / "prometheus.log").exists():
            print(f"\n--- prometheus log, last lines ---\n{(tmp / 'prometheus.log').read_text()[-3000:]}")
        kubectl("-n", NS, "delete", "prometheus", PROM, "--ignore-not-found", check=False)
        kubectl("delete", "-k", str(ROOT / "manifests" / "monitoring"), "--ignore-not-found", check=False)


def _http(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.read().decode()
    except OSError:
        return None


def query(url: str, promql: str) -> list[dict]:
    body = _http(f"{url}/api/v1/query?query={urllib.parse.quote(promql)}")
    return json.loads(body)["data"]["result"] if body else []


def value(url: str, promql: str) -> float | None:
    result = query(url, promql)
    return float(result[0]["value"][1]) if result else None


def test_prometheus_scrapes_both_replicas_through_the_shipped_service_monitor(kubectl, prometheus):
    up = wait_until(lambda: (r := query(prometheus, 'up{namespace="mpi-operator"}')) and len(r) == 2
                    and all(x["value"][1] == "1" for x in r) and r, 90, what="up == 1 for both replicas")
    assert {x["metric"]["pod"] for x in up} == {p["metadata"]["name"] for p in operator_pods(kubectl) if ready(p)}
    assert wait_until(lambda: value(prometheus, "sum(mpi_operator_is_leader)") == 1.0, 60, what="one leader")
    for metric in ("workqueue_depth", "workqueue_adds_total", "workqueue_work_duration_seconds_bucket",
                   "mpi_operator_reconcile_duration_seconds_count", "rest_client_requests_total"):
        assert query(prometheus, f'{metric}{{namespace="mpi-operator"}}'), metric


def test_jobs_successful_rises_after_an_mpijob_succeeds(kubectl, prometheus):
    total = 'sum(mpi_operator_jobs_successful_total{namespace="mpi-operator"})'
    before = wait_until(lambda: value(prometheus, total) is not None, 60, what="the counter") and \
        value(prometheus, total)
    kubectl("apply", "-f", "-", input=json.dumps(pi_job("counted")))
    wait_condition(kubectl, JOBS_NS, "counted", "Succeeded", timeout=240)
    wait_until(lambda: (value(prometheus, total) or 0) >= (before or 0) + 1, 60,
               what=f"mpi_operator_jobs_successful_total above {before}")
    for promql in ('up{namespace="mpi-operator"}', "sum(mpi_operator_is_leader)", total,
                   'sum(workqueue_adds_total{name="mpijob"})', "mpi_operator:jobs_not_running:count"):
        got = {x["metric"].get("pod", ""): x["value"][1] for x in query(prometheus, promql)}
        print(f"[monitoring] {promql} = {got}")


def test_the_shipped_rules_load_and_evaluate(prometheus):
    groups = wait_until(lambda: json.loads(_http(prometheus + "/api/v1/rules") or "{}").get("data", {}).get("groups"),
                        60, what="rule groups")
    names = {g["name"] for g in groups}
    assert {"mpi-operator.rules", "mpi-operator.alerts"} <= names, names
    rules = [r for g in groups for r in g["rules"]]
    assert {r["name"] for r in rules if r["type"] == "alerting"} >= {
        "MPIOperatorNoLeader", "MPIOperatorReconcileErrors", "MPIJobStuck", "MPIOperatorReconcileHung"}
    wait_until(lambda: all(r.get("health") == "ok" for g in json.loads(_http(prometheus + "/api/v1/rules"))
                           ["data"]["groups"] for r in g["rules"]), 60, what="every rule evaluated without error")
    # with a leader there, the no-leader alert is not firing
    alerts = json.loads(_http(prometheus + "/api/v1/alerts"))["data"]["alerts"]
    assert not [a for a in alerts if a["labels"]["alertname"] == "MPIOperatorNoLeader" and a["state"] == "firing"]
