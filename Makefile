# mpijob-operator: every target prints what it does and fails loudly.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
ROOT := $(abspath .)
VENV ?= $(ROOT)/.venv
PY := $(VENV)/bin/python
CLUSTER_DIR ?= $(ROOT)/.cluster
export CLUSTER_DIR
IMAGE ?= mpijob-operator:dev
PYTEST_ARGS ?=

.PHONY: help venv crd install-manifest lint unit fuzz integration faketime e2e e2e-kueue e2e-mpis kueue mpi-images test cluster-up cluster-down run demo demo-deployed bench kind-up kind-down image deploy undeploy clean

help:
	@grep -E '^[a-z0-9-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*##/\t/' | column -t -s $$'\t'

$(PY): pyproject.toml
	@echo ">> python environment in $(VENV)"
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@touch $(PY)

venv: $(PY) ## the Python environment (.venv) with the operator and test tools

crd: $(PY) ## regenerate manifests/crd/ from hack/crd/mpijobs.base.yaml and the pinned release's OpenAPI
	PY=$(PY) hack/gen-crd.sh

install-manifest: $(PY) ## regenerate deploy/mpijob-operator.yaml (the one-file install) from manifests/
	$(PY) hack/gen_install.py

lint: $(PY) ## ruff over all Python code
	@echo ">> ruff"
	$(VENV)/bin/ruff check .

unit: $(PY) ## unit tests of the pure functions, the queue and the store (no cluster)
	@echo ">> unit tests"
	$(PY) -m pytest tests/unit -q $(PYTEST_ARGS)

FUZZ_EXAMPLES ?= 20000
fuzz: $(PY) ## plan() over FUZZ_EXAMPLES MPIJobs drawn from the CRD's schema (tests/unit/crd_strategy.py)
	@echo ">> fuzz of the pure planner: $(FUZZ_EXAMPLES) examples"
	FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest tests/unit/test_crd_fuzz.py -q -p no:cacheprovider \
		--hypothesis-show-statistics $(PYTEST_ARGS)

integration: $(PY) ## integration tests against the local cluster (started if needed)
	@echo ">> integration tests (local cluster)"
	$(PY) -m pytest tests/integration -q $(PYTEST_ARGS)

kueue: ## build Kueue for e2e/test_kueue.py (hack/build-kueue.sh: cold 8-9 min, cached after)
	@echo ">> kueue (hack/build-kueue.sh)"
	hack/build-kueue.sh >/dev/null

mpi-images: ## the real node's MPI images: Open MPI 4 and 5, MPICH, Intel MPI (hack/images/build.sh mpis: cold 6-9 min, one debootstrap per Debian suite; cached after)
	@if [ "$$(id -u)" = 0 ]; then echo ">> MPI images (hack/images/build.sh mpis)"; hack/images/build.sh mpis >/dev/null; \
	else echo ">> MPI images: skipped (building them needs root, as the real node does)"; fi

# The whole MPI matrix (implementation x backend x runLauncherAsWorker, failure paths, discovery and
# the verdict scenarios on both backends: ~50 min, the verdict's 27 of them) is `make e2e-mpis`; `make test` and `make e2e` run a cross-section of it
# (every MPI, both backends, runLauncherAsWorker, ~5 min) and deselect the rest (marker mpi_matrix).
MATRIX ?= -m "not mpi_matrix"

# Kueue and the MPI images are built before pytest starts, so a cold build is never inside a test's
# 600 s timeout.
faketime: ## libfaketime unpacked into the cache, for e2e/test_verdict.py's clock skew (hack/faketime.sh; no root needed)
	hack/faketime.sh >/dev/null

e2e: $(PY) faketime ## end-to-end tests: the operator as a process on the local cluster, both backends
	@echo ">> end-to-end tests (local cluster)"
	$(PY) -m pytest e2e -q $(MATRIX) $(PYTEST_ARGS)

e2e-mpis: $(PY) mpi-images faketime ## every MPI x backend x runLauncherAsWorker on the real node, failure paths, discovery, the verdict scenarios (-s: times, hosts)
	$(PY) -m pytest e2e/test_realnode_mpis.py e2e/test_realnode_retries.py e2e/test_verdict.py -q -s -p no:cacheprovider $(PYTEST_ARGS)

e2e-kueue: $(PY) kueue ## only the Kueue end-to-end tests (e2e/test_kueue*.py: TAS, MultiKueue with a second cluster)
	$(PY) -m pytest e2e/test_kueue.py e2e/test_kueue_topology.py e2e/test_kueue_multikueue.py -q $(PYTEST_ARGS)

# make test: hack/test.sh. Installs what the tests need (libfaketime), starts the local cluster, then
# runs the tests side by side in TEST_WORKERS pytest-xdist workers (a module whole on one worker) and
# the `exclusive` ones alone after them. PYTEST_ARGS=-n0: every test one after another, as before.
TEST_WORKERS ?= 5
test: $(PY) ## lint, unit, integration and e2e tests (installs what they need, starts the local cluster; PYTEST_ARGS=-n0: serially)
	PY=$(PY) TEST_WORKERS=$(TEST_WORKERS) hack/test.sh $(MATRIX) $(PYTEST_ARGS)

cluster-up: ## the local cluster (kubeconfig at .cluster/kubeconfig); REAL_NODE=0 skips the real node
	hack/cluster-up.sh

cluster-down: ## stop the local cluster and remove its state
	hack/cluster-down.sh

run: $(PY) ## the operator in the foreground against $$KUBECONFIG, or the local cluster
	$(PY) -m controller --kubeconfig=$${KUBECONFIG:-$(CLUSTER_DIR)/kubeconfig} --log-format=console $(ARGS)

demo: $(PY) ## from nothing: cluster up, operator started, examples/pi.yaml to Succeeded with both backends
	$(PY) hack/demo.py

demo-deployed: $(PY) ## the operator as a Deployment on the real node: pi through it, a failover, Prometheus's figures
	$(PY) -m pytest e2e/test_deployed.py -q -s -p no:cacheprovider

bench: $(PY) ## the benchmarks, this operator beside the Go one (BENCH_GO=0: without it): a table on stdout, JSON in bench/results/
	@mkdir -p bench/results
	$(PY) -m bench.run --out bench/results

kind-up: ## a kind cluster for users with Docker (kubeconfig at .cluster/kubeconfig)
	hack/kind.sh up

kind-down:
	hack/kind.sh down

image: $(PY) ## the operator image: docker build where Docker runs, else built without it and imported into the real node
	PIP_PYTHON=$(PY) IMAGE=$(IMAGE) hack/image.sh

deploy: $(PY) ## CRD, RBAC and the operator Deployment (kustomize); on the local cluster: manifests/local, on the real node
	PIP_PYTHON=$(PY) hack/deploy.sh deploy

undeploy: ## the Deployment and RBAC (the CRD stays: deleting it deletes every MPIJob)
	hack/deploy.sh undeploy

clean: cluster-down
	rm -rf $(VENV) bench/results .pytest_cache .ruff_cache
