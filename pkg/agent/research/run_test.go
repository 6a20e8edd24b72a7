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

package research

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1 "github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/pkg/agent"
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

// A normal run: plan, research, notes, publish every section into the
// report ConfigMap (owned by the run), propose finish, settle Complete. The
// reviewer's "continue" after the finish is recorded, not obeyed.
func TestRunCompletes(t *testing.T) {
	w := newWorld(t, attemptObject(1))
	w.g.Expect(w.run(w.config(normalScript))).To(Succeed())

	cm := w.report()
	w.g.Expect(cm.Labels).To(HaveKeyWithValue(v1.LabelRun, runName))
	w.g.Expect(cm.OwnerReferences).To(ConsistOf(HaveField("UID", BeEquivalentTo("run-uid"))))
	w.g.Expect(cm.OwnerReferences[0].Kind).To(Equal("ResearchRun"))
	w.g.Expect(cm.Data).To(HaveKeyWithValue("01-background.md", "Alpha uses Raft."))
	w.g.Expect(cm.Data).To(HaveKeyWithValue("02-findings.md", "Beta is asynchronous."))
	w.g.Expect(w.index().Sections).To(Equal([]IndexEntry{
		{Name: "Background", Key: "01-background.md", Published: true},
		{Name: "Findings", Key: "02-findings.md", Published: true},
	}))

	s := w.attempt().Status
	w.g.Expect(s.FinishProposed).To(BeTrue())
	w.g.Expect(s.Publication).To(Equal(v1.Publication{
		BlocksPlanned: 2, BlocksCommitted: 2, Settlement: v1.SettlementComplete, Settled: true, Location: "configmap/survey-report",
	}))
	w.g.Expect(s.Advice).To(ConsistOf(v1.Advice{Source: "reviewer", Kind: "Continue", Count: 1}))
	w.g.Expect(s.Usage).To(Equal(v1.Usage{ModelRequests: 5, ToolCalls: 6, Tokens: 350}))
	w.g.Expect(s.Steps).To(Equal(int64(5)), "plan + 4 turns")
	w.g.Expect(s.LastProgressStep).To(Equal(int64(4)), "the finish turn itself made no progress")
	w.g.Expect(s.InFlight).To(BeEmpty())
	w.g.Expect(s.AwaitingApproval).To(BeEmpty())
	w.g.Expect(s.Faults).To(BeEmpty())
	w.g.Expect(s.Checkpoint).To(ContainSubstring(`"published":["Background","Findings"]`))
	w.g.Expect(s.Calls).To(HaveLen(6))
}

// Some sections published, one only from the notes at finalization, one
// never: Partial, with the count of what the ConfigMap actually holds.
func TestRunSettlesPartial(t *testing.T) {
	w := newWorld(t, attemptObject(1))
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
	w.g.Expect(w.index().Sections[2]).To(Equal(IndexEntry{Name: "Costs", Key: "03-costs.md", Published: false}))

	s := w.attempt().Status
	w.g.Expect(s.Publication.Settlement).To(Equal(v1.SettlementPartial))
	w.g.Expect(s.Publication.BlocksCommitted).To(Equal(int32(2)))
	w.g.Expect(s.Publication.BlocksPlanned).To(Equal(int32(3)))
	w.g.Expect(s.Usage.ModelRequests).To(Equal(int64(4)), "plan, 2 turns, 1 finalization request")
}

// A denied publication is a local refusal: the run settles with what the
// ConfigMap holds.
func TestRunSettlesNoneWhenPublicationDenied(t *testing.T) {
	w := newWorld(t, attemptObject(1))
	w.decide = func(id string) (v1.ApprovalDecision, bool) { return v1.DecisionDeny, true }
	err := w.run(w.config(`
plan: [Summary]
turns:
- tools: [{name: report.publish, args: {section: Summary, content: "x"}}]
- finish: true
`))
	w.g.Expect(err).NotTo(HaveOccurred())
	s := w.attempt().Status
	w.g.Expect(s.Publication.Settlement).To(Equal(v1.SettlementNone))
	w.g.Expect(s.Publication.Settled).To(BeTrue())
	f, ok := fault(s, v1.FaultScopeAgent, "ApprovalDenied")
	w.g.Expect(ok).To(BeTrue())
	w.g.Expect(f.Count).To(Equal(int64(1)))
}

