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
	"net/http"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/toolserver"
)

// scriptFrom marks the ConfigMap holding an agent's script (world.run turns
// it into env AGENTRUN_SCRIPT from that ConfigMap).
const scriptFrom = "script-from-configmap="

// agentArgs runs the reference agent with the scripted provider and the
// script in ConfigMap name.
func agentArgs(script string) []string {
	return []string{"--provider=scripted", scriptFrom + script}
}

// paced is agentArgs for an agent that behaves like one talking to a real
// model: the policy's rate_limit interceptor spaces its calls (model
// requests and tool calls) by 400 ms (the suite's gateway flushes facts every 100 ms).
// A scripted agent otherwise answers in microseconds and reports once a
// second, so a gate would be decided on facts hundreds of requests old.
func paced(script string) []string {
	return append(agentArgs(script), "--rate-limit-interval=400ms")
}

// Scripts of the scripted provider (docs/script-format.md). The policy of
// newWorld lets Auto mode run notes.write and report.publish (Medium risk,
// External, not idempotent) without asking.
const (
	// Two sections, both researched and published, then finish.
	scriptComplete = `
plan: [Overview, Replication]
turns:
- say: "Reading about the field."
  tools:
  - {name: notes.write, args: {section: Overview, text: "Milvus, Qdrant and Weaviate are the main open-source vector databases."}}
- tools:
  - {name: notes.write, args: {section: Replication, text: "Qdrant replicates shards with Raft-managed metadata."}}
- tools:
  - {name: report.publish, args: {section: Overview, content: "Milvus, Qdrant and Weaviate lead."}}
  - {name: report.publish, args: {section: Replication, content: "Raft for metadata, async shard replication."}}
- say: "All sections are published."
  finish: true
`
	// A tool fails (a retryable timeout) and the agent goes on.
	scriptToolFailure = `
plan: [Overview]
turns:
- tools:
  - {name: notes.write, args: {section: Overview, text: "first try"}, fail: {kind: Timeout, retryable: true, message: "notes backend timed out"}}
- tools:
  - {name: notes.write, args: {section: Overview, text: "second try"}}
- tools:
  - {name: report.publish, args: {section: Overview, content: "Written after a failed note."}}
- finish: true
`
	// Researches three sections and never finishes on its own; the working
	// budget runs out first. Finalization publishes one section from the
	// reserve; the other two are refused by the finalize grant.
	scriptBudget = `
plan: [Alpha, Beta, Gamma]
turns:
- tools: [{name: notes.write, args: {section: Alpha, text: "a1"}}]
- tools: [{name: notes.write, args: {section: Beta, text: "b1"}}]
- tools: [{name: notes.write, args: {section: Gamma, text: "c1"}}]
- tools: [{name: notes.write, args: {section: Alpha, text: "a2"}}]
  repeat: 20
finalize:
- tools: [{name: report.publish, args: {section: Alpha, content: "Alpha, from the reserve."}}]
`
	// The same call again and again.
	scriptRepeat = `
plan: [Overview]
turns:
- tools: [{name: notes.write, args: {section: Overview, text: "the same finding"}}]
  repeat: 20
finalize:
- tools: [{name: report.publish, args: {section: Overview, content: "One finding."}}]
`
	// Talks without doing anything.
	scriptNoProgress = `
plan: [Overview]
turns:
- say: "Let me think about this some more."
  repeat: 20
finalize:
- tools: [{name: report.publish, args: {section: Overview, content: "Nothing much."}}]
`
	// Freezes on attempt 1 before its third turn, with nothing in flight.
	scriptHang = `
plan: [Overview, Replication]
turns:
- tools: [{name: notes.write, args: {section: Overview, text: "o1"}}]
- tools: [{name: notes.write, args: {section: Replication, text: "r1"}}]
- hang: {onAttempt: 1}
- tools:
  - {name: report.publish, args: {section: Overview, content: "Overview."}}
  - {name: report.publish, args: {section: Replication, content: "Replication."}}
- finish: true
`
	// Opens a ticket on a tool server that never answers (the gateway's
	// timeout leaves the outcome Unknown), then dies (exit 137, as a
	// SIGKILL) on attempt 1.
	scriptUnknownThenCrash = `
plan: [Overview]
turns:
- tools: [{name: notes.write, args: {section: Overview, text: "o1"}}]
- tools: [{name: ticket.create, args: {title: "disk full on node-3"}}]
- tools:
  - {name: report.publish, args: {section: Overview, content: "Overview."}, crash: {exitCode: 137, onAttempt: 1}}
- finish: true
`
	// Publishes a High-risk section: asks for approval first.
	scriptApproval = `
plan: [Overview]
turns:
- tools: [{name: notes.write, args: {section: Overview, text: "o1"}}]
- tools: [{name: report.publish, args: {section: Overview, content: "Approved overview."}}]
- finish: true
`
	// Finishes with a reviewer's "continue" attached, and has more turns the
	// agent would play if it obeyed.
	scriptContinueAdvice = `
plan: [Overview]
turns:
- tools: [{name: notes.write, args: {section: Overview, text: "o1"}}]
- tools: [{name: report.publish, args: {section: Overview, content: "Overview."}}]
- say: "Done."
  finish: true
  advice: [{source: reviewer, kind: Continue}]
- tools: [{name: notes.write, args: {section: Overview, text: "more, if the reviewer were obeyed"}}]
  repeat: 5
`
	// Publishes one of two sections, finishes, and finalization adds nothing.
	scriptPartial = `
plan: [Overview, Replication]
turns:
- tools: [{name: notes.write, args: {section: Overview, text: "o1"}}]
- tools: [{name: report.publish, args: {section: Overview, content: "Overview."}}]
- finish: true
finalize:
- say: "Nothing more to publish."
`
	// Keeps failing on a rate limit (each try is a model request) until the
	// deadline; finalization publishes from the reserve.
	scriptDeadline = `
plan: [Overview]
turns:
- tools: [{name: notes.write, args: {section: Overview, text: "o1"}}]
- error: {retryable: true, kind: RateLimited, times: 1000}
  finish: true
finalize:
- tools: [{name: report.publish, args: {section: Overview, content: "Overview, at the deadline."}}]
`
)

