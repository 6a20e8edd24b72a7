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

package toolserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"sigs.k8s.io/yaml"

	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// MaxRecordedCalls is how many calls a Fake keeps (the most recent ones);
// its counts cover every call.
const MaxRecordedCalls = 10000

// ToolSpec is one scripted tool of a Fake.
type ToolSpec struct {
	// Name of the tool (letters, digits, '_', '-', '.'; at most 128).
	Name string `json:"name"`
	// Description shown in tools/list.
	Description string `json:"description,omitempty"`
	// InputSchema is the JSON schema of the arguments, an object schema
	// (default {"type":"object"}). It is advertised, not enforced.
	InputSchema map[string]any `json:"inputSchema,omitempty"`
	// Behavior says how the tool answers (default: it echoes its arguments).
	Behavior Behavior `json:"behavior,omitzero"`
}

// Behavior is how a scripted tool answers. The zero value echoes the
// arguments. A call first hangs (Hang, or HangFirst), then waits Delay, then
// answers Fail as a tool error, or Result, or the canonical JSON of its
// arguments.
type Behavior struct {
	// Result is the text of the answer (default: the arguments' canonical JSON).
	Result string `json:"result,omitempty"`
	// Fail makes the call a tool error (IsError) with this message.
	Fail string `json:"fail,omitempty"`
	// Delay is how long the call waits before it answers.
	Delay time.Duration `json:"-"`
	// Hang makes every call wait until its request's context ends (the
	// client gives up or disconnects) or the fake is closed: it never answers.
	Hang bool `json:"hang,omitempty"`
	// HangFirst makes the tool's first N calls hang as Hang does; later ones
	// answer. Reset starts the count again.
	HangFirst int `json:"hangFirst,omitempty"`
}

type behaviorJSON struct {
	Result    string `json:"result,omitempty"`
	Fail      string `json:"fail,omitempty"`
	Delay     string `json:"delay,omitempty"`
	Hang      bool   `json:"hang,omitempty"`
	HangFirst int    `json:"hangFirst,omitempty"`
}