// A replacement attempt that starts in Finalizing (finalize-only grant)
// recovers the plan and what was published from the report ConfigMap, does
// no research, publishes the rest and settles.
func TestRunFinalizeOnlyAttempt(t *testing.T) {
	ra := attemptObject(2)
	ra.Spec.RunPhase = v1.PhaseFinalizing
	ra.Spec.Grant = v1.Grant{ModelRequests: 2, ToolCalls: 2, FinalizeOnly: true}
	existing := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: runName + "-report", Labels: map[string]string{v1.LabelRun: runName}},
		Data: map[string]string{
			"01-background.md": "Alpha uses Raft.",
			IndexKey:           `{"run":"survey","sections":[{"name":"Background","key":"01-background.md","published":true},{"name":"Findings","key":"02-findings.md","published":false}]}`,
		},
	}
	w := newWorld(t, ra, existing)
	cfg := w.config(`
turns:
- tools: [{name: http.get, args: {url: WEB/a}}]
finalize:
- tools:
  - {name: http.get, args: {url: WEB/b}}
  - {name: report.publish, args: {section: Findings, content: "Beta is asynchronous."}}
`)
	scripted := NewScripted(cfg.Script, 2)
	cfg.Provider = scripted
	w.g.Expect(w.run(cfg)).To(Succeed())

	var purposes []Purpose
	for _, r := range scripted.Requests() {
		purposes = append(purposes, r.Purpose)
	}
	w.g.Expect(purposes).To(Equal([]Purpose{PurposeFinalize}), "no planning, no research turn")
	w.g.Expect(w.report().Data).To(HaveKeyWithValue("02-findings.md", "Beta is asynchronous."))
	s := w.attempt().Status
	w.g.Expect(s.Publication.Settlement).To(Equal(v1.SettlementComplete))
	w.g.Expect(s.FinishProposed).To(BeFalse())
	f, ok := fault(s, v1.FaultScopeAgent, "FinalizeOnly")
	w.g.Expect(ok).To(BeTrue(), "research is refused while finalizing")
	w.g.Expect(f.LastMessage).To(ContainSubstring("http.get"))
	w.g.Expect(s.Usage).To(Equal(v1.Usage{ModelRequests: 1, ToolCalls: 1}))
}

// The working grant runs out: the agent is refused locally, waits for the
// operator, and finalizes from the reserve once the run is Finalizing.
func TestRunGrantExhaustedThenFinalizes(t *testing.T) {
	ra := attemptObject(1)
	ra.Spec.Grant = v1.Grant{ModelRequests: 3, ToolCalls: 10}
	w := newWorld(t, ra)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := w.start(ctx, w.config(`
plan: [Background, Findings]
turns:
- tools: [{name: notes.write, args: {section: Background, text: "alpha"}}]
- tools: [{name: notes.write, args: {section: Findings, text: "beta"}}]
- tools: [{name: report.publish, args: {section: Background, content: "never reached"}}]
`))
	w.g.Eventually(func() bool {
		_, ok := fault(w.attempt().Status, v1.FaultScopeAgent, "GrantExhausted")
		return ok
	}, wait, poll).Should(BeTrue())
	w.g.Consistently(done, 50*time.Millisecond).ShouldNot(Receive(), "a refusal is not a failure: the agent waits")
	w.g.Expect(w.attempt().Status.Usage.ModelRequests).To(Equal(int64(3)))

	w.updateSpec(func(s *v1.RunAttemptSpec) {
		s.RunPhase = v1.PhaseFinalizing
		s.Grant = v1.Grant{ModelRequests: 5, ToolCalls: 12, FinalizeOnly: true}
	})
	w.g.Eventually(done, wait).Should(Receive(BeNil()))
	s := w.attempt().Status
	w.g.Expect(s.Publication.Settlement).To(Equal(v1.SettlementComplete))
	w.g.Expect(w.report().Data).To(HaveKeyWithValue("01-background.md", "alpha"))
	w.g.Expect(s.Usage.ModelRequests).To(Equal(int64(4)), "one finalization request from the reserve")
}

