"""names_resolve_first (issue 50 item 0): the launcher's pod template waits, in an init container, until
every host of its hostfile resolves (reconcilers/namewait.py, docs/architecture.md 4.1).

The rendered init container's command is run here for real (/bin/sh), against the hostfile the
operator renders, with a `getent` on PATH that resolves the names a test allows: so the test checks
what the launcher pod would do, for every MPI's hostfile format, both backends and runLauncherAsWorker."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st_

from controller.config import parse
from reconcilers import desired as dz
from reconcilers import namewait
from reconcilers import status as st
from reconcilers.defaults import with_defaults
from reconcilers.types import Config
from tests.unit import sim
from tests.unit.test_retries import cond, job_with, with_pods, workers

IMPLS = ("OpenMPI", "Intel", "MPICH")
CASES = [(impl, backend, law) for impl in IMPLS for backend in sim.BACKENDS for law in (False, True)]


def _job(impl: str = "OpenMPI", law: bool = False, workers: int = 3, **launcher_fields) -> dict:
    job = sim.mpijob(workers=workers, spec={"mpiImplementation": impl, "slotsPerWorker": 2, "runLauncherAsWorker": law})
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0].update(launcher_fields)
    return with_defaults(job)


def _init(template: dict) -> dict:
    (init,) = [c for c in template["spec"].get("initContainers") or [] if c["name"] == namewait.INIT_CONTAINER]
    return init


def _hosts(hostfile: str) -> list[str]:
    return [line.split()[0].split(":")[0] for line in hostfile.splitlines() if line.strip()]


def _run_wait(tmp_path: Path, init: dict, hostfile: str, resolvable: set[str], *, late: int = 0,
              limit: str | None = None) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Runs the init container's command with the hostfile at its mount, `getent` resolving the names
    in `resolvable` (each only from its `late`-th ask on); returns the result and the names asked."""
    (mount,) = init["volumeMounts"]
    cmd = list(init["command"])
    path = cmd[-1]
    assert path == mount["mountPath"] + "/hostfile"
    local = tmp_path / "hostfile"
    local.write_text(hostfile)
    cmd[-1] = str(local)
    if limit is not None:
        cmd[-2] = limit
    (tmp_path / "ok").write_text("".join(h + "\n" for h in resolvable))
    fake = tmp_path / "bin"
    fake.mkdir()
    getent = fake / "getent"
    getent.write_text(f"""#!/bin/sh
[ "$1" = hosts ] || exit 2
echo "$2" >> {tmp_path}/asked
n=$(grep -cxF "$2" {tmp_path}/asked)
grep -qxF "$2" {tmp_path}/ok && [ "$n" -gt {late} ] && echo "10.0.0.1 $2"
""")
    getent.chmod(0o755)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                       env={"PATH": f"{fake}:{os.environ.get('PATH', '/usr/bin:/bin')}"})
    asked = (tmp_path / "asked").read_text().split() if (tmp_path / "asked").exists() else []
    return r, asked


@pytest.mark.parametrize(("impl", "backend", "law"), CASES)
def test_names_resolve_first_the_launcher_waits_for_every_hostfile_name(tmp_path, impl, backend, law):
    """Every host of the hostfile (the launcher's own with runLauncherAsWorker) is looked up, in the
    format each MPI's hostfile has, until it resolves; then the init container exits 0."""
    job, cfg = _job(impl, law), Config(worker_backend=backend)
    hostfile = dz.hostfile(job, cfg)
    hosts = _hosts(hostfile)
    assert len(hosts) == 3 + law and all(".pi.ns.svc" in h for h in hosts[law:])
    r, asked = _run_wait(tmp_path, _init(dz.launcher_template(job, cfg)), hostfile, set(hosts), late=2)
    assert r.returncode == 0, r.stdout + r.stderr
    assert asked == [h for h in hosts for _ in range(3)]  # each asked until it resolved, in order
    assert f"all {len(hosts)} hosts of" in r.stdout and "getent hosts" in r.stdout


