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

package lifecycle

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// Expected AwaitingApproval conditions and approval events.
const (
	awaitingTrue   = "AwaitingApproval=True/ApprovalPending"
	awaitingFalse  = "AwaitingApproval=False/NoPendingApprovals"
	evRequested    = "Normal/ApprovalRequested"
	evChangedNone  = "Warning/ApprovalChangedNothing"
	toolWrite      = "files.write"
	approveCommand = `kubectl patch researchrun r1 --type=json -p '[{"op":"add","path":"/spec/approvals/-","value":{"actionID":"a1","decision":"Approve"}}]'`
)

// request is a call of tool waiting for a decision, requested at t0+req and
// expiring 15m later.
func request(id, tool string, risk v1alpha1.Risk, req time.Duration) v1alpha1.ApprovalRequest {
	return v1alpha1.ApprovalRequest{ActionID: id, Tool: tool, Risk: risk, Summary: `{"path":"notes/plan.md"}`,
		RequestedAt: mt(req), ExpiresAt: mt(req + 15*time.Minute)}
}

// waiting is attempt n's status with the given calls waiting.
func waiting(reqs ...v1alpha1.ApprovalRequest) v1alpha1.RunAttemptStatus {
	return v1alpha1.RunAttemptStatus{Steps: 2, LastProgressStep: 2, AwaitingApproval: reqs}
}

// mirrored puts reqs (of attempt n) in the persisted status, as an earlier
// pass wrote them, with the condition True.
func mirrored(n int32, reqs ...v1alpha1.ApprovalRequest) func(*Input) {
	return func(in *Input) {
		for _, r := range reqs {
			r.Attempt = n
			in.Status.PendingApprovals = append(in.Status.PendingApprovals, r)
		}
		in.Status.Conditions = append(in.Status.Conditions,
			cond(v1alpha1.ConditionAwaitingApproval, metav1.ConditionTrue, v1alpha1.ConditionReasonApprovalPending, "earlier", 0))
	}
}

// approved appends approvals of ids to spec.approvals; observed of them
// were judged by an earlier pass.
func approved(observed int32, ids ...string) func(*Input) {
	return func(in *Input) {
		for _, id := range ids {
			in.Spec.Approvals = append(in.Spec.Approvals, v1alpha1.Approval{ActionID: id, Decision: v1alpha1.DecisionApprove, Approver: "alice"})
		}
		in.Status.ObservedApprovals = observed
	}
}

type approvalOutcome struct {
	Rung       string
	Phase      v1alpha1.Phase
	Pending    []string // actionID@attempt
	Observed   int32
	Events     []string // Type/Reason
	Conditions []string // every condition but Reconciling, AwaitingApproval included, sorted
}

type approvalCase struct {
	in   Input
	want approvalOutcome
	// condition and events are substrings the AwaitingApproval message and
	// the messages of the events (joined) must contain.
	condition, events []string
	requeue           time.Duration // 0: not checked
}

