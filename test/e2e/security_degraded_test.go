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
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// Holds at an approval (two TokenReviews are made to fail meanwhile), meets
// the outage with two lookups, looks up once more, then publishes twice:
// report.publish is Medium risk and auto-approved in Auto mode.
const scriptSecurityDegraded = `
plan: [Overview, Details]
turns:
- tools: [{name: gate.wait, args: {step: before-the-outage}}]
- tools: [{name: lookup, args: {q: outage-1}}]
- tools: [{name: lookup, args: {q: outage-2}}]
- tools: [{name: lookup, args: {q: after-the-outage}}]
- tools: [{name: report.publish, args: {section: Overview, content: "Published while auth wobbled: approved."}}]
- tools: [{name: report.publish, args: {section: Details, content: "Published once auth was stable: auto-approved."}}]
- finish: true
`

var _ = Describe("A stricter posture when a security dependency wobbles", func() {
	BeforeEach(func() {
		Expect(st.APIFaults).NotTo(BeNil(), "the suite's stack runs the gateway behind the API fault proxy")
	})

	It("a failing auth dependency turns a High-risk-free run's auto-approved write into a confirmation, and back", func() {
		mcpURL, _ := startFakeTools("security-degraded", interceptorTools)
		w := newWorld(func(p *v1.RuntimePolicy) {
			p.Spec.ToolServers = []v1.ToolServer{{Name: "fake", URL: mcpURL}}
			p.Spec.Tools = append(p.Spec.Tools,
				v1.Tool{Name: "lookup", Server: "fake", Risk: v1.RiskLow, Effect: v1.EffectNone},
				v1.Tool{Name: "gate.wait", Server: "fake", Risk: v1.RiskHigh, Effect: v1.EffectNone})
			p.Spec.AutoApprove = append(p.Spec.AutoApprove, "lookup")
			p.Spec.OnSecurityDegraded = &v1.SecurityDegraded{ErrorRate: 50,
				Window: &metav1.Duration{Duration: 10 * time.Second}, MinCalls: 2, Posture: v1.PostureConfirmAll}
		})
		w.script("script", scriptSecurityDegraded)
		w.run("wobble", imageResearchAgent, agentArgs("script"), func(r *v1.ResearchRun) {
			r.Spec.Gates.NoProgressLimit = 10
		})
		id := w.awaiting("wobble", 1)

		By("two TokenReviews fail: auth fails two of the next tool calls, 2 of 3 within the 10s window")
		st.APIFaults.FailNextTokenReviews(2)
		DeferCleanup(func() { st.APIFaults.FailNextTokenReviews(0) })
		w.approve("wobble", id)

		By("the auto-approved report.publish now waits for an approval; the run says why")
		var publish string
		Eventually(func(g Gomega) {
			run := w.get("wobble")
			c := apimeta.FindStatusCondition(run.Status.Conditions, v1.ConditionSecurityDegraded)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(c.Message).To(ContainSubstring("Security interceptor auth failed"))
			g.Expect(run.Status.SecurityPosture).NotTo(BeNil())
			g.Expect(run.Status.SecurityPosture.Posture).To(Equal(v1.PostureConfirmAll))
			g.Expect(run.Status.PendingApprovals).To(HaveLen(1))
			g.Expect(run.Status.PendingApprovals[0].Tool).To(Equal("report.publish"))
			publish = run.Status.PendingApprovals[0].ActionID
		}, timeout, interval).Should(Succeed())

		By("a full window without failures: the condition is False again (the write still waits for its answer)")
		Eventually(func(g Gomega) {
			run := w.get("wobble")
			c := apimeta.FindStatusCondition(run.Status.Conditions, v1.ConditionSecurityDegraded)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(v1.EventReasonSecurityRecovered))
			g.Expect(run.Status.SecurityPosture).To(BeNil())
		}, timeout, interval).Should(Succeed())
		w.approve("wobble", publish)

		By("the next report.publish is auto-approved again: the run completes with no other approval")
		run := w.terminated("wobble", v1.ReasonCompleted, v1.SettlementComplete)
		Expect(run.Spec.Approvals).To(HaveLen(2), "gate.wait's and the first publish's")
		Expect(w.report("wobble").Data).To(HaveKeyWithValue("02-details.md", "Published once auth was stable: auto-approved."))
	})
})
