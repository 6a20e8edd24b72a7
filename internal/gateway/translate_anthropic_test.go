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
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
	"github.com/agentrun-dev/agentrun/internal/upstream"
)

const chatPath = "/v1/chat/completions"

// chatRoundTrip is an OpenAI SDK agent's second turn: a system prompt, the
// user's message, the assistant's tool call and its result, a tool, and
// the settings that translate.
const chatRoundTrip = `"messages":[{"role":"system","content":"You are terse."},` +
	`{"role":"user","content":[{"type":"text","text":"list files"},` +
	`{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBO"}}]},` +
	`{"role":"assistant","content":"Listing.","tool_calls":[{"id":"call_1","type":"function",` +
	`"function":{"name":"Bash","arguments":"{\"command\":\"ls\"}"}}]},` +
	`{"role":"tool","tool_call_id":"call_1","content":"a.go"},{"role":"user","content":"and now?"}],` +
	`"tools":[{"type":"function","function":{"name":"Bash","description":"run a command",` +
	`"parameters":{"type":"object","properties":{"command":{"type":"string"}}},"strict":true}}],` +
	`"tool_choice":"required","parallel_tool_calls":false,"stop":"END","temperature":0.3,"user":"u-1",` +
	`"prompt_cache_key":"k","store":false`

func TestChatDoorTranslatesToAMessagesProvider(t *testing.T) {
	g := NewWithT(t)
	e, rec, hr := messagesEnv(t, nil)
	resp := e.Do(http.MethodPost, chatPath, gatewaytest.Token, []byte(`{"model":"`+gatewaytest.Model+`","max_tokens":500,`+
		chatRoundTrip+`,"agentrun_scripted":{"say":"again","tokens":40,"cacheReadTokens":100,"cacheWriteTokens":7,`+
		`"tools":[{"id":"toolu_9","name":"Bash","arguments":{"command":"ls -la"}}]}}`))
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	var out map[string]any
	g.Expect(json.NewDecoder(resp.Body).Decode(&out)).To(Succeed())
	_ = resp.Body.Close()
	g.Expect(mustJSON(out)).To(MatchJSON(`{"id":"msg_1","object":"chat.completion","model":"claude-up",
		"choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":"again",
			"tool_calls":[{"id":"toolu_9","type":"function","function":{"name":"Bash","arguments":"{\"command\":\"ls -la\"}"}}]}}],
		"usage":{"prompt_tokens":127,"completion_tokens":20,"total_tokens":147,"prompt_tokens_details":{"cached_tokens":100}}}`),
		"the usage counts every input token, cache reads and writes too")

	h, path := hr.last()
	g.Expect(path).To(Equal("/v1/messages"))
	g.Expect(h.Get("x-api-key")).To(Equal("sk-ant-provider"))
	g.Expect(h.Get("Authorization")).To(BeEmpty())
	g.Expect(h.Get("anthropic-version")).To(Equal("2023-06-01"))
	sent, _ := rec.last()
	g.Expect(mustJSON(sent)).To(MatchJSON(`{"model":"claude-up","max_tokens":500,"system":"You are terse.",
		"messages":[{"role":"user","content":[{"type":"text","text":"list files"},
			{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBO"}}]},
		{"role":"assistant","content":[{"type":"text","text":"Listing."},
			{"type":"tool_use","id":"call_1","name":"Bash","input":{"command":"ls"}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":"a.go"},
			{"type":"text","text":"and now?"}]}],
		"tools":[{"name":"Bash","description":"run a command","strict":true,
			"input_schema":{"type":"object","properties":{"command":{"type":"string"}}}}],
		"tool_choice":{"type":"any","disable_parallel_tool_use":true},"stop_sequences":["END"],"temperature":0.3,
		"metadata":{"user_id":"u-1"},
		"agentrun_scripted":{"say":"again","tokens":40,"cacheReadTokens":100,"cacheWriteTokens":7,
			"tools":[{"id":"toolu_9","name":"Bash","arguments":{"command":"ls -la"}}]}}`),
		"a tool message becomes the next user turn's tool_result")
	g.Eventually(func() v1alpha1.Usage { return e.Status().Usage }).Should(Equal(v1alpha1.Usage{ModelRequests: 1, Tokens: 147}))
}

