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
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/test/utils"
)

// newNamespace creates a namespace for one test, so tests never share objects.
func newNamespace() string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "schema-"}}
	Expect(k8s.Create(ctx, ns)).To(Succeed())
	return ns.Name
}

func newRun(ns, name string) *v1alpha1.ResearchRun {
	return &v1alpha1.ResearchRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.ResearchRunSpec{
			SessionRef: v1alpha1.LocalObjectReference{Name: "s"},
			Goal:       "find out",
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "agent", Image: "research-agent"}},
			}},
			Budget: v1alpha1.Budget{
				ModelRequests: 10, ToolCalls: 10,
				OutputReserve: v1alpha1.OutputReserve{ModelRequests: 2},
			},
		},
	}
}

// expectRejected asserts err is an Invalid error whose message carries want.
func expectRejected(err error, want string) {
	GinkgoHelper()
	Expect(err).To(HaveOccurred(), "the API server accepted a write it must refuse (%s)", want)
	Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want an Invalid error, got %v", err)
	Expect(err.Error()).To(ContainSubstring(want))
}

// writeStatus applies mutate to a fresh copy of run's status and writes it
// through the status subresource.
func writeStatus(run *v1alpha1.ResearchRun, mutate func(*v1alpha1.ResearchRunStatus)) error {
	GinkgoHelper()
	cur := &v1alpha1.ResearchRun{}
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(run), cur)).To(Succeed())
	mutate(&cur.Status)
	return k8s.Status().Update(ctx, cur)
}

// setPhase moves run's status to phase (with reason and settlement) and
// expects the write to succeed.
func setPhase(run *v1alpha1.ResearchRun, phase v1alpha1.Phase, reason v1alpha1.Reason, settlement v1alpha1.Settlement) {
	GinkgoHelper()
	Expect(writeStatus(run, func(s *v1alpha1.ResearchRunStatus) {
		s.Phase, s.Reason, s.Settlement = phase, reason, settlement
	})).To(Succeed())
}

var _ = Describe("Samples", func() {
	It("applies every sample in config/samples", func() {
		ns := newNamespace()
		dir := filepath.Join(utils.ProjectRoot(), "config", "samples")
		entries, err := os.ReadDir(dir)
		Expect(err).NotTo(HaveOccurred())
		applied := 0
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".yaml") || e.Name() == "kustomization.yaml" {
				continue
			}
			data, err := os.ReadFile(filepath.Join(dir, e.Name()))
			Expect(err).NotTo(HaveOccurred())
			for doc := range strings.SplitSeq(string(data), "\n---") {
				if strings.TrimSpace(doc) == "" {
					continue
				}
				u := &unstructured.Unstructured{}
				Expect(yaml.Unmarshal([]byte(doc), &u.Object)).To(Succeed(), e.Name())
				u.SetNamespace(ns)
				Expect(k8s.Create(ctx, u)).To(Succeed(), "sample %s", e.Name())
				applied++
			}
		}
		Expect(applied).To(BeNumerically(">=", 3))
	})

	It("defaults gates, recovery and budget times on a minimal run, and leaves what a tier defaults to the webhook", func() {
		ns := newNamespace()
		run := newRun(ns, "minimal")
		Expect(k8s.Create(ctx, run)).To(Succeed())
		got := &v1alpha1.ResearchRun{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(run), got)).To(Succeed())
		// maxSteps, maxAttempts and deadline come from the run's tier, so
		// the API server cannot default them (it would before the mutating
		// webhook could tell them unset): the webhook writes the tier's, or
		// the built-in 20, 3 and 30m (internal/webhook's tier story).
		Expect(got.Spec.Gates).To(Equal(v1alpha1.Gates{SameCallLimit: 3, NoProgressLimit: 5, DegradeAtPercent: 75, CompressAtPercent: 90}))
		Expect(got.Spec.Recovery.MaxAttempts).To(BeZero())
		Expect(got.Spec.Recovery.HeartbeatTimeout.Duration).To(Equal(time.Minute))
		Expect(got.Spec.Budget.Deadline).To(BeNil())
		Expect(got.Spec.Budget.FinalizationGrace.Duration).To(Equal(2 * time.Minute))
	})
})

