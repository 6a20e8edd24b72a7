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
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
	"github.com/agentrun-dev/agentrun/pkg/permission"
	"github.com/agentrun-dev/agentrun/pkg/textutil"
)

// maxBody bounds an agent API request body.
const maxBody = 1 << 20

// decode reads a strict JSON body into v: unknown fields and trailing data
// are refused, and the error names the field.
func decode(r *http.Request, v any) *apiError {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return errInvalid("", "could not read the request body: "+err.Error())
	}
	if len(body) > maxBody {
		return errInvalid("", fmt.Sprintf("the request body exceeds %d bytes", maxBody))
	}
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &te) && te.Field == "":
			return errInvalid("", fmt.Sprintf("the body must be a JSON object, not a JSON %s", te.Value))
		case errors.As(err, &te):
			return errInvalid(te.Field, fmt.Sprintf("field %s must be a %s, not a JSON %s", te.Field, te.Type, te.Value))
		case errors.As(err, &se):
			return errInvalid("", fmt.Sprintf("malformed JSON at byte %d: %v", se.Offset, err))
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			f := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return errInvalid(f, fmt.Sprintf("unknown field %q", f))
		}
		return errInvalid("", "malformed JSON: "+err.Error())
	}
	if dec.More() {
		return errInvalid("", "trailing data after the JSON object")
	}
	return nil
}

// ended refuses a fact reported after the run was Terminated (nothing can
// change its outcome any more). A superseded attempt's facts are still
// accepted: its usage counts, though it cannot drive the phase.
func (k *keeper) ended(w http.ResponseWriter) bool {
	k.mu.Lock()
	var e *apiError
	if k.deleted || k.obj.Spec.RunPhase == v1alpha1.PhaseTerminated {
		e = k.stoppedLocked()
	}
	k.mu.Unlock()
	if e != nil {
		writeError(w, e)
		return true
	}
	return false
}

func (g *Gateway) getSelf(w http.ResponseWriter, r *http.Request, k *keeper) {
	k.refresh(r.Context())
	writeJSON(w, k.view())
}

