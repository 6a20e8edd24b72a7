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

package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway"
	"github.com/agentrun-dev/agentrun/internal/gateway/chain"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
	"github.com/agentrun-dev/agentrun/internal/toolserver"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// toolUpstream is a tool server for the door's tests (the toolserver
// package's fake): search answers, ticket.create and ticket.upsert hang
// until the gateway gives up, and every dispatch is recorded.
type toolUpstream struct {
	fake *toolserver.Fake
	srv  *httptest.Server
}

func (u *toolUpstream) count(name string) int { return u.fake.Count(name) }

func startToolUpstream(t *testing.T) *toolUpstream {
	f, err := toolserver.NewFake(
		toolserver.ToolSpec{Name: "search", Description: "search the web", InputSchema: map[string]any{
			"type": "object", "properties": map[string]any{"q": map[string]any{"type": "string"}}, "required": []any{"q"},
		}},
		toolserver.ToolSpec{Name: "ticket.create", Behavior: toolserver.Behavior{Hang: true}},
		toolserver.ToolSpec{Name: "ticket.upsert", Behavior: toolserver.Behavior{Hang: true}},
	)
	if err != nil {
		t.Fatal(err)
	}
	s, err := toolserver.New(toolserver.Options{Fake: f})
	if err != nil {
		t.Fatal(err)
	}
	u := &toolUpstream{fake: f, srv: httptest.NewServer(s.Handler())}
	t.Cleanup(func() { f.Close(); u.srv.Close() })
	return u
}

type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func connectDoor(t *testing.T, e *gatewaytest.Env, token string) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "test-agent"}, nil)
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{
		Endpoint: e.URL() + gatewayapi.MCPPath, HTTPClient: &http.Client{Transport: bearerTransport{token}},
		DisableStandaloneSSE: true,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func doorEnv(t *testing.T, mutate func(*v1alpha1.RunAttempt)) (*gatewaytest.Env, *toolUpstream) {
	u := startToolUpstream(t)
	e := gatewaytest.Start(t, gatewaytest.Options{Mutate: func(ra *v1alpha1.RunAttempt) {
		p := &ra.Spec.Policy
		p.ToolServers = []v1alpha1.ToolServer{{Name: "tools", URL: u.srv.URL + toolserver.PathMCP, Timeout: &metav1.Duration{Duration: 300 * time.Millisecond}}}
		p.Tools = append(p.Tools,
			v1alpha1.Tool{Name: "search", Risk: v1alpha1.RiskLow, Effect: v1alpha1.EffectNone, Server: "tools"},
			v1alpha1.Tool{Name: "ticket.create", Risk: v1alpha1.RiskMedium, Effect: v1alpha1.EffectExternal, Server: "tools"},
			v1alpha1.Tool{Name: "ticket.upsert", Risk: v1alpha1.RiskMedium, Effect: v1alpha1.EffectExternal, Server: "tools", Idempotent: true},
		)
		p.AutoApprove = append(p.AutoApprove, "ticket.create", "ticket.upsert")
		if mutate != nil {
			mutate(ra)
		}
	}})
	return e, u
}

func resultText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func listed(t *testing.T, cs *mcp.ClientSession) []string {
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	slices.Sort(names)
	return names
}

func TestToolDoorListsWhatTheModeAllows(t *testing.T) {
	g := NewWithT(t)
	e, _ := doorEnv(t, nil)
	cs := connectDoor(t, e, gatewaytest.Token)
	// http.get has no server: the agent's own tool, not the door's.
	g.Expect(listed(t, cs)).To(Equal([]string{"notes.write", "report.publish", "search", "ticket.create", "ticket.upsert"}))
	res, err := cs.ListTools(t.Context(), nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.CacheScope).To(Equal("private"), "the list is the attempt's: revision 2026-07-28 allows only public or private")
	g.Expect(res.TTLMs).To(BeZero(), "a mode switch applies to the next list")
	for _, tl := range res.Tools {
		if tl.Name == "search" {
			g.Expect(tl.Description).To(Equal("search the web"), "the tool server's description")
			raw, _ := json.Marshal(tl.InputSchema)
			g.Expect(string(raw)).To(ContainSubstring(`"required":["q"]`), "the tool server's schema")
		}
	}

	e.UpdateSpec(func(s *v1alpha1.RunAttemptSpec) { s.Mode = v1alpha1.ModePlan })
	g.Expect(listed(t, cs)).To(Equal([]string{"search"}), "Plan sees no writes: a downgrade applies to the next list")
	res2, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "ticket.create", Arguments: map[string]any{}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res2.IsError).To(BeTrue())
	g.Expect(resultText(res2)).To(ContainSubstring("permission_denied"), "tools/call re-checks the mode")

	e.UpdateSpec(func(s *v1alpha1.RunAttemptSpec) { s.RunPhase = v1alpha1.PhaseFinalizing; s.Grant.FinalizeOnly = true })
	e.UpdateSpec(func(s *v1alpha1.RunAttemptSpec) { s.Mode = v1alpha1.ModeAuto })
	g.Expect(listed(t, cs)).To(Equal([]string{"report.publish"}), "Finalizing serves only the output tool")
}

