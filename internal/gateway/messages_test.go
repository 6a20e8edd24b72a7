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
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
	"github.com/agentrun-dev/agentrun/internal/upstream"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// headerRecorder records the headers and paths of what the gateway sent
// upstream, in front of a body recorder.
type headerRecorder struct {
	mu      sync.Mutex
	headers []http.Header
	paths   []string
	inner   http.Handler
}

func (h *headerRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.headers = append(h.headers, r.Header.Clone())
	h.paths = append(h.paths, r.URL.RequestURI())
	h.mu.Unlock()
	h.inner.ServeHTTP(w, r)
}

func (h *headerRecorder) last() (http.Header, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.headers) == 0 {
		return nil, ""
	}
	return h.headers[len(h.headers)-1], h.paths[len(h.paths)-1]
}

// messagesEnv starts a gateway whose default model's provider speaks
// Anthropic Messages (as upstream model claude-up, with a provider key);
// the degraded model's speaks OpenAI Chat.
func messagesEnv(t *testing.T, mutate func(*v1alpha1.RunAttempt)) (*gatewaytest.Env, *recorder, *headerRecorder) {
	t.Helper()
	rec := &recorder{inner: &upstream.Server{}}
	hr := &headerRecorder{inner: rec}
	up := httptest.NewServer(hr)
	t.Cleanup(up.Close)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: gatewaytest.Namespace, Name: "provider",
		Labels: map[string]string{v1alpha1.LabelProviderKey: "true"}},
		Data: map[string][]byte{"key": []byte("sk-ant-provider\n")}}
	e := gatewaytest.Start(t, gatewaytest.Options{
		Objects: []client.Object{secret},
		Mutate: func(ra *v1alpha1.RunAttempt) {
			for i := range ra.Spec.Policy.Models {
				ra.Spec.Policy.Models[i].BaseURL = up.URL + "/v1"
			}
			m := &ra.Spec.Policy.Models[0]
			m.APIKeySecretRef = &v1alpha1.SecretKeyRef{Name: "provider", Key: "key"}
			m.API = v1alpha1.ModelAPIAnthropicMessages
			m.UpstreamModel = "claude-up"
			if mutate != nil {
				mutate(ra)
			}
		},
	})
	return e, rec, hr
}

