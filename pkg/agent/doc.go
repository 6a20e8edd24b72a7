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

// Package agent is the Go SDK an agentrun attempt pod links: a client of
// agentrun-gateway, the attempt's only door to models and to its facts.
//
// The gateway enforces what the run may do — the grant (a hard cap: it counts
// every request it dispatches and reserves a request's tokens first), the
// phase (only the reserve while Finalizing), the permission mode × tool risk,
// approvals, write-ahead records of side-effecting calls — and it alone
// writes the RunAttempt's status. The SDK:
//
//   - follows the attempt's view (grant, phase, mode, directives, approvals)
//     as the gateway streams it, and cancels the attempt's context when the
//     run is Terminated or the attempt superseded;
//   - gives the agent an official OpenAI client pointed at the gateway's model
//     door (Agent.OpenAI), and ModelRequest to run a model call through the
//     policy's interceptor chain with the gateway's refusals as *Refusal;
//   - reports every tool call to the gateway before it runs (CallTool: the
//     gateway admits it, waits for an approval if needed, persists the
//     write-ahead record) and its outcome after;
//   - runs the policy's resolved interceptor chain in exactly its order with
//     each interceptor's failure posture, and refuses to start when the chain
//     names an interceptor the agent did not register;
//   - reports the facts only the agent knows: steps and progress, finish,
//     checkpoint, advice, faults and escalations, and publishes through the
//     gateway, which writes the run's report and settles from what it persisted.
//
// Typical use:
//
//	a, _ := agent.New(agent.ConfigFromEnv())
//	_ = a.RegisterTool(agent.Tool{Name: "http.get", Run: fetch})
//	ctx, err := a.Start(ctx) // ends on Terminated; agent.Stopped(context.Cause(ctx))
//	defer a.Close(context.WithoutCancel(ctx))
//	oa := a.OpenAI()
//	for !a.Finalizing() {
//		err := a.ModelRequest(ctx, "gpt-4o-mini", func(ctx context.Context) error {
//			_, err := oa.Chat.Completions.New(ctx, params)
//			return err
//		})
//		page, err := a.CallTool(ctx, "http.get", map[string]any{"url": u})
//		_, _ = a.Step(ctx, progress)
//	}
//	_ = a.ProposeFinish(ctx)
//	_, _ = a.Settle(ctx)
//
// docs/sdk.md walks through a complete agent (the package Example);
// docs/gateway-api.md is the wire protocol for agents in other languages.
package agent
