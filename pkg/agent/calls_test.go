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

package agent_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"

	v1 "github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/chain"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
	"github.com/agentrun-dev/agentrun/internal/upstream"
	"github.com/agentrun-dev/agentrun/pkg/agent"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// A tool the agent did not register is refused by the SDK; one the agent
// registered but the policy's catalogue does not list is refused by the
// gateway. Neither runs; both are counted as faults.
func TestUnknownTool(t *testing.T) {
	e := newEnv(t, nil)
	var ran sync.Map
	a := e.newAgent(func(a *agent.Agent) {
		e.tools(a, &ran)
		e.g.Expect(a.RegisterTool(agent.Tool{Name: "shell.exec", Run: func(context.Context, *agent.Call) (string, error) {
			ran.Store("shell.exec", true)
			return "", nil
		}})).To(Succeed())
	})
	ctx := e.start(a)

	_, err := a.CallTool(ctx, "mail.send", map[string]any{"to": "x"})
	e.g.Expect(err).To(MatchError(agent.ErrUnknownTool))
	e.g.Expect(agent.IsRefusal(err)).To(BeTrue())
	e.g.Expect(err.Error()).To(ContainSubstring("not registered with this agent"))

	_, err = a.CallTool(ctx, "shell.exec", map[string]any{"cmd": "rm -rf /"})
	e.g.Expect(err).To(MatchError(agent.ErrUnknownTool))
	e.g.Expect(agent.IsRefusal(err)).To(BeTrue())
	e.g.Expect(err.Error()).To(ContainSubstring(`not in RuntimePolicy "p"'s tool catalogue`))
	_, called := ran.Load("shell.exec")
	e.g.Expect(called).To(BeFalse())

	var names []string
	for _, tl := range a.Tools() {
		names = append(names, tl.Name)
	}
	e.g.Expect(names).To(Equal([]string{"http.get", "notes.write", "report.publish"}), "only the catalogue's tools are offered")

	e.g.Eventually(e.faults(v1.FaultScopeAgent, "UnknownTool"), wait, poll).Should(Equal(int64(2)))
	e.g.Expect(e.usage().ToolCalls).To(BeZero(), "refusals are not usage")
}

