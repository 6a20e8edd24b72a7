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

// Reconciler edge cases on controller-runtime's fake client, with a fake
// clock and errors injected through client/interceptor: the stories that
// need "five minutes later" or "the write is refused" without waiting or a
// real API server. The envtest suite (suite_test.go) keeps the user stories.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/runpod"
)

// edgeT0 is when every edge case starts.
var edgeT0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const edgeNS = "edges"

// edge is one edge case's world: a fake API (with the injected errors), a
// fake clock and a recorder.
type edge struct {
	t        *testing.T
	clock    *clocktesting.FakeClock
	client   client.Client
	recorder *events.FakeRecorder
	runs     *ResearchRunReconciler
}

// newEdge builds a world with a resolved, valid policy "p", a free session
// "s" and a Pending run "r". Its API stamps creationTimestamp and uid from
// the fake clock on create, as the real one does; funcs inject errors.
func newEdge(t *testing.T, funcs interceptor.Funcs) *edge {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	e := &edge{t: t, clock: clocktesting.NewFakeClock(edgeT0), recorder: events.NewFakeRecorder(100)}
	create := funcs.Create
	funcs.Create = func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		obj.SetCreationTimestamp(metav1.NewTime(e.clock.Now()))
		obj.SetUID(types.UID("uid-" + obj.GetName()))
		if create != nil {
			return create(ctx, c, obj, opts...)
		}
		return c.Create(ctx, obj, opts...)
	}
	policy := &v1alpha1.RuntimePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: edgeNS, Name: "p", Generation: 1},
		Status: v1alpha1.RuntimePolicyStatus{ObservedGeneration: 1, Conditions: []metav1.Condition{{
			Type: v1alpha1.ConditionValid, Status: metav1.ConditionTrue, Reason: v1alpha1.ConditionReasonResolved,
			ObservedGeneration: 1, LastTransitionTime: metav1.NewTime(edgeT0),
		}}},
	}
	session := &v1alpha1.Session{
		ObjectMeta: metav1.ObjectMeta{Namespace: edgeNS, Name: "s"},
		Spec:       v1alpha1.SessionSpec{PolicyRef: v1alpha1.LocalObjectReference{Name: "p"}},
	}
	run := &v1alpha1.ResearchRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: edgeNS, Name: "r", UID: "uid-r", Generation: 1,
			CreationTimestamp: metav1.NewTime(edgeT0)},
		Spec: v1alpha1.ResearchRunSpec{
			SessionRef: v1alpha1.LocalObjectReference{Name: "s"},
			Goal:       "survey the field",
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "agent", Image: "research-agent"}},
			}},
			Budget: v1alpha1.Budget{ModelRequests: 10, ToolCalls: 10,
				OutputReserve: v1alpha1.OutputReserve{ModelRequests: 2, ToolCalls: 2}},
		},
	}
	e.client = fake.NewClientBuilder().WithScheme(s).
		WithObjects(policy, session, run).
		WithStatusSubresource(&v1alpha1.ResearchRun{}, &v1alpha1.Session{}, &v1alpha1.RuntimePolicy{}, &v1alpha1.RunAttempt{}).
		WithIndex(&v1alpha1.ResearchRun{}, sessionRefIndex, func(o client.Object) []string {
			return []string{o.(*v1alpha1.ResearchRun).Spec.SessionRef.Name}
		}).
		WithIndex(&v1alpha1.Session{}, policyRefIndex, func(o client.Object) []string {
			return []string{o.(*v1alpha1.Session).Spec.PolicyRef.Name}
		}).
		WithInterceptorFuncs(funcs).
		Build()
	e.runs = &ResearchRunReconciler{
		Client: e.client, APIReader: e.client, Scheme: s, Recorder: e.recorder, Clock: e.clock,
		facts:           newFactClock(e.clock),
		podExpectations: newExpectations(e.clock, time.Minute),
		created:         newCreatedPods(),
		admissions:      newAdmissions(),
		runners:         &runners{ready: map[string]bool{}},
	}
	return e
}

