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

package chain_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync/atomic"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/chain"
)

// The engine runs exactly the resolved order (never sorting again): Pre and
// Around before dispatch, releases after it, then Post.
func TestRunOrderIsTheResolvedChain(t *testing.T) {
	g := NewWithT(t)
	var r recorder
	// Deliberately not in priority order: the resolved chain is the truth.
	second := pre("second", v1alpha1.ClassObservability, v1alpha1.PostureAllow, false)
	second.Priority = 90
	first := pre("first", v1alpha1.ClassSecurity, v1alpha1.PostureDeny, true)
	first.Priority = 10
	resolved := []v1alpha1.ResolvedInterceptor{second, first, around("outer", v1alpha1.PostureDeny),
		around("inner", v1alpha1.PostureDeny), post("p2", v1alpha1.ClassSecurity, v1alpha1.PostureDeny, false),
		post("p1", v1alpha1.ClassObservability, v1alpha1.PostureAllow, false)}
	c, _ := newChain(t, resolved, chain.Registry{
		"first": r.pre("first", nil), "second": r.pre("second", nil),
		"outer": r.around("outer"), "inner": r.around("inner"),
		"p1": r.post("p1", nil), "p2": r.post("p2", nil),
	})

	out, ref := c.Run(context.Background(), toolCall(), r.dispatch("done"))
	g.Expect(ref).NotTo(HaveOccurred())
	g.Expect(out.Result).To(Equal("done"))
	g.Expect(r.got()).To(Equal([]string{"second", "first", "outer:acquire", "inner:acquire", "dispatch",
		"inner:release", "outer:release", "p2", "p1"}))
	g.Expect(c.Len()).To(Equal(6))
}

