package lifecycle

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// exitCases are the decision table's rows for a pod that stopped on its own:
// exit 0 is the agent's implicit finish (an agent that only uses the
// gateway's two doors never calls finish and settle), settled from what the
// gateway published; and the fact grace, which holds the decision until the
// gateway's last coalesced facts are in.
func exitCases() map[string]decideCase {
	const grace = 3 * time.Second
	report := func(planned, committed int32) v1alpha1.Publication {
		return v1alpha1.Publication{BlocksPlanned: planned, BlocksCommitted: committed, Location: "configmap/r1-report"}
	}
	// exited: the pod exited 0 at t0+finished, with the 3s fact grace.
	exited := func(ph PodPhase, finished time.Duration) func(*Input) {
		return func(in *Input) {
			in.Pod.Phase, in.Pod.FinishedAt, in.FactGrace = ph, at(finished), grace
		}
	}
	written := func(t time.Duration) func(*Input) {
		return func(in *Input) { in.Attempts[0].FactsWritten = at(t) }
	}
	finalizeGrant := func(in *Input) {
		in.Attempts[0].Grant = v1alpha1.Grant{ModelRequests: 42, ToolCalls: 4, FinalizeOnly: true}
	}
	worked := v1alpha1.RunAttemptStatus{Usage: usage(3, 2), Steps: 3, LastProgressStep: 3, Publication: report(1, 1)}
	completedOK := completed(finalizingOver)
	completedShort := []string{finalizingOver, "Ready=True/Completed", "Succeeded=False/Completed"}
	implicit := "attempt 1 exited 0 after 3 steps without proposing finish: an implicit finish; " +
		"the agent exited 0 without settling; settled from what the gateway published: 1/1 sections in configmap/r1-report"

	return map[string]decideCase{
		// Exit 0: an implicit finish, settled from the facts.
		"exit 0: an implicit finish, settled Complete from what the gateway published": {
			in: with(runningAt(time.Minute, fact(1, worked)), podIs(PodSucceeded)),
			want: outcome{Rung: rungFinish, Phase: terminated, Reason: v1alpha1.ReasonCompleted, Settlement: v1alpha1.SettlementComplete,
				StatusAttempt: 1, Events: []string{evCompleted}, Conditions: completedOK},
			message: implicit,
			check: func(t *testing.T, d Decision) {
				fin := d.Status.Finalization
				if fin == nil || fin.Reason != v1alpha1.ReasonCompleted || d.Status.FinalizingTime == nil || d.Status.CompletionTime == nil {
					t.Errorf("finalization %+v, finalizing %v, completion %v", fin, d.Status.FinalizingTime, d.Status.CompletionTime)
				}
				if d.Status.Budget.Used != usage(3, 2) {
					t.Errorf("used %+v", d.Status.Budget.Used)
				}
			},
		},
		"exit 0 with a side effect whose outcome is unknown: Completed, and the message names it": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Steps: 3, Publication: report(1, 1),
				InFlight: []v1alpha1.InFlightEffect{{ID: "call-7", Tool: "ticket.create", Effect: v1alpha1.EffectExternal,
					Outcome: v1alpha1.OutcomeUnknown}}})), podIs(PodSucceeded)),
			want: outcome{Rung: rungFinish, Phase: terminated, Reason: v1alpha1.ReasonCompleted, Settlement: v1alpha1.SettlementComplete,
				StatusAttempt: 1, Events: []string{evCompleted}, Conditions: completedOK},
			message: "1 side effect has an unknown outcome, check it: ticket.create call-7",
		},
		"exit 0: Partial when some planned sections are published": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Steps: 3, Publication: report(5, 2)})), podIs(PodSucceeded)),
			want: outcome{Rung: rungFinish, Phase: terminated, Reason: v1alpha1.ReasonCompleted, Settlement: v1alpha1.SettlementPartial,
				StatusAttempt: 1, Events: []string{evCompleted}, Conditions: completedShort},
			message: "settled from what the gateway published: 2/5 sections in configmap/r1-report",
		},
		"exit 0: None when nothing was published": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{})), podIs(PodSucceeded)),
			want: outcome{Rung: rungFinish, Phase: terminated, Reason: v1alpha1.ReasonCompleted, Settlement: v1alpha1.SettlementNone,
				StatusAttempt: 1, Events: []string{evCompleted}, Conditions: completedShort},
			message: "attempt 1 exited 0 after 0 steps without proposing finish: an implicit finish; " +
				"the agent exited 0 without settling; settled from what the gateway published: 0/0 sections",
		},
		"exit 0 after proposing finish: settled from the facts in the same pass": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Steps: 8, FinishProposed: true, Publication: report(5, 5)})),
				podIs(PodSucceeded)),
			want: outcome{Rung: rungFinish, Phase: terminated, Reason: v1alpha1.ReasonCompleted, Settlement: v1alpha1.SettlementComplete,
				StatusAttempt: 1, Events: []string{evCompleted}, Conditions: completedOK},
			message: "attempt 1 proposed finish after 8 steps; the agent exited 0 without settling; " +
				"settled from what the gateway published: 5/5 sections",
		},
		"exit 0 while finalizing without settling: the finalization's reason, settled from the facts": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(41, 3), Publication: report(5, 5)})),
				finalizingSince(v1alpha1.ReasonBudgetExhausted, 50*time.Second, usage(42, 4)), podIs(PodSucceeded), finalizeGrant),
			want: outcome{Rung: rungFinish, Phase: terminated, Reason: v1alpha1.ReasonBudgetExhausted, Settlement: v1alpha1.SettlementComplete,
				StatusAttempt: 1, Events: []string{evTerminated}, Conditions: endedOK(v1alpha1.ReasonBudgetExhausted, finalizingOver)},
			message: "gate reached; finalized from the reserve of 2 model requests; the agent exited 0 without settling; " +
				"settled from what the gateway published: 5/5 sections",
		},
		"exit 0 while finalizing, deleted by someone before it settled: ends with the persisted facts": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(41, 3), Publication: report(5, 5)})),
				finalizingSince(v1alpha1.ReasonBudgetExhausted, 50*time.Second, usage(42, 4)), podIs(PodSucceeded), finalizeGrant,
				func(in *Input) { in.Pod.Terminating = true }),
			want: outcome{Rung: rungAttemptFailed, Phase: terminated, Reason: v1alpha1.ReasonBudgetExhausted, Settlement: v1alpha1.SettlementPartial,
				StatusAttempt: 1, Events: []string{evTerminated}, Conditions: endedOK(v1alpha1.ReasonBudgetExhausted, finalizingOver)},
			message: "its pod was deleted and exited before its publication settled",
		},
		"exit 0 with an effect in flight without idempotency key: an implicit finish; nothing is replayed": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Steps: 2, InFlight: []v1alpha1.InFlightEffect{
				{ID: "c-7", Tool: toolPost, Effect: v1alpha1.EffectExternal, Outcome: v1alpha1.OutcomeUnknown}}})), podIs(PodSucceeded)),
			want: outcome{Rung: rungFinish, Phase: terminated, Reason: v1alpha1.ReasonCompleted, Settlement: v1alpha1.SettlementNone,
				StatusAttempt: 1, Events: []string{evCompleted}, Conditions: completedShort},
			message: "attempt 1 exited 0 after 2 steps without proposing finish",
		},
		"exit 0 of a replacement attempt before it was seen running: an implicit finish": {
			in: with(runningAt(30*time.Second,
				fact(1, v1alpha1.RunAttemptStatus{Usage: usage(30, 4), Steps: 10}),
				fact(2, v1alpha1.RunAttemptStatus{Usage: usage(5, 1), Steps: 2, Publication: report(1, 1)})),
				func(in *Input) {
					in.Status.Phase = recovering
					in.Status.Conditions = []metav1.Condition{
						cond(v1alpha1.ConditionRecovering, metav1.ConditionTrue, v1alpha1.ConditionReasonStartingAttempt, "attempt 1 failed: its pod failed", 15*time.Second),
					}
					in.Attempts[1].Grant = v1alpha1.Grant{ModelRequests: 10, ToolCalls: 14}
				}, podIs(PodSucceeded)),
			want: outcome{Rung: rungFinish, Phase: terminated, Reason: v1alpha1.ReasonCompleted, Settlement: v1alpha1.SettlementComplete,
				StatusAttempt: 2, Superseded: []int32{1}, Events: []string{evCompleted},
				Conditions: completed(finalizingOver, "Recovering=False/Terminated")},
			message: "attempt 2 exited 0 after 12 steps without proposing finish: an implicit finish",
		},
		"exit non-zero stays a failure, once the facts are final": {
			in: with(runningAt(64*time.Second, fact(1, worked)), exited(PodFailed, time.Minute)),
			want: outcome{Rung: rungAttemptFailed, Phase: recovering, StatusAttempt: 1, RequeueAfter: 5 * time.Second,
				Events: []string{evRecovering}, Conditions: []string{readyRecovering, recoveringFailed}},
			message: "attempt 1 failed: its pod failed",
		},

		// The fact grace.
		"fact grace: the pod exited 0, no write since: hold the course, look again at the grace's end": {
			in: with(runningAt(61*time.Second, fact(1, worked)), exited(PodSucceeded, time.Minute), written(59*time.Second)),
			want: outcome{Rung: rungFactGrace, Phase: running, StatusAttempt: 1, Attempt: 1, Grant: working,
				RequeueAfter: 2 * time.Second, Conditions: []string{readyTrue}},
			message: "the pod of attempt 1 stopped (Succeeded); waiting up to 2s for the gateway's last facts",
		},
		"fact grace: a write in the same second as the exit is not known to be after it": {
			in: with(runningAt(61*time.Second, fact(1, worked)), exited(PodSucceeded, time.Minute+700*time.Millisecond),
				written(time.Minute+900*time.Millisecond)),
			want: outcome{Rung: rungFactGrace, Phase: running, StatusAttempt: 1, Attempt: 1, Grant: working,
				RequeueAfter: 2 * time.Second, Conditions: []string{readyTrue}},
		},
		"fact grace: a write after the exit makes the facts final: decide at once": {
			in: with(runningAt(61*time.Second, fact(1, worked)), exited(PodSucceeded, time.Minute), written(61*time.Second)),
			want: outcome{Rung: rungFinish, Phase: terminated, Reason: v1alpha1.ReasonCompleted, Settlement: v1alpha1.SettlementComplete,
				StatusAttempt: 1, Events: []string{evCompleted}, Conditions: completedOK},
			message: implicit,
		},
		"fact grace: over: decide on the facts there are": {
			in: with(runningAt(63*time.Second, fact(1, worked)), exited(PodSucceeded, time.Minute), written(59*time.Second)),
			want: outcome{Rung: rungFinish, Phase: terminated, Reason: v1alpha1.ReasonCompleted, Settlement: v1alpha1.SettlementComplete,
				StatusAttempt: 1, Events: []string{evCompleted}, Conditions: completedOK},
			message: implicit,
		},
		"fact grace: none once the agent proposed finish and settled (durable before it heard back)": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Steps: 8, FinishProposed: true,
				Publication: v1alpha1.Publication{BlocksPlanned: 1, BlocksCommitted: 1, Settled: true, Settlement: v1alpha1.SettlementComplete}})),
				exited(PodSucceeded, time.Minute)),
			want: outcome{Rung: rungFinish, Phase: terminated, Reason: v1alpha1.ReasonCompleted, Settlement: v1alpha1.SettlementComplete,
				StatusAttempt: 1, Events: []string{evCompleted}, Conditions: completedOK},
			message: "attempt 1 proposed finish after 8 steps; finalized from the reserve of 2 model requests and 2 tool calls; 1 of 1 blocks published",
		},
		"fact grace: a failed pod waits too before its attempt is judged": {
			in: with(runningAt(61*time.Second, fact(1, worked)), exited(PodFailed, time.Minute)),
			want: outcome{Rung: rungFactGrace, Phase: running, StatusAttempt: 1, Attempt: 1, Grant: working,
				RequeueAfter: 2 * time.Second, Conditions: []string{readyTrue}},
			message: "the pod of attempt 1 stopped (Failed); waiting up to 2s",
		},
		"fact grace: a finalizing run keeps its finalize grant while it waits": {
			in: with(runningAt(61*time.Second, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(41, 3), Publication: report(5, 5)})),
				finalizingSince(v1alpha1.ReasonBudgetExhausted, 50*time.Second, usage(42, 4)), exited(PodSucceeded, time.Minute), finalizeGrant),
			want: outcome{Rung: rungFactGrace, Phase: finalizing, Reason: v1alpha1.ReasonBudgetExhausted, StatusAttempt: 1, Attempt: 1,
				Grant: v1alpha1.Grant{ModelRequests: 42, ToolCalls: 4, FinalizeOnly: true}, RequeueAfter: 2 * time.Second,
				Conditions: []string{finalizingFor(v1alpha1.ReasonBudgetExhausted), readyFinal}},
			message: "waiting up to 2s for the gateway's last facts",
		},
		"fact grace: a cancel does not wait for it": {
			in: with(runningAt(61*time.Second, fact(1, worked)), exited(PodSucceeded, time.Minute),
				func(in *Input) { in.Spec.Stop = v1alpha1.StopCancel }),
			want: outcome{Rung: rungCancel, Phase: terminated, Reason: v1alpha1.ReasonCancelled, Settlement: v1alpha1.SettlementPartial,
				StatusAttempt: 1, Events: []string{evTerminated}, Conditions: endedOK(v1alpha1.ReasonCancelled)},
		},
	}
}

