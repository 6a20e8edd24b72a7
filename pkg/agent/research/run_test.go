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

package research_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
	"github.com/agentrun-dev/agentrun/internal/research/scripted"
	"github.com/agentrun-dev/agentrun/pkg/agent"
	"github.com/agentrun-dev/agentrun/pkg/agent/research"
)

const normalScript = `
plan: [Background, Findings]
planTokens: 50
turns:
- say: reading the sources
  tokens: 100
  tools:
  - {name: http.get, args: {url: WEB/a}}
  - {name: notes.write, args: {section: Background, text: "alpha replicates with raft"}}
- tokens: 100
  tools:
  - {name: http.get, args: {url: WEB/b}}
  - {name: notes.write, args: {section: Findings, text: "beta replicates asynchronously"}}
- tokens: 100
  tools:
  - {name: report.publish, args: {section: Background, content: "Alpha uses Raft."}}
  - {name: report.publish, args: {section: Findings, content: "Beta is asynchronous."}}
- say: done
  finish: true
  advice: [{source: reviewer, kind: Continue}]
`

// A normal run through the gateway: plan, research, notes, publish every
// section (the gateway writes the report ConfigMap, owned by the run),
// propose finish, settle Complete. Every model request went to the scripted
// upstream as the policy's model; the reviewer's "continue" after the
// finish is recorded, not obeyed.
func TestRunCompletes(t *testing.T) {
	w := newWorld(t, nil)
	w.g.Expect(w.run(w.config(normalScript))).To(Succeed())

	cm := w.report()
	w.g.Expect(cm.Labels).To(HaveKeyWithValue(v1alpha1.LabelRun, runName))
	w.g.Expect(cm.OwnerReferences).To(ConsistOf(HaveField("UID", BeEquivalentTo("run-uid"))))
	w.g.Expect(cm.OwnerReferences[0].Kind).To(Equal("ResearchRun"))
	w.g.Expect(cm.Data).To(HaveKeyWithValue("01-background.md", "Alpha uses Raft."))
	w.g.Expect(cm.Data).To(HaveKeyWithValue("02-findings.md", "Beta is asynchronous."))
	w.g.Expect(w.index().Sections).To(Equal([]gateway.ReportIndexEntry{
		{Name: "Background", Key: "01-background.md", Published: true},
		{Name: "Findings", Key: "02-findings.md", Published: true},
	}))

	s := w.status()
	w.g.Expect(s.FinishProposed).To(BeTrue())
	w.g.Expect(s.Publication).To(Equal(v1alpha1.Publication{
		BlocksPlanned: 2, BlocksCommitted: 2, Settlement: v1alpha1.SettlementComplete, Settled: true, Location: "configmap/survey-report",
	}))
	w.g.Expect(s.Advice).To(ConsistOf(v1alpha1.Advice{Source: "reviewer", Kind: "Continue", Count: 1}))
	w.g.Expect(s.Usage).To(Equal(v1alpha1.Usage{ModelRequests: 5, ToolCalls: 6, Tokens: 350}))
	w.g.Expect(s.Steps).To(Equal(int64(5)), "plan + 4 turns")
	w.g.Expect(s.LastProgressStep).To(Equal(int64(5)), "the finish turn's answer is one the gateway had not seen: progress")
	w.g.Expect(s.InFlight).To(BeEmpty())
	w.g.Expect(s.AwaitingApproval).To(BeEmpty())
	w.g.Expect(s.Faults).To(BeEmpty())
	w.g.Expect(s.Checkpoint).To(ContainSubstring(`"published":["Background","Findings"]`))
	w.g.Expect(s.Calls).To(HaveLen(6))
	w.g.Expect(w.Upstream.Models()).To(HaveLen(5))
	w.g.Expect(w.Upstream.Models()).To(HaveEach(gatewaytest.Model), "no Degrade directive: the model asked for")
}

