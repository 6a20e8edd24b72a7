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

// Package upstream is a fake OpenAI-compatible model provider: the scripted
// upstream the gateway forwards to in the tests, the local stack and the
// benchmark. It answers chat completions, the Responses API (POST
// /responses, responses.go) and Anthropic Messages (POST /messages and
// /messages/count_tokens; messages.go), streaming and not, and reports usage
// like a real provider:
//
//   - a request carrying a scripted turn (the JSON field ScriptField, which
//     the reference agent's scripted provider sets) is answered with that
//     turn: its text, its tool calls, its token count, or its error;
//   - any other request (an unmodified OpenAI SDK agent) gets a short
//     deterministic answer without tool calls, and usage of about a token
//     per four bytes.
//
// It never reports more completion tokens than the request's max_tokens.
package upstream

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// finishToolCalls is the finish_reason of an answer with tool calls.
const finishToolCalls = "tool_calls"

// ScriptField is the request field that carries a scripted turn. The gateway
// forwards unknown fields untouched, so the turn reaches the upstream.
const ScriptField = "agentrun_scripted"

// Turn is one scripted answer.
type Turn struct {
	// Say is the assistant's text.
	Say string `json:"say,omitempty"`
	// Think is the model's reasoning, sent before the text as
	// reasoning_content (the DeepSeek / vLLM field).
	Think string `json:"think,omitempty"`
	// ChunkDelayMS paces a streamed answer: the pause before each chunk of
	// reasoning and text, in milliseconds.
	ChunkDelayMS int `json:"chunkDelayMs,omitempty"`
	// Tools are the tool calls to answer with.
	Tools []ToolCall `json:"tools,omitempty"`
	// Tokens is the request's total usage (prompt plus completion).
	Tokens int64 `json:"tokens,omitempty"`
	// CachedTokens and ReasoningTokens are the parts of the prompt read
	// from the cache and of the completion spent reasoning, reported as
	// usage details (0: none reported).
	CachedTokens    int64 `json:"cachedTokens,omitempty"`
	ReasoningTokens int64 `json:"reasoningTokens,omitempty"`
	// CacheReadTokens and CacheWriteTokens are reported by the Messages
	// side as cache_read_input_tokens and cache_creation_input_tokens, on
	// top of Tokens.
	CacheReadTokens  int64 `json:"cacheReadTokens,omitempty"`
	CacheWriteTokens int64 `json:"cacheWriteTokens,omitempty"`
	// Error answers with an error instead.
	Error *Error `json:"error,omitempty"`
}

// ToolCall is one scripted tool call.
type ToolCall struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Namespace is the Responses namespace tool the function is in (set
	// by a prompted script's match; answered as the call's namespace).
	Namespace string         `json:"namespace,omitempty"`
	Arguments map[string]any `json:"arguments,omitempty"`
}

// Error is a scripted provider error.
type Error struct {
	// Status is the HTTP status (default 429 when retryable, else 400).
	Status int `json:"status,omitempty"`
	// Code is error.code (e.g. rate_limit_exceeded).
	Code string `json:"code,omitempty"`
	// Message is error.message.
	Message string `json:"message,omitempty"`
	// Retryable chooses the default status.
	Retryable bool `json:"retryable,omitempty"`
	// RetryAfterSeconds sets Retry-After.
	RetryAfterSeconds int `json:"retryAfterSeconds,omitempty"`
}

// Server is the fake provider, an http.Handler for /v1/chat/completions,
// /v1/responses, /v1/messages and /v1/models (any path prefix).
type Server struct {
	// Latency is added before every answer (the benchmark's fixed provider latency).
	Latency time.Duration
	// Requests counts chat completion requests received.
	Requests atomic.Int64

	mu     sync.Mutex
	models []string // the model of each chat completion request, in order
	// firstPrompted is when a request of each prompted script (by its
	// JSON) first arrived.
	firstPrompted map[string]time.Time
}

// maxLogged bounds the request log.
const maxLogged = 1024

// Models returns the model each chat completion request asked for, in the
// order received (the latest 1024): what the gateway sent upstream.
func (s *Server) Models() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.models...)
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/chat/completions"):
		s.chat(w, r)
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/messages/count_tokens"):
		s.countTokens(w, r)
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/messages"):
		s.messages(w, r)
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/responses"):
		s.responses(w, r)
	case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/models"):
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"fake","object":"model","created":0,"owned_by":"agentrun"}]}`)
	default:
		writeErr(w, http.StatusNotFound, "not_found", "no route "+r.URL.Path)
	}
}

type request struct {
	Model               string            `json:"model"`
	Messages            []json.RawMessage `json:"messages"`
	Stream              bool              `json:"stream"`
	MaxTokens           int64             `json:"max_tokens"`
	MaxCompletionTokens int64             `json:"max_completion_tokens"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Turn *Turn `json:"agentrun_scripted"`
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	s.Requests.Add(1)
	body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if err != nil {
		writeErr(w, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	var req request
	if err := json.Unmarshal(body, &req); err != nil {
		writeErr(w, http.StatusBadRequest, "invalid_request", "malformed JSON: "+err.Error())
		return
	}
	s.mu.Lock()
	s.models = append(s.models, req.Model)
	if len(s.models) > maxLogged {
		s.models = s.models[len(s.models)-maxLogged:]
	}
	s.mu.Unlock()
	if s.Latency > 0 {
		time.Sleep(s.Latency)
	}
	turn := req.Turn
	if turn == nil {
		turn = s.prompted(body)
	}
	if turn == nil {
		turn = defaultTurn(req, len(body))
	}
	if e := turn.Error; e != nil {
		writeTurnError(w, e)
		return
	}
	maxTokens := req.MaxCompletionTokens
	if maxTokens == 0 {
		maxTokens = req.MaxTokens
	}
	completion := turn.Tokens / 2
	prompt := turn.Tokens - completion
	if maxTokens > 0 && completion > maxTokens {
		completion = maxTokens
	}
	u := usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion}
	if turn.CachedTokens > 0 {
		u.PromptDetails = &tokenDetails{CachedTokens: min(turn.CachedTokens, prompt)}
	}
	if turn.ReasoningTokens > 0 {
		u.CompletionDetails = &tokenDetails{ReasoningTokens: min(turn.ReasoningTokens, completion)}
	}
	id := fmt.Sprintf("chatcmpl-%d", s.Requests.Load())
	if req.Stream {
		s.stream(w, req, turn, u, id)
		return
	}
	msg := message{Role: roleAssistant, Content: turn.Say, ReasoningContent: turn.Think}
	finish := "stop"
	for _, tc := range turn.Tools {
		msg.ToolCalls = append(msg.ToolCalls, wireCall(tc, nil))
		finish = finishToolCalls
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": id, keyObject: "chat.completion", "created": time.Now().Unix(), keyModel: req.Model,
		"choices": []map[string]any{{"index": 0, keyMessage: msg, "finish_reason": finish, keyLogprobs: nil}},
		"usage":   u,
	})
}

