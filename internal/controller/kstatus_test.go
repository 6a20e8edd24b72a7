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
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// kstatusOf is what the kstatus library (sigs.k8s.io/cli-utils), as Flux
// runs it, computes for obj: converted to unstructured, with its kind.
func kstatusOf(obj client.Object) (*status.Result, error) { return kstatusOfIn(scheme, obj) }

// kstatusOfIn is kstatusOf with the kinds of scheme s.
func kstatusOfIn(s *runtime.Scheme, obj client.Object) (*status.Result, error) {
	gvk, err := apiutil.GVKForObject(obj, s)
	if err != nil {
		return nil, err
	}
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: content}
	u.SetGroupVersionKind(gvk)
	return status.Compute(u)
}

// Every row drives a run with the real reconcilers (and the suite's injected
// conflicts) to a phase or an end, then reads it once through the direct
// client: the conditions kstatus reads come in the same status write as the
// phase, so the object that first shows the phase already reads right.
var _ = Describe("kstatus (sigs.k8s.io/cli-utils/pkg/kstatus/status)", func() {
	var w *world
	BeforeEach(func() { w = newWorld() })

	// queueSession makes w's session one with this queue and switches to it.
	queueSession := func(q v1alpha1.SessionQueue) {
		GinkgoHelper()
		Expect(k8sClient.Create(ctx, &v1alpha1.Session{
			ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "q"},
			Spec:       v1alpha1.SessionSpec{PolicyRef: v1alpha1.LocalObjectReference{Name: "p"}, Queue: q},
		})).To(Succeed())
		w.session = "q"
	}
	noReserve := func(r *v1alpha1.ResearchRun) { r.Spec.Budget.OutputReserve = v1alpha1.OutputReserve{} }
	started := func(name string, mutate func(*v1alpha1.ResearchRun)) {
		GinkgoHelper()
		w.run(name, mutate)
		w.start(name, 1)
	}

	DescribeTable("reads a ResearchRun",
		func(drive func() *v1alpha1.ResearchRun, want status.Status) {
			run := drive()
			res, err := kstatusOf(run)
			Expect(err).NotTo(HaveOccurred())
			Expect(res.Status).To(Equal(want), "%s/%s/%s: %s", run.Status.Phase, run.Status.Reason, run.Status.Settlement, res.Message)
			Expect(run.Status.ObservedGeneration).To(Equal(run.Generation))
			rec := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionReconciling)
			Expect(rec).NotTo(BeNil())
			switch want {
			case status.InProgressStatus:
				Expect(rec.Status).To(Equal(metav1.ConditionTrue))
				Expect(rec.Reason).To(Equal(string(run.Status.Phase)))
				Expect(res.Message).To(Equal(run.Status.Message), "kstatus shows the run's message")
			case status.FailedStatus:
				Expect(rec.Status).To(Equal(metav1.ConditionFalse))
				Expect(res.Message).To(Equal(run.Status.Message), "kstatus shows why the run failed")
				Expect(meta.IsStatusConditionTrue(run.Status.Conditions, v1alpha1.ConditionReady)).To(BeFalse())
			case status.CurrentStatus:
				Expect(rec.Status).To(Equal(metav1.ConditionFalse))
				Expect(meta.IsStatusConditionTrue(run.Status.Conditions, v1alpha1.ConditionReady)).To(BeTrue())
				Expect(meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionStalled)).To(BeNil())
			}
		},
		Entry("Pending: its Session does not exist", func() *v1alpha1.ResearchRun {
			w.session = "missing"
			w.run("orphan", nil)
			return w.eventually("orphan", v1alpha1.PhasePending, "")
		}, status.InProgressStatus),
		Entry("Queued", func() *v1alpha1.ResearchRun {
			w.run("first", nil)
			w.eventually("first", v1alpha1.PhaseRunning, "")
			w.run("second", nil)
			return w.eventually("second", v1alpha1.PhaseQueued, "")
		}, status.InProgressStatus),
		Entry("Running", func() *v1alpha1.ResearchRun {
			started("r", nil)
			return w.eventually("r", v1alpha1.PhaseRunning, "")
		}, status.InProgressStatus),
		Entry("Recovering", func() *v1alpha1.ResearchRun {
			started("r", nil)
			w.kubelet("r", 1, corev1.PodFailed)
			return w.eventually("r", v1alpha1.PhaseRecovering, "")
		}, status.InProgressStatus),
		Entry("Finalizing", func() *v1alpha1.ResearchRun {
			started("r", nil)
			w.agent("r", 1, func(s *v1alpha1.RunAttemptStatus) { s.Steps, s.Usage.ModelRequests = 4, 8 })
			return w.eventually("r", v1alpha1.PhaseFinalizing, v1alpha1.ReasonBudgetExhausted)
		}, status.InProgressStatus),
		Entry("Completed/Complete", func() *v1alpha1.ResearchRun {
			started("r", nil)
			w.finish("r", 1, v1alpha1.SettlementComplete)
			return w.eventually("r", v1alpha1.PhaseTerminated, v1alpha1.ReasonCompleted)
		}, status.CurrentStatus),
		Entry("Completed/Partial", func() *v1alpha1.ResearchRun {
			started("r", nil)
			w.finish("r", 1, v1alpha1.SettlementPartial)
			return w.eventually("r", v1alpha1.PhaseTerminated, v1alpha1.ReasonCompleted)
		}, status.CurrentStatus),
		Entry("BudgetExhausted/Partial: the finalization delivered", func() *v1alpha1.ResearchRun {
			started("r", nil)
			w.agent("r", 1, func(s *v1alpha1.RunAttemptStatus) { s.Steps, s.Usage.ModelRequests = 4, 8 })
			w.eventually("r", v1alpha1.PhaseFinalizing, v1alpha1.ReasonBudgetExhausted)
			w.settle("r", 1, v1alpha1.SettlementPartial)
			return w.eventually("r", v1alpha1.PhaseTerminated, v1alpha1.ReasonBudgetExhausted)
		}, status.CurrentStatus),
		Entry("BudgetExhausted/None: no reserve, nothing delivered", func() *v1alpha1.ResearchRun {
			started("r", noReserve)
			w.agent("r", 1, func(s *v1alpha1.RunAttemptStatus) { s.Steps, s.Usage.ModelRequests = 5, 10 })
			return w.eventually("r", v1alpha1.PhaseTerminated, v1alpha1.ReasonBudgetExhausted)
		}, status.FailedStatus),
		Entry("DeadlineExceeded/None: the finalization never settled", func() *v1alpha1.ResearchRun {
			started("r", func(r *v1alpha1.ResearchRun) {
				r.Spec.Budget.Deadline = &metav1.Duration{Duration: time.Second}
				r.Spec.Budget.FinalizationGrace = &metav1.Duration{Duration: time.Second}
			})
			return w.eventually("r", v1alpha1.PhaseTerminated, v1alpha1.ReasonDeadlineExceeded)
		}, status.FailedStatus),
		Entry("Cancelled", func() *v1alpha1.ResearchRun {
			started("r", nil)
			w.stopRun("r", v1alpha1.StopCancel)
			return w.eventually("r", v1alpha1.PhaseTerminated, v1alpha1.ReasonCancelled)
		}, status.CurrentStatus),
		Entry("FinalizeRequested", func() *v1alpha1.ResearchRun {
			started("r", nil)
			w.stopRun("r", v1alpha1.StopFinalize)
			w.eventually("r", v1alpha1.PhaseFinalizing, v1alpha1.ReasonFinalizeRequested)
			w.settle("r", 1, v1alpha1.SettlementComplete)
			return w.eventually("r", v1alpha1.PhaseTerminated, v1alpha1.ReasonFinalizeRequested)
		}, status.CurrentStatus),
		Entry("PolicyViolation: usage above the grant", func() *v1alpha1.ResearchRun {
			started("r", nil)
			w.agent("r", 1, func(s *v1alpha1.RunAttemptStatus) { s.Steps, s.Usage.ModelRequests = 2, 9 })
			return w.eventually("r", v1alpha1.PhaseTerminated, v1alpha1.ReasonPolicyViolation)
		}, status.FailedStatus),
		Entry("AgentFailed: a fault a new attempt cannot fix", func() *v1alpha1.ResearchRun {
			started("r", noReserve)
			w.agent("r", 1, func(s *v1alpha1.RunAttemptStatus) {
				s.Faults = []v1alpha1.Fault{{Scope: v1alpha1.FaultScopeProvider, Kind: "Unauthorized", Count: 1, Escalated: true,
					LastMessage: "the provider refused the key"}}
			})
			return w.eventually("r", v1alpha1.PhaseTerminated, v1alpha1.ReasonAgentFailed)
		}, status.FailedStatus),
		Entry("UnsafeToRecover", func() *v1alpha1.ResearchRun {
			started("r", nil)
			w.agent("r", 1, func(s *v1alpha1.RunAttemptStatus) {
				s.Steps = 2
				s.InFlight = []v1alpha1.InFlightEffect{{ID: "call-7", Tool: "report.publish", Effect: v1alpha1.EffectExternal}}
			})
			w.kubelet("r", 1, corev1.PodFailed)
			return w.eventually("r", v1alpha1.PhaseTerminated, v1alpha1.ReasonUnsafeToRecover)
		}, status.FailedStatus),
		Entry("RecoveryExhausted/Partial: failed even though its finalization delivered", func() *v1alpha1.ResearchRun {
			started("r", func(r *v1alpha1.ResearchRun) { r.Spec.Recovery.MaxAttempts = 1 })
			w.kubelet("r", 1, corev1.PodFailed)
			w.eventually("r", v1alpha1.PhaseFinalizing, v1alpha1.ReasonRecoveryExhausted)
			w.kubelet("r", 2, corev1.PodRunning)
			w.settle("r", 2, v1alpha1.SettlementPartial)
			return w.eventually("r", v1alpha1.PhaseTerminated, v1alpha1.ReasonRecoveryExhausted)
		}, status.FailedStatus),
		Entry("QueueFull", func() *v1alpha1.ResearchRun {
			queueSession(v1alpha1.SessionQueue{Limit: new(int32(0))})
			w.run("first", nil)
			w.eventually("first", v1alpha1.PhaseRunning, "")
			w.run("second", nil)
			return w.eventually("second", v1alpha1.PhaseTerminated, v1alpha1.ReasonQueueFull)
		}, status.FailedStatus),
		Entry("QueueTimeout", func() *v1alpha1.ResearchRun {
			queueSession(v1alpha1.SessionQueue{Timeout: &metav1.Duration{Duration: time.Second}})
			w.run("first", nil)
			w.eventually("first", v1alpha1.PhaseRunning, "")
			w.run("second", nil)
			return w.eventually("second", v1alpha1.PhaseTerminated, v1alpha1.ReasonQueueTimeout)
		}, status.FailedStatus),
	)

	It("keeps a steady run's conditions through a pass that changes nothing", func() {
		started("steady", nil)
		w.agent("steady", 1, func(s *v1alpha1.RunAttemptStatus) { s.Steps, s.LastProgressStep = 1, 1 })
		Eventually(func() int64 { return w.get("steady").Status.Steps }, timeout, interval).Should(Equal(int64(1)))
		before := w.get("steady")

		By("an annotation wakes the reconciler; the decision is the same")
		run := before.DeepCopy()
		patch := client.MergeFrom(before)
		run.Annotations = map[string]string{"example.com/touched": "yes"}
		Expect(k8sClient.Patch(ctx, run, patch)).To(Succeed())
		Consistently(func(g Gomega) {
			now := w.get("steady")
			g.Expect(now.ResourceVersion).To(Equal(run.ResourceVersion), "no status write after the annotation")
			g.Expect(now.Status.Conditions).To(Equal(before.Status.Conditions))
		}, 2*time.Second, interval).Should(Succeed())
	})

	Describe("reads Sessions and RuntimePolicies", func() {
		kstatus := func(obj client.Object, name string) func(Gomega) status.Status {
			return func(g Gomega) status.Status {
				g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: w.ns, Name: name}, obj)).To(Succeed())
				res, err := kstatusOf(obj)
				g.Expect(err).NotTo(HaveOccurred())
				return res.Status
			}
		}
		policy := func(name string, autoApprove ...string) *v1alpha1.RuntimePolicy {
			return &v1alpha1.RuntimePolicy{
				ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name},
				Spec: v1alpha1.RuntimePolicySpec{
					Tools:       []v1alpha1.Tool{{Name: "http.get", Risk: v1alpha1.RiskLow, Effect: v1alpha1.EffectNone}},
					AutoApprove: autoApprove,
				},
			}
		}

		It("a valid policy and its session are Current", func() {
			Eventually(kstatus(&v1alpha1.RuntimePolicy{}, "p"), timeout, interval).Should(Equal(status.CurrentStatus))
			Eventually(kstatus(&v1alpha1.Session{}, w.session), timeout, interval).Should(Equal(status.CurrentStatus))
			p := &v1alpha1.RuntimePolicy{}
			Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: w.ns, Name: "p"}, p)).To(Succeed())
			Expect(meta.IsStatusConditionTrue(p.Status.Conditions, v1alpha1.ConditionReady)).To(BeTrue())
			Expect(meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionStalled)).To(BeNil(), "never stalled, never set")
		})

		It("a session waiting for its policy is InProgress, then Current once the policy comes", func() {
			Expect(k8sClient.Create(ctx, &v1alpha1.Session{
				ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "early"},
				Spec:       v1alpha1.SessionSpec{PolicyRef: v1alpha1.LocalObjectReference{Name: "later"}},
			})).To(Succeed())
			s := &v1alpha1.Session{}
			// InProgress from the start (status.observedGeneration -1), then
			// for the reason the operator writes.
			Eventually(func(g Gomega) {
				g.Expect(kstatus(s, "early")(g)).To(Equal(status.InProgressStatus))
				g.Expect(meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReconciling)).To(
					HaveField("Reason", v1alpha1.ConditionReasonPolicyNotFound))
			}, timeout, interval).Should(Succeed())
			Consistently(kstatus(s, "early"), time.Second, interval).Should(Equal(status.InProgressStatus))

			Expect(k8sClient.Create(ctx, policy("later"))).To(Succeed())
			Eventually(kstatus(s, "early"), timeout, interval).Should(Equal(status.CurrentStatus))
			Expect(meta.IsStatusConditionFalse(s.Status.Conditions, v1alpha1.ConditionReconciling)).To(BeTrue())
			Expect(s.Status.ObservedGeneration).To(Equal(s.Generation))
		})

		It("an invalid policy and its session are Failed, and Current once the policy is fixed", func() {
			Expect(k8sClient.Create(ctx, policy("bad", "nope"))).To(Succeed())
			p := &v1alpha1.RuntimePolicy{}
			Eventually(kstatus(p, "bad"), timeout, interval).Should(Equal(status.FailedStatus))
			Expect(meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionStalled)).To(And(
				HaveField("Reason", v1alpha1.ConditionReasonInvalid), HaveField("Message", ContainSubstring(`"nope"`))))
			Expect(p.Status.ObservedGeneration).To(Equal(p.Generation))

			Expect(k8sClient.Create(ctx, &v1alpha1.Session{
				ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "governed"},
				Spec:       v1alpha1.SessionSpec{PolicyRef: v1alpha1.LocalObjectReference{Name: "bad"}},
			})).To(Succeed())
			s := &v1alpha1.Session{}
			Eventually(kstatus(s, "governed"), timeout, interval).Should(Equal(status.FailedStatus))
			Expect(meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionStalled)).To(And(
				HaveField("Reason", v1alpha1.ConditionReasonPolicyInvalid), HaveField("Message", ContainSubstring(`"nope"`))))

			By("fixing the policy")
			Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: w.ns, Name: "bad"}, p)).To(Succeed())
			p.Spec.AutoApprove = nil
			Expect(k8sClient.Update(ctx, p)).To(Succeed())
			Eventually(kstatus(p, "bad"), timeout, interval).Should(Equal(status.CurrentStatus))
			Expect(meta.IsStatusConditionFalse(p.Status.Conditions, v1alpha1.ConditionStalled)).To(BeTrue())
			Eventually(kstatus(s, "governed"), timeout, interval).Should(Equal(status.CurrentStatus))
			Expect(meta.IsStatusConditionFalse(s.Status.Conditions, v1alpha1.ConditionStalled)).To(BeTrue())
		})
	})
})