// Some sections published, one only from the notes at finalization, one
// never: Partial, with the count of what the ConfigMap actually holds.
func TestRunSettlesPartial(t *testing.T) {
	w := newWorld(t, nil)
	err := w.run(w.config(`
plan: [Architecture, Replication, Costs]
turns:
- tools:
  - {name: notes.write, args: {section: Replication, text: "raft everywhere"}}
  - {name: report.publish, args: {section: Architecture, content: "Shared-nothing."}}
- finish: true
`))
	w.g.Expect(err).NotTo(HaveOccurred())
	cm := w.report()
	w.g.Expect(cm.Data).To(HaveKey("01-architecture.md"))
	w.g.Expect(cm.Data).To(HaveKeyWithValue("02-replication.md", "raft everywhere"), "published from the notes")
	w.g.Expect(cm.Data).NotTo(HaveKey("03-costs.md"))
	w.g.Expect(w.index().Sections[2]).To(Equal(gateway.ReportIndexEntry{Name: "Costs", Key: "03-costs.md", Published: false}))

	s := w.status()
	w.g.Expect(s.Publication.Settlement).To(Equal(v1alpha1.SettlementPartial))
	w.g.Expect(s.Publication.BlocksCommitted).To(Equal(int32(2)))
	w.g.Expect(s.Publication.BlocksPlanned).To(Equal(int32(3)))
	w.g.Expect(s.Usage.ModelRequests).To(Equal(int64(4)), "plan, 2 turns, 1 finalization request")
}

// A denied publication is a local refusal: the run settles with what the
// ConfigMap holds.
func TestRunSettlesNoneWhenPublicationDenied(t *testing.T) {
	w := newWorld(t, nil)
	w.decide = func(id string) (v1alpha1.ApprovalDecision, bool) { return v1alpha1.DecisionDeny, true }
	err := w.run(w.config(`
plan: [Summary]
turns:
- tools: [{name: report.publish, args: {section: Summary, content: "x"}}]
- finish: true
`))
	w.g.Expect(err).NotTo(HaveOccurred())
	s := w.status()
	w.g.Expect(s.Publication.Settlement).To(Equal(v1alpha1.SettlementNone))
	w.g.Expect(s.Publication.Settled).To(BeTrue())
	f, ok := fault(s, v1alpha1.FaultScopeAgent, "ApprovalDenied")
	w.g.Expect(ok).To(BeTrue())
	w.g.Expect(f.Count).To(Equal(int64(1)))
}

// A replacement attempt that starts in Finalizing (finalize-only grant)
// recovers the plan and what was published from the report ConfigMap, does
// no research, publishes the rest and settles.
func TestRunFinalizeOnlyAttempt(t *testing.T) {
	existing := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: gatewaytest.Namespace, Name: gateway.ReportName(runName),
			Labels: map[string]string{v1alpha1.LabelRun: runName}},
		Data: map[string]string{
			"01-background.md":     "Alpha uses Raft.",
			gateway.ReportIndexKey: `{"run":"survey","sections":[{"name":"Background","key":"01-background.md","published":true},{"name":"Findings","key":"02-findings.md","published":false}]}`,
		},
	}
	w := newWorld(t, func(ra *v1alpha1.RunAttempt) {
		researchAttempt(ra, 2)
		ra.Spec.RunPhase = v1alpha1.PhaseFinalizing
		ra.Spec.Grant = v1alpha1.Grant{ModelRequests: 2, ToolCalls: 2, FinalizeOnly: true}
	}, existing)
	cfg, h := w.play(`
turns:
- tools: [{name: http.get, args: {url: WEB/a}}]
finalize:
- tools:
  - {name: http.get, args: {url: WEB/b}}
  - {name: report.publish, args: {section: Findings, content: "Beta is asynchronous."}}
`)
	w.g.Expect(w.run(cfg)).To(Succeed())

	var purposes []research.Purpose
	for _, r := range h.Requests() {
		purposes = append(purposes, r.Purpose)
	}
	w.g.Expect(purposes).To(Equal([]research.Purpose{research.PurposeFinalize}), "no planning, no research turn")
	w.g.Expect(w.report().Data).To(HaveKeyWithValue("02-findings.md", "Beta is asynchronous."))
	s := w.status()
	w.g.Expect(s.Publication.Settlement).To(Equal(v1alpha1.SettlementComplete))
	w.g.Expect(s.FinishProposed).To(BeFalse())
	f, ok := fault(s, v1alpha1.FaultScopeAgent, "FinalizeOnly")
	w.g.Expect(ok).To(BeTrue(), "research is refused while finalizing")
	w.g.Expect(f.LastMessage).To(ContainSubstring("http.get"))
	w.g.Expect(s.Usage).To(Equal(v1alpha1.Usage{ModelRequests: 1, ToolCalls: 1}))
	w.g.Expect(w.Upstream.Requests.Load()).To(Equal(int64(1)))
}

