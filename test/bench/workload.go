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
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

const benchNS = "bench"

// admWebhook is the apiserver's metric of admission webhook calls.
const admWebhook = "apiserver_admission_webhook_admission_duration_seconds"

// workload is one scenario: a burst of n runs, runs one at a time, stepped
// arrival rates, or live runs (live.go).
type workload struct {
	Kind   string        `json:"kind"` // serial | burst | stepped | live
	N      int           `json:"n,omitempty"`
	Rates  []int         `json:"rates,omitempty"`
	Window time.Duration `json:"window,omitempty"`
	// Webhooks: the admission webhooks (and config/admission-policy) are
	// installed and the manager serves them, as in a real install (agentrun
	// only; the Job controller has none).
	Webhooks bool `json:"webhooks,omitempty"`
	// Live is the live-runs workload's settings (Kind live).
	Live *liveSettings `json:"live,omitempty"`
}

// webhookSuffix marks the workloads run with the admission webhooks installed.
const webhookSuffix = "-webhooks"

func (w workload) name() string {
	suffix := ""
	if w.Webhooks {
		suffix = webhookSuffix
	}
	switch w.Kind {
	case "burst":
		return fmt.Sprintf("burst-%d", w.N) + suffix
	case "serial":
		return fmt.Sprintf("serial-%d", w.N) + suffix
	case "live":
		return "live" + suffix
	}
	return "stepped" + suffix
}

// heavy workloads (N = 5000 and more, live runs) run in the first
// -heavy-trials trials only.
func (w workload) heavy() bool { return w.Kind == "live" || (w.Kind == "burst" && w.N >= 5000) }

// runs is how many runs (and Sessions) the workload may create.
func (w workload) runs() int {
	if w.Kind == "burst" || w.Kind == "serial" {
		return w.N
	}
	n := 0
	for _, r := range w.Rates {
		n += r * int(w.Window/time.Second)
	}
	return n
}

// stepResult is one arrival-rate step.
type stepResult struct {
	Rate            int     `json:"rate"`
	WindowS         float64 `json:"windowSeconds"`
	Created         int     `json:"created"`
	CreateLagMaxMs  float64 `json:"createLagMaxMs"`
	CompletedInStep int     `json:"completedInStep"`
	// CompletedPerS is completions per second over the second half of the step.
	CompletedPerS float64 `json:"completedPerSecondSecondHalf"`
	BacklogEnd    int     `json:"backlogEnd"`
	// BacklogSlope is the backlog's growth (runs/s) over the second half.
	BacklogSlope float64 `json:"backlogSlopePerSecond"`
	Grew         bool    `json:"backlogGrew"`
	LatencyP50Ms float64 `json:"factToTerminalP50Ms"`
	LatencyP99Ms float64 `json:"factToTerminalP99Ms"`
	E2EP50Ms     float64 `json:"createToTerminalP50Ms"`
	E2EP99Ms     float64 `json:"createToTerminalP99Ms"`
}

