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
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

var scheme = runtime.NewScheme()

func init() {
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		panic(err)
	}
}

// writeCounter counts the driver's own write requests by resource and verb,
// so they can be subtracted from the apiserver's count.
type writeCounter struct {
	mu sync.Mutex
	m  map[reqKey]float64
}

func (w *writeCounter) snapshot() map[reqKey]float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.m)
}

type countingTransport struct {
	w    *writeCounter
	next http.RoundTripper
}

func (t countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	verb := ""
	switch req.Method {
	case http.MethodPost, http.MethodPut, http.MethodDelete:
		verb = req.Method
	case http.MethodPatch:
		verb = "PATCH"
		if strings.HasPrefix(req.Header.Get("Content-Type"), "application/apply-patch") {
			verb = "APPLY"
		}
	}
	if verb != "" {
		k := keyFromPath(req.URL.Path, verb)
		t.w.mu.Lock()
		t.w.m[k]++
		t.w.mu.Unlock()
	}
	return t.next.RoundTrip(req)
}

// keyFromPath maps /api/v1/namespaces/ns/pods/name/status to pods/status.
func keyFromPath(path, verb string) reqKey {
	seg := strings.Split(strings.Trim(path, "/"), "/")
	k := reqKey{Verb: verb}
	switch {
	case len(seg) >= 2 && seg[0] == "api":
		seg = seg[2:]
	case len(seg) >= 3 && seg[0] == "apis":
		k.Group = seg[1]
		seg = seg[3:]
	default:
		k.Resource = path
		return k
	}
	if len(seg) >= 3 && seg[0] == "namespaces" {
		seg = seg[2:]
	}
	if len(seg) > 0 {
		k.Resource = seg[0]
	}
	if len(seg) > 2 {
		k.Subresource = seg[2]
	}
	if verb == "DELETE" && len(seg) == 1 {
		k.Verb = "DELETECOLLECTION"
	}
	return k
}

// traceLine is one event in a traced run's timeline.
type traceLine struct {
	run  string
	at   time.Time
	what string
}

func (d *driver) traceEvent(run, format string, args ...any) {
	if d.traceRuns == 0 {
		return
	}
	at := time.Now()
	d.traceMu.Lock()
	defer d.traceMu.Unlock()
	if !d.traced[run] {
		return
	}
	d.trace = append(d.trace, traceLine{run: run, at: at, what: fmt.Sprintf(format, args...)})
}

// changed returns the fields of obj (a JSON-able part of an object) that
// differ from the last one traced under key, as "a.b" paths.
func (d *driver) changed(key string, obj any) []string {
	if d.traceRuns == 0 {
		return nil
	}
	b, _ := json.Marshal(obj)
	var cur map[string]any
	_ = json.Unmarshal(b, &cur)
	d.traceMu.Lock()
	defer d.traceMu.Unlock()
	if d.lastSeen == nil {
		d.lastSeen = map[string]map[string]any{}
	}
	prev := d.lastSeen[key]
	d.lastSeen[key] = cur
	var out []string
	var diff func(path string, a, b any)
	diff = func(path string, a, b any) {
		am, aok := a.(map[string]any)
		bm, bok := b.(map[string]any)
		if aok && bok {
			for _, k := range slices.Sorted(maps.Keys(bm)) {
				diff(path+"."+k, am[k], bm[k])
			}
			for k := range am {
				if _, ok := bm[k]; !ok {
					out = append(out, path+"."+k+"(removed)")
				}
			}
			return
		}
		ab, _ := json.Marshal(a)
		bb, _ := json.Marshal(b)
		if string(ab) != string(bb) {
			out = append(out, path)
		}
	}
	diff("", prev, cur)
	return out
}

// traceRun starts tracing run if fewer than traceRuns are traced.
func (d *driver) traceRun(run string) {
	if d.traceRuns == 0 {
		return
	}
	d.traceMu.Lock()
	defer d.traceMu.Unlock()
	if d.traced == nil {
		d.traced = map[string]bool{}
	}
	if len(d.traced) < d.traceRuns {
		d.traced[run] = true
	}
}

