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
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
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

// fifo orders runs by creation time, name breaking ties.
func fifo(a, b *v1alpha1.ResearchRun) int {
	if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

// queueView says whether run holds its session and, if not, where it waits.
// A run claims a free session by writing Session.status.activeRun with a
// resourceVersion precondition, so with any number of workers and a stale
// cache at most one claim succeeds; the loser sees a conflict and tries again.
func (r *ResearchRunReconciler) queueView(ctx context.Context, run *v1alpha1.ResearchRun, session *v1alpha1.Session, policy *v1alpha1.RuntimePolicy) (lifecycle.QueueView, error) {
	if session == nil || run.Status.Phase.IsActive() {
		// An active run keeps going: the queue only gates starting.
		return lifecycle.QueueView{Holder: true}, nil
	}
	limit, timeout := queueSettings(session, policy)
	view := lifecycle.QueueView{Limit: limit, Timeout: timeout}
	if session.Status.ActiveRun == run.Name {
		view.Holder = true
		return view, nil
	}

	runs, err := r.sessionRuns(ctx, run.Namespace, session.Name)
	if err != nil {
		return view, err
	}
	view, holderLive := position(view, run, session, runs)
	if view.Position > view.Limit {
		// QueueFull is final: never decide it from a stale cache. Read the
		// session and its runs live before believing the position.
		live := &v1alpha1.Session{}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(session), live); err != nil {
			return view, fmt.Errorf("reading Session %s live: %w", klog.KObj(session), err)
		}
		list := &v1alpha1.ResearchRunList{}
		if err := r.APIReader.List(ctx, list, client.InNamespace(run.Namespace)); err != nil {
			return view, fmt.Errorf("listing the runs of namespace %s live: %w", run.Namespace, err)
		}
		var mine []v1alpha1.ResearchRun
		for i := range list.Items {
			if list.Items[i].Spec.SessionRef.Name == session.Name {
				mine = append(mine, list.Items[i])
			}
		}
		session = live
		if session.Status.ActiveRun == run.Name {
			return lifecycle.QueueView{Holder: true, Limit: limit, Timeout: timeout}, nil
		}
		view, holderLive = position(lifecycle.QueueView{Limit: limit, Timeout: timeout}, run, session, mine)
	}
	if holderLive || view.Position != 1 {
		return view, nil
	}

	next := session.DeepCopy()
	next.Status.ActiveRun = run.Name
	if _, err := patchStatusIfChanged(ctx, r.Client, session, next); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return view, errClaimLost
		}
		return view, err
	}
	view.Holder, view.Position = true, 0
	return view, nil
}

// position computes run's place among the session's waiting runs (FIFO) and
// whether a live run holds the session.
func position(view lifecycle.QueueView, run *v1alpha1.ResearchRun, session *v1alpha1.Session, runs []v1alpha1.ResearchRun) (lifecycle.QueueView, bool) {
	holderLive := false
	var waiting []*v1alpha1.ResearchRun
	for i := range runs {
		o := &runs[i]
		if o.Status.Phase == v1alpha1.PhaseTerminated || o.DeletionTimestamp != nil {
			continue
		}
		if o.Name == session.Status.ActiveRun {
			holderLive = true
			continue
		}
		if o.Status.Phase.IsActive() {
			// Holds the session by phase even if the session's status lost it.
			holderLive = true
			continue
		}
		waiting = append(waiting, o)
	}
	slices.SortFunc(waiting, fifo)
	for i, o := range waiting {
		if o.Name == run.Name {
			view.Position = int32(i + 1)
			break
		}
	}
	if view.Position == 0 {
		// Not in the list yet: it is the newest.
		view.Position = int32(len(waiting) + 1)
	}
	return view, holderLive
}

// releaseSession frees the session a terminated run holds, so the next run in
// line can claim it.
func (r *ResearchRunReconciler) releaseSession(ctx context.Context, run *v1alpha1.ResearchRun) error {
	session := &v1alpha1.Session{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: run.Spec.SessionRef.Name}, session); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("reading Session %s/%s to release it: %w", run.Namespace, run.Spec.SessionRef.Name, err)
	}
	if session.Status.ActiveRun != run.Name {
		return nil
	}
	next := session.DeepCopy()
	next.Status.ActiveRun = ""
	_, err := patchStatusIfChanged(ctx, r.Client, session, next)
	return client.IgnoreNotFound(err)
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