func TestToolDoorDispatchesAndRefusesReadably(t *testing.T) {
	g := NewWithT(t)
	e, u := doorEnv(t, nil)
	cs := connectDoor(t, e, gatewaytest.Token)

	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "search", Arguments: map[string]any{"q": "vector databases"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.IsError).To(BeFalse(), resultText(res))
	g.Expect(resultText(res)).To(ContainSubstring("vector databases"))
	g.Expect(res.Meta[gatewayapi.MetaCallID]).To(HavePrefix("call-"))
	g.Eventually(func() int64 { return e.Status().Usage.ToolCalls }).Should(Equal(int64(1)), "the door counts what it dispatched")

	// Arguments that do not match the schema: refused naming the field,
	// nothing dispatched or counted.
	res, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "search", Arguments: map[string]any{"query": "x"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(resultText(res)).To(And(ContainSubstring(gatewayapi.CodeInvalidArguments), ContainSubstring("q")))
	g.Expect(u.count("search")).To(Equal(1))

	// An unknown tool: refused, naming the tools there are.
	res, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "shell.exec", Arguments: map[string]any{}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(resultText(res)).To(And(ContainSubstring(gatewayapi.CodeUnknownTool), ContainSubstring("search, ticket.create")))

	// The agent API does not admit a tool a server serves.
	r := e.Do("POST", gatewayapi.PathPrefix+"/self/toolcalls", gatewaytest.Token, []byte(`{"tool":"search","arguments":{"q":"x"}}`))
	g.Expect(r.StatusCode).To(Equal(http.StatusBadRequest))
	_ = r.Body.Close()
	g.Expect(e.Status().Usage.ToolCalls).To(Equal(int64(1)))
}

func TestToolDoorNeverDispatchesAnUnknownOutcomeAgain(t *testing.T) {
	g := NewWithT(t)
	e, u := doorEnv(t, nil)
	cs := connectDoor(t, e, gatewaytest.Token)
	args := map[string]any{"title": "disk full"}

	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "ticket.create", Arguments: args})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(resultText(res)).To(And(ContainSubstring(gatewayapi.CodeOutcomeUnknown), ContainSubstring("not be dispatched again")))
	g.Eventually(func() []v1alpha1.InFlightEffect { return e.Status().InFlight }).Should(ConsistOf(And(
		HaveField("Tool", "ticket.create"), HaveField("Outcome", v1alpha1.OutcomeUnknown),
		HaveField("IdempotencyKey", ""), HaveField("Fingerprint", Not(BeEmpty())))),
		"the write-ahead record stays, marked Unknown: the operator will not recover this attempt")
	g.Expect(e.Status().Faults).To(ContainElement(And(HaveField("Scope", v1alpha1.FaultScopeTool), HaveField("Kind", "OutcomeUnknown"))))

	res, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "ticket.create", Arguments: args})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(resultText(res)).To(ContainSubstring("never dispatched again"))
	g.Expect(u.count("ticket.create")).To(Equal(1), "the identical call was not dispatched again")

	// Other arguments are another call; an idempotent tool carries its key
	// and may be called again.
	for range 2 {
		res, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "ticket.upsert", Arguments: args})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(resultText(res)).To(ContainSubstring("safe"))
	}
	g.Expect(u.count("ticket.upsert")).To(Equal(2))
	calls := u.fake.Calls()
	last := calls[len(calls)-1]
	g.Expect(last.MetaIdempotencyKey).NotTo(BeEmpty(), "in _meta")
	g.Expect(last.HeaderIdempotencyKey).To(Equal(last.MetaIdempotencyKey), "and as the Idempotency-Key header")
}