// The working grant runs out: the gateway refuses, the agent waits for the
// operator (a refusal is not a failure), and finalizes from the reserve
// once the run is Finalizing.
func TestRunGrantExhaustedThenFinalizes(t *testing.T) {
	w := newWorld(t, func(ra *v1alpha1.RunAttempt) { ra.Spec.Grant = v1alpha1.Grant{ModelRequests: 3, ToolCalls: 10} })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := w.start(ctx, w.config(`
plan: [Background, Findings]
turns:
- tools: [{name: notes.write, args: {section: Background, text: "alpha"}}]
- tools: [{name: notes.write, args: {section: Findings, text: "beta"}}]
- tools: [{name: report.publish, args: {section: Background, content: "never reached"}}]
`))
	w.g.Eventually(w.hasFault(v1alpha1.FaultScopeAgent, "GrantExhausted"), wait, poll).Should(BeTrue())
	w.g.Consistently(done, 50*time.Millisecond).ShouldNot(Receive(), "a refusal is not a failure: the agent waits")
	w.g.Expect(w.status().Usage.ModelRequests).To(Equal(int64(3)))
	w.g.Expect(w.Upstream.Requests.Load()).To(Equal(int64(3)), "the refused request never reached the provider")

	w.UpdateSpec(func(s *v1alpha1.RunAttemptSpec) {
		s.RunPhase = v1alpha1.PhaseFinalizing
		s.Grant = v1alpha1.Grant{ModelRequests: 5, ToolCalls: 12, FinalizeOnly: true}
	})
	w.g.Eventually(done, wait).Should(Receive(BeNil()))
	s := w.status()
	w.g.Expect(s.Publication.Settlement).To(Equal(v1alpha1.SettlementComplete))
	w.g.Expect(w.report().Data).To(HaveKeyWithValue("01-background.md", "alpha"))
	w.g.Expect(w.report().Data).To(HaveKeyWithValue("02-findings.md", "beta"))
	w.g.Expect(s.Usage.ModelRequests).To(Equal(int64(4)), "one finalization request from the reserve")
}

// Retryable provider errors are retried; each try is a model request the
// gateway dispatched and counted, and each failure a Provider fault it
// recorded; the run completes.
func TestRunRetriesProviderErrors(t *testing.T) {
	w := newWorld(t, nil)
	err := w.run(w.config(`
plan: [Summary]
turns:
- error: {retryable: true, kind: RateLimited, times: 2, message: "429 slow down"}
  tools: [{name: report.publish, args: {section: Summary, content: "ok"}}]
- finish: true
`))
	w.g.Expect(err).NotTo(HaveOccurred())
	s := w.status()
	f, ok := fault(s, v1alpha1.FaultScopeProvider, "RateLimited")
	w.g.Expect(ok).To(BeTrue())
	w.g.Expect(f.Count).To(Equal(int64(2)))
	w.g.Expect(f.Retryable).To(BeTrue())
	w.g.Expect(f.Escalated).To(BeFalse())
	w.g.Expect(f.LastMessage).To(ContainSubstring("429 slow down"))
	w.g.Expect(s.Usage.ModelRequests).To(Equal(int64(5)), "plan + 3 tries + finish")
	w.g.Expect(w.Upstream.Requests.Load()).To(Equal(int64(5)), "every try reached the provider")
	w.g.Expect(s.Publication.Settlement).To(Equal(v1alpha1.SettlementComplete))
}

