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
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// toolClients are the gateway's MCP client sessions to tool servers, one per
// (namespace, server): the namespace because a server's credentials are a
// Secret of the run's namespace.
type toolClients struct {
	g  *Gateway
	mu sync.Mutex
	m  map[string]*toolSession
}

type toolSession struct {
	mu       sync.Mutex
	cs       *mcp.ClientSession
	tools    map[string]*toolInfo
	listedAt time.Time
}

type toolInfo struct {
	tool     *mcp.Tool
	resolved *jsonschema.Resolved // nil when the schema does not resolve
}

// toolListTTL is how long a server's tools/list is reused.
const toolListTTL = time.Minute

type idemKey struct{}

// deadlineKey carries the time a tool call must be over by to its request
// headers (gatewayapi.HeaderDeadline).
type deadlineKey struct{}

// overKey marks a call's context with the flag its answer's reader sets
// when the answer exceeds MaxToolResultBytes.
type overKey struct{}

// endpoint is the server's MCP URL.
func (c *toolClients) endpoint(srv v1alpha1.ToolServer) string {
	if srv.URL != "" {
		return srv.URL
	}
	s := srv.Service
	ns := s.Namespace
	if ns == "" {
		ns = c.g.opts.Namespace
	}
	port, path := s.Port, s.Path
	if port == 0 {
		port = 80
	}
	if path == "" {
		path = "/mcp"
	}
	return fmt.Sprintf("http://%s.%s.svc:%d%s", s.Name, ns, port, path)
}

// headers sends the server's bearer token and a call's idempotency key, and
// bounds the server's answer to limit bytes.
type headers struct {
	base  http.RoundTripper
	token string
	limit int64
}

func (h *headers) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if h.token != "" {
		r.Header.Set("Authorization", "Bearer "+h.token)
	}
	if key, _ := r.Context().Value(idemKey{}).(string); key != "" {
		r.Header.Set(gatewayapi.HeaderIdempotencyKey, key)
	}
	if d, _ := r.Context().Value(deadlineKey{}).(string); d != "" {
		r.Header.Set(gatewayapi.HeaderDeadline, d)
	}
	resp, err := h.base.RoundTrip(r)
	if err == nil && h.limit > 0 {
		over, _ := r.Context().Value(overKey{}).(*atomic.Bool)
		resp.Body = &boundedBody{ReadCloser: resp.Body, left: h.limit, over: over}
	}
	return resp, err
}

// errAnswerTooLarge ends the read of a tool server's answer beyond the bound.
var errAnswerTooLarge = errors.New("the tool server's answer exceeds the gateway's bound")

// boundedBody reads at most left bytes of an answer; one more is
// errAnswerTooLarge, and sets over (the MCP client reports a failed read
// only as text, so the call learns why from the flag).
type boundedBody struct {
	io.ReadCloser
	left int64
	over *atomic.Bool
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, errAnswerTooLarge
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		if b.over != nil {
			b.over.Store(true)
		}
		return max(n-1, 0), errAnswerTooLarge
	}
	return n, err
}

func (c *toolClients) session(ctx context.Context, ns string, srv v1alpha1.ToolServer) (*toolSession, *mcp.ClientSession, error) {
	token, err := c.g.secrets.key(ctx, ns, srv.AuthSecretRef)
	if err != nil {
		return nil, nil, err
	}
	url := c.endpoint(srv)
	id := ns + "\x00" + srv.Name + "\x00" + url + "\x00" + token
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]*toolSession{}
	}
	s := c.m[id]
	if s == nil {
		s = &toolSession{}
		c.m[id] = s
	}
	c.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cs != nil {
		return s, s.cs, nil
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "agentrun-gateway", Version: "v1"}, nil)
	tr := &mcp.StreamableClientTransport{
		Endpoint:             url,
		HTTPClient:           &http.Client{Transport: &headers{base: c.g.opts.ToolTransport, token: token, limit: c.g.opts.MaxToolResultBytes}},
		MaxRetries:           -1,
		DisableStandaloneSSE: true,
	}
	cctx, cancel := context.WithTimeout(ctx, timeoutOf(srv))
	defer cancel()
	cs, err := client.Connect(cctx, tr, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to tool server %s (%s): %w", srv.Name, url, err)
	}
	s.cs = cs
	return s, cs, nil
}

// drop forgets a session that failed, so the next call connects again.
func (s *toolSession) drop(cs *mcp.ClientSession) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cs == cs {
		_ = cs.Close()
		s.cs = nil
		s.tools = nil
	}
}

func timeoutOf(srv v1alpha1.ToolServer) time.Duration {
	if srv.Timeout != nil && srv.Timeout.Duration > 0 {
		return srv.Timeout.Duration
	}
	return DefaultToolTimeout
}

