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

// The live-runs workload: M runs alive at once, each agent making one model
// call every interval through a real agentrun-gateway process (cmd/gateway)
// to a fake upstream, and a few tool calls, for a fixed window; then every
// run finishes through the gateway (finish → Finalizing → settle → pod
// Succeeded), at a fixed rate. M steps up until the terminal-fact → phase
// p99 passes its limit.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/devstack/stack"
	"github.com/agentrun-dev/agentrun/internal/upstream"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// liveModel is the model the live agents ask the gateway for.
const liveModel = "bench-model"

// liveSettings are the live workload's knobs.
type liveSettings struct {
	Sizes []int `json:"sizes"`
	// Window is how long all M runs are alive together (the measurement).
	Window time.Duration `json:"window"`
	// Interval is each agent's model-call period.
	Interval time.Duration `json:"modelCallInterval"`
	// ToolCalls is each run's tool calls over the window.
	ToolCalls int `json:"toolCallsPerRun"`
	// Rate is the runs created per second in the ramp, and finished per
	// second after the window.
	Rate int `json:"rate"`
	// P99Limit bounds the terminal-fact → phase p99 a step must keep.
	P99Limit        time.Duration `json:"p99Limit"`
	UpstreamLatency time.Duration `json:"upstreamLatency"`
}

// liveStepResult is one M on its own fresh plane.
type liveStepResult struct {
	Trial    int    `json:"trial"`
	M        int    `json:"m"`
	Webhooks bool   `json:"webhooks"`
	Error    string `json:"error,omitempty"`
	// Sustained: every run alive, every run terminal, both p99s under the
	// limit, model-call errors under 1%.
	Sustained  bool   `json:"sustained"`
	FailReason string `json:"failReason,omitempty"`

	Alive    int     `json:"aliveAtWindowStart"`
	RampS    float64 `json:"rampSeconds"` // first create → all alive
	WindowS  float64 `json:"windowSeconds"`
	Terminal int     `json:"terminal"`

	ModelCalls     int64   `json:"modelCallsInWindow"`
	ModelErrors    int64   `json:"modelErrorsInWindow"`
	ModelCallsPerS float64 `json:"modelCallsPerSecond"`
	ModelP50Ms     float64 `json:"modelCallP50Ms"`
	ModelP99Ms     float64 `json:"modelCallP99Ms"`
	ToolCalls      int64   `json:"toolCallsInWindow"`
	ToolErrors     int64   `json:"toolErrorsInWindow"`
	AgentErrors    int64   `json:"agentErrors"`
	FirstError     string  `json:"firstAgentError,omitempty"`

	// Over the window, all clients.
	StoredWritesPerS   float64            `json:"apiserverStoredWritesPerSecond"`
	WritesPerRunPerS   float64            `json:"storedWritesPerLiveRunPerSecond"`
	WritesPerRunMin    map[string]float64 `json:"writesPerLiveRunMinuteByRequest"`
	DriverPerRunMin    map[string]float64 `json:"driverWritesPerLiveRunMinuteByRequest"`
	APICPUMsPerRunMin  float64            `json:"apiserverCPUMsPerLiveRunMinute"`
	EtcdCPUMsPerRunMin float64            `json:"etcdCPUMsPerLiveRunMinute"`
	MachineBusyCores   float64            `json:"machineBusyCores"`
	APICores           float64            `json:"apiserverCores"`
	EtcdCores          float64            `json:"etcdCores"`
	OperatorCores      float64            `json:"operatorCores"`
	GatewayCores       float64            `json:"gatewayCores"`
	DriverCores        float64            `json:"driverCores"`
	OperatorCoresPerK  float64            `json:"operatorCoresPer1000LiveRuns"`
	GatewayCoresPerK   float64            `json:"gatewayCoresPer1000LiveRuns"`
	OperatorRSSMiB     float64            `json:"operatorRSSMiB"`
	GatewayRSSMiB      float64            `json:"gatewayRSSMiB"`
	OperatorRSSPerK    float64            `json:"operatorRSSMiBPer1000LiveRuns"`
	GatewayRSSPerK     float64            `json:"gatewayRSSMiBPer1000LiveRuns"`

	// The finish phase: finishProposed → Finalizing on the RunAttempt, and
	// pod Succeeded → Terminated on the ResearchRun.
	FinalizeP50Ms float64        `json:"finishToFinalizingP50Ms"`
	FinalizeP99Ms float64        `json:"finishToFinalizingP99Ms"`
	TerminalP50Ms float64        `json:"factToTerminalP50Ms"`
	TerminalP99Ms float64        `json:"factToTerminalP99Ms"`
	Outcomes      map[string]int `json:"outcomes"`
}

