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
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/stream"
	"github.com/agentrun-dev/agentrun/internal/stream/openai"
)

// Responses → chat completions. The gateway keeps no state between
// requests, so what a Responses request needs of the provider's server state
// is refused, naming the field: previous_response_id, conversation,
// background, prompt, item_reference items. store is ignored: nothing is
// stored, the answer says store false, and a later previous_response_id
// naming it is refused. A feature chat completions has no equivalent of is
// refused, never dropped: built-in tools (web_search, file_search, mcp, …),
// file and audio inputs, truncation auto, max_tool_calls, top_logprobs and
// the logprobs include. Reasoning items in the input are dropped: they are
// the model's own earlier reasoning (often encrypted for its provider), not
// input the user gave, and a chat provider takes no reasoning back. include
// values ask for parts of the answer (reasoning.encrypted_content) that a
// translated answer does not have, so they are ignored: the answer simply
// carries none. Fields the Responses API does not define pass through to the
// provider untouched, as at the chat door — unless one is, under case
// folding, a field of the chat request the gateway writes.

// responsesTranslation is a Responses request translated to chat completions.
type responsesTranslation struct {
	req  *responsesRequest
	chat map[string]json.RawMessage
	// echo are the request's settings the response object repeats.
	echo map[string]json.RawMessage
}

func (t *responsesTranslation) size() int {
	out, _ := json.Marshal(t.chat)
	return len(out)
}

// responsesIgnored are Responses fields a translation reads nothing of
// (see above); responsesSame pass to chat under the same name.
var (
	responsesIgnored = []string{fieldStore, "include", fieldMetadata, "client_metadata", "stream_options", "truncation", fieldBackground,
		fieldPreviousResponseID, "conversation", "prompt", "max_tool_calls", "top_logprobs"}
	responsesSame = []string{fieldTemperature, fieldTopP, roleUser, "safety_identifier", "service_tier", "prompt_cache_key"}
	// chatWritten are the fields of the chat request a translation writes.
	chatWritten = append(slices.Clone(chatControlled), fieldTools, fieldToolChoice, fieldParallelToolCalls, "response_format",
		"verbosity", "reasoning_effort", fieldTemperature, fieldTopP, roleUser, "safety_identifier", "service_tier", "prompt_cache_key")
)

func set(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != jsonNull }

func refuse(param, what string) *apiError {
	return errInvalid(param, what+": the model's provider speaks chat completions, which has no equivalent, and the gateway "+
		"does not drop what it cannot translate; remove it, or use a model whose provider speaks OpenAIResponses")
}

// translateResponses translates a Responses request to a chat completion
// request, or refuses what cannot be translated.
func translateResponses(c *responsesRequest) (*responsesTranslation, *apiError) {
	f := c.fields
	t := &responsesTranslation{req: c, chat: map[string]json.RawMessage{}, echo: map[string]json.RawMessage{}}
	var s string
	if raw := f[fieldPreviousResponseID]; set(raw) && (json.Unmarshal(raw, &s) != nil || s != "") {
		return nil, errInvalid(fieldPreviousResponseID, "previous_response_id is refused: the model's provider speaks chat "+
			"completions and keeps no responses, nor does the gateway; send the whole conversation as input")
	}
	if set(f["conversation"]) {
		return nil, errInvalid("conversation", "conversation is refused: the model's provider speaks chat completions and keeps "+
			"no conversations, nor does the gateway; send the whole conversation as input")
	}
	if string(f[fieldBackground]) == "true" {
		return nil, refuse(fieldBackground, "background: true (a response the provider runs and stores)")
	}
	for _, name := range []string{"prompt", "max_tool_calls", "top_logprobs"} {
		if set(f[name]) {
			return nil, refuse(name, name)
		}
	}
	if json.Unmarshal(f["truncation"], &s) == nil && s == valueAuto {
		return nil, refuse("truncation", `truncation "auto"`)
	}
	var include []string
	_ = json.Unmarshal(f["include"], &include)
	if slices.Contains(include, "message.output_text.logprobs") {
		return nil, refuse("include", `include "message.output_text.logprobs"`)
	}
	for key, raw := range f {
		known := slices.Contains(responsesControlled, key) || slices.Contains(responsesIgnored, key) ||
			slices.Contains(responsesSame, key)
		if known {
			continue
		}
		if i := slices.IndexFunc(chatWritten, func(w string) bool { return strings.EqualFold(w, key) }); i >= 0 {
			return nil, errInvalid(key, fmt.Sprintf("%q is refused: it is not a Responses API field, and the gateway translates "+
				"this request to a chat completion whose field %q it writes", key, chatWritten[i]))
		}
		t.chat[key] = raw
	}
	for _, name := range responsesSame {
		if set(f[name]) {
			t.chat[name] = f[name]
		}
	}
	msgs, e := translateInput(f[fieldInstructions], f[wireInput])
	if e != nil {
		return nil, e
	}
	t.chat["messages"], _ = json.Marshal(msgs)
	if e := t.tools(); e != nil {
		return nil, e
	}
	if e := t.text(); e != nil {
		return nil, e
	}
	var reasoning struct {
		Effort json.RawMessage `json:"effort"`
	}
	if json.Unmarshal(f[itemReasoning], &reasoning) == nil && set(reasoning.Effort) {
		t.chat["reasoning_effort"] = reasoning.Effort
	}
	for _, name := range []string{fieldInstructions, fieldTools, fieldToolChoice, argText, itemReasoning, fieldTemperature, fieldTopP,
		fieldParallelToolCalls, fieldMetadata} {
		if set(f[name]) {
			t.echo[name] = f[name]
		}
	}
	return t, nil
}