// The gateway applies the permission matrix with the attempt's mode: for
// every mode, each of a read tool (Low, None), an auto-approved write tool
// (Low, Write) and a High-risk publication tool (listed in autoApprove too)
// is allowed, confirmed (awaited in status.awaitingApproval until approved)
// or denied. High risk is confirmed in every mode that does not deny it.
func TestPermissionMatrix(t *testing.T) {
	const (
		allow   = "Allow"
		confirm = "Confirm"
		deny    = "Deny"
	)
	tools := []struct {
		name string
		args map[string]any
	}{
		{"http.get", map[string]any{"url": "https://example.org"}},
		{"notes.write", map[string]any{"text": "finding"}},
		{"report.publish", map[string]any{"section": "summary", "content": "text"}},
	}
	for _, tc := range []struct {
		mode   v1.PermissionMode
		want   [3]string
		reason string
	}{
		{v1.ModeReadOnly, [3]string{allow, deny, deny}, "ReadOnly allows only tools whose effect is None"},
		{v1.ModePlan, [3]string{allow, deny, deny}, "Plan allows search, read and preview (effect None), nothing that writes"},
		{v1.ModeEdit, [3]string{allow, confirm, confirm}, ""},
		{v1.ModeAuto, [3]string{allow, allow, confirm}, ""},
		{v1.ModeFull, [3]string{allow, allow, confirm}, ""},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			e := newEnv(t, func(ra *v1.RunAttempt) {
				ra.Spec.Mode = tc.mode
				ra.Spec.Policy.AutoApprove = []string{"notes.write", "report.publish"}
			})
			var ran sync.Map
			a := e.newAgent(func(a *agent.Agent) { e.tools(a, &ran) })
			ctx := e.start(a)
			denied := int64(0)
			for i, tool := range tools {
				ran.Clear()
				switch tc.want[i] {
				case allow:
					_, err := a.CallTool(ctx, tool.name, tool.args)
					e.g.Expect(err).NotTo(HaveOccurred(), tool.name)
					_, called := ran.Load(tool.name)
					e.g.Expect(called).To(BeTrue(), tool.name)
				case deny:
					_, err := a.CallTool(ctx, tool.name, tool.args)
					e.g.Expect(err).To(MatchError(agent.ErrPermissionDenied), tool.name)
					e.g.Expect(agent.IsRefusal(err)).To(BeTrue())
					e.g.Expect(err.Error()).To(ContainSubstring(tc.reason), "the refusal carries the matrix's reason")
					_, called := ran.Load(tool.name)
					e.g.Expect(called).To(BeFalse(), tool.name)
					denied++
				case confirm:
					id := actionID(t, tool.name, tool.args)
					done := make(chan error, 1)
					go func() {
						_, err := a.CallTool(ctx, tool.name, tool.args)
						done <- err
					}()
					e.g.Eventually(func() []string { return v1.ActionIDs(e.status().AwaitingApproval) }, wait, poll).Should(ConsistOf(id), tool.name)
					e.g.Expect(done).NotTo(Receive(), "the call waits for its approval")
					_, called := ran.Load(tool.name)
					e.g.Expect(called).To(BeFalse(), "nothing runs before the approval")
					e.approve(id, v1.DecisionApprove, "alice", "")
					e.g.Eventually(done, wait).Should(Receive(BeNil()), tool.name)
					_, called = ran.Load(tool.name)
					e.g.Expect(called).To(BeTrue(), tool.name)
					e.g.Eventually(func() []string { return v1.ActionIDs(e.status().AwaitingApproval) }, wait, poll).Should(BeEmpty())
				}
			}
			e.g.Eventually(e.faults(v1.FaultScopeAgent, "PermissionDenied"), wait, poll).Should(Equal(denied))
		})
	}

	// A mode change on the RunAttempt takes effect at once; an unknown mode
	// fails closed, like the matrix.
	e := newEnv(t, func(ra *v1.RunAttempt) { ra.Spec.Mode = v1.ModePlan })
	a := e.newAgent(func(a *agent.Agent) { e.tools(a, nil) })
	ctx := e.start(a)
	_, err := a.CallTool(ctx, "notes.write", map[string]any{"text": "x"})
	e.g.Expect(err).To(MatchError(agent.ErrPermissionDenied))
	e.UpdateSpec(func(s *v1.RunAttemptSpec) { s.Mode = v1.ModeAuto })
	_, err = a.CallTool(ctx, "notes.write", map[string]any{"text": "x"})
	e.g.Expect(err).NotTo(HaveOccurred(), "notes.write is autoApproved in Auto")
	e.UpdateSpec(func(s *v1.RunAttemptSpec) { s.Mode = "Sudo" })
	_, err = a.CallTool(ctx, "http.get", map[string]any{"url": "u"})
	e.g.Expect(err).To(MatchError(agent.ErrPermissionDenied))
	e.g.Expect(err.Error()).To(ContainSubstring("an unknown mode fails closed"))
}

