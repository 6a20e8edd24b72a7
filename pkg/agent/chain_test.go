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

	. "github.com/onsi/gomega"

	v1 "github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
	"github.com/agentrun-dev/agentrun/internal/upstream"
	"github.com/agentrun-dev/agentrun/pkg/agent"
)

func withChain(chain ...v1.ResolvedInterceptor) func(*v1.RunAttempt) {
	return func(ra *v1.RunAttempt) { ra.Spec.Policy.ResolvedChain = chain }
}

func pre(name string, onError v1.Posture, veto bool) v1.ResolvedInterceptor {
	return v1.ResolvedInterceptor{Name: name, Class: v1.ClassSecurity, Phase: v1.InterceptorPre, OnError: onError, Veto: veto}
}

func around(name string, onError v1.Posture) v1.ResolvedInterceptor {
	return v1.ResolvedInterceptor{Name: name, Class: v1.ClassResource, Phase: v1.InterceptorAround, OnError: onError}
}

func post(name string, onError v1.Posture, buffered bool) v1.ResolvedInterceptor {
	return v1.ResolvedInterceptor{Name: name, Class: v1.ClassObservability, Phase: v1.InterceptorPost, OnError: onError, Buffered: buffered}
}

// A chain entry the agent did not register: Start refuses, naming it, and
// reports why as an escalated fault.
func TestStartRefusesUnregisteredInterceptor(t *testing.T) {
	e := newEnv(t, withChain(pre("auth", v1.PostureDeny, true), post("audit", v1.PostureAllow, true)))
	a := e.newAgent(func(a *agent.Agent) {
		e.g.Expect(a.Register("auth", agent.Interceptor{Pre: func(context.Context, *agent.Call) error { return nil }})).To(Succeed())
	})
	_, err := a.Start(context.Background())
	e.g.Expect(err).To(MatchError(agent.ErrUnregisteredInterceptor))
	e.g.Expect(err.Error()).To(ContainSubstring(`interceptor "audit"`))
	e.g.Expect(err.Error()).To(ContainSubstring(`RuntimePolicy "p"`))

	// An escalation is durable before the gateway answers: no waiting.
	f, ok := findFault(e.status(), v1.FaultScopeAgent, "UnregisteredInterceptor")
	e.g.Expect(ok).To(BeTrue())
	e.g.Expect(f.Escalated).To(BeTrue())
	e.g.Expect(f.LastMessage).To(ContainSubstring("audit"))
	_, err = a.CallTool(context.Background(), "http.get", nil)
	e.g.Expect(err).To(MatchError(agent.ErrNotStarted), "an agent that refused to start makes no calls")

	// Registered, but without the hook its phase needs: refused as well.
	e2 := newEnv(t, withChain(post("audit", v1.PostureAllow, false)))
	a2 := e2.newAgent(func(a *agent.Agent) {
		e2.g.Expect(a.Register("audit", agent.Interceptor{Pre: func(context.Context, *agent.Call) error { return nil }})).To(Succeed())
	})
	_, err = a2.Start(context.Background())
	e2.g.Expect(err).To(MatchError(ContainSubstring("without a Post hook")))
}

