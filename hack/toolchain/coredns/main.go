// Command coredns is CoreDNS with only the plugins a cluster's DNS needs
// (kubernetes, no forward: nothing outside the cluster is reachable): hack/realnode runs it as the real node's cluster
// DNS, built from github.com/coredns/coredns by hack/envtest-toolchain.sh
// (WITH_NODE=1), since no CoreDNS image can be pulled here.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	// The plugins, registered by import; the order of directives below is
	// the order they run in, as in CoreDNS's plugin.cfg.
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

func init() {
	dnsserver.Directives = []string{
		"errors", "log", "health", "ready", "loadbalance", "cache", "kubernetes", "loop", "reload",
	}
}

func main() {
	coremain.Run()
}
