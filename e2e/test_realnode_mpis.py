"""The MPIs users run, for real on the real node, through the operator, with both worker backends:
Open MPI 4 (ORTE) and 5 (PRRTE), MPICH and Intel MPI (Hydra), and Python ranks (mpi4py). Images:
hack/images/build.sh (imported by hack/realnode/images.sh; `make mpi-images` builds them first).

The launcher runs what upstream's examples run, `mpirun -n <N> <program>`: no hostfile flag, no
extra arguments, so only the environment the operator sets (reconcilers/desired.py, launcher_env)
tells each MPI where the hosts are. A run that put every rank on one host fails: the ranks' hosts
are compared with the hostfile's. Run one MPI's tests alone with `-k openmpi5` (or mpich, intel,
mpi4py, openmpi4); `pytest -s` prints the submit -> Succeeded times and the ranks' hosts."""

from __future__ import annotations

import json
import re
import time

import pytest
import yaml

from testsupport.kubectl import condition_statuses
from testsupport.realnode_mpi import (
    ON_REAL_NODE,
    ROOT,
    SSHD,
    apply,
    condition,
    failed_launcher_attempts,
    hostfile_hosts,
    launcher_logs,
    mpijob,
    mpijob_events,
    placement,
    pods,
    ready_workers,
    short,
    wait_finished,
    wait_launcher_running,
)

pytestmark = [pytest.mark.cluster, pytest.mark.realnode, pytest.mark.builds("mpi-images")]
FLAVOURS = ["openmpi4", "openmpi5", "mpich", "intel"]
BACKENDS = ["job", "statefulset"]
# `make test` runs this cross-section: every MPI on both backends, with and without
# runLauncherAsWorker, mpi4py, a lost worker with Open MPI 5 and MPICH; the rest of the matrix is
# marked mpi_matrix (`make e2e-mpis` runs it all). The elastic launcher runs on both backends: its
# discovery follows the workers in seconds now (reconcilers/elastic.py), no longer the kubelet's minute.
CORE = {("openmpi5", "job", True), ("openmpi5", "statefulset", False), ("mpich", "statefulset", True),
        ("mpich", "job", False), ("intel", "job", True), ("intel", "statefulset", False),
        ("mpi4py", "statefulset", False), ("kill-openmpi5", "job", False), ("kill-mpich", "statefulset", False),
        ("elastic-openmpi5", "job", False), ("elastic-openmpi5", "statefulset", False)}


def _cases(what: list[str], prefix: str = "", modes: tuple[bool, ...] = (False,)) -> list:
    """pytest params (what, backend[, launcher_as_worker]) with ids like `openmpi5-job-workers`;
    those outside CORE are marked mpi_matrix."""
    out = []
    for w in what:
        for backend in BACKENDS:
            for law in modes:
                marks = () if (prefix + w, backend, law) in CORE else (pytest.mark.mpi_matrix,)
                mode = "launcher-as-worker" if law else "workers"
                values = (w, backend, law) if len(modes) > 1 else (w, backend)
                out.append(pytest.param(*values, marks=marks, id=f"{w}-{backend}-{mode}" if len(modes) > 1
                                        else f"{w}-{backend}"))
    return out


def _check_placement(kubectl, ns: str, name: str, ranks: int, slots: int, logs: str) -> str:
    """Every hostfile host ran exactly `slots` ranks (so no host, the launcher included, took ranks
    that were not its own); returns the placement, e.g. `pi-worker-0 x2, pi-worker-1 x2`."""
    hosts = [short(h) for h in hostfile_hosts(kubectl, ns, name)]
    got = placement(logs)
    assert sum(got.values()) == ranks, f"{sum(got.values())} rank lines, want {ranks}:\n{logs}"
    assert dict(got) == {h: slots for h in hosts}, f"ranks on {dict(got)}, hostfile {hosts}:\n{logs}"
    assert f"{ranks} ranks on {len(hosts)} hosts" in logs, logs
    return ", ".join(f"{h} x{n}" for h, n in sorted(got.items()))


