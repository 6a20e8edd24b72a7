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

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// OpenAI Chat → Anthropic Messages. A chat completion request for a model
// whose provider speaks Messages — from the chat door, or a Responses
// request the gateway already translated to chat — is translated at the
// last step, as it leaves (exchange.send), and the provider's answer is
// restated as a chat completion or chat chunk stream before anyone reads
// it; so every reader of a chat answer (the chat door's relay, the
// Responses translation, the run stream, the accounting) serves it
// unchanged. Each door's prepare calls chatAsMessages first, so what does
// not translate is refused 400 naming the field before anything is
// reserved; what is not listed here is refused, never dropped.
//
//	chat                                   Messages
//	system / developer messages (leading)  system
//	user text and image_url parts          text and image blocks
//	assistant content, tool_calls          text and tool_use blocks
//	tool messages                          a user turn's tool_result blocks
//	tools (function), tool_choice          tools (input_schema), tool_choice auto/any/tool/none
//	parallel_tool_calls false              tool_choice.disable_parallel_tool_use
//	max_tokens, max_completion_tokens      max_tokens (the smaller; required)
//	stop                                   stop_sequences
//	temperature (0–1), top_p               temperature, top_p
//	user, safety_identifier                metadata.user_id
//	stream, stream_options                 stream (usage is always reported)
//
// Consumed with no upstream equivalent, changing nothing the model answers:
// prompt_cache_key (a caching hint), store false, service_tier auto or
// default, reasoning_effort none or minimal (no thinking), n 1,
// response_format text, and an assistant message's reasoning_content (the
// model's earlier reasoning: Messages takes it back only as signed thinking
// blocks, which chat cannot carry). Fields named agentrun_* pass through.

// chatMessageKeys are the keys of a chat message the translation reads.
var chatMessageKeys = map[string]bool{jRole: true, argContent: true, wireToolCalls: true, wireToolCallID: true,
	wireReasoning: true, wireRefusal: true}

// chatAsMessages translates a chat completion request body to a Messages
// request body, or refuses the first field that does not translate.
func chatAsMessages(body []byte) ([]byte, *apiError) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		return nil, errInvalid("", "the body must be a JSON object (a chat completion request)")
	}
	out := map[string]any{}
	var maxTokens int64
	var choice map[string]any
	parallel := true
	for name, raw := range fields {
		if !set(raw) {
			continue
		}
		var e *apiError
		switch name {
		case fieldModel, jStream, fieldTopP:
			out[name] = raw
		case fieldMaxTokens, fieldMaxCompletionTokens:
			var n int64
			if json.Unmarshal(raw, &n) != nil || n < 1 {
				return nil, errInvalid(name, name+" must be a positive integer")
			}
			if maxTokens == 0 || n < maxTokens {
				maxTokens = n
			}
		case jMessages:
			e = chatMessagesAsMessages(raw, out)
		case fieldTools:
			e = chatToolsAsMessages(raw, out)
		case fieldToolChoice:
			choice, e = chatToolChoiceAsMessages(raw)
		case fieldParallelToolCalls:
			e = unmarshalField(name, raw, &parallel, "a boolean")
		case "stop":
			var one string
			var many []string
			switch {
			case json.Unmarshal(raw, &one) == nil:
				out["stop_sequences"] = []string{one}
			case json.Unmarshal(raw, &many) == nil:
				out["stop_sequences"] = many
			default:
				e = errInvalid(name, "stop must be a string or an array of strings")
			}
		case fieldTemperature:
			var t float64
			if json.Unmarshal(raw, &t) != nil || t < 0 || t > 1 {
				e = untranslatable(name, "temperature translates only from 0 to 1, the range Messages accepts")
			}
			out[name] = raw
		case roleUser, "safety_identifier":
			var id string
			e = unmarshalField(name, raw, &id, "a string")
			out[fieldMetadata] = map[string]string{"user_id": id}
		case wireStreamOptions, wireCacheKey:
		default:
			if strings.HasPrefix(name, "agentrun_") {
				out[name] = raw
			}
			e = consumedOrRefused(name, raw)
		}
		if e != nil {
			return nil, e
		}
	}
	if maxTokens == 0 {
		maxTokens = DefaultMaxTokens
	}
	out[fieldMaxTokens] = maxTokens
	if !parallel {
		if choice == nil {
			choice = map[string]any{jType: valueAuto}
		}
		choice["disable_parallel_tool_use"] = true
	}
	if choice != nil {
		out[fieldToolChoice] = choice
	}
	b, _ := json.Marshal(out)
	return b, nil
}