// sendMessages posts body to path with the pod token in header (x-api-key
// or Authorization) and the headers given.
func sendMessages(t *testing.T, e *gatewaytest.Env, path, auth string, body []byte, hdr map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.URL()+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	switch auth {
	case "x-api-key":
		req.Header.Set("x-api-key", gatewaytest.Token)
	case "bearer":
		req.Header.Set("Authorization", "Bearer "+gatewaytest.Token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// anthropicBody decodes an Anthropic error answer.
type anthropicBody struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
		Code    string `json:"code"`
		Param   string `json:"param"`
	} `json:"error"`
}

func readAnthropicError(g Gomega, resp *http.Response) anthropicBody {
	defer func() { _ = resp.Body.Close() }()
	var b anthropicBody
	g.Expect(json.NewDecoder(resp.Body).Decode(&b)).To(Succeed())
	g.Expect(b.Type).To(Equal("error"))
	return b
}

// claudeMessages is a conversation with every kind of block Claude Code
// sends: text, a tool_use and its tool_result, thinking, and a block type
// the gateway does not know.
const claudeMessages = `[{"role":"user","content":[{"type":"text","text":"list files"}]},` +
	`{"role":"assistant","content":[{"type":"thinking","thinking":"use ls","signature":"abc"},` +
	`{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"ls"}}]},` +
	`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"a.go"},` +
	`{"type":"future_block","x":1}]}]`

func messagesBody(model, extra string) []byte {
	return []byte(`{"model":"` + model + `","max_tokens":1024,"messages":` + claudeMessages + extra + `}`)
}

func TestMessagesDoorPassesThroughWithTheProviderKeyAndCountsCacheTokens(t *testing.T) {
	g := NewWithT(t)
	e, rec, hr := messagesEnv(t, nil)
	resp := sendMessages(t, e, "/v1/messages", "x-api-key", messagesBody(gatewaytest.Model,
		`,"agentrun_scripted":{"say":"hi","tokens":42,"cacheReadTokens":100,"cacheWriteTokens":7,`+
			`"tools":[{"id":"toolu_2","name":"Read","arguments":{"path":"a.go"}}]}`),
		map[string]string{"anthropic-version": "2023-06-01", "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14"})
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	var out struct {
		Type       string `json:"type"`
		StopReason string `json:"stop_reason"`
		Content    []struct {
			Type  string         `json:"type"`
			Text  string         `json:"text"`
			Name  string         `json:"name"`
			Input map[string]any `json:"input"`
		} `json:"content"`
		Usage map[string]int64 `json:"usage"`
	}
	g.Expect(json.NewDecoder(resp.Body).Decode(&out)).To(Succeed())
	_ = resp.Body.Close()
	g.Expect(out.Type).To(Equal("message"))
	g.Expect(out.StopReason).To(Equal("tool_use"))
	g.Expect(out.Content).To(HaveLen(2))
	g.Expect(out.Content[1].Name).To(Equal("Read"))
	g.Expect(out.Usage).To(HaveKeyWithValue("cache_read_input_tokens", BeEquivalentTo(100)))

	h, path := hr.last()
	g.Expect(path).To(Equal("/v1/messages"))
	g.Expect(h.Get("x-api-key")).To(Equal("sk-ant-provider"), "the provider key, in the header Anthropic expects")
	g.Expect(h.Get("Authorization")).To(BeEmpty())
	for name, vs := range h {
		for _, v := range vs {
			g.Expect(v).NotTo(ContainSubstring(gatewaytest.Token), "the pod's token never reaches the provider (%s)", name)
		}
	}
	g.Expect(h.Get("anthropic-version")).To(Equal("2023-06-01"))
	g.Expect(h.Get("anthropic-beta")).To(Equal("claude-code-20250219,interleaved-thinking-2025-05-14"))

	body, _ := rec.last()
	g.Expect(body).To(HaveKeyWithValue("model", "claude-up"))
	sent, _ := json.Marshal(body["messages"])
	var want any
	g.Expect(json.Unmarshal([]byte(claudeMessages), &want)).To(Succeed())
	g.Expect(sent).To(MatchJSON(mustJSON(want)), "tool_use, tool_result, thinking and unknown blocks pass untouched")

	g.Eventually(func() v1alpha1.Usage { return e.Status().Usage }).Should(
		Equal(v1alpha1.Usage{ModelRequests: 1, Tokens: 42 + 100 + 7}), "input + cache creation + cache read + output")
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

func TestMessagesDoorStreamsEventsUnchangedAndCountsStartAndDelta(t *testing.T) {
	g := NewWithT(t)
	e, _, hr := messagesEnv(t, nil)
	resp := sendMessages(t, e, "/v1/messages?beta=true", "bearer", messagesBody(gatewaytest.Model,
		`,"stream":true,"agentrun_scripted":{"say":"a streamed answer of some length","think":"hmm","tokens":30,`+
			`"cacheReadTokens":50,"tools":[{"id":"toolu_3","name":"Bash","arguments":{"command":"go test ./..."}}]}`), nil)
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	g.Expect(resp.Header.Get("Content-Type")).To(HavePrefix("text/event-stream"))
	var events, types []string
	var partial strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if ev, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			events = append(events, ev)
		}
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var ev struct {
				Type  string `json:"type"`
				Delta struct {
					PartialJSON string `json:"partial_json"`
				} `json:"delta"`
			}
			g.Expect(json.Unmarshal([]byte(data), &ev)).To(Succeed())
			types = append(types, ev.Type)
			partial.WriteString(ev.Delta.PartialJSON)
		}
	}
	_ = resp.Body.Close()
	g.Expect(events).To(Equal(types), "every event: line reaches the client with its data")
	g.Expect(types[0]).To(Equal("message_start"))
	g.Expect(types[len(types)-2:]).To(Equal([]string{"message_delta", "message_stop"}))
	g.Expect(types).To(ContainElement("content_block_delta"))
	g.Expect(partial.String()).To(MatchJSON(`{"command":"go test ./..."}`), "input_json_delta relayed whole")

	h, path := hr.last()
	g.Expect(path).To(Equal("/v1/messages"), "the client's query stays at the gateway")
	g.Expect(h.Get("anthropic-version")).To(Equal("2023-06-01"), "a default version when the client names none")
	g.Expect(h.Get("Authorization")).To(BeEmpty(), "the pod's bearer token stays at the gateway")
	for name, vs := range h {
		g.Expect(strings.Join(vs, ",")).NotTo(ContainSubstring(gatewaytest.Token), name)
	}
	g.Expect(h.Get("x-api-key")).To(Equal("sk-ant-provider"))
	// message_start: input 15 + cache read 50 (output 1); message_delta:
	// output 15 cumulative.
	g.Eventually(func() v1alpha1.Usage { return e.Status().Usage }).Should(Equal(v1alpha1.Usage{ModelRequests: 1, Tokens: 80}))
}

