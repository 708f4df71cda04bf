"""hack/versions.sh names each pinned release once for the scripts (cache directories, log lines);
the tools module that builds it (hack/tools/<name>/go.mod) requires it: the two must agree, or a
binary built from one version would be cached and reported under the other's name."""

from __future__ import annotations

import re

import pytest

from testsupport.paths import ROOT

# versions.sh variable -> (tools module, the module path its go.mod requires at that version)
PINNED = {
    "K8S_VERSION": ("k8s", "k8s.io/kubernetes"),
    "ETCD_VERSION": ("etcd", "go.etcd.io/etcd/server/v3"),
    "KWOK_VERSION": ("kwok", "sigs.k8s.io/kwok"),
    "PROMETHEUS_OPERATOR_VERSION": ("prometheus-operator", "github.com/prometheus-operator/prometheus-operator"),
    "SCHEDULER_PLUGINS_VERSION": ("scheduler-plugins", "sigs.k8s.io/scheduler-plugins"),
    "KUBE_NETWORK_POLICIES_VERSION": ("kube-network-policies", "sigs.k8s.io/kube-network-policies"),
    "MPI_OPERATOR_GO_VERSION": ("mpi-operator-go", "github.com/kubeflow/mpi-operator"),
}


def versions() -> dict[str, str]:
    text = (ROOT / "hack" / "versions.sh").read_text()
    return dict(re.findall(r"^([A-Z0-9_]+)=(\S+)$", text, re.MULTILINE))


def required(tools: str, module: str) -> set[str]:
    """The versions go.mod names for `module`: in a require line or block, or as a replace target."""
    text = (ROOT / "hack" / "tools" / tools / "go.mod").read_text()
    return set(re.findall(rf"(?:^|\s|=> ){re.escape(module)} (v\S+)", text, re.MULTILINE))


@pytest.mark.parametrize("var", sorted(PINNED))
def test_the_tools_module_builds_the_release_versions_sh_names(var):
    tools, module = PINNED[var]
    assert required(tools, module) == {"v" + versions()[var]}, (var, tools)


def test_prometheus_is_built_at_its_pinned_version():
    # prometheus/prometheus tags v3.x as v0.3xx.y on the Go module (PROMETHEUS_VERSION is that module's)
    assert required("prometheus", "github.com/prometheus/prometheus") == {"v" + versions()["PROMETHEUS_VERSION"]}