// notStored are write verbs that store nothing: reviews, token requests.
func notStored(k reqKey) bool {
	switch k.Resource {
	case "tokenreviews", "subjectaccessreviews", "localsubjectaccessreviews", "selfsubjectaccessreviews",
		"selfsubjectrulesreviews", "selfsubjectreviews":
		return true
	}
	return k.Resource == "serviceaccounts" && k.Subresource == "token"
}

// liveAgents are the agents of one step's runs.
type liveAgents struct {
	d        *driver
	set      *liveSettings
	gateway  string // base URL
	http     *http.Client
	ctx      context.Context
	toolURL  string
	finishAt atomic.Int64 // unix nanos of the first scheduled finish, 0 until the window ends
	alive    atomic.Int64
	inWindow atomic.Bool

	mu       sync.Mutex
	modelLat []float64
	modelN   atomic.Int64
	modelErr atomic.Int64
	toolN    atomic.Int64
	toolErr  atomic.Int64
	errN     atomic.Int64
	firstErr atomic.Pointer[string]
}

func (l *liveAgents) fail(err error) {
	if l.ctx.Err() != nil {
		return
	}
	if l.errN.Add(1) == 1 {
		s := err.Error()
		l.firstErr.Store(&s)
	}
}

func (l *liveAgents) firstError() string {
	if s := l.firstErr.Load(); s != nil {
		return *s
	}
	return ""
}

// finishTime is when run name finishes: warm-up runs at once, measured runs
// r-<i> at the window's end plus i/rate.
func (l *liveAgents) finishTime(name string) (time.Time, bool) {
	if strings.HasPrefix(name, "w-") {
		return time.Now(), true
	}
	base := l.finishAt.Load()
	if base == 0 {
		return time.Time{}, false
	}
	i, _ := strconv.Atoi(strings.TrimPrefix(name, "r-"))
	return time.Unix(0, base).Add(time.Duration(i) * time.Second / time.Duration(max(l.set.Rate, 1))), true
}

func (l *liveAgents) start(name string, st runState) { go l.run(name, st) }

// call sends one request to the gateway's agent API with the attempt's token.
func (l *liveAgents) call(ctx context.Context, token, method, path string, body any, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, l.gateway+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := l.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode >= 300 {
		return resp.StatusCode, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

// retry calls f until it succeeds, up to n times, 200 ms apart.
func retry(ctx context.Context, n int, f func() error) error {
	var err error
	for range n {
		if err = f(); err == nil || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return err
}

// token requests the pod-bound token an attempt pod has projected (audience
// agentrun-gateway), as a kubelet does.
func (l *liveAgents) token(ctx context.Context, st runState) (string, error) {
	sa := st.podSA
	if sa == "" {
		sa = "default"
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences:         []string{gatewayapi.Audience},
		ExpirationSeconds: new(int64(3600)),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: st.pod, UID: st.podUID},
	}}
	obj := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: l.d.ns, Name: sa}}
	err := retry(ctx, 20, func() error { return l.d.c.SubResource("token").Create(ctx, obj, tr) })
	if err != nil {
		return "", fmt.Errorf("token for pod %s (service account %s): %w", st.pod, sa, err)
	}
	return tr.Status.Token, nil
}

