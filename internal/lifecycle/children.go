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

// Child runs under one root budget (issue 31 items 1–2; brief §13). A
// parent carves each child's budget out of its own working allowance —
// never its output reserve — at the moment the child is created, so the
// same rule at every level makes the root's budget a hard cap over the
// whole tree, however many children run at once. These are the decisions;
// the gateway endpoint that asks for them and the reconciler that records
// them are not built yet (docs/children.md).

// ChildLimits bound a parent's children (from its policy).
type ChildLimits struct {
	// MaxDepth is the deepest a run may be, the root at depth 0.
	MaxDepth int32
	// MaxChildren is how many children one run may create in its life.
	MaxChildren int32
	// MaxConcurrent is how many of one run's children may be unfinished.
	MaxConcurrent int32
}

// Carving is a parent's ledger of its children, in the units of its budget:
// the facts an admission is decided from. It is a value, written back
// atomically with the child it admits (on the API server: an update of the
// parent under its resourceVersion).
type Carving struct {
	// Depth of the parent (the root is 0).
	Depth int32
	// Budget is the parent's budget and Reserve its output reserve, as in
	// its spec; Tokens and Cost say which of those units are budgeted.
	Budget, Reserve v1alpha1.Usage
	Tokens, Cost    bool
	// Own is what the parent itself used (and reserved for requests under
	// way) of its budget.
	Own v1alpha1.Usage
	// Carved is the sum of the budgets of its unfinished children, Returned
	// what its finished children used (the rest of their budgets came back).
	Carved, Returned v1alpha1.Usage
	// Children counts the children it ever created, Live the unfinished.
	Children, Live int32
}

// Available is what the parent may still carve or spend: its working
// allowance (budget minus reserve) minus its own use, its unfinished
// children's budgets and what its finished children used. Never negative.
func (c Carving) Available() v1alpha1.Usage {
	return nonNeg(c.shown(sub(sub(c.Budget, c.Reserve), add(add(c.Own, c.Carved), c.Returned))))
}

// shown zeroes the units the parent does not budget.
func (c Carving) shown(u v1alpha1.Usage) v1alpha1.Usage {
	return limits{tokens: c.Tokens, cost: c.Cost}.shown(u)
}

// ChildRefusal is why a child was not created: the limit it would cross,
// by name, with the numbers.
type ChildRefusal struct {
	// Limit names what was reached: "children.maxDepth",
	// "children.maxChildren", "children.maxConcurrent", or the budget unit
	// ("modelRequests", "toolCalls", "tokens", "cost").
	Limit   string
	Message string
}

func (r *ChildRefusal) Error() string { return r.Message }

// AdmitChild decides whether a parent with ledger c may create a child with
// budget want (the child's own output reserve is part of it) under lim. On
// admission it returns the parent's ledger with the child carved: the debit
// is taken whole at creation, never as the child reports.
func AdmitChild(c Carving, want v1alpha1.Usage, lim ChildLimits) (Carving, *ChildRefusal) {
	refuse := func(limit, format string, args ...any) (Carving, *ChildRefusal) {
		return c, &ChildRefusal{Limit: limit, Message: fmt.Sprintf(format, args...)}
	}
	switch {
	case c.Depth+1 > lim.MaxDepth:
		return refuse("children.maxDepth", "a child would be at depth %d, beyond the policy's children.maxDepth of %d",
			c.Depth+1, lim.MaxDepth)
	case c.Children+1 > lim.MaxChildren:
		return refuse("children.maxChildren", "the run has created %d children, the policy's children.maxChildren",
			c.Children)
	case c.Live+1 > lim.MaxConcurrent:
		return refuse("children.maxConcurrent", "%d children of the run are unfinished, the policy's children.maxConcurrent",
			c.Live)
	case want.ToolCalls < 0 || want.Tokens < 0 || want.Cost < 0:
		return refuse("budget", "a child's budget cannot be negative")
	case want.ModelRequests < 1:
		return refuse("modelRequests", "a child needs a budget of at least 1 model request")
	}
	want = c.shown(want)
	left := c.Available()
	for _, u := range []struct {
		name       string
		want, left int64
		show       func(int64) string
	}{
		{"modelRequests", want.ModelRequests, left.ModelRequests, itoa},
		{"toolCalls", want.ToolCalls, left.ToolCalls, itoa},
		{"tokens", want.Tokens, left.Tokens, itoa},
		{"cost", int64(want.Cost), int64(left.Cost), func(v int64) string { return v1alpha1.Money(v).String() }},
	} {
		if u.want > u.left {
			return refuse(u.name, "a child's budget of %s %s exceeds the %s the parent has left to carve "+
				"(its working allowance, never its reserve)", u.show(u.want), u.name, u.show(u.left))
		}
	}
	c.Carved = add(c.Carved, want)
	c.Children++
	c.Live++
	return c, nil
}

// EndChild returns to the parent what a finished child with budget budget
// did not use: the child's budget leaves Carved and what it used (never
// more than its budget, the child's own hard cap) stays spent in Returned.
func EndChild(c Carving, budget, used v1alpha1.Usage) Carving {
	budget = c.shown(budget)
	c.Carved = nonNeg(sub(c.Carved, budget))
	c.Returned = add(c.Returned, minU(c.shown(used), budget))
	c.Live = max(c.Live-1, 0)
	return c
}

func itoa(v int64) string { return fmt.Sprint(v) }
