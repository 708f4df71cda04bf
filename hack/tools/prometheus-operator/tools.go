//go:build tools

// Package tools pins the prometheus-operator command built by hack/build-prometheus.sh (its own
// go.mod has replace directives, so `go install module@version` refuses it; as a dependency of this
// module its sub-modules resolve to their published versions).
package tools

import _ "github.com/prometheus-operator/prometheus-operator/cmd/operator"