// reportIndex decodes the report's index.json.
func reportIndex(data map[string]string) map[string]any {
	GinkgoHelper()
	Expect(data).To(HaveKey("index.json"))
	idx := map[string]any{}
	Expect(json.Unmarshal([]byte(data["index.json"]), &idx)).To(Succeed())
	return idx
}

// ledgerConsistent checks that the run's budget is the sum of what its
// attempts reported, per attempt and in total: no attempt is counted twice.
func ledgerConsistent(w *world, run *v1.ResearchRun) {
	GinkgoHelper()
	var sum v1.Usage
	for _, l := range run.Status.Ledger {
		ra := w.attempt(run.Name, int(l.Attempt))
		Expect(l.Used.ModelRequests).To(Equal(ra.Status.Usage.ModelRequests), "ledger of attempt %d", l.Attempt)
		Expect(l.Used.ToolCalls).To(Equal(ra.Status.Usage.ToolCalls), "ledger of attempt %d", l.Attempt)
		sum.ModelRequests += l.Used.ModelRequests
		sum.ToolCalls += l.Used.ToolCalls
	}
	Expect(run.Status.Budget.Used.ModelRequests).To(Equal(sum.ModelRequests))
	Expect(run.Status.Budget.Used.ToolCalls).To(Equal(sum.ToolCalls))
	total := w.attemptUsage(run.Name)
	Expect(total.ModelRequests).To(Equal(sum.ModelRequests))
	Expect(total.ToolCalls).To(Equal(sum.ToolCalls))
	Expect(run.Status.Ledger).To(HaveLen(len(w.attempts(run.Name))))
}

