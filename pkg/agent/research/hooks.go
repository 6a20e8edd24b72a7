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
	"errors"

	"github.com/openai/openai-go/v3"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/pkg/agent"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// Hooks let a harness play the model and inject the faults of the world
// into a run: internal/research/scripted (cmd/research-agent
// --provider=scripted) plays a script with them. A real agent leaves them
// empty.
type Hooks struct {
	// Provider builds the model provider once the agent has started (when
	// Config.Provider is nil). Its error is escalated (Agent/BadConfiguration)
	// and Run fails.
	Provider func(Session) (Provider, error)
	// BeforeToolCall sees each tool call the model asked for before the tool
	// runs: for a tool the gateway serves, before the call is made; for one
	// the agent runs, as it starts running (the gateway has recorded the call
	// in flight). Its error fails the call; a tool's fault (agent.Failure) of
	// a call the gateway serves is recorded, as the gateway would have.
	BeforeToolCall func(ctx context.Context, call ToolCall) error
}

// Session is what Hooks.Provider gets: the attempt, the way to the model,
// and the process.
type Session struct {
	// Attempt is the RunAttempt as the gateway reports it.
	Attempt gatewayapi.Attempt
	// OpenAI is the SDK's client for the gateway's model door
	// (agent.Agent.OpenAI).
	OpenAI openai.Client
	// Crash ends the process as a kill would: nothing more is written, then
	// Config.Exit(code). It returns ErrCrashed, for when the process keeps
	// running (in-process tests); Run then returns ErrCrashed.
	Crash func(code int) error
	// Hang freezes the agent (no heartbeats, no writes) until Run's context
	// ends; it returns ErrHung, which Run returns.
	Hang func() error
}

type toolCallKey struct{}

// withCall carries the model's tool call to the tool the agent runs, for
// Hooks.BeforeToolCall.
func (r *runner) withCall(ctx context.Context, tc ToolCall) context.Context {
	if r.cfg.Hooks.BeforeToolCall == nil {
		return ctx
	}
	return context.WithValue(ctx, toolCallKey{}, tc)
}

// beforeTool runs Hooks.BeforeToolCall inside a tool the agent runs, for a
// call the model asked for.
func (r *runner) beforeTool(ctx context.Context) error {
	tc, ok := ctx.Value(toolCallKey{}).(ToolCall)
	if !ok || r.cfg.Hooks.BeforeToolCall == nil {
		return nil
	}
	return r.cfg.Hooks.BeforeToolCall(ctx, tc)
}

// beforeServed runs Hooks.BeforeToolCall before a call the gateway serves:
// the call is not made when it fails, and a tool's fault is recorded.
func (r *runner) beforeServed(ctx context.Context, tc ToolCall) error {
	err := r.cfg.Hooks.BeforeToolCall(ctx, tc)
	var fe *agent.FaultError
	if err != nil && !r.crashed.Load() && errors.As(err, &fe) {
		msg := tc.Name + ": " + err.Error()
		if rerr := r.ag.RecordFault(ctx, v1alpha1.FaultScopeTool, fe.Kind, fe.Retryable, msg); rerr != nil {
			r.log.Error(rerr, "Could not report a fault", "tool", tc.Name)
		}
	}
	return err
}