func TestMessagesDoorReservesMaxTokensAndRefusesInTheAnthropicShape(t *testing.T) {
	g := NewWithT(t)
	e, rec, _ := messagesEnv(t, func(ra *v1alpha1.RunAttempt) {
		ra.Spec.Grant.Tokens = new(int64(20000))
		ra.Spec.Grant.ModelRequests = 2
		ra.Spec.Policy.Models[0].MaxTokens = new(int64(8000))
	})
	// Claude Code asks for 128000 on every request: the policy's cap is sent.
	body := []byte(`{"model":"scripted","max_tokens":128000,"messages":[{"role":"user","content":"hi"}],` +
		`"agentrun_scripted":{"say":"ok","tokens":10}}`)
	resp := sendMessages(t, e, "/v1/messages", "x-api-key", body, nil)
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	g.Expect(resp.Header.Get("agentrun-max-tokens-clamped")).To(Equal("8000"))
	_ = resp.Body.Close()
	sent, _ := rec.last()
	g.Expect(sent).To(HaveKeyWithValue("max_tokens", BeNumerically("==", 8000)))

	// What remains (19990 - the prompt) is less than the cap: the request
	// is lowered to fit it.
	e.UpdateSpec(func(s *v1alpha1.RunAttemptSpec) { s.Grant.Tokens = new(int64(5000)) })
	resp = sendMessages(t, e, "/v1/messages", "x-api-key", body, nil)
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	_ = resp.Body.Close()
	sent, _ = rec.last()
	// The same conversation again: its prompt is bounded by the earlier
	// request's charge (10), not its bytes (reservation.go).
	g.Expect(sent["max_tokens"]).To(BeNumerically("==", 5000-10-10))
	g.Expect(resp.Header.Get("agentrun-max-tokens-clamped")).To(Equal("4980"))

	resp = sendMessages(t, e, "/v1/messages", "x-api-key", body, nil)
	g.Expect(resp.StatusCode).To(Equal(http.StatusTooManyRequests))
	g.Expect(resp.Header.Get(gatewayapi.HeaderShouldRetry)).To(Equal("false"), "so the Anthropic SDKs do not retry it")
	eb := readAnthropicError(g, resp)
	g.Expect(eb.Error.Type).To(Equal("rate_limit_error"))
	g.Expect(eb.Error.Code).To(Equal(gatewayapi.CodeGrantExhausted))
	g.Expect(eb.Error.Message).To(HavePrefix("grant_exhausted: "))
	g.Expect(eb.Error.Message).To(ContainSubstring("2/2 model requests"))
	g.Expect(rec.bodies).To(HaveLen(2), "the refused request never reached the provider")

	resp = sendMessages(t, e, "/v1/messages", "", body, nil)
	g.Expect(resp.StatusCode).To(Equal(http.StatusUnauthorized))
	eb = readAnthropicError(g, resp)
	g.Expect(eb.Error.Type).To(Equal("authentication_error"))
	g.Expect(eb.Error.Code).To(Equal(gatewayapi.CodeInvalidToken))

	resp = sendMessages(t, e, "/v1/messages", "bearer", []byte(`{"model":"scripted","messages":[]}`), nil)
	g.Expect(resp.StatusCode).To(Equal(http.StatusBadRequest))
	eb = readAnthropicError(g, resp)
	g.Expect(eb.Error.Type).To(Equal("invalid_request_error"))
	g.Expect(eb.Error.Param).To(Equal("messages"))

	resp = sendMessages(t, e, "/v1/messages", "bearer",
		[]byte(`{"model":"scripted","MAX_TOKENS":9,"max_tokens":1,"messages":[{"role":"user","content":"x"}]}`), nil)
	g.Expect(resp.StatusCode).To(Equal(http.StatusBadRequest))
	g.Expect(readAnthropicError(g, resp).Error.Message).To(ContainSubstring(`"MAX_TOKENS" is refused`))
}