// A fatal provider error is escalated (the operator treats the attempt as
// failed) and Run fails.
func TestRunEscalatesFatalProviderError(t *testing.T) {
	w := newWorld(t, nil)
	err := w.run(w.config(`
planError: {kind: Unauthorized, message: "invalid api key", status: 401}
`))
	w.g.Expect(err).To(MatchError(ContainSubstring("fatal model provider error")))
	f, ok := fault(w.status(), v1alpha1.FaultScopeProvider, "Unauthorized")
	w.g.Expect(ok).To(BeTrue())
	w.g.Expect(f.Escalated).To(BeTrue())
	w.g.Expect(f.Retryable).To(BeFalse())
	w.g.Expect(f.LastMessage).To(ContainSubstring("invalid api key"))
	w.g.Expect(w.status().Usage.ModelRequests).To(Equal(int64(1)), "not retried")
}

// Tool failures are local faults (reported with the calls' outcomes); the
// loop goes on.
func TestRunToolFailures(t *testing.T) {
	w := newWorld(t, nil)
	err := w.run(w.config(`
plan: [Summary]
turns:
- tools:
  - {name: http.get, args: {url: WEB/a}, fail: {kind: Timeout, retryable: true, message: "deadline exceeded"}}
  - {name: http.get, args: {url: WEB/missing}}
  - {name: http.get, args: {url: "https://not-allowed.example.org/"}}
  - {name: report.publish, args: {section: Summary, content: "ok"}}
- finish: true
`))
	w.g.Expect(err).NotTo(HaveOccurred())
	s := w.status()
	for _, kind := range []string{"Timeout", "HTTP404", "HostNotAllowed"} {
		f, ok := fault(s, v1alpha1.FaultScopeTool, kind)
		w.g.Expect(ok).To(BeTrue(), kind)
		w.g.Expect(f.Escalated).To(BeFalse(), kind)
	}
	f, _ := fault(s, v1alpha1.FaultScopeTool, "Timeout")
	w.g.Expect(f.Retryable).To(BeTrue())
	w.g.Expect(f.LastMessage).To(ContainSubstring("deadline exceeded"))
	w.g.Expect(s.Publication.Settlement).To(Equal(v1alpha1.SettlementComplete))
}

// A crash at turn k exits the process (137) without sending anything more.
// With no Exit (in-process), Run returns ErrCrashed as a killed process
// would end. A replacement attempt plays the script again; a crash limited
// to attempt 1 does not fire.
func TestRunCrashAtTurn(t *testing.T) {
	script := `
plan: [Summary]
turns:
- tools: [{name: notes.write, args: {section: Summary, text: "a"}}]
- crash: {exitCode: 137}
- finish: true
`
	w := newWorld(t, func(ra *v1alpha1.RunAttempt) {
		ra.Spec.HeartbeatInterval = &metav1.Duration{Duration: time.Second} // a heartbeat every 500ms
	})
	cfg := w.config(script)
	var code int
	cfg.Exit = func(c int) { code = c }
	w.g.Expect(w.run(cfg)).To(MatchError(research.ErrCrashed))
	w.g.Expect(code).To(Equal(137))
	s := w.status()
	w.g.Expect(s.FinishProposed).To(BeFalse())
	w.g.Expect(s.Publication.Settled).To(BeFalse())
	w.g.Eventually(func() int64 { return w.status().Steps }, wait, poll).Should(Equal(int64(3)),
		"plan + the first turn + the crash turn's model request, which the gateway served")
	// Once what was in flight at the crash is answered, nothing more comes:
	// not even a heartbeat (a live agent sends one at least every 500ms).
	w.g.Eventually(func(g Gomega) {
		before := w.requests()
		g.Consistently(w.requests, 600*time.Millisecond, 10*time.Millisecond).Should(Equal(before), "a crashed agent sends nothing more")
	}, wait, poll).Should(Succeed())
	w.g.Expect(w.status().Steps).To(Equal(int64(3)))

	w = newWorld(t, nil)
	cfg = w.config(script)
	cfg.Exit = nil
	w.g.Expect(w.run(cfg)).To(MatchError(research.ErrCrashed))
	w.g.Expect(w.status().FinishProposed).To(BeFalse())

	w2 := newWorld(t, func(ra *v1alpha1.RunAttempt) { researchAttempt(ra, 2) })
	cfg2 := w2.config(`
plan: [Summary]
turns:
- tools: [{name: report.publish, args: {section: Summary, content: "a"}}]
- crash: {onAttempt: 1}
- finish: true
`)
	w2.g.Expect(w2.run(cfg2)).To(Succeed())
	w2.g.Expect(w2.status().Publication.Settlement).To(Equal(v1alpha1.SettlementComplete))
}

