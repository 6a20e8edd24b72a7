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
	"testing"

	"github.com/agentrun-dev/agentrun/internal/gateway/chain"
	"github.com/agentrun-dev/agentrun/internal/stream"
)

// fuzzSecret is split by fuzzArgs into fragments; a tool call whose whole
// arguments hold it must never show it.
const fuzzSecret = "sk-AbCdEfGhIjKlMnOpQrSt"

var (
	fuzzTexts = []string{"", "a", " b", "héllo", "\n", `"q"`, "Bear", "er tok123456789"}
	fuzzArgs  = []string{"", "{", `"k":`, `"sk-AbCd`, "EfGhIj", "KlMnOpQrSt\"", "}", `{"x":1}`, "Bearer ", "abcdefgh12345"}
	fuzzIDs   = []string{"", "call_1", "call_2", "p/call-1"}
)

// fuzzChunk builds one data payload from an op byte: the low nibble picks
// what it carries, the high one a parameter.
func fuzzChunk(op byte) []byte {
	kind, p := op%12, int(op>>4)
	switch kind {
	case 0:
		return delta(map[string]any{"reasoning_content": fuzzTexts[p%len(fuzzTexts)]}, nil)
	case 1:
		return delta(map[string]any{"reasoning": fuzzTexts[p%len(fuzzTexts)], "content": ""}, nil)
	case 2:
		return delta(map[string]any{"content": fuzzTexts[p%len(fuzzTexts)]}, nil)
	case 3: // first sight of a call: id and name
		return toolDelta(p%3, fuzzIDs[p%len(fuzzIDs)], "fn", fuzzArgs[p%len(fuzzArgs)])
	case 4: // an id without a name
		return toolDelta(p%3, fuzzIDs[(p+1)%len(fuzzIDs)], "", "")
	case 5, 6: // argument fragments
		return toolDelta(p%3, "", "", fuzzArgs[p%len(fuzzArgs)])
	case 7: // a late name
		return toolDelta(p%3, "", "late", "")
	case 8:
		return delta(map[string]any{}, []string{"stop", "tool_calls", "length", ""}[p%4])
	case 9:
		return []byte(`{"id":"u","object":"chat.completion.chunk","choices":[],"usage":{"total_tokens":3}}`)
	case 10:
		return []byte(`{"choices":[{"index":1,"delta":{"content":"other"}}]}`)
	}
	return []byte([]string{"[DONE]", "", "{", `{"choices":null}`, `{"choices":[{"index":0}]}`}[p%5])
}

func delta(d map[string]any, finish any) []byte {
	b, _ := json.Marshal(map[string]any{
		"object":  "chat.completion.chunk",
		"choices": []any{map[string]any{"index": 0, "delta": d, "finish_reason": finish}},
	})
	return b
}

func toolDelta(index int, id, name, args string) []byte {
	fn := map[string]any{"arguments": args}
	if name != "" {
		fn["name"] = name
	}
	call := map[string]any{"index": index, "function": fn}
	if id != "" {
		call["id"], call["type"] = id, "function"
	}
	return delta(map[string]any{"tool_calls": []any{call}}, nil)
}

// FuzzChunk feeds random chunk sequences — built from ops, plus raw lines —
// and checks the stream's invariants (checkStream), and with Redact that each
// call's arguments come as at most one delta, already redacted, never
// holding fuzzSecret.
func FuzzChunk(f *testing.F) {
	f.Add([]byte{0x00, 0x12, 0x03, 0x35, 0x45, 0x55, 0x08}, "", false, true)
	f.Add([]byte{0x03, 0x13, 0x35, 0x16, 0x45, 0x26, 0x02, 0x07, 0x18}, "data: [DONE]", true, true)
	f.Add([]byte{0x04, 0x05, 0x07, 0x02, 0x01, 0x00, 0x09, 0x0a, 0x0b}, `{"choices":[{"index":0,"delta":{"content":"x"}}]}`, false, false)
	f.Add([]byte{0x33, 0x35, 0x45, 0x55, 0x1b}, "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"a\"}}]}}]}\n{", true, false)
	f.Fuzz(func(t *testing.T, ops []byte, raw string, cut, redact bool) {
		opts := Options{IDPrefix: "p", Now: clock}
		if redact {
			opts.Redact = chain.RedactText
		}
		tr := New(opts)
		out := tr.Start()
		lines := strings.Split(raw, "\n")
		for i, op := range ops {
			out = append(out, tr.Chunk(fuzzChunk(op))...)
			if i < len(lines) {
				out = append(out, tr.Chunk([]byte(lines[i]))...)
			}
		}
		var err error
		if cut {
			err = errors.New("upstream reset")
		}
		out = append(out, tr.End(err)...)
		if err := checkStream(out); err != nil {
			t.Fatalf("%v\n%s", err, strings.Join(describeAll(out), "\n"))
		}
		if redact {
			if err := checkRedacted(out); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func checkRedacted(evs []stream.Event) error {
	for id, args := range toolArgs(evs) {
		if len(args) != 1 {
			return fmt.Errorf("call %s: %d argument deltas with Redact, want 1", id, len(args))
		}
		if chain.RedactText(args[0]) != args[0] || strings.Contains(args[0], fuzzSecret) {
			return fmt.Errorf("call %s: arguments %q hold a secret", id, args[0])
		}
	}
	return nil
}

// TestCheckStreamCatches: the invariant checker the tests rely on refuses
// what it must.
func TestCheckStreamCatches(t *testing.T) {
	ev := func(typ stream.EventType, id string) stream.Event {
		e := stream.Event{Type: typ, Timestamp: clock().UnixMilli(), MessageID: id, ToolCallID: id, ToolCallName: "f", StepName: "s"}
		return e
	}
	bad := map[string][]stream.Event{
		"content before start": {ev(stream.StepStarted, ""), ev(stream.TextMessageContent, "m"), ev(stream.StepFinished, "")},
		"end twice": {ev(stream.StepStarted, ""), ev(stream.ToolCallStart, "c"), ev(stream.ToolCallEnd, "c"),
			ev(stream.ToolCallEnd, "c"), ev(stream.StepFinished, "")},
		"left open":  {ev(stream.StepStarted, ""), ev(stream.TextMessageStart, "m"), ev(stream.StepFinished, "")},
		"invalid":    {ev(stream.StepStarted, ""), {Type: stream.TextMessageStart, Timestamp: clock().UnixMilli()}, ev(stream.StepFinished, "")},
		"no finish":  {ev(stream.StepStarted, "")},
		"restarted":  {ev(stream.StepStarted, ""), ev(stream.TextMessageStart, "m"), ev(stream.TextMessageEnd, "m"), ev(stream.TextMessageStart, "m"), ev(stream.TextMessageEnd, "m"), ev(stream.StepFinished, "")},
		"early end":  {ev(stream.StepStarted, ""), ev(stream.ReasoningStart, "r"), ev(stream.ReasoningMessageStart, "r"), ev(stream.ReasoningEnd, "r"), ev(stream.StepFinished, "")},
		"args after": {ev(stream.StepStarted, ""), ev(stream.ToolCallStart, "c"), ev(stream.ToolCallEnd, "c"), ev(stream.ToolCallArgs, "c"), ev(stream.StepFinished, "")},
	}
	for name, evs := range bad {
		if checkStream(evs) == nil {
			t.Errorf("%s: checkStream accepted it", name)
		}
	}
}
