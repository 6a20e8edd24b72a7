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

// Package agent is the Go SDK an agentrun attempt pod links: the agent's side
// of the RunAttempt protocol.
//
// An Agent reads and watches its attempt's RunAttempt (spec: grant,
// directives, policy snapshot, permission mode, approvals, phase) and reports
// facts to its status (usage, steps, call fingerprints, write-ahead records,
// faults, advice, awaited approvals, finish, publication, checkpoint,
// heartbeat). Whatever the agent loop does, the SDK:
//
//   - refuses any model request or tool call beyond spec.grant (ErrGrantExhausted,
//     a local refusal reported as a fault, never a run failure);
//   - applies the shared permission matrix (pkg/permission) to every tool call,
//     waiting for an approval when it says Confirm;
//   - runs the policy's resolved interceptor chain, in exactly its order, with
//     each interceptor's failure posture, and refuses to start when the chain
//     names an interceptor the agent did not register;
//   - persists a write-ahead record of every side-effecting call before it is
//     dispatched;
//   - allows only output work while the run is Finalizing, and cancels the
//     attempt's context when the run is Terminated, the attempt superseded or
//     its RunAttempt deleted;
//   - writes facts coalesced (one status write per flush interval), retries
//     conflicts from its local state, never drops a recorded fact, and keeps
//     every table bounded.
//
// Typical use:
//
//	a, _ := agent.New(agent.ConfigFromEnv())
//	_ = a.RegisterTool(agent.Tool{Name: "http.get", Run: fetch})
//	ctx, err := a.Start(ctx) // ends on Terminated; agent.Stopped(context.Cause(ctx))
//	defer a.Close(context.WithoutCancel(ctx))
//	for !a.Finalizing() {
//		err := a.ModelRequest(ctx, "model", ask)
//		page, err := a.CallTool(ctx, "http.get", map[string]any{"url": u})
//		a.Step(progress)
//	}
//	_ = a.ProposeFinish(ctx)
//	_ = a.Settle(ctx, v1alpha1.SettlementComplete)
//
// docs/sdk.md walks through a complete agent (the package Example).
package agent
