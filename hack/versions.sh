# Pinned versions of everything hack/ builds. One Kubernetes release for every component.
K8S_VERSION=1.37.2
ETCD_VERSION=3.7.0
KWOK_VERSION=0.8.0
# Kueue for the e2e tests of the suspend protocol (e2e/test_kueue.py); built by hack/build-kueue.sh.
KUEUE_VERSION=0.17.0
