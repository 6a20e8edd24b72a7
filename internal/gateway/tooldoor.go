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
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/chain"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
	"github.com/agentrun-dev/agentrun/pkg/permission"
	"github.com/agentrun-dev/agentrun/pkg/textutil"
)

// The tool door is an MCP server (streamable HTTP, stateless: any gateway
// instance can answer any request, so a restart loses no session) in front
// of the policy's tool servers and the gateway's built-in tools. The MCP
// SDK speaks the protocol; a receiving middleware answers tools/list and
// tools/call for the caller's attempt, so every call passes the attempt's
// phase, catalogue, grant, mode × risk, approvals, the write-ahead record and
// the interceptor chain before it reaches a tool.

type keeperKey struct{}

type httpRequestKey struct{}

func keeperFrom(ctx context.Context) *keeper {
	k, _ := ctx.Value(keeperKey{}).(*keeper)
	return k
}

// mcpHandler serves the tool door at gatewayapi.MCPPath.
func (g *Gateway) mcpHandler() http.Handler {
	srv := mcp.NewServer(&mcp.Implementation{Name: "agentrun-gateway", Title: "agentrun tool door", Version: "v1"},
		&mcp.ServerOptions{
			Instructions: "Tools of your run's RuntimePolicy. Calls are checked against the run's budget, " +
				"permission mode and approvals; a refused call returns a tool error saying why.",
			Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
		})
	srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			k := keeperFrom(ctx)
			if k == nil {
				return next(ctx, method, req)
			}
			// A stateless session's request context does not end with the
			// HTTP request on every protocol version: tie it to the request,
			// so a client that leaves withdraws its approval wait.
			if hr, ok := ctx.Value(httpRequestKey{}).(context.Context); ok {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				defer cancel()
				defer context.AfterFunc(hr, cancel)()
			}
			switch method {
			case "tools/list":
				return k.listTools(ctx), nil
			case "tools/call":
				ctr, ok := req.(*mcp.CallToolRequest)
				if !ok || ctr.Params == nil {
					return nil, errors.New("tools/call without parameters")
				}
				return completeResult(req, k.toolSpan(ctx, ctr.Params, func(ctx context.Context) *mcp.CallToolResult {
					return k.callTool(ctx, ctr.Params)
				})), nil
			}
			return next(ctx, method, req)
		}
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{
		Stateless:    true,
		JSONResponse: true,
		// Every request is authenticated by its bearer token, which a
		// rebinding page cannot present.
		DisableLocalhostProtection: true,
	})
	return g.attempt("mcp", func(w http.ResponseWriter, r *http.Request, k *keeper) {
		ctx := context.WithValue(r.Context(), keeperKey{}, k)
		ctx = context.WithValue(ctx, httpRequestKey{}, r.Context())
		ctx = context.WithValue(ctx, httpHeaderKey{}, r.Header)
		h.ServeHTTP(w, r.WithContext(context.WithValue(ctx, tokenKey{}, bearer(r))))
	})
}

// revisionResultType is the first protocol revision whose tools/call
// results say whether they are complete (resultType, SEP-2322).
const revisionResultType = "2026-07-28"

// completeResult marks a tools/call result the door made itself complete
// on a revision that requires it, as the SDK marks its own tool handlers'
// results; the official Python SDK rejects a result without it. The SDK's
// setter is unexported: its JSON decoding sets the field. A request on
// 2026-07-28 or later has no InitializeParams (the SDK synthesizes them
// only for older ones), so none means the newest, as in the SDK.
func completeResult(req mcp.Request, res *mcp.CallToolResult) *mcp.CallToolResult {
	ss, _ := req.GetSession().(*mcp.ServerSession)
	if res == nil || ss == nil {
		return res
	}
	if ip := ss.InitializeParams(); ip != nil && ip.ProtocolVersion < revisionResultType {
		return res
	}
	raw, err := json.Marshal(res)
	if err != nil {
		return res
	}
	var wire map[string]json.RawMessage
	if json.Unmarshal(raw, &wire) != nil {
		return res
	}
	wire["resultType"] = json.RawMessage(`"complete"`)
	out := &mcp.CallToolResult{}
	if raw, err = json.Marshal(wire); err != nil || json.Unmarshal(raw, out) != nil {
		return res
	}
	return out
}

// doorTool is a catalogue tool as the door serves it.
type doorTool struct {
	entry  v1alpha1.Tool
	server *v1alpha1.ToolServer // nil for a built-in
}

