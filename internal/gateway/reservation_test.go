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
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// shapeFor parses a request body's shape (its conversation in messages).
func shapeFor(t *testing.T, body string) *promptShape {
	t.Helper()
	var f map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &f); err != nil {
		t.Fatal(err)
	}
	return shapeOf("m", len(body), f, jMessages)
}

func TestBoundPrompt(t *testing.T) {
	const (
		turn1 = `{"model":"m","system":"be terse","max_tokens":128000,"messages":[{"role":"user","content":"hello"}]}`
		// turn2 extends turn1 by an answer and a tool result (45 and 39 bytes).
		turn2 = `{"model":"m","system":"be terse","max_tokens":64000,"stream":true,"messages":[` +
			`{"role":"user","content":"hello"},{"role":"assistant","content":"calling ls"},` +
			`{"role":"user","content":"a.go b.go"}]}`
		// turn2 with Claude Code's moved cache marker, on a message turn1 sent without it.
		turn2Cached = `{"model":"m","system":"be terse","max_tokens":64000,"messages":[` +
			`{"role":"user","content":[{"type":"text","text":"hello","cache_control":{"type":"ephemeral"}}]}]}`
		turn2First = `{"model":"m","system":"be terse","max_tokens":64000,"messages":[` +
			`{"role":"user","content":[{"cache_control":{"type":"ephemeral","ttl":"5m"},"type":"text","text":"hello"}]}]}`
		turn1Blocks = `{"model":"m","system":"be terse","max_tokens":128000,"messages":[` +
			`{"role":"user","content":[{"type":"text","text":"hello"}]}]}`
		otherSystem = `{"model":"m","system":"be verbose","messages":[{"role":"user","content":"hello"},` +
			`{"role":"assistant","content":"calling ls"}]}`
		edited = `{"model":"m","system":"be terse","messages":[{"role":"user","content":"HELLO"},` +
			`{"role":"assistant","content":"calling ls"}]}`
	)
	fresh := int64(len(`{"role":"assistant","content":"calling ls"}`) + len(`{"role":"user","content":"a.go b.go"}`))
	mem := func(body string, tokens int64) promptMemory {
		return promptMemory{shape: shapeFor(t, body), tokens: tokens}
	}
	type result struct {
		Bound    int64
		Extended bool
	}
	cases := map[string]struct {
		body       string
		bytesBound int64 // 0: the body's bytes
		prev       []promptMemory
		want       result
	}{
		"a first request is bounded by its bytes": {body: turn2, want: result{Bound: int64(len(turn2))}},
		"an extension: the earlier charge plus the new messages' bytes": {body: turn2,
			prev: []promptMemory{mem(turn1, 40)}, want: result{Bound: 40 + fresh, Extended: true}},
		"a repeat: the earlier charge": {body: turn1, prev: []promptMemory{mem(turn1, 40)}, want: result{Bound: 40, Extended: true}},
		"the tightest of the requests it extends": {body: turn2,
			prev: []promptMemory{mem(turn1, 400), mem(turn1, 40)}, want: result{Bound: 40 + fresh, Extended: true}},
		"never above the bytes": {body: turn2, prev: []promptMemory{mem(turn1, 100000)}, want: result{Bound: int64(len(turn2))}},
		"a translation's longer body scales the new bytes": {body: turn2, bytesBound: 2 * int64(len(turn2)),
			prev: []promptMemory{mem(turn1, 40)}, want: result{Bound: 40 + 2*fresh, Extended: true}},
		"cache markers change no token": {body: turn2Cached, prev: []promptMemory{mem(turn1Blocks, 40)},
			want: result{Bound: 40, Extended: true}},
		"cache markers first in their block change no token": {body: turn2First, prev: []promptMemory{mem(turn1Blocks, 40)},
			want: result{Bound: 40, Extended: true}},
		"another system prompt is another prompt": {body: otherSystem, prev: []promptMemory{mem(turn1, 40)},
			want: result{Bound: int64(len(otherSystem))}},
		"an edited earlier message is no extension": {body: edited, prev: []promptMemory{mem(turn1, 40)},
			want: result{Bound: int64(len(edited))}},
		"a shorter conversation is no extension": {body: turn1, prev: []promptMemory{mem(turn2, 40)},
			want: result{Bound: int64(len(turn1))}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			bb := c.bytesBound
			if bb == 0 {
				bb = int64(len(c.body))
			}
			var got result
			got.Bound, got.Extended = boundPrompt(shapeFor(t, c.body), bb, c.prev)
			if d := cmp.Diff(c.want, got); d != "" {
				t.Errorf("boundPrompt (-want +got):\n%s", d)
			}
		})
	}
	other := shapeFor(t, turn1)
	other.model = "n"
	if b, ext := boundPrompt(shapeFor(t, turn2), 1000, []promptMemory{{shape: other, tokens: 1}}); ext || b != 1000 {
		t.Errorf("another model's request bounded this one: %d", b)
	}
	if b, _ := boundPrompt(nil, 1000, []promptMemory{mem(turn1, 1)}); b != 1000 {
		t.Errorf("a request without a conversation is bounded by its bytes, got %d", b)
	}
}

func TestRememberPrompt(t *testing.T) {
	a := shapeFor(t, `{"messages":[{"role":"user","content":"a"}]}`)
	a2 := shapeFor(t, `{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]}`)
	b := shapeFor(t, `{"messages":[{"role":"user","content":"other"}]}`)
	var prev []promptMemory
	prev = rememberPrompt(prev, a, 10)
	prev = rememberPrompt(prev, b, 20)
	prev = rememberPrompt(prev, a2, 30)
	prev = rememberPrompt(prev, b, 0)
	got := map[*promptShape]int64{}
	for _, p := range prev {
		got[p.shape] = p.tokens
	}
	if d := cmp.Diff(map[*promptShape]int64{a2: 30, b: 20}, got); d != "" {
		t.Errorf("the latest of each conversation, none unreported (-want +got):\n%s", d)
	}
	for i := range 2 * promptMemories {
		s := shapeFor(t, `{"messages":[{"role":"user","content":"`+string(rune('a'+i))+`x"}]}`)
		prev = rememberPrompt(prev, s, 1)
	}
	if len(prev) != promptMemories {
		t.Errorf("remembered %d requests, want at most %d", len(prev), promptMemories)
	}
}
