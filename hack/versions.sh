# Pinned versions of everything hack/ builds. One Kubernetes release for every component.
K8S_VERSION=1.37.2
ETCD_VERSION=3.7.0
KWOK_VERSION=0.8.0