// doorToolsLocked returns the catalogue tools the door serves: built-ins
// and tools of a declared tool server. Effect-None tools without a server
// are the agent's own (admitted through the agent API).
func (k *keeper) doorToolsLocked() []doorTool {
	p := k.obj.Spec.Policy
	out := make([]doorTool, 0, len(p.Tools))
	for _, t := range p.Tools {
		switch {
		case t.Server == "" && v1alpha1.IsBuiltinTool(t.Name):
			out = append(out, doorTool{entry: t})
		case t.Server != "":
			if i := slices.IndexFunc(p.ToolServers, func(s v1alpha1.ToolServer) bool { return s.Name == t.Server }); i >= 0 {
				out = append(out, doorTool{entry: t, server: &p.ToolServers[i]})
			}
		}
	}
	return out
}

// listTools answers tools/list: the tools the attempt's current mode lets
// it call (ReadOnly and Plan see no writes; Finalizing only the output
// tool), with the tool servers' descriptions and input schemas.
func (k *keeper) listTools(ctx context.Context) *mcp.ListToolsResult {
	k.mu.Lock()
	tools := k.doorToolsLocked()
	spec := k.obj.Spec
	mode, fin, ns := spec.Mode, isFinalizing(spec), k.key.Namespace
	stopped := k.stoppedLocked() != nil
	k.mu.Unlock()
	// The list is this attempt's (its mode, its phase) and changes with a
	// mode switch: private, and stale at once. The door answers tools/list
	// itself, so it sets what the SDK would otherwise fill in: revision
	// 2026-07-28 requires cacheScope to be "public" or "private", and the
	// official Python SDK refuses a result with an empty one.
	out := &mcp.ListToolsResult{Tools: []*mcp.Tool{}, Cacheable: mcp.Cacheable{TTLMs: 0, CacheScope: "private"}}
	if stopped {
		return out
	}
	for _, t := range tools {
		if !permission.Visible(mode, t.entry) || (fin && t.entry.Name != gatewayapi.ToolReportPublish) || withheld(spec, t.entry) {
			continue
		}
		mt := &mcp.Tool{Name: t.entry.Name, Description: t.entry.Description, InputSchema: map[string]any{jsonType: jsonObject}}
		if t.server == nil {
			b := builtinTool(t.entry.Name)
			mt.InputSchema = b.schema
			if mt.Description == "" {
				mt.Description = b.description
			}
		} else if up, err := k.g.tools.describe(ctx, ns, *t.server, t.entry.Name); err == nil && up != nil {
			mt.InputSchema = up.tool.InputSchema
			if mt.Description == "" {
				mt.Description = up.tool.Description
			}
		}
		mt.Annotations = annotations(t.entry)
		out.Tools = append(out.Tools, mt)
	}
	return out
}

func annotations(t v1alpha1.Tool) *mcp.ToolAnnotations {
	readOnly := t.Effect == v1alpha1.EffectNone
	destructive := t.Effect == v1alpha1.EffectExternal
	open := t.Effect == v1alpha1.EffectExternal
	return &mcp.ToolAnnotations{ReadOnlyHint: readOnly, DestructiveHint: &destructive,
		IdempotentHint: t.Idempotent, OpenWorldHint: &open}
}

// toolError is a refused or failed call as the model sees it: a tool
// result with isError, whose text says why, and the stable code in _meta.
func toolError(code, msg string, meta map[string]any) *mcp.CallToolResult {
	m := mcp.Meta{gatewayapi.MetaCode: code}
	maps.Copy(m, meta)
	return &mcp.CallToolResult{Meta: m, IsError: true,
		Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("refused (%s): %s", code, msg)}}}
}

func refusedResult(e *apiError, meta map[string]any) *mcp.CallToolResult {
	return toolError(e.body.Code, e.body.Message, meta)
}