@pytest.mark.parametrize(("impl", "backend", "law"), CASES[::3])
def test_names_resolve_first_a_name_that_never_resolves_fails_the_wait_naming_it(tmp_path, impl, backend, law):
    job, cfg = _job(impl, law), Config(worker_backend=backend)
    hostfile = dz.hostfile(job, cfg)
    hosts = _hosts(hostfile)
    init = _init(dz.launcher_template(job, cfg))
    assert init["command"][-2] == str(namewait.DEFAULT_WAIT_S)
    t0 = time.monotonic()
    r, _ = _run_wait(tmp_path, init, hostfile, set(hosts) - {hosts[-1], hosts[-2]}, limit="0")
    assert time.monotonic() - t0 < 30
    assert r.returncode == 1
    last = r.stdout.strip().splitlines()[-1]
    assert f"do not resolve (getent hosts): {hosts[-2]} {hosts[-1]};" in last, last
    # what the operator quotes when the launcher pod fails (terminationMessagePolicy FallbackToLogsOnError)
    assert init["terminationMessagePolicy"] == "FallbackToLogsOnError"
    failed = {"status": {"initContainerStatuses": [
        {"name": namewait.INIT_CONTAINER, "state": {"terminated": {"exitCode": 1, "message": r.stdout}}}]}}
    assert namewait.init_failure(failed) == last.strip()


def test_names_resolve_first_an_image_without_getent_looks_up_through_python_or_waits_blind(tmp_path):
    """Without getent, python3's getaddrinfo (the resolver ssh uses); without either, a fixed wait that
    the log names (the init container must not fail a launcher the image cannot check)."""
    init = _init(dz.launcher_template(_job(), Config()))
    script, limit = init["command"][2], init["command"][-2]
    bare = tmp_path / "bare"
    bare.mkdir()
    for tool in ("sleep", "date", "printf"):
        found = [Path(d) / tool for d in ("/usr/bin", "/bin") if (Path(d) / tool).exists()]
        if found:
            (bare / tool).symlink_to(found[0])
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("localhost slots=1\n")
    t0 = time.monotonic()
    r = subprocess.run(["/bin/sh", "-c", script, namewait.INIT_CONTAINER, limit, str(hostfile)],
                       capture_output=True, text=True, env={"PATH": str(bare)}, timeout=30)
    assert r.returncode == 0 and "neither getent nor python3" in r.stdout, r.stdout + r.stderr
    assert time.monotonic() - t0 >= namewait.BLIND_WAIT_S - 0.5


@pytest.mark.parametrize("backend", sim.BACKENDS)
def test_names_resolve_first_init_container_shape(backend):
    """The launcher container's image (no extra pull), pull policy, securityContext and resources (so
    admission and quotas treat it as the launcher); the hostfile mounted read-only; last of the init
    containers; the user's command untouched; no init container on the workers; none with
    --launcher-names-wait=0."""
    sc = {"runAsNonRoot": True, "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
          "seccompProfile": {"type": "RuntimeDefault"}}
    res = {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}}
    job = _job(imagePullPolicy="IfNotPresent", securityContext=sc, resources=res)
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["initContainers"] = [sim.container("setup")]
    cfg = Config(worker_backend=backend)
    template = dz.launcher_template(job, cfg)
    spec = template["spec"]
    main, init = spec["containers"][0], _init(template)
    assert [c["name"] for c in spec["initContainers"]] == ["setup", namewait.INIT_CONTAINER]
    assert (init["image"], init["imagePullPolicy"], init["securityContext"], init["resources"]) == (
        main["image"], "IfNotPresent", sc, res)
    assert init["volumeMounts"] == [{"name": dz.CONFIG_VOLUME, "mountPath": dz.HOSTFILE_DIR, "readOnly": True}]
    assert init["command"][:2] == ["/bin/sh", "-c"] and "args" not in init
    assert (main["command"], main["args"]) == (["mpirun"], ["-n", "2", "/home/mpiuser/pi"])
    assert "initContainers" not in dz.worker_template(job, cfg)["spec"]
    off = dz.launcher_template(job, Config(launcher_names_wait_s=0))["spec"]["initContainers"]
    assert [c["name"] for c in off] == ["setup"]
    # a user's own init container of that name is left as written (and not doubled)
    mine = sim.container(namewait.INIT_CONTAINER, command=["true"])
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["initContainers"] = [mine]
    assert dz.launcher_template(job, cfg)["spec"]["initContainers"] == [mine]