// run is one attempt's agent.
func (l *liveAgents) run(name string, st runState) {
	ctx := l.ctx
	tok, err := l.token(ctx, st)
	if err != nil {
		l.fail(err)
		return
	}
	// Spread the agents' calls over the interval.
	select {
	case <-ctx.Done():
		return
	case <-time.After(rand.N(l.set.Interval)):
	}
	toolEvery := max(1, int(l.set.Window/l.set.Interval)/max(l.set.ToolCalls, 1))
	tools, alive := 0, false
	for k := 0; ; k++ {
		t0 := time.Now()
		err := l.modelCall(ctx, tok)
		lat := time.Since(t0)
		win := l.inWindow.Load()
		if win {
			l.modelN.Add(1)
		}
		if err != nil {
			if win {
				l.modelErr.Add(1)
			}
			l.fail(fmt.Errorf("%s: model call: %w", name, err))
		} else {
			if win {
				l.mu.Lock()
				l.modelLat = append(l.modelLat, ms(lat))
				l.mu.Unlock()
			}
			if !alive {
				alive = true
				l.alive.Add(1)
			}
		}
		if _, err := l.call(ctx, tok, http.MethodPost, gatewayapi.PathPrefix+"/self/steps", gatewayapi.StepRequest{Progress: true}, nil); err != nil {
			l.fail(fmt.Errorf("%s: step: %w", name, err))
		}
		if l.set.ToolCalls > 0 && tools < l.set.ToolCalls && k%toolEvery == toolEvery/2 {
			tools++
			if err := l.toolCall(ctx, tok, k); err != nil {
				if win {
					l.toolErr.Add(1)
				}
				l.fail(fmt.Errorf("%s: tool call: %w", name, err))
			}
			if win {
				l.toolN.Add(1)
			}
		}
		next := t0.Add(l.set.Interval)
		if fin, ok := l.finishTime(name); ok && !fin.After(next) {
			if d := time.Until(fin); d > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(d):
				}
			}
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(next)):
		}
	}
	if err := l.finish(ctx, name, tok); err != nil {
		l.fail(fmt.Errorf("%s: %w", name, err))
	}
}

func (l *liveAgents) modelCall(ctx context.Context, tok string) error {
	body := map[string]any{
		"model":      liveModel,
		"messages":   []map[string]string{{"role": "user", "content": "next step of the benchmark's research"}},
		"max_tokens": 32,
	}
	_, err := l.call(ctx, tok, http.MethodPost, gatewayapi.ModelPathPrefix+"/chat/completions", body, nil)
	return err
}

// toolCall admits an agent-dispatched http.get (effect None) through the
// gateway's agent API and reports its outcome.
func (l *liveAgents) toolCall(ctx context.Context, tok string, k int) error {
	var tc gatewayapi.ToolCall
	args, _ := json.Marshal(map[string]any{"url": fmt.Sprintf("%s/page/%d", l.toolURL, k)})
	if _, err := l.call(ctx, tok, http.MethodPost, gatewayapi.PathPrefix+"/self/toolcalls",
		gatewayapi.ToolCallRequest{Tool: "http.get", Arguments: args}, &tc); err != nil {
		return err
	}
	_, err := l.call(ctx, tok, http.MethodPost, gatewayapi.PathPrefix+"/self/toolcalls/"+tc.ID+"/outcome", gatewayapi.ToolOutcomeRequest{}, nil)
	return err
}

