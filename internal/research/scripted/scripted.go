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

package scripted

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/openai/openai-go/v3/option"
	"sigs.k8s.io/yaml"

	"github.com/agentrun-dev/agentrun/internal/upstream"
	"github.com/agentrun-dev/agentrun/pkg/agent"
	"github.com/agentrun-dev/agentrun/pkg/agent/research"
)

const (
	// DefaultScriptKey is the ConfigMap key a script is read from.
	DefaultScriptKey = "script.yaml"
	// EnvScript is the environment variable the script is read from when
	// no file is given (a pod gets it from a ConfigMap key).
	EnvScript = "AGENTRUN_SCRIPT"
	// Model is the model the scripted provider asks the gateway for unless
	// the config names one: a policy serves a model of this name pointing at
	// a scripted upstream.
	Model = "scripted"
)

// Script is what the scripted provider plays: the model's plan, its turns
// and injected faults. docs/script-format.md documents the format.
type Script struct {
	// Plan is the answer to the planning request: the report's sections.
	Plan []string `json:"plan,omitempty"`
	// PlanTokens are the tokens the planning request reports.
	PlanTokens int64 `json:"planTokens,omitempty"`
	// PlanError injects a provider error into the planning request.
	PlanError *ProviderFault `json:"planError,omitempty"`
	// Turns answer the research loop's requests, in order.
	Turns []Turn `json:"turns,omitempty"`
	// Finalize answer the finalization requests (publish what is left).
	Finalize []Turn `json:"finalize,omitempty"`
}

// Turn is one model answer, or a fault in its place.
type Turn struct {
	// Say is the assistant's text.
	Say string `json:"say,omitempty"`
	// Tools are the tool calls the model asks for.
	Tools []Call `json:"tools,omitempty"`
	// Finish says the model is done.
	Finish bool `json:"finish,omitempty"`
	// Advice comes with the answer (e.g. a reviewer saying Continue after a
	// finish); the agent records it and never obeys it.
	Advice []research.AdviceItem `json:"advice,omitempty"`
	// Tokens the request reports.
	Tokens int64 `json:"tokens,omitempty"`
	// Repeat serves this turn this many times in a row (default 1): a loop
	// of identical calls, or turns without progress.
	Repeat int `json:"repeat,omitempty"`

	// Error fails the requests for this turn before it is served.
	Error *ProviderFault `json:"error,omitempty"`
	// Crash exits the process when this turn is requested.
	Crash *Crash `json:"crash,omitempty"`
	// Hang freezes the process (no heartbeats, no writes) when this turn is
	// requested, until it is killed.
	Hang *Hang `json:"hang,omitempty"`
}

// Call is one tool call of a turn.
type Call struct {
	// Name of the tool (http.get, notes.write, report.publish).
	Name string `json:"name"`
	// Args of the call.
	Args map[string]any `json:"args,omitempty"`
	// Fail makes the tool fail instead of running.
	Fail *ToolFault `json:"fail,omitempty"`
	// Crash exits the process while the call is in flight: after its
	// write-ahead record is persisted, before its effect.
	Crash *Crash `json:"crash,omitempty"`
}

// ProviderFault is an injected model-provider error.
type ProviderFault struct {
	// Kind of the fault (default RateLimited when retryable, else InvalidRequest).
	Kind string `json:"kind,omitempty"`
	// Message of the fault.
	Message string `json:"message,omitempty"`
	// Retryable: the agent retries (each retry is a model request); a fatal
	// error is escalated and the process exits 1.
	Retryable bool `json:"retryable,omitempty"`
	// Times is how many requests fail before the turn is served (default 1).
	Times int `json:"times,omitempty"`
	// Status is the HTTP status reported (informational).
	Status int `json:"status,omitempty"`
	// OnAttempt limits the fault to one attempt number (0: every attempt).
	OnAttempt int32 `json:"onAttempt,omitempty"`
}