// Retryable provider errors are retried (each retry a model request) and
// counted as local faults; the run completes.
func TestRunRetriesProviderErrors(t *testing.T) {
	w := newWorld(t, attemptObject(1))
	err := w.run(w.config(`
plan: [Summary]
turns:
- error: {retryable: true, kind: RateLimited, times: 2, message: "429 slow down"}
  tools: [{name: report.publish, args: {section: Summary, content: "ok"}}]
- finish: true
`))
	w.g.Expect(err).NotTo(HaveOccurred())
	s := w.attempt().Status
	f, ok := fault(s, v1.FaultScopeProvider, "RateLimited")
	w.g.Expect(ok).To(BeTrue())
	w.g.Expect(f.Count).To(Equal(int64(2)))
	w.g.Expect(f.Retryable).To(BeTrue())
	w.g.Expect(f.Escalated).To(BeFalse())
	w.g.Expect(s.Usage.ModelRequests).To(Equal(int64(5)), "plan + 3 tries + finish")
	w.g.Expect(s.Publication.Settlement).To(Equal(v1.SettlementComplete))
}

// A fatal provider error is escalated (the operator treats the attempt as
// failed) and Run fails.
func TestRunEscalatesFatalProviderError(t *testing.T) {
	w := newWorld(t, attemptObject(1))
	err := w.run(w.config(`
planError: {kind: Unauthorized, message: "invalid api key", status: 401}
`))
	w.g.Expect(err).To(MatchError(ContainSubstring("fatal model provider error")))
	f, ok := fault(w.attempt().Status, v1.FaultScopeProvider, "Unauthorized")
	w.g.Expect(ok).To(BeTrue())
	w.g.Expect(f.Escalated).To(BeTrue())
	w.g.Expect(f.LastMessage).To(ContainSubstring("invalid api key"))
}

// Tool failures are local faults; the loop goes on.
func TestRunToolFailures(t *testing.T) {
	w := newWorld(t, attemptObject(1))
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
	s := w.attempt().Status
	for _, kind := range []string{"Timeout", "HTTP404", "HostNotAllowed"} {
		_, ok := fault(s, v1.FaultScopeTool, kind)
		w.g.Expect(ok).To(BeTrue(), kind)
	}
	w.g.Expect(s.Publication.Settlement).To(Equal(v1.SettlementComplete))
}

// A crash at turn k exits the process (137) without writing anything more.
func TestRunCrashAtTurn(t *testing.T) {
	w := newWorld(t, attemptObject(1))
	cfg := w.config(`
plan: [Summary]
turns:
- tools: [{name: notes.write, args: {section: Summary, text: "a"}}]
- crash: {exitCode: 137}
- finish: true
`)
	var code int
	cfg.Exit = func(c int) { code = c }
	w.g.Expect(w.run(cfg)).To(MatchError(ErrCrashed))
	w.g.Expect(code).To(Equal(137))
	s := w.attempt().Status
	w.g.Expect(s.FinishProposed).To(BeFalse())
	w.g.Expect(s.Publication.Settled).To(BeFalse())

	// The replacement attempt plays the script again; the crash is only for attempt 1.
	w2 := newWorld(t, attemptObject(2))
	cfg2 := w2.config(`
plan: [Summary]
turns:
- tools: [{name: report.publish, args: {section: Summary, content: "a"}}]
- crash: {onAttempt: 1}
- finish: true
`)
	w2.g.Expect(w2.run(cfg2)).To(Succeed())
	w2.g.Expect(w2.attempt().Status.Publication.Settlement).To(Equal(v1.SettlementComplete))
}

