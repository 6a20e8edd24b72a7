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

package kubectlplugin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/pkg/textutil"
)

// docsArgs are the arguments deploy-docs-1 waits on: the agent arranged
// them so that what matters lies beyond the first 256 bytes (the old
// summary), and the approver must read it (issue 25 item 9).
var docsArgs = `{"content":"` + strings.Repeat("Install the chart, then read the guide. ", 8) +
	`Finally run kubectl delete namespace prod.","section":"Deployment guide"}`

var docsArgsSHA256 = func() string { s := sha256.Sum256([]byte(docsArgs)); return hex.EncodeToString(s[:]) }()

// The fixture namespace team-a, shared by the read-only tests (get, why,
// top): four runs of two sessions as the operator and the gateway would
// have left them.
const teamA = "team-a"

var (
	teamAOnce sync.Once
	teamANow  time.Time
	teamAErr  error
)

// fixtureTeamA builds team-a once and returns the clock its times are
// relative to: 30h after the runs were created, so AGE reads 30h.
func fixtureTeamA(t *testing.T) time.Time {
	t.Helper()
	c := cluster(t)
	teamAOnce.Do(func() { teamANow, teamAErr = buildTeamA(context.Background(), c) })
	if teamAErr != nil {
		t.Fatalf("fixture %s: %v", teamA, teamAErr)
	}
	return teamANow
}

func newRun(ns, name, session string, budget v1alpha1.Budget) *v1alpha1.ResearchRun {
	return &v1alpha1.ResearchRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.ResearchRunSpec{
			SessionRef: v1alpha1.LocalObjectReference{Name: session},
			Goal:       "Research " + name + ".",
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{
				{Name: "agent", Image: "ghcr.io/agentrun-dev/research-agent:latest"}}}},
			Budget: budget,
			Gates:  v1alpha1.Gates{MaxSteps: 30, SameCallLimit: 3, NoProgressLimit: 5},
		},
	}
}

func newAttempt(rr *v1alpha1.ResearchRun, n int32) *v1alpha1.RunAttempt {
	name := fmt.Sprintf("%s-%d", rr.Name, n)
	return &v1alpha1.RunAttempt{
		ObjectMeta: metav1.ObjectMeta{Namespace: rr.Namespace, Name: name, Labels: map[string]string{
			v1alpha1.LabelRun: rr.Name, v1alpha1.LabelAttempt: fmt.Sprint(n),
			v1alpha1.LabelSession: rr.Spec.SessionRef.Name,
		}},
		Spec: v1alpha1.RunAttemptSpec{RunName: rr.Name, Attempt: n, Goal: rr.Spec.Goal, PodName: name},
	}
}

func minutes(n int) *metav1.Duration {
	return &metav1.Duration{Duration: time.Duration(n) * time.Minute}
}

// at is a time relative to now.
type at time.Time

func (a at) ago(d time.Duration) *metav1.Time { t := metav1.NewTime(time.Time(a).Add(-d)); return &t }
func (a at) in(d time.Duration) *metav1.Time  { return a.ago(-d) }

func cond(typ string, status metav1.ConditionStatus, reason, msg string, since *metav1.Time) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, LastTransitionTime: *since}
}

