#!/usr/bin/env bash
# Regenerates manifests/crd/kubeflow.org_mpijobs.yaml (make crd) from hack/crd/mpijobs.base.yaml and
# the OpenAPI v3 document of the pinned Kubernetes release, read from the k8s.io/kubernetes module
# that hack/tools/k8s pins (the module the local cluster is built from: no network when it is cached).
# --check: fail if the committed CRD is not what this would write.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
source "$here/versions.sh"
py=${PY:-$root/.venv/bin/python}
export GOFLAGS=${GOFLAGS:--mod=mod}
dir=$(cd "$here/tools/k8s" && go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | "$py" -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
spec=api/openapi-spec/v3/api__v1_openapi.json
exec "$py" "$here/gen_crd.py" --openapi "$dir/$spec" --source "k8s.io/kubernetes v$K8S_VERSION $spec" \
  --base "$here/crd/mpijobs.base.yaml" --out "$root/manifests/crd/kubeflow.org_mpijobs.yaml" "$@"
