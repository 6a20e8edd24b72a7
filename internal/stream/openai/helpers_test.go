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
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentrun-dev/agentrun/internal/stream"
)

// clock is the tests' fixed clock: 2025-12-01T12:00:00Z.
func clock() time.Time { return time.UnixMilli(1764590400000) }

// sseData returns the data payloads of an SSE transcript, in order, as the
// gateway's relay cuts them ("data:" stripped; other lines skipped).
func sseData(transcript string) [][]byte {
	var out [][]byte
	for line := range strings.SplitSeq(transcript, "\n") {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "data:"); ok {
			out = append(out, []byte(strings.TrimSpace(p)))
		}
	}
	return out
}

// translate runs a whole streamed answer through tr: Start, every payload,
// End(endErr).
func translate(tr *Translator, transcript string, endErr error) []stream.Event {
	out := tr.Start()
	for _, p := range sseData(transcript) {
		out = append(out, tr.Chunk(p)...)
	}
	return append(out, tr.End(endErr)...)
}

// describe renders an event as one short line for the tables.
func describe(ev stream.Event) string {
	s := string(ev.Type)
	switch ev.Type {
	case stream.StepStarted, stream.StepFinished:
		return s + " " + ev.StepName
	case stream.TextMessageStart:
		return fmt.Sprintf("%s %s role=%s", s, ev.MessageID, ev.Role)
	case stream.TextMessageContent, stream.ReasoningMessageContent:
		return fmt.Sprintf("%s %s %q", s, ev.MessageID, ev.Delta)
	case stream.ToolCallStart:
		return fmt.Sprintf("%s %s name=%s parent=%s", s, ev.ToolCallID, ev.ToolCallName, ev.ParentMessageID)
	case stream.ToolCallArgs:
		return fmt.Sprintf("%s %s %q", s, ev.ToolCallID, ev.Delta)
	case stream.ToolCallEnd:
		return s + " " + ev.ToolCallID
	case stream.Custom:
		return fmt.Sprintf("%s %s %s", s, ev.Name, ev.Value)
	}
	return s + " " + ev.MessageID
}

func describeAll(evs []stream.Event) []string {
	out := make([]string, 0, len(evs))
	for _, ev := range evs {
		out = append(out, describe(ev))
	}
	return out
}

// checkStream checks what every translator's output must satisfy: every
// event validates, encodes and is stamped; the step starts first and
// finishes last, once each; no block starts twice, no delta comes outside
// its block's START and END, no END comes twice or without its START, a
// reasoning block ends after its message; nothing is left open.
func checkStream(evs []stream.Event) error {
	c := lifecycle{state: map[string]bool{}}
	for i := range evs {
		ev := &evs[i]
		if err := ev.Validate(); err != nil {
			return fmt.Errorf("event %d (%s): %w", i, describe(*ev), err)
		}
		if _, err := json.Marshal(ev); err != nil {
			return fmt.Errorf("event %d (%s) does not encode: %w", i, describe(*ev), err)
		}
		if ev.Timestamp != clock().UnixMilli() {
			return fmt.Errorf("event %d (%s): timestamp %d", i, describe(*ev), ev.Timestamp)
		}
		if err := c.step(i, len(evs), ev); err != nil {
			return fmt.Errorf("event %d (%s): %w", i, describe(*ev), err)
		}
	}
	if len(evs) < 2 || evs[0].Type != stream.StepStarted || evs[len(evs)-1].Type != stream.StepFinished {
		return fmt.Errorf("the stream must open with STEP_STARTED and close with STEP_FINISHED")
	}
	for k, open := range c.state {
		if open {
			return fmt.Errorf("block %s never ended", k)
		}
	}
	return nil
}

// lifecycle tracks blocks by kind and id: true while open, false once
// ended.
type lifecycle struct {
	state map[string]bool
}

func (c *lifecycle) step(i, n int, ev *stream.Event) error {
	switch ev.Type {
	case stream.StepStarted:
		return expect(i == 0, "STEP_STARTED must come first, once")
	case stream.StepFinished:
		return expect(i == n-1, "STEP_FINISHED must come last, once")
	case stream.ReasoningStart:
		return c.start("reasoning " + ev.MessageID)
	case stream.ReasoningMessageStart:
		return errors.Join(c.need("reasoning "+ev.MessageID), c.start("reasoning-message "+ev.MessageID))
	case stream.ReasoningMessageContent:
		return c.need("reasoning-message " + ev.MessageID)
	case stream.ReasoningMessageEnd:
		return c.end("reasoning-message " + ev.MessageID)
	case stream.ReasoningEnd:
		if c.state["reasoning-message "+ev.MessageID] {
			return fmt.Errorf("reasoning %s ends before its message", ev.MessageID)
		}
		return c.end("reasoning " + ev.MessageID)
	case stream.TextMessageStart:
		return c.start("text " + ev.MessageID)
	case stream.TextMessageContent:
		return c.need("text " + ev.MessageID)
	case stream.TextMessageEnd:
		return c.end("text " + ev.MessageID)
	case stream.ToolCallStart:
		return c.start("call " + ev.ToolCallID)
	case stream.ToolCallArgs:
		return c.need("call " + ev.ToolCallID)
	case stream.ToolCallEnd:
		return c.end("call " + ev.ToolCallID)
	case stream.Custom:
		return nil
	}
	return fmt.Errorf("unexpected type %s", ev.Type)
}

func (c *lifecycle) start(k string) error {
	if _, seen := c.state[k]; seen {
		return fmt.Errorf("%s started twice", k)
	}
	c.state[k] = true
	return nil
}

func (c *lifecycle) need(k string) error {
	return expect(c.state[k], k+" is not open")
}

func (c *lifecycle) end(k string) error {
	if !c.state[k] {
		return fmt.Errorf("%s ends but is not open (END twice, or without START)", k)
	}
	c.state[k] = false
	return nil
}

func expect(ok bool, msg string) error {
	if ok {
		return nil
	}
	return fmt.Errorf("%s", msg)
}

// toolArgs returns each tool call's ARGS deltas, by toolCallId.
func toolArgs(evs []stream.Event) map[string][]string {
	out := map[string][]string{}
	for _, ev := range evs {
		if ev.Type == stream.ToolCallArgs {
			out[ev.ToolCallID] = append(out[ev.ToolCallID], ev.Delta)
		}
	}
	return out
}
