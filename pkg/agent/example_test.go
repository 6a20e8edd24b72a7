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
	"errors"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/pkg/agent"
)

// Model answers a prompt; a real agent calls an LLM here.
type Model func(ctx context.Context, prompt string) (answer string, tokens int64, err error)

// research is a whole agent on the SDK (docs/sdk.md walks through it): it
// asks the model which page to read until the model says DONE or the run
// finalizes, proposes finish, publishes its summary and settles.
func research(ctx context.Context, cfg agent.Config, model Model, fetch func(url string) string) error {
	a, err := agent.New(cfg)
	if err != nil {
		return err
	}
	var published []string
	_ = a.RegisterTool(agent.Tool{Name: "http.get", Run: func(_ context.Context, c *agent.Call) (string, error) {
		return fetch(c.StringArg("url")), nil
	}})
	_ = a.RegisterTool(agent.Tool{Name: "report.publish", Output: true, Run: func(_ context.Context, c *agent.Call) (string, error) {
		published = append(published, c.StringArg("content")) // a real agent writes its report ConfigMap
		return "ok", nil
	}})
	ctx, err = a.Start(ctx) // cancelled when the run is Terminated or the attempt superseded
	if err != nil {
		return err // e.g. the policy's chain names an interceptor we did not register
	}
	defer func() { _ = a.Close(context.WithoutCancel(ctx)) }()

	var notes []string
	for !a.Finalizing() {
		var url string
		err := a.ModelRequest(ctx, "small", func(ctx context.Context) (int64, error) {
			answer, tokens, err := model(ctx, "Goal: "+a.Spec().Goal+"\nNotes: "+strings.Join(notes, "; "))
			url = answer
			return tokens, err
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
		a.Step(err == nil) // progress: a new note
	}
	if err := a.ProposeFinish(ctx); err != nil {
		return err
	}
	_, err = a.CallTool(ctx, "report.publish", map[string]any{"section": "summary", "content": strings.Join(notes, "\n")})
	settlement, committed := v1alpha1.SettlementComplete, int32(1)
	if err != nil {
		settlement, committed = v1alpha1.SettlementNone, 0
	}
	a.SetPublication(1, committed, "configmap/"+a.Spec().RunName+"-report")
	return a.Settle(ctx, settlement)
}

// The example runs the agent above against a fake API server holding the
// RunAttempt the operator would have created.
func Example() {
	ra := &v1alpha1.RunAttempt{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "survey-1"},
		Spec: v1alpha1.RunAttemptSpec{
			RunName: "survey", Attempt: 1, Goal: "compare vector databases", RunPhase: v1alpha1.PhaseRunning,
			Grant: v1alpha1.Grant{ModelRequests: 8, ToolCalls: 8}, Mode: v1alpha1.ModeAuto,
			Policy: v1alpha1.PolicySnapshot{Name: "default", Tools: []v1alpha1.Tool{
				{Name: "http.get", Risk: v1alpha1.RiskLow, Effect: v1alpha1.EffectNone},
				{Name: "report.publish", Risk: v1alpha1.RiskHigh, Effect: v1alpha1.EffectExternal},
			}},
		},
	}
	// report.publish is High risk: confirmed in every mode. Here the user
	// approved the exact action up front (the operator copies spec.approvals
	// from the ResearchRun); otherwise the agent would wait for it.
	args := map[string]any{"section": "summary", "content": "page a\npage b"}
	fp, _ := agent.Fingerprint("report.publish", args, "")
	ra.Spec.Approvals = []v1alpha1.Approval{{ActionID: agent.ActionID("report.publish", fp), Decision: v1alpha1.DecisionApprove}}
	c := fake.NewClientBuilder().WithScheme(agent.Scheme()).WithObjects(ra).WithStatusSubresource(ra).Build()

	answers := []string{"a", "b", "DONE"}
	model := func(context.Context, string) (string, int64, error) {
		answer := answers[0]
		answers = answers[1:]
		return answer, 100, nil
	}
	cfg := agent.Config{Client: c, Namespace: "team", RunAttempt: "survey-1"}
	if err := research(context.Background(), cfg, model, func(url string) string { return "page " + url }); err != nil {
		fmt.Println(err)
		return
	}

	_ = c.Get(context.Background(), client.ObjectKeyFromObject(ra), ra)
	s := ra.Status
	fmt.Printf("usage: %d model requests, %d tool calls, %d tokens\n", s.Usage.ModelRequests, s.Usage.ToolCalls, s.Usage.Tokens)
	fmt.Printf("steps: %d (last progress %d)\n", s.Steps, s.LastProgressStep)
	fmt.Printf("finish proposed: %t; publication: %d/%d %s, settled %t\n", s.FinishProposed,
		s.Publication.BlocksCommitted, s.Publication.BlocksPlanned, s.Publication.Settlement, s.Publication.Settled)
	// Output:
	// usage: 3 model requests, 3 tool calls, 300 tokens
	// steps: 2 (last progress 2)
	// finish proposed: true; publication: 1/1 Complete, settled true
}
