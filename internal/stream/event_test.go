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

package stream

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

var update = flag.Bool("update", false, "rewrite testdata/agui_events.jsonl")

var run1 = RunKey{Namespace: "team-a", Name: "survey.v2"}

// sampleEvents has one event of every type, with the fields a producer sets.
// testdata/agui_events.jsonl holds their encoding; validate_agui.mjs checks
// that file against @ag-ui/core's zod schemas.
func sampleEvents() []Event {
	return []Event{
		{Type: RunStarted, ThreadID: "team-a/survey.v2", RunID: "survey.v2-a1"},
		{Type: StepStarted, StepName: "plan"},
		{Type: ReasoningStart, MessageID: "r1"},
		{Type: ReasoningMessageStart, MessageID: "r1"},
		{Type: ReasoningMessageContent, MessageID: "r1", Delta: "Think"},
		{Type: ReasoningMessageEnd, MessageID: "r1"},
		{Type: ReasoningEnd, MessageID: "r1"},
		{Type: TextMessageStart, MessageID: "m1", Role: "assistant"},
		{Type: TextMessageContent, MessageID: "m1", Delta: "Hello <b>"},
		{Type: TextMessageContent, MessageID: "m1", Delta: ""},
		{Type: TextMessageEnd, MessageID: "m1"},
		{Type: ToolCallStart, ToolCallID: "c1", ToolCallName: "search", ParentMessageID: "m1"},
		{Type: ToolCallArgs, ToolCallID: "c1", Delta: `{"q":`},
		{Type: ToolCallEnd, ToolCallID: "c1"},
		{Type: ToolCallResult, MessageID: "t1", ToolCallID: "c1", Content: "3 results", Role: "tool"},
		{Type: ToolCallResult, MessageID: "t2", ToolCallID: "c2", ContentParts: json.RawMessage(`[{"type":"text","text":"hi"}]`)},
		{Type: StateSnapshot, Snapshot: json.RawMessage(`{"phase": "Running"}`)},
		{Type: StateDelta, Patch: json.RawMessage(`[{"op":"replace","path":"/phase","value":"Finalizing"}]`)},
		{Type: StepFinished, StepName: "plan"},
		{Type: Custom, Name: "agentrun.dev/approval-requested", Value: json.RawMessage(`{"tool":"write"}`),
			Metadata: json.RawMessage(`{"k":1}`)},
		{Type: RunError, Message: "budget exhausted", Code: "BudgetExhausted"},
		{Type: RunFinished, ThreadID: "team-a/survey.v2", RunID: "survey.v2-a1", Outcome: json.RawMessage(`{"type":"success"}`)},
	}
}

