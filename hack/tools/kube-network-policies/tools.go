//go:build tools

// Package tools pins the kube-network-policies command built by hack/build-kube-network-policies.sh.
package tools

import _ "sigs.k8s.io/kube-network-policies/cmd"