func approvalCases() map[string]approvalCase {
	a1 := request("a1", toolWrite, v1alpha1.RiskMedium, 5*time.Minute)
	a2 := request("a2", "report.publish", v1alpha1.RiskHigh, 6*time.Minute)
	now := 7 * time.Minute
	return map[string]approvalCase{
		"a call waits: mirrored with its attempt, condition True, one event": {
			in: runningAt(now, fact(1, waiting(a1))),
			want: approvalOutcome{Rung: rungSteady, Phase: running, Pending: []string{"a1@1"},
				Events: []string{evRequested}, Conditions: []string{awaitingTrue, readyTrue}},
			condition: []string{"1 call of attempt 1 waits for a decision: a1 (tool files.write, risk Medium)", approveCommand, `"decision":"Deny"`},
			events: []string{"action a1 of attempt 1 waits for a decision (tool files.write, risk Medium)", `{"path":"notes/plan.md"}`,
				"refused if not decided by 2026-03-01T12:20:00Z", approveCommand},
		},
		"a call whose summary is cut: the event says where to read the whole arguments": {
			in: runningAt(now, fact(1, waiting(v1alpha1.ApprovalRequest{ActionID: "a3", Summary: "{\"text\":\"aaa…",
				Arguments: "{\"text\":\"aaaa… 600 bytes\"}", ArgumentsBytes: 600, ArgumentsSHA256: "ab12"}))),
			want: approvalOutcome{Rung: rungSteady, Phase: running, Pending: []string{"a3@1"},
				Events: []string{evRequested}, Conditions: []string{awaitingTrue, readyTrue}},
			events: []string{"(cut: read all 600 bytes of arguments with kubectl agentrun why r1 before deciding)"},
		},
		"a call whose arguments are too long to be shown: the command names their hash": {
			in: runningAt(now, fact(1, waiting(v1alpha1.ApprovalRequest{ActionID: "a4", Summary: "{\"text\":\"aaa…",
				ArgumentsBytes: 20000, ArgumentsSHA256: "ab12", ArgumentsTruncated: true}))),
			want: approvalOutcome{Rung: rungSteady, Phase: running, Pending: []string{"a4@1"},
				Events: []string{evRequested}, Conditions: []string{awaitingTrue, readyTrue}},
			condition: []string{`"actionID":"a4","decision":"Approve","argumentsSHA256":"ab12"`},
			events:    []string{"its 20000 bytes of arguments are too long to be shown in full", `"argumentsSHA256":"ab12"`},
		},
		"still waiting: no second event": {
			in: with(runningAt(now, fact(1, waiting(a1))), mirrored(1, a1)),
			want: approvalOutcome{Rung: rungSteady, Phase: running, Pending: []string{"a1@1"},
				Conditions: []string{awaitingTrue, readyTrue}},
		},
		"a call of the agent API names only its action": {
			in: runningAt(now, fact(1, waiting(v1alpha1.ApprovalRequest{ActionID: "report.publish-1f2e"}))),
			want: approvalOutcome{Rung: rungSteady, Phase: running, Pending: []string{"report.publish-1f2e@1"},
				Events: []string{evRequested}, Conditions: []string{awaitingTrue, readyTrue}},
			condition: []string{"1 call of attempt 1 waits for a decision: report.publish-1f2e; approve with:"},
			events:    []string{"action report.publish-1f2e of attempt 1 waits for a decision; approve with:"},
		},
		"a second call waits: one event, for it": {
			in: with(runningAt(now, fact(1, waiting(a1, a2))), mirrored(1, a1)),
			want: approvalOutcome{Rung: rungSteady, Phase: running, Pending: []string{"a1@1", "a2@1"},
				Events: []string{evRequested}, Conditions: []string{awaitingTrue, readyTrue}},
			condition: []string{"2 calls of attempt 1 wait for a decision: a1 (tool files.write, risk Medium), a2 (tool report.publish, risk High)"},
			events:    []string{"action a2 of attempt 1", "risk High"},
		},
		"the list empties: gone from the run, condition False, no event": {
			in: with(runningAt(now, fact(1, waiting())), mirrored(1, a1)),
			want: approvalOutcome{Rung: rungSteady, Phase: running,
				Conditions: []string{awaitingFalse, readyTrue}},
			condition: []string{"no tool call waits for a decision"},
		},
		"a started run gets the condition False": {
			in:   runningAt(now, fact(1, waiting())),
			want: approvalOutcome{Rung: rungSteady, Phase: running, Conditions: []string{awaitingFalse, readyTrue}},
		},
		"a queued run gets no condition": {
			in: Input{Now: at(0), Name: "r1", Generation: 1, Spec: testSpec(), Status: v1alpha1.ResearchRunStatus{Phase: queued},
				Pod: PodObservation{Phase: PodAbsent}, Queue: QueueView{Position: 1, Limit: 3}},
			want: approvalOutcome{Rung: rungQueue, Phase: queued, Conditions: []string{readyQueued}},
		},
		"a finalizing run shows its waiting publish": {
			in: with(runningAt(now, fact(1, waiting(a2))), finalizingSince(v1alpha1.ReasonCompleted, 6*time.Minute, usage(3, 2))),
			want: approvalOutcome{Rung: rungSteady, Phase: finalizing, Pending: []string{"a2@1"}, Events: []string{evRequested},
				Conditions: []string{awaitingTrue, finalizingFor(v1alpha1.ReasonCompleted), readyFinal}},
		},
		"a failed attempt's calls are not pending": {
			in: with(runningAt(now, fact(1, waiting(a1))), mirrored(1, a1), podIs(PodFailed)),
			want: approvalOutcome{Rung: rungAttemptFailed, Phase: recovering, Events: []string{evRecovering},
				Conditions: []string{awaitingFalse, readyRecovering, recoveringFailed}},
		},
		"an ending run has nothing pending": {
			in: with(runningAt(now, fact(1, waiting(a1))), mirrored(1, a1), func(in *Input) { in.Spec.Stop = v1alpha1.StopCancel }),
			want: approvalOutcome{Rung: rungCancel, Phase: running, Events: []string{evStopping},
				Conditions: []string{awaitingFalse, readyStop}},
		},

		// Decisions.
		"a decision for the waiting call changes something: no warning": {
			in: with(runningAt(now, fact(1, waiting(a1))), mirrored(1, a1), approved(0, "a1")),
			want: approvalOutcome{Rung: rungSteady, Phase: running, Pending: []string{"a1@1"}, Observed: 1,
				Conditions: []string{awaitingTrue, readyTrue}},
		},
		"a late decision changes nothing: one warning": {
			in: with(runningAt(now, fact(1, waiting())), approved(0, "a1")),
			want: approvalOutcome{Rung: rungSteady, Phase: running, Observed: 1, Events: []string{evChangedNone},
				Conditions: []string{awaitingFalse, readyTrue}},
			events: []string{"Approve of action a1 by alice changes nothing: no call of attempt 1 waits on it (already dispatched, refused or expired, or never asked)"},
		},
		"a judged decision is not judged again": {
			in: with(runningAt(now, fact(1, waiting())), approved(1, "a1")),
			want: approvalOutcome{Rung: rungSteady, Phase: running, Observed: 1,
				Conditions: []string{awaitingFalse, readyTrue}},
		},
		"only the new entries are judged": {
			in: with(runningAt(now, fact(1, waiting(a2))), mirrored(1, a2), approved(1, "a1", "a2", "zz")),
			want: approvalOutcome{Rung: rungSteady, Phase: running, Pending: []string{"a2@1"}, Observed: 3,
				Events: []string{evChangedNone}, Conditions: []string{awaitingTrue, readyTrue}},
			events: []string{"action zz"},
		},
		"a decision for a queued run changes nothing": {
			in: with(Input{Now: at(0), Name: "r1", Generation: 1, Spec: testSpec(), Status: v1alpha1.ResearchRunStatus{Phase: queued},
				Pod: PodObservation{Phase: PodAbsent}, Queue: QueueView{Position: 1, Limit: 3}}, approved(0, "a1")),
			want: approvalOutcome{Rung: rungQueue, Phase: queued, Observed: 1, Events: []string{evChangedNone},
				Conditions: []string{readyQueued}},
			events: []string{"no call of this run waits on it"},
		},

		// Liveness: waiting on a person is not silence.
		"a call waiting for 20m without heartbeats does not fail the attempt": {
			in: func() Input {
				a := request("a1", toolWrite, v1alpha1.RiskMedium, 0)
				a.ExpiresAt = mt(30 * time.Minute)
				in := runningAt(20*time.Minute, fact(1, waiting(a)))
				in.Attempts[0].Status.HeartbeatTime = mt(10 * time.Second)
				return with(in, mirrored(1, a))
			}(),
			want: approvalOutcome{Rung: rungSteady, Phase: running, Pending: []string{"a1@1"},
				Conditions: []string{awaitingTrue, readyTrue}},
			requeue: 2*time.Minute + 30*time.Second, // the Degrade point of the deadline, before expiry + heartbeat timeout
		},
		"the heartbeat timeout counts again from the expiry": {
			in: func() Input {
				a := request("a1", toolWrite, v1alpha1.RiskMedium, 0)
				a.ExpiresAt = mt(10 * time.Minute)
				in := runningAt(11*time.Minute, fact(1, waiting(a)))
				in.Attempts[0].Status.HeartbeatTime = mt(10 * time.Second)
				return with(in, mirrored(1, a))
			}(),
			want: approvalOutcome{Rung: rungAttemptFailed, Phase: recovering, Events: []string{evRecovering},
				Conditions: []string{awaitingFalse, readyRecovering, recoveringFailed}},
		},
	}
}