// describe returns the server's description of tool (from its tools/list,
// cached a minute), or nil when the server does not list it.
func (c *toolClients) describe(ctx context.Context, ns string, srv v1alpha1.ToolServer, tool string) (*toolInfo, error) {
	s, cs, err := c.session(ctx, ns, srv)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.tools != nil && c.g.clock.Since(s.listedAt) < toolListTTL {
		t := s.tools[tool]
		s.mu.Unlock()
		return t, nil
	}
	s.mu.Unlock()
	lctx, cancel := context.WithTimeout(ctx, timeoutOf(srv))
	defer cancel()
	tools := map[string]*toolInfo{}
	for t, err := range cs.Tools(lctx, nil) {
		if err != nil {
			s.drop(cs)
			return nil, fmt.Errorf("listing the tools of tool server %s: %w", srv.Name, err)
		}
		info := &toolInfo{tool: t}
		if raw, err := json.Marshal(t.InputSchema); err == nil {
			var sch jsonschema.Schema
			if json.Unmarshal(raw, &sch) == nil {
				info.resolved, _ = sch.Resolve(nil)
			}
		}
		tools[t.Name] = info
	}
	s.mu.Lock()
	s.tools, s.listedAt = tools, c.g.clock.Now()
	s.mu.Unlock()
	return tools[tool], nil
}

var builtinSchemas = func() map[string]*jsonschema.Resolved {
	out := map[string]*jsonschema.Resolved{}
	for _, name := range []string{gatewayapi.ToolReportPublish, gatewayapi.ToolNotesWrite} {
		raw, _ := json.Marshal(builtinTool(name).schema)
		var sch jsonschema.Schema
		_ = json.Unmarshal(raw, &sch)
		out[name], _ = sch.Resolve(nil)
	}
	return out
}()

// validate checks arguments against the tool's input schema: a mismatch is
// refused before anything is recorded or dispatched, naming the field.
func (c *toolClients) validate(ctx context.Context, ns string, t doorTool, args map[string]any) *apiError {
	var rs *jsonschema.Resolved
	if t.server == nil {
		rs = builtinSchemas[t.entry.Name]
	} else {
		info, err := c.describe(ctx, ns, *t.server, t.entry.Name)
		switch {
		case err != nil:
			// Not dispatched: the server is unreachable.
			e := newError(http.StatusBadGateway, gatewayapi.TypeServer, gatewayapi.CodeToolServerUnavailable,
				fmt.Sprintf("tool server %s is unavailable, so %s was not called: %v", t.server.Name, t.entry.Name, err))
			e.fault = kindToolSrv
			return e
		case info == nil:
			e := newError(http.StatusBadGateway, gatewayapi.TypeServer, gatewayapi.CodeToolServerUnavailable,
				fmt.Sprintf("tool server %s does not serve %s (the policy's catalogue names it there)", t.server.Name, t.entry.Name))
			e.fault = "ToolServerMisconfigured"
			return e
		}
		rs = info.resolved
	}
	if rs == nil {
		return nil
	}
	// The schema library validates decoded JSON (float64 numbers).
	raw, _ := json.Marshal(args)
	var plain map[string]any
	_ = json.Unmarshal(raw, &plain)
	if plain == nil {
		plain = map[string]any{}
	}
	if err := rs.Validate(plain); err != nil {
		e := errInvalid("arguments", fmt.Sprintf("the arguments of %s do not match its input schema: %v", t.entry.Name, err))
		e.body.Code = gatewayapi.CodeInvalidArguments
		e.fault = "InvalidArguments"
		return e
	}
	return nil
}