// The executor applies exactly the resolved order (it never sorts again),
// and a fail-closed (Deny) interceptor that errors denies the call naming
// itself and short-circuits the rest of the chain.
func TestChainOrderAndDenyPosture(t *testing.T) {
	// Deliberately not in priority order: the resolved chain is the truth.
	second := pre("second", v1.PostureAllow, false)
	second.Priority = 90
	first := pre("first", v1.PostureDeny, true)
	first.Priority = 10
	e := newEnv(t, withChain(second, first, post("after", v1.PostureAllow, false)))

	var mu sync.Mutex
	var order []string
	failFirst := atomic.Bool{}
	record := func(name string) { mu.Lock(); order = append(order, name); mu.Unlock() }
	var ran sync.Map
	a := e.newAgent(func(a *agent.Agent) {
		e.tools(a, &ran)
		e.g.Expect(a.Register("second", agent.Interceptor{Pre: func(context.Context, *agent.Call) error { record("second"); return nil }})).To(Succeed())
		e.g.Expect(a.Register("first", agent.Interceptor{Pre: func(context.Context, *agent.Call) error {
			record("first")
			if failFirst.Load() {
				return errors.New("identity provider unreachable")
			}
			return nil
		}})).To(Succeed())
		e.g.Expect(a.Register("after", agent.Interceptor{Post: func(context.Context, *agent.Call, *agent.Outcome) error { record("after"); return nil }})).To(Succeed())
	})
	ctx := e.start(a)

	_, err := a.CallTool(ctx, "http.get", map[string]any{"url": "https://example.org"})
	e.g.Expect(err).NotTo(HaveOccurred())
	e.g.Expect(order).To(Equal([]string{"second", "first", "after"}))

	order = nil
	failFirst.Store(true)
	ran.Clear()
	_, err = a.CallTool(ctx, "http.get", map[string]any{"url": "https://example.org/2"})
	e.g.Expect(err).To(MatchError(agent.ErrInterceptorDenied))
	var refusal *agent.Refusal
	e.g.Expect(errors.As(err, &refusal)).To(BeTrue())
	e.g.Expect(refusal.Interceptor).To(Equal("first"))
	e.g.Expect(err.Error()).To(ContainSubstring(`interceptor "first"`))
	e.g.Expect(order).To(Equal([]string{"second", "first"}), "the chain stops at the failing Deny interceptor")
	_, called := ran.Load("http.get")
	e.g.Expect(called).To(BeFalse(), "the tool is not dispatched")

	e.g.Eventually(e.faults(v1.FaultScopeHook, "InterceptorDenied"), wait, poll).Should(Equal(int64(1)))
	e.g.Expect(e.usage().ToolCalls).To(Equal(int64(1)), "a denied call never reaches the gateway")
	e.g.Expect(histogramCount(t, a, "first", agent.OutcomeError)).To(Equal(uint64(1)))
	e.g.Expect(histogramCount(t, a, "first", agent.OutcomeOK)).To(Equal(uint64(1)))
}

// A fail-open (Allow) interceptor that errors is logged and counted, and the
// call goes on; a buffered one keeps its failed output and resends it later.
func TestChainAllowPostureContinuesCountsAndBuffers(t *testing.T) {
	e := newEnv(t, withChain(post("log", v1.PostureAllow, false), post("audit", v1.PostureAllow, true)))
	auditDown := atomic.Bool{}
	auditDown.Store(true)
	var audited sync.Map
	var firstID string
	a := e.newAgent(func(a *agent.Agent) {
		e.tools(a, nil)
		e.g.Expect(a.Register("log", agent.Interceptor{Post: func(context.Context, *agent.Call, *agent.Outcome) error {
			return errors.New("log sink full")
		}})).To(Succeed())
		e.g.Expect(a.Register("audit", agent.Interceptor{Post: func(_ context.Context, c *agent.Call, o *agent.Outcome) error {
			if firstID == "" {
				firstID = c.ID
			}
			if auditDown.Load() {
				return errors.New("audit store unavailable")
			}
			audited.Store(c.ID, o.Result)
			return nil
		}})).To(Succeed())
	})
	ctx := e.start(a)

	res, err := a.CallTool(ctx, "http.get", map[string]any{"url": "https://example.org"})
	e.g.Expect(err).NotTo(HaveOccurred(), "fail-open interceptors never deny")
	e.g.Expect(res).To(Equal("page https://example.org"))
	e.g.Expect(histogramCount(t, a, "log", agent.OutcomeError)).To(Equal(uint64(1)))
	e.g.Expect(histogramCount(t, a, "audit", agent.OutcomeError)).To(Equal(uint64(1)))
	e.g.Expect(a.Buffered("audit")).To(Equal(1), "the failed audit record is kept")
	e.g.Expect(a.Buffered("log")).To(Equal(0), "an unbuffered interceptor keeps nothing")
	e.g.Eventually(e.faults(v1.FaultScopeHook, "InterceptorError"), wait, poll).Should(Equal(int64(2)))
	f, _ := findFault(e.status(), v1.FaultScopeHook, "InterceptorError")
	e.g.Expect(f.Retryable).To(BeTrue())
	e.g.Expect(f.Escalated).To(BeFalse())

	// The audit store comes back: the resend loop (every poll interval)
	// delivers the record, with the call the gateway admitted.
	auditDown.Store(false)
	e.g.Eventually(func() int { return a.Buffered("audit") }, wait, poll).Should(Equal(0))
	e.g.Expect(firstID).To(HavePrefix("call-"))
	v, ok := audited.Load(firstID)
	e.g.Expect(ok).To(BeTrue())
	e.g.Expect(v).To(Equal("page https://example.org"))
	e.g.Expect(histogramCount(t, a, "audit", agent.OutcomeResent)).To(Equal(uint64(1)))
}

