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

package research_test

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
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
	"github.com/agentrun-dev/agentrun/pkg/agent"
	"github.com/agentrun-dev/agentrun/pkg/agent/research"
)

// oaRequest is a chat completion request as the provider receives it.
type oaRequest struct {
	Model    string      `json:"model"`
	Messages []oaMessage `json:"messages"`
	Tools    []struct {
		Type     string `json:"type"`
		Function struct {
			Name        string         `json:"name"`
			Description string         `json:"description"`
			Parameters  map[string]any `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
}

type oaMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCallID string          `json:"tool_call_id"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

// text is the message's content as a string ("" when absent or null).
func (m oaMessage) text() string {
	var s string
	_ = json.Unmarshal(m.Content, &s)
	return s
}

// chatServer is a provider behind the gateway: it speaks the
// chat-completions wire format, records each request and answers it with
// answer (status, headers, body).
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
		answer := s.answer
		s.mu.Unlock()
		status, hdr, body := answer(n, req)
		maps.Copy(rw.Header(), hdr)
		if rw.Header().Get("Content-Type") == "" {
			rw.Header().Set("Content-Type", "application/json")
		}
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

func (s *chatServer) setAnswer(answer func(n int, req oaRequest) (int, http.Header, string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answer = answer
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
		"id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-test",
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
		"usage":   map[string]any{"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42},
	})
	return string(raw)
}

// gptModel serves model gpt-test from srv, with the provider key in a
// Secret only the gateway reads.
func gptModel(srv *chatServer) (func(*v1alpha1.RunAttempt), client.Object) {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: gatewaytest.Namespace, Name: "openai",
		Labels: map[string]string{v1alpha1.LabelProviderKey: "true"}},
		Data: map[string][]byte{"key": []byte("sk-test\n")}}
	return func(ra *v1alpha1.RunAttempt) {
		ra.Spec.Policy.Models = append(ra.Spec.Policy.Models, v1alpha1.Model{
			Name: "gpt-test", BaseURL: srv.URL + "/v1", UpstreamModel: "gpt-test-2026",
			APIKeySecretRef: &v1alpha1.SecretKeyRef{Name: "openai", Key: "key"},
		})
	}, secret
}

// bare is mutate with no interceptor chain, for a bare SDK agent.
func bare(mutate func(*v1alpha1.RunAttempt)) func(*v1alpha1.RunAttempt) {
	return func(ra *v1alpha1.RunAttempt) {
		mutate(ra)
		ra.Spec.Policy.ResolvedChain = nil
	}
}

// startAgent starts an SDK agent on the world's attempt.
func (w *world) startAgent() (*agent.Agent, context.Context) {
	w.t.Helper()
	a, err := agent.New(w.AgentConfig())
	w.g.Expect(err).NotTo(HaveOccurred())
	ctx, err := a.Start(context.Background())
	w.g.Expect(err).NotTo(HaveOccurred())
	w.t.Cleanup(func() { _ = a.Close(context.Background()) })
	return a, ctx
}

// The provider speaks the wire format through the gateway's model door:
// the provider gets the gateway's provider key (never the agent's token),
// function tools with wire-safe names, assistant tool calls and tool
// answers; tool calls come back under the agent's tool names.
func TestOpenAIToolCalls(t *testing.T) {
	srv := newChatServer(t, func(int, oaRequest) (int, http.Header, string) {
		return 200, nil, completion("", [2]string{"report_publish", `{"section":"Summary","content":"text"}`},
			[2]string{"http_get", `not json`})
	})
	model, secret := gptModel(srv)
	w := newWorld(t, bare(model), secret)
	a, ctx := w.startAgent()
	p := &research.OpenAI{Client: a.OpenAI()}
	resp, err := p.Complete(ctx, research.Request{
		Purpose: research.PurposeStep, Model: "gpt-test",
		Tools: []research.ToolSpec{{Name: "report.publish", Description: "publish"}, {Name: "http.get"}},
		Messages: []research.Message{
			{Role: "system", Content: "be brief"},
			{Role: "assistant", ToolCalls: []research.ToolCall{{ID: "call_0", Name: "http.get", Args: map[string]any{"url": "u"}}}},
			{Role: "tool", ToolCallID: "call_0", Content: "page"},
		},
	})
	w.g.Expect(err).NotTo(HaveOccurred())
	w.g.Expect(resp.Tokens).To(Equal(int64(42)))
	w.g.Expect(resp.Finish).To(BeFalse())
	w.g.Expect(resp.ToolCalls).To(HaveLen(2))
	w.g.Expect(resp.ToolCalls[0]).To(Equal(research.ToolCall{ID: "call_0", Name: "report.publish", Args: map[string]any{"section": "Summary", "content": "text"}}))
	w.g.Expect(resp.ToolCalls[1].Name).To(Equal("http.get"))
	w.g.Expect(resp.ToolCalls[1].Args).To(HaveKey("_invalid_json"), "the tool sees and refuses bad arguments")

	w.g.Expect(srv.count()).To(Equal(1))
	req := srv.requests[0]
	w.g.Expect(srv.headers[0].Get("Authorization")).To(Equal("Bearer sk-test"), "the provider key, not the pod's token")
	w.g.Expect(req.Model).To(Equal("gpt-test-2026"), "the policy's upstream model id")
	w.g.Expect(req.Tools).To(HaveLen(2))
	w.g.Expect(req.Tools[0].Type).To(Equal("function"))
	w.g.Expect(req.Tools[0].Function.Name).To(Equal("report_publish"))
	w.g.Expect(req.Tools[0].Function.Description).To(Equal("publish"))
	w.g.Expect(req.Tools[0].Function.Parameters).To(HaveKeyWithValue("type", "object"))
	w.g.Expect(req.Tools[1].Function.Name).To(Equal("http_get"))
	w.g.Expect(req.Messages).To(HaveLen(3))
	w.g.Expect(req.Messages[0].text()).To(Equal("be brief"))
	w.g.Expect(req.Messages[1].Role).To(Equal("assistant"))
	w.g.Expect(req.Messages[1].text()).To(BeEmpty(), "an assistant message with only tool calls has no content")
	w.g.Expect(req.Messages[1].ToolCalls[0].ID).To(Equal("call_0"))
	w.g.Expect(req.Messages[1].ToolCalls[0].Type).To(Equal("function"))
	w.g.Expect(req.Messages[1].ToolCalls[0].Function.Name).To(Equal("http_get"))
	w.g.Expect(req.Messages[1].ToolCalls[0].Function.Arguments).To(Equal(`{"url":"u"}`))
	w.g.Expect(req.Messages[2].Role).To(Equal("tool"))
	w.g.Expect(req.Messages[2].ToolCallID).To(Equal("call_0"))
	w.g.Expect(req.Messages[2].text()).To(Equal("page"))

	// No tool calls on a step: the model is done.
	srv.setAnswer(func(int, oaRequest) (int, http.Header, string) {
		return 200, nil, completion("All sections are published.")
	})
	resp, err = p.Complete(ctx, research.Request{Purpose: research.PurposeStep, Model: "gpt-test", Messages: []research.Message{{Role: "user", Content: "go"}}})
	w.g.Expect(err).NotTo(HaveOccurred())
	w.g.Expect(resp.Finish).To(BeTrue())
	w.g.Expect(resp.Content).To(Equal("All sections are published."))
	w.g.Eventually(func() v1alpha1.Usage { return w.status().Usage }, wait, poll).Should(Equal(v1alpha1.Usage{ModelRequests: 2, Tokens: 84}))
}

// Provider errors come back through the gateway (status, body,
// Retry-After) and are classified retryable or fatal, as the SDK's
// FaultError; the gateway counts each as a model request and a Provider
// fault.
func TestOpenAIErrors(t *testing.T) {
	srv := newChatServer(t, nil)
	model, secret := gptModel(srv)
	w := newWorld(t, bare(model), secret)
	a, ctx := w.startAgent()
	p := &research.OpenAI{Client: a.OpenAI()}
	ask := func() error {
		return a.ModelRequest(ctx, "gpt-test", func(ctx context.Context) error {
			_, err := p.Complete(ctx, research.Request{Purpose: research.PurposeStep, Model: "gpt-test", Messages: []research.Message{{Role: "user", Content: "go"}}})
			return err
		})
	}
	for i, tc := range []struct {
		status     int
		header     http.Header
		body       string
		kind       string
		retryable  bool
		retryAfter time.Duration
	}{
		{429, http.Header{"Retry-After": {"3"}}, `{"error":{"message":"Rate limit reached","type":"requests"}}`, "RateLimited", true, 3 * time.Second},
		{429, nil, `{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}`, "InsufficientQuota", true, 0},
		{500, nil, `{"error":{"message":"oops"}}`, "ServerError", true, 0},
		{503, nil, `upstream down`, "ServerError", true, 0},
		{408, nil, `{"error":{"message":"took too long"}}`, "Timeout", true, 0},
		{401, nil, `{"error":{"message":"Incorrect API key provided"}}`, "Unauthorized", false, 0},
		{400, nil, `{"error":{"message":"bad tool schema"}}`, "InvalidRequest", false, 0},
		{404, nil, `{"error":{"message":"model not found"}}`, "NotFound", false, 0},
		{200, http.Header{"Content-Type": {"text/html"}}, `<html>proxy error</html>`, "BadResponse", true, 0},
		{200, nil, `{"id":"x","object":"chat.completion","choices":[]}`, "BadResponse", true, 0},
	} {
		t.Run(fmt.Sprintf("%d-%s", tc.status, tc.kind), func(t *testing.T) {
			g := NewWithT(t)
			srv.setAnswer(func(int, oaRequest) (int, http.Header, string) { return tc.status, tc.header, tc.body })
			err := ask()
			var fe *agent.FaultError
			g.Expect(errors.As(err, &fe)).To(BeTrue(), "%v", err)
			g.Expect(fe.Kind).To(Equal(tc.kind))
			g.Expect(fe.Retryable).To(Equal(tc.retryable))
			g.Expect(agent.IsRefusal(err)).To(BeFalse())
			g.Expect(research.RetryAfter(err)).To(Equal(tc.retryAfter))
			if strings.Contains(tc.body, `"message"`) {
				var body struct {
					Error struct {
						Message string `json:"message"`
					} `json:"error"`
				}
				_ = json.Unmarshal([]byte(tc.body), &body)
				g.Expect(err.Error()).To(ContainSubstring(body.Error.Message))
			}
			g.Expect(srv.count()).To(Equal(i + 1))
			g.Eventually(func() int64 { return w.status().Usage.ModelRequests }, wait, poll).Should(Equal(int64(i+1)),
				"every dispatched request counts, a failed one too")
			if tc.status != 200 {
				g.Eventually(w.hasFault(v1alpha1.FaultScopeProvider, tc.kind), wait, poll).Should(BeTrue(), "the gateway records the same kind")
			}
		})
	}

	// The gateway cannot be reached (a restart): retryable.
	w.Crash()
	err := ask()
	var fe *agent.FaultError
	w.g.Expect(errors.As(err, &fe)).To(BeTrue(), "%v", err)
	w.g.Expect(fe.Retryable).To(BeTrue())
}

// fakeModel answers like a small model: a plan, a note, a publication,
// then done; the first step request fails failFirstStep times with 503.
func fakeModel(failFirstStep int) func(n int, req oaRequest) (int, http.Header, string) {
	var mu sync.Mutex
	failures := 0
	return func(n int, req oaRequest) (int, http.Header, string) {
		mu.Lock()
		defer mu.Unlock()
		last := req.Messages[len(req.Messages)-1]
		if strings.Contains(last.text(), "JSON array") {
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

// The research loop on the OpenAI-compatible provider, through the
// gateway: tool calls under wire names run as the agent's tools, retries
// back off, and every try is a model request the gateway counted.
func TestRunOpenAIRetries(t *testing.T) {
	srv := newChatServer(t, fakeModel(2))
	model, secret := gptModel(srv)
	w := newWorld(t, model, secret)
	cfg := w.base()
	cfg.Model = "gpt-test"
	w.g.Expect(w.run(cfg)).To(Succeed())

	s := w.status()
	w.g.Expect(srv.count()).To(Equal(1 + 3 + 2)) // plan, first step ×3, publish step, done
	w.g.Expect(s.Usage.ModelRequests).To(Equal(int64(srv.count())), "every HTTP request is a counted model request")
	f, ok := fault(s, v1alpha1.FaultScopeProvider, "ServerError")
	w.g.Expect(ok).To(BeTrue())
	w.g.Expect(f.Count).To(Equal(int64(2)))
	w.g.Expect(f.Retryable).To(BeTrue())
	w.g.Expect(s.Usage.Tokens).To(Equal(int64(42 * 4)))
	w.g.Expect(s.Usage.ToolCalls).To(Equal(int64(2)))
	w.g.Expect(s.Publication.Settlement).To(Equal(v1alpha1.SettlementComplete))
	w.g.Expect(w.report().Data).To(HaveKeyWithValue("01-summary.md", "Raft wins."))
}

// Retries respect the grant: once it is used up the next try is refused by
// the gateway and never reaches the provider.
func TestRunOpenAIRetriesRespectGrant(t *testing.T) {
	srv := newChatServer(t, func(int, oaRequest) (int, http.Header, string) { return 503, nil, `{"error":{"message":"down"}}` })
	model, secret := gptModel(srv)
	w := newWorld(t, func(ra *v1alpha1.RunAttempt) {
		model(ra)
		ra.Spec.Grant = v1alpha1.Grant{ModelRequests: 2, ToolCalls: 5}
	}, secret)
	cfg := w.base()
	cfg.Model = "gpt-test"
	cfg.MaxRetries = 5
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := w.start(ctx, cfg)
	w.g.Eventually(w.hasFault(v1alpha1.FaultScopeAgent, "GrantExhausted"), wait, poll).Should(BeTrue())
	w.g.Expect(srv.count()).To(Equal(2))
	w.g.Expect(w.status().Usage.ModelRequests).To(Equal(int64(2)))

	// The operator ends the run (no reserve): the agent exits cleanly.
	w.UpdateSpec(func(s *v1alpha1.RunAttemptSpec) { s.RunPhase = v1alpha1.PhaseTerminated; s.Grant = v1alpha1.Grant{} })
	w.g.Eventually(done, wait).Should(Receive(BeNil()))
	w.g.Expect(srv.count()).To(Equal(2))
}
