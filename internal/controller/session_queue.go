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
package controller

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/lifecycle"
)

// sessionRefIndex indexes ResearchRuns by spec.sessionRef.name.
const sessionRefIndex = "spec.sessionRef.name"

// Queue defaults when no policy is known (the RuntimePolicy CRD defaults its
// queue.defaultLimit and queue.defaultTimeout to the same values).
const (
	defaultQueueLimit   = 100
	defaultQueueTimeout = 30 * time.Minute
)

// queueSettings returns the session's effective queue limit and timeout: the
// session's override within the policy's bounds, else the policy's default.
func queueSettings(session *v1alpha1.Session, policy *v1alpha1.RuntimePolicy) (int32, time.Duration) {
	limit, timeout := int32(defaultQueueLimit), defaultQueueTimeout
	var maxLimit int32 = -1
	var maxTimeout time.Duration = -1
	if policy != nil {
		q := policy.Spec.Queue
		limit = q.DefaultLimit // 0: no run may wait behind the active one
		if q.MaxLimit > 0 {
			maxLimit = q.MaxLimit
		}
		if q.DefaultTimeout != nil {
			timeout = q.DefaultTimeout.Duration
		}
		if q.MaxTimeout != nil && q.MaxTimeout.Duration > 0 { // 0: no bound
			maxTimeout = q.MaxTimeout.Duration
		}
	}
	if session != nil {
		if session.Spec.Queue.Limit != nil {
			limit = *session.Spec.Queue.Limit
		}
		if session.Spec.Queue.Timeout != nil {
			timeout = session.Spec.Queue.Timeout.Duration
		}
	}
	if maxLimit >= 0 && limit > maxLimit {
		limit = maxLimit
	}
	if maxTimeout > 0 && (timeout > maxTimeout || timeout <= 0) {
		timeout = maxTimeout
	}
	return limit, timeout
}

// sessionRuns returns the runs of a session from the cache.
func (r *ResearchRunReconciler) sessionRuns(ctx context.Context, namespace, session string) ([]v1alpha1.ResearchRun, error) {
	list := &v1alpha1.ResearchRunList{}
	if err := r.List(ctx, list, client.InNamespace(namespace), client.MatchingFields{sessionRefIndex: session}); err != nil {
		return nil, fmt.Errorf("listing the runs of Session %s/%s: %w", namespace, session, err)
	}
	return list.Items, nil
}

// fifo orders runs as their session admits them (v1alpha1.AdmissionOrder).
func fifo(a, b *v1alpha1.ResearchRun) int {
	return v1alpha1.AdmissionOrder(a.CreationTimestamp.Time, a.Name, b.CreationTimestamp.Time, b.Name)
}

// queueEntries is the admission's view of a session's runs.
func queueEntries(runs []v1alpha1.ResearchRun) []lifecycle.QueueEntry {
	entries := make([]lifecycle.QueueEntry, len(runs))
	for i := range runs {
		o := &runs[i]
		entries[i] = lifecycle.QueueEntry{Name: o.Name, Created: o.CreationTimestamp.Time, Phase: o.Status.Phase,
			Deleting: o.DeletionTimestamp != nil, Child: o.Spec.Parent != nil}
	}
	return entries
}

// queueView says whether run holds its session and, if not, where it waits
// (lifecycle.Admit over the session's runs from the cache, and the starts
// this process wrote that the cache does not show yet). The run's own status
// write (Queued → Running) is the admission: only the leader writes it, and
// it remembers the start until its cache shows it, so with any number of
// workers and a lagging cache it never starts two runs of one session. It
// reports whether this pass admits run, which apply settles (admissions.settle).
func (r *ResearchRunReconciler) queueView(ctx context.Context, run *v1alpha1.ResearchRun, session *v1alpha1.Session,
	policy *v1alpha1.RuntimePolicy) (lifecycle.QueueView, bool, error) {
	if session == nil || run.Status.Phase.IsActive() || run.Spec.Parent != nil {
		// A child runs in its parent's slot: it does not queue behind it.
		// An active run keeps going: the queue only gates starting.
		return lifecycle.QueueView{Holder: true}, false, nil
	}
	limit, timeout := queueSettings(session, policy)
	key := client.ObjectKeyFromObject(session)
	adm := r.admissions.lock(key)
	defer r.admissions.unlock(key, adm)

	runs, err := r.sessionRuns(ctx, run.Namespace, session.Name)
	if err != nil {
		return lifecycle.QueueView{}, false, err
	}
	view := lifecycle.Admit(run.Name, adm.overlay(r.Clock.Now(), queueEntries(runs)), limit, timeout)
	if view.Position > view.Limit {
		// QueueFull is final: never decide it from a stale cache. Read the
		// session's runs live before believing the position.
		list := &v1alpha1.ResearchRunList{}
		if err := r.APIReader.List(ctx, list, client.InNamespace(run.Namespace)); err != nil {
			return view, false, fmt.Errorf("listing the runs of namespace %s live: %w", run.Namespace, err)
		}
		mine := slices.DeleteFunc(list.Items, func(o v1alpha1.ResearchRun) bool { return o.Spec.SessionRef.Name != session.Name })
		view = lifecycle.Admit(run.Name, adm.overlay(r.Clock.Now(), queueEntries(mine)), limit, timeout)
	}
	if !view.Holder {
		return view, false, nil
	}
	adm.admit(run.Name, r.Clock.Now())
	return view, true, nil
}

// admissionTimeout bounds how long a start this process wrote is assumed
// in flight when its cache never shows it (the write's outcome is always
// settled sooner; this only keeps a lost settlement from holding a session).
const admissionTimeout = time.Minute