// A scripted crash on a call the gateway serves happens before the call is
// made: nothing is in flight (the gateway, not the agent, dispatches
// report.publish, so an agent crash cannot leave its outcome unknown) and
// nothing was published.
func TestRunCrashBeforeAServedCall(t *testing.T) {
	w := newWorld(t, nil)
	cfg := w.config(`
plan: [Summary]
turns:
- tools: [{name: report.publish, args: {section: Summary, content: "x"}, crash: {}}]
`)
	var code int
	cfg.Exit = func(c int) { code = c }
	w.g.Expect(w.run(cfg)).To(MatchError(research.ErrCrashed))
	w.g.Expect(code).To(Equal(137))
	s := w.status()
	w.g.Expect(s.InFlight).To(BeEmpty())
	w.g.Expect(s.Usage.ToolCalls).To(BeZero(), "the call was never made")
	w.g.Expect(w.report().Data).NotTo(HaveKey("01-summary.md"), "the effect never happened")
	w.g.Expect(w.index().Sections).To(ConsistOf(HaveField("Published", false)))
}

// A loop of identical calls shows in status.calls; turns without progress
// leave lastProgressStep behind steps.
func TestRunRepeatedCallsAndNoProgress(t *testing.T) {
	w := newWorld(t, nil)
	err := w.run(w.config(`
plan: [Summary]
turns:
- tools: [{name: http.get, args: {url: WEB/a}}]
  repeat: 4
- say: thinking
  repeat: 3
- tools: [{name: report.publish, args: {section: Summary, content: "ok"}}]
- finish: true
`))
	w.g.Expect(err).NotTo(HaveOccurred())
	s := w.status()
	w.g.Expect(s.Calls[0].Tool).To(Equal(research.ToolHTTPGet))
	w.g.Expect(s.Calls[0].Count).To(Equal(int64(4)))
	w.g.Expect(s.Steps).To(Equal(int64(1 + 4 + 3 + 2)))
	w.g.Expect(s.LastProgressStep).To(Equal(int64(1 + 4 + 3 + 1)))
}

// Terminated while waiting for an approval: the gateway ends the wait, the
// context ends and Run returns cleanly.
func TestRunStopsWhenTerminated(t *testing.T) {
	w := newWorld(t, nil)
	w.decide = func(string) (v1alpha1.ApprovalDecision, bool) { return "", false } // nobody answers
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := w.start(ctx, w.config(`
plan: [Summary]
turns:
- tools: [{name: report.publish, args: {section: Summary, content: "x"}}]
`))
	w.g.Eventually(func() []string { return v1alpha1.ActionIDs(w.status().AwaitingApproval) }, wait, poll).Should(HaveLen(1))
	w.UpdateSpec(func(s *v1alpha1.RunAttemptSpec) { s.RunPhase = v1alpha1.PhaseTerminated; s.Grant = v1alpha1.Grant{} })
	w.g.Eventually(done, wait).Should(Receive(BeNil()))
	w.g.Expect(w.status().Usage.ToolCalls).To(BeZero(), "the awaited call was never dispatched")
}