func TestToolDoorApprovals(t *testing.T) {
	g := NewWithT(t)
	e, _ := doorEnv(t, func(ra *v1alpha1.RunAttempt) {
		ra.Spec.Policy.ApprovalTimeout = &metav1.Duration{Duration: 5 * time.Second}
	})
	cs := connectDoor(t, e, gatewaytest.Token)
	args := map[string]any{"section": "Overview", "content": "Milvus, Qdrant, Weaviate. api_key=sk-abcdefghijklmnopqrstuvwx"}

	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "report.publish", Arguments: args})
		if err != nil {
			res = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}
		}
		done <- res
	}()
	var req v1alpha1.ApprovalRequest
	g.Eventually(func() []v1alpha1.ApprovalRequest { return e.Status().AwaitingApproval }).Should(HaveLen(1))
	req = e.Status().AwaitingApproval[0]
	g.Expect(req.Tool).To(Equal("report.publish"))
	g.Expect(req.Risk).To(Equal(v1alpha1.RiskHigh))
	g.Expect(req.Summary).To(ContainSubstring("Overview"))
	g.Expect(req.ExpiresAt.Sub(req.RequestedAt.Time)).To(Equal(5 * time.Second))
	g.Expect(e.Status().Usage.ToolCalls).To(BeZero(), "waiting spends nothing")
	g.Consistently(done, 300*time.Millisecond).ShouldNot(Receive())

	e.UpdateSpec(func(s *v1alpha1.RunAttemptSpec) {
		s.Approvals = append(s.Approvals, gatewaytest.Decision(req.ActionID, v1alpha1.DecisionApprove))
	})
	var res *mcp.CallToolResult
	g.Eventually(done, 5*time.Second).Should(Receive(&res))
	g.Expect(res.IsError).To(BeFalse(), resultText(res))
	g.Expect(resultText(res)).To(ContainSubstring(`published section "Overview"`))
	cm := &corev1.ConfigMap{}
	g.Expect(e.Client.Get(t.Context(), types.NamespacedName{Namespace: gatewaytest.Namespace, Name: gateway.ReportName(gatewaytest.Run)}, cm)).To(Succeed())
	g.Expect(cm.Data).To(HaveKey("01-overview.md"), "no plan: the plan is what was published")
	g.Eventually(func() []v1alpha1.ApprovalRequest { return e.Status().AwaitingApproval }).Should(BeEmpty())
	g.Eventually(func() int32 { return e.Status().Publication.BlocksCommitted }).Should(Equal(int32(1)))
}

