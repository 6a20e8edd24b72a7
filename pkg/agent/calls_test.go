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
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"

	v1 "github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/pkg/agent"
	"github.com/agentrun-dev/agentrun/pkg/permission"
)

// The SDK applies the shared permission matrix (pkg/permission) with the
// attempt's current mode: Deny is a local refusal, Allow runs, and a mode
// change on the RunAttempt takes effect at once.
func TestPermissionMatrix(t *testing.T) {
	e := newEnv(t, func(ra *v1.RunAttempt) { ra.Spec.Mode = v1.ModePlan })
	var ran sync.Map
	a := e.newAgent(func(a *agent.Agent) { e.tools(a, &ran) })
	ctx := e.start(a)

	_, err := a.CallTool(ctx, "http.get", map[string]any{"url": "u"})
	e.g.Expect(err).NotTo(HaveOccurred(), "Plan allows effect None")

	_, err = a.CallTool(ctx, "notes.write", map[string]any{"text": "x"})
	e.g.Expect(err).To(MatchError(agent.ErrPermissionDenied))
	want := permission.Evaluate(v1.ModePlan, baseAttempt().Spec.Policy.Tools[1], []string{"notes.write"})
	e.g.Expect(err.Error()).To(ContainSubstring(want.Reason), "the refusal carries the matrix's reason")
	_, called := ran.Load("notes.write")
	e.g.Expect(called).To(BeFalse())

	// The session's mode is raised to Auto: notes.write is autoApproved.
	e.updateSpec(func(s *v1.RunAttemptSpec) { s.Mode = v1.ModeAuto })
	e.g.Eventually(func() v1.PermissionMode { return a.Spec().Mode }, wait, poll).Should(Equal(v1.ModeAuto))
	_, err = a.CallTool(ctx, "notes.write", map[string]any{"text": "x"})
	e.g.Expect(err).NotTo(HaveOccurred())

	// An unknown mode fails closed, like the matrix.
	e.updateSpec(func(s *v1.RunAttemptSpec) { s.Mode = "Sudo" })
	e.g.Eventually(func() v1.PermissionMode { return a.Spec().Mode }, wait, poll).Should(Equal(v1.PermissionMode("Sudo")))
	_, err = a.CallTool(ctx, "http.get", map[string]any{"url": "u2"})
	e.g.Expect(err).To(MatchError(agent.ErrPermissionDenied))

	// A tool outside the catalogue is refused even if the agent registered it.
	e.g.Expect(a.Tools()).To(HaveLen(3))
	_, err = a.CallTool(ctx, "shell.exec", nil)
	e.g.Expect(err).To(MatchError(agent.ErrUnknownTool))

	e.flush(a)
	s := e.status()
	e.g.Expect(faultCount(s, v1.FaultScopeAgent, "PermissionDenied")).To(Equal(int64(2)))
	e.g.Expect(faultCount(s, v1.FaultScopeAgent, "UnknownTool")).To(Equal(int64(1)))
}

// A request beyond the grant (absolute counters of this attempt's usage) is
// refused locally with ErrGrantExhausted and reported as a fault, never a failure.
func TestGrantRefusal(t *testing.T) {
	e := newEnv(t, func(ra *v1.RunAttempt) {
		ra.Spec.Grant = v1.Grant{ModelRequests: 2, ToolCalls: 1, Tokens: ptr.To[int64](100)}
	})
	a := e.newAgent(func(a *agent.Agent) { e.tools(a, nil) })
	ctx := e.start(a)

	_, err := a.CallTool(ctx, "http.get", map[string]any{"url": "1"})
	e.g.Expect(err).NotTo(HaveOccurred())
	_, err = a.CallTool(ctx, "http.get", map[string]any{"url": "2"})
	e.g.Expect(err).To(MatchError(agent.ErrGrantExhausted))
	e.g.Expect(err.Error()).To(ContainSubstring("1 of 1 granted tool calls used"))
	e.g.Expect(agent.IsRefusal(err)).To(BeTrue())

	// A failed model request still counts: each retry is a request.
	err = a.ModelRequest(ctx, "m", func(context.Context) (int64, error) {
		return 0, agent.Failure("RateLimited", true, errors.New("429"))
	})
	e.g.Expect(err).To(MatchError("429"))
	e.g.Expect(a.ModelRequest(ctx, "m", func(context.Context) (int64, error) { return 120, nil })).To(Succeed())
	err = a.ModelRequest(ctx, "m", func(context.Context) (int64, error) { return 1, nil })
	e.g.Expect(err).To(MatchError(agent.ErrGrantExhausted))

	// More model requests granted, but the token grant (100) is used up (120).
	e.updateSpec(func(s *v1.RunAttemptSpec) { s.Grant.ModelRequests = 5 })
	e.g.Eventually(func() int64 { return a.Spec().Grant.ModelRequests }, wait, poll).Should(Equal(int64(5)))
	err = a.ModelRequest(ctx, "m", func(context.Context) (int64, error) { return 1, nil })
	e.g.Expect(err).To(MatchError(ContainSubstring("120 of 100 granted tokens used")))

	e.flush(a)
	s := e.status()
	e.g.Expect(s.Usage).To(Equal(v1.Usage{ModelRequests: 2, ToolCalls: 1, Tokens: 120}), "refusals are not usage")
	e.g.Expect(faultCount(s, v1.FaultScopeAgent, "GrantExhausted")).To(Equal(int64(3)))
	f, _ := findFault(s, v1.FaultScopeProvider, "RateLimited")
	e.g.Expect(f.Retryable).To(BeTrue())
	e.g.Expect(f.Escalated).To(BeFalse())
}

