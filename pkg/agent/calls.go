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
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/pkg/permission"
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

// ModelOption adjusts one model request.
type ModelOption func(*modelOptions)

type modelOptions struct {
	output bool
}

// ForOutput marks a model request as output work (writing what will be
// published), the only kind of model request allowed while the run is
// Finalizing.
func ForOutput() ModelOption {
	return func(o *modelOptions) { o.output = true }
}

// ModelRequest makes one model request: within the grant (a request beyond
// spec.grant.modelRequests, or with spec.grant.tokens used up, is refused
// with ErrGrantExhausted), while Finalizing only if marked ForOutput
// (ErrFinalizeOnly), through the interceptor chain, counted in
// usage.modelRequests when dispatched (a failed request counts too: each
// retry is a request). do performs the request and returns the tokens it
// used; an error do returns is recorded as a Provider fault (see Failure for
// its kind) and returned.
func (a *Agent) ModelRequest(ctx context.Context, model string,
	do func(ctx context.Context) (tokens int64, err error), opts ...ModelOption) error {
	if err := a.usable(ctx); err != nil {
		return err
	}
	var o modelOptions
	for _, opt := range opts {
		opt(&o)
	}
	call := &Call{Kind: KindModel, Name: model, ID: a.nextID("model")}
	if spec := a.Spec(); isFinalizing(spec) && !o.output {
		return a.refuse(ErrFinalizeOnly, call, "", fmt.Sprintf(
			"the run is Finalizing (phase %s, finalizeOnly %t): only output work runs from the reserve, "+
				"and this model request is not marked as output (agent.ForOutput)", spec.RunPhase, spec.Grant.FinalizeOnly))
	}
	if err := a.reserve(call); err != nil {
		return err
	}
	dispatched := false
	defer func() {
		if !dispatched {
			a.unreserve(call)
		}
	}()
	_, err := a.intercept(ctx, call, func(ctx context.Context) (string, error) {
		a.mu.Lock()
		// Interceptors may have waited (a rate limit): the phase and grant
		// are checked again at the moment of dispatch.
		if msg, reason := a.dispatchLocked(KindModel, o.output); reason != nil {
			a.mu.Unlock()
			return "", a.refuse(reason, call, "", msg)
		}
		a.reserved.ModelRequests--
		a.facts.usage.ModelRequests++
		dispatched = true
		a.markLocked(false)
		a.mu.Unlock()
		a.metrics.calls.WithLabelValues(string(KindModel), model).Inc()

		tokens, err := safeModel(ctx, do)
		a.mu.Lock()
		defer a.mu.Unlock()
		if tokens > 0 {
			a.facts.usage.Tokens += tokens
		}
		if err != nil {
			kind, retryable := faultOf(err, "Error")
			a.facts.addFault(v1alpha1.FaultScopeProvider, kind, retryable, false, err.Error())
		}
		a.markLocked(false)
		return "", err
	})
	return err
}

