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
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// conflictRetry is how soon a pass that lost an optimistic-concurrency race
// runs again, from fresh cache contents.
const conflictRetry = 10 * time.Millisecond

// patchStatusIfChanged writes next's status when next differs (semantically)
// from orig, the object as read: a merge patch with a resourceVersion
// precondition, so a write can never undo one it did not see (a run's claim
// of its session, a newer decision). A conflict means the object changed
// since it was read; it is counted in agentrun_controller_conflicts_total
// and returned (wrapped), and the next pass decides again from fresh facts.
// Every status write of the operator goes through here. It reports whether
// it wrote.
func patchStatusIfChanged(ctx context.Context, c client.Client, orig, next client.Object) (bool, error) {
	if equality.Semantic.DeepEqual(orig, next) {
		return false, nil
	}
	err := c.Status().Patch(ctx, next, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	if err != nil {
		resource := resourceOf(orig)
		if apierrors.IsConflict(err) {
			conflicts.WithLabelValues(resource).Inc()
		}
		return false, fmt.Errorf("patching the status of %s %s: %w", resource, klog.KObj(orig), err)
	}
	return true, nil
}

// requeueOnConflict turns a conflict (someone wrote the object since the cache
// showed it; counted where it was refused) into a quick retry; other errors
// go to the rate limiter.
func requeueOnConflict(err error) (ctrl.Result, error) {
	if apierrors.IsConflict(err) {
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	}
	return ctrl.Result{}, err
}

// resourceOf names obj's resource for metrics and errors.
func resourceOf(obj client.Object) string {
	switch obj.(type) {
	case *v1alpha1.ResearchRun:
		return "researchruns"
	case *v1alpha1.Session:
		return "sessions"
	case *v1alpha1.RuntimePolicy:
		return "runtimepolicies"
	case *v1alpha1.RunAttempt:
		return "runattempts"
	}
	return fmt.Sprintf("%T", obj)
}

// progressOnly reports whether next differs from cur only in what the run
// has used and done — the ledger, steps, budget used and remaining, the gate
// counts, and the message and condition messages that quote them (a message
// that changes while no count does is not progress) — with the
// phase, reason, attempt, grant and every condition's status and reason
// unchanged. Such a write reports progress and decides nothing: the facts it
// summarizes are already durable in the RunAttempts' status.
func progressOnly(cur, next *v1alpha1.ResearchRunStatus) bool {
	counted := !equality.Semantic.DeepEqual(cur.Ledger, next.Ledger) || cur.Steps != next.Steps ||
		cur.Budget.Used != next.Budget.Used || cur.Budget.Remaining != next.Budget.Remaining ||
		!equality.Semantic.DeepEqual(cur.Gates, next.Gates)
	if !counted {
		return false // a message that changes alone tells something new (a wait, a cause)
	}
	n := next.DeepCopy()
	n.Ledger, n.Steps, n.Budget.Used, n.Budget.Remaining = cur.Ledger, cur.Steps, cur.Budget.Used, cur.Budget.Remaining
	n.Gates, n.Message = cur.Gates, cur.Message
	for i := range n.Conditions {
		c := &n.Conditions[i]
		if o := meta.FindStatusCondition(cur.Conditions, c.Type); o != nil && o.Status == c.Status && o.Reason == c.Reason {
			c.Message, c.LastTransitionTime, c.ObservedGeneration = o.Message, o.LastTransitionTime, o.ObservedGeneration
		}
	}
	return equality.Semantic.DeepEqual(cur, n)
}

// progressWrites paces the status writes of runs that report progress only
// (progressOnly): at most one per interval per run, so an agent's every
// model call does not cost its run a status write. A write that decides
// anything is never held back.
type progressWrites struct {
	clock    clock.PassiveClock
	interval time.Duration
	mu       sync.Mutex
	last     map[types.NamespacedName]time.Time
}

// hold says how long a progress-only write of key should wait: 0 when it may
// be written now.
func (p *progressWrites) hold(key types.NamespacedName) time.Duration {
	if p == nil || p.interval <= 0 {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.last[key]
	if !ok {
		return 0
	}
	return max(t.Add(p.interval).Sub(p.clock.Now()), 0)
}

// wrote records a status write of key.
func (p *progressWrites) wrote(key types.NamespacedName) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.last[key] = p.clock.Now()
}

func (p *progressWrites) forget(key types.NamespacedName) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.last, key)
}
