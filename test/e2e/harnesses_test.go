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
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/harness"
	"github.com/agentrun-dev/agentrun/internal/runpod"
	"github.com/agentrun-dev/agentrun/internal/upstream"
)

// Claude Code and Codex, unmodified and pinned (examples/harnesses'
// lockfile), as the agents of runs with spec.harness: the operator builds
// the agent container, agentrun-harness (the image's entrypoint, here the
// local node's stand-in) points the CLI at the gateway, and the scripted
// upstream answers from a script in the run's goal (the CLIs cannot add a
// field to their requests).
var _ = Describe("Coding harnesses: Claude Code and Codex as governed runs", Ordered, Label("harnesses"), func() {
	var bin string

	BeforeAll(func() {
		By("installing the pinned CLIs (hack/test-clients.sh --setup)")
		cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "test-clients.sh"), "--setup")
		cmd.Dir = root
		cmd.Stdout, cmd.Stderr = GinkgoWriter, GinkgoWriter
		Expect(cmd.Run()).To(Succeed())
		bin = filepath.Join(root, "examples", "harnesses", "node_modules", ".bin")
	})

	publish := upstream.ToolCall{ID: "toolu_01", Name: "report.publish",
		Arguments: map[string]any{"section": "Findings", "content": "Raft everywhere; Milvus logs to a broker."}}
	note := func(id string) upstream.ToolCall {
		return upstream.ToolCall{ID: id, Name: "notes.write", Arguments: map[string]any{"section": "Findings", "text": "a note " + id}}
	}
	// harnessRun starts a run of the harness on the script.
	harnessRun := func(w *world, name string, h v1.HarnessType, s upstream.Script, budget v1.Budget, session ...string) {
		w.run(name, "", nil, func(r *v1.ResearchRun) {
			r.Spec.Goal = "Compare the replication models of open-source vector databases. " + upstream.PromptScript(s)
			r.Spec.Harness = &v1.Harness{Type: h, Model: "scripted"}
			// The local node's stand-in for the image: the launcher, with
			// the CLIs on PATH.
			r.Spec.Template.Spec.Containers = []corev1.Container{{Name: runpod.HarnessContainer, Env: []corev1.EnvVar{
				{Name: "PATH", Value: bin + ":" + os.Getenv("PATH")}}}}
			r.Spec.Budget = budget
			r.Spec.Recovery = v1.Recovery{MaxAttempts: 1, Backoff: &metav1.Duration{}}
			if len(session) > 0 {
				r.Spec.SessionRef.Name = session[0]
			}
		})
	}
	within := v1.Budget{
		ModelRequests: 20, ToolCalls: 20,
		OutputReserve: v1.OutputReserve{ModelRequests: 3, ToolCalls: 2},
		Deadline:      &metav1.Duration{Duration: 5 * time.Minute},
	}
	// result is the launcher's result line: the container's termination
	// message.
	result := func(w *world, name string) harness.Result {
		GinkgoHelper()
		pod := podDone(w.ns, attemptName(name, 1))
		var st *corev1.ContainerStateTerminated
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.Name == runpod.HarnessContainer {
				st = cs.State.Terminated
			}
		}
		Expect(st).NotTo(BeNil())
		var r harness.Result
		Expect(json.Unmarshal([]byte(st.Message), &r)).To(Succeed(), "termination message: %s", st.Message)
		return r
	}

	// harnessWorld serves model "scripted" in the harness's own API, as
	// its provider would.
	harnessWorld := func(h v1.HarnessType) *world {
		api := map[v1.HarnessType]v1.ModelAPI{v1.HarnessClaudeCode: v1.ModelAPIAnthropicMessages, v1.HarnessCodex: v1.ModelAPIOpenAIResponses}[h]
		return newWorld(func(p *v1.RuntimePolicy) { p.Spec.Models[0].API = api })
	}

	for _, h := range []v1.HarnessType{v1.HarnessClaudeCode, v1.HarnessCodex} {
		prefix := map[v1.HarnessType]string{v1.HarnessClaudeCode: "claude", v1.HarnessCodex: "codex"}[h]

		It(string(h)+" completes a run and publishes its answer through the door", func() {
			w := harnessWorld(h)
			name := prefix + "-complete"
			harnessRun(w, name, h, upstream.Script{Turns: []upstream.Turn{
				{Tools: []upstream.ToolCall{publish}, Tokens: 300},
				{Say: "Published the findings.", Tokens: 200},
			}}, within)
			run := w.terminated(name, v1.ReasonCompleted, v1.SettlementComplete)
			Expect(run.Status.Budget.Used.ModelRequests).To(BeNumerically(">=", 2))
			Expect(run.Status.Budget.Used.ToolCalls).To(BeEquivalentTo(1))
			Expect(w.sections(name)).To(HaveLen(1))
			Expect(w.report(name).Data[w.sections(name)[0]]).To(ContainSubstring("Raft everywhere"))
			r := result(w, name)
			Expect(r.Harness).To(Equal(h))
			Expect(r.ExitCode).To(BeZero())
			Expect(r.IsError).To(BeFalse(), "result: %+v", r)
		})

		It(string(h)+" is refused at the grant mid-task and finalizes from the reserve", func() {
			w := harnessWorld(h)
			name := prefix + "-overspend"
			// A working grant of 2 model requests. The CLI does not know
			// the run is finalizing: what it asks next is served from the
			// reserve (and the door refuses its research tools), until it
			// exits; then the launcher's finalize round publishes.
			tight := within
			tight.ModelRequests, tight.OutputReserve.ModelRequests = 6, 4
			harnessRun(w, name, h, upstream.Script{
				Turns: []upstream.Turn{
					{Tools: []upstream.ToolCall{note("toolu_11")}, Tokens: 300},
					{Tools: []upstream.ToolCall{note("toolu_12")}, Tokens: 300},
					{Tools: []upstream.ToolCall{note("toolu_13")}, Tokens: 300},
				},
				Finalize: []upstream.Turn{
					{Tools: []upstream.ToolCall{publish}, Tokens: 300},
					{Say: "Published what I have.", Tokens: 100},
				},
			}, tight)
			run := w.eventually(name, v1.PhaseTerminated, "")
			Expect(run.Status.Reason).To(Equal(v1.ReasonBudgetExhausted), "message: %s", run.Status.Message)
			Expect(w.phaseSequence(name)).To(Equal([]v1.Phase{v1.PhaseRunning, v1.PhaseFinalizing, v1.PhaseTerminated}))
			Expect(w.sections(name)).To(HaveLen(1), "published from the reserve")
			w.factsSettled(name, 1)
			Expect(w.attemptUsage(name).ModelRequests).To(BeNumerically("<=", tight.ModelRequests))
			Expect(w.report(name).Data[w.sections(name)[0]]).To(ContainSubstring("Raft everywhere"))
			r := result(w, name)
			Expect(r.FinalizeRounds).To(Equal(1), "result: %+v", r)
		})

		It(string(h)+" in Plan mode is offered no write: the CLI runs read-only and the door withholds the tool", func() {
			w := harnessWorld(h)
			w.newSession("plan", v1.ModePlan)
			name := prefix + "-plan"
			harnessRun(w, name, h, upstream.Script{Turns: []upstream.Turn{
				{Tools: []upstream.ToolCall{note("toolu_21")}, Tokens: 300},
				{Say: "Plan: compare Raft groups, then the brokers.", Tokens: 200},
			}}, within, "plan")
			run := w.eventually(name, v1.PhaseTerminated, "")
			Expect(run.Status.Reason).To(Equal(v1.ReasonCompleted), "message: %s", run.Status.Message)
			Expect(w.sections(name)).To(BeEmpty())
			Expect(w.attemptUsage(name).ToolCalls).To(BeZero(), "no write reached the door")
			pod := podDone(w.ns, attemptName(name, 1))
			Expect(pod.Spec.Containers[0].Env).To(ContainElement(HaveField("Name", runpod.EnvHarness)))
			Expect(podLogs(w, name)).To(ContainSubstring("mode Plan"))
		})
	}
})