// admissions is the admitting writer's memory, per session, of the start it
// wrote (or is writing) that its cache does not show yet, like the Job
// controller's expectations; and a lock per session, so two workers never
// admit two runs of one session at once.
type admissions struct {
	mu       sync.Mutex
	sessions map[types.NamespacedName]*admission
}

// admission is one session's entry: the run admitted and when.
type admission struct {
	mu   sync.Mutex
	refs int // lockers holding or waiting for mu; guarded by admissions.mu
	run  string
	at   time.Time
}

func newAdmissions() *admissions {
	return &admissions{sessions: map[types.NamespacedName]*admission{}}
}

// lock returns session key's entry, locked.
func (a *admissions) lock(key types.NamespacedName) *admission {
	a.mu.Lock()
	e := a.sessions[key]
	if e == nil {
		e = &admission{}
		a.sessions[key] = e
	}
	e.refs++
	a.mu.Unlock()
	e.mu.Lock()
	return e
}

// unlock releases e, forgetting the session when nothing is in flight.
func (a *admissions) unlock(key types.NamespacedName, e *admission) {
	e.mu.Unlock()
	a.mu.Lock()
	defer a.mu.Unlock()
	e.refs--
	if e.refs == 0 && e.run == "" {
		delete(a.sessions, key)
	}
}

// overlay marks the admitted run in entries, or forgets it once entries show
// it started, ended or gone (the cache caught up), or after admissionTimeout.
func (e *admission) overlay(now time.Time, entries []lifecycle.QueueEntry) []lifecycle.QueueEntry {
	if e.run == "" {
		return entries
	}
	if now.Sub(e.at) > admissionTimeout {
		e.run = ""
		return entries
	}
	for i := range entries {
		if entries[i].Name != e.run {
			continue
		}
		if p := entries[i].Phase; p == "" || p == v1alpha1.PhasePending || p == v1alpha1.PhaseQueued {
			entries[i].Admitted = true
			return entries
		}
		break
	}
	e.run = "" // started, ended, or deleted: the cache shows the outcome
	return entries
}

func (e *admission) admit(run string, now time.Time) {
	e.run, e.at = run, now
}

// settle records the outcome of the status write of a pass that admitted
// run: a start that was written (or may have been: the write's error is
// not a refusal) stays remembered until the cache shows it; otherwise the
// session is free again.
func (a *admissions) settle(key types.NamespacedName, run string, started bool) {
	e := a.lock(key)
	defer a.unlock(key, e)
	if !started && e.run == run {
		e.run = ""
	}
}

// queueChanged enqueues the waiting runs of a session when one of its runs
// leaves the line or the session — it starts, ends (Terminated) or is
// deleted — since every position behind it moves and, once the holder is
// gone, the head of the line may start. This replaces the session claim's
// release: nothing else tells a waiting run that the session is free.
func (r *ResearchRunReconciler) queueChanged() handler.EventHandler {
	enqueue := func(ctx context.Context, run *v1alpha1.ResearchRun, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		runs, err := r.sessionRuns(ctx, run.Namespace, run.Spec.SessionRef.Name)
		if err != nil {
			return
		}
		for i := range runs {
			if o := &runs[i]; o.Name != run.Name && o.Status.Phase.IsWaiting() {
				q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o)})
			}
		}
	}
	return handler.TypedFuncs[client.Object, reconcile.Request]{
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			old, okOld := e.ObjectOld.(*v1alpha1.ResearchRun)
			run, okNew := e.ObjectNew.(*v1alpha1.ResearchRun)
			if !okOld || !okNew {
				return
			}
			started := old.Status.Phase.IsWaiting() && !run.Status.Phase.IsWaiting()
			ended := old.Status.Phase != v1alpha1.PhaseTerminated && run.Status.Phase == v1alpha1.PhaseTerminated
			deleting := old.DeletionTimestamp == nil && run.DeletionTimestamp != nil && run.Status.Phase != v1alpha1.PhaseTerminated
			if started || ended || deleting {
				enqueue(ctx, run, q)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if run, ok := e.Object.(*v1alpha1.ResearchRun); ok && run.Status.Phase != v1alpha1.PhaseTerminated {
				enqueue(ctx, run, q)
			}
		},
	}
}

// runsOfSession maps a Session event to its runs that are not Terminated.
func (r *ResearchRunReconciler) runsOfSession(ctx context.Context, obj client.Object) []reconcile.Request {
	runs, err := r.sessionRuns(ctx, obj.GetNamespace(), obj.GetName())
	if err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range runs {
		if runs[i].Status.Phase == v1alpha1.PhaseTerminated {
			continue
		}
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: runs[i].Namespace, Name: runs[i].Name}})
	}
	return reqs
}

// pendingRunsOfPolicy maps a RuntimePolicy event to the runs that wait for it
// (Pending runs of its sessions), so they start as soon as it is resolved.
func (r *ResearchRunReconciler) pendingRunsOfPolicy(ctx context.Context, obj client.Object) []reconcile.Request {
	sessions := &v1alpha1.SessionList{}
	if err := r.List(ctx, sessions, client.InNamespace(obj.GetNamespace()), client.MatchingFields{policyRefIndex: obj.GetName()}); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range sessions.Items {
		runs, err := r.sessionRuns(ctx, obj.GetNamespace(), sessions.Items[i].Name)
		if err != nil {
			return nil
		}
		for j := range runs {
			if p := runs[j].Status.Phase; p == "" || p == v1alpha1.PhasePending {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&runs[j])})
			}
		}
	}
	return reqs
}
