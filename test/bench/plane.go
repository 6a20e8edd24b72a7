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
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/devstack/stack"
	"github.com/agentrun-dev/agentrun/internal/devstack/webhookpatch"
)

// plane is one fresh local control plane: the envtest toolchain's etcd and
// kube-apiserver with the agentrun CRDs installed and, with webhooks, the
// admission webhooks and policies a real install has.
type plane struct {
	env        *envtest.Environment
	admin      *rest.Config // system:masters, for the driver and scrapes
	kubeconfig string       // system:masters kubeconfig file for the peer under test
	dir        string
	apiPID     int
	etcdPID    int
	etcdURL    string
	clientset  *kubernetes.Clientset

	// operatorKubeconfig is the agentrun manager's identity
	// (stack.OperatorUser, in system:masters for RBAC), gatewayKubeconfig and
	// gatewayCfg agentrun-gateway's (stack.GatewayUser): the authors
	// config/admission-policy lets write RunAttempts, runs and sessions.
	operatorKubeconfig string
	gatewayKubeconfig  string
	gatewayCfg         *rest.Config

	// webhooks: config/webhook's configurations are installed (envtest's
	// serving certificate and caBundle, config/webhook's kustomize patches),
	// served by the manager at webhookHost:webhookPort from webhookCertDir,
	// and config/admission-policy's ValidatingAdmissionPolicies are in force.
	webhooks       bool
	webhookHost    string
	webhookPort    int
	webhookCertDir string

	// admission is the latest scrape's admission webhook calls and
	// admission policy checks (apiserver metrics), by metric name.
	admission map[string]float64
}