var _ = Describe("Research runs with the reference agent", func() {
	It("completes: plan, notes, publish, finish, settle Complete", func() {
		w := newWorld(nil)
		w.script("script", scriptComplete)
		w.run("survey", imageResearchAgent, agentArgs("script"), nil)
		run := w.terminated("survey", v1.ReasonCompleted, v1.SettlementComplete)

		Expect(w.phaseSequence("survey")).To(finishSequence)
		Expect(w.attempts("survey")).To(Equal([]int{1}))
		// plan + 4 turns; 2 notes + 2 publishes.
		Expect(run.Status.Budget.Used.ModelRequests).To(BeEquivalentTo(5))
		Expect(run.Status.Budget.Used.ToolCalls).To(BeEquivalentTo(4))
		ledgerConsistent(w, run)
		Expect(meta(run, v1.ConditionSucceeded)).To(Equal(metav1.ConditionTrue))

		cm := w.report("survey")
		Expect(cm).NotTo(BeNil())
		Expect(cm.Labels).To(HaveKeyWithValue(v1.LabelRun, "survey"))
		Expect(cm.Data).To(HaveKeyWithValue("01-overview.md", "Milvus, Qdrant and Weaviate lead."))
		Expect(cm.Data).To(HaveKeyWithValue("02-replication.md", "Raft for metadata, async shard replication."))
		Expect(reportIndex(cm.Data)["sections"]).To(HaveLen(2))
		ra := w.attempt("survey", 1)
		Expect(ra.Status.Publication.Settled).To(BeTrue())
		Expect(ra.Status.Publication.BlocksCommitted).To(BeEquivalentTo(2))
	})

	It("survives a tool failure: a counted local fault, no phase change", func() {
		w := newWorld(nil)
		w.script("script", scriptToolFailure)
		w.run("flaky", imageResearchAgent, agentArgs("script"), nil)
		run := w.terminated("flaky", v1.ReasonCompleted, v1.SettlementComplete)

		Expect(w.phaseSequence("flaky")).To(finishSequence)
		Expect(w.attempts("flaky")).To(Equal([]int{1}))
		Expect(run.Status.Gates.LocalFaults).To(BeNumerically(">=", 1))
		ra := w.attempt("flaky", 1)
		Expect(ra.Status.Faults).To(ContainElement(And(
			HaveField("Scope", v1.FaultScopeTool), HaveField("Kind", "Timeout"),
			HaveField("Count", BeEquivalentTo(1)), HaveField("Escalated", BeFalse()))))
		// plan + 4 turns; the scripted failure happens before the call
		// reaches the gateway, so it is a fault, not a tool call.
		Expect(run.Status.Budget.Used.ModelRequests).To(BeEquivalentTo(5))
		Expect(run.Status.Budget.Used.ToolCalls).To(BeEquivalentTo(2))
		ledgerConsistent(w, run)
		Expect(w.report("flaky").Data).To(HaveKeyWithValue("01-overview.md", "Written after a failed note."))
	})

	It("exhausts the working budget: Finalizing, then BudgetExhausted/Partial with exactly the reserve spent", func() {
		w := newWorld(nil)
		w.script("script", scriptBudget)
		w.run("costly", imageResearchAgent, agentArgs("script"), func(r *v1.ResearchRun) {
			r.Spec.Budget = v1.Budget{
				ModelRequests: 5, ToolCalls: 20,
				OutputReserve: v1.OutputReserve{ModelRequests: 1, ToolCalls: 1},
				Deadline:      &metav1.Duration{Duration: 5 * time.Minute},
			}
		})
		run := w.terminated("costly", v1.ReasonBudgetExhausted, v1.SettlementPartial)

		Expect(w.phaseSequence("costly")).To(Equal([]v1.Phase{v1.PhaseRunning, v1.PhaseFinalizing, v1.PhaseTerminated}))
		Expect(w.attempts("costly")).To(Equal([]int{1}))
		fin := w.when("costly", v1.PhaseFinalizing)
		Expect(fin).NotTo(BeNil())
		Expect(fin.Status.Reason).To(Equal(v1.ReasonBudgetExhausted))
		// The working allowance (5 - 1 reserved) was used up: plan + 3 turns.
		Expect(fin.Status.Budget.Used.ModelRequests).To(BeEquivalentTo(4))
		// After Finalizing: exactly the reserve, one model request and one tool call.
		Expect(run.Status.Budget.Used.ModelRequests - fin.Status.Budget.Used.ModelRequests).To(BeEquivalentTo(1))
		Expect(run.Status.Budget.Used.ToolCalls - fin.Status.Budget.Used.ToolCalls).To(BeEquivalentTo(1))
		Expect(run.Status.Budget.Used.ModelRequests).To(BeEquivalentTo(5))
		ledgerConsistent(w, run)
		cm := w.report("costly")
		Expect(cm).NotTo(BeNil())
		Expect(cm.Data).To(HaveKeyWithValue("01-alpha.md", "Alpha, from the reserve."))
		Expect(cm.Data).NotTo(HaveKey("02-beta.md"))
		Expect(cm.Data).NotTo(HaveKey("03-gamma.md"))
		ra := w.attempt("costly", 1)
		Expect(ra.Status.Publication.BlocksPlanned).To(BeEquivalentTo(3))
		Expect(ra.Status.Publication.BlocksCommitted).To(BeEquivalentTo(1))
	})

	It("ends a repeated-call loop: RepeatedCall", func() {
		w := newWorld(nil)
		w.script("script", scriptRepeat)
		w.run("loop", imageResearchAgent, paced("script"), func(r *v1.ResearchRun) {
			r.Spec.Gates.SameCallLimit = 3
		})
		run := w.terminated("loop", v1.ReasonRepeatedCall, v1.SettlementComplete)
		Expect(w.phaseSequence("loop")).To(Equal([]v1.Phase{v1.PhaseRunning, v1.PhaseFinalizing, v1.PhaseTerminated}))
		Expect(w.attempts("loop")).To(Equal([]int{1}))
		Expect(run.Status.Gates.MaxSameCall).To(BeNumerically(">=", 3))
		ra := w.attempt("loop", 1)
		Expect(ra.Status.Calls).To(ContainElement(And(HaveField("Tool", "notes.write"), HaveField("Count", BeNumerically(">=", 3)))))
		ledgerConsistent(w, run)
		Expect(w.report("loop").Data).To(HaveKeyWithValue("01-overview.md", "One finding."))
	})

	// An unpaced scripted agent reports once a second and answers in
	// microseconds: by the time it reads the lowered finalize grant it has
	// spent past it under its working grant. That is not a PolicyViolation
	// (internal/lifecycle judges usage against the larger of the two); what it
	// spent is simply gone from the reserve, so it may publish nothing.
	It("ends a repeated-call loop of an unpaced agent as RepeatedCall, not PolicyViolation", func() {
		w := newWorld(nil)
		w.script("script", scriptRepeat)
		w.run("fastloop", imageResearchAgent, agentArgs("script"), func(r *v1.ResearchRun) {
			r.Spec.Gates.SameCallLimit = 3
		})
		run := w.eventually("fastloop", v1.PhaseTerminated, "")
		Expect(run.Status.Reason).To(Equal(v1.ReasonRepeatedCall), "message: %s", run.Status.Message)
		Expect(run.Status.Budget.Used.ModelRequests).To(BeNumerically("<=", run.Spec.Budget.ModelRequests))
		ledgerConsistent(w, run)
	})

	It("ends a run that makes no progress: NoProgress", func() {
		w := newWorld(nil)
		w.script("script", scriptNoProgress)
		w.run("idle", imageResearchAgent, paced("script"), func(r *v1.ResearchRun) {
			r.Spec.Gates.NoProgressLimit = 3
		})
		run := w.terminated("idle", v1.ReasonNoProgress, v1.SettlementComplete)
		Expect(w.phaseSequence("idle")).To(Equal([]v1.Phase{v1.PhaseRunning, v1.PhaseFinalizing, v1.PhaseTerminated}))
		Expect(w.attempts("idle")).To(Equal([]int{1}))
		// When the gate tripped; finalization's publish is progress again.
		fin := w.when("idle", v1.PhaseFinalizing)
		Expect(fin).NotTo(BeNil())
		Expect(fin.Status.Gates.StepsWithoutProgress).To(BeNumerically(">=", 3))
		ledgerConsistent(w, run)
		Expect(w.report("idle").Data).To(HaveKeyWithValue("01-overview.md", "Nothing much."))
	})

	It("recovers from a SIGKILL with nothing in flight: attempt 2 completes, no budget counted twice", func() {
		w := newWorld(nil)
		w.script("script", scriptHang)
		w.run("killed", imageResearchAgent, paced("script"), nil)
		w.eventually("killed", v1.PhaseRunning, "")
		// Attempt 1 freezes before its third turn (after plan and two
		// notes): kill it there, with nothing in flight.
		Eventually(func() int64 { return w.attempt("killed", 1).Status.Steps }, timeout, interval).Should(BeNumerically(">=", 3))
		w.factsSettled("killed", 1)
		Expect(w.attempt("killed", 1).Status.InFlight).To(BeEmpty())
		w.kill("killed", 1)

		run := w.terminated("killed", v1.ReasonCompleted, v1.SettlementComplete)
		Expect(w.phaseSequence("killed")).To(Or(
			Equal([]v1.Phase{v1.PhaseRunning, v1.PhaseRecovering, v1.PhaseRunning, v1.PhaseFinalizing, v1.PhaseTerminated}),
			Equal([]v1.Phase{v1.PhaseRunning, v1.PhaseRecovering, v1.PhaseRunning, v1.PhaseTerminated})))
		Expect(w.attempts("killed")).To(Equal([]int{1, 2}))
		Expect(run.Status.Attempt).To(BeEquivalentTo(2))
		Expect(run.Status.Ledger).To(HaveLen(2))
		ledgerConsistent(w, run)
		Expect(w.attempt("killed", 1).Spec.Superseded).To(BeTrue())
		Expect(w.report("killed").Data).To(HaveKey("01-overview.md"))
		Expect(w.report("killed").Data).To(HaveKey("02-replication.md"))
	})

	It("does not replay a non-idempotent call whose outcome is unknown: UnsafeToRecover, no attempt 2", func() {
		mcpURL, callsURL := startFakeTools("unsafe", `tools:
- name: ticket.create
  inputSchema: {type: object, properties: {title: {type: string}}, required: [title]}
  behavior: {hang: true}
`)
		w := newWorld(func(p *v1.RuntimePolicy) {
			p.Spec.ToolServers = []v1.ToolServer{{Name: "tracker", URL: mcpURL, Timeout: &metav1.Duration{Duration: 2 * time.Second}}}
			p.Spec.Tools = append(p.Spec.Tools, v1.Tool{Name: "ticket.create", Server: "tracker", Risk: v1.RiskMedium, Effect: v1.EffectExternal})
			p.Spec.AutoApprove = append(p.Spec.AutoApprove, "ticket.create")
		})
		w.script("script", scriptUnknownThenCrash)
		w.run("unsafe", imageResearchAgent, agentArgs("script"), nil)
		run := w.terminated("unsafe", v1.ReasonUnsafeToRecover, v1.SettlementNone)
		Expect(w.phaseSequence("unsafe")).To(Equal([]v1.Phase{v1.PhaseRunning, v1.PhaseTerminated}))
		Expect(w.attempts("unsafe")).To(Equal([]int{1}))
		ra := w.attempt("unsafe", 1)
		Expect(ra.Status.InFlight).To(ConsistOf(And(
			HaveField("Tool", "ticket.create"), HaveField("IdempotencyKey", BeEmpty()),
			HaveField("Outcome", v1.OutcomeUnknown))))
		Expect(w.sections("unsafe")).To(BeEmpty(), "nothing was published after the crash")
		ledgerConsistent(w, run)
		Consistently(func() []int { return w.attempts("unsafe") }, 3*time.Second, 250*time.Millisecond).Should(Equal([]int{1}))
		resp, err := http.Get(callsURL + "?tool=ticket.create")
		Expect(err).NotTo(HaveOccurred())
		defer func() { _ = resp.Body.Close() }()
		var rep toolserver.CallsReport
		Expect(json.NewDecoder(resp.Body).Decode(&rep)).To(Succeed())
		Expect(rep.Total).To(Equal(1), "the call was dispatched once and never again")
	})

	It("cancels: Cancelled at once, no model request after the cancel, no finalization", func() {
		w := newWorld(highRiskPublish)
		w.script("script", scriptApproval)
		w.run("cancelled", imageResearchAgent, agentArgs("script"), nil)
		w.awaiting("cancelled", 1)
		// The agent is blocked on the approval and makes no requests; wait
		// until its last facts are flushed, then cancel.
		w.factsSettled("cancelled", 1)
		before := w.attempt("cancelled", 1).Status.Usage
		w.stopRun("cancelled", v1.StopCancel)

		run := w.terminated("cancelled", v1.ReasonCancelled, v1.SettlementNone)
		Expect(w.phaseSequence("cancelled")).To(Equal([]v1.Phase{v1.PhaseRunning, v1.PhaseTerminated}))
		Expect(w.attempt("cancelled", 1).Status.Usage).To(Equal(before), "a model request or tool call after the cancel")
		Expect(run.Status.Budget.Used.ModelRequests).To(Equal(before.ModelRequests))
		ledgerConsistent(w, run)
		Expect(w.sections("cancelled")).To(BeEmpty())
	})

	It("records a reviewer's \"continue\" after finish and makes no extra request", func() {
		w := newWorld(nil)
		w.script("script", scriptContinueAdvice)
		w.run("advised", imageResearchAgent, agentArgs("script"), nil)
		run := w.terminated("advised", v1.ReasonCompleted, v1.SettlementComplete)
		Expect(w.phaseSequence("advised")).To(finishSequence)
		// plan + 3 turns: the turns after the finish are never requested.
		Expect(run.Status.Budget.Used.ModelRequests).To(BeEquivalentTo(4))
		Expect(run.Status.Budget.Used.ToolCalls).To(BeEquivalentTo(2))
		Expect(w.attempt("advised", 1).Status.Advice).To(ContainElement(And(
			HaveField("Source", "reviewer"), HaveField("Kind", "Continue"), HaveField("Count", BeEquivalentTo(1)))))
		ledgerConsistent(w, run)
	})

	It("ends an agent that obeys the reviewer's \"continue\" as the operator decides: Completed, like one that ignores it", func() {
		// The same script, played by an agent that reads the advice on its
		// attempt after finishing and plays on. Advice is inert: the
		// termination owner completes the run at the finish all the same,
		// and whatever the agent does after is refused or ends with it.
		w := newWorld(nil)
		w.script("script", scriptContinueAdvice)
		w.run("obeyed", imageResearchAgent, append(paced("script"), "--obey-advice"), nil)
		run := w.terminated("obeyed", v1.ReasonCompleted, v1.SettlementComplete)
		Expect(w.phaseSequence("obeyed")).To(finishSequence)
		Expect(w.attempts("obeyed")).To(Equal([]int{1}), "the continue neither extends the attempt nor starts another")
		Expect(run.Status.Message).NotTo(ContainSubstring("Continue"))
		Expect(w.attempt("obeyed", 1).Status.FinishProposed).To(BeTrue())
		// The 5 turns after the finish that the continue asked for are not
		// served: the run ended at the finish (notes.write is refused once
		// it finalizes). Were advice to extend the run, all 5 would run.
		Expect(run.Status.Budget.Used.ToolCalls).To(BeNumerically("<=", 3), "the continue was not honoured by the operator")
		ledgerConsistent(w, run)
		logs, err := kubectl("logs", "-n", w.ns, attemptName("obeyed", 1))
		Expect(err).NotTo(HaveOccurred(), logs)
		Expect(logs).To(ContainSubstring("Obeying a reviewer's continue after finish"), "the agent did obey: the test can fail")
	})

	It("settles what was published: Completed/Partial", func() {
		w := newWorld(nil)
		w.script("script", scriptPartial)
		w.run("partial", imageResearchAgent, agentArgs("script"), nil)
		run := w.terminated("partial", v1.ReasonCompleted, v1.SettlementPartial)
		Expect(w.phaseSequence("partial")).To(finishSequence)
		Expect(meta(run, v1.ConditionSucceeded)).To(Equal(metav1.ConditionFalse))
		ra := w.attempt("partial", 1)
		Expect(ra.Status.Publication.BlocksPlanned).To(BeEquivalentTo(2))
		Expect(ra.Status.Publication.BlocksCommitted).To(BeEquivalentTo(1))
		cm := w.report("partial")
		Expect(cm.Data).To(HaveKey("01-overview.md"))
		Expect(cm.Data).NotTo(HaveKey("02-replication.md"))
		ledgerConsistent(w, run)
	})

	It("runs three runs of one session strictly one after another", func() {
		w := newWorld(nil)
		w.script("script", scriptComplete)
		names := []string{"first", "second", "third"}
		for _, n := range names {
			w.run(n, imageResearchAgent, agentArgs("script"), nil)
		}
		var runs []*v1.ResearchRun
		for _, n := range names {
			runs = append(runs, w.terminated(n, v1.ReasonCompleted, v1.SettlementComplete))
			Expect(w.attempts(n)).To(Equal([]int{1}))
		}
		for i := 1; i < len(runs); i++ {
			Expect(runs[i].Status.StartTime).NotTo(BeNil())
			Expect(runs[i-1].Status.CompletionTime).NotTo(BeNil())
			Expect(runs[i].Status.StartTime.Time).NotTo(BeTemporally("<", runs[i-1].Status.CompletionTime.Time),
				"%s started before %s ended", runs[i].Name, runs[i-1].Name)
		}
		// The watch saw no two of them active at once (checked at cleanup).
	})

	It("publishes after an approval given with a kubectl-patch-equivalent call", func() {
		w := newWorld(highRiskPublish)
		w.script("script", scriptApproval)
		w.run("approved", imageResearchAgent, agentArgs("script"), nil)
		id := w.awaiting("approved", 1)
		Consistently(func() []string { return w.sections("approved") }, 2*time.Second, 250*time.Millisecond).
			Should(BeEmpty(), "nothing is published before the approval")
		w.approve("approved", id)

		run := w.terminated("approved", v1.ReasonCompleted, v1.SettlementComplete)
		Expect(w.phaseSequence("approved")).To(finishSequence)
		Expect(run.Spec.Approvals).To(HaveLen(1))
		Expect(run.Spec.Approvals[0].ActionID).To(Equal(id))
		Expect(run.Spec.Approvals[0].Approver).NotTo(BeEmpty(), "the webhook stamps the approver")
		Expect(run.Spec.Approvals[0].Time).NotTo(BeNil())
		Expect(w.report("approved").Data).To(HaveKeyWithValue("01-overview.md", "Approved overview."))
		ledgerConsistent(w, run)
	})

	It("finalizes at the deadline: Finalizing, then DeadlineExceeded", func() {
		w := newWorld(nil)
		w.script("script", scriptDeadline)
		w.run("late", imageResearchAgent, agentArgs("script"), func(r *v1.ResearchRun) {
			r.Spec.Budget.Deadline = &metav1.Duration{Duration: 6 * time.Second}
			r.Spec.Budget.FinalizationGrace = &metav1.Duration{Duration: 40 * time.Second}
			r.Spec.Budget.ModelRequests = 40
		})
		run := w.terminated("late", v1.ReasonDeadlineExceeded, v1.SettlementComplete)
		Expect(w.phaseSequence("late")).To(Equal([]v1.Phase{v1.PhaseRunning, v1.PhaseFinalizing, v1.PhaseTerminated}))
		fin := w.when("late", v1.PhaseFinalizing)
		Expect(fin.Status.Reason).To(Equal(v1.ReasonDeadlineExceeded))
		Expect(fin.Status.FinalizingTime.Sub(fin.Status.StartTime.Time)).To(BeNumerically(">=", 6*time.Second))
		Expect(w.attempts("late")).To(Equal([]int{1}))
		Expect(w.report("late").Data).To(HaveKeyWithValue("01-overview.md", "Overview, at the deadline."))
		ledgerConsistent(w, run)
	})
})

