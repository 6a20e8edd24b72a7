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
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// TestTerminalFactsJumpTheQueue: behind a burst of new runs waiting in the
// controller's (priority) work queue, a stopped pod, a proposed finish and a
// settled publication are handed out first; an ordinary fact waits its turn.
func TestTerminalFactsJumpTheQueue(t *testing.T) {
	owned := func(run string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: "ns", Name: run + "-1", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: v1alpha1.GroupVersion.String(), Kind: "ResearchRun", Name: run, Controller: new(true)}}}
	}
	pod := func(run string, phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: owned(run), Status: corev1.PodStatus{Phase: phase}}
	}
	attempt := func(run string, s v1alpha1.RunAttemptStatus) *v1alpha1.RunAttempt {
		return &v1alpha1.RunAttempt{ObjectMeta: owned(run), Status: s}
	}
	cases := []struct {
		name     string
		old, obj client.Object
		terminal bool
	}{
		{"pod stopped", pod("r", corev1.PodRunning), pod("r", corev1.PodSucceeded), true},
		{"pod failed", pod("r", corev1.PodRunning), pod("r", corev1.PodFailed), true},
		{"pod started (not terminal)", pod("r", corev1.PodPending), pod("r", corev1.PodRunning), false},
		{"finish proposed", attempt("r", v1alpha1.RunAttemptStatus{Steps: 3}),
			attempt("r", v1alpha1.RunAttemptStatus{Steps: 3, FinishProposed: true}), true},
		{"publication settled", attempt("r", v1alpha1.RunAttemptStatus{FinishProposed: true}),
			attempt("r", v1alpha1.RunAttemptStatus{FinishProposed: true, Publication: v1alpha1.Publication{Settled: true}}), true},
		{"a step (not terminal)", attempt("r", v1alpha1.RunAttemptStatus{Steps: 3}), attempt("r", v1alpha1.RunAttemptStatus{Steps: 4}), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q := priorityqueue.New[reconcile.Request]("test")
			defer q.ShutDown()
			for i := range 100 {
				q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("new-%03d", i)}})
			}
			h := newFactClock(clock.RealClock{}).wrap()
			h.Update(context.Background(), event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.obj}, q)
			first, _ := q.Get()
			if got := first.Name == "r"; got != tc.terminal {
				t.Errorf("first handed out: %s; terminal fact first = %v, want %v", first.Name, got, tc.terminal)
			}
		})
	}
}
