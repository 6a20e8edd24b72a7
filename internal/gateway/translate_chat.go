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
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/agentrun-dev/agentrun/internal/stream"
	"github.com/agentrun-dev/agentrun/internal/stream/openai"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// Messages → OpenAI Chat: a Messages request for a model whose provider
// speaks chat completions is translated field by field; what has no
// equivalent is refused 400 naming it, never dropped (cache_control, a
// caching hint, and metadata, which does not change the answer, are the
// exceptions: they are dropped). Fields named agentrun_* pass through.

// messagesToChat is a Messages request translated for a chat provider.
type messagesToChat struct {
	model  string // as the client named it (the answer says so)
	stream bool
	fields map[string]json.RawMessage // the chat request, without model and max_tokens
}

type msgBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
	Source    *struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
		URL       string `json:"url"`
	} `json:"source"`
}

// blocks reads a content that is a string or an array of blocks.
func blocks(raw json.RawMessage, field string) ([]msgBlock, *apiError) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []msgBlock{{Type: argText, Text: s}}, nil
	}
	var bs []msgBlock
	if err := json.Unmarshal(raw, &bs); err != nil {
		return nil, errInvalid(field, field+" must be a string or an array of content blocks")
	}
	return bs, nil
}

// translatable are the top-level Messages fields the translation reads.
var translatable = map[string]bool{
	fieldModel: true, jMessages: true, jSystem: true, fieldMaxTokens: true, jStream: true, "tools": true,
	"tool_choice": true, "stop_sequences": true, "temperature": true, "top_p": true, "metadata": true,
}

// translateMessagesToChat translates a Messages request for a provider that
// speaks OpenAI Chat.
func translateMessagesToChat(c *messagesRequest) (*messagesToChat, *apiError) {
	for name := range c.fields {
		if !translatable[name] && !strings.HasPrefix(name, "agentrun_") {
			return nil, errInvalid(name, fmt.Sprintf("%s cannot be translated to OpenAI chat completions, the API of the provider "+
				"of model %q: the gateway refuses it rather than drop it; remove it, or serve a model whose provider speaks "+
				"AnthropicMessages", name, c.model))
		}
	}
	t := &messagesToChat{model: c.model, stream: c.stream, fields: map[string]json.RawMessage{}}
	for name, raw := range c.fields {
		if strings.HasPrefix(name, "agentrun_") {
			t.fields[name] = raw
		}
	}
	var msgs []map[string]any
	if raw, ok := c.fields[jSystem]; ok && string(raw) != jsonNull {
		bs, e := blocks(raw, jSystem)
		if e != nil {
			return nil, e
		}
		var sb strings.Builder
		for i, b := range bs {
			if b.Type != argText {
				return nil, errInvalid(fmt.Sprintf("system[%d].type", i), "system blocks must be text blocks to translate to chat completions")
			}
			sb.WriteString(b.Text)
		}
		msgs = append(msgs, map[string]any{jRole: jSystem, argContent: sb.String()})
	}
	var in []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(c.fields[jMessages], &in); err != nil {
		return nil, errInvalid(jMessages, "messages must be an array of {role, content}")
	}
	for i, m := range in {
		out, e := translateMessage(i, m.Role, m.Content)
		if e != nil {
			return nil, e
		}
		msgs = append(msgs, out...)
	}
	t.fields[jMessages], _ = json.Marshal(msgs)
	if e := t.translateTools(c.fields); e != nil {
		return nil, e
	}
	if raw, ok := c.fields["stop_sequences"]; ok {
		t.fields["stop"] = raw
	}
	for _, name := range []string{"temperature", "top_p"} {
		if raw, ok := c.fields[name]; ok {
			t.fields[name] = raw
		}
	}
	if c.stream {
		t.fields[jStream] = json.RawMessage("true")
		t.fields["stream_options"] = json.RawMessage(`{"include_usage":true}`)
	}
	return t, nil
}