// finish proposes the finish, waits for Finalizing on the RunAttempt,
// settles the publication, and marks the pod Succeeded (as a kubelet would
// once the agent exits).
func (l *liveAgents) finish(ctx context.Context, name, tok string) error {
	d := l.d
	at := time.Now()
	if err := retry(ctx, 10, func() error {
		_, err := l.call(ctx, tok, http.MethodPost, gatewayapi.PathPrefix+"/self/finish", struct{}{}, nil)
		return err
	}); err != nil {
		return fmt.Errorf("finish: %w", err)
	}
	d.mu.Lock()
	st := d.state(name)
	st.facts, st.factsAt = true, at
	fin := st.finalizing
	d.mu.Unlock()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-fin:
	case <-time.After(5 * time.Minute):
		return fmt.Errorf("no Finalizing on the RunAttempt 5m after the finish proposal")
	}
	if err := retry(ctx, 10, func() error {
		_, err := l.call(ctx, tok, http.MethodPost, gatewayapi.PathPrefix+"/self/settle", struct{}{}, nil)
		return err
	}); err != nil {
		return fmt.Errorf("settle: %w", err)
	}
	d.mu.Lock()
	st = d.state(name)
	st.settled = true
	pod, containers, started := st.pod, st.containers, st.startedAt
	d.mu.Unlock()
	at = time.Now()
	if err := retry(ctx, 10, func() error { return d.patchPod(ctx, pod, podSucceeded(containers, started, at)) }); err != nil {
		return fmt.Errorf("pod %s Succeeded: %w", pod, err)
	}
	d.mu.Lock()
	st = d.state(name)
	st.succeeded, st.factAt = true, at
	d.mu.Unlock()
	return nil
}

// gatewayProc is a running agentrun-gateway.
type gatewayProc struct {
	*proc
	url string
}

func startGateway(ctx context.Context, o *options, pl *plane, dir string) (*gatewayProc, error) {
	ports := make([]int, 3)
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	// Plain HTTP on loopback (the gateway's --tls-cert-dir empty), as its
	// flag allows for local runs; the API-server client gets the peers' QPS.
	p, err := startProc("agentrun-gateway", filepath.Join(dir, "gateway.log"), []string{"KUBECONFIG=" + pl.gatewayKubeconfig},
		o.gatewayBin,
		"--kubeconfig="+pl.gatewayKubeconfig,
		fmt.Sprintf("--listen=127.0.0.1:%d", ports[0]),
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", ports[1]),
		"--metrics-secure=false", // loopback, as the local stack runs it
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", ports[2]),
		"--audit-log="+filepath.Join(dir, "gateway-audit.jsonl"),
		// Its own namespace, as config/default deploys it: the operator
		// reads the gateway's liveness Lease there (--gateway-namespace).
		"--namespace="+stack.OperatorNamespace,
		"--kube-api-qps="+strconv.FormatFloat(o.peer.QPS, 'f', -1, 64),
		"--kube-api-burst="+strconv.Itoa(o.peer.Burst),
	)
	if err != nil {
		return nil, err
	}
	g := &gatewayProc{proc: p, url: fmt.Sprintf("http://127.0.0.1:%d", ports[0])}
	if err := waitHTTP(ctx, fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[2]), p, 60*time.Second); err != nil {
		g.stop()
		return nil, fmt.Errorf("agentrun-gateway did not become ready: %w\n%s", err, p.tail())
	}
	return g, nil
}

// live runs the live workload's steps, stopping after the first step that
// does not sustain its M.
func live(ctx context.Context, o *options, wl workload, trial int) ([]liveStepResult, error) {
	var out []liveStepResult
	for _, m := range wl.Live.Sizes {
		logf("  live step M = %d", m)
		res, err := liveStep(ctx, o, wl, m, trial)
		if res != nil {
			out = append(out, *res)
			logf("    M = %d: %d alive after %.0fs ramp; %.0f model calls/s (p99 %.0f ms, %d errors); %.1f stored writes/s (%.3f per run per s); apiserver %.1f CPU-ms per run-minute; operator %.2f, gateway %.2f cores per 1000; finish→Finalizing p99 %.0f ms, fact→terminal p99 %.0f ms; sustained=%v %s",
				m, res.Alive, res.RampS, res.ModelCallsPerS, res.ModelP99Ms, res.ModelErrors, res.StoredWritesPerS, res.WritesPerRunPerS,
				res.APICPUMsPerRunMin, res.OperatorCoresPerK, res.GatewayCoresPerK, res.FinalizeP99Ms, res.TerminalP99Ms, res.Sustained, res.FailReason)
			if res.AgentErrors > 0 {
				logf("    agent errors: %d (first: %s)", res.AgentErrors, res.FirstError)
			}
		}
		if err != nil {
			return out, err
		}
		if !res.Sustained {
			break
		}
	}
	return out, nil
}