// CallTool calls a registered tool with args (any JSON-encodable value that
// encodes as an object, or nil), in this order:
//
//  1. the tool must be registered and in the policy's catalogue (ErrUnknownTool);
//  2. while Finalizing only Output tools run (ErrFinalizeOnly);
//  3. the grant must allow one more tool call (ErrGrantExhausted);
//  4. permission.Evaluate(spec.mode, tool, spec.policy.autoApprove): Deny is
//     refused (ErrPermissionDenied); Confirm adds the action id to
//     status.awaitingApproval (written at once) and waits, ctx-cancellable,
//     until spec.approvals answers it: Approve runs, Deny is refused
//     (ErrApprovalDenied);
//  5. the Pre and Around interceptors run (a fail-closed one that errors
//     denies, naming itself; a vetoing one with veto rights vetoes);
//  6. for a side-effecting tool (effect != None) a write-ahead record is
//     added to status.inFlight and persisted before the tool runs; it is
//     removed with the outcome after;
//  7. the tool runs, counted in usage.toolCalls and status.calls; its error
//     is a Tool fault; the Post interceptors see the outcome.
//
// Refusals are recorded as Faults and returned as *Refusal; they are never
// run failures. Idempotent tools (per the catalogue) get an idempotency key
// derived from the run and the call's fingerprint.
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
		a.recordFault(v1alpha1.FaultScopeTool, "InvalidArguments", false, false, fmt.Sprintf("%s: %v", name, err))
		return "", fmt.Errorf("agent: arguments of %s: %w", name, err)
	}
	fp := fingerprintOf(name, canon, o.context)
	call := &Call{Kind: KindTool, Name: name, Args: m, Fingerprint: fp, ID: a.nextID("call")}

	a.mu.Lock()
	tool, registered := a.tools[name]
	spec := *a.obj.Spec.DeepCopy()
	a.mu.Unlock()
	ci := slices.IndexFunc(spec.Policy.Tools, func(t v1alpha1.Tool) bool { return t.Name == name })
	switch {
	case !registered:
		return "", a.refuse(ErrUnknownTool, call, "", fmt.Sprintf("tool %q is not registered with this agent", name))
	case ci < 0:
		return "", a.refuse(ErrUnknownTool, call, "",
			fmt.Sprintf("tool %q is not in RuntimePolicy %q's tool catalogue", name, spec.Policy.Name))
	}
	tc := &toolCall{call: call, tool: tool, entry: spec.Policy.Tools[ci]}
	call.Effect, call.Risk = tc.entry.Effect, tc.entry.Risk
	if tc.entry.Idempotent {
		call.IdempotencyKey = IdempotencyKey(spec.RunName, fp)
	}

	verdict, err := a.checkTool(tc, spec)
	if err != nil {
		return "", err
	}
	if verdict == permission.Confirm {
		if err := a.confirm(ctx, tc); err != nil {
			return "", err
		}
		// Time passed while waiting: the phase, grant or mode may have changed.
		if _, err := a.checkTool(tc, a.Spec()); err != nil {
			return "", err
		}
	}

	if err := a.reserve(call); err != nil {
		return "", err
	}
	dispatched := false
	defer func() {
		if !dispatched {
			a.unreserve(call)
		}
	}()
	return a.intercept(ctx, call, func(ctx context.Context) (string, error) {
		return a.dispatchTool(ctx, tc, &dispatched)
	})
}

// toolCall is a tool call on its way through CallTool.
type toolCall struct {
	call      *Call
	tool      Tool
	entry     v1alpha1.Tool
	confirmed bool // an approval answered it
}

// checkTool applies the phase, the grant and the permission matrix.
func (a *Agent) checkTool(tc *toolCall, spec v1alpha1.RunAttemptSpec) (permission.Verdict, error) {
	if isFinalizing(spec) && !tc.tool.Output {
		return "", a.refuse(ErrFinalizeOnly, tc.call, "", fmt.Sprintf(
			"the run is Finalizing (phase %s, finalizeOnly %t): only output work runs from the reserve, "+
				"and %q is not an output tool",
			spec.RunPhase, spec.Grant.FinalizeOnly, tc.call.Name))
	}
	if err := a.grantAllows(tc.call); err != nil {
		return "", err
	}
	r := permission.Evaluate(spec.Mode, tc.entry, spec.Policy.AutoApprove)
	if r.Verdict == permission.Deny {
		return r.Verdict, a.refuse(ErrPermissionDenied, tc.call, "", r.Reason)
	}
	return r.Verdict, nil
}

// confirm asks for approval of the call and waits for the answer.
func (a *Agent) confirm(ctx context.Context, tc *toolCall) error {
	actionID := ActionID(tc.call.Name, tc.call.Fingerprint)
	ap, err := a.awaitApproval(ctx, actionID)
	if err != nil {
		return err
	}
	if ap.Decision != v1alpha1.DecisionApprove {
		msg := fmt.Sprintf("action %s was denied", actionID)
		if ap.Approver != "" {
			msg += " by " + ap.Approver
		}
		if ap.Comment != "" {
			msg += ": " + ap.Comment
		}
		return a.refuse(ErrApprovalDenied, tc.call, "", msg)
	}
	tc.confirmed = true
	return nil
}

