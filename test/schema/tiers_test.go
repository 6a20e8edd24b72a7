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
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/yaml"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// tieredPolicy is a policy with a quick and a deep tier, quick the default.
func tieredPolicy(ns string) *v1alpha1.RuntimePolicy {
	return &v1alpha1.RuntimePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"},
		Spec: v1alpha1.RuntimePolicySpec{
			Tiers: []v1alpha1.Tier{
				{Name: "quick", Caps: v1alpha1.TierLimits{MaxSteps: ptr.To[int32](30)}, Defaults: v1alpha1.TierLimits{MaxSteps: ptr.To[int32](10)}},
				{Name: "deep", Caps: v1alpha1.TierLimits{MaxSteps: ptr.To[int32](300)}},
			},
			DefaultTier: "quick",
		},
	}
}

var _ = Describe("RuntimePolicy tiers", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("accepts tiers with a default tier, and no tiers at all", func() {
		Expect(k8s.Create(ctx, tieredPolicy(ns))).To(Succeed())
		plain := tieredPolicy(ns)
		plain.Name, plain.Spec.Tiers, plain.Spec.DefaultTier = "plain", nil, ""
		Expect(k8s.Create(ctx, plain)).To(Succeed())
	})

	DescribeTable("refuses tiers that contradict themselves",
		func(mutate func(*v1alpha1.RuntimePolicySpec), want string) {
			p := tieredPolicy(ns)
			mutate(&p.Spec)
			expectRejected(k8s.Create(ctx, p), want)
		},
		Entry("tiers without a default tier", func(s *v1alpha1.RuntimePolicySpec) { s.DefaultTier = "" },
			"spec.defaultTier must name a tier of spec.tiers, and is required when spec.tiers is set"),
		Entry("a default tier that is no tier", func(s *v1alpha1.RuntimePolicySpec) { s.DefaultTier = "standard" },
			"spec.defaultTier must name a tier of spec.tiers"),
		Entry("a default tier without tiers", func(s *v1alpha1.RuntimePolicySpec) { s.Tiers = nil },
			"spec.defaultTier must name a tier of spec.tiers"),
		Entry("two tiers of one name", func(s *v1alpha1.RuntimePolicySpec) { s.Tiers[1].Name = "quick" },
			`spec.tiers[1]: Duplicate value: {"name":"quick"}`),
		Entry("a tier name that is not a DNS label", func(s *v1alpha1.RuntimePolicySpec) { s.Tiers[1].Name = "Deep_Research" },
			"spec.tiers[1].name: Invalid value"),
		Entry("more than 16 tiers", func(s *v1alpha1.RuntimePolicySpec) {
			for i := range v1alpha1.MaxTiers {
				s.Tiers = append(s.Tiers, v1alpha1.Tier{Name: fmt.Sprintf("t%d", i)})
			}
		}, "spec.tiers: Too many: 18: must have at most 16 items"),
		Entry("defaults.modelRequests above caps", func(s *v1alpha1.RuntimePolicySpec) {
			s.Tiers[1].Caps.ModelRequests, s.Tiers[1].Defaults.ModelRequests = ptr.To[int64](10), ptr.To[int64](11)
		}, `spec.tiers[1]: Invalid value: tier "deep": defaults.modelRequests must not exceed caps.modelRequests`),
		Entry("defaults.toolCalls above caps", func(s *v1alpha1.RuntimePolicySpec) {
			s.Tiers[1].Caps.ToolCalls, s.Tiers[1].Defaults.ToolCalls = ptr.To[int64](0), ptr.To[int64](1)
		}, `tier "deep": defaults.toolCalls must not exceed caps.toolCalls`),
		Entry("defaults.tokens above caps", func(s *v1alpha1.RuntimePolicySpec) {
			s.Tiers[1].Caps.Tokens, s.Tiers[1].Defaults.Tokens = ptr.To[int64](1000), ptr.To[int64](1001)
		}, `tier "deep": defaults.tokens must not exceed caps.tokens`),
		Entry("defaults.maxSteps above caps", func(s *v1alpha1.RuntimePolicySpec) { s.Tiers[0].Defaults.MaxSteps = ptr.To[int32](31) },
			`spec.tiers[0]: Invalid value: tier "quick": defaults.maxSteps must not exceed caps.maxSteps`),
		Entry("defaults.deadline above caps", func(s *v1alpha1.RuntimePolicySpec) {
			s.Tiers[1].Caps.Deadline, s.Tiers[1].Defaults.Deadline = &metav1.Duration{Duration: time.Hour}, &metav1.Duration{Duration: 61 * time.Minute}
		}, `tier "deep": defaults.deadline must not exceed caps.deadline`),
		Entry("defaults.maxAttempts above caps", func(s *v1alpha1.RuntimePolicySpec) {
			s.Tiers[1].Caps.MaxAttempts, s.Tiers[1].Defaults.MaxAttempts = ptr.To[int32](2), ptr.To[int32](3)
		}, `tier "deep": defaults.maxAttempts must not exceed caps.maxAttempts`),
		Entry("maxAttempts above 10", func(s *v1alpha1.RuntimePolicySpec) { s.Tiers[1].Caps.MaxAttempts = ptr.To[int32](11) },
			"spec.tiers[1].caps.maxAttempts: Invalid value: 11: spec.tiers[1].caps.maxAttempts in body should be less than or equal to 10"),
	)

	It("compares durations as durations, not as strings", func() {
		p := tieredPolicy(ns)
		p.Spec.Tiers[1].Caps.Deadline = &metav1.Duration{Duration: 4 * time.Hour}
		p.Spec.Tiers[1].Defaults.Deadline = &metav1.Duration{Duration: 90 * time.Minute} // "1h30m0s" > "4h0m0s" as text
		Expect(k8s.Create(ctx, p)).To(Succeed())
	})
})