//nolint:gocyclo // one step of the workload, in order
func liveStep(ctx context.Context, o *options, wl workload, m, trial int) (*liveStepResult, error) {
	set := wl.Live
	res := &liveStepResult{Trial: trial, M: m, Webhooks: wl.Webhooks, Outcomes: map[string]int{}}
	dir := filepath.Join(o.tmp, fmt.Sprintf("t%d-%s-%d", trial, wl.name(), m))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, err
	}
	pl, err := startPlane(ctx, o.assets, o.root, dir, wl.Webhooks)
	if err != nil {
		return res, err
	}
	defer pl.stop()
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, ns := range []string{benchNS, stack.OperatorNamespace} {
		if _, err := pl.clientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return res, err
		}
	}

	// The fake upstream, in this process.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return res, err
	}
	up := &upstream.Server{Latency: set.UpstreamLatency}
	upSrv := &http.Server{Handler: up, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = upSrv.Serve(ln) }()
	defer func() { _ = upSrv.Close() }()
	upURL := "http://" + ln.Addr().String()

	d, err := newDriver(dctx, sysAgentrun, benchNS, pl, o.driverWorkers)
	if err != nil {
		return res, err
	}
	l := &liveAgents{
		d: d, set: set, ctx: dctx, toolURL: upURL,
		http: &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{
			MaxIdleConns: 0, MaxIdleConnsPerHost: m + 64, IdleConnTimeout: 5 * time.Minute,
		}},
	}
	d.live = l
	// Enough for the ramp, the window and the finish phase at one model
	// call per interval: the runs must finish because the driver says so,
	// never because a budget ran out.
	life := 2*time.Duration(m)*time.Second/time.Duration(set.Rate) + set.Window + 5*time.Minute
	calls := int64(life/set.Interval) + 10
	d.budget = &v1alpha1.Budget{
		ModelRequests: calls, ToolCalls: int64(set.ToolCalls) + 10,
		OutputReserve: v1alpha1.OutputReserve{ModelRequests: 2, ToolCalls: 2},
		Deadline:      &metav1.Duration{Duration: life + 10*time.Minute},
	}
	// One step per model call (the default maxSteps, 20, would end them).
	d.gates = &v1alpha1.Gates{MaxSteps: int32(calls) + 10}
	total := m
	gw, err := startGateway(ctx, o, pl, dir)
	if err != nil {
		return res, err
	}
	defer gw.stop()
	l.gateway = gw.url
	pr, err := startPeer(ctx, sysAgentrun, pl, o, dir)
	if err != nil {
		return res, err
	}
	defer pr.stop()
	// After the manager: with webhooks, the creates need its webhook server.
	if err := setupAgentrun(ctx, d.c, total+o.warmup, o.creators, []v1alpha1.Model{{Name: liveModel, BaseURL: upURL + "/v1"}}); err != nil {
		return res, fmt.Errorf("setup: %w", err)
	}
	alive := func() error {
		if pr.exited() {
			return fmt.Errorf("%s exited: %v\n%s", pr.name, pr.err, pr.tail())
		}
		if gw.exited() {
			return fmt.Errorf("%s exited: %v\n%s", gw.name, gw.err, gw.tail())
		}
		return nil
	}

	// Warm-up: a few runs through the whole path (one model call, then
	// finish), unmeasured.
	if err := warmUp(ctx, o, d, total, alive, func() string {
		return fmt.Sprintf(" (agent errors %d, first: %s)\n%s", l.errN.Load(), l.firstError(), pr.tail())
	}); err != nil {
		return res, err
	}
	d.waitQuiet(ctx, time.Second, 60*time.Second)
	l.alive.Store(0)
	l.errN.Store(0)
	l.firstErr.Store(nil)
	base, err := snapshot(ctx, pl, pr, d)
	if err != nil {
		return res, err
	}
	gwBase, _ := readProc(gw.pid())

	// Ramp: M runs created at the rate; each agent starts once its pod runs.
	names := make([]string, m)
	for i := range names {
		names[i] = runName(i)
	}
	start := time.Now()
	var createErr atomic.Value
	var wg sync.WaitGroup
	jobs := make(chan int)
	for range o.creators {
		wg.Go(func() {
			for i := range jobs {
				if err := d.create(ctx, names[i], sessionName(i), true, time.Time{}); err != nil && ctx.Err() == nil {
					createErr.CompareAndSwap(nil, err)
				}
			}
		})
	}
	for i := range names {
		at := start.Add(time.Duration(i) * time.Second / time.Duration(set.Rate))
		if w := time.Until(at); w > 0 {
			time.Sleep(w)
		}
		if ctx.Err() != nil {
			break
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if err, ok := createErr.Load().(error); ok {
		return res, fmt.Errorf("create: %w", err)
	}
	// A plane that cannot start the runs within a minute of the schedule
	// does not sustain M (and the step is not left to run for long).
	aliveLimit := time.Duration(m)*time.Second/time.Duration(set.Rate) + time.Minute
	for int(l.alive.Load()) < m && time.Since(start) < aliveLimit {
		if err := alive(); err != nil {
			return res, err
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	res.Alive = int(l.alive.Load())
	res.RampS = time.Since(start).Seconds()

	// The window: every run alive, calling the model every interval.
	l.inWindow.Store(true)
	before, err := snapshot(ctx, pl, pr, d)
	if err != nil {
		return res, err
	}
	gw0, _ := readProc(gw.pid())
	select {
	case <-ctx.Done():
		return res, ctx.Err()
	case <-time.After(set.Window):
	}
	after, err := snapshot(ctx, pl, pr, d)
	if err != nil {
		return res, err
	}
	gw1, _ := readProc(gw.pid())
	l.inWindow.Store(false)
	res.fillWindow(l, before, after, gw0, gw1, base, gwBase)

	// The finish phase: run r-<i> finishes at the window's end + i/rate.
	l.finishAt.Store(time.Now().UnixNano())
	limit := time.Duration(m)*time.Second/time.Duration(set.Rate) + 3*time.Minute
	if err := d.waitTerminal(ctx, names, limit, alive); err != nil {
		res.Error = err.Error()
		logf("    %v", err)
	}
	recs := d.records(names)
	var fin []float64
	for _, r := range recs {
		if r.terminal {
			res.Terminal++
			res.Outcomes[r.outcome]++
		}
		if !r.factsAt.IsZero() && !r.finalizeAt.IsZero() {
			fin = append(fin, ms(r.finalizeAt.Sub(r.factsAt)))
		}
	}
	slices.Sort(fin)
	res.FinalizeP50Ms, res.FinalizeP99Ms = pct(fin, 50), pct(fin, 99)
	lat, _ := latencies(recs)
	res.TerminalP50Ms, res.TerminalP99Ms = pct(lat, 50), pct(lat, 99)
	res.AgentErrors = l.errN.Load()
	res.FirstError = l.firstError()
	lim := ms(set.P99Limit)
	switch {
	case res.Alive < m:
		res.FailReason = fmt.Sprintf("only %d of %d runs alive after %s", res.Alive, m, aliveLimit)
	case res.Terminal < m:
		res.FailReason = fmt.Sprintf("only %d of %d runs terminal", res.Terminal, m)
	case res.FinalizeP99Ms >= lim:
		res.FailReason = fmt.Sprintf("finishProposed → Finalizing p99 %.0f ms ≥ %.0f ms", res.FinalizeP99Ms, lim)
	case res.TerminalP99Ms >= lim:
		res.FailReason = fmt.Sprintf("pod Succeeded → Terminated p99 %.0f ms ≥ %.0f ms", res.TerminalP99Ms, lim)
	case res.ModelCalls > 0 && float64(res.ModelErrors) > 0.01*float64(res.ModelCalls):
		res.FailReason = fmt.Sprintf("%d of %d model calls failed", res.ModelErrors, res.ModelCalls)
	default:
		res.Sustained = true
	}
	return res, ctx.Err()
}

// fillWindow computes the window's figures from the snapshots around it.
func (r *liveStepResult) fillWindow(l *liveAgents, before, after *snap, gw0, gw1 procStat, base *snap, gwBase procStat) {
	el := after.at.Sub(before.at).Seconds()
	r.WindowS = el
	runMin := float64(max(r.Alive, 1)) * el / 60
	perK := 1000 / float64(max(r.Alive, 1))
	r.ModelCalls, r.ModelErrors = l.modelN.Load(), l.modelErr.Load()
	r.ToolCalls, r.ToolErrors = l.toolN.Load(), l.toolErr.Load()
	r.ModelCallsPerS = float64(r.ModelCalls) / el
	l.mu.Lock()
	lat := slices.Clone(l.modelLat)
	l.mu.Unlock()
	slices.Sort(lat)
	r.ModelP50Ms, r.ModelP99Ms = pct(lat, 50), pct(lat, 99)

	r.WritesPerRunMin, r.DriverPerRunMin = map[string]float64{}, map[string]float64{}
	var stored float64
	// Leases count here: the gateway's liveness Lease is its heartbeat for
	// every attempt it governs (the API server's own identity Lease adds
	// about 6 writes a minute in all).
	for k, v := range after.api {
		dv := v - before.api[k]
		if dv <= 0 {
			continue
		}
		r.WritesPerRunMin[k.String()] = dv / runMin
		if !notStored(k) {
			stored += dv
		}
	}
	for k, v := range after.driver {
		if dv := v - before.driver[k]; dv > 0 {
			r.DriverPerRunMin[k.String()] = dv / runMin
		}
	}
	r.StoredWritesPerS = stored / el
	r.WritesPerRunPerS = r.StoredWritesPerS / float64(max(r.Alive, 1))
	cpu := func(a, b procStat) float64 { return a.CPUSeconds - b.CPUSeconds }
	r.APICPUMsPerRunMin = cpu(after.apiProc, before.apiProc) * 1000 / runMin
	r.EtcdCPUMsPerRunMin = cpu(after.etcdProc, before.etcdProc) * 1000 / runMin
	r.MachineBusyCores = (after.busy - before.busy) / el
	r.APICores = cpu(after.apiProc, before.apiProc) / el
	r.EtcdCores = cpu(after.etcdProc, before.etcdProc) / el
	r.OperatorCores = cpu(after.peerProc, before.peerProc) / el
	r.GatewayCores = cpu(gw1, gw0) / el
	r.DriverCores = cpu(after.self, before.self) / el
	r.OperatorCoresPerK = r.OperatorCores * perK
	r.GatewayCoresPerK = r.GatewayCores * perK
	r.OperatorRSSMiB = float64(after.peerProc.RSSKiB) / 1024
	r.GatewayRSSMiB = float64(gw1.RSSKiB) / 1024
	r.OperatorRSSPerK = float64(after.peerProc.RSSKiB-base.peerProc.RSSKiB) / 1024 * perK
	r.GatewayRSSPerK = float64(gw1.RSSKiB-gwBase.RSSKiB) / 1024 * perK
}
