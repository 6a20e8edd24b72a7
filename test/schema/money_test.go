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

package schema

import (
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

var _ = Describe("Amounts of money", func() {
	create := func(doc string) error {
		u := &unstructured.Unstructured{}
		Expect(yaml.Unmarshal([]byte(doc), &u.Object)).To(Succeed())
		return k8s.Create(ctx, u)
	}

	It("keeps a cost budget and prices as exact decimal strings", func() {
		ns := newNamespace()
		Expect(create(fmt.Sprintf(`
apiVersion: agentrun.dev/v1alpha1
kind: RuntimePolicy
metadata: {name: p, namespace: %s}
spec:
  currency: USD
  models: [{name: m, baseURL: "https://x", prices: {input: "3.00", output: "15", cacheRead: "0.30"}}]
`, ns))).To(Succeed())
		p := &v1alpha1.RuntimePolicy{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "p"}, p)).To(Succeed())
		Expect(p.Spec.Models[0].Prices.Output).To(Equal(v1alpha1.Money(15_000_000)))
		Expect(*p.Spec.Models[0].Prices.CacheRead).To(Equal(v1alpha1.Money(300_000)))

		run := newRun(ns, "r")
		run.Spec.Budget.Cost = new(v1alpha1.Money(5_000_000))
		run.Spec.Budget.OutputReserve.Cost = 500_000
		Expect(k8s.Create(ctx, run)).To(Succeed())
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("ResearchRun"))
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(run), got)).To(Succeed())
		Expect(got.Object["spec"]).To(HaveKeyWithValue("budget", HaveKeyWithValue("cost", "5.00")))

	})

	DescribeTable("refuses an amount that is not a decimal string, naming the field and the rule",
		func(doc, field string) {
			ns := newNamespace()
			err := create(fmt.Sprintf(doc, ns))
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(And(ContainSubstring(field), ContainSubstring(`should match '^[0-9]{1,12}(\.[0-9]{1,6})?$'`)))
		},
		Entry("a price with a comma", `
apiVersion: agentrun.dev/v1alpha1
kind: RuntimePolicy
metadata: {name: p, namespace: %s}
spec: {currency: USD, models: [{name: m, baseURL: "https://x", prices: {input: "3,00", output: "15"}}]}
`, "spec.models[0].prices.input"),
		Entry("a negative cost budget", `
apiVersion: agentrun.dev/v1alpha1
kind: ResearchRun
metadata: {name: r, namespace: %s}
spec:
  sessionRef: {name: s}
  goal: g
  template: {spec: {containers: [{name: agent, image: a}]}}
  budget: {modelRequests: 10, toolCalls: 5, cost: "-1"}
`, "spec.budget.cost"),
		Entry("a reserve in seven decimals", `
apiVersion: agentrun.dev/v1alpha1
kind: ResearchRun
metadata: {name: r, namespace: %s}
spec:
  sessionRef: {name: s}
  goal: g
  template: {spec: {containers: [{name: agent, image: a}]}}
  budget: {modelRequests: 10, toolCalls: 5, cost: "1", outputReserve: {cost: "0.0000001"}}
`, "spec.budget.outputReserve.cost"),
	)

	It("refuses a currency that is not an ISO 4217 code", func() {
		ns := newNamespace()
		err := create(fmt.Sprintf(`
apiVersion: agentrun.dev/v1alpha1
kind: RuntimePolicy
metadata: {name: p, namespace: %s}
spec: {currency: usd}
`, ns))
		Expect(err).To(MatchError(And(ContainSubstring("spec.currency"), ContainSubstring("should match '^[A-Z]{3}$'"))))
	})
})
