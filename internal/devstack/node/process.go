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

package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	corev1 "k8s.io/api/core/v1"
)

// containerEnv returns the container's env as virtual-kubelet resolved it
// (env, envFrom, downward API, ConfigMap and Secret keys, $(VAR) references),
// resolving any field reference still left, and without the Kubernetes service
// link variables: there is no in-cluster network here, and a leftover
// KUBERNETES_SERVICE_HOST would send in-cluster clients to an unreachable
// address instead of failing fast.
func containerEnv(pod *corev1.Pod, c *corev1.Container) []corev1.EnvVar {
	out := make([]corev1.EnvVar, 0, len(c.Env))
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, "KUBERNETES_SERVICE_") || strings.HasPrefix(e.Name, "KUBERNETES_PORT") {
			continue
		}
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			e.Value = fieldValue(pod, e.ValueFrom.FieldRef.FieldPath)
			e.ValueFrom = nil
		}
		if e.ValueFrom != nil {
			continue // unresolved (virtual-kubelet resolves these)
		}
		out = append(out, e)
	}
	return out
}

func fieldValue(pod *corev1.Pod, path string) string {
	switch path {
	case "metadata.name":
		return pod.Name
	case "metadata.namespace":
		return pod.Namespace
	case "metadata.uid":
		return string(pod.UID)
	case "spec.nodeName":
		return pod.Spec.NodeName
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName
	case "status.podIP", "status.hostIP":
		return loopback
	}
	if k, ok := strings.CutPrefix(path, "metadata.labels['"); ok {
		return pod.Labels[strings.TrimSuffix(k, "']")]
	}
	if k, ok := strings.CutPrefix(path, "metadata.annotations['"); ok {
		return pod.Annotations[strings.TrimSuffix(k, "']")]
	}
	return ""
}

// commandLine maps a container to an executable and its arguments. The image's
// binary stands for the image's entrypoint: with no command, it runs with the
// container's args. A command whose first element names that binary (same
// base name, e.g. /research-agent) runs the binary with the rest of the
// command and the args; any other command runs as a host command found in
// PATH (e.g. sh). $(VAR) references are expanded as a kubelet does.
func commandLine(bin string, c *corev1.Container, vars map[string]string) (string, []string, error) {
	expand := func(in []string) []string {
		out := make([]string, len(in))
		for i, s := range in {
			out[i] = expandVars(s, vars)
		}
		return out
	}
	cmd, args := expand(c.Command), expand(c.Args)
	if len(cmd) == 0 {
		return bin, args, nil
	}
	if cmd[0] == bin || filepath.Base(cmd[0]) == filepath.Base(bin) {
		return bin, append(cmd[1:], args...), nil
	}
	exe, err := exec.LookPath(cmd[0])
	if err != nil {
		return "", nil, fmt.Errorf("command %q: not the image's binary (%s) and not found on this host: %w", cmd[0], filepath.Base(bin), err)
	}
	return exe, append(cmd[1:], args...), nil
}

// expandVars expands $(VAR) from vars; $$ is a literal $; unknown references
// stay as written (the kubelet's rules).
func expandVars(s string, vars map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteByte(s[i])
				continue
			}
			name := s[i+2 : i+2+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

func newCmd(exe string, args, env []string, dir string, out *os.File) *exec.Cmd {
	cmd := exec.Command(exe, args...)
	cmd.Env = env
	cmd.Dir = dir
	cmd.Stdin = nil
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = ChildProcAttr()
	return cmd
}

// exitStatus returns the exit code as a kubelet reports it (128+n for a
// process killed by signal n) and the signal.
func exitStatus(cmd *exec.Cmd, err error) (int32, int32) {
	ps := cmd.ProcessState
	if ps == nil {
		return 128, 0
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int32(ws.Signal()), int32(ws.Signal())
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return 128, 0
	}
	return int32(ps.ExitCode()), 0
}

// tailFile returns the last lines of a file, at most max bytes.
func tailFile(path string, lines, limit int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	data = data[tailOffset(data, lines):]
	if len(data) > limit {
		data = data[len(data)-limit:]
	}
	return string(data)
}

// tailOffset returns the offset where the last n lines of data begin.
func tailOffset(data []byte, n int) int {
	end := len(data)
	if end > 0 && data[end-1] == '\n' {
		end--
	}
	for range n {
		j := bytes.LastIndexByte(data[:end], '\n')
		if j < 0 {
			return 0
		}
		end = j
	}
	return end + 1
}

// GetContainerLogs serves a container's log file (kubectl logs): tailLines,
// limitBytes and follow are honoured; timestamps, sinceSeconds and sinceTime
// are not (the file has no timestamps); there is never a previous container.
func (p *provider) GetContainerLogs(ctx context.Context, namespace, podName, containerName string, opts api.ContainerLogOpts) (io.ReadCloser, error) {
	pr := p.get(namespace, podName)
	if pr == nil {
		return nil, errdefs.NotFoundf("pod %s/%s is not on this node", namespace, podName)
	}
	if opts.Previous {
		return nil, errdefs.NotFoundf("container %s has no previous instance: local containers are not restarted", containerName)
	}
	var c *ctrRun
	for _, x := range pr.ctrs {
		if x.spec.Name == containerName {
			c = x
		}
	}
	if c == nil {
		return nil, errdefs.NotFoundf("pod %s/%s has no container %s", namespace, podName, containerName)
	}
	f, err := os.Open(c.logPath)
	if errors.Is(err, os.ErrNotExist) {
		return io.NopCloser(strings.NewReader("")), nil
	}
	if err != nil {
		return nil, err
	}
	if opts.Tail > 0 {
		data, err := io.ReadAll(f)
		if err != nil {
			_ = f.Close()
			return nil, err
		}
		if _, err := f.Seek(int64(tailOffset(data, opts.Tail)), io.SeekStart); err != nil {
			_ = f.Close()
			return nil, err
		}
	}
	var r io.Reader = f
	if opts.Follow {
		r = &follower{ctx: ctx, f: f, exited: c.exitCh}
	}
	if opts.LimitBytes > 0 {
		r = io.LimitReader(r, int64(opts.LimitBytes))
	}
	return struct {
		io.Reader
		io.Closer
	}{r, f}, nil
}

// follower reads a growing file until the container has exited and the file
// is drained, or the request ends.
type follower struct {
	ctx    context.Context
	f      *os.File
	exited <-chan struct{}
}

func (fo *follower) Read(b []byte) (int, error) {
	for {
		n, err := fo.f.Read(b)
		if n > 0 || (err != nil && err != io.EOF) {
			return n, err
		}
		select {
		case <-fo.exited:
			// One last read after the exit, then EOF.
			n, err := fo.f.Read(b)
			if n > 0 {
				return n, nil
			}
			if err == nil {
				err = io.EOF
			}
			return 0, err
		default:
		}
		select {
		case <-fo.ctx.Done():
			return 0, io.EOF
		case <-fo.exited:
		case <-time.After(200 * time.Millisecond):
		}
	}
}
