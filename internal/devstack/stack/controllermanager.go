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
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// ControllerManagerUser is kube-controller-manager's identity, bound to
// its bootstrap ClusterRole as on a cluster. With
// --use-service-account-credentials each controller acts as its own service
// account (system:serviceaccount:kube-system:generic-garbage-collector,
// …:namespace-controller), which is what config/admission-policy allows to
// delete RunAttempts.
const ControllerManagerUser = "system:kube-controller-manager"

// ControllerManagerControllers are the kube-controller-manager controllers
// the stack runs: the garbage collector (owned objects go with their owner:
// a deleted ResearchRun's RunAttempts and pods) and the namespace controller
// (a deleted namespace is emptied and removed).
const ControllerManagerControllers = "garbagecollector,namespace"

// controllerManagerBinary is kube-controller-manager in assets, or an error
// that says how to get it.
func controllerManagerBinary(assets string) (string, error) {
	bin := filepath.Join(assets, "kube-controller-manager")
	if fi, err := os.Stat(bin); err != nil || fi.IsDir() {
		return "", fmt.Errorf("kube-controller-manager is not in %s: run WITH_CONTROLLER_MANAGER=1 hack/envtest-toolchain.sh "+
			"(make dev and make test-e2e do), or start the stack with DisableControllerManager", assets)
	}
	return bin, nil
}

// startControllerManager runs kube-controller-manager with only the
// garbage collector and the namespace controller, on loopback, and waits
// for its /healthz.
func (s *Stack) startControllerManager(ctx context.Context) error {
	bin, err := controllerManagerBinary(s.opts.Assets)
	if err != nil {
		return err
	}
	u, err := s.Env.AddUser(envtest.User{Name: ControllerManagerUser, Groups: []string{"system:authenticated"}}, nil)
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(s.opts.Dir, "controller-manager.kubeconfig")
	if err := writeKubeconfig(u, kubeconfig); err != nil {
		return err
	}
	port, err := freeLoopbackPort()
	if err != nil {
		return err
	}
	certDir := filepath.Join(s.opts.Dir, "controller-manager")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return err
	}
	s.ControllerManager = &Operator{
		Binary: bin,
		Args: []string{
			"--kubeconfig=" + kubeconfig,
			"--controllers=" + ControllerManagerControllers,
			"--use-service-account-credentials",
			"--leader-elect=false",
			"--bind-address=127.0.0.1",
			fmt.Sprintf("--secure-port=%d", port),
			"--cert-dir=" + certDir,
			// Only the probes are served; nothing else is asked of it.
			"--authorization-always-allow-paths=/healthz,/readyz,/livez",
			"--kube-api-qps=100", "--kube-api-burst=200",
			"--v=2",
		},
		Env:     []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")},
		LogPath: filepath.Join(s.LogDir, "kube-controller-manager.log"),
	}
	_, _ = fmt.Fprintf(s.opts.out(), "==> starting kube-controller-manager (--controllers=%s) as %s\n",
		ControllerManagerControllers, ControllerManagerUser)
	start := time.Now()
	if err := s.ControllerManager.Start(); err != nil {
		return err
	}
	if err := waitHealthz(ctx, s.ControllerManager, fmt.Sprintf("https://127.0.0.1:%d/healthz", port), 90*time.Second); err != nil {
		return err
	}
	_, _ = fmt.Fprintf(s.opts.out(), "    kube-controller-manager pid %d ready in %s (log: %s)\n", s.ControllerManager.Pid(),
		time.Since(start).Round(100*time.Millisecond), rel(s.opts.Root, s.ControllerManager.LogPath))
	return nil
}

// waitHealthz polls an HTTPS health endpoint with a self-signed
// certificate (on loopback) until it answers 200 or the process exits.
func waitHealthz(ctx context.Context, p *Operator, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := &http.Client{Timeout: time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // a readiness probe on loopback
	}}
	done := p.Done()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := c.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-done:
			return fmt.Errorf("%s exited during startup; see %s", filepath.Base(p.Binary), p.LogPath)
		case <-ctx.Done():
			return fmt.Errorf("%s not healthy after %s; see %s", filepath.Base(p.Binary), timeout, p.LogPath)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