func buildTeamA(ctx context.Context, c client.Client) (time.Time, error) {
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: teamA}}); err != nil {
		return time.Time{}, err
	}
	small := v1alpha1.Budget{ModelRequests: 8, ToolCalls: 10, Deadline: minutes(20), FinalizationGrace: minutes(2),
		OutputReserve: v1alpha1.OutputReserve{ModelRequests: 2, ToolCalls: 3}}
	large := v1alpha1.Budget{ModelRequests: 40, ToolCalls: 80, Deadline: minutes(30), FinalizationGrace: minutes(2),
		OutputReserve: v1alpha1.OutputReserve{ModelRequests: 2, ToolCalls: 5}}
	licences := newRun(teamA, "compare-licences", "research", small)
	docs := newRun(teamA, "deploy-docs", "research", large)
	survey := newRun(teamA, "survey-vector-dbs", "research", large)
	digest := newRun(teamA, "weekly-digest", "review", small)
	runs := []*v1alpha1.ResearchRun{licences, docs, survey, digest}
	for _, rr := range runs {
		if err := c.Create(ctx, rr); err != nil {
			return time.Time{}, err
		}
	}
	licences1, licences2, docs1 := newAttempt(licences, 1), newAttempt(licences, 2), newAttempt(docs, 1)
	digest1 := newAttempt(digest, 1)
	attempts := []*v1alpha1.RunAttempt{licences1, licences2, docs1, digest1}
	latest := time.Time{}
	for _, rr := range runs {
		if rr.CreationTimestamp.After(latest) {
			latest = rr.CreationTimestamp.Time
		}
	}
	now := latest.Add(30 * time.Hour)
	t := at(now)
	// An earlier decision, stamped as the webhook would have stamped it.
	approval, err := json.Marshal([]map[string]any{{"op": "add", "path": "/spec/approvals/-", "value": v1alpha1.Approval{
		ActionID: "notes.write-0b1c2d3e4f5a6b7c", Decision: v1alpha1.DecisionApprove, Comment: "notes are fine",
		Approver: "alice", Time: t.ago(4 * time.Minute)}}})
	if err != nil {
		return now, err
	}
	if err := c.Patch(ctx, docs, client.RawPatch(types.JSONPatchType, approval)); err != nil {
		return now, err
	}

	// compare-licences: attempt 1 failed (a provider timeout it escalated),
	// attempt 2 used the working budget up, finalized from the reserve and
	// published 1 of 3 blocks; a ticket.create call of attempt 2 has an
	// Unknown outcome.
	licences1.Spec.Superseded = true
	licences1.Spec.RunPhase = v1alpha1.PhaseTerminated
	licences1.Spec.Grant = v1alpha1.Grant{ModelRequests: 6, ToolCalls: 7}
	licences2.Spec.RunPhase = v1alpha1.PhaseTerminated
	licences2.Spec.Grant = v1alpha1.Grant{ModelRequests: 5, ToolCalls: 5, FinalizeOnly: true,
		Reserve: &v1alpha1.Usage{ModelRequests: 2, ToolCalls: 3}}
	docs1.Spec.RunPhase = v1alpha1.PhaseRunning
	docs1.Spec.Grant = v1alpha1.Grant{ModelRequests: 38, ToolCalls: 75}
	docs1.Spec.Directives = []v1alpha1.Directive{{Type: v1alpha1.DirectiveDegrade, Gate: v1alpha1.GateSteps,
		Message: "24 of 30 steps taken (80%): switch to a cheaper model and fewer tools"}}
	docs1.Spec.Mode = v1alpha1.ModeEdit
	digest1.Spec.RunPhase = v1alpha1.PhaseTerminated
	digest1.Spec.Grant = v1alpha1.Grant{ModelRequests: 6, ToolCalls: 7}
	for _, a := range attempts {
		if err := c.Create(ctx, a); err != nil {
			return now, err
		}
	}

	licences1.Status = v1alpha1.RunAttemptStatus{
		Usage: v1alpha1.Usage{ModelRequests: 3, ToolCalls: 1, Tokens: 2000}, Steps: 2, LastProgressStep: 2,
		Faults: []v1alpha1.Fault{{Scope: v1alpha1.FaultScopeProvider, Kind: "Timeout", Retryable: true, Count: 1,
			LastMessage: "model request timed out after 60s", Escalated: true}},
		HeartbeatTime: t.ago(22 * time.Minute),
	}
	licences2.Status = v1alpha1.RunAttemptStatus{
		Usage: v1alpha1.Usage{ModelRequests: 4, ToolCalls: 3, Tokens: 3400}, Steps: 4, LastProgressStep: 3,
		Calls: []v1alpha1.CallCount{{Tool: "search.web", Fingerprint: "a1b2c3d4e5f60718", Count: 2},
			{Tool: "ticket.create", Fingerprint: "9c1e2f3a4b5c6d7e", Count: 1}},
		InFlight: []v1alpha1.InFlightEffect{{ID: "call-7", Tool: "ticket.create", Effect: v1alpha1.EffectExternal,
			StartedAt: t.ago(13 * time.Minute), Fingerprint: "9c1e2f3a4b5c6d7e", Outcome: v1alpha1.OutcomeUnknown,
			Message: "the tool server's connection was lost after dispatch"}},
		Faults: []v1alpha1.Fault{{Scope: v1alpha1.FaultScopeTool, Kind: "Timeout", Retryable: true, Count: 2,
			LastMessage: "search.web timed out after 30s"}},
		Publication: v1alpha1.Publication{BlocksPlanned: 3, BlocksCommitted: 1, Settlement: v1alpha1.SettlementPartial,
			Settled: true, Location: "configmap/compare-licences-report"},
		HeartbeatTime: t.ago(10 * time.Minute),
	}
	docs1.Status = v1alpha1.RunAttemptStatus{
		Usage: v1alpha1.Usage{ModelRequests: 12, ToolCalls: 9, Tokens: 18000}, Steps: 24, LastProgressStep: 24,
		Calls: []v1alpha1.CallCount{{Tool: "http.get", Fingerprint: "0f1e2d3c4b5a6978", Count: 1}},
		AwaitingApproval: []v1alpha1.ApprovalRequest{{ActionID: "report.publish-3f9a0c1d2e4b5a69",
			Tool: "report.publish", Risk: v1alpha1.RiskHigh,
			Summary:         textutil.Truncate(docsArgs, 256),
			Arguments:       docsArgs,
			ArgumentsBytes:  int64(len(docsArgs)),
			ArgumentsSHA256: docsArgsSHA256,
			RequestedAt:     t.ago(time.Minute), ExpiresAt: t.in(14 * time.Minute)}},
		HeartbeatTime: t.ago(time.Minute),
	}
	digest1.Status = v1alpha1.RunAttemptStatus{
		Usage: v1alpha1.Usage{ModelRequests: 4, ToolCalls: 2, Tokens: 3000}, Steps: 4, LastProgressStep: 4,
		FinishProposed: true,
		Publication: v1alpha1.Publication{BlocksPlanned: 1, BlocksCommitted: 1, Settlement: v1alpha1.SettlementComplete,
			Settled: true, Location: "configmap/weekly-digest-report"},
		HeartbeatTime: t.ago(3 * time.Hour),
	}
	for _, a := range attempts {
		if err := c.Status().Update(ctx, a); err != nil {
			return now, fmt.Errorf("status of %s: %w", a.Name, err)
		}
	}

	ended, finalizing := t.ago(10*time.Minute), t.ago(12*time.Minute)
	licences.Status = v1alpha1.ResearchRunStatus{
		ObservedGeneration: 1, Phase: v1alpha1.PhaseTerminated, Reason: v1alpha1.ReasonBudgetExhausted,
		Settlement: v1alpha1.SettlementPartial,
		Message: "working budget exhausted at 6/6 model requests; finalized from the reserve of 2 model requests " +
			"and 3 tool calls; 1 of 3 blocks published to configmap/compare-licences-report",
		Attempt: 2, Steps: 6,
		QueuedTime: t.ago(26 * time.Minute), StartTime: t.ago(25 * time.Minute), FinalizingTime: finalizing,
		CompletionTime: ended,
		Finalization: &v1alpha1.FinalizationStatus{Reason: v1alpha1.ReasonBudgetExhausted,
			Cause: "working budget exhausted at 6/6 model requests", Reserve: v1alpha1.Usage{ModelRequests: 2, ToolCalls: 3}},
		Budget: v1alpha1.BudgetStatus{Used: v1alpha1.Usage{ModelRequests: 7, ToolCalls: 4, Tokens: 5400},
			Remaining: v1alpha1.Usage{ModelRequests: 1, ToolCalls: 6},
			Granted:   v1alpha1.Usage{ModelRequests: 5, ToolCalls: 5}},
		Ledger: []v1alpha1.AttemptLedger{
			{Attempt: 1, Used: v1alpha1.Usage{ModelRequests: 3, ToolCalls: 1, Tokens: 2000}, Steps: 2},
			{Attempt: 2, Used: v1alpha1.Usage{ModelRequests: 4, ToolCalls: 3, Tokens: 3400}, Steps: 4}},
		Gates: v1alpha1.GateStatus{Steps: 6, StepsWithoutProgress: 1, MaxSameCall: 2, LocalFaults: 2},
		Conditions: []metav1.Condition{
			cond("Ready", metav1.ConditionFalse, "BudgetExhausted", "working budget exhausted at 6/6 model requests", ended),
			cond("Succeeded", metav1.ConditionFalse, "BudgetExhausted", "1 of 3 blocks published", ended),
			cond("Finalizing", metav1.ConditionFalse, "Terminated", "finalization is over", ended),
			cond("Recovering", metav1.ConditionFalse, "Terminated", "recovery is over", ended),
			cond("Stalled", metav1.ConditionTrue, "BudgetExhausted", "working budget exhausted at 6/6 model requests", ended),
			cond("AwaitingApproval", metav1.ConditionFalse, "NoPendingApprovals", "no call waits for a decision", ended),
		},
	}
	pending := docs1.Status.AwaitingApproval[0]
	pending.Attempt = 1
	docs.Status = v1alpha1.ResearchRunStatus{
		ObservedGeneration: 2, Phase: v1alpha1.PhaseRunning, Message: "attempt 1 is running: 24 steps",
		Attempt: 1, Steps: 24, QueuedTime: t.ago(7 * time.Minute), StartTime: t.ago(6 * time.Minute),
		Budget: v1alpha1.BudgetStatus{Used: v1alpha1.Usage{ModelRequests: 12, ToolCalls: 9, Tokens: 18000},
			Remaining: v1alpha1.Usage{ModelRequests: 28, ToolCalls: 71},
			Granted:   v1alpha1.Usage{ModelRequests: 38, ToolCalls: 75}},
		Ledger: []v1alpha1.AttemptLedger{{Attempt: 1, Used: docs1.Status.Usage, Steps: 24}},
		Gates: v1alpha1.GateStatus{Steps: 24, MaxSameCall: 1,
			Directives: []v1alpha1.DirectiveType{v1alpha1.DirectiveDegrade}},
		PendingApprovals: []v1alpha1.ApprovalRequest{pending},
		Conditions: []metav1.Condition{
			cond("Ready", metav1.ConditionTrue, "Running", "attempt 1 is running", t.ago(6*time.Minute)),
			cond("AwaitingApproval", metav1.ConditionTrue, "ApprovalPending",
				"report.publish-3f9a0c1d2e4b5a69 (report.publish, risk High) waits for a decision", t.ago(time.Minute)),
		},
	}
	survey.Status = v1alpha1.ResearchRunStatus{
		ObservedGeneration: 1, Phase: v1alpha1.PhaseQueued, QueuePosition: 1, QueuedTime: t.ago(5 * time.Minute),
		Message: `queued in session "research" at position 1 of at most 100 waiting runs`,
	}
	digest.Status = v1alpha1.ResearchRunStatus{
		ObservedGeneration: 1, Phase: v1alpha1.PhaseTerminated, Reason: v1alpha1.ReasonCompleted,
		Settlement: v1alpha1.SettlementComplete, Message: "completed: 1/1 sections in configmap/weekly-digest-report",
		Attempt: 1, Steps: 4, StartTime: t.ago(3*time.Hour + 20*time.Minute),
		FinalizingTime: t.ago(3*time.Hour + 5*time.Minute), CompletionTime: t.ago(3 * time.Hour),
		Finalization: &v1alpha1.FinalizationStatus{Reason: v1alpha1.ReasonCompleted, Cause: "the agent proposed finish",
			Reserve: v1alpha1.Usage{ModelRequests: 2, ToolCalls: 3}},
		Budget: v1alpha1.BudgetStatus{Used: digest1.Status.Usage},
		Ledger: []v1alpha1.AttemptLedger{{Attempt: 1, Used: digest1.Status.Usage, Steps: 4}},
		Gates:  v1alpha1.GateStatus{Steps: 4},
	}
	for _, rr := range runs {
		if err := c.Status().Update(ctx, rr); err != nil {
			return now, fmt.Errorf("status of %s: %w", rr.Name, err)
		}
	}
	return now, nil
}
