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

package utils

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
)

// EnvtestAssets returns the directory holding kube-apiserver, etcd and kubectl
// for envtest: $KUBEBUILDER_ASSETS when set (make test sets it), otherwise the
// first Kubernetes version in setup-envtest's store, which
// hack/envtest-toolchain.sh fills. The second case lets `go test` and IDEs run
// a suite directly once `make envtest-assets` has run.
func EnvtestAssets() string {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir
	}
	base := os.Getenv("XDG_DATA_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		base = filepath.Join(home, ".local", "share")
	}
	store := filepath.Join(base, "kubebuilder-envtest", "k8s")
	entries, err := os.ReadDir(store)
	if err != nil {
		return ""
	}
	suffix := "-" + runtime.GOOS + "-" + runtime.GOARCH
	for _, e := range slices.Backward(entries) {
		name := e.Name()
		if e.IsDir() && strings.HasSuffix(name, suffix) {
			return filepath.Join(store, name)
		}
	}
	return ""
}

// ProjectRoot returns the repository root, found from this file's location.
func ProjectRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}
