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
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/gomega"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/chain"
)

// okAuth accepts every token as the identity of pod a.
func okAuth(context.Context, string) (string, error) {
	return "system:serviceaccount:team:runner/pod-a", nil
}

func dispatchResult(result string) func(context.Context, *chain.Call) chain.Outcome {
	return func(context.Context, *chain.Call) chain.Outcome { return chain.Outcome{Result: result} }
}

func auditLines(g Gomega, s string) []chain.AuditRecord {
	var out []chain.AuditRecord
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		var rec chain.AuditRecord
		g.Expect(json.Unmarshal(sc.Bytes(), &rec)).To(Succeed(), "line %q", sc.Text())
		out = append(out, rec)
	}
	return out
}

// The sample policy end to end: auth sets the identity, redact cleans the
// arguments and the result, audit records what redact left, never the token.
func TestSampleChain(t *testing.T) {
	g := NewWithT(t)
	var w flakyWriter
	c, _ := newChain(t, sampleChain(), chain.Builtins(chain.BuiltinOptions{
		Authenticator: chain.AuthenticatorFunc(okAuth), Audit: &w}))
	call := toolCall()
	call.Arguments = map[string]any{"url": "https://example.org", "headers": map[string]any{"Authorization": "Bearer abc.def.ghi"}}
	callersArgs := call.Arguments

	var dispatched map[string]any
	out, ref := c.Run(context.Background(), call, func(_ context.Context, call *chain.Call) chain.Outcome {
		dispatched = call.Arguments
		return chain.Outcome{Result: "the key is sk-proj-0123456789abcdefXYZ"}
	})
	g.Expect(ref).NotTo(HaveOccurred())
	g.Expect(out.Result).To(Equal("the key is [REDACTED]"))
	g.Expect(dispatched).To(HaveKeyWithValue("headers", HaveKeyWithValue("Authorization", "Bearer abc.def.ghi")),
		"redact is Post in the sample: the tool gets its arguments")
	g.Expect(callersArgs).To(HaveKeyWithValue("headers", HaveKeyWithValue("Authorization", "Bearer abc.def.ghi")),
		"the caller's map is not changed")

	g.Eventually(func(g Gomega) { g.Expect(auditLines(g, w.String())).To(HaveLen(1)) }).
		WithTimeout(eventually).WithPolling(poll).Should(Succeed(), "audit's writer writes the line after the call")
	rec := auditLines(g, w.String())[0]
	g.Expect(rec.Identity).To(Equal("system:serviceaccount:team:runner/pod-a"))
	g.Expect(rec.Arguments).To(HaveKeyWithValue("headers", HaveKeyWithValue("Authorization", chain.Redacted)))
	g.Expect(rec).To(And(
		HaveField("Namespace", "team"), HaveField("Run", "r1"), HaveField("Attempt", "r1-1"),
		HaveField("Kind", chain.KindTool), HaveField("Tool", "notes.write"),
		HaveField("Effect", v1alpha1.EffectWrite), HaveField("Risk", v1alpha1.RiskLow),
		HaveField("Outcome", "ok"), HaveField("ResultBytes", len("the key is [REDACTED]"))))
	g.Expect(rec.Time).To(BeTemporally("==", call.Time))
	g.Expect(w.String()).NotTo(ContainSubstring("tok-secret-value"), "the token is never audited")
}