var _ = Describe("kubectl explain", func() {
	It("shows the field docs of researchrun.spec.budget", func() {
		kubectl := filepath.Join(utils.EnvtestAssets(), "kubectl")
		var out []byte
		// The API server publishes a new CRD's OpenAPI a moment after it is established.
		Eventually(func() error {
			var err error
			out, err = exec.CommandContext(ctx, kubectl, "--kubeconfig", kubeconfigPath, "explain", "researchrun.spec.budget").CombinedOutput()
			return err
		}, 30*time.Second, 500*time.Millisecond).Should(Succeed())
		Expect(string(out)).To(ContainSubstring("outputReserve"))
		Expect(string(out)).To(ContainSubstring("kept back for finalization"))
		Expect(string(out)).To(ContainSubstring("finalizationGrace"))
	})
})

var _ = Describe("ResearchRun spec rules", func() {
	var ns string
	var run *v1alpha1.ResearchRun
	BeforeEach(func() {
		ns = newNamespace()
		run = newRun(ns, "r")
		Expect(k8s.Create(ctx, run)).To(Succeed())
	})

	DescribeTable("rejects changes to immutable fields",
		func(mutate func(*v1alpha1.ResearchRunSpec), want string) {
			cur := &v1alpha1.ResearchRun{}
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(run), cur)).To(Succeed())
			mutate(&cur.Spec)
			expectRejected(k8s.Update(ctx, cur), want)
		},
		Entry("goal", func(s *v1alpha1.ResearchRunSpec) { s.Goal = "something else" }, "spec is immutable after creation except spec.stop and spec.approvals"),
		Entry("session", func(s *v1alpha1.ResearchRunSpec) { s.SessionRef.Name = "other" }, "spec is immutable after creation except spec.stop and spec.approvals"),
		Entry("budget", func(s *v1alpha1.ResearchRunSpec) { s.Budget.ModelRequests = 1000 }, "spec is immutable after creation except spec.stop and spec.approvals"),
		Entry("gates", func(s *v1alpha1.ResearchRunSpec) { s.Gates.MaxSteps = 1000 }, "spec is immutable after creation except spec.stop and spec.approvals"),
		Entry("recovery", func(s *v1alpha1.ResearchRunSpec) { s.Recovery.MaxAttempts = 9 }, "spec is immutable after creation except spec.stop and spec.approvals"),
		Entry("tier", func(s *v1alpha1.ResearchRunSpec) { s.Tier = "deep" }, "spec is immutable after creation except spec.stop and spec.approvals"),
	)

	It("accepts stop: Finalize, then Cancel, and refuses removing it", func() {
		cur := &v1alpha1.ResearchRun{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(run), cur)).To(Succeed())
		cur.Spec.Stop = v1alpha1.StopFinalize
		Expect(k8s.Update(ctx, cur)).To(Succeed())
		cur.Spec.Stop = v1alpha1.StopCancel
		Expect(k8s.Update(ctx, cur)).To(Succeed())

		cur.Spec.Stop = v1alpha1.StopFinalize
		expectRejected(k8s.Update(ctx, cur), "spec.stop cannot be removed once set")
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(run), cur)).To(Succeed())
		cur.Spec.Stop = ""
		expectRejected(k8s.Update(ctx, cur), "spec.stop cannot be removed once set")
	})

	It("lets a typed Go client update a run created from minimal YAML (no spurious immutability errors)", func() {
		u := &unstructured.Unstructured{}
		Expect(yaml.Unmarshal([]byte(`
apiVersion: agentrun.dev/v1alpha1
kind: ResearchRun
metadata: {name: from-yaml}
spec:
  sessionRef: {name: s}
  goal: g
  template: {spec: {containers: [{name: agent, image: research-agent}]}}
  budget: {modelRequests: 10, toolCalls: 5, deadline: 30m, outputReserve: {}}
  recovery: {backoff: 1m}
`), &u.Object)).To(Succeed())
		u.SetNamespace(ns)
		Expect(k8s.Create(ctx, u)).To(Succeed())

		cur := &v1alpha1.ResearchRun{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(u), cur)).To(Succeed())
		cur.Spec.Stop = v1alpha1.StopFinalize
		cur.Spec.Approvals = []v1alpha1.Approval{{ActionID: "a", Decision: v1alpha1.DecisionApprove}}
		Expect(k8s.Update(ctx, cur)).To(Succeed())
	})

	It("accepts appended approvals and refuses changing or removing one", func() {
		cur := &v1alpha1.ResearchRun{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(run), cur)).To(Succeed())
		cur.Spec.Approvals = append(cur.Spec.Approvals, v1alpha1.Approval{ActionID: "publish-1", Decision: v1alpha1.DecisionApprove})
		Expect(k8s.Update(ctx, cur)).To(Succeed())
		cur.Spec.Approvals = append(cur.Spec.Approvals, v1alpha1.Approval{ActionID: "publish-2", Decision: v1alpha1.DecisionDeny, Comment: "not yet"})
		Expect(k8s.Update(ctx, cur)).To(Succeed())

		changed := cur.DeepCopy()
		changed.Spec.Approvals[0].Decision = v1alpha1.DecisionDeny
		expectRejected(k8s.Update(ctx, changed), "spec.approvals is append-only")

		removed := cur.DeepCopy()
		removed.Spec.Approvals = removed.Spec.Approvals[1:]
		expectRejected(k8s.Update(ctx, removed), "spec.approvals is append-only")

		cleared := cur.DeepCopy()
		cleared.Spec.Approvals = nil
		expectRejected(k8s.Update(ctx, cleared), "spec.approvals is append-only")
	})

	It("refuses an output reserve above the budget, per unit", func() {
		over := newRun(ns, "over")
		over.Spec.Budget.OutputReserve.ModelRequests = 11
		expectRejected(k8s.Create(ctx, over), "spec.budget.outputReserve.modelRequests must not exceed spec.budget.modelRequests")

		over = newRun(ns, "over-tools")
		over.Spec.Budget.OutputReserve.ToolCalls = 11
		expectRejected(k8s.Create(ctx, over), "spec.budget.outputReserve.toolCalls must not exceed spec.budget.toolCalls")

		over = newRun(ns, "over-tokens")
		over.Spec.Budget.OutputReserve.Tokens = 5
		expectRejected(k8s.Create(ctx, over), "spec.budget.outputReserve.tokens must not exceed spec.budget.tokens")

		equal := newRun(ns, "equal")
		equal.Spec.Budget.OutputReserve.ModelRequests = 10
		Expect(k8s.Create(ctx, equal)).To(Succeed())
	})

	It("refuses degradeAtPercent above compressAtPercent", func() {
		bad := newRun(ns, "gates")
		bad.Spec.Gates = v1alpha1.Gates{DegradeAtPercent: 95, CompressAtPercent: 90}
		expectRejected(k8s.Create(ctx, bad), "spec.gates.degradeAtPercent must not exceed spec.gates.compressAtPercent")
	})
})