// traceText renders the traced timelines, each from its run's creation.
func (d *driver) traceText() string {
	d.traceMu.Lock()
	defer d.traceMu.Unlock()
	var b strings.Builder
	start := map[string]time.Time{}
	for _, l := range d.trace {
		if _, ok := start[l.run]; !ok {
			start[l.run] = l.at
		}
	}
	runs := slices.Sorted(maps.Keys(start))
	for _, run := range runs {
		fmt.Fprintf(&b, "run %s:\n", run)
		for _, l := range d.trace {
			if l.run == run {
				fmt.Fprintf(&b, "  %+8.1f ms  %s\n", float64(l.at.Sub(start[run]).Microseconds())/1000, l.what)
			}
		}
	}
	return b.String()
}

// runState is what the driver knows of one run (agentrun) or Job.
type runState struct {
	pod        string
	podUID     types.UID
	podSA      string // the pod's service account (the live agent's token)
	containers []string
	attemptIn  bool           // the RunAttempt exists
	attemptPh  v1alpha1.Phase // its spec.runPhase

	running, facts, settled, succeeded bool

	created     time.Time // create request sent
	startedAt   time.Time
	factsAt     time.Time // finishProposed written (agentrun)
	finalizeAt  time.Time // Finalizing seen on the RunAttempt (agentrun)
	factAt      time.Time // terminal fact sent: pod Succeeded
	terminalAt  time.Time // terminal status seen on the watch
	terminal    bool
	outcome     string // reason (agentrun) or condition (Job)
	retries     int
	measured    bool
	scheduledAt time.Time // stepped arrival: when the run was due

	// live workload: the agent goroutine started; finalizing is closed
	// when Finalizing is seen on the RunAttempt.
	agentStarted bool
	finalizing   chan struct{}
}

// driver plays kubelet (pod phases) and agent (RunAttempt facts) for one
// system, event-driven from informers, with a bounded pool of workers.
type driver struct {
	sys string
	ns  string
	c   client.Client
	// facts writes the RunAttempt facts: as agentrun-gateway, the one author
	// of facts config/admission-policy allows.
	facts client.Client
	live  *liveAgents // live workload: agents talk to the gateway instead
	// budget, when set, is every run's budget (the live workload's runs
	// live for minutes).
	budget  *v1alpha1.Budget
	gates   *v1alpha1.Gates // and gates
	cache   cache.Cache
	writes  *writeCounter
	q       workqueue.TypedDelayingInterface[string]
	workers int

	mu   sync.Mutex
	runs map[string]*runState

	// trace records every watch event of the first traceRuns measured runs
	// (their run, attempt, pod and session), for -trace.
	traceRuns int
	traceMu   sync.Mutex
	traced    map[string]bool
	trace     []traceLine
	lastSeen  map[string]map[string]any // traced object → its last JSON, for diffs

	terminals atomic.Int64
	lastEvent atomic.Int64
	errCount  atomic.Int64
	firstErr  atomic.Value
}

