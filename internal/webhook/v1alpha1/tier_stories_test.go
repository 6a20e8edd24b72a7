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

package v1alpha1

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// The story of issue 18, item 1: hard limits cut legitimate long tasks, so
// the policy tiers them by task type instead of loosening them for every
// run. The webhooks are served for real by the manager's webhook server and
// the operator runs, so the run's status is the operator's.

// tiersPolicy is the minimal chain with three tiers: quick (30 steps at
// most), standard (the default) and deep (300 steps at most), under limits
// that bound them all.
func tiersPolicy(ns string) *v1alpha1.RuntimePolicy {
	p := minimalPolicy(ns)
	p.Spec.Limits = v1alpha1.RunLimits{MaxModelRequests: ptr.To[int64](1000), MaxSteps: ptr.To[int32](500)}
	minutes := func(m int) *metav1.Duration { return &metav1.Duration{Duration: time.Duration(m) * time.Minute} }
	p.Spec.Tiers = []v1alpha1.Tier{
		{Name: "quick", Description: "a lookup, a short answer",
			Caps: v1alpha1.TierLimits{MaxSteps: ptr.To[int32](30), Deadline: minutes(15)},
			Defaults: v1alpha1.TierLimits{MaxSteps: ptr.To[int32](10), Deadline: minutes(5),
				ModelRequests: ptr.To[int64](20), ToolCalls: ptr.To[int64](10)}},
		{Name: "standard", Description: "a report from a handful of sources",
			Caps: v1alpha1.TierLimits{MaxSteps: ptr.To[int32](100), Deadline: minutes(60), MaxAttempts: ptr.To[int32](3)},
			Defaults: v1alpha1.TierLimits{MaxSteps: ptr.To[int32](40), Deadline: minutes(45),
				ModelRequests: ptr.To[int64](60), ToolCalls: ptr.To[int64](60)}},
		{Name: "deep", Description: "a survey that reads for hours",
			Caps: v1alpha1.TierLimits{MaxSteps: ptr.To[int32](300), Deadline: minutes(240), MaxAttempts: ptr.To[int32](5)},
			Defaults: v1alpha1.TierLimits{MaxSteps: ptr.To[int32](150), Deadline: minutes(120), MaxAttempts: ptr.To[int32](5),
				ModelRequests: ptr.To[int64](400), ToolCalls: ptr.To[int64](800)}},
	}
	p.Spec.DefaultTier = "standard"
	return p
}

// tiersSetup creates the tiered policy and session "s" in a new namespace.
func tiersSetup() string {
	GinkgoHelper()
	ns := newNamespace()
	Expect(admin.Create(ctx, tiersPolicy(ns))).To(Succeed())
	Expect(admin.Create(ctx, newSession(ns, "s"))).To(Succeed())
	return ns
}

// yamlRun is a run as a person writes it: only what the YAML says.
func yamlRun(ns, name, spec string) *unstructured.Unstructured {
	GinkgoHelper()
	u := &unstructured.Unstructured{}
	Expect(yaml.Unmarshal(fmt.Appendf(nil, `
apiVersion: agentrun.dev/v1alpha1
kind: ResearchRun
metadata: {name: %s, namespace: %s}
spec:
  sessionRef: {name: s}
  goal: survey vector databases
  template: {spec: {containers: [{name: agent, image: research-agent}]}}
%s`, name, ns, spec), &u.Object)).To(Succeed())
	return u
}

// tableCell is the cell of column in `kubectl get researchrun name`: the
// API server's Table, built from the CRD's printer columns.
func tableCell(ns, name, column string) string {
	GinkgoHelper()
	cs, err := kubernetes.NewForConfig(adminConfig)
	Expect(err).NotTo(HaveOccurred())
	raw, err := cs.RESTClient().Get().AbsPath("/apis/agentrun.dev/v1alpha1/namespaces", ns, "researchruns", name).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(ctx)
	Expect(err).NotTo(HaveOccurred())
	table := &metav1.Table{}
	Expect(json.Unmarshal(raw, table)).To(Succeed())
	i := slices.IndexFunc(table.ColumnDefinitions, func(c metav1.TableColumnDefinition) bool { return c.Name == column })
	Expect(i).To(BeNumerically(">=", 0), "no column %q in %v", column, table.ColumnDefinitions)
	Expect(table.Rows).To(HaveLen(1))
	if cell := table.Rows[0].Cells[i]; cell != nil {
		return fmt.Sprint(cell)
	}
	return ""
}