// translateMessage turns the Messages message i into chat messages: a
// user's tool_result blocks become tool messages (before its other
// content), an assistant's tool_use blocks its tool_calls.
func translateMessage(i int, role string, content json.RawMessage) ([]map[string]any, *apiError) {
	field := fmt.Sprintf("messages[%d]", i)
	if role != jUser && role != jAssistant {
		return nil, errInvalid(field+".role", "role must be user or assistant")
	}
	bs, e := blocks(content, field+".content")
	if e != nil {
		return nil, e
	}
	var out, parts, calls []map[string]any
	var text strings.Builder
	for j, b := range bs {
		bf := fmt.Sprintf("%s.content[%d]", field, j)
		switch {
		case b.Type == argText:
			text.WriteString(b.Text)
			parts = append(parts, map[string]any{jType: argText, argText: b.Text})
		case b.Type == "image" && role == jUser && b.Source != nil:
			u := b.Source.URL
			if b.Source.Type == "base64" {
				u = "data:" + b.Source.MediaType + ";base64," + b.Source.Data
			}
			if u == "" {
				return nil, errInvalid(bf+".source", "an image translates only from a base64 or url source")
			}
			parts = append(parts, map[string]any{jType: wireImageURL, wireImageURL: map[string]any{"url": u}})
		case b.Type == jToolUse && role == jAssistant:
			args := string(b.Input)
			if args == "" || args == jsonNull {
				args = "{}"
			}
			calls = append(calls, map[string]any{"id": b.ID, jType: jFunction,
				jFunction: map[string]any{jName: b.Name, jArguments: args}})
		case b.Type == "tool_result" && role == jUser:
			res, e := toolResultText(b, bf)
			if e != nil {
				return nil, e
			}
			out = append(out, map[string]any{jRole: jTool, "tool_call_id": b.ToolUseID, argContent: res})
		default:
			return nil, errInvalid(bf+".type", fmt.Sprintf("a %s block in a %s message cannot be translated to chat completions "+
				"(translated: text, image, tool_use, tool_result); serve a model whose provider speaks AnthropicMessages", b.Type, role))
		}
	}
	switch {
	case role == jAssistant:
		m := map[string]any{jRole: jAssistant, argContent: text.String()}
		if len(calls) > 0 {
			m["tool_calls"] = calls
		}
		out = append(out, m)
	case len(parts) == 1 && parts[0][jType] == argText:
		out = append(out, map[string]any{jRole: jUser, argContent: text.String()})
	case len(parts) > 0:
		out = append(out, map[string]any{jRole: jUser, argContent: parts})
	}
	return out, nil
}

// toolResultText is a tool_result's content as text; an error result says
// so in the text (chat has no is_error).
func toolResultText(b msgBlock, field string) (string, *apiError) {
	var sb strings.Builder
	if b.IsError {
		sb.WriteString("Error: ")
	}
	if len(b.Content) > 0 && string(b.Content) != jsonNull {
		inner, e := blocks(b.Content, field+".content")
		if e != nil {
			return "", e
		}
		for k, ib := range inner {
			if ib.Type != argText {
				return "", errInvalid(fmt.Sprintf("%s.content[%d].type", field, k), fmt.Sprintf(
					"a %s block in a tool_result cannot be translated to chat completions (a tool message holds text)", ib.Type))
			}
			sb.WriteString(ib.Text)
		}
	}
	return sb.String(), nil
}

func (t *messagesToChat) translateTools(fields map[string]json.RawMessage) *apiError {
	if raw, ok := fields["tools"]; ok && string(raw) != jsonNull {
		var tools []struct {
			Type        string          `json:"type"`
			Name        string          `json:"name"`
			Description string          `json:"description"`
			InputSchema json.RawMessage `json:"input_schema"`
		}
		if err := json.Unmarshal(raw, &tools); err != nil {
			return errInvalid("tools", "tools must be an array of tool definitions")
		}
		out := make([]map[string]any, 0, len(tools))
		for i, tl := range tools {
			if tl.Type != "" && tl.Type != "custom" {
				return errInvalid(fmt.Sprintf("tools[%d].type", i), fmt.Sprintf("the server tool %s cannot be translated to chat "+
					"completions: only client tools (name, description, input_schema) are", tl.Type))
			}
			fn := map[string]any{jName: tl.Name}
			if tl.Description != "" {
				fn["description"] = tl.Description
			}
			if len(tl.InputSchema) > 0 {
				fn["parameters"] = tl.InputSchema
			}
			out = append(out, map[string]any{jType: jFunction, jFunction: fn})
		}
		t.fields["tools"], _ = json.Marshal(out)
	}
	if raw, ok := fields["tool_choice"]; ok && string(raw) != jsonNull {
		var tc struct {
			Type                   string `json:"type"`
			Name                   string `json:"name"`
			DisableParallelToolUse bool   `json:"disable_parallel_tool_use"`
		}
		if err := json.Unmarshal(raw, &tc); err != nil {
			return errInvalid("tool_choice", "tool_choice must be an object with a type")
		}
		var choice any
		switch tc.Type {
		case "auto", "none":
			choice = tc.Type
		case "any":
			choice = wireRequired
		case jTool:
			choice = map[string]any{jType: jFunction, jFunction: map[string]any{jName: tc.Name}}
		default:
			return errInvalid("tool_choice.type", "tool_choice.type must be auto, any, tool or none")
		}
		t.fields["tool_choice"], _ = json.Marshal(choice)
		if tc.DisableParallelToolUse {
			t.fields["parallel_tool_calls"] = json.RawMessage("false")
		}
	}
	return nil
}

