# Pinned versions of everything hack/ builds. One Kubernetes release for every component.
K8S_VERSION=1.37.2
ETCD_VERSION=3.7.0
KWOK_VERSION=0.8.0
PROMETHEUS_OPERATOR_VERSION=0.85.0
# github.com/prometheus/prometheus v0.316.0 is Prometheus 3.16 (the module's versions are v0.3xx).
PROMETHEUS_VERSION=0.316.0
# sigs.k8s.io/scheduler-plugins (Coscheduling + PodGroup controller) for the gang-scheduling e2e test.
# The newest release; it is built against k8s 1.34 libraries and only talks to the 1.37 API server.
SCHEDULER_PLUGINS_VERSION=0.34.7
# volcano.sh/volcano: only its PodGroup CRD is used (the operator's Volcano PodGroups must be accepted).
VOLCANO_VERSION=1.15.1
# Kueue for the e2e tests of the suspend protocol (e2e/test_kueue.py); built by hack/build-kueue.sh.
KUEUE_VERSION=0.19.2
# The Kubeflow MPI Operator (Go) that `make bench` runs beside this one (bench/go_operator.py);
# built by hack/build-mpi-operator-go.sh from its Go module.
MPI_OPERATOR_GO_VERSION=0.8.2
# sigs.k8s.io/kube-network-policies: the NetworkPolicy implementation of the real node (nfqueue
# verdicts from userspace, nftables), built from its Go module by hack/build-kube-network-policies.sh
# and run by hack/realnode/network-policies.sh. v0.8.0 is the one the Go module proxy serves here.
KUBE_NETWORK_POLICIES_VERSION=0.8.0