func newDriver(ctx context.Context, sys, ns string, pl *plane, workers int) (*driver, error) {
	admin := pl.admin
	cfg := rest.CopyConfig(admin)
	// The driver must never be the bottleneck: no client-side limit.
	cfg.QPS, cfg.Burst = 1e6, 1e6
	d := &driver{sys: sys, ns: ns, writes: &writeCounter{m: map[reqKey]float64{}}, workers: workers, runs: map[string]*runState{}}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countingTransport{w: d.writes, next: rt} })
	var err error
	if d.c, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return nil, err
	}
	d.facts = d.c
	if pl.gatewayCfg != nil {
		fcfg := rest.CopyConfig(pl.gatewayCfg)
		fcfg.QPS, fcfg.Burst = 1e6, 1e6
		fcfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countingTransport{w: d.writes, next: rt} })
		if d.facts, err = client.New(fcfg, client.Options{Scheme: scheme}); err != nil {
			return nil, err
		}
	}
	readCfg := rest.CopyConfig(admin)
	readCfg.QPS, readCfg.Burst = 1e6, 1e6
	d.cache, err = cache.New(readCfg, cache.Options{Scheme: scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		return nil, err
	}
	d.q = workqueue.NewTypedDelayingQueue[string]()
	d.touch()

	h := func(on func(obj any)) toolscache.ResourceEventHandlerFuncs {
		return toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { d.touch(); on(obj) },
			UpdateFunc: func(_, obj any) { d.touch(); on(obj) },
			DeleteFunc: func(any) { d.touch() },
		}
	}
	add := func(obj client.Object, on func(any)) error {
		inf, err := d.cache.GetInformer(ctx, obj)
		if err != nil {
			return err
		}
		_, err = inf.AddEventHandler(h(on))
		return err
	}
	if err := add(&corev1.Pod{}, d.onPod); err != nil {
		return nil, err
	}
	switch sys {
	case sysJob:
		if err := add(&batchv1.Job{}, d.onJob); err != nil {
			return nil, err
		}
	case sysAgentrun:
		if err := add(&v1alpha1.ResearchRun{}, d.onRun); err != nil {
			return nil, err
		}
		if err := add(&v1alpha1.RunAttempt{}, d.onAttempt); err != nil {
			return nil, err
		}
		if err := add(&v1alpha1.Session{}, d.onSession); err != nil {
			return nil, err
		}
	}
	go func() { _ = d.cache.Start(ctx) }()
	syncCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if !d.cache.WaitForCacheSync(syncCtx) {
		return nil, fmt.Errorf("driver informers did not sync")
	}
	for range workers {
		go d.work(ctx)
	}
	go func() { <-ctx.Done(); d.q.ShutDown() }()
	return d, nil
}

func (d *driver) touch() { d.lastEvent.Store(time.Now().UnixNano()) }

func (d *driver) state(name string) *runState {
	st := d.runs[name]
	if st == nil {
		st = &runState{finalizing: make(chan struct{})}
		d.runs[name] = st
	}
	return st
}

func (d *driver) onPod(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	var name string
	switch d.sys {
	case sysJob:
		name = pod.Labels[batchv1.JobNameLabel]
	case sysAgentrun:
		if pod.Labels[v1alpha1.LabelAttempt] != "1" {
			return
		}
		name = pod.Labels[v1alpha1.LabelRun]
	}
	if name == "" {
		return
	}
	d.traceEvent(name, "watch  pod %s rv=%s phase=%q", pod.Name, pod.ResourceVersion, pod.Status.Phase)
	d.mu.Lock()
	st := d.state(name)
	if st.pod == "" {
		st.pod, st.podUID, st.podSA = pod.Name, pod.UID, pod.Spec.ServiceAccountName
		for _, c := range pod.Spec.Containers {
			st.containers = append(st.containers, c.Name)
		}
	}
	d.mu.Unlock()
	d.q.Add(name)
}

func (d *driver) onAttempt(obj any) {
	ra, ok := obj.(*v1alpha1.RunAttempt)
	if !ok || ra.Spec.Attempt != 1 {
		return
	}
	now := time.Now()
	if d.traceRuns > 0 {
		d.traceEvent(ra.Spec.RunName, "watch  RunAttempt rv=%s gen=%d spec.runPhase=%q grant=%+v changed=%v",
			ra.ResourceVersion, ra.Generation, ra.Spec.RunPhase, ra.Spec.Grant,
			d.changed("ra/"+ra.Name, map[string]any{"spec": ra.Spec, "status": ra.Status}))
	}
	d.mu.Lock()
	st := d.state(ra.Spec.RunName)
	st.attemptIn = true
	st.attemptPh = ra.Spec.RunPhase
	if ra.Spec.RunPhase == v1alpha1.PhaseFinalizing && st.finalizeAt.IsZero() {
		st.finalizeAt = now
		if st.finalizing != nil {
			close(st.finalizing)
		}
	}
	d.mu.Unlock()
	d.q.Add(ra.Spec.RunName)
}