// consumedOrRefused checks a field the translation reads nothing of: it is
// accepted only with a value that asks for nothing a Messages provider
// would have to do (see the table above); agentrun_* fields pass.
func consumedOrRefused(name string, raw json.RawMessage) *apiError {
	var s string
	_ = json.Unmarshal(raw, &s)
	ok := false
	switch name {
	case "n":
		ok = string(raw) == "1"
	case fieldStore:
		ok = string(raw) == "false"
	case "service_tier":
		ok = s == valueAuto || s == "default"
	case wireEffort:
		ok = s == wireNone || s == "minimal"
	case "response_format":
		var rf struct {
			Type string `json:"type"`
		}
		ok = json.Unmarshal(raw, &rf) == nil && rf.Type == argText
	default:
		ok = strings.HasPrefix(name, "agentrun_")
	}
	if ok {
		return nil
	}
	why := ""
	switch name {
	case wireEffort:
		why = ": thinking's signed blocks must travel back in later turns, and chat completions cannot carry them " +
			"(none and minimal translate: no thinking)"
	case "n":
		why = ": Messages answers one completion (n 1 translates)"
	}
	return untranslatable(name, fmt.Sprintf("%s cannot be translated to Anthropic Messages%s", name, why))
}

func untranslatable(name, msg string) *apiError {
	return errInvalid(name, msg+"; the gateway refuses it rather than drop it: remove it, or serve a model whose provider "+
		"speaks the API of this door")
}

func unmarshalField(name string, raw json.RawMessage, v any, what string) *apiError {
	if json.Unmarshal(raw, v) != nil {
		return errInvalid(name, name+" must be "+what)
	}
	return nil
}

// chatMessagesAsMessages translates the chat messages into out's system
// and messages: consecutive messages of one role become one turn, as
// Messages alternates user and assistant.
func chatMessagesAsMessages(raw json.RawMessage, out map[string]any) *apiError {
	var in []map[string]json.RawMessage
	if json.Unmarshal(raw, &in) != nil {
		return errInvalid(jMessages, "messages must be an array of message objects")
	}
	var system []string
	type turn struct {
		Role    string           `json:"role"`
		Content []map[string]any `json:"content"`
	}
	var turns []*turn
	for i, m := range in {
		field := fmt.Sprintf("messages[%d]", i)
		for k := range m {
			if !chatMessageKeys[k] {
				return untranslatable(field+"."+k, fmt.Sprintf("a message's %s cannot be translated to Anthropic Messages", k))
			}
		}
		var role string
		_ = json.Unmarshal(m[jRole], &role)
		var blocks []map[string]any
		var e *apiError
		switch role {
		case jSystem, wireDeveloper:
			if len(turns) > 0 {
				return untranslatable(field+".role", fmt.Sprintf("a %s message after the conversation began cannot be translated "+
					"to Anthropic Messages, whose system prompt comes before the conversation", role))
			}
			var text string
			if text, e = chatText(field+".content", m[argContent], false); e != nil {
				return e
			}
			system = append(system, text)
			continue
		case jUser:
			blocks, e = chatUserBlocks(field+".content", m[argContent])
		case jAssistant:
			blocks, e = chatAssistantBlocks(field, m)
		case jTool:
			var id, text string
			_ = json.Unmarshal(m[wireToolCallID], &id)
			if text, e = chatText(field+".content", m[argContent], false); e == nil {
				blocks = []map[string]any{{jType: "tool_result", "tool_use_id": id, argContent: text}}
				role = jUser
			}
		default:
			return untranslatable(field+".role", fmt.Sprintf("role %q cannot be translated to Anthropic Messages "+
				"(translated: system, developer, user, assistant, tool)", role))
		}
		if e != nil {
			return e
		}
		if len(blocks) == 0 {
			continue
		}
		if n := len(turns); n > 0 && turns[n-1].Role == role {
			turns[n-1].Content = append(turns[n-1].Content, blocks...)
			continue
		}
		turns = append(turns, &turn{Role: role, Content: blocks})
	}
	if len(system) > 0 {
		out[jSystem] = strings.Join(system, "\n\n")
	}
	out[jMessages] = turns
	return nil
}

