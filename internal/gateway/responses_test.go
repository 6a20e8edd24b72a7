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
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

const responsesPath = "/v1/responses"

// responsesEnv is modelEnv with the default model's provider speaking api.
func responsesEnv(t *testing.T, api v1alpha1.ModelAPI, mutate func(*v1alpha1.RunAttempt)) (*gatewaytest.Env, *recorder) {
	return modelEnv(t, func(ra *v1alpha1.RunAttempt) {
		ra.Spec.Policy.Models[0].API = api
		if mutate != nil {
			mutate(ra)
		}
	})
}

func responsesBody(model, extra string) []byte {
	return []byte(`{"model":"` + model + `","input":"hello"` + extra + `}`)
}

func TestResponsesDoorPassesThroughWithTheProviderKeyAndCountsUsage(t *testing.T) {
	g := NewWithT(t)
	e, rec := responsesEnv(t, v1alpha1.ModelAPIOpenAIResponses, func(ra *v1alpha1.RunAttempt) {
		ra.Spec.Policy.Models[0].MaxTokens = new(int64(600))
	})
	resp := e.Do(http.MethodPost, responsesPath, gatewaytest.Token, responsesBody(gatewaytest.Model,
		`,"store":true,"previous_response_id":"resp_prev","tools":[{"type":"web_search"}],"prompt_cache_key":"k",`+
			`"agentrun_scripted":{"say":"hi","tokens":40,"cachedTokens":10,"reasoningTokens":5}`))
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	var out struct {
		Object string `json:"object"`
		Output []struct {
			Type    string `json:"type"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"output"`
		Usage struct {
			TotalTokens        int64 `json:"total_tokens"`
			InputTokensDetails struct {
				CachedTokens int64 `json:"cached_tokens"`
			} `json:"input_tokens_details"`
		} `json:"usage"`
	}
	g.Expect(json.NewDecoder(resp.Body).Decode(&out)).To(Succeed())
	g.Expect(out.Object).To(Equal("response"))
	g.Expect(out.Output[0].Content[0].Text).To(Equal("hi"))
	g.Expect(out.Usage.InputTokensDetails.CachedTokens).To(BeEquivalentTo(10))

	body, auth := rec.last()
	g.Expect(auth).To(Equal("Bearer sk-provider-secret"), "the provider key, never the agent's token")
	g.Expect(body).To(And(HaveKeyWithValue("store", true), HaveKeyWithValue("previous_response_id", "resp_prev"),
		HaveKeyWithValue("prompt_cache_key", "k"), HaveKeyWithValue("input", "hello"),
		HaveKeyWithValue("tools", ContainElement(HaveKeyWithValue("type", "web_search")))),
		"a Responses provider gets every field as sent: built-in tools and server state are its own")
	g.Expect(body).To(HaveKeyWithValue("max_output_tokens", BeNumerically("==", 600)),
		"the policy's cap is set when the request asks none, so the reservation holds")
	// 40 in all: the cached tokens are part of the input, the reasoning
	// tokens part of the output; neither is counted twice.
	g.Eventually(func() v1alpha1.Usage { return e.Status().Usage }).
		Should(Equal(v1alpha1.Usage{ModelRequests: 1, Tokens: 40}))
}

// cannedResponses answers every request with a fixed Responses event
// stream (a function call, reasoning and text), cut before its end when
// cut is set.
type cannedResponses struct{ cut bool }

const cannedStream = "event: response.created\n" +
	`data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","status":"in_progress","output":[],"usage":null}}` + "\n\n" +
	"event: response.output_item.added\n" +
	`data: {"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"type":"reasoning","id":"rs_1","summary":[]}}` + "\n\n" +
	"event: response.reasoning_summary_text.delta\n" +
	`data: {"type":"response.reasoning_summary_text.delta","sequence_number":2,"item_id":"rs_1","output_index":0,"summary_index":0,"delta":"think"}` + "\n\n" +
	"event: response.output_text.delta\n" +
	`data: {"type":"response.output_text.delta","sequence_number":3,"item_id":"msg_1","output_index":1,"content_index":0,"delta":"Hello"}` + "\n\n" +
	"event: response.output_item.added\n" +
	`data: {"type":"response.output_item.added","sequence_number":4,"output_index":2,"item":{"type":"function_call","id":"fc_1","call_id":"call_1","name":"lookup","arguments":""}}` + "\n\n" +
	"event: response.function_call_arguments.delta\n" +
	`data: {"type":"response.function_call_arguments.delta","sequence_number":5,"item_id":"fc_1","output_index":2,"delta":"{\"q\":1}"}` + "\n\n"

const cannedEnd = "event: response.completed\n" +
	`data: {"type":"response.completed","sequence_number":6,"response":{"id":"resp_1","object":"response","status":"completed","output":[],` +
	`"usage":{"input_tokens":30,"input_tokens_details":{"cached_tokens":20},"output_tokens":12,"output_tokens_details":{"reasoning_tokens":8},"total_tokens":42}}}` + "\n\n"

func (c cannedResponses) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	_, _ = io.WriteString(w, cannedStream)
	if !c.cut {
		_, _ = io.WriteString(w, cannedEnd)
	}
}