// Confirm: the action id is written to status.awaitingApproval at once and
// the call waits until spec.approvals answers. Approve runs it, Deny is a
// refusal naming who denied and why. An approval admits one call: the same
// call again waits for a new one; a wait ends with the caller's context and
// is withdrawn.
func TestApprovalWait(t *testing.T) {
	e := newEnvWith(t, gatewaytest.Options{
		Mutate: func(ra *v1.RunAttempt) { ra.Spec.Mode = v1.ModeEdit },
		// Only urgent facts are written: the awaited approval is one.
		FlushInterval: time.Hour,
	})
	var ran sync.Map
	a := e.newAgent(func(a *agent.Agent) { e.tools(a, &ran) })
	ctx := e.start(a)

	call := func(ctx context.Context, text string) (chan string, chan error) {
		res, errs := make(chan string, 1), make(chan error, 1)
		go func() {
			r, err := a.CallTool(ctx, "notes.write", map[string]any{"text": text})
			res <- r
			errs <- err
		}()
		return res, errs
	}
	approveID := actionID(t, "notes.write", map[string]any{"text": "approve me"})
	res, errs := call(ctx, "approve me")
	e.g.Eventually(func() []string { return v1.ActionIDs(e.status().AwaitingApproval) }, wait, poll).Should(ConsistOf(approveID))
	_, called := ran.Load("notes.write")
	e.g.Expect(called).To(BeFalse(), "nothing runs before the approval")
	e.approve(approveID, v1.DecisionApprove, "alice", "")
	e.g.Eventually(res, wait).Should(Receive(HavePrefix("noted")))
	e.g.Expect(<-errs).NotTo(HaveOccurred())

	denyID := actionID(t, "notes.write", map[string]any{"text": "deny me"})
	ran.Clear()
	_, errs = call(ctx, "deny me")
	e.g.Eventually(func() []string { return v1.ActionIDs(e.status().AwaitingApproval) }, wait, poll).Should(ContainElement(denyID))
	e.approve(denyID, v1.DecisionDeny, "bob", "not now")
	var denyErr error
	e.g.Eventually(errs, wait).Should(Receive(&denyErr))
	e.g.Expect(denyErr).To(MatchError(agent.ErrApprovalDenied))
	e.g.Expect(agent.IsRefusal(denyErr)).To(BeTrue())
	e.g.Expect(denyErr.Error()).To(ContainSubstring("denied by bob: not now"))
	_, called = ran.Load("notes.write")
	e.g.Expect(called).To(BeFalse())

	// The same call again waits for a decision of its own: an approval
	// admits one call (issue 25 item 8).
	res, errs = call(ctx, "approve me")
	e.g.Eventually(func() []string { return v1.ActionIDs(e.status().AwaitingApproval) }, wait, poll).Should(ConsistOf(approveID))
	e.g.Consistently(res, 200*time.Millisecond).ShouldNot(Receive(), "the spent approval admits nothing more")
	e.approve(approveID, v1.DecisionApprove, "alice", "")
	e.g.Eventually(res, wait).Should(Receive(ContainSubstring("noted")))
	e.g.Expect(<-errs).NotTo(HaveOccurred())

	// A wait ends with the caller's context.
	waitCtx, cancel := context.WithCancel(ctx)
	_, errs = call(waitCtx, "never answered")
	neverID := actionID(t, "notes.write", map[string]any{"text": "never answered"})
	e.g.Eventually(func() []string { return v1.ActionIDs(e.status().AwaitingApproval) }, wait, poll).Should(ConsistOf(neverID))
	cancel()
	e.g.Eventually(errs, wait).Should(Receive(MatchError(context.Canceled)))

	// An urgent fact writes the coalesced ones too.
	e.g.Expect(a.ProposeFinish(ctx)).To(Succeed())
	s := e.status()
	e.g.Expect(s.AwaitingApproval).To(BeEmpty(), "answered and abandoned requests are withdrawn")
	e.g.Expect(faultCount(s, v1.FaultScopeAgent, "ApprovalDenied")).To(Equal(int64(1)))
	e.g.Expect(s.Usage.ToolCalls).To(Equal(int64(2)), "only the approved calls were dispatched")
}