// tools translates the function tools, tool_choice and parallel_tool_calls.
func (t *responsesTranslation) tools() *apiError {
	f := t.req.fields
	var tools []map[string]json.RawMessage
	if set(f[fieldTools]) && json.Unmarshal(f[fieldTools], &tools) != nil {
		return errInvalid(fieldTools, "tools must be an array of tool objects")
	}
	out := make([]map[string]any, 0, len(tools))
	for i, tool := range tools {
		var typ string
		_ = json.Unmarshal(tool[jsonType], &typ)
		if typ != typeFunction {
			return refuse(fmt.Sprintf("tools[%d].type", i), fmt.Sprintf("tool type %q (a tool the Responses provider runs itself)", typ))
		}
		fn := map[string]json.RawMessage{}
		for _, k := range []string{keyName, "description", "parameters", "strict"} {
			if set(tool[k]) {
				fn[k] = tool[k]
			}
		}
		out = append(out, map[string]any{jsonType: typeFunction, typeFunction: fn})
	}
	if len(out) > 0 {
		t.chat[fieldTools], _ = json.Marshal(out)
		if set(f[fieldParallelToolCalls]) {
			t.chat[fieldParallelToolCalls] = f[fieldParallelToolCalls]
		}
	}
	raw := f[fieldToolChoice]
	if !set(raw) {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s != valueAuto && s != "none" && s != wireRequired {
			return errInvalid(fieldToolChoice, `tool_choice must be "auto", "none", wireRequired or a function`)
		}
		t.chat[fieldToolChoice] = raw
		return nil
	}
	var choice struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if json.Unmarshal(raw, &choice) != nil || choice.Type != typeFunction || choice.Name == "" {
		return refuse(fieldToolChoice, fmt.Sprintf("tool_choice of type %q", choice.Type))
	}
	t.chat[fieldToolChoice], _ = json.Marshal(map[string]any{jsonType: typeFunction, typeFunction: map[string]string{keyName: choice.Name}})
	return nil
}

// text translates text.format (json_schema, json_object) and text.verbosity.
func (t *responsesTranslation) text() *apiError {
	var text struct {
		Format *struct {
			Type        string          `json:"type"`
			Name        string          `json:"name"`
			Description string          `json:"description,omitempty"`
			Schema      json.RawMessage `json:"schema"`
			Strict      *bool           `json:"strict,omitempty"`
		} `json:"format"`
		Verbosity json.RawMessage `json:"verbosity"`
	}
	if set(t.req.fields[argText]) && json.Unmarshal(t.req.fields[argText], &text) != nil {
		return errInvalid(argText, "text must be an object")
	}
	if set(text.Verbosity) {
		t.chat["verbosity"] = text.Verbosity
	}
	if text.Format == nil {
		return nil
	}
	switch text.Format.Type {
	case "", argText:
	case "json_object":
		t.chat["response_format"] = json.RawMessage(`{"type":"json_object"}`)
	case formatJSONSchema:
		js := map[string]any{keyName: text.Format.Name, "schema": text.Format.Schema}
		if text.Format.Description != "" {
			js["description"] = text.Format.Description
		}
		if text.Format.Strict != nil {
			js["strict"] = *text.Format.Strict
		}
		t.chat["response_format"], _ = json.Marshal(map[string]any{jsonType: formatJSONSchema, formatJSONSchema: js})
	default:
		return refuse("text.format.type", fmt.Sprintf("text format %q", text.Format.Type))
	}
	return nil
}

