"""Where things are: the checkout, and the local cluster's state (hack/cluster-up.sh)."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLUSTER_DIR = Path(os.environ.get("CLUSTER_DIR", ROOT / ".cluster"))
CRD = ROOT / "manifests" / "crd" / "kubeflow.org_mpijobs.yaml"
# The builds' cache outside the work tree, as hack/ scripts name it (hack/build-decodecheck.sh...).
CACHE = Path(os.environ.get("MPIJOB_CACHE_DIR")
             or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mpijob-operator")
