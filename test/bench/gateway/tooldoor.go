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

// The tool door's benchmark: the latency the gateway's MCP door (/mcp) adds
// beside a direct MCP call to the same tool server (internal/toolserver's
// Fake, its echo tool), at a fixed call rate, for an effect-None tool with an
// empty interceptor chain, the same tool under the sample policy's four
// interceptors, and an effect-Write tool, whose write-ahead record the
// gateway persists to the API server before dispatch (against the in-memory
// API server and, when the envtest toolchain is there, a real kube-apiserver).
//
// As for the model door, the gateway is a child process (this binary with
// --serve-tools) so its CPU and RSS are its own; the tool server and the
// clients run in the driver. The child also answers GET /bench/stats with
// its status writes and chain metrics.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
	"github.com/agentrun-dev/agentrun/internal/toolserver"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// The tool door's attempts (one gateway process serves all three) and tools.
const (
	tokenToolsNone  = "token-tools-none"  // empty chain: echo, echo.write
	tokenToolsChain = "token-tools-chain" // the sample policy's chain: echo

	toolEcho  = "echo"       // effect None
	toolWrite = "echo.write" // effect Write, auto-approved: write-ahead before dispatch
	toolsSrv  = "bench-tools"
)

// toolArgs are every call's arguments (the fake echoes them back).
var toolArgs = map[string]any{"q": "replication models of open-source vector databases", "limit": 5}

// sampleChain is config/samples/agentrun_v1alpha1_runtimepolicy.yaml's
// interceptors as the operator resolves them (phase, priority, registration).
var sampleChain = []v1alpha1.ResolvedInterceptor{
	{Name: "auth", Class: v1alpha1.ClassSecurity, Role: v1alpha1.RoleAuthentication, Phase: v1alpha1.InterceptorPre,
		Priority: 10, OnError: v1alpha1.PostureDeny, Veto: true, RegistrationIndex: 0},
	{Name: "rate_limit", Class: v1alpha1.ClassResource, Role: v1alpha1.RoleIdentityConsumer, Phase: v1alpha1.InterceptorPre,
		Priority: 20, OnError: v1alpha1.PostureDeny, Veto: true, RegistrationIndex: 1},
	{Name: "redact", Class: v1alpha1.ClassSecurity, Role: v1alpha1.RoleRedaction, Phase: v1alpha1.InterceptorPost,
		Priority: 50, OnError: v1alpha1.PostureDeny, RegistrationIndex: 2},
	{Name: "audit", Class: v1alpha1.ClassObservability, Role: v1alpha1.RoleAudit, Phase: v1alpha1.InterceptorPost,
		Priority: 90, OnError: v1alpha1.PostureAllow, Buffered: true, RegistrationIndex: 3},
}

func toolAttempt(name, uid, toolsURL string, chain []v1alpha1.ResolvedInterceptor) *v1alpha1.RunAttempt {
	ra := gatewaytest.Attempt()
	ra.Name, ra.Spec.PodName, ra.Spec.PodUID = name, name, uid
	ra.Spec.Grant = v1alpha1.Grant{ModelRequests: 10, ToolCalls: math.MaxInt32}
	ra.Spec.HeartbeatInterval = &metav1.Duration{Duration: time.Hour}
	p := &ra.Spec.Policy
	p.ResolvedChain = chain
	p.ToolServers = []v1alpha1.ToolServer{{Name: toolsSrv, URL: toolsURL}}
	p.Tools = []v1alpha1.Tool{
		{Name: toolEcho, Risk: v1alpha1.RiskLow, Effect: v1alpha1.EffectNone, Server: toolsSrv},
		{Name: toolWrite, Risk: v1alpha1.RiskLow, Effect: v1alpha1.EffectWrite, Server: toolsSrv},
	}
	p.AutoApprove = []string{toolWrite}
	return ra
}

func toolAttempts(toolsURL string) []*v1alpha1.RunAttempt {
	return []*v1alpha1.RunAttempt{
		toolAttempt("tools-none-1", "uid-tools-none", toolsURL, nil),
		toolAttempt("tools-chain-1", "uid-tools-chain", toolsURL, sampleChain),
	}
}