// dispatchTool runs an admitted call: the last checks at the moment of
// dispatch, the count, the write-ahead record for a side effect, the tool,
// and its outcome.
func (a *Agent) dispatchTool(ctx context.Context, tc *toolCall, dispatched *bool) (string, error) {
	call, name := tc.call, tc.call.Name
	sideEffect := call.Effect != v1alpha1.EffectNone
	if err := a.lockWithSlot(ctx, sideEffect); err != nil {
		return "", err
	}
	// Interceptors may have waited (a rate limit): the phase, grant and
	// mode are checked again at the moment of dispatch.
	msg, reason := a.dispatchLocked(KindTool, tc.tool.Output)
	if reason == nil {
		r := permission.Evaluate(a.obj.Spec.Mode, tc.entry, a.obj.Spec.Policy.AutoApprove)
		if r.Verdict == permission.Deny || (r.Verdict == permission.Confirm && !tc.confirmed) {
			msg, reason = r.Reason+" (the mode changed before the call was dispatched)", ErrPermissionDenied
		}
	}
	if reason != nil {
		a.mu.Unlock()
		return "", a.refuse(reason, call, "", msg)
	}
	a.reserved.ToolCalls--
	a.facts.usage.ToolCalls++
	*dispatched = true
	a.facts.countCall(name, call.Fingerprint)
	var target uint64
	if sideEffect {
		a.facts.inFlight = append(a.facts.inFlight, v1alpha1.InFlightEffect{
			ID: call.ID, Tool: name, Effect: call.Effect, IdempotencyKey: call.IdempotencyKey,
			StartedAt: &metav1.Time{Time: a.clock.Now()},
		})
		a.markLocked(true)
		target = a.seq
	} else {
		a.markLocked(false)
	}
	a.mu.Unlock()
	a.metrics.calls.WithLabelValues(string(KindTool), name).Inc()

	if sideEffect {
		// Write-ahead: the record must be on the API server before the
		// effect can happen, or a crash would leave an effect nobody knows of.
		if err := a.waitPersisted(ctx, target); err != nil {
			a.mu.Lock()
			a.facts.removeInFlight(call.ID)
			a.markLocked(false)
			a.broadcastLocked()
			a.mu.Unlock()
			return "", fmt.Errorf("agent: write-ahead record of %s %s was not persisted, so the call was not dispatched: %w",
				name, call.ID, err)
		}
	}

	res, err := safeTool(ctx, tc.tool, call)

	a.mu.Lock()
	defer a.mu.Unlock()
	if sideEffect {
		a.facts.removeInFlight(call.ID)
		a.broadcastLocked()
	}
	if err != nil {
		kind, retryable := faultOf(err, "Failed")
		a.facts.addFault(v1alpha1.FaultScopeTool, kind, retryable, false, fmt.Sprintf("%s: %v", name, err))
	}
	a.markLocked(false)
	return res, err
}

// canonicalArgs returns the canonical JSON of args and its decoded object.
func canonicalArgs(args any) ([]byte, map[string]any, error) {
	canon, err := CanonicalJSON(args)
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

// grantAllows checks (without reserving) that one more call fits the grant.
func (a *Agent) grantAllows(call *Call) error {
	a.mu.Lock()
	msg := a.grantLocked(call.Kind)
	a.mu.Unlock()
	if msg != "" {
		return a.refuse(ErrGrantExhausted, call, "", msg)
	}
	return nil
}

// reserve admits one call within the grant; the reservation becomes usage
// when the call is dispatched, or is given back.
func (a *Agent) reserve(call *Call) error {
	a.mu.Lock()
	msg := a.grantLocked(call.Kind)
	if msg == "" {
		if call.Kind == KindModel {
			a.reserved.ModelRequests++
		} else {
			a.reserved.ToolCalls++
		}
	}
	a.mu.Unlock()
	if msg != "" {
		return a.refuse(ErrGrantExhausted, call, "", msg)
	}
	return nil
}

// dispatchLocked checks, at the moment of dispatch, that the phase allows
// the call and that it fits the grant (usage, not counting reservations:
// whatever happened meanwhile, usage never exceeds the grant).
func (a *Agent) dispatchLocked(kind CallKind, output bool) (msg string, reason error) {
	spec := a.obj.Spec
	if isFinalizing(spec) && !output {
		return fmt.Sprintf("the run started Finalizing (phase %s) before the call was dispatched, "+
			"and it is not output work", spec.RunPhase), ErrFinalizeOnly
	}
	g, u := spec.Grant, a.facts.usage
	switch {
	case kind == KindModel && u.ModelRequests >= g.ModelRequests:
		return fmt.Sprintf("%d of %d granted model requests used", u.ModelRequests, g.ModelRequests), ErrGrantExhausted
	case kind == KindModel && g.Tokens != nil && u.Tokens >= *g.Tokens:
		return fmt.Sprintf("%d of %d granted tokens used", u.Tokens, *g.Tokens), ErrGrantExhausted
	case kind == KindTool && u.ToolCalls >= g.ToolCalls:
		return fmt.Sprintf("%d of %d granted tool calls used", u.ToolCalls, g.ToolCalls), ErrGrantExhausted
	}
	return "", nil
}

func (a *Agent) unreserve(call *Call) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if call.Kind == KindModel {
		a.reserved.ModelRequests--
	} else {
		a.reserved.ToolCalls--
	}
}