var _ = Describe("Limits tiered by task type", func() {
	It("lets a deep run take 200 steps where a quick one is refused at admission", func() {
		ns := tiersSetup()

		By("a deep run asking 200 steps: admitted, its tier in spec, status and `kubectl get`")
		deep := newRun(ns, "deep-survey")
		deep.Spec.Tier = "deep"
		deep.Spec.Gates.MaxSteps = 200
		Expect(admin.Create(ctx, deep)).To(Succeed())
		Expect(runOf(ns, "deep-survey").Spec.Gates.MaxSteps).To(Equal(int32(200)))
		Eventually(func() string { return runOf(ns, "deep-survey").Status.Tier }, timeout, interval).Should(Equal("deep"))
		Expect(tableCell(ns, "deep-survey", "Tier")).To(Equal("deep"))

		By("the same run in quick: refused, naming the field, the tier and the cap")
		quick := newRun(ns, "quick-survey")
		quick.Spec.Tier = "quick"
		quick.Spec.Gates.MaxSteps = 200
		rejected(admin.Create(ctx, quick),
			`spec.gates.maxSteps: Invalid value: 200: exceeds tier "quick"'s cap of 30 (RuntimePolicy "p" spec.tiers[quick].caps.maxSteps)`)

		By("and in the default tier (standard, 100 steps at most) when it names none")
		unnamed := newRun(ns, "unnamed-survey")
		unnamed.Spec.Gates.MaxSteps = 200
		rejected(admin.Create(ctx, unnamed), `spec.gates.maxSteps: Invalid value: 200: exceeds tier "standard"'s cap of 100`)

		By("a tier the policy does not have")
		huge := newRun(ns, "huge-survey")
		huge.Spec.Tier = "huge"
		rejected(admin.Create(ctx, huge), `spec.tier: Invalid value: "huge": RuntimePolicy "p" has no tier "huge"; its tiers are "quick", "standard", "deep"`)
	})

	It("gives a run that names no tier the default tier's defaults, keeps what it sets, and keeps both on re-apply", func() {
		ns := tiersSetup()

		By("a run that sets nothing but its goal and pod")
		Expect(admin.Create(ctx, yamlRun(ns, "plain", ""))).To(Succeed())
		plain := runOf(ns, "plain")
		Expect(plain.Spec.Tier).To(Equal("standard"))
		Expect(plain.Spec.Budget.ModelRequests).To(Equal(int64(60)))
		Expect(plain.Spec.Budget.ToolCalls).To(Equal(int64(60)))
		Expect(plain.Spec.Budget.Tokens).To(BeNil(), "standard neither caps nor defaults tokens")
		Expect(plain.Spec.Budget.Deadline.Duration).To(Equal(45 * time.Minute))
		Expect(plain.Spec.Gates.MaxSteps).To(Equal(int32(40)))
		Expect(plain.Spec.Recovery.MaxAttempts).To(Equal(int32(3)), "the built-in default, within standard's cap")
		Eventually(func() string { return runOf(ns, "plain").Status.Tier }, timeout, interval).Should(Equal("standard"))

		By("a deep run, applied as GitOps does (server-side apply), that sets its steps and tool calls (0 is a value) " +
			"and leaves the rest to deep")
		manifest := `  tier: deep
  budget: {toolCalls: 0, outputReserve: {modelRequests: 5}}
  gates: {maxSteps: 250}
`
		gitops := func() error {
			return admin.Apply(ctx, client.ApplyConfigurationFromUnstructured(yamlRun(ns, "long", manifest)),
				client.FieldOwner("gitops"), client.ForceOwnership)
		}
		Expect(gitops()).To(Succeed())
		long := runOf(ns, "long")
		Expect(long.Spec.Gates.MaxSteps).To(Equal(int32(250)))
		Expect(long.Spec.Budget.ToolCalls).To(BeZero())
		Expect(long.Spec.Budget.ModelRequests).To(Equal(int64(400)))
		Expect(long.Spec.Budget.Deadline.Duration).To(Equal(2 * time.Hour))
		Expect(long.Spec.Recovery.MaxAttempts).To(Equal(int32(5)))

		By("re-applying the same manifest changes nothing")
		Expect(gitops()).To(Succeed())
		Expect(runOf(ns, "long").Spec).To(Equal(long.Spec))

		By("so does replacing it with the manifest (kubectl replace)")
		replace := yamlRun(ns, "long", manifest)
		replace.SetResourceVersion(runOf(ns, "long").ResourceVersion)
		Expect(admin.Update(ctx, replace)).To(Succeed())
		Expect(runOf(ns, "long").Spec).To(Equal(long.Spec))

		By("but the tier, like the rest of the spec, cannot change")
		moved := runOf(ns, "long")
		moved.Spec.Tier = "quick"
		rejected(admin.Update(ctx, moved), "spec is immutable after creation except spec.stop and spec.approvals")
	})

	It("keeps a run's admitted budget and gates when its tier changes afterwards", func() {
		ns := tiersSetup()
		Expect(admin.Create(ctx, yamlRun(ns, "before", "  tier: quick\n"))).To(Succeed())
		admitted := runOf(ns, "before")
		Expect(admitted.Spec.Gates.MaxSteps).To(Equal(int32(10)))

		By("the platform team tightens quick to 5 steps")
		p := &v1alpha1.RuntimePolicy{}
		Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "p"}, p)).To(Succeed())
		p.Spec.Tiers[0].Caps.MaxSteps, p.Spec.Tiers[0].Defaults.MaxSteps = ptr.To[int32](5), ptr.To[int32](3)
		Expect(admin.Update(ctx, p)).To(Succeed())

		By("the admitted run keeps its 10 steps; a new one gets 3, and 10 is refused")
		Eventually(func() string { return runOf(ns, "before").Status.Tier }, timeout, interval).Should(Equal("quick"))
		Expect(runOf(ns, "before").Spec).To(Equal(admitted.Spec))
		Eventually(func(g Gomega) {
			g.Expect(admin.Create(ctx, yamlRun(ns, "after", "  tier: quick\n"))).To(Succeed())
		}, timeout, interval).Should(Succeed()) // the webhook reads the policy from the operator's cache
		Expect(runOf(ns, "after").Spec.Gates.MaxSteps).To(Equal(int32(3)))
		rejected(admin.Create(ctx, yamlRun(ns, "after-10", "  tier: quick\n  gates: {maxSteps: 10}\n")),
			`spec.gates.maxSteps: Invalid value: 10: exceeds tier "quick"'s cap of 5`)
	})

	It("leaves a policy without tiers as it was: the built-in defaults, no tier, and a tier refused", func() {
		ns := setup()
		Expect(admin.Create(ctx, yamlRun(ns, "untiered", "  budget: {modelRequests: 10, toolCalls: 10}\n"))).To(Succeed())
		run := runOf(ns, "untiered")
		Expect(run.Spec.Tier).To(BeEmpty())
		Expect(run.Spec.Gates).To(Equal(v1alpha1.Gates{MaxSteps: 20, SameCallLimit: 3, NoProgressLimit: 5, DegradeAtPercent: 75, CompressAtPercent: 90}))
		Expect(run.Spec.Recovery.MaxAttempts).To(Equal(int32(3)))
		Expect(run.Spec.Budget.Deadline.Duration).To(Equal(30 * time.Minute))
		Expect(tableCell(ns, "untiered", "Tier")).To(BeEmpty())

		rejected(admin.Create(ctx, yamlRun(ns, "named", "  tier: deep\n  budget: {modelRequests: 10, toolCalls: 10}\n")),
			`spec.tier: Invalid value: "deep": RuntimePolicy "p" defines no tiers (spec.tiers); leave spec.tier unset`)
		rejected(admin.Create(ctx, yamlRun(ns, "unbudgeted", "")),
			"spec.budget.modelRequests: Required value", "spec.budget.toolCalls: Required value")
	})

	DescribeTable("refuses a policy whose tiers contradict themselves or its limits",
		func(mutate func(*v1alpha1.RuntimePolicySpec), parts ...string) {
			p := tiersPolicy(newNamespace())
			mutate(&p.Spec)
			rejected(admin.Create(ctx, p), parts...)
		},
		Entry("tiers without a default tier (CEL)", func(s *v1alpha1.RuntimePolicySpec) { s.DefaultTier = "" },
			"spec.defaultTier must name a tier of spec.tiers, and is required when spec.tiers is set"),
		Entry("a default tier that is no tier (CEL)", func(s *v1alpha1.RuntimePolicySpec) { s.DefaultTier = "medium" },
			"spec.defaultTier must name a tier of spec.tiers"),
		Entry("a default above its tier's cap (CEL)", func(s *v1alpha1.RuntimePolicySpec) { s.Tiers[0].Defaults.MaxSteps = ptr.To[int32](31) },
			"spec.tiers[0]", `tier "quick": defaults.maxSteps must not exceed caps.maxSteps`),
		Entry("a cap above the policy's limit (webhook)", func(s *v1alpha1.RuntimePolicySpec) { s.Tiers[2].Caps.MaxSteps = ptr.To[int32](600) },
			"spec.tiers[2].caps.maxSteps: Invalid value: 600", `tier "deep": exceeds spec.limits.maxSteps (500)`),
	)
})