func (d *driver) onRun(obj any) {
	run, ok := obj.(*v1alpha1.ResearchRun)
	if !ok {
		return
	}
	if d.traceRuns > 0 {
		var conds []string
		for _, c := range run.Status.Conditions {
			conds = append(conds, fmt.Sprintf("%s=%s/%s", c.Type, c.Status, c.Reason))
		}
		d.traceEvent(run.Name, "watch  ResearchRun rv=%s phase=%q reason=%q conditions=%v changed=%v message=%q",
			run.ResourceVersion, run.Status.Phase, run.Status.Reason, conds, d.changed("run/"+run.Name, run.Status), run.Status.Message)
	}
	if run.Status.Phase != v1alpha1.PhaseTerminated {
		return
	}
	d.markTerminal(run.Name, string(run.Status.Reason)+"/"+string(run.Status.Settlement))
}

func (d *driver) onSession(obj any) {
	se, ok := obj.(*v1alpha1.Session)
	if !ok || d.traceRuns == 0 {
		return
	}
	// Sessions are named like their runs (s-N for r-N).
	run := "r-" + strings.TrimPrefix(se.Name, "s-")
	d.traceEvent(run, "watch  Session %s rv=%s activeRun=%q runs=%+v changed=%v", se.Name, se.ResourceVersion, se.Status.ActiveRun, se.Status.Runs,
		d.changed("session/"+se.Name, map[string]any{"finalizers": se.Finalizers, "status": se.Status}))
}

func (d *driver) onJob(obj any) {
	job, ok := obj.(*batchv1.Job)
	if !ok {
		return
	}
	if d.traceRuns > 0 {
		var conds []string
		for _, c := range job.Status.Conditions {
			conds = append(conds, fmt.Sprintf("%s=%s", c.Type, c.Status))
		}
		d.traceEvent(job.Name, "watch  Job rv=%s active=%d succeeded=%d uncounted=%v conditions=%v", job.ResourceVersion,
			job.Status.Active, job.Status.Succeeded, job.Status.UncountedTerminatedPods != nil && len(job.Status.UncountedTerminatedPods.Succeeded) > 0, conds)
	}
	for _, c := range job.Status.Conditions {
		if c.Status == corev1.ConditionTrue && (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) {
			d.markTerminal(job.Name, string(c.Type))
			return
		}
	}
}

func (d *driver) markTerminal(name, outcome string) {
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	st := d.state(name)
	if st.terminal {
		return
	}
	st.terminal, st.terminalAt, st.outcome = true, now, outcome
	d.terminals.Add(1)
}

func (d *driver) work(ctx context.Context) {
	for {
		name, quit := d.q.Get()
		if quit {
			return
		}
		if err := d.sync(ctx, name); err != nil && ctx.Err() == nil {
			d.recordErr(err)
			d.mu.Lock()
			st := d.state(name)
			st.retries++
			retry := st.retries <= 30
			d.mu.Unlock()
			if retry {
				d.q.AddAfter(name, 100*time.Millisecond)
			}
		}
		d.q.Done(name)
	}
}

func (d *driver) recordErr(err error) {
	if d.errCount.Add(1) == 1 {
		d.firstErr.Store(err.Error())
	}
}

