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
	"os/exec"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// Agents nobody here wrote the client of: the official openai packages (npm
// and PyPI) on the chat door, the official Anthropic SDKs (npm and PyPI) on the
// Messages door, and the Python SDK's minimal agent, run as real attempt pods (a
// host node or python3 process of the local node) that reach the model door
// and the agent API only through the gateway, with the pod's projected token
// and the gateway's CA.
var _ = Describe("Agents on the official OpenAI SDKs and the Python SDK", Ordered, Label("clients"), func() {
	var python string

	BeforeAll(func() {
		By("installing the clients' pinned dependencies (hack/test-clients.sh --setup)")
		cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "test-clients.sh"), "--setup")
		cmd.Dir = root
		cmd.Stdout, cmd.Stderr = GinkgoWriter, GinkgoWriter
		Expect(cmd.Run()).To(Succeed())
		python = filepath.Join(root, "bin", "venv", "bin", "python")
	})

	// clientWorld serves model "scripted" at the stack's scripted upstream.
	clientWorld := func() *world {
		return newWorld(func(p *v1.RuntimePolicy) {
			p.Spec.Models = []v1.Model{{Name: "scripted", BaseURL: st.UpstreamURL}}
		})
	}
	// clientRun runs command as the agent container; the image is only the
	// local node's stand-in (the command is a host program).
	clientRun := func(w *world, name string, command []string, budget v1.Budget) {
		w.run(name, imageShell, nil, func(r *v1.ResearchRun) {
			r.Spec.Goal = "Compare the replication models of open-source vector databases."
			r.Spec.Template.Spec.Containers[0].Command = command
			r.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "AGENTRUN_MODEL", Value: "scripted"}}
			r.Spec.Budget = budget
			r.Spec.Recovery = v1.Recovery{MaxAttempts: 1, Backoff: &metav1.Duration{}}
		})
	}
	within := v1.Budget{
		ModelRequests: 20, ToolCalls: 20,
		OutputReserve: v1.OutputReserve{ModelRequests: 2, ToolCalls: 2},
		Deadline:      &metav1.Duration{Duration: 5 * time.Minute},
	}
	tight := v1.Budget{
		ModelRequests: 6, ToolCalls: 20,
		OutputReserve: v1.OutputReserve{ModelRequests: 2, ToolCalls: 2},
		Deadline:      &metav1.Duration{Duration: 5 * time.Minute},
	}

	expectComplete := func(w *world, name string, modelRequests int64) {
		GinkgoHelper()
		run := w.terminated(name, v1.ReasonCompleted, v1.SettlementComplete)
		Expect(w.attempts(name)).To(Equal([]int{1}))
		Expect(run.Status.Budget.Used.ModelRequests).To(BeEquivalentTo(modelRequests))
		Expect(run.Status.Budget.Used.Tokens).To(BeNumerically(">", 0))
		cm := w.report(name)
		Expect(cm).NotTo(BeNil())
		Expect(cm.Data).To(HaveKey(ContainSubstring("-")))
	}
	expectOverspent := func(w *world, name string) {
		GinkgoHelper()
		run := w.eventually(name, v1.PhaseTerminated, "")
		Expect(run.Status.Reason).To(Equal(v1.ReasonBudgetExhausted), "message: %s", run.Status.Message)
		Expect(run.Status.Settlement).To(BeElementOf(v1.SettlementPartial, v1.SettlementComplete))
		Expect(w.phaseSequence(name)).To(Equal([]v1.Phase{v1.PhaseRunning, v1.PhaseFinalizing, v1.PhaseTerminated}))
		fin := w.when(name, v1.PhaseFinalizing)
		Expect(fin).NotTo(BeNil())
		// The working grant (6 - 2 reserved) was used up before Finalizing...
		Expect(fin.Status.Budget.Used.ModelRequests).To(BeEquivalentTo(4))
		// ...and nothing was served beyond the grant: the whole budget, exactly.
		w.factsSettled(name, 1)
		Expect(w.attemptUsage(name).ModelRequests).To(BeEquivalentTo(tight.ModelRequests))
		Expect(w.get(name).Status.Budget.Used.ModelRequests).To(BeEquivalentTo(tight.ModelRequests))
		Expect(w.report(name).Data).To(HaveKey("01-findings.md"))
	}

	It("openai (npm): complete.mjs completes within budget", func() {
		w := clientWorld()
		clientRun(w, "ts-complete", []string{"node", filepath.Join(root, "examples", "openai-ts", "complete.mjs")}, within)
		expectComplete(w, "ts-complete", 2)
	})
	It("openai (npm): overspend.mjs gets 429 grant_exhausted, finalizes from the reserve: BudgetExhausted", func() {
		w := clientWorld()
		clientRun(w, "ts-overspend", []string{"node", filepath.Join(root, "examples", "openai-ts", "overspend.mjs")}, tight)
		expectOverspent(w, "ts-overspend")
	})
	It("openai (PyPI): complete.py completes within budget", func() {
		w := clientWorld()
		clientRun(w, "py-complete", []string{python, filepath.Join(root, "examples", "openai-python", "complete.py")}, within)
		expectComplete(w, "py-complete", 2)
	})
	It("openai (PyPI): overspend.py gets 429 grant_exhausted, finalizes from the reserve: BudgetExhausted", func() {
		w := clientWorld()
		clientRun(w, "py-overspend", []string{python, filepath.Join(root, "examples", "openai-python", "overspend.py")}, tight)
		expectOverspent(w, "py-overspend")
	})
	// The Messages door: minimal agents on the official Anthropic SDKs
	// (examples/*/claude.*), the same two stories as the openai examples'.
	claudeTS := func(mode string) []string {
		return []string{"node", filepath.Join(root, "examples", "openai-ts", "claude.mjs"), mode}
	}
	claudePy := func(mode string) []string {
		return []string{python, filepath.Join(root, "examples", "openai-python", "claude.py"), mode}
	}
	It("@anthropic-ai/sdk (npm): claude.mjs completes within budget on the Messages door", func() {
		w := clientWorld()
		clientRun(w, "claude-ts-complete", claudeTS("complete"), within)
		expectComplete(w, "claude-ts-complete", 2)
	})
	It("@anthropic-ai/sdk (npm): claude.mjs gets 429 grant_exhausted, finalizes from the reserve", func() {
		w := clientWorld()
		clientRun(w, "claude-ts-overspend", claudeTS("overspend"), tight)
		expectOverspent(w, "claude-ts-overspend")
	})
	It("anthropic (PyPI): claude.py completes within budget on the Messages door", func() {
		w := clientWorld()
		clientRun(w, "claude-py-complete", claudePy("complete"), within)
		expectComplete(w, "claude-py-complete", 2)
	})
	It("anthropic (PyPI): claude.py gets 429 grant_exhausted, finalizes from the reserve", func() {
		w := clientWorld()
		clientRun(w, "claude-py-overspend", claudePy("overspend"), tight)
		expectOverspent(w, "claude-py-overspend")
	})
	// Steps and progress are what the gateway sees (issue 30, item 1): an
	// agent on openai alone reports none, and the gates bind it anyway.
	loopRun := func(name, mode string, gates v1.Gates) *world {
		w := clientWorld()
		w.run(name, imageShell, nil, func(r *v1.ResearchRun) {
			r.Spec.Goal = "Keep going."
			r.Spec.Template.Spec.Containers[0].Command = []string{python, filepath.Join(root, "examples", "openai-python", "loop.py"), mode, "0.4"}
			r.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "AGENTRUN_MODEL", Value: "scripted"}}
			r.Spec.Budget = within
			r.Spec.Gates = gates
			r.Spec.Recovery = v1.Recovery{MaxAttempts: 1, Backoff: &metav1.Duration{}}
		})
		return w
	}
	It("openai (PyPI) alone, asking the same question round after round: NoProgress", func() {
		w := loopRun("py-loop", "repeat", v1.Gates{NoProgressLimit: 3})
		run := w.terminated("py-loop", v1.ReasonNoProgress, v1.SettlementNone)
		Expect(w.phaseSequence("py-loop")).To(Equal([]v1.Phase{v1.PhaseRunning, v1.PhaseFinalizing, v1.PhaseTerminated}))
		ra := w.attempt("py-loop", 1)
		Expect(ra.Status.Steps).To(BeNumerically(">=", 4), "every model turn served is a step; the agent reported none")
		Expect(run.Status.Budget.Used.ModelRequests).To(BeNumerically("<", within.ModelRequests-within.OutputReserve.ModelRequests),
			"stopped by the gate, not the budget")
	})
	It("openai (PyPI) alone, asking a new question every round: StepLimit", func() {
		w := loopRun("py-talk", "vary", v1.Gates{MaxSteps: 5, NoProgressLimit: 3})
		run := w.terminated("py-talk", v1.ReasonStepLimit, v1.SettlementNone)
		ra := w.attempt("py-talk", 1)
		Expect(ra.Status.Steps).To(BeNumerically(">=", 5))
		Expect(ra.Status.LastProgressStep).To(BeNumerically(">=", 5), "every new answer is progress")
		Expect(run.Status.Budget.Used.ModelRequests).To(BeNumerically("<", within.ModelRequests-within.OutputReserve.ModelRequests))
	})
	It("the Python SDK's minimal agent completes", func() {
		w := clientWorld()
		clientRun(w, "py-minimal", []string{python, filepath.Join(root, "sdk", "python", "examples", "minimal_agent.py")}, within)
		expectComplete(w, "py-minimal", 1)
	})
})