// trialResult is one system on one workload in one trial, on its own plane.
type trialResult struct {
	System   string `json:"system"`
	Workload string `json:"workload"`
	Trial    int    `json:"trial"`
	N        int    `json:"runs"`
	Terminal int    `json:"terminal"`
	TimedOut bool   `json:"timedOut,omitempty"`
	Error    string `json:"error,omitempty"`

	DurationS  float64 `json:"durationSeconds"`
	Throughput float64 `json:"runsPerSecond"`

	LatencyP50Ms float64 `json:"factToTerminalP50Ms"`
	LatencyP90Ms float64 `json:"factToTerminalP90Ms"`
	LatencyP99Ms float64 `json:"factToTerminalP99Ms"`
	LatencyMaxMs float64 `json:"factToTerminalMaxMs"`
	E2EP50Ms     float64 `json:"createToTerminalP50Ms"`
	E2EP99Ms     float64 `json:"createToTerminalP99Ms"`
	// agentrun only: finishProposed written → Finalizing visible on the RunAttempt.
	FinalizeP50Ms float64 `json:"finishToFinalizingP50Ms,omitempty"`
	FinalizeP99Ms float64 `json:"finishToFinalizingP99Ms,omitempty"`

	APIWrites         map[string]float64 `json:"apiserverWrites"`
	DriverWrites      map[string]float64 `json:"driverWrites"`
	ControllerWrites  map[string]float64 `json:"controllerWrites"`
	ControllerPerRun  float64            `json:"controllerWritesPerRun"`
	EventsPerRun      float64            `json:"controllerEventWritesPerRun"`
	NonEventPerRun    float64            `json:"controllerWritesPerRunWithoutEvents"`
	DriverPerRun      float64            `json:"driverWritesPerRun"`
	TotalWritesPerSec float64            `json:"apiserverWritesPerSecond"`

	// Reads by all clients (the driver reads only through its informers).
	APIReadsPerRun map[string]float64 `json:"apiserverReadsPerRun"`
	// Write requests answered 409 Conflict, by resource (all clients).
	ConflictsPerRun map[string]float64 `json:"conflictsPerRun"`
	// agentrun: from the operator's own metrics.
	ReconcilesPerRun map[string]float64 `json:"reconcilesPerRun,omitempty"`
	ReconcileMeanMs  map[string]float64 `json:"reconcileMeanMs,omitempty"`
	QueueWaitMeanMs  map[string]float64 `json:"queueWaitMeanMs,omitempty"`

	// Machine CPU over the workload, in cores (of runtime.NumCPU()).
	MachineBusyCores float64 `json:"machineBusyCores"`
	APICores         float64 `json:"apiserverCores"`
	EtcdCores        float64 `json:"etcdCores"`
	PeerCores        float64 `json:"controllerCores"`
	DriverCores      float64 `json:"driverCores"`
	OtherCores       float64 `json:"otherProcessesCores"`

	PeerCPUSeconds   float64        `json:"controllerCPUSeconds"`
	PeerCPUPer1000   float64        `json:"controllerCPUSecondsPer1000Runs"`
	PeerPeakRSSMiB   float64        `json:"controllerPeakRSSMiB"`
	APICPUPer1000    float64        `json:"apiserverCPUSecondsPer1000Runs"`
	EtcdCPUPer1000   float64        `json:"etcdCPUSecondsPer1000Runs"`
	EtcdWALBytesRun  float64        `json:"etcdWALBytesPerRun"`
	EtcdDiskBytesRun float64        `json:"etcdDiskWriteBytesPerRun"`
	EtcdPutsPerRun   float64        `json:"etcdPutsPerRun"`
	EtcdDBBytesAfter float64        `json:"etcdDBBytesAfter"`
	Outcomes         map[string]int `json:"outcomes"`
	// ObjectBytes is the mean JSON size of each kind at the end, managedFields included.
	ObjectBytes map[string]float64 `json:"objectBytes,omitempty"`
	// Admission webhook calls per run (the apiserver's metric; zero
	// without webhooks).
	WebhookCallsPerRun float64            `json:"admissionWebhookCallsPerRun"`
	DriverErrors       int64              `json:"driverErrors"`
	DriverFirstErr     string             `json:"driverFirstError,omitempty"`
	Steps              []stepResult       `json:"steps,omitempty"`
	SustainedRate      int                `json:"sustainedRate,omitempty"`
	OperatorMetrics    map[string]float64 `json:"operatorMetrics,omitempty"`
	OperatorFactP99Ms  float64            `json:"operatorFactToDecisionP99Ms,omitempty"`
}

// ceilingResult is what a plain client gets from the same stack.
type ceilingResult struct {
	Trial              int     `json:"trial"`
	Concurrency        int     `json:"concurrency"`
	PodStatusPerS      float64 `json:"podStatusPatchesPerSecond"`
	AttemptStatusPerS  float64 `json:"runAttemptStatusPatchesPerSecond"`
	PodAPICPUPerK      float64 `json:"podApiserverCPUSecondsPer1000Patches"`
	AttemptAPICPUPerK  float64 `json:"runAttemptApiserverCPUSecondsPer1000Patches"`
	RunStatusPerS      float64 `json:"researchRunStatusPatchesPerSecond"`
	RunAPICPUPerK      float64 `json:"researchRunApiserverCPUSecondsPer1000Patches"`
	RunErrors          int64   `json:"researchRunErrors"`
	PodErrors          int64   `json:"podErrors"`
	AttemptErrors      int64   `json:"runAttemptErrors"`
	ObjectsPerResource int     `json:"objects"`
}

// options are the benchmark's settings.
type options struct {
	root, assets, tmp string
	operatorBin       string
	peer              peerConfig
	driverWorkers     int
	creators          int
	warmup            int
	runTimeout        time.Duration
	ceilingDuration   time.Duration
	ceilingWorkers    int
	profileDir        string
	profileSeconds    int
	operatorArgs      []string
	traceRuns         int
	gatewayBin        string
}

// traceDir is where traces go: the profile directory, else the temporary one.
func (o *options) traceDir() string {
	if o.profileDir != "" {
		return o.profileDir
	}
	return o.tmp
}

func runName(i int) string     { return fmt.Sprintf("r-%05d", i) }
func sessionName(i int) string { return fmt.Sprintf("s-%05d", i) }

