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
	"encoding/json"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// TestSessionSummaryCoalescing: a session's summary waits until its runs have
// been quiet for a second, or five seconds after their first change under
// constant change; its own spec, a new mode-change stamp or a missing
// finalizer are written at once.
func TestSessionSummaryCoalescing(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(t0)
	r := &SessionReconciler{Clock: clk, changes: &runChanges{pending: map[types.NamespacedName]changeWindow{}}}
	key := types.NamespacedName{Namespace: "ns", Name: "s"}
	session := &v1alpha1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", Generation: 1,
		Finalizers: []string{v1alpha1.SessionFinalizer}}, Status: v1alpha1.SessionStatus{ObservedGeneration: 1}}
	at := func(d time.Duration) { clk.SetTime(t0.Add(d)) }

	if w := r.coalesce(session); w != 0 {
		t.Fatalf("no run change pending: wait %s, want 0", w)
	}
	r.changes.record(key, t0)
	at(500 * time.Millisecond)
	r.changes.record(key, clk.Now())
	if w := r.coalesce(session); w != time.Second {
		t.Errorf("changes at 0 and 0.5s, now 0.5s: wait %s, want 1s (quiet for a second)", w)
	}
	for d := 600 * time.Millisecond; d < 5*time.Second; d += 600 * time.Millisecond {
		at(d)
		r.changes.record(key, clk.Now())
	}
	at(4800 * time.Millisecond)
	if w := r.coalesce(session); w != 200*time.Millisecond {
		t.Errorf("constant change: wait %s, want 200ms (five seconds after the first change)", w)
	}
	at(5 * time.Second)
	if w := r.coalesce(session); w != 0 {
		t.Errorf("five seconds after the first change: wait %s, want 0", w)
	}

	next := session.DeepCopy()
	next.Generation = 2
	if w := r.coalesce(next); w != 0 {
		t.Errorf("spec changed: wait %s, want 0", w)
	}
	at(4 * time.Second)
	stamp, _ := json.Marshal(v1alpha1.ModeChange{To: v1alpha1.ModeEdit, By: "alice", Time: metav1.NewTime(t0)})
	next = session.DeepCopy()
	next.Annotations = map[string]string{v1alpha1.AnnotationModeChange: string(stamp)}
	if w := r.coalesce(next); w != 0 {
		t.Errorf("mode change not recorded yet: wait %s, want 0", w)
	}
	next.Status.ModeHistory = []v1alpha1.ModeChange{{To: v1alpha1.ModeEdit, By: "alice", Time: metav1.NewTime(t0)}}
	if w := r.coalesce(next); w == 0 {
		t.Errorf("mode change already recorded: wait 0, want the coalescing wait")
	}
	r.changes.taken(key)
	if w := r.coalesce(session); w != 0 {
		t.Errorf("summary written: wait %s, want 0", w)
	}
}
