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
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	v1 "github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/pkg/agent"
)

// chatServer speaks the chat-completions wire format. Each request is
// decoded, recorded and answered by answer (status, body).
type chatServer struct {
	*httptest.Server
	mu       sync.Mutex
	requests []oaRequest
	headers  []http.Header
	answer   func(n int, req oaRequest) (int, http.Header, string)
}

func newChatServer(t *testing.T, answer func(n int, req oaRequest) (int, http.Header, string)) *chatServer {
	s := &chatServer{answer: answer}
	s.Server = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" || r.Method != http.MethodPost {
			http.NotFound(rw, r)
			return
		}
		raw, _ := io.ReadAll(r.Body)
		var req oaRequest
		if err := json.Unmarshal(raw, &req); err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.requests = append(s.requests, req)
		s.headers = append(s.headers, r.Header.Clone())
		n := len(s.requests)
		s.mu.Unlock()
		status, hdr, body := s.answer(n, req)
		maps.Copy(rw.Header(), hdr)
		rw.Header().Set("Content-Type", "application/json")
		rw.WriteHeader(status)
		_, _ = io.WriteString(rw, body)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *chatServer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.requests)
}

func completion(content string, calls ...[2]string) string {
	msg := map[string]any{"role": "assistant", "content": content}
	if content == "" {
		msg["content"] = nil
	}
	var tcs []map[string]any
	for i, c := range calls {
		tcs = append(tcs, map[string]any{"id": fmt.Sprintf("call_%d", i), "type": "function",
			"function": map[string]any{"name": c[0], "arguments": c[1]}})
	}
	finish := "stop"
	if len(tcs) > 0 {
		msg["tool_calls"] = tcs
		finish = "tool_calls"
	}
	raw, _ := json.Marshal(map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion",
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
		"usage":   map[string]any{"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42},
	})
	return string(raw)
}

