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

package openai

import (
	"bytes"
	"encoding/json"

	"github.com/agentrun-dev/agentrun/internal/stream"
)

// body is the part of a chat.completion.chunk, or of a chat.completion, that
// the translator reads.
type body struct {
	Choices []choice `json:"choices"`
}

// choice is one choice: a chunk's carries Delta, a completion's Message.
type choice struct {
	Index        int      `json:"index"`
	Delta        *message `json:"delta"`
	Message      *message `json:"message"`
	FinishReason *string  `json:"finish_reason"`
}

// message is a chunk's delta or a completion's message. The text fields are
// raw so that an unexpected shape (content parts, a reasoning object) drops
// that field, not the whole chunk.
type message struct {
	Content          json.RawMessage `json:"content"`
	ReasoningContent json.RawMessage `json:"reasoning_content"`
	Reasoning        json.RawMessage `json:"reasoning"`
	ToolCalls        []toolCallPart  `json:"tool_calls"`
}

// toolCallPart is one tool_calls entry: a fragment of a streamed call (keyed
// by Index) or a whole call of a completion (which has no index).
type toolCallPart struct {
	Index    *int   `json:"index"`
	ID       string `json:"id"`
	Function struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

// Chunk translates one SSE data payload of a streamed answer (a
// chat.completion.chunk). "[DONE]", input that does not parse, and input
// after End yield nil.
func (t *Translator) Chunk(payload []byte) []stream.Event {
	c, ok := parse(payload)
	if !ok || t.ended {
		return nil
	}
	out := t.begin()
	if c == nil {
		return out // e.g. the usage chunk, whose choices are empty
	}
	out = t.apply(out, c.Delta)
	if c.FinishReason != nil && *c.FinishReason != "" {
		out = t.closeAll(out)
	}
	return out
}

// Completion translates a non-streamed answer (a chat.completion body): the
// same blocks as a stream, each with its whole content as one delta, all
// closed. Input that does not parse, and input after End, yield nil.
func (t *Translator) Completion(payload []byte) []stream.Event {
	c, ok := parse(payload)
	if !ok || t.ended {
		return nil
	}
	out := t.begin()
	if c != nil {
		out = t.apply(out, c.Message)
	}
	return t.closeAll(out)
}

// parse decodes payload and returns its choice 0 (nil if it has none); ok
// is false for "[DONE]" and for anything that is not a JSON object of the
// expected shape.
func parse(payload []byte) (c *choice, ok bool) {
	payload = bytes.TrimSpace(payload)
	if len(payload) == 0 || payload[0] != '{' {
		return nil, false // "[DONE]" among others
	}
	var b body
	if json.Unmarshal(payload, &b) != nil {
		return nil, false
	}
	for i := range b.Choices {
		if b.Choices[i].Index == 0 {
			return &b.Choices[i], true
		}
	}
	return nil, true
}

// apply translates one delta or message: reasoning, then text, then tool
// calls.
func (t *Translator) apply(out []stream.Event, m *message) []stream.Event {
	if m == nil {
		return out
	}
	reasoning := text(m.ReasoningContent)
	if reasoning == "" {
		reasoning = text(m.Reasoning)
	}
	out = t.addReasoning(out, reasoning)
	out = t.addText(out, text(m.Content))
	for i, p := range m.ToolCalls {
		index := i
		if p.Index != nil {
			index = *p.Index
		}
		out = t.addToolCall(out, index, p.ID, p.Function.Name, arguments(p.Function.Arguments))
	}
	return out
}

// text reads a text field: a string, or an array of content parts whose
// "text" members are joined. Anything else (null included) is "".
func text(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	var b bytes.Buffer
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

// arguments reads function.arguments: a string (the OpenAI form), or — as
// some compatible servers send in a completion — a JSON object, as its text.
func arguments(raw json.RawMessage) string {
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return ""
	}
	return b.String()
}