// TestScenarioAgentThatOnlyUsesTheDoors walks the run of an agent that
// never calls the agent API (an unmodified OpenAI SDK agent): it works
// through the gateway's doors, publishes with report.publish and exits 0.
// The decision waits for the gateway's last flush after the exit, then
// completes the run from what the gateway published, with the ledger the
// flush carried.
func TestScenarioAgentThatOnlyUsesTheDoors(t *testing.T) {
	s := newSim(testSpec(), QueueView{Holder: true})
	s.factGrace = 3 * time.Second
	var finished time.Time
	steps := []scenarioStep{
		{name: "holds the session: attempt 1 starts",
			want: outcome{Rung: rungSteady, Phase: running, StatusAttempt: 1, Attempt: 1, Grant: working,
				RequeueAfter: 22*time.Minute + 30*time.Second, Conditions: []string{readyTrue}}},
		{name: "its pod runs; the gateway reports what it dispatched", after: time.Second,
			facts: func() {
				s.pod().Phase, s.pod().StartTime = PodRunning, s.now
				a := s.attempt()
				a.Status = v1alpha1.RunAttemptStatus{Usage: usage(2, 1), Steps: 2, LastProgressStep: 2,
					Publication: v1alpha1.Publication{BlocksPlanned: 1, BlocksCommitted: 1}, HeartbeatTime: &metav1.Time{Time: s.now}}
				a.FactsWritten = s.now
			},
			want: outcome{Rung: rungSteady, Phase: running, StatusAttempt: 1, Attempt: 1, Grant: working,
				RequeueAfter: time.Minute, Conditions: []string{readyTrue}}},
		{name: "the agent exits 0 before the gateway's last flush: the run waits", after: 1500 * time.Millisecond,
			facts: func() {
				finished = s.now
				s.pod().Phase, s.pod().FinishedAt = PodSucceeded, finished
			},
			want: outcome{Rung: rungFactGrace, Phase: running, StatusAttempt: 1, Attempt: 1, Grant: working,
				// FinishedAt is kept in whole seconds: the grace counts from t0+2s.
				RequeueAfter: 2500 * time.Millisecond, Conditions: []string{readyTrue}},
			message: "the pod of attempt 1 stopped (Succeeded); waiting up to 3s for the gateway's last facts"},
		{name: "the flush lands: the last model request is counted, the run completes from what was published", after: time.Second,
			facts: func() {
				a := s.attempt()
				a.Status.Usage, a.Status.Steps, a.Status.LastProgressStep = usage(3, 1), 3, 3
				a.FactsWritten = s.now
			},
			want: outcome{Rung: rungFinish, Phase: terminated, Reason: v1alpha1.ReasonCompleted, Settlement: v1alpha1.SettlementComplete,
				StatusAttempt: 1, Events: []string{evCompleted}, Conditions: completed(finalizingOver)},
			message: "attempt 1 exited 0 after 3 steps without proposing finish: an implicit finish; " +
				"the agent exited 0 without settling; settled from what the gateway published: 1/1 sections"},
	}
	walk(t, s, steps)
	if got := s.status.Budget.Used; got != usage(3, 1) {
		t.Errorf("ledger %+v, want the flushed 3 model requests and 1 tool call", got)
	}
}
