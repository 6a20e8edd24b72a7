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

package conformance_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/pkg/agent"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
	"github.com/agentrun-dev/agentrun/test/conformance"
)

// start runs a conformance gateway over TLS, as the other languages' tests
// do through the server binary.
func start(t *testing.T, cfg conformance.Config) *conformance.Server {
	t.Helper()
	cfg.TLS = true
	cfg.Dir = t.TempDir()
	s, err := conformance.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// sdk is a Go SDK agent configured as an attempt pod's would be: from the
// environment the manifest names.
func sdk(t *testing.T, s *conformance.Server) (*agent.Agent, context.Context) {
	t.Helper()
	m := s.Manifest
	a, err := agent.New(agent.Config{
		GatewayURL: m.Env[gatewayapi.EnvGatewayURL], TokenFile: m.Env[gatewayapi.EnvTokenFile],
		CAFile: m.Env[gatewayapi.EnvCAFile], PollInterval: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	// report.publish's effect is the gateway's publication of the section.
	if err := a.RegisterTool(agent.Tool{Name: gatewayapi.ToolReportPublish, Output: true,
		Run: func(ctx context.Context, c *agent.Call) (string, error) {
			_, err := a.Publish(ctx, c, c.StringArg("section"), c.StringArg("content"))
			return "ok", err
		}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	runCtx, err := a.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(context.Background()) })
	return a, runCtx
}

func chat(ctx context.Context, a *agent.Agent, model string) error {
	return a.ModelRequest(ctx, model, func(ctx context.Context) error {
		c := a.OpenAI()
		_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:    model,
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello.")},
		})
		return err
	})
}

// waitFor polls the gateway's view until cond holds.
func waitFor(t *testing.T, a *agent.Agent, what string, cond func(gatewayapi.Attempt) bool) gatewayapi.Attempt {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		v := a.Attempt()
		if cond(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; view: %+v", what, v)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestScenarios is the conformance scenario list every client's suite runs
// (sdk/python/tests, examples/*): read self, step, a fault with a bad field,
// a counted model call, the refusal beyond the grant, finish and settle.
func TestScenarios(t *testing.T) {
	s := start(t, conformance.Config{})
	a, ctx := sdk(t, s)
	m := s.Manifest

	t.Run("read self", func(t *testing.T) {
		v := a.Attempt()
		if v.Run != "survey" || v.RunAttempt != "survey-1" || v.Grant.ModelRequests != m.Grant.ModelRequests ||
			v.Phase != v1alpha1.PhaseRunning || v.Mode != v1alpha1.ModeAuto || len(v.Models) == 0 {
			t.Fatalf("unexpected view %+v", v)
		}
	})
	t.Run("step", func(t *testing.T) {
		n, err := a.Step(ctx, true)
		if err != nil || n != 1 {
			t.Fatalf("step = %d, %v; want 1", n, err)
		}
	})
	t.Run("fault with a bad field names param", func(t *testing.T) {
		err := a.RecordFault(ctx, "Nowhere", "Timeout", true, "x")
		var ge *agent.GatewayError
		if !errors.As(err, &ge) || ge.Status != http.StatusBadRequest || ge.Code != gatewayapi.CodeInvalidRequest || ge.Param != "scope" {
			t.Fatalf("fault with scope Nowhere: %v; want 400 invalid_request param scope", err)
		}
		if err := a.RecordFault(ctx, v1alpha1.FaultScopeTool, "Timeout", true, "a slow tool"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("model call counted", func(t *testing.T) {
		if err := chat(ctx, a, m.Model); err != nil {
			t.Fatal(err)
		}
		waitFor(t, a, "used.modelRequests 1", func(v gatewayapi.Attempt) bool { return v.Used.ModelRequests == 1 && v.Used.Tokens > 0 })
	})
	t.Run("unknown model is 404 naming the models", func(t *testing.T) {
		st, body, _ := raw(t, m, http.MethodPost, "/v1/chat/completions", `{"model":"nope","messages":[{"role":"user","content":"hi"}]}`)
		if st != http.StatusNotFound || body.Error.Code != gatewayapi.CodeModelNotFound || !strings.Contains(body.Error.Message, "scripted") {
			t.Fatalf("unknown model: %d %+v", st, body)
		}
	})
	t.Run("beyond the grant: 429 grant_exhausted, x-should-retry false", func(t *testing.T) {
		var err error
		calls := 2 // the total, with the one counted above
		for ; calls <= int(m.Grant.ModelRequests)+1; calls++ {
			if err = chat(ctx, a, m.Model); err != nil {
				break
			}
		}
		if !errors.Is(err, agent.ErrGrantExhausted) || calls != int(m.Grant.ModelRequests)+1 {
			t.Fatalf("call %d: %v; want grant_exhausted at call %d", calls, err, m.Grant.ModelRequests+1)
		}
		// The wire, as a non-Go client sees it (the run may already be
		// Finalizing: then the code is reserve_exhausted only once the
		// reserve is used up, so check before the harness moves it).
		st, body, hdr := raw(t, m, http.MethodPost, "/v1/chat/completions", `{"model":"scripted","messages":[{"role":"user","content":"hi"}]}`)
		if st == http.StatusOK {
			// Finalizing already: the reserve served this one; the next is refused.
			st, body, hdr = raw(t, m, http.MethodPost, "/v1/chat/completions", `{"model":"scripted","messages":[{"role":"user","content":"hi"}]}`)
		}
		if st != http.StatusTooManyRequests || hdr.Get(gatewayapi.HeaderShouldRetry) != "false" || body.Error.Type != gatewayapi.TypeRateLimit ||
			(body.Error.Code != gatewayapi.CodeGrantExhausted && body.Error.Code != gatewayapi.CodeReserveExhausted) {
			t.Fatalf("beyond the grant: %d %v %+v", st, hdr, body)
		}
	})
	t.Run("finish, publish from the reserve, settle", func(t *testing.T) {
		waitFor(t, a, "Finalizing", func(v gatewayapi.Attempt) bool { return v.Finalizing })
		if err := a.ProposeFinish(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := a.PlanReport(ctx, []string{"Summary", "Details"}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.CallTool(ctx, gatewayapi.ToolReportPublish, map[string]any{"section": "Summary", "content": "It works."}); err != nil {
			t.Fatal(err)
		}
		set, err := a.Settle(ctx)
		if err != nil || set.Settlement != v1alpha1.SettlementPartial || set.BlocksPlanned != 2 || set.BlocksCommitted != 1 {
			t.Fatalf("settle = %+v, %v; want Partial 1/2", set, err)
		}
		st := s.Env.Status()
		if !st.Publication.Settled || st.Publication.Settlement != v1alpha1.SettlementPartial || !st.FinishProposed {
			t.Fatalf("persisted status %+v", st)
		}
		// The harness ends the run once it settled; the SDK's context ends.
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the run did not end after settling")
		}
		if !agent.Stopped(context.Cause(ctx)) {
			t.Fatalf("cause %v; want a stop", context.Cause(ctx))
		}
	})
}

// raw makes one request as a non-Go client does, with the manifest's token
// and CA.
func raw(t *testing.T, m conformance.Manifest, method, path, body string) (int, gatewayapi.ErrorBody, http.Header) {
	t.Helper()
	hc, err := agent.HTTPClient(m.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(method, m.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+m.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	var eb gatewayapi.ErrorBody
	_ = json.Unmarshal(b, &eb)
	return resp.StatusCode, eb, resp.Header
}

// TestBadInput: what every client must be able to surface.
func TestBadInput(t *testing.T) {
	s := start(t, conformance.Config{})
	m := s.Manifest
	for _, c := range []struct {
		name, method, path, body string
		status                   int
		code, param              string
	}{
		{"unknown field", "POST", "/agentrun/v1/self/steps", `{"progres":true}`, 400, gatewayapi.CodeInvalidRequest, "progres"},
		{"wrong type", "POST", "/agentrun/v1/self/steps", `{"progress":"yes"}`, 400, gatewayapi.CodeInvalidRequest, "progress"},
		{"malformed JSON", "POST", "/agentrun/v1/self/steps", `{`, 400, gatewayapi.CodeInvalidRequest, ""},
		{"advice kind", "POST", "/agentrun/v1/self/advice", `{"source":"reviewer","kind":"not pascal"}`, 400, gatewayapi.CodeInvalidRequest, "kind"},
		{"plan empty", "PUT", "/agentrun/v1/self/report/plan", `{"sections":[]}`, 400, gatewayapi.CodeInvalidRequest, "sections"},
		{"publish without call", "POST", "/agentrun/v1/self/report/sections", `{"section":"A","content":"x"}`, 400, gatewayapi.CodeInvalidRequest, "callID"},
		{"unknown tool", "POST", "/agentrun/v1/self/toolcalls", `{"tool":"rm.rf"}`, 404, gatewayapi.CodeUnknownTool, ""},
		{"unknown outcome", "POST", "/agentrun/v1/self/toolcalls/call-x/outcome", `{}`, 404, gatewayapi.CodeNotFound, ""},
		{"no route", "GET", "/agentrun/v1/other", ``, 404, gatewayapi.CodeNotFound, ""},
		{"model messages", "POST", "/v1/chat/completions", `{"model":"scripted"}`, 400, gatewayapi.CodeInvalidRequest, "messages"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, body, hdr := raw(t, m, c.method, c.path, c.body)
			if st != c.status || body.Error.Code != c.code || body.Error.Param != c.param || body.Error.Message == "" {
				t.Fatalf("%s %s %s: %d %+v; want %d %s param %q", c.method, c.path, c.body, st, body, c.status, c.code, c.param)
			}
			if hdr.Get(gatewayapi.HeaderShouldRetry) != "false" {
				t.Fatalf("no x-should-retry: false on a refusal")
			}
		})
	}
	t.Run("no token", func(t *testing.T) {
		m2 := m
		m2.Token = "not-a-token"
		st, body, _ := raw(t, m2, "GET", "/agentrun/v1/self", "")
		if st != http.StatusUnauthorized || body.Error.Code != gatewayapi.CodeInvalidToken {
			t.Fatalf("bad token: %d %+v", st, body)
		}
	})
}
