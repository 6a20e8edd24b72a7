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
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
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
