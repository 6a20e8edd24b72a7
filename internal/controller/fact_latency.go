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
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// factClock remembers, per run, when the oldest fact not yet acted on arrived
// (a RunAttempt or pod event), so the fact-to-decision latency can be measured.
type factClock struct {
	clock clock.PassiveClock
	mu    sync.Mutex
	first map[types.NamespacedName]time.Time
}

func newFactClock(c clock.PassiveClock) *factClock {
	return &factClock{clock: c, first: map[types.NamespacedName]time.Time{}}
}

func (f *factClock) record(key types.NamespacedName) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.first[key]; !ok {
		f.first[key] = f.clock.Now()
	}
}

// take returns how long the oldest pending fact of key waited, and clears it.
func (f *factClock) take(key types.NamespacedName, now time.Time) (time.Duration, bool) {
	if f == nil {
		return 0, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.first[key]
	delete(f.first, key)
	if !ok {
		return 0, false
	}
	return now.Sub(t), true
}

func (f *factClock) forget(key types.NamespacedName) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.first, key)
}

// terminalFactPriority is the work-queue priority of a fact that ends or
// finalizes a run (a pod that stopped or went away, a proposed finish, a
// settled publication): above the default priority of new runs, so a burst
// of creations never delays the decision that frees a session and a slot.
const terminalFactPriority = 10

// wrap returns an event handler that enqueues the controlling ResearchRun of
// the event's object and records when the fact arrived. Terminal facts are
// enqueued at terminalFactPriority.
func (f *factClock) wrap() handler.EventHandler {
	enqueue := func(obj client.Object, terminal bool, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		ref := metav1.GetControllerOf(obj)
		if ref == nil || ref.Kind != "ResearchRun" || ref.APIVersion != v1alpha1.GroupVersion.String() {
			return
		}
		key := types.NamespacedName{Namespace: obj.GetNamespace(), Name: ref.Name}
		f.record(key)
		req := reconcile.Request{NamespacedName: key}
		if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok && terminal {
			pq.AddWithOpts(priorityqueue.AddOpts{Priority: new(terminalFactPriority)}, req)
			return
		}
		q.Add(req)
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(e.Object, false, q)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(e.ObjectNew, terminalFact(e.ObjectOld, e.ObjectNew), q)
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(e.Object, true, q)
		},
		GenericFunc: func(_ context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(e.Object, false, q)
		},
	}
}

// terminalFact reports whether an update carries a fact that ends or
// finalizes a run: a pod that stopped or is being deleted, an attempt that
// proposed its finish or settled its publication.
func terminalFact(old, obj client.Object) bool {
	if obj.GetDeletionTimestamp() != nil && old.GetDeletionTimestamp() == nil {
		return true
	}
	switch n := obj.(type) {
	case *corev1.Pod:
		o, ok := old.(*corev1.Pod)
		stopped := func(p corev1.PodPhase) bool { return p == corev1.PodSucceeded || p == corev1.PodFailed }
		return ok && stopped(n.Status.Phase) && !stopped(o.Status.Phase)
	case *v1alpha1.RunAttempt:
		o, ok := old.(*v1alpha1.RunAttempt)
		return ok && ((n.Status.FinishProposed && !o.Status.FinishProposed) ||
			(n.Status.Publication.Settled && !o.Status.Publication.Settled))
	}
	return false
}