func TestMarshalMatchesGolden(t *testing.T) {
	var got bytes.Buffer
	for i, ev := range sampleEvents() {
		ev.Seq = uint64(i + 1)
		ev.Run = run1
		ev.Timestamp = 1764590000000 + int64(i)
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatalf("marshal %s: %v", ev.Type, err)
		}
		got.Write(b)
		got.WriteByte('\n')
	}
	const path = "testdata/agui_events.jsonl"
	if *update {
		if err := os.WriteFile(path, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(string(want), got.String()); d != "" {
		t.Errorf("encoding differs from %s (-want +got; rerun with -update if intended):\n%s", path, d)
	}
}

func TestRequiredFieldsAlwaysWritten(t *testing.T) {
	tests := map[string]struct {
		ev   Event
		want string
	}{
		"empty delta is kept": {
			ev:   Event{Type: TextMessageContent, MessageID: "m"},
			want: `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":""}`,
		},
		"empty args delta is kept": {
			ev:   Event{Type: ToolCallArgs, ToolCallID: "c"},
			want: `{"type":"TOOL_CALL_ARGS","toolCallId":"c","delta":""}`,
		},
		"empty result content is kept": {
			ev:   Event{Type: ToolCallResult, MessageID: "t", ToolCallID: "c"},
			want: `{"type":"TOOL_CALL_RESULT","messageId":"t","toolCallId":"c","content":""}`,
		},
		"snapshot defaults to null": {
			ev:   Event{Type: StateSnapshot},
			want: `{"type":"STATE_SNAPSHOT","snapshot":null}`,
		},
		"state delta defaults to an empty patch": {
			ev:   Event{Type: StateDelta},
			want: `{"type":"STATE_DELTA","delta":[]}`,
		},
		"custom value defaults to null": {
			ev:   Event{Type: Custom, Name: "x"},
			want: `{"type":"CUSTOM","name":"x","value":null}`,
		},
		"reasoning message start always has role reasoning": {
			ev:   Event{Type: ReasoningMessageStart, MessageID: "r"},
			want: `{"type":"REASONING_MESSAGE_START","messageId":"r","role":"reasoning"}`,
		},
		"optional fields are omitted": {
			ev:   Event{Type: TextMessageStart, MessageID: "m"},
			want: `{"type":"TEXT_MESSAGE_START","messageId":"m"}`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b, err := json.Marshal(tc.ev)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, string(b)); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestRoundTrip(t *testing.T) {
	for i, want := range sampleEvents() {
		want.Seq = uint64(i + 1)
		want.Run = run1
		want.Timestamp = 42
		b, err := json.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		var got Event
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		// Raw JSON comes back compacted.
		if d := cmp.Diff(want, got, cmp.Comparer(jsonEqual)); d != "" {
			t.Errorf("%s round trip (-want +got):\n%s", want.Type, d)
		}
	}
}

func jsonEqual(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && cmp.Equal(x, y)
}

func TestMarshalRefusesInvalidJSONAndUnknownTypes(t *testing.T) {
	if _, err := json.Marshal(Event{Type: Custom, Name: "x", Value: json.RawMessage(`{`)}); !errors.Is(err, ErrInvalidEvent) {
		t.Errorf("invalid value: err = %v, want ErrInvalidEvent", err)
	}
	if _, err := json.Marshal(Event{Type: "MESSAGES_SNAPSHOT"}); !errors.Is(err, ErrInvalidEvent) {
		t.Errorf("unknown type: err = %v, want ErrInvalidEvent", err)
	}
}

func TestValidate(t *testing.T) {
	for _, ev := range sampleEvents() {
		if err := ev.Validate(); err != nil {
			t.Errorf("%s: %v", ev.Type, err)
		}
	}
	tests := map[string]struct {
		ev   Event
		want string
	}{
		"content without messageId": {Event{Type: TextMessageContent}, "TEXT_MESSAGE_CONTENT needs messageId"},
		"tool start without name":   {Event{Type: ToolCallStart, ToolCallID: "c"}, "TOOL_CALL_START needs toolCallName"},
		"result without call":       {Event{Type: ToolCallResult, MessageID: "t"}, "TOOL_CALL_RESULT needs toolCallId"},
		"run started without ids":   {Event{Type: RunStarted}, "RUN_STARTED needs threadId"},
		"error without message":     {Event{Type: RunError}, "RUN_ERROR needs message"},
		"step without name":         {Event{Type: StepFinished}, "STEP_FINISHED needs stepName"},
		"custom without name":       {Event{Type: Custom}, "CUSTOM needs name"},
		"chunk shorthand":           {Event{Type: "TEXT_MESSAGE_CHUNK"}, `type "TEXT_MESSAGE_CHUNK" is not one`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := tc.ev.Validate()
			if !errors.Is(err, ErrInvalidEvent) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v, want ErrInvalidEvent containing %q", err, tc.want)
			}
		})
	}
}

func TestFinalAndDelta(t *testing.T) {
	deltas := map[EventType]bool{TextMessageContent: true, ReasoningMessageContent: true, ToolCallArgs: true}
	for _, typ := range Types {
		ev := Event{Type: typ}
		if got := ev.IsDelta(); got != deltas[typ] {
			t.Errorf("%s.IsDelta() = %v, want %v", typ, got, deltas[typ])
		}
		if ev.Final() == deltas[typ] {
			t.Errorf("%s.Final() = %v", typ, ev.Final())
		}
		if !typ.Known() {
			t.Errorf("%s not Known", typ)
		}
	}
}

func TestMerge(t *testing.T) {
	a := Event{Type: TextMessageContent, MessageID: "m", Delta: "Hel", Seq: 4, Timestamp: 1}
	b := Event{Type: TextMessageContent, MessageID: "m", Delta: "lo", Seq: 5, Timestamp: 2}
	got, ok := Merge(a, b)
	want := Event{Type: TextMessageContent, MessageID: "m", Delta: "Hello", Seq: 5, Timestamp: 2}
	if !ok || !cmp.Equal(want, got) {
		t.Errorf("Merge = %+v, %v; want %+v", got, ok, want)
	}
	for name, b := range map[string]Event{
		"other block":    {Type: TextMessageContent, MessageID: "n", Delta: "x"},
		"other type":     {Type: ReasoningMessageContent, MessageID: "m", Delta: "x"},
		"a final":        {Type: TextMessageEnd, MessageID: "m"},
		"other metadata": {Type: TextMessageContent, MessageID: "m", Metadata: json.RawMessage(`{}`)},
	} {
		if _, ok := Merge(a, b); ok {
			t.Errorf("%s: merged", name)
		}
	}
	if _, ok := Merge(Event{Type: TextMessageEnd, MessageID: "m"}, Event{Type: TextMessageEnd, MessageID: "m"}); ok {
		t.Error("two finals merged")
	}
}

func TestMergeKeepsTheFirstTTLAndJSONOmitsIt(t *testing.T) {
	a := Event{Type: TextMessageContent, MessageID: "m", Delta: "Hel", Seq: 4, TTL: time.Hour}
	b := Event{Type: TextMessageContent, MessageID: "m", Delta: "lo", Seq: 5, TTL: time.Minute}
	got, ok := Merge(a, b)
	if !ok || got.TTL != time.Hour {
		t.Errorf("Merge = %+v, %v; want a's TTL (1h)", got, ok)
	}
	withTTL, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	a.TTL = 0
	without, _ := json.Marshal(a)
	if !bytes.Equal(withTTL, without) {
		t.Errorf("the TTL changed the JSON: %s vs %s", withTTL, without)
	}
}

// RandomTrajectory returns n events of interleaved text, reasoning and tool
// blocks, as a model stream and tool door would emit them, seq from 1.
func randomTrajectory(r *rand.Rand, n int) []Event {
	var out []Event
	open := map[int]Event{}
	next := 0
	for len(out) < n {
		if len(open) == 0 || (len(open) < 3 && r.IntN(4) == 0) {
			next++
			id := string(rune('a'+next%26)) + strings.Repeat("x", next/26)
			var start Event
			switch r.IntN(3) {
			case 0:
				start = Event{Type: TextMessageStart, MessageID: id}
				open[next] = Event{Type: TextMessageContent, MessageID: id}
			case 1:
				start = Event{Type: ReasoningMessageStart, MessageID: id}
				open[next] = Event{Type: ReasoningMessageContent, MessageID: id}
			default:
				start = Event{Type: ToolCallStart, ToolCallID: id, ToolCallName: "t"}
				open[next] = Event{Type: ToolCallArgs, ToolCallID: id}
			}
			out = append(out, start)
			continue
		}
		var k int
		for k = range open {
			break
		}
		d := open[k]
		if r.IntN(8) == 0 {
			end := Event{Type: TextMessageEnd, MessageID: d.MessageID}
			switch d.Type {
			case ReasoningMessageContent:
				end.Type = ReasoningMessageEnd
			case ToolCallArgs:
				end = Event{Type: ToolCallEnd, ToolCallID: d.ToolCallID}
			}
			out = append(out, end)
			delete(open, k)
			continue
		}
		d.Delta = strings.Repeat(string(rune('0'+r.IntN(10))), 1+r.IntN(3))
		out = append(out, d)
	}
	for i := range out {
		out[i].Seq = uint64(i + 1)
	}
	return out
}

// CheckMergedEquivalent reports how merged differs from orig, if it does:
// per block the concatenated deltas are equal, the finals are the same
// events in the same order, no event is reordered, and each merged delta
// carries the seq of the last delta it absorbed.
func checkMergedEquivalent(orig, merged []Event) error {
	concat := func(evs []Event) map[string]string {
		m := map[string]string{}
		for _, e := range evs {
			if e.IsDelta() {
				m[string(e.Type)+"/"+e.Block()] += e.Delta
			}
		}
		return m
	}
	finals := func(evs []Event) []Event {
		var f []Event
		for _, e := range evs {
			if e.Final() {
				f = append(f, e)
			}
		}
		return f
	}
	if d := cmp.Diff(concat(orig), concat(merged)); d != "" {
		return errors.New("concatenated deltas differ: " + d)
	}
	if d := cmp.Diff(finals(orig), finals(merged), cmpopts.EquateEmpty()); d != "" {
		return errors.New("finals differ: " + d)
	}
	// Order: merged seqs strictly increase, and each merged event is the
	// original at its seq, or (a delta) a merge ending there.
	bySeq := map[uint64]Event{}
	for _, e := range orig {
		bySeq[e.Seq] = e
	}
	var last uint64
	for _, e := range merged {
		if e.Seq <= last {
			return errors.New("reordered or duplicated")
		}
		o := bySeq[e.Seq]
		if o.Type != e.Type || o.Block() != e.Block() || !strings.HasSuffix(e.Delta, o.Delta) {
			return errors.New("event does not end at its original")
		}
		last = e.Seq
	}
	return nil
}

func TestMergeProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for iter := range 300 {
		orig := randomTrajectory(r, 5+r.IntN(200))
		// Merge a random selection of adjacent mergeable pairs, repeatedly.
		merged := append([]Event(nil), orig...)
		for range r.IntN(len(merged)) {
			i := r.IntN(len(merged) - 1)
			if m, ok := Merge(merged[i], merged[i+1]); ok {
				merged = append(merged[:i], append([]Event{m}, merged[i+2:]...)...)
			}
		}
		if err := checkMergedEquivalent(orig, merged); err != nil {
			t.Fatalf("iteration %d: %v", iter, err)
		}
	}
}