// Confirm → the action id is written to status.awaitingApproval at once,
// and the call waits until spec.approvals answers: Approve runs it, Deny is
// a recorded local refusal. Waiting is ctx-cancellable.
func TestApprovalWait(t *testing.T) {
	e := newEnv(t, func(ra *v1.RunAttempt) { ra.Spec.Mode = v1.ModeEdit })
	var ran sync.Map
	a := e.newAgent(func(a *agent.Agent) { e.tools(a, &ran) })
	ctx := e.start(a)

	call := func(text string) (chan string, chan error) {
		res, errs := make(chan string, 1), make(chan error, 1)
		go func() {
			r, err := a.CallTool(ctx, "notes.write", map[string]any{"text": text})
			res <- r
			errs <- err
		}()
		return res, errs
	}
	fp, err := agent.Fingerprint("notes.write", map[string]any{"text": "approve me"}, "")
	e.g.Expect(err).NotTo(HaveOccurred())
	approveID := agent.ActionID("notes.write", fp)

	res, errs := call("approve me")
	// No clock step: awaiting approval is written at once.
	e.g.Eventually(func() []string { return e.status().AwaitingApproval }, wait, poll).Should(ConsistOf(approveID))
	_, called := ran.Load("notes.write")
	e.g.Expect(called).To(BeFalse(), "nothing runs before the approval")
	e.updateSpec(func(s *v1.RunAttemptSpec) {
		s.Approvals = append(s.Approvals, v1.Approval{ActionID: approveID, Decision: v1.DecisionApprove, Approver: "alice"})
	})
	e.g.Eventually(res, wait).Should(Receive(Equal("noted")))
	e.g.Expect(<-errs).NotTo(HaveOccurred())

	fp, _ = agent.Fingerprint("notes.write", map[string]any{"text": "deny me"}, "")
	denyID := agent.ActionID("notes.write", fp)
	ran.Clear()
	_, errs = call("deny me")
	e.g.Eventually(func() []string { return e.status().AwaitingApproval }, wait, poll).Should(ContainElement(denyID))
	e.updateSpec(func(s *v1.RunAttemptSpec) {
		s.Approvals = append(s.Approvals, v1.Approval{ActionID: denyID, Decision: v1.DecisionDeny, Approver: "bob", Comment: "not now"})
	})
	var denyErr error
	e.g.Eventually(errs, wait).Should(Receive(&denyErr))
	e.g.Expect(denyErr).To(MatchError(agent.ErrApprovalDenied))
	e.g.Expect(denyErr.Error()).To(ContainSubstring("denied by bob: not now"))
	_, called = ran.Load("notes.write")
	e.g.Expect(called).To(BeFalse())

	// The same call again: the recorded answer applies, no new wait.
	_, err = a.CallTool(ctx, "notes.write", map[string]any{"text": "approve me"})
	e.g.Expect(err).NotTo(HaveOccurred())

	// Waiting ends with the caller's context.
	waitCtx, cancel := context.WithCancel(ctx)
	errs2 := make(chan error, 1)
	go func() {
		_, err := a.CallTool(waitCtx, "notes.write", map[string]any{"text": "never answered"})
		errs2 <- err
	}()
	e.g.Eventually(func() int { return len(e.status().AwaitingApproval) }, wait, poll).Should(Equal(1))
	cancel()
	e.g.Eventually(errs2, wait).Should(Receive(MatchError(context.Canceled)))

	e.flush(a)
	s := e.status()
	e.g.Expect(s.AwaitingApproval).To(BeEmpty(), "answered and abandoned requests are withdrawn")
	e.g.Expect(faultCount(s, v1.FaultScopeAgent, "ApprovalDenied")).To(Equal(int64(1)))
}