func TestToolDoorApprovalExpires(t *testing.T) {
	g := NewWithT(t)
	e, _ := doorEnv(t, func(ra *v1alpha1.RunAttempt) {
		ra.Spec.Policy.ApprovalTimeout = &metav1.Duration{Duration: 300 * time.Millisecond}
	})
	cs := connectDoor(t, e, gatewaytest.Token)
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "report.publish",
		Arguments: map[string]any{"section": "Overview", "content": "x"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(resultText(res)).To(And(ContainSubstring(gatewayapi.CodeApprovalExpired), ContainSubstring("approvalTimeout of 300ms")))
	g.Expect(res.Meta[gatewayapi.MetaActionID]).To(HavePrefix("report.publish-"))
	g.Eventually(func() []v1alpha1.Fault { return e.Status().Faults }).Should(ContainElement(HaveField("Kind", "ApprovalExpired")))
	g.Expect(e.Status().AwaitingApproval).To(BeEmpty())
	g.Expect(e.Status().Usage.ToolCalls).To(BeZero())
}

func TestToolDoorToolServerDown(t *testing.T) {
	g := NewWithT(t)
	e, u := doorEnv(t, nil)
	u.srv.Close()
	cs := connectDoor(t, e, gatewaytest.Token)
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "search", Arguments: map[string]any{"q": "x"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(resultText(res)).To(ContainSubstring(gatewayapi.CodeToolServerUnavailable))
	g.Eventually(func() []v1alpha1.Fault { return e.Status().Faults }).Should(ContainElement(HaveField("Kind", "ToolServerUnavailable")))
	g.Expect(e.Get().Spec.RunPhase).To(Equal(v1alpha1.PhaseRunning), "a local fault: the run goes on")
	g.Expect(e.Status().InFlight).To(BeEmpty())
}

func TestToolDoorAuthenticates(t *testing.T) {
	g := NewWithT(t)
	e, _ := doorEnv(t, nil)
	r := e.Do("POST", gatewayapi.MCPPath, gatewaytest.StrangerToken, []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	g.Expect(r.StatusCode).To(Equal(http.StatusForbidden))
	_ = r.Body.Close()
	r = e.Do("POST", gatewayapi.MCPPath, "", []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	g.Expect(r.StatusCode).To(Equal(http.StatusUnauthorized))
	_ = r.Body.Close()
}

// sampleChain is the sample policy's resolved chain: auth and rate_limit
// before the call, redact and audit after it.
func sampleChain() []v1alpha1.ResolvedInterceptor {
	return []v1alpha1.ResolvedInterceptor{
		{Name: "auth", Class: v1alpha1.ClassSecurity, Phase: v1alpha1.InterceptorPre, Priority: 10, OnError: v1alpha1.PostureDeny, Veto: true, RegistrationIndex: 0},
		{Name: "rate_limit", Class: v1alpha1.ClassResource, Phase: v1alpha1.InterceptorPre, Priority: 20, OnError: v1alpha1.PostureDeny, Veto: true, RegistrationIndex: 1},
		{Name: "redact", Class: v1alpha1.ClassSecurity, Phase: v1alpha1.InterceptorPost, Priority: 50, OnError: v1alpha1.PostureDeny, RegistrationIndex: 2},
		{Name: "audit", Class: v1alpha1.ClassObservability, Phase: v1alpha1.InterceptorPost, Priority: 90, OnError: v1alpha1.PostureAllow, Buffered: true, RegistrationIndex: 3},
	}
}

type failingWriter struct{ failing atomic.Bool }

func (f *failingWriter) Write(p []byte) (int, error) {
	if f.failing.Load() {
		return 0, errors.New("audit sink: no space left on device")
	}
	return len(p), nil
}

func TestToolDoorRunsThePolicysChain(t *testing.T) {
	g := NewWithT(t)
	u := startToolUpstream(t)
	audit := &failingWriter{}
	audit.failing.Store(true)
	var reviewDown atomic.Bool
	reg := chain.Builtins(chain.BuiltinOptions{
		Audit: audit,
		Authenticator: chain.AuthenticatorFunc(func(context.Context, string) (string, error) {
			if reviewDown.Load() {
				return "", errors.New("tokenreviews.authentication.k8s.io: the server is currently unable to handle the request")
			}
			return "system:serviceaccount:team:agentrun-runner/survey-1", nil
		}),
	})
	e := gatewaytest.Start(t, gatewaytest.Options{Interceptors: reg, Mutate: func(ra *v1alpha1.RunAttempt) {
		p := &ra.Spec.Policy
		p.ResolvedChain = sampleChain()
		p.AuthorityWait = &metav1.Duration{} // answer an outage at once (TestAnUnreachableAuthorityIsWaitedFor holds)
		p.ToolServers = []v1alpha1.ToolServer{{Name: "tools", URL: u.srv.URL + toolserver.PathMCP}}
		p.Tools = append(p.Tools, v1alpha1.Tool{Name: "search", Risk: v1alpha1.RiskLow, Effect: v1alpha1.EffectNone, Server: "tools"})
	}})
	cs := connectDoor(t, e, gatewaytest.Token)

	// A failing audit sink does not hold the call: the line is queued for
	// audit's writer, which keeps it until the sink takes it.
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "search", Arguments: map[string]any{"q": "token sk-abcdefghijklmnopqrstuvwx"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.IsError).To(BeFalse(), resultText(res))
	g.Expect(resultText(res)).NotTo(ContainSubstring("sk-abcdefghijklmnopqrstuvwx"), "redact rewrote the result")
	g.Expect(e.Metric("agentrun_gateway_interceptor_calls_total", map[string]string{"interceptor": "audit", "outcome": "ok"})).To(BeNumerically(">=", 1))
	g.Expect(u.count("search")).To(Equal(1))

	// auth fails closed: TokenReview down dispatches no call, naming it;
	// the answer says to ask again (interceptor_unavailable), not a veto.
	reviewDown.Store(true)
	for range 3 {
		res, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "search", Arguments: map[string]any{"q": "x"}})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(res.IsError).To(BeTrue())
		g.Expect(resultText(res)).To(And(ContainSubstring(gatewayapi.CodeInterceptorUnavailable), ContainSubstring("auth"),
			ContainSubstring("unable to handle the request"), ContainSubstring("ask again")))
	}
	g.Expect(u.count("search")).To(Equal(1), "nothing dispatched while auth fails")
	g.Expect(e.Metric("agentrun_gateway_interceptor_denials_total", map[string]string{"interceptor": "auth"})).To(BeNumerically("==", 3))
	g.Eventually(func() []v1alpha1.Fault { return e.Status().Faults }).Should(ContainElement(HaveField("Kind", "InterceptorFailed")))
	g.Expect(e.Status().Usage.ToolCalls).To(Equal(int64(1)), "a refused call is not counted against the grant")
}

func TestToolDoorRefusesAPolicyChainItCannotRun(t *testing.T) {
	g := NewWithT(t)
	e, u := doorEnv(t, func(ra *v1alpha1.RunAttempt) {
		ra.Spec.Policy.ResolvedChain = []v1alpha1.ResolvedInterceptor{
			{Name: "dlp", Class: v1alpha1.ClassSecurity, Phase: v1alpha1.InterceptorPre, OnError: v1alpha1.PostureDeny, Veto: true},
		}
	})
	cs := connectDoor(t, e, gatewaytest.Token)
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "search", Arguments: map[string]any{"q": "x"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(resultText(res)).To(And(ContainSubstring("dlp"), ContainSubstring("cannot run")))
	g.Expect(u.count("search")).To(BeZero())

	// An interceptor the gateway does not implement that is not Security is
	// left to the agent's process: the gateway runs the rest.
	e2, u2 := doorEnv(t, func(ra *v1alpha1.RunAttempt) {
		ra.Spec.Policy.ResolvedChain = []v1alpha1.ResolvedInterceptor{
			{Name: "trace", Class: v1alpha1.ClassObservability, Phase: v1alpha1.InterceptorPost, OnError: v1alpha1.PostureAllow},
		}
	})
	res, err = connectDoor(t, e2, gatewaytest.Token).CallTool(t.Context(), &mcp.CallToolParams{Name: "search", Arguments: map[string]any{"q": "x"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.IsError).To(BeFalse(), resultText(res))
	g.Expect(u2.count("search")).To(Equal(1))
}

// A snapshot whose Security interceptor fails open (a RuntimePolicy status
// patched to onError: Allow) is never run: the gateway refuses the calls,
// naming the entry, and dispatches nothing.
func TestToolDoorRefusesASecurityInterceptorThatFailsOpen(t *testing.T) {
	g := NewWithT(t)
	e, u := doorEnv(t, func(ra *v1alpha1.RunAttempt) {
		ra.Spec.Policy.ResolvedChain = []v1alpha1.ResolvedInterceptor{
			{Name: "auth", Class: v1alpha1.ClassSecurity, Phase: v1alpha1.InterceptorPre, Priority: 10, OnError: v1alpha1.PostureAllow, Veto: true},
		}
	})
	cs := connectDoor(t, e, gatewaytest.Token)
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "search", Arguments: map[string]any{"q": "x"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(resultText(res)).To(And(ContainSubstring("cannot run"), ContainSubstring(`auth (Pre, onError: "Allow")`),
		ContainSubstring("must have onError: Deny")))
	g.Expect(u.count("search")).To(BeZero())
}

// A call in flight when the gateway process dies has an unknown outcome:
// its successor marks the record Unknown and never dispatches it again.
func TestToolDoorRestartLeavesInFlightCallsUnknown(t *testing.T) {
	g := NewWithT(t)
	e, u := doorEnv(t, func(ra *v1alpha1.RunAttempt) {
		// The first process dies long before the call would time out.
		ra.Spec.Policy.ToolServers[0].Timeout = &metav1.Duration{Duration: 3 * time.Second}
	})
	cs := connectDoor(t, e, gatewaytest.Token)
	args := map[string]any{"title": "disk full"}
	go func() {
		_, _ = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "ticket.create", Arguments: args})
	}()
	g.Eventually(func() int { return u.count("ticket.create") }).Should(Equal(1))
	g.Expect(e.Status().InFlight).To(ConsistOf(HaveField("Outcome", BeEmpty())), "the write-ahead record is durable before dispatch")
	e.Crash()
	e.Restart()

	cs2 := connectDoor(t, e, gatewaytest.Token)
	res, err := cs2.CallTool(t.Context(), &mcp.CallToolParams{Name: "ticket.create", Arguments: args})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(resultText(res)).To(And(ContainSubstring(gatewayapi.CodeOutcomeUnknown), ContainSubstring("gateway that dispatched it stopped")))
	g.Expect(u.count("ticket.create")).To(Equal(1), "never dispatched again")
	g.Eventually(func() []v1alpha1.InFlightEffect { return e.Status().InFlight }).Should(ConsistOf(HaveField("Outcome", v1alpha1.OutcomeUnknown)))
}

// Model requests pass the chain too: a veto of rate_limit refuses one
// before anything is reserved or dispatched, and audit records them.
func TestModelRequestsPassTheChain(t *testing.T) {
	g := NewWithT(t)
	var audit strings.Builder
	var mu sync.Mutex
	reg := chain.Builtins(chain.BuiltinOptions{
		RateLimit: 0.001, Burst: 1,
		Audit: writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return audit.Write(p) }),
		Authenticator: chain.AuthenticatorFunc(func(context.Context, string) (string, error) {
			return "system:serviceaccount:team:agentrun-runner/survey-1", nil
		}),
	})
	e := gatewaytest.Start(t, gatewaytest.Options{Interceptors: reg, Mutate: func(ra *v1alpha1.RunAttempt) {
		ra.Spec.Policy.ResolvedChain = sampleChain()
	}})
	body := []byte(`{"model":"scripted","messages":[{"role":"user","content":"hello"}],"agentrun_scripted":{"say":"hi","tokens":5}}`)
	r := e.Do("POST", gatewayapi.ModelPathPrefix+"/chat/completions", gatewaytest.Token, body)
	g.Expect(r.StatusCode).To(Equal(http.StatusOK))
	_ = r.Body.Close()
	r = e.Do("POST", gatewayapi.ModelPathPrefix+"/chat/completions", gatewaytest.Token, body)
	g.Expect(r.StatusCode).To(Equal(http.StatusForbidden))
	var eb gatewayapi.ErrorBody
	g.Expect(json.NewDecoder(r.Body).Decode(&eb)).To(Succeed())
	_ = r.Body.Close()
	g.Expect(eb.Error.Code).To(Equal(gatewayapi.CodeInterceptorRefused))
	g.Expect(eb.Error.Message).To(ContainSubstring("rate_limit"))
	g.Eventually(func() int64 { return e.Status().Usage.ModelRequests }).Should(Equal(int64(1)), "the vetoed request is not counted")
	g.Eventually(func() string { mu.Lock(); defer mu.Unlock(); return audit.String() }).
		Should(And(ContainSubstring(`"kind":"Model"`), ContainSubstring(`"scripted"`)), "audit's writer writes the line after the call")
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// Only a fail-closed interceptor whose authority is unreachable for now
// (chain.ErrUnavailable) says to ask again, once the policy's authorityWait
// is over; one that fails the same way on every try — a plain error, a
// panic — refuses the call for good, at once.
func TestOnlyAnUnreachableAuthorityAsksAgain(t *testing.T) {
	for _, c := range []struct {
		name string
		pre  func() error
		code string
	}{
		{"unavailable", func() error { return fmt.Errorf("%w: quota service: connection refused", chain.ErrUnavailable) },
			gatewayapi.CodeInterceptorUnavailable},
		{"error", func() error { return errors.New("cannot parse the arguments") }, gatewayapi.CodeInterceptorRefused},
		{"panic", func() error { panic("bug") }, gatewayapi.CodeInterceptorRefused},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			u := startToolUpstream(t)
			reg := chain.Registry{"check": chain.Impl{Pre: func(context.Context, *chain.Call) error { return c.pre() }}}
			e := gatewaytest.Start(t, gatewaytest.Options{Interceptors: reg, Mutate: func(ra *v1alpha1.RunAttempt) {
				p := &ra.Spec.Policy
				p.ResolvedChain = []v1alpha1.ResolvedInterceptor{{Name: "check", Class: v1alpha1.ClassResource,
					Phase: v1alpha1.InterceptorPre, Priority: 10, OnError: v1alpha1.PostureDeny}}
				p.AuthorityWait = &metav1.Duration{Duration: 600 * time.Millisecond} // held, then answered
				p.ToolServers = []v1alpha1.ToolServer{{Name: "tools", URL: u.srv.URL + toolserver.PathMCP}}
				p.Tools = append(p.Tools, v1alpha1.Tool{Name: "search", Risk: v1alpha1.RiskLow, Effect: v1alpha1.EffectNone, Server: "tools"})
			}})
			cs := connectDoor(t, e, gatewaytest.Token)
			res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "search", Arguments: map[string]any{"q": "x"}})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(res.IsError).To(BeTrue())
			g.Expect(resultText(res)).To(ContainSubstring(c.code))
			g.Expect(u.count("search")).To(BeZero())
		})
	}
}