func TestChatDoorStreamsATranslatedMessagesAnswerAsChunks(t *testing.T) {
	g := NewWithT(t)
	e, rec, _ := messagesEnv(t, nil)
	resp := e.Do(http.MethodPost, chatPath, gatewaytest.Token, []byte(`{"model":"`+gatewaytest.Model+`","stream":true,`+
		`"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}],`+
		`"agentrun_scripted":{"think":"hmm","say":"a streamed answer of some length","tokens":30,"cacheReadTokens":5,`+
		`"tools":[{"id":"toolu_7","name":"Bash","arguments":{"command":"ls"}}]}}`))
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	g.Expect(resp.Header.Get("Content-Type")).To(HavePrefix("text/event-stream"))
	var text, think, args, finish, callID string
	var usage map[string]any
	done := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var c struct {
			ID      string `json:"id"`
			Choices []struct {
				Delta struct {
					Content          string `json:"content"`
					ReasoningContent string `json:"reasoning_content"`
					ToolCalls        []struct {
						ID       string `json:"id"`
						Function struct {
							Arguments string `json:"arguments"`
						} `json:"function"`
					} `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage map[string]any `json:"usage"`
		}
		g.Expect(json.Unmarshal([]byte(data), &c)).To(Succeed())
		g.Expect(c.ID).To(HavePrefix("msg_"))
		if c.Usage != nil {
			usage = c.Usage
		}
		for _, ch := range c.Choices {
			text += ch.Delta.Content
			think += ch.Delta.ReasoningContent
			for _, tc := range ch.Delta.ToolCalls {
				callID += tc.ID
				args += tc.Function.Arguments
			}
			if ch.FinishReason != nil {
				finish = *ch.FinishReason
			}
		}
	}
	_ = resp.Body.Close()
	g.Expect(done).To(BeTrue())
	g.Expect(text).To(Equal("a streamed answer of some length"))
	g.Expect(think).To(Equal("hmm"))
	g.Expect(callID).To(Equal("toolu_7"))
	g.Expect(args).To(MatchJSON(`{"command":"ls"}`))
	g.Expect(finish).To(Equal("tool_calls"))
	g.Expect(usage).To(And(HaveKeyWithValue("prompt_tokens", BeNumerically("==", 20)),
		HaveKeyWithValue("completion_tokens", BeNumerically("==", 15)), HaveKeyWithValue("total_tokens", BeNumerically("==", 35))))
	sent, _ := rec.last()
	g.Expect(sent).To(And(HaveKeyWithValue("stream", true), Not(HaveKey("stream_options"))))
	g.Eventually(func() v1alpha1.Usage { return e.Status().Usage }).Should(Equal(v1alpha1.Usage{ModelRequests: 1, Tokens: 35}))
}

func TestChatDoorRefusesWhatMessagesCannotDoNamingIt(t *testing.T) {
	g := NewWithT(t)
	e, rec, _ := messagesEnv(t, nil)
	hi := `"messages":[{"role":"user","content":"hi"}]`
	for _, c := range []struct{ extra, param, says string }{
		{hi + `,"n":2`, "n", "one completion"},
		{hi + `,"reasoning_effort":"high"`, "reasoning_effort", "signed blocks"},
		{hi + `,"logprobs":true`, "logprobs", "cannot be translated to Anthropic Messages"},
		{hi + `,"response_format":{"type":"json_object"}`, "response_format", "cannot be translated"},
		{hi + `,"temperature":1.5`, "temperature", "from 0 to 1"},
		{`"messages":[{"role":"user","content":"hi"},{"role":"system","content":"later"}]`, "messages[1].role",
			"after the conversation began"},
		{`"messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"x","format":"wav"}}]}]`,
			"messages[0].content[0].type", "a input_audio part"},
		{`"messages":[{"role":"user","content":"hi","name":"bob"}]`, "messages[0].name", "name cannot be translated"},
		{hi + `,"tools":[{"type":"custom","custom":{"name":"x"}}]`, "tools[0].type", "a custom tool"},
		{`"messages":[{"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function",` +
			`"function":{"name":"f","arguments":"[1]"}}]}]`, "messages[0].tool_calls[0].function.arguments", "JSON object"},
	} {
		resp := e.Do(http.MethodPost, chatPath, gatewaytest.Token, []byte(`{"model":"`+gatewaytest.Model+`",`+c.extra+`}`))
		g.Expect(resp.StatusCode).To(Equal(http.StatusBadRequest), c.extra)
		eb := errorBody(g, resp)
		g.Expect(eb.Param).To(Equal(c.param), c.extra)
		g.Expect(eb.Message).To(ContainSubstring(c.says), c.extra)
	}
	g.Expect(rec.bodies).To(BeEmpty(), "nothing refused reached the provider")
	g.Consistently(func() int64 { return e.Status().Usage.ModelRequests }, 100*time.Millisecond).Should(BeZero())
}

func TestChatDoorAnswersAMessagesProvidersErrorInTheOpenAIShape(t *testing.T) {
	g := NewWithT(t)
	e, _, _ := messagesEnv(t, nil)
	resp := e.Do(http.MethodPost, chatPath, gatewaytest.Token, []byte(`{"model":"`+gatewaytest.Model+`",`+
		`"messages":[{"role":"user","content":"hi"}],"agentrun_scripted":{"error":{"status":429,"message":"slow down",`+
		`"retryAfterSeconds":3}}}`))
	g.Expect(resp.StatusCode).To(Equal(http.StatusTooManyRequests))
	g.Expect(resp.Header.Get("Retry-After")).To(Equal("3"))
	eb := errorBody(g, resp)
	g.Expect(eb.Type).To(Equal("rate_limit_error"))
	g.Expect(eb.Message).To(ContainSubstring("slow down"))
	g.Eventually(func() v1alpha1.Usage { return e.Status().Usage }).Should(Equal(v1alpha1.Usage{ModelRequests: 1}))
}

func TestResponsesDoorTranslatesThroughChatToAMessagesProvider(t *testing.T) {
	g := NewWithT(t)
	e, rec, hr := messagesEnv(t, nil)
	resp := e.Do(http.MethodPost, responsesPath, gatewaytest.Token, translatedBody(roundTrip+
		`,"agentrun_scripted":{"say":"It is sunny.","tools":[{"id":"toolu_2","name":"weather","arguments":{"city":"Rome"}}],`+
		`"tokens":40,"cacheReadTokens":8}`))
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	var out map[string]any
	g.Expect(json.NewDecoder(resp.Body).Decode(&out)).To(Succeed())
	_ = resp.Body.Close()
	g.Expect(out).To(And(HaveKeyWithValue("object", "response"), HaveKeyWithValue("status", "completed")))
	g.Expect(out["output"]).To(ConsistOf(
		And(HaveKeyWithValue("type", "message"), HaveKeyWithValue("content",
			ConsistOf(HaveKeyWithValue("text", "It is sunny.")))),
		And(HaveKeyWithValue("type", "function_call"), HaveKeyWithValue("call_id", "toolu_2"),
			HaveKeyWithValue("arguments", `{"city":"Rome"}`))))
	g.Expect(out["usage"]).To(And(HaveKeyWithValue("input_tokens", BeNumerically("==", 28)),
		HaveKeyWithValue("total_tokens", BeNumerically("==", 48)),
		HaveKeyWithValue("input_tokens_details", HaveKeyWithValue("cached_tokens", BeNumerically("==", 8)))))
	_, path := hr.last()
	g.Expect(path).To(Equal("/v1/messages"))
	sent, _ := rec.last()
	g.Expect(mustJSON(sent["messages"])).To(MatchJSON(`[{"role":"user","content":[{"type":"text","text":"weather?"}]},
		{"role":"assistant","content":[{"type":"tool_use","id":"call_1","name":"weather","input":{"city":"Paris"}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":"sunny"}]}]`))
	g.Expect(sent).To(And(HaveKeyWithValue("system", "be brief"), HaveKeyWithValue("max_tokens", BeNumerically("==", 50))))
	g.Eventually(func() v1alpha1.Usage { return e.Status().Usage }).Should(Equal(v1alpha1.Usage{ModelRequests: 1, Tokens: 48}))

	// Streamed: the Messages events become chat chunks, then Responses events.
	resp = e.Do(http.MethodPost, responsesPath, gatewaytest.Token, translatedBody(roundTrip+`,"stream":true,`+
		`"agentrun_scripted":{"say":"It is sunny in Paris.","tokens":30}`))
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	evs := sseEvents(g, resp.Body)
	_ = resp.Body.Close()
	text := ""
	for _, ev := range evs {
		if ev["type"] == "response.output_text.delta" {
			text += ev["delta"].(string)
		}
	}
	g.Expect(text).To(Equal("It is sunny in Paris."))
	g.Expect(evs[len(evs)-1]).To(HaveKeyWithValue("type", "response.completed"))
	g.Eventually(func() v1alpha1.Usage { return e.Status().Usage }).Should(Equal(v1alpha1.Usage{ModelRequests: 2, Tokens: 78}))
}

func TestResponsesDoorRefusesWhatMessagesCannotDoNamingTheResponsesField(t *testing.T) {
	g := NewWithT(t)
	e, rec, _ := messagesEnv(t, nil)
	for _, c := range []struct{ extra, param, says string }{
		{`,"input":"hi","reasoning":{"effort":"high"}`, "reasoning.effort", "signed blocks"},
		{`,"input":"hi","text":{"format":{"type":"json_object"}}`, "text.format", "cannot be translated to Anthropic Messages"},
		{`,"input":"hi","tools":[{"type":"web_search"}]`, "tools[0].type", `"web_search"`},
	} {
		resp := e.Do(http.MethodPost, responsesPath, gatewaytest.Token, translatedBody(c.extra))
		g.Expect(resp.StatusCode).To(Equal(http.StatusBadRequest), c.extra)
		eb := errorBody(g, resp)
		g.Expect(eb.Param).To(Equal(c.param), c.extra)
		g.Expect(eb.Message).To(ContainSubstring(c.says), c.extra)
	}
	g.Expect(rec.bodies).To(BeEmpty())
}

// The official OpenAI Go SDK's chat client, unmodified, reads a Messages
// provider's answer and stream translated to chat completions.
func TestChatDoorServesTheOpenAISDKThroughAMessagesProvider(t *testing.T) {
	g := NewWithT(t)
	e, _, _ := messagesEnv(t, nil)
	c := openai.NewClient(option.WithBaseURL(e.URL()+"/v1"), option.WithAPIKey(gatewaytest.Token), option.WithMaxRetries(0))
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{Model: gatewaytest.Model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("be brief"), openai.UserMessage("weather?")}}
	turn := upstream.Turn{Say: "Looking.", Tools: []upstream.ToolCall{{ID: "toolu_9", Name: "weather",
		Arguments: map[string]any{"city": "Oslo"}}}, Tokens: 20, CacheReadTokens: 6}

	r, err := c.Chat.Completions.New(ctx, params, option.WithJSONSet(upstream.ScriptField, turn))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.Choices).To(HaveLen(1))
	g.Expect(r.Choices[0].Message.Content).To(Equal("Looking."))
	g.Expect(r.Choices[0].FinishReason).To(Equal("tool_calls"))
	g.Expect(r.Choices[0].Message.ToolCalls[0].Function.Arguments).To(MatchJSON(`{"city":"Oslo"}`))
	g.Expect(r.Usage.TotalTokens).To(BeEquivalentTo(26))
	g.Expect(r.Usage.PromptTokensDetails.CachedTokens).To(BeEquivalentTo(6))

	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	s := c.Chat.Completions.NewStreaming(ctx, params, option.WithJSONSet(upstream.ScriptField, turn))
	acc := openai.ChatCompletionAccumulator{}
	for s.Next() {
		acc.AddChunk(s.Current())
	}
	g.Expect(s.Err()).NotTo(HaveOccurred())
	g.Expect(acc.Choices[0].Message.Content).To(Equal("Looking."))
	g.Expect(acc.Choices[0].Message.ToolCalls[0].Function.Name).To(Equal("weather"))
	g.Expect(acc.Choices[0].Message.ToolCalls[0].Function.Arguments).To(MatchJSON(`{"city":"Oslo"}`))
	g.Expect(acc.Usage.TotalTokens).To(BeEquivalentTo(26))
}

