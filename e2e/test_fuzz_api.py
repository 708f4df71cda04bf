"""Fuzz against the real API server (issue #14 part 5): a few hundred seeded MPIJobs, valid and
not, in a namespace whose ResourceQuota protects the cluster (large worker counts are sent
suspended). Each one is refused at admission with a message naming the field, or runs, or ends
Failed with a condition and a Warning Event that say why: none is stuck, and the operator's log
has no traceback. A valid MPIJob sent last still succeeds."""

from __future__ import annotations

import collections
import copy
import json
import os
import random
import re
import time

import pytest
from test_bad_input import CASES as INVALID_SPEC_CASES

from testsupport.builders import simulated_mpijob
from testsupport.kubectl import apply, events, items, wait_condition

pytestmark = pytest.mark.cluster
COUNT = int(os.environ.get("E2E_FUZZ_COUNT", "200"))
SEED = int(os.environ.get("E2E_FUZZ_SEED", "14"))
SETTLE_TIMEOUT = 300.0
QUOTA = {"pods": "80", "count/jobs.batch": "300"}  # finished Jobs are kept: 2 per MPIJob


def _launcher(job):
    return job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]


def _set(*path_value):
    *path, value = path_value

    def change(job):
        obj = job
        for k in path[:-1]:
            obj = obj[k] if isinstance(k, int) else obj.setdefault(k, {})
        obj[path[-1]] = value
    return change


SPEC, RS = ["spec"], ["spec", "mpiReplicaSpecs"]
# (what, change, expected outcome, group): outcome "admission" (the CRD refuses it), "invalid"
# (InvalidSpec), "refused" (the API server refuses a child: ChildRefused) or "valid"; two
# mutations of one group touch the same field and are never combined.
MUTATIONS = [
    ("name not DNS-1035", _set("metadata", "name", "Bad_Name"), "admission", "name"),
    ("launcher replicas 2", _set(*RS, "Launcher", "replicas", 2), "admission", "launcher"),
    ("mpiImplementation LAM", _set(*SPEC, "mpiImplementation", "LAM"), "admission", "impl"),
    ("cleanPodPolicy Sometimes", _set(*SPEC, "runPolicy", "cleanPodPolicy", "Sometimes"), "admission", "clean"),
    ("slotsPerWorker 0", _set(*SPEC, "slotsPerWorker", 0), "admission", "slots"),
    ("100001 workers", _set(*RS, "Worker", "replicas", 100001), "admission", "worker"),
    ("backoffLimit -1", _set(*SPEC, "runPolicy", "backoffLimit", -1), "admission", "backoff"),
    *[(f"invalid: {name}", change, "invalid", "worker") for name, change, _ in INVALID_SPEC_CASES],
    ("100000 workers", _set(*RS, "Worker", "replicas", 100000), "invalid", "worker"),
    ("imagePullPolicy Sometimes", lambda j: _launcher(j).update(imagePullPolicy="Sometimes"), "refused", "launcher"),
    ("containerPort 70000", lambda j: _launcher(j).update(ports=[{"containerPort": 70000}]), "refused", "launcher"),
    ("dnsPolicy Sometimes", _set(*RS, "Launcher", "template", "spec", "dnsPolicy", "Sometimes"), "refused",
     "launcher"),
    ("no workers", _set(*RS, "Worker", "replicas", 0), "valid", "worker"),
    ("no Worker spec", lambda j: j["spec"]["mpiReplicaSpecs"].pop("Worker"), "valid", "worker"),
    ("3 workers", _set(*RS, "Worker", "replicas", 3), "valid", "worker"),
    ("4 slots", _set(*SPEC, "slotsPerWorker", 4), "valid", "slots"),
    ("Intel", _set(*SPEC, "mpiImplementation", "Intel"), "valid", "impl"),
    ("MPICH", _set(*SPEC, "mpiImplementation", "MPICH"), "valid", "impl"),
    ("launcher as worker", _set(*SPEC, "runLauncherAsWorker", True), "valid", "law"),
    ("AtStartup", _set(*SPEC, "launcherCreationPolicy", "AtStartup"), "valid", "lcp"),
    ("cleanPodPolicy All", _set(*SPEC, "runPolicy", "cleanPodPolicy", "All"), "valid", "clean"),
    ("cleanPodPolicy None", _set(*SPEC, "runPolicy", "cleanPodPolicy", "None"), "valid", "clean"),
    ("5000 workers, suspended", lambda j: (_set(*RS, "Worker", "replicas", 5000)(j),
                                           _set(*SPEC, "runPolicy", "suspend", True)(j)), "valid", "worker"),
]
RANK = {"admission": 0, "invalid": 1, "refused": 2, "valid": 3}