// benchStats is the child's GET /bench/stats.
type benchStats struct {
	StatusWrites       int64   `json:"statusWrites"`
	StatusWriteSeconds float64 `json:"statusWriteSeconds"`
	InterceptorCalls   float64 `json:"interceptorCalls"`
	ChainAddedCount    uint64  `json:"chainAddedCount"`
	ChainAddedSeconds  float64 `json:"chainAddedSeconds"`
	StatusWriteErrors  int64   `json:"statusWriteErrors"`
	AuditLines         int64   `json:"auditLines"`
}

// countingWriter counts writes (audit writes one line per Write).
type countingWriter struct {
	w io.Writer
	n atomic.Int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.n.Add(1)
	return c.w.Write(p)
}

// serveToolGateway runs the tool door's gateway (child process) in front of
// the in-memory API server, or the API server of kubeconfig (whose
// RunAttempts the driver created), and prints its URL; it exits when stdin
// closes.
func serveToolGateway(toolsURL, kubeconfig string) error {
	var base client.WithWatch
	if kubeconfig == "" {
		objs := []client.Object{}
		for _, ra := range toolAttempts(toolsURL) {
			objs = append(objs, ra)
		}
		base = fake.NewClientBuilder().WithScheme(gatewaytest.Scheme()).WithObjects(objs...).
			WithStatusSubresource(&v1alpha1.RunAttempt{}).Build()
	} else {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return err
		}
		// The gateway binary's client is not throttled below the load.
		cfg.QPS, cfg.Burst = 5000, 5000
		if base, err = client.NewWithWatch(cfg, client.Options{Scheme: gatewaytest.Scheme()}); err != nil {
			return err
		}
	}
	var writes, writeErrs atomic.Int64
	var writeNanos atomic.Int64
	c := interceptor.NewClient(base, interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			start := time.Now()
			err := c.SubResource(sub).Update(ctx, obj, opts...)
			switch {
			case sub != "status":
			case err == nil:
				writes.Add(1)
				writeNanos.Add(int64(time.Since(start)))
			default:
				writeErrs.Add(1)
			}
			return err
		},
	})
	id := func(name, uid string) gateway.Identity {
		return gateway.Identity{Username: "system:serviceaccount:team:agentrun-runner", Namespace: gatewaytest.Namespace, PodName: name, PodUID: uid}
	}
	// audit writes its lines to a file, as the gateway's stdout goes to
	// the container runtime's log file.
	audit, err := os.CreateTemp("", "gateway-bench-audit-")
	if err != nil {
		return err
	}
	defer func() { _ = audit.Close(); _ = os.Remove(audit.Name()) }()
	auditLines := &countingWriter{w: audit}
	reg := prometheus.NewRegistry()
	g, err := gateway.New(gateway.Options{
		Client:    c,
		AuditLog:  auditLines,
		RateLimit: benchRateLimit,
		RateBurst: benchRateLimit,
		Authenticator: gateway.StaticTokens{
			tokenToolsNone:  id("tools-none-1", "uid-tools-none"),
			tokenToolsChain: id("tools-chain-1", "uid-tools-chain"),
		},
		Registry: reg,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	gh := g.Handler()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/bench/stats" {
			gh.ServeHTTP(w, r)
			return
		}
		s := benchStats{StatusWrites: writes.Load(), StatusWriteSeconds: time.Duration(writeNanos.Load()).Seconds(),
			StatusWriteErrors: writeErrs.Load(), AuditLines: auditLines.n.Load()}
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				switch mf.GetName() {
				case "agentrun_gateway_interceptor_calls_total":
					s.InterceptorCalls += m.GetCounter().GetValue()
				case "agentrun_gateway_interceptor_chain_added_seconds":
					s.ChainAddedCount += m.GetHistogram().GetSampleCount()
					s.ChainAddedSeconds += m.GetHistogram().GetSampleSum()
				}
			}
		}
		_ = json.NewEncoder(w).Encode(s)
	})
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	fmt.Printf("http://%s\n", ln.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return g.Shutdown(ctx)
}