// A request beyond the grant (absolute counters of this attempt's usage) is
// refused by the gateway with ErrGrantExhausted and counted as a fault,
// never a failure. Model requests the gateway dispatched count, failed
// ones too; tokens are what the provider reported.
func TestGrantRefusal(t *testing.T) {
	e := newEnv(t, func(ra *v1.RunAttempt) {
		ra.Spec.Grant = v1.Grant{ModelRequests: 3, ToolCalls: 1, Tokens: ptr.To[int64](1000)}
	})
	var ran sync.Map
	a := e.newAgent(func(a *agent.Agent) { e.tools(a, &ran) })
	ctx := e.start(a)

	_, err := a.CallTool(ctx, "http.get", map[string]any{"url": "1"})
	e.g.Expect(err).NotTo(HaveOccurred())
	ran.Clear()
	_, err = a.CallTool(ctx, "http.get", map[string]any{"url": "2"})
	e.g.Expect(err).To(MatchError(agent.ErrGrantExhausted))
	e.g.Expect(err.Error()).To(ContainSubstring("1/1 tool calls"))
	var refusal *agent.Refusal
	e.g.Expect(errors.As(err, &refusal)).To(BeTrue())
	e.g.Expect(refusal.Call).To(Equal("http.get"))
	_, called := ran.Load("http.get")
	e.g.Expect(called).To(BeFalse())

	// A failed model request still counts: each try is a request.
	_, err = ask(ctx, a, gatewaytest.Model, &upstream.Turn{Error: &upstream.Error{
		Status: 429, Code: "RateLimited", Message: "slow down", Retryable: true}})
	var fe *agent.FaultError
	e.g.Expect(errors.As(err, &fe)).To(BeTrue(), "a provider error is a FaultError: %v", err)
	e.g.Expect(fe.Kind).To(Equal("RateLimited"))
	e.g.Expect(fe.Retryable).To(BeTrue())
	e.g.Expect(agent.IsRefusal(err)).To(BeFalse())

	out, err := ask(ctx, a, gatewaytest.Model, &upstream.Turn{Say: "ok", Tokens: 950})
	e.g.Expect(err).NotTo(HaveOccurred())
	e.g.Expect(out.Usage.TotalTokens).To(Equal(int64(950)))

	// The token grant (1000) leaves less than this request's prompt could use.
	_, err = ask(ctx, a, gatewaytest.Model, &upstream.Turn{Say: "never", Tokens: 1})
	e.g.Expect(err).To(MatchError(agent.ErrGrantExhausted))
	e.g.Expect(errors.As(err, &refusal)).To(BeTrue())
	e.g.Expect(refusal.Call).To(Equal("model/" + gatewaytest.Model))
	e.g.Expect(err.Error()).To(ContainSubstring("950/1000 tokens"))

	// More tokens granted: the request count (3) is the limit now.
	e.UpdateSpec(func(s *v1.RunAttemptSpec) { s.Grant.Tokens = ptr.To[int64](100000) })
	_, err = ask(ctx, a, gatewaytest.Model, &upstream.Turn{Say: "ok", Tokens: 10})
	e.g.Expect(err).NotTo(HaveOccurred())
	_, err = ask(ctx, a, gatewaytest.Model, &upstream.Turn{Say: "never", Tokens: 1})
	e.g.Expect(err).To(MatchError(agent.ErrGrantExhausted))
	e.g.Expect(err.Error()).To(ContainSubstring("3/3 model requests"))

	e.g.Expect(e.Upstream.Requests.Load()).To(Equal(int64(3)), "refused requests never reach the provider")
	e.g.Eventually(e.usage, wait, poll).Should(Equal(v1.Usage{ModelRequests: 3, ToolCalls: 1, Tokens: 960}), "refusals are not usage")
	e.g.Eventually(e.faults(v1.FaultScopeAgent, "GrantExhausted"), wait, poll).Should(Equal(int64(3)))
	f, ok := findFault(e.status(), v1.FaultScopeProvider, "RateLimited")
	e.g.Expect(ok).To(BeTrue())
	e.g.Expect(f.Count).To(Equal(int64(1)))
	e.g.Expect(f.Retryable).To(BeTrue())
	e.g.Expect(f.Escalated).To(BeFalse())
}