func TestResponsesDoorRelaysTheEventStreamUnchangedAndCountsItsUsage(t *testing.T) {
	g := NewWithT(t)
	up := httptest.NewServer(cannedResponses{})
	t.Cleanup(up.Close)
	evs := &events{}
	e := gatewaytest.Start(t, gatewaytest.Options{Events: evs, Mutate: func(ra *v1alpha1.RunAttempt) {
		ra.Spec.Policy.Models[0].BaseURL = up.URL + "/v1"
		ra.Spec.Policy.Models[0].API = v1alpha1.ModelAPIOpenAIResponses
	}})
	resp := e.Do(http.MethodPost, responsesPath, gatewaytest.Token, responsesBody(gatewaytest.Model, `,"stream":true`))
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	raw, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	g.Expect(string(raw)).To(Equal(cannedStream+cannedEnd), "the event stream reaches the client byte for byte")
	g.Eventually(func() v1alpha1.Usage { return e.Status().Usage }).
		Should(Equal(v1alpha1.Usage{ModelRequests: 1, Tokens: 42}), "counted from response.completed's usage")
	g.Eventually(evs.types).Should(ContainElements("REASONING_MESSAGE_CONTENT", "TEXT_MESSAGE_CONTENT",
		"TOOL_CALL_START", "TOOL_CALL_END"), "the run stream shows the same blocks as the chat door's")
}

func TestResponsesDoorEndsACutStreamWithAnErrorEventAndChargesTheReservation(t *testing.T) {
	g := NewWithT(t)
	up := httptest.NewServer(cannedResponses{cut: true})
	t.Cleanup(up.Close)
	e := gatewaytest.Start(t, gatewaytest.Options{Mutate: func(ra *v1alpha1.RunAttempt) {
		ra.Spec.Grant.Tokens = new(int64(10000))
		ra.Spec.Policy.Models[0].BaseURL = up.URL + "/v1"
		ra.Spec.Policy.Models[0].API = v1alpha1.ModelAPIOpenAIResponses
		ra.Spec.Policy.Models[0].MaxTokens = new(int64(100))
	}})
	body := responsesBody(gatewaytest.Model, `,"stream":true`)
	resp := e.Do(http.MethodPost, responsesPath, gatewaytest.Token, body)
	raw, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	g.Expect(string(raw)).To(HavePrefix(cannedStream))
	g.Expect(string(raw)).To(HaveSuffix("\n\n"))
	last := strings.TrimPrefix(string(raw), cannedStream)
	g.Expect(last).To(HavePrefix("event: error\ndata: "))
	var ev map[string]any
	g.Expect(json.Unmarshal([]byte(strings.TrimSpace(strings.TrimPrefix(last, "event: error\ndata: "))), &ev)).To(Succeed())
	g.Expect(ev).To(And(HaveKeyWithValue("type", "error"), HaveKeyWithValue("code", "stream_cut"),
		HaveKeyWithValue("sequence_number", BeNumerically("==", 6))))
	g.Eventually(func() v1alpha1.RunAttemptStatus { return e.Status() }).Should(And(
		HaveField("Usage.Tokens", BeEquivalentTo(int64(len(body))+100)),
		HaveField("Faults", ContainElement(HaveField("Kind", "StreamCut")))), "no usage reported: the reservation is charged")
}

