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
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/agentrun-dev/agentrun/internal/stream"
)

// StreamCutEventName names the CUSTOM event End adds when the upstream
// answer was cut (End's error is not nil); its value is {"reason": "..."}.
const StreamCutEventName = "agentrun.dev/stream-cut"

// DefaultStepName is the step name when Options gives neither StepName nor
// IDPrefix.
const DefaultStepName = "model"

// Options configure a Translator.
type Options struct {
	// IDPrefix starts every block id the translator makes, e.g.
	// "<attempt-name>/<request-number>", so that ids are stable and unique
	// within a run.
	IDPrefix string
	// StepName names the STEP_STARTED / STEP_FINISHED pair. Default:
	// IDPrefix, or DefaultStepName when that is empty too.
	StepName string
	// Now stamps every event (milliseconds since the epoch). Default:
	// time.Now.
	Now func() time.Time
	// Redact, when set, is applied to tool-call argument text before it is
	// put into an event. A redactor finds a secret split across two
	// fragments only when it is given both, so each call's arguments are
	// held until the call closes and sent as one TOOL_CALL_ARGS delta,
	// Redact(whole arguments): nothing Redact would find in them reaches an
	// event. Text and reasoning are not redacted. Nil: argument fragments
	// are sent as they come, one delta each.
	Redact func(string) string
}

// Translator turns one chat-completions answer into run-stream events. Call
// Start, then Chunk for each SSE data payload (or Completion for a
// non-streamed body), then End. It is not safe for concurrent use.
type Translator struct {
	opts    Options
	started bool
	ended   bool

	reasoning string // the open reasoning block's id, "" if none
	text      string // the open text message's id, "" if none
	lastText  string // the latest text message's id: a tool call's parent

	calls   map[int]*toolCall // the tool calls seen and not yet closed, by index
	order   []*toolCall       // the same, in order of first sight
	usedIDs map[string]bool   // every tool-call id this translator emitted

	nReasoning, nText, nCall int
}

// New returns a Translator for one answer.
func New(opts Options) *Translator {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.StepName == "" {
		opts.StepName = opts.IDPrefix
	}
	if opts.StepName == "" {
		opts.StepName = DefaultStepName
	}
	return &Translator{opts: opts, calls: map[int]*toolCall{}, usedIDs: map[string]bool{}}
}

// Start returns the STEP_STARTED event. Chunk, Completion and End start the
// step themselves if Start was not called; a second call returns nil.
func (t *Translator) Start() []stream.Event {
	return t.begin()
}

// End closes every block still open and finishes the step. A non-nil err
// means the answer was cut (the upstream connection failed, or the stream
// ended without a finish_reason or [DONE]): the blocks are closed all the
// same, so that clients see every END, and a CUSTOM StreamCutEventName event
// says why. After End the translator returns no more events.
func (t *Translator) End(err error) []stream.Event {
	if t.ended {
		return nil
	}
	out := t.closeAll(t.begin())
	if err != nil {
		v, _ := json.Marshal(map[string]string{"reason": err.Error()})
		cut := t.event(stream.Custom)
		cut.Name, cut.Value = StreamCutEventName, v
		out = append(out, cut)
	}
	fin := t.event(stream.StepFinished)
	fin.StepName = t.opts.StepName
	t.ended = true
	return append(out, fin)
}

// begin returns the STEP_STARTED event if the step has not started yet,
// else nil.
func (t *Translator) begin() []stream.Event {
	if t.started {
		return nil
	}
	t.started = true
	ev := t.event(stream.StepStarted)
	ev.StepName = t.opts.StepName
	return []stream.Event{ev}
}

// event returns an event of type typ stamped with the translator's clock.
func (t *Translator) event(typ stream.EventType) stream.Event {
	return stream.Event{Type: typ, Timestamp: t.opts.Now().UnixMilli()}
}

// newID returns the next id of a kind of block: "<prefix>/<kind>-<n>".
func (t *Translator) newID(kind string, n *int) string {
	*n++
	id := kind + "-" + strconv.Itoa(*n)
	if t.opts.IDPrefix == "" {
		return id
	}
	return strings.TrimSuffix(t.opts.IDPrefix, "/") + "/" + id
}

// addReasoning appends a reasoning delta, opening the reasoning block (and
// closing the text message: the model has moved on) if needed.
func (t *Translator) addReasoning(out []stream.Event, delta string) []stream.Event {
	if delta == "" {
		return out
	}
	if t.reasoning == "" {
		out = t.closeText(out)
		t.reasoning = t.newID("reasoning", &t.nReasoning)
		out = append(out, t.msgEvent(stream.ReasoningStart, t.reasoning), t.msgEvent(stream.ReasoningMessageStart, t.reasoning))
	}
	ev := t.msgEvent(stream.ReasoningMessageContent, t.reasoning)
	ev.Delta = delta
	return append(out, ev)
}

// addText appends a text delta, opening the text message (and closing the
// reasoning block) if needed.
func (t *Translator) addText(out []stream.Event, delta string) []stream.Event {
	if delta == "" {
		return out
	}
	if t.text == "" {
		out = t.closeReasoning(out)
		t.text = t.newID("text", &t.nText)
		t.lastText = t.text
		start := t.msgEvent(stream.TextMessageStart, t.text)
		start.Role = "assistant"
		out = append(out, start)
	}
	ev := t.msgEvent(stream.TextMessageContent, t.text)
	ev.Delta = delta
	return append(out, ev)
}

// msgEvent returns an event of a text or reasoning block.
func (t *Translator) msgEvent(typ stream.EventType, id string) stream.Event {
	ev := t.event(typ)
	ev.MessageID = id
	return ev
}

// closeReasoning closes the open reasoning block, if any.
func (t *Translator) closeReasoning(out []stream.Event) []stream.Event {
	if t.reasoning == "" {
		return out
	}
	out = append(out, t.msgEvent(stream.ReasoningMessageEnd, t.reasoning), t.msgEvent(stream.ReasoningEnd, t.reasoning))
	t.reasoning = ""
	return out
}

// closeText closes the open text message, if any.
func (t *Translator) closeText(out []stream.Event) []stream.Event {
	if t.text == "" {
		return out
	}
	out = append(out, t.msgEvent(stream.TextMessageEnd, t.text))
	t.text = ""
	return out
}

// closeAll closes every open block: reasoning, text, then the tool calls in
// the order they were first seen.
func (t *Translator) closeAll(out []stream.Event) []stream.Event {
	out = t.closeText(t.closeReasoning(out))
	for _, c := range t.order {
		out = t.closeCall(out, c)
	}
	t.order = nil
	clear(t.calls)
	return out
}