// The same call is the same fingerprint whatever the Go representation of
// its arguments; another context is another call.
func TestFingerprintsCounted(t *testing.T) {
	e := newEnv(t, nil)
	a := e.newAgent(func(a *agent.Agent) { e.tools(a, nil) })
	ctx := e.start(a)
	type args struct {
		URL   string `json:"url"`
		Depth int    `json:"depth"`
	}
	for range 2 {
		_, err := a.CallTool(ctx, "http.get", args{URL: "https://x.org/?a=1&b=<2>", Depth: 2})
		e.g.Expect(err).NotTo(HaveOccurred())
	}
	_, err := a.CallTool(ctx, "http.get", map[string]any{"depth": 2, "url": "https://x.org/?a=1&b=<2>"})
	e.g.Expect(err).NotTo(HaveOccurred())
	_, err = a.CallTool(ctx, "http.get", map[string]any{"depth": 2, "url": "https://x.org/?a=1&b=<2>"}, agent.WithContext("section:intro"))
	e.g.Expect(err).NotTo(HaveOccurred())
	fp := fingerprint(t, "http.get", map[string]any{"url": "https://x.org/?a=1&b=<2>", "depth": 2}, "")
	e.g.Eventually(func() []v1.CallCount { return e.status().Calls }, wait, poll).Should(ConsistOf(
		v1.CallCount{Tool: "http.get", Fingerprint: fp, Count: 3},
		v1.CallCount{Tool: "http.get", Fingerprint: fingerprint(t, "http.get", map[string]any{"url": "https://x.org/?a=1&b=<2>", "depth": 2}, "section:intro"), Count: 1},
	))

	// Arguments that are not a JSON object are refused before anything is sent.
	_, err = a.CallTool(ctx, "http.get", []string{"not", "an", "object"})
	e.g.Expect(err).To(MatchError(ContainSubstring("arguments must be a JSON object")))
	e.g.Eventually(e.faults(v1.FaultScopeTool, "InvalidArguments"), wait, poll).Should(Equal(int64(1)))
}

// While the API server is unreachable, side effects are blocked (their
// write-ahead record cannot be persisted: the gateway answers 503 and the
// tool never runs) and facts are kept; once it is back they are written.
func TestSideEffectsBlockedWhileAPIServerDown(t *testing.T) {
	e := newEnv(t, nil)
	var ran sync.Map
	a := e.newAgent(func(a *agent.Agent) { e.tools(a, &ran) })
	ctx := e.start(a)
	e.g.Eventually(e.Writes.Load, wait, poll).Should(BeNumerically(">", 0))

	e.Down.Store(true)
	_, err := a.Step(ctx, true)
	e.g.Expect(err).NotTo(HaveOccurred(), "a coalesced fact is accepted")
	e.g.Expect(a.RecordAdvice(ctx, "reviewer", "NeedsChanges")).To(Succeed())

	callCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	_, err = a.CallTool(callCtx, "notes.write", map[string]any{"text": "x"})
	var ge *agent.GatewayError
	e.g.Expect(errors.As(err, &ge)).To(BeTrue(), "the gateway answers, the agent does not wait forever: %v", err)
	e.g.Expect(ge.Status).To(Equal(503))
	e.g.Expect(ge.Code).To(Equal(gatewayapi.CodeNotPersisted))
	e.g.Expect(ge.Message).To(ContainSubstring("must not be dispatched"))
	_, called := ran.Load("notes.write")
	e.g.Expect(called).To(BeFalse(), "no side effect without its write-ahead record")

	// Reads (effect None) go on: nothing needs persisting first.
	_, err = a.CallTool(ctx, "http.get", map[string]any{"url": "u"})
	e.g.Expect(err).NotTo(HaveOccurred())

	e.Down.Store(false)
	e.g.Eventually(func(g Gomega) {
		s := e.status()
		g.Expect(s.Steps).To(Equal(int64(1)))
		g.Expect(s.Advice).To(ConsistOf(v1.Advice{Source: "reviewer", Kind: "NeedsChanges", Count: 1}))
		g.Expect(s.InFlight).To(BeEmpty(), "the undispatched call's record is withdrawn")
		g.Expect(s.Usage.ToolCalls).To(Equal(int64(2)), "usage is counted conservatively from the admission on")
	}, wait, poll).Should(Succeed())
}