// reconcile runs one pass of the ResearchRun reconciler for run r.
func (e *edge) reconcile() ctrl.Result {
	e.t.Helper()
	res, err := e.runs.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: edgeNS, Name: "r"}})
	if err != nil {
		e.t.Fatalf("Reconcile: %v", err)
	}
	return res
}

func (e *edge) run() *v1alpha1.ResearchRun {
	e.t.Helper()
	run := &v1alpha1.ResearchRun{}
	if err := e.client.Get(context.Background(), types.NamespacedName{Namespace: edgeNS, Name: "r"}, run); err != nil {
		e.t.Fatal(err)
	}
	return run
}

// events drains the events recorded so far, as "Type Reason".
func (e *edge) events() []string {
	var out []string
	for {
		select {
		case ev := <-e.recorder.Events:
			f := strings.Fields(ev)
			out = append(out, strings.Join(f[:min(2, len(f))], " "))
		default:
			return out
		}
	}
}

// conflictsOf reads agentrun_controller_conflicts_total for resource.
func conflictsOf(t *testing.T, resource string) float64 {
	t.Helper()
	m := &dto.Metric{}
	if err := conflicts.WithLabelValues(resource).Write(m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestPodStartTimeoutOnTheFakeClock: a run whose pod never starts is
// recovered once recovery.startTimeout (default 5m) has passed — five
// minutes of the fake clock, not of the test.
func TestPodStartTimeoutOnTheFakeClock(t *testing.T) {
	e := newEdge(t, interceptor.Funcs{})
	res := e.reconcile()
	if run := e.run(); run.Status.Phase != v1alpha1.PhaseRunning || run.Status.Attempt != 1 {
		t.Fatalf("first pass: %s attempt %d (%s), want Running attempt 1", run.Status.Phase, run.Status.Attempt, run.Status.Message)
	}
	if evs := e.events(); len(evs) != 0 {
		t.Errorf("first pass: events %v, want none (a usual start has no event: Terminated tells the run)", evs)
	}
	// The pass that creates attempt 1 cannot see its RunAttempt yet, so its
	// requeue does not count the start timeout; the next event (the pod's
	// scheduling status) brings a pass that does.
	if res.RequeueAfter <= 0 {
		t.Errorf("first pass: requeue after %s, want a wake-up", res.RequeueAfter)
	}
	if res = e.reconcile(); res.RequeueAfter != 5*time.Minute {
		t.Errorf("a pass once the attempt exists: requeue after %s, want the 5m start timeout", res.RequeueAfter)
	}

	e.clock.Step(5*time.Minute - time.Second)
	e.reconcile()
	if run := e.run(); run.Status.Phase != v1alpha1.PhaseRunning {
		t.Fatalf("a second before the start timeout: %s (%s), want Running", run.Status.Phase, run.Status.Message)
	}

	e.clock.Step(time.Second)
	e.reconcile()
	run := e.run()
	if run.Status.Phase != v1alpha1.PhaseRecovering || !strings.Contains(run.Status.Message, "its pod did not start within 5m0s") {
		t.Fatalf("at the start timeout: %s (%s), want Recovering because the pod did not start", run.Status.Phase, run.Status.Message)
	}
	if diff := cmp.Diff([]string{"Warning Recovering"}, e.events()); diff != "" {
		t.Errorf("at the start timeout: events (-want +got):\n%s", diff)
	}
	pod := &corev1.Pod{}
	err := e.client.Get(context.Background(), types.NamespacedName{Namespace: edgeNS, Name: runpod.Name("r", 1)}, pod)
	if !apierrors.IsNotFound(err) {
		t.Errorf("the pod that did not start was not deleted: %v", err)
	}
}

// TestRefusedStatusWriteLeavesNothingBehind: when the run's status write
// conflicts, the pass ends with a quick requeue, the conflict is counted,
// and nothing of the decision happens — no event, no RunAttempt, no pod.
func TestRefusedStatusWriteLeavesNothingBehind(t *testing.T) {
	before := conflictsOf(t, "researchruns")
	e := newEdge(t, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if _, ok := obj.(*v1alpha1.ResearchRun); ok && sub == "status" {
				return apierrors.NewConflict(schema.GroupResource{Group: v1alpha1.GroupVersion.Group, Resource: "researchruns"},
					obj.GetName(), errors.New("injected by the test"))
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	if res := e.reconcile(); res.RequeueAfter != conflictRetry {
		t.Errorf("requeue after %s, want the quick conflict retry %s", res.RequeueAfter, conflictRetry)
	}
	if got := conflictsOf(t, "researchruns") - before; got != 1 {
		t.Errorf("agentrun_controller_conflicts_total{resource=researchruns} rose by %v, want 1", got)
	}
	if evs := e.events(); len(evs) != 0 {
		t.Errorf("events recorded for a decision that was not written: %v", evs)
	}
	attempts := &v1alpha1.RunAttemptList{}
	if err := e.client.List(context.Background(), attempts); err != nil || len(attempts.Items) != 0 {
		t.Errorf("RunAttempts after a refused status write: %d (%v), want none", len(attempts.Items), err)
	}
	pods := &corev1.PodList{}
	if err := e.client.List(context.Background(), pods); err != nil || len(pods.Items) != 0 {
		t.Errorf("pods after a refused status write: %d (%v), want none", len(pods.Items), err)
	}
	if run := e.run(); run.Status.Phase != "" {
		t.Errorf("run status written despite the conflict: %s", run.Status.Phase)
	}
}

// TestEveryStatusWriteCarriesTheLock: the Session, RuntimePolicy and
// ResearchRun status patches all carry a resourceVersion precondition (the
// RuntimePolicy one used to have none).
func TestEveryStatusWriteCarriesTheLock(t *testing.T) {
	locked := map[string]bool{}
	e := newEdge(t, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			data, err := patch.Data(obj)
			if err != nil {
				return err
			}
			if sub == "status" {
				locked[resourceOf(obj)] = strings.Contains(string(data), `"resourceVersion"`)
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	// A policy edit the cache has not resolved yet, so its status changes.
	ctx := context.Background()
	p := &v1alpha1.RuntimePolicy{}
	if err := e.client.Get(ctx, types.NamespacedName{Namespace: edgeNS, Name: "p"}, p); err != nil {
		t.Fatal(err)
	}
	p.Status.Conditions = nil
	if err := e.client.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	policies := &RuntimePolicyReconciler{Client: e.client, Scheme: e.client.Scheme()}
	if _, err := policies.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: edgeNS, Name: "p"}}); err != nil {
		t.Fatal(err)
	}
	sessions := &SessionReconciler{Client: e.client, Scheme: e.client.Scheme(), Recorder: e.recorder}
	if _, err := sessions.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: edgeNS, Name: "s"}}); err != nil {
		t.Fatal(err)
	}
	e.reconcile()
	want := map[string]bool{"researchruns": true, "sessions": true, "runtimepolicies": true}
	if diff := cmp.Diff(want, locked); diff != "" {
		t.Errorf("status patches with a resourceVersion precondition, by resource (-want +got):\n%s", diff)
	}
}

