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
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/devstack/stack"
	"github.com/agentrun-dev/agentrun/internal/harness"
	"github.com/agentrun-dev/agentrun/internal/runpod"
	"github.com/agentrun-dev/agentrun/internal/stream"
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
		By("building kubectl-agentrun, found by kubectl on PATH")
		Expect(stack.GoBuild(ctx, root, "./cmd/kubectl-agentrun", filepath.Join(dir, "plugin", "kubectl-agentrun"),
			GinkgoWriter)).To(Succeed())
	})
	// kubectlAgentrun runs `kubectl agentrun ARGS` (the plugin) against the
	// stack, as a user would.
	kubectlAgentrun := func(args ...string) string {
		GinkgoHelper()
		cmd := exec.CommandContext(ctx, st.Kubectl, append([]string{"agentrun"}, args...)...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+st.Kubeconfig,
			"PATH="+filepath.Join(dir, "plugin")+":"+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), string(out))
		return string(out)
	}

	publish := upstream.ToolCall{ID: "toolu_01", Name: "report.publish",
		Arguments: map[string]any{"section": "Findings", "content": "Raft everywhere; Milvus logs to a broker."}}
	note := func(id string) upstream.ToolCall {
		return upstream.ToolCall{ID: id, Name: "notes.write", Arguments: map[string]any{"section": "Findings", "text": "a note " + id}}
	}
	// harnessRun starts a run of the harness on the script; opts are the
	// session ("" for the world's) and the most attempts ("2"; default 1).
	harnessRun := func(w *world, name string, h v1.HarnessType, s upstream.Script, budget v1.Budget, opts ...string) {
		w.run(name, "", nil, func(r *v1.ResearchRun) {
			r.Spec.Goal = "Compare the replication models of open-source vector databases. " + upstream.PromptScript(s)
			r.Spec.Harness = &v1.Harness{Type: h, Model: "scripted"}
			// The local node's stand-in for the image: the launcher, with
			// the CLIs on PATH.
			r.Spec.Template.Spec.Containers = []corev1.Container{{Name: runpod.HarnessContainer, Env: []corev1.EnvVar{
				{Name: "PATH", Value: bin + ":" + os.Getenv("PATH")}}}}
			r.Spec.Budget = budget
			r.Spec.Recovery = v1.Recovery{MaxAttempts: 1, Backoff: &metav1.Duration{}}
			if len(opts) > 0 && opts[0] != "" {
				r.Spec.SessionRef.Name = opts[0]
			}
			if len(opts) > 1 && opts[1] == "2" {
				r.Spec.Recovery.MaxAttempts = 2
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
	harnessWorld := func(h v1.HarnessType, more ...func(*v1.RuntimePolicy)) *world {
		api := map[v1.HarnessType]v1.ModelAPI{v1.HarnessClaudeCode: v1.ModelAPIAnthropicMessages, v1.HarnessCodex: v1.ModelAPIOpenAIResponses}[h]
		return newWorld(func(p *v1.RuntimePolicy) {
			p.Spec.Models[0].API = api
			for _, m := range more {
				m(p)
			}
		})
	}

	It("ClaudeCode's subagent is charged to the attempt's grant, and exhausting it inside the subagent finalizes the run", func() {
		w := harnessWorld(v1.HarnessClaudeCode)
		name := "claude-subagent"
		// The subagent (Claude Code's Agent tool) takes notes on its own
		// script, through the same door with the same token.
		sub := upstream.PromptScript(upstream.Script{Turns: []upstream.Turn{
			{Tools: []upstream.ToolCall{note("toolu_31")}, Tokens: 300},
			{Tools: []upstream.ToolCall{note("toolu_32")}, Tokens: 300},
			{Tools: []upstream.ToolCall{note("toolu_33")}, Tokens: 300},
			{Say: "Notes taken.", Tokens: 100},
		}})
		budget := within
		budget.ModelRequests, budget.OutputReserve.ModelRequests = 7, 4 // a working grant of 3
		harnessRun(w, name, v1.HarnessClaudeCode, upstream.Script{
			Turns: []upstream.Turn{
				{Tools: []upstream.ToolCall{{ID: "toolu_30", Name: "Agent", Arguments: map[string]any{
					"description": "take notes", "subagent_type": "general-purpose", "prompt": "Take notes. " + sub}}}, Tokens: 300},
				{Say: "The subagent is done.", Tokens: 100},
			},
			Finalize: []upstream.Turn{
				{Tools: []upstream.ToolCall{publish}, Tokens: 300},
				{Say: "Published what I have.", Tokens: 100},
			},
		}, budget)
		run := w.eventually(name, v1.PhaseTerminated, "")
		Expect(run.Status.Reason).To(Equal(v1.ReasonBudgetExhausted), "message: %s", run.Status.Message)
		Expect(w.phaseSequence(name)).To(Equal([]v1.Phase{v1.PhaseRunning, v1.PhaseFinalizing, v1.PhaseTerminated}))
		fin := w.when(name, v1.PhaseFinalizing)
		Expect(fin.Status.Budget.Used.ModelRequests).To(BeEquivalentTo(3),
			"the parent's first turn and the subagent's two filled the working grant")
		w.factsSettled(name, 1)
		Expect(w.attemptUsage(name).ModelRequests).To(BeNumerically("<=", budget.ModelRequests))
		Expect(w.attemptUsage(name).ToolCalls).To(BeNumerically(">=", 1), "the subagent's door calls, on the same attempt")
		Expect(w.sections(name)).To(HaveLen(1), "published from the reserve")
		r := result(w, name)
		Expect(r.Subagents).To(Equal(1), "result: %+v", r)
	})

	for _, h := range []v1.HarnessType{v1.HarnessClaudeCode, v1.HarnessCodex} {
		prefix := map[v1.HarnessType]string{v1.HarnessClaudeCode: "claude", v1.HarnessCodex: "codex"}[h]

		It(string(h)+" completes a run and publishes its answer through the door", func() {
			w := harnessWorld(h)
			name := prefix + "-complete"
			script := upstream.Script{Turns: []upstream.Turn{
				{Tools: []upstream.ToolCall{publish}, Tokens: 300},
				{Say: "Published the findings (" + prefix + ").", Tokens: 200}, // a script of this run only
			}}
			harnessRun(w, name, h, script, within)
			run := w.terminated(name, v1.ReasonCompleted, v1.SettlementComplete)
			Expect(run.Status.Budget.Used.ModelRequests).To(BeNumerically(">=", 2))
			Expect(run.Status.Budget.Used.ToolCalls).To(BeEquivalentTo(1))
			Expect(w.sections(name)).To(HaveLen(1))
			Expect(w.report(name).Data[w.sections(name)[0]]).To(ContainSubstring("Raft everywhere"))
			r := result(w, name)
			Expect(r.Harness).To(Equal(h))
			Expect(r.ExitCode).To(BeZero())
			Expect(r.IsError).To(BeFalse(), "result: %+v", r)
			// The attempt's start-up cost: the container's start (the
			// launcher's) to the CLI's first model request at the provider.
			first := st.Upstream.FirstPrompted(script)
			Expect(r.StartedAt).NotTo(BeNil())
			Expect(first).To(BeTemporally(">", *r.StartedAt))
			AddReportEntry(string(h)+" start-up (container start to first model request)", first.Sub(*r.StartedAt).String())
			// The CLI's tool use is in the run's stream, from the model
			// stream the gateway relayed.
			viewer, err := st.ViewerToken(ctx, w.ns, "viewer")
			Expect(err).NotTo(HaveOccurred())
			Eventually(func() []string {
				var names []string
				for _, ev := range exported(viewer, w.ns, name) {
					if ev.Type == stream.ToolCallStart {
						names = append(names, ev.ToolCallName)
					}
				}
				return names
			}, timeout, interval).Should(ContainElement(ContainSubstring("report_publish")))
			_, _ = fmt.Fprintf(GinkgoWriter, "%s start-up: %s\n", h, first.Sub(*r.StartedAt).Round(time.Millisecond))
		})

		It(string(h)+" is refused at the grant mid-task and finalizes from the reserve", func() {
			w := harnessWorld(h)
			name := prefix + "-overspend"
			// A working grant of 2 model requests. The CLI does not know
			// the run is finalizing: its next request (purpose research) is
			// refused, it exits, and the launcher's finalize round (purpose
			// output) publishes from the reserve.
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
			Expect(r.ExitCode).To(BeZero(), "the reserve was left for the finalize round: %+v", r)
		})

		It(string(h)+" in Plan mode is offered no write: the CLI runs read-only and the door withholds the tool", func() {
			w := harnessWorld(h, func(p *v1.RuntimePolicy) {
				p.Spec.Harness = &v1.HarnessPolicy{DisallowedTools: []string{"WebFetch"}}
			})
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
			Expect(podLogs(w, name)).To(And(ContainSubstring("mode Plan"), ContainSubstring("disallowed [WebFetch]")))
		})

		It(string(h)+" waits for the approval of a High-risk door tool, given with kubectl agentrun approve", func() {
			w := newWorld(func(p *v1.RuntimePolicy) {
				p.Spec.Models[0].API = map[v1.HarnessType]v1.ModelAPI{
					v1.HarnessClaudeCode: v1.ModelAPIAnthropicMessages, v1.HarnessCodex: v1.ModelAPIOpenAIResponses}[h]
				p.Spec.Tools[2].Risk = v1.RiskHigh // report.publish
				p.Spec.AutoApprove = []string{"notes.write"}
			})
			name := prefix + "-approval"
			harnessRun(w, name, h, upstream.Script{Turns: []upstream.Turn{
				{Tools: []upstream.ToolCall{publish}, Tokens: 300},
				{Say: "Published after approval.", Tokens: 200},
			}}, within)
			var actionID string
			Eventually(func(g Gomega) {
				run := w.get(name)
				g.Expect(run.Status.PendingApprovals).To(HaveLen(1))
				g.Expect(run.Status.PendingApprovals[0].Tool).To(Equal("report.publish"))
				actionID = run.Status.PendingApprovals[0].ActionID
			}, timeout, interval).Should(Succeed())
			Expect(w.sections(name)).To(BeEmpty(), "nothing is published before the approval")

			out := kubectlAgentrun("approve", "-n", w.ns, name, actionID, "--comment", "the CLI may publish")
			Expect(out).To(ContainSubstring(actionID))
			w.terminated(name, v1.ReasonCompleted, v1.SettlementComplete)
			Expect(w.sections(name)).To(HaveLen(1))
			Expect(w.get(name).Spec.Approvals).To(ConsistOf(And(HaveField("ActionID", actionID),
				HaveField("Approver", Not(BeEmpty())))), "the webhook stamped who approved")
			Expect(result(w, name).ExitCode).To(BeZero())
		})

		It(string(h)+" killed mid-run (SIGKILL of the CLI) is recovered, and no door call is replayed", func() {
			w := harnessWorld(h)
			name := prefix + "-killed"
			budget := within
			harnessRun(w, name, h, upstream.Script{Turns: []upstream.Turn{
				{Tools: []upstream.ToolCall{publish}, Tokens: 300},
				// Slow, so the CLI is killed while it streams.
				{Say: strings.Repeat("Still writing the summary. ", 24), ChunkDelayMS: 250, Tokens: 200},
			}}, budget, "", "2")
			Eventually(func() []string { return w.sections(name) }, timeout, interval).Should(HaveLen(1))
			w.factsSettled(name, 1)
			Expect(w.attempt(name, 1).Status.InFlight).To(BeEmpty(), "the publish settled before the kill")
			killed := killDescendants(w.pid(name, 1))
			Expect(killed).NotTo(BeEmpty(), "the CLI's processes")

			run := w.terminated(name, v1.ReasonCompleted, v1.SettlementComplete)
			Expect(w.attempts(name)).To(Equal([]int{1, 2}), "message: %s", run.Status.Message)
			Expect(w.phaseSequence(name)).To(ContainElement(v1.PhaseRecovering))
			Expect(w.attempt(name, 1).Spec.Superseded).To(BeTrue())
			Expect(w.attempt(name, 1).Status.Faults).To(ContainElement(HaveField("Kind", "HarnessExited")),
				"the launcher recorded the CLI's death as a fact")
			// The first attempt's publish was settled, so nothing of it was
			// redone for it: attempt 2's CLI starts over and publishes the same
			// section, which the gateway keeps once.
			Expect(w.sections(name)).To(HaveLen(1))
			Expect(w.attempt(name, 1).Status.InFlight).To(BeEmpty())
		})
	}
})

// killDescendants SIGKILLs every process below pid (not pid itself): a
// harness's CLI and what it started, under the launcher. It returns their
// pids.
func killDescendants(pid int) []int {
	GinkgoHelper()
	children := map[int][]int{}
	entries, err := os.ReadDir("/proc")
	Expect(err).NotTo(HaveOccurred())
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after ")".
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(f) > 1 {
			if ppid, err := strconv.Atoi(f[1]); err == nil {
				children[ppid] = append(children[ppid], p)
			}
		}
	}
	var out []int
	for queue := children[pid]; len(queue) > 0; queue = queue[1:] {
		out = append(out, queue[0])
		queue = append(queue, children[queue[0]]...)
	}
	for _, p := range out {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	return out
}