func TestMessagesDoorServesTheReserveOnlyToOutputWork(t *testing.T) {
	g := NewWithT(t)
	e, rec, _ := messagesEnv(t, func(ra *v1alpha1.RunAttempt) {
		ra.Spec.RunPhase = v1alpha1.PhaseFinalizing
		ra.Spec.Grant = v1alpha1.Grant{ModelRequests: 1, ToolCalls: 1, FinalizeOnly: true}
	})
	body := messagesBody(gatewaytest.Model, "")
	resp := sendMessages(t, e, "/v1/messages", "x-api-key", body,
		map[string]string{gatewayapi.HeaderPurpose: gatewayapi.PurposeResearch})
	g.Expect(resp.StatusCode).To(Equal(http.StatusTooManyRequests))
	g.Expect(resp.Header.Get(gatewayapi.HeaderShouldRetry)).To(Equal("false"))
	g.Expect(readAnthropicError(g, resp).Error.Code).To(Equal(gatewayapi.CodeFinalizeOnly))
	g.Expect(rec.bodies).To(BeEmpty())

	resp = sendMessages(t, e, "/v1/messages", "x-api-key", body, map[string]string{gatewayapi.HeaderPurpose: gatewayapi.PurposeOutput})
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK), "the reserve serves output work")
	_ = resp.Body.Close()
	resp = sendMessages(t, e, "/v1/messages", "x-api-key", body, map[string]string{gatewayapi.HeaderPurpose: gatewayapi.PurposeOutput})
	g.Expect(resp.StatusCode).To(Equal(http.StatusTooManyRequests))
	g.Expect(resp.Header.Get(gatewayapi.HeaderShouldRetry)).To(Equal("false"))
	eb := readAnthropicError(g, resp)
	g.Expect(eb.Error.Code).To(Equal(gatewayapi.CodeReserveExhausted))
	g.Expect(eb.Error.Type).To(Equal("rate_limit_error"))
}

func TestMessagesDoorAnswersProviderErrorsInTheAnthropicShape(t *testing.T) {
	g := NewWithT(t)
	e, _, _ := messagesEnv(t, nil)
	resp := sendMessages(t, e, "/v1/messages", "x-api-key", messagesBody(gatewaytest.Model,
		`,"agentrun_scripted":{"error":{"retryable":true,"retryAfterSeconds":3,"message":"slow down"}}`), nil)
	g.Expect(resp.StatusCode).To(Equal(http.StatusTooManyRequests))
	g.Expect(resp.Header.Get("Retry-After")).To(Equal("3"))
	eb := readAnthropicError(g, resp)
	g.Expect(eb.Error.Type).To(Equal("rate_limit_error"))
	g.Eventually(func() []v1alpha1.Fault { return e.Status().Faults }).Should(ContainElement(
		HaveField("Scope", v1alpha1.FaultScopeProvider)))
	g.Eventually(func() int64 { return e.Status().Usage.ModelRequests }).Should(BeEquivalentTo(1))
}