func TestResponsesDoorReservesMaxOutputTokensAndRefusesBeyondTheGrant(t *testing.T) {
	g := NewWithT(t)
	e, rec := responsesEnv(t, v1alpha1.ModelAPIOpenAIResponses, func(ra *v1alpha1.RunAttempt) {
		ra.Spec.Grant.Tokens = new(int64(1000))
		ra.Spec.Grant.ModelRequests = 2
	})
	body := responsesBody("scripted", `,"max_output_tokens":5000,"agentrun_scripted":{"say":"ok","tokens":10}`)
	resp := e.Do(http.MethodPost, responsesPath, gatewaytest.Token, body)
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	_ = resp.Body.Close()
	sent, _ := rec.last()
	g.Expect(sent["max_output_tokens"]).To(BeNumerically("==", 1000-len(body)), "lowered so prompt and output fit the grant")

	resp = e.Do(http.MethodPost, responsesPath, gatewaytest.Token, responsesBody("scripted", `,"max_output_tokens":0`))
	g.Expect(resp.StatusCode).To(Equal(http.StatusBadRequest))
	g.Expect(errorBody(g, resp).Param).To(Equal("max_output_tokens"))
	resp = e.Do(http.MethodPost, responsesPath, gatewaytest.Token, responsesBody("scripted", `,"MAX_OUTPUT_TOKENS":9`))
	g.Expect(resp.StatusCode).To(Equal(http.StatusBadRequest), "a folded twin of a field the gateway rewrites")
	g.Expect(errorBody(g, resp).Param).To(Equal("max_output_tokens"))

	resp = e.Do(http.MethodPost, responsesPath, gatewaytest.Token, responsesBody("scripted", ""))
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	_ = resp.Body.Close()
	resp = e.Do(http.MethodPost, responsesPath, gatewaytest.Token, responsesBody("scripted", ""))
	g.Expect(resp.StatusCode).To(Equal(http.StatusTooManyRequests))
	g.Expect(resp.Header.Get(gatewayapi.HeaderShouldRetry)).To(Equal("false"), "a final refusal: the OpenAI SDKs do not retry it")
	eb := errorBody(g, resp)
	g.Expect(eb.Type).To(Equal(gatewayapi.TypeRateLimit))
	g.Expect(eb.Code).To(Equal(gatewayapi.CodeGrantExhausted))
	g.Expect(rec.bodies).To(HaveLen(2))
}

func TestResponsesDoorServesTheReserveOnlyToOutputWork(t *testing.T) {
	g := NewWithT(t)
	e, rec := responsesEnv(t, v1alpha1.ModelAPIOpenAIResponses, func(ra *v1alpha1.RunAttempt) {
		ra.Spec.RunPhase = v1alpha1.PhaseFinalizing
		ra.Spec.Grant = v1alpha1.Grant{ModelRequests: 1, ToolCalls: 1, FinalizeOnly: true}
	})
	send := func(purpose string) *http.Response {
		req, err := http.NewRequest(http.MethodPost, e.URL()+responsesPath, bytes.NewReader(responsesBody("scripted", "")))
		g.Expect(err).NotTo(HaveOccurred())
		req.Header.Set("Authorization", "Bearer "+gatewaytest.Token)
		req.Header.Set(gatewayapi.HeaderPurpose, purpose)
		resp, err := http.DefaultClient.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		return resp
	}
	resp := send(gatewayapi.PurposeResearch)
	g.Expect(resp.StatusCode).To(Equal(http.StatusTooManyRequests))
	g.Expect(resp.Header.Get(gatewayapi.HeaderShouldRetry)).To(Equal("false"))
	g.Expect(errorBody(g, resp).Code).To(Equal(gatewayapi.CodeFinalizeOnly))
	resp = send(gatewayapi.PurposeOutput)
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	_ = resp.Body.Close()
	resp = send(gatewayapi.PurposeOutput)
	g.Expect(resp.StatusCode).To(Equal(http.StatusTooManyRequests))
	g.Expect(errorBody(g, resp).Code).To(Equal(gatewayapi.CodeReserveExhausted))
	g.Expect(rec.bodies).To(HaveLen(1))
}