@pytest.mark.parametrize(("flavour", "backend", "launcher_as_worker"), _cases(FLAVOURS, modes=(False, True)))
def test_mpirun_alone_places_ranks_on_hostfile_hosts(kubectl, realnode, mpi_image, operator, namespace, backend,
                                                     flavour, launcher_as_worker):
    """`mpirun -n <every slot> /opt/pi`: each host of the hostfile (2 workers x 2 slots, plus the
    launcher with runLauncherAsWorker) runs exactly its slots' ranks. No retry hides a failure."""
    image = mpi_image(flavour)
    hosts = 3 if launcher_as_worker else 2
    ranks = 2 * hosts
    name = f"pi-{flavour}"
    job = mpijob(name, flavour, image, args=["mpirun", "-n", str(ranks), "/opt/pi"],
                 launcher_as_worker=launcher_as_worker)
    t0 = time.monotonic()
    apply(kubectl, namespace, job)
    result = wait_finished(kubectl, namespace, name, 300)
    wall = time.monotonic() - t0
    logs = launcher_logs(kubectl, namespace, name)
    assert result == "Succeeded", logs
    assert len(pods(kubectl, namespace, name, "launcher")) == 1, "the launcher was retried"
    assert "pi is approximately 3.14159" in logs, logs
    where = _check_placement(kubectl, namespace, name, ranks, 2, logs)
    mode = "launcher-as-worker" if launcher_as_worker else "workers"
    print(f"\n[matrix] {flavour:<8} {backend:<11} {mode:<18} submit -> Succeeded {wall:5.1f}s  ranks: {where}")


@pytest.mark.parametrize(("example", "backend"), _cases(["mpi4py"]))
def test_mpi4py_example_runs_python_ranks_on_the_workers(kubectl, realnode, mpi_image, operator, namespace,
                                                          example, backend):
    """examples/mpi4py.yaml as is (a ConfigMap with pi.py and the MPIJob, Open MPI 5 image): 4 Python
    ranks over the 2 workers' 4 slots, from `mpirun -n 4 python3 pi.py` alone."""
    mpi_image("openmpi5")
    t0 = time.monotonic()
    kubectl("-n", namespace, "apply", "-f", str(ROOT / "examples" / "mpi4py.yaml"))
    result = wait_finished(kubectl, namespace, "pi-mpi4py", 300)
    wall = time.monotonic() - t0
    logs = launcher_logs(kubectl, namespace, "pi-mpi4py")
    assert result == "Succeeded", logs
    assert "pi is approximately 3.14159" in logs and "mpi4py" in logs and "Open MPI v5" in logs, logs
    where = _check_placement(kubectl, namespace, "pi-mpi4py", 4, 2, logs)
    print(f"\n[matrix] mpi4py   {backend:<11} {'workers':<18} submit -> Succeeded {wall:5.1f}s  ranks: {where}")