// TestNoOpPassesWriteNoStatus: once the policy, the session and a running
// run are settled, a later pass of each reconciler (a second later on the
// fake clock, nothing new) writes no status: the kstatus conditions do not
// churn (their lastTransitionTime, or anything else).
func TestNoOpPassesWriteNoStatus(t *testing.T) {
	writes := map[string]int{}
	e := newEdge(t, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch,
			opts ...client.SubResourcePatchOption) error {
			if sub == "status" {
				writes[resourceOf(obj)]++
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	ctx := context.Background()
	policies := &RuntimePolicyReconciler{Client: e.client, Scheme: e.client.Scheme()}
	sessions := &SessionReconciler{Client: e.client, Scheme: e.client.Scheme(), Recorder: e.recorder}
	pass := func() {
		t.Helper()
		for _, r := range []struct {
			rec  reconcile.Reconciler
			name string
		}{{policies, "p"}, {sessions, "s"}, {e.runs, "r"}} {
			if _, err := r.rec.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: edgeNS, Name: r.name}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	pass()
	pass() // the run sees its RunAttempt, the session the run's claim
	if run := e.run(); run.Status.Phase != v1alpha1.PhaseRunning {
		t.Fatalf("run %s (%s), want Running", run.Status.Phase, run.Status.Message)
	}
	before := e.run()
	clear(writes)
	e.clock.Step(time.Second)
	pass()
	if len(writes) != 0 {
		t.Errorf("status writes by a pass with nothing new: %v", writes)
	}
	for _, o := range []struct {
		obj  client.Object
		name string
		want status.Status
	}{
		{&v1alpha1.RuntimePolicy{}, "p", status.CurrentStatus},
		{&v1alpha1.Session{}, "s", status.CurrentStatus},
		{&v1alpha1.ResearchRun{}, "r", status.InProgressStatus},
	} {
		if err := e.client.Get(ctx, types.NamespacedName{Namespace: edgeNS, Name: o.name}, o.obj); err != nil {
			t.Fatal(err)
		}
		if res, err := kstatusOfIn(e.client.Scheme(), o.obj); err != nil || res.Status != o.want {
			t.Errorf("%T %s: kstatus %v (%v), want %s", o.obj, o.name, res, err, o.want)
		}
	}
	if after := e.run(); !equalConditions(before.Status.Conditions, after.Status.Conditions) {
		t.Errorf("the run's conditions changed:\n%v\n%v", before.Status.Conditions, after.Status.Conditions)
	}
}

func equalConditions(a, b []metav1.Condition) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