// A hang freezes the agent: no more requests reach the gateway (no
// heartbeats, no facts: so the operator's heartbeat timeout fires) until the
// process is stopped.
func TestRunHang(t *testing.T) {
	w := newWorld(t, func(ra *v1alpha1.RunAttempt) {
		ra.Spec.HeartbeatInterval = &metav1.Duration{Duration: 20 * time.Millisecond}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := w.start(ctx, w.config(`
plan: [Summary]
turns:
- tools: [{name: notes.write, args: {section: Summary, text: "a"}}]
- hang: {}
`))
	w.g.Eventually(func() int64 { return w.status().Usage.ToolCalls }, wait, poll).Should(Equal(int64(1)))
	// A live agent sends a heartbeat at least every 500ms.
	w.g.Eventually(func(g Gomega) {
		before, writes := w.requests(), w.Writes.Load()
		g.Consistently(w.requests, 1200*time.Millisecond, 10*time.Millisecond).Should(Equal(before))
		g.Expect(w.Writes.Load()).To(Equal(writes))
	}, wait, poll).Should(Succeed())
	w.g.Expect(done).NotTo(Receive(), "frozen until stopped")
	cancel()
	w.g.Eventually(done, wait).Should(Receive(MatchError(research.ErrHung)))
}

// Directives reach the loop: under Degrade the gateway serves the policy's
// degraded model (the upstream is asked for scripted-small-v2) and the
// agent drops the fetching tool; Compress compacts the conversation.
func TestRunObeysDirectives(t *testing.T) {
	w := newWorld(t, func(ra *v1alpha1.RunAttempt) {
		ra.Spec.Directives = []v1alpha1.Directive{{Type: v1alpha1.DirectiveDegrade, Gate: v1alpha1.GateBudget}, {Type: v1alpha1.DirectiveCompress, Gate: v1alpha1.GateBudget}}
	})
	cfg, h := w.play(`
plan: [Summary]
turns:
- tools: [{name: notes.write, args: {section: Summary, text: "a"}}]
- tools: [{name: notes.write, args: {section: Summary, text: "b"}}]
- tools: [{name: notes.write, args: {section: Summary, text: "c"}}]
- tools: [{name: report.publish, args: {section: Summary, content: "abc"}}]
- finish: true
`)
	w.g.Expect(w.run(cfg)).To(Succeed())
	reqs := h.Requests()
	last := reqs[len(reqs)-1]
	w.g.Expect(last.Model).To(Equal(gatewaytest.Model), "the agent asks for its model; the gateway degrades it")
	w.g.Expect(w.Upstream.Models()).To(HaveLen(len(reqs)))
	w.g.Expect(w.Upstream.Models()).To(HaveEach("scripted-small-v2"))
	var tools []string
	for _, t := range last.Tools {
		tools = append(tools, t.Name)
	}
	w.g.Expect(tools).To(ConsistOf(research.ToolNotesWrite, research.ToolReportPublish))
	w.g.Expect(len(last.Messages)).To(BeNumerically("<=", 8), "compacted")
	w.g.Expect(last.Messages[2].Content).To(ContainSubstring("Context compacted"))
	w.g.Expect(w.status().Publication.Settlement).To(Equal(v1alpha1.SettlementComplete))
}

// A Degrade directive given mid-run switches the model from the next request on.
func TestRunDegradesMidRun(t *testing.T) {
	w := newWorld(t, nil)
	cfg := w.config(`
plan: [Summary]
turns:
- tools: [{name: notes.write, args: {section: Summary, text: "a"}}]
- tools: [{name: report.publish, args: {section: Summary, content: "a"}}]
- finish: true
`)
	var degrade sync.Once
	w.decide = func(string) (v1alpha1.ApprovalDecision, bool) {
		// The budget gate fires while the publication awaits its approval.
		degrade.Do(func() {
			w.UpdateSpec(func(s *v1alpha1.RunAttemptSpec) {
				s.Directives = []v1alpha1.Directive{{Type: v1alpha1.DirectiveDegrade, Gate: v1alpha1.GateBudget}}
			})
		})
		return v1alpha1.DecisionApprove, true
	}
	w.g.Expect(w.run(cfg)).To(Succeed())
	w.g.Expect(w.Upstream.Models()).To(Equal([]string{gatewaytest.Model, gatewaytest.Model, gatewaytest.Model, "scripted-small-v2"}))
}

// Secrets fetched from the web are redacted from what the model sees
// (redact is a Post interceptor in the chain); the audit interceptor logs
// every call with the pod's identity.
func TestRunChainRedactsAndAudits(t *testing.T) {
	t.Setenv("POD_NAME", "survey-1-pod")
	w := newWorld(t, nil)
	cfg, h := w.play(`
plan: [Summary]
turns:
- tools: [{name: http.get, args: {url: WEB/b}}]
- tools: [{name: report.publish, args: {section: Summary, content: "ok"}}]
- finish: true
`)
	audit := &strings.Builder{}
	cfg.AuditWriter = audit
	w.g.Expect(w.run(cfg)).To(Succeed())
	reqs := h.Requests()
	var toolAnswers []string
	for _, m := range reqs[len(reqs)-1].Messages {
		if m.Role == "tool" {
			toolAnswers = append(toolAnswers, m.Content)
		}
	}
	w.g.Expect(strings.Join(toolAnswers, "\n")).To(ContainSubstring("beta replicates asynchronously; [REDACTED]"))
	w.g.Expect(strings.Join(toolAnswers, "\n")).NotTo(ContainSubstring("sk-abc"))
	w.g.Expect(strings.Count(audit.String(), "\n")).To(BeNumerically(">=", 5), "one line per call")
	w.g.Expect(audit.String()).To(ContainSubstring(`"identity":"survey-1-pod"`))
}

// An interceptor the agent does not know: it refuses to start, and says
// why in an escalated fault.
func TestRunRefusesUnknownInterceptor(t *testing.T) {
	dlp := func(ra *v1alpha1.RunAttempt) {
		ra.Spec.Policy.ResolvedChain = append(ra.Spec.Policy.ResolvedChain,
			v1alpha1.ResolvedInterceptor{Name: "dlp", Class: v1alpha1.ClassSecurity, Phase: v1alpha1.InterceptorPost, OnError: v1alpha1.PostureDeny})
	}
	w := newWorld(t, dlp)
	err := w.run(w.config(normalScript))
	w.g.Expect(err).To(MatchError(agent.ErrUnregisteredInterceptor))
	w.g.Expect(err.Error()).To(ContainSubstring(`"dlp"`))
	f, ok := fault(w.status(), v1alpha1.FaultScopeAgent, "UnregisteredInterceptor")
	w.g.Expect(ok).To(BeTrue())
	w.g.Expect(f.Escalated).To(BeTrue())
	w.g.Expect(w.Upstream.Requests.Load()).To(BeZero())

	// Registered through Config.Interceptors, it runs in the agent. A
	// Security interceptor only the agent implements is no boundary: the
	// gateway, which does not implement dlp, refuses the run's calls (see
	// internal/gateway's TestToolDoorRefusesAPolicyChainItCannotRun); an
	// Observability one it leaves to the agent.
	trace := func(ra *v1alpha1.RunAttempt) {
		ra.Spec.Policy.ResolvedChain = append(ra.Spec.Policy.ResolvedChain,
			v1alpha1.ResolvedInterceptor{Name: "trace", Class: v1alpha1.ClassObservability, Phase: v1alpha1.InterceptorPost, OnError: v1alpha1.PostureAllow})
	}
	w2 := newWorld(t, trace)
	cfg := w2.config(normalScript)
	var traced atomic.Int64
	cfg.Interceptors = map[string]agent.Interceptor{"trace": {Post: func(context.Context, *agent.Call, *agent.Outcome) error {
		traced.Add(1)
		return nil
	}}}
	w2.g.Expect(w2.run(cfg)).To(Succeed())
	w2.g.Expect(traced.Load()).To(BeNumerically(">", 0), "the agent ran it")
	w2.g.Expect(w2.status().Publication.Settled).To(BeTrue(), "the run completed")
}

// The sample script (config/samples/research-agent-script.yaml), read from
// the environment variable a pod sets from its ConfigMap, completes normally.
func TestSampleScriptCompletes(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "config", "samples", "research-agent-script.yaml"))
	g := NewWithT(t)
	g.Expect(err).NotTo(HaveOccurred())
	sample := &corev1.ConfigMap{}
	g.Expect(yaml.UnmarshalStrict(raw, sample)).To(Succeed())
	g.Expect(sample.Data).To(HaveKey(scripted.DefaultScriptKey))
	t.Setenv("TEST_AGENTRUN_SCRIPT", sample.Data[scripted.DefaultScriptKey])
	w := newWorld(t, nil)
	cfg, h := w.play("")
	h.Env = "TEST_AGENTRUN_SCRIPT"
	cfg.HTTPAllowlist = nil // offline: http.get is refused, a local fault
	w.g.Expect(w.run(cfg)).To(Succeed())
	s := w.status()
	w.g.Expect(s.FinishProposed).To(BeTrue())
	w.g.Expect(s.Publication.Settlement).To(Equal(v1alpha1.SettlementComplete))
	w.g.Expect(s.Publication.BlocksCommitted).To(BeNumerically(">=", 2))
	for _, f := range s.Faults {
		w.g.Expect(f.Escalated).To(BeFalse())
	}
}

