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
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

var _ = Describe("Cost in money", func() {
	var w *world
	BeforeEach(func() { w = newWorld() })

	It("finalizes a run from its reserve, in money too, when its working cost is spent", func() {
		w.run("costly", func(r *v1alpha1.ResearchRun) {
			r.Spec.Budget.Cost = new(v1alpha1.Money(5_000_000))        // "5.00"
			r.Spec.Budget.OutputReserve.Cost = v1alpha1.Money(500_000) // "0.50"
		})
		w.start("costly", 1)
		Expect(w.attempt("costly", 1).Spec.Grant.Cost).To(HaveValue(Equal(v1alpha1.Money(4_500_000))),
			"working cost = budget 5.00 - reserve 0.50")

		w.agent("costly", 1, func(s *v1alpha1.RunAttemptStatus) {
			s.Steps, s.LastProgressStep, s.Usage = 2, 2, v1alpha1.Usage{ModelRequests: 2, Tokens: 40000, Cost: 1_250_000}
		})
		Eventually(func() v1alpha1.BudgetStatus { return w.get("costly").Status.Budget }, timeout, interval).Should(And(
			HaveField("Used.Cost", Equal(v1alpha1.Money(1_250_000))), HaveField("Remaining.Cost", Equal(v1alpha1.Money(3_750_000))),
			HaveField("Granted.Cost", Equal(v1alpha1.Money(4_500_000)))))
		Expect(w.get("costly").Status.Phase).To(Equal(v1alpha1.PhaseRunning), "2 of 8 model requests, 1.25 of 4.50")

		// The gateway settles a request that spends the working cost: the
		// counts of requests are far from their limit, the money is not.
		w.agent("costly", 1, func(s *v1alpha1.RunAttemptStatus) {
			s.Steps, s.LastProgressStep, s.Usage = 3, 3, v1alpha1.Usage{ModelRequests: 3, Tokens: 150000, Cost: 4_500_000}
		})
		run := w.eventually("costly", v1alpha1.PhaseFinalizing, v1alpha1.ReasonBudgetExhausted)
		Expect(run.Status.Message).To(ContainSubstring("working budget exhausted at a cost of 4.50/4.50"))
		Expect(run.Status.Message).To(ContainSubstring("and a cost of 0.50"))
		Eventually(func() v1alpha1.Grant { return w.attempt("costly", 1).Spec.Grant }, timeout, interval).Should(
			Equal(v1alpha1.Grant{ModelRequests: 5, ToolCalls: 2, Cost: new(v1alpha1.Money(5_000_000)), FinalizeOnly: true,
				Reserve: &v1alpha1.Usage{ModelRequests: 2, ToolCalls: 2, Cost: 500_000}}),
			"usage at entry (3 requests, 4.50) + the reserve (2 requests, 2 tool calls, 0.50)")

		w.agent("costly", 1, func(s *v1alpha1.RunAttemptStatus) { s.Usage.ModelRequests, s.Usage.Cost = 4, 4_800_000 })
		w.settle("costly", 1, v1alpha1.SettlementComplete)
		run = w.eventually("costly", v1alpha1.PhaseTerminated, v1alpha1.ReasonBudgetExhausted)
		Expect(run.Status.Budget.Used.Cost).To(Equal(v1alpha1.Money(4_800_000)), "finalized within the reserve")
		Expect(run.Status.Budget.Remaining.Cost).To(Equal(v1alpha1.Money(200_000)))
	})
})