// runOne runs one system on one workload on a fresh control plane.
func runOne(ctx context.Context, o *options, sys string, wl workload, trial int) (res *trialResult, err error) {
	res = &trialResult{System: sys, Workload: wl.name(), Trial: trial}
	dir := filepath.Join(o.tmp, fmt.Sprintf("t%d-%s-%s", trial, wl.name(), sys))
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

	if _, err := pl.clientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNS}}, metav1.CreateOptions{}); err != nil {
		return res, err
	}
	d, err := newDriver(dctx, sys, benchNS, pl, o.driverWorkers)
	if err != nil {
		return res, err
	}
	d.traceRuns = o.traceRuns
	if o.traceRuns > 0 {
		defer func() {
			path := filepath.Join(o.traceDir(), fmt.Sprintf("t%d-%s-%s-trace.txt", trial, wl.name(), sys))
			if err := os.WriteFile(path, []byte(d.traceText()), 0o644); err != nil {
				logf("  trace: %v", err)
			} else {
				logf("  trace of %d runs in %s", o.traceRuns, path)
			}
		}()
	}
	total := wl.runs()
	setup := func() error {
		if sys != sysAgentrun {
			return nil
		}
		if err := setupAgentrun(ctx, d.c, total+o.warmup, o.creators, nil); err != nil {
			return fmt.Errorf("setup: %w", err)
		}
		return nil
	}
	// With webhooks the setup's creates need the manager's webhook server.
	if !wl.Webhooks {
		if err := setup(); err != nil {
			return res, err
		}
	}
	pr, err := startPeer(ctx, sys, pl, o, dir)
	if err != nil {
		return res, err
	}
	defer pr.stop()
	if wl.Webhooks {
		if err := setup(); err != nil {
			return res, err
		}
	}
	alive := func() error {
		if pr.exited() {
			return fmt.Errorf("%s exited: %v\n%s", pr.name, pr.err, pr.tail())
		}
		return nil
	}

	// Warm-up: a few runs through the whole path prove the peer's caches
	// are synced and its connections open; they are not measured.
	if err := warmUp(ctx, o, d, total, alive, func() string { return "\n" + pr.tail() }); err != nil {
		return res, err
	}
	if !d.waitQuiet(ctx, time.Second, 180*time.Second) {
		logf("  setup did not quiesce within 180s; measuring anyway")
	}

	before, err := snapshot(ctx, pl, pr, d)
	if err != nil {
		return res, err
	}
	var profiles sync.WaitGroup
	defer profiles.Wait()
	if o.profileDir != "" {
		base := filepath.Join(o.profileDir, fmt.Sprintf("t%d-%s-%s", trial, wl.name(), sys))
		profiles.Go(func() {
			if err := pl.profile(ctx, o.profileSeconds, base+"-apiserver.pprof"); err != nil {
				logf("  apiserver profile: %v", err)
			}
		})
		if pr.pprofURL != "" {
			profiles.Go(func() {
				if err := fetchTo(ctx, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", pr.pprofURL, o.profileSeconds), base+"-operator.pprof"); err != nil {
					logf("  operator profile: %v", err)
				}
			})
		}
	}
	var names []string
	switch wl.Kind {
	case "burst":
		names, err = burst(ctx, o, d, wl.N, alive)
	case "serial":
		names, err = serial(ctx, d, wl.N, alive)
	case "stepped":
		names, res.Steps, err = stepped(ctx, o, d, wl, alive)
	}
	if err != nil {
		res.Error = err.Error()
		res.TimedOut = true
		logf("  %v", err)
	}
	d.waitQuiet(ctx, time.Second, 30*time.Second)
	after, err := snapshot(ctx, pl, pr, d)
	if err != nil {
		return res, err
	}
	res.fill(d, names, before, after)
	res.ObjectBytes = d.objectSizes(ctx)
	for i := range res.Steps {
		if !res.Steps[i].Grew {
			res.SustainedRate = res.Steps[i].Rate
		}
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	return res, nil
}

// warmUp creates o.warmup unmeasured runs (w-000, w-001, …, on the Sessions
// after the workload's total) and waits up to 120 s for all of them to be
// terminal. detail, called only if they are not, adds to that error what the
// caller knows of why (the peer's log tail, the agents' errors).
func warmUp(ctx context.Context, o *options, d *driver, total int, alive func() error, detail func() string) error {
	var warm []string
	for i := range o.warmup {
		name := fmt.Sprintf("w-%03d", i)
		warm = append(warm, name)
		if err := d.create(ctx, name, sessionName(total+i), false, time.Time{}); err != nil {
			return fmt.Errorf("warm-up create: %w", err)
		}
	}
	if err := d.waitTerminal(ctx, warm, 120*time.Second, alive); err != nil {
		return fmt.Errorf("warm-up: %w%s", err, detail())
	}
	return nil
}