// A buffered interceptor fails open and buffers: a failing writer loses no
// line, the resender delivers them once it works again.
func TestBufferedInterceptorSurvivesAFailingWriter(t *testing.T) {
	g := NewWithT(t)
	var w flakyWriter
	w.failing.Store(true)
	c, pr := newChain(t, sampleChain(), withAudit(chain.Builtins(chain.BuiltinOptions{
		Authenticator: chain.AuthenticatorFunc(okAuth)}), syncAudit(&w)))

	for i := range 3 {
		call := toolCall()
		call.Arguments = map[string]any{"n": i, "password": "hunter2"}
		out, ref := c.Run(context.Background(), call, dispatchResult("ok"))
		g.Expect(ref).NotTo(HaveOccurred(), "audit fails open")
		g.Expect(out.Result).To(Equal("ok"))
	}
	g.Expect(metric(g, pr, "agentrun_gateway_interceptor_calls_total", "interceptor", "audit", "outcome", "error")).To(Equal(3.0))
	g.Expect(metric(g, pr, "agentrun_gateway_interceptor_denials_total", "interceptor", "audit")).To(BeZero())
	g.Expect(c.Pending()).To(Equal(3))
	g.Expect(metric(g, pr, "agentrun_gateway_interceptor_buffered", "interceptor", "audit")).To(Equal(3.0))
	g.Consistently(c.Pending).WithTimeout(20*time.Millisecond).WithPolling(poll).Should(Equal(3),
		"resends keep failing while the writer does")

	w.failing.Store(false)
	g.Eventually(c.Pending).WithTimeout(eventually).WithPolling(poll).Should(BeZero())
	recs := auditLines(g, w.String())
	g.Expect(recs).To(HaveLen(3))
	for _, rec := range recs {
		g.Expect(rec.Arguments).To(HaveKeyWithValue("password", chain.Redacted), "the buffered copy is what redact left")
		g.Expect(rec.Identity).To(Equal("system:serviceaccount:team:runner/pod-a"))
	}
	g.Expect(metric(g, pr, "agentrun_gateway_interceptor_resends_total", "interceptor", "audit")).To(Equal(3.0))
	g.Expect(metric(g, pr, "agentrun_gateway_interceptor_buffered", "interceptor", "audit")).To(BeZero())
	g.Expect(w.String()).NotTo(ContainSubstring("tok-secret-value"), "nor is it kept in the buffer")
}

// The buffer is bounded: beyond it the oldest output is dropped and counted.
// Close makes one last attempt and counts what it could not deliver.
func TestBufferBoundAndClose(t *testing.T) {
	g := NewWithT(t)
	var w flakyWriter
	w.failing.Store(true)
	resolved := []v1alpha1.ResolvedInterceptor{post(chain.NameAudit, v1alpha1.ClassObservability, v1alpha1.PostureAllow, true)}
	c, pr := newChain(t, resolved, withAudit(chain.Builtins(chain.BuiltinOptions{}), syncAudit(&w)), chain.WithBufferLimit(2))
	run := func(tool string) {
		call := toolCall()
		call.Tool = tool
		_, ref := c.Run(context.Background(), call, dispatchResult("ok"))
		g.Expect(ref).NotTo(HaveOccurred())
	}
	for i := range 5 {
		run(fmt.Sprintf("t%d", i))
	}
	g.Expect(c.Pending()).To(Equal(2))
	g.Expect(metric(g, pr, "agentrun_gateway_interceptor_dropped_total", "interceptor", "audit")).To(Equal(3.0))
	g.Expect(metric(g, pr, "agentrun_gateway_interceptor_buffered", "interceptor", "audit")).To(Equal(2.0))

	w.failing.Store(false)
	g.Eventually(c.Pending).WithTimeout(eventually).WithPolling(poll).Should(BeZero())
	var tools []string
	for _, rec := range auditLines(g, w.String()) {
		tools = append(tools, rec.Tool)
	}
	g.Expect(tools).To(Equal([]string{"t3", "t4"}), "the newest are kept, oldest first")

	// Close: one last attempt, then what is left is dropped and counted.
	w.failing.Store(true)
	run("t5")
	c.Close()
	g.Expect(c.Pending()).To(BeZero())
	g.Expect(metric(g, pr, "agentrun_gateway_interceptor_dropped_total", "interceptor", "audit")).To(Equal(4.0))
	g.Expect(metric(g, pr, "agentrun_gateway_interceptor_buffered", "interceptor", "audit")).To(BeZero())
	run("t6") // after Close a failure is dropped at once
	g.Expect(c.Pending()).To(BeZero())
	g.Expect(metric(g, pr, "agentrun_gateway_interceptor_dropped_total", "interceptor", "audit")).To(Equal(5.0))
	c.Close() // idempotent
}

