//go:build tools

// Package tools pins the scheduler-plugins binaries this module builds.
package tools

import (
	_ "sigs.k8s.io/scheduler-plugins/cmd/controller"
	_ "sigs.k8s.io/scheduler-plugins/cmd/scheduler"
)