// setupAgentrun creates the RuntimePolicy (with models, for the live
// workload) and one Session per run.
func setupAgentrun(ctx context.Context, c client.Client, sessions, workers int, models []v1alpha1.Model) error {
	if err := c.Create(ctx, &v1alpha1.RuntimePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: benchNS, Name: "p"},
		Spec: v1alpha1.RuntimePolicySpec{Models: models, Tools: []v1alpha1.Tool{
			{Name: "http.get", Risk: v1alpha1.RiskLow, Effect: v1alpha1.EffectNone},
			{Name: "report.publish", Risk: v1alpha1.RiskHigh, Effect: v1alpha1.EffectExternal},
		}},
	}); err != nil {
		return err
	}
	return parallel(ctx, sessions, workers, func(i int) error {
		return c.Create(ctx, &v1alpha1.Session{
			ObjectMeta: metav1.ObjectMeta{Namespace: benchNS, Name: sessionName(i)},
			Spec:       v1alpha1.SessionSpec{PolicyRef: v1alpha1.LocalObjectReference{Name: "p"}},
		})
	})
}

// parallel runs f(0..n-1) on at most workers goroutines; the first error wins.
func parallel(ctx context.Context, n, workers int, f func(int) error) error {
	var next atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			for ctx.Err() == nil && first.Load() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					first.CompareAndSwap(nil, err)
				}
			}
		})
	}
	wg.Wait()
	if err, ok := first.Load().(error); ok {
		return err
	}
	return ctx.Err()
}

func burst(ctx context.Context, o *options, d *driver, n int, alive func() error) ([]string, error) {
	names := make([]string, n)
	for i := range names {
		names[i] = runName(i)
	}
	if err := parallel(ctx, n, o.creators, func(i int) error {
		return d.create(ctx, names[i], sessionName(i), true, time.Time{})
	}); err != nil {
		return names, fmt.Errorf("create: %w", err)
	}
	// At least 200 ms per run, so N = 5000 gets 1000 s at 5 runs/s.
	return names, d.waitTerminal(ctx, names, max(o.runTimeout, time.Duration(n)*200*time.Millisecond), alive)
}

// serial runs one run at a time on an otherwise idle plane: the next is
// created when the previous one is terminal. It measures the latency the
// design's 'p99 under 100 ms on an idle control plane' is about.
func serial(ctx context.Context, d *driver, n int, alive func() error) ([]string, error) {
	names := make([]string, 0, n)
	for i := range n {
		name := runName(i)
		names = append(names, name)
		if err := d.create(ctx, name, sessionName(i), true, time.Time{}); err != nil {
			return names, fmt.Errorf("create: %w", err)
		}
		if err := d.waitTerminal(ctx, []string{name}, 30*time.Second, alive); err != nil {
			return names, err
		}
	}
	return names, nil
}

