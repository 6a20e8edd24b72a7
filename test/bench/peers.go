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

package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Peer names.
const (
	sysJob      = "job"
	sysAgentrun = "agentrun"
)

// proc is a child process the benchmark started and must stop.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

// children tracks every process started here, so a signal or a failure can
// stop them all.
var children = struct {
	sync.Mutex
	m map[*proc]struct{}
}{m: map[*proc]struct{}{}}

func startProc(name, logPath string, env []string, bin string, args ...string) (*proc, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	// Own process group (a terminal's Ctrl-C reaches us, and we stop the
	// children in order); and killed by the kernel if this process dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	children.Lock()
	children.m[p] = struct{}{}
	children.Unlock()
	go func() {
		p.err = cmd.Wait()
		_ = f.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, waits up to 10s, then kills the process group.
func (p *proc) stop() {
	if p == nil {
		return
	}
	defer func() {
		children.Lock()
		delete(children.m, p)
		children.Unlock()
	}()
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
		<-p.done
	}
}

// planePIDs are the etcd and kube-apiserver of the running plane; envtest
// stops them, but a forced exit must kill them itself.
var planePIDs = struct {
	sync.Mutex
	m map[int]bool
}{m: map[int]bool{}}

func registerPlanePID(pid int, on bool) {
	planePIDs.Lock()
	defer planePIDs.Unlock()
	if on {
		planePIDs.m[pid] = true
	} else {
		delete(planePIDs.m, pid)
	}
}

// killEverything kills every child process group at once (second Ctrl-C).
func killEverything() {
	children.Lock()
	for p := range children.m {
		_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	}
	children.Unlock()
	planePIDs.Lock()
	for pid := range planePIDs.m {
		_ = syscall.Kill(-pid, syscall.SIGKILL) // envtest starts each in its own group
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	planePIDs.Unlock()
}

func stopAllChildren() {
	children.Lock()
	var all []*proc
	for p := range children.m {
		all = append(all, p)
	}
	children.Unlock()
	for _, p := range all {
		p.stop()
	}
}

func (p *proc) tail() string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return ""
	}
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// buildOperator builds ./cmd into dir and returns the binary's path.
func buildOperator(ctx context.Context, root, dir string) (string, error) {
	return buildBinary(ctx, root, dir, "./cmd", "manager")
}

// buildBinary builds the package pkg into dir/name and returns its path.
func buildBinary(ctx context.Context, root, dir, pkg, name string) (string, error) {
	out := filepath.Join(dir, name)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = root
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, buf.String())
	}
	return out, nil
}

// peerConfig is what both peers get alike.
type peerConfig struct {
	Workers int     `json:"workers"`
	QPS     float64 `json:"kubeAPIQPS"`
	Burst   int     `json:"kubeAPIBurst"`
}

// peer is a running controller under test.
type peer struct {
	*proc
	metricsURL string // agentrun only
	pprofURL   string // agentrun in profiling mode only
}