// sync moves one run a step further, as kubelet and agent would.
func (d *driver) sync(ctx context.Context, name string) error {
	d.mu.Lock()
	st := d.state(name)
	snap := *st
	d.mu.Unlock()
	if snap.terminal || snap.succeeded || snap.pod == "" {
		return nil
	}
	set := func(f func(*runState)) {
		d.mu.Lock()
		f(d.state(name))
		d.mu.Unlock()
	}
	if !snap.running {
		d.traceEvent(name, "driver pod Running")
		started := time.Now()
		if err := d.patchPod(ctx, snap.pod, podRunning(snap.containers, started)); err != nil {
			return fmt.Errorf("pod %s Running: %w", snap.pod, err)
		}
		set(func(s *runState) { s.running, s.startedAt = true, started })
		snap.startedAt = started
	}
	if d.sys == sysAgentrun {
		if !snap.attemptIn {
			return nil // the RunAttempt's event brings us back
		}
		if d.live != nil {
			// The run's agent talks to the gateway, and marks the pod
			// Succeeded itself once its publication is settled.
			if !snap.agentStarted {
				set(func(s *runState) { s.agentStarted = true })
				d.live.start(name, snap)
			}
			return nil
		}
		attempt := snap.pod // RunAttempt <run>-1 has the pod's name
		if !snap.facts {
			d.traceEvent(name, "driver RunAttempt facts: steps 3, finishProposed")
			at := time.Now()
			if err := d.patchAttempt(ctx, attempt, map[string]any{
				"steps":            3,
				"lastProgressStep": 3,
				"usage":            map[string]any{"modelRequests": 3, "toolCalls": 2},
				"finishProposed":   true,
				"heartbeatTime":    metav1.NewTime(at),
			}); err != nil {
				return fmt.Errorf("attempt %s facts: %w", attempt, err)
			}
			set(func(s *runState) { s.facts, s.factsAt = true, at })
		}
		if !snap.settled {
			if snap.attemptPh != v1alpha1.PhaseFinalizing {
				return nil // Finalizing on the RunAttempt brings us back
			}
			d.traceEvent(name, "driver RunAttempt publication settled Complete")
			if err := d.patchAttempt(ctx, attempt, map[string]any{
				"publication": map[string]any{
					"blocksPlanned": 3, "blocksCommitted": 3,
					"settlement": v1alpha1.SettlementComplete, "settled": true,
				},
			}); err != nil {
				return fmt.Errorf("attempt %s settlement: %w", attempt, err)
			}
			set(func(s *runState) { s.settled = true })
		}
	}
	d.traceEvent(name, "driver pod Succeeded (terminal fact)")
	at := time.Now()
	if err := d.patchPod(ctx, snap.pod, podSucceeded(snap.containers, snap.startedAt, at)); err != nil {
		return fmt.Errorf("pod %s Succeeded: %w", snap.pod, err)
	}
	set(func(s *runState) { s.succeeded, s.factAt = true, at })
	return nil
}

func (d *driver) patchPod(ctx context.Context, name string, status map[string]any) error {
	data, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: d.ns, Name: name}}
	return d.c.Status().Patch(ctx, pod, client.RawPatch(types.StrategicMergePatchType, data))
}

func (d *driver) patchAttempt(ctx context.Context, name string, status map[string]any) error {
	data, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	ra := &v1alpha1.RunAttempt{ObjectMeta: metav1.ObjectMeta{Namespace: d.ns, Name: name}}
	return d.facts.Status().Patch(ctx, ra, client.RawPatch(types.MergePatchType, data))
}

func podRunning(containers []string, at time.Time) map[string]any {
	t := metav1.NewTime(at)
	var cs []corev1.ContainerStatus
	for _, c := range containers {
		cs = append(cs, corev1.ContainerStatus{
			Name: c, Ready: true, Started: new(true), Image: "research-agent", ImageID: "research-agent@sha256:0",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t}},
		})
	}
	return map[string]any{
		"phase":     corev1.PodRunning,
		"startTime": t,
		"conditions": []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: t},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: t},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: t},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: t},
		},
		"containerStatuses": cs,
	}
}

func podSucceeded(containers []string, started, at time.Time) map[string]any {
	t := metav1.NewTime(at)
	var cs []corev1.ContainerStatus
	for _, c := range containers {
		cs = append(cs, corev1.ContainerStatus{
			Name: c, Ready: false, Started: new(false), Image: "research-agent", ImageID: "research-agent@sha256:0",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 0, Reason: "Completed", StartedAt: metav1.NewTime(started), FinishedAt: t,
			}},
		})
	}
	return map[string]any{
		"phase": corev1.PodSucceeded,
		"conditions": []corev1.PodCondition{
			{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, Reason: "PodCompleted", LastTransitionTime: t},
			{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "PodCompleted", LastTransitionTime: t},
		},
		"containerStatuses": cs,
	}
}