var _ = Describe("ResearchRun status rules", func() {
	var run *v1alpha1.ResearchRun
	BeforeEach(func() {
		run = newRun(newNamespace(), "r")
		Expect(k8s.Create(ctx, run)).To(Succeed())
	})

	It("allows the forward path Queued → Running → Recovering → Running → Finalizing → Terminated", func() {
		for _, p := range []v1alpha1.Phase{v1alpha1.PhaseQueued, v1alpha1.PhaseRunning, v1alpha1.PhaseRecovering, v1alpha1.PhaseRunning} {
			setPhase(run, p, "", "")
		}
		setPhase(run, v1alpha1.PhaseFinalizing, v1alpha1.ReasonBudgetExhausted, "")
		setPhase(run, v1alpha1.PhaseTerminated, v1alpha1.ReasonBudgetExhausted, v1alpha1.SettlementPartial)
	})

	DescribeTable("Terminated is absorbing",
		func(mutate func(*v1alpha1.ResearchRunStatus), want string) {
			setPhase(run, v1alpha1.PhaseRunning, "", "")
			setPhase(run, v1alpha1.PhaseTerminated, v1alpha1.ReasonCompleted, v1alpha1.SettlementComplete)
			expectRejected(writeStatus(run, mutate), want)
		},
		Entry("back to Running", func(s *v1alpha1.ResearchRunStatus) { s.Phase = v1alpha1.PhaseRunning }, "Terminated is absorbing"),
		Entry("to Finalizing", func(s *v1alpha1.ResearchRunStatus) { s.Phase = v1alpha1.PhaseFinalizing }, "Terminated is absorbing"),
		Entry("phase removed", func(s *v1alpha1.ResearchRunStatus) { s.Phase = "" }, "Terminated is absorbing"),
		Entry("whole status cleared", func(s *v1alpha1.ResearchRunStatus) { *s = v1alpha1.ResearchRunStatus{} }, "Terminated is absorbing"),
		Entry("reason changed", func(s *v1alpha1.ResearchRunStatus) { s.Reason = v1alpha1.ReasonCancelled }, "status.reason cannot change once Terminated"),
		Entry("reason removed", func(s *v1alpha1.ResearchRunStatus) { s.Reason = "" }, "status.reason cannot change once Terminated"),
		Entry("settlement changed", func(s *v1alpha1.ResearchRunStatus) { s.Settlement = v1alpha1.SettlementPartial }, "status.settlement cannot change once Terminated"),
		Entry("settlement removed", func(s *v1alpha1.ResearchRunStatus) { s.Settlement = "" }, "status.settlement cannot change once Terminated"),
	)

	It("still lets a Terminated run's message and conditions be written", func() {
		setPhase(run, v1alpha1.PhaseTerminated, v1alpha1.ReasonCancelled, v1alpha1.SettlementNone)
		Expect(writeStatus(run, func(s *v1alpha1.ResearchRunStatus) { s.Message = "cancelled by user" })).To(Succeed())
	})

	DescribeTable("Finalizing is one-way",
		func(to v1alpha1.Phase) {
			setPhase(run, v1alpha1.PhaseRunning, "", "")
			setPhase(run, v1alpha1.PhaseFinalizing, v1alpha1.ReasonStepLimit, "")
			expectRejected(writeStatus(run, func(s *v1alpha1.ResearchRunStatus) { s.Phase = to }),
				"Finalizing is one-way and may only move to Terminated")
		},
		Entry("to Running", v1alpha1.PhaseRunning),
		Entry("to Recovering", v1alpha1.PhaseRecovering),
		Entry("to Queued", v1alpha1.PhaseQueued),
		Entry("to Pending", v1alpha1.PhasePending),
	)

	It("refuses an unknown phase or reason by enum", func() {
		expectRejected(writeStatus(run, func(s *v1alpha1.ResearchRunStatus) { s.Phase = "Done" }), "Unsupported value")
		expectRejected(writeStatus(run, func(s *v1alpha1.ResearchRunStatus) { s.Reason = "Whatever" }), "Unsupported value")
	})
})

