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
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// The gateway is played by the test: it writes the calls that wait for a
// decision into the attempt's status.awaitingApproval, as the tool door does.

// runEvents lists the events recorded on run with reason.
func (w *world) runEvents(run, reason string) []eventsv1.Event {
	GinkgoHelper()
	list := &eventsv1.EventList{}
	Expect(k8sClient.List(ctx, list, client.InNamespace(w.ns))).To(Succeed())
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Kind == "ResearchRun" && e.Regarding.Name == run && e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

// waitingCall is a call of tool that waits for a decision until expires.
func waitingCall(id, tool string, risk v1alpha1.Risk, expires time.Duration) v1alpha1.ApprovalRequest {
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	exp := metav1.NewTime(now.Add(expires))
	return v1alpha1.ApprovalRequest{ActionID: id, Tool: tool, Risk: risk, Summary: `{"path":"notes/plan.md"}`,
		RequestedAt: &now, ExpiresAt: &exp}
}

var _ = Describe("Approvals people can use", func() {
	var w *world
	BeforeEach(func() { w = newWorld() })

	It("shows a waiting call on the run with the condition and one event, and clears it when the call is decided", func() {
		w.run("gated", func(r *v1alpha1.ResearchRun) {
			// Much shorter than the wait: the waiting call keeps the attempt alive.
			r.Spec.Recovery.HeartbeatTimeout = &metav1.Duration{Duration: 3 * time.Second}
		})
		w.start("gated", 1)
		run := w.get("gated")
		Expect(meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionAwaitingApproval)).To(
			HaveField("Reason", v1alpha1.ConditionReasonNoPendingApprovals), "a started run says nothing waits")

		w.agent("gated", 1, func(s *v1alpha1.RunAttemptStatus) {
			s.AwaitingApproval = []v1alpha1.ApprovalRequest{waitingCall("a1", "report.publish", v1alpha1.RiskHigh, time.Minute)}
		})
		Eventually(func(g Gomega) {
			run := w.get("gated")
			g.Expect(run.Status.PendingApprovals).To(HaveExactElements(And(
				HaveField("ActionID", "a1"), HaveField("Tool", "report.publish"), HaveField("Risk", v1alpha1.RiskHigh),
				HaveField("Attempt", int32(1)), HaveField("Summary", `{"path":"notes/plan.md"}`), HaveField("ExpiresAt", Not(BeNil())))))
			c := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionAwaitingApproval)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(c.Reason).To(Equal(v1alpha1.ConditionReasonApprovalPending))
			g.Expect(c.Message).To(ContainSubstring(`kubectl patch researchrun gated --type=json -p '[{"op":"add","path":"/spec/approvals/-","value":{"actionID":"a1","decision":"Approve"}}]'`))
		}, timeout, interval).Should(Succeed())
		Eventually(func() []eventsv1.Event { return w.runEvents("gated", v1alpha1.EventReasonApprovalRequested) }, timeout, interval).Should(
			HaveExactElements(And(HaveField("Type", corev1.EventTypeNormal),
				HaveField("Note", And(ContainSubstring("action a1"), ContainSubstring("tool report.publish"), ContainSubstring("risk High"),
					ContainSubstring(`{"path":"notes/plan.md"}`))))))

		By("waiting longer than the heartbeat timeout, with no heartbeat, the attempt is not failed")
		w.agent("gated", 1, func(s *v1alpha1.RunAttemptStatus) { s.Steps = 1 }) // another fact: a pass that must not re-announce
		Consistently(func(g Gomega) {
			run := w.get("gated")
			g.Expect(run.Status.Phase).To(Equal(v1alpha1.PhaseRunning), "message: %s", run.Status.Message)
			g.Expect(run.Status.Attempt).To(Equal(int32(1)))
		}, 5*time.Second, 250*time.Millisecond).Should(Succeed())
		Expect(w.runEvents("gated", v1alpha1.EventReasonApprovalRequested)).To(HaveLen(1), "one event per newly waiting call")

		By("the decision reaches the attempt and the call no longer waits")
		w.approve("gated", v1alpha1.Approval{ActionID: "a1", Decision: v1alpha1.DecisionApprove})
		Eventually(func() []v1alpha1.Approval { return w.attempt("gated", 1).Spec.Approvals }, timeout, interval).Should(
			ContainElement(HaveField("ActionID", "a1")))
		w.agent("gated", 1, func(s *v1alpha1.RunAttemptStatus) {
			s.AwaitingApproval = nil
			s.HeartbeatTime = new(metav1.Now())
		})
		Eventually(func(g Gomega) {
			run := w.get("gated")
			g.Expect(run.Status.PendingApprovals).To(BeEmpty())
			g.Expect(run.Status.ObservedApprovals).To(Equal(int32(1)))
			c := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionAwaitingApproval)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(v1alpha1.ConditionReasonNoPendingApprovals))
		}, timeout, interval).Should(Succeed())
		Consistently(func() []eventsv1.Event {
			return w.runEvents("gated", v1alpha1.EventReasonApprovalChangedNothing)
		}, time.Second, interval).Should(BeEmpty(), "the decision was for a waiting call")
	})

	It("warns once that a late decision changes nothing", func() {
		w.run("late", nil)
		w.start("late", 1)
		w.agent("late", 1, func(s *v1alpha1.RunAttemptStatus) {
			s.AwaitingApproval = []v1alpha1.ApprovalRequest{waitingCall("a1", "report.publish", v1alpha1.RiskHigh, time.Minute)}
		})
		Eventually(func() []v1alpha1.ApprovalRequest { return w.get("late").Status.PendingApprovals }, timeout, interval).Should(HaveLen(1))
		By("the call expires before anyone decides")
		w.agent("late", 1, func(s *v1alpha1.RunAttemptStatus) { s.AwaitingApproval = nil })
		Eventually(func() []v1alpha1.ApprovalRequest { return w.get("late").Status.PendingApprovals }, timeout, interval).Should(BeEmpty())

		w.approve("late", v1alpha1.Approval{ActionID: "a1", Decision: v1alpha1.DecisionApprove})
		Eventually(func() []eventsv1.Event { return w.runEvents("late", v1alpha1.EventReasonApprovalChangedNothing) }, timeout, interval).Should(
			HaveExactElements(And(HaveField("Type", corev1.EventTypeWarning),
				HaveField("Note", And(ContainSubstring("Approve of action a1 changes nothing"), ContainSubstring("no call of attempt 1 waits on it"))))))
		Eventually(func() int32 { return w.get("late").Status.ObservedApprovals }, timeout, interval).Should(Equal(int32(1)))

		By("a later fact does not warn again")
		w.agent("late", 1, func(s *v1alpha1.RunAttemptStatus) { s.Steps = 2 })
		Eventually(func() int64 { return w.get("late").Status.Steps }, timeout, interval).Should(Equal(int64(2)))
		Consistently(func() []eventsv1.Event {
			return w.runEvents("late", v1alpha1.EventReasonApprovalChangedNothing)
		}, time.Second, interval).Should(HaveLen(1))
	})
})