// The write-ahead record of a side-effecting call is on the API server
// before the effect runs, and removed with the outcome after.
func TestWriteAheadOrdering(t *testing.T) {
	e := newEnv(t, nil)
	type seen struct {
		id       string
		inFlight []v1.InFlightEffect
	}
	observed := make(chan seen, 1)
	a := e.newAgent(func(a *agent.Agent) {
		e.g.Expect(a.RegisterTool(agent.Tool{Name: "notes.write", Run: func(ctx context.Context, c *agent.Call) (string, error) {
			// The effect reads the API server's view of its own attempt.
			observed <- seen{id: c.ID, inFlight: e.status().InFlight}
			return "noted", nil
		}})).To(Succeed())
		e.g.Expect(a.RegisterTool(agent.Tool{Name: "http.get", Run: func(ctx context.Context, c *agent.Call) (string, error) {
			return "page", nil
		}})).To(Succeed())
	})
	ctx := e.start(a)

	_, err := a.CallTool(ctx, "notes.write", map[string]any{"text": "finding"}, agent.WithContext("section:intro"))
	e.g.Expect(err).NotTo(HaveOccurred())
	got := <-observed
	fp, _ := agent.Fingerprint("notes.write", map[string]any{"text": "finding"}, "section:intro")
	e.g.Expect(got.inFlight).To(HaveLen(1))
	e.g.Expect(got.inFlight[0].ID).To(Equal(got.id))
	e.g.Expect(got.inFlight[0].Tool).To(Equal("notes.write"))
	e.g.Expect(got.inFlight[0].Effect).To(Equal(v1.EffectWrite))
	e.g.Expect(got.inFlight[0].IdempotencyKey).To(Equal(agent.IdempotencyKey(testRun, fp)), "idempotent per the catalogue")
	e.g.Expect(got.inFlight[0].StartedAt.Time).To(BeTemporally("==", t0))

	// Removed with the outcome.
	e.g.Expect(a.Status().InFlight).To(BeEmpty())
	e.flush(a)
	s := e.status()
	e.g.Expect(s.InFlight).To(BeEmpty())
	e.g.Expect(s.Calls).To(ConsistOf(v1.CallCount{Tool: "notes.write", Fingerprint: fp, Count: 1}))

	// A read-only tool needs no write-ahead: it is not written at once.
	before := e.writes.Load()
	_, err = a.CallTool(ctx, "http.get", map[string]any{"url": "u"})
	e.g.Expect(err).NotTo(HaveOccurred())
	e.g.Expect(e.writes.Load()).To(Equal(before))
}

// While the API server is unreachable, side effects are blocked (their
// write-ahead cannot be persisted) and facts are kept, not dropped; once it
// is back the facts are written.
func TestUnreachableBlocksSideEffectsKeepsFacts(t *testing.T) {
	e := newEnv(t, nil)
	var ran sync.Map
	a := e.newAgent(func(a *agent.Agent) { e.tools(a, &ran) })
	ctx := e.start(a)

	e.down.Store(true)
	a.Step(true)
	a.RecordAdvice("reviewer", "NeedsChanged")
	callCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err := a.CallTool(callCtx, "notes.write", map[string]any{"text": "x"})
	e.g.Expect(err).To(MatchError(ContainSubstring("was not persisted, so the call was not dispatched")))
	_, called := ran.Load("notes.write")
	e.g.Expect(called).To(BeFalse(), "no side effect without its write-ahead record")
	e.g.Expect(a.LastWriteError()).To(MatchError(ContainSubstring("connection refused")))

	// Reads (effect None) still work locally.
	_, err = a.CallTool(ctx, "http.get", map[string]any{"url": "u"})
	e.g.Expect(err).NotTo(HaveOccurred())

	e.down.Store(false)
	e.flush(a)
	s := e.status()
	e.g.Expect(s.Steps).To(Equal(int64(1)))
	e.g.Expect(s.Advice).To(ConsistOf(v1.Advice{Source: "reviewer", Kind: "NeedsChanged", Count: 1}))
	e.g.Expect(s.InFlight).To(BeEmpty(), "the undispatched call's record is withdrawn")
	e.g.Expect(s.Usage.ToolCalls).To(Equal(int64(2)), "usage is counted conservatively from the write-ahead on")
}