// stepped offers runs at each rate for one window, sampling the backlog
// (created, not terminal), and stops after the first step whose backlog
// grew; then it drains.
func stepped(ctx context.Context, o *options, d *driver, wl workload, alive func() error) ([]string, []stepResult, error) {
	var names []string
	var steps []stepResult
	jobs := make(chan int, 100000)
	var lagMax atomic.Int64
	var createErr atomic.Value
	var wg sync.WaitGroup
	due := map[int]time.Time{}
	var dueMu sync.Mutex
	for range o.creators {
		wg.Go(func() {
			for i := range jobs {
				dueMu.Lock()
				t := due[i]
				dueMu.Unlock()
				if lag := time.Since(t); lag > time.Duration(lagMax.Load()) {
					lagMax.Store(int64(lag))
				}
				if err := d.create(ctx, runName(i), sessionName(i), true, t); err != nil && ctx.Err() == nil {
					createErr.CompareAndSwap(nil, err)
				}
			}
		})
	}
	defer func() { close(jobs); wg.Wait() }()

	next := 0
	for _, rate := range wl.Rates {
		count := rate * int(wl.Window/time.Second)
		start := time.Now()
		lagMax.Store(0)
		first := next
		type sample struct {
			t       float64
			backlog int
		}
		var samples []sample
		sampleEvery := 250 * time.Millisecond
		nextSample := start
		for k := 0; k < count; {
			now := time.Now()
			if err := alive(); err != nil {
				return names, steps, err
			}
			if ctx.Err() != nil {
				return names, steps, ctx.Err()
			}
			if !now.Before(nextSample) {
				samples = append(samples, sample{now.Sub(start).Seconds(), len(names) - d.terminalCount(names)})
				nextSample = nextSample.Add(sampleEvery)
			}
			at := start.Add(time.Duration(k) * time.Second / time.Duration(rate))
			if now.Before(at) {
				time.Sleep(min(at.Sub(now), time.Until(nextSample)+time.Millisecond))
				continue
			}
			dueMu.Lock()
			due[next] = at
			dueMu.Unlock()
			names = append(names, runName(next))
			jobs <- next
			next++
			k++
		}
		// Finish the window's sampling.
		for end := start.Add(wl.Window); time.Now().Before(end); {
			samples = append(samples, sample{time.Since(start).Seconds(), len(names) - d.terminalCount(names)})
			time.Sleep(min(sampleEvery, time.Until(end)+time.Millisecond))
		}
		stepNames := names[first:next]
		half := wl.Window.Seconds() / 2
		var xs, ys []float64
		for _, s := range samples {
			if s.t >= half {
				xs = append(xs, s.t)
				ys = append(ys, float64(s.backlog))
			}
		}
		slope := linearSlope(xs, ys)
		recs := d.records(stepNames)
		lat, e2e := latencies(recs)
		done := d.records(names)
		inStep, secondHalf := 0, 0
		mid, end := start.Add(wl.Window/2), start.Add(wl.Window)
		for _, r := range done {
			if r.terminal && !r.terminalAt.Before(start) && r.terminalAt.Before(end) {
				inStep++
				if !r.terminalAt.Before(mid) {
					secondHalf++
				}
			}
		}
		sr := stepResult{
			Rate: rate, WindowS: wl.Window.Seconds(), Created: count,
			CreateLagMaxMs:  ms(time.Duration(lagMax.Load())),
			CompletedInStep: inStep,
			CompletedPerS:   float64(secondHalf) / half,
			BacklogEnd:      len(names) - d.terminalCount(names),
			BacklogSlope:    slope,
			LatencyP50Ms:    pct(lat, 50), LatencyP99Ms: pct(lat, 99),
			E2EP50Ms: pct(e2e, 50), E2EP99Ms: pct(e2e, 99),
		}
		// The backlog grows if it rises by more than a tenth of the arrival
		// rate per second over the second half, or creation itself fell
		// behind the schedule by more than a second.
		sr.Grew = slope > 0.1*float64(rate) || lagMax.Load() > int64(time.Second)
		steps = append(steps, sr)
		logf("    step %d runs/s: completed %.1f/s in 2nd half, backlog %d (slope %+.1f/s), create lag %.0f ms, p99 %.0f ms, grew=%v",
			rate, sr.CompletedPerS, sr.BacklogEnd, slope, sr.CreateLagMaxMs, sr.LatencyP99Ms, sr.Grew)
		if sr.Grew {
			break
		}
	}
	if err, ok := createErr.Load().(error); ok {
		return names, steps, fmt.Errorf("create: %w", err)
	}
	return names, steps, d.waitTerminal(ctx, names, o.runTimeout, alive)
}

func linearSlope(xs, ys []float64) float64 {
	n := float64(len(xs))
	if n < 2 {
		return 0
	}
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	den := n*sxx - sx*sx
	if den == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / den
}

// snap is everything measured before and after a workload.
type snap struct {
	at                  time.Time
	api                 map[reqKey]float64
	reads               map[reqKey]float64
	conflicts           map[reqKey]float64
	busy, cpuTotal      float64
	self                procStat
	driver              map[reqKey]float64
	etcd                map[string]float64
	peerProc, apiProc   procStat
	etcdProc            procStat
	operator            map[string]float64
	operatorFactBuckets map[float64]float64
	admission           map[string]float64
}

func snapshot(ctx context.Context, pl *plane, pr *peer, d *driver) (*snap, error) {
	s := &snap{at: time.Now(), driver: d.writes.snapshot()}
	var err error
	if s.api, s.reads, s.conflicts, err = pl.apiRequests(ctx); err != nil {
		return nil, err
	}
	s.admission = pl.admission
	s.busy, s.cpuTotal = machineCPU()
	s.self, _ = readProc(os.Getpid())
	if s.etcd, err = pl.etcdStats(ctx); err != nil {
		logf("  etcd metrics: %v", err)
	}
	s.peerProc, _ = readProc(pr.pid())
	s.apiProc, _ = readProc(pl.apiPID)
	s.etcdProc, _ = readProc(pl.etcdPID)
	if s.operator, s.operatorFactBuckets, err = pr.operatorMetrics(ctx); err != nil {
		logf("  operator metrics: %v", err)
	}
	return s, nil
}