def generate(rng: random.Random, i: int) -> tuple[dict, list[str], str]:
    job = simulated_mpijob(f"f{i:03d}", workers=rng.randint(0, 2), launcher_runs="1s")
    picks: list = []
    for m in rng.sample(MUTATIONS, rng.choice([0, 1, 1, 2])):
        if all(m[3] != p[3] for p in picks):
            picks.append(m)
    for _, change, _, _ in picks:
        change(job)
    expected = min((p[2] for p in picks), key=RANK.__getitem__, default="valid")
    return job, [p[0] for p in picks], expected


def _admission_errors(stderr: str) -> dict[str, str]:
    """name -> kubectl's message, for each MPIJob the API server refused at admission."""
    out = {}
    for m in re.finditer(r'MPIJob\.kubeflow\.org "([^"]+)" is invalid: (.*)', stderr):
        out[m.group(1)] = m.group(2)
    return out


def _outcome(job: dict) -> str:
    conds = {c["type"]: c for c in (job.get("status") or {}).get("conditions") or []}

    def true(t):
        return conds.get(t, {}).get("status") == "True"
    if true("Succeeded"):
        return "ran"
    if true("Failed"):
        return "failed"
    if true("Suspended") and job["spec"]["runPolicy"].get("suspend"):
        return "suspended"
    return "stuck"


def test_a_few_hundred_seeded_mpijobs_none_stuck(kubectl, start_operator, namespace):
    kubectl("-n", namespace, "create", "quota", "protect", "--hard=" + ",".join(f"{k}={v}" for k, v in QUOTA.items()))
    op = start_operator("job", namespace, "--log-format=json", "--threadiness=8")
    rng = random.Random(SEED)
    generated = [generate(rng, i) for i in range(COUNT)]
    docs = "\n---\n".join(json.dumps(j) for j, _, _ in generated)
    # create, not apply: apply would copy a 257 KiB template annotation into the MPIJob's metadata
    r = kubectl("-n", namespace, "create", "-f", "-", input=docs, check=False, timeout=300)
    admission = _admission_errors(r.stderr)
    t0 = time.monotonic()
    counts: collections.Counter = collections.Counter()
    while True:
        jobs = {j["metadata"]["name"]: j for j in items(kubectl, namespace, "mpijobs")}
        outcomes = {n: _outcome(j) for n, j in jobs.items()}
        if "stuck" not in outcomes.values() or time.monotonic() - t0 > SETTLE_TIMEOUT:
            break
        time.sleep(3)
    settled = time.monotonic() - t0
    warnings = collections.defaultdict(list)
    for e in items(kubectl, namespace, "events"):
        if e["involvedObject"].get("kind") == "MPIJob" and e["type"] == "Warning":
            warnings[e["involvedObject"]["name"]].append(e["message"])
    problems = []
    for job, what, expected in generated:
        name = job["metadata"]["name"]
        if name in admission:
            counts["refused at admission"] += 1
            if not re.search(r"(spec|metadata)\.", admission[name]):
                problems.append(f"{name} ({what}): admission message names no field: {admission[name]}")
            continue
        if name not in jobs:
            # the name mutation made another (refused) name: counted with the admission refusals
            assert expected == "admission", (name, what, r.stderr[-2000:])
            counts["refused at admission"] += 1
            continue
        out = outcomes[name]
        counts[{"ran": "ran", "failed": "failed with reason", "suspended": "suspended (large, held)",
                "stuck": "stuck"}[out]] += 1
        if out == "stuck":
            problems.append(f"{name} ({what}): stuck, status {jobs[name].get('status')}")
        elif out == "failed":
            failed = next(c for c in jobs[name]["status"]["conditions"] if c["type"] == "Failed")
            names_field = re.search(r"(spec|metadata)\.", failed.get("message", ""))
            if failed.get("reason") in ("InvalidSpec", "ChildRefused") and not names_field:
                problems.append(f"{name} ({what}): Failed without a reason naming the field: {failed}")
            if not warnings.get(name):
                problems.append(f"{name} ({what}): Failed without a Warning Event")
        if expected in ("invalid", "refused") and out != "failed":
            problems.append(f"{name} ({what}): expected to fail ({expected}), got {out}")
        if expected == "valid" and out not in ("ran", "suspended"):
            problems.append(f"{name} ({what}): a valid MPIJob {out}: {jobs[name].get('status')}")
    print(f"\n[seed {SEED}] {COUNT} MPIJobs, settled in {settled:.0f}s: " +
          ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + f", stuck {counts['stuck']}")
    log = op.log_path.read_text()
    assert log.count("Traceback") == 0, "tracebacks in the operator's log"
    assert not problems, "\n".join(problems[:20])

    last = copy.deepcopy(simulated_mpijob("last", launcher_runs="1s"))
    apply(kubectl, namespace, last)
    wait_condition(kubectl, namespace, "last", "Succeeded", timeout=120)
    assert not [e for e in events(kubectl, namespace, "last") if e["type"] == "Warning"]