// create creates run (agentrun, in session) or Job name, recording the send time.
func (d *driver) create(ctx context.Context, name, session string, measured bool, scheduled time.Time) error {
	var obj client.Object
	switch d.sys {
	case sysJob:
		obj = &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Namespace: d.ns, Name: name},
			Spec: batchv1.JobSpec{
				Parallelism:  ptr.To[int32](1),
				Completions:  ptr.To[int32](1),
				BackoffLimit: ptr.To[int32](0),
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers:    []corev1.Container{{Name: "agent", Image: "research-agent"}},
				}},
			},
		}
	case sysAgentrun:
		obj = &v1alpha1.ResearchRun{
			ObjectMeta: metav1.ObjectMeta{Namespace: d.ns, Name: name},
			Spec: v1alpha1.ResearchRunSpec{
				SessionRef: v1alpha1.LocalObjectReference{Name: session},
				Goal:       "benchmark run",
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "agent", Image: "research-agent"}},
				}},
				Budget: v1alpha1.Budget{
					ModelRequests: 10, ToolCalls: 10,
					OutputReserve: v1alpha1.OutputReserve{ModelRequests: 2, ToolCalls: 2},
				},
			},
		}
		if d.budget != nil {
			obj.(*v1alpha1.ResearchRun).Spec.Budget = *d.budget
		}
		if d.gates != nil {
			obj.(*v1alpha1.ResearchRun).Spec.Gates = *d.gates
		}
	}
	if measured {
		d.traceRun(name)
	}
	d.traceEvent(name, "driver create")
	now := time.Now()
	d.mu.Lock()
	st := d.state(name)
	st.created, st.measured, st.scheduledAt = now, measured, scheduled
	d.mu.Unlock()
	return d.c.Create(ctx, obj)
}

// record is one measured run's timings.
type record struct {
	created, factAt, terminalAt, factsAt, finalizeAt, scheduledAt time.Time
	terminal                                                      bool
	outcome                                                       string
}

func (d *driver) records(names []string) []record {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]record, 0, len(names))
	for _, n := range names {
		st := d.state(n)
		out = append(out, record{
			created: st.created, factAt: st.factAt, terminalAt: st.terminalAt, factsAt: st.factsAt,
			finalizeAt: st.finalizeAt, scheduledAt: st.scheduledAt, terminal: st.terminal, outcome: st.outcome,
		})
	}
	return out
}

func (d *driver) terminalCount(names []string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, name := range names {
		if st := d.runs[name]; st != nil && st.terminal {
			n++
		}
	}
	return n
}

// waitTerminal waits until every named run is terminal, or limit passes.
func (d *driver) waitTerminal(ctx context.Context, names []string, limit time.Duration, alive func() error) error {
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := alive(); err != nil {
			return err
		}
		if n := d.terminalCount(names); n == len(names) {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d runs terminal after %s (driver errors: %d, first: %v)", n, len(names), limit, d.errCount.Load(), d.firstErr.Load())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// waitQuiet waits until the driver's watches have been silent for quiet.
func (d *driver) waitQuiet(ctx context.Context, quiet, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if time.Since(time.Unix(0, d.lastEvent.Load())) >= quiet {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
	return false
}

// objectSizes returns the mean JSON size of the objects each kind has in the
// driver's cache (a sample of up to 100), managedFields included.
func (d *driver) objectSizes(ctx context.Context) map[string]float64 {
	out := map[string]float64{}
	lists := map[string]client.ObjectList{"Pod": &corev1.PodList{}}
	switch d.sys {
	case sysJob:
		lists["Job"] = &batchv1.JobList{}
	case sysAgentrun:
		lists["ResearchRun"] = &v1alpha1.ResearchRunList{}
		lists["RunAttempt"] = &v1alpha1.RunAttemptList{}
		lists["Session"] = &v1alpha1.SessionList{}
	}
	for kind, list := range lists {
		if err := d.cache.List(ctx, list, client.InNamespace(d.ns), client.Limit(100)); err != nil {
			continue
		}
		items, err := meta.ExtractList(list)
		if err != nil || len(items) == 0 {
			continue
		}
		total := 0
		n := min(len(items), 100)
		for _, it := range items[:n] {
			b, _ := json.Marshal(it)
			total += len(b)
		}
		out[kind] = float64(total) / float64(n)
	}
	return out
}
