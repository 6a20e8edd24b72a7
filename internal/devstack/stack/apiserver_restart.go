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
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/agentrun-dev/agentrun/internal/devstack/node"
)

// apiServerBinary is kube-apiserver's executable name.
const apiServerBinary = "kube-apiserver"

// APIServerControl stops and starts kube-apiserver while etcd keeps running
// (Stack.APIServerControl): the same binary, command line, port and
// certificates, so every client's kubeconfig stays valid and every object
// survives in etcd. envtest cannot restart its API server in place (its
// Stop forgets the certificate directory), so the control finds envtest's
// process by its command line and starts the replacements itself.
type APIServerControl struct {
	s    *Stack
	path string
	args []string

	mu       sync.Mutex
	pid      int       // envtest's process, until the first Stop
	cmd      *exec.Cmd // ours, after the first Start
	done     chan struct{}
	restarts int
}

// APIServerControl finds the running kube-apiserver (a child of this
// process serving s.Admin's port).
func (s *Stack) APIServerControl() (*APIServerControl, error) {
	host, err := url.Parse(s.Admin.Host)
	if err != nil {
		return nil, err
	}
	port := host.Port()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("finding kube-apiserver: %w", err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(raw) == 0 {
			continue
		}
		argv := bytes.Split(bytes.TrimRight(raw, "\x00"), []byte{0})
		if filepath.Base(string(argv[0])) != apiServerBinary {
			continue
		}
		args := make([]string, 0, len(argv)-1)
		found := false
		for _, a := range argv[1:] {
			args = append(args, string(a))
			found = found || string(a) == "--secure-port="+port
		}
		if !found {
			continue
		}
		c := &APIServerControl{s: s, path: string(argv[0]), args: args, pid: pid}
		s.closers = append(s.closers, c)
		return c, nil
	}
	return nil, fmt.Errorf("no kube-apiserver process serves port %s", port)
}

// Restarts counts the API servers this control started.
func (c *APIServerControl) Restarts() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.restarts
}

// StopGrace is how long Stop waits after SIGTERM before it sends SIGKILL.
// kube-apiserver stops listening at once on SIGTERM but then takes about 20 s
// to drain its watches and exit; the control does not wait for that.
const StopGrace = 3 * time.Second

// Stop stops kube-apiserver (SIGTERM, SIGKILL after StopGrace) and waits
// until it is gone.
func (c *APIServerControl) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd != nil {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(StopGrace):
			_ = c.cmd.Process.Kill()
			<-c.done
		}
		c.cmd = nil
		return nil
	}
	if c.pid == 0 {
		return nil
	}
	// envtest's process: envtest reaps it; wait until the pid is gone.
	_ = syscall.Kill(c.pid, syscall.SIGTERM)
	deadline := time.Now().Add(StopGrace)
	for processExists(c.pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(c.pid, syscall.SIGKILL)
			deadline = time.Now().Add(10 * time.Second)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.pid = 0
	return nil
}

func processExists(pid int) bool {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// A zombie (state Z) is gone for every purpose but the reaper's.
	if i := bytes.LastIndexByte(raw, ')'); i >= 0 && i+2 < len(raw) {
		return raw[i+2] != 'Z'
	}
	return true
}

// Start starts kube-apiserver with the original command line and waits until
// it answers /readyz.
func (c *APIServerControl) Start(ctx context.Context) error {
	c.mu.Lock()
	if c.cmd != nil || c.pid != 0 {
		c.mu.Unlock()
		return errors.New("kube-apiserver is running")
	}
	logf, err := os.OpenFile(filepath.Join(c.s.LogDir, "kube-apiserver.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.mu.Unlock()
		return err
	}
	_, _ = fmt.Fprintf(logf, "\n===== chaos: kube-apiserver start #%d at %s\n\n", c.restarts+1, time.Now().Format(time.RFC3339))
	cmd := exec.Command(c.path, c.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = node.ChildProcAttr()
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		c.mu.Unlock()
		return fmt.Errorf("starting kube-apiserver: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = logf.Close()
		close(done)
	}()
	c.cmd, c.done = cmd, done
	c.restarts++
	c.mu.Unlock()
	return c.waitReady(ctx, done, 90*time.Second)
}

func (c *APIServerControl) waitReady(ctx context.Context, done <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		body, err := c.s.Clientset.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(rctx)
		cancel()
		if err == nil && string(body) == "ok" {
			return nil
		}
		select {
		case <-done:
			return errors.New("kube-apiserver exited during startup; see logs/kube-apiserver.log")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-apiserver not ready after %s: %v", timeout, err)
		}
	}
}

// Close stops an API server this control started (the stack's Stop stops
// envtest's own).
func (c *APIServerControl) Close() error {
	c.mu.Lock()
	ours := c.cmd != nil
	c.mu.Unlock()
	if ours {
		return c.Stop()
	}
	return nil
}