var _ = Describe("RunAttempt rules", func() {
	It("sets spec.podUID once", func() {
		ns := newNamespace()
		ra := &v1alpha1.RunAttempt{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "r-1"},
			Spec:       v1alpha1.RunAttemptSpec{RunName: "r", Attempt: 1},
		}
		Expect(k8s.Create(ctx, ra)).To(Succeed())
		ra.Spec.PodUID = "uid-1"
		Expect(k8s.Update(ctx, ra)).To(Succeed())

		changed := ra.DeepCopy()
		changed.Spec.PodUID = "uid-2"
		expectRejected(k8s.Update(ctx, changed), "spec.podUID is set once and cannot change")

		removed := ra.DeepCopy()
		removed.Spec.PodUID = ""
		expectRejected(k8s.Update(ctx, removed), "spec.podUID is set once and cannot change")

		renumbered := ra.DeepCopy()
		renumbered.Spec.Attempt = 2
		expectRejected(k8s.Update(ctx, renumbered), "spec.runName and spec.attempt are immutable")

		// The grant, directives and phase mirror stay writable.
		ra.Spec.Grant = v1alpha1.Grant{ModelRequests: 5, FinalizeOnly: true}
		ra.Spec.RunPhase = v1alpha1.PhaseFinalizing
		Expect(k8s.Update(ctx, ra)).To(Succeed())
	})

	It("records status.finalizeBase once", func() {
		ns := newNamespace()
		ra := &v1alpha1.RunAttempt{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "r-1"},
			Spec:       v1alpha1.RunAttemptSpec{RunName: "r", Attempt: 1},
		}
		Expect(k8s.Create(ctx, ra)).To(Succeed())
		ra.Status.Usage = v1alpha1.Usage{ModelRequests: 3}
		Expect(k8s.Status().Update(ctx, ra)).To(Succeed(), "no base yet: counters move freely")
		ra.Status.FinalizeBase = &v1alpha1.Usage{ModelRequests: 3}
		ra.Status.Usage.ModelRequests = 4
		Expect(k8s.Status().Update(ctx, ra)).To(Succeed(), "the base is recorded")

		moved := ra.DeepCopy()
		moved.Status.FinalizeBase = &v1alpha1.Usage{ModelRequests: 4}
		expectRejected(k8s.Status().Update(ctx, moved), "status.finalizeBase is recorded once and cannot change")
		removed := ra.DeepCopy()
		removed.Status.FinalizeBase = nil
		expectRejected(k8s.Status().Update(ctx, removed), "status.finalizeBase is recorded once and cannot change")

		ra.Status.Usage.ModelRequests = 5
		Expect(k8s.Status().Update(ctx, ra)).To(Succeed(), "the counters go on past the base")
	})

	It("bounds the fact lists", func() {
		ns := newNamespace()
		ra := &v1alpha1.RunAttempt{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "r-1"},
			Spec:       v1alpha1.RunAttemptSpec{RunName: "r", Attempt: 1},
		}
		Expect(k8s.Create(ctx, ra)).To(Succeed())
		for i := range 33 {
			ra.Status.Calls = append(ra.Status.Calls, v1alpha1.CallCount{Tool: "http.get", Fingerprint: strings.Repeat("a", i+1), Count: 1})
		}
		expectRejected(k8s.Status().Update(ctx, ra), "Too many: 33: must have at most 32 items")
	})
})

