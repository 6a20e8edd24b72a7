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

package lifecycle

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// TestChildStop: what a parent's state asks of its children.
func TestChildStop(t *testing.T) {
	type want struct {
		Stop  v1alpha1.StopRequest
		Cause string
	}
	cases := map[string]struct {
		parent     ParentView
		onFinalize v1alpha1.StopRequest
		want       want
	}{
		"a working parent asks nothing": {
			parent: ParentView{Name: "p", Phase: v1alpha1.PhaseRunning}, want: want{},
		},
		"a finalizing parent asks its children to finalize by default": {
			parent: ParentView{Name: "p", Phase: v1alpha1.PhaseFinalizing, Reason: v1alpha1.ReasonDeadlineExceeded},
			want:   want{v1alpha1.StopFinalize, "its parent run p is finalizing (DeadlineExceeded)"},
		},
		"a finalizing parent cancels its children when the policy says Cancel": {
			parent: ParentView{Name: "p", Phase: v1alpha1.PhaseFinalizing, Reason: v1alpha1.ReasonCompleted}, onFinalize: v1alpha1.StopCancel,
			want: want{v1alpha1.StopCancel, "its parent run p is finalizing (Completed)"},
		},
		"a terminated parent cancels its children whatever the policy says": {
			parent: ParentView{Name: "p", Phase: v1alpha1.PhaseTerminated, Reason: v1alpha1.ReasonCompleted}, onFinalize: v1alpha1.StopFinalize,
			want: want{v1alpha1.StopCancel, "its parent run p ended (Completed)"},
		},
		"a deleted parent cancels its children": {
			parent: ParentView{Name: "p", Gone: true, Phase: v1alpha1.PhaseRunning},
			want:   want{v1alpha1.StopCancel, "its parent run p was deleted"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			stop, cause := ChildStop(tc.parent, tc.onFinalize)
			if diff := cmp.Diff(tc.want, want{stop, cause}); diff != "" {
				t.Errorf("ChildStop (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRaiseStop: a stop is only ever raised, as the API allows.
func TestRaiseStop(t *testing.T) {
	cases := map[string]struct {
		cur, stop v1alpha1.StopRequest
		want      bool
	}{
		"none to Finalize":     {"", v1alpha1.StopFinalize, true},
		"none to Cancel":       {"", v1alpha1.StopCancel, true},
		"Finalize to Cancel":   {v1alpha1.StopFinalize, v1alpha1.StopCancel, true},
		"Cancel to Finalize":   {v1alpha1.StopCancel, v1alpha1.StopFinalize, false},
		"Finalize to Finalize": {v1alpha1.StopFinalize, v1alpha1.StopFinalize, false},
		"nothing asked":        {v1alpha1.StopFinalize, "", false},
	}
	for name, tc := range cases {
		if got := RaiseStop(tc.cur, tc.stop); got != tc.want {
			t.Errorf("%s: RaiseStop(%q, %q) = %v, want %v", name, tc.cur, tc.stop, got, tc.want)
		}
	}
}

// TestFoldChildren: a carve is held whole until its child is seen ended,
// then only what the child used stays spent; a child the parent never
// carved returns nothing (a run cannot free a budget by ending).
func TestFoldChildren(t *testing.T) {
	carves := []v1alpha1.ChildCarve{
		{Name: "a", Budget: v1alpha1.Usage{ModelRequests: 10, ToolCalls: 5, Cost: money("1.50")}},
		{Name: "b", Budget: v1alpha1.Usage{ModelRequests: 10, ToolCalls: 5, Cost: money("2.00")}},
	}
	cases := map[string]struct {
		children []ChildView
		want     v1alpha1.Usage
	}{
		"none ended: both carves held whole": {
			want: v1alpha1.Usage{ModelRequests: 20, ToolCalls: 10, Cost: money("3.50")},
		},
		"a running child holds its carve, whatever it used so far": {
			children: []ChildView{{Name: "a", Used: v1alpha1.Usage{ModelRequests: 2}}},
			want:     v1alpha1.Usage{ModelRequests: 20, ToolCalls: 10, Cost: money("3.50")},
		},
		"a ended: what it did not use comes back": {
			children: []ChildView{{Name: "a", Ended: true, Used: v1alpha1.Usage{ModelRequests: 4, ToolCalls: 1, Cost: money("0.60")}}},
			want:     v1alpha1.Usage{ModelRequests: 14, ToolCalls: 6, Cost: money("2.60")},
		},
		"a child that used more than its carve is charged its carve (its own hard cap)": {
			children: []ChildView{{Name: "b", Ended: true, Used: v1alpha1.Usage{ModelRequests: 12, ToolCalls: 5, Cost: money("2.00")}}},
			want:     v1alpha1.Usage{ModelRequests: 20, ToolCalls: 10, Cost: money("3.50")},
		},
		"an ended run the parent never carved frees nothing": {
			children: []ChildView{{Name: "x", Ended: true}},
			want:     v1alpha1.Usage{ModelRequests: 20, ToolCalls: 10, Cost: money("3.50")},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := FoldChildren(Carving{Cost: true}, carves, tc.children).Spend()
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("spend (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDecideCountsChildren: a parent's carves are spent by the run — in its
// status.budget.used and out of the grant the next attempt gets — until the
// child ends; the current attempt's grant is in the counters of its usage
// plus its carves, so carving is no violation and no attempt of the run can
// spend a carved budget again.
func TestDecideCountsChildren(t *testing.T) {
	carved := v1alpha1.RunAttemptStatus{Usage: usage(5, 2), Steps: 2, LastProgressStep: 2,
		Children: []v1alpha1.ChildCarve{{Name: "c1", Budget: usage(20, 10)}}}
	cases := map[string]struct {
		children []ChildView
		wantUsed v1alpha1.Usage
	}{
		"a live child's carve is spent whole":         {wantUsed: usage(25, 12)},
		"an ended child's unused budget comes back":   {children: []ChildView{{Name: "c1", Ended: true, Used: usage(3, 1)}}, wantUsed: usage(8, 3)},
		"a run still working is not an ended child":   {children: []ChildView{{Name: "c1", Used: usage(3, 1)}}, wantUsed: usage(25, 12)},
		"another run's end does not touch the ledger": {children: []ChildView{{Name: "c2", Ended: true}}, wantUsed: usage(25, 12)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			in := runningAt(time.Minute, fact(1, carved))
			in.Children = tc.children
			d, rung := decide(in)
			if rung != rungSteady {
				t.Fatalf("rung %s (%s), want Steady: carving is no violation", rung, d.Status.Message)
			}
			if diff := cmp.Diff(tc.wantUsed, d.Status.Budget.Used); diff != "" {
				t.Errorf("status.budget.used (-want +got):\n%s", diff)
			}
			// The grant stays the working allowance in the counters of
			// usage plus carves: LessChildren leaves the attempt what
			// is not carved.
			if diff := cmp.Diff(working, d.Grant); diff != "" {
				t.Errorf("grant (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("a carve beyond the grant is a violation", func(t *testing.T) {
		over := carved.DeepCopy()
		over.Children[0].Budget = usage(36, 10) // 5 + 36 > 40
		_, rung := decide(runningAt(time.Minute, fact(1, *over)))
		if rung != rungPolicyViolation {
			t.Errorf("rung %s, want PolicyViolation", rung)
		}
	})
	t.Run("a replacement attempt is granted what the carves left", func(t *testing.T) {
		in := runningAt(time.Minute, fact(1, carved), fact(2, v1alpha1.RunAttemptStatus{}))
		in.Attempts[1].Grant = v1alpha1.Grant{}
		d := Decide(in)
		if want := (v1alpha1.Grant{ModelRequests: 40 - 25, ToolCalls: 18 - 12}); d.Grant != want {
			t.Errorf("attempt 2's grant %+v, want %+v", d.Grant, want)
		}
	})
}

// TestLessChildren: the grant an attempt may spend itself.
func TestLessChildren(t *testing.T) {
	g := v1alpha1.Grant{ModelRequests: 10, ToolCalls: 4, Tokens: new(int64(1000)), Cost: new(money("1.00"))}
	got := LessChildren(g, v1alpha1.Usage{ModelRequests: 3, ToolCalls: 9, Tokens: 400, Cost: money("0.25")})
	want := v1alpha1.Grant{ModelRequests: 7, ToolCalls: 0, Tokens: new(int64(600)), Cost: new(money("0.75"))}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("LessChildren (-want +got):\n%s", diff)
	}
}

// TestGrantCarving: an attempt carves from its grant less its usage and its
// children's spend; fan-out and concurrency count the run's every child.
func TestGrantCarving(t *testing.T) {
	g := v1alpha1.Grant{ModelRequests: 40, ToolCalls: 18, Cost: new(money("4.50"))}
	carves := []v1alpha1.ChildCarve{{Name: "a", Budget: v1alpha1.Usage{ModelRequests: 10, ToolCalls: 5, Cost: money("1.50")}}}
	others := []ChildView{
		{Name: "a", Used: v1alpha1.Usage{ModelRequests: 1}},
		{Name: "old", Ended: true, Used: v1alpha1.Usage{ModelRequests: 3}}, // an earlier attempt's child
	}
	c := GrantCarving(0, g, v1alpha1.Usage{ModelRequests: 10, Cost: money("1.00")}, carves, others)
	if c.Children != 2 || c.Live != 1 {
		t.Errorf("children %d live %d, want 2 and 1", c.Children, c.Live)
	}
	want := v1alpha1.Usage{ModelRequests: 20, ToolCalls: 13, Cost: money("2.00")}
	if diff := cmp.Diff(want, c.Available()); diff != "" {
		t.Errorf("available (-want +got):\n%s", diff)
	}
	_, refused := AdmitChild(c, v1alpha1.Usage{ModelRequests: 5, Cost: money("2.01")}, ChildLimits{MaxDepth: 1, MaxChildren: 4, MaxConcurrent: 2})
	if refused == nil || refused.Limit != "cost" {
		t.Errorf("a child of 2.01 with 2.00 left: refusal %v, want one naming cost", refused)
	}
	_, refused = AdmitChild(c, v1alpha1.Usage{ModelRequests: 5}, ChildLimits{MaxDepth: 1, MaxChildren: 2, MaxConcurrent: 2})
	if refused == nil || refused.Limit != "children.maxChildren" {
		t.Errorf("a third child under maxChildren 2: refusal %v, want children.maxChildren", refused)
	}
}

// TestCarvingAllIsNoExhaustion: a parent whose children hold its whole
// working allowance keeps working (waits for them); once they ended having
// used it, its working budget is exhausted.
func TestCarvingAllIsNoExhaustion(t *testing.T) {
	all := v1alpha1.RunAttemptStatus{Steps: 1, LastProgressStep: 1,
		Children: []v1alpha1.ChildCarve{{Name: "a", Budget: usage(20, 9)}, {Name: "b", Budget: usage(20, 9)}}}
	in := runningAt(time.Minute, fact(1, all))
	if d, rung := decide(in); rung != rungSteady {
		t.Errorf("children hold the working allowance: rung %s (%s), want Steady", rung, d.Status.Message)
	}
	in.Children = []ChildView{{Name: "a", Ended: true, Used: usage(20, 9)}, {Name: "b", Ended: true, Used: usage(20, 9)}}
	d, rung := decide(in)
	if rung != rungGates || d.Status.Reason != v1alpha1.ReasonBudgetExhausted {
		t.Errorf("children ended having used it all: rung %s reason %s, want Gates BudgetExhausted", rung, d.Status.Reason)
	}
}

// TestChildrenRunInTheirParentsSlot: a working child does not hold its
// session (the next root still waits behind its parent, not behind it) and
// a child that has not started is never in the queue.
func TestChildrenRunInTheirParentsSlot(t *testing.T) {
	runs := []QueueEntry{
		{Name: "root", Created: at(0), Phase: v1alpha1.PhaseRunning},
		{Name: "root-a", Created: at(time.Second), Phase: v1alpha1.PhaseRunning, Child: true},
		{Name: "root-b", Created: at(2 * time.Second), Phase: v1alpha1.PhasePending, Child: true},
		{Name: "next", Created: at(3 * time.Second), Phase: v1alpha1.PhaseQueued},
	}
	if got := Holder(runs); got != "root" {
		t.Errorf("holder %q, want root", got)
	}
	if v := Admit("next", runs, 5, 0); v.Holder || v.Position != 1 {
		t.Errorf("next: %+v, want first in line behind root (children do not queue)", v)
	}
	runs[0].Phase = v1alpha1.PhaseTerminated
	if v := Admit("next", runs, 5, 0); !v.Holder {
		t.Errorf("next once root ended: %+v, want the holder (a working child holds no slot)", v)
	}
}