// body is the chat request with the upstream model and the max_tokens the
// gateway reserved.
func (t *messagesToChat) body(model string, maxTokens int64) []byte {
	t.fields[fieldModel], _ = json.Marshal(model)
	if maxTokens > 0 {
		t.fields[fieldMaxTokens], _ = json.Marshal(maxTokens)
	}
	out, _ := json.Marshal(t.fields)
	return out
}

// asMessages is the chat usage as Messages reports it: cached prompt
// tokens as cache_read_input_tokens, the rest as input_tokens.
func (u *chatUsage) asMessages() messagesUsage {
	if u == nil {
		return messagesUsage{}
	}
	var cached int64
	if u.PromptTokensDetails != nil {
		cached = min(max(u.PromptTokensDetails.CachedTokens, 0), u.PromptTokens)
	}
	return messagesUsage{InputTokens: u.PromptTokens - cached, CacheReadInputTokens: cached, OutputTokens: u.CompletionTokens}
}

// stopReason maps a chat finish reason to a Messages stop reason.
func stopReason(finish string) string {
	switch finish {
	case wireLength:
		return "max_tokens"
	case finishToolCalls, "function_call":
		return jToolUse
	case wireContentFilter:
		return wireRefusal
	default:
		return "end_turn"
	}
}

// forwardMessagesToChat sends a translated request to a chat provider and
// answers in Messages: the message, or its event stream.
func (x *exchange) forwardMessagesToChat(rctx context.Context, t *messagesToChat, maxTokens int64, key string) {
	g, m := x.g, x.m
	ctx, cancel := context.WithTimeout(context.WithoutCancel(rctx), boundedTimeout(g.opts.UpstreamTimeout, x.ticket.until, g.clock.Now()))
	defer cancel()
	x.dispatched = g.clock.Now()
	x.done = x.dispatched
	ureq, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(m.BaseURL, "/")+"/chat/completions",
		bytes.NewReader(t.body(upstreamModel(m), maxTokens)))
	if err != nil {
		x.count(jError, tokenUse{}, true)
		writeError(x.w, newError(http.StatusInternalServerError, gatewayapi.TypeServer, gatewayapi.CodeUpstreamUnavailable, err.Error()))
		return
	}
	ureq.Header.Set("Content-Type", "application/json")
	ureq.Header.Set("Accept", "application/json")
	if t.stream {
		ureq.Header.Set("Accept", "text/event-stream")
	}
	if key != "" {
		ureq.Header.Set("Authorization", "Bearer "+key)
	}
	spanUpstream(rctx, ureq, m)
	resp, err := g.opts.Upstream.Do(ureq)
	if err != nil {
		x.unreachable(err)
		return
	}
	defer func() { _ = resp.Body.Close() }()
	switch {
	case resp.StatusCode != http.StatusOK:
		x.upstreamError(resp, key)
	case !t.stream:
		raw, rerr := io.ReadAll(io.LimitReader(resp.Body, g.opts.MaxModelResponseBytes+1))
		x.done = g.clock.Now()
		if int64(len(raw)) > g.opts.MaxModelResponseBytes {
			x.tooLarge(fmt.Sprintf("its answer exceeds the gateway's bound of %d bytes (--max-model-response-bytes)",
				g.opts.MaxModelResponseBytes))
			return
		}
		var cc struct {
			ID      string `json:"id"`
			Choices []struct {
				Message struct {
					Content   string `json:"content"`
					ToolCalls []struct {
						ID       string `json:"id"`
						Function struct {
							Name      string `json:"name"`
							Arguments string `json:"arguments"`
						} `json:"function"`
					} `json:"tool_calls"`
				} `json:"message"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
			Usage *chatUsage `json:"usage"`
		}
		if rerr != nil || json.Unmarshal(raw, &cc) != nil || len(cc.Choices) == 0 {
			x.k.providerFault("ResponseMalformed", true, fmt.Sprintf("model %s: the provider's answer is no chat completion", m.Name))
			x.count(jError, tokenUse{}, false)
			writeError(x.w, newError(http.StatusBadGateway, gatewayapi.TypeServer, gatewayapi.CodeUpstreamUnavailable,
				fmt.Sprintf("the provider of model %q answered with no chat completion (counted, with its reservation)", m.Name)))
			return
		}
		var tokens tokenUse
		reported := false
		if cc.Usage != nil {
			tokens, reported = cc.Usage.charged()
		}
		spanUsage(rctx, raw)
		ch := cc.Choices[0]
		content := []map[string]any{}
		if ch.Message.Content != "" {
			content = append(content, map[string]any{jType: argText, argText: ch.Message.Content})
		}
		for _, tc := range ch.Message.ToolCalls {
			input := json.RawMessage(tc.Function.Arguments)
			if !json.Valid(input) {
				input = json.RawMessage("{}")
			}
			content = append(content, map[string]any{jType: jToolUse, "id": tc.ID, jName: tc.Function.Name, wireInput: input})
		}
		writeJSON(x.w, map[string]any{"id": messagesID(cc.ID), jType: jMessage, jRole: jAssistant, fieldModel: t.model, argContent: content,
			jStopReason: stopReason(ch.FinishReason), jStopSeq: nil, jUsage: cc.Usage.asMessages()})
		x.stream(func(tr *openai.Translator) []stream.Event { return append(tr.Completion(raw), tr.End(nil)...) })
		x.k.noteAnswer(chatCompletionDigest(raw))
		x.count("ok", tokens, reported)
	default:
		var cut error
		x.answer = newAnswerDigest()
		tokens, reported := x.relayChatAsMessages(rctx, resp, t.model, &cut)
		x.k.noteAnswer(x.answer.sum())
		x.stream(func(tr *openai.Translator) []stream.Event { return tr.End(cut) })
		x.done = g.clock.Now()
		outcome := "ok"
		if !reported {
			outcome = outcomeStreamCut
		}
		x.count(outcome, tokens, reported)
	}
}

// messagesEvents writes a Messages event stream.
type messagesEvents struct {
	w          http.ResponseWriter
	fl         http.Flusher
	gone       bool
	started    bool
	index      int    // the open content block's index, -1 if none
	open       string // its kind: text, or tool:<chat index>
	next       int
	stopReason string
	usage      *chatUsage
}

func (s *messagesEvents) send(event string, data map[string]any) {
	if s.gone {
		return
	}
	data[jType] = event
	raw, _ := json.Marshal(data)
	if _, err := fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", event, raw); err != nil {
		s.gone = true
		return
	}
	if s.fl != nil {
		s.fl.Flush()
	}
}

func (s *messagesEvents) start(id, model string) {
	if s.started {
		return
	}
	s.started = true
	s.send("message_start", map[string]any{jMessage: map[string]any{"id": messagesID(id), jType: jMessage, jRole: jAssistant,
		fieldModel: model, argContent: []any{}, jStopReason: nil, jStopSeq: nil,
		jUsage: messagesUsage{}}})
}

func (s *messagesEvents) close() {
	if s.index >= 0 {
		s.send("content_block_stop", map[string]any{jIndex: s.index})
		s.index, s.open = -1, ""
	}
}

func (s *messagesEvents) block(kind string, cb map[string]any) {
	if s.open == kind {
		return
	}
	s.close()
	s.index, s.open = s.next, kind
	s.next++
	s.send("content_block_start", map[string]any{jIndex: s.index, "content_block": cb})
}

// relayChatAsMessages reads a chat stream and writes it as a Messages event
// stream; it returns the usage the provider reported.
func (x *exchange) relayChatAsMessages(rctx context.Context, resp *http.Response, model string, cut *error) (tokenUse, bool) {
	w := x.w
	fl, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &messagesEvents{w: w, fl: fl, index: -1}
	done := false
	br := streamReader(resp.Body)
	defer releaseStreamReader(br)
	for {
		line, err := readLine(br, x.g.opts.MaxModelResponseBytes)
		if errors.Is(err, errLineTooLong) {
			x.g.metrics.tooLarge.WithLabelValues("model_stream_line").Inc()
			err = fmt.Errorf("%w (one line of the stream exceeds the gateway's bound of %d bytes, --max-model-response-bytes)",
				err, x.g.opts.MaxModelResponseBytes)
			line = nil
		}
		payload, isData := bytes.CutPrefix(bytes.TrimRight(line, "\r\n"), []byte("data:"))
		payload = bytes.TrimSpace(payload)
		switch {
		case !isData || len(payload) == 0:
		case bytes.Equal(payload, []byte("[DONE]")):
			done = true
		default:
			spanUsage(rctx, payload)
			x.answer.chatChunk(payload)
			x.stream(func(tr *openai.Translator) []stream.Event { return tr.Chunk(payload) })
			s.chunk(payload, model)
		}
		if err != nil || done {
			if !done {
				x.k.providerFault("StreamCut", true, fmt.Sprintf("model %s: the stream ended before [DONE]: %v", x.m.Name, err))
				*cut = fmt.Errorf("the provider's stream ended before [DONE]: %w", err)
				s.start("", model)
				s.send(jError, map[string]any{jError: map[string]any{jType: "api_error",
					jMessage: "the provider's stream ended before its end: " + err.Error()}})
				return tokenUse{}, false
			}
			s.start("", model)
			s.close()
			u := s.usage.asMessages()
			s.send("message_delta", map[string]any{jDelta: map[string]any{jStopReason: stopReason(s.stopReason), jStopSeq: nil},
				jUsage: u})
			s.send("message_stop", map[string]any{})
			if s.usage == nil {
				return tokenUse{}, false
			}
			return s.usage.charged()
		}
	}
}

// chunk writes the Messages events of one chat chunk.
func (s *messagesEvents) chunk(payload []byte, model string) {
	var c struct {
		ID      string `json:"id"`
		Choices []struct {
			Delta struct {
				Content   string `json:"content"`
				ToolCalls []struct {
					Index    int    `json:"index"`
					ID       string `json:"id"`
					Function struct {
						Name      string `json:"name"`
						Arguments string `json:"arguments"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"delta"`
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
		Usage *chatUsage `json:"usage"`
	}
	if json.Unmarshal(payload, &c) != nil {
		return
	}
	s.start(c.ID, model)
	if c.Usage != nil {
		s.usage = c.Usage
	}
	for _, ch := range c.Choices {
		if ch.Delta.Content != "" {
			s.block(argText, map[string]any{jType: argText, argText: ""})
			s.send("content_block_delta", map[string]any{jIndex: s.index,
				jDelta: map[string]any{jType: "text_delta", argText: ch.Delta.Content}})
		}
		for _, tc := range ch.Delta.ToolCalls {
			s.block(fmt.Sprintf("tool:%d", tc.Index), map[string]any{jType: jToolUse, "id": tc.ID, jName: tc.Function.Name,
				wireInput: map[string]any{}})
			if tc.Function.Arguments != "" {
				s.send("content_block_delta", map[string]any{jIndex: s.index,
					jDelta: map[string]any{jType: "input_json_delta", "partial_json": tc.Function.Arguments}})
			}
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			s.stopReason = *ch.FinishReason
		}
	}
}

// messagesID is the id of a translated Messages answer: the chat answer's
// when it is already a Messages id, else a new msg_ one (a chat completion's
// chatcmpl- id is no Messages id).
func messagesID(chatID string) string {
	if strings.HasPrefix(chatID, "msg_") {
		return chatID
	}
	return newItemID("msg")
}