var _ = Describe("The operator process", func() {
	It("killed and restarted mid-run: every run still reaches its correct end, with no duplicate attempt", func() {
		approvals := newWorld(highRiskPublish)
		approvals.script("script", scriptApproval)
		approvals.run("waiting", imageResearchAgent, agentArgs("script"), nil)
		work := newWorld(nil)
		work.script("script", scriptComplete)
		slow := append(agentArgs("script"), "--rate-limit-interval=700ms")
		work.run("busy", imageResearchAgent, slow, nil)
		work.run("queued", imageResearchAgent, agentArgs("script"), nil)

		approvals.awaiting("waiting", 1)
		Eventually(func() int64 { return work.attempt("busy", 1).Status.Steps }, timeout, interval).Should(BeNumerically(">=", 1))
		Expect(work.get("queued").Status.Phase).To(Equal(v1.PhaseQueued))

		By("SIGKILL of the operator while one run waits for an approval, one works and one is queued")
		starts := st.Operator.Starts
		st.Operator.Kill()
		// The agents go on without it: busy proposes its finish meanwhile.
		Eventually(func() bool { return work.attempt("busy", 1).Status.FinishProposed }, timeout, interval).Should(BeTrue())

		By("restarting the operator")
		Expect(st.StartOperator(ctx)).To(Succeed())
		Expect(st.Operator.Starts).To(Equal(starts + 1))
		approvals.approve("waiting", approvals.awaiting("waiting", 1))

		for _, c := range []struct {
			w   *world
			run string
		}{{approvals, "waiting"}, {work, "busy"}, {work, "queued"}} {
			run := c.w.terminated(c.run, v1.ReasonCompleted, v1.SettlementComplete)
			Expect(c.w.attempts(c.run)).To(Equal([]int{1}), "run %s", c.run)
			// busy may even have proposed its finish and settled while the
			// operator was down (then Finalizing is never written).
			Expect(c.w.phaseSequence(c.run)).To(finishSequence, "run %s", c.run)
			ledgerConsistent(c.w, run)
		}
	})
})