func TestApprovals(t *testing.T) {
	for name, tc := range approvalCases() {
		t.Run(name, func(t *testing.T) {
			before := *tc.in.Status.DeepCopy()
			d, rung := decide(tc.in)
			got := approvalOutcome{Rung: rung, Phase: d.Status.Phase, Observed: d.Status.ObservedApprovals}
			for _, r := range d.Status.PendingApprovals {
				got.Pending = append(got.Pending, fmt.Sprintf("%s@%d", r.ActionID, r.Attempt))
			}
			var msgs []string
			for _, e := range d.Events {
				got.Events = append(got.Events, e.Type+"/"+e.Reason)
				msgs = append(msgs, e.Message)
			}
			for _, c := range d.Status.Conditions {
				if c.Type == v1alpha1.ConditionReconciling {
					continue // the phase again; see summarize
				}
				got.Conditions = append(got.Conditions, fmt.Sprintf("%s=%s/%s", c.Type, c.Status, c.Reason))
			}
			slices.Sort(got.Conditions)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("decision (-want +got):\n%s\nmessage: %s", diff, d.Status.Message)
			}
			var condMsg string
			for _, c := range d.Status.Conditions {
				if c.Type == v1alpha1.ConditionAwaitingApproval {
					condMsg = c.Message
				}
			}
			for _, s := range tc.condition {
				if !strings.Contains(condMsg, s) {
					t.Errorf("AwaitingApproval message %q does not contain %q", condMsg, s)
				}
			}
			all := strings.Join(msgs, "\n")
			for _, s := range tc.events {
				if !strings.Contains(all, s) {
					t.Errorf("event messages %q do not contain %q", all, s)
				}
			}
			if tc.requeue != 0 && d.RequeueAfter != tc.requeue {
				t.Errorf("requeue after %s, want %s", d.RequeueAfter, tc.requeue)
			}
			if diff := cmp.Diff(before, tc.in.Status); diff != "" {
				t.Errorf("Decide modified its input (-before +after):\n%s", diff)
			}

			// Applying the decision and deciding again reports nothing new.
			again := tc.in
			again.Status = d.Status
			d2 := Decide(again)
			for _, e := range d2.Events {
				if strings.HasPrefix(e.Reason, "Approval") {
					t.Errorf("deciding again from the decided status reported %s/%s: %s", e.Type, e.Reason, e.Message)
				}
			}
			if diff := cmp.Diff(d.Status.PendingApprovals, d2.Status.PendingApprovals); diff != "" && d.Status.Phase == d2.Status.Phase {
				t.Errorf("pending approvals changed on a second pass (-first +second):\n%s", diff)
			}
		})
	}
}

