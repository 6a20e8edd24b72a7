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

package chaos

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// Checker watches one namespace's ResearchRuns, RunAttempts and pods, from
// the test process straight to kube-apiserver (never through the operator's
// fault proxy), and records every break of an invariant as it happens:
//
//   - two runs of one session active (Running, Recovering, Finalizing) at once;
//   - two pods of one run alive (not Succeeded or Failed, not yet removed) at once;
//   - a fact accepted and then lost: a RunAttempt's usage, steps or
//     committed blocks going down, its finishProposed or settled going from
//     true to false, a ledger entry of a run going down or disappearing.
//
// Each watch resumes from the last resourceVersion it saw; when the API
// server answers 410 Gone (or is restarted and has no history) it relists
// and applies the list in resourceVersion order, so that a relist cannot
// invent an overlap that the write order excludes.
type Checker struct {
	c  client.WithWatch
	ns string

	mu        sync.Mutex
	runs      map[string]*runSeen
	attempts  map[string]*attemptSeen
	pods      map[string]map[string]bool // run → pods alive
	podRun    map[string]string          // pod → run
	overlaps  []string
	podOverl  []string
	lost      []string
	relists   int
	watchErrs int
}

type runSeen struct {
	phase      v1alpha1.Phase
	session    string
	terminal   time.Time // first seen Terminated (status.completionTime when set)
	ledger     map[int32]v1alpha1.Usage
	rv         int64
	terminated bool
}

type attemptSeen struct {
	run      string
	usage    v1alpha1.Usage
	steps    int64
	blocks   int32
	finish   bool
	settled  bool
	awaiting Awaiting
}

// NewChecker makes a checker of namespace ns; Start starts its watches.
func NewChecker(c client.WithWatch, ns string) *Checker {
	return &Checker{c: c, ns: ns, runs: map[string]*runSeen{}, attempts: map[string]*attemptSeen{},
		pods: map[string]map[string]bool{}, podRun: map[string]string{}}
}

// Start runs the three watches until ctx ends.
func (k *Checker) Start(ctx context.Context) {
	go k.loop(ctx, func() client.ObjectList { return &v1alpha1.ResearchRunList{} }, k.applyRun, nil)
	go k.loop(ctx, func() client.ObjectList { return &v1alpha1.RunAttemptList{} }, k.applyAttempt, nil)
	go k.loop(ctx, func() client.ObjectList { return &corev1.PodList{} }, k.applyPod, k.resyncPods)
}

func rvOf(o client.Object) int64 {
	n, _ := strconv.ParseInt(o.GetResourceVersion(), 10, 64)
	return n
}

// loop lists, then watches from the list's resourceVersion, resuming each
// cut watch where it stopped and relisting on 410 Gone.
func (k *Checker) loop(ctx context.Context, newList func() client.ObjectList, apply func(client.Object, bool),
	resync func(map[string]bool)) {
	for ctx.Err() == nil {
		list := newList()
		if err := k.c.List(ctx, list, client.InNamespace(k.ns)); err != nil {
			k.pause(ctx)
			continue
		}
		objs, err := meta.ExtractList(list)
		if err != nil {
			panic(err)
		}
		items := make([]client.Object, 0, len(objs))
		present := map[string]bool{}
		for _, o := range objs {
			co := o.(client.Object)
			items = append(items, co)
			present[co.GetName()] = true
		}
		slices.SortFunc(items, func(a, b client.Object) int { return int(rvOf(a) - rvOf(b)) })
		for _, o := range items {
			apply(o, false)
		}
		if resync != nil {
			resync(present)
		}
		rv := list.GetResourceVersion()
		for ctx.Err() == nil {
			next, gone := k.watchOnce(ctx, newList, apply, rv)
			if gone {
				break
			}
			rv = next
		}
		k.mu.Lock()
		k.relists++
		k.mu.Unlock()
	}
}

