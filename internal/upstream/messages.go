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

package upstream

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// The Anthropic Messages side of the fake provider: POST /messages
// (streaming and not) and /messages/count_tokens, answering the same
// scripted turns as the chat side, with Messages usage (the turn's cache
// tokens reported as cache_read_input_tokens and
// cache_creation_input_tokens, on top of its Tokens).

// The JSON names of the Messages side.
const (
	kType         = "type"
	kIndex        = "index"
	kDelta        = "delta"
	kContent      = "content"
	kAssistant    = "assistant"
	kUsage        = "usage"
	kModel        = "model"
	kError        = "error"
	kThinking     = "thinking"
	kText         = "text"
	kToolUse      = "tool_use"
	kStopReason   = "stop_reason"
	kContentBlock = "content_block"
	kMessage      = "message"
	kStopSequence = "stop_sequence"
	kRole         = "role"
)

type messagesReq struct {
	Model     string            `json:"model"`
	Messages  []json.RawMessage `json:"messages"`
	Stream    bool              `json:"stream"`
	MaxTokens int64             `json:"max_tokens"`
	Turn      *Turn             `json:"agentrun_scripted"`
}

type messagesUsage struct {
	InputTokens              int64 `json:"input_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
}

func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	s.Requests.Add(1)
	body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if err != nil {
		writeAnthropicErr(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	var req messagesReq
	if err := json.Unmarshal(body, &req); err != nil {
		writeAnthropicErr(w, http.StatusBadRequest, "invalid_request_error", "malformed JSON: "+err.Error())
		return
	}
	if req.MaxTokens < 1 {
		writeAnthropicErr(w, http.StatusBadRequest, "invalid_request_error", "max_tokens: Field required")
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
		turn = defaultTurn(request{Messages: req.Messages}, len(body))
	}
	if e := turn.Error; e != nil {
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
		msg := e.Message
		if msg == "" {
			msg = "injected by the script"
		}
		writeAnthropicErr(w, status, "rate_limit_error", msg)
		return
	}
	completion := min(turn.Tokens/2, req.MaxTokens)
	u := messagesUsage{InputTokens: turn.Tokens - turn.Tokens/2, OutputTokens: completion,
		CacheReadInputTokens: turn.CacheReadTokens, CacheCreationInputTokens: turn.CacheWriteTokens}
	id := fmt.Sprintf("msg_%d", s.Requests.Load())
	var content []map[string]any
	if turn.Think != "" {
		content = append(content, map[string]any{kType: kThinking, kThinking: turn.Think, "signature": "sig"})
	}
	if turn.Say != "" {
		content = append(content, map[string]any{kType: kText, kText: turn.Say})
	}
	stop := "end_turn"
	for _, tc := range turn.Tools {
		args := tc.Arguments
		if args == nil {
			args = map[string]any{}
		}
		content = append(content, map[string]any{kType: kToolUse, "id": tc.ID, keyName: tc.Name, "input": args})
		stop = kToolUse
	}
	if req.Stream {
		s.messagesStream(w, req, turn, content, stop, u, id)
		return
	}
	if content == nil {
		content = []map[string]any{}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": id, kType: kMessage, kRole: kAssistant, kModel: req.Model, kContent: content,
		kStopReason: stop, kStopSequence: nil, kUsage: u,
	})
}

func (s *Server) messagesStream(w http.ResponseWriter, req messagesReq, turn *Turn, content []map[string]any, stop string,
	u messagesUsage, id string) {
	fl, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	send := func(event string, data map[string]any) {
		data[kType] = event
		raw, _ := json.Marshal(data)
		_, _ = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, raw)
		if fl != nil {
			fl.Flush()
		}
	}
	start := u
	start.OutputTokens = min(1, u.OutputTokens)
	send("message_start", map[string]any{kMessage: map[string]any{"id": id, kType: kMessage, kRole: kAssistant,
		kModel: req.Model, kContent: []any{}, kStopReason: nil, kStopSequence: nil, kUsage: start}})
	pause := time.Duration(turn.ChunkDelayMS) * time.Millisecond
	for i, b := range content {
		switch b[kType] {
		case kThinking:
			send("content_block_start", map[string]any{kIndex: i, kContentBlock: map[string]any{kType: kThinking, kThinking: ""}})
			for _, part := range chunks(turn.Think) {
				time.Sleep(pause)
				send("content_block_delta", map[string]any{kIndex: i, kDelta: map[string]any{kType: "thinking_delta", kThinking: part}})
			}
			send("content_block_delta", map[string]any{kIndex: i, kDelta: map[string]any{kType: "signature_delta", "signature": "sig"}})
		case kText:
			send("content_block_start", map[string]any{kIndex: i, kContentBlock: map[string]any{kType: kText, kText: ""}})
			for _, part := range chunks(turn.Say) {
				time.Sleep(pause)
				send("content_block_delta", map[string]any{kIndex: i, kDelta: map[string]any{kType: "text_delta", kText: part}})
			}
		case kToolUse:
			send("content_block_start", map[string]any{kIndex: i, kContentBlock: map[string]any{kType: kToolUse,
				"id": b["id"], keyName: b[keyName], "input": map[string]any{}}})
			raw, _ := json.Marshal(b["input"])
			for _, part := range chunks(string(raw)) {
				send("content_block_delta", map[string]any{kIndex: i, kDelta: map[string]any{kType: "input_json_delta",
					"partial_json": part}})
			}
		}
		send("content_block_stop", map[string]any{kIndex: i})
	}
	send("message_delta", map[string]any{kDelta: map[string]any{kStopReason: stop, kStopSequence: nil},
		kUsage: map[string]any{"output_tokens": u.OutputTokens}})
	send("message_stop", map[string]any{})
}

// countTokens answers a token count: about a token per four bytes.
func (s *Server) countTokens(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]int64{"input_tokens": int64(len(body)/4) + 1})
}

func writeAnthropicErr(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{kType: kError, kError: map[string]any{kType: typ, kMessage: msg}})
}