func TestMessagesDoorCountsTokensWithoutChargingThem(t *testing.T) {
	g := NewWithT(t)
	e, _, hr := messagesEnv(t, nil)
	body := messagesBody(gatewaytest.Model, "")
	resp := sendMessages(t, e, "/v1/messages/count_tokens", "x-api-key", body, nil)
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	g.Expect(resp.Header.Get("agentrun-estimate")).To(BeEmpty(), "the provider counted")
	var n struct {
		InputTokens int64 `json:"input_tokens"`
	}
	g.Expect(json.NewDecoder(resp.Body).Decode(&n)).To(Succeed())
	_ = resp.Body.Close()
	g.Expect(n.InputTokens).To(BeNumerically(">", 0))
	g.Expect(n.InputTokens).To(BeNumerically("<", len(body)))
	h, path := hr.last()
	g.Expect(path).To(Equal("/v1/messages/count_tokens"))
	g.Expect(h.Get("x-api-key")).To(Equal("sk-ant-provider"))

	// The degraded model's provider speaks chat: the gateway's own bound.
	body = messagesBody(gatewaytest.DegradedModel, "")
	resp = sendMessages(t, e, "/v1/messages/count_tokens", "bearer", body, nil)
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	g.Expect(resp.Header.Get("agentrun-estimate")).To(Equal("bytes"))
	raw, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	g.Expect(raw).To(MatchJSON(`{"input_tokens":` + itoa(len(body)) + `}`))

	resp = sendMessages(t, e, "/v1/messages/count_tokens", "", body, nil)
	g.Expect(resp.StatusCode).To(Equal(http.StatusUnauthorized), "a valid attempt token is still needed")
	_ = resp.Body.Close()
	g.Consistently(func() v1alpha1.Usage { return e.Status().Usage }).Should(BeZero(), "counting tokens is no model request")
}

func itoa(n int) string { return string(mustJSON(n)) }

// toolRoundTrip is a Messages conversation a chat provider can serve: a
// system prompt in blocks, a tool_use and its failed tool_result.
const toolRoundTrip = `"system":[{"type":"text","text":"You are terse.","cache_control":{"type":"ephemeral"}}],` +
	`"tools":[{"name":"Bash","description":"run a command","input_schema":{"type":"object",` +
	`"properties":{"command":{"type":"string"}}}}],"tool_choice":{"type":"any"},"stop_sequences":["END"],"temperature":0.3,` +
	`"messages":[{"role":"user","content":"list files"},` +
	`{"role":"assistant","content":[{"type":"text","text":"Listing."},` +
	`{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"ls"}}]},` +
	`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","is_error":true,` +
	`"content":[{"type":"text","text":"permission denied"}]},{"type":"text","text":"try again"}]}]`

func TestMessagesDoorTranslatesToAChatProvider(t *testing.T) {
	g := NewWithT(t)
	e, rec, hr := messagesEnv(t, nil)
	resp := sendMessages(t, e, "/v1/messages", "x-api-key", []byte(`{"model":"scripted-small","max_tokens":500,`+toolRoundTrip+
		`,"agentrun_scripted":{"say":"again","tokens":40,"tools":[{"id":"call_9","name":"Bash","arguments":{"command":"sudo ls"}}]}}`),
		nil)
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	raw, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	var answer map[string]any
	g.Expect(json.Unmarshal(raw, &answer)).To(Succeed())
	g.Expect(answer).To(HaveKeyWithValue("id", HavePrefix("msg_")), "a Messages id, not the chat completion's chatcmpl-1")
	delete(answer, "id")
	g.Expect(mustJSON(answer)).To(MatchJSON(`{"type":"message","role":"assistant","model":"scripted-small",
		"content":[{"type":"text","text":"again"},{"type":"tool_use","id":"call_9","name":"Bash","input":{"command":"sudo ls"}}],
		"stop_reason":"tool_use","stop_sequence":null,
		"usage":{"input_tokens":20,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":20}}`))

	_, path := hr.last()
	g.Expect(path).To(Equal("/v1/chat/completions"))
	sent, _ := rec.last()
	g.Expect(mustJSON(sent)).To(MatchJSON(`{"model":"scripted-small-v2","max_tokens":500,
		"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"list files"},
		{"role":"assistant","content":"Listing.","tool_calls":[{"id":"toolu_1","type":"function",
			"function":{"name":"Bash","arguments":"{\"command\":\"ls\"}"}}]},
		{"role":"tool","tool_call_id":"toolu_1","content":"Error: permission denied"},
		{"role":"user","content":"try again"}],
		"tools":[{"type":"function","function":{"name":"Bash","description":"run a command",
			"parameters":{"type":"object","properties":{"command":{"type":"string"}}}}}],
		"tool_choice":"required","stop":["END"],"temperature":0.3,
		"agentrun_scripted":{"say":"again","tokens":40,"tools":[{"id":"call_9","name":"Bash","arguments":{"command":"sudo ls"}}]}}`))
	g.Eventually(func() v1alpha1.Usage { return e.Status().Usage }).Should(Equal(v1alpha1.Usage{ModelRequests: 1, Tokens: 40}))
}