// The OpenAI Agents SDK's second turn: instructions, the user's message, the
// model's reasoning and function call, and the call's output.
const roundTrip = `,"instructions":"be brief","input":[` +
	`{"role":"user","content":[{"type":"input_text","text":"weather?"}]},` +
	`{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"opaque"},` +
	`{"type":"function_call","id":"fc_1","call_id":"call_1","name":"weather","arguments":"{\"city\":\"Paris\"}"},` +
	`{"type":"function_call_output","call_id":"call_1","output":"sunny"}],` +
	`"tools":[{"type":"function","name":"weather","description":"the weather","parameters":{"type":"object"},"strict":true}],` +
	`"tool_choice":"auto","store":false,"include":["reasoning.encrypted_content"],"max_output_tokens":50`

func translatedBody(extra string) []byte {
	return []byte(`{"model":"` + gatewaytest.Model + `"` + extra + `}`)
}

func TestResponsesDoorTranslatesToAChatProvider(t *testing.T) {
	g := NewWithT(t)
	e, rec := modelEnv(t, nil)
	resp := e.Do(http.MethodPost, responsesPath, gatewaytest.Token, translatedBody(roundTrip+
		`,"agentrun_scripted":{"say":"It is sunny.","tools":[{"id":"call_2","name":"weather","arguments":{"city":"Rome"}}],`+
		`"tokens":40,"cachedTokens":8,"reasoningTokens":3}`))
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	var out map[string]any
	g.Expect(json.NewDecoder(resp.Body).Decode(&out)).To(Succeed())
	g.Expect(out).To(And(HaveKeyWithValue("object", "response"), HaveKeyWithValue("status", "completed"),
		HaveKeyWithValue("id", HavePrefix("resp_")), HaveKeyWithValue("store", false)))
	g.Expect(out["output"]).To(ConsistOf(
		And(HaveKeyWithValue("type", "message"), HaveKeyWithValue("content",
			ConsistOf(And(HaveKeyWithValue("type", "output_text"), HaveKeyWithValue("text", "It is sunny."))))),
		And(HaveKeyWithValue("type", "function_call"), HaveKeyWithValue("call_id", "call_2"),
			HaveKeyWithValue("name", "weather"), HaveKeyWithValue("arguments", `{"city":"Rome"}`))))
	g.Expect(out["usage"]).To(And(HaveKeyWithValue("input_tokens", BeNumerically("==", 20)),
		HaveKeyWithValue("output_tokens", BeNumerically("==", 20)), HaveKeyWithValue("total_tokens", BeNumerically("==", 40)),
		HaveKeyWithValue("input_tokens_details", HaveKeyWithValue("cached_tokens", BeNumerically("==", 8))),
		HaveKeyWithValue("output_tokens_details", HaveKeyWithValue("reasoning_tokens", BeNumerically("==", 3)))))

	sent, auth := rec.last()
	g.Expect(auth).To(Equal("Bearer sk-provider-secret"))
	g.Expect(sent).To(HaveKeyWithValue("max_tokens", BeNumerically("==", 50)))
	g.Expect(sent).NotTo(HaveKey("input"))
	g.Expect(sent).NotTo(HaveKey("store"))
	g.Expect(sent["messages"]).To(Equal([]any{
		map[string]any{"role": "system", "content": "be brief"},
		map[string]any{"role": "user", "content": "weather?"},
		map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": "call_1", "type": "function",
			"function": map[string]any{"name": "weather", "arguments": `{"city":"Paris"}`}}}},
		map[string]any{"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
	}), "the reasoning item is dropped; the function call and its output become a tool call and a tool message")
	g.Expect(sent["tools"]).To(Equal([]any{map[string]any{"type": "function", "function": map[string]any{
		"name": "weather", "description": "the weather", "parameters": map[string]any{"type": "object"}, "strict": true}}}))
	g.Eventually(func() v1alpha1.Usage { return e.Status().Usage }).
		Should(Equal(v1alpha1.Usage{ModelRequests: 1, Tokens: 40}))
}

