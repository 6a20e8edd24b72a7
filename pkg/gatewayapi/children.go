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

package gatewayapi

import "github.com/agentrun-dev/agentrun/api/v1alpha1"

// Child runs (docs/children.md): POST /self/children asks for a child run,
// GET /self/children lists the attempt's run's children, GET
// /self/children/{name} reads one with its report. The door's built-in tools
// run.spawn and run.children do the same for MCP-only agents.

// CodeChildRefused: the child was not created; error.param names the limit
// (children.maxDepth, children.maxChildren, children.maxConcurrent) or the
// budget unit that does not fit in what the parent has left to carve.
const CodeChildRefused = "child_refused"

// ToolRunSpawn and ToolRunChildren are the door's built-in child tools.
const (
	ToolRunSpawn    = v1alpha1.BuiltinToolRunSpawn
	ToolRunChildren = v1alpha1.BuiltinToolRunChildren
)

// ChildRequest asks for a child run (POST /self/children; run.spawn's
// arguments).
type ChildRequest struct {
	// Name is the child's name after the parent's ("<parent>-<name>"): a
	// DNS label of at most 20 characters. Asking again with the same name
	// is the same child (never a second carve). Default: a hash of the task
	// and budget, so a retried request is the same child too.
	Name string `json:"name,omitempty"`
	// Task is the child's goal.
	Task string `json:"task"`
	// Tier of the child (the parent's policy's tiers); default the parent's.
	Tier string `json:"tier,omitempty"`
	// Budget is carved whole out of the parent's working allowance, its
	// output reserve included.
	Budget ChildBudget `json:"budget"`
	// DeadlineSeconds bounds the child's deadline; it never runs past its
	// parent's deadline (the default).
	DeadlineSeconds int64 `json:"deadlineSeconds,omitempty"`
}

// ChildBudget is a child's budget. A unit the parent budgets (tokens, cost)
// must be given: a child is never unbounded in a unit its parent is not.
type ChildBudget struct {
	ModelRequests int64                  `json:"modelRequests"`
	ToolCalls     int64                  `json:"toolCalls,omitempty"`
	Tokens        *int64                 `json:"tokens,omitempty"`
	Cost          *v1alpha1.Money        `json:"cost,omitempty"`
	OutputReserve v1alpha1.OutputReserve `json:"outputReserve,omitzero"`
}

// Child is a child run as its parent sees it: a scoped fact.
type Child struct {
	Name string `json:"name"`
	// Carved is the budget the parent carved for it; Used what it (and its
	// own children) used.
	Carved v1alpha1.Usage `json:"carved"`
	Used   v1alpha1.Usage `json:"used"`
	// Ended is true once the child is Terminated: Reason, Settlement and
	// the report are final, and what it did not use is back with the parent.
	Ended      bool                `json:"ended"`
	Phase      v1alpha1.Phase      `json:"phase,omitempty"`
	Reason     v1alpha1.Reason     `json:"reason,omitempty"`
	Settlement v1alpha1.Settlement `json:"settlement,omitempty"`
	Message    string              `json:"message,omitempty"`
	// Report is the child's report (GET /self/children/{name} and
	// run.children with a name only).
	Report *ChildReport `json:"report,omitempty"`
}

// ChildReport is a child's report with its sections' text.
type ChildReport struct {
	Location string         `json:"location"`
	Sections []ChildSection `json:"sections"`
}

// ChildSection is one planned section of a child's report.
type ChildSection struct {
	Name      string `json:"name"`
	Published bool   `json:"published"`
	Content   string `json:"content,omitempty"`
}

// ChildList is GET /self/children.
type ChildList struct {
	Children []Child `json:"children"`
}