// Around interceptors release what they hold on every path: success, tool
// error, tool panic, and a later fail-closed interceptor denying the call.
func TestChainAroundReleasesOnEveryPath(t *testing.T) {
	e := newEnv(t, withChain(around("limiter", v1.PostureDeny), around("quota", v1.PostureDeny)))
	var held atomic.Int64
	var releases []agent.Outcome
	var mu sync.Mutex
	quotaFails := atomic.Bool{}
	a := e.newAgent(func(a *agent.Agent) {
		e.g.Expect(a.RegisterTool(agent.Tool{Name: "http.get", Run: func(_ context.Context, c *agent.Call) (string, error) {
			switch c.StringArg("mode") {
			case "error":
				return "", errors.New("connection reset")
			case "panic":
				panic("tool bug")
			}
			return "ok", nil
		}})).To(Succeed())
		e.g.Expect(a.Register("limiter", agent.Interceptor{Around: func(context.Context, *agent.Call) (func(agent.Outcome), error) {
			held.Add(1)
			return func(o agent.Outcome) {
				held.Add(-1)
				mu.Lock()
				releases = append(releases, o)
				mu.Unlock()
			}, nil
		}})).To(Succeed())
		e.g.Expect(a.Register("quota", agent.Interceptor{Around: func(context.Context, *agent.Call) (func(agent.Outcome), error) {
			if quotaFails.Load() {
				return nil, errors.New("quota service down")
			}
			return func(agent.Outcome) {}, nil
		}})).To(Succeed())
	})
	ctx := e.start(a)

	_, err := a.CallTool(ctx, "http.get", map[string]any{"mode": "ok"})
	e.g.Expect(err).NotTo(HaveOccurred())
	e.g.Expect(held.Load()).To(BeZero())

	_, err = a.CallTool(ctx, "http.get", map[string]any{"mode": "error"})
	e.g.Expect(err).To(MatchError("connection reset"))
	e.g.Expect(held.Load()).To(BeZero())

	_, err = a.CallTool(ctx, "http.get", map[string]any{"mode": "panic"})
	e.g.Expect(err).To(MatchError(ContainSubstring("panicked: tool bug")))
	e.g.Expect(held.Load()).To(BeZero())

	quotaFails.Store(true)
	_, err = a.CallTool(ctx, "http.get", map[string]any{"mode": "ok", "n": 2})
	e.g.Expect(err).To(MatchError(agent.ErrInterceptorDenied))
	e.g.Expect(err.Error()).To(ContainSubstring(`"quota"`))
	e.g.Expect(held.Load()).To(BeZero(), "the limiter acquired before quota failed is released")

	mu.Lock()
	defer mu.Unlock()
	e.g.Expect(releases).To(HaveLen(4))
	e.g.Expect(releases[0].Err).NotTo(HaveOccurred())
	e.g.Expect(releases[1].Err).To(MatchError("connection reset"), "release sees the outcome")
	e.g.Expect(releases[2].Err).To(MatchError(ContainSubstring("panicked")))
	e.g.Expect(releases[3].Err).To(HaveOccurred(), "a call that never ran releases with an error outcome")

	// Outcomes are reported to the gateway, which counts the tool faults.
	e.g.Eventually(e.faults(v1.FaultScopeTool, "Panic"), wait, poll).Should(Equal(int64(1)))
	e.g.Eventually(e.faults(v1.FaultScopeTool, "Failed"), wait, poll).Should(Equal(int64(1)))
	e.g.Expect(e.usage().ToolCalls).To(Equal(int64(3)), "the call quota denied never reached the gateway")
}

