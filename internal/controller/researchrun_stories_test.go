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
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

var _ = Describe("The termination owner", func() {
	var w *world
	BeforeEach(func() { w = newWorld() })

	It("1. completes a normal run: steps, finish, settlement Complete", func() {
		w.run("normal", nil)
		w.start("normal", 1)
		ra := w.attempt("normal", 1)
		Expect(ra.Spec.Grant.ModelRequests).To(Equal(int64(8)), "working allowance = budget 10 - reserve 2")
		Eventually(func() string { return w.attempt("normal", 1).Spec.PodUID }, timeout, interval).Should(Equal(string(w.pod("normal", 1).UID)))
		w.agent("normal", 1, func(s *v1alpha1.RunAttemptStatus) {
			s.Steps, s.LastProgressStep, s.Usage = 3, 3, v1alpha1.Usage{ModelRequests: 3, ToolCalls: 2}
		})
		Eventually(func() int64 { return w.get("normal").Status.Steps }, timeout, interval).Should(Equal(int64(3)))

		w.finish("normal", 1, v1alpha1.SettlementComplete)
		run := w.eventually("normal", v1alpha1.PhaseTerminated, v1alpha1.ReasonCompleted)
		Expect(run.Status.Settlement).To(Equal(v1alpha1.SettlementComplete))
		Expect(meta.IsStatusConditionTrue(run.Status.Conditions, v1alpha1.ConditionSucceeded)).To(BeTrue())
		Expect(run.Status.CompletionTime).NotTo(BeNil())
		Expect(run.Status.Budget.Used).To(Equal(v1alpha1.Usage{ModelRequests: 3, ToolCalls: 2}))
		Expect(w.phaseSequence("normal")).To(Equal([]v1alpha1.Phase{v1alpha1.PhaseRunning, v1alpha1.PhaseFinalizing, v1alpha1.PhaseTerminated}))
		Expect(w.attempts("normal")).To(Equal([]int{1}))
		// The attempt's pod has stopped, but its token stays valid for up to
		// an hour: the attempt is told of the end anyway (Terminated, zero
		// grant), so the gateway refuses it with run_terminated (security
		// review 25, item 4), and is then left alone.
		Eventually(func(g Gomega) {
			ra := w.attempt("normal", 1)
			g.Expect(ra.Spec.RunPhase).To(Equal(v1alpha1.PhaseTerminated))
			g.Expect(ra.Spec.Grant).To(Equal(v1alpha1.Grant{}))
		}, timeout, interval).Should(Succeed())
		before := w.attempt("normal", 1)
		Consistently(func() string { return w.attempt("normal", 1).ResourceVersion }, "500ms", interval).Should(Equal(before.ResourceVersion))
	})

	It("2. survives a tool fault and a provider fault handled locally", func() {
		w.run("faults", nil)
		w.start("faults", 1)
		w.agent("faults", 1, func(s *v1alpha1.RunAttemptStatus) {
			s.Steps, s.LastProgressStep = 2, 2
			s.Faults = []v1alpha1.Fault{
				{Scope: v1alpha1.FaultScopeTool, Kind: "Timeout", Retryable: true, Count: 1, LastMessage: "http.get timed out"},
				{Scope: v1alpha1.FaultScopeProvider, Kind: "RateLimited", Retryable: true, Count: 1},
			}
		})
		Eventually(func() int64 { return w.get("faults").Status.Gates.LocalFaults }, timeout, interval).Should(Equal(int64(2)))
		Consistently(func() v1alpha1.Phase { return w.get("faults").Status.Phase }, time.Second, interval).Should(Equal(v1alpha1.PhaseRunning))
		w.finish("faults", 1, v1alpha1.SettlementComplete)
		w.eventually("faults", v1alpha1.PhaseTerminated, v1alpha1.ReasonCompleted)
		Expect(w.attempts("faults")).To(Equal([]int{1}))
	})

	It("3. finalizes from the reserve when the working budget is used up", func() {
		w.run("budget", nil)
		w.start("budget", 1)
		w.agent("budget", 1, func(s *v1alpha1.RunAttemptStatus) {
			s.Steps, s.LastProgressStep, s.Usage = 4, 4, v1alpha1.Usage{ModelRequests: 8, ToolCalls: 3}
		})
		run := w.eventually("budget", v1alpha1.PhaseFinalizing, v1alpha1.ReasonBudgetExhausted)
		Expect(run.Status.Message).To(ContainSubstring("8/8"))
		Eventually(func() v1alpha1.Grant { return w.attempt("budget", 1).Spec.Grant }, timeout, interval).Should(
			Equal(v1alpha1.Grant{ModelRequests: 10, ToolCalls: 5, FinalizeOnly: true,
				Reserve: &v1alpha1.Usage{ModelRequests: 2, ToolCalls: 2}}), "usage at entry 8/3 + reserve 2/2")

		w.agent("budget", 1, func(s *v1alpha1.RunAttemptStatus) { s.Usage.ModelRequests = 10 })
		w.settle("budget", 1, v1alpha1.SettlementPartial)
		run = w.eventually("budget", v1alpha1.PhaseTerminated, v1alpha1.ReasonBudgetExhausted)
		Expect(run.Status.Settlement).To(Equal(v1alpha1.SettlementPartial))
		Expect(run.Status.Budget.Used.ModelRequests).To(Equal(int64(10)))
		Expect(meta.IsStatusConditionTrue(run.Status.Conditions, v1alpha1.ConditionSucceeded)).To(BeFalse())
		Expect(meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionStalled)).To(BeNil(),
			"kstatus reads a run whose finalization delivered as Current, not failed")
		Expect(meta.IsStatusConditionTrue(run.Status.Conditions, v1alpha1.ConditionReady)).To(BeTrue())
		Expect(w.phaseSequence("budget")).To(Equal([]v1alpha1.Phase{v1alpha1.PhaseRunning, v1alpha1.PhaseFinalizing, v1alpha1.PhaseTerminated}))
	})

	It("4. terminates at once when the budget is used up and there is no reserve", func() {
		w.run("noreserve", func(r *v1alpha1.ResearchRun) { r.Spec.Budget.OutputReserve = v1alpha1.OutputReserve{} })
		w.start("noreserve", 1)
		w.agent("noreserve", 1, func(s *v1alpha1.RunAttemptStatus) { s.Steps, s.Usage.ModelRequests = 5, 10 })
		run := w.eventually("noreserve", v1alpha1.PhaseTerminated, v1alpha1.ReasonBudgetExhausted)
		Expect(run.Status.Settlement).To(Equal(v1alpha1.SettlementNone))
		Expect(w.podGone("noreserve", 1)).To(BeTrue(), "the pod is deleted before Terminated")
		Expect(w.phaseSequence("noreserve")).To(Equal([]v1alpha1.Phase{v1alpha1.PhaseRunning, v1alpha1.PhaseTerminated}))
	})

	It("5. degrades before it ends a run that repeats a call", func() {
		w.run("repeat", nil)
		w.start("repeat", 1)
		w.agent("repeat", 1, func(s *v1alpha1.RunAttemptStatus) {
			s.Steps, s.LastProgressStep = 2, 2
			s.Calls = []v1alpha1.CallCount{{Tool: "http.get", Fingerprint: "abc", Count: 2}}
		})
		Eventually(func(g Gomega) {
			ra := w.attempt("repeat", 1)
			g.Expect(ra.Spec.Directives).To(ContainElement(HaveField("Type", v1alpha1.DirectiveDegrade)))
		}, timeout, interval).Should(Succeed())
		Expect(w.get("repeat").Status.Phase).To(Equal(v1alpha1.PhaseRunning))

		w.agent("repeat", 1, func(s *v1alpha1.RunAttemptStatus) {
			s.Steps = 3
			s.Calls = []v1alpha1.CallCount{{Tool: "http.get", Fingerprint: "abc", Count: 3}}
		})
		w.eventually("repeat", v1alpha1.PhaseFinalizing, v1alpha1.ReasonRepeatedCall)
		w.settle("repeat", 1, v1alpha1.SettlementPartial)
		w.eventually("repeat", v1alpha1.PhaseTerminated, v1alpha1.ReasonRepeatedCall)
	})

	It("6. finalizes a run without progress, and a run at its step limit", func() {
		w.run("stuck", func(r *v1alpha1.ResearchRun) { r.Spec.Gates.NoProgressLimit = 3 })
		w.start("stuck", 1)
		w.agent("stuck", 1, func(s *v1alpha1.RunAttemptStatus) { s.Steps, s.LastProgressStep = 4, 1 })
		w.eventually("stuck", v1alpha1.PhaseFinalizing, v1alpha1.ReasonNoProgress)

		w.newSession("s2")
		w.session = "s2"
		w.run("long", func(r *v1alpha1.ResearchRun) { r.Spec.Gates.MaxSteps = 5 })
		w.start("long", 1)
		w.agent("long", 1, func(s *v1alpha1.RunAttemptStatus) { s.Steps, s.LastProgressStep = 5, 5 })
		w.eventually("long", v1alpha1.PhaseFinalizing, v1alpha1.ReasonStepLimit)
	})

	It("7. finalizes at the deadline and terminates at deadline + grace even if the pod never settles", func() {
		w.run("late", func(r *v1alpha1.ResearchRun) {
			r.Spec.Budget.Deadline = &metav1.Duration{Duration: 2 * time.Second}
			r.Spec.Budget.FinalizationGrace = &metav1.Duration{Duration: 2 * time.Second}
		})
		w.start("late", 1)
		w.eventually("late", v1alpha1.PhaseFinalizing, v1alpha1.ReasonDeadlineExceeded)
		run := w.eventually("late", v1alpha1.PhaseTerminated, v1alpha1.ReasonDeadlineExceeded)
		Expect(run.Status.CompletionTime.Sub(run.Status.StartTime.Time)).To(BeNumerically(">=", 4*time.Second))
		Expect(w.podGone("late", 1)).To(BeTrue())
	})

	It("8. recovers a failed pod with nothing in flight, carrying the ledger", func() {
		w.run("crash", nil)
		w.start("crash", 1)
		w.agent("crash", 1, func(s *v1alpha1.RunAttemptStatus) {
			s.Steps, s.LastProgressStep, s.Usage = 2, 2, v1alpha1.Usage{ModelRequests: 3, ToolCalls: 1}
		})
		Eventually(func() int64 { return w.get("crash").Status.Budget.Used.ModelRequests }, timeout, interval).Should(Equal(int64(3)))
		w.kubelet("crash", 1, corev1.PodFailed)
		w.eventually("crash", v1alpha1.PhaseRecovering, "")

		Eventually(func() int64 { return w.attempt("crash", 2).Spec.Grant.ModelRequests }, timeout, interval).Should(
			Equal(int64(5)), "working 8 - 3 used by attempt 1")
		w.start("crash", 2)
		w.agent("crash", 2, func(s *v1alpha1.RunAttemptStatus) {
			s.Steps, s.LastProgressStep, s.Usage = 2, 2, v1alpha1.Usage{ModelRequests: 2}
		})
		w.finish("crash", 2, v1alpha1.SettlementComplete)
		run := w.eventually("crash", v1alpha1.PhaseTerminated, v1alpha1.ReasonCompleted)
		Expect(run.Status.Budget.Used.ModelRequests).To(Equal(int64(5)), "3 + 2, no double count")
		Expect(run.Status.Attempt).To(Equal(int32(2)))
		Expect(w.attempts("crash")).To(Equal([]int{1, 2}))
		Expect(w.phaseSequence("crash")).To(Equal([]v1alpha1.Phase{
			v1alpha1.PhaseRunning, v1alpha1.PhaseRecovering, v1alpha1.PhaseRunning, v1alpha1.PhaseFinalizing, v1alpha1.PhaseTerminated}))
	})

	It("9. never replays a side effect whose outcome is unknown", func() {
		w.run("unsafe", nil)
		w.start("unsafe", 1)
		w.agent("unsafe", 1, func(s *v1alpha1.RunAttemptStatus) {
			s.Steps = 2
			s.InFlight = []v1alpha1.InFlightEffect{{ID: "call-7", Tool: "report.publish", Effect: v1alpha1.EffectExternal}}
		})
		w.kubelet("unsafe", 1, corev1.PodFailed)
		run := w.eventually("unsafe", v1alpha1.PhaseTerminated, v1alpha1.ReasonUnsafeToRecover)
		Expect(run.Status.Message).To(ContainSubstring("report.publish"))
		Consistently(func() []int { return w.attempts("unsafe") }, time.Second, interval).Should(Equal([]int{1}))

		w.run("keyed", nil)
		w.start("keyed", 1)
		w.agent("keyed", 1, func(s *v1alpha1.RunAttemptStatus) {
			s.Steps = 2
			s.InFlight = []v1alpha1.InFlightEffect{{ID: "call-8", Tool: "notes.write", Effect: v1alpha1.EffectWrite, IdempotencyKey: "k-8"}}
		})
		w.kubelet("keyed", 1, corev1.PodFailed)
		w.attempt("keyed", 2)
		Eventually(func() []v1alpha1.Phase { return w.phaseSequence("keyed") }, timeout, interval).Should(ContainElement(v1alpha1.PhaseRecovering))
	})

	It("10. ends a run whose pod fails while finalizing with the original reason and the persisted settlement", func() {
		w.run("finfail", func(r *v1alpha1.ResearchRun) { r.Spec.Gates.MaxSteps = 3 })
		w.start("finfail", 1)
		w.agent("finfail", 1, func(s *v1alpha1.RunAttemptStatus) {
			s.Steps, s.LastProgressStep = 3, 3
			s.Publication = v1alpha1.Publication{BlocksPlanned: 3, BlocksCommitted: 1}
		})
		w.eventually("finfail", v1alpha1.PhaseFinalizing, v1alpha1.ReasonStepLimit)
		w.kubelet("finfail", 1, corev1.PodFailed)
		run := w.eventually("finfail", v1alpha1.PhaseTerminated, v1alpha1.ReasonStepLimit)
		Expect(run.Status.Settlement).To(Equal(v1alpha1.SettlementPartial))
		Consistently(func() []int { return w.attempts("finfail") }, time.Second, interval).Should(Equal([]int{1}))
	})

	It("11. treats a silent pod as a failed attempt after heartbeatTimeout", func() {
		w.run("silent", func(r *v1alpha1.ResearchRun) {
			r.Spec.Recovery.HeartbeatTimeout = &metav1.Duration{Duration: 2 * time.Second}
		})
		w.start("silent", 1)
		w.eventually("silent", v1alpha1.PhaseRecovering, "")
		w.attempt("silent", 2)
		Eventually(func() bool { return w.podGone("silent", 1) }, timeout, interval).Should(BeTrue())
	})

	It("12. cancels at once with a zero grant, and finalizes on request", func() {
		w.run("cancel", nil)
		w.start("cancel", 1)
		w.stopRun("cancel", v1alpha1.StopCancel)
		run := w.eventually("cancel", v1alpha1.PhaseTerminated, v1alpha1.ReasonCancelled)
		Expect(run.Status.Budget.Granted).To(Equal(v1alpha1.Usage{}))
		Eventually(func() v1alpha1.Grant { return w.attempt("cancel", 1).Spec.Grant }, timeout, interval).Should(Equal(v1alpha1.Grant{}))
		Expect(w.podGone("cancel", 1)).To(BeTrue())
		Expect(w.phaseSequence("cancel")).NotTo(ContainElement(v1alpha1.PhaseFinalizing))

		w.newSession("s2")
		w.session = "s2"
		w.run("wrapup", nil)
		w.start("wrapup", 1)
		w.stopRun("wrapup", v1alpha1.StopFinalize)
		w.eventually("wrapup", v1alpha1.PhaseFinalizing, v1alpha1.ReasonFinalizeRequested)
		Eventually(func() bool { return w.attempt("wrapup", 1).Spec.Grant.FinalizeOnly }, timeout, interval).Should(BeTrue())
	})

	It("13. ignores advice after finish: no extra grant, still Completed", func() {
		w.run("advice", nil)
		w.start("advice", 1)
		w.agent("advice", 1, func(s *v1alpha1.RunAttemptStatus) {
			s.Steps, s.LastProgressStep, s.Usage.ModelRequests = 2, 2, 2
			s.FinishProposed = true
		})
		w.eventually("advice", v1alpha1.PhaseFinalizing, v1alpha1.ReasonCompleted)
		Eventually(func() bool { return w.attempt("advice", 1).Spec.Grant.FinalizeOnly }, timeout, interval).Should(BeTrue())
		grant := w.attempt("advice", 1).Spec.Grant
		Expect(grant).To(Equal(v1alpha1.Grant{ModelRequests: 4, ToolCalls: 2, FinalizeOnly: true,
			Reserve: &v1alpha1.Usage{ModelRequests: 2, ToolCalls: 2}}), "usage at finish 2/0 + reserve 2/2")
		w.agent("advice", 1, func(s *v1alpha1.RunAttemptStatus) {
			s.Advice = []v1alpha1.Advice{{Source: "reviewer", Kind: "Continue", Count: 1}, {Source: "stop-hook", Kind: "Block", Count: 1}}
		})
		Consistently(func() v1alpha1.Grant { return w.attempt("advice", 1).Spec.Grant }, time.Second, interval).Should(Equal(grant))
		w.settle("advice", 1, v1alpha1.SettlementComplete)
		run := w.eventually("advice", v1alpha1.PhaseTerminated, v1alpha1.ReasonCompleted)
		Expect(run.Status.Settlement).To(Equal(v1alpha1.SettlementComplete))
	})

	It("14. reports a finished run whose publication settled Partial as Completed/Partial, not Succeeded", func() {
		w.run("partial", nil)
		w.start("partial", 1)
		w.finish("partial", 1, v1alpha1.SettlementPartial)
		run := w.eventually("partial", v1alpha1.PhaseTerminated, v1alpha1.ReasonCompleted)
		Expect(run.Status.Settlement).To(Equal(v1alpha1.SettlementPartial))
		Expect(meta.IsStatusConditionFalse(run.Status.Conditions, v1alpha1.ConditionSucceeded)).To(BeTrue())
	})

	It("15. finalizes from the reserve when the attempts are exhausted", func() {
		w.run("exhausted", func(r *v1alpha1.ResearchRun) { r.Spec.Recovery.MaxAttempts = 1 })
		w.start("exhausted", 1)
		w.kubelet("exhausted", 1, corev1.PodFailed)
		w.eventually("exhausted", v1alpha1.PhaseFinalizing, v1alpha1.ReasonRecoveryExhausted)
		Eventually(func() bool { return w.attempt("exhausted", 2).Spec.Grant.FinalizeOnly }, timeout, interval).Should(BeTrue())
		w.kubelet("exhausted", 2, corev1.PodRunning)
		w.settle("exhausted", 2, v1alpha1.SettlementPartial)
		run := w.eventually("exhausted", v1alpha1.PhaseTerminated, v1alpha1.ReasonRecoveryExhausted)
		Expect(run.Status.Settlement).To(Equal(v1alpha1.SettlementPartial))
	})

	It("16. has the API server refuse a backwards status write", func() {
		w.run("back", nil)
		w.start("back", 1)
		w.finish("back", 1, v1alpha1.SettlementComplete)
		run := w.eventually("back", v1alpha1.PhaseTerminated, v1alpha1.ReasonCompleted)
		run.Status.Phase = v1alpha1.PhaseRunning
		err := k8sClient.Status().Update(ctx, run)
		Expect(err).To(MatchError(ContainSubstring("Terminated is absorbing")))
	})

	It("17. completes the run of an agent that only used the gateway's doors and exited 0, from its last facts", func() {
		w.run("doors", nil)
		w.start("doors", 1)
		w.agent("doors", 1, func(s *v1alpha1.RunAttemptStatus) {
			s.Steps, s.LastProgressStep, s.Usage = 2, 2, v1alpha1.Usage{ModelRequests: 2, ToolCalls: 1}
			s.Publication = v1alpha1.Publication{BlocksPlanned: 1, BlocksCommitted: 1, Location: "configmap/doors-report"}
		})
		Eventually(func() int64 { return w.get("doors").Status.Steps }, timeout, interval).Should(Equal(int64(2)))

		By("the agent exits 0 without calling finish or settle; the gateway has not flushed its last count yet")
		w.exited("doors", 1)
		Eventually(func() string { return w.get("doors").Status.Message }, timeout, interval).Should(
			ContainSubstring("the pod of attempt 1 stopped (Succeeded); waiting up to"))
		Expect(w.get("doors").Status.Phase).To(Equal(v1alpha1.PhaseRunning))

		By("the gateway's last flush lands within the grace: the run completes with it")
		w.agent("doors", 1, func(s *v1alpha1.RunAttemptStatus) {
			s.Steps, s.LastProgressStep, s.Usage = 3, 3, v1alpha1.Usage{ModelRequests: 3, ToolCalls: 1}
		})
		run := w.eventually("doors", v1alpha1.PhaseTerminated, v1alpha1.ReasonCompleted)
		Expect(run.Status.Settlement).To(Equal(v1alpha1.SettlementComplete), run.Status.Message)
		Expect(meta.IsStatusConditionTrue(run.Status.Conditions, v1alpha1.ConditionSucceeded)).To(BeTrue())
		Expect(run.Status.Message).To(ContainSubstring("attempt 1 exited 0 after 3 steps without proposing finish: an implicit finish"))
		Expect(run.Status.Message).To(ContainSubstring(
			"the agent exited 0 without settling; settled from what the gateway published: 1/1 sections in configmap/doors-report"))
		Expect(run.Status.Budget.Used).To(Equal(v1alpha1.Usage{ModelRequests: 3, ToolCalls: 1}), "the ledger has the last flush")
		Expect(w.attempts("doors")).To(Equal([]int{1}))
	})

	It("18. counts a fact the gateway could write only after the run ended; the decision stands", func() {
		w.run("late-facts", nil)
		w.start("late-facts", 1)
		w.agent("late-facts", 1, func(s *v1alpha1.RunAttemptStatus) {
			s.Steps, s.LastProgressStep, s.Usage = 2, 2, v1alpha1.Usage{ModelRequests: 2, ToolCalls: 1}
		})
		w.finish("late-facts", 1, v1alpha1.SettlementComplete)
		run := w.eventually("late-facts", v1alpha1.PhaseTerminated, v1alpha1.ReasonCompleted)

		By("the gateway's last flush lands after Terminated (the API server was away)")
		w.agent("late-facts", 1, func(s *v1alpha1.RunAttemptStatus) {
			s.Steps, s.Usage = 3, v1alpha1.Usage{ModelRequests: 3, ToolCalls: 1}
		})
		Eventually(func() v1alpha1.Usage { return w.get("late-facts").Status.Budget.Used }, timeout, interval).Should(
			Equal(v1alpha1.Usage{ModelRequests: 3, ToolCalls: 1}), "the late count is in the ledger")
		after := w.get("late-facts")
		Expect(after.Status.Ledger).To(Equal([]v1alpha1.AttemptLedger{{Attempt: 1, Steps: 3, Used: v1alpha1.Usage{ModelRequests: 3, ToolCalls: 1}}}))
		Expect(after.Status.Steps).To(Equal(int64(3)))
		Expect(after.Status.Phase).To(Equal(v1alpha1.PhaseTerminated))
		Expect(after.Status.Reason).To(Equal(run.Status.Reason))
		Expect(after.Status.Settlement).To(Equal(run.Status.Settlement))
		Expect(after.Status.CompletionTime).To(Equal(run.Status.CompletionTime))
	})

	It("runs the runs of one session one at a time, in creation order", func() {
		for _, name := range []string{"first", "second", "third"} {
			w.run(name, nil)
		}
		w.eventually("first", v1alpha1.PhaseRunning, "")
		w.eventually("second", v1alpha1.PhaseQueued, "")
		Eventually(func() int32 { return w.get("second").Status.QueuePosition }, timeout, interval).Should(Equal(int32(1)))
		Eventually(func() int32 { return w.get("third").Status.QueuePosition }, timeout, interval).Should(Equal(int32(2)))
		Eventually(func(g Gomega) {
			s := &v1alpha1.Session{}
			g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: w.ns, Name: w.session}, s)).To(Succeed())
			g.Expect(s.Status.ActiveRun).To(Equal("first"))
			g.Expect(s.Status.QueuedRuns).To(Equal([]string{"second", "third"}))
		}, timeout, interval).Should(Succeed())

		w.start("first", 1)
		w.finish("first", 1, v1alpha1.SettlementComplete)
		w.eventually("first", v1alpha1.PhaseTerminated, v1alpha1.ReasonCompleted)
		w.eventually("second", v1alpha1.PhaseRunning, "")
		Expect(w.get("third").Status.Phase).To(Equal(v1alpha1.PhaseQueued))
	})
})