// startPeer starts the controller under test; extraArgs are the agentrun
// manager's (e.g. --gateway-url for the live workload).
func startPeer(ctx context.Context, sys string, pl *plane, o *options, dir string, extraArgs ...string) (*peer, error) {
	pc, assets := o.peer, o.assets
	switch sys {
	case sysJob:
		p, err := startProc("kube-controller-manager", filepath.Join(dir, "kube-controller-manager.log"), nil,
			filepath.Join(assets, "kube-controller-manager"),
			"--kubeconfig="+pl.kubeconfig,
			"--controllers=job",
			"--leader-elect=false",
			"--secure-port=0",
			"--concurrent-job-syncs="+strconv.Itoa(pc.Workers),
			"--kube-api-qps="+strconv.FormatFloat(pc.QPS, 'f', -1, 64),
			"--kube-api-burst="+strconv.Itoa(pc.Burst),
			"--v=1",
		)
		if err != nil {
			return nil, err
		}
		return &peer{proc: p}, nil
	case sysAgentrun:
		metricsPort, err := freePort()
		if err != nil {
			return nil, err
		}
		probePort, err := freePort()
		if err != nil {
			return nil, err
		}
		bin, args := o.operatorBin, []string(nil)
		var pprofURL string
		if o.profileDir != "" {
			// The operator's controllers in this program's operator mode,
			// which adds a pprof endpoint (cmd/main.go has none).
			pprofPort, err := freePort()
			if err != nil {
				return nil, err
			}
			self, err := os.Executable()
			if err != nil {
				return nil, err
			}
			pprofURL = fmt.Sprintf("http://127.0.0.1:%d", pprofPort)
			bin, args = self, []string{"operator", "--pprof-bind-address=127.0.0.1:" + strconv.Itoa(pprofPort)}
		}
		// The manager runs as the operator's service account (the identity
		// config/admission-policy lets write runs, sessions and attempts).
		args = append(args,
			"--kubeconfig="+pl.operatorKubeconfig,
			"--run-workers="+strconv.Itoa(pc.Workers),
			"--kube-api-qps="+strconv.FormatFloat(pc.QPS, 'f', -1, 64),
			"--kube-api-burst="+strconv.Itoa(pc.Burst),
			"--metrics-bind-address=127.0.0.1:"+strconv.Itoa(metricsPort),
			"--health-probe-bind-address=127.0.0.1:"+strconv.Itoa(probePort),
		)
		env := []string{"KUBECONFIG=" + pl.operatorKubeconfig}
		if pl.webhooks {
			// The configurations envtest installed call 127.0.0.1:<port>
			// with the caBundle of the certificate in webhookCertDir.
			args = append(args,
				"--webhook-host="+pl.webhookHost,
				"--webhook-port="+strconv.Itoa(pl.webhookPort),
				"--webhook-cert-path="+pl.webhookCertDir,
			)
			if o.profileDir != "" {
				args = append(args, "--enable-webhooks")
			}
		} else {
			// Admission webhooks are not installed in this apiserver (the
			// Job path has none either), so the manager starts none.
			env = append(env, "ENABLE_WEBHOOKS=false")
			if o.profileDir == "" {
				webhookPort, err := freePort()
				if err != nil {
					return nil, err
				}
				certDir := filepath.Join(dir, "webhook-certs")
				if err := selfSignedCert(certDir); err != nil {
					return nil, err
				}
				// Should a webhook server start anyway, it gets a free port
				// and a throwaway certificate; nothing calls it.
				args = append(args, "--webhook-port="+strconv.Itoa(webhookPort), "--webhook-cert-path="+certDir)
			}
		}
		if o.profileDir == "" {
			args = append(args, "--metrics-secure=false", "--leader-elect=false")
		}
		args = append(args, extraArgs...)
		args = append(args, o.operatorArgs...)
		p, err := startProc("agentrun-manager", filepath.Join(dir, "agentrun-manager.log"), env, bin, args...)
		if err != nil {
			return nil, err
		}
		pr := &peer{proc: p, metricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort), pprofURL: pprofURL}
		if err := waitHTTP(ctx, fmt.Sprintf("http://127.0.0.1:%d/readyz", probePort), p, 60*time.Second); err != nil {
			pr.stop()
			return nil, fmt.Errorf("agentrun manager did not become ready: %w\n%s", err, p.tail())
		}
		return pr, nil
	}
	return nil, fmt.Errorf("unknown system %q", sys)
}

func waitHTTP(ctx context.Context, url string, p *proc, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if p.exited() {
			return fmt.Errorf("%s exited: %v", p.name, p.err)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not ready after %s", url, limit)
}

// operatorMetricPrefixes are the operator's metrics the report keeps.
var operatorMetricPrefixes = []string{
	"agentrun_", "controller_runtime_reconcile_total", "controller_runtime_reconcile_time_seconds",
	"workqueue_adds_total", "workqueue_queue_duration_seconds", "workqueue_work_duration_seconds",
	"rest_client_requests_total", "rest_client_request_duration_seconds", "rest_client_rate_limiter_duration_seconds",
}

// operatorMetrics scrapes the agentrun manager's own metrics.
func (p *peer) operatorMetrics(ctx context.Context) (map[string]float64, map[float64]float64, error) {
	if p.metricsURL == "" {
		return nil, nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.metricsURL, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, nil, err
	}
	fams, err := parseMetrics(raw)
	if err != nil {
		return nil, nil, err
	}
	out := map[string]float64{}
	var buckets map[float64]float64
	for name, fam := range fams {
		if !slices.ContainsFunc(operatorMetricPrefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
			continue
		}
		for _, m := range fam.GetMetric() {
			var kb strings.Builder
			kb.WriteString(name)
			for _, l := range m.GetLabel() {
				fmt.Fprintf(&kb, ",%s=%s", l.GetName(), l.GetValue())
			}
			key := kb.String()
			switch {
			case m.Counter != nil:
				out[key] += m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[key] += m.GetGauge().GetValue()
			case m.Histogram != nil:
				h := m.GetHistogram()
				out[key+",count"] += float64(h.GetSampleCount())
				out[key+",sum"] += h.GetSampleSum()
				if name == "agentrun_fact_to_decision_seconds" {
					buckets = map[float64]float64{}
					for _, b := range h.GetBucket() {
						buckets[b.GetUpperBound()] = float64(b.GetCumulativeCount())
					}
				}
			}
		}
	}
	return out, buckets, nil
}

// fetchTo saves the body of a GET on url into path.
func fetchTo(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// selfSignedCert writes tls.crt and tls.key for localhost into dir.
func selfSignedCert(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "localhost"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600)
}