// inputItem is one item of a Responses input.
type inputItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Output    json.RawMessage `json:"output"`
}

// translateInput translates instructions and input to chat messages.
func translateInput(instructions, input json.RawMessage) ([]map[string]any, *apiError) {
	var msgs []map[string]any
	var s string
	if json.Unmarshal(instructions, &s) == nil && s != "" {
		msgs = append(msgs, map[string]any{keyRole: roleSystem, argContent: s})
	}
	if json.Unmarshal(input, &s) == nil {
		return append(msgs, map[string]any{keyRole: roleUser, argContent: s}), nil
	}
	var items []inputItem
	if json.Unmarshal(input, &items) != nil || len(items) == 0 {
		return nil, errInvalid(wireInput, "input is required: a string or a non-empty array of input items")
	}
	calls := -1 // the index of the assistant message function calls join, if any
	for i, it := range items {
		param := fmt.Sprintf("input[%d]", i)
		typ := it.Type
		if typ == "" && it.Role != "" {
			typ = itemMessage
		}
		switch typ {
		case itemMessage:
			role := it.Role
			switch role {
			case "developer":
				role = roleSystem
			case roleUser, roleSystem, roleAssistant:
			default:
				return nil, errInvalid(param+".role", fmt.Sprintf("role %q is not one of user, assistant, system, developer", it.Role))
			}
			content, e := translateContent(param+".content", it.Content, role == roleUser)
			if e != nil {
				return nil, e
			}
			msgs = append(msgs, map[string]any{keyRole: role, argContent: content})
			calls = -1
			if role == roleAssistant {
				calls = len(msgs) - 1
			}
		case itemFunctionCall:
			call := map[string]any{"id": it.CallID, jsonType: typeFunction,
				typeFunction: map[string]string{keyName: it.Name, keyArguments: it.Arguments}}
			if calls < 0 {
				msgs = append(msgs, map[string]any{keyRole: roleAssistant, argContent: nil})
				calls = len(msgs) - 1
			}
			tc, _ := msgs[calls]["tool_calls"].([]map[string]any)
			msgs[calls]["tool_calls"] = append(tc, call)
		case "function_call_output":
			content, e := translateContent(param+".output", it.Output, false)
			if e != nil {
				return nil, e
			}
			msgs = append(msgs, map[string]any{keyRole: roleTool, "tool_call_id": it.CallID, argContent: content})
			calls = -1 // a later function_call is the next assistant turn
		case itemReasoning:
			// The model's own earlier reasoning: a chat provider takes none back.
		case "item_reference":
			return nil, errInvalid(param+".type", "an item_reference names an item the provider stored: the model's provider "+
				"speaks chat completions and keeps none, nor does the gateway; send the item itself")
		default:
			return nil, refuse(param+".type", fmt.Sprintf("input item type %q", typ))
		}
	}
	return msgs, nil
}