// While Finalizing only output work is admitted: research tools are
// refused, report.publish runs from the reserve, and model requests are
// served from the reserve until it is used up.
func TestFinalizing(t *testing.T) {
	args := map[string]any{"section": "summary", "content": "..."}
	e := preApproved(newEnv(t, nil), actionID(t, "report.publish", args))
	var ran sync.Map
	a := e.newAgent(func(a *agent.Agent) { e.tools(a, &ran) })
	ctx := e.start(a)
	e.g.Expect(a.Finalizing()).To(BeFalse())

	e.UpdateSpec(func(s *v1.RunAttemptSpec) {
		s.RunPhase = v1.PhaseFinalizing
		s.Grant = v1.Grant{ModelRequests: 1, ToolCalls: 1, FinalizeOnly: true}
		s.Mode = v1.ModeFull
	})
	e.g.Eventually(a.FinalizingStarted(), wait).Should(BeClosed())
	e.g.Expect(a.Finalizing()).To(BeTrue())
	e.g.Expect(a.Attempt().Finalizing).To(BeTrue())

	_, err := a.CallTool(ctx, "http.get", map[string]any{"url": "u"})
	e.g.Expect(err).To(MatchError(agent.ErrFinalizeOnly))
	e.g.Expect(err.Error()).To(ContainSubstring(`"http.get" is research`))
	_, err = a.CallTool(ctx, "notes.write", map[string]any{"text": "t"})
	e.g.Expect(err).To(MatchError(agent.ErrFinalizeOnly))
	e.g.Expect(agent.IsRefusal(err)).To(BeTrue())
	_, called := ran.Load("notes.write")
	e.g.Expect(called).To(BeFalse())

	// report.publish is High risk: confirmed even in Full (approved up front).
	res, err := a.CallTool(ctx, "report.publish", args)
	e.g.Expect(err).NotTo(HaveOccurred())
	e.g.Expect(res).To(HavePrefix(`published section "summary"`), "the gateway published it")
	_, err = ask(ctx, a, gatewaytest.Model, &upstream.Turn{Say: "the summary", Tokens: 5})
	e.g.Expect(err).NotTo(HaveOccurred(), "the model door serves the reserve")

	// The reserve used up: refused as exhausted (at once: the grant is
	// checked before any approval is awaited).
	bounded, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	_, err = a.CallTool(bounded, "report.publish", map[string]any{"section": "more", "content": "..."})
	e.g.Expect(err).To(MatchError(agent.ErrGrantExhausted))
	e.g.Expect(err.Error()).To(ContainSubstring("reserve is used up"))
	_, err = ask(ctx, a, gatewaytest.Model, nil)
	e.g.Expect(err).To(MatchError(agent.ErrGrantExhausted))

	e.g.Eventually(e.faults(v1.FaultScopeAgent, "FinalizeOnly"), wait, poll).Should(Equal(int64(2)))
	e.g.Eventually(e.faults(v1.FaultScopeAgent, "GrantExhausted"), wait, poll).Should(Equal(int64(2)))
	e.g.Expect(e.usage()).To(Equal(v1.Usage{ModelRequests: 1, ToolCalls: 1, Tokens: 5}))
}

