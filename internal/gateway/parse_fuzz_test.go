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

// Fuzz targets of the gateway's request parsers: the agent API's strict
// body decoding, the model door's chat-completion parsing and the body it
// sends upstream, and the tool door's argument canonicalisation and schema
// check. Each must not panic, must refuse with a 400 invalid_request that
// says why, and must keep what it accepted: a decoded body re-encoded
// decodes to the same value, canonical arguments are a fixed point, and
// the upstream body never lets the provider generate more than the gateway
// reserved. Run one with
//
//	go test ./internal/gateway/ -run '^$' -fuzz '^FuzzChatRequest$' -fuzztime 10m

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// checkInvalid fails unless e is a 400 invalid_request with a message.
func checkInvalid(t *testing.T, e *apiError) {
	t.Helper()
	if e.status != http.StatusBadRequest || e.body.Type != gatewayapi.TypeInvalidRequest || e.body.Message == "" {
		t.Fatalf("refusal is not a 400 invalid_request with a message: %d %+v", e.status, e.body)
	}
}

func post(body []byte) *http.Request {
	return httptest.NewRequest(http.MethodPost, "/agentrun/v1/self", bytes.NewReader(body))
}

// agentBodies are the agent API's request bodies, by the byte the fuzzer
// picks.
var agentBodies = []func() any{
	func() any { return &gatewayapi.StepRequest{} },
	func() any { return &struct{}{} }, // finish, settle
	func() any { return &gatewayapi.CheckpointRequest{} },
	func() any { return &gatewayapi.AdviceRequest{} },
	func() any { return &gatewayapi.FaultRequest{} },
	func() any { return &gatewayapi.ToolCallRequest{} },
	func() any { return &gatewayapi.ToolOutcomeRequest{} },
	func() any { return &gatewayapi.ReportPlanRequest{} },
	func() any { return &gatewayapi.PublishRequest{} },
}

// FuzzAgentAPIDecode: the agent API's strict decoding of every request
// body. A refusal is a 400 naming the unknown or mistyped field when there
// is one; an accepted body re-encoded is accepted again as the same value.
func FuzzAgentAPIDecode(f *testing.F) {
	for i, body := range []string{
		`{"progress":true}`, ``, `{"checkpoint":"c-1"}`, `{"source":"reviewer","kind":"Continue"}`,
		`{"scope":"Tool","kind":"Timeout","retryable":true,"message":"m","escalate":true}`,
		`{"tool":"http.get","arguments":{"url":"https://example.com","n":1.50},"context":"s1","waitSeconds":5}`,
		`{"error":{"kind":"Timeout","message":"slow","retryable":true}}`, `{"sections":["a","b"]}`,
		`{"callID":"c","section":"a","content":"x"}`,
	} {
		f.Add(uint8(i), []byte(body))
	}
	f.Add(uint8(0), []byte(`{"progress":"yes"}`))
	f.Add(uint8(5), []byte(`{"tool":"t","bogus":1}`))
	f.Add(uint8(5), []byte(`{"tool":"t"} {"tool":"u"}`))
	f.Add(uint8(2), []byte(`[1,2]`))
	f.Fuzz(func(t *testing.T, kind uint8, body []byte) {
		newBody := agentBodies[int(kind)%len(agentBodies)]
		v := newBody()
		e := decode(post(body), v)
		if e != nil {
			checkInvalid(t, e)
			// The refusal names the unknown field as param (a field named ""
			// is named "", the fuzzer's first finding, kept in the corpus).
			if name, ok := strings.CutPrefix(e.body.Message, "unknown field "); ok && strconv.Quote(e.body.Param) != name {
				t.Fatalf("an unknown-field refusal does not name the field: %+v", e.body)
			}
			return
		}
		enc, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("an accepted %T does not encode: %v", v, err)
		}
		again := newBody()
		if e := decode(post(enc), again); e != nil {
			t.Fatalf("an accepted %T re-encoded as %s is refused: %+v", v, enc, e.body)
		}
		if enc2, _ := json.Marshal(again); !bytes.Equal(enc, enc2) {
			t.Fatalf("an accepted %T changed on a round trip:\n%s\n%s", v, enc, enc2)
		}
		if tc, ok := v.(*gatewayapi.ToolCallRequest); ok {
			checkArguments(t, tc.Arguments)
		}
	})
}

// checkArguments: canonical arguments are a JSON object, a fixed point of
// canonicalisation, and fingerprint like the arguments they came from.
func checkArguments(t *testing.T, raw json.RawMessage) (map[string]any, bool) {
	t.Helper()
	canon, e := canonicalArgs(raw)
	if e != nil {
		checkInvalid(t, e)
		if e.body.Param != "arguments" {
			t.Fatalf("an arguments refusal does not name arguments: %+v", e.body)
		}
		return nil, false
	}
	var args map[string]any
	dec := json.NewDecoder(bytes.NewReader(canon))
	dec.UseNumber()
	if err := dec.Decode(&args); err != nil || args == nil {
		t.Fatalf("canonical arguments %s of %q are not a JSON object: %v", canon, raw, err)
	}
	again, e := canonicalArgs(canon)
	if e != nil || !bytes.Equal(again, canon) {
		t.Fatalf("canonical arguments are not a fixed point: %q -> %s -> %s (%v)", raw, canon, again, e)
	}
	fp1, err1 := gatewayapi.Fingerprint("t", args, "c")
	fp2, err2 := gatewayapi.Fingerprint("t", json.RawMessage(canon), "c")
	if err1 != nil || err2 != nil || fp1 != fp2 {
		t.Fatalf("the fingerprint of %s differs by form: %s %v / %s %v", canon, fp1, err1, fp2, err2)
	}
	_ = showArguments(args)
	return args, true
}