// MarshalJSON writes Delay as a duration string ("250ms").
func (b Behavior) MarshalJSON() ([]byte, error) {
	j := behaviorJSON{Result: b.Result, Fail: b.Fail, Hang: b.Hang, HangFirst: b.HangFirst}
	if b.Delay != 0 {
		j.Delay = b.Delay.String()
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads Delay as a duration string ("250ms", "2s").
func (b *Behavior) UnmarshalJSON(data []byte) error {
	var j behaviorJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return fmt.Errorf("behavior: %w", err)
	}
	*b = Behavior{Result: j.Result, Fail: j.Fail, Hang: j.Hang, HangFirst: j.HangFirst}
	if j.Delay != "" {
		d, err := time.ParseDuration(j.Delay)
		if err != nil {
			return fmt.Errorf("behavior.delay: %w", err)
		}
		b.Delay = d
	}
	return nil
}

// FakeConfig is the --fake-config file of cmd/agentrun-tools (JSON or YAML).
type FakeConfig struct {
	Tools []ToolSpec `json:"tools"`
}

// LoadFakeConfig reads a FakeConfig file (JSON or YAML; unknown fields are
// an error).
func LoadFakeConfig(path string) (FakeConfig, error) {
	var c FakeConfig
	data, err := os.ReadFile(path)
	if err != nil {
		return c, err
	}
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Call is one call a Fake dispatched, recorded as it arrived.
type Call struct {
	// Seq is the call's 1-based position among every call of the fake.
	Seq int64 `json:"seq"`
	// Tool is the tool called.
	Tool string `json:"tool"`
	// Arguments is the canonical JSON of the arguments ({} for none).
	Arguments json.RawMessage `json:"arguments"`
	// Authorization is the request's Authorization header, as sent.
	Authorization string `json:"authorization,omitempty"`
	// IdempotencyKey is MetaIdempotencyKey, or else HeaderIdempotencyKey.
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
	// MetaIdempotencyKey is _meta["agentrun.dev/idempotency-key"] of the call.
	MetaIdempotencyKey string `json:"metaIdempotencyKey,omitempty"`
	// HeaderIdempotencyKey is the request's Idempotency-Key header.
	HeaderIdempotencyKey string `json:"headerIdempotencyKey,omitempty"`
	// Deadline is _meta["agentrun.dev/deadline"] of the call: when the
	// gateway needs it over by; HeaderDeadline is the Agentrun-Deadline
	// header.
	Deadline       string `json:"deadline,omitempty"`
	HeaderDeadline string `json:"headerDeadline,omitempty"`
	// Time is when the call arrived.
	Time time.Time `json:"time"`
}

// CallsReport is what GET /calls answers.
type CallsReport struct {
	// Total counts every call (of the tool, with ?tool=).
	Total int `json:"total"`
	// Counts are the calls per tool, every call counted.
	Counts map[string]int `json:"counts"`
	// InFlight counts the calls dispatched and not yet answered (a hang
	// ends when the client gives up).
	InFlight int `json:"inFlight"`
	// Calls are the most recent calls (at most MaxRecordedCalls), oldest first.
	Calls []Call `json:"calls"`
}

// Fake is a scripted MCP tool set for tests, e2e and benchmarks. Serve it
// with New(Options{Fake: f}). It is safe for concurrent use and its memory
// is bounded: it keeps the last MaxRecordedCalls calls and a count per tool.
type Fake struct {
	tools []ToolSpec

	mu     sync.Mutex
	ring   []Call // at most MaxRecordedCalls; next is where the next call goes once full
	next   int
	seq    int64
	counts map[string]int

	inFlight atomic.Int64

	closeOnce sync.Once
	closed    chan struct{}
}

// NewFake returns a fake serving tools.
func NewFake(tools ...ToolSpec) (*Fake, error) {
	f := &Fake{counts: map[string]int{}, closed: make(chan struct{})}
	seen := map[string]bool{}
	for _, t := range tools {
		if err := validSpec(t); err != nil {
			return nil, err
		}
		if seen[t.Name] {
			return nil, fmt.Errorf("toolserver: fake tool %q is defined twice", t.Name)
		}
		seen[t.Name] = true
		f.tools = append(f.tools, t)
	}
	if len(f.tools) == 0 {
		return nil, errors.New("toolserver: a fake needs at least one tool")
	}
	return f, nil
}

func validNameRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.'
}

func validSpec(t ToolSpec) error {
	if t.Name == "" || len(t.Name) > 128 {
		return fmt.Errorf("toolserver: fake tool name %q: want 1 to 128 characters", t.Name)
	}
	for _, r := range t.Name {
		if !validNameRune(r) {
			return fmt.Errorf("toolserver: fake tool name %q: %q is not a letter, digit, '_', '-' or '.'", t.Name, r)
		}
	}
	if t.InputSchema != nil && t.InputSchema[schemaType] != schemaObject {
		return fmt.Errorf("toolserver: fake tool %s: inputSchema must have type \"object\"", t.Name)
	}
	b := t.Behavior
	switch {
	case b.Result != "" && b.Fail != "":
		return fmt.Errorf("toolserver: fake tool %s: behavior sets both result and fail", t.Name)
	case b.Hang && b.HangFirst > 0:
		return fmt.Errorf("toolserver: fake tool %s: behavior sets both hang and hangFirst", t.Name)
	case b.Delay < 0 || b.HangFirst < 0:
		return fmt.Errorf("toolserver: fake tool %s: behavior has a negative delay or hangFirst", t.Name)
	}
	return nil
}

// Tools returns the fake's tool specs.
func (f *Fake) Tools() []ToolSpec { return append([]ToolSpec(nil), f.tools...) }

// Close ends every hanging call (with a protocol error) and makes later
// hangs end at once. It is safe to call more than once.
func (f *Fake) Close() { f.closeOnce.Do(func() { close(f.closed) }) }

// Calls returns the recorded calls, oldest first (the last MaxRecordedCalls).
func (f *Fake) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Call, 0, len(f.ring))
	if len(f.ring) == MaxRecordedCalls {
		out = append(out, f.ring[f.next:]...)
		return append(out, f.ring[:f.next]...)
	}
	return append(out, f.ring...)
}

