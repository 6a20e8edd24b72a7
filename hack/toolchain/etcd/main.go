// Command etcd is the etcd server, built from go.etcd.io/etcd/server/v3 by
// hack/envtest-toolchain.sh when setup-envtest cannot download a prebuilt one.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