// grantLocked says why one more call of kind would exceed the grant, or "".
func (a *Agent) grantLocked(kind CallKind) string {
	g, u, r := a.obj.Spec.Grant, a.facts.usage, a.reserved
	if kind == KindModel {
		if u.ModelRequests+r.ModelRequests >= g.ModelRequests {
			return fmt.Sprintf("%d of %d granted model requests used", u.ModelRequests+r.ModelRequests, g.ModelRequests)
		}
		if g.Tokens != nil && u.Tokens >= *g.Tokens {
			return fmt.Sprintf("%d of %d granted tokens used", u.Tokens, *g.Tokens)
		}
		return ""
	}
	if u.ToolCalls+r.ToolCalls >= g.ToolCalls {
		return fmt.Sprintf("%d of %d granted tool calls used", u.ToolCalls+r.ToolCalls, g.ToolCalls)
	}
	return ""
}

// refuse records a local refusal as a fact and returns it.
func (a *Agent) refuse(reason error, call *Call, interceptor, msg string) error {
	r := &Refusal{Reason: reason, Call: call.Name, Interceptor: interceptor, Message: msg}
	if call.Kind == KindModel {
		r.Call = "model/" + call.Name
	}
	scope, kind := refusalKind(reason)
	a.metrics.refusals.WithLabelValues(kind).Inc()
	a.recordFault(scope, kind, false, false, r.Error())
	a.log.Info("Refused call", "call", r.Call, "reason", kind, "message", msg)
	return r
}

// awaitApproval asks for approval of actionID (status.awaitingApproval,
// written at once) and waits until spec.approvals answers it.
func (a *Agent) awaitApproval(ctx context.Context, actionID string) (v1alpha1.Approval, error) {
	added := false
	defer func() {
		if added {
			a.mu.Lock()
			if a.facts.removeAwaiting(actionID) {
				a.markLocked(false)
				a.broadcastLocked()
			}
			a.mu.Unlock()
		}
	}()
	for {
		a.mu.Lock()
		if ap, ok := findApproval(a.obj.Spec.Approvals, actionID); ok {
			a.mu.Unlock()
			return ap, nil
		}
		if !added && !slices.Contains(a.facts.awaiting, actionID) && len(a.facts.awaiting) < MaxAwaitingApproval {
			a.facts.awaiting = append(a.facts.awaiting, actionID)
			added = true
			a.markLocked(true)
			a.log.Info("Awaiting approval", "action", actionID)
		}
		ch, runCtx := a.wake, a.runCtx
		a.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return v1alpha1.Approval{}, context.Cause(ctx)
		case <-runCtx.Done():
			return v1alpha1.Approval{}, context.Cause(runCtx)
		}
	}
}

// findApproval returns the latest answer to actionID.
func findApproval(approvals []v1alpha1.Approval, actionID string) (v1alpha1.Approval, bool) {
	for _, ap := range slices.Backward(approvals) {
		if ap.ActionID == actionID {
			return ap, true
		}
	}
	return v1alpha1.Approval{}, false
}

// ApprovalFor returns the answer spec.approvals holds for actionID, if any.
func (a *Agent) ApprovalFor(actionID string) (v1alpha1.Approval, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.obj == nil {
		return v1alpha1.Approval{}, false
	}
	return findApproval(a.obj.Spec.Approvals, actionID)
}

// lockWithSlot locks a.mu, first waiting for a free in-flight slot when the
// call has a side effect. On success a.mu is held.
func (a *Agent) lockWithSlot(ctx context.Context, sideEffect bool) error {
	for {
		a.mu.Lock()
		if !sideEffect || len(a.facts.inFlight) < MaxInFlight {
			return nil
		}
		ch, runCtx := a.wake, a.runCtx
		a.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-runCtx.Done():
			return context.Cause(runCtx)
		}
	}
}

func safeTool(ctx context.Context, t Tool, call *Call) (res string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = Failure("Panic", false, fmt.Errorf("tool %s panicked: %v", t.Name, r))
		}
	}()
	return t.Run(ctx, call)
}

func safeModel(ctx context.Context, do func(context.Context) (int64, error)) (tokens int64, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = Failure("Panic", false, fmt.Errorf("model request panicked: %v", r))
		}
	}()
	return do(ctx)
}