// watchOnce watches from rv until the watch ends; it returns the last
// resourceVersion seen and whether the API server said 410 Gone.
func (k *Checker) watchOnce(ctx context.Context, newList func() client.ObjectList, apply func(client.Object, bool),
	rv string) (string, bool) {
	w, err := k.c.Watch(ctx, newList(), &client.ListOptions{Namespace: k.ns,
		Raw: &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}})
	if err != nil {
		if apierrors.IsGone(err) || apierrors.IsResourceExpired(err) {
			return rv, true
		}
		k.countWatchErr()
		k.pause(ctx)
		return rv, false
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		switch ev.Type {
		case watch.Error:
			if st, ok := ev.Object.(*metav1.Status); ok && st.Code == 410 {
				return rv, true
			}
			k.countWatchErr()
			return rv, false
		case watch.Bookmark:
			if o, ok := ev.Object.(client.Object); ok {
				rv = o.GetResourceVersion()
			}
		default:
			o, ok := ev.Object.(client.Object)
			if !ok {
				continue
			}
			apply(o, ev.Type == watch.Deleted)
			rv = o.GetResourceVersion()
		}
	}
	return rv, false
}

func (k *Checker) countWatchErr() {
	k.mu.Lock()
	k.watchErrs++
	k.mu.Unlock()
}

func (k *Checker) pause(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(300 * time.Millisecond):
	}
}