// A crash while a side-effecting call is in flight leaves its write-ahead
// record on the RunAttempt (the operator's evidence that the effect's
// outcome is unknown) and the effect undone.
func TestRunCrashWithSideEffectInFlight(t *testing.T) {
	w := newWorld(t, attemptObject(1))
	cfg := w.config(`
plan: [Summary]
turns:
- tools: [{name: report.publish, args: {section: Summary, content: "x"}, crash: {}}]
`)
	var code int
	cfg.Exit = func(c int) { code = c }
	w.g.Expect(w.run(cfg)).To(MatchError(ErrCrashed))
	w.g.Expect(code).To(Equal(137))
	s := w.attempt().Status
	w.g.Expect(s.InFlight).To(ConsistOf(And(
		HaveField("Tool", ToolReportPublish),
		HaveField("Effect", v1.EffectExternal),
		HaveField("IdempotencyKey", ""), // not idempotent per the catalogue: unsafe to replay
	)))
	cm := &corev1.ConfigMap{}
	err := w.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: runName + "-report"}, cm)
	w.g.Expect(err).To(HaveOccurred(), "the effect never happened")
}

// A loop of identical calls shows in status.calls; turns without progress
// leave lastProgressStep behind steps.
func TestRunRepeatedCallsAndNoProgress(t *testing.T) {
	w := newWorld(t, attemptObject(1))
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
	s := w.attempt().Status
	w.g.Expect(s.Calls[0].Tool).To(Equal(ToolHTTPGet))
	w.g.Expect(s.Calls[0].Count).To(Equal(int64(4)))
	w.g.Expect(s.Steps).To(Equal(int64(1 + 4 + 3 + 2)))
	w.g.Expect(s.LastProgressStep).To(Equal(int64(1 + 4 + 3 + 1)))
}

// Terminated while waiting for an approval: the context ends and Run
// returns cleanly.
func TestRunStopsWhenTerminated(t *testing.T) {
	w := newWorld(t, attemptObject(1))
	w.decide = func(string) (v1.ApprovalDecision, bool) { return "", false } // nobody answers
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := w.start(ctx, w.config(`
plan: [Summary]
turns:
- tools: [{name: report.publish, args: {section: Summary, content: "x"}}]
`))
	w.g.Eventually(func() []string { return w.attempt().Status.AwaitingApproval }, wait, poll).Should(HaveLen(1))
	w.updateSpec(func(s *v1.RunAttemptSpec) { s.RunPhase = v1.PhaseTerminated; s.Grant = v1.Grant{} })
	w.g.Eventually(done, wait).Should(Receive(BeNil()))
}

// A hang freezes the agent: no more writes (so the operator's heartbeat
// timeout fires) until the process is stopped.
func TestRunHang(t *testing.T) {
	ra := attemptObject(1)
	ra.Spec.HeartbeatInterval = &metav1.Duration{Duration: 20 * time.Millisecond}
	w := newWorld(t, ra)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := w.start(ctx, w.config(`
plan: [Summary]
turns:
- tools: [{name: notes.write, args: {section: Summary, text: "a"}}]
- hang: {}
`))
	w.g.Eventually(func() int64 { return w.attempt().Status.Usage.ToolCalls }, wait, poll).Should(Equal(int64(1)))
	// A live agent heartbeats every 20ms: five silent intervals mean frozen.
	w.g.Eventually(func(g Gomega) {
		before := w.writes.Load()
		g.Consistently(w.writes.Load, 100*time.Millisecond, poll).Should(Equal(before))
	}, wait, poll).Should(Succeed())
	w.g.Expect(done).NotTo(Receive(), "frozen until stopped")
	cancel()
	w.g.Eventually(done, wait).Should(Receive(MatchError(ErrHung)))
}