func (s *Server) stream(w http.ResponseWriter, req request, turn *Turn, u usage, id string) {
	fl, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	created := time.Now().Unix()
	send := func(choices []map[string]any, u *usage) {
		chunk := map[string]any{"id": id, keyObject: "chat.completion.chunk", "created": created, keyModel: req.Model,
			"choices": choices}
		if u != nil {
			chunk["usage"] = u
		}
		raw, _ := json.Marshal(chunk)
		_, _ = fmt.Fprintf(w, "data: %s\n\n", raw)
		if fl != nil {
			fl.Flush()
		}
	}
	delta := func(d map[string]any, finish any) []map[string]any {
		return []map[string]any{{"index": 0, keyDelta: d, "finish_reason": finish, keyLogprobs: nil}}
	}
	send(delta(map[string]any{keyRole: roleAssistant, keyContent: ""}, nil), nil)
	pause := time.Duration(turn.ChunkDelayMS) * time.Millisecond
	for _, part := range chunks(turn.Think) {
		time.Sleep(pause)
		send(delta(map[string]any{"reasoning_content": part}, nil), nil)
	}
	for _, part := range chunks(turn.Say) {
		time.Sleep(pause)
		send(delta(map[string]any{keyContent: part}, nil), nil)
	}
	finish := "stop"
	for i, tc := range turn.Tools {
		idx := i
		send(delta(map[string]any{finishToolCalls: []toolCall{wireCall(tc, &idx)}}, nil), nil)
		finish = finishToolCalls
	}
	send(delta(map[string]any{}, finish), nil)
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		send([]map[string]any{}, &u)
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
	if fl != nil {
		fl.Flush()
	}
}

// defaultTurn answers a request without a script: a short text naming the
// last message, about a token per four bytes of the request.
func defaultTurn(req request, bodyLen int) *Turn {
	last := ""
	if n := len(req.Messages); n > 0 {
		var m struct {
			Content any `json:"content"`
		}
		_ = json.Unmarshal(req.Messages[n-1], &m)
		if s, ok := m.Content.(string); ok {
			last = s
		}
	}
	if len(last) > 60 {
		last = last[:60]
	}
	say := "Done. (fake upstream) You said: " + last
	return &Turn{Say: say, Tokens: int64(bodyLen/4) + int64(len(say)/4) + 1}
}

// chunkSize is the length of a streamed delta.
const chunkSize = 16

func chunks(s string) []string {
	n := chunkSize
	var out []string
	for len(s) > n {
		out = append(out, s[:n])
		s = s[n:]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}

type usage struct {
	PromptTokens      int64         `json:"prompt_tokens"`
	CompletionTokens  int64         `json:"completion_tokens"`
	TotalTokens       int64         `json:"total_tokens"`
	PromptDetails     *tokenDetails `json:"prompt_tokens_details,omitempty"`
	CompletionDetails *tokenDetails `json:"completion_tokens_details,omitempty"`
}

type tokenDetails struct {
	CachedTokens    int64 `json:"cached_tokens,omitempty"`
	ReasoningTokens int64 `json:"reasoning_tokens,omitempty"`
}

type message struct {
	Role             string     `json:"role"`
	Content          string     `json:"content"`
	ReasoningContent string     `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCall `json:"tool_calls,omitempty"`
}

type toolCall struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

func wireCall(tc ToolCall, index *int) toolCall {
	out := toolCall{Index: index, ID: tc.ID, Type: "function"}
	out.Function.Name = tc.Name
	args := tc.Arguments
	if args == nil {
		args = map[string]any{}
	}
	raw, _ := json.Marshal(args)
	out.Function.Arguments = string(raw)
	return out
}

// writeTurnError answers with a scripted error.
func writeTurnError(w http.ResponseWriter, e *Error) {
	status := e.Status
	if status == 0 {
		status = http.StatusBadRequest
		if e.Retryable {
			status = http.StatusTooManyRequests
		}
	}
	if e.RetryAfterSeconds > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfterSeconds))
	}
	code := e.Code
	if code == "" {
		code = "scripted_error"
	}
	msg := e.Message
	if msg == "" {
		msg = "injected by the script"
	}
	writeErr(w, status, code, msg)
}

func writeErr(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
		keyMessage: msg, keyType: "invalid_request_error", "code": code, "param": nil}})
}