// Each interceptor's own posture decides what its error or panic means:
// fail closed refuses naming the interceptor and its error; fail open
// continues and counts. Nothing is decided chain-wide.
func TestPosture(t *testing.T) {
	unavailable := errors.New("token review unavailable: connection refused")
	boom := func() error { panic("boom") }
	fail := func() error { return unavailable }
	tests := map[string]struct {
		phase   v1alpha1.InterceptorPhase
		class   v1alpha1.InterceptorClass
		onError v1alpha1.Posture
		hook    func() error

		wantDispatch bool
		wantRefusal  string // "" for no refusal
		wantOutcome  string // the calls_total outcome label
	}{
		"Pre Security fail closed refuses before dispatch": {
			phase: v1alpha1.InterceptorPre, class: v1alpha1.ClassSecurity, onError: v1alpha1.PostureDeny, hook: fail,
			wantRefusal: "interceptor x (Security, fail closed) failed: token review unavailable: connection refused",
			wantOutcome: chain.OutcomeError,
		},
		"Pre Observability fail open continues": {
			phase: v1alpha1.InterceptorPre, class: v1alpha1.ClassObservability, onError: v1alpha1.PostureAllow, hook: fail,
			wantDispatch: true, wantOutcome: chain.OutcomeError,
		},
		"Pre panic under Deny refuses": {
			phase: v1alpha1.InterceptorPre, class: v1alpha1.ClassSecurity, onError: v1alpha1.PostureDeny, hook: boom,
			wantRefusal: "interceptor x (Security, fail closed) failed: panicked: boom", wantOutcome: chain.OutcomePanic,
		},
		"Pre panic under Allow continues": {
			phase: v1alpha1.InterceptorPre, class: v1alpha1.ClassObservability, onError: v1alpha1.PostureAllow, hook: boom,
			wantDispatch: true, wantOutcome: chain.OutcomePanic,
		},
		// (A Security entry without a posture never runs at all: New refuses
		// it, TestNewRefusesASecurityEntryThatFailsOpen.)
		"no posture at all fails closed": {
			phase: v1alpha1.InterceptorPre, class: v1alpha1.ClassResource, onError: "", hook: fail,
			wantRefusal: "interceptor x (Resource, fail closed) failed", wantOutcome: chain.OutcomeError,
		},
		"Around fail closed refuses before dispatch": {
			phase: v1alpha1.InterceptorAround, class: v1alpha1.ClassResource, onError: v1alpha1.PostureDeny, hook: fail,
			wantRefusal: "interceptor x (Resource, fail closed) failed: token review", wantOutcome: chain.OutcomeError,
		},
		"Around fail open continues": {
			phase: v1alpha1.InterceptorAround, class: v1alpha1.ClassObservability, onError: v1alpha1.PostureAllow, hook: boom,
			wantDispatch: true, wantOutcome: chain.OutcomePanic,
		},
		"Post fail closed withholds the result of a call that ran": {
			phase: v1alpha1.InterceptorPost, class: v1alpha1.ClassSecurity, onError: v1alpha1.PostureDeny, hook: fail,
			wantDispatch: true, wantOutcome: chain.OutcomeError,
			wantRefusal: "interceptor x (Security, fail closed) failed: the call ran but its result is withheld: " +
				"token review unavailable",
		},
		"Post panic under Deny withholds": {
			phase: v1alpha1.InterceptorPost, class: v1alpha1.ClassSecurity, onError: v1alpha1.PostureDeny, hook: boom,
			wantDispatch: true, wantOutcome: chain.OutcomePanic,
			wantRefusal: "the call ran but its result is withheld: panicked: boom",
		},
		"Post fail open returns the result": {
			phase: v1alpha1.InterceptorPost, class: v1alpha1.ClassObservability, onError: v1alpha1.PostureAllow, hook: fail,
			wantDispatch: true, wantOutcome: chain.OutcomeError,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			var impl chain.Impl
			switch tc.phase {
			case v1alpha1.InterceptorPre:
				impl.Pre = func(context.Context, *chain.Call) error { return tc.hook() }
			case v1alpha1.InterceptorAround:
				impl.Around = func(context.Context, *chain.Call) (func(chain.Outcome), error) { return nil, tc.hook() }
			case v1alpha1.InterceptorPost:
				impl.Post = func(context.Context, *chain.Call, *chain.Outcome) error { return tc.hook() }
			}
			var r recorder
			resolved := []v1alpha1.ResolvedInterceptor{entry("x", tc.class, tc.phase, tc.onError),
				post("after", v1alpha1.ClassObservability, v1alpha1.PostureAllow, false)}
			c, pr := newChain(t, resolved, chain.Registry{"x": impl, "after": r.post("after", nil)})

			out, ref := c.Run(context.Background(), toolCall(), r.dispatch("the result"))

			g.Expect(r.got()).To(Equal(expectedEvents(tc.wantDispatch, tc.wantRefusal == "")))
			g.Expect(metric(g, pr, "agentrun_gateway_interceptor_calls_total",
				"interceptor", "x", "outcome", tc.wantOutcome)).To(Equal(1.0))
			if tc.wantRefusal == "" {
				g.Expect(ref).NotTo(HaveOccurred())
				g.Expect(out.Result).To(Equal("the result"))
				g.Expect(metric(g, pr, "agentrun_gateway_interceptor_denials_total", "interceptor", "x")).To(BeZero())
				return
			}
			g.Expect(ref).To(HaveOccurred())
			g.Expect(ref.Error()).To(ContainSubstring(tc.wantRefusal))
			g.Expect(ref.Interceptor).To(Equal("x"))
			g.Expect(ref.Phase).To(Equal(tc.phase))
			g.Expect(ref.Veto).To(BeFalse())
			g.Expect(ref.Dispatched).To(Equal(tc.wantDispatch))
			g.Expect(out).To(Equal(chain.Outcome{}), "a refused call yields no result")
			g.Expect(metric(g, pr, "agentrun_gateway_interceptor_denials_total", "interceptor", "x")).To(Equal(1.0))
		})
	}
}

func expectedEvents(dispatched, completed bool) []string {
	var events []string
	if dispatched {
		events = append(events, "dispatch")
	}
	if completed {
		events = append(events, "after")
	}
	return events
}

// A Refusal unwraps to the interceptor's error.
func TestRefusalUnwraps(t *testing.T) {
	g := NewWithT(t)
	errDown := errors.New("down")
	c, _ := newChain(t, []v1alpha1.ResolvedInterceptor{pre("x", v1alpha1.ClassSecurity, v1alpha1.PostureDeny, true)},
		chain.Registry{"x": {Pre: func(context.Context, *chain.Call) error { return fmt.Errorf("wrapped: %w", errDown) }}})
	_, ref := c.Run(context.Background(), toolCall(), func(context.Context, *chain.Call) chain.Outcome { return chain.Outcome{} })
	g.Expect(ref).To(MatchError(errDown))
}