// Directives reach the loop: Degrade switches to the cheaper model and
// drops the fetching tool; Compress compacts the conversation.
func TestRunObeysDirectives(t *testing.T) {
	ra := attemptObject(1)
	ra.Spec.Directives = []v1.Directive{{Type: v1.DirectiveDegrade, Gate: v1.GateBudget}, {Type: v1.DirectiveCompress, Gate: v1.GateBudget}}
	w := newWorld(t, ra)
	cfg := w.config(`
plan: [Summary]
turns:
- tools: [{name: notes.write, args: {section: Summary, text: "a"}}]
- tools: [{name: notes.write, args: {section: Summary, text: "b"}}]
- tools: [{name: notes.write, args: {section: Summary, text: "c"}}]
- tools: [{name: report.publish, args: {section: Summary, content: "abc"}}]
- finish: true
`)
	cfg.Model, cfg.DegradedModel = "large", "small"
	scripted := NewScripted(cfg.Script, 1)
	cfg.Provider = scripted
	w.g.Expect(w.run(cfg)).To(Succeed())
	reqs := scripted.Requests()
	last := reqs[len(reqs)-1]
	w.g.Expect(last.Model).To(Equal("small"))
	var tools []string
	for _, t := range last.Tools {
		tools = append(tools, t.Name)
	}
	w.g.Expect(tools).To(ConsistOf(ToolNotesWrite, ToolReportPublish))
	w.g.Expect(len(last.Messages)).To(BeNumerically("<=", 8), "compacted")
	w.g.Expect(last.Messages[2].Content).To(ContainSubstring("Context compacted"))
}

// Secrets fetched from the web are redacted from what the model sees
// (redact is a Post interceptor in the chain); the audit interceptor logs
// every call.
func TestRunChainRedactsAndAudits(t *testing.T) {
	w := newWorld(t, attemptObject(1))
	cfg := w.config(`
plan: [Summary]
turns:
- tools: [{name: http.get, args: {url: WEB/b}}]
- tools: [{name: report.publish, args: {section: Summary, content: "ok"}}]
- finish: true
`)
	audit := &strings.Builder{}
	cfg.AuditWriter = audit
	scripted := NewScripted(cfg.Script, 1)
	cfg.Provider = scripted
	w.g.Expect(w.run(cfg)).To(Succeed())
	reqs := scripted.Requests()
	var toolAnswers []string
	for _, m := range reqs[len(reqs)-1].Messages {
		if m.Role == "tool" {
			toolAnswers = append(toolAnswers, m.Content)
		}
	}
	w.g.Expect(strings.Join(toolAnswers, "\n")).To(ContainSubstring("beta replicates asynchronously; [REDACTED]"))
	w.g.Expect(strings.Join(toolAnswers, "\n")).NotTo(ContainSubstring("sk-abc"))
	w.g.Expect(strings.Count(audit.String(), "\n")).To(BeNumerically(">=", 5), "one line per call")
	w.g.Expect(audit.String()).To(ContainSubstring(`"identity":"survey-1"`))
}

// An interceptor the agent does not know: it refuses to start.
func TestRunRefusesUnknownInterceptor(t *testing.T) {
	ra := attemptObject(1)
	ra.Spec.Policy.ResolvedChain = append(ra.Spec.Policy.ResolvedChain,
		v1.ResolvedInterceptor{Name: "dlp", Class: v1.ClassSecurity, Phase: v1.InterceptorPost, OnError: v1.PostureDeny})
	w := newWorld(t, ra)
	err := w.run(w.config(normalScript))
	w.g.Expect(err).To(MatchError(agent.ErrUnregisteredInterceptor))
	w.g.Expect(err.Error()).To(ContainSubstring(`"dlp"`))

	// Registered through Config.Interceptors, it runs.
	w2 := newWorld(t, ra)
	cfg := w2.config(normalScript)
	cfg.Interceptors = map[string]agent.Interceptor{"dlp": {Post: func(context.Context, *agent.Call, *agent.Outcome) error { return nil }}}
	w2.g.Expect(w2.run(cfg)).To(Succeed())
}

