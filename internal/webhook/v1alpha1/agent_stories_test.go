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
	"errors"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/research/scripted"
	"github.com/agentrun-dev/agentrun/pkg/agent"
	"github.com/agentrun-dev/agentrun/pkg/agent/research"
)

// These stories run the reference research agent in-process, as the pod of
// the attempt would: it reaches the gateway (in-process, under the gateway's
// own identity, so the admission policies apply to its writes for real) with
// a token of audience agentrun-gateway bound to the attempt's pod, which the
// gateway checks with a real TokenReview; the operator and webhooks are real
// too. The test plays kubelet.

// agentWorld is a namespace whose policy lets the research agent work in
// mode Auto; publishRisk sets report.publish's risk (High needs approval).
func agentWorld(publishRisk v1.Risk) string {
	GinkgoHelper()
	ns := newNamespace()
	p := minimalPolicy(ns)
	p.Spec.Tools = []v1.Tool{
		{Name: "notes.write", Risk: v1.RiskLow, Effect: v1.EffectWrite, Idempotent: true},
		{Name: "report.publish", Risk: publishRisk, Effect: v1.EffectExternal, Idempotent: true},
	}
	p.Spec.AutoApprove = []string{"notes.write"}
	p.Spec.Models = []v1.Model{{Name: "scripted", BaseURL: upstreamURL}}
	if publishRisk != v1.RiskHigh {
		p.Spec.AutoApprove = append(p.Spec.AutoApprove, "report.publish")
	}
	Expect(admin.Create(ctx, p)).To(Succeed())
	s := newSession(ns, "s")
	s.Spec.Mode = v1.ModeAuto
	s.Spec.ModeChangeReason = "the agent stories run unattended"
	Expect(admin.Create(ctx, s)).To(Succeed())
	return ns
}

// agentRun creates a run with budget (model requests) and reserve, starts
// its attempt-1 agent in-process with script, and returns a channel that
// yields the agent's exit.
func agentRun(ns, name string, budget, reserve int64, script string) <-chan error {
	GinkgoHelper()
	run := newRun(ns, name)
	run.Spec.Budget = v1.Budget{ModelRequests: budget, ToolCalls: 40, OutputReserve: v1.OutputReserve{ModelRequests: reserve, ToolCalls: 5}}
	Expect(admin.Create(ctx, run)).To(Succeed())

	pod := &corev1.Pod{}
	Eventually(func(g Gomega) {
		g.Expect(admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: name + "-1"}, pod)).To(Succeed())
		ra := &v1.RunAttempt{}
		g.Expect(admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: name + "-1"}, ra)).To(Succeed())
		g.Expect(ra.Spec.PodUID).To(Equal(string(pod.UID)))
	}, timeout, interval).Should(Succeed())
	kubelet(pod, corev1.PodRunning)

	s, err := scripted.Parse([]byte(script))
	Expect(err).NotTo(HaveOccurred())
	cfg := research.Config{
		Agent: agent.Config{
			GatewayURL:   gatewayURL,
			Token:        podToken(ns, pod, "agentrun-gateway"),
			PollInterval: 100 * time.Millisecond,
		},
	}
	(&scripted.Harness{Script: s}).Configure(&cfg)
	done := make(chan error, 1)
	go func() {
		defer GinkgoRecover()
		err := research.Run(ctx, cfg)
		phase := corev1.PodSucceeded
		if err != nil && !errors.Is(err, agent.ErrTerminated) {
			phase = corev1.PodFailed
		}
		kubelet(pod, phase)
		done <- err
	}()
	return done
}

// kubelet writes a pod phase as the kubelet would.
func kubelet(pod *corev1.Pod, phase corev1.PodPhase) {
	GinkgoHelper()
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &corev1.Pod{}
		if err := admin.Get(ctx, client.ObjectKeyFromObject(pod), cur); err != nil {
			return err
		}
		cur.Status.Phase = phase
		if cur.Status.StartTime == nil {
			now := metav1.Now()
			cur.Status.StartTime = &now
		}
		return admin.Status().Update(ctx, cur)
	})).To(Succeed())
}

func runOf(ns, name string) *v1.ResearchRun {
	GinkgoHelper()
	run := &v1.ResearchRun{}
	Expect(admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, run)).To(Succeed())
	return run
}

func eventuallyTerminated(ns, name string) *v1.ResearchRun {
	GinkgoHelper()
	var run *v1.ResearchRun
	Eventually(func() v1.Phase {
		run = runOf(ns, name)
		return run.Status.Phase
	}, 60*time.Second, interval).Should(Equal(v1.PhaseTerminated))
	return run
}

func report(ns, name string) *corev1.ConfigMap {
	GinkgoHelper()
	cm := &corev1.ConfigMap{}
	Expect(admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: name + "-report"}, cm)).To(Succeed())
	return cm
}

const normalScript = `
plan: [Overview, Replication]
turns:
- tools:
  - {name: notes.write, args: {section: Overview, text: "Milvus, Qdrant and Weaviate lead."}}
- tools:
  - {name: report.publish, args: {section: Overview, content: "Milvus, Qdrant and Weaviate lead."}}
  - {name: report.publish, args: {section: Replication, content: "Raft for metadata."}}
- finish: true
  advice: [{source: reviewer, kind: Continue}]
- say: "one more pass, as the reviewer asked"
- say: "and another"
`

