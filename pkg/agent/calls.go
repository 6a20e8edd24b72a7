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
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/agentrun-dev/agentrun/pkg/textutil"

	"github.com/openai/openai-go/v3"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// CallOption adjusts one tool call.
type CallOption func(*callOptions)

type callOptions struct {
	context string
}

// WithContext adds context to the call's fingerprint: the same tool and
// arguments in a different context (e.g. another report section) is a
// different call for repeat detection, approvals and idempotency keys.
// Keep it stable across attempts (no attempt numbers, no timestamps).
func WithContext(callContext string) CallOption {
	return func(o *callOptions) { o.context = callContext }
}

// ModelRequest runs do — one request to the gateway's model door, made with
// the client OpenAI returns — through the policy's interceptor chain. The
// gateway enforces the grant, counts the request (a failed one too) and the
// tokens the provider reports; ModelRequest maps its refusals to *Refusal
// (errors.Is ErrGrantExhausted, …) and a provider error to a *FaultError
// saying whether a retry may succeed. Every try is a model request counted
// against the grant.
func (a *Agent) ModelRequest(ctx context.Context, model string, do func(ctx context.Context) error) error {
	if err := a.usable(ctx); err != nil {
		return err
	}
	call := &Call{Kind: KindModel, Name: model, ID: a.nextID("model")}
	_, err := a.intercept(ctx, call, func(ctx context.Context) (string, error) {
		return "", safeModel(ctx, do)
	})
	if err == nil {
		a.metrics.calls.WithLabelValues(string(KindModel), model).Inc()
		return nil
	}
	return a.modelError(call, err)
}

// modelError maps an OpenAI client error from the gateway.
func (a *Agent) modelError(call *Call, err error) error {
	var oe *openai.Error
	if !errors.As(err, &oe) {
		var ne net.Error
		if errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
			errors.Is(err, syscall.ECONNRESET) {
			// The gateway could not be reached or went away (a restart):
			// retryable; whether the request was dispatched is the
			// gateway's to count.
			return Failure("GatewayUnavailable", true, fmt.Errorf("model %s: %w", call.Name, err))
		}
		return err
	}
	if reason := sentinelOf(oe.Code); reason != nil {
		if errors.Is(reason, ErrTerminated) || errors.Is(reason, ErrSuperseded) {
			a.stop(reason)
			return reason
		}
		return a.refused(reason, call, "", oe.Message)
	}
	a.metrics.calls.WithLabelValues(string(KindModel), call.Name).Inc()
	kind, retryable := gatewayapi.ProviderFault(oe.StatusCode)
	switch k := gatewayapi.FaultKind(oe.Code); {
	case oe.Code == gatewayapi.CodeUpstreamUnavailable:
		// The gateway could not reach the provider: the kind it recorded.
		kind = "Unavailable"
		if oe.StatusCode == http.StatusGatewayTimeout {
			kind = "Timeout"
		}
	case k != "":
		kind = k
	}
	// The openai error's text is only the status; the provider's message
	// says why (it is in the gateway's fault too).
	werr := fmt.Errorf("model %s: %w", call.Name, oe)
	if msg := strings.TrimSpace(oe.Message); msg != "" {
		werr = fmt.Errorf("model %s: %w: %s", call.Name, oe, textutil.Truncate(msg, 256))
	}
	return Failure(kind, retryable, werr)
}

