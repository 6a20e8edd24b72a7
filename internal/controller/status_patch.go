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
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// conflictRetry is how soon a pass that lost an optimistic-concurrency race
// runs again, from fresh cache contents.
const conflictRetry = 10 * time.Millisecond

// patchStatusIfChanged writes next's status when next differs (semantically)
// from orig, the object as read: a merge patch with a resourceVersion
// precondition, so a write can never undo one it did not see (a run's claim
// of its session, a newer decision). A conflict means the object changed
// since it was read; it is counted in agentrun_controller_conflicts_total
// and returned (wrapped), and the next pass decides again from fresh facts.
// Every status write of the operator goes through here. It reports whether
// it wrote.
func patchStatusIfChanged(ctx context.Context, c client.Client, orig, next client.Object) (bool, error) {
	if equality.Semantic.DeepEqual(orig, next) {
		return false, nil
	}
	err := c.Status().Patch(ctx, next, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	if err != nil {
		resource := resourceOf(orig)
		if apierrors.IsConflict(err) {
			conflicts.WithLabelValues(resource).Inc()
		}
		return false, fmt.Errorf("patching the status of %s %s: %w", resource, klog.KObj(orig), err)
	}
	return true, nil
}

// requeueOnConflict turns a conflict (someone wrote the object since the cache
// showed it; counted where it was refused) into a quick retry; other errors
// go to the rate limiter.
func requeueOnConflict(err error) (ctrl.Result, error) {
	if apierrors.IsConflict(err) {
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	}
	return ctrl.Result{}, err
}

// resourceOf names obj's resource for metrics and errors.
func resourceOf(obj client.Object) string {
	switch obj.(type) {
	case *v1alpha1.ResearchRun:
		return "researchruns"
	case *v1alpha1.Session:
		return "sessions"
	case *v1alpha1.RuntimePolicy:
		return "runtimepolicies"
	case *v1alpha1.RunAttempt:
		return "runattempts"
	}
	return fmt.Sprintf("%T", obj)
}
