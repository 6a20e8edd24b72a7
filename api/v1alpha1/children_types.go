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

package v1alpha1

// Child runs (docs/children.md): a running attempt asks agentrun-gateway for
// a child run; the gateway carves the child's budget out of the parent's
// working allowance and creates the child, owned by its parent.

// Labels on a child run.
const (
	// LabelParent is the name of a child run's parent run.
	LabelParent = "agentrun.dev/parent"
	// LabelRoot is the name of the root of a child run's tree.
	LabelRoot = "agentrun.dev/root"
)

// The built-in tools of child runs (served by the gateway, like
// report.publish).
const (
	// BuiltinToolRunSpawn asks for a child run: a task, a tier and a budget
	// carved out of the parent's working allowance.
	BuiltinToolRunSpawn = "run.spawn"
	// BuiltinToolRunChildren reads the parent's children: each one's phase,
	// reason, settlement, usage and report.
	BuiltinToolRunChildren = "run.children"
)

// ParentRef makes a run a child: the run whose attempt asked for it. Set only
// by agentrun-gateway when it creates the child (an admission policy refuses
// anyone else), and immutable.
type ParentRef struct {
	// name of the parent run, in the same namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
	// uid of the parent run: a run later created with the parent's name is
	// not its parent.
	// +kubebuilder:validation:MaxLength=64
	// +required
	UID string `json:"uid"`
	// attempt of the parent whose status records the child's carve
	// (status.children).
	// +kubebuilder:validation:Minimum=1
	// +required
	Attempt int32 `json:"attempt"`
	// root is the name of the tree's root run.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Root string `json:"root"`
	// depth of the child: 1 for a child of the root.
	// +kubebuilder:validation:Minimum=1
	// +required
	Depth int32 `json:"depth"`
}

// ChildrenPolicy bounds the child runs of a policy's runs. Unset, a run may
// create no child (maxDepth 0).
type ChildrenPolicy struct {
	// maxDepth is the deepest a run of the tree may be, the root at depth 0:
	// 1 lets roots have children, 2 grandchildren.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=8
	// +optional
	MaxDepth int32 `json:"maxDepth,omitempty"`
	// maxChildren is how many children one run may create in its life.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=64
	// +optional
	MaxChildren int32 `json:"maxChildren,omitempty"`
	// maxConcurrent is how many of one run's children may be unfinished at
	// once.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=64
	// +optional
	MaxConcurrent int32 `json:"maxConcurrent,omitempty"`
	// onParentFinalize is what a child still working does when its parent
	// finalizes: Finalize (wrap up from its own reserve) or Cancel. When the
	// parent is Terminated its children are cancelled, whatever this says.
	// +kubebuilder:default=Finalize
	// +optional
	OnParentFinalize StopRequest `json:"onParentFinalize,omitempty"`
}

// ChildCarve is a child's budget as its parent's attempt carved it: a fact
// of the parent attempt, durable before the child is created and counted as
// spent by the parent until the child ends (then only what it used).
type ChildCarve struct {
	// name of the child run.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
	// budget carved: the child's whole budget, its output reserve included.
	// +required
	Budget Usage `json:"budget"`
}