// CallTool calls a registered tool with args (any JSON-encodable value that
// encodes as an object, or nil):
//
//  1. the tool must be registered with the agent (ErrUnknownTool);
//  2. the Pre and Around interceptors run (a fail-closed one that errors
//     denies, naming itself; a vetoing one with veto rights vetoes);
//  3. the call is reported to the gateway, which checks the catalogue
//     (ErrUnknownTool), Finalizing (ErrFinalizeOnly: only report.publish),
//     the grant (ErrGrantExhausted) and the permission matrix
//     (ErrPermissionDenied), waits for an approval when one is needed
//     (ErrApprovalDenied), counts the call and its fingerprint and, for a
//     side-effecting tool, persists a write-ahead record;
//  4. the tool runs; its outcome is reported (its error is a Tool fault) and
//     the Post interceptors see it.
//
// Refusals are returned as *Refusal; they are never run failures.
func (a *Agent) CallTool(ctx context.Context, name string, args any, opts ...CallOption) (string, error) {
	if err := a.usable(ctx); err != nil {
		return "", err
	}
	var o callOptions
	for _, opt := range opts {
		opt(&o)
	}
	canon, m, err := canonicalArgs(args)
	if err != nil {
		_ = a.RecordFault(ctx, v1alpha1.FaultScopeTool, "InvalidArguments", false, fmt.Sprintf("%s: %v", name, err))
		return "", fmt.Errorf("agent: arguments of %s: %w", name, err)
	}
	call := &Call{Kind: KindTool, Name: name, Args: m, ID: a.nextID("call"),
		Fingerprint: gatewayapi.FingerprintOf(name, canon, o.context)}
	a.mu.Lock()
	tool, registered := a.tools[name]
	if i := slices.IndexFunc(a.view.Tools, func(t v1alpha1.Tool) bool { return t.Name == name }); i >= 0 {
		call.Effect, call.Risk = a.view.Tools[i].Effect, a.view.Tools[i].Risk
	}
	served := doorServes(a.view.Tools, name)
	a.mu.Unlock()
	if served {
		// The gateway admits, dispatches and records the call.
		return a.intercept(ctx, call, func(ctx context.Context) (string, error) {
			var res string
			err := a.askAgain(ctx, call, func() (err error) {
				res, err = a.callDoor(ctx, call, o.context)
				return err
			})
			if err == nil && registered && tool.Done != nil {
				tool.Done(ctx, call, res)
			}
			return res, err
		})
	}
	if !registered {
		err := a.refused(ErrUnknownTool, call, "", fmt.Sprintf("tool %q is not registered with this agent", name))
		_ = a.RecordFault(ctx, v1alpha1.FaultScopeAgent, "UnknownTool", false, err.Error())
		return "", err
	}
	return a.intercept(ctx, call, func(ctx context.Context) (string, error) {
		// What runs is what interceptors left of the arguments: that is
		// what the gateway fingerprints, approves and counts.
		now, _, err := canonicalArgs(call.Args)
		if err != nil {
			now = canon
		}
		admitted, err := a.admit(ctx, call, now, o.context)
		if err != nil {
			return "", err
		}
		call.ID, call.Fingerprint, call.IdempotencyKey = admitted.ID, admitted.Fingerprint, admitted.IdempotencyKey
		call.Effect, call.Risk = admitted.Effect, admitted.Risk
		a.metrics.calls.WithLabelValues(string(KindTool), name).Inc()

		res, terr := safeTool(ctx, tool, call)

		var out gatewayapi.ToolOutcomeRequest
		if terr != nil {
			kind, retryable := faultOf(terr, "Failed")
			out.Error = &gatewayapi.ToolError{Kind: kind, Retryable: retryable, Message: textutil.Truncate(terr.Error(), 512)}
		}
		// The outcome must reach the gateway even when ctx ends: it removes
		// the write-ahead record.
		path := "/self/toolcalls/" + admitted.ID + "/outcome"
		if err := a.call(context.WithoutCancel(ctx), http.MethodPost, path, out, nil); err != nil {
			a.log.Error(err, "Could not report a tool call's outcome", "tool", name, "call", admitted.ID)
		}
		return res, terr
	})
}

// admit reports the call to the gateway before it is dispatched, reporting
// it again while it awaits an approval.
func (a *Agent) admit(ctx context.Context, call *Call, canon []byte, callContext string) (*gatewayapi.ToolCall, error) {
	req := gatewayapi.ToolCallRequest{Tool: call.Name, Arguments: canon, Context: callContext, WaitSeconds: 300}
	for {
		var out gatewayapi.ToolCall
		err := a.call(ctx, http.MethodPost, "/self/toolcalls", req, &out)
		if err == nil {
			return &out, nil
		}
		var ge *GatewayError
		if !errors.As(err, &ge) {
			return nil, err
		}
		if ge.Code == gatewayapi.CodeApprovalPending && ctx.Err() == nil {
			continue
		}
		if reason := sentinelOf(ge.Code); reason != nil {
			if errors.Is(reason, ErrTerminated) || errors.Is(reason, ErrSuperseded) {
				a.stop(reason)
				return nil, reason
			}
			return nil, a.refused(reason, call, "", ge.Message)
		}
		return nil, err
	}
}

