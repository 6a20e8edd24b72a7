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
	"encoding/json"
	"io"
	"maps"
	"os"
	"testing"
)

// Translation's own cost, apart from the door's: each translation of a
// request the size of a late turn of the benchmark's agent sessions
// (test/bench/gateway/testdata: Claude Code's 30th turn, about 150 KB;
// Codex's, about 160 KB), and of answers; and the reservation's prompt
// shape of the same request. go test -bench . -benchmem -run '^$'
// ./internal/gateway/ -bench 'Translate|Shape'.

// lateTurn is the body of a session's last turn, its conversation in list.
func lateTurn(b *testing.B, file, list string) []byte {
	b.Helper()
	raw, err := os.ReadFile("../../test/bench/gateway/testdata/" + file)
	if err != nil {
		b.Fatal(err)
	}
	var s struct {
		Base  map[string]any `json:"base"`
		Turns []struct {
			Append []any `json:"append"`
		} `json:"turns"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		b.Fatal(err)
	}
	var conv []any
	for _, t := range s.Turns {
		conv = append(conv, t.Append...)
	}
	body := maps.Clone(s.Base)
	body[fieldModel], body[list] = "m", conv
	out, _ := json.Marshal(body)
	return out
}

func BenchmarkTranslateMessagesToChat(b *testing.B) {
	body := lateTurn(b, "claude-code-session.json", jMessages)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		c, e := parseMessages(post(body))
		if e != nil {
			b.Fatal(e.body.Message)
		}
		t, e := translateMessagesToChat(c)
		if e != nil {
			b.Fatal(e.body.Message)
		}
		_ = t.body("m", 128000)
	}
}

func BenchmarkTranslateResponsesToChat(b *testing.B) {
	body := lateTurn(b, "codex-session.json", wireInput)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		c, e := parseResponses(post(body))
		if e != nil {
			b.Fatal(e.body.Message)
		}
		t, e := translateResponses(c)
		if e != nil {
			b.Fatal(e.body.Message)
		}
		_ = t.size()
	}
}

// BenchmarkTranslateChatToMessages is the chat request of Claude Code's
// late turn (translated to chat first, outside the loop) on to Messages.
func BenchmarkTranslateChatToMessages(b *testing.B) {
	c, e := parseMessages(post(lateTurn(b, "claude-code-session.json", jMessages)))
	if e != nil {
		b.Fatal(e.body.Message)
	}
	t, e := translateMessagesToChat(c)
	if e != nil {
		b.Fatal(e.body.Message)
	}
	chat := t.body("m", 128000)
	b.SetBytes(int64(len(chat)))
	for b.Loop() {
		if _, e := chatAsMessages(chat); e != nil {
			b.Fatal(e.body.Message)
		}
	}
}

const benchMessage = `{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[` +
	`{"type":"thinking","thinking":"look at the failing test first","signature":"s"},` +
	`{"type":"text","text":"The handler returns early when the context is cancelled."},` +
	`{"type":"tool_use","id":"toolu_1","name":"Edit","input":{"path":"internal/gateway/models.go","old":"return","new":"settle()"}}],` +
	`"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":4,"cache_creation_input_tokens":900,` +
	`"cache_read_input_tokens":40000,"output_tokens":120}}`

func BenchmarkTranslateMessagesAnswerToChat(b *testing.B) {
	for b.Loop() {
		if messageAsChat([]byte(benchMessage)) == nil {
			b.Fatal("no answer")
		}
	}
}

// BenchmarkTranslateMessagesStreamToChat restates a Messages event stream
// (the scripted provider's, for the answer above) as chat chunks.
func BenchmarkTranslateMessagesStreamToChat(b *testing.B) {
	events := []string{
		`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],` +
			`"usage":{"input_tokens":4,"cache_read_input_tokens":40000,"output_tokens":1}}}`,
		`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
	}
	for range 40 {
		events = append(events, `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"the handler "}}`)
	}
	events = append(events, `{"type":"content_block_stop","index":0}`,
		`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":80}}`,
		`{"type":"message_stop"}`)
	var sse bytes.Buffer
	for _, ev := range events {
		var t struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal([]byte(ev), &t)
		sse.WriteString("event: " + t.Type + "\ndata: " + ev + "\n\n")
	}
	raw := sse.Bytes()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		pr, pw := io.Pipe()
		go messagesAsChatStream(io.NopCloser(bytes.NewReader(raw)), pw, 1<<20)
		out, err := io.ReadAll(pr)
		if err != nil || !bytes.HasSuffix(out, []byte("data: [DONE]\n\n")) {
			b.Fatal("no [DONE]", err)
		}
	}
}

// BenchmarkShapeOf is the reservation's per-request cost: the prompt's
// shape of Claude Code's late turn.
func BenchmarkShapeOf(b *testing.B) {
	body := lateTurn(b, "claude-code-session.json", jMessages)
	var fields map[string]json.RawMessage
	_ = json.Unmarshal(body, &fields)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if shapeOf("m", len(body), fields, jMessages) == nil {
			b.Fatal("no shape")
		}
	}
}