// The phase, grant and mode are checked at the moment of admission: a call
// held up by an interceptor (a rate limit) while the run started
// Finalizing, or one awaiting approval while the mode was lowered, is not
// dispatched.
func TestAdmissionTimeChecks(t *testing.T) {
	e := newEnv(t, func(ra *v1.RunAttempt) {
		ra.Spec.Mode = v1.ModeEdit
		ra.Spec.Policy.ResolvedChain = []v1.ResolvedInterceptor{pre("rate_limit", v1.PostureDeny, true)}
	})
	var ran sync.Map
	a := e.newAgent(func(a *agent.Agent) {
		e.tools(a, &ran)
		e.g.Expect(a.Register("rate_limit", agent.Interceptor{Pre: func(_ context.Context, c *agent.Call) error {
			if c.StringArg("url") == "slow" {
				// While this call waits for its turn, the operator moves the run to Finalizing.
				e.UpdateSpec(func(s *v1.RunAttemptSpec) { s.RunPhase = v1.PhaseFinalizing; s.Grant.FinalizeOnly = true })
			}
			return nil
		}})).To(Succeed())
	})
	ctx := e.start(a)

	_, err := a.CallTool(ctx, "http.get", map[string]any{"url": "slow"})
	e.g.Expect(err).To(MatchError(agent.ErrFinalizeOnly))
	_, called := ran.Load("http.get")
	e.g.Expect(called).To(BeFalse())
	e.UpdateSpec(func(s *v1.RunAttemptSpec) { s.RunPhase, s.Grant.FinalizeOnly = v1.PhaseRunning, false })

	// Approved, but the session's mode was lowered to ReadOnly meanwhile.
	args := map[string]any{"text": "x"}
	done := make(chan error, 1)
	go func() {
		_, err := a.CallTool(ctx, "notes.write", args)
		done <- err
	}()
	id := actionID(t, "notes.write", args)
	e.g.Eventually(func() []string { return v1.ActionIDs(e.status().AwaitingApproval) }, wait, poll).Should(ConsistOf(id))
	e.UpdateSpec(func(s *v1.RunAttemptSpec) {
		s.Mode = v1.ModeReadOnly
		s.Approvals = append(s.Approvals, gatewaytest.Decision(id, v1.DecisionApprove))
	})
	e.g.Eventually(done, wait).Should(Receive(And(
		MatchError(agent.ErrPermissionDenied), MatchError(ContainSubstring("the mode changed while the call waited")))))
	_, called = ran.Load("notes.write")
	e.g.Expect(called).To(BeFalse())
	e.g.Eventually(e.usage, wait, poll).Should(Equal(v1.Usage{}), "nothing was dispatched")
}

// Terminated, superseded or deleted: the attempt's context is cancelled
// with a cause that says stop cleanly, and nothing more is served.
func TestStopCancelsContext(t *testing.T) {
	for _, tc := range []struct {
		name  string
		do    func(e *env)
		cause error
	}{
		{"terminated", func(e *env) {
			e.UpdateSpec(func(s *v1.RunAttemptSpec) { s.RunPhase = v1.PhaseTerminated; s.Grant = v1.Grant{} })
		}, agent.ErrTerminated},
		{"superseded", func(e *env) {
			e.UpdateSpec(func(s *v1.RunAttemptSpec) { s.Superseded = true })
		}, agent.ErrSuperseded},
		{"deleted", func(e *env) {
			e.g.Expect(e.Client.Delete(context.Background(), e.Get())).To(Succeed())
			e.Gateway.Forget(e.Key)
		}, agent.ErrTerminated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			a := e.newAgent(func(a *agent.Agent) { e.tools(a, nil) })
			ctx := e.start(a)
			tc.do(e)
			e.g.Eventually(ctx.Done(), wait).Should(BeClosed())
			e.g.Expect(context.Cause(ctx)).To(MatchError(tc.cause))
			e.g.Expect(agent.Stopped(context.Cause(ctx))).To(BeTrue())
			_, err := a.CallTool(context.Background(), "http.get", nil)
			e.g.Expect(agent.Stopped(err)).To(BeTrue(), "no new work once stopped")

			// The gateway serves the attempt nothing more, whatever the SDK does.
			resp := e.Do("POST", gatewayapi.PathPrefix+"/self/toolcalls", gatewaytest.Token, []byte(`{"tool":"http.get"}`))
			_ = resp.Body.Close()
			e.g.Expect(resp.StatusCode).To(Equal(409))

			closeCtx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			e.g.Expect(a.Close(closeCtx)).To(Succeed())
		})
	}

	// Started on an attempt that is already over: the context is cancelled at once.
	e := newEnv(t, func(ra *v1.RunAttempt) { ra.Spec.RunPhase = v1.PhaseTerminated })
	ctx := e.start(e.newAgent(nil))
	e.g.Expect(context.Cause(ctx)).To(MatchError(agent.ErrTerminated))
}

