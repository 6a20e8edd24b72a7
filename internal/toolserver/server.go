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

// Package toolserver is agentrun's reference MCP tool server: the tools a
// RuntimePolicy's spec.toolServers points the gateway at, served over the
// streamable HTTP transport (stateless, JSON responses) at /mcp.
//
// It serves http.get (fetch a page from an allow-listed host) and, for
// tests, e2e and benchmarks, a scripted Fake whose tools echo, answer, fail,
// delay or hang as configured and which records every call it dispatches
// (GET /calls). cmd/agentrun-tools runs it as a process.
package toolserver

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The idempotency key of a call: the gateway passes it in the call's _meta
// under MetaIdempotencyKey and as the HTTP header HeaderIdempotencyKey.
const (
	MetaIdempotencyKey   = "agentrun.dev/idempotency-key"
	HeaderIdempotencyKey = "Idempotency-Key"
)

// Paths of the server's handler.
const (
	PathMCP     = "/mcp"
	PathHealthz = "/healthz"
	PathReadyz  = "/readyz"
	PathCalls   = "/calls"
)

// ServerName is the name the server gives in its MCP implementation info.
const ServerName = "agentrun-tools"

// Options configures a Server.
type Options struct {
	// HTTPGet serves the http.get tool when set.
	HTTPGet *HTTPGetOptions
	// Fake serves the fake's scripted tools and GET /calls when set.
	Fake *Fake
	// Token, when set, is the bearer token every /mcp and /calls request
	// must carry (401 otherwise).
	Token string
	// Version is reported in the MCP implementation info.
	Version string
	// Logger receives the MCP transport's log; nil discards it.
	Logger *slog.Logger
}

// Server is an MCP tool server.
type Server struct {
	opts    Options
	mcp     *mcp.Server
	handler http.Handler
	tools   []string
	reqs    *requests
}

// New builds a server from opts. Two tools of the same name are an error.
func New(opts Options) (*Server, error) {
	version := opts.Version
	if version == "" {
		version = "dev"
	}
	s := &Server{opts: opts, reqs: &requests{ctx: map[string]context.Context{}}}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: ServerName, Version: version}, &mcp.ServerOptions{Logger: opts.Logger})
	seen := map[string]bool{}
	add := func(t *mcp.Tool, h mcp.ToolHandler) error {
		if seen[t.Name] {
			return fmt.Errorf("toolserver: tool %q is defined twice", t.Name)
		}
		seen[t.Name] = true
		s.tools = append(s.tools, t.Name)
		s.mcp.AddTool(t, s.reqs.bound(h))
		return nil
	}
	if opts.HTTPGet != nil {
		g, err := newHTTPGet(*opts.HTTPGet)
		if err != nil {
			return nil, err
		}
		if err := add(g.tool(), g.handle); err != nil {
			return nil, err
		}
	}
	if opts.Fake != nil {
		for _, ft := range opts.Fake.tools {
			if err := add(ft.mcpTool(), opts.Fake.handler(ft)); err != nil {
				return nil, err
			}
		}
	}
	if len(s.tools) == 0 {
		return nil, errors.New("toolserver: no tools to serve (neither http.get nor a fake)")
	}

	streamable := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp },
		&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true, PropagateRequestCancellation: true, Logger: opts.Logger})
	mux := http.NewServeMux()
	mux.Handle(PathMCP, s.authorized(s.reqs.track(streamable)))
	healthy := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	}
	mux.HandleFunc("GET "+PathHealthz, healthy)
	mux.HandleFunc("GET "+PathReadyz, healthy)
	if opts.Fake != nil {
		mux.Handle(PathCalls, s.authorized(http.HandlerFunc(opts.Fake.serveCalls)))
	}
	s.handler = mux
	return s, nil
}

// Handler serves MCP at /mcp, /healthz and /readyz, and the fake's calls
// at /calls (GET: the record as JSON; DELETE: forget it).
func (s *Server) Handler() http.Handler { return s.handler }

// Tools returns the names of the tools served, in the order they were added.
func (s *Server) Tools() []string { return append([]string(nil), s.tools...) }

// headerRequest carries the id of an MCP request's HTTP request from track
// to bound (the server sets it; a client's value is replaced).
const headerRequest = "X-Agentrun-Toolserver-Request"

// requests ties each tool call to its HTTP request. The SDK ends a stateless
// call's handler with the HTTP request only on protocol 2026-07-28 and
// later; before that a client cancels with a notification that, being a
// request of its own, reaches a different (ephemeral) session. So a hang or
// a delay would outlive the client that gave up.
type requests struct {
	mu   sync.Mutex
	next uint64
	ctx  map[string]context.Context
}

func (rs *requests) track(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rs.mu.Lock()
		rs.next++
		id := strconv.FormatUint(rs.next, 10)
		rs.ctx[id] = r.Context()
		rs.mu.Unlock()
		defer func() {
			rs.mu.Lock()
			delete(rs.ctx, id)
			rs.mu.Unlock()
		}()
		r.Header.Set(headerRequest, id)
		next.ServeHTTP(w, r)
	})
}

// bound runs h with a context that also ends with the call's HTTP request.
func (rs *requests) bound(h mcp.ToolHandler) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if req.Extra == nil || req.Extra.Header == nil {
			return h(ctx, req)
		}
		rs.mu.Lock()
		httpCtx := rs.ctx[req.Extra.Header.Get(headerRequest)]
		rs.mu.Unlock()
		if httpCtx == nil {
			return h(ctx, req)
		}
		ctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		stop := context.AfterFunc(httpCtx, func() { cancel(context.Cause(httpCtx)) })
		defer stop()
		return h(ctx, req)
	}
}

// authorized requires the bearer token, when one is configured.
func (s *Server) authorized(next http.Handler) http.Handler {
	if s.opts.Token == "" {
		return next
	}
	want := []byte("Bearer " + s.opts.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="agentrun-tools"`)
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "a valid bearer token is required"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// errorResult is a tool error: the model sees the message.
func errorResult(format string, args ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, args...)}}}
}

func textResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}