// A Messages stream that ends with an error event, before message_stop,
// reaches the chat client as a cut stream (no [DONE]) and is charged the
// request's reservation, as a cut chat stream is.
func TestChatDoorChargesTheReservationForAMessagesStreamEndedByAnError(t *testing.T) {
	g := NewWithT(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\","+
			"\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n"+
			"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\"}}\n\n"+
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,"+
			"\"delta\":{\"type\":\"text_delta\",\"text\":\"half\"}}\n\n"+
			"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n")
	}))
	t.Cleanup(up.Close)
	e := gatewaytest.Start(t, gatewaytest.Options{Mutate: func(ra *v1alpha1.RunAttempt) {
		ra.Spec.Grant.Tokens = new(int64(100000))
		ra.Spec.Policy.Models[0].BaseURL = up.URL + "/v1"
		ra.Spec.Policy.Models[0].API = v1alpha1.ModelAPIAnthropicMessages
	}})
	body := []byte(`{"model":"` + gatewaytest.Model + `","stream":true,"max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`)
	resp := e.Do(http.MethodPost, chatPath, gatewaytest.Token, body)
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	raw, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	g.Expect(string(raw)).To(ContainSubstring(`"content":"half"`))
	g.Expect(string(raw)).NotTo(ContainSubstring("[DONE]"), "the cut reaches the client")
	// The reservation: the prompt's bound — the larger of the chat body and
	// its Messages translation (120 bytes) — plus max_tokens.
	g.Eventually(func() v1alpha1.Usage { return e.Status().Usage }).Should(
		Equal(v1alpha1.Usage{ModelRequests: 1, Tokens: 120 + 100}))
	g.Expect(len(body)).To(BeNumerically("<", 120))
	g.Expect(e.Status().Faults).To(ContainElement(And(HaveField("Kind", BeEquivalentTo("StreamCut")),
		HaveField("LastMessage", ContainSubstring("error event: Overloaded")))))
}