// The sample script (config/samples/research-agent-script.yaml), read from
// its ConfigMap as --script-configmap does, completes normally.
func TestSampleScriptCompletes(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "config", "samples", "research-agent-script.yaml"))
	g := NewWithT(t)
	g.Expect(err).NotTo(HaveOccurred())
	sample := &corev1.ConfigMap{}
	g.Expect(yaml.UnmarshalStrict(raw, sample)).To(Succeed())
	sample.Namespace = ns
	w := newWorld(t, attemptObject(1), sample)
	cfg := w.config("")
	cfg.ScriptConfigMap = sample.Name
	cfg.HTTPAllowlist = nil // offline: http.get is refused, a local fault
	w.g.Expect(w.run(cfg)).To(Succeed())
	s := w.attempt().Status
	w.g.Expect(s.FinishProposed).To(BeTrue())
	w.g.Expect(s.Publication.Settlement).To(Equal(v1.SettlementComplete))
	w.g.Expect(s.Publication.BlocksCommitted).To(BeNumerically(">=", 2))
	for _, f := range s.Faults {
		w.g.Expect(f.Escalated).To(BeFalse())
	}
}

func TestParsing(t *testing.T) {
	g := NewWithT(t)
	g.Expect(parsePlan(`["Intro", "Replication", "intro", ""]`)).To(Equal([]string{"Intro", "Replication"}))
	g.Expect(parsePlan("```json\n[\"A\",\"B\"]\n```")).To(Equal([]string{"A", "B"}))
	g.Expect(parsePlan("1. Background\n2) Findings\n- Outlook\n")).To(Equal([]string{"Background", "Findings", "Outlook"}))
	g.Expect(sectionKey(0, "Replication & Consistency!")).To(Equal("01-replication-consistency.md"))
	g.Expect(sectionKey(11, "???")).To(Equal("12-section.md"))
	g.Expect(Redact("key sk-ABCDEFGHIJKLMNOPQRST and Bearer abc.def.ghi password=hunter2")).
		To(Equal("key [REDACTED] and [REDACTED] [REDACTED]"))
	_, err := ParseScript([]byte("turns:\n- tool: [x]\n"))
	g.Expect(err).To(MatchError(ContainSubstring(`unknown field "tool"`)))
	_, err = ParseScript([]byte("turns:\n- tools: [{args: {}}]\n"))
	g.Expect(err).To(MatchError(ContainSubstring("has no name")))
	g.Expect(errors.Is(ErrCrashed, ErrHung)).To(BeFalse())
}

// Finalizing starts while a research request is being retried (a provider
// rate-limiting until the deadline): the retry stops, no research request
// is made from the reserve, and finalization publishes from it.
func TestRunFinalizesDuringRetries(t *testing.T) {
	w := newWorld(t, attemptObject(1))
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
	w.g.Eventually(func() bool {
		_, ok := fault(w.attempt().Status, v1.FaultScopeProvider, "RateLimited")
		return ok
	}, wait, poll).Should(BeTrue())
	used := w.attempt().Status.Usage
	w.g.Expect(used.ModelRequests).To(Equal(int64(3)))

	w.updateSpec(func(s *v1.RunAttemptSpec) {
		s.RunPhase = v1.PhaseFinalizing
		s.Grant = v1.Grant{ModelRequests: used.ModelRequests + 1, ToolCalls: used.ToolCalls + 1, FinalizeOnly: true}
	})
	w.g.Eventually(done, wait).Should(Receive(BeNil()))
	s := w.attempt().Status
	w.g.Expect(s.Usage.ModelRequests).To(Equal(used.ModelRequests+1), "one finalization request, no research retry")
	w.g.Expect(s.Publication.Settlement).To(Equal(v1.SettlementComplete))
	w.g.Expect(w.report().Data).To(HaveKeyWithValue("01-overview.md", "Overview, at the deadline."))
	_, refused := fault(s, v1.FaultScopeAgent, "FinalizeOnly")
	w.g.Expect(refused).To(BeFalse(), "the loop stops before asking, not by being refused")
}