// A veto refuses the call only from an interceptor with veto rights.
func TestVeto(t *testing.T) {
	veto := func(context.Context, *chain.Call) error { return chain.Veto("host not on the allow list") }
	tests := map[string]struct {
		entry        v1alpha1.ResolvedInterceptor
		impl         chain.Impl
		wantRefusal  bool
		wantOutcome  string
		wantDispatch bool
	}{
		"Pre with veto rights refuses": {
			entry: pre("x", v1alpha1.ClassSecurity, v1alpha1.PostureDeny, true), impl: chain.Impl{Pre: veto},
			wantRefusal: true, wantOutcome: chain.OutcomeVeto,
		},
		"a fail-open Pre with veto rights refuses too": {
			entry: pre("x", v1alpha1.ClassResource, v1alpha1.PostureAllow, true), impl: chain.Impl{Pre: veto},
			wantRefusal: true, wantOutcome: chain.OutcomeVeto,
		},
		"Pre without veto rights is ignored": {
			entry: pre("x", v1alpha1.ClassSecurity, v1alpha1.PostureDeny, false), impl: chain.Impl{Pre: veto},
			wantDispatch: true, wantOutcome: chain.OutcomeVetoIgnored,
		},
		"Post cannot veto": {
			entry: func() v1alpha1.ResolvedInterceptor {
				e := post("x", v1alpha1.ClassSecurity, v1alpha1.PostureDeny, false)
				e.Veto = true
				return e
			}(),
			impl:         chain.Impl{Post: func(ctx context.Context, c *chain.Call, _ *chain.Outcome) error { return veto(ctx, c) }},
			wantDispatch: true, wantOutcome: chain.OutcomeVetoIgnored,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			var r recorder
			c, pr := newChain(t, []v1alpha1.ResolvedInterceptor{tc.entry}, chain.Registry{"x": tc.impl})
			_, ref := c.Run(context.Background(), toolCall(), r.dispatch("ok"))
			g.Expect(r.got()).To(Equal(expectedEvents(tc.wantDispatch, false)))
			g.Expect(metric(g, pr, "agentrun_gateway_interceptor_calls_total",
				"interceptor", "x", "outcome", tc.wantOutcome)).To(Equal(1.0))
			if !tc.wantRefusal {
				g.Expect(ref).NotTo(HaveOccurred())
				return
			}
			g.Expect(ref).To(HaveOccurred())
			g.Expect(ref.Veto).To(BeTrue())
			g.Expect(ref.Error()).To(Equal("vetoed by x: host not on the allow list"))
			_, isVeto := errors.AsType[*chain.VetoError](ref)
			g.Expect(isVeto).To(BeTrue())
			g.Expect(metric(g, pr, "agentrun_gateway_interceptor_denials_total", "interceptor", "x")).To(Equal(1.0))
		})
	}
}