// translateContent translates a message's content (or a function call's
// output): a string, or parts — text parts are joined; a user message's
// input_image with an image_url becomes an image_url part.
func translateContent(param string, raw json.RawMessage, images bool) (any, *apiError) {
	var s string
	if !set(raw) || json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		Refusal  string `json:"refusal"`
		ImageURL string `json:"image_url"`
		Detail   string `json:"detail"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return nil, errInvalid(param, "content must be a string or an array of content parts")
	}
	var text strings.Builder
	var out []map[string]any
	image := false
	for j, p := range parts {
		switch p.Type {
		case "input_text", partOutputText, argText:
			text.WriteString(p.Text)
			out = append(out, map[string]any{jsonType: argText, argText: p.Text})
		case wireRefusal:
			text.WriteString(p.Refusal)
			out = append(out, map[string]any{jsonType: argText, argText: p.Refusal})
		case "input_image":
			if !images || p.ImageURL == "" {
				return nil, refuse(fmt.Sprintf("%s[%d]", param, j), "an input_image here or by file_id")
			}
			img := map[string]string{"url": p.ImageURL}
			if p.Detail != "" {
				img["detail"] = p.Detail
			}
			out = append(out, map[string]any{jsonType: wireImageURL, wireImageURL: img})
			image = true
		default:
			return nil, refuse(fmt.Sprintf("%s[%d].type", param, j), fmt.Sprintf("content part type %q", p.Type))
		}
	}
	if image {
		return out, nil
	}
	return text.String(), nil
}

// body is the chat request the provider gets: its model id, the max_tokens
// the gateway reserved, and usage asked for on a stream.
func (t *responsesTranslation) body(m v1alpha1.Model, maxTokens int64) []byte {
	id := m.UpstreamModel
	if id == "" {
		id = m.Name
	}
	t.chat[fieldModel], _ = json.Marshal(id)
	if maxTokens > 0 {
		t.chat[fieldMaxTokens], _ = json.Marshal(maxTokens)
	}
	if t.req.stream {
		t.chat[fieldStream] = json.RawMessage("true")
		t.chat["stream_options"] = json.RawMessage(`{"include_usage":true}`)
	}
	out, _ := json.Marshal(t.chat)
	return out
}

// chatUsage is a chat completion's usage with its details.
type chatUsage struct {
	wireUsage
	PromptTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details,omitempty"`
	CompletionTokensDetails *struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"completion_tokens_details,omitempty"`
}

// responses is the usage in the Responses shape.
func (u *chatUsage) responses() *responsesUsage {
	if u == nil {
		return nil
	}
	r := &responsesUsage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens, TotalTokens: u.TotalTokens}
	if u.PromptTokensDetails != nil {
		r.InputTokensDetails.CachedTokens = u.PromptTokensDetails.CachedTokens
	}
	if u.CompletionTokensDetails != nil {
		r.OutputTokensDetails.ReasoningTokens = u.CompletionTokensDetails.ReasoningTokens
	}
	return r
}

func newItemID(prefix string) string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return prefix + "_" + hex.EncodeToString(b)
}

// object is the response object: its id, status, output and usage, and
// the request's settings.
func (t *responsesTranslation) object(id string, created int64, status string, finish string, output []map[string]any,
	u *responsesUsage, maxTokens int64) map[string]any {
	o := map[string]any{
		"id": id, jsonObject: keyResponse, "created_at": created, keyStatus: status, fieldModel: t.req.model,
		"output": output, "usage": u, keyError: nil, "incomplete_details": nil, fieldStore: false, fieldBackground: false,
		fieldPreviousResponseID: nil, "truncation": "disabled", fieldParallelToolCalls: true, fieldToolChoice: valueAuto,
		fieldTools: []any{}, fieldMetadata: map[string]any{}, argText: map[string]any{"format": map[string]string{jsonType: argText}},
		fieldInstructions: nil, itemReasoning: nil, fieldTemperature: nil, fieldTopP: nil, "max_output_tokens": nil,
	}
	if output == nil {
		o["output"] = []any{}
	}
	if u == nil {
		o["usage"] = nil
	}
	if maxTokens > 0 {
		o["max_output_tokens"] = maxTokens
	}
	for k, v := range t.echo {
		o[k] = v
	}
	switch finish {
	case wireLength:
		o[keyStatus], o["incomplete_details"] = statusIncomplete, map[string]string{"reason": "max_output_tokens"}
	case wireContentFilter:
		o[keyStatus], o["incomplete_details"] = statusIncomplete, map[string]string{"reason": wireContentFilter}
	}
	return o
}

func messageItem(id, text, status string) map[string]any {
	return map[string]any{jsonType: itemMessage, "id": id, keyStatus: status, keyRole: roleAssistant,
		argContent: []any{map[string]any{jsonType: partOutputText, argText: text, keyAnnotations: []any{}, keyLogprobs: []any{}}}}
}

func reasoningItem(id, text string) map[string]any {
	return map[string]any{jsonType: itemReasoning, "id": id, "summary": []any{},
		argContent: []any{map[string]string{jsonType: "reasoning_text", argText: text}}}
}

func callItem(id, callID, name, args, status string) map[string]any {
	return map[string]any{jsonType: itemFunctionCall, "id": id, "call_id": callID, keyName: name, keyArguments: args, keyStatus: status}
}

// forwardResponsesToChat sends a translated request to a chat provider and
// answers in the Responses shape.
func (x *exchange) forwardResponsesToChat(rctx context.Context, t *responsesTranslation, mt int64, key string) {
	g := x.g
	resp, cancel := x.send(rctx, "/chat/completions", t.body(x.m, mt), key, t.req.stream)
	if resp == nil {
		return
	}
	defer cancel()
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		// The chat provider's error, in OpenAI's error shape: the
		// Responses API's own.
		x.upstreamError(resp, key)
		return
	}
	if !t.req.stream {
		raw, answered, rerr := x.readAnswer(resp)
		if answered {
			return
		}
		var a struct {
			Created int64 `json:"created"`
			Choices []struct {
				Index   int `json:"index"`
				Message struct {
					Content          json.RawMessage `json:"content"`
					ReasoningContent json.RawMessage `json:"reasoning_content"`
					Refusal          *string         `json:"refusal"`
					ToolCalls        []chunkCall     `json:"tool_calls"`
				} `json:"message"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
			Usage *chatUsage `json:"usage"`
		}
		var tokens tokenUse
		reported := false
		var output []map[string]any
		finish := ""
		if rerr == nil && json.Unmarshal(raw, &a) == nil {
			if a.Usage != nil {
				tokens, reported = a.Usage.charged()
			}
			for _, ch := range a.Choices {
				if ch.Index != 0 {
					continue
				}
				finish = ch.FinishReason
				var text, reasoning string
				_ = json.Unmarshal(ch.Message.Content, &text)
				_ = json.Unmarshal(ch.Message.ReasoningContent, &reasoning)
				if ch.Message.Refusal != nil {
					text += *ch.Message.Refusal
				}
				if reasoning != "" {
					output = append(output, reasoningItem(newItemID("rs"), reasoning))
				}
				if text != "" || len(ch.Message.ToolCalls) == 0 {
					output = append(output, messageItem(newItemID("msg"), text, "completed"))
				}
				for _, tc := range ch.Message.ToolCalls {
					output = append(output, callItem(newItemID("fc"), tc.ID, tc.Function.Name, tc.Function.Arguments, "completed"))
				}
			}
		}
		u := a.Usage.responses()
		spanResponsesUsage(rctx, u)
		if rerr != nil || len(a.Choices) == 0 {
			x.count(keyError, tokens, reported)
			writeError(x.w, newError(http.StatusBadGateway, "server_error", "upstream_unreadable",
				fmt.Sprintf("the provider of model %q answered with no completion the gateway could read; "+
					"the request is counted", x.m.Name)))
			return
		}
		writeJSON(x.w, t.object(newItemID("resp"), a.Created, "completed", finish, output, u, mt))
		x.stream(func(tr *openai.Translator) []stream.Event { return append(tr.Completion(raw), tr.End(nil)...) })
		x.k.noteAnswer(chatCompletionDigest(raw))
		x.count("ok", tokens, reported)
		return
	}
	var cut error
	x.answer = newAnswerDigest()
	tokens, reported := g.translateStream(x, t, resp, mt, rctx, &cut)
	x.stream(func(tr *openai.Translator) []stream.Event { return tr.End(cut) })
	x.k.noteAnswer(x.answer.sum())
	x.done = g.clock.Now()
	outcome := "ok"
	if !reported {
		outcome = outcomeStreamCut
	}
	x.count(outcome, tokens, reported)
}

