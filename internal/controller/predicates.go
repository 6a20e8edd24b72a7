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
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/policy"
)

// The predicates of the watches: each says which events it passes and why it
// skips the others.

// sessionChanged passes Session events that matter to its runs: the
// permission mode (attempts carry it), the spec (queue limits) and deletion.
// The status summary (activeRun, queuedRuns, counts) follows the runs and
// tells them nothing: a run's admission is decided from the runs themselves.
var sessionChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, okOld := e.ObjectOld.(*v1alpha1.Session)
		n, okNew := e.ObjectNew.(*v1alpha1.Session)
		if !okOld || !okNew {
			return false
		}
		return o.Status.Mode != n.Status.Mode || o.Generation != n.Generation || !n.DeletionTimestamp.Equal(o.DeletionTimestamp)
	},
}

// factsChanged passes the events that carry facts: a RunAttempt's or pod's
// status changing, and deletions. The operator's own creates and spec patches
// carry none, and would only cost a reconcile that decides nothing new.
var factsChanged = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		if !e.ObjectNew.GetDeletionTimestamp().Equal(e.ObjectOld.GetDeletionTimestamp()) {
			return true
		}
		switch n := e.ObjectNew.(type) {
		case *v1alpha1.RunAttempt:
			o, ok := e.ObjectOld.(*v1alpha1.RunAttempt)
			return !ok || !equality.Semantic.DeepEqual(o.Status, n.Status)
		case *corev1.Pod:
			o, ok := e.ObjectOld.(*corev1.Pod)
			return !ok || !equality.Semantic.DeepEqual(o.Status, n.Status)
		}
		return true
	},
	DeleteFunc:  func(event.DeleteEvent) bool { return true },
	GenericFunc: func(event.GenericEvent) bool { return true },
}

// chainTampered passes a RuntimePolicy update whose status.resolvedChain is
// not its spec's resolution although its spec is valid: a status written by
// someone other than the operator (admission policy
// runtimepolicy-status-authority refuses them; this puts back what got past
// it). The operator's own writes, and invalid policies (whose chain is
// empty), pass as unchanged.
var chainTampered = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		p, ok := e.ObjectNew.(*v1alpha1.RuntimePolicy)
		if !ok || len(p.Status.ResolvedChain) == 0 && len(policy.Validate(&p.Spec)) > 0 {
			return false
		}
		return !equality.Semantic.DeepEqual(p.Status.ResolvedChain, policy.Resolve(p.Spec.Interceptors))
	},
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// deletionChanged passes updates that set the deletion timestamp.
var deletionChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		return !e.ObjectNew.GetDeletionTimestamp().Equal(e.ObjectOld.GetDeletionTimestamp())
	},
}