// Count returns how many calls of tool the fake dispatched ("" for every tool).
func (f *Fake) Count(tool string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if tool == "" {
		return int(f.seq)
	}
	return f.counts[tool]
}

// InFlight returns how many calls are dispatched and not yet answered.
func (f *Fake) InFlight() int { return int(f.inFlight.Load()) }

// Reset forgets every call and count.
func (f *Fake) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ring, f.next, f.seq = nil, 0, 0
	clear(f.counts)
}

// record stores c and returns the tool's count, c included.
func (f *Fake) record(c Call) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	c.Seq = f.seq
	f.counts[c.Tool]++
	if len(f.ring) < MaxRecordedCalls {
		f.ring = append(f.ring, c)
	} else {
		f.ring[f.next] = c
		f.next = (f.next + 1) % MaxRecordedCalls
	}
	return f.counts[c.Tool]
}

func (t ToolSpec) mcpTool() *mcp.Tool {
	var schema any = map[string]any{schemaType: schemaObject}
	if t.InputSchema != nil {
		schema = t.InputSchema
	}
	return &mcp.Tool{Name: t.Name, Description: t.Description, InputSchema: schema}
}

var errClosed = errors.New("the tool server is shutting down")

func (f *Fake) handler(t ToolSpec) mcp.ToolHandler {
	b := t.Behavior
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		args := []byte("{}")
		if raw := req.Params.Arguments; len(raw) > 0 && string(raw) != "null" {
			canon, err := gatewayapi.CanonicalJSON(raw)
			if err != nil {
				return errorResult("%s: arguments are not JSON: %v", t.Name, err), nil
			}
			args = canon
		}
		c := Call{Tool: t.Name, Arguments: args, Time: time.Now()}
		if k, ok := req.Params.Meta[MetaIdempotencyKey].(string); ok {
			c.MetaIdempotencyKey = k
		}
		c.Deadline, _ = req.Params.Meta[gatewayapi.MetaDeadline].(string)
		if req.Extra != nil && req.Extra.Header != nil {
			c.Authorization = req.Extra.Header.Get("Authorization")
			c.HeaderIdempotencyKey = req.Extra.Header.Get(HeaderIdempotencyKey)
			c.HeaderDeadline = req.Extra.Header.Get(gatewayapi.HeaderDeadline)
		}
		c.IdempotencyKey = c.MetaIdempotencyKey
		if c.IdempotencyKey == "" {
			c.IdempotencyKey = c.HeaderIdempotencyKey
		}
		n := f.record(c)
		f.inFlight.Add(1)
		defer f.inFlight.Add(-1)

		if b.Hang || n <= b.HangFirst {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-f.closed:
				return nil, errClosed
			}
		}
		if b.Delay > 0 {
			timer := time.NewTimer(b.Delay)
			defer timer.Stop()
			select {
			case <-timer.C:
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-f.closed:
				return nil, errClosed
			}
		}
		switch {
		case b.Fail != "":
			return errorResult("%s", b.Fail), nil
		case b.Result != "":
			return textResult(b.Result), nil
		default:
			return textResult(string(args)), nil
		}
	}
}

// serveCalls answers GET /calls[?tool=NAME] with a CallsReport and DELETE
// /calls by forgetting every call.
func (f *Fake) serveCalls(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		tool := r.URL.Query().Get("tool")
		rep := CallsReport{Calls: f.Calls(), Counts: map[string]int{}}
		f.mu.Lock()
		maps.Copy(rep.Counts, f.counts)
		rep.Total = int(f.seq)
		f.mu.Unlock()
		rep.InFlight = f.InFlight()
		if tool != "" {
			kept := rep.Calls[:0]
			for _, c := range rep.Calls {
				if c.Tool == tool {
					kept = append(kept, c)
				}
			}
			rep.Calls, rep.Total = kept, rep.Counts[tool]
		}
		writeJSON(w, http.StatusOK, rep)
	case http.MethodDelete:
		f.Reset()
		w.WriteHeader(http.StatusNoContent)
	default:
		w.Header().Set("Allow", "GET, DELETE")
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "GET or DELETE"})
	}
}
