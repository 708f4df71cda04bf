"""Where things are: the checkout, and the local cluster's state (hack/cluster-up.sh)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLUSTER_DIR = Path(os.environ.get("CLUSTER_DIR", ROOT / ".cluster"))
CRD = ROOT / "manifests" / "crd" / "kubeflow.org_mpijobs.yaml"
# The builds' cache outside the work tree, as hack/ scripts name it (hack/build-decodecheck.sh...).
CACHE = Path(os.environ.get("MPIJOB_CACHE_DIR")
             or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mpijob-operator")


def load_hack_script(name: str):
    """A script of hack/ (not a package: `hack/<name>.py`) loaded from its path as a module, for the
    unit tests of the generators it holds."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "hack" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
