// Command coredns is CoreDNS (github.com/coredns/coredns, pinned in go.mod) with only the
// plugins the real node needs, so that it builds in a fraction of the full plugin set's time:
// kubernetes (serves cluster.local from the API server), template (NXDOMAIN for anything
// else: nothing is forwarded outside), errors, log, ready, health, cache, bind.
// Built by hack/realnode/build-coredns.sh; run by hack/realnode/up.sh.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/template"
)

// The plugins' order in a server block, as in CoreDNS's plugin.cfg (a subset of it).
var directives = []string{
	"bind", "ready", "health", "errors", "log", "cache", "template", "kubernetes",
}

func init() {
	dnsserver.Directives = directives
}

func main() {
	coremain.Run()
}