// Around releases run once each, in reverse order, on every path: success,
// refusal by a later interceptor, a panicking dispatch, a withheld result,
// and a panicking release does not stop the others.
func TestAroundReleasesOnEveryPath(t *testing.T) {
	deny := func(name string, phase v1alpha1.InterceptorPhase) v1alpha1.ResolvedInterceptor {
		return entry(name, v1alpha1.ClassSecurity, phase, v1alpha1.PostureDeny)
	}
	errNo := errors.New("no")
	tests := map[string]struct {
		later         []v1alpha1.ResolvedInterceptor
		laterImpl     chain.Registry
		dispatchPanic bool
		wantEvents    []string
		wantOutcome   string // the outcome the releases saw ("" for an error)
	}{
		"success": {
			wantEvents:  []string{"a:acquire", "b:acquire", "dispatch", "b:release", "a:release"},
			wantOutcome: "ok",
		},
		"refused by a later Around": {
			later: []v1alpha1.ResolvedInterceptor{deny("c", v1alpha1.InterceptorAround)},
			laterImpl: chain.Registry{"c": {Around: func(context.Context, *chain.Call) (func(chain.Outcome), error) {
				return nil, errNo
			}}},
			wantEvents: []string{"a:acquire", "b:acquire", "b:release", "a:release"},
		},
		"a later Around panics": {
			later: []v1alpha1.ResolvedInterceptor{deny("c", v1alpha1.InterceptorAround)},
			laterImpl: chain.Registry{"c": {Around: func(context.Context, *chain.Call) (func(chain.Outcome), error) {
				panic("acquire exploded")
			}}},
			wantEvents: []string{"a:acquire", "b:acquire", "b:release", "a:release"},
		},
		"dispatch panics": {
			dispatchPanic: true,
			wantEvents:    []string{"a:acquire", "b:acquire", "dispatch", "b:release", "a:release"},
		},
		"Post withholds (released before Post)": {
			later:       []v1alpha1.ResolvedInterceptor{deny("p", v1alpha1.InterceptorPost)},
			laterImpl:   chain.Registry{"p": {Post: func(context.Context, *chain.Call, *chain.Outcome) error { return errNo }}},
			wantEvents:  []string{"a:acquire", "b:acquire", "dispatch", "b:release", "a:release"},
			wantOutcome: "ok",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			var r recorder
			var seen []string
			reg := chain.Registry{"a": r.around("a"), "b": {Around: func(context.Context, *chain.Call) (func(chain.Outcome), error) {
				r.add("b:acquire")
				return func(o chain.Outcome) {
					r.add("b:release")
					if o.Err == nil {
						seen = append(seen, o.Result)
					}
					panic("a release that panics does not stop the others")
				}, nil
			}}}
			maps.Copy(reg, tc.laterImpl)
			resolved := append([]v1alpha1.ResolvedInterceptor{around("a", v1alpha1.PostureDeny),
				around("b", v1alpha1.PostureDeny)}, tc.later...)
			c, _ := newChain(t, resolved, reg)
			dispatch := r.dispatch("ok")
			if tc.dispatchPanic {
				dispatch = func(context.Context, *chain.Call) chain.Outcome { r.add("dispatch"); panic("dispatch exploded") }
			}
			func() {
				defer func() {
					v := recover()
					g.Expect(v != nil).To(Equal(tc.dispatchPanic), "only a dispatch panic propagates: %v", v)
				}()
				_, _ = c.Run(context.Background(), toolCall(), dispatch)
			}()
			g.Expect(r.got()).To(Equal(tc.wantEvents))
			if tc.wantOutcome != "" {
				g.Expect(seen).To(Equal([]string{tc.wantOutcome}))
			} else {
				g.Expect(seen).To(BeEmpty(), "a call that did not complete is released with an error")
			}
		})
	}
}

// New refuses a chain naming every interceptor the registry does not
// implement (or implements without the hook its phase needs).
func TestNewNamesMissingImplementations(t *testing.T) {
	g := NewWithT(t)
	resolved := []v1alpha1.ResolvedInterceptor{
		pre("auth", v1alpha1.ClassSecurity, v1alpha1.PostureDeny, true),
		pre("geo_fence", v1alpha1.ClassSecurity, v1alpha1.PostureDeny, true),
		post("audit", v1alpha1.ClassObservability, v1alpha1.PostureAllow, true),
	}
	reg := chain.Registry{
		"auth":  {Pre: func(context.Context, *chain.Call) error { return nil }},
		"audit": {Pre: func(context.Context, *chain.Call) error { return nil }}, // no Post hook
	}
	c, err := chain.New(resolved, reg, nil)
	g.Expect(c).To(BeNil())
	g.Expect(err).To(MatchError(chain.ErrNotImplemented))
	g.Expect(err.Error()).To(ContainSubstring("geo_fence (Pre, Security)"))
	g.Expect(err.Error()).To(ContainSubstring("audit (Post, Observability: implemented without a Post hook)"))
	g.Expect(err.Error()).NotTo(ContainSubstring("auth "))

	_, err = chain.New(sampleChain(), chain.Builtins(chain.BuiltinOptions{}), nil)
	g.Expect(err).NotTo(HaveOccurred(), "the builtins implement the sample policy's chain")
}

