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
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Toolchain returns the directory with kube-apiserver, etcd, kubectl and
// kube-controller-manager: $KUBEBUILDER_ASSETS when it holds them, else
// whatever WITH_CONTROLLER_MANAGER=1 hack/envtest-toolchain.sh prints (it
// finds them in setup-envtest's store, downloads them, or builds them from
// their Go modules, several minutes the first time). Its progress goes to
// out.
func Toolchain(ctx context.Context, root string, out io.Writer) (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" && hasToolchain(dir) {
		return dir, nil
	}
	_, _ = fmt.Fprintln(out, "==> finding kube-apiserver, etcd, kubectl and kube-controller-manager "+
		"(hack/envtest-toolchain.sh; builds them from Go modules the first time, several minutes)")
	var stdout bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "envtest-toolchain.sh"))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "WITH_CONTROLLER_MANAGER=1")
	cmd.Stdout, cmd.Stderr = &stdout, out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("hack/envtest-toolchain.sh: %w", err)
	}
	dir := strings.TrimSpace(stdout.String())
	if !hasToolchain(dir) {
		return "", fmt.Errorf("hack/envtest-toolchain.sh printed %q, which lacks kube-apiserver, etcd, kubectl or kube-controller-manager", dir)
	}
	return dir, nil
}

func hasToolchain(dir string) bool {
	for _, b := range []string{"kube-apiserver", "etcd", "kubectl", "kube-controller-manager"} {
		if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.IsDir() {
			return false
		}
	}
	return true
}

// GoBuild builds pkg (a package path relative to root, e.g. ./cmd) into out
// and says so on log.
func GoBuild(ctx context.Context, root, pkg, output string, log io.Writer) error {
	start := time.Now()
	_, _ = fmt.Fprintf(log, "==> go build -o %s %s\n", rel(root, output), pkg)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", output, pkg)
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s: %w", pkg, err)
	}
	_, _ = fmt.Fprintf(log, "    built %s in %s\n", rel(root, output), time.Since(start).Round(100*time.Millisecond))
	return nil
}

// HasGoFiles reports whether dir (relative to root) holds a buildable Go
// package, e.g. whether cmd/research-agent exists yet.
func HasGoFiles(root, dir string) bool {
	matches, _ := filepath.Glob(filepath.Join(root, dir, "*.go"))
	for _, m := range matches {
		if !strings.HasSuffix(m, "_test.go") {
			return true
		}
	}
	return false
}

func rel(root, p string) string {
	if r, err := filepath.Rel(root, p); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return p
}
