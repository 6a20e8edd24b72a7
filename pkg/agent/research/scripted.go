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

package research

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/openai/openai-go/v3"
	"sigs.k8s.io/yaml"

	"github.com/agentrun-dev/agentrun/internal/upstream"
)

// DefaultScriptKey is the ConfigMap key a script is read from.
const DefaultScriptKey = "script.yaml"

// maxSections bounds a plan (the gateway refuses more).
const maxSections = 20

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
	Tools []ScriptedCall `json:"tools,omitempty"`
	// Finish says the model is done.
	Finish bool `json:"finish,omitempty"`
	// Advice comes with the answer (e.g. a reviewer saying Continue after a
	// finish); the agent records it and never obeys it.
	Advice []AdviceItem `json:"advice,omitempty"`
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

// ScriptedCall is one tool call of a turn.
type ScriptedCall struct {
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

// CallInjection is what a scripted tool call injects into its tool.
type CallInjection struct {
	Fail  *ToolFault
	Crash *Crash
}

// ParseScript decodes a script (YAML or JSON), rejecting unknown fields.
func ParseScript(data []byte) (*Script, error) {
	s := &Script{}
	if err := yaml.UnmarshalStrict(data, s); err != nil {
		return nil, fmt.Errorf("script: %w", err)
	}
	if err := s.validate(); err != nil {
		return nil, fmt.Errorf("script: %w", err)
	}
	return s, nil
}

// LoadScriptFile reads a script file.
func LoadScriptFile(path string) (*Script, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s, err := ParseScript(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// LoadScriptEnv reads a script from environment variable name (a pod gets
// it from a ConfigMap key with env valueFrom.configMapKeyRef).
func LoadScriptEnv(name string) (*Script, error) {
	data, ok := os.LookupEnv(name)
	if !ok || data == "" {
		return nil, fmt.Errorf("script: environment variable %s is not set", name)
	}
	s, err := ParseScript([]byte(data))
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

// Scripted is the provider that plays a Script. It is the test and demo
// workhorse: deterministic answers plus injected faults.
type Scripted struct {
	script  *Script
	attempt int32
	// crash exits the process (set by the research loop); it returns only
	// when the process keeps running (in-process tests).
	crash func(code int) error
	// hang freezes the process until it is killed.
	hang func(ctx context.Context) error
	// client sends every answer through the gateway to the scripted
	// upstream, which plays it back (set by the research loop). Without one
	// the answer is returned directly (unit tests of the script itself).
	client *openai.Client

	mu        sync.Mutex
	turns     []Turn // expanded by Repeat
	finalize  []Turn
	next      int
	nextFinal int
	failed    map[string]int // injected errors served, per turn
	requests  []Request
}

// NewScripted returns a provider playing script for attempt number attempt
// (faults with onAttempt set fire only on that attempt).
func NewScripted(script *Script, attempt int32) *Scripted {
	return &Scripted{
		script: script, attempt: attempt,
		turns:    expand(script.Turns),
		finalize: expand(script.Finalize),
		failed:   map[string]int{},
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

// Requests returns the latest requests the provider received (at most 64).
func (s *Scripted) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

func (s *Scripted) applies(onAttempt int32) bool { return onAttempt == 0 || onAttempt == s.attempt }

// Complete answers req from the script: it picks the turn (faults, repeats
// and attempts as the script says) and sends it as one chat completion
// through the gateway to the scripted upstream, which answers with it. The
// gateway counts the request and the tokens the upstream reports, exactly as
// for a real model. An injected crash or hang happens once the request was
// dispatched, as if the process died waiting for the model.
func (s *Scripted) Complete(ctx context.Context, req Request) (Response, error) {
	s.mu.Lock()
	s.requests = append(s.requests, req)
	if len(s.requests) > maxRecorded {
		s.requests = s.requests[len(s.requests)-maxRecorded:]
	}
	var turn Turn
	var list *[]Turn
	var cursor *int
	switch req.Purpose {
	case PurposePlan:
		content, _ := json.Marshal(s.script.Plan)
		pf := s.script.PlanError
		if pf != nil && s.applies(pf.OnAttempt) && s.failed["plan"] < max(pf.Times, 1) {
			s.failed["plan"]++
			s.mu.Unlock()
			return s.send(ctx, req, &upstream.Turn{Error: upstreamError(pf)}, Response{})
		}
		s.mu.Unlock()
		return s.send(ctx, req, &upstream.Turn{Say: string(content), Tokens: s.script.PlanTokens},
			Response{Content: string(content), Tokens: s.script.PlanTokens})
	case PurposeFinalize:
		list, cursor = &s.finalize, &s.nextFinal
	default:
		list, cursor = &s.turns, &s.next
	}
	if *cursor >= len(*list) {
		s.mu.Unlock()
		if req.Purpose == PurposeFinalize {
			say := "(script has no more finalization turns)"
			return s.send(ctx, req, &upstream.Turn{Say: say}, Response{Content: say})
		}
		resp, err := s.send(ctx, req, &upstream.Turn{Say: "(script ended)"}, Response{Content: "(script ended)"})
		resp.Finish = true
		return resp, err
	}
	turn = (*list)[*cursor]
	index := *cursor
	key := fmt.Sprintf("%s/%d", req.Purpose, index)
	if pf := turn.Error; pf != nil && s.applies(pf.OnAttempt) && s.failed[key] < max(pf.Times, 1) {
		s.failed[key]++
		s.mu.Unlock()
		return s.send(ctx, req, &upstream.Turn{Error: upstreamError(pf)}, Response{})
	}
	*cursor++
	s.mu.Unlock()

	want := Response{Content: turn.Say, Finish: turn.Finish, Tokens: turn.Tokens, Advice: turn.Advice}
	wire := &upstream.Turn{Say: turn.Say, Tokens: turn.Tokens}
	for i, c := range turn.Tools {
		tc := ToolCall{ID: fmt.Sprintf("call_%s_%d_%d", req.Purpose, index, i), Name: c.Name, Args: c.Args}
		inj := &CallInjection{}
		if c.Fail != nil && s.applies(c.Fail.OnAttempt) {
			inj.Fail = c.Fail
		}
		if c.Crash != nil && s.applies(c.Crash.OnAttempt) {
			inj.Crash = c.Crash
		}
		if inj.Fail != nil || inj.Crash != nil {
			tc.inject = inj
		}
		want.ToolCalls = append(want.ToolCalls, tc)
		wire.Tools = append(wire.Tools, upstream.ToolCall{ID: tc.ID, Name: wireName(c.Name), Arguments: c.Args})
	}
	resp, err := s.send(ctx, req, wire, want)
	if c := turn.Crash; c != nil && s.applies(c.OnAttempt) && s.crash != nil {
		return Response{}, s.crash(exitCode(c))
	}
	if h := turn.Hang; h != nil && s.applies(h.OnAttempt) && s.hang != nil {
		return Response{}, s.hang(ctx)
	}
	if err != nil {
		return Response{}, err
	}
	// The script's own view of the turn (finish, advice, injections) rides
	// on what came back through the gateway (text, tool calls).
	want.Content = resp.Content
	return want, nil
}

// send plays wire through the gateway (or returns want without a client).
func (s *Scripted) send(ctx context.Context, req Request, wire *upstream.Turn, want Response) (Response, error) {
	if s.client == nil {
		if wire.Error != nil {
			return Response{}, (&ProviderError{Kind: wire.Error.Code, Retryable: wire.Error.Retryable,
				Status: wire.Error.Status, Message: wire.Error.Message}).Fault()
		}
		return want, nil
	}
	if req.Model == "" {
		req.Model = "scripted"
	}
	return chatCompletion(ctx, *s.client, req, wire)
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
		kind = kindInvalidRequest
		if pf.Retryable {
			kind = "RateLimited"
		}
	}
	msg := pf.Message
	if msg == "" {
		msg = "injected by the script"
	}
	return &upstream.Error{Status: pf.Status, Code: kind, Message: msg, Retryable: pf.Retryable}
}