func (r *trialResult) fill(d *driver, names []string, before, after *snap) {
	r.N = len(names)
	recs := d.records(names)
	var first, last time.Time
	r.Outcomes = map[string]int{}
	for _, rec := range recs {
		if first.IsZero() || (!rec.created.IsZero() && rec.created.Before(first)) {
			first = rec.created
		}
		if rec.terminal {
			r.Terminal++
			r.Outcomes[rec.outcome]++
			if rec.terminalAt.After(last) {
				last = rec.terminalAt
			}
		}
	}
	if !first.IsZero() && last.After(first) {
		r.DurationS = last.Sub(first).Seconds()
		r.Throughput = float64(r.Terminal) / r.DurationS
	}
	lat, e2e := latencies(recs)
	r.LatencyP50Ms, r.LatencyP90Ms, r.LatencyP99Ms, r.LatencyMaxMs = pct(lat, 50), pct(lat, 90), pct(lat, 99), pct(lat, 100)
	r.E2EP50Ms, r.E2EP99Ms = pct(e2e, 50), pct(e2e, 99)
	var fin []float64
	for _, rec := range recs {
		if !rec.factsAt.IsZero() && !rec.finalizeAt.IsZero() {
			fin = append(fin, ms(rec.finalizeAt.Sub(rec.factsAt)))
		}
	}
	slices.Sort(fin)
	r.FinalizeP50Ms, r.FinalizeP99Ms = pct(fin, 50), pct(fin, 99)

	runs := float64(max(r.Terminal, 1))
	r.APIWrites, r.DriverWrites, r.ControllerWrites = map[string]float64{}, map[string]float64{}, map[string]float64{}
	var apiTotal, ctrlTotal, events, driverTotal float64
	keys := map[reqKey]bool{}
	for k := range after.api {
		keys[k] = true
	}
	for k := range after.driver {
		keys[k] = true
	}
	for k := range keys {
		if k.Resource == "leases" {
			continue // the apiserver's own heartbeats; neither peer uses leases here
		}
		api := after.api[k] - before.api[k]
		drv := after.driver[k] - before.driver[k]
		if api != 0 {
			r.APIWrites[k.String()] = api
		}
		if drv != 0 {
			r.DriverWrites[k.String()] = drv
		}
		ctrl := api - drv
		if ctrl < 0 {
			logf("  warning: %s: driver sent %.0f but the apiserver counted %.0f", k, drv, api)
			ctrl = 0
		}
		if ctrl != 0 {
			r.ControllerWrites[k.String()] = ctrl
		}
		apiTotal += api
		driverTotal += drv
		ctrlTotal += ctrl
		if k.Resource == "events" {
			events += ctrl
		}
	}
	r.ControllerPerRun = ctrlTotal / runs
	r.EventsPerRun = events / runs
	r.NonEventPerRun = (ctrlTotal - events) / runs
	r.DriverPerRun = driverTotal / runs
	if r.DurationS > 0 {
		r.TotalWritesPerSec = apiTotal / after.at.Sub(before.at).Seconds()
	}
	r.APIReadsPerRun = map[string]float64{}
	for k, v := range after.reads {
		if dv := v - before.reads[k]; dv > 0 {
			r.APIReadsPerRun[k.String()] = dv / runs
		}
	}
	r.ConflictsPerRun = map[string]float64{}
	for k, v := range after.conflicts {
		if dv := v - before.conflicts[k]; dv > 0 {
			r.ConflictsPerRun[k.String()] = dv / runs
		}
	}
	if el := after.at.Sub(before.at).Seconds(); el > 0 {
		cores := func(a, b procStat) float64 { return (a.CPUSeconds - b.CPUSeconds) / el }
		r.MachineBusyCores = (after.busy - before.busy) / el
		r.APICores = cores(after.apiProc, before.apiProc)
		r.EtcdCores = cores(after.etcdProc, before.etcdProc)
		r.PeerCores = cores(after.peerProc, before.peerProc)
		r.DriverCores = cores(after.self, before.self)
		r.OtherCores = max(0, r.MachineBusyCores-r.APICores-r.EtcdCores-r.PeerCores-r.DriverCores)
	}
	r.PeerCPUSeconds = after.peerProc.CPUSeconds - before.peerProc.CPUSeconds
	r.PeerCPUPer1000 = r.PeerCPUSeconds / runs * 1000
	r.PeerPeakRSSMiB = float64(after.peerProc.HWMKiB) / 1024
	r.APICPUPer1000 = (after.apiProc.CPUSeconds - before.apiProc.CPUSeconds) / runs * 1000
	r.EtcdCPUPer1000 = (after.etcdProc.CPUSeconds - before.etcdProc.CPUSeconds) / runs * 1000
	r.EtcdDiskBytesRun = float64(after.etcdProc.WriteBytes-before.etcdProc.WriteBytes) / runs
	if after.etcd != nil && before.etcd != nil {
		r.EtcdWALBytesRun = (after.etcd["etcd_disk_wal_write_bytes_total"] - before.etcd["etcd_disk_wal_write_bytes_total"]) / runs
		r.EtcdPutsPerRun = (after.etcd["etcd_mvcc_put_total"] - before.etcd["etcd_mvcc_put_total"]) / runs
		r.EtcdDBBytesAfter = after.etcd["etcd_mvcc_db_total_size_in_bytes"]
	}
	r.WebhookCallsPerRun = (after.admission[admWebhook] - before.admission[admWebhook]) / runs
	r.DriverErrors = d.errCount.Load()
	if s, ok := d.firstErr.Load().(string); ok {
		r.DriverFirstErr = s
	}
	if after.operator != nil {
		r.OperatorMetrics = map[string]float64{}
		for k, v := range after.operator {
			if dv := v - before.operator[k]; dv != 0 {
				r.OperatorMetrics[k] = dv
			}
		}
		r.OperatorFactP99Ms = histogramQuantile(0.99, before.operatorFactBuckets, after.operatorFactBuckets) * 1000
		r.ReconcilesPerRun, r.ReconcileMeanMs, r.QueueWaitMeanMs = map[string]float64{}, map[string]float64{}, map[string]float64{}
		for _, c := range []string{"researchrun", "session"} {
			n := r.OperatorMetrics["controller_runtime_reconcile_time_seconds,controller="+c+",count"]
			if n == 0 {
				continue
			}
			r.ReconcilesPerRun[c] = n / runs
			r.ReconcileMeanMs[c] = r.OperatorMetrics["controller_runtime_reconcile_time_seconds,controller="+c+",sum"] / n * 1000
			qk := "workqueue_queue_duration_seconds,controller=" + c + ",name=" + c
			if qn := r.OperatorMetrics[qk+",count"]; qn > 0 {
				r.QueueWaitMeanMs[c] = r.OperatorMetrics[qk+",sum"] / qn * 1000
			}
		}
	}
}

