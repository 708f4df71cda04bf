//go:build tools

// Package tools pins the mpi-operator command built by hack/build-mpi-operator-go.sh.
package tools

import _ "github.com/kubeflow/mpi-operator/cmd/mpi-operator"