// chatText reads a content that is a string or an array of text parts
// (refusal parts too, when refusals is set).
func chatText(field string, raw json.RawMessage, refusals bool) (string, *apiError) {
	if !set(raw) {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type    string `json:"type"`
		Text    string `json:"text"`
		Refusal string `json:"refusal"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return "", errInvalid(field, field+" must be a string or an array of content parts")
	}
	var sb strings.Builder
	for j, p := range parts {
		switch {
		case p.Type == argText:
			sb.WriteString(p.Text)
		case p.Type == wireRefusal && refusals:
			sb.WriteString(p.Refusal)
		default:
			return "", untranslatable(fmt.Sprintf("%s[%d].type", field, j), fmt.Sprintf(
				"a %s part here cannot be translated to Anthropic Messages (translated: text)", p.Type))
		}
	}
	return sb.String(), nil
}

// chatUserBlocks translates a user message's content: text and images.
func chatUserBlocks(field string, raw json.RawMessage) ([]map[string]any, *apiError) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return textBlocks(s), nil
	}
	var parts []struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		ImageURL *struct {
			URL string `json:"url"`
		} `json:"image_url"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return nil, errInvalid(field, field+" must be a string or an array of content parts")
	}
	var out []map[string]any
	for j, p := range parts {
		pf := fmt.Sprintf("%s[%d]", field, j)
		switch {
		case p.Type == argText:
			out = append(out, textBlocks(p.Text)...)
		case p.Type == wireImageURL && p.ImageURL != nil:
			src, e := imageSource(pf+".image_url.url", p.ImageURL.URL)
			if e != nil {
				return nil, e
			}
			out = append(out, map[string]any{jType: "image", "source": src})
		default:
			return nil, untranslatable(pf+".type", fmt.Sprintf("a %s part cannot be translated to Anthropic Messages "+
				"(translated: text, image_url)", p.Type))
		}
	}
	return out, nil
}

// imageSource is an image URL as a Messages image source: a data URL's
// base64 payload, or the URL.
func imageSource(field, u string) (map[string]any, *apiError) {
	if rest, ok := strings.CutPrefix(u, "data:"); ok {
		media, data, ok := strings.Cut(rest, ";base64,")
		if !ok || media == "" {
			return nil, untranslatable(field, "a data URL translates only with base64 data and a media type")
		}
		return map[string]any{jType: "base64", "media_type": media, "data": data}, nil
	}
	if !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "http://") {
		return nil, untranslatable(field, "an image translates only from a data: or http(s) URL")
	}
	return map[string]any{jType: wireURL, wireURL: u}, nil
}

// chatAssistantBlocks translates an assistant message: its text, then its
// tool calls as tool_use blocks.
func chatAssistantBlocks(field string, m map[string]json.RawMessage) ([]map[string]any, *apiError) {
	text, e := chatText(field+".content", m[argContent], true)
	if e != nil {
		return nil, e
	}
	var refusal string
	_ = json.Unmarshal(m[wireRefusal], &refusal)
	out := textBlocks(text + refusal)
	if !set(m[wireToolCalls]) {
		return out, nil
	}
	var calls []struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	if json.Unmarshal(m[wireToolCalls], &calls) != nil {
		return nil, errInvalid(field+".tool_calls", "tool_calls must be an array of function calls")
	}
	for j, c := range calls {
		cf := fmt.Sprintf("%s.tool_calls[%d]", field, j)
		if c.Type != "" && c.Type != jFunction {
			return nil, untranslatable(cf+".type", fmt.Sprintf("a %s tool call cannot be translated to Anthropic Messages", c.Type))
		}
		args := strings.TrimSpace(c.Function.Arguments)
		if args == "" {
			args = "{}"
		}
		var input map[string]any
		if json.Unmarshal([]byte(args), &input) != nil || input == nil {
			return nil, untranslatable(cf+".function.arguments",
				"a tool call's arguments translate to a tool_use input only when they are a JSON object")
		}
		out = append(out, map[string]any{jType: jToolUse, "id": c.ID, jName: c.Function.Name, wireInput: json.RawMessage(args)})
	}
	return out, nil
}

