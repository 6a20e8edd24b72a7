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
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// The tool door: a catalogue tool the gateway serves (a built-in such as
// report.publish and notes.write, or a tool of one of the policy's tool
// servers) is called through the gateway's MCP server, which admits it
// (grant, mode × risk, approvals, write-ahead), runs the policy's
// interceptor chain, dispatches it and records its outcome. The agent does
// not run it: a registered Tool's Run is not called, its Done is.

// doorServes reports whether the gateway serves the tool.
func doorServes(tools []v1alpha1.Tool, name string) bool {
	i := slices.IndexFunc(tools, func(t v1alpha1.Tool) bool { return t.Name == name })
	if i < 0 {
		return false
	}
	return tools[i].Server != "" || v1alpha1.IsBuiltinTool(name)
}

type bearerRT struct {
	a    *Agent
	base http.RoundTripper
}

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	tok, err := b.a.token()
	if err != nil {
		return nil, err
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+tok)
	b.a.traceparent(r.Header)
	return b.base.RoundTrip(r)
}

// door returns the MCP session with the gateway's tool door.
func (a *Agent) door(ctx context.Context) (*mcp.ClientSession, error) {
	a.doorMu.Lock()
	defer a.doorMu.Unlock()
	if a.doorSession != nil {
		return a.doorSession, nil
	}
	base := a.cfg.HTTPClient.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "agentrun-sdk-go", Version: "v1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:             a.cfg.GatewayURL + gatewayapi.MCPPath,
		HTTPClient:           &http.Client{Transport: bearerRT{a: a, base: base}},
		MaxRetries:           -1,
		DisableStandaloneSSE: true,
	}, nil)
	if err != nil {
		return nil, Failure("GatewayUnavailable", true, fmt.Errorf("connect to the gateway's tool door: %w", err))
	}
	a.doorSession = cs
	return cs, nil
}

func (a *Agent) dropDoor(cs *mcp.ClientSession) {
	a.doorMu.Lock()
	defer a.doorMu.Unlock()
	if a.doorSession == cs {
		_ = cs.Close()
		a.doorSession = nil
	}
}

// callDoor makes call through the tool door. A refusal (the result's
// agentrun.dev/code) is a *Refusal; a tool error a *FaultError (the
// gateway recorded the fault); the result's text otherwise.
func (a *Agent) callDoor(ctx context.Context, call *Call, callContext string) (string, error) {
	cs, err := a.door(ctx)
	if err != nil {
		return "", err
	}
	// The SDK declares each call's context (WithContext, "" by default), so
	// its fingerprints are the agent API's, stable across attempts.
	params := &mcp.CallToolParams{Name: call.Name, Arguments: call.Args,
		Meta: mcp.Meta{gatewayapi.MetaContext: callContext}}
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		a.dropDoor(cs)
		if ctx.Err() != nil {
			return "", context.Cause(ctx)
		}
		return "", Failure("GatewayUnavailable", true, fmt.Errorf("tool %s through the gateway: %w", call.Name, err))
	}
	if id, ok := res.Meta[gatewayapi.MetaCallID].(string); ok {
		call.ID = id
	}
	var b strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	text := b.String()
	if !res.IsError {
		a.metrics.calls.WithLabelValues(string(KindTool), call.Name).Inc()
		return text, nil
	}
	code, _ := res.Meta[gatewayapi.MetaCode].(string)
	msg := strings.TrimSpace(strings.TrimPrefix(text, "refused ("+code+"):"))
	if reason := sentinelOf(code); reason != nil {
		if errors.Is(reason, ErrTerminated) || errors.Is(reason, ErrSuperseded) {
			a.stop(reason)
			return "", reason
		}
		return "", a.refused(reason, call, "", msg)
	}
	switch code {
	case gatewayapi.CodeNotPersisted, gatewayapi.CodeInterceptorUnavailable:
		// Nothing was dispatched: the gateway could not make the call's
		// record durable, or a fail-closed interceptor could not check it
		// (the API server is unreachable). CallTool asks again on the
		// latter (askAgain).
		return "", &GatewayError{Status: http.StatusServiceUnavailable, Code: code, Message: msg}
	case gatewayapi.CodeOutcomeUnknown:
		return "", Failure("OutcomeUnknown", false, fmt.Errorf("%s: %s", call.Name, msg))
	case gatewayapi.CodeToolServerUnavailable:
		return "", Failure("ToolServerUnavailable", true, fmt.Errorf("%s: %s", call.Name, msg))
	case gatewayapi.CodeInvalidArguments:
		return "", Failure("InvalidArguments", false, fmt.Errorf("%s: %s", call.Name, msg))
	case "":
		return "", Failure("ToolError", false, fmt.Errorf("%s: %s", call.Name, text))
	}
	return "", Failure(gatewayapi.FaultKind(code), false, fmt.Errorf("%s: %s", call.Name, msg))
}

// Served reports whether the gateway serves the tool (through its tool
// door) rather than the agent running it.
func (a *Agent) Served(name string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return doorServes(a.view.Tools, name)
}