// Without a script the scripted provider cannot start: the agent says so
// in an escalated fault and fails.
func TestRunWithoutScriptFails(t *testing.T) {
	t.Setenv("TEST_NO_SCRIPT", "")
	w := newWorld(t, nil)
	cfg, h := w.play("")
	h.Env = "TEST_NO_SCRIPT"
	err := w.run(cfg)
	w.g.Expect(err).To(MatchError(ContainSubstring("needs a script")))
	f, ok := fault(w.status(), v1alpha1.FaultScopeAgent, "BadConfiguration")
	w.g.Expect(ok).To(BeTrue())
	w.g.Expect(f.Escalated).To(BeTrue())
}

func TestParsing(t *testing.T) {
	g := NewWithT(t)
	g.Expect(research.ParsePlan(`["Intro", "Replication", "intro", ""]`)).To(Equal([]string{"Intro", "Replication"}))
	g.Expect(research.ParsePlan("```json\n[\"A\",\"B\"]\n```")).To(Equal([]string{"A", "B"}))
	g.Expect(research.ParsePlan("1. Background\n2) Findings\n- Outlook\n")).To(Equal([]string{"Background", "Findings", "Outlook"}))
	g.Expect(gateway.SectionKey(0, "Replication & Consistency!")).To(Equal("01-replication-consistency.md"))
	g.Expect(gateway.SectionKey(11, "???")).To(Equal("12-section.md"))
	g.Expect(research.Redact("key sk-ABCDEFGHIJKLMNOPQRST and Bearer abc.def.ghi password=hunter2")).
		To(Equal("key [REDACTED] and [REDACTED] [REDACTED]"))
	g.Expect(errors.Is(research.ErrCrashed, research.ErrHung)).To(BeFalse())
	g.Expect(research.WireName("report.publish")).To(Equal("report_publish"))
	g.Expect(research.WireName("a/b c")).To(Equal("a_b_c"))
}

