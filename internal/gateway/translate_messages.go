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

package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// anthropicErrors answers every refusal of the Messages door in the
// Anthropic error shape: it holds an error answer written in the gateway's
// own shape (writeError, upstreamError) and rewrites it when the handler
// returns. Headers (x-should-retry, Retry-After) pass as set.
type anthropicErrors struct {
	http.ResponseWriter
	status int
	held   bool
	buf    bytes.Buffer
}

func (a *anthropicErrors) WriteHeader(code int) {
	if a.status == 0 && code >= 400 {
		a.status, a.held = code, true
		return
	}
	if a.status == 0 {
		a.status = code
	}
	a.ResponseWriter.WriteHeader(code)
}

func (a *anthropicErrors) Write(b []byte) (int, error) {
	if a.held {
		return a.buf.Write(b)
	}
	if a.status == 0 {
		a.status = http.StatusOK
	}
	return a.ResponseWriter.Write(b)
}

func (a *anthropicErrors) Flush() {
	if !a.held {
		_ = http.NewResponseController(a.ResponseWriter).Flush()
	}
}

func (a *anthropicErrors) finish() {
	if !a.held {
		return
	}
	var eb gatewayapi.ErrorBody
	if json.Unmarshal(a.buf.Bytes(), &eb) != nil || eb.Error.Message == "" {
		eb.Error = gatewayapi.Error{Message: strings.TrimSpace(a.buf.String())}
	}
	a.Header().Set("Content-Type", "application/json")
	a.Header().Del("Content-Length")
	a.ResponseWriter.WriteHeader(a.status)
	_ = json.NewEncoder(a.ResponseWriter).Encode(anthropicError(a.status, eb.Error))
}

// anthropicErrorBody is the Anthropic error shape. The gateway's own code
// and param ride along in error (the Anthropic SDKs keep the whole body),
// and the message begins with the code, so a client that prints only the
// message still shows it.
type anthropicErrorBody struct {
	Type  string                `json:"type"`
	Error anthropicErrorDetails `json:"error"`
}

type anthropicErrorDetails struct {
	Type    string `json:"type"`
	Message string `json:"message"`
	Code    string `json:"code,omitempty"`
	Param   string `json:"param,omitempty"`
}

// anthropicError maps a gateway error (its status and OpenAI-shaped body)
// to the Anthropic shape: the type follows the status, as the Anthropic
// SDKs' error classes do.
func anthropicError(status int, e gatewayapi.Error) anthropicErrorBody {
	typ := "api_error"
	switch {
	case status == http.StatusUnauthorized:
		typ = "authentication_error"
	case status == http.StatusForbidden || status == http.StatusMisdirectedRequest:
		typ = "permission_error"
	case status == http.StatusNotFound:
		typ = "not_found_error"
	case status == http.StatusRequestEntityTooLarge:
		typ = "request_too_large"
	case status == http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case status == http.StatusServiceUnavailable || status == 529:
		typ = "overloaded_error"
	case status < 500:
		typ = "invalid_request_error"
	}
	msg := e.Message
	if e.Code != "" {
		msg = e.Code + ": " + msg
	}
	return anthropicErrorBody{Type: jError, Error: anthropicErrorDetails{Type: typ, Message: msg, Code: e.Code, Param: e.Param}}
}

// anthropicShape wraps a handler of the Messages door so its refusals —
// from authentication on — answer in the Anthropic shape.
func anthropicShape(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := &anthropicErrors{ResponseWriter: w}
		defer a.finish()
		h.ServeHTTP(a, r)
	})
}

// messageAsChat restates a Messages answer as a chat completion: for the
// run's event stream (the same AG-UI text, reasoning and tool blocks as
// the chat door's), and as the answer of a chat request translated to
// Messages (its id, model and usage too).
func messageAsChat(raw []byte) []byte {
	var msg struct {
		ID      string         `json:"id"`
		Model   string         `json:"model"`
		Usage   *messagesUsage `json:"usage"`
		Content []struct {
			Type     string          `json:"type"`
			Text     string          `json:"text"`
			Thinking string          `json:"thinking"`
			ID       string          `json:"id"`
			Name     string          `json:"name"`
			Input    json.RawMessage `json:"input"`
		} `json:"content"`
		StopReason string `json:"stop_reason"`
	}
	if json.Unmarshal(raw, &msg) != nil {
		return nil
	}
	var text, think strings.Builder
	calls := []map[string]any{}
	for _, b := range msg.Content {
		switch b.Type {
		case argText:
			text.WriteString(b.Text)
		case "thinking":
			think.WriteString(b.Thinking)
		case jToolUse:
			args := string(b.Input)
			if args == "" {
				args = "{}"
			}
			calls = append(calls, map[string]any{"id": b.ID, jType: jFunction,
				jFunction: map[string]any{jName: b.Name, jArguments: args}})
		}
	}
	m := map[string]any{jRole: jAssistant, argContent: text.String()}
	if think.Len() > 0 {
		m[wireReasoning] = think.String()
	}
	if len(calls) > 0 {
		m[wireToolCalls] = calls
	}
	out, _ := json.Marshal(map[string]any{"id": msg.ID, jsonObject: "chat.completion", fieldModel: msg.Model,
		wireChoices: []map[string]any{{jIndex: 0, jMessage: m, "finish_reason": chatFinish(msg.StopReason)}},
		jUsage:      msg.Usage.asChat()})
	return out
}