// A buffered copy survives a later change of the caller's arguments.
func TestBufferedCopyIsDeep(t *testing.T) {
	g := NewWithT(t)
	var w flakyWriter
	w.failing.Store(true)
	resolved := []v1alpha1.ResolvedInterceptor{post(chain.NameAudit, v1alpha1.ClassObservability, v1alpha1.PostureAllow, true)}
	c, _ := newChain(t, resolved, withAudit(chain.Builtins(chain.BuiltinOptions{}), syncAudit(&w)))
	nested := map[string]any{"path": "/a"}
	call := toolCall()
	call.Arguments = map[string]any{"file": nested}
	_, ref := c.Run(context.Background(), call, dispatchResult("ok"))
	g.Expect(ref).NotTo(HaveOccurred())
	nested["path"] = "/changed"
	w.failing.Store(false)
	g.Eventually(c.Pending).WithTimeout(eventually).WithPolling(poll).Should(BeZero())
	g.Expect(auditLines(g, w.String())[0].Arguments).To(HaveKeyWithValue("file", HaveKeyWithValue("path", "/a")))
}

// auth with an authenticator that cannot answer refuses every call (fail
// closed), names itself and its error, and counts each denial; a rejected
// token is a veto.
func TestAuth(t *testing.T) {
	g := NewWithT(t)
	var reviews atomic.Int64
	var mode atomic.Value
	mode.Store("down")
	authn := chain.AuthenticatorFunc(func(_ context.Context, tok string) (string, error) {
		reviews.Add(1)
		switch mode.Load() {
		case "down":
			return "", errors.New("token review unavailable: the server is currently unable to handle the request")
		case "reject":
			return "", fmt.Errorf("TokenReview: %w", chain.ErrTokenRejected)
		case "anonymous":
			return "", nil
		}
		return "pod/" + tok[:3], nil
	})
	c, pr := newChain(t, sampleChain(), chain.Builtins(chain.BuiltinOptions{Authenticator: authn, Audit: &flakyWriter{}}))
	var dispatched atomic.Int64
	dispatch := func(context.Context, *chain.Call) chain.Outcome {
		dispatched.Add(1)
		return chain.Outcome{Result: "ok"}
	}

	const n = 25
	for range n {
		_, ref := c.Run(context.Background(), toolCall(), dispatch)
		g.Expect(ref).To(HaveOccurred())
		g.Expect(ref.Interceptor).To(Equal(chain.NameAuth))
		g.Expect(ref.Error()).To(Equal("interceptor auth (Security, fail closed) failed: " +
			"token review unavailable: the server is currently unable to handle the request"))
		g.Expect(errors.Is(ref.Err, chain.ErrUnavailable)).To(BeTrue(), "a TokenReview that could not answer is unavailable for now")
	}
	g.Expect(dispatched.Load()).To(BeZero())
	g.Expect(reviews.Load()).To(Equal(int64(n)))
	g.Expect(metric(g, pr, "agentrun_gateway_interceptor_denials_total", "interceptor", "auth")).To(Equal(float64(n)))
	g.Expect(metric(g, pr, "agentrun_gateway_interceptor_calls_total", "interceptor", "auth", "outcome", "error")).To(Equal(float64(n)))
	g.Expect(metric(g, pr, "agentrun_gateway_interceptor_calls_total",
		"interceptor", "rate_limit", "outcome", "ok")).To(BeZero(), "nothing after auth ran")

	mode.Store("reject")
	_, ref := c.Run(context.Background(), toolCall(), dispatch)
	g.Expect(ref).To(HaveOccurred())
	g.Expect(ref.Veto).To(BeTrue())
	g.Expect(ref.Error()).To(HavePrefix("vetoed by auth: the caller's token is not accepted"))

	mode.Store("anonymous")
	_, ref = c.Run(context.Background(), toolCall(), dispatch)
	g.Expect(ref).To(MatchError(ContainSubstring("returned no identity")))

	call := toolCall()
	call.Token = ""
	_, ref = c.Run(context.Background(), call, dispatch)
	g.Expect(ref).To(MatchError(ContainSubstring("vetoed by auth: the call carries no bearer token")))

	mode.Store("up")
	call = toolCall()
	_, ref = c.Run(context.Background(), call, dispatch)
	g.Expect(ref).NotTo(HaveOccurred())
	g.Expect(call.Identity).To(Equal("pod/tok"))
	g.Expect(dispatched.Load()).To(Equal(int64(1)))

	// Without an authenticator, auth fails closed.
	c2, _ := newChain(t, sampleChain()[:1], chain.Builtins(chain.BuiltinOptions{}))
	_, ref = c2.Run(context.Background(), toolCall(), dispatch)
	g.Expect(ref).To(MatchError(ContainSubstring("no authenticator configured")))
}

