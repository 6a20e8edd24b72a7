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
	"sync"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/runpod"
)

// egressKeeper keeps the attempt egress NetworkPolicy between attempt
// starts: a watch on NetworkPolicies enqueues the namespace, and while the
// namespace has attempt pods the policy is recreated when deleted and its
// spec restored when changed. It also warns each attempt's run, once per
// attempt and set of policies, when another NetworkPolicy selects the
// attempt's pod and allows it egress (ExtraEgressPolicies).
type egressKeeper struct {
	client.Client
	runners  *runners
	recorder events.EventRecorder
	mu       sync.Mutex
	// reported is, per attempt pod, the extra policies last reported (each
	// name@resourceVersion), so an unchanged set is reported once.
	reported map[types.NamespacedName]string
}

var _ reconcile.Reconciler = (*egressKeeper)(nil)

// Reconcile keeps the policy of the request's namespace (the request names
// the policy) and reports extra egress policies to the runs of its attempt
// pods.
func (e *egressKeeper) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pods := &corev1.PodList{}
	if err := e.List(ctx, pods, client.InNamespace(req.Namespace),
		client.MatchingLabels{runpod.LabelManagedBy: runpod.ManagedBy, runpod.LabelName: runpod.AppName}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing the attempt pods of namespace %s: %w", req.Namespace, err)
	}
	var live []*corev1.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			live = append(live, p)
		}
	}
	e.prune(req.Namespace, live)
	if len(live) == 0 {
		return ctrl.Result{}, nil // the next attempt's start keeps the policy
	}
	if err := e.runners.ensureEgress(ctx, e.Client, e.Client, req.Namespace); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
			// The cache is behind the policy: again once it has caught up.
			return ctrl.Result{RequeueAfter: conflictRetry}, nil
		}
		return ctrl.Result{}, fmt.Errorf("keeping NetworkPolicy %s in %s: %w", e.runners.egress.Name, req.Namespace, err)
	}
	for _, p := range live {
		owner := metav1.GetControllerOf(p)
		if owner == nil || owner.Kind != "ResearchRun" {
			continue
		}
		run := &v1alpha1.ResearchRun{}
		if err := e.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: owner.Name}, run); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return ctrl.Result{}, err
		}
		if run.UID != owner.UID {
			continue
		}
		if err := e.reportExtra(ctx, run, p); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{}, nil
}

// reportExtra records a Warning event on run naming the NetworkPolicies
// other than the attempt egress policy that let pod out, unless the same
// set was reported for pod already.
func (e *egressKeeper) reportExtra(ctx context.Context, run *v1alpha1.ResearchRun, pod *corev1.Pod) error {
	list := &networkingv1.NetworkPolicyList{}
	if err := e.List(ctx, list, client.InNamespace(pod.Namespace)); err != nil {
		return fmt.Errorf("listing the NetworkPolicies of namespace %s: %w", pod.Namespace, err)
	}
	extra := ExtraEgressPolicies(list.Items, pod.Labels, e.runners.egress.Name)
	versions := map[string]string{}
	for _, np := range list.Items {
		versions[np.Name] = np.ResourceVersion
	}
	seen := make([]string, 0, len(extra))
	for _, name := range extra {
		seen = append(seen, name+"@"+versions[name])
	}
	key := client.ObjectKeyFromObject(pod)
	sig := strings.Join(seen, ",")
	e.mu.Lock()
	same := e.reported[key] == sig
	e.reported[key] = sig
	e.mu.Unlock()
	if same || len(extra) == 0 {
		return nil
	}
	logf.FromContext(ctx).Info("NetworkPolicies widen an attempt pod's egress", "pod", klog.KObj(pod), "policies", extra)
	e.recorder.Eventf(run, pod, corev1.EventTypeWarning, v1alpha1.EventReasonExtraEgressPolicy, v1alpha1.EventActionCreatePod,
		"NetworkPolicy %s also selects attempt pod %s and allows it egress; NetworkPolicies add up, so the pod may reach more than "+
			"%s allows (the gateway and DNS). Remove it, or enforce egress cluster-wide (docs/operations.md)",
		strings.Join(extra, ", "), pod.Name, e.runners.egress.Name)
	return nil
}

// prune drops what was reported for the pods of namespace that are no
// longer live.
func (e *egressKeeper) prune(namespace string, live []*corev1.Pod) {
	keep := map[types.NamespacedName]bool{}
	for _, p := range live {
		keep[client.ObjectKeyFromObject(p)] = true
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for k := range e.reported {
		if k.Namespace == namespace && !keep[k] {
			delete(e.reported, k)
		}
	}
}

// setupEgressKeeper watches NetworkPolicies: any change in a namespace
// enqueues that namespace's attempt egress policy.
func setupEgressKeeper(mgr ctrl.Manager, e *egressKeeper) error {
	name := e.runners.egress.Name
	return ctrl.NewControllerManagedBy(mgr).
		Named("attemptegress").
		Watches(&networkingv1.NetworkPolicy{}, handler.EnqueueRequestsFromMapFunc(
			func(_ context.Context, o client.Object) []reconcile.Request {
				return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
			})).
		Complete(e)
}