def _cpu(c: dict) -> float:
    v = str(((c.get("resources") or {}).get("requests") or {}).get("cpu", "0"))
    return float(v[:-1]) / 1000 if v.endswith("m") else float(v)


def _effective_cpu(spec: dict) -> float:
    """The pod's request as the scheduler, ResourceQuota and Kueue count it: the larger of the
    containers' sum (plus the native sidecars) and each init container's own (plus the sidecars
    started before it)."""
    sidecars, peak = 0.0, 0.0
    for c in spec.get("initContainers") or []:
        if c.get("restartPolicy") == "Always":
            sidecars += _cpu(c)
            peak = max(peak, sidecars)
        else:
            peak = max(peak, sidecars + _cpu(c))
    return max(peak, sidecars + sum(_cpu(c) for c in spec["containers"]))


@pytest.mark.parametrize("inits", [[], [{"cpu": "2"}], [{"cpu": "50m", "sidecar": True}]])
@pytest.mark.parametrize("extra", [0, 1])
def test_names_resolve_first_never_raises_the_pods_request(inits, extra):
    """Kueue, quotas and the scheduler sum what the init container asks for with the sidecars before it:
    it asks for the launcher container's request and runs last, so the pod asks for no more."""
    job = _job(resources={"requests": {"cpu": "300m"}})
    spec = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    spec["initContainers"] = [sim.container(f"i{k}", resources={"requests": {"cpu": i["cpu"]}},
                                        **({"restartPolicy": "Always"} if i.get("sidecar") else {}))
                              for k, i in enumerate(inits)]
    spec["containers"] += [sim.container(f"extra{k}", resources={"requests": {"cpu": "100m"}}) for k in range(extra)]
    with_wait = dz.launcher_template(job, Config())["spec"]
    without = dz.launcher_template(job, Config(launcher_names_wait_s=0))["spec"]
    assert len(with_wait["initContainers"]) == len(inits) + 1
    assert _effective_cpu(with_wait) == _effective_cpu(without)


@pytest.mark.parametrize("backend", sim.BACKENDS)
def test_names_resolve_first_a_running_launcher_made_without_it_is_left_running(backend):
    """The upgrade: a launcher Job rendered before the init container existed, running, is neither
    recreated nor patched by the operator that now renders it (a Job's template is never patched, a
    running one never recreated: reconcilers/diff.py)."""
    job = sim.mpijob()
    job, obs, _ = sim.converge(job, backend=backend, launcher_names_wait_s=0)
    assert "initContainers" not in obs.launcher["spec"]["template"]["spec"]
    obs = sim.workers_ready(obs, 2)
    obs = replace(obs, launcher=sim.with_status(obs.launcher, active=1, ready=1),
                  pods=[sim.pod(job, "launcher")] + [sim.pod(job, "worker", i, backend=backend) for i in range(2)])
    job, obs, _ = sim.converge(job, obs, backend, launcher_names_wait_s=0)
    p = sim.run(job, obs, backend)
    touched = [w for w in (*p.creates, *p.deletes, *p.patches) if "launcher" in str(w)]
    assert touched == [], touched
    assert p.writes == 0, p
    # a fresh MPIJob gets it
    _, fresh, _ = sim.converge(sim.mpijob(name="new", uid="uid-new"), backend=backend)
    assert _init(fresh.launcher["spec"]["template"])