// sseEvents reads a Responses event stream: each event's data.
func sseEvents(g Gomega, r io.Reader) []map[string]any {
	raw, err := io.ReadAll(r)
	g.Expect(err).NotTo(HaveOccurred())
	var out []map[string]any
	for block := range strings.SplitSeq(strings.TrimSpace(string(raw)), "\n\n") {
		lines := strings.Split(block, "\n")
		g.Expect(lines).To(HaveLen(2), block)
		typ, _ := strings.CutPrefix(lines[0], "event: ")
		var ev map[string]any
		g.Expect(json.Unmarshal([]byte(strings.TrimPrefix(lines[1], "data: ")), &ev)).To(Succeed())
		g.Expect(ev).To(HaveKeyWithValue("type", typ), "the event line names the data's type")
		out = append(out, ev)
	}
	return out
}

func TestResponsesDoorTranslatesAChatStreamToResponsesEvents(t *testing.T) {
	g := NewWithT(t)
	e, _ := modelEnv(t, nil)
	resp := e.Do(http.MethodPost, responsesPath, gatewaytest.Token, translatedBody(roundTrip+`,"stream":true,`+
		`"agentrun_scripted":{"think":"hmm","say":"It is sunny in Paris.","tools":[{"id":"call_2","name":"weather",`+
		`"arguments":{"city":"Rome"}}],"tokens":30,"cachedTokens":4}`))
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	g.Expect(resp.Header.Get("Content-Type")).To(HavePrefix("text/event-stream"))
	evs := sseEvents(g, resp.Body)
	_ = resp.Body.Close()
	var types []string
	text, args := "", ""
	for i, ev := range evs {
		g.Expect(ev["sequence_number"]).To(BeNumerically("==", i))
		types = append(types, ev["type"].(string))
		switch ev["type"] {
		case "response.output_text.delta":
			text += ev["delta"].(string)
		case "response.function_call_arguments.delta":
			args += ev["delta"].(string)
		}
	}
	g.Expect(text).To(Equal("It is sunny in Paris."))
	g.Expect(args).To(Equal(`{"city":"Rome"}`))
	g.Expect(types[:2]).To(Equal([]string{"response.created", "response.in_progress"}))
	g.Expect(types).To(ContainElements("response.reasoning_text.delta", "response.content_part.added",
		"response.output_text.done", "response.content_part.done", "response.function_call_arguments.done",
		"response.output_item.done"))
	last := evs[len(evs)-1]
	g.Expect(last["type"]).To(Equal("response.completed"))
	r := last["response"].(map[string]any)
	g.Expect(r["output"]).To(HaveLen(3), "reasoning, message, function_call")
	g.Expect(r["output"].([]any)[2]).To(And(HaveKeyWithValue("type", "function_call"), HaveKeyWithValue("call_id", "call_2"),
		HaveKeyWithValue("arguments", `{"city":"Rome"}`)))
	g.Expect(r["usage"]).To(And(HaveKeyWithValue("total_tokens", BeNumerically("==", 30)),
		HaveKeyWithValue("input_tokens_details", HaveKeyWithValue("cached_tokens", BeNumerically("==", 4)))))
	g.Eventually(func() v1alpha1.Usage { return e.Status().Usage }).
		Should(Equal(v1alpha1.Usage{ModelRequests: 1, Tokens: 30}))
}

