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
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
	"github.com/agentrun-dev/agentrun/internal/toolserver"
	"github.com/agentrun-dev/agentrun/internal/upstream"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// Security review 25, item 5: an urgent fact the API server already holds
// drives no write. 300 repeated finishes and 300 repeated escalations of one
// fault made 600 status writes; now the first of each is written, the rest
// are durable already (finish) or counted with the next flush (an
// escalation already escalated, as retryable). An escalation that changes
// what the operator acts on (its retryability) is urgent again.
func TestUnchangedUrgentFactsAreNotWrittenAgain(t *testing.T) {
	g := NewWithT(t)
	e := gatewaytest.Start(t, gatewaytest.Options{FlushInterval: time.Hour})
	for range 300 {
		g.Expect(as(t, e, "POST", self("/finish"), `{}`).status).To(Equal(http.StatusOK))
	}
	g.Expect(e.Writes.Load()).To(Equal(int64(1)), "one finish is written; the other 299 say nothing new")
	g.Expect(e.Status().FinishProposed).To(BeTrue())

	esc := `{"scope":"Provider","kind":"QuotaExceeded","retryable":true,"escalate":true,"message":"429"}`
	for range 300 {
		g.Expect(as(t, e, "POST", self("/faults"), esc).status).To(Equal(http.StatusNoContent))
	}
	g.Expect(e.Writes.Load()).To(Equal(int64(2)), "the first escalation is written at once; repeats wait for the flush")
	f, _ := faultOf(e.Status(), v1alpha1.FaultScopeProvider, "QuotaExceeded")
	g.Expect(f).To(Equal(v1alpha1.Fault{Scope: v1alpha1.FaultScopeProvider, Kind: "QuotaExceeded", Count: 1,
		Retryable: true, Escalated: true, LastMessage: "429"}))

	g.Expect(as(t, e, "POST", self("/faults"),
		`{"scope":"Provider","kind":"QuotaExceeded","retryable":false,"escalate":true,"message":"quota gone"}`).status).
		To(Equal(http.StatusNoContent))
	g.Expect(e.Writes.Load()).To(Equal(int64(3)), "an escalation that is no longer retryable is news: written at once")
	f, _ = faultOf(e.Status(), v1alpha1.FaultScopeProvider, "QuotaExceeded")
	g.Expect(f).To(Equal(v1alpha1.Fault{Scope: v1alpha1.FaultScopeProvider, Kind: "QuotaExceeded", Count: 301,
		Retryable: false, Escalated: true, LastMessage: "quota gone"}), "no count was lost")
	g.Expect(e.Metric("agentrun_gateway_status_writes_skipped_total", nil)).To(BeNumerically(">=", 299))
}

// hugeAnswer is a provider whose answer is 64 KiB: a JSON completion, or
// one data line of that size when streamed.
type hugeAnswer struct{}