// The provider sends the wire format (bearer key, function tools with
// wire-safe names, assistant tool calls and tool answers) and maps tool
// calls back to the agent's tool names.
func TestOpenAIToolCalls(t *testing.T) {
	g := NewWithT(t)
	srv := newChatServer(t, func(int, oaRequest) (int, http.Header, string) {
		return 200, nil, completion("", [2]string{"report_publish", `{"section":"Summary","content":"text"}`},
			[2]string{"http_get", `not json`})
	})
	p := &OpenAI{BaseURL: srv.URL + "/v1/", APIKey: "sk-test"}
	resp, err := p.Complete(context.Background(), Request{
		Purpose: PurposeStep, Model: "gpt-test",
		Tools: []ToolSpec{{Name: "report.publish", Description: "publish"}, {Name: "http.get"}},
		Messages: []Message{
			{Role: "system", Content: "be brief"},
			{Role: "assistant", ToolCalls: []ToolCall{{ID: "call_0", Name: "http.get", Args: map[string]any{"url": "u"}}}},
			{Role: "tool", ToolCallID: "call_0", Content: "page"},
		},
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(resp.Tokens).To(Equal(int64(42)))
	g.Expect(resp.Finish).To(BeFalse())
	g.Expect(resp.ToolCalls).To(HaveLen(2))
	g.Expect(resp.ToolCalls[0]).To(Equal(ToolCall{ID: "call_0", Name: "report.publish", Args: map[string]any{"section": "Summary", "content": "text"}}))
	g.Expect(resp.ToolCalls[1].Name).To(Equal("http.get"))
	g.Expect(resp.ToolCalls[1].Args).To(HaveKey("_invalid_json"), "the tool sees and refuses bad arguments")

	req := srv.requests[0]
	g.Expect(srv.headers[0].Get("Authorization")).To(Equal("Bearer sk-test"))
	g.Expect(req.Model).To(Equal("gpt-test"))
	g.Expect(req.ToolChoice).To(Equal("auto"))
	g.Expect(req.Tools).To(HaveLen(2))
	g.Expect(req.Tools[0].Type).To(Equal("function"))
	g.Expect(req.Tools[0].Function.Name).To(Equal("report_publish"))
	g.Expect(req.Tools[0].Function.Parameters).To(HaveKeyWithValue("type", "object"))
	g.Expect(req.Messages[1].Content).To(BeNil(), "an assistant message with only tool calls has null content")
	g.Expect(req.Messages[1].ToolCalls[0].Function.Name).To(Equal("http_get"))
	g.Expect(req.Messages[1].ToolCalls[0].Function.Arguments).To(Equal(`{"url":"u"}`))
	g.Expect(req.Messages[2].ToolCallID).To(Equal("call_0"))

	// No tool calls on a step: the model is done.
	srv.answer = func(int, oaRequest) (int, http.Header, string) {
		return 200, nil, completion("All sections are published.")
	}
	resp, err = p.Complete(context.Background(), Request{Purpose: PurposeStep, Model: "gpt-test"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(resp.Finish).To(BeTrue())
	g.Expect(resp.Content).To(Equal("All sections are published."))
}

// Errors are classified retryable or fatal, with the provider's message and
// Retry-After, and carried as the SDK's FaultError.
func TestOpenAIErrors(t *testing.T) {
	for _, tc := range []struct {
		status     int
		header     http.Header
		body       string
		kind       string
		retryable  bool
		retryAfter time.Duration
	}{
		{429, http.Header{"Retry-After": {"3"}}, `{"error":{"message":"Rate limit reached","type":"requests"}}`, "RateLimited", true, 3 * time.Second},
		{500, nil, `{"error":{"message":"oops"}}`, "ServerError", true, 0},
		{503, nil, `upstream down`, "Unavailable", true, 0},
		{408, nil, ``, "Timeout", true, 0},
		{401, nil, `{"error":{"message":"Incorrect API key provided"}}`, "Unauthorized", false, 0},
		{400, nil, `{"error":{"message":"bad tool schema"}}`, "InvalidRequest", false, 0},
		{404, nil, `{"error":{"message":"model not found"}}`, "NotFound", false, 0},
		{200, nil, `<html>proxy error</html>`, "BadResponse", true, 0},
		{200, nil, `{"choices":[]}`, "BadResponse", true, 0},
	} {
		t.Run(fmt.Sprintf("%d-%s", tc.status, tc.kind), func(t *testing.T) {
			g := NewWithT(t)
			srv := newChatServer(t, func(int, oaRequest) (int, http.Header, string) { return tc.status, tc.header, tc.body })
			_, err := (&OpenAI{BaseURL: srv.URL + "/v1"}).Complete(context.Background(), Request{Purpose: PurposeStep, Model: "m"})
			var fe *agent.FaultError
			g.Expect(errors.As(err, &fe)).To(BeTrue())
			g.Expect(fe.Kind).To(Equal(tc.kind))
			g.Expect(fe.Retryable).To(Equal(tc.retryable))
			var pe *ProviderError
			g.Expect(errors.As(err, &pe)).To(BeTrue())
			g.Expect(pe.RetryAfter).To(Equal(tc.retryAfter))
			if strings.Contains(tc.body, `"message"`) {
				var body oaError
				_ = json.Unmarshal([]byte(tc.body), &body)
				g.Expect(err.Error()).To(ContainSubstring(body.Error.Message))
			}
		})
	}

	g := NewWithT(t)
	srv := newChatServer(t, nil)
	srv.Close()
	_, err := (&OpenAI{BaseURL: srv.URL + "/v1"}).Complete(context.Background(), Request{Model: "m"})
	var fe *agent.FaultError
	g.Expect(errors.As(err, &fe)).To(BeTrue())
	g.Expect(fe.Kind).To(Equal("Unavailable"))
	g.Expect(fe.Retryable).To(BeTrue())
}

// fakeModel answers like a small model: a plan, a note, a publication,
// then done; the first step request fails twice with 503.
func fakeModel(failFirstStep int) func(n int, req oaRequest) (int, http.Header, string) {
	var mu sync.Mutex
	failures := 0
	return func(n int, req oaRequest) (int, http.Header, string) {
		mu.Lock()
		defer mu.Unlock()
		last := req.Messages[len(req.Messages)-1]
		if last.Content != nil && strings.Contains(*last.Content, "JSON array") {
			return 200, nil, completion(`["Summary"]`)
		}
		assistants := 0
		for _, m := range req.Messages {
			if m.Role == "assistant" {
				assistants++
			}
		}
		if assistants == 0 && failures < failFirstStep {
			failures++
			return 503, nil, `{"error":{"message":"overloaded"}}`
		}
		switch assistants {
		case 0:
			return 200, nil, completion("", [2]string{"notes_write", `{"section":"Summary","text":"raft wins"}`})
		case 1:
			return 200, nil, completion("", [2]string{"report_publish", `{"section":"Summary","content":"Raft wins."}`})
		}
		return 200, nil, completion("The report is published.")
	}
}

// The research loop on the OpenAI-compatible provider: retries with
// backoff, each retry a model request counted against the grant.
func TestRunOpenAIRetries(t *testing.T) {
	srv := newChatServer(t, fakeModel(2))
	w := newWorld(t, attemptObject(1))
	cfg := w.config("")
	cfg.ProviderName, cfg.BaseURL, cfg.Model, cfg.APIKey = ProviderOpenAI, srv.URL+"/v1", "gpt-test", "sk-test"
	w.g.Expect(w.run(cfg)).To(Succeed())

	s := w.attempt().Status
	w.g.Expect(s.Usage.ModelRequests).To(Equal(int64(srv.count())), "every HTTP request is a counted model request")
	w.g.Expect(srv.count()).To(Equal(1 + 3 + 2)) // plan, first step ×3, publish step, done
	f, ok := fault(s, v1.FaultScopeProvider, "Unavailable")
	w.g.Expect(ok).To(BeTrue())
	w.g.Expect(f.Count).To(Equal(int64(2)))
	w.g.Expect(s.Usage.Tokens).To(Equal(int64(42 * 4)))
	w.g.Expect(s.Publication.Settlement).To(Equal(v1.SettlementComplete))
	w.g.Expect(w.report().Data).To(HaveKeyWithValue("01-summary.md", "Raft wins."))
}

// Retries respect the grant: once it is used up the next try is refused
// locally and never reaches the provider.
func TestRunOpenAIRetriesRespectGrant(t *testing.T) {
	srv := newChatServer(t, func(int, oaRequest) (int, http.Header, string) { return 503, nil, `{"error":{"message":"down"}}` })
	ra := attemptObject(1)
	ra.Spec.Grant = v1.Grant{ModelRequests: 2, ToolCalls: 5}
	w := newWorld(t, ra)
	cfg := w.config("")
	cfg.ProviderName, cfg.BaseURL, cfg.Model = ProviderOpenAI, srv.URL+"/v1", "gpt-test"
	cfg.MaxRetries = 5
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := w.start(ctx, cfg)
	w.g.Eventually(func() bool {
		_, ok := fault(w.attempt().Status, v1.FaultScopeAgent, "GrantExhausted")
		return ok
	}, wait, poll).Should(BeTrue())
	w.g.Expect(srv.count()).To(Equal(2))
	w.g.Expect(w.attempt().Status.Usage.ModelRequests).To(Equal(int64(2)))

	// The operator ends the run (no reserve): the agent exits cleanly.
	w.updateSpec(func(s *v1.RunAttemptSpec) { s.RunPhase = v1.PhaseTerminated; s.Grant = v1.Grant{} })
	w.g.Eventually(done, wait).Should(Receive(BeNil()))
	w.g.Expect(srv.count()).To(Equal(2))
}