@pytest.mark.parametrize(("flavour", "backend"), _cases(["openmpi5", "mpich", "intel"], prefix="kill-"))
def test_worker_deleted_mid_run_comes_back_and_retry_succeeds(kubectl, realnode, mpi_image, operator, namespace,
                                                              backend, flavour):
    """Worker 0 (sshd as its `command:`, which exits 0 on SIGTERM) is deleted while the ranks compute:
    mpirun fails, the worker comes back under its name, and the launcher Job's retry succeeds with
    the ranks on both workers again. Open MPI 5's mpirun (PRRTE 3.0) mostly exits 0 instead (seen
    here: 0 in most runs, non-zero in some), so no retry can happen: the MPIJob then ends
    Failed/WorkerLostDuringRun with a Warning naming spec.mpiImplementation, never a silent
    Succeeded (docs/architecture.md section 9); when it exits before the worker is back, the MPIJob
    ends at once and cleanPodPolicy stops the workers, so the worker does not come back."""
    image = mpi_image(flavour)
    name = f"kill-{flavour}"
    job = mpijob(name, flavour, image, args=["mpirun", "-n", "4", "/opt/pi", "20000000000"], backoff=3,
                 worker_command=SSHD)
    t_submit = time.monotonic()
    apply(kubectl, namespace, job)
    wait_launcher_running(kubectl, namespace, name)
    time.sleep(5)
    (victim,) = [p for p in pods(kubectl, namespace, name, "worker")
                 if p["spec"].get("hostname", p["metadata"]["name"]) == f"{name}-worker-0"
                 and p["status"].get("phase") == "Running"]
    t0 = time.monotonic()
    kubectl("-n", namespace, "delete", "pod", victim["metadata"]["name"], "--wait=false")
    deadline = t0 + 120
    back = "not before the end"
    while time.monotonic() < deadline:
        ws = ready_workers(kubectl, namespace, name)
        if len(ws) == 2 and victim["metadata"]["uid"] not in {p["metadata"]["uid"] for p in ws}:
            back = f"{time.monotonic() - t0:.1f}s"
            break
        if flavour == "openmpi5" and condition_statuses(kubectl, namespace, name).get("Failed") == "True":
            break  # PRRTE exited 0 before the worker was back: the MPIJob ended, cleanPodPolicy stopped the workers
        time.sleep(0.2)
    else:
        raise AssertionError("the deleted worker did not come back Ready")
    result = wait_finished(kubectl, namespace, name, 400)
    logs = launcher_logs(kubectl, namespace, name)
    if flavour == "openmpi5" and result == "Failed":
        # PRRTE exited 0 (as it mostly does); when it exits non-zero the retry path below applies
        failed = condition(kubectl, namespace, name, "Failed")
        assert failed.get("reason") == "WorkerLostDuringRun", (failed, logs)
        assert "lost communication with a remote daemon" in logs and "pi is approximately" not in logs, logs
        warnings = [e["message"] for e in mpijob_events(kubectl, namespace, name) if e["type"] == "Warning"]
        assert any("spec.mpiImplementation" in m for m in warnings), warnings
        seen = re.search(r"but (.*?) while it ran", failed.get("message", ""))
        print(f"\n[failure] {flavour:<8} {backend:<11} worker deleted -> Ready again {back}; mpirun exited 0 "
              f"without pi: MPIJob Failed/WorkerLostDuringRun {time.monotonic() - t_submit:.1f}s after submit "
              f"({seen.group(1) if seen else failed.get('message')})")
        return
    assert result == "Succeeded", logs
    # a failed pod (a new pod per retry), a run restarted in place (the StatefulSet backend), or a
    # launcher Job made afresh (the Job backend), counted in the status (section 11)
    failed = failed_launcher_attempts(kubectl, namespace, name)
    assert failed >= 1, "no launcher attempt failed"
    (done,) = [p for p in pods(kubectl, namespace, name, "launcher") if p["status"].get("phase") == "Succeeded"]
    where = _check_placement(kubectl, namespace, name, 4, 2,
                             kubectl("-n", namespace, "logs", done["metadata"]["name"]).stdout)
    print(f"\n[failure] {flavour:<8} {backend:<11} worker deleted -> Ready again {back}; "
          f"submit -> Succeeded {time.monotonic() - t_submit:.1f}s after {failed + 1} launcher attempts; "
          f"ranks: {where}")


def _discovered(kubectl, ns: str, launcher: str) -> list[str] | None:
    r = kubectl("-n", ns, "exec", launcher, "--", "/etc/mpi/discover_hosts.sh", check=False, timeout=30)
    return r.stdout.split() if r.returncode == 0 else None