var _ = Describe("Session and RuntimePolicy rules", func() {
	It("requires a new reason for every permission-mode switch", func() {
		ns := newNamespace()
		s := &v1alpha1.Session{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s"},
			Spec:       v1alpha1.SessionSpec{PolicyRef: v1alpha1.LocalObjectReference{Name: "p"}, Mode: v1alpha1.ModePlan},
		}
		Expect(k8s.Create(ctx, s)).To(Succeed())

		s.Spec.Mode = v1alpha1.ModeEdit
		expectRejected(k8s.Update(ctx, s), "spec.modeChangeReason: a permission-mode switch requires a new, non-empty reason")

		s.Spec.ModeChangeReason = "drafting the report"
		Expect(k8s.Update(ctx, s)).To(Succeed())

		s.Spec.Mode = v1alpha1.ModePlan
		expectRejected(k8s.Update(ctx, s), "a permission-mode switch requires a new, non-empty reason")

		s.Spec.ModeChangeReason = "review only"
		Expect(k8s.Update(ctx, s)).To(Succeed())

		// Changing something else needs no reason.
		s.Spec.Queue.Limit = ptr.To[int32](3)
		Expect(k8s.Update(ctx, s)).To(Succeed())
	})

	It("refuses a policy whose default mode is above its ceiling", func() {
		ns := newNamespace()
		p := &v1alpha1.RuntimePolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"},
			Spec:       v1alpha1.RuntimePolicySpec{MaxMode: v1alpha1.ModePlan, DefaultMode: v1alpha1.ModeFull},
		}
		expectRejected(k8s.Create(ctx, p), "spec.defaultMode must not be above spec.maxMode")
		p.Spec.DefaultMode = v1alpha1.ModeReadOnly
		Expect(k8s.Create(ctx, p)).To(Succeed())
	})

	It("defaults a policy's event retention to 7 days and 64Mi per run", func() {
		ns := newNamespace()
		p := &v1alpha1.RuntimePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"}}
		Expect(k8s.Create(ctx, p)).To(Succeed())
		got := &v1alpha1.RuntimePolicy{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), got)).To(Succeed())
		Expect(got.Spec.Events.MaxAge).NotTo(BeNil())
		Expect(got.Spec.Events.MaxAge.Duration).To(Equal(7 * 24 * time.Hour))
		Expect(got.Spec.Events.MaxBytes).NotTo(BeNil())
		Expect(got.Spec.Events.MaxBytes.Value()).To(Equal(int64(64 << 20)))
		Expect(got.Spec.Events.Age()).To(Equal(v1alpha1.DefaultEventMaxAge))
		Expect(got.Spec.Events.Bytes()).To(Equal(int64(v1alpha1.DefaultEventMaxBytes)))
	})

	It("bounds a policy's event retention: maxAge 1m..90d, maxBytes at least 64Ki", func() {
		ns := newNamespace()
		create := func(name, age, size string) error {
			ev := v1alpha1.EventRetention{}
			if age != "" {
				d, err := time.ParseDuration(age)
				Expect(err).NotTo(HaveOccurred())
				ev.MaxAge = &metav1.Duration{Duration: d}
			}
			if size != "" {
				q := resource.MustParse(size)
				ev.MaxBytes = &q
			}
			return k8s.Create(ctx, &v1alpha1.RuntimePolicy{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Spec:       v1alpha1.RuntimePolicySpec{Events: ev},
			})
		}
		expectRejected(create("young", "59s", ""), "spec.events.maxAge must be at least 1m")
		expectRejected(create("old", "2161h", ""), "spec.events.maxAge must be at most 90d (2160h)")
		expectRejected(create("small", "", "65535"), "spec.events.maxBytes must be at least 64Ki")
		expectRejected(create("negative", "", "-64Mi"), "spec.events.maxBytes must be at least 64Ki")
		Expect(create("shortest", "1m", "64Ki")).To(Succeed())
		Expect(create("longest", "2160h", "1Gi")).To(Succeed())
		Expect(create("decimal", "1h", "100M")).To(Succeed())

		// The error names the field path and the rule.
		err := create("both", "30s", "1Ki")
		expectRejected(err, "spec.events.maxAge")
		Expect(err.Error()).To(ContainSubstring("spec.events.maxBytes: Invalid value"))

		// Written as YAML: an integer maxBytes, and a maxAge that is no duration.
		apply := func(name, events string) error {
			u := &unstructured.Unstructured{}
			Expect(yaml.Unmarshal([]byte(`apiVersion: agentrun.dev/v1alpha1
kind: RuntimePolicy
metadata: {name: `+name+`}
spec:
  events: `+events), &u.Object)).To(Succeed())
			u.SetNamespace(ns)
			return k8s.Create(ctx, u)
		}
		Expect(apply("int", "{maxBytes: 65536}")).To(Succeed())
		expectRejected(apply("int-small", "{maxBytes: 1024}"), "spec.events.maxBytes must be at least 64Ki")
		// Days are not a duration unit: the rule cannot read the value.
		expectRejected(apply("days", "{maxAge: 7d}"), "spec.events.maxAge must be at least 1m")
		expectRejected(apply("nonsense", "{maxBytes: lots}"), "spec.events.maxBytes in body should match")
	})
})
