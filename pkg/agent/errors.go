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

package agent

import (
	"errors"
	"fmt"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// Reasons of a local refusal. A refusal is returned as a *Refusal that wraps
// one of these, so errors.Is(err, agent.ErrGrantExhausted) works; it is
// recorded as a fact (a counted Fault) and is never a run failure: the agent
// loop gets the error and goes on.
var (
	// ErrGrantExhausted: the request would go beyond spec.grant (absolute
	// counters of this attempt's own usage). Fault scope Agent, kind GrantExhausted.
	ErrGrantExhausted = errors.New("grant exhausted")
	// ErrPermissionDenied: the permission matrix (mode × risk) denies the tool.
	// Fault scope Agent, kind PermissionDenied.
	ErrPermissionDenied = errors.New("permission denied")
	// ErrApprovalDenied: the tool needed confirmation and the user denied it.
	// Fault scope Agent, kind ApprovalDenied.
	ErrApprovalDenied = errors.New("approval denied")
	// ErrFinalizeOnly: the run is Finalizing and the tool is not an output
	// tool (research is over; only publication work may be done from the
	// reserve). Fault scope Agent, kind FinalizeOnly.
	ErrFinalizeOnly = errors.New("finalizing: only output work is allowed")
	// ErrUnknownTool: the tool is not registered with the agent or not in the
	// policy's tool catalogue. Fault scope Agent, kind UnknownTool.
	ErrUnknownTool = errors.New("unknown tool")
	// ErrInterceptorDenied: an interceptor with posture Deny failed, so the
	// call was denied (fail closed). Fault scope Hook, kind InterceptorDenied.
	ErrInterceptorDenied = errors.New("denied by a fail-closed interceptor")
	// ErrVetoed: a Pre interceptor with veto rights vetoed the call. Fault
	// scope Hook, kind Vetoed.
	ErrVetoed = errors.New("vetoed by an interceptor")
)

// Reasons the attempt stops. The context returned by Agent.Start is cancelled
// with one of these as its cause (context.Cause); Stopped reports whether an
// error is one of them, so an agent loop can exit cleanly.
var (
	// ErrTerminated: spec.runPhase is Terminated.
	ErrTerminated = errors.New("the run is terminated")
	// ErrSuperseded: a newer attempt replaced this one.
	ErrSuperseded = errors.New("the attempt was superseded by a newer attempt")
)

// Lifecycle errors of the Agent itself.
var (
	// ErrNotStarted: a call was made before Start.
	ErrNotStarted = errors.New("agent: not started")
	// ErrClosed: a call was made after Close or Abort.
	ErrClosed = errors.New("agent: closed")
	// ErrUnregisteredInterceptor: the policy's resolved chain names an
	// interceptor the agent did not register (or registered without the hook
	// its phase needs); Start refuses to start (fail closed).
	ErrUnregisteredInterceptor = errors.New("agent: resolved chain names an interceptor this agent did not register")
)

// Refusal is a local refusal: the SDK did not dispatch the call. errors.Is
// matches Reason (ErrGrantExhausted, ErrPermissionDenied, ...).
type Refusal struct {
	// Reason is one of the Err* refusal sentinels.
	Reason error
	// Call is the tool name, or "model/<name>" for a model request.
	Call string
	// Interceptor names the interceptor that denied or vetoed, if any.
	Interceptor string
	// Message explains the refusal with numbers or the rule that decided.
	Message string
}

func (r *Refusal) Error() string {
	if r.Message == "" {
		return fmt.Sprintf("%s refused: %v", r.Call, r.Reason)
	}
	return fmt.Sprintf("%s refused: %v: %s", r.Call, r.Reason, r.Message)
}

// Unwrap returns Reason.
func (r *Refusal) Unwrap() error { return r.Reason }

// IsRefusal reports whether err is (or wraps) a local refusal.
func IsRefusal(err error) bool {
	var r *Refusal
	return errors.As(err, &r)
}

// Stopped reports whether err (typically context.Cause of the context Start
// returned) says the attempt must stop: the run is Terminated (or its
// RunAttempt deleted: the gateway says run_terminated) or the attempt was
// superseded. An agent exits cleanly (status 0)
// when Stopped is true.
func Stopped(err error) bool {
	return errors.Is(err, ErrTerminated) || errors.Is(err, ErrSuperseded)
}

// FaultError is an error that says how to report it: tools and model providers
// return it (see Failure) so the fault the SDK records names a kind and says
// whether the agent may retry.
type FaultError struct {
	// Kind is a short PascalCase cause, e.g. Timeout, RateLimited.
	Kind string
	// Retryable says whether the agent may retry.
	Retryable bool
	// Err is the underlying error.
	Err error
}

func (e *FaultError) Error() string {
	if e.Err == nil {
		return e.Kind
	}
	return e.Err.Error()
}

// Unwrap returns Err.
func (e *FaultError) Unwrap() error { return e.Err }

// Failure wraps err as a FaultError of kind.
func Failure(kind string, retryable bool, err error) error {
	return &FaultError{Kind: kind, Retryable: retryable, Err: err}
}

// VetoError is what a Pre interceptor returns to veto a call (see Veto).
type VetoError struct {
	// Reason is shown in the refusal.
	Reason string
}

func (e *VetoError) Error() string { return "veto: " + e.Reason }

// Veto returns the error a Pre interceptor returns to veto the call. It ends
// the call only if the resolved chain gives the interceptor veto rights
// (veto: true); otherwise the veto is ignored, logged and counted.
func Veto(reason string) error { return &VetoError{Reason: reason} }

// faultOf returns how err should be reported: its kind and retryability.
func faultOf(err error, defaultKind string) (kind string, retryable bool) {
	var fe *FaultError
	if errors.As(err, &fe) && fe.Kind != "" {
		return fe.Kind, fe.Retryable
	}
	return defaultKind, false
}

// refusalKind is the fault kind a refusal reason is counted under.
func refusalKind(reason error) (v1alpha1.FaultScope, string) {
	switch {
	case errors.Is(reason, ErrGrantExhausted):
		return v1alpha1.FaultScopeAgent, "GrantExhausted"
	case errors.Is(reason, ErrPermissionDenied):
		return v1alpha1.FaultScopeAgent, "PermissionDenied"
	case errors.Is(reason, ErrApprovalDenied):
		return v1alpha1.FaultScopeAgent, "ApprovalDenied"
	case errors.Is(reason, ErrFinalizeOnly):
		return v1alpha1.FaultScopeAgent, "FinalizeOnly"
	case errors.Is(reason, ErrUnknownTool):
		return v1alpha1.FaultScopeAgent, "UnknownTool"
	case errors.Is(reason, ErrInterceptorDenied):
		return v1alpha1.FaultScopeHook, "InterceptorDenied"
	case errors.Is(reason, ErrVetoed):
		return v1alpha1.FaultScopeHook, "Vetoed"
	}
	return v1alpha1.FaultScopeAgent, "Refused"
}