// A settlement the gateway could not make durable at once is written later;
// if the run ends before the SDK's retry, the retry meets Terminated — and
// Settle reads the attempt's facts instead of losing what was settled.
func TestSettleThatLandedBeforeTheRunEnded(t *testing.T) {
	e := newEnv(t, nil)
	a := e.newAgent(func(a *agent.Agent) { e.tools(a, nil) })
	ctx := e.start(a)
	_, err := a.PlanReport(ctx, []string{"summary"})
	e.g.Expect(err).NotTo(HaveOccurred())

	e.Down.Store(true)
	type result struct {
		s   gatewayapi.SettleResponse
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := a.Settle(context.WithoutCancel(ctx))
		done <- result{s, err}
	}()
	e.g.Consistently(done, 300*time.Millisecond).ShouldNot(Receive(), "not_persisted: the SDK asks again")
	e.Down.Store(false)
	// The operator's part: the settled fact lands, the run ends.
	e.g.Eventually(func() bool { return e.status().Publication.Settled }, wait, poll).Should(BeTrue())
	e.UpdateSpec(func(s *v1.RunAttemptSpec) { s.RunPhase = v1.PhaseTerminated })
	var r result
	e.g.Eventually(done, 10*time.Second).Should(Receive(&r))
	e.g.Expect(r.err).NotTo(HaveOccurred())
	e.g.Expect(r.s.Settlement).To(Equal(v1.SettlementNone))
	e.g.Expect(r.s.BlocksPlanned).To(Equal(int32(1)))
}

// A fail-closed interceptor that cannot check a call for now (TokenReview
// with the API server away) makes the gateway dispatch nothing and answer
// interceptor_unavailable for a call with a side effect (such a call is not
// held: report.publish writes): the agent asks again, and the call runs once
// when the check works again — an API server restart is not a refused call.
func TestAToolCallIsAskedAgainWhileAnInterceptorIsUnavailable(t *testing.T) {
	args := map[string]any{"section": "summary", "content": "..."}
	var reviews atomic.Int32
	reg := chain.Builtins(chain.BuiltinOptions{
		Authenticator: chain.AuthenticatorFunc(func(context.Context, string) (string, error) {
			if reviews.Add(1) <= 3 {
				return "", errors.New("TokenReview: dial tcp 127.0.0.1:6443: connect: connection refused")
			}
			return "system:serviceaccount:team:agentrun-runner/survey-1", nil
		}),
	})
	e := newEnvWith(t, gatewaytest.Options{Interceptors: reg, Mutate: func(ra *v1.RunAttempt) {
		ra.Spec.Policy.ResolvedChain = []v1.ResolvedInterceptor{{Name: "auth", Class: v1.ClassSecurity,
			Phase: v1.InterceptorPre, Priority: 10, OnError: v1.PostureDeny, Veto: true}}
	}})
	preApproved(e, actionID(t, "report.publish", args))
	var ran sync.Map
	a := e.newAgent(func(a *agent.Agent) {
		e.tools(a, &ran)
		// The agent's own link of the chain passes; the gateway's auth is the one that fails.
		e.g.Expect(a.Register("auth", agent.Interceptor{Pre: func(context.Context, *agent.Call) error { return nil }})).To(Succeed())
	})
	ctx := e.start(a)
	res, err := a.CallTool(ctx, "report.publish", args)
	e.g.Expect(err).NotTo(HaveOccurred())
	e.g.Expect(res).To(HavePrefix(`published section "summary"`))
	e.g.Expect(reviews.Load()).To(BeNumerically(">=", 4), "asked again until the check worked")
	e.g.Eventually(func() int64 { return e.Status().Usage.ToolCalls }, wait, poll).Should(Equal(int64(1)), "dispatched and counted once")
	e.g.Expect(e.Status().Faults).To(ContainElement(And(HaveField("Kind", "InterceptorFailed"), HaveField("Count", BeEquivalentTo(3)))))
}
