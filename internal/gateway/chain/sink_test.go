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
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/chain"
)

// auditOnly is a chain of audit alone, with the given posture.
func auditOnly(onError v1alpha1.Posture, buffered bool) []v1alpha1.ResolvedInterceptor {
	return []v1alpha1.ResolvedInterceptor{post(chain.NameAudit, v1alpha1.ClassObservability, onError, buffered)}
}

// Source 003's incident 3: 10 calls of 10 different runs against an audit
// writer that hangs. Each call returns while the writer is still blocked
// (before, every call waited for the writer under one gateway-wide lock);
// once it is released, every line is written.
func TestAuditCallDoesNotWaitForTheSink(t *testing.T) {
	g := NewWithT(t)
	w := newGateWriter(t)
	c, pr := newChain(t, auditOnly(v1alpha1.PostureAllow, true), chain.Builtins(chain.BuiltinOptions{Audit: w}))

	const runs = 10
	returned := make(chan string, runs)
	for i := range runs {
		go func() {
			call := toolCall()
			call.Run = fmt.Sprintf("run-%d", i)
			_, ref := c.Run(context.Background(), call, dispatchResult("ok"))
			if ref != nil {
				returned <- ref.Error()
				return
			}
			returned <- call.Run
		}()
	}
	var got []string
	for range runs {
		select {
		case r := <-returned:
			got = append(got, r)
		case <-time.After(eventually):
			t.Fatalf("only %d of %d calls returned while the audit writer was blocked: calls wait for the sink", len(got), runs)
		}
	}
	g.Expect(got).To(HaveLen(runs))
	g.Expect(got).To(HaveEach(HavePrefix("run-")), "every call is served")
	g.Eventually(w.entered).WithTimeout(eventually).Should(Receive(), "the writer is blocked in a Write")
	g.Expect(strings.Count(w.String(), "\n")).To(BeZero(), "no line was written yet: the calls did not wait for it")
	g.Expect(metric(g, pr, "agentrun_gateway_interceptor_calls_total", "interceptor", "audit", "outcome", "ok")).To(Equal(float64(runs)))

	w.release()
	g.Eventually(func(g Gomega) {
		var seen []string
		for _, rec := range auditLines(g, w.String()) {
			seen = append(seen, rec.Run)
		}
		slices.Sort(seen)
		g.Expect(seen).To(HaveLen(runs))
		g.Expect(seen).To(ContainElements("run-0", "run-9"))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}

// fillQueue blocks audit's writer in a Write of a first line and fills its
// queue (size 1) with a second: the next call finds the queue full.
func fillQueue(g Gomega, c *chain.Chain, w *gateWriter) {
	_, ref := c.Run(context.Background(), toolCall(), dispatchResult("ok"))
	g.Expect(ref).NotTo(HaveOccurred())
	g.Eventually(w.entered).WithTimeout(eventually).Should(Receive(), "the writer took the first line and blocks")
	_, ref = c.Run(context.Background(), toolCall(), dispatchResult("ok"))
	g.Expect(ref).NotTo(HaveOccurred(), "the second line waits in the queue")
}

// Fail open (onError Allow, not buffered): a full queue admits the call,
// counts the line in agentrun_gateway_interceptor_queue_full_total and
// drops it.
func TestAuditQueueFullFailOpenCountsAndAdmits(t *testing.T) {
	g := NewWithT(t)
	w := newGateWriter(t)
	c, pr := newChain(t, auditOnly(v1alpha1.PostureAllow, false), chain.Builtins(chain.BuiltinOptions{Audit: w, AuditQueue: 1}))
	fillQueue(g, c, w)

	for range 3 {
		out, ref := c.Run(context.Background(), toolCall(), dispatchResult("served"))
		g.Expect(ref).NotTo(HaveOccurred(), "audit fails open")
		g.Expect(out.Result).To(Equal("served"))
	}
	g.Expect(metric(g, pr, "agentrun_gateway_interceptor_queue_full_total", "interceptor", "audit")).To(Equal(3.0))
	g.Expect(metric(g, pr, "agentrun_gateway_interceptor_calls_total", "interceptor", "audit", "outcome", "error")).To(Equal(3.0))
	g.Expect(metric(g, pr, "agentrun_gateway_interceptor_denials_total", "interceptor", "audit")).To(BeZero())
	g.Expect(c.Pending()).To(BeZero(), "not buffered: dropped")

	w.release()
	g.Eventually(func() int { return strings.Count(w.String(), "\n") }).WithTimeout(eventually).WithPolling(poll).
		Should(Equal(2), "the two queued lines are written; the three dropped are not")
}

// Fail closed (onError Deny): a full queue refuses the call, naming audit
// and the full queue (the call ran: its result is withheld).
func TestAuditQueueFullFailClosedRefuses(t *testing.T) {
	g := NewWithT(t)
	w := newGateWriter(t)
	c, pr := newChain(t, auditOnly(v1alpha1.PostureDeny, false), chain.Builtins(chain.BuiltinOptions{Audit: w, AuditQueue: 1}))
	fillQueue(g, c, w)

	_, ref := c.Run(context.Background(), toolCall(), dispatchResult("served"))
	g.Expect(ref).To(HaveOccurred())
	g.Expect(ref.Interceptor).To(Equal(chain.NameAudit))
	g.Expect(ref.Dispatched).To(BeTrue())
	g.Expect(errors.Is(ref, chain.ErrQueueFull)).To(BeTrue())
	g.Expect(ref.Error()).To(ContainSubstring("write queue is full"))
	g.Expect(metric(g, pr, "agentrun_gateway_interceptor_queue_full_total", "interceptor", "audit")).To(Equal(1.0))
	g.Expect(metric(g, pr, "agentrun_gateway_interceptor_denials_total", "interceptor", "audit")).To(Equal(1.0))
}

// A failing sink keeps what it queued and writes it once it recovers; what
// did not fit in the queue waits in the chain's resend buffer (buffered
// audit): once the sink recovers, no line is lost.
func TestAuditLinesSurviveAFailingSink(t *testing.T) {
	g := NewWithT(t)
	var w flakyWriter
	w.failing.Store(true)
	c, pr := newChain(t, auditOnly(v1alpha1.PostureAllow, true),
		chain.Builtins(chain.BuiltinOptions{Audit: &w, AuditQueue: 2, AuditRetry: time.Millisecond}))

	const calls = 8
	for i := range calls {
		call := toolCall()
		call.Tool = fmt.Sprintf("t%d", i)
		_, ref := c.Run(context.Background(), call, dispatchResult("ok"))
		g.Expect(ref).NotTo(HaveOccurred())
	}
	g.Expect(c.Pending()).To(BeNumerically(">=", calls-3), "what the queue (2) and the writer (1) could not hold is buffered")
	g.Consistently(w.String).WithTimeout(20*time.Millisecond).WithPolling(poll).Should(BeEmpty(), "the sink still fails")

	w.failing.Store(false)
	g.Eventually(func(g Gomega) {
		var tools []string
		for _, rec := range auditLines(g, w.String()) {
			tools = append(tools, rec.Tool)
		}
		slices.Sort(tools)
		g.Expect(tools).To(Equal([]string{"t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7"}), "every line, once")
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Expect(c.Pending()).To(BeZero())
	g.Expect(metric(g, pr, "agentrun_gateway_interceptor_dropped_total", "interceptor", "audit")).To(BeZero())
}

// Registry.Drain writes what is queued before it returns; after it, the
// queue takes no more (a full queue, handled by the posture).
func TestAuditDrain(t *testing.T) {
	g := NewWithT(t)
	w := newGateWriter(t)
	reg := chain.Builtins(chain.BuiltinOptions{Audit: w})
	c, _ := newChain(t, auditOnly(v1alpha1.PostureDeny, false), reg)
	for range 3 {
		_, ref := c.Run(context.Background(), toolCall(), dispatchResult("ok"))
		g.Expect(ref).NotTo(HaveOccurred())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	g.Expect(reg.Drain(ctx)).To(MatchError(ContainSubstring("audit lines not written")), "the writer is blocked")

	w2 := newGateWriter(t)
	reg2 := chain.Builtins(chain.BuiltinOptions{Audit: w2})
	c2, _ := newChain(t, auditOnly(v1alpha1.PostureDeny, false), reg2)
	for range 3 {
		_, ref := c2.Run(context.Background(), toolCall(), dispatchResult("ok"))
		g.Expect(ref).NotTo(HaveOccurred())
	}
	w2.release()
	g.Expect(reg2.Drain(context.Background())).To(Succeed())
	g.Expect(strings.Count(w2.String(), "\n")).To(Equal(3), "every queued line is written before Drain returns")
	_, ref := c2.Run(context.Background(), toolCall(), dispatchResult("ok"))
	g.Expect(ref).To(MatchError(ContainSubstring("the writer has stopped")))
}

// Each hook runs under its entry's timeout (default
// v1alpha1.DefaultInterceptorTimeout): a hook still busy at it fails, and
// its posture decides.
func TestInterceptorTimeout(t *testing.T) {
	g := NewWithT(t)
	var deadlines []time.Duration
	slow := chain.Impl{Pre: func(ctx context.Context, _ *chain.Call) error {
		d, ok := ctx.Deadline()
		if !ok {
			return errors.New("no deadline")
		}
		deadlines = append(deadlines, time.Until(d))
		<-ctx.Done()
		return ctx.Err()
	}}
	reg := chain.Registry{"slow": slow}

	closed := pre("slow", v1alpha1.ClassResource, v1alpha1.PostureDeny, false)
	closed.Timeout = &metav1.Duration{Duration: 20 * time.Millisecond}
	c, pr := newChain(t, []v1alpha1.ResolvedInterceptor{closed}, reg)
	ref := runBounded(t, c)
	g.Expect(ref).To(HaveOccurred())
	g.Expect(ref.Error()).To(Equal("interceptor slow (Resource, fail closed) failed: exceeded its timeout of 20ms: context deadline exceeded"))
	var te *chain.TimeoutError
	g.Expect(errors.As(ref, &te)).To(BeTrue())
	g.Expect(metric(g, pr, "agentrun_gateway_interceptor_denials_total", "interceptor", "slow")).To(Equal(1.0))

	open := pre("slow", v1alpha1.ClassResource, v1alpha1.PostureAllow, false)
	open.Timeout = &metav1.Duration{Duration: 20 * time.Millisecond}
	c2, _ := newChain(t, []v1alpha1.ResolvedInterceptor{open}, reg)
	g.Expect(runBounded(t, c2)).To(Succeed(), "fail open: the call goes on")

	// Without a timeout of its own, the entry gets the default.
	dflt := chain.Registry{"quick": chain.Impl{Pre: func(ctx context.Context, _ *chain.Call) error {
		d, _ := ctx.Deadline()
		deadlines = append(deadlines, time.Until(d))
		return nil
	}}}
	c3, _ := newChain(t, []v1alpha1.ResolvedInterceptor{pre("quick", v1alpha1.ClassResource, v1alpha1.PostureDeny, false)}, dflt)
	g.Expect(runBounded(t, c3)).To(Succeed())
	g.Expect(deadlines).To(HaveLen(3))
	g.Expect(deadlines[2]).To(BeNumerically("~", v1alpha1.DefaultInterceptorTimeout, time.Second))
}

// runBounded runs one call and fails the test if it does not return.
func runBounded(t *testing.T, c *chain.Chain) *chain.Refusal {
	t.Helper()
	done := make(chan *chain.Refusal, 1)
	go func() {
		_, ref := c.Run(context.Background(), toolCall(), dispatchResult("ok"))
		done <- ref
	}()
	select {
	case ref := <-done:
		return ref
	case <-time.After(eventually):
		t.Fatal("the call did not return: the hook ran without a timeout")
		return nil
	}
}

// An entry enforced by the agent is not run by the gateway, whether or not
// the registry implements it; any other entry the registry lacks makes New
// fail.
func TestAgentEnforcedEntriesAreNotRun(t *testing.T) {
	g := NewWithT(t)
	rec := &recorder{}
	reg := chain.Registry{"quota": rec.pre("quota", nil)}
	quota := pre("quota", v1alpha1.ClassResource, v1alpha1.PostureDeny, true)
	quota.Enforcement = v1alpha1.EnforcementAgent
	sdkOnly := pre("sdk-only", v1alpha1.ClassResource, v1alpha1.PostureDeny, true)
	sdkOnly.Enforcement = v1alpha1.EnforcementAgent
	c, _ := newChain(t, []v1alpha1.ResolvedInterceptor{quota, sdkOnly}, reg)
	g.Expect(c.Len()).To(BeZero())
	_, ref := c.Run(context.Background(), toolCall(), rec.dispatch("ok"))
	g.Expect(ref).ToNot(HaveOccurred())
	g.Expect(rec.got()).To(Equal([]string{"dispatch"}))

	sdkOnly.Enforcement = v1alpha1.EnforcementGateway
	_, err := chain.New([]v1alpha1.ResolvedInterceptor{sdkOnly}, reg, nil)
	g.Expect(err).To(MatchError(chain.ErrNotImplemented))
}

// BuiltinPhases is what Builtins implements: admission's list.
func TestBuiltinPhases(t *testing.T) {
	g := NewWithT(t)
	g.Expect(chain.BuiltinPhases()).To(Equal(map[string][]v1alpha1.InterceptorPhase{
		chain.NameAuth:      {v1alpha1.InterceptorPre},
		chain.NameRateLimit: {v1alpha1.InterceptorPre},
		chain.NameRedact:    {v1alpha1.InterceptorPre, v1alpha1.InterceptorPost},
		chain.NameAudit:     {v1alpha1.InterceptorPost},
	}))
}