// TestEventsSurviveALaterFailedStep: a pass whose status write succeeded
// and whose next step then fails (deleting the pod of a cancelled run)
// still records the transition's event: it was recorded right after the
// status write. The next pass finds the decision in the status, has no
// transition of its own and records nothing more, so an event recorded only
// at the end of a pass would be lost for good.
func TestEventsSurviveALaterFailedStep(t *testing.T) {
	ctx := context.Background()
	failing := false
	e := newEdge(t, interceptor.Funcs{
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if _, ok := obj.(*corev1.Pod); ok && failing {
				return apierrors.NewInternalError(errors.New("injected by the test"))
			}
			return c.Delete(ctx, obj, opts...)
		},
	})
	e.reconcile()
	if run := e.run(); run.Status.Phase != v1alpha1.PhaseRunning || run.Status.Attempt != 1 {
		t.Fatalf("first pass: %s attempt %d (%s), want Running attempt 1", run.Status.Phase, run.Status.Attempt, run.Status.Message)
	}
	_ = e.events()
	run := e.run()
	run.Spec.Stop = v1alpha1.StopCancel
	if err := e.client.Update(ctx, run); err != nil {
		t.Fatal(err)
	}

	failing = true
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: edgeNS, Name: "r"}}
	if _, err := e.runs.Reconcile(ctx, req); err == nil || !strings.Contains(err.Error(), "injected by the test") {
		t.Fatalf("cancel pass: error %v, want the injected pod delete failure", err)
	}
	if run := e.run(); run.Status.Reason != v1alpha1.ReasonCancelled {
		t.Fatalf("cancel pass: %s/%s (%s), want the decision Cancelled written", run.Status.Phase, run.Status.Reason, run.Status.Message)
	}
	if diff := cmp.Diff([]string{"Warning Stopping"}, e.events()); diff != "" {
		t.Errorf("cancel pass, failed after the status write: events (-want +got):\n%s", diff)
	}

	failing = false
	e.reconcile()
	pod := &corev1.Pod{}
	if err := e.client.Get(ctx, types.NamespacedName{Namespace: edgeNS, Name: runpod.Name("r", 1)}, pod); err == nil && pod.DeletionTimestamp == nil {
		t.Errorf("second pass: pod %s not deleted", runpod.Name("r", 1))
	}
	if evs := e.events(); len(evs) != 0 {
		t.Errorf("second pass, redoing the failed step: events %v, want none (the transition was reported once)", evs)
	}
}

