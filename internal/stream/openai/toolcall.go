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
	"strings"

	"github.com/agentrun-dev/agentrun/internal/stream"
)

// toolCall is one tool call of the answer, from its first fragment until it
// closes. It is started (TOOL_CALL_START sent) once its name is known.
type toolCall struct {
	id      string // the provider's id until started; then the id sent
	name    string
	started bool
	// pending holds the argument text not sent yet: what came before the
	// START, or, with Options.Redact, all of it until the call closes.
	pending strings.Builder
}

// addToolCall takes one tool_calls fragment of the call at index: its id
// and name (on first sight, usually) and an arguments fragment.
func (t *Translator) addToolCall(out []stream.Event, index int, id, name, args string) []stream.Event {
	c := t.calls[index]
	if c == nil {
		// The model has moved on from reasoning and text to tool calls.
		out = t.closeText(t.closeReasoning(out))
		c = &toolCall{}
		t.calls[index] = c
		t.order = append(t.order, c)
	}
	if !c.started {
		if c.id == "" {
			c.id = id
		}
		if c.name == "" {
			c.name = name
		}
	}
	c.pending.WriteString(args)
	if !c.started && c.name != "" {
		out = t.startCall(out, c)
	}
	if c.started && t.opts.Redact == nil {
		out = t.flushArgs(out, c)
	}
	return out
}

// startCall sends c's TOOL_CALL_START. Its id is the provider's, unless the
// provider gave none or this translator already sent it (ids must be unique
// within a run); then "<prefix>/call-<n>".
func (t *Translator) startCall(out []stream.Event, c *toolCall) []stream.Event {
	for c.id == "" || t.usedIDs[c.id] {
		c.id = t.newID("call", &t.nCall)
	}
	t.usedIDs[c.id] = true
	c.started = true
	ev := t.event(stream.ToolCallStart)
	ev.ToolCallID, ev.ToolCallName, ev.ParentMessageID = c.id, c.name, t.lastText
	return append(out, ev)
}

// flushArgs sends c's pending argument text, redacted, as one
// TOOL_CALL_ARGS delta (none if it is empty).
func (t *Translator) flushArgs(out []stream.Event, c *toolCall) []stream.Event {
	s := c.pending.String()
	c.pending.Reset()
	if t.opts.Redact != nil {
		s = t.opts.Redact(s)
	}
	if s == "" {
		return out
	}
	ev := t.event(stream.ToolCallArgs)
	ev.ToolCallID, ev.Delta = c.id, s
	return append(out, ev)
}

// closeCall sends c's remaining arguments and its TOOL_CALL_END. A call
// whose name never came was never started: nothing was sent for it, and
// nothing is (AG-UI's TOOL_CALL_START requires a name).
func (t *Translator) closeCall(out []stream.Event, c *toolCall) []stream.Event {
	if !c.started {
		return out
	}
	out = t.flushArgs(out, c)
	ev := t.event(stream.ToolCallEnd)
	ev.ToolCallID = c.id
	return append(out, ev)
}
