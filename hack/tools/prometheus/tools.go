//go:build tools

// Package tools pins the Prometheus server built by hack/build-prometheus.sh, with only the
// Kubernetes service discovery (build tags remove_all_sd,enable_kubernetes_sd): what the Prometheus
// Operator's generated configuration uses. (Debian's package is built without Kubernetes SD.)
package tools

import _ "github.com/prometheus/prometheus/cmd/prometheus"
