//go:build e2e

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

package e2e

import (
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// scriptLongResearch takes a new note in each of 60 turns, alternating two
// sections, so that a paced agent is still researching long after the
// story stops and restarts the operator; asked to finalize it publishes
// Alpha, and Beta is published from its notes.
var scriptLongResearch = func() string {
	var b strings.Builder
	b.WriteString("plan: [Alpha, Beta]\nturns:\n")
	for i := range 60 {
		section := []string{"Alpha", "Beta"}[i%2]
		fmt.Fprintf(&b, "- tools: [{name: notes.write, args: {section: %s, text: \"finding %d\"}}]\n", section, i)
	}
	b.WriteString("finalize:\n- tools: [{name: report.publish, args: {section: Alpha, content: \"Alpha, on request.\"}}]\n")
	return b.String()
}()

var _ = Describe("The webhook server down", func() {
	It("still takes Cancel and Finalize (the CRD validates them), refuses every other change, and the runs end once the operator is back", func() {
		cancelW := newWorld(highRiskPublish)
		cancelW.script("script", scriptApproval)
		cancelW.run("cancel", imageResearchAgent, agentArgs("script"), nil)
		id := cancelW.awaiting("cancel", 1)
		cancelW.factsSettled("cancel", 1)
		before := cancelW.attempt("cancel", 1).Status.Usage

		finW := newWorld(nil)
		finW.script("script", scriptLongResearch)
		finW.run("finalize", imageResearchAgent, append(agentArgs("script"), "--rate-limit-interval=700ms"), func(r *v1.ResearchRun) {
			r.Spec.Budget = v1.Budget{ModelRequests: 100, ToolCalls: 100,
				OutputReserve: v1.OutputReserve{ModelRequests: 5, ToolCalls: 5},
				Deadline:      &metav1.Duration{Duration: 5 * time.Minute}}
			r.Spec.Gates.MaxSteps = 100
		})
		Eventually(func() int64 { return finW.attempt("finalize", 1).Status.Steps }, timeout, interval).Should(BeNumerically(">=", 2))

		By("stopping the operator: its webhook endpoint refuses connections (failurePolicy Fail)")
		DeferCleanup(func() {
			if st.Operator.Pid() == 0 {
				Expect(st.StartOperator(ctx)).To(Succeed())
			}
		})
		st.Operator.Stop(10 * time.Second)
		probe := &v1.RuntimePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: cancelW.ns, Name: "probe"}}
		Expect(st.Client.Create(ctx, probe, client.DryRunAll)).To(MatchError(ContainSubstring("failed calling webhook")),
			"other writes fail closed")

		By("Finalize, then Cancel, with kubectl patch: admitted without the webhook")
		for _, stop := range []v1.StopRequest{v1.StopFinalize, v1.StopCancel} {
			out, err := kubectl("patch", "researchrun", "cancel", "-n", cancelW.ns, "--type=merge",
				"-p", fmt.Sprintf(`{"spec":{"stop":%q}}`, stop))
			Expect(err).NotTo(HaveOccurred(), out)
			Expect(cancelW.get("cancel").Spec.Stop).To(Equal(stop))
		}
		finW.stopRun("finalize", v1.StopFinalize)
		Expect(finW.get("finalize").Spec.Stop).To(Equal(v1.StopFinalize))

		By("what the CRD does not allow is refused by the API server itself")
		patch := func(w *world, name, body string) error {
			run := &v1.ResearchRun{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name}}
			return st.Client.Patch(ctx, run, client.RawPatch(types.MergePatchType, []byte(body)))
		}
		Expect(patch(cancelW, "cancel", `{"spec":{"stop":"Finalize"}}`)).To(MatchError(
			ContainSubstring("spec.stop cannot be removed once set, and may only change from Finalize to Cancel")))
		Expect(patch(finW, "finalize", `{"spec":{"stop":"Abort"}}`)).To(MatchError(ContainSubstring(`Unsupported value: "Abort"`)))

		By("an approval or any other change still needs the webhook: refused (fail closed)")
		Expect(patch(cancelW, "cancel", fmt.Sprintf(`{"spec":{"approvals":[{"actionID":%q,"decision":"Approve"}]}}`, id))).To(
			MatchError(ContainSubstring(`failed calling webhook "mresearchrun-v1alpha1.kb.io"`)))
		Expect(patch(finW, "finalize", `{"spec":{"goal":"another goal"}}`)).To(
			MatchError(ContainSubstring(`failed calling webhook "mresearchrun-v1alpha1.kb.io"`)))

		By("with the operator down nothing acts on the stops")
		Consistently(func() []v1.Phase {
			return []v1.Phase{cancelW.get("cancel").Status.Phase, finW.get("finalize").Status.Phase}
		}, 2*time.Second, 200*time.Millisecond).Should(Equal([]v1.Phase{v1.PhaseRunning, v1.PhaseRunning}))

		By("restarting the operator: the run that was cancelled is Cancelled, the one asked to finalize finalizes")
		Expect(st.StartOperator(ctx)).To(Succeed())
		run := cancelW.terminated("cancel", v1.ReasonCancelled, v1.SettlementNone)
		Expect(cancelW.phaseSequence("cancel")).To(Equal([]v1.Phase{v1.PhaseRunning, v1.PhaseTerminated}))
		Expect(run.Spec.Approvals).To(BeEmpty(), "the approval refused during the outage never got in")
		Expect(cancelW.attempt("cancel", 1).Status.Usage).To(Equal(before), "a model request or tool call after the cancel")
		Expect(cancelW.sections("cancel")).To(BeEmpty())
		ledgerConsistent(cancelW, run)

		run = finW.terminated("finalize", v1.ReasonFinalizeRequested, v1.SettlementComplete)
		Expect(finW.phaseSequence("finalize")).To(Equal([]v1.Phase{v1.PhaseRunning, v1.PhaseFinalizing, v1.PhaseTerminated}))
		Expect(run.Spec.Goal).To(Equal("survey the field"))
		Expect(finW.report("finalize").Data).To(HaveKeyWithValue("01-alpha.md", "Alpha, on request."))
		Expect(finW.sections("finalize")).To(ConsistOf("01-alpha.md", "02-beta.md"))
		ledgerConsistent(finW, run)
	})
})