// watchSelf streams the agent's view as server-sent events: the current view
// at once, then every change, until the attempt ends or the client leaves.
// A comment line every 15s keeps idle connections open through proxies.
func (g *Gateway) watchSelf(w http.ResponseWriter, r *http.Request, k *keeper) {
	fl, ok := w.(http.Flusher)
	if !ok {
		writeError(w, newError(http.StatusInternalServerError, gatewayapi.TypeServer, "no_streaming", "the server cannot stream"))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fl.Flush()
	ctx := r.Context()
	var last uint64
	sent := false
	keepalive := g.clock.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	poll := g.clock.NewTicker(g.opts.PollInterval)
	defer poll.Stop()
	for {
		k.mu.Lock()
		v := k.viewLocked()
		ch := k.wake
		k.mu.Unlock()
		if !sent || v.Revision != last {
			raw, _ := json.Marshal(v)
			if _, err := fmt.Fprintf(w, "id: %d\nevent: attempt\ndata: %s\n\n", v.Revision, raw); err != nil {
				return
			}
			fl.Flush()
			sent, last = true, v.Revision
			if v.Stopped() {
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-g.drain:
			return
		case <-ch:
		case <-poll.C():
			k.refresh(ctx)
		case <-keepalive.C():
			if _, err := io.WriteString(w, ": keepalive\n\n"); err != nil {
				return
			}
			fl.Flush()
		}
	}
}

func (g *Gateway) heartbeat(w http.ResponseWriter, _ *http.Request, k *keeper) {
	if k.ended(w) {
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (g *Gateway) postStep(w http.ResponseWriter, r *http.Request, k *keeper) {
	if k.ended(w) {
		return
	}
	var req gatewayapi.StepRequest
	if e := decode(r, &req); e != nil {
		writeError(w, e)
		return
	}
	// The agent's count adds steps without a model turn; its progress
	// claim is not evidence (progress.go).
	var step int64
	k.record(func() {
		k.facts.steps = max(k.facts.steps, k.facts.usage.ModelRequests-1) + 1
		step = k.facts.stepCount()
	})
	writeJSON(w, gatewayapi.StepResponse{Step: step})
}

func (g *Gateway) postFinish(w http.ResponseWriter, r *http.Request, k *keeper) {
	if k.ended(w) {
		return
	}
	if e := decode(r, &struct{}{}); e != nil {
		writeError(w, e)
		return
	}
	if err := k.commit(r.Context(), func() { k.facts.finishProposed = true }); err != nil {
		writeError(w, errNotPersisted("the finish proposal was recorded but is not yet durable: "+err.Error()))
		return
	}
	writeJSON(w, k.view())
}

func (g *Gateway) putCheckpoint(w http.ResponseWriter, r *http.Request, k *keeper) {
	if k.ended(w) {
		return
	}
	var req gatewayapi.CheckpointRequest
	if e := decode(r, &req); e != nil {
		writeError(w, e)
		return
	}
	if len(req.Checkpoint) > maxCheckpoint {
		writeError(w, errInvalid("checkpoint", fmt.Sprintf("checkpoint is %d bytes; at most %d", len(req.Checkpoint), maxCheckpoint)))
		return
	}
	k.record(func() { k.facts.checkpoint = req.Checkpoint })
	w.WriteHeader(http.StatusNoContent)
}

var kindPattern = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]*$`)

func (g *Gateway) postAdvice(w http.ResponseWriter, r *http.Request, k *keeper) {
	if k.ended(w) {
		return
	}
	var req gatewayapi.AdviceRequest
	if e := decode(r, &req); e != nil {
		writeError(w, e)
		return
	}
	switch {
	case req.Source == "" || len(req.Source) > 128:
		writeError(w, errInvalid("source", "source is required, at most 128 characters (e.g. reviewer, stop-hook)"))
		return
	case !kindPattern.MatchString(req.Kind) || len(req.Kind) > 128:
		writeError(w, errInvalid("kind", "kind is required: a PascalCase word of at most 128 characters (e.g. Continue)"))
		return
	}
	k.record(func() { k.facts.addAdvice(req.Source, req.Kind) })
	w.WriteHeader(http.StatusNoContent)
}

var faultScopes = []v1alpha1.FaultScope{
	v1alpha1.FaultScopeTool, v1alpha1.FaultScopeProvider, v1alpha1.FaultScopeReviewer,
	v1alpha1.FaultScopeHook, v1alpha1.FaultScopeAgent,
}

func (g *Gateway) postFault(w http.ResponseWriter, r *http.Request, k *keeper) {
	if k.ended(w) {
		return
	}
	var req gatewayapi.FaultRequest
	if e := decode(r, &req); e != nil {
		writeError(w, e)
		return
	}
	switch {
	case !slices.Contains(faultScopes, req.Scope):
		writeError(w, errInvalid("scope", fmt.Sprintf("scope %q is not one of %v", req.Scope, faultScopes)))
		return
	case !kindPattern.MatchString(req.Kind) || len(req.Kind) > 128:
		writeError(w, errInvalid("kind", "kind is required: a PascalCase word of at most 128 characters (e.g. Timeout)"))
		return
	}
	add := func() { k.facts.addFault(req.Scope, req.Kind, req.Retryable, req.Escalate, req.Message) }
	if !req.Escalate {
		k.record(add)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	k.mu.Lock()
	add()
	// An escalation the API server already holds (escalated, as retryable)
	// is counted with the next flush: repeating it drives no writes.
	urgent := !escalationPersisted(k.persisted.Faults, k.facts.faults, req.Scope, req.Kind)
	k.markLocked(urgent)
	target := k.seq
	k.mu.Unlock()
	if !urgent {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if err := k.waitWritten(r.Context(), target); err != nil {
		writeError(w, errNotPersisted("the escalation was recorded but is not yet durable: "+err.Error()))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// ---- Tool calls (until the MCP door serves them). ----

func (g *Gateway) postToolCall(w http.ResponseWriter, r *http.Request, k *keeper) {
	if e := k.enter("tool"); e != nil {
		writeError(w, e)
		return
	}
	defer k.leave()
	var req gatewayapi.ToolCallRequest
	if e := decode(r, &req); e != nil {
		writeError(w, e)
		return
	}
	if len(req.Context) > 1024 {
		writeError(w, errInvalid("context", "context is at most 1024 characters"))
		return
	}
	k.mu.Lock()
	served := slices.ContainsFunc(k.obj.Spec.Policy.Tools, func(t v1alpha1.Tool) bool { return t.Name == req.Tool && t.Server != "" })
	k.mu.Unlock()
	if served {
		e := newError(http.StatusBadRequest, gatewayapi.TypeInvalidRequest, gatewayapi.CodeUseToolDoor,
			fmt.Sprintf("tool %q is served by a tool server: call it through the gateway's MCP door at %s, which dispatches it",
				req.Tool, gatewayapi.MCPPath))
		writeError(w, e)
		return
	}
	canon, e := canonicalArgs(req.Arguments)
	if e != nil {
		writeError(w, e)
		return
	}
	var args map[string]any
	_ = json.Unmarshal(canon, &args)
	call, _, e := k.admitCall(r.Context(), callRequest{
		tool: req.Tool, canon: canon, context: req.Context, shown: showArguments(args),
		wait: time.Duration(req.WaitSeconds) * time.Second,
	})
	if e != nil {
		k.refusal(e, "tool/"+req.Tool)
		writeError(w, e)
		return
	}
	// The agent dispatches it: the stream shows the call now, its result
	// when the agent reports the outcome.
	k.bindCall(call.ID, k.announce(k.toolCallBlock(req.Tool, args), true))
	writeJSON(w, call)
}

// refusal counts a refusal as a fault of the attempt and in the metrics.
func (k *keeper) refusal(e *apiError, call string) {
	k.mu.Lock()
	policy := k.obj.Spec.Policy.Name
	k.mu.Unlock()
	k.g.metrics.refusals.WithLabelValues(k.key.Namespace, policy, e.body.Code).Inc()
	k.g.metrics.sessionRefusal(k, e.body.Code)
	k.emitRefusal(call, e)
	if e.fault != "" {
		k.record(func() {
			k.facts.addFault(v1alpha1.FaultScopeAgent, e.fault, false, false, call+" refused: "+e.body.Message)
		})
	}
}

func canonicalArgs(raw json.RawMessage) ([]byte, *apiError) {
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return []byte("{}"), nil
	}
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return nil, errInvalid("arguments", "arguments must be a JSON object: "+err.Error())
	}
	canon, err := gatewayapi.CanonicalJSON(m)
	if err != nil {
		return nil, errInvalid("arguments", err.Error())
	}
	return canon, nil
}

// maxApprovalWait bounds how long one agent API tool call report waits for
// an approval (the MCP door waits until the request expires).
const maxApprovalWait = 5 * time.Minute

// callRequest is a tool call to admit.
type callRequest struct {
	tool    string
	canon   []byte         // canonical JSON arguments
	context string         // the fingerprint's context
	shown   shownArguments // what an approver reads of the arguments
	// wait bounds this request's wait for a decision (agent API; default
	// 1m, at most maxApprovalWait); untilExpiry waits until the approval
	// request expires (the MCP door).
	wait        time.Duration
	untilExpiry bool
}

// admitCall applies, in order: the phase, the catalogue, Finalizing (only
// the publication tool), an earlier identical call whose outcome is
// unknown, the grant, the permission matrix (waiting for an approval when it
// says Confirm, then checking again), and counts the call; for a side
// effect it persists the write-ahead record before answering. The call it
// returns on a refusal (or nil) carries the action id.
func (k *keeper) admitCall(ctx context.Context, req callRequest) (_ *gatewayapi.ToolCall, _ v1alpha1.Tool, refusal *apiError) {
	if req.tool == "" {
		return nil, v1alpha1.Tool{}, errInvalid("tool", "tool is required")
	}
	fp := gatewayapi.FingerprintOf(req.tool, req.canon, req.context)
	call := &gatewayapi.ToolCall{Tool: req.tool, Fingerprint: fp, ActionID: gatewayapi.ActionID(req.tool, req.canon)}

	k.mu.Lock()
	entry, e := k.checkToolLocked(req.tool, fp)
	if e != nil {
		k.mu.Unlock()
		return call, entry, k.durableRefusal(ctx, e)
	}
	call.Effect, call.Risk = entry.Effect, entry.Risk
	if entry.Idempotent {
		call.IdempotencyKey = gatewayapi.IdempotencyKey(k.obj.Spec.RunName, fp)
	}
	verdict := permission.Evaluate(k.obj.Spec.Mode, entry, k.obj.Spec.Policy.AutoApprove)
	k.mu.Unlock()
	spent := false
	// A Security interceptor that fails holds the run to the policy's
	// stricter posture (spec.onSecurityDegraded).
	verdict, e = degradedAdmission(k.securityPosture(), entry, verdict)
	if e != nil {
		return call, entry, e
	}
	switch verdict.Verdict {
	case permission.Deny:
		return call, entry, denied(gatewayapi.CodePermissionDenied, "PermissionDenied", verdict.Reason)
	case permission.Confirm:
		ans, e := k.confirm(ctx, call, entry, req)
		if e != nil {
			return call, entry, e
		}
		defer func() { k.settleApproval(call.ActionID, ans, refusal == nil) }()
		// The approval it spent is durable before the call is dispatched,
		// so a restarted gateway never spends it again.
		spent = ans.spend
	}

	// Time may have passed (an approval): check everything again at the
	// moment the call is counted.
	if err := k.lockWithSlot(ctx, entry.Effect != v1alpha1.EffectNone); err != nil {
		return call, entry, errNotPersisted("the request ended while waiting for a free in-flight slot: " + err.Error())
	}
	if _, e := k.checkToolLocked(req.tool, fp); e != nil {
		k.mu.Unlock()
		return call, entry, k.durableRefusal(ctx, e)
	}
	if v := permission.Evaluate(k.obj.Spec.Mode, entry, k.obj.Spec.Policy.AutoApprove); v.Verdict == permission.Deny {
		k.mu.Unlock()
		return call, entry, denied(gatewayapi.CodePermissionDenied, "PermissionDenied", v.Reason+" (the mode changed while the call waited)")
	}
	call.ID = newCallID()
	k.facts.usage.ToolCalls++
	k.facts.countCall(req.tool, fp)
	ad := &admitted{tool: req.tool}
	if req.tool == gatewayapi.ToolReportPublish {
		var pa struct {
			Section string `json:"section"`
			Content string `json:"content"`
		}
		_ = json.Unmarshal(req.canon, &pa)
		ad.section, ad.content = pa.Section, pa.Content
	}
	k.calls[call.ID] = ad
	if entry.Effect == v1alpha1.EffectNone {
		target := k.baseUnwrittenLocked()
		if k.g.opts.DurableAdmission || spent {
			k.markLocked(true)
			target = k.seq
		} else {
			k.markLocked(false)
		}
		k.mu.Unlock()
		if target == 0 {
			return call, entry, nil
		}
		if err := k.waitWritten(ctx, target); err != nil {
			return call, entry, errNotPersisted(fmt.Sprintf("the admission of %s %s could not be made durable, so the call must not be dispatched: %v",
				req.tool, call.ID, err))
		}
		return call, entry, nil
	}
	// Write-ahead: the record must be on the API server before the effect
	// can happen, or a crash would leave an effect nobody knows of.
	call.WriteAhead = true
	k.facts.inFlight = append(k.facts.inFlight, v1alpha1.InFlightEffect{
		ID: call.ID, Tool: req.tool, Effect: entry.Effect, IdempotencyKey: call.IdempotencyKey,
		StartedAt: &metav1.Time{Time: k.g.clock.Now()}, Fingerprint: fp,
	})
	k.markLocked(true)
	target := k.seq
	k.mu.Unlock()
	if err := k.waitWritten(ctx, target); err != nil {
		k.record(func() {
			k.facts.removeInFlight(call.ID)
			delete(k.calls, call.ID)
		})
		return call, entry, errNotPersisted(fmt.Sprintf("the write-ahead record of %s %s was not persisted, so the call must not be dispatched: %v",
			req.tool, call.ID, err))
	}
	return call, entry, nil
}

func denied(code, fault, msg string) *apiError {
	e := newError(http.StatusForbidden, gatewayapi.TypePermission, code, msg)
	e.fault = fault
	return e
}

// checkToolLocked checks the phase, the time left before the run's deadline,
// the catalogue, Finalizing, an earlier identical non-idempotent call whose
// outcome is unknown, and the grant.
func (k *keeper) checkToolLocked(tool, fingerprint string) (v1alpha1.Tool, *apiError) {
	if e := k.stoppedLocked(); e != nil {
		return v1alpha1.Tool{}, e
	}
	spec := k.obj.Spec
	if _, e := callWindow(spec, k.g.clock.Now(), k.g.opts.MinCallTime); e != nil {
		return v1alpha1.Tool{}, e
	}
	i := slices.IndexFunc(spec.Policy.Tools, func(t v1alpha1.Tool) bool { return t.Name == tool })
	if i < 0 {
		e := newError(http.StatusNotFound, gatewayapi.TypeNotFound, gatewayapi.CodeUnknownTool,
			fmt.Sprintf("tool %q is not in RuntimePolicy %q's tool catalogue", tool, spec.Policy.Name))
		e.fault = "UnknownTool"
		return v1alpha1.Tool{}, e
	}
	fin := isFinalizing(spec)
	if fin && tool != gatewayapi.ToolReportPublish && tool != gatewayapi.ToolRunChildren {
		return v1alpha1.Tool{}, errGrant(gatewayapi.CodeFinalizeOnly, fmt.Sprintf(
			"the run is finalizing: only output work (%s) is served from the reserve, and %q is research",
			gatewayapi.ToolReportPublish, tool))
	}
	entry := spec.Policy.Tools[i]
	if e := degradedRefusal(spec, entry); e != nil {
		return entry, e
	}
	if !entry.Idempotent {
		for _, r := range k.facts.inFlight {
			if r.Outcome == v1alpha1.OutcomeUnknown && r.Fingerprint == fingerprint {
				e := newError(http.StatusConflict, gatewayapi.TypeConflict, gatewayapi.CodeOutcomeUnknown, fmt.Sprintf(
					"an identical %s call (%s) was dispatched and its outcome is unknown (%s); %s is not idempotent, "+
						"so it is never dispatched again: check its effect another way", tool, r.ID, r.Message, tool))
				e.fault = kindUnknown
				return entry, e
			}
		}
	}
	if u, gr := k.facts.usage.ToolCalls, k.grantLocked().ToolCalls; u >= gr {
		return entry, k.grantRefusalLocked(fin, v1alpha1.BudgetUnitToolCalls, u, gr, fmt.Sprintf("%d/%d tool calls", u, gr))
	}
	return entry, nil
}

// grantRefusalLocked refuses a call beyond the grant, with the numbers. A
// refusal on the working grant is also a fact, the attempt's exhaustion,
// written at once (durableRefusal waits for it): the termination owner
// decides from it, since counts alone do not show a token grant too small
// for any request's bound. The first refusal is kept.
func (k *keeper) grantRefusalLocked(finalizing bool, unit v1alpha1.BudgetUnit, used, granted int64, detail string) *apiError {
	e := grantRefusal(finalizing, detail)
	if !finalizing && k.facts.grantExhausted == nil {
		k.facts.grantExhausted = &v1alpha1.GrantExhaustion{
			Unit: unit, Used: max(used, 0), Granted: max(granted, 0),
			Message: textutil.Truncate(e.body.Message, maxMessage), Time: &metav1.Time{Time: k.g.clock.Now()},
		}
		k.markLocked(true)
		k.exhaustedSeq = k.seq
	}
	return e
}

// grantRefusal is the refusal of a call beyond the grant, with the numbers.
func grantRefusal(finalizing bool, used string) *apiError {
	var e *apiError
	if finalizing {
		e = errGrant(gatewayapi.CodeReserveExhausted, fmt.Sprintf(
			"the run is finalizing and its reserve is used up at %s of this attempt; nothing more is served", used))
	} else {
		e = errGrant(gatewayapi.CodeGrantExhausted, fmt.Sprintf(
			"working budget exhausted at %s of this attempt; the operator finalizes the run from its reserve or ends it", used))
	}
	e.onCounts = true
	return e
}

// durableRefusal answers a refusal decided on the attempt's counts only once
// those counts are on the API server. The agent stops at the refusal and
// waits for the operator, who decides the exhaustion from the written
// counts: were the gateway to die with them unwritten, its successor would
// resume one count short, the operator would never see the grant used up,
// and the run would wait for its deadline (chaos suite, gateway-kill). The
// counts are written at once; if they cannot be, the agent is told
// not_persisted and asks again. Counts already durable cost no write, so an
// agent repeating a refused request does not drive writes.
func (k *keeper) durableRefusal(ctx context.Context, e *apiError) *apiError {
	if e == nil || !e.onCounts {
		return e
	}
	k.mu.Lock()
	target := k.seq
	durable := k.persisted.Usage == k.facts.usage && k.exhaustedSeq <= k.written
	k.mu.Unlock()
	if durable {
		return e
	}
	k.signal()
	if err := k.waitWritten(ctx, target); err != nil {
		return errNotPersisted(fmt.Sprintf("the request is refused (%s), but the counts it was refused on could not be made durable yet; ask again: %v",
			e.body.Message, err))
	}
	return e
}

// confirm asks for a decision on the call (an approval request, durable
// before the wait) and waits for it: until the request expires (the
// policy's approvalTimeout after it was first made: ApprovalExpired), or
// at most req.wait for an agent API report (approval_pending: report again).
// A decision answers the call only if stamped within the request's window
// (answerApproval). An approval it spends is recorded in the facts at once,
// so no other call spends it; the caller makes that durable before the
// dispatch, or releases it (releaseApproval) when the call is not made.
func (k *keeper) confirm(ctx context.Context, call *gatewayapi.ToolCall, entry v1alpha1.Tool, req callRequest) (approvalAnswer, *apiError) {
	actionID := call.ActionID
	added := false
	defer func() {
		if added {
			k.mu.Lock()
			if k.facts.removeAwaiting(actionID) {
				k.markLocked(false)
			}
			k.mu.Unlock()
		}
	}()
	now := k.g.clock.Now()
	k.mu.Lock()
	since, ok := k.approvalSince[actionID]
	if !ok || !now.Before(since.Add(approvalTimeout(k.obj.Spec))) {
		since = now
		k.approvalSince[actionID] = since
	}
	expires := since.Add(approvalTimeout(k.obj.Spec))
	k.mu.Unlock()
	window := approvalWindow{from: since, to: expires}
	wait := expires.Sub(now)
	if !req.untilExpiry {
		w := req.wait
		if w <= 0 {
			w = time.Minute
		}
		wait = min(wait, w, maxApprovalWait)
	}
	timeout := k.g.clock.After(max(wait, 0))
	poll := k.g.clock.NewTicker(k.g.opts.PollInterval)
	defer poll.Stop()
	for {
		k.mu.Lock()
		if e := k.stoppedLocked(); e != nil {
			k.mu.Unlock()
			return approvalAnswer{}, e
		}
		if ans, ok := answerApproval(k.obj.Spec.Approvals, k.facts.usedApprovals, actionID, window, req.shown); ok {
			ap := ans.decision
			if ap.Decision == v1alpha1.DecisionApprove {
				if ans.spend {
					k.facts.usedApprovals = append(k.facts.usedApprovals, int32(ans.index))
				}
				k.mu.Unlock()
				return ans, nil
			}
			delete(k.approvalSince, actionID)
			k.mu.Unlock()
			msg := fmt.Sprintf("action %s was denied", actionID)
			if ap.Approver != "" {
				msg += " by " + ap.Approver
			}
			if ap.Comment != "" {
				msg += ": " + ap.Comment
			}
			return approvalAnswer{}, denied(gatewayapi.CodeApprovalDenied, "ApprovalDenied", msg)
		}
		if !k.g.clock.Now().Before(expires) {
			if k.approvalSince[actionID].Equal(since) {
				delete(k.approvalSince, actionID)
			}
			k.mu.Unlock()
			return approvalAnswer{}, denied(gatewayapi.CodeApprovalExpired, "ApprovalExpired", fmt.Sprintf(
				"nobody decided on action %s (%s, risk %s) within the policy's approvalTimeout of %s; the call was not made",
				actionID, call.Tool, entry.Risk, approvalTimeout(k.obj.Spec)))
		}
		if !added && !k.facts.isAwaiting(actionID) && len(k.facts.awaiting) < maxAwaitingApproval {
			sh := req.shown
			k.facts.awaiting = append(k.facts.awaiting, v1alpha1.ApprovalRequest{
				ActionID: actionID, Tool: call.Tool, Risk: entry.Risk, Summary: sh.summary,
				Arguments: sh.text, ArgumentsBytes: sh.bytes, ArgumentsSHA256: sh.sha256, ArgumentsTruncated: sh.truncated,
				RequestedAt: &metav1.Time{Time: since}, ExpiresAt: &metav1.Time{Time: expires},
			})
			added = true
			k.markLocked(true)
			k.log.Info("Awaiting approval", "action", actionID, "tool", call.Tool)
		}
		ch := k.wake
		k.mu.Unlock()
		select {
		case <-ch:
		case <-poll.C():
			k.refreshLive(ctx)
		case <-timeout:
			if req.untilExpiry {
				continue // the expiry check above answers
			}
			return approvalAnswer{}, newError(http.StatusConflict, gatewayapi.TypeConflict, gatewayapi.CodeApprovalPending,
				fmt.Sprintf("action %s awaits approval until %s (kubectl patch the ResearchRun's spec.approvals); report the call again to keep waiting",
					actionID, expires.UTC().Format(time.RFC3339)))
		case <-ctx.Done():
			return approvalAnswer{}, errNotPersisted("the request ended while awaiting approval of " + actionID)
		}
	}
}

// settleApproval ends the approval of an admitted or refused call: a call
// that is made closes its request (the next identical call asks anew); a
// call refused after its approval gives back the approval it spent (it
// dispatched nothing) and keeps the request's window for its retry.
func (k *keeper) settleApproval(actionID string, ans approvalAnswer, made bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if made {
		delete(k.approvalSince, actionID)
		return
	}
	if ans.spend {
		k.facts.usedApprovals = slices.DeleteFunc(k.facts.usedApprovals, func(i int32) bool { return i == int32(ans.index) })
		k.markLocked(false)
	}
}

// approvalTimeout is the policy's approvalTimeout (default 15m).
func approvalTimeout(spec v1alpha1.RunAttemptSpec) time.Duration {
	if t := spec.Policy.ApprovalTimeout; t != nil && t.Duration > 0 {
		return t.Duration
	}
	return DefaultApprovalTimeout
}

// lockWithSlot locks k.mu, first waiting for a free in-flight slot when the
// call has a side effect. On success k.mu is held.
func (k *keeper) lockWithSlot(ctx context.Context, sideEffect bool) error {
	for {
		k.mu.Lock()
		if !sideEffect || len(k.facts.inFlight) < maxInFlight {
			return nil
		}
		ch := k.wake
		k.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

func newCallID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "call-" + hex.EncodeToString(b[:])
}

func (g *Gateway) postToolOutcome(w http.ResponseWriter, r *http.Request, k *keeper) {
	var req gatewayapi.ToolOutcomeRequest
	if e := decode(r, &req); e != nil {
		writeError(w, e)
		return
	}
	id := r.PathValue("id")
	if req.Error != nil && !kindPattern.MatchString(req.Error.Kind) {
		writeError(w, errInvalid("error.kind", "error.kind is required: a PascalCase word (e.g. Timeout)"))
		return
	}
	k.mu.Lock()
	c, known := k.calls[id]
	// After a gateway restart the call is known only by its write-ahead record.
	inFlight := slices.ContainsFunc(k.facts.inFlight, func(e v1alpha1.InFlightEffect) bool { return e.ID == id })
	if !known && !inFlight {
		k.mu.Unlock()
		writeError(w, newError(http.StatusNotFound, gatewayapi.TypeNotFound, gatewayapi.CodeNotFound,
			fmt.Sprintf("no admitted tool call %q awaits an outcome", id)))
		return
	}
	tool := ""
	if c != nil {
		tool = c.tool
	}
	delete(k.calls, id)
	k.facts.removeInFlight(id)
	if req.Error != nil {
		k.facts.addFault(v1alpha1.FaultScopeTool, req.Error.Kind, req.Error.Retryable, false,
			fmt.Sprintf("%s: %s", tool, req.Error.Message))
	}
	k.markLocked(false)
	k.mu.Unlock()
	result := "completed (the agent dispatched the call and reported no error)"
	if req.Error != nil {
		result = "failed: " + req.Error.Kind + ": " + req.Error.Message
	}
	k.emitToolResult(k.callBlock(id), result)
	w.WriteHeader(http.StatusNoContent)
}