// textBlocks is a text as blocks: none when empty (Messages refuses an
// empty text block).
func textBlocks(s string) []map[string]any {
	if s == "" {
		return nil
	}
	return []map[string]any{{jType: argText, argText: s}}
}

func chatToolsAsMessages(raw json.RawMessage, out map[string]any) *apiError {
	var tools []struct {
		Type     string `json:"type"`
		Function *struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
			Strict      *bool           `json:"strict"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &tools) != nil {
		return errInvalid(fieldTools, "tools must be an array of tool definitions")
	}
	defs := make([]map[string]any, 0, len(tools))
	for i, tl := range tools {
		if tl.Type != jFunction || tl.Function == nil {
			return untranslatable(fmt.Sprintf("tools[%d].type", i), fmt.Sprintf(
				"a %s tool cannot be translated to Anthropic Messages (translated: function tools)", tl.Type))
		}
		schema := tl.Function.Parameters
		if !set(schema) {
			schema = json.RawMessage(`{"type":"object"}`)
		}
		d := map[string]any{jName: tl.Function.Name, "input_schema": schema}
		if tl.Function.Description != "" {
			d["description"] = tl.Function.Description
		}
		if tl.Function.Strict != nil && *tl.Function.Strict {
			d["strict"] = true
		}
		defs = append(defs, d)
	}
	out[fieldTools] = defs
	return nil
}

func chatToolChoiceAsMessages(raw json.RawMessage) (map[string]any, *apiError) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case valueAuto, wireNone:
			return map[string]any{jType: s}, nil
		case wireRequired:
			return map[string]any{jType: "any"}, nil
		}
		return nil, errInvalid(fieldToolChoice, "tool_choice must be auto, none, required or a named function")
	}
	var named struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &named) != nil || named.Type != jFunction || named.Function.Name == "" {
		return nil, untranslatable(fieldToolChoice, "tool_choice translates to Anthropic Messages only as auto, none, "+
			"required or a named function")
	}
	return map[string]any{jType: jTool, jName: named.Function.Name}, nil
}

// asChat is the Messages usage as a chat completion reports it: every
// input token (cache reads and writes too) in prompt_tokens, the cache
// reads as cached_tokens.
func (u *messagesUsage) asChat() *chatUsage {
	if u == nil {
		return nil
	}
	c := &chatUsage{}
	c.PromptTokens = u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens
	c.CompletionTokens = u.OutputTokens
	c.TotalTokens = c.PromptTokens + c.CompletionTokens
	c.PromptTokensDetails = &struct {
		CachedTokens int64 `json:"cached_tokens"`
	}{CachedTokens: u.CacheReadInputTokens}
	return c
}

// add folds a message_delta's usage into the message_start's: output
// tokens are cumulative, and a provider may restate the input counts.
func (u *messagesUsage) add(d *messagesUsage) {
	u.OutputTokens = max(u.OutputTokens, d.OutputTokens)
	u.InputTokens = max(u.InputTokens, d.InputTokens)
	u.CacheCreationInputTokens = max(u.CacheCreationInputTokens, d.CacheCreationInputTokens)
	u.CacheReadInputTokens = max(u.CacheReadInputTokens, d.CacheReadInputTokens)
}

// chatAsMessagesRequest is the request to a Messages provider for a chat
// request body (see send).
func (x *exchange) chatAsMessagesRequest(ctx context.Context, out []byte, key string, streamed bool) (*http.Request, error) {
	body, e := chatAsMessages(out)
	if e != nil {
		return nil, errors.New(e.body.Message)
	}
	return x.messagesRequest(ctx, "/messages", http.Header{}, body, key, streamed)
}

// answerAsChat restates a Messages provider's successful answer as a chat
// completion, or its event stream as a chat chunk stream ending in [DONE]
// (a stream that ends otherwise, or with an error event, is cut: the
// reader sees the error). An answer over the bound is left as it is for
// the reader to refuse.
func (x *exchange) answerAsChat(resp *http.Response, streamed bool) {
	if resp.StatusCode != http.StatusOK {
		return
	}
	limit := x.g.opts.MaxModelResponseBytes
	if !streamed && !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		raw, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
		_ = resp.Body.Close()
		if c := messageAsChat(raw); err == nil && int64(len(raw)) <= limit && c != nil {
			raw = c
		}
		resp.Body = io.NopCloser(bytes.NewReader(raw))
		resp.Header.Set("Content-Type", "application/json")
		return
	}
	pr, pw := io.Pipe()
	go messagesAsChatStream(resp.Body, pw, limit)
	resp.Body = pr
	resp.Header.Set("Content-Type", "text/event-stream")
}

// messagesAsChatStream reads a Messages event stream and writes it as chat
// chunks, the usage chunk and [DONE] after message_stop.
func messagesAsChatStream(in io.ReadCloser, pw *io.PipeWriter, limit int64) {
	defer func() { _ = in.Close() }()
	st := &messagesStreamState{}
	var u messagesUsage
	write := func(payload []byte) bool {
		_, err := fmt.Fprintf(pw, "data: %s\n\n", payload)
		return err == nil
	}
	br := streamReader(in)
	defer releaseStreamReader(br)
	for {
		line, err := readLine(br, limit)
		if payload, isData := bytes.CutPrefix(bytes.TrimSpace(line), []byte("data:")); isData {
			payload = bytes.TrimSpace(payload)
			var ev struct {
				Type    string `json:"type"`
				Message struct {
					Usage *messagesUsage `json:"usage"`
				} `json:"message"`
				Usage *messagesUsage `json:"usage"`
				Error struct {
					Message string `json:"message"`
				} `json:"error"`
			}
			_ = json.Unmarshal(payload, &ev)
			switch ev.Type {
			case wireMessageStart:
				if ev.Message.Usage != nil {
					u = *ev.Message.Usage
				}
			case wireMessageDelta:
				if ev.Usage != nil {
					u.add(ev.Usage)
				}
			case jError:
				_ = pw.CloseWithError(fmt.Errorf("the provider sent an error event: %s", ev.Error.Message))
				return
			case "message_stop":
				usage, _ := json.Marshal(map[string]any{"id": st.id, jsonObject: "chat.completion.chunk", fieldModel: st.model,
					wireChoices: []any{}, jUsage: u.asChat()})
				if write(usage) {
					_, _ = io.WriteString(pw, "data: [DONE]\n\n")
				}
				_ = pw.Close()
				return
			}
			if c := st.asChunk(payload); c != nil && !write(c) {
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			_ = pw.CloseWithError(fmt.Errorf("the Messages stream ended before message_stop: %w", err))
			return
		}
	}
}

// isChatToMessages says whether a chat request to m is translated to
// Anthropic Messages.
func isChatToMessages(m v1alpha1.Model, path string) bool {
	return m.API == v1alpha1.ModelAPIAnthropicMessages && path == chatPath
}

// chatPath is the chat completions path under a provider's base URL.
const chatPath = "/chat/completions"

// boundAsMessages checks that a chat request body translates to Messages
// and returns its prompt bound: the larger of the two bodies, the one the
// provider reads.
func boundAsMessages(chat []byte) (int64, *apiError) {
	out, e := chatAsMessages(chat)
	if e != nil {
		return 0, e
	}
	return int64(max(len(chat), len(out))), nil
}

// responsesParams names, for a chat field the Messages translation
// refuses, the Responses field it came from.
var responsesParams = map[string]string{wireEffort: "reasoning.effort", "verbosity": "text.verbosity",
	"response_format": "text.format", fieldMaxTokens: fieldMaxOutputTokens, jMessages: wireInput}

// boundAsMessages checks that a Responses request, translated to chat,
// translates on to Messages (Responses → chat → Messages), and returns its
// prompt bound: the largest of the three bodies. A refusal names the
// Responses field.
func (t *responsesTranslation) boundAsMessages(m v1alpha1.Model, responsesBody int) (int64, *apiError) {
	bound, e := boundAsMessages(t.body(m, 0))
	if e != nil {
		head, _, _ := strings.Cut(e.body.Param, "[")
		head, _, _ = strings.Cut(head, ".")
		if p, ok := responsesParams[head]; ok {
			e.body.Message = fmt.Sprintf("%s (translated to chat completions as %s): %s", p, e.body.Param, e.body.Message)
			e.body.Param = p
		}
		return 0, e
	}
	return max(bound, int64(responsesBody)), nil
}