// FuzzToolDoorArguments: a tools/call's arguments as the MCP door reads
// them — canonicalised, then checked against a built-in's input schema
// (report.publish, notes.write) — never panic, and a schema refusal is an
// invalid_arguments naming arguments.
func FuzzToolDoorArguments(f *testing.F) {
	f.Add([]byte(`{"section":"a","content":"x"}`), false)
	f.Add([]byte(`{"text":"note"}`), true)
	f.Add([]byte(`{"section":1,"content":null,"extra":[{"a":{"b":1e400}}]}`), false)
	f.Add([]byte(`null`), true)
	f.Add([]byte(`"s"`), false)
	f.Add([]byte(`{"a":1,"a":2,"\u00e9":"\ud800"}`), true)
	f.Add([]byte(`{"n":-0.000000000000000000001,"m":12345678901234567890123}`), false)
	f.Fuzz(func(t *testing.T, raw []byte, notes bool) {
		if !json.Valid(raw) {
			// The MCP SDK hands the door only valid JSON (a RawMessage).
			return
		}
		args, ok := checkArguments(t, raw)
		if !ok {
			return
		}
		name := gatewayapi.ToolReportPublish
		if notes {
			name = gatewayapi.ToolNotesWrite
		}
		c := &toolClients{}
		e := c.validate(context.Background(), "ns", doorTool{entry: v1alpha1.Tool{Name: name}}, args)
		if e != nil && (e.status != http.StatusBadRequest || e.body.Code != gatewayapi.CodeInvalidArguments ||
			e.body.Param != "arguments" || e.body.Message == "") {
			t.Fatalf("a schema refusal is not an invalid_arguments naming arguments: %d %+v", e.status, e.body)
		}
	})
}

// tokenFields are the request fields a provider reads as the completion's
// token cap.
var tokenFields = []string{"max_tokens", "max_completion_tokens"}

// FuzzChatRequest: the model door's parsing of a chat completion request
// and the body it forwards. An accepted request has a model and messages;
// the forwarded body is accepted again with the same stream flag and model
// (the upstream id), a stream asks for usage, and no token cap in it is above what
// the gateway reserved (mt), whichever field the client used.
func FuzzChatRequest(f *testing.F) {
	f.Add([]byte(`{"model":"scripted","messages":[{"role":"user","content":"hi"}]}`), int64(64), true)
	f.Add([]byte(`{"model":"m","messages":[{"role":"system","content":[{"type":"text","text":"s"}]}],"stream":true,`+
		`"stream_options":{"include_usage":false},"max_tokens":100}`), int64(10), false)
	f.Add([]byte(`{"model":"m","messages":[{}],"max_completion_tokens":5}`), int64(3), true)
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":null}`), int64(0), false)
	f.Add([]byte(`{"model":"m","messages":[1],"stream":"yes"}`), int64(1), false)
	f.Add([]byte(`{"model":"","messages":[]}`), int64(1), false)
	f.Add([]byte(`[]`), int64(1), false)
	f.Fuzz(func(t *testing.T, body []byte, mt int64, upstreamID bool) {
		c, e := parseChat(post(body))
		if e != nil {
			checkInvalid(t, e)
			return
		}
		if c.model == "" || c.maxTokens < 0 || c.conv == "" {
			t.Fatalf("an accepted request without a model, with negative max tokens or no conversation: %+v", c)
		}
		m := v1alpha1.Model{Name: c.model}
		if upstreamID {
			m.UpstreamModel = "upstream-" + c.model
		}
		stream := c.stream
		out, _ := c.upstreamBody(m, mt)
		up, e := parseChat(post(out))
		if e != nil {
			t.Fatalf("the forwarded body of an accepted request is refused: %+v\nin:  %s\nout: %s", e.body, body, out)
		}
		want := m.UpstreamModel
		if want == "" {
			want = m.Name
		}
		if up.model != want || up.stream != stream {
			t.Fatalf("the forwarded body changed the request: model %q (want %q), stream %v (want %v)\nout: %s",
				up.model, want, up.stream, stream, out)
		}
		if stream {
			var so struct {
				IncludeUsage bool `json:"include_usage"`
			}
			if json.Unmarshal(up.fields["stream_options"], &so) != nil || !so.IncludeUsage {
				t.Fatalf("a stream is forwarded without stream_options.include_usage: %s", out)
			}
		}
		if mt <= 0 {
			return
		}
		for _, name := range tokenFields {
			raw, ok := up.fields[name]
			if !ok || string(raw) == "null" {
				continue
			}
			var n int64
			if json.Unmarshal(raw, &n) != nil || n > mt {
				t.Fatalf("the forwarded body lets the provider generate %s=%s tokens; the gateway reserved %d\nin:  %s\nout: %s",
					name, raw, mt, body, out)
			}
		}
	})
}