// TestAWaitingCallCountsTowardNoGate: a call waiting for a decision moves no
// gate — steps, steps without progress, repeated calls, budget — and adds
// no directive.
func TestAWaitingCallCountsTowardNoGate(t *testing.T) {
	for name, tc := range decideCases() {
		if len(tc.in.Attempts) == 0 {
			continue
		}
		t.Run(name, func(t *testing.T) {
			without := Decide(tc.in)
			in := tc.in
			in.Attempts = slices.Clone(in.Attempts)
			for i := range in.Attempts {
				r := request(fmt.Sprintf("w%d", i), toolWrite, v1alpha1.RiskMedium, -time.Hour)
				r.ExpiresAt = nil // no liveness either: only the gates are compared
				in.Attempts[i].Status.AwaitingApproval = []v1alpha1.ApprovalRequest{r}
			}
			with := Decide(in)
			if diff := cmp.Diff(without.Status.Gates, with.Status.Gates); diff != "" {
				t.Errorf("a waiting call moved a gate (-without +with):\n%s", diff)
			}
			if diff := cmp.Diff(without.Directives, with.Directives); diff != "" {
				t.Errorf("a waiting call changed the directives (-without +with):\n%s", diff)
			}
			if without.Status.Phase != with.Status.Phase || without.Status.Reason != with.Status.Reason {
				t.Errorf("a waiting call changed the decision: %s/%s, with it %s/%s",
					without.Status.Phase, without.Status.Reason, with.Status.Phase, with.Status.Reason)
			}
		})
	}
}