func (s *server) stats(hc *http.Client) (benchStats, error) {
	var st benchStats
	resp, err := hc.Get(s.url + "/bench/stats")
	if err != nil {
		return st, err
	}
	defer func() { _ = resp.Body.Close() }()
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// bearer adds a token to every request.
type bearer struct {
	base  http.RoundTripper
	token string
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.token == "" {
		return b.base.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// connectMCP opens an MCP client session (streamable HTTP) as an agent does.
func connectMCP(tr http.RoundTripper, endpoint, token string) (*mcp.ClientSession, error) {
	c := mcp.NewClient(&mcp.Implementation{Name: "gateway-bench", Version: "v1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: endpoint, HTTPClient: &http.Client{Transport: bearer{base: tr, token: token}},
		MaxRetries: -1, DisableStandaloneSSE: true,
	}, nil)
}

// callOnce calls tool and returns its latency; a tool error is an error.
func callOnce(cs *mcp.ClientSession, tool string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: toolArgs})
	l := time.Since(start)
	if err != nil {
		return 0, err
	}
	if res.IsError {
		var b strings.Builder
		for _, c := range res.Content {
			if t, ok := c.(*mcp.TextContent); ok {
				b.WriteString(t.Text)
			}
		}
		return 0, errors.New(b.String())
	}
	return l, nil
}

// mcpLoop calls tool rate times per second for d (open loop, as openLoop)
// and returns the latencies, the error count and the first error.
func mcpLoop(cs *mcp.ClientSession, tool string, rate int, d time.Duration) ([]time.Duration, int, error) {
	n := int(float64(rate) * d.Seconds())
	lat := make([]time.Duration, 0, n)
	var mu sync.Mutex
	var errs int
	var first error
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		at := start.Add(time.Duration(float64(i) / float64(rate) * float64(time.Second)))
		time.Sleep(time.Until(at))
		wg.Go(func() {
			l, err := callOnce(cs, tool)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs++
				if first == nil {
					first = err
				}
				return
			}
			lat = append(lat, l)
		})
	}
	wg.Wait()
	return lat, errs, first
}

// toolResult is one row of the tool door's table.
type toolResult struct {
	Name      string  `json:"name"`
	APIServer string  `json:"apiServer"`
	Rate      int     `json:"rate"`
	Calls     int     `json:"calls"`
	Errors    int     `json:"errors"`
	FirstErr  string  `json:"firstError,omitempty"`
	DirectP50 float64 `json:"directP50ms"`
	DirectP99 float64 `json:"directP99ms"`
	GwP50     float64 `json:"gatewayP50ms"`
	GwP99     float64 `json:"gatewayP99ms"`
	AddedP50  float64 `json:"addedP50ms"`
	AddedP99  float64 `json:"addedP99ms"`
	CPUPer1k  float64 `json:"gatewayCPUms_per_1000"`
	RSSMiB    float64 `json:"gatewayRSSMiB"`
	// WritesPerCall is the status writes per call during the run; WriteMs
	// their mean latency as the gateway's client saw it.
	WritesPerCall float64 `json:"statusWritesPerCall"`
	WriteMs       float64 `json:"statusWriteMeanMs"`
	// WriteErrors are status writes that failed (conflicts), retried.
	WriteErrors int64 `json:"statusWriteErrors"`
	// AuditLines is how many lines audit wrote during the run.
	AuditLines int64 `json:"auditLines"`
	// ChainRan says the interceptors ran on the calls (their metrics
	// moved); ChainAddedUs is the chain's own mean time per call
	// (agentrun_gateway_interceptor_chain_added_seconds).
	ChainRan     bool    `json:"chainRan"`
	ChainAddedUs float64 `json:"chainAddedMeanUs,omitempty"`
	// Skipped says why the row was not measured.
	Skipped string `json:"skipped,omitempty"`
}

// toolReport is the tool door's section of the report.
type toolReport struct {
	Rate     int          `json:"rate"`
	Duration string       `json:"durationPerMeasurement"`
	Results  []toolResult `json:"results"`
	// WriteAhead is the Write call's p50 / p99 minus the None call's, by API server.
	WriteAhead []writeAhead `json:"writeAhead"`
	RealAPI    string       `json:"realAPIServer"`
	RateLimit  string       `json:"rateLimit"`
}