// ToolFault is an injected tool failure.
type ToolFault struct {
	// Kind of the fault (default Failed).
	Kind string `json:"kind,omitempty"`
	// Message of the fault.
	Message string `json:"message,omitempty"`
	// Retryable marks the fault retryable.
	Retryable bool `json:"retryable,omitempty"`
	// OnAttempt limits the fault to one attempt number (0: every attempt).
	OnAttempt int32 `json:"onAttempt,omitempty"`
}

// Crash is an injected process exit.
type Crash struct {
	// ExitCode of the process (default 137, as if killed).
	ExitCode int `json:"exitCode,omitempty"`
	// OnAttempt limits the crash to one attempt number (0: every attempt).
	OnAttempt int32 `json:"onAttempt,omitempty"`
}

// Hang is an injected freeze.
type Hang struct {
	// OnAttempt limits the hang to one attempt number (0: every attempt).
	OnAttempt int32 `json:"onAttempt,omitempty"`
}

// injection is what a scripted tool call injects into its tool.
type injection struct {
	Fail  *ToolFault
	Crash *Crash
}

// Parse decodes a script (YAML or JSON), rejecting unknown fields.
func Parse(data []byte) (*Script, error) {
	s := &Script{}
	if err := yaml.UnmarshalStrict(data, s); err != nil {
		return nil, fmt.Errorf("script: %w", err)
	}
	if err := s.validate(); err != nil {
		return nil, fmt.Errorf("script: %w", err)
	}
	return s, nil
}

