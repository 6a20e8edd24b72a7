package lifecycle

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// scenarioStep is one pass of a scenario: time passes, the facts change,
// and the decision must be want (and its message exactly message, if set).
type scenarioStep struct {
	name    string
	after   time.Duration
	facts   func()
	want    outcome
	message string
}

// walk runs the steps, deciding once per step and applying each decision.
func walk(t *testing.T, s *sim, steps []scenarioStep) {
	t.Helper()
	for _, st := range steps {
		s.now = s.now.Add(st.after)
		if st.facts != nil {
			st.facts()
		}
		d, rung := s.step()
		if diff := cmp.Diff(st.want, summarize(d, rung)); diff != "" {
			t.Fatalf("%s (-want +got):\n%s\nmessage: %s", st.name, diff, d.Status.Message)
		}
		if st.message != "" && d.Status.Message != st.message {
			t.Fatalf("%s: message\n got %q\nwant %q", st.name, d.Status.Message, st.message)
		}
	}
}

// TestScenario walks one run through its life, pass by pass, applying every
// decision as the reconciler would: queued, started, evicted, recovered with
// the ledger carried, budget exhausted, finalized from the reserve, settled,
// given the finalization grace to exit, its pod deleted when it did not,
// terminated once the pod is gone.
func TestScenario(t *testing.T) {
	s := newSim(testSpec(), QueueView{Position: 1, Limit: 2, Timeout: 10 * time.Minute})
	run := func(a *AttemptFacts, mr, tc, steps int64) {
		a.Status.Usage = usage(mr, tc)
		a.Status.Steps, a.Status.LastProgressStep = steps, steps
		a.Status.HeartbeatTime = &metav1.Time{Time: s.now}
	}
	steps := []scenarioStep{
		{name: "queued behind the active run",
			want: outcome{Rung: rungQueue, Phase: queued, RequeueAfter: 10 * time.Minute, Events: []string{evQueued},
				Conditions: []string{readyQueued}}},
		{name: "holds the session: attempt 1 starts", after: 30 * time.Second,
			facts: func() { s.queue = QueueView{Holder: true} },
			want: outcome{Rung: rungSteady, Phase: running, StatusAttempt: 1, Attempt: 1, Grant: working,
				RequeueAfter: 22*time.Minute + 30*time.Second, Conditions: []string{readyTrue}}},
		{name: "works: 30 requests, Degrade", after: 5 * time.Minute,
			facts: func() {
				*s.pod() = PodObservation{Phase: PodRunning, Created: true, StartTime: s.now.Add(-4 * time.Minute)}
				run(s.attempt(), 30, 4, 10)
			},
			want: outcome{Rung: rungSteady, Phase: running, StatusAttempt: 1, Attempt: 1, Grant: working, RequeueAfter: time.Minute,
				Directives: []string{degradeAt30}, Conditions: []string{readyTrue}}},
		{name: "evicted: Recovering, backoff", after: 10 * time.Second,
			facts: func() { s.pod().Phase, s.pod().Message = PodFailed, evicted },
			want: outcome{Rung: rungAttemptFailed, Phase: recovering, StatusAttempt: 1, RequeueAfter: 5 * time.Second,
				Events: []string{evRecovering}, Conditions: []string{readyRecovering, recoveringFailed}},
			message: "attempt 1 failed: its pod failed: Evicted: node pressure; attempt 2 of 3 starts after the 5s backoff"},
		{name: "backoff over: attempt 2 gets what attempt 1 left", after: 5 * time.Second,
			want: outcome{Rung: rungAttemptFailed, Phase: recovering, StatusAttempt: 2, Attempt: 2,
				Grant: v1alpha1.Grant{ModelRequests: 10, ToolCalls: 14}, Superseded: []int32{1},
				RequeueAfter: 17*time.Minute + 15*time.Second, // the Degrade point of the deadline, 23m after t0
				Directives:   []string{degradeAt30}, Events: []string{evStarted},
				Conditions: []string{readyRecovering, recoveringStarting}}},
		{name: "attempt 2 runs: Running again, 35 used in all", after: 10 * time.Second,
			facts: func() {
				*s.pod() = PodObservation{Phase: PodRunning, Created: true, StartTime: s.now}
				run(s.attempt(), 5, 1, 2)
			},
			want: outcome{Rung: rungSteady, Phase: running, StatusAttempt: 2, Attempt: 2,
				Grant: v1alpha1.Grant{ModelRequests: 10, ToolCalls: 14}, Superseded: []int32{1}, RequeueAfter: time.Minute,
				Directives: []string{"Degrade/Budget: 35/40 model requests"}, Events: []string{evRunning},
				Conditions: []string{readyTrue, recovered}},
			message: "attempt 2 running: 35/40 model requests, 12/20 steps; directives: Degrade at 35/40 model requests"},
		{name: "working budget used up: Finalizing from the reserve", after: time.Minute,
			facts: func() { run(s.attempt(), 10, 3, 5) },
			want: outcome{Rung: rungGates, Phase: finalizing, Reason: v1alpha1.ReasonBudgetExhausted, StatusAttempt: 2, Attempt: 2,
				Grant: v1alpha1.Grant{ModelRequests: 12, ToolCalls: 5, FinalizeOnly: true}, Superseded: []int32{1},
				RequeueAfter: time.Minute, Events: []string{evFinalizing},
				Conditions: []string{finalizingFor(v1alpha1.ReasonBudgetExhausted), readyFinal, recovered}},
			message: "working budget exhausted at 40/40 model requests; finalizing from the reserve of 2 model requests and 2 tool calls"},
		{name: "publishes and settles while its pod runs: it gets the grace to exit", after: 20 * time.Second,
			facts: func() {
				run(s.attempt(), 12, 5, 6)
				s.attempt().Status.Publication = v1alpha1.Publication{BlocksPlanned: 5, BlocksCommitted: 3, Settled: true,
					Settlement: v1alpha1.SettlementPartial, Location: "configmap/r1-report"}
			},
			want: outcome{Rung: rungFinish, Phase: finalizing, Reason: v1alpha1.ReasonBudgetExhausted, StatusAttempt: 2, Attempt: 2,
				Grant: v1alpha1.Grant{ModelRequests: 12, ToolCalls: 5, FinalizeOnly: true}, Superseded: []int32{1},
				RequeueAfter: time.Minute, // heartbeat expiry, before the grace ends 1m40s from now
				Conditions:   []string{finalizingFor(v1alpha1.ReasonBudgetExhausted), readyFinal, recovered}},
			message: "working budget exhausted at 40/40 model requests; finalized from the reserve of 2 model requests and 2 tool calls; " +
				"waiting up to 1m40s for the pod of attempt 2 to exit"},
		{name: "still running, still beating: waits on until the grace is over", after: time.Minute,
			facts: func() { s.attempt().Status.HeartbeatTime = &metav1.Time{Time: s.now} },
			want: outcome{Rung: rungFinish, Phase: finalizing, Reason: v1alpha1.ReasonBudgetExhausted, StatusAttempt: 2, Attempt: 2,
				Grant: v1alpha1.Grant{ModelRequests: 12, ToolCalls: 5, FinalizeOnly: true}, Superseded: []int32{1},
				RequeueAfter: 40 * time.Second, // finalizingTime + the 2m grace
				Conditions:   []string{finalizingFor(v1alpha1.ReasonBudgetExhausted), readyFinal, recovered}},
			message: "working budget exhausted at 40/40 model requests; finalized from the reserve of 2 model requests and 2 tool calls; " +
				"waiting up to 40s for the pod of attempt 2 to exit"},
		{name: "the grace is over and the pod still runs: delete it", after: 40 * time.Second,
			facts: func() { s.attempt().Status.HeartbeatTime = &metav1.Time{Time: s.now} },
			want: outcome{Rung: rungFinish, Phase: finalizing, Reason: v1alpha1.ReasonBudgetExhausted, StatusAttempt: 2,
				Superseded: []int32{1}, DeletePod: true, RequeueAfter: StopPollInterval, Events: []string{evStopping},
				Conditions: []string{finalizingStopped, readyStop, recovered}},
			message: "working budget exhausted at 40/40 model requests; finalized from the reserve of 2 model requests and 2 tool calls; " +
				"waiting for the pod of attempt 2 to stop"},
		{name: "still stopping", after: time.Second,
			want: outcome{Rung: rungStopping, Phase: finalizing, Reason: v1alpha1.ReasonBudgetExhausted, StatusAttempt: 2,
				Superseded: []int32{1}, DeletePod: true, RequeueAfter: StopPollInterval,
				Conditions: []string{finalizingStopped, readyStop, recovered}}},
		{name: "pod gone: Terminated", after: time.Second,
			facts: func() { s.pod().Phase = PodAbsent },
			want: outcome{Rung: rungStopping, Phase: terminated, Reason: v1alpha1.ReasonBudgetExhausted, Settlement: v1alpha1.SettlementPartial,
				StatusAttempt: 2, Superseded: []int32{1}, Events: []string{evTerminated},
				Conditions: endedOK(v1alpha1.ReasonBudgetExhausted, finalizingStopped, recovered)},
			message: "working budget exhausted at 40/40 model requests; finalized from the reserve of 2 model requests and 2 tool calls; " +
				"3 of 5 blocks published to configmap/r1-report"},
		{name: "and stays so", after: time.Hour,
			want: outcome{Rung: rungTerminated, Phase: terminated, Reason: v1alpha1.ReasonBudgetExhausted, Settlement: v1alpha1.SettlementPartial,
				StatusAttempt: 2,
				Conditions:    endedOK(v1alpha1.ReasonBudgetExhausted, finalizingStopped, recovered)}},
	}
	walk(t, s, steps)
	st := s.status
	wantBudget := v1alpha1.BudgetStatus{Used: usage(42, 9), Remaining: usage(0, 11)}
	if diff := cmp.Diff(wantBudget, st.Budget); diff != "" {
		t.Errorf("budget (-want +got):\n%s", diff)
	}
	wantLedger := []v1alpha1.AttemptLedger{{Attempt: 1, Used: usage(30, 4), Steps: 10}, {Attempt: 2, Used: usage(12, 5), Steps: 6}}
	if diff := cmp.Diff(wantLedger, st.Ledger); diff != "" {
		t.Errorf("ledger (-want +got):\n%s", diff)
	}
	if st.QueuedTime == nil || st.StartTime == nil || st.FinalizingTime == nil || st.CompletionTime == nil || st.Steps != 16 {
		t.Errorf("times and steps: %+v", st)
	}
}