// callTool answers tools/call.
func (k *keeper) callTool(ctx context.Context, p *mcp.CallToolParamsRaw) *mcp.CallToolResult {
	name := p.Name
	k.mu.Lock()
	tools := k.doorToolsLocked()
	policy, ns := k.obj.Spec.Policy.Name, k.key.Namespace
	stop := k.stoppedLocked()
	k.mu.Unlock()
	if stop != nil {
		return refusedResult(stop, nil)
	}
	if e := k.enter("tool/" + name); e != nil {
		return refusedResult(e, nil)
	}
	defer k.leave()
	i := slices.IndexFunc(tools, func(t doorTool) bool { return t.entry.Name == name })
	if i < 0 {
		e := newError(http.StatusNotFound, gatewayapi.TypeNotFound, gatewayapi.CodeUnknownTool,
			fmt.Sprintf("tool %q is not served here; the tools of RuntimePolicy %q are: %s", name, policy, k.listedNames(ctx)))
		e.fault = "UnknownTool"
		k.refusal(e, "tool/"+name)
		return refusedResult(e, nil)
	}
	t := tools[i]
	canon, e := canonicalArgs(p.Arguments)
	if e != nil {
		e.body.Code = gatewayapi.CodeInvalidArguments
		k.refusal(e, "tool/"+name)
		return refusedResult(e, nil)
	}
	var args map[string]any
	dec := json.NewDecoder(bytes.NewReader(canon))
	dec.UseNumber()
	_ = dec.Decode(&args)
	if e := k.g.tools.validate(ctx, ns, t, args); e != nil {
		k.refusal(e, "tool/"+name)
		return refusedResult(e, nil)
	}
	// An agent that declares its calls' context (the SDK does, even when
	// empty) fingerprints them itself; for one that knows nothing of
	// fingerprints, the context is the conversation the gateway forwarded.
	agentContext, declared := p.Meta[gatewayapi.MetaContext].(string)
	if !declared {
		agentContext = k.conversationContext()
	}
	ch, err := k.interceptors()
	if err != nil {
		e := newError(http.StatusForbidden, gatewayapi.TypePermission, gatewayapi.CodeInterceptorRefused,
			fmt.Sprintf("RuntimePolicy %q's interceptor chain cannot run in this gateway, so no tool call is made: %v", policy, err))
		e.fault = "InterceptorUnavailable"
		k.refusal(e, "tool/"+name)
		return refusedResult(e, nil)
	}
	k.mu.Lock()
	run := k.obj.Spec.RunName
	k.mu.Unlock()
	// The call's block is streamed once admission decides: in full if
	// admitted, its arguments cut if refused.
	blk := k.toolCallBlock(name, args)
	cc := &chain.Call{
		Kind: chain.KindTool, Namespace: ns, Run: run, Attempt: k.key.Name, Policy: policy, Token: tokenFrom(ctx),
		Tool: name, Effect: t.entry.Effect, Risk: t.entry.Risk, Arguments: args,
	}
	var res *mcp.CallToolResult
	outcome := "ok"
	out, ref := k.runChain(ctx, ch, cc, func(ctx context.Context, c *chain.Call) chain.Outcome {
		// What is admitted and dispatched is what the interceptors left
		// of the arguments.
		res, outcome = k.admitAndDispatch(ctx, t, c.Arguments, agentContext, blk)
		return chain.Outcome{Result: text(res), IsError: res.IsError}
	})
	if ref != nil {
		e := errInterceptor(ref)
		k.refusal(e, "tool/"+name)
		k.g.metrics.toolCalls.WithLabelValues(ns, policy, name, "refused").Inc()
		k.g.metrics.sessionToolCall(k)
		k.emitToolResult(k.announce(blk, false), e.body.Code+": "+e.body.Message)
		return refusedResult(e, nil)
	}
	k.g.metrics.toolCalls.WithLabelValues(ns, policy, name, outcome).Inc()
	k.g.metrics.sessionToolCall(k)
	if out.Result != text(res) {
		// A Post interceptor rewrote the result (redaction).
		res.Content = []mcp.Content{&mcp.TextContent{Text: out.Result}}
		res.StructuredContent = nil
	}
	k.mu.Lock()
	limit := compressedResultBytes(k.obj.Spec)
	k.mu.Unlock()
	trimResult(res, limit)
	k.emitToolResult(k.announce(blk, outcome != "refused"), text(res))
	return res
}

// admitAndDispatch admits the call (the grant, modes × risk, approvals,
// the write-ahead record) and dispatches it, recording its outcome.
func (k *keeper) admitAndDispatch(ctx context.Context, t doorTool, args map[string]any, agentContext string, blk *toolBlock,
) (*mcp.CallToolResult, string) {
	canon, err := gatewayapi.CanonicalJSON(args)
	if err != nil || string(canon) == "null" {
		canon = []byte("{}")
	}
	call, entry, e := k.admitCall(ctx, callRequest{
		tool: t.entry.Name, canon: canon, context: agentContext, shown: showArguments(args), untilExpiry: true,
	})
	if e != nil {
		k.announce(blk, false)
		k.refusal(e, "tool/"+t.entry.Name)
		meta := map[string]any{}
		if call != nil {
			meta[gatewayapi.MetaActionID] = call.ActionID
		}
		return refusedResult(e, meta), "refused"
	}
	k.announce(blk, true)
	res, o := k.dispatch(ctx, t, call, args)
	k.settleCall(ctx, call, entry, o)
	if res.Meta == nil {
		res.Meta = mcp.Meta{}
	}
	res.Meta[gatewayapi.MetaCallID] = call.ID
	res.Meta[gatewayapi.MetaActionID] = call.ActionID
	switch {
	case o.unknown:
		return res, "unknown"
	case res.IsError:
		return res, "tool_error"
	}
	return res, "ok"
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}

type tokenKey struct{}

func tokenFrom(ctx context.Context) string {
	t, _ := ctx.Value(tokenKey{}).(string)
	return t
}