// A Pre interceptor with veto rights ends the call; one without is ignored.
func TestChainVeto(t *testing.T) {
	e := newEnv(t, withChain(pre("advisor", v1.PostureAllow, false), pre("guard", v1.PostureDeny, true)))
	guardVetoes := atomic.Bool{}
	var ran sync.Map
	a := e.newAgent(func(a *agent.Agent) {
		e.tools(a, &ran)
		e.g.Expect(a.Register("advisor", agent.Interceptor{Pre: func(context.Context, *agent.Call) error {
			return agent.Veto("I would rather not")
		}})).To(Succeed())
		e.g.Expect(a.Register("guard", agent.Interceptor{Pre: func(_ context.Context, c *agent.Call) error {
			if guardVetoes.Load() {
				return agent.Veto("host not allowed")
			}
			return nil
		}})).To(Succeed())
	})
	ctx := e.start(a)

	_, err := a.CallTool(ctx, "http.get", map[string]any{"url": "a"})
	e.g.Expect(err).NotTo(HaveOccurred(), "a veto without veto rights is ignored")
	e.g.Expect(histogramCount(t, a, "advisor", agent.OutcomeVetoIgnored)).To(Equal(uint64(1)))

	guardVetoes.Store(true)
	ran.Clear()
	_, err = a.CallTool(ctx, "http.get", map[string]any{"url": "b"})
	e.g.Expect(err).To(MatchError(agent.ErrVetoed))
	e.g.Expect(err.Error()).To(ContainSubstring(`interceptor "guard" vetoed: host not allowed`))
	_, called := ran.Load("http.get")
	e.g.Expect(called).To(BeFalse())
	e.g.Expect(histogramCount(t, a, "guard", agent.OutcomeVeto)).To(Equal(uint64(1)))
	e.g.Eventually(e.faults(v1.FaultScopeHook, "Vetoed"), wait, poll).Should(Equal(int64(1)))
	e.g.Expect(e.usage().ToolCalls).To(Equal(int64(1)), "the vetoed call never reached the gateway")
}

// Interceptors run around model requests too; a model request made with
// the agent's OpenAI client is counted by the gateway, with the tokens the
// provider reported.
func TestChainAroundModelRequests(t *testing.T) {
	e := newEnv(t, withChain(pre("auth", v1.PostureDeny, true), post("audit", v1.PostureAllow, false)))
	var seen []agent.CallKind
	var outcomes []error
	a := e.newAgent(func(a *agent.Agent) {
		e.g.Expect(a.Register("auth", agent.Interceptor{Pre: func(_ context.Context, c *agent.Call) error {
			seen = append(seen, c.Kind)
			if c.Name == gatewaytest.DegradedModel {
				return errors.New("no credentials for this model")
			}
			return nil
		}})).To(Succeed())
		e.g.Expect(a.Register("audit", agent.Interceptor{Post: func(_ context.Context, _ *agent.Call, o *agent.Outcome) error {
			outcomes = append(outcomes, o.Err)
			return nil
		}})).To(Succeed())
	})
	ctx := e.start(a)
	out, err := ask(ctx, a, gatewaytest.Model, &upstream.Turn{Say: "hello", Tokens: 42})
	e.g.Expect(err).NotTo(HaveOccurred())
	e.g.Expect(out.Choices[0].Message.Content).To(Equal("hello"))
	_, err = ask(ctx, a, gatewaytest.DegradedModel, nil)
	e.g.Expect(err).To(MatchError(agent.ErrInterceptorDenied))
	_, err = ask(ctx, a, "no-such-model", nil)
	e.g.Expect(err).To(HaveOccurred(), "the gateway serves only the policy's models")
	e.g.Expect(seen).To(Equal([]agent.CallKind{agent.KindModel, agent.KindModel, agent.KindModel}))
	e.g.Expect(outcomes).To(HaveLen(2), "Post hooks see the requests that ran")
	e.g.Expect(outcomes[0]).NotTo(HaveOccurred())
	e.g.Expect(outcomes[1]).To(HaveOccurred())
	e.g.Expect(e.Upstream.Requests.Load()).To(Equal(int64(1)), "the denied request never left the pod")
	e.g.Eventually(e.usage, wait, poll).Should(Equal(v1.Usage{ModelRequests: 1, Tokens: 42}))
}