// TestFinalizeOnlyAttemptWaitsForTheFailedPod: the last attempt's pod never
// starts, so recovery is exhausted and the run finalizes in a new,
// finalize-only attempt — but only once the failed pod is gone. While it is
// still stopping (a finalizer stands in for the kubelet's grace period), no
// RunAttempt and no pod of attempt 2 exist, so two pods of the run never
// overlap.
func TestFinalizeOnlyAttemptWaitsForTheFailedPod(t *testing.T) {
	ctx := context.Background()
	e := newEdge(t, interceptor.Funcs{})
	run := e.run()
	run.Spec.Recovery.MaxAttempts = 1
	if err := e.client.Update(ctx, run); err != nil {
		t.Fatal(err)
	}
	e.reconcile()
	e.reconcile()
	key := func(n int32) types.NamespacedName {
		return types.NamespacedName{Namespace: edgeNS, Name: runpod.Name("r", n)}
	}
	pod1 := &corev1.Pod{}
	if err := e.client.Get(ctx, key(1), pod1); err != nil {
		t.Fatalf("the pod of attempt 1: %v", err)
	}
	pod1.Finalizers = append(pod1.Finalizers, "test.agentrun.dev/still-stopping")
	if err := e.client.Update(ctx, pod1); err != nil {
		t.Fatal(err)
	}
	e.events()

	e.clock.Step(5 * time.Minute) // the pod did not start: attempt 1, the last one, failed
	e.reconcile()
	e.reconcile() // a second pass while the pod still stops changes nothing
	if run := e.run(); run.Status.Phase != v1alpha1.PhaseRecovering || run.Status.Attempt != 1 ||
		!strings.Contains(run.Status.Message, "deleting its pod, then attempt 2 finalizes from the output reserve (RecoveryExhausted") {
		t.Fatalf("while the failed pod stops: %s attempt %d (%s), want Recovering on attempt 1, deleting its pod",
			run.Status.Phase, run.Status.Attempt, run.Status.Message)
	}
	if err := e.client.Get(ctx, key(1), pod1); err != nil || pod1.DeletionTimestamp == nil {
		t.Fatalf("the failed pod is not being deleted: %v, deletionTimestamp %v", err, pod1.DeletionTimestamp)
	}
	for _, obj := range []client.Object{&corev1.Pod{}, &v1alpha1.RunAttempt{}} {
		if err := e.client.Get(ctx, key(2), obj); !apierrors.IsNotFound(err) {
			t.Errorf("%T %s exists while the pod of attempt 1 still stops: %v", obj, key(2).Name, err)
		}
	}
	if diff := cmp.Diff([]string{"Warning Recovering"}, e.events()); diff != "" {
		t.Errorf("while the failed pod stops: events (-want +got):\n%s", diff)
	}

	pod1.Finalizers = nil // the pod has stopped and is gone
	if err := e.client.Update(ctx, pod1); err != nil {
		t.Fatal(err)
	}
	e.reconcile()
	run = e.run()
	if run.Status.Phase != v1alpha1.PhaseFinalizing || run.Status.Reason != v1alpha1.ReasonRecoveryExhausted || run.Status.Attempt != 2 ||
		!strings.Contains(run.Status.Message, "attempt 1 failed: its pod did not start within 5m0s; recovery exhausted after 1 of 1 attempts") {
		t.Fatalf("once the failed pod is gone: %s/%s attempt %d (%s), want Finalizing/RecoveryExhausted on attempt 2",
			run.Status.Phase, run.Status.Reason, run.Status.Attempt, run.Status.Message)
	}
	if err := e.client.Get(ctx, key(2), &corev1.Pod{}); err != nil {
		t.Errorf("the finalize-only attempt's pod: %v", err)
	}
	if diff := cmp.Diff([]string{"Normal Finalizing", "Normal AttemptStarted"}, e.events()); diff != "" {
		t.Errorf("once the failed pod is gone: events (-want +got):\n%s", diff)
	}
}

