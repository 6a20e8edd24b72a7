/*
Copyright 2026.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package stack

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/agentrun-dev/agentrun/internal/devstack/node"
)

// envtest starts etcd and kube-apiserver in their own process groups but
// without a parent-death signal, so a stack process that is SIGKILLed (or a
// test binary that panics on timeout) would leave them running. The stack
// therefore points envtest at a directory of symlinks to its own executable:
// started under the name etcd or kube-apiserver with shimAssetsEnv set, the
// executable asks the kernel to SIGKILL it when its parent dies, and then
// execs the real binary (the request survives execve).
const (
	shimAssetsEnv = "AGENTRUN_LOCALSTACK_SHIM_ASSETS"
	shimParentEnv = "AGENTRUN_LOCALSTACK_SHIM_PARENT"
)

var shimmed = []string{"etcd", "kube-apiserver"}

func init() {
	assets := os.Getenv(shimAssetsEnv)
	if assets == "" {
		return
	}
	name := filepath.Base(os.Args[0])
	shim := false
	for _, s := range shimmed {
		shim = shim || name == s
	}
	if !shim {
		return
	}
	if err := node.SetParentDeathSignal(); err != nil {
		fmt.Fprintf(os.Stderr, "localstack shim: %v\n", err)
		os.Exit(1)
	}
	// The parent may have died between fork and prctl.
	if want, _ := strconv.Atoi(os.Getenv(shimParentEnv)); want != 0 && os.Getppid() != want {
		os.Exit(1)
	}
	env := make([]string, 0, len(os.Environ()))
	for _, kv := range os.Environ() {
		if len(kv) > len(shimAssetsEnv) && kv[:len(shimAssetsEnv)+1] == shimAssetsEnv+"=" {
			continue
		}
		env = append(env, kv)
	}
	real := filepath.Join(assets, name)
	err := syscall.Exec(real, append([]string{real}, os.Args[1:]...), env)
	fmt.Fprintf(os.Stderr, "localstack shim: exec %s: %v\n", real, err)
	os.Exit(1)
}

// prepareShim makes dir a BinaryAssetsDirectory whose etcd and kube-apiserver
// are the shim and whose kubectl is the real one, and sets the environment
// the shim reads. It returns dir.
func prepareShim(dir, assets string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	link := func(target, name string) error {
		p := filepath.Join(dir, name)
		_ = os.Remove(p)
		return os.Symlink(target, p)
	}
	for _, s := range shimmed {
		if err := link(self, s); err != nil {
			return "", err
		}
	}
	if err := link(filepath.Join(assets, "kubectl"), "kubectl"); err != nil {
		return "", err
	}
	if err := os.Setenv(shimAssetsEnv, assets); err != nil {
		return "", err
	}
	if err := os.Setenv(shimParentEnv, strconv.Itoa(os.Getpid())); err != nil {
		return "", err
	}
	return dir, nil
}