// LoadFile reads a script file.
func LoadFile(path string) (*Script, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// LoadEnv reads a script from environment variable name (a pod gets
// it from a ConfigMap key with env valueFrom.configMapKeyRef).
func LoadEnv(name string) (*Script, error) {
	data, ok := os.LookupEnv(name)
	if !ok || data == "" {
		return nil, fmt.Errorf("script: environment variable %s is not set", name)
	}
	s, err := Parse([]byte(data))
	if err != nil {
		return nil, fmt.Errorf("script in $%s: %w", name, err)
	}
	return s, nil
}

func (s *Script) validate() error {
	var errs []error
	check := func(where string, turns []Turn) {
		for i, t := range turns {
			if t.Repeat < 0 {
				errs = append(errs, fmt.Errorf("%s[%d].repeat must not be negative", where, i))
			}
			for j, c := range t.Tools {
				if c.Name == "" {
					errs = append(errs, fmt.Errorf("%s[%d].tools[%d] has no name", where, i, j))
				}
			}
			if t.Error != nil && t.Error.Times < 0 {
				errs = append(errs, fmt.Errorf("%s[%d].error.times must not be negative", where, i))
			}
		}
	}
	check("turns", s.Turns)
	check("finalize", s.Finalize)
	return errors.Join(errs...)
}

// Harness plays a Script for the research agent: the model's answers (a
// provider built when the agent starts, once the attempt number is known)
// and the faults the script injects into tool calls. The script is Script,
// else the file Path, else the environment variable Env (default
// AGENTRUN_SCRIPT), read when the agent starts: a missing script is the
// agent's escalated BadConfiguration.
type Harness struct {
	Script *Script
	Path   string
	Env    string

	mu       sync.Mutex
	provider *provider // the provider of the latest start
}

// Configure makes cfg play the harness: its hooks, and the model "scripted"
// unless cfg names one.
func (h *Harness) Configure(cfg *research.Config) {
	cfg.Hooks = research.Hooks{Provider: h.start, BeforeToolCall: h.beforeToolCall}
	if cfg.Model == "" {
		cfg.Model = Model
	}
}

// Requests returns the latest requests (at most 64) the provider of the
// latest start received.
func (h *Harness) Requests() []research.Request {
	h.mu.Lock()
	p := h.provider
	h.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.requestsCopy()
}

func (h *Harness) start(s research.Session) (research.Provider, error) {
	script := h.Script
	var err error
	switch {
	case script != nil:
	case h.Path != "":
		script, err = LoadFile(h.Path)
	default:
		env := h.Env
		if env == "" {
			env = EnvScript
		}
		script, err = LoadEnv(env)
		if err != nil {
			err = fmt.Errorf("the scripted provider needs a script (--script, or $%s): %w", env, err)
		}
	}
	if err != nil {
		return nil, err
	}
	p := newProvider(script, s)
	h.mu.Lock()
	h.provider = p
	h.mu.Unlock()
	return p, nil
}

// beforeToolCall applies the fault the script gave a tool call, if any: a
// crash, or a failure of the call.
func (h *Harness) beforeToolCall(_ context.Context, call research.ToolCall) error {
	h.mu.Lock()
	p := h.provider
	h.mu.Unlock()
	if p == nil {
		return nil
	}
	inj := p.injection(call.ID)
	switch {
	case inj == nil:
		return nil
	case inj.Crash != nil:
		if p.session.Crash == nil {
			return nil
		}
		return p.session.Crash(exitCode(inj.Crash))
	case inj.Fail != nil:
		kind := inj.Fail.Kind
		if kind == "" {
			kind = "Failed"
		}
		msg := inj.Fail.Message
		if msg == "" {
			msg = msgInjected
		}
		return agent.Failure(kind, inj.Fail.Retryable, errors.New(msg))
	}
	return nil
}

const msgInjected = "injected by the script"

// provider plays a Script for one attempt: deterministic answers plus
// injected faults.
type provider struct {
	script  *Script
	session research.Session
	// model sends every answer through the gateway to the scripted upstream,
	// which plays it back.
	model *research.OpenAI

	mu         sync.Mutex
	turns      []Turn // expanded by Repeat
	finalize   []Turn
	next       int
	nextFinal  int
	failed     map[string]int // injected errors served, per turn
	requests   []research.Request
	injections map[string]*injection // by tool call ID
}

// newProvider returns a provider playing script for the session's attempt
// (faults with onAttempt set fire only on that attempt).
func newProvider(script *Script, s research.Session) *provider {
	return &provider{
		script: script, session: s, model: &research.OpenAI{Client: s.OpenAI},
		turns:      expand(script.Turns),
		finalize:   expand(script.Finalize),
		failed:     map[string]int{},
		injections: map[string]*injection{},
	}
}

func expand(turns []Turn) []Turn {
	var out []Turn
	for i := range turns {
		n := max(turns[i].Repeat, 1)
		for range n {
			out = append(out, turns[i])
		}
	}
	return out
}

// maxRecorded bounds the requests the provider remembers.
const maxRecorded = 64

func (s *provider) requestsCopy() []research.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]research.Request(nil), s.requests...)
}

func (s *provider) injection(callID string) *injection {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.injections[callID]
}

func (s *provider) applies(onAttempt int32) bool {
	return onAttempt == 0 || onAttempt == s.session.Attempt.Attempt
}