// While a fail-closed interceptor's authority is unreachable the door holds
// the call and checks again: once the authority is back the call is served,
// once, and the client never saw the outage — on the tool door and the model
// door (issue 30, item 6).
func TestAnUnreachableAuthorityIsWaitedFor(t *testing.T) {
	g := NewWithT(t)
	u := startToolUpstream(t)
	var tries atomic.Int32
	down := atomic.Int32{}
	down.Store(3) // the next three checks find the authority down
	reg := chain.Registry{"quota": chain.Impl{Pre: func(context.Context, *chain.Call) error {
		tries.Add(1)
		if down.Add(-1) >= 0 {
			return fmt.Errorf("%w: quota service: connection refused", chain.ErrUnavailable)
		}
		return nil
	}}}
	e := gatewaytest.Start(t, gatewaytest.Options{Interceptors: reg, Mutate: func(ra *v1alpha1.RunAttempt) {
		p := &ra.Spec.Policy
		p.ResolvedChain = []v1alpha1.ResolvedInterceptor{{Name: "quota", Class: v1alpha1.ClassResource,
			Phase: v1alpha1.InterceptorPre, Priority: 10, OnError: v1alpha1.PostureDeny}}
		p.ToolServers = []v1alpha1.ToolServer{{Name: "tools", URL: u.srv.URL + toolserver.PathMCP}}
		p.Tools = append(p.Tools, v1alpha1.Tool{Name: "search", Risk: v1alpha1.RiskLow, Effect: v1alpha1.EffectNone, Server: "tools"})
	}})
	cs := connectDoor(t, e, gatewaytest.Token)
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "search", Arguments: map[string]any{"q": "x"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.IsError).To(BeFalse(), "held through the outage, then served: %s", resultText(res))
	g.Expect(tries.Load()).To(Equal(int32(4)), "checked again until the authority answered")
	g.Expect(u.count("search")).To(Equal(1), "dispatched once")
	g.Expect(e.Metric("agentrun_gateway_authority_holds_total", map[string]string{"result": "recovered"})).To(Equal(1.0))

	down.Store(2)
	resp := e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token, chat(gatewaytest.Model, ""))
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK), "the model door holds the request too")
	_ = resp.Body.Close()
	g.Eventually(func() int64 { return e.Status().Usage.ModelRequests }).Should(Equal(int64(1)), "one request dispatched and counted")
}