// call dispatches an admitted call to its tool server. An answer (a result,
// an error result) is a known outcome; no answer in time, or a connection
// lost after the request may have reached the server, is Unknown; a server
// that could not be reached at all did not get the call.
func (c *toolClients) call(ctx context.Context, ns string, srv v1alpha1.ToolServer, call *gatewayapi.ToolCall, args map[string]any,
	until time.Time) (*mcp.CallToolResult, callOutcome) {
	// The effect must be recorded even when the agent goes away: the call
	// runs to its own timeout, not the client's, and never past the run's
	// deadline (until), which the tool server is told.
	now := c.g.clock.Now()
	timeout := boundedTimeout(timeoutOf(srv), until, now)
	if timeout <= 0 {
		msg := fmt.Sprintf("the run's deadline passed before %s could be sent to tool server %s, so it was not called", call.Tool, srv.Name)
		return toolError(gatewayapi.CodeDeadlineReached, msg, nil), callOutcome{fault: "DeadlineReached", message: msg}
	}
	deadline := now.Add(timeout).UTC().Format("2006-01-02T15:04:05.000Z07:00")
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	cctx = context.WithValue(cctx, deadlineKey{}, deadline)
	s, cs, err := c.session(cctx, ns, srv)
	if err != nil {
		msg := fmt.Sprintf("tool server %s is unavailable, so %s was not called: %v", srv.Name, call.Tool, err)
		return toolError(gatewayapi.CodeToolServerUnavailable, msg, nil),
			callOutcome{fault: kindToolSrv, retryable: true, message: msg}
	}
	params := &mcp.CallToolParams{Name: call.Tool, Arguments: args, Meta: mcp.Meta{gatewayapi.MetaDeadline: deadline}}
	if call.IdempotencyKey != "" {
		params.Meta[gatewayapi.MetaIdempotencyKey] = call.IdempotencyKey
		cctx = context.WithValue(cctx, idemKey{}, call.IdempotencyKey)
	}
	over := &atomic.Bool{}
	cctx = context.WithValue(cctx, overKey{}, over)
	start := c.g.clock.Now()
	res, err := cs.CallTool(cctx, params)
	label := outcomeLabel(res, err)
	if err != nil && over.Load() {
		label = "too_large"
	}
	c.g.metrics.toolSeconds.WithLabelValues(srv.Name, label).Observe(c.g.clock.Since(start).Seconds())
	if err == nil {
		out := callOutcome{}
		if res.IsError {
			out = callOutcome{fault: "ToolError", message: cmp.Or(text(res), "the tool returned an error")}
		}
		return res, out
	}
	s.drop(cs)
	if over.Load() {
		c.g.metrics.tooLarge.WithLabelValues("tool").Inc()
		return tooLargeOutcome(call, fmt.Sprintf("tool server %s answered %s, but its answer exceeds the gateway's bound of %d bytes "+
			"(--max-tool-result-bytes), so it is not relayed", srv.Name, call.Tool, c.g.opts.MaxToolResultBytes))
	}
	if notDispatched(err) {
		msg := fmt.Sprintf("tool server %s refused the connection, so %s was not called: %v", srv.Name, call.Tool, err)
		return toolError(gatewayapi.CodeToolServerUnavailable, msg, nil),
			callOutcome{fault: kindToolSrv, retryable: true, message: msg}
	}
	why := fmt.Sprintf("no answer from tool server %s: %v", srv.Name, err)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(cctx.Err(), context.DeadlineExceeded) {
		why = fmt.Sprintf("tool server %s did not answer within %s", srv.Name, timeout.Round(time.Millisecond))
		if timeout < timeoutOf(srv) {
			why += " (the time left before the run's deadline)"
		}
	}
	if call.Effect == v1alpha1.EffectNone {
		return toolError(gatewayapi.CodeToolServerUnavailable, why, nil),
			callOutcome{fault: "Timeout", retryable: true, message: why}
	}
	if call.IdempotencyKey != "" {
		msg := why + "; its outcome is unknown, and calling it again is safe (it is idempotent, with key " + call.IdempotencyKey + ")"
		return toolError(gatewayapi.CodeOutcomeUnknown, msg, nil),
			callOutcome{unknown: true, fault: kindUnknown, retryable: true, message: why}
	}
	msg := why + "; its outcome is unknown and it is not idempotent, so it will not be dispatched again: check its effect another way"
	return toolError(gatewayapi.CodeOutcomeUnknown, msg, nil),
		callOutcome{unknown: true, fault: kindUnknown, message: why}
}

// tooLargeOutcome is a dispatched call whose answer was too large to read:
// the tool ran, but whether it succeeded is in the part not read. Nothing
// was affected by a call without effect; a side effect's outcome is
// Unknown — never "not dispatched" — so a call that is not idempotent is
// never dispatched again.
func tooLargeOutcome(call *gatewayapi.ToolCall, why string) (*mcp.CallToolResult, callOutcome) {
	const kind = "ToolResultTooLarge"
	switch {
	case call.Effect == v1alpha1.EffectNone:
		return toolError(gatewayapi.CodeToolResultTooLarge, why+"; ask for less (a narrower query, a page)", nil),
			callOutcome{fault: kind, message: why}
	case call.IdempotencyKey != "":
		msg := why + "; whether it took effect is unknown, and calling it again is safe (it is idempotent, with key " +
			call.IdempotencyKey + ")"
		return toolError(gatewayapi.CodeToolResultTooLarge, msg, nil),
			callOutcome{unknown: true, fault: kind, retryable: true, message: why}
	}
	msg := why + "; whether it took effect is unknown and it is not idempotent, so it will not be dispatched again: " +
		"check its effect another way"
	return toolError(gatewayapi.CodeToolResultTooLarge, msg, nil), callOutcome{unknown: true, fault: kind, message: why}
}

// notDispatched reports an error that proves the request never reached the
// server (the connection was refused or the name does not resolve).
func notDispatched(err error) bool {
	var dns *net.DNSError
	return errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &dns)
}

func outcomeLabel(res *mcp.CallToolResult, err error) string {
	switch {
	case err != nil:
		return "no_answer"
	case res.IsError:
		return "tool_error"
	}
	return "ok"
}

// close ends every session.
func (c *toolClients) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.m {
		s.mu.Lock()
		if s.cs != nil {
			_ = s.cs.Close()
		}
		s.mu.Unlock()
	}
	c.m = nil
}