type writeAhead struct {
	APIServer string  `json:"apiServer"`
	P50       float64 `json:"p50ms"`
	P99       float64 `json:"p99ms"`
	WriteMs   float64 `json:"statusWriteMeanMs"`
	PerCall   float64 `json:"statusWritesPerCall"`
	Errors    int64   `json:"statusWriteErrors"`
}

type toolCase struct {
	name, token, tool string
	chain             bool
}

// driveToolDoor runs the tool door's measurements: against the in-memory API
// server, then (assets set) a real kube-apiserver.
func driveToolDoor(rate int, d time.Duration, assets string) (*toolReport, error) {
	f, err := toolserver.NewFake(
		toolserver.ToolSpec{Name: toolEcho, Description: "echo the arguments"},
		toolserver.ToolSpec{Name: toolWrite, Description: "echo the arguments (an effect Write tool)"},
	)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ts, err := toolserver.New(toolserver.Options{Fake: f})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	hs := &http.Server{Handler: ts.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	defer func() { _ = hs.Close() }()
	toolsURL := "http://" + ln.Addr().String() + toolserver.PathMCP

	tr := &http.Transport{MaxIdleConnsPerHost: 2048, IdleConnTimeout: time.Minute}
	direct, err := connectMCP(tr, toolsURL, "")
	if err != nil {
		return nil, fmt.Errorf("connecting to the fake tool server: %w", err)
	}
	defer func() { _ = direct.Close() }()

	rep := &toolReport{Rate: rate, Duration: d.String(), RateLimit: rateLimitNote}
	fakeCases := []toolCase{
		{name: "(a) effect None, empty chain", token: tokenToolsNone, tool: toolEcho},
		{name: "(b) effect None, sample chain (auth, rate_limit, redact, audit)", token: tokenToolsChain, tool: toolEcho, chain: true},
		{name: "(c) effect Write, empty chain (write-ahead)", token: tokenToolsNone, tool: toolWrite},
	}
	rows, err := runToolCases(tr, direct, toolsURL, "", "in-memory (controller-runtime fake client)", fakeCases, rate, d)
	if err != nil {
		return nil, err
	}
	rep.Results = append(rep.Results, rows...)

	realCases := []toolCase{
		{name: "(a) effect None, empty chain", token: tokenToolsNone, tool: toolEcho},
		{name: "(c) effect Write, empty chain (write-ahead)", token: tokenToolsNone, tool: toolWrite},
	}
	if assets == "" {
		rep.RealAPI = "not measured: KUBEBUILDER_ASSETS is not set (make bench-gateway sets it with hack/envtest-toolchain.sh)"
	} else {
		p, err := startToolPlane(assets, toolsURL)
		if err != nil {
			rep.RealAPI = "not measured: " + err.Error()
		} else {
			rep.RealAPI = "kube-apiserver " + p.version + " and etcd from the envtest toolchain (hack/envtest-toolchain.sh, " + filepath.Base(assets) + "), fresh, with the agentrun CRDs " +
				"installed and the RunAttempts created by the driver; the gateway reads and writes them with a direct (uncached) client, " +
				"not throttled client-side. Row (b) is not repeated there: the chain does not touch the API server"
			rows, err := runToolCases(tr, direct, toolsURL, p.kubeconfig, "kube-apiserver "+p.version+" (envtest; etcd's data on local disk)", realCases, rate, d)
			p.stop()
			if err != nil {
				return nil, err
			}
			rep.Results = append(rep.Results, rows...)
		}
	}
	for _, api := range []string{"in-memory", "kube-apiserver"} {
		var none, write *toolResult
		for i := range rep.Results {
			r := &rep.Results[i]
			if !strings.HasPrefix(r.APIServer, api) || r.Skipped != "" {
				continue
			}
			switch {
			case strings.HasPrefix(r.Name, "(a)"):
				none = r
			case strings.HasPrefix(r.Name, "(c)"):
				write = r
			}
		}
		if none != nil && write != nil {
			rep.WriteAhead = append(rep.WriteAhead, writeAhead{APIServer: write.APIServer,
				P50: write.GwP50 - none.GwP50, P99: write.GwP99 - none.GwP99, WriteMs: write.WriteMs, PerCall: write.WritesPerCall, Errors: write.WriteErrors})
		}
	}
	return rep, nil
}

// runToolCases starts one gateway child for the cases and measures each
// beside a direct call measured just before it.
func runToolCases(tr *http.Transport, direct *mcp.ClientSession, toolsURL, kubeconfig, api string, cases []toolCase, rate int, d time.Duration) ([]toolResult, error) {
	args := []string{"--serve-tools=" + toolsURL}
	if kubeconfig != "" {
		args = append(args, "--tools-kubeconfig="+kubeconfig)
	}
	srv, err := startChild(args...)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	hc := &http.Client{Transport: tr}
	sessions := map[string]*mcp.ClientSession{}
	defer func() {
		for _, cs := range sessions {
			_ = cs.Close()
		}
	}()
	var out []toolResult
	for _, tc := range cases {
		cs := sessions[tc.token]
		if cs == nil {
			if cs, err = connectMCP(tr, srv.url+gatewayapi.MCPPath, tc.token); err != nil {
				return nil, fmt.Errorf("connecting to the tool door: %w", err)
			}
			sessions[tc.token] = cs
		}
		// Warm both paths (connections, the attempt's keeper, the
		// gateway's session to the tool server and its tools/list).
		warm, err := srv.stats(hc)
		if err != nil {
			return nil, err
		}
		for range 200 {
			_, _ = callOnce(direct, tc.tool)
			if _, err := callOnce(cs, tc.tool); err != nil {
				return nil, fmt.Errorf("%s: warm-up call through the tool door: %w", tc.name, err)
			}
		}
		time.Sleep(1500 * time.Millisecond) // let the warm-up's coalesced writes land
		if st, err := srv.stats(hc); err != nil {
			return nil, err
		} else if tc.chain && st.InterceptorCalls == warm.InterceptorCalls {
			out = append(out, toolResult{Name: tc.name, APIServer: api, Rate: rate,
				Skipped: "the tool door does not run the interceptor chain at this commit (no interceptor metric moved on the warm-up calls)"})
			fmt.Fprintf(os.Stderr, "==> tool door: %s: skipped, the door does not run the chain yet\n", tc.name)
			continue
		}
		fmt.Fprintf(os.Stderr, "==> tool door: %s, %s API server, at %d calls/s for %s\n", tc.name, strings.Fields(api)[0], rate, d)
		dl, derrs, dfirst := mcpLoop(direct, tc.tool, rate, d)
		st0, err := srv.stats(hc)
		if err != nil {
			return nil, err
		}
		cpu0, _ := srv.usage()
		via, gerrs, gfirst := mcpLoop(cs, tc.tool, rate, d)
		cpu1, rss := srv.usage()
		st1, err := srv.stats(hc)
		if err != nil {
			return nil, err
		}
		r := toolResult{Name: tc.name, APIServer: api, Rate: rate, Calls: len(via), Errors: derrs + gerrs,
			DirectP50: pct(dl, 50), DirectP99: pct(dl, 99), GwP50: pct(via, 50), GwP99: pct(via, 99),
			CPUPer1k: float64(cpu1-cpu0) / float64(time.Millisecond) / float64(max(len(via), 1)) * 1000,
			RSSMiB:   float64(rss) / (1 << 20)}
		if first := errors.Join(dfirst, gfirst); first != nil {
			r.FirstErr = first.Error()
			fmt.Fprintf(os.Stderr, "    %d errors; first: %v\n", r.Errors, first)
		}
		r.AddedP50, r.AddedP99 = r.GwP50-r.DirectP50, r.GwP99-r.DirectP99
		if w := st1.StatusWrites - st0.StatusWrites; w > 0 {
			r.WritesPerCall = float64(w) / float64(max(len(via)+gerrs, 1))
			r.WriteMs = (st1.StatusWriteSeconds - st0.StatusWriteSeconds) / float64(w) * 1000
		}
		r.WriteErrors = st1.StatusWriteErrors - st0.StatusWriteErrors
		r.AuditLines = st1.AuditLines - st0.AuditLines
		r.ChainRan = st1.InterceptorCalls > st0.InterceptorCalls
		if n := st1.ChainAddedCount - st0.ChainAddedCount; n > 0 {
			r.ChainAddedUs = (st1.ChainAddedSeconds - st0.ChainAddedSeconds) / float64(n) * 1e6
		}
		out = append(out, r)
	}
	return out, nil
}

// toolPlane is a local kube-apiserver and etcd (envtest) holding the tool
// door's RunAttempts.
type toolPlane struct {
	env        *envtest.Environment
	dir        string
	kubeconfig string
	version    string
}

func startToolPlane(assets, toolsURL string) (*toolPlane, error) {
	root, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "gateway-bench-")
	if err != nil {
		return nil, err
	}
	p := &toolPlane{dir: dir, env: &envtest.Environment{
		CRDDirectoryPaths:        []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing:    true,
		BinaryAssetsDirectory:    assets,
		ControlPlaneStartTimeout: 90 * time.Second,
		ControlPlaneStopTimeout:  30 * time.Second,
	}}
	fmt.Fprintf(os.Stderr, "==> tool door: starting kube-apiserver and etcd (envtest, %s)\n", assets)
	ctrllog.SetLogger(logr.Discard())
	cfg, err := p.env.Start()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("starting envtest: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			p.stop()
		}
	}()
	user, err := p.env.ControlPlane.AddUser(envtest.User{Name: "agentrun-gateway", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, err
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return nil, err
	}
	p.kubeconfig = filepath.Join(dir, "gateway.kubeconfig")
	if err := os.WriteFile(p.kubeconfig, kc, 0o600); err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: gatewaytest.Scheme()})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: gatewaytest.Namespace}}); err != nil {
		return nil, err
	}
	for _, ra := range toolAttempts(toolsURL) {
		if err := c.Create(ctx, ra); err != nil {
			return nil, fmt.Errorf("creating RunAttempt %s: %w", ra.Name, err)
		}
	}
	p.version = envtestVersion(assets)
	ok = true
	return p, nil
}