// chatFinish maps a Messages stop reason to a chat finish reason.
func chatFinish(stop string) string {
	switch stop {
	case "max_tokens", "model_context_window_exceeded":
		return wireLength
	case jToolUse:
		return finishToolCalls
	case wireRefusal:
		return wireContentFilter
	default:
		return "stop"
	}
}

// finishToolCalls is the chat finish reason of an answer with tool calls.
const finishToolCalls = wireToolCalls

// messagesStreamState follows a Messages event stream to restate each event
// as a chat chunk, for the run's event stream and for a chat request
// translated to Messages.
type messagesStreamState struct {
	tools     map[int]int // content block index → tool call index
	id, model string      // the message's, from message_start
}

// asChunk restates one Messages stream event as a chat chunk (nil: none).
func (s *messagesStreamState) asChunk(payload []byte) []byte {
	var ev struct {
		Type    string `json:"type"`
		Index   int    `json:"index"`
		Message struct {
			ID    string `json:"id"`
			Model string `json:"model"`
		} `json:"message"`
		ContentBlock struct {
			Type string `json:"type"`
			ID   string `json:"id"`
			Name string `json:"name"`
		} `json:"content_block"`
		Delta struct {
			Type        string `json:"type"`
			Text        string `json:"text"`
			Thinking    string `json:"thinking"`
			PartialJSON string `json:"partial_json"`
			StopReason  string `json:"stop_reason"`
		} `json:"delta"`
	}
	if json.Unmarshal(payload, &ev) != nil {
		return nil
	}
	var delta map[string]any
	var finish any
	switch ev.Type {
	case wireMessageStart:
		s.id, s.model = ev.Message.ID, ev.Message.Model
		return nil
	case "content_block_start":
		if ev.ContentBlock.Type != jToolUse {
			return nil
		}
		if s.tools == nil {
			s.tools = map[int]int{}
		}
		i := len(s.tools)
		s.tools[ev.Index] = i
		delta = map[string]any{wireToolCalls: []map[string]any{{jIndex: i, "id": ev.ContentBlock.ID, jType: jFunction,
			jFunction: map[string]any{jName: ev.ContentBlock.Name, jArguments: ""}}}}
	case "content_block_delta":
		switch ev.Delta.Type {
		case "text_delta":
			delta = map[string]any{argContent: ev.Delta.Text}
		case "thinking_delta":
			delta = map[string]any{wireReasoning: ev.Delta.Thinking}
		case "input_json_delta":
			i, ok := s.tools[ev.Index]
			if !ok {
				return nil
			}
			delta = map[string]any{wireToolCalls: []map[string]any{{jIndex: i,
				jFunction: map[string]any{jArguments: ev.Delta.PartialJSON}}}}
		default:
			return nil
		}
	case wireMessageDelta:
		delta, finish = map[string]any{}, chatFinish(ev.Delta.StopReason)
	default:
		return nil
	}
	out, _ := json.Marshal(map[string]any{"id": s.id, jsonObject: "chat.completion.chunk", fieldModel: s.model,
		wireChoices: []map[string]any{{jIndex: 0, jDelta: delta, "finish_reason": finish}}})
	return out
}

// The JSON names the Messages door reads and writes.
const (
	jAssistant  = "assistant"
	jFunction   = "function"
	jArguments  = "arguments"
	jIndex      = "index"
	jDelta      = "delta"
	jStopReason = "stop_reason"
	jMessage    = "message"
	jMessages   = "messages"
	jError      = "error"
	jSystem     = "system"
	jType       = "type"
	jStream     = "stream"
	jRole       = "role"
	jName       = "name"
	jTool       = "tool"
	jToolUse    = "tool_use"
	jStopSeq    = "stop_sequence"
	jUser       = "user"
	jUsage      = "usage"
)