// Complete answers req from the script: it picks the turn (faults, repeats
// and attempts as the script says) and sends it as one chat completion
// through the gateway to the scripted upstream, which answers with it. The
// gateway counts the request and the tokens the upstream reports, exactly as
// for a real model. An injected crash or hang happens once the request was
// dispatched, as if the process died waiting for the model.
func (s *provider) Complete(ctx context.Context, req research.Request) (research.Response, error) {
	s.mu.Lock()
	s.requests = append(s.requests, req)
	if len(s.requests) > maxRecorded {
		s.requests = s.requests[len(s.requests)-maxRecorded:]
	}
	var turn Turn
	var list *[]Turn
	var cursor *int
	switch req.Purpose {
	case research.PurposePlan:
		content, _ := json.Marshal(s.script.Plan)
		pf := s.script.PlanError
		if pf != nil && s.applies(pf.OnAttempt) && s.failed["plan"] < max(pf.Times, 1) {
			s.failed["plan"]++
			s.mu.Unlock()
			return s.send(ctx, req, &upstream.Turn{Error: upstreamError(pf)})
		}
		s.mu.Unlock()
		return s.send(ctx, req, &upstream.Turn{Say: string(content), Tokens: s.script.PlanTokens})
	case research.PurposeFinalize:
		list, cursor = &s.finalize, &s.nextFinal
	default:
		list, cursor = &s.turns, &s.next
	}
	if *cursor >= len(*list) {
		s.mu.Unlock()
		if req.Purpose == research.PurposeFinalize {
			return s.send(ctx, req, &upstream.Turn{Say: "(script has no more finalization turns)"})
		}
		resp, err := s.send(ctx, req, &upstream.Turn{Say: "(script ended)"})
		resp.Finish = true
		return resp, err
	}
	turn = (*list)[*cursor]
	index := *cursor
	key := fmt.Sprintf("%s/%d", req.Purpose, index)
	if pf := turn.Error; pf != nil && s.applies(pf.OnAttempt) && s.failed[key] < max(pf.Times, 1) {
		s.failed[key]++
		s.mu.Unlock()
		return s.send(ctx, req, &upstream.Turn{Error: upstreamError(pf)})
	}
	*cursor++

	want := research.Response{Content: turn.Say, Finish: turn.Finish, Tokens: turn.Tokens, Advice: turn.Advice}
	wire := &upstream.Turn{Say: turn.Say, Tokens: turn.Tokens}
	for i, c := range turn.Tools {
		tc := research.ToolCall{ID: fmt.Sprintf("call_%s_%d_%d", req.Purpose, index, i), Name: c.Name, Args: c.Args}
		inj := &injection{}
		if c.Fail != nil && s.applies(c.Fail.OnAttempt) {
			inj.Fail = c.Fail
		}
		if c.Crash != nil && s.applies(c.Crash.OnAttempt) {
			inj.Crash = c.Crash
		}
		if inj.Fail != nil || inj.Crash != nil {
			s.injections[tc.ID] = inj
		}
		want.ToolCalls = append(want.ToolCalls, tc)
		wire.Tools = append(wire.Tools, upstream.ToolCall{ID: tc.ID, Name: research.WireName(c.Name), Arguments: c.Args})
	}
	s.mu.Unlock()
	resp, err := s.send(ctx, req, wire)
	if c := turn.Crash; c != nil && s.applies(c.OnAttempt) && s.session.Crash != nil {
		return research.Response{}, s.session.Crash(exitCode(c))
	}
	if h := turn.Hang; h != nil && s.applies(h.OnAttempt) && s.session.Hang != nil {
		return research.Response{}, s.session.Hang()
	}
	if err != nil {
		return research.Response{}, err
	}
	// The script's own view of the turn (finish, advice, the calls with
	// their faults) rides on what came back through the gateway (the text).
	want.Content = resp.Content
	return want, nil
}

// send plays wire through the gateway: the turn rides in the request's
// extra field, which the gateway forwards untouched to the scripted upstream.
func (s *provider) send(ctx context.Context, req research.Request, wire *upstream.Turn) (research.Response, error) {
	if req.Model == "" {
		req.Model = Model
	}
	return s.model.CompleteWith(ctx, req, option.WithJSONSet(upstream.ScriptField, wire))
}

func exitCode(c *Crash) int {
	if c.ExitCode == 0 {
		return 137
	}
	return c.ExitCode
}

// upstreamError is the scripted upstream's answer for an injected provider
// fault: HTTP 429 for a retryable one, 400 for a fatal one (or the script's
// status), with the fault's kind as error.code.
func upstreamError(pf *ProviderFault) *upstream.Error {
	kind := pf.Kind
	if kind == "" {
		kind = "InvalidRequest"
		if pf.Retryable {
			kind = "RateLimited"
		}
	}
	msg := pf.Message
	if msg == "" {
		msg = msgInjected
	}
	return &upstream.Error{Status: pf.Status, Code: kind, Message: msg, Retryable: pf.Retryable}
}