// responsesStream writes a Responses event stream from chat chunks.
type responsesStream struct {
	w         http.ResponseWriter
	fl        http.Flusher
	gone      bool
	seq       int
	t         *responsesTranslation
	id        string
	created   int64
	output    []map[string]any // by output index
	reasoning *openItem
	text      *openItem
	calls     map[int]*openItem
	order     []*openItem
}

type openItem struct {
	index        int
	id           string
	callID, name string
	buf          strings.Builder
}

func (s *responsesStream) send(typ string, ev map[string]any) {
	ev[jsonType], ev["sequence_number"] = typ, s.seq
	s.seq++
	if s.gone {
		return
	}
	raw, _ := json.Marshal(ev)
	if _, err := fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", typ, raw); err != nil {
		s.gone = true
		return
	}
	if s.fl != nil {
		s.fl.Flush()
	}
}

func (s *responsesStream) open(item map[string]any) *openItem {
	o := &openItem{index: len(s.output), id: item["id"].(string)}
	s.output = append(s.output, item)
	s.send("response.output_item.added", map[string]any{keyOutputIndex: o.index, "item": item})
	return o
}

func (s *responsesStream) done(o *openItem, item map[string]any) {
	s.output[o.index] = item
	s.send("response.output_item.done", map[string]any{keyOutputIndex: o.index, "item": item})
}