// envtestVersion is the kube-apiserver version of the assets' directory
// name (setup-envtest's store: <version>-<os>-<arch>).
func envtestVersion(assets string) string {
	base := filepath.Base(assets)
	if i := strings.IndexByte(base, '-'); i > 0 {
		return "v" + base[:i]
	}
	return base
}

func (p *toolPlane) stop() {
	if err := p.env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping envtest:", err)
	}
	_ = os.RemoveAll(p.dir)
}

func (t *toolReport) markdown(b *strings.Builder) {
	fmt.Fprintf(b, "## The tool door (MCP, `/mcp`)\n\n")
	fmt.Fprintf(b, "Same run and machine. The gateway is its own process (this binary with --serve-tools); the fake tool server "+
		"(internal/toolserver's Fake, its echo tool, answering at once) and the agent's MCP client (go-sdk, streamable HTTP, one "+
		"session per attempt) run in the driver. *Added* is the tool door's percentile minus that of a direct MCP call to the same "+
		"tool server, measured just before it, at the same open-loop rate of %d calls/s, for %s each, after 200 warm-up calls. "+
		"The gateway reaches the tool server through an MCP session it keeps, and checks each call's arguments against the "+
		"server's input schema (its tools/list, cached a minute). Effect None calls are counted coalesced (a status write a "+
		"second); an effect Write call (auto-approved) is dispatched only once its write-ahead record (status.inFlight) is on "+
		"the API server. The in-memory API server (controller-runtime's fake client, as gatewaytest's) runs inside the gateway "+
		"process, so its CPU is counted as the gateway's; kube-apiserver and etcd are processes of their own, on the same "+
		"%s. Reported, not asserted.\n\n", t.Rate, t.Duration, machineShort())
	fmt.Fprintf(b, "| measure | API server | calls | direct p50 / p99 (ms) | via tool door p50 / p99 (ms) | **added p50 / p99 (ms)** | gateway CPU per 1,000 calls (ms) | gateway RSS (MiB) | status writes per call (mean ms) | errors |\n")
	fmt.Fprintf(b, "|---|---|---|---|---|---|---|---|---|---|\n")
	for _, x := range t.Results {
		if x.Skipped != "" {
			fmt.Fprintf(b, "| %s | %s | — | — | — | **not measured** | — | — | — | %s |\n", x.Name, x.APIServer, x.Skipped)
			continue
		}
		fmt.Fprintf(b, "| %s | %s | %d | %.2f / %.2f | %.2f / %.2f | **%.2f / %.2f** | %.0f | %.1f | %.3f (%.2f) | %d |\n",
			x.Name, x.APIServer, x.Calls, x.DirectP50, x.DirectP99, x.GwP50, x.GwP99, x.AddedP50, x.AddedP99, x.CPUPer1k, x.RSSMiB,
			x.WritesPerCall, x.WriteMs, x.Errors)
	}
	fmt.Fprintf(b, "\n")
	for _, x := range t.Results {
		if x.ChainRan && x.Skipped == "" {
			fmt.Fprintf(b, "Row %s: the chain's own time per call (agentrun_gateway_interceptor_chain_added_seconds, mean) %.1f µs; "+
				"audit wrote %d lines (to a file, as the gateway's stdout goes to the container runtime's log); auth re-checks the "+
				"token with the gateway's authenticator (here static tokens; in agentrun-gateway a TokenReview cached --token-cache-ttl). ",
				strings.Fields(x.Name)[0], x.ChainAddedUs, x.AuditLines)
		}
	}
	fmt.Fprintf(b, "rate_limit: %s.\n\n", t.RateLimit)
	if len(t.WriteAhead) > 0 {
		fmt.Fprintf(b, "**Write-ahead cost per Write call**: row (c) minus row (a) through the tool door, same gateway process and API server.\n\n")
		fmt.Fprintf(b, "| API server | p50 (ms) | p99 (ms) | status writes per Write call | mean status write (ms) | failed status writes (retried) |\n|---|---|---|---|---|---|\n")
		for _, w := range t.WriteAhead {
			fmt.Fprintf(b, "| %s | %.2f | %.2f | %.2f | %.2f | %d |\n", w.APIServer, w.P50, w.P99, w.PerCall, w.WriteMs, w.Errors)
		}
		fmt.Fprintf(b, "\nA Write call waits for two status writes: its write-ahead record before dispatch, and the record's "+
			"removal (or its Unknown mark) before the answer, so an attempt that ends right after is never judged on a stale "+
			"record. Concurrent calls share a write (one that arrives while a write is in flight waits for the next, which "+
			"carries every change made meanwhile), so the writes per call fall below 2 when the API server's write takes "+
			"longer than the gap between calls (%.1f ms here).\n\n",
			1000/float64(max(t.Rate, 1)))
	}
	fmt.Fprintf(b, "Real API server: %s.\n\n", t.RealAPI)
	fmt.Fprintf(b, "Reproduce: `make bench-gateway` (`GATEWAY_BENCH_ARGS=\"--tool-rate=%d --tool-duration=%s\"` are this section's defaults; "+
		"`--doors=tools --out=/tmp/tools` runs only this section).\n", t.Rate, t.Duration)
}

// benchRateLimit is rate_limit's rate and burst in the benchmark: far above
// the load, so its bucket is taken on every call and never empty.
const benchRateLimit = 1_000_000

// rateLimitNote says how the benchmark keeps rate_limit from throttling it.
var rateLimitNote = fmt.Sprintf("the gateway's Options.RateLimit and RateBurst (agentrun-gateway's --rate-limit and --rate-burst) "+
	"are %d per identity, so its bucket is checked and taken on every call and never runs dry (the default, 20 calls/s with a burst of 40, "+
	"would veto most of %s)", benchRateLimit, "a 200 calls/s load")

// machineShort is the machine's core count.
func machineShort() string { return fmt.Sprintf("%d cores", runtime.NumCPU()) }
