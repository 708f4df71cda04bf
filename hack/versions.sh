# Pinned versions of everything hack/ builds. One Kubernetes release for every component.
K8S_VERSION=1.37.2
ETCD_VERSION=3.7.0
KWOK_VERSION=0.8.0
PROMETHEUS_OPERATOR_VERSION=0.85.0
# Debian bookworm's prometheus package (the server and promtool), unpacked, not installed.
PROMETHEUS_DEBIAN_VERSION=2.42.0+ds-5+deb12u1