func (s *responsesStream) closeReasoning() {
	if o := s.reasoning; o != nil {
		s.reasoning = nil
		s.send("response.reasoning_text.done", map[string]any{keyItemID: o.id, keyOutputIndex: o.index, keyContentIndex: 0,
			argText: o.buf.String()})
		s.done(o, reasoningItem(o.id, o.buf.String()))
	}
}

func (s *responsesStream) closeText() {
	if o := s.text; o != nil {
		s.text = nil
		part := map[string]any{jsonType: partOutputText, argText: o.buf.String(), keyAnnotations: []any{}, keyLogprobs: []any{}}
		s.send("response.output_text.done", map[string]any{keyItemID: o.id, keyOutputIndex: o.index, keyContentIndex: 0,
			argText: o.buf.String(), keyLogprobs: []any{}})
		s.send("response.content_part.done", map[string]any{keyItemID: o.id, keyOutputIndex: o.index, keyContentIndex: 0,
			"part": part})
		s.done(o, messageItem(o.id, o.buf.String(), "completed"))
	}
}

func (s *responsesStream) closeAll() {
	s.closeReasoning()
	s.closeText()
	for _, o := range s.order {
		s.send("response.function_call_arguments.done", map[string]any{keyItemID: o.id, keyOutputIndex: o.index,
			keyArguments: o.buf.String()})
		s.done(o, callItem(o.id, o.callID, o.name, o.buf.String(), "completed"))
	}
	s.order, s.calls = nil, map[int]*openItem{}
}

// chunk translates one chat chunk's delta.
func (s *responsesStream) chunk(d *chunkDeltaIn) {
	if d.ReasoningContent != "" {
		if s.reasoning == nil {
			s.closeText()
			s.reasoning = s.open(map[string]any{jsonType: itemReasoning, "id": newItemID("rs"), "summary": []any{}})
		}
		s.reasoning.buf.WriteString(d.ReasoningContent)
		s.send("response.reasoning_text.delta", map[string]any{keyItemID: s.reasoning.id, keyOutputIndex: s.reasoning.index,
			keyContentIndex: 0, keyDelta: d.ReasoningContent})
	}
	if d.Content != "" {
		if s.text == nil {
			s.closeReasoning()
			item := messageItem(newItemID("msg"), "", "in_progress")
			item[argContent] = []any{}
			s.text = s.open(item)
			s.send("response.content_part.added", map[string]any{keyItemID: s.text.id, keyOutputIndex: s.text.index,
				keyContentIndex: 0, "part": map[string]any{jsonType: partOutputText, argText: "", keyAnnotations: []any{}}})
		}
		s.text.buf.WriteString(d.Content)
		s.send("response.output_text.delta", map[string]any{keyItemID: s.text.id, keyOutputIndex: s.text.index,
			keyContentIndex: 0, keyDelta: d.Content, keyLogprobs: []any{}})
	}
	for _, tc := range d.ToolCalls {
		o := s.calls[tc.Index]
		if o == nil {
			s.closeReasoning()
			s.closeText()
			id := newItemID("fc")
			o = s.open(callItem(id, tc.ID, tc.Function.Name, "", "in_progress"))
			o.callID, o.name = tc.ID, tc.Function.Name
			s.calls[tc.Index] = o
			s.order = append(s.order, o)
		}
		if tc.Function.Arguments != "" {
			o.buf.WriteString(tc.Function.Arguments)
			s.send("response.function_call_arguments.delta", map[string]any{keyItemID: o.id, keyOutputIndex: o.index,
				keyDelta: tc.Function.Arguments})
		}
	}
}