var _ = Describe("The research agent against the real operator", func() {
	It("completes a normal run with a published report, and ignores 'continue' advice after finish", func() {
		ns := agentWorld(v1.RiskMedium)
		done := agentRun(ns, "normal", 20, 2, normalScript)
		Eventually(done, 60*time.Second).Should(Receive(BeNil()))
		run := eventuallyTerminated(ns, "normal")
		Expect(run.Status.Reason).To(Equal(v1.ReasonCompleted), run.Status.Message)
		Expect(run.Status.Settlement).To(Equal(v1.SettlementComplete))
		// plan + 3 turns (the last one finishes); the advice adds none.
		Expect(run.Status.Budget.Used.ModelRequests).To(Equal(int64(4)))

		cm := report(ns, "normal")
		Expect(cm.Labels).To(HaveKeyWithValue(v1.LabelRun, "normal"))
		Expect(cm.OwnerReferences).To(ContainElement(HaveField("UID", run.UID)))
		Expect(cm.Data).To(HaveKey("01-overview.md"))
		Expect(cm.Data).To(HaveKey("02-replication.md"))

		ra := &v1.RunAttempt{}
		Expect(admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: "normal-1"}, ra)).To(Succeed())
		Expect(ra.Status.Advice).To(ContainElement(HaveField("Kind", "Continue")))
	})

	It("finalizes a budget exhaustion from exactly the reserve: BudgetExhausted/Partial", func() {
		ns := agentWorld(v1.RiskMedium)
		script := `
plan: [Alpha, Beta, Gamma]
turns:
- tools: [{name: notes.write, args: {section: Alpha, text: "a1"}}]
- tools: [{name: notes.write, args: {section: Beta, text: "b1"}}]
- tools: [{name: notes.write, args: {section: Alpha, text: "a2"}}]
  repeat: 2
- say: "still thinking"
  repeat: 20
finalize:
- tools: [{name: report.publish, args: {section: Alpha, content: "Alpha, from the reserve."}}]
`
		done := agentRun(ns, "budget", 8, 2, script)
		Eventually(done, 60*time.Second).Should(Receive(BeNil()))
		run := eventuallyTerminated(ns, "budget")
		Expect(run.Status.Reason).To(Equal(v1.ReasonBudgetExhausted), run.Status.Message)
		Expect(run.Status.Settlement).To(Equal(v1.SettlementPartial))
		Expect(run.Status.FinalizingTime).NotTo(BeNil())
		// The working allowance is 6 and was used up; finalizing spent from
		// the 2-request reserve (one request for the one unpublished section
		// it could fill) and never beyond it.
		Expect(run.Status.Ledger).To(HaveLen(1))
		Expect(run.Status.Budget.Used.ModelRequests).To(BeNumerically(">", 6))
		Expect(run.Status.Budget.Used.ModelRequests).To(BeNumerically("<=", 8))
		Expect(run.Status.Message).To(ContainSubstring("6/6 model requests"))
		Expect(report(ns, "budget").Data).To(HaveKey("01-alpha.md"))
	})

	It("waits for an approval before a High-risk publish, and publishes once a user approves", func() {
		ns := agentWorld(v1.RiskHigh)
		script := `
plan: [Overview]
turns:
- tools:
  - {name: report.publish, args: {section: Overview, content: "Approved content."}}
- finish: true
`
		done := agentRun(ns, "approval", 10, 2, script)
		var action string
		Eventually(func(g Gomega) {
			ra := &v1.RunAttempt{}
			g.Expect(admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: "approval-1"}, ra)).To(Succeed())
			g.Expect(ra.Status.AwaitingApproval).To(HaveLen(1))
			action = ra.Status.AwaitingApproval[0].ActionID
		}, timeout, interval).Should(Succeed())
		Consistently(done, time.Second).ShouldNot(Receive(), "the publish waits for the approval")
		// The report holds the plan (the gateway persists it first) but no section.
		Expect(report(ns, "approval").Data).NotTo(HaveKey("01-overview.md"), "nothing is published before the approval")

		carol := as("carol", "system:masters")
		patch := []byte(`[{"op":"add","path":"/spec/approvals/-","value":{"actionID":"` + action + `","decision":"Approve"}}]`)
		Expect(carol.Patch(ctx, runOf(ns, "approval"), client.RawPatch(types.JSONPatchType, patch))).To(Succeed())

		Eventually(done, 60*time.Second).Should(Receive(BeNil()))
		run := eventuallyTerminated(ns, "approval")
		Expect(run.Status.Reason).To(Equal(v1.ReasonCompleted), run.Status.Message)
		Expect(run.Status.Settlement).To(Equal(v1.SettlementComplete))
		Expect(run.Spec.Approvals).To(ContainElement(HaveField("Approver", "carol")))
		Expect(report(ns, "approval").Data).To(HaveKeyWithValue("01-overview.md", ContainSubstring("Approved content.")))
	})
})
