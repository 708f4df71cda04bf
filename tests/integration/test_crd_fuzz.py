"""The MPIJob CRD against the real API server and the Go types: a seeded fuzz.

Thousands of generated MPIJobs (tests/crd_fuzz.py: valid ones with mutations anywhere in the spec and
both pod templates) are submitted with server-side dry run, so the schema runs and nothing is stored.
Every MPIJob the API server accepts is decoded, as the server returned it, with the Go types of the
pinned release (hack/tools/decodecheck, strict): none may fail, since one such object in any
namespace stops every Go informer of MPIJobs (Kueue's among them). Every refusal must name the field.

Both CRDs are installed under groups and kinds of their own (FuzzMPIJob): the cluster is shared, another test may apply
another version of mpijobs.kubeflow.org at any moment. The same fuzz against the schema this CRD
replaced (pod templates `x-kubernetes-preserve-unknown-fields`) must find undecodable objects: the
check can fail.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml

from client.errors import ApiError
from client.rest import RestClient
from tests.crd_fuzz import Case, Fuzzer, base_mpijob, names_the_field
from testsupport.kubectl import wait_established
from testsupport.paths import ROOT
from testsupport.waiting import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.builds("decodecheck")]

CRD = ROOT / "manifests" / "crd" / "kubeflow.org_mpijobs.yaml"
SEED = int(os.environ.get("CRD_FUZZ_SEED", "20261203"))
COUNT = int(os.environ.get("CRD_FUZZ_COUNT", "5000"))
KIND, PLURAL = "FuzzMPIJob", "fuzzmpijobs"
NEW_GROUP = "fuzz-new.mpijob-operator.dev"
OLD_GROUP = "fuzz-old.mpijob-operator.dev"


def crd_doc() -> dict:
    return yaml.safe_load(CRD.read_text())


def schema_of(crd: dict) -> dict:
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def install_copy(kubectl, group: str, old_templates: bool = False) -> str:
    """The generated CRD under `group` (Established), optionally with the pod templates it replaced."""
    crd = crd_doc()
    crd["metadata"]["name"] = f"{PLURAL}.{group}"
    crd["spec"]["group"] = group
    # Names of its own: with kind MPIJob, `kubectl get mpijob` elsewhere on the shared cluster could
    # resolve to this copy (and kubectl's discovery cache keep it). The decoder ignores the kind.
    crd["spec"]["names"] = {"kind": KIND, "listKind": f"{KIND}List", "plural": PLURAL, "singular": KIND.lower()}
    if old_templates:
        replicas = schema_of(crd)["properties"]["spec"]["properties"]["mpiReplicaSpecs"]["properties"]
        for rs in replicas.values():
            rs["properties"]["template"] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(crd))
    wait_established(kubectl, f"{PLURAL}.{group}")
    return f"/apis/{group}/v2beta1/namespaces/{{ns}}/{PLURAL}"


def remove_copy(kubectl, group: str) -> None:
    kubectl("delete", "crd", f"{PLURAL}.{group}", "--ignore-not-found", "--timeout=60s", timeout=90)


@pytest.fixture(scope="module")
def client(kubeconfig) -> RestClient:
    return RestClient.from_kubeconfig(kubeconfig, qps=1000, burst=1000)


@pytest.fixture(scope="module")
def new_crd(kubectl) -> Iterator[str]:
    yield install_copy(kubectl, NEW_GROUP)
    remove_copy(kubectl, NEW_GROUP)


@pytest.fixture
def old_crd(kubectl) -> Iterator[str]:
    yield install_copy(kubectl, OLD_GROUP, old_templates=True)
    remove_copy(kubectl, OLD_GROUP)


def served(client: RestClient, path: str) -> None:
    """A fresh CRD is Established a moment before its resource answers."""
    def ok() -> bool:
        try:
            client.request("GET", path)
            return True
        except ApiError:
            return False

    wait_until(ok, timeout=30, what=f"{path} served")


@pytest.fixture(scope="module")
def decodecheck() -> str:
    r = subprocess.run([str(ROOT / "hack" / "build-decodecheck.sh")], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


def decode_all(decodecheck: str, objects: list[dict]) -> list[dict]:
    lines = "".join(json.dumps(o, separators=(",", ":")) + "\n" for o in objects)
    r = subprocess.run([decodecheck], input=lines, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    results = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(results) == len(objects)
    return results


def submit_all(client: RestClient, path: str, cases: list[Case]) -> list[tuple[Case, dict | ApiError]]:
    def one(case: Case) -> tuple[Case, dict | ApiError]:
        query = {"dryRun": "All", "fieldValidation": "Strict" if case.strict else "Ignore"}
        try:
            return case, client.request("POST", path, query=query, body=case.body)
        except ApiError as e:
            return case, e

    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(one, cases))


def test_decodecheck_refuses_what_go_refuses(decodecheck):
    good = {"spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 1, "template": {"spec": {"containers": [
        {"name": "c", "resources": {"limits": {"cpu": "500m", "memory": 1073741824}}}]}}}}}}
    bad = []
    for path, value in ((("containers", 0, "resources", "limits", "cpu"), "lots"),
                        (("nodeSelector",), "x"), (("containers", 0, "env"), {"A": "b"}),
                        (("initContainers",), "c"), (("containers", 0, "ports", 0, "containerPort"), 2**31),
                        (("containers", 0, "resources", "limits", "cpu"), "1e1.5")):
        obj = copy.deepcopy(good)
        node = obj["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
        for part in path[:-1]:
            node = node[part] if isinstance(part, int) or part in node else node.setdefault(part, [{}])
        node[path[-1]] = value
        bad.append(obj)
    results = decode_all(decodecheck, [good, *bad])
    assert results[0] == {"ok": True}
    assert [r["ok"] for r in results[1:]] == [False] * len(bad), results


def test_every_accepted_mpijob_decodes_and_every_refusal_names_the_field(client, decodecheck, namespace, new_crd):
    cases = Fuzzer(schema_of(crd_doc()), SEED).cases(COUNT)
    for c in cases:
        c.body["apiVersion"], c.body["kind"] = f"{NEW_GROUP}/v2beta1", KIND
    path = new_crd.format(ns=namespace)
    served(client, path)
    t0 = time.monotonic()
    answers = submit_all(client, path, cases)
    elapsed = time.monotonic() - t0
    accepted = [(c, a) for c, a in answers if isinstance(a, dict)]
    refused = [(c, a) for c, a in answers if isinstance(a, ApiError)]
    unexpected = [(c.index, a.status, a.message) for c, a in refused if a.status not in (400, 422)]
    assert not unexpected, unexpected[:5]

    decoded = decode_all(decodecheck, [a for _, a in accepted])
    undecodable = [(c.index, c.paths, d["error"]) for (c, _), d in zip(accepted, decoded, strict=True)
                   if not d["ok"]]
    unnamed = [(c.index, c.paths, a.message[:300]) for c, a in refused
               if not any(names_the_field(a.message, p) for p in c.paths)]
    print(f"\ncrd fuzz (seed {SEED}): {len(cases)} submitted in {elapsed:.1f}s, {len(accepted)} accepted, "
          f"{len(refused)} refused; {len(undecodable)} accepted but undecodable; "
          f"{len(unnamed)} refusals not naming the field")
    assert not undecodable, undecodable[:5]
    assert not unnamed, unnamed[:5]
    # The fuzz exercises both sides of the schema, or it proves nothing.
    assert len(accepted) > COUNT // 10 and len(refused) > COUNT // 4


def test_the_fuzz_finds_what_the_old_schema_let_through(client, decodecheck, namespace, old_crd):
    cases = Fuzzer(schema_of(crd_doc()), SEED + 1).cases(400)
    for c in cases:
        c.body["apiVersion"], c.body["kind"] = f"{OLD_GROUP}/v2beta1", KIND
    path = old_crd.format(ns=namespace)
    served(client, path)
    accepted = [a for _, a in submit_all(client, path, cases) if isinstance(a, dict)]
    bad = [d for d in decode_all(decodecheck, accepted) if not d["ok"]]
    print(f"\nold schema: {len(accepted)} of {len(cases)} accepted, {len(bad)} of them undecodable")
    assert len(bad) >= 20, f"only {len(bad)} of {len(accepted)} accepted objects failed to decode"


def test_replicas_are_defaulted_as_the_operator_reads_them(client, namespace, new_crd):
    """Launcher 1 and Worker 0 are written into the object, so every client (Kueue counts pods from
    them) sees the counts the operator uses."""
    body = base_mpijob("defaults")
    body["apiVersion"], body["kind"] = f"{NEW_GROUP}/v2beta1", KIND
    for rs in body["spec"]["mpiReplicaSpecs"].values():
        del rs["replicas"]
    path = new_crd.format(ns=namespace)
    served(client, path)
    got = client.request("POST", path, query={"dryRun": "All"}, body=body)["spec"]["mpiReplicaSpecs"]
    assert (got["Launcher"]["replicas"], got["Worker"]["replicas"]) == (1, 0)


def test_committed_crd_is_what_the_generator_writes():
    r = subprocess.run([str(ROOT / "hack" / "gen-crd.sh"), "--check"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