// In Finalizing only output work runs: research tools (effect None) are
// refused, publication tools run from the reserve.
func TestFinalizing(t *testing.T) {
	e := newEnv(t, nil)
	var ran sync.Map
	a := e.newAgent(func(a *agent.Agent) { e.tools(a, &ran) })
	ctx := e.start(a)
	e.g.Expect(a.Finalizing()).To(BeFalse())

	e.updateSpec(func(s *v1.RunAttemptSpec) {
		s.RunPhase = v1.PhaseFinalizing
		s.Grant = v1.Grant{ModelRequests: 12, ToolCalls: 3, FinalizeOnly: true}
		s.Mode = v1.ModeFull
	})
	e.g.Eventually(a.FinalizingStarted(), wait).Should(BeClosed())
	e.g.Expect(a.Finalizing()).To(BeTrue())

	_, err := a.CallTool(ctx, "http.get", map[string]any{"url": "u"})
	e.g.Expect(err).To(MatchError(agent.ErrFinalizeOnly))
	e.g.Expect(err.Error()).To(ContainSubstring(`"http.get" is not an output tool`))
	_, err = a.CallTool(ctx, "notes.write", map[string]any{"text": "t"})
	e.g.Expect(err).To(MatchError(agent.ErrFinalizeOnly))

	// report.publish is High risk: confirmed even in Full; approve it up front.
	args := map[string]any{"section": "summary", "content": "..."}
	fp, _ := agent.Fingerprint("report.publish", args, "")
	e.updateSpec(func(s *v1.RunAttemptSpec) {
		s.Approvals = []v1.Approval{{ActionID: agent.ActionID("report.publish", fp), Decision: v1.DecisionApprove}}
	})
	e.g.Eventually(func() bool { _, ok := a.ApprovalFor(agent.ActionID("report.publish", fp)); return ok }, wait, poll).Should(BeTrue())
	res, err := a.CallTool(ctx, "report.publish", args)
	e.g.Expect(err).NotTo(HaveOccurred())
	e.g.Expect(res).To(Equal("published summary"))

	// Model requests for output run from the reserve; research requests do not.
	e.g.Expect(a.ModelRequest(ctx, "m", func(context.Context) (int64, error) { return 1, nil }, agent.ForOutput())).To(Succeed())
	err = a.ModelRequest(ctx, "m", func(context.Context) (int64, error) { return 1, nil })
	e.g.Expect(err).To(MatchError(agent.ErrFinalizeOnly))

	e.flush(a)
	e.g.Expect(faultCount(e.status(), v1.FaultScopeAgent, "FinalizeOnly")).To(Equal(int64(3)))
	e.g.Expect(e.status().Usage.ModelRequests).To(Equal(int64(1)))
}

// The phase and grant are checked again at the moment of dispatch: a call
// held up by an interceptor (a rate limit) while the run started
// Finalizing is not dispatched.
func TestDispatchTimeChecks(t *testing.T) {
	e := newEnv(t, withChain(pre("rate_limit", v1.PostureDeny, true)))
	var ran sync.Map
	var a *agent.Agent
	a = e.newAgent(func(ag *agent.Agent) {
		e.tools(ag, &ran)
		e.g.Expect(ag.Register("rate_limit", agent.Interceptor{Pre: func(ctx context.Context, c *agent.Call) error {
			if c.Name == "http.get" || c.Name == "research-model" {
				// While this call waits for its turn, the operator moves the run to Finalizing.
				e.updateSpec(func(s *v1.RunAttemptSpec) {
					s.RunPhase = v1.PhaseFinalizing
					s.Grant.FinalizeOnly = true
				})
				e.g.Eventually(a.Finalizing, wait, poll).Should(BeTrue())
			}
			return nil
		}})).To(Succeed())
	})
	ctx := e.start(a)

	_, err := a.CallTool(ctx, "http.get", map[string]any{"url": "u"})
	e.g.Expect(err).To(MatchError(agent.ErrFinalizeOnly))
	e.g.Expect(err.Error()).To(ContainSubstring("before the call was dispatched"))
	_, called := ran.Load("http.get")
	e.g.Expect(called).To(BeFalse())

	e.updateSpec(func(s *v1.RunAttemptSpec) { s.RunPhase, s.Grant.FinalizeOnly = v1.PhaseRunning, false })
	e.g.Eventually(a.Finalizing, wait, poll).Should(BeFalse())
	err = a.ModelRequest(ctx, "research-model", func(context.Context) (int64, error) { return 1, nil })
	e.g.Expect(err).To(MatchError(agent.ErrFinalizeOnly))
	e.g.Expect(err.Error()).To(ContainSubstring("before the call was dispatched"))
	e.g.Expect(a.Status().Usage).To(Equal(v1.Usage{}), "nothing was dispatched")
}