def _running_workers(kubectl, ns: str, name: str) -> set[str]:
    return {p["spec"].get("hostname") or p["metadata"]["name"] for p in pods(kubectl, ns, name, "worker")
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")}


# An elastic launcher's discover_hosts.sh follows the workers within seconds: the operator writes the
# ConfigMap at once and stamps the launcher pod, which makes the kubelet refresh its volume
# (reconcilers/elastic.py). The kubelet's own sync alone took 60-90 s; a delay this far under it
# fails only if that path is back. The figures are printed (-s), and docs/figures.md keeps them.
DISCOVERY_BOUND = 20.0

# What `horovodrun --host-discovery-script` does, in sh, given that option as horovodrun is (the
# operator tells an elastic launcher by it: reconcilers/elastic.py): each round runs mpirun over the
# hosts the script lists now, and a round cut short by a lost worker is run again; it stops once told
# to (/tmp/stop) after a round that finished, and exits 0.
ELASTIC_LAUNCHER = r"""
[ "$1" = --host-discovery-script ] || { echo "usage: --host-discovery-script PATH" >&2; exit 2; }
discover=$2 ok=0 rounds=0
while :; do
  hosts=$("$discover" | sed 's/$/:1/' | paste -sd, -)
  n=$("$discover" | grep -c .)
  rounds=$((rounds + 1))
  if [ "$n" -gt 0 ] && out=$(mpirun -n "$n" --host "$hosts" /opt/pi 2>&1) && echo "$out" | grep -q 'pi is approx'; then
    ok=1; echo "round $rounds: $n host(s) $hosts: $(echo "$out" | grep 'pi is approx')"
  else
    ok=0; echo "round $rounds: $n host(s) $hosts: cut short, again"
  fi
  if [ -e /tmp/stop ] && [ "$ok" = 1 ]; then echo "elastic: done after $rounds rounds"; exit 0; fi
  sleep 1
done
"""


def _follow(kubectl, ns: str, name: str, launcher: str, want: set[str], suffix: str, t_change: float) -> str:
    """Waits until exactly `want` run and the launcher's discover_hosts.sh lists exactly them: the
    delay from the workers (running or gone) to the launcher's script, as a figure."""
    expected = sorted(h + suffix for h in want)
    t_running = seen = None
    while time.monotonic() - t_change < 180:
        if t_running is None and _running_workers(kubectl, ns, name) == want:
            t_running = time.monotonic()
        seen = _discovered(kubectl, ns, launcher)
        if t_running is not None and seen is not None and sorted(seen) == expected:
            delay = time.monotonic() - t_running
            assert delay <= DISCOVERY_BOUND, f"discover_hosts.sh lagged {delay:.1f}s behind the workers"
            return f"{delay:4.1f}s"
        time.sleep(0.25)
    raise AssertionError(f"workers {sorted(want)}: running {sorted(_running_workers(kubectl, ns, name))}, "
                         f"discover_hosts.sh printed {seen}")


def _dropped(kubectl, ns: str, name: str, launcher: str, uid: str) -> str:
    """The delay from the deleted worker pod `uid` no longer running (being deleted, or gone) to the
    launcher's discover_hosts.sh no longer listing its host (until a replacement runs: the StatefulSet
    brings it back at once, the Job backend recreates every worker, so only the drop is timed)."""
    t_gone = None
    host = ""
    t0 = time.monotonic()
    while time.monotonic() - t0 < 120:
        ps = [p for p in pods(kubectl, ns, name, "worker") if p["metadata"]["uid"] == uid]
        if ps:
            host = ps[0]["spec"].get("hostname", "")
        if t_gone is None and (not ps or ps[0]["metadata"].get("deletionTimestamp")
                               or ps[0]["status"].get("phase") != "Running"):
            t_gone = time.monotonic()
        seen = _discovered(kubectl, ns, launcher)
        if t_gone is not None and seen is not None and not any(h.split(".")[0] == host for h in seen):
            delay = time.monotonic() - t_gone
            assert delay <= DISCOVERY_BOUND, f"discover_hosts.sh kept a lost worker {delay:.1f}s"
            return f"{delay:4.1f}s"
        time.sleep(0.1)
    raise AssertionError(f"discover_hosts.sh kept listing {host} after its pod was deleted")


@pytest.mark.parametrize(("image", "backend"), _cases(["openmpi5"], prefix="elastic-"))
def test_elastic_launcher_follows_the_workers_and_succeeds(kubectl, realnode, mpi_image, operator, namespace,
                                                          image, backend):
    """An elastic launcher (ELASTIC_LAUNCHER, as horovodrun --host-discovery-script runs) while Worker
    replicas go 2 -> 3, worker 1 is deleted (and comes back), then 3 -> 1: its discover_hosts.sh lists a
    new worker and drops a lost one within seconds (the figures), its rounds run on the hosts listed,
    and the MPIJob ends Succeeded (its worker-loss policy is ExitCode: it recovers by itself)."""
    name = "elastic"
    job = mpijob(name, image, mpi_image(image), args=["sh", "-c", ELASTIC_LAUNCHER, "elastic",
                                                          "--host-discovery-script", "/etc/mpi/discover_hosts.sh"],
                 slots=1, worker_command=SSHD)
    apply(kubectl, namespace, job)
    launcher = wait_launcher_running(kubectl, namespace, name)["metadata"]["name"]
    suffix = "." + hostfile_hosts(kubectl, namespace, name)[0].split(".", 1)[1]

    def follow(want: set[str], since: float) -> str:
        return _follow(kubectl, namespace, name, launcher, want, suffix, since)

    figures = [f"2 workers {follow({f'{name}-worker-0', f'{name}-worker-1'}, time.monotonic())}"]

    def scale(replicas: int) -> float:
        kubectl("-n", namespace, "patch", "mpijobs.kubeflow.org", name, "--type=merge", "-p",
                json.dumps({"spec": {"mpiReplicaSpecs": {"Worker": {"replicas": replicas}}}}))
        return time.monotonic()

    def finished_round(hosts: int) -> None:
        """Until the launcher's log shows a round over `hosts` hosts that finished: the launcher's own
        pace (a round is a few seconds on a loaded machine), not the test's, sets when to go on."""
        want = re.compile(rf"round \d+: {hosts} host\(s\) \S+: pi is approx")
        deadline = time.monotonic() + 120
        while not want.search(kubectl("-n", namespace, "logs", launcher, check=False).stdout):
            assert time.monotonic() < deadline, f"no round over {hosts} host(s) finished in 120 s"
            time.sleep(0.5)

    three = {f"{name}-worker-{i}" for i in range(3)}
    figures.append(f"-> 3: {follow(three, scale(3))}")
    finished_round(3)
    (victim,) = [p for p in pods(kubectl, namespace, name, "worker") if p["spec"].get("hostname") == f"{name}-worker-1"
                 and p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]
    t_delete = time.monotonic()
    kubectl("-n", namespace, "delete", "pod", victim["metadata"]["name"], "--wait=false")
    figures.append(f"worker 1 lost: {_dropped(kubectl, namespace, name, launcher, victim['metadata']['uid'])}")
    figures.append(f"and back: {follow(three, t_delete)}")
    figures.append(f"-> 1: {follow({f'{name}-worker-0'}, scale(1))}")
    finished_round(1)
    kubectl("-n", namespace, "exec", launcher, "--", "touch", "/tmp/stop")
    result = wait_finished(kubectl, namespace, name, 180)
    logs = launcher_logs(kubectl, namespace, name)
    assert result == "Succeeded", (condition(kubectl, namespace, name, "Failed"), logs[-3000:])
    assert re.search(r"round \d+: 1 host\(s\) elastic-worker-0\.\S+:1: pi is approx", logs), logs[-3000:]
    rounds = re.findall(r"round (\d+)", logs)
    print(f"\n[elastic] {backend:<11} discover_hosts.sh in the launcher after the workers: {'; '.join(figures)}; "
          f"{rounds[-1] if rounds else '?'} rounds, Succeeded")


def test_images_report_their_mpi(realnode, mpi_image, kubectl, namespace):
    """Each image's mpirun is the MPI it is named for (so the matrix above covers four MPIs, not one)."""
    want = {"openmpi4": "Open MPI) 4.", "openmpi5": "Open MPI) 5.", "mpich": "HYDRA build details",
            "intel": "Intel(R) MPI Library"}
    for flavour in want:
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"version-{flavour}"},
               "spec": {"restartPolicy": "Never", **ON_REAL_NODE,
                        "containers": [{"name": "c", "image": mpi_image(flavour), "imagePullPolicy": "IfNotPresent",
                                        "args": ["mpirun", "--version"]}]}}
        kubectl("-n", namespace, "apply", "-f", "-", input=yaml.safe_dump(pod))
    for flavour, text in want.items():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            phase = json.loads(kubectl("-n", namespace, "get", "pod", f"version-{flavour}", "-o", "json").stdout
                               )["status"].get("phase")
            if phase in ("Succeeded", "Failed"):
                break
            time.sleep(0.5)
        out = kubectl("-n", namespace, "logs", f"version-{flavour}").stdout
        assert phase == "Succeeded" and text in out, f"{flavour}: {phase}\n{out}"
        print(f"\n[version] {flavour}: {out.strip().splitlines()[0]}")