// Finalizing starts while a research request is being retried (a provider
// rate-limiting until the deadline): the retry stops, no research request
// is made from the reserve, and finalization publishes from it.
func TestRunFinalizesDuringRetries(t *testing.T) {
	w := newWorld(t, nil)
	cfg := w.config(`
plan: [Overview]
turns:
- tools: [{name: notes.write, args: {section: Overview, text: "o1"}}]
- error: {retryable: true, kind: RateLimited, times: 1000}
  finish: true
finalize:
- tools: [{name: report.publish, args: {section: Overview, content: "Overview, at the deadline."}}]
`)
	cfg.RetryBackoff = time.Hour // the agent sits in its backoff when Finalizing starts
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := w.start(ctx, cfg)
	w.g.Eventually(w.hasFault(v1alpha1.FaultScopeProvider, "RateLimited"), wait, poll).Should(BeTrue())
	used := w.status().Usage
	w.g.Expect(used.ModelRequests).To(Equal(int64(3)))

	w.UpdateSpec(func(s *v1alpha1.RunAttemptSpec) {
		s.RunPhase = v1alpha1.PhaseFinalizing
		s.Grant = v1alpha1.Grant{ModelRequests: used.ModelRequests + 1, ToolCalls: used.ToolCalls + 1, FinalizeOnly: true}
	})
	w.g.Eventually(done, wait).Should(Receive(BeNil()))
	s := w.status()
	w.g.Expect(s.Usage.ModelRequests).To(Equal(used.ModelRequests+1), "one finalization request, no research retry")
	w.g.Expect(s.Publication.Settlement).To(Equal(v1alpha1.SettlementComplete))
	w.g.Expect(w.report().Data).To(HaveKeyWithValue("01-overview.md", "Overview, at the deadline."))
	_, refused := fault(s, v1alpha1.FaultScopeAgent, "FinalizeOnly")
	w.g.Expect(refused).To(BeFalse(), "the loop stops before asking, not by being refused")
}
