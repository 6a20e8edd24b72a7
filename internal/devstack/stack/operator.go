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
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentrun-dev/agentrun/internal/devstack/node"
)

// Operator is the operator binary running as its own process.
type Operator struct {
	Binary  string
	Args    []string
	Env     []string
	LogPath string
	// HealthAddr is the --health-probe-bind-address; /readyz is polled there.
	HealthAddr string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	// Starts counts the processes started, for logs and tests.
	Starts int
}

// Start starts a new operator process (the previous one must have exited).
func (o *Operator) Start() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cmd != nil {
		select {
		case <-o.done:
		default:
			return errors.New("operator is already running")
		}
	}
	logf, err := os.OpenFile(o.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer func() { _ = logf.Close() }()
	o.Starts++
	_, _ = fmt.Fprintf(logf, "\n===== agentrun-dev: operator start #%d at %s: %s %s\n\n", o.Starts,
		time.Now().Format(time.RFC3339), o.Binary, strings.Join(o.Args, " "))
	cmd := exec.Command(o.Binary, o.Args...)
	cmd.Env = o.Env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = node.ChildProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start operator: %w", err)
	}
	done := make(chan struct{})
	o.cmd, o.done = cmd, done
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	return nil
}

// Pid returns the running operator's pid, or 0.
func (o *Operator) Pid() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cmd == nil || o.exitedLocked() {
		return 0
	}
	return o.cmd.Process.Pid
}

func (o *Operator) exitedLocked() bool {
	select {
	case <-o.done:
		return true
	default:
		return false
	}
}

// Done is closed when the current process exits.
func (o *Operator) Done() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.done == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return o.done
}

// Kill SIGKILLs the operator's process group and waits for it.
func (o *Operator) Kill() {
	o.signal(syscall.SIGKILL)
	<-o.Done()
}

// Stop sends SIGTERM (the manager releases its Lease and exits), then
// SIGKILL after grace.
func (o *Operator) Stop(grace time.Duration) {
	o.signal(syscall.SIGTERM)
	select {
	case <-o.Done():
	case <-time.After(grace):
		o.Kill()
	}
}

func (o *Operator) signal(sig syscall.Signal) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cmd == nil || o.exitedLocked() {
		return
	}
	_ = syscall.Kill(-o.cmd.Process.Pid, sig)
}

// WaitReady polls /readyz until it answers 200 or the process exits.
func (o *Operator) WaitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	done := o.Done()
	c := &http.Client{Timeout: time.Second}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+o.HealthAddr+"/readyz", nil)
		if resp, err := c.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-done:
			return fmt.Errorf("the operator exited during startup; see %s", o.LogPath)
		case <-ctx.Done():
			return fmt.Errorf("operator not ready after %s; see %s", timeout, o.LogPath)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// freeLoopbackPort returns a free TCP port on 127.0.0.1.
func freeLoopbackPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// freeLoopbackPorts returns n free TCP ports on 127.0.0.1.
func freeLoopbackPorts(n int) ([]int, error) {
	out := make([]int, 0, n)
	for range n {
		p, err := freeLoopbackPort()
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}
