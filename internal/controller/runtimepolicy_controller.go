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
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/policy"
	"github.com/agentrun-dev/agentrun/pkg/textutil"
)

// RuntimePolicyReconciler resolves a policy's interceptor chain into
// status.resolvedChain and reports whether the policy is Valid. The admission
// webhook rejects invalid policies; the condition covers policies admitted
// before a rule existed or while the webhook was bypassed.
type RuntimePolicyReconciler struct {
	client.Client
	Scheme *runtime.Scheme
}

var _ reconcile.Reconciler = (*RuntimePolicyReconciler)(nil)

// +kubebuilder:rbac:groups=agentrun.dev,resources=runtimepolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=agentrun.dev,resources=runtimepolicies/status,verbs=get;update;patch

// Reconcile writes status.resolvedChain, the Valid condition and the
// conditions kstatus reads from it (Ready, Stalled).
func (r *RuntimePolicyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	p := &v1alpha1.RuntimePolicy{}
	if err := r.Get(ctx, req.NamespacedName, p); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	status := *p.Status.DeepCopy()
	status.ObservedGeneration = p.Generation
	cond := metav1.Condition{Type: v1alpha1.ConditionValid, ObservedGeneration: p.Generation}
	if errs := policy.Validate(&p.Spec); len(errs) > 0 {
		msgs := make([]string, 0, len(errs))
		for _, e := range errs {
			msgs = append(msgs, e.Error())
		}
		cond.Status, cond.Reason = metav1.ConditionFalse, v1alpha1.ConditionReasonInvalid
		cond.Message = textutil.Truncate(strings.Join(msgs, "; "), 1024)
		// An invalid chain is never handed to agents.
		status.ResolvedChain = nil
	} else {
		status.ResolvedChain = policy.Resolve(p.Spec.Interceptors)
		cond.Status, cond.Reason = metav1.ConditionTrue, v1alpha1.ConditionReasonResolved
		cond.Message = fmt.Sprintf("%d interceptors resolved in (phase, priority, registration) order", len(status.ResolvedChain))
	}
	meta.SetStatusCondition(&status.Conditions, cond)
	setKstatusConditions(&status.Conditions, cond)
	next := p.DeepCopy()
	next.Status = status
	_, err := patchStatusIfChanged(ctx, r.Client, p, next)
	return requeueOnConflict(err)
}

// setKstatusConditions sets the conditions kstatus (Flux, Argo CD) reads
// from the Valid condition valid, in the same status write: Ready as Valid;
// Stalled=True when invalid (the policy needs a fix, nothing will resolve
// it), False when it was True. Reconciling is never set: a policy is
// resolved in one pass, and status.observedGeneration says until then that
// it is in progress.
func setKstatusConditions(conds *[]metav1.Condition, valid metav1.Condition) {
	ready := valid
	ready.Type = v1alpha1.ConditionReady
	meta.SetStatusCondition(conds, ready)
	stalled := valid
	stalled.Type = v1alpha1.ConditionStalled
	stalled.Status = metav1.ConditionTrue
	if valid.Status == metav1.ConditionTrue {
		stalled.Status = metav1.ConditionFalse
	}
	setAbnormal(conds, stalled)
}

// setAbnormal sets an abnormal-true condition (Reconciling, Stalled): as c
// when c is True; when c is False, only if the condition is there already
// (it stays absent on an object that never had it True).
func setAbnormal(conds *[]metav1.Condition, c metav1.Condition) {
	if c.Status != metav1.ConditionTrue && meta.FindStatusCondition(*conds, c.Type) == nil {
		return
	}
	meta.SetStatusCondition(conds, c)
}

// SetupWithManager sets up the controller with the Manager. A spec change
// and a status someone else changed (status.resolvedChain no longer the
// spec's resolution) start a pass: the status is a report, put back when
// tampered with; the operator's own writes pass as unchanged.
func (r *RuntimePolicyReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.RuntimePolicy{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, chainTampered))).
		Named("runtimepolicy").
		Complete(r)
}