// TestScenarioFinalizeRequested walks a run the user asks to wrap up
// (spec.stop: Finalize): it finalizes with reason FinalizeRequested, its
// publication settles while its pod still runs, the pod gets the
// finalization grace to exit, exits on its own, and the run ends
// FinalizeRequested: not succeeded (even with a complete settlement), so
// Stalled.
func TestScenarioFinalizeRequested(t *testing.T) {
	s := newSim(testSpec(), QueueView{Holder: true})
	heartbeat := func() { s.attempt().Status.HeartbeatTime = &metav1.Time{Time: s.now} }
	finalizeGrant := v1alpha1.Grant{ModelRequests: 12, ToolCalls: 4, FinalizeOnly: true}
	steps := []scenarioStep{
		{name: "holds the session: attempt 1 starts",
			want: outcome{Rung: rungSteady, Phase: running, StatusAttempt: 1, Attempt: 1, Grant: working,
				RequeueAfter: 22*time.Minute + 30*time.Second, Conditions: []string{readyTrue}}},
		{name: "works; the user asks to finalize: Finalizing/FinalizeRequested", after: time.Minute,
			facts: func() {
				*s.pod() = PodObservation{Phase: PodRunning, Created: true, StartTime: s.now.Add(-50 * time.Second)}
				a := s.attempt()
				a.Status.Usage, a.Status.Steps, a.Status.LastProgressStep = usage(10, 2), 4, 4
				heartbeat()
				s.spec.Stop = v1alpha1.StopFinalize
			},
			want: outcome{Rung: rungFinish, Phase: finalizing, Reason: v1alpha1.ReasonFinalizeRequested, StatusAttempt: 1, Attempt: 1,
				Grant: finalizeGrant, RequeueAfter: time.Minute, Events: []string{evFinalizing},
				Conditions: []string{finalizingFor(v1alpha1.ReasonFinalizeRequested), readyFinal}},
			message: "finalize requested (spec.stop: Finalize) after 4 steps; finalizing from the reserve of 2 model requests and 2 tool calls"},
		{name: "settles while its pod runs: waits for it to exit", after: 30 * time.Second,
			facts: func() {
				a := s.attempt()
				a.Status.Usage, a.Status.Steps = usage(12, 3), 5
				a.Status.Publication = v1alpha1.Publication{BlocksPlanned: 5, BlocksCommitted: 5, Settled: true,
					Settlement: v1alpha1.SettlementComplete, Location: "configmap/r1-report"}
				heartbeat()
			},
			want: outcome{Rung: rungFinish, Phase: finalizing, Reason: v1alpha1.ReasonFinalizeRequested, StatusAttempt: 1, Attempt: 1,
				Grant: finalizeGrant, RequeueAfter: time.Minute, // heartbeat expiry, before the grace ends in 1m30s
				Conditions: []string{finalizingFor(v1alpha1.ReasonFinalizeRequested), readyFinal}},
			message: "finalize requested (spec.stop: Finalize) after 4 steps; finalized from the reserve of 2 model requests and 2 tool calls; " +
				"waiting up to 1m30s for the pod of attempt 1 to exit"},
		{name: "the pod exits on its own within the grace: Terminated/FinalizeRequested", after: 20 * time.Second,
			facts: func() { s.pod().Phase = PodSucceeded },
			want: outcome{Rung: rungFinish, Phase: terminated, Reason: v1alpha1.ReasonFinalizeRequested, Settlement: v1alpha1.SettlementComplete,
				StatusAttempt: 1, Events: []string{evTerminated},
				Conditions: endedOK(v1alpha1.ReasonFinalizeRequested, finalizingOver)},
			message: "finalize requested (spec.stop: Finalize) after 4 steps; finalized from the reserve of 2 model requests and 2 tool calls; " +
				"5 of 5 blocks published to configmap/r1-report"},
		{name: "and stays so", after: time.Hour,
			want: outcome{Rung: rungTerminated, Phase: terminated, Reason: v1alpha1.ReasonFinalizeRequested, Settlement: v1alpha1.SettlementComplete,
				StatusAttempt: 1, Conditions: endedOK(v1alpha1.ReasonFinalizeRequested, finalizingOver)}},
	}
	walk(t, s, steps)
	if st := s.status; st.Budget.Used != usage(12, 3) || st.FinalizingTime == nil || !st.FinalizingTime.Equal(&metav1.Time{Time: at(time.Minute)}) {
		t.Errorf("budget used %+v, finalizing since %v", st.Budget.Used, st.FinalizingTime)
	}
}