func TestMessagesDoorStreamsATranslatedChatAnswerAsMessagesEvents(t *testing.T) {
	g := NewWithT(t)
	e, rec, _ := messagesEnv(t, nil)
	resp := sendMessages(t, e, "/v1/messages", "bearer", []byte(`{"model":"scripted-small","max_tokens":500,"stream":true,`+
		toolRoundTrip+`,"agentrun_scripted":{"say":"a streamed answer of some length","tokens":30,`+
		`"tools":[{"id":"call_7","name":"Bash","arguments":{"command":"ls -la"}}]}}`), nil)
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	g.Expect(resp.Header.Get("Content-Type")).To(HavePrefix("text/event-stream"))
	type event struct {
		Type         string         `json:"type"`
		Index        int            `json:"index"`
		ContentBlock map[string]any `json:"content_block"`
		Delta        struct {
			Type        string `json:"type"`
			Text        string `json:"text"`
			PartialJSON string `json:"partial_json"`
			StopReason  string `json:"stop_reason"`
		} `json:"delta"`
		Usage map[string]int64 `json:"usage"`
	}
	var evs []event
	var names []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if n, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			names = append(names, n)
		}
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var ev event
			g.Expect(json.Unmarshal([]byte(data), &ev)).To(Succeed())
			evs = append(evs, ev)
		}
	}
	_ = resp.Body.Close()
	var types []string
	var text, args strings.Builder
	for _, ev := range evs {
		types = append(types, ev.Type)
		text.WriteString(ev.Delta.Text)
		args.WriteString(ev.Delta.PartialJSON)
	}
	g.Expect(names).To(Equal(types))
	g.Expect(types[0]).To(Equal("message_start"))
	g.Expect(types[len(types)-2:]).To(Equal([]string{"message_delta", "message_stop"}))
	g.Expect(text.String()).To(Equal("a streamed answer of some length"))
	g.Expect(args.String()).To(MatchJSON(`{"command":"ls -la"}`))
	var starts []map[string]any
	for _, ev := range evs {
		if ev.Type == "content_block_start" {
			starts = append(starts, ev.ContentBlock)
		}
	}
	g.Expect(starts).To(HaveLen(2))
	g.Expect(starts[0]).To(HaveKeyWithValue("type", "text"))
	g.Expect(starts[1]).To(And(HaveKeyWithValue("type", "tool_use"), HaveKeyWithValue("id", "call_7"),
		HaveKeyWithValue("name", "Bash")))
	last := evs[len(evs)-2]
	g.Expect(last.Delta.StopReason).To(Equal("tool_use"))
	g.Expect(last.Usage).To(And(HaveKeyWithValue("input_tokens", BeEquivalentTo(15)),
		HaveKeyWithValue("output_tokens", BeEquivalentTo(15))))

	sent, _ := rec.last()
	g.Expect(sent).To(HaveKeyWithValue("stream_options", HaveKeyWithValue("include_usage", true)))
	g.Eventually(func() v1alpha1.Usage { return e.Status().Usage }).Should(Equal(v1alpha1.Usage{ModelRequests: 1, Tokens: 30}))
}