type chunkDeltaIn struct {
	Content          string      `json:"content"`
	ReasoningContent string      `json:"reasoning_content"`
	ToolCalls        []chunkCall `json:"tool_calls"`
}

// translateStream reads a chat completion stream and writes it as a
// Responses event stream: response.created and in_progress, each item
// added, its deltas and done, and response.completed (or incomplete) with
// the usage; a stream cut before [DONE] ends with response.failed.
func (g *Gateway) translateStream(x *exchange, t *responsesTranslation, resp *http.Response, mt int64, rctx context.Context,
	cut *error) (tokenUse, bool) {
	w := x.w
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &responsesStream{w: w, t: t, id: newItemID("resp"), created: g.clock.Now().Unix(), calls: map[int]*openItem{}}
	s.fl, _ = w.(http.Flusher)
	s.send("response.created", map[string]any{keyResponse: t.object(s.id, s.created, "in_progress", "", nil, nil, mt)})
	s.send("response.in_progress", map[string]any{keyResponse: t.object(s.id, s.created, "in_progress", "", nil, nil, mt)})
	var usage *chatUsage
	finish, done := "", false
	br := streamReader(resp.Body)
	defer releaseStreamReader(br)
	for {
		line, err := readLine(br, g.opts.MaxModelResponseBytes)
		if errors.Is(err, errLineTooLong) {
			g.metrics.tooLarge.WithLabelValues("model_stream_line").Inc()
			err = fmt.Errorf("%w (one line of the stream exceeds the gateway's bound of %d bytes, --max-model-response-bytes)",
				err, g.opts.MaxModelResponseBytes)
			line = nil
		}
		payload, isData := bytes.CutPrefix(bytes.TrimSpace(line), []byte("data:"))
		payload = bytes.TrimSpace(payload)
		switch {
		case !isData || done:
		case bytes.Equal(payload, []byte("[DONE]")):
			done = true
		default:
			x.answer.chatChunk(payload)
			x.stream(func(tr *openai.Translator) []stream.Event { return tr.Chunk(payload) })
			var c struct {
				Choices []struct {
					Index        int           `json:"index"`
					Delta        *chunkDeltaIn `json:"delta"`
					FinishReason *string       `json:"finish_reason"`
				} `json:"choices"`
				Usage *chatUsage `json:"usage"`
			}
			if json.Unmarshal(payload, &c) != nil {
				break
			}
			if c.Usage != nil {
				usage = c.Usage
			}
			for _, ch := range c.Choices {
				if ch.Index != 0 {
					continue
				}
				if ch.Delta != nil {
					s.chunk(ch.Delta)
				}
				if ch.FinishReason != nil && *ch.FinishReason != "" {
					finish = *ch.FinishReason
				}
			}
		}
		if err == nil {
			continue
		}
		s.closeAll()
		var tokens tokenUse
		reported := false
		if usage != nil {
			tokens, reported = usage.charged()
		}
		u := usage.responses()
		spanResponsesUsage(rctx, u)
		if !done {
			x.k.providerFault("StreamCut", true, fmt.Sprintf("model %s: the stream ended before [DONE]: %v", x.m.Name, err))
			*cut = fmt.Errorf("the provider's stream ended before [DONE]: %w", err)
			o := t.object(s.id, s.created, "failed", "", s.output, u, mt)
			o[keyStatus], o["incomplete_details"] = "failed", nil
			o[keyError] = map[string]string{labelCode: "server_error", itemMessage: fmt.Sprintf(
				"the provider of model %q ended the stream before the response completed (%v); the request is counted, "+
					"with its token reservation charged unless the provider reported usage", x.m.Name, err)}
			s.send("response.failed", map[string]any{keyResponse: o})
			return tokens, reported
		}
		o := t.object(s.id, s.created, "completed", finish, s.output, u, mt)
		typ := evCompleted
		if o[keyStatus] == statusIncomplete {
			typ = evIncomplete
		}
		s.send(typ, map[string]any{keyResponse: o})
		return tokens, reported
	}
}