// listedNames names the tools tools/list shows the attempt now.
func (k *keeper) listedNames(ctx context.Context) string {
	tools := k.listTools(ctx).Tools
	names := make([]string, 0, len(tools))
	for _, t := range tools {
		names = append(names, t.Name)
	}
	if len(names) == 0 {
		return "none in the current mode"
	}
	return strings.Join(names, ", ")
}

// callOutcome is what the gateway knows after a dispatch.
type callOutcome struct {
	// unknown: the call may or may not have taken effect.
	unknown bool
	// fault, when set, is a Tool fault to count (kind, retryable, message).
	fault     string
	retryable bool
	message   string
}

// dispatch runs an admitted call: a built-in in the gateway, or the tool
// server's tool, which must be over by the run's deadline.
func (k *keeper) dispatch(ctx context.Context, t doorTool, call *gatewayapi.ToolCall, args map[string]any) (*mcp.CallToolResult, callOutcome) {
	if t.server == nil {
		return k.runBuiltin(ctx, call, args)
	}
	k.mu.Lock()
	until, _ := callWindow(k.obj.Spec, k.g.clock.Now(), 0) // admission refused a call too close to it
	k.mu.Unlock()
	return k.g.tools.call(ctx, k.key.Namespace, *t.server, call, args, until)
}

// settleCall records a dispatched call's outcome: a known outcome removes
// the write-ahead record, an unknown one keeps it, marked Unknown, so the
// call is never dispatched again (and the operator does not recover an
// attempt that holds it without an idempotency key).
//
// For a side effect the record's change is durable before the answer: an
// attempt that ends right after must not be judged on a stale record.
func (k *keeper) settleCall(ctx context.Context, call *gatewayapi.ToolCall, entry v1alpha1.Tool, o callOutcome) {
	k.mu.Lock()
	delete(k.calls, call.ID)
	urgent := entry.Effect != v1alpha1.EffectNone
	if o.unknown && entry.Effect != v1alpha1.EffectNone {
		for i := range k.facts.inFlight {
			if k.facts.inFlight[i].ID == call.ID {
				k.facts.inFlight[i].Outcome = v1alpha1.OutcomeUnknown
				k.facts.inFlight[i].Message = textutil.Truncate(o.message, 512)
			}
		}
	} else {
		k.facts.removeInFlight(call.ID)
	}
	if o.fault != "" {
		k.facts.addFault(v1alpha1.FaultScopeTool, o.fault, o.retryable, false,
			textutil.Truncate(fmt.Sprintf("%s: %s", call.Tool, o.message), 512))
	}
	k.markLocked(urgent)
	target := k.seq
	k.mu.Unlock()
	if urgent {
		if err := k.waitWritten(context.WithoutCancel(ctx), target); err != nil {
			k.log.Error(err, "The outcome of a side effect is not yet durable; it is written with the next flush", "call", call.ID)
		}
	}
}

// conversationContext is the context of a door call whose agent declares
// none: the conversation the gateway forwarded last for the attempt.
func (k *keeper) conversationContext() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.conv == "" {
		return ""
	}
	return "conversation:" + k.conv
}

// interceptors returns the attempt's interceptor chain.
func (k *keeper) interceptors() (*chain.Chain, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.chain == nil && k.chainErr == nil {
		run, skipped := gatewayChain(k.obj.Spec.Policy.ResolvedChain, k.g.interceptors)
		if len(skipped) > 0 {
			k.log.Info("The policy's chain names interceptors this gateway does not implement; they are not Security, so the gateway runs the rest (the agent may run them)",
				"skipped", skipped)
		}
		k.chain, k.chainErr = chain.New(run, k.g.interceptors, k.g.chainMetrics, chain.WithLogger(k.log),
			chain.WithObserver(k.chainObserverLocked()))
	}
	return k.chain, k.chainErr
}

// gatewayChain is the part of a resolved chain the gateway runs: every
// entry it implements, and every Security entry — one it does not
// implement makes chain.New fail, so the calls are refused (fail closed:
// an interceptor inside the agent is no security boundary). Other entries
// it does not implement are left to the agent's process.
func gatewayChain(resolved []v1alpha1.ResolvedInterceptor, reg chain.Registry) (run []v1alpha1.ResolvedInterceptor, skipped []string) {
	for _, e := range resolved {
		if _, ok := reg[e.Name]; ok || e.Class == v1alpha1.ClassSecurity {
			run = append(run, e)
			continue
		}
		skipped = append(skipped, e.Name)
	}
	return run, skipped
}

func (k *keeper) closeChain() {
	k.mu.Lock()
	c := k.chain
	k.mu.Unlock()
	if c != nil {
		c.Close()
	}
}