func TestMessagesDoorRefusesWhatCannotBeTranslatedNamingIt(t *testing.T) {
	g := NewWithT(t)
	e, rec, _ := messagesEnv(t, func(ra *v1alpha1.RunAttempt) {
		ra.Spec.Policy.Models = append(ra.Spec.Policy.Models, v1alpha1.Model{Name: "responses-only",
			BaseURL: ra.Spec.Policy.Models[0].BaseURL, API: v1alpha1.ModelAPIOpenAIResponses})
	})
	for _, c := range []struct{ body, param, says string }{
		{`"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"hi"}]`, "thinking",
			"thinking cannot be translated"},
		{`"mcp_servers":[],"messages":[{"role":"user","content":"hi"}]`, "mcp_servers", "cannot be translated"},
		{`"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"thinking","thinking":"x",` +
			`"signature":"s"}]}]`, "messages[1].content[0].type", "a thinking block in a assistant message"},
		{`"tools":[{"type":"web_search_20250305","name":"web_search"}],"messages":[{"role":"user","content":"hi"}]`,
			"tools[0].type", "the server tool web_search_20250305"},
		{`"messages":[{"role":"user","content":[{"type":"document","source":{"type":"text","data":"x"}}]}]`,
			"messages[0].content[0].type", "a document block"},
	} {
		resp := sendMessages(t, e, "/v1/messages", "x-api-key", []byte(`{"model":"scripted-small","max_tokens":10,`+c.body+`}`), nil)
		g.Expect(resp.StatusCode).To(Equal(http.StatusBadRequest), c.param)
		eb := readAnthropicError(g, resp)
		g.Expect(eb.Error.Type).To(Equal("invalid_request_error"))
		g.Expect(eb.Error.Param).To(Equal(c.param))
		g.Expect(eb.Error.Message).To(ContainSubstring(c.says))
	}
	resp := sendMessages(t, e, "/v1/messages", "x-api-key",
		[]byte(`{"model":"responses-only","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`), nil)
	g.Expect(resp.StatusCode).To(Equal(http.StatusBadRequest))
	g.Expect(readAnthropicError(g, resp).Error.Message).To(ContainSubstring("speaks OpenAIResponses"))
	g.Expect(rec.bodies).To(BeEmpty(), "nothing refused reached a provider")
	g.Consistently(func() int64 { return e.Status().Usage.ModelRequests }).Should(BeZero())
}

// A Messages answer, passed through or translated, becomes the same run
// stream blocks as a chat answer: reasoning, text and tool calls.
func TestMessagesDoorAnswersBecomeRunStreamBlocks(t *testing.T) {
	for _, c := range []struct{ name, model string }{{"passthrough", gatewaytest.Model}, {"translated", gatewaytest.DegradedModel}} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			e, col, _ := streamEnv(t, func(ra *v1alpha1.RunAttempt) {
				ra.Spec.Policy.Models[0].API = v1alpha1.ModelAPIAnthropicMessages
			})
			resp := sendMessages(t, e, "/v1/messages", "x-api-key", []byte(`{"model":"`+c.model+`","max_tokens":300,"stream":true,`+
				`"messages":[{"role":"user","content":"find sources"}],"agentrun_scripted":{"think":"the user wants sources",`+
				`"say":"Searching now.","tools":[{"id":"call-1","name":"search","arguments":{"q":"vector databases"}}]}}`), nil)
			_, _ = io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
			g.Eventually(col.types).Should(ContainElement("STEP_FINISHED"))
			var text, reasoning, args strings.Builder
			for _, ev := range col.all() {
				g.Expect(ev.Validate()).To(Succeed())
				switch ev.Type {
				case "TEXT_MESSAGE_CONTENT":
					text.WriteString(ev.Delta)
				case "REASONING_MESSAGE_CONTENT":
					reasoning.WriteString(ev.Delta)
				case "TOOL_CALL_ARGS":
					args.WriteString(ev.Delta)
				}
			}
			g.Expect(text.String()).To(Equal("Searching now."))
			g.Expect(args.String()).To(MatchJSON(`{"q":"vector databases"}`))
			if c.name == "passthrough" {
				g.Expect(reasoning.String()).To(Equal("the user wants sources"), "thinking blocks are the run's reasoning")
			}
		})
	}
}

