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
	"fmt"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// Child runs as facts (issue 31 items 1 and 3): the carves a parent's
// attempts recorded, what is known of the children that ended, and what a
// parent's end means for its children. One formula for the gateway (which
// admits by it) and the decider (which accounts by it).

// ChildView is a child run as its parent's accounting sees it.
type ChildView struct {
	// Name of the child run.
	Name string
	// Ended: the child is Terminated; Used is then final.
	Ended bool
	// Used is the child's status.budget.used (its whole tree's spend).
	Used v1alpha1.Usage
}

// FoldChildren adds an attempt's carves to c: every carve is debited whole
// (AdmitChild's debit), and a carve whose child ended gives back what the
// child did not use (EndChild). A carve whose child is not seen ended — not
// created yet, or lost — stays held whole: the parent never gets back a
// budget a child might still spend.
func FoldChildren(c Carving, carves []v1alpha1.ChildCarve, children []ChildView) Carving {
	ended := make(map[string]v1alpha1.Usage, len(children))
	for _, ch := range children {
		if ch.Ended {
			ended[ch.Name] = ch.Used
		}
	}
	for _, cv := range carves {
		c.Carved = add(c.Carved, c.shown(cv.Budget))
		c.Children++
		c.Live++
		if used, ok := ended[cv.Name]; ok {
			c = EndChild(c, cv.Budget, used)
		}
	}
	return c
}

// Spend is what the parent's children count as spent of its budget: the
// budgets of the unfinished ones, what the finished ones used.
func (c Carving) Spend() v1alpha1.Usage { return c.shown(add(c.Carved, c.Returned)) }

// LessChildren is the grant g an attempt may still spend itself once its
// children's spend is counted: the gateway admits the attempt's own requests
// against it, so a carve is spent by the parent from the moment it is
// recorded until the child ends. Never negative.
func LessChildren(g v1alpha1.Grant, spend v1alpha1.Usage) v1alpha1.Grant {
	g.ModelRequests = max(g.ModelRequests-spend.ModelRequests, 0)
	g.ToolCalls = max(g.ToolCalls-spend.ToolCalls, 0)
	if g.Tokens != nil {
		t := max(*g.Tokens-spend.Tokens, 0)
		g.Tokens = &t
	}
	if g.Cost != nil {
		c := max(*g.Cost-spend.Cost, 0)
		g.Cost = &c
	}
	return g
}

// children is attempt facts a's carves folded with the run's children, in
// the run's units.
func (f *facts) children(a AttemptFacts) Carving {
	return FoldChildren(Carving{Tokens: f.lim.tokens, Cost: f.lim.cost}, a.Status.Children, f.in.Children)
}

// childSpend is what attempt facts a's children count as spent.
func (f *facts) childSpend(a AttemptFacts) v1alpha1.Usage { return f.children(a).Spend() }

// ParentView is a child's parent as the child's stop is decided from.
type ParentView struct {
	// Name of the parent run.
	Name string
	// Gone: the parent does not exist, or is being deleted.
	Gone bool
	// Phase and Reason of the parent.
	Phase  v1alpha1.Phase
	Reason v1alpha1.Reason
}

// ChildStop decides what a parent's state asks of its child: nothing while
// the parent works; when it finalizes, onFinalize (the policy's
// children.onParentFinalize, Finalize by default); when it is Terminated or
// gone, Cancel — a child never outlives its parent. The cause says why, for
// the child's message. A child already asked for more (Cancel over
// Finalize) keeps it: see RaiseStop.
func ChildStop(parent ParentView, onFinalize v1alpha1.StopRequest) (v1alpha1.StopRequest, string) {
	switch {
	case parent.Gone:
		return v1alpha1.StopCancel, fmt.Sprintf("its parent run %s was deleted", parent.Name)
	case parent.Phase == v1alpha1.PhaseTerminated:
		return v1alpha1.StopCancel, fmt.Sprintf("its parent run %s ended (%s)", parent.Name, parent.Reason)
	case parent.Phase == v1alpha1.PhaseFinalizing:
		if onFinalize != v1alpha1.StopCancel {
			onFinalize = v1alpha1.StopFinalize
		}
		return onFinalize, fmt.Sprintf("its parent run %s is finalizing (%s)", parent.Name, parent.Reason)
	}
	return "", ""
}

// RaiseStop reports whether asking stop of a run whose spec.stop is cur
// changes it: a stop is only ever raised (none → Finalize → Cancel), as the
// API allows.
func RaiseStop(cur, stop v1alpha1.StopRequest) bool {
	rank := map[v1alpha1.StopRequest]int{"": 0, v1alpha1.StopFinalize: 1, v1alpha1.StopCancel: 2}
	return rank[stop] > rank[cur]
}

// GrantCarving is the ledger an attempt carves from: its grant g (in the
// counters of its usage plus its carves) is what it may spend or carve, its
// reserve already out of it; own is its usage with the reservations of its
// requests under way. Children and Live count every child of the run —
// carved by this attempt or an earlier one (others, as seen) — for the
// policy's fan-out and concurrency bounds.
func GrantCarving(depth int32, g v1alpha1.Grant, own v1alpha1.Usage, carves []v1alpha1.ChildCarve, others []ChildView) Carving {
	c := Carving{Depth: depth, Budget: grantUsage(g), Tokens: g.Tokens != nil, Cost: g.Cost != nil, Own: own}
	c = FoldChildren(c, carves, others)
	seen := map[string]bool{}
	for _, cv := range carves {
		seen[cv.Name] = false
	}
	for _, o := range others {
		seen[o.Name] = seen[o.Name] || o.Ended
	}
	c.Children, c.Live = int32(len(seen)), 0
	for _, ended := range seen {
		if !ended {
			c.Live++
		}
	}
	return c
}
