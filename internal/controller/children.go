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

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/lifecycle"
	"github.com/agentrun-dev/agentrun/internal/runpod"
)

// Child runs (docs/children.md): a parent's accounting takes in its
// children's ends (lifecycle.Input.Children), and a child's stop is decided
// from its parent's state (lifecycle.ChildStop) and applied to the child's
// own spec.stop, which the ladder then enacts like a user's.

// childRuns lists run's children from the cache: the runs labelled with it
// whose spec.parent names it by UID.
func (r *ResearchRunReconciler) childRuns(ctx context.Context, run *v1alpha1.ResearchRun) ([]v1alpha1.ResearchRun, error) {
	list := &v1alpha1.ResearchRunList{}
	if err := r.List(ctx, list, client.InNamespace(run.Namespace),
		client.MatchingLabels{v1alpha1.LabelParent: runpod.LabelValue(run.Name)}); err != nil {
		return nil, fmt.Errorf("listing the children of run %s: %w", klog.KObj(run), err)
	}
	var out []v1alpha1.ResearchRun
	for _, c := range list.Items {
		if c.Spec.Parent != nil && c.Spec.Parent.UID == string(run.UID) {
			out = append(out, c)
		}
	}
	return out, nil
}

// gatherChildren is the run's children as its accounting sees them.
func (r *ResearchRunReconciler) gatherChildren(ctx context.Context, run *v1alpha1.ResearchRun) ([]lifecycle.ChildView, error) {
	kids, err := r.childRuns(ctx, run)
	if err != nil {
		return nil, err
	}
	views := make([]lifecycle.ChildView, 0, len(kids))
	for _, c := range kids {
		views = append(views, lifecycle.ChildView{Name: c.Name, Ended: c.Status.Phase == v1alpha1.PhaseTerminated, Used: c.Status.Budget.Used})
	}
	return views, nil
}

// parentView reads a child's parent. A parent the cache does not show is
// confirmed gone with a live read: cancelling a child is final.
func (r *ResearchRunReconciler) parentView(ctx context.Context, run *v1alpha1.ResearchRun) (lifecycle.ParentView, error) {
	ref := run.Spec.Parent
	key := types.NamespacedName{Namespace: run.Namespace, Name: ref.Name}
	parent := &v1alpha1.ResearchRun{}
	err := r.Get(ctx, key, parent)
	if apierrors.IsNotFound(err) {
		err = r.APIReader.Get(ctx, key, parent)
	}
	switch {
	case apierrors.IsNotFound(err):
		return lifecycle.ParentView{Name: ref.Name, Gone: true}, nil
	case err != nil:
		return lifecycle.ParentView{}, fmt.Errorf("reading the parent %s of run %s: %w", ref.Name, klog.KObj(run), err)
	}
	gone := string(parent.UID) != ref.UID || parent.DeletionTimestamp != nil
	return lifecycle.ParentView{Name: ref.Name, Gone: gone, Phase: parent.Status.Phase, Reason: parent.Status.Reason}, nil
}

// stopForParent asks a child to stop when its parent's state says so
// (lifecycle.ChildStop): its spec.stop is raised, with the cause in its
// stop-cause annotation, as the session's deletion does. It reports whether
// it wrote: the write brings the next pass.
func (r *ResearchRunReconciler) stopForParent(ctx context.Context, run *v1alpha1.ResearchRun, policy *v1alpha1.RuntimePolicy) (bool, error) {
	if run.Spec.Parent == nil || run.Status.Phase == v1alpha1.PhaseTerminated {
		return false, nil
	}
	parent, err := r.parentView(ctx, run)
	if err != nil {
		return false, err
	}
	onFinalize := v1alpha1.StopFinalize
	if policy != nil && policy.Spec.Children != nil && policy.Spec.Children.OnParentFinalize != "" {
		onFinalize = policy.Spec.Children.OnParentFinalize
	}
	stop, cause := lifecycle.ChildStop(parent, onFinalize)
	if !lifecycle.RaiseStop(run.Spec.Stop, stop) {
		return false, nil
	}
	next := run.DeepCopy()
	next.Spec.Stop = stop
	if next.Annotations == nil {
		next.Annotations = map[string]string{}
	}
	next.Annotations[v1alpha1.AnnotationStopCause] = cause
	if err := r.Patch(ctx, next, client.MergeFrom(run)); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	logf.FromContext(ctx).Info("Asked child run to stop", "stop", stop, "cause", cause)
	return true, nil
}

// treeChanged maps a run's change to its relatives: a child's phase or
// usage is a fact for its parent's accounting, a parent's phase or deletion
// decides its children's stop.
func (r *ResearchRunReconciler) treeChanged() handler.EventHandler {
	enqueue := func(ctx context.Context, run *v1alpha1.ResearchRun, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		if p := run.Spec.Parent; p != nil {
			q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: run.Namespace, Name: p.Name}})
		}
		kids, err := r.childRuns(ctx, run)
		if err != nil {
			return
		}
		for i := range kids {
			q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&kids[i])})
		}
	}
	return handler.TypedFuncs[client.Object, reconcile.Request]{
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			old, okOld := e.ObjectOld.(*v1alpha1.ResearchRun)
			run, okNew := e.ObjectNew.(*v1alpha1.ResearchRun)
			if !okOld || !okNew {
				return
			}
			if old.Status.Phase != run.Status.Phase || old.Status.Budget.Used != run.Status.Budget.Used ||
				(old.DeletionTimestamp == nil) != (run.DeletionTimestamp == nil) {
				enqueue(ctx, run, q)
			}
		},
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if run, ok := e.Object.(*v1alpha1.ResearchRun); ok && run.Spec.Parent != nil {
				enqueue(ctx, run, q)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if run, ok := e.Object.(*v1alpha1.ResearchRun); ok {
				enqueue(ctx, run, q)
			}
		},
	}
}