func startPlane(ctx context.Context, assets, root, dir string, webhooks bool) (*plane, error) {
	env := &envtest.Environment{
		CRDDirectoryPaths:        []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing:    true,
		BinaryAssetsDirectory:    assets,
		ControlPlaneStartTimeout: 90 * time.Second,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	if webhooks {
		// As internal/devstack/stack does: envtest generates a serving
		// certificate, points the configurations at 127.0.0.1:<port> with its
		// caBundle, and installs them.
		env.WebhookInstallOptions = envtest.WebhookInstallOptions{
			Paths:            []string{filepath.Join(root, "config", "webhook", "manifests.yaml")},
			LocalServingHost: "127.0.0.1",
		}
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("start control plane: %w", err)
	}
	p := &plane{env: env, dir: dir, webhooks: webhooks}
	// From here on a failure must stop what started.
	ok := false
	defer func() {
		if !ok {
			p.stop()
		}
	}()

	p.admin = rest.CopyConfig(cfg)
	user, err := env.ControlPlane.AddUser(envtest.User{Name: "bench-peer", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, fmt.Errorf("add peer user: %w", err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return nil, err
	}
	p.kubeconfig = filepath.Join(dir, "peer.kubeconfig")
	if err := os.WriteFile(p.kubeconfig, kc, 0o600); err != nil {
		return nil, err
	}
	for _, u := range []struct {
		name string
		path *string
		cfg  **rest.Config
	}{{stack.OperatorUser, &p.operatorKubeconfig, nil}, {stack.GatewayUser, &p.gatewayKubeconfig, &p.gatewayCfg}} {
		au, err := env.ControlPlane.AddUser(envtest.User{Name: u.name, Groups: []string{"system:masters"}}, nil)
		if err != nil {
			return nil, fmt.Errorf("add user %s: %w", u.name, err)
		}
		kc, err := au.KubeConfig()
		if err != nil {
			return nil, err
		}
		*u.path = filepath.Join(dir, strings.ReplaceAll(strings.TrimPrefix(u.name, "system:serviceaccount:"), ":", "-")+".kubeconfig")
		if err := os.WriteFile(*u.path, kc, 0o600); err != nil {
			return nil, err
		}
		if u.cfg != nil {
			*u.cfg = au.Config()
		}
	}
	if webhooks {
		if err := p.installAdmission(ctx, root); err != nil {
			return nil, err
		}
	}
	if env.ControlPlane.Etcd != nil && env.ControlPlane.Etcd.URL != nil {
		p.etcdURL = env.ControlPlane.Etcd.URL.String()
	}
	p.apiPID = childPID("kube-apiserver")
	p.etcdPID = childPID("etcd")
	if p.apiPID == 0 || p.etcdPID == 0 {
		return nil, fmt.Errorf("could not find the pids of kube-apiserver (%d) and etcd (%d)", p.apiPID, p.etcdPID)
	}
	registerPlanePID(p.apiPID, true)
	registerPlanePID(p.etcdPID, true)
	scrape := rest.CopyConfig(cfg)
	scrape.QPS, scrape.Burst = 100, 100
	if p.clientset, err = kubernetes.NewForConfig(scrape); err != nil {
		return nil, err
	}
	ok = true
	return p, nil
}

// installAdmission gives the webhook configurations envtest installed what
// config/webhook's kustomization adds (webhookpatch, as the dev stack and the
// e2e suite do), and creates config/admission-policy's
// ValidatingAdmissionPolicies and bindings.
func (p *plane) installAdmission(ctx context.Context, root string) error {
	wio := &p.env.WebhookInstallOptions
	p.webhookHost, p.webhookPort, p.webhookCertDir = wio.LocalServingHost, wio.LocalServingPort, wio.LocalServingCertDir
	c, err := client.New(p.admin, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	if err := webhookpatch.Apply(ctx, c, filepath.Join(root, "config", "webhook")); err != nil {
		return fmt.Errorf("patching the webhook configurations as config/webhook/kustomization.yaml does: %w", err)
	}
	dir := filepath.Join(root, "config", "admission-policy")
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return err
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		return fmt.Errorf("%s/kustomization.yaml: %w", dir, err)
	}
	for _, r := range k.Resources {
		objs, err := stack.ReadYAML(filepath.Join(dir, r))
		if err != nil {
			return err
		}
		for _, u := range objs {
			if err := c.Create(ctx, u); err != nil {
				return fmt.Errorf("creating %s %s from config/admission-policy: %w", u.GetKind(), u.GetName(), err)
			}
		}
	}
	// The API server applies new policies once its informer has them: wait
	// until a RunAttempt create by someone other than the operator is refused.
	probe := &v1alpha1.RunAttempt{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "policy-probe"},
		Spec:       v1alpha1.RunAttemptSpec{RunName: "policy-probe", Attempt: 1},
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := c.Create(ctx, probe, client.DryRunAll)
		if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("config/admission-policy is not in force 60s after its creation: a RunAttempt create by %q was not refused (%v)", "admin", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (p *plane) stop() {
	if p == nil || p.env == nil {
		return
	}
	if err := p.env.Stop(); err != nil {
		logf("stopping control plane: %v", err)
	}
	registerPlanePID(p.apiPID, false)
	registerPlanePID(p.etcdPID, false)
	p.env = nil
}

// childPID finds a direct child of this process by command name.
func childPID(comm string) int {
	me := os.Getpid()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	found := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		c, ppid, err := procCommPPID(pid)
		if err != nil || ppid != me || c != comm {
			continue
		}
		found = max(found, pid) // the newest one if an old one lingers
	}
	return found
}

func procCommPPID(pid int) (string, int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", 0, err
	}
	s := string(b)
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return "", 0, fmt.Errorf("bad stat for %d", pid)
	}
	fields := strings.Fields(s[closing+1:])
	if len(fields) < 2 {
		return "", 0, fmt.Errorf("bad stat for %d", pid)
	}
	ppid, err := strconv.Atoi(fields[1])
	return s[open+1 : closing], ppid, err
}

// procStat is what /proc says about one process.
type procStat struct {
	CPUSeconds float64 // utime + stime
	HWMKiB     int64   // VmHWM: peak resident set size
	RSSKiB     int64   // VmRSS
	WChar      int64   // bytes handed to write(2) and friends
	WriteBytes int64   // bytes the block layer wrote for the process
}

// clockTicks is USER_HZ, which is 100 on every Linux architecture Go supports.
const clockTicks = 100

func readProc(pid int) (procStat, error) {
	var ps procStat
	if pid <= 0 {
		return ps, fmt.Errorf("no pid")
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ps, err
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return ps, fmt.Errorf("short stat for %d", pid)
	}
	ut, _ := strconv.ParseFloat(fields[11], 64)
	st, _ := strconv.ParseFloat(fields[12], 64)
	ps.CPUSeconds = (ut + st) / clockTicks
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			f := strings.Fields(v)
			if len(f) == 0 {
				continue
			}
			n, _ := strconv.ParseInt(f[0], 10, 64)
			switch k {
			case "VmHWM":
				ps.HWMKiB = n
			case "VmRSS":
				ps.RSSKiB = n
			}
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid)); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			switch k {
			case "wchar":
				ps.WChar = n
			case "write_bytes":
				ps.WriteBytes = n
			}
		}
	}
	return ps, nil
}