// finishSequence is the phase sequence of a run that ends by the agent's
// finish. The agent persists "finish proposed" and, when nothing is left to
// publish, its settlement a moment later, in two writes: the operator either
// decides Finalizing on the first and Terminated on the second, or sees both
// at once and decides Finalizing and Terminated in one pass (so Finalizing is
// never written). Both are the ladder's rule 4.
var finishSequence = Or(
	Equal([]v1.Phase{v1.PhaseRunning, v1.PhaseFinalizing, v1.PhaseTerminated}),
	Equal([]v1.Phase{v1.PhaseRunning, v1.PhaseTerminated}))

// highRiskPublish makes report.publish High risk: confirmed in every mode.
func highRiskPublish(p *v1.RuntimePolicy) {
	for i := range p.Spec.Tools {
		if p.Spec.Tools[i].Name == "report.publish" {
			p.Spec.Tools[i].Risk = v1.RiskHigh
		}
	}
	p.Spec.AutoApprove = []string{"notes.write"}
}

// meta returns the status of a condition of the run.
func meta(run *v1.ResearchRun, t string) metav1.ConditionStatus {
	for _, c := range run.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

var _ = Describe("The gateway process", func() {
	It("killed and restarted mid-run: the run completes, the grant holds, nothing is counted twice", func() {
		w := newWorld(nil)
		w.script("script", scriptComplete)
		before := st.Upstream.Requests.Load()
		w.run("through", imageResearchAgent, paced("script"), nil)
		Eventually(func() int64 { return w.attempt("through", 1).Status.Usage.ModelRequests }, timeout, interval).
			Should(BeNumerically(">=", 2))

		By("SIGKILL of the gateway while the agent works")
		st.Gateway.Kill()
		Consistently(func() v1.Phase { return w.get("through").Status.Phase }, time.Second, 100*time.Millisecond).
			Should(Equal(v1.PhaseRunning), "a gateway outage is not the run's end")

		By("restarting the gateway: it resumes the attempt from its RunAttempt")
		Expect(st.StartGateway(ctx)).To(Succeed())
		run := w.terminated("through", v1.ReasonCompleted, v1.SettlementComplete)
		Expect(w.attempts("through")).To(Equal([]int{1}))
		ledgerConsistent(w, run)

		// What the upstream served is what the run used, less at most the
		// coalesced counts the killed gateway had not written: those of one
		// flush interval (100 ms here, plus the write's own latency; the
		// agent is paced at 400 ms between calls) and the request in flight
		// at the kill, which the agent sends again to the new gateway.
		dispatched := st.Upstream.Requests.Load() - before
		used := run.Status.Budget.Used.ModelRequests
		Expect(used).To(BeNumerically("<=", dispatched), "counted twice")
		Expect(dispatched-used).To(BeNumerically("<=", 2), "more than one flush interval and the request in flight of counts lost")
		Expect(used).To(BeNumerically("<=", run.Spec.Budget.ModelRequests))
		Expect(w.sections("through")).To(HaveLen(2))
	})
})