@pytest.mark.parametrize("backend", sim.BACKENDS)
def test_names_resolve_first_a_failed_wait_is_named_in_the_mpijobs_failure(backend):
    """A launcher pod that failed in its name wait (its container never started): the MPIJob's failure
    names the hosts that did not resolve, as the init container's termination message says."""
    job, obs = sim.running_state(job_with(backoff=0), backend)
    said = ("mpijob-wait-for-workers: after 300s these hosts of /etc/mpi/hostfile still do not resolve "
            "(getent hosts): pi-worker-1.pi.ns.svc; their pods have no address yet")
    failed = sim.pod(job, "launcher", phase="Failed", initContainerStatuses=[
        {"name": namewait.INIT_CONTAINER, "restartCount": 0,
         "state": {"terminated": {"exitCode": 1, "reason": "Error", "message": said + "\n"}}}],
        containerStatuses=[{"name": "launcher", "restartCount": 0,
                            "state": {"waiting": {"reason": "PodInitializing"}}}])
    p = sim.run(job, with_pods(obs, [failed, *workers(job, backend)], active=0, ready=0, failed=1), backend)
    message = cond(p.status, st.FAILED)["message"]
    assert "do not resolve (getent hosts): pi-worker-1.pi.ns.svc" in message, message


@pytest.mark.parametrize(("argv", "want"), [([], 300), (["--launcher-names-wait=0"], 0),
                                             (["--launcher-names-wait", "45"], 45)])
def test_names_resolve_first_the_wait_is_a_flag(argv, want):
    assert parse(argv).launcher_names_wait == want
    with pytest.raises(SystemExit):
        parse(["--launcher-names-wait=-1"])


def test_names_resolve_first_not_for_an_elastic_launcher_nor_over_a_users_container():
    """An elastic launcher (horovodrun --host-discovery-script) starts with the workers there are and
    discovers the rest (docs/architecture.md 9.2): no wait for every host. A user's container named
    like the init container keeps its name alone (containers and init containers share names)."""
    job = _job()
    c = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    plain = dz.launcher_template(job, Config())["spec"]
    assert [i["name"] for i in plain["initContainers"]] == [namewait.INIT_CONTAINER]
    c["command"] = ["horovodrun", "-np", "2", "--min-np", "1", "--host-discovery-script", "/etc/mpi/discover_hosts.sh",
                    "python", "train.py"]
    assert "initContainers" not in dz.launcher_template(job, Config())["spec"]
    job = _job()
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"].append(
        sim.container(namewait.INIT_CONTAINER))
    assert "initContainers" not in dz.launcher_template(job, Config())["spec"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st_.from_regex(r"\A[a-z][a-z0-9-]{0,20}[a-z0-9]\Z"), ns=st_.from_regex(r"\A[a-z][a-z0-9-]{0,10}[a-z0-9]\Z"),
       workers=st_.integers(0, 12), slots=st_.integers(1, 64), impl=st_.sampled_from(IMPLS),
       law=st_.booleans(), domain=st_.sampled_from(["", "cluster.local", "corp.example"]),
       backend=st_.sampled_from(sim.BACKENDS))
def test_names_resolve_first_every_hostfile_host_is_asked_for(tmp_path_factory, name, ns, workers, slots, impl, law,
                                                               domain, backend):
    """Whatever the CRD admits for names, counts and formats: the wait asks for exactly the hostfile's
    hosts, in order, and ends once they resolve."""
    job = with_defaults(sim.mpijob(name=name, ns=ns, workers=workers, spec={
        "mpiImplementation": impl, "slotsPerWorker": slots, "runLauncherAsWorker": law}))
    cfg = Config(worker_backend=backend, cluster_domain=domain)
    hostfile = dz.hostfile(job, cfg)
    hosts = _hosts(hostfile)
    r, asked = _run_wait(tmp_path_factory.mktemp("w"), _init(dz.launcher_template(job, cfg)), hostfile, set(hosts))
    assert r.returncode == 0, r.stdout + r.stderr
    assert asked == hosts