// histogramQuantile estimates a quantile of the difference of two cumulative
// histograms, by linear interpolation inside the bucket, as Prometheus does.
func histogramQuantile(q float64, before, after map[float64]float64) float64 {
	if after == nil {
		return 0
	}
	bounds := slices.Sorted(maps.Keys(after))
	total := after[bounds[len(bounds)-1]] - before[bounds[len(bounds)-1]]
	if total <= 0 {
		return 0
	}
	rank := q * total
	prevB, prevC := 0.0, 0.0
	for _, b := range bounds {
		c := after[b] - before[b]
		if c >= rank {
			if b > 1e300 { // +Inf
				return prevB
			}
			if c == prevC {
				return b
			}
			return prevB + (b-prevB)*(rank-prevC)/(c-prevC)
		}
		prevB, prevC = b, c
	}
	return prevB
}

// latencies returns sorted fact→terminal and create→terminal latencies (ms).
func latencies(recs []record) (lat, e2e []float64) {
	for _, r := range recs {
		if !r.terminal {
			continue
		}
		if !r.factAt.IsZero() {
			lat = append(lat, ms(r.terminalAt.Sub(r.factAt)))
		}
		start := r.created
		if !r.scheduledAt.IsZero() {
			start = r.scheduledAt
		}
		if !start.IsZero() {
			e2e = append(e2e, ms(r.terminalAt.Sub(start)))
		}
	}
	slices.Sort(lat)
	slices.Sort(e2e)
	return lat, e2e
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// pct is the p-th percentile (nearest rank) of sorted xs; p=100 is the max.
func pct(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	i := int(float64(len(xs))*p/100+0.999999) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}

// ceiling measures the status patches per second a plain client gets from
// the same stack, for pods and for RunAttempts, on a fresh plane.
func ceiling(ctx context.Context, o *options, trial int) (*ceilingResult, error) {
	res := &ceilingResult{Trial: trial, Concurrency: o.ceilingWorkers, ObjectsPerResource: 200}
	dir := filepath.Join(o.tmp, fmt.Sprintf("t%d-ceiling", trial))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, err
	}
	pl, err := startPlane(ctx, o.assets, o.root, dir, false)
	if err != nil {
		return res, err
	}
	defer pl.stop()
	cfg := rest.CopyConfig(pl.admin)
	cfg.QPS, cfg.Burst = 1e6, 1e6
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return res, err
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNS}}); err != nil {
		return res, err
	}
	n := res.ObjectsPerResource
	if err := parallel(ctx, n, o.creators, func(i int) error {
		if err := c.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: benchNS, Name: fmt.Sprintf("p-%03d", i)},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "research-agent"}}},
		}); err != nil {
			return err
		}
		if err := c.Create(ctx, &v1alpha1.RunAttempt{
			ObjectMeta: metav1.ObjectMeta{Namespace: benchNS, Name: fmt.Sprintf("a-%03d", i)},
			Spec:       v1alpha1.RunAttemptSpec{RunName: fmt.Sprintf("a-%03d", i), Attempt: 1},
		}); err != nil {
			return err
		}
		return c.Create(ctx, &v1alpha1.ResearchRun{
			ObjectMeta: metav1.ObjectMeta{Namespace: benchNS, Name: fmt.Sprintf("r-%03d", i)},
			Spec: v1alpha1.ResearchRunSpec{
				SessionRef: v1alpha1.LocalObjectReference{Name: "s"},
				Goal:       "benchmark run",
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "agent", Image: "research-agent"}},
				}},
				Budget: v1alpha1.Budget{ModelRequests: 10, ToolCalls: 10, OutputReserve: v1alpha1.OutputReserve{ModelRequests: 2, ToolCalls: 2}},
			},
		})
	}); err != nil {
		return res, err
	}
	hammer := func(what string, patch func(i, k int) error) (float64, float64, int64) {
		var prof sync.WaitGroup
		defer prof.Wait()
		if o.profileDir != "" {
			prof.Go(func() {
				path := filepath.Join(o.profileDir, fmt.Sprintf("t%d-ceiling-%s-apiserver.pprof", trial, what))
				if err := pl.profile(ctx, max(1, int(o.ceilingDuration.Seconds())-1), path); err != nil {
					logf("  apiserver profile: %v", err)
				}
			})
		}
		var ok, errs atomic.Int64
		var k atomic.Int64
		end := time.Now().Add(o.ceilingDuration)
		a0, _ := readProc(pl.apiPID)
		start := time.Now()
		var wg sync.WaitGroup
		for w := range o.ceilingWorkers {
			wg.Go(func() {
				for i := w; time.Now().Before(end) && ctx.Err() == nil; i += o.ceilingWorkers {
					if err := patch(i%n, int(k.Add(1))); err != nil {
						errs.Add(1)
						continue
					}
					ok.Add(1)
				}
			})
		}
		wg.Wait()
		el := time.Since(start).Seconds()
		a1, _ := readProc(pl.apiPID)
		return float64(ok.Load()) / el, (a1.CPUSeconds - a0.CPUSeconds) / float64(max(ok.Load(), 1)) * 1000, errs.Load()
	}
	res.PodStatusPerS, res.PodAPICPUPerK, res.PodErrors = hammer("pod", func(i, k int) error {
		data, _ := json.Marshal(map[string]any{"status": map[string]any{"message": fmt.Sprintf("patch %d", k)}})
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: benchNS, Name: fmt.Sprintf("p-%03d", i)}}
		return c.Status().Patch(ctx, pod, client.RawPatch(types.StrategicMergePatchType, data))
	})
	res.AttemptStatusPerS, res.AttemptAPICPUPerK, res.AttemptErrors = hammer("runattempt", func(i, k int) error {
		data, _ := json.Marshal(map[string]any{"status": map[string]any{"steps": k, "heartbeatTime": metav1.Now()}})
		ra := &v1alpha1.RunAttempt{ObjectMeta: metav1.ObjectMeta{Namespace: benchNS, Name: fmt.Sprintf("a-%03d", i)}}
		return c.Status().Patch(ctx, ra, client.RawPatch(types.MergePatchType, data))
	})
	res.RunStatusPerS, res.RunAPICPUPerK, res.RunErrors = hammer("researchrun", func(i, k int) error {
		data, _ := json.Marshal(map[string]any{"status": map[string]any{
			"phase": v1alpha1.PhaseRunning, "steps": k, "message": fmt.Sprintf("running: %d steps", k),
		}})
		run := &v1alpha1.ResearchRun{ObjectMeta: metav1.ObjectMeta{Namespace: benchNS, Name: fmt.Sprintf("r-%03d", i)}}
		return c.Status().Patch(ctx, run, client.RawPatch(types.MergePatchType, data))
	})
	return res, ctx.Err()
}

func writeKeysSorted(m map[string]float64) []string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int {
		if c := cmp.Compare(m[b], m[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	return keys
}