var _ = Describe("ResearchRun tier", func() {
	It("keeps spec.tier immutable: it cannot be set, changed or removed after creation", func() {
		ns := newNamespace()
		run := newRun(ns, "tiered")
		run.Spec.Tier = "deep"
		Expect(k8s.Create(ctx, run)).To(Succeed())
		cur := &v1alpha1.ResearchRun{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(run), cur)).To(Succeed())
		changed := cur.DeepCopy()
		changed.Spec.Tier = "quick"
		expectRejected(k8s.Update(ctx, changed), "spec is immutable after creation except spec.stop and spec.approvals")
		removed := cur.DeepCopy()
		removed.Spec.Tier = ""
		expectRejected(k8s.Update(ctx, removed), "spec is immutable after creation except spec.stop and spec.approvals")
		cur.Spec.Stop = v1alpha1.StopCancel
		Expect(k8s.Update(ctx, cur)).To(Succeed(), "the rest of the rules are unchanged")
	})

	It("refuses a tier name that is not a DNS label", func() {
		run := newRun(newNamespace(), "bad-tier")
		run.Spec.Tier = "Deep Research"
		expectRejected(k8s.Create(ctx, run), "spec.tier: Invalid value")
	})

	It("admits a run that leaves its whole budget to its tier (the webhook fills it)", func() {
		u := &unstructured.Unstructured{}
		Expect(yaml.Unmarshal([]byte(`
apiVersion: agentrun.dev/v1alpha1
kind: ResearchRun
metadata: {name: all-defaults}
spec:
  sessionRef: {name: s}
  tier: deep
  goal: g
  template: {spec: {containers: [{name: agent, image: research-agent}]}}
`), &u.Object)).To(Succeed())
		u.SetNamespace(newNamespace())
		Expect(k8s.Create(ctx, u)).To(Succeed())
		got := &v1alpha1.ResearchRun{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(u), got)).To(Succeed())
		Expect(got.Spec.Budget).To(Equal(v1alpha1.Budget{FinalizationGrace: &metav1.Duration{Duration: 2 * time.Minute}}))
	})
})

// kstatusOf is what kstatus (sigs.k8s.io/cli-utils, as Flux runs it)
// computes for obj.
func kstatusOf(obj client.Object) *status.Result {
	GinkgoHelper()
	gvk, err := apiutil.GVKForObject(obj, scheme)
	Expect(err).NotTo(HaveOccurred())
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	Expect(err).NotTo(HaveOccurred())
	u := &unstructured.Unstructured{Object: content}
	u.SetGroupVersionKind(gvk)
	res, err := status.Compute(u)
	Expect(err).NotTo(HaveOccurred())
	return res
}

var _ = Describe("kstatus of an object the operator has not seen", func() {
	// No operator runs in this suite: each object stays as the API server
	// made it, as it is between its creation and the operator's first
	// status write. kstatus reads an object without status as Current; the
	// status default observedGeneration -1 makes it InProgress.
	DescribeTable("reads a brand-new object as InProgress, then follows the operator's first status write",
		func(kind string, obj client.Object, written func(client.Object)) {
			obj.SetNamespace(newNamespace())
			Expect(k8s.Create(ctx, obj)).To(Succeed())
			fresh := obj.DeepCopyObject().(client.Object)
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(obj), fresh)).To(Succeed())
			res := kstatusOf(fresh)
			Expect(res.Status).To(Equal(status.InProgressStatus))
			Expect(res.Message).To(Equal(kind + " generation is 1, but latest observed generation is -1"))

			By("the operator's first write sets observedGeneration; kstatus then reads its conditions")
			written(fresh)
			Expect(k8s.Status().Update(ctx, fresh)).To(Succeed())
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(obj), fresh)).To(Succeed())
			Expect(kstatusOf(fresh).Status).To(Equal(status.CurrentStatus))
		},
		Entry("ResearchRun", "ResearchRun", newRun("", "fresh"), func(o client.Object) {
			run := o.(*v1alpha1.ResearchRun)
			run.Status.ObservedGeneration = run.Generation
			run.Status.Phase, run.Status.Reason, run.Status.Settlement = v1alpha1.PhaseTerminated, v1alpha1.ReasonCompleted, v1alpha1.SettlementComplete
			run.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Completed",
				LastTransitionTime: metav1.Now(), ObservedGeneration: run.Generation}}
		}),
		Entry("Session", "Session", &v1alpha1.Session{ObjectMeta: metav1.ObjectMeta{Name: "fresh"},
			Spec: v1alpha1.SessionSpec{PolicyRef: v1alpha1.LocalObjectReference{Name: "p"}}}, func(o client.Object) {
			s := o.(*v1alpha1.Session)
			s.Status.ObservedGeneration = s.Generation
			s.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "PolicyFound",
				LastTransitionTime: metav1.Now(), ObservedGeneration: s.Generation}}
		}),
		Entry("RuntimePolicy", "RuntimePolicy", &v1alpha1.RuntimePolicy{ObjectMeta: metav1.ObjectMeta{Name: "fresh"}}, func(o client.Object) {
			p := o.(*v1alpha1.RuntimePolicy)
			p.Status.ObservedGeneration = p.Generation
			p.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Resolved",
				LastTransitionTime: metav1.Now(), ObservedGeneration: p.Generation}}
		}),
	)
})