// rate_limit keeps a bucket per identity (auth's output), refilling with
// time; without an identity it keys on the run.
func TestRateLimitPerIdentity(t *testing.T) {
	g := NewWithT(t)
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	resolved := sampleChain()[1:2]
	c, pr := newChain(t, resolved, chain.Builtins(chain.BuiltinOptions{RateLimit: 2, Burst: 3, Now: clock.Now}))
	run := func(identity, run string) *chain.Refusal {
		call := toolCall()
		call.Identity, call.Run = identity, run
		_, ref := c.Run(context.Background(), call, dispatchResult("ok"))
		return ref
	}
	for range 3 {
		g.Expect(run("pod/a", "r1")).To(Succeed())
	}
	ref := run("pod/a", "r1")
	g.Expect(ref).To(HaveOccurred())
	g.Expect(ref.Veto).To(BeTrue())
	g.Expect(ref.Error()).To(Equal("vetoed by rate_limit: rate limit of 2 calls/s (burst 3) for pod/a exceeded"))
	g.Expect(run("pod/b", "r1")).To(Succeed(), "another identity has its own bucket")

	clock.Step(500 * time.Millisecond) // one token back
	g.Expect(run("pod/a", "r1")).To(Succeed())
	g.Expect(run("pod/a", "r1")).NotTo(Succeed())

	// No identity: keyed by namespace/run.
	for range 3 {
		g.Expect(run("", "r2")).To(Succeed())
	}
	g.Expect(run("", "r2")).To(MatchError(ContainSubstring("for team/r2 exceeded")))
	g.Expect(run("", "r3")).To(Succeed())
	g.Expect(metric(g, pr, "agentrun_gateway_interceptor_denials_total", "interceptor", "rate_limit")).To(Equal(3.0))
	g.Expect(metric(g, pr, "agentrun_gateway_interceptor_calls_total",
		"interceptor", "rate_limit", "outcome", "veto")).To(Equal(3.0))
}

// Logs name the interceptor and the call, never the token or the arguments.
func TestLogsCarryNoSecrets(t *testing.T) {
	g := NewWithT(t)
	var mu sync.Mutex
	var logs strings.Builder
	log := funcr.New(func(prefix, args string) { mu.Lock(); defer mu.Unlock(); logs.WriteString(args + "\n") }, funcr.Options{})
	var w flakyWriter
	w.failing.Store(true)
	c, _ := newChain(t, sampleChain(), withAudit(chain.Builtins(chain.BuiltinOptions{
		Authenticator: chain.AuthenticatorFunc(okAuth)}), syncAudit(&w)), chain.WithLogger(log))
	call := toolCall()
	call.Arguments = map[string]any{"note": "secret plans"}
	_, ref := c.Run(context.Background(), call, dispatchResult("ok"))
	g.Expect(ref).NotTo(HaveOccurred())
	c.Close()
	mu.Lock()
	defer mu.Unlock()
	g.Expect(logs.String()).To(ContainSubstring("Interceptor failed; continuing (onError Allow)"))
	g.Expect(logs.String()).To(ContainSubstring(`"interceptor"="audit"`))
	g.Expect(logs.String()).To(ContainSubstring(errDiskFull.Error()))
	g.Expect(logs.String()).NotTo(ContainSubstring("tok-secret-value"))
	g.Expect(logs.String()).NotTo(ContainSubstring("secret plans"))
}