// TestAStoppedAttemptIsReadLive: a cache stalled in its relist back-off
// (after an API server restart) still shows attempt 1 without the
// write-ahead record the gateway wrote before dispatching a non-idempotent
// call. When the pod fails, the decision reads the attempt live: the run
// ends UnsafeToRecover instead of starting attempt 2, which would replay the
// call whose outcome is unknown (chaos suite, apiserver-restart: a ticket
// created twice).
func TestAStoppedAttemptIsReadLive(t *testing.T) {
	ctx := context.Background()
	e := newEdge(t, interceptor.Funcs{})
	e.reconcile()
	e.reconcile()
	key := func(n int32) types.NamespacedName {
		return types.NamespacedName{Namespace: edgeNS, Name: runpod.Name("r", n)}
	}
	// The cache: the attempt as it was before the gateway's write.
	frozen := &v1alpha1.RunAttempt{}
	if err := e.client.Get(ctx, key(1), frozen); err != nil {
		t.Fatal(err)
	}
	e.runs.Client = interceptor.NewClient(e.client.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, k client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if ra, ok := obj.(*v1alpha1.RunAttempt); ok && k == key(1) {
				frozen.DeepCopyInto(ra)
				return nil
			}
			return c.Get(ctx, k, obj, opts...)
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if err := c.List(ctx, list, opts...); err != nil {
				return err
			}
			if l, ok := list.(*v1alpha1.RunAttemptList); ok {
				for i := range l.Items {
					if l.Items[i].Name == key(1).Name {
						l.Items[i] = *frozen.DeepCopy()
					}
				}
			}
			return nil
		},
	})
	// The gateway's write-ahead record, on the API server only.
	ra := frozen.DeepCopy()
	ra.Status.InFlight = []v1alpha1.InFlightEffect{{ID: "call-1", Tool: "ticket.create", Effect: v1alpha1.EffectExternal,
		StartedAt: &metav1.Time{Time: e.clock.Now()}}}
	if err := e.client.Status().Update(ctx, ra); err != nil {
		t.Fatal(err)
	}
	// The pod fails.
	pod := &corev1.Pod{}
	if err := e.client.Get(ctx, key(1), pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase = corev1.PodFailed
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "agent", State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error", FinishedAt: metav1.NewTime(e.clock.Now())}}}}
	if err := e.client.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	e.clock.Step(time.Minute) // past the fact grace: the decision is due
	e.reconcile()
	e.reconcile()
	run := e.run()
	if run.Status.Phase != v1alpha1.PhaseTerminated || run.Status.Reason != v1alpha1.ReasonUnsafeToRecover {
		t.Fatalf("after the pod failed: %s/%s attempt %d (%s), want Terminated/UnsafeToRecover",
			run.Status.Phase, run.Status.Reason, run.Status.Attempt, run.Status.Message)
	}
	if err := e.client.Get(ctx, key(2), &v1alpha1.RunAttempt{}); !apierrors.IsNotFound(err) {
		t.Errorf("attempt 2 exists (it would replay the call): %v", err)
	}
}