// New refuses a chain with a Security-class entry that fails open, even one
// the registry implements: a snapshot saying onError: Allow for a Security
// check (a tampered RuntimePolicy status) never runs.
func TestNewRefusesASecurityEntryThatFailsOpen(t *testing.T) {
	g := NewWithT(t)
	impl := func(context.Context, *chain.Call) error { return nil }
	postImpl := func(context.Context, *chain.Call, *chain.Outcome) error { return nil }
	reg := chain.Registry{"auth": {Pre: impl}, "dlp": {Pre: impl}, "audit": {Post: postImpl}}
	resolved := []v1alpha1.ResolvedInterceptor{
		pre("auth", v1alpha1.ClassSecurity, v1alpha1.PostureAllow, true),
		pre("dlp", v1alpha1.ClassSecurity, "", true),
		post("audit", v1alpha1.ClassObservability, v1alpha1.PostureAllow, true),
	}
	c, err := chain.New(resolved, reg, nil)
	g.Expect(c).To(BeNil())
	g.Expect(err).To(MatchError(chain.ErrSecurityFailsOpen))
	g.Expect(err.Error()).To(And(ContainSubstring(`auth (Pre, onError: "Allow")`), ContainSubstring(`dlp (Pre, onError: "")`),
		ContainSubstring("must have onError: Deny"), ContainSubstring("fail closed")))
	g.Expect(err.Error()).NotTo(ContainSubstring("audit"), "a fail-open Observability entry is allowed")

	resolved[0].OnError, resolved[1].OnError = v1alpha1.PostureDeny, v1alpha1.PostureDeny
	_, err = chain.New(resolved, reg, nil)
	g.Expect(err).NotTo(HaveOccurred(), "the same chain failing closed runs")

	// A Security entry left to the agent (the webhook refuses it; a
	// tampered snapshot may say it) would not hold a call either.
	resolved[0].Enforcement = v1alpha1.EnforcementAgent
	_, err = chain.New(resolved, reg, nil)
	g.Expect(err).To(MatchError(chain.ErrSecurityFailsOpen))
	g.Expect(err.Error()).To(ContainSubstring("auth (Pre, enforcement: Agent)"))
}

// An empty (or nil) chain dispatches directly and allocates nothing.
func TestEmptyChainDispatchesDirectly(t *testing.T) {
	g := NewWithT(t)
	c, err := chain.New(nil, nil, nil)
	g.Expect(err).NotTo(HaveOccurred())
	call := toolCall()
	dispatch := func(context.Context, *chain.Call) chain.Outcome { return chain.Outcome{Result: "r"} }
	ctx := context.Background()
	for _, c := range []*chain.Chain{c, nil} {
		out, ref := c.Run(ctx, call, dispatch)
		g.Expect(ref).NotTo(HaveOccurred())
		g.Expect(out.Result).To(Equal("r"))
		g.Expect(testing.AllocsPerRun(100, func() { _, _ = c.Run(ctx, call, dispatch) })).To(BeZero())
		c.Close()
	}
}

// The chain is safe for concurrent use: run with -race.
func TestConcurrentRuns(t *testing.T) {
	g := NewWithT(t)
	var w flakyWriter
	reg := chain.Builtins(chain.BuiltinOptions{
		Authenticator: chain.AuthenticatorFunc(func(_ context.Context, tok string) (string, error) {
			return "pod/" + tok, nil
		}),
		RateLimit: 1e9, Burst: 1e6, Audit: &w,
	})
	var inFlight, maxInFlight atomic.Int64
	reg["inflight"] = chain.Impl{Around: func(context.Context, *chain.Call) (func(chain.Outcome), error) {
		n := inFlight.Add(1)
		for m := maxInFlight.Load(); n > m && !maxInFlight.CompareAndSwap(m, n); m = maxInFlight.Load() {
		}
		return func(chain.Outcome) { inFlight.Add(-1) }, nil
	}}
	resolved := sampleChain()
	resolved = append(resolved[:2:2], append([]v1alpha1.ResolvedInterceptor{around("inflight", v1alpha1.PostureDeny)},
		resolved[2:]...)...)
	c, _ := newChain(t, resolved, reg)

	const workers, calls = 16, 100
	errs := make(chan error, workers)
	for i := range workers {
		go func() {
			for j := range calls {
				call := toolCall()
				call.Token = fmt.Sprintf("w%d", i)
				call.Arguments = map[string]any{"api_key": "k", "n": j}
				out, ref := c.Run(context.Background(), call, func(_ context.Context, call *chain.Call) chain.Outcome {
					return chain.Outcome{Result: "sk-abcdefghijklmnopqrstuvwxyz " + call.Identity}
				})
				if ref != nil {
					errs <- ref
					return
				}
				if strings.Contains(out.Result, "sk-") {
					errs <- fmt.Errorf("not redacted: %q", out.Result)
					return
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		g.Expect(<-errs).NotTo(HaveOccurred())
	}
	g.Expect(inFlight.Load()).To(BeZero())
	g.Expect(maxInFlight.Load()).To(BeNumerically(">=", 1))
	g.Eventually(func() int { return strings.Count(w.String(), "\n") }).WithTimeout(eventually).WithPolling(poll).
		Should(Equal(workers*calls), "audit's writer writes every line")
	g.Expect(w.String()).NotTo(ContainSubstring(`"api_key":"k"`))
}
