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

package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"

	"github.com/openai/openai-go/v3"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
	"github.com/agentrun-dev/agentrun/pkg/agent"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// research is a whole agent on the SDK (docs/sdk.md walks through it): it
// asks the model which page to read until the model says DONE or the run
// finalizes, proposes finish, publishes its summary through the gateway and
// settles. The model is whatever the gateway's model door serves as "small".
func research(ctx context.Context, cfg agent.Config, fetch func(url string) string) error {
	a, err := agent.New(cfg)
	if err != nil {
		return err
	}
	_ = a.RegisterTool(agent.Tool{Name: "http.get", Run: func(_ context.Context, c *agent.Call) (string, error) {
		return fetch(c.StringArg("url")), nil
	}})
	// report.publish is the gateway's built-in: the gateway publishes (through
	// its tool door); Done sees the result.
	_ = a.RegisterTool(agent.Tool{Name: "report.publish", Output: true, Done: func(context.Context, *agent.Call, string) {}})
	ctx, err = a.Start(ctx) // cancelled when the run is Terminated or the attempt superseded
	if err != nil {
		return err // e.g. the policy's chain names an interceptor we did not register
	}
	defer func() { _ = a.Close(context.WithoutCancel(ctx)) }()
	if _, err := a.PlanReport(ctx, []string{"summary"}); err != nil {
		return err
	}

	llm := a.OpenAI() // the gateway's model door: it holds the provider key and counts usage
	var notes []string
	for !a.Finalizing() {
		var url string
		err := a.ModelRequest(ctx, "small", func(ctx context.Context) error {
			out, err := llm.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
				Model: "small",
				Messages: []openai.ChatCompletionMessageParamUnion{
					openai.UserMessage("Goal: " + a.Attempt().Goal + "\nNotes: " + strings.Join(notes, "; ")),
				},
			})
			if err == nil && len(out.Choices) > 0 {
				url = out.Choices[0].Message.Content
			}
			return err
		})
		if agent.Stopped(context.Cause(ctx)) {
			return nil // Terminated or superseded: exit cleanly
		}
		if errors.Is(err, agent.ErrGrantExhausted) || url == "DONE" {
			break
		}
		page, err := a.CallTool(ctx, "http.get", map[string]any{"url": url})
		if err == nil {
			notes = append(notes, page)
		}
		_, _ = a.Step(ctx, err == nil) // progress: a new note
	}
	if err := a.ProposeFinish(ctx); err != nil {
		return err
	}
	_, _ = a.CallTool(ctx, "report.publish", map[string]any{"section": "summary", "content": strings.Join(notes, "\n")})
	_, err = a.Settle(ctx) // Complete, Partial or None: what the report holds
	return err
}

// The example runs the agent above against a real gateway (in this
// process) in front of a fake API server holding the RunAttempt the
// operator would have created, and a model that answers a, b, DONE.
func Example() {
	var mu sync.Mutex
	answers := []string{"a", "b", "DONE"}
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		answer := answers[0]
		answers = answers[1:]
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": "chatcmpl-1", "object": "chat.completion", "model": "small",
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
				"message": map[string]any{"role": "assistant", "content": answer}}},
			"usage": map[string]any{"prompt_tokens": 60, "completion_tokens": 40, "total_tokens": 100},
		})
	}))
	defer model.Close()

	// report.publish is High risk: confirmed in every mode. Here a stand-in
	// for the user approves the exact action when the agent asks (the
	// operator copies spec.approvals from the ResearchRun).
	publish := map[string]any{"section": "summary", "content": "page a\npage b"}
	publishID, _ := gatewayapi.ActionIDOf("report.publish", publish)
	env, stop, err := gatewaytest.Standalone(gatewaytest.Options{Mutate: func(ra *v1alpha1.RunAttempt) {
		ra.Spec.Goal = "compare vector databases"
		ra.Spec.Grant = v1alpha1.Grant{ModelRequests: 8, ToolCalls: 8}
		ra.Spec.Policy.Models = []v1alpha1.Model{{Name: "small", BaseURL: model.URL}}
	}}, false)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	env.ApproveWhenAsked(publishID)

	cfg := agent.Config{GatewayURL: env.URL(), Token: gatewaytest.Token} // in a pod: agent.ConfigFromEnv()
	if err := research(context.Background(), cfg, func(url string) string { return "page " + url }); err != nil {
		fmt.Println(err)
		return
	}

	s := env.Status()
	fmt.Printf("usage: %d model requests, %d tool calls, %d tokens\n", s.Usage.ModelRequests, s.Usage.ToolCalls, s.Usage.Tokens)
	fmt.Printf("steps: %d (last progress %d)\n", s.Steps, s.LastProgressStep)
	fmt.Printf("finish proposed: %t; publication: %d/%d %s, settled %t\n", s.FinishProposed,
		s.Publication.BlocksCommitted, s.Publication.BlocksPlanned, s.Publication.Settlement, s.Publication.Settled)
	// Output:
	// usage: 3 model requests, 3 tool calls, 300 tokens
	// steps: 3 (last progress 3)
	// finish proposed: true; publication: 1/1 Complete, settled true
}