// The GenAI span of a Messages request names the provider it went to.
func TestMessagesDoorSpanNamesTheProvider(t *testing.T) {
	g := NewWithT(t)
	exp := inMemoryTracing(t)
	e, _, _ := messagesEnv(t, nil)
	for _, model := range []string{gatewaytest.Model, gatewaytest.DegradedModel} {
		resp := sendMessages(t, e, "/v1/messages", "x-api-key", []byte(`{"model":"`+model+`","max_tokens":100,`+
			`"messages":[{"role":"user","content":"hi"}],"agentrun_scripted":{"say":"hi","tokens":42,"cacheReadTokens":8}}`), nil)
		g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
		_ = resp.Body.Close()
	}
	g.Eventually(spanNamed(exp, "chat "+gatewaytest.Model)).ShouldNot(BeNil())
	a := attrs(*spanNamed(exp, "chat "+gatewaytest.Model)())
	g.Expect(a["gen_ai.provider.name"].AsString()).To(Equal("anthropic"))
	g.Expect(a["gen_ai.usage.input_tokens"].AsInt64()).To(BeEquivalentTo(21+8), "input with the cache tokens")
	g.Expect(a["gen_ai.usage.output_tokens"].AsInt64()).To(BeEquivalentTo(21))
	g.Eventually(spanNamed(exp, "chat "+gatewaytest.DegradedModel)).ShouldNot(BeNil())
	a = attrs(*spanNamed(exp, "chat "+gatewaytest.DegradedModel)())
	g.Expect(a["gen_ai.provider.name"].AsString()).To(Equal("openai"))
}

// The official anthropic Python package, unmodified, talks to the door:
// a message, a streamed tool call, and a refusal at the grant it surfaces
// as RateLimitError and does not retry. Skipped when the package is not
// installed ($AGENTRUN_ANTHROPIC_PYTHON names a python that has it).
func TestMessagesDoorWithTheAnthropicPythonSDK(t *testing.T) {
	py := os.Getenv("AGENTRUN_ANTHROPIC_PYTHON")
	if py == "" {
		// make test runs it from hack/test-clients.sh, with the pinned
		// package installed in bin/venv.
		t.Skip("set AGENTRUN_ANTHROPIC_PYTHON to a python with the pinned anthropic package (hack/test-clients.sh does)")
	}
	if out, err := exec.Command(py, "-c", "import anthropic").CombinedOutput(); err != nil {
		t.Fatalf("AGENTRUN_ANTHROPIC_PYTHON=%s cannot import anthropic: %v\n%s", py, err, out)
	}
	g := NewWithT(t)
	// The chat side of the scripted upstream reports no cache tokens.
	for model, usage := range map[string]string{gatewaytest.Model: "50", gatewaytest.DegradedModel: "40"} {
		e, _, _ := messagesEnv(t, func(ra *v1alpha1.RunAttempt) { ra.Spec.Grant.ModelRequests = 2 })
		cmd := exec.Command(py, "testdata/anthropic_sdk.py", model)
		cmd.Env = append(os.Environ(), "GATEWAY_URL="+e.URL(), "POD_TOKEN="+gatewaytest.Token)
		out, err := cmd.CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), string(out))
		g.Expect(out).To(MatchJSON(`{"text":"hello from the door","usage":`+usage+`,"stop_reason":"tool_use",
			"tool_input":[{"command":"ls"}],"refused":{"status":429,"code":"grant_exhausted","type":"rate_limit_error"}}`), model)
		g.Expect(e.Metric("agentrun_gateway_refusals_total", map[string]string{"code": "grant_exhausted"})).To(
			BeEquivalentTo(1), "x-should-retry: false: the SDK asked once")
	}
}

// A Messages stream cut before message_stop is charged its reservation,
// whatever message_start said, and is a StreamCut fault.
func TestMessagesDoorChargesTheReservationForAStreamCutBeforeMessageStop(t *testing.T) {
	g := NewWithT(t)
	e, rec, _ := messagesEnv(t, func(ra *v1alpha1.RunAttempt) { ra.Spec.Grant.Tokens = new(int64(100000)) })
	rec.inner = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":"+
			"{\"input_tokens\":3,\"output_tokens\":1}}}\n\nevent: content_block_delta\n")
	})
	body := []byte(`{"model":"scripted","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	resp := sendMessages(t, e, "/v1/messages", "x-api-key", body, nil)
	raw, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	g.Expect(string(raw)).To(HavePrefix("event: message_start"), "what came is relayed")
	g.Eventually(func() v1alpha1.Usage { return e.Status().Usage }).Should(
		Equal(v1alpha1.Usage{ModelRequests: 1, Tokens: int64(len(body)) + 100}), "the reservation: the body's bytes plus max_tokens")
	g.Eventually(func() []v1alpha1.Fault { return e.Status().Faults }).Should(ContainElement(
		And(HaveField("Kind", "StreamCut"), HaveField("Scope", v1alpha1.FaultScopeProvider))))
}