// recordingTransport keeps the body of every tools/call response.
type recordingTransport struct {
	token string
	mu    sync.Mutex
	calls []string
}

func (r *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	isCall := req.Header.Get("Mcp-Method") == "tools/call"
	if req.Body != nil && !isCall {
		b, _ := io.ReadAll(req.Body)
		isCall = bytes.Contains(b, []byte(`"method":"tools/call"`))
		req.Body = io.NopCloser(bytes.NewReader(b))
	}
	res, err := bearerTransport{r.token}.RoundTrip(req)
	if err != nil || !isCall {
		return res, err
	}
	b, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	res.Body = io.NopCloser(bytes.NewReader(b))
	r.mu.Lock()
	r.calls = append(r.calls, string(b))
	r.mu.Unlock()
	return res, err
}

// The door answers tools/call itself: on revision 2026-07-28 every result
// says resultType "complete", as the SDK's own tool handlers do, or the
// official Python SDK cannot read a refusal or a built-in's result
// (test/mcpinterop found it).
func TestToolDoorCallResultsCarryTheirTypeOnTheNewestRevision(t *testing.T) {
	g := NewWithT(t)
	e, _ := doorEnv(t, nil)
	e.ApproveToolWhenAsked(gatewayapi.ToolReportPublish)
	rec := &recordingTransport{token: gatewaytest.Token}
	c := mcp.NewClient(&mcp.Implementation{Name: "test-agent"}, nil)
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{
		Endpoint: e.URL() + gatewayapi.MCPPath, HTTPClient: &http.Client{Transport: rec}, DisableStandaloneSSE: true,
	}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = cs.Close() })
	g.Expect(cs.InitializeResult().ProtocolVersion).To(Equal("2026-07-28"))

	for _, p := range []*mcp.CallToolParams{
		{Name: "search", Arguments: map[string]any{"q": "x"}},                                      // a tool server's result
		{Name: "shell.exec", Arguments: map[string]any{}},                                          // a refusal
		{Name: "report.publish", Arguments: map[string]any{"section": "Overview", "content": "x"}}, // a built-in
	} {
		_, err := cs.CallTool(t.Context(), p)
		g.Expect(err).NotTo(HaveOccurred())
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	g.Expect(rec.calls).To(HaveLen(3))
	for _, body := range rec.calls {
		g.Expect(body).To(ContainSubstring(`"resultType":"complete"`))
	}
}