// askAgainFor bounds how long a tool call is asked again while a
// fail-closed interceptor of the gateway cannot check it
// (interceptor_unavailable: its authority, the API server, is away).
const askAgainFor = 2 * time.Minute

// askAgain runs try, and runs it again with backoff while the gateway
// answers interceptor_unavailable — the chain runs before the call is
// admitted, so nothing was dispatched or counted and asking again cannot do
// anything twice — for at most askAgainFor; the call is then refused
// (ErrInterceptorDenied), as the policy's fail-closed posture says.
// not_persisted is not asked again here: that admission was counted (the
// count errs on the side of the grant), so the caller decides.
func (a *Agent) askAgain(ctx context.Context, call *Call, try func() error) error {
	wait, until := 200*time.Millisecond, a.clock.Now().Add(askAgainFor)
	for {
		err := try()
		var ge *GatewayError
		if err == nil || !errors.As(err, &ge) || ge.Code != gatewayapi.CodeInterceptorUnavailable {
			return err
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if !a.clock.Now().Before(until) {
			return a.refused(ErrInterceptorDenied, call, "", ge.Message)
		}
		a.log.Info("The gateway dispatched nothing for now; asking again",
			"tool", call.Name, "code", ge.Code, "message", ge.Message)
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-a.clock.After(wait):
		}
		wait = min(wait*2, 5*time.Second)
	}
}

// canonicalArgs returns the canonical JSON of args and its decoded object.
func canonicalArgs(args any) ([]byte, map[string]any, error) {
	canon, err := gatewayapi.CanonicalJSON(args)
	if err != nil {
		return nil, nil, err
	}
	if bytes.Equal(canon, []byte("null")) {
		return []byte("{}"), map[string]any{}, nil
	}
	var m map[string]any
	if err := json.Unmarshal(canon, &m); err != nil {
		return nil, nil, fmt.Errorf("arguments must be a JSON object: %w", err)
	}
	return canon, m, nil
}

func (a *Agent) nextID(prefix string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.callSeq++
	return fmt.Sprintf("%s-%d", prefix, a.callSeq)
}

// refused returns a refusal (the gateway recorded its own refusals as facts).
func (a *Agent) refused(reason error, call *Call, interceptor, msg string) error {
	r := &Refusal{Reason: reason, Call: call.Name, Interceptor: interceptor, Message: msg}
	if call.Kind == KindModel {
		r.Call = "model/" + call.Name
	}
	_, kind := refusalKind(reason)
	a.metrics.refusals.WithLabelValues(kind).Inc()
	a.log.Info("Refused call", "call", r.Call, "reason", kind, "message", msg)
	return r
}

// refuse returns a refusal the SDK itself made (an interceptor), recording
// it as a fact with the gateway.
func (a *Agent) refuse(reason error, call *Call, interceptor, msg string) error {
	r := a.refused(reason, call, interceptor, msg)
	scope, kind := refusalKind(reason)
	a.recordFault(scope, kind, false, r.Error())
	return r
}

// recordFault reports a fault without waiting on the caller's context.
func (a *Agent) recordFault(scope v1alpha1.FaultScope, kind string, retryable bool, msg string) {
	a.mu.Lock()
	bg := a.runCtx
	a.mu.Unlock()
	if bg == nil {
		bg = context.Background()
	}
	if err := a.RecordFault(context.WithoutCancel(bg), scope, kind, retryable, msg); err != nil {
		a.log.Error(err, "Could not report a fault", "kind", kind)
	}
}

func safeTool(ctx context.Context, t Tool, call *Call) (res string, err error) {
	if t.Run == nil {
		return "", Failure("NotServed", false,
			fmt.Errorf("tool %s has no Run and the gateway does not serve it (no tools[].server in the policy)", t.Name))
	}
	defer func() {
		if r := recover(); r != nil {
			err = Failure("Panic", false, fmt.Errorf("tool %s panicked: %v", t.Name, r))
		}
	}()
	return t.Run(ctx, call)
}

func safeModel(ctx context.Context, do func(context.Context) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = Failure("Panic", false, fmt.Errorf("model request panicked: %v", r))
		}
	}()
	return do(ctx)
}