// reqKey is one row of apiserver_request_total, without code and version.
type reqKey struct {
	Group       string `json:"group,omitempty"`
	Resource    string `json:"resource"`
	Subresource string `json:"subresource,omitempty"`
	Verb        string `json:"verb"`
}

func (k reqKey) String() string {
	r := k.Resource
	if k.Group != "" {
		r += "." + k.Group
	}
	if k.Subresource != "" {
		r += "/" + k.Subresource
	}
	return k.Verb + " " + r
}

// writeVerbs are the verbs of apiserver_request_total that change state.
var writeVerbs = map[string]string{
	"POST": "POST", "CREATE": "POST",
	"PUT": "PUT", "UPDATE": "PUT",
	"PATCH": "PATCH", "APPLY": "APPLY",
	"DELETE": "DELETE", "DELETECOLLECTION": "DELETECOLLECTION",
}

// readVerbs are the verbs of apiserver_request_total that read (watches aside).
var readVerbs = map[string]string{"GET": "GET", "LIST": "LIST"}

// apiRequests scrapes the apiserver's apiserver_request_total and returns
// the write and the read requests by resource and verb.
func (p *plane) apiRequests(ctx context.Context) (writes, reads, conflicts map[reqKey]float64, err error) {
	raw, err := p.clientset.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("scrape apiserver metrics: %w", err)
	}
	fams, err := parseMetrics(raw)
	if err != nil {
		return nil, nil, nil, err
	}
	// Admission calls, to show the webhooks and policies were in the path.
	p.admission = map[string]float64{}
	for _, name := range []string{admWebhook} {
		for _, m := range fams[name].GetMetric() {
			p.admission[name] += float64(m.GetHistogram().GetSampleCount())
		}
	}
	fam := fams["apiserver_request_total"]
	if fam == nil {
		return nil, nil, nil, fmt.Errorf("apiserver_request_total not found in /metrics")
	}
	writes, reads, conflicts = map[reqKey]float64{}, map[reqKey]float64{}, map[reqKey]float64{}
	for _, m := range fam.GetMetric() {
		l := labelMap(m)
		v := strings.ToUpper(l["verb"])
		k := reqKey{Group: l["group"], Resource: l["resource"], Subresource: l["subresource"]}
		if verb, ok := writeVerbs[v]; ok {
			k.Verb = verb
			writes[k] += m.GetCounter().GetValue()
			if l["code"] == "409" {
				conflicts[k] += m.GetCounter().GetValue()
			}
		} else if verb, ok := readVerbs[v]; ok {
			k.Verb = verb
			reads[k] += m.GetCounter().GetValue()
		}
	}
	return writes, reads, conflicts, nil
}

// profile fetches a CPU profile of the apiserver into path.
func (p *plane) profile(ctx context.Context, seconds int, path string) error {
	raw, err := p.clientset.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
		Param("seconds", strconv.Itoa(seconds)).Timeout(time.Duration(seconds+30) * time.Second).DoRaw(ctx)
	if err != nil {
		return err
	}
	return os.WriteFile(path, raw, 0o644)
}

// machineCPU returns the machine's busy and total CPU-seconds since boot.
func machineCPU() (busy, total float64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0
	}
	var idle float64
	for i, v := range f[1:] {
		n, _ := strconv.ParseFloat(v, 64)
		if i >= 8 { // guest time is already in user
			break
		}
		total += n
		if i == 3 || i == 4 { // idle, iowait
			idle += n
		}
	}
	return (total - idle) / clockTicks, total / clockTicks
}

// etcdStats scrapes the few etcd metrics the benchmark reports.
func (p *plane) etcdStats(ctx context.Context) (map[string]float64, error) {
	if p.etcdURL == "" {
		return nil, fmt.Errorf("no etcd URL")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(p.etcdURL, "/")+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	fams, err := parseMetrics(raw)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, name := range []string{"etcd_disk_wal_write_bytes_total", "etcd_mvcc_db_total_size_in_bytes", "etcd_mvcc_put_total", "etcd_mvcc_txn_total", "etcd_disk_backend_commit_duration_seconds"} {
		fam := fams[name]
		if fam == nil {
			continue
		}
		for _, m := range fam.GetMetric() {
			switch {
			case m.Counter != nil:
				out[name] += m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[name] += m.GetGauge().GetValue()
			case m.Histogram != nil:
				out[name+"_count"] += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out, nil
}

func parseMetrics(raw []byte) (map[string]*dto.MetricFamily, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	return fams, nil
}

func labelMap(m *dto.Metric) map[string]string {
	out := make(map[string]string, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}
