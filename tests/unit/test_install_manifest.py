"""deploy/mpijob-operator.yaml, the one-file install (hack/gen_install.py, `make install-manifest`):
kept equal to what manifests/ render, and holding everything an install needs. That kustomize
renders the same objects is checked against the real kubectl in tests/integration/test_manifests.py;
the e2e suite applies the file (hack/deploy.sh, e2e/test_deployed.py)."""

from __future__ import annotations

import yaml

from testsupport.paths import ROOT, load_hack_script

FILE = ROOT / "deploy" / "mpijob-operator.yaml"


gen_install = load_hack_script("gen_install")


def test_install_manifest_is_what_manifests_render():
    assert FILE.read_text() == gen_install.install(), "deploy/mpijob-operator.yaml is stale: make install-manifest"


def test_install_manifest_holds_the_crd_rbac_admission_policies_and_deployment_in_applying_order():
    objs = [d for d in yaml.load_all(FILE.read_text(), Loader=gen_install._LOADER) if d]
    kinds = [o["kind"] for o in objs]
    for kind in ("Namespace", "CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
                 "Role", "RoleBinding", "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding", "Deployment"):
        assert kind in kinds, kind
    assert kinds.index("Namespace") == 0, "the namespace before what lives in it"
    assert kinds.index("CustomResourceDefinition") < kinds.index("Deployment")
    (deployment,) = [o for o in objs if o["kind"] == "Deployment"]
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "mpijob-operator:dev"
    assert all(o["metadata"]["labels"]["app.kubernetes.io/part-of"] == "mpijob-operator" for o in objs)


def test_install_manifest_image_can_be_named():
    text = gen_install.install("registry.example.com/mpijob-operator:v1")
    (deployment,) = [o for o in yaml.load_all(text, Loader=gen_install._LOADER) if o and o["kind"] == "Deployment"]
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example.com/mpijob-operator:v1"