func (hugeAnswer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Stream bool `json:"stream"`
	}
	_ = json.NewDecoder(r.Body).Decode(&req)
	content := strings.Repeat("x", 64<<10)
	chunk := `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"` + content +
		`"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, chunk)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	_, _ = io.WriteString(w, "data: "+chunk+"\n\ndata: [DONE]\n\n")
}

// Security review 25, item 5: a provider's non-streaming answer beyond
// --max-model-response-bytes is not buffered (64 MiB were): the agent gets
// 502 upstream_response_too_large, the request counts as dispatched and is
// charged its reservation, and a Provider fault says why. A streamed line
// beyond the bound cuts the stream the same way.
func TestAModelAnswerBeyondTheBoundIsRefusedAndCharged(t *testing.T) {
	g := NewWithT(t)
	up := httptest.NewServer(hugeAnswer{})
	t.Cleanup(up.Close)
	e := gatewaytest.Start(t, gatewaytest.Options{
		Mutate: func(ra *v1alpha1.RunAttempt) {
			ra.Spec.Grant.Tokens = new(int64(100000))
			ra.Spec.Policy.Models[0].BaseURL = up.URL + "/v1"
			ra.Spec.Policy.Models[0].MaxTokens = new(int64(100))
		},
		Tune: func(o *gateway.Options) { o.MaxModelResponseBytes = 16 << 10 },
	})
	body := chat("scripted", "")
	resp := e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token, body)
	g.Expect(resp.StatusCode).To(Equal(http.StatusBadGateway))
	eb := errorBody(g, resp)
	g.Expect(eb.Code).To(Equal(gatewayapi.CodeUpstreamResponseTooLarge))
	g.Expect(eb.Message).To(ContainSubstring("exceeds the gateway's bound of 16384 bytes (--max-model-response-bytes)"))
	g.Eventually(e.Status).Should(And(
		HaveField("Usage.ModelRequests", BeEquivalentTo(1)),
		HaveField("Usage.Tokens", BeEquivalentTo(int64(len(body))+100)), // the reservation, not the reported 2
		HaveField("Faults", ContainElement(And(HaveField("Scope", v1alpha1.FaultScopeProvider), HaveField("Kind", "ResponseTooLarge")))),
	))
	g.Expect(e.Metric("agentrun_gateway_answers_too_large_total", map[string]string{"what": "model"})).To(Equal(1.0))

	streamed := chat("scripted", `,"stream":true`)
	resp = e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token, streamed)
	raw, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	g.Expect(string(raw)).NotTo(ContainSubstring("[DONE]"), "the stream is cut at the long line")
	g.Expect(len(raw)).To(BeNumerically("<", 16<<10))
	g.Eventually(e.Status).Should(And(
		HaveField("Usage.ModelRequests", BeEquivalentTo(2)),
		HaveField("Usage.Tokens", BeEquivalentTo(int64(len(body))+100+int64(len(streamed))+100)),
		HaveField("Faults", ContainElement(And(HaveField("Kind", "StreamCut"), HaveField("LastMessage", ContainSubstring("--max-model-response-bytes"))))),
	))
}

// Security review 25, item 5: a tool server's answer beyond
// --max-tool-result-bytes is not relayed (48 MiB were). The call was
// dispatched, so its outcome is recorded as such, never as "not
// dispatched": a read gets a tool error tool_result_too_large and nothing
// stays in flight; a side effect's write-ahead record stays, marked Unknown
// (whether it succeeded is in the part not read), and the identical call is
// never dispatched again.
func TestAToolAnswerBeyondTheBoundIsNotRelayed(t *testing.T) {
	g := NewWithT(t)
	huge := strings.Repeat("y", 64<<10)
	f, err := toolserver.NewFake(
		toolserver.ToolSpec{Name: "big.read", Behavior: toolserver.Behavior{Result: huge}},
		toolserver.ToolSpec{Name: "big.write", Behavior: toolserver.Behavior{Result: huge}},
	)
	g.Expect(err).NotTo(HaveOccurred())
	ts, err := toolserver.New(toolserver.Options{Fake: f})
	g.Expect(err).NotTo(HaveOccurred())
	srv := httptest.NewServer(ts.Handler())
	t.Cleanup(func() { f.Close(); srv.Close() })
	e := gatewaytest.Start(t, gatewaytest.Options{
		Mutate: func(ra *v1alpha1.RunAttempt) {
			p := &ra.Spec.Policy
			p.ToolServers = []v1alpha1.ToolServer{{Name: "tools", URL: srv.URL + toolserver.PathMCP}}
			p.Tools = append(p.Tools,
				v1alpha1.Tool{Name: "big.read", Risk: v1alpha1.RiskLow, Effect: v1alpha1.EffectNone, Server: "tools"},
				v1alpha1.Tool{Name: "big.write", Risk: v1alpha1.RiskLow, Effect: v1alpha1.EffectExternal, Server: "tools"},
			)
			p.AutoApprove = append(p.AutoApprove, "big.write")
		},
		Tune: func(o *gateway.Options) { o.MaxToolResultBytes = 16 << 10 },
	})
	cs := connectDoor(t, e, gatewaytest.Token)

	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "big.read", Arguments: map[string]any{}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Meta[gatewayapi.MetaCode]).To(Equal(gatewayapi.CodeToolResultTooLarge))
	g.Expect(resultText(res)).To(And(ContainSubstring("exceeds the gateway's bound of 16384 bytes (--max-tool-result-bytes)"),
		Not(ContainSubstring("yyyy"))))
	g.Expect(f.Count("big.read")).To(Equal(1))

	args := map[string]any{"title": "x"}
	res, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "big.write", Arguments: args})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(resultText(res)).To(And(ContainSubstring(gatewayapi.CodeToolResultTooLarge), ContainSubstring("will not be dispatched again")))
	g.Expect(e.Status().InFlight).To(ConsistOf(And(HaveField("Tool", "big.write"), HaveField("Outcome", v1alpha1.OutcomeUnknown))),
		"dispatched: the write-ahead record stays, its outcome Unknown (durable before the answer)")
	res, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "big.write", Arguments: args})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Meta[gatewayapi.MetaCode]).To(Equal(gatewayapi.CodeOutcomeUnknown))
	g.Expect(f.Count("big.write")).To(Equal(1), "never dispatched again")
	g.Eventually(func() []v1alpha1.Fault { return e.Status().Faults }).Should(ContainElement(And(
		HaveField("Scope", v1alpha1.FaultScopeTool), HaveField("Kind", "ToolResultTooLarge"), HaveField("Count", BeEquivalentTo(2)))))
	g.Expect(e.Metric("agentrun_gateway_answers_too_large_total", map[string]string{"what": "tool"})).To(Equal(2.0))
}

// heldUpstream is a provider that holds each request until release is
// closed, telling arrived when one comes.
type heldUpstream struct {
	inner   http.Handler
	arrived chan struct{}
	release chan struct{}
}

func (h *heldUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.arrived <- struct{}{}
	<-h.release
	h.inner.ServeHTTP(w, r)
}

// Security review 25, item 5: one attempt has at most
// --max-attempt-concurrency model requests and tool calls under way at
// once; beyond it each door refuses in its own shape — the model door and
// the agent API 429 too_many_concurrent_requests with Retry-After (and
// x-should-retry: true: it is of the moment), the tool door a tool error
// with the code — and nothing is dispatched or counted. A place is free
// again once a request ends.
func TestAnAttemptsRequestsUnderWayAreBounded(t *testing.T) {
	g := NewWithT(t)
	held := &heldUpstream{inner: &upstream.Server{}, arrived: make(chan struct{}, 4), release: make(chan struct{})}
	up := httptest.NewServer(held)
	t.Cleanup(up.Close)
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(held.release) }) }
	t.Cleanup(release) // before up.Close, even when the test fails
	e := gatewaytest.Start(t, gatewaytest.Options{
		Mutate: func(ra *v1alpha1.RunAttempt) { ra.Spec.Policy.Models[0].BaseURL = up.URL + "/v1" },
		Tune:   func(o *gateway.Options) { o.MaxAttemptConcurrency = 2 },
	})
	cs := connectDoor(t, e, gatewaytest.Token)

	// Two under way: a model request the provider holds, and a door call
	// awaiting approval.
	modelDone := make(chan int, 1)
	go func() {
		resp := e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token, chat("scripted", ""))
		_ = resp.Body.Close()
		modelDone <- resp.StatusCode
	}()
	g.Eventually(held.arrived, apiWait).Should(Receive())
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		_, _ = cs.CallTool(ctx, &mcp.CallToolParams{Name: "report.publish", Arguments: map[string]any{"section": "s", "content": "c"}})
	}()
	g.Eventually(func() []v1alpha1.ApprovalRequest { return e.Status().AwaitingApproval }, apiWait, apiPoll).Should(HaveLen(1))
	used := e.Status().Usage

	r := as(t, e, "POST", "/v1/chat/completions", string(chat("scripted", "")))
	g.Expect(r.status).To(Equal(http.StatusTooManyRequests))
	g.Expect(r.errBody().Code).To(Equal(gatewayapi.CodeTooManyConcurrent))
	g.Expect(r.errBody().Message).To(ContainSubstring("2 model requests and tool calls under way"))
	g.Expect(r.header.Get("Retry-After")).To(Equal("1"))
	g.Expect(r.header.Get(gatewayapi.HeaderShouldRetry)).To(Equal("true"))

	r = as(t, e, "POST", self("/toolcalls"), `{"tool":"http.get","arguments":{"url":"u"}}`)
	g.Expect(r.status).To(Equal(http.StatusTooManyRequests))
	g.Expect(r.errBody().Code).To(Equal(gatewayapi.CodeTooManyConcurrent))

	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "notes.write", Arguments: map[string]any{"key": "k", "value": "v"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Meta[gatewayapi.MetaCode]).To(Equal(gatewayapi.CodeTooManyConcurrent))
	g.Expect(e.Metric("agentrun_gateway_refusals_total", map[string]string{"code": gatewayapi.CodeTooManyConcurrent})).To(Equal(3.0))
	g.Expect(held.arrived).NotTo(Receive(), "nothing more reached the provider")

	release()
	g.Eventually(modelDone, apiWait).Should(Receive(Equal(http.StatusOK)))
	g.Consistently(func() [2]int64 { u := e.Status().Usage; return [2]int64{u.ModelRequests, u.ToolCalls} }, 100*time.Millisecond, apiPoll).
		Should(Equal([2]int64{used.ModelRequests, used.ToolCalls}), "the refused requests were not counted")
	r = as(t, e, "POST", self("/toolcalls"), `{"tool":"http.get","arguments":{"url":"u"}}`)
	g.Expect(r.status).To(Equal(http.StatusOK), "a place is free again: %s", r.body)
}