func (k *Checker) applyRun(o client.Object, deleted bool) {
	run, ok := o.(*v1alpha1.ResearchRun)
	if !ok || deleted {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	s := k.runs[run.Name]
	if s == nil {
		s = &runSeen{ledger: map[int32]v1alpha1.Usage{}}
		k.runs[run.Name] = s
	}
	rv := rvOf(run)
	if rv <= s.rv {
		return // a relist of what the watch already showed
	}
	s.rv = rv
	s.phase, s.session = run.Status.Phase, run.Spec.SessionRef.Name
	if run.Status.Phase == v1alpha1.PhaseTerminated && !s.terminated {
		s.terminated = true
		s.terminal = time.Now()
		if run.Status.CompletionTime != nil {
			s.terminal = run.Status.CompletionTime.Time
		}
	}
	seen := map[int32]bool{}
	for _, l := range run.Status.Ledger {
		seen[l.Attempt] = true
		if prev, ok := s.ledger[l.Attempt]; ok && (l.Used.ModelRequests < prev.ModelRequests ||
			l.Used.ToolCalls < prev.ToolCalls || l.Used.Tokens < prev.Tokens) {
			k.lost = append(k.lost, fmt.Sprintf("%s ledger of attempt %d went from %+v to %+v (rv %d)",
				run.Name, l.Attempt, prev, l.Used, rv))
		}
		s.ledger[l.Attempt] = l.Used
	}
	for a := range s.ledger {
		if !seen[a] {
			k.lost = append(k.lost, fmt.Sprintf("%s ledger entry of attempt %d disappeared (rv %d)", run.Name, a, rv))
			delete(s.ledger, a)
		}
	}
	if !run.Status.Phase.IsActive() {
		return
	}
	var active []string
	for name, r := range k.runs {
		if r.session == s.session && r.phase.IsActive() {
			active = append(active, name)
		}
	}
	if len(active) > 1 {
		slices.Sort(active)
		k.overlaps = append(k.overlaps, fmt.Sprintf("session %s: %v active at once (rv %d)", s.session, active, rv))
	}
}

func (k *Checker) applyAttempt(o client.Object, deleted bool) {
	ra, ok := o.(*v1alpha1.RunAttempt)
	if !ok || deleted {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	s := k.attempts[ra.Name]
	st := ra.Status
	cur := &attemptSeen{run: ra.Labels[v1alpha1.LabelRun], usage: st.Usage, steps: st.Steps,
		blocks: st.Publication.BlocksCommitted, finish: st.FinishProposed, settled: st.Publication.Settled}
	if len(st.AwaitingApproval) > 0 {
		cur.awaiting = Awaiting{ActionID: st.AwaitingApproval[0].ActionID}
		if at := st.AwaitingApproval[0].RequestedAt; at != nil {
			cur.awaiting.Since = at.Time
		}
	}
	if s != nil {
		var what []string
		if cur.usage.ModelRequests < s.usage.ModelRequests || cur.usage.ToolCalls < s.usage.ToolCalls ||
			cur.usage.Tokens < s.usage.Tokens {
			what = append(what, fmt.Sprintf("usage %+v → %+v", s.usage, cur.usage))
		}
		if cur.steps < s.steps {
			what = append(what, fmt.Sprintf("steps %d → %d", s.steps, cur.steps))
		}
		if cur.blocks < s.blocks {
			what = append(what, fmt.Sprintf("blocksCommitted %d → %d", s.blocks, cur.blocks))
		}
		if s.finish && !cur.finish {
			what = append(what, "finishProposed true → false")
		}
		if s.settled && !cur.settled {
			what = append(what, "settled true → false")
		}
		if len(what) > 0 {
			k.lost = append(k.lost, fmt.Sprintf("RunAttempt %s: %v (rv %s)", ra.Name, what, ra.ResourceVersion))
		}
	}
	k.attempts[ra.Name] = cur
}

func (k *Checker) applyPod(o client.Object, deleted bool) {
	pod, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	run := pod.Labels[v1alpha1.LabelRun]
	if run == "" {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	alive := !deleted && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
	set := k.pods[run]
	if set == nil {
		set = map[string]bool{}
		k.pods[run] = set
	}
	k.podRun[pod.Name] = run
	if !alive {
		delete(set, pod.Name)
		return
	}
	set[pod.Name] = true
	if len(set) > 1 {
		names := make([]string, 0, len(set))
		for n := range set {
			names = append(names, n)
		}
		slices.Sort(names)
		k.podOverl = append(k.podOverl, fmt.Sprintf("run %s: pods %v alive at once (rv %s)", run, names, pod.ResourceVersion))
	}
}

// resyncPods forgets the pods a relist no longer shows.
func (k *Checker) resyncPods(present map[string]bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for pod, run := range k.podRun {
		if !present[pod] {
			delete(k.pods[run], pod)
			delete(k.podRun, pod)
		}
	}
}

// Terminated says whether the run was seen Terminated.
func (k *Checker) Terminated(run string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	s := k.runs[run]
	return s != nil && s.terminated
}

// TerminalTime returns when the run ended (its completionTime), or zero.
func (k *Checker) TerminalTime(run string) time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	if s := k.runs[run]; s != nil {
		return s.terminal
	}
	return time.Time{}
}

// Awaiting is a request for approval: the action, and when it was made
// (approvals are one-shot and answer only a request made before them, so a
// request asked again, by a new attempt, needs a new answer).
type Awaiting struct {
	ActionID string
	Since    time.Time
}

// Awaiting returns, per run, the request its latest attempt waits on.
func (k *Checker) Awaiting() map[string]Awaiting {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := map[string]Awaiting{}
	for _, a := range k.attempts {
		if a.awaiting.ActionID != "" {
			out[a.run] = a.awaiting
		}
	}
	return out
}

// Breaks is what the checker saw go wrong.
type Breaks struct {
	SessionOverlaps []string `json:"sessionOverlaps,omitempty"`
	PodOverlaps     []string `json:"podOverlaps,omitempty"`
	FactsLost       []string `json:"factsLost,omitempty"`
	Relists         int      `json:"relists"`
}

// Breaks returns a copy of what the checker recorded.
func (k *Checker) Breaks() Breaks {
	k.mu.Lock()
	defer k.mu.Unlock()
	return Breaks{
		SessionOverlaps: slices.Clone(k.overlaps), PodOverlaps: slices.Clone(k.podOverl),
		FactsLost: slices.Clone(k.lost), Relists: k.relists,
	}
}