func TestResponsesDoorRefusesWhatAChatProviderCannotDoNamingIt(t *testing.T) {
	g := NewWithT(t)
	e, rec := modelEnv(t, nil)
	for _, c := range []struct{ extra, param, says string }{
		{`,"input":"hi","previous_response_id":"resp_1"`, "previous_response_id", "keeps no responses"},
		{`,"input":"hi","conversation":"conv_1"`, "conversation", "keeps no conversations"},
		{`,"input":"hi","tools":[{"type":"web_search"}]`, "tools[0].type", `"web_search"`},
		{`,"input":[{"role":"user","content":[{"type":"input_file","file_id":"f"}]}]`, "input[0].content[0].type", `"input_file"`},
		{`,"input":"hi","background":true`, "background", "background"},
		{`,"input":[{"type":"item_reference","id":"msg_1"}]`, "input[0].type", "item_reference"},
		{`,"input":"hi","Messages":[]`, "Messages", `"messages"`},
	} {
		resp := e.Do(http.MethodPost, responsesPath, gatewaytest.Token, translatedBody(c.extra))
		g.Expect(resp.StatusCode).To(Equal(http.StatusBadRequest), c.extra)
		g.Expect(resp.Header.Get(gatewayapi.HeaderShouldRetry)).To(Equal("false"))
		eb := errorBody(g, resp)
		g.Expect(eb.Param).To(Equal(c.param), c.extra)
		g.Expect(eb.Message).To(ContainSubstring(c.says), c.extra)
	}
	g.Expect(rec.bodies).To(BeEmpty(), "nothing was dispatched")
	g.Consistently(func() int64 { return e.Status().Usage.ModelRequests }, 100*time.Millisecond).Should(BeZero())
}

func TestResponsesDoorEndsACutChatStreamWithResponseFailed(t *testing.T) {
	g := NewWithT(t)
	up := httptest.NewServer(cutStream{})
	t.Cleanup(up.Close)
	e := gatewaytest.Start(t, gatewaytest.Options{Mutate: func(ra *v1alpha1.RunAttempt) {
		ra.Spec.Grant.Tokens = new(int64(10000))
		ra.Spec.Policy.Models[0].BaseURL = up.URL + "/v1"
		ra.Spec.Policy.Models[0].MaxTokens = new(int64(100))
	}})
	resp := e.Do(http.MethodPost, responsesPath, gatewaytest.Token, translatedBody(`,"input":"hi","stream":true`))
	evs := sseEvents(g, resp.Body)
	_ = resp.Body.Close()
	last := evs[len(evs)-1]
	g.Expect(last).To(HaveKeyWithValue("type", "response.failed"))
	g.Expect(last["response"]).To(And(HaveKeyWithValue("status", "failed"),
		HaveKeyWithValue("error", HaveKeyWithValue("code", "server_error"))))
	g.Eventually(func() v1alpha1.RunAttemptStatus { return e.Status() }).Should(And(
		HaveField("Usage.ModelRequests", BeEquivalentTo(1)), HaveField("Usage.Tokens", BeNumerically(">", 100)),
		HaveField("Faults", ContainElement(HaveField("Kind", "StreamCut")))), "charged its reservation")
}

func TestResponsesDoorAnswersAChatProvidersErrorInTheOpenAIShape(t *testing.T) {
	g := NewWithT(t)
	e, _ := modelEnv(t, nil)
	resp := e.Do(http.MethodPost, responsesPath, gatewaytest.Token, translatedBody(
		`,"input":"hi","agentrun_scripted":{"error":{"code":"rate_limit_exceeded","retryable":true,"retryAfterSeconds":2}}`))
	g.Expect(resp.StatusCode).To(Equal(http.StatusTooManyRequests))
	g.Expect(resp.Header.Get("Retry-After")).To(Equal("2"))
	g.Expect(errorBody(g, resp).Code).To(Equal("rate_limit_exceeded"))
	g.Eventually(func() []v1alpha1.Fault { return e.Status().Faults }).Should(ContainElement(
		And(HaveField("Scope", v1alpha1.FaultScopeProvider), HaveField("Kind", "RateLimitExceeded"))))
}