// TestAStaleLeaseIsReadLiveBeforeATimeout: the cache shows the gateway's
// Lease last renewed past the heartbeat timeout (stalled in its relist
// back-off after an API server restart) while the gateway renews on time.
// Before the timeout replaces the attempt, the Lease is read live, and the
// run stays Running.
func TestAStaleLeaseIsReadLiveBeforeATimeout(t *testing.T) {
	ctx := context.Background()
	e := newEdge(t, interceptor.Funcs{})
	e.reconcile()
	e.reconcile()
	key := types.NamespacedName{Namespace: edgeNS, Name: runpod.Name("r", 1)}
	leaseKey := types.NamespacedName{Namespace: "agentrun-system", Name: "agentrun-gateway-node1"}
	holder := "agentrun-gateway-node1_1"
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: leaseKey.Namespace, Name: leaseKey.Name},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, AcquireTime: &metav1.MicroTime{Time: e.clock.Now()},
			RenewTime: &metav1.MicroTime{Time: e.clock.Now()}}}
	if err := e.client.Create(ctx, lease); err != nil {
		t.Fatal(err)
	}
	ra := &v1alpha1.RunAttempt{}
	if err := e.client.Get(ctx, key, ra); err != nil {
		t.Fatal(err)
	}
	ra.Status.Liveness = &v1alpha1.AttemptLiveness{Gateway: leaseKey.String(), Holder: holder, Since: metav1.NewTime(e.clock.Now())}
	if err := e.client.Status().Update(ctx, ra); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{}
	if err := e.client.Get(ctx, key, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase = corev1.PodRunning
	pod.Status.StartTime = &metav1.Time{Time: e.clock.Now()}
	if err := e.client.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	frozen := lease.DeepCopy()
	e.runs.Client = interceptor.NewClient(e.client.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, k client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if l, ok := obj.(*coordinationv1.Lease); ok && k == leaseKey {
				frozen.DeepCopyInto(l)
				return nil
			}
			return c.Get(ctx, k, obj, opts...)
		},
	})
	// Two minutes on: the gateway renewed just now; the cache says 2m ago.
	e.clock.Step(2 * time.Minute)
	lease.Spec.RenewTime = &metav1.MicroTime{Time: e.clock.Now()}
	if err := e.client.Update(ctx, lease); err != nil {
		t.Fatal(err)
	}
	e.reconcile()
	if run := e.run(); run.Status.Phase != v1alpha1.PhaseRunning {
		t.Fatalf("with the Lease renewed (the cache showing it 2m old): %s (%s), want Running", run.Status.Phase, run.Status.Message)
	}
	// And a Lease that really is 2m old times the attempt out.
	e.clock.Step(2 * time.Minute)
	e.reconcile()
	if run := e.run(); run.Status.Phase != v1alpha1.PhaseRecovering || !strings.Contains(run.Status.Message, "no heartbeat") {
		t.Fatalf("with the Lease 2m old: %s (%s), want Recovering on no heartbeat", run.Status.Phase, run.Status.Message)
	}
}
