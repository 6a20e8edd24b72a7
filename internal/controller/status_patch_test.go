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
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// TestProgressOnly: usage, steps and the messages quoting them are progress;
// a phase, reason, attempt, grant or condition change is a decision.
func TestProgressOnly(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	cur := v1alpha1.ResearchRunStatus{
		Phase: v1alpha1.PhaseRunning, Attempt: 1, Steps: 2, Message: "attempt 1 running: 2/40 model requests",
		Ledger: []v1alpha1.AttemptLedger{{Attempt: 1, Steps: 2, Used: v1alpha1.Usage{ModelRequests: 2}}},
		Budget: v1alpha1.BudgetStatus{Used: v1alpha1.Usage{ModelRequests: 2}, Remaining: v1alpha1.Usage{ModelRequests: 40},
			Granted: v1alpha1.Usage{ModelRequests: 40}},
		Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Running",
			Message: "2 steps", LastTransitionTime: t0}},
	}
	progress := func(s *v1alpha1.ResearchRunStatus) {
		s.Steps, s.Message = 3, "attempt 1 running: 3/40 model requests"
		s.Ledger = []v1alpha1.AttemptLedger{{Attempt: 1, Steps: 3, Used: v1alpha1.Usage{ModelRequests: 3}}}
		s.Budget.Used.ModelRequests, s.Budget.Remaining.ModelRequests = 3, 39
		s.Conditions[0].Message = "3 steps"
	}
	cases := []struct {
		name   string
		change func(*v1alpha1.ResearchRunStatus)
		want   bool
	}{
		{"usage, steps, message", progress, true},
		{"the message alone (a new wait, a cause)", func(s *v1alpha1.ResearchRunStatus) {
			s.Message = "the pod of attempt 1 stopped (Succeeded); waiting up to 3s for the gateway's last facts"
		}, false},
		{"phase", func(s *v1alpha1.ResearchRunStatus) { progress(s); s.Phase = v1alpha1.PhaseFinalizing }, false},
		{"reason", func(s *v1alpha1.ResearchRunStatus) { s.Reason = v1alpha1.ReasonBudgetExhausted }, false},
		{"attempt", func(s *v1alpha1.ResearchRunStatus) { s.Attempt = 2 }, false},
		{"grant", func(s *v1alpha1.ResearchRunStatus) { s.Budget.Granted.ModelRequests = 2 }, false},
		{"a condition's status", func(s *v1alpha1.ResearchRunStatus) { s.Conditions[0].Status = metav1.ConditionFalse }, false},
		{"a new condition", func(s *v1alpha1.ResearchRunStatus) {
			s.Conditions = append(s.Conditions, metav1.Condition{Type: v1alpha1.ConditionStalled, Status: metav1.ConditionTrue, Reason: "x"})
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			next := cur.DeepCopy()
			tc.change(next)
			if got := progressOnly(&cur, next); got != tc.want {
				t.Errorf("progressOnly = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestProgressWritesPacing: after a write of a run, its next progress-only
// write waits out the interval; an unknown run writes at once.
func TestProgressWritesPacing(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	p := &progressWrites{clock: clk, interval: 5 * time.Second, last: map[types.NamespacedName]time.Time{}}
	key := types.NamespacedName{Namespace: "ns", Name: "r"}
	if h := p.hold(key); h != 0 {
		t.Fatalf("no write yet: hold %s", h)
	}
	p.wrote(key)
	clk.SetTime(clk.Now().Add(2 * time.Second))
	if h := p.hold(key); h != 3*time.Second {
		t.Errorf("2s after a write: hold %s, want 3s", h)
	}
	clk.SetTime(clk.Now().Add(3 * time.Second))
	if h := p.hold(key); h != 0 {
		t.Errorf("5s after a write: hold %s, want 0", h)
	}
	p.forget(key)
	if h := p.hold(key); h != 0 {
		t.Errorf("forgotten: hold %s, want 0", h)
	}
}
