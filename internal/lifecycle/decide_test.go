package lifecycle

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// Shorthands for the tables.
const (
	pending    = v1alpha1.PhasePending
	queued     = v1alpha1.PhaseQueued
	running    = v1alpha1.PhaseRunning
	recovering = v1alpha1.PhaseRecovering
	finalizing = v1alpha1.PhaseFinalizing
	terminated = v1alpha1.PhaseTerminated
)

var (
	working = v1alpha1.Grant{ModelRequests: 40, ToolCalls: 18} // attempt 1's working grant under testSpec
	noGrant = v1alpha1.Grant{}
)

func cond(t string, s metav1.ConditionStatus, reason, msg string, since time.Duration) metav1.Condition {
	return metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: 1, LastTransitionTime: metav1.NewTime(at(since))}
}

// fact is attempt n with the working grant, created at t0+(n-1)·10s.
func fact(n int32, s v1alpha1.RunAttemptStatus) AttemptFacts {
	return AttemptFacts{Attempt: n, Created: at(time.Duration(n-1) * 10 * time.Second), Grant: working, Status: s}
}

func usage(mr, tc int64) v1alpha1.Usage { return v1alpha1.Usage{ModelRequests: mr, ToolCalls: tc} }

// runningAt is a run that started at t0 and is Running at now on the highest
// of the attempts given (1 if none), whose pod runs since t0+1s and whose
// heartbeat is fresh.
func runningAt(now time.Duration, atts ...AttemptFacts) Input {
	in := Input{
		Now: at(now), Name: "r1", Generation: 1, Spec: testSpec(),
		Status: v1alpha1.ResearchRunStatus{Phase: running, StartTime: mt(0), Attempt: 1},
		Pod:    PodObservation{Phase: PodRunning, Created: true, StartTime: at(time.Second)},
	}
	for i := range atts {
		in.Status.Attempt = max(in.Status.Attempt, atts[i].Attempt)
		if atts[i].Status.HeartbeatTime == nil {
			atts[i].Status.HeartbeatTime = mt(now)
		}
	}
	in.Attempts = atts
	return in
}

// with applies changes to an input.
func with(in Input, changes ...func(*Input)) Input {
	for _, c := range changes {
		c(&in)
	}
	return in
}

func phase(p v1alpha1.Phase, reason v1alpha1.Reason) func(*Input) {
	return func(in *Input) { in.Status.Phase, in.Status.Reason = p, reason }
}

func podIs(ph PodPhase) func(*Input) { return func(in *Input) { in.Pod.Phase = ph } }

// finalizingSince puts the run in Finalizing for reason since t, with the
// persisted grant g.
func finalizingSince(reason v1alpha1.Reason, since time.Duration, g v1alpha1.Usage) func(*Input) {
	return func(in *Input) {
		in.Status.Phase, in.Status.Reason = finalizing, reason
		in.Status.FinalizingTime = mt(since)
		in.Status.Budget.Granted = g
		in.Status.Finalization = &v1alpha1.FinalizationStatus{Reason: reason, Cause: "gate reached", Reserve: usage(2, 0)}
		in.Status.Message = "gate reached; finalizing from the reserve of 2 model requests"
		in.Status.Conditions = []metav1.Condition{
			cond(v1alpha1.ConditionFinalizing, metav1.ConditionTrue, string(reason), in.Status.Message, since),
			cond(v1alpha1.ConditionReady, metav1.ConditionFalse, "Finalizing", in.Status.Message, since),
		}
	}
}

// decideCase is one row of the decision table.
type decideCase struct {
	in      Input
	want    outcome
	message string // a substring the status message must contain
	check   func(t *testing.T, d Decision)
}

// decideCases is the decision table: every rung of the ladder and every
// reason, with the behaviours the design promises.
func decideCases() map[string]decideCase {
	queue := func(pos, limit int32, timeout time.Duration) func(*Input) {
		return func(in *Input) { in.Queue = QueueView{Position: pos, Limit: limit, Timeout: timeout} }
	}
	fresh := func(p v1alpha1.Phase) Input {
		return Input{Now: at(0), Name: "r1", Generation: 1, Spec: testSpec(), Status: v1alpha1.ResearchRunStatus{Phase: p},
			Pod: PodObservation{Phase: PodAbsent}}
	}
	cancel := func(in *Input) { in.Spec.Stop = v1alpha1.StopCancel }
	published := func(committed int32) v1alpha1.Publication {
		return v1alpha1.Publication{BlocksPlanned: 5, BlocksCommitted: committed}
	}
	settled := v1alpha1.Publication{BlocksPlanned: 5, BlocksCommitted: 5, Settled: true, Settlement: v1alpha1.SettlementComplete}
	stopping := func(reason v1alpha1.Reason) func(*Input) {
		return func(in *Input) {
			in.Status.Reason = reason
			in.Status.Conditions = []metav1.Condition{cond(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ConditionReasonStopping, "decided earlier", 0)}
		}
	}
	recoveringFrom := func(reason string) func(*Input) { // attempt 1 failed at t0+10s
		const failedAt = 10 * time.Second
		return func(in *Input) {
			in.Status.Phase = recovering
			in.Status.Conditions = []metav1.Condition{
				cond(v1alpha1.ConditionRecovering, metav1.ConditionTrue, reason, "attempt 1 failed: its pod failed", failedAt),
				cond(v1alpha1.ConditionReady, metav1.ConditionFalse, "Recovering", "", failedAt),
			}
		}
	}

	// exhaustedWaiting: attempt 3 of 3 stopped sending heartbeats and was
	// seen failing at t0+100s; its pod is being deleted before attempt 4
	// finalizes.
	exhaustedWaiting := func(in *Input) {
		const failedAt = 100 * time.Second
		const story = "attempt 3 failed: no heartbeat for 1m10s (timeout 1m0s)"
		in.Status.Phase = recovering
		in.Status.Conditions = []metav1.Condition{
			cond(v1alpha1.ConditionRecovering, metav1.ConditionTrue, v1alpha1.ConditionReasonAttemptFailed, story, failedAt),
			cond(v1alpha1.ConditionReady, metav1.ConditionFalse, "Recovering", "", failedAt),
		}
	}

	cases := map[string]decideCase{
		// Rung 1: Terminated.
		"terminated: absorbing, even with cancel and a running pod": {
			in: with(runningAt(time.Hour, fact(1, v1alpha1.RunAttemptStatus{FinishProposed: true})),
				phase(terminated, v1alpha1.ReasonCompleted), cancel,
				func(in *Input) { in.Status.Settlement = v1alpha1.SettlementComplete }),
			want: outcome{Rung: rungTerminated, Phase: terminated, Reason: v1alpha1.ReasonCompleted, Settlement: v1alpha1.SettlementComplete, StatusAttempt: 1},
		},

		// Rung 2: an earlier pass decided to end.
		"stopping: the decision stands when the facts change": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(3, 0)})), stopping(v1alpha1.ReasonPolicyViolation)),
			want: outcome{Rung: rungStopping, Phase: running, Reason: v1alpha1.ReasonPolicyViolation, StatusAttempt: 1,
				DeletePod: true, RequeueAfter: StopPollInterval, Conditions: []string{readyStop}},
			message: "decided earlier; waiting for the pod of attempt 1 to stop",
		},
		"stopping: terminated once the pod stopped": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Publication: published(2)})), stopping(v1alpha1.ReasonPolicyViolation),
				podIs(PodAbsent)),
			want: outcome{Rung: rungStopping, Phase: terminated, Reason: v1alpha1.ReasonPolicyViolation, Settlement: v1alpha1.SettlementPartial,
				StatusAttempt: 1, Events: []string{evTerminated},
				Conditions: ended(v1alpha1.ReasonPolicyViolation)},
			message: "decided earlier; 2 of 5 blocks published",
		},

		// Rung 3: Cancel.
		"cancel: a pending run ends at once": {
			in: with(fresh(pending), cancel),
			want: outcome{Rung: rungCancel, Phase: terminated, Reason: v1alpha1.ReasonCancelled, Settlement: v1alpha1.SettlementNone,
				Events: []string{evTerminated}, Conditions: endedOK(v1alpha1.ReasonCancelled)},
			message: "cancelled (spec.stop: Cancel) before it started",
		},
		"cancel: a queued run ends at once": {
			in: with(fresh(queued), cancel, queue(2, 5, 0)),
			want: outcome{Rung: rungCancel, Phase: terminated, Reason: v1alpha1.ReasonCancelled, Settlement: v1alpha1.SettlementNone,
				Events: []string{evTerminated}, Conditions: endedOK(v1alpha1.ReasonCancelled)},
		},
		"cancel: zero grant and delete the pod; wait for it to stop": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(10, 2), Steps: 4})), cancel),
			want: outcome{Rung: rungCancel, Phase: running, Reason: v1alpha1.ReasonCancelled, StatusAttempt: 1, Grant: noGrant,
				DeletePod: true, RequeueAfter: StopPollInterval, Events: []string{evStopping}, Conditions: []string{readyStop}},
			message: "cancelled (spec.stop: Cancel) after 4 steps and 10 model requests; waiting for the pod of attempt 1 to stop",
		},
		"cancel: a finalizing run is cancelled without finalizing, settlement from facts": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(40, 2), Publication: published(3)})),
				finalizingSince(v1alpha1.ReasonBudgetExhausted, 50*time.Second, usage(42, 4)), cancel, podIs(PodFailed)),
			want: outcome{Rung: rungCancel, Phase: terminated, Reason: v1alpha1.ReasonCancelled, Settlement: v1alpha1.SettlementPartial,
				StatusAttempt: 1, Events: []string{evTerminated},
				Conditions: endedOK(v1alpha1.ReasonCancelled, finalizingOver)},
			message: "3 of 5 blocks published",
		},

		// Blocked: the session or policy is missing or not ready.
		"blocked: stays Pending with the reason, looks again": {
			in: with(fresh(pending), func(in *Input) { in.Blocked = `waiting for Session "s1"` }),
			want: outcome{Rung: rungBlocked, Phase: pending, RequeueAfter: BlockedPollInterval,
				Conditions: []string{"Ready=False/Pending"}},
			message: `waiting for Session "s1"`,
		},
		"blocked: a stop request still ends it": {
			in: with(fresh(pending), func(in *Input) {
				in.Blocked = `waiting for Session "s1"`
				in.Spec.Stop = v1alpha1.StopCancel
			}),
			want: outcome{Rung: rungCancel, Phase: terminated, Reason: v1alpha1.ReasonCancelled, Settlement: v1alpha1.SettlementNone,
				Events: []string{"Warning/Terminated"}, Conditions: endedOK(v1alpha1.ReasonCancelled)},
			message: "cancelled (spec.stop: Cancel) before it started",
		},

		// Rung 4: Queue.
		"queue: waits in line, requeued at the timeout": {
			in: with(fresh(pending), queue(2, 3, 10*time.Minute)),
			want: outcome{Rung: rungQueue, Phase: queued, RequeueAfter: 10 * time.Minute, Events: []string{evQueued},
				Conditions: []string{readyQueued}},
			message: `queued in session "s1" at position 2 of at most 3 waiting runs`,
			check: func(t *testing.T, d Decision) {
				if d.Status.QueuePosition != 2 || !d.Status.QueuedTime.Equal(mt(0)) {
					t.Errorf("queue position %d, queued at %v", d.Status.QueuePosition, d.Status.QueuedTime)
				}
			},
		},
		"queue: keeps waiting from when it was first queued": {
			in:   with(fresh(queued), queue(1, 3, 10*time.Minute), func(in *Input) { in.Status.QueuedTime = mt(-4 * time.Minute) }),
			want: outcome{Rung: rungQueue, Phase: queued, RequeueAfter: 6 * time.Minute, Conditions: []string{readyQueued}},
		},
		"queue: full": {
			in: with(fresh(pending), queue(4, 3, 0)),
			want: outcome{Rung: rungQueue, Phase: terminated, Reason: v1alpha1.ReasonQueueFull, Settlement: v1alpha1.SettlementNone,
				Events: []string{evTerminated}, Conditions: ended(v1alpha1.ReasonQueueFull)},
			message: `session "s1"'s queue is full: position 4 is beyond its limit of 3 waiting runs`,
		},
		"queue: timeout": {
			in: with(fresh(queued), queue(1, 3, 10*time.Minute), func(in *Input) { in.Status.QueuedTime = mt(-10 * time.Minute) }),
			want: outcome{Rung: rungQueue, Phase: terminated, Reason: v1alpha1.ReasonQueueTimeout, Settlement: v1alpha1.SettlementNone,
				Events: []string{evTerminated}, Conditions: ended(v1alpha1.ReasonQueueTimeout)},
			message: `waited 10m0s in session "s1"'s queue, past its 10m0s timeout`,
		},
		"queue: the holder starts attempt 1 with the working allowance": {
			in: with(fresh(queued), func(in *Input) {
				in.Queue = QueueView{Holder: true}
				in.Status.QueuedTime, in.Status.QueuePosition = mt(-time.Minute), 1
			}),
			want: outcome{Rung: rungSteady, Phase: running, StatusAttempt: 1, Attempt: 1, Grant: working,
				RequeueAfter: 22*time.Minute + 30*time.Second, // Degrade point of the deadline
				Conditions:   []string{readyTrue}},
			check: func(t *testing.T, d Decision) {
				if !d.Status.StartTime.Equal(mt(0)) || d.Status.QueuePosition != 0 {
					t.Errorf("start %v, position %d", d.Status.StartTime, d.Status.QueuePosition)
				}
				// The new attempt's ledger entry is in the pass that starts it,
				// not in a write of its own once the attempt is seen.
				if want := []v1alpha1.AttemptLedger{{Attempt: 1}}; !slices.Equal(d.Status.Ledger, want) {
					t.Errorf("ledger %+v, want %+v", d.Status.Ledger, want)
				}
			},
		},

		// Rung 5: hard deadline.
		"hard deadline: a running run is stopped": {
			in: runningAt(32*time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(5, 0)})),
			want: outcome{Rung: rungHardDeadline, Phase: running, Reason: v1alpha1.ReasonDeadlineExceeded, StatusAttempt: 1,
				DeletePod: true, RequeueAfter: StopPollInterval, Events: []string{evStopping}, Conditions: []string{readyStop}},
			message: "hard deadline passed 32m0s after start (the 30m0s deadline plus 2m0s finalization grace)",
		},
		"hard deadline: a stuck finalizing run keeps its reason": {
			in: with(runningAt(32*time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(40, 0)})),
				finalizingSince(v1alpha1.ReasonBudgetExhausted, 20*time.Minute, usage(42, 2))),
			want: outcome{Rung: rungHardDeadline, Phase: finalizing, Reason: v1alpha1.ReasonBudgetExhausted, StatusAttempt: 1,
				DeletePod: true, RequeueAfter: StopPollInterval, Events: []string{evStopping},
				Conditions: []string{finalizingStopped, readyStop}},
			message: "gate reached; finalization did not finish within the 2m0s grace after the 30m0s deadline",
		},
		"hard deadline: a failing attempt is not replaced after it": {
			in: with(runningAt(33*time.Minute, fact(1, v1alpha1.RunAttemptStatus{})), podIs(PodFailed)),
			want: outcome{Rung: rungHardDeadline, Phase: terminated, Reason: v1alpha1.ReasonDeadlineExceeded, Settlement: v1alpha1.SettlementNone,
				StatusAttempt: 1, Events: []string{evTerminated},
				Conditions: ended(v1alpha1.ReasonDeadlineExceeded)},
		},

		// Rung 6: attempt failed.
		"failed: an in-flight effect without idempotency key is unsafe to recover": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{
				InFlight: []v1alpha1.InFlightEffect{{ID: "c-7", Tool: toolPost, Effect: v1alpha1.EffectExternal}},
			})), podIs(PodFailed)),
			want: outcome{Rung: rungAttemptFailed, Phase: terminated, Reason: v1alpha1.ReasonUnsafeToRecover, Settlement: v1alpha1.SettlementNone,
				StatusAttempt: 1, Events: []string{evTerminated},
				Conditions: ended(v1alpha1.ReasonUnsafeToRecover)},
			message: "attempt 1 failed: its pod failed, with http.post call c-7 in flight without an idempotency key",
		},
		"failed: unsafe and silent: delete the pod, wait before Terminated": {
			in: with(runningAt(2*time.Minute, fact(1, v1alpha1.RunAttemptStatus{
				HeartbeatTime: mt(30 * time.Second),
				InFlight:      []v1alpha1.InFlightEffect{{ID: "c-8", Tool: "mail.send", Effect: v1alpha1.EffectExternal}},
			}))),
			want: outcome{Rung: rungAttemptFailed, Phase: running, Reason: v1alpha1.ReasonUnsafeToRecover, StatusAttempt: 1,
				DeletePod: true, RequeueAfter: StopPollInterval, Events: []string{evStopping}, Conditions: []string{readyStop}},
			message: "no heartbeat for 1m30s (timeout 1m0s)",
		},
		"failed: an in-flight effect with an idempotency key recovers": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{
				InFlight: []v1alpha1.InFlightEffect{{ID: "c-9", Tool: toolPost, Effect: v1alpha1.EffectExternal, IdempotencyKey: "k-9"}},
			})), podIs(PodFailed), func(in *Input) { in.Pod.Message = evicted }),
			want: outcome{Rung: rungAttemptFailed, Phase: recovering, StatusAttempt: 1, RequeueAfter: 5 * time.Second,
				Events: []string{evRecovering}, Conditions: []string{readyRecovering, recoveringFailed}},
			message: "attempt 1 failed: its pod failed: Evicted: node pressure; attempt 2 of 3 starts after the 5s backoff",
		},
		"failed: silent pod is deleted before recovery": {
			in: runningAt(80*time.Second, fact(1, v1alpha1.RunAttemptStatus{HeartbeatTime: mt(10 * time.Second)})),
			want: outcome{Rung: rungAttemptFailed, Phase: recovering, StatusAttempt: 1, DeletePod: true, RequeueAfter: StopPollInterval,
				Events: []string{evRecovering}, Conditions: []string{readyRecovering, recoveringFailed}},
			message: "no heartbeat for 1m10s (timeout 1m0s); deleting its pod",
		},
		"failed: a pod that does not start within startTimeout fails the attempt": {
			in: with(runningAt(6*time.Minute, fact(1, v1alpha1.RunAttemptStatus{})), podIs(PodPending),
				func(in *Input) { in.Pod.Message = "ErrImagePull: not found" }),
			want: outcome{Rung: rungAttemptFailed, Phase: recovering, StatusAttempt: 1, DeletePod: true, RequeueAfter: StopPollInterval,
				Events: []string{evRecovering}, Conditions: []string{readyRecovering, recoveringFailed}},
			message: "its pod did not start within 5m0s: ErrImagePull: not found",
		},
		"steady: a pending pod has until startTimeout": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{})), podIs(PodPending)),
			want: outcome{Rung: rungSteady, Phase: running, StatusAttempt: 1, Attempt: 1, Grant: working,
				RequeueAfter: 4 * time.Minute, Conditions: []string{readyTrue}},
		},
		"failed: an escalated retryable fault fails the attempt, which is recovered": {
			in: runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Faults: []v1alpha1.Fault{
				{Scope: v1alpha1.FaultScopeProvider, Kind: "QuotaExceeded", Count: 2, Retryable: true, Escalated: true, LastMessage: "429"},
			}})),
			want: outcome{Rung: rungAttemptFailed, Phase: recovering, StatusAttempt: 1, DeletePod: true, RequeueAfter: StopPollInterval,
				Events: []string{evRecovering}, Conditions: []string{readyRecovering, recoveringFailed}},
			message: "it escalated a Provider fault (QuotaExceeded: 429)",
		},
		"failed: a pod deleted by someone that exits 0 without proposing finish failed": {
			// Exit 0 on SIGTERM is not the agent's finish (see exitCases for
			// a pod that exits 0 of its own accord: an implicit finish).
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{})), podIs(PodSucceeded),
				func(in *Input) { in.Pod.Terminating = true }),
			want: outcome{Rung: rungAttemptFailed, Phase: recovering, StatusAttempt: 1, RequeueAfter: 5 * time.Second,
				Events: []string{evRecovering}, Conditions: []string{readyRecovering, recoveringFailed}},
			message: "its pod was deleted and exited without proposing finish",
		},
		"failed: a pod that was created and is gone failed": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{})), podIs(PodAbsent)),
			want: outcome{Rung: rungAttemptFailed, Phase: recovering, StatusAttempt: 1, RequeueAfter: 5 * time.Second,
				Events: []string{evRecovering}, Conditions: []string{readyRecovering, recoveringFailed}},
			message: "its pod is gone",
		},
		"failed: still in backoff": {
			in: with(runningAt(13*time.Second, fact(1, v1alpha1.RunAttemptStatus{})), podIs(PodFailed),
				recoveringFrom(v1alpha1.ConditionReasonAttemptFailed)),
			want: outcome{Rung: rungAttemptFailed, Phase: recovering, StatusAttempt: 1, RequeueAfter: 2 * time.Second,
				Conditions: []string{readyRecovering, recoveringFailed}},
		},
		"failed: backoff over: attempt 2 starts, ledger carried, attempt 1 superseded": {
			in: with(runningAt(15*time.Second, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(30, 4), Steps: 10, LastProgressStep: 10})), podIs(PodFailed),
				recoveringFrom(v1alpha1.ConditionReasonAttemptFailed)),
			want: outcome{Rung: rungAttemptFailed, Phase: recovering, StatusAttempt: 2, Attempt: 2,
				Grant: v1alpha1.Grant{ModelRequests: 10, ToolCalls: 14}, Superseded: []int32{1},
				RequeueAfter: 22*time.Minute + 15*time.Second, Events: []string{evStarted},
				Directives: []string{degradeAt30},
				Conditions: []string{readyRecovering, recoveringStarting}},
			message: "attempt 1 failed: its pod failed; starting attempt 2 of 3",
		},
		"failed: a failure seen earlier is still replaced if the pod comes back to life": {
			in: with(runningAt(15*time.Second, fact(1, v1alpha1.RunAttemptStatus{})), podIs(PodRunning),
				recoveringFrom(v1alpha1.ConditionReasonAttemptFailed)),
			want: outcome{Rung: rungAttemptFailed, Phase: recovering, StatusAttempt: 1, DeletePod: true, RequeueAfter: StopPollInterval,
				Conditions: []string{readyRecovering, recoveringFailed}},
		},
		"failed: the replacement runs: Running again, ledger counted once": {
			in: with(runningAt(30*time.Second,
				fact(1, v1alpha1.RunAttemptStatus{Usage: usage(30, 4), Steps: 10}),
				fact(2, v1alpha1.RunAttemptStatus{Usage: usage(5, 1), Steps: 2})),
				recoveringFrom(v1alpha1.ConditionReasonStartingAttempt),
				func(in *Input) {
					in.Status.Ledger = []v1alpha1.AttemptLedger{{Attempt: 1, Used: usage(30, 4), Steps: 10}}
					in.Attempts[1].Grant = v1alpha1.Grant{ModelRequests: 10, ToolCalls: 14}
				}),
			want: outcome{Rung: rungSteady, Phase: running, StatusAttempt: 2, Attempt: 2,
				Grant: v1alpha1.Grant{ModelRequests: 10, ToolCalls: 14}, Superseded: []int32{1},
				RequeueAfter: 60 * time.Second, // heartbeat expiry
				Directives:   []string{"Degrade/Budget: 35/40 model requests"},
				Events:       []string{evRunning}, Conditions: []string{readyTrue, recovered}},
			message: "attempt 2 running: 35/40 model requests, 12/20 steps",
			check: func(t *testing.T, d Decision) {
				want := v1alpha1.BudgetStatus{Used: usage(35, 5), Remaining: usage(7, 15), Granted: usage(10, 14)}
				if diff := cmp.Diff(want, d.Status.Budget); diff != "" {
					t.Errorf("budget (-want +got):\n%s", diff)
				}
				ledger := []v1alpha1.AttemptLedger{{Attempt: 1, Used: usage(30, 4), Steps: 10}, {Attempt: 2, Used: usage(5, 1), Steps: 2}}
				if diff := cmp.Diff(ledger, d.Status.Ledger); diff != "" {
					t.Errorf("ledger (-want +got):\n%s", diff)
				}
			},
		},
		"failed: while finalizing: Terminated with the original reason and the persisted settlement": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(20, 2), Publication: published(3)})),
				finalizingSince(v1alpha1.ReasonStepLimit, 50*time.Second, usage(22, 4)), podIs(PodFailed)),
			want: outcome{Rung: rungAttemptFailed, Phase: terminated, Reason: v1alpha1.ReasonStepLimit, Settlement: v1alpha1.SettlementPartial,
				StatusAttempt: 1, Events: []string{evTerminated},
				Conditions: endedOK(v1alpha1.ReasonStepLimit, finalizingOver)},
			message: "gate reached; attempt 1 failed while finalizing: its pod failed; 3 of 5 blocks published",
		},
		"failed: a gate already at its limit finalizes in a new attempt": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(12, 3), Steps: 20})), podIs(PodFailed)),
			want: outcome{Rung: rungAttemptFailed, Phase: finalizing, Reason: v1alpha1.ReasonStepLimit, StatusAttempt: 2, Attempt: 2,
				Grant: v1alpha1.Grant{ModelRequests: 2, ToolCalls: 2, FinalizeOnly: true}, Superseded: []int32{1},
				RequeueAfter: 31 * time.Minute, Events: []string{evFinalizing, evStarted},
				Conditions: []string{finalizingFor(v1alpha1.ReasonStepLimit), readyFinal}},
			message: "attempt 1 failed: its pod failed; step limit reached at 20/20 steps; finalizing from the reserve of 2 model requests and 2 tool calls",
		},
		"failed: recovery exhausted: finalize in a finalize-only attempt": {
			in: with(runningAt(time.Minute,
				fact(1, v1alpha1.RunAttemptStatus{Usage: usage(10, 1), Steps: 3}),
				fact(2, v1alpha1.RunAttemptStatus{Usage: usage(10, 1), Steps: 3}),
				fact(3, v1alpha1.RunAttemptStatus{Usage: usage(10, 1), Steps: 3})), podIs(PodFailed)),
			want: outcome{Rung: rungAttemptFailed, Phase: finalizing, Reason: v1alpha1.ReasonRecoveryExhausted, StatusAttempt: 4, Attempt: 4,
				Grant: v1alpha1.Grant{ModelRequests: 2, ToolCalls: 2, FinalizeOnly: true}, Superseded: []int32{1, 2, 3},
				RequeueAfter: 31 * time.Minute, Events: []string{evFinalizing, evStarted},
				Conditions: []string{finalizingFor(v1alpha1.ReasonRecoveryExhausted), readyFinal}},
			message: "attempt 3 failed: its pod failed; recovery exhausted after 3 of 3 attempts; finalizing from the reserve",
		},
		"failed: recovery exhausted: the finalize-only attempt is not a failure before it starts": {
			in: with(runningAt(2*time.Minute,
				fact(1, v1alpha1.RunAttemptStatus{Usage: usage(10, 1)}),
				fact(2, v1alpha1.RunAttemptStatus{Usage: usage(10, 1)}),
				fact(3, v1alpha1.RunAttemptStatus{Usage: usage(10, 1)})),
				finalizingSince(v1alpha1.ReasonRecoveryExhausted, time.Minute, usage(2, 2)),
				func(in *Input) { in.Status.Attempt = 4; in.Pod = PodObservation{Phase: PodAbsent} }),
			want: outcome{Rung: rungSteady, Phase: finalizing, Reason: v1alpha1.ReasonRecoveryExhausted, StatusAttempt: 4, Attempt: 4,
				Grant: v1alpha1.Grant{ModelRequests: 2, ToolCalls: 2, FinalizeOnly: true}, Superseded: []int32{1, 2, 3},
				RequeueAfter: 30 * time.Minute, Conditions: []string{finalizingFor(v1alpha1.ReasonRecoveryExhausted), readyFinal}},
		},
		"failed: recovery exhausted without a reserve ends": {
			in: with(runningAt(time.Minute,
				fact(1, v1alpha1.RunAttemptStatus{}), fact(2, v1alpha1.RunAttemptStatus{}), fact(3, v1alpha1.RunAttemptStatus{})),
				podIs(PodFailed), func(in *Input) { in.Spec.Budget.OutputReserve = v1alpha1.OutputReserve{} }),
			want: outcome{Rung: rungAttemptFailed, Phase: terminated, Reason: v1alpha1.ReasonRecoveryExhausted, Settlement: v1alpha1.SettlementNone,
				StatusAttempt: 3, Superseded: []int32{1, 2}, Events: []string{evTerminated},
				Conditions: ended(v1alpha1.ReasonRecoveryExhausted)},
			message: "the output reserve is not available",
		},

		// Recover only from what a new attempt can fix: an escalated fault
		// that is not retryable (a bad key, a bad configuration) would fail
		// every attempt the same way.
		"failed: an escalated non-retryable fault is not recovered: finalize in a finalize-only attempt": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(3, 1), Steps: 2, Faults: []v1alpha1.Fault{
				{Scope: v1alpha1.FaultScopeProvider, Kind: "InvalidAPIKey", Count: 1, Escalated: true, LastMessage: "401 invalid api key"},
			}})), podIs(PodFailed)),
			want: outcome{Rung: rungAttemptFailed, Phase: finalizing, Reason: v1alpha1.ReasonAgentFailed, StatusAttempt: 2, Attempt: 2,
				Grant: v1alpha1.Grant{ModelRequests: 2, ToolCalls: 2, FinalizeOnly: true}, Superseded: []int32{1},
				RequeueAfter: 31 * time.Minute, Events: []string{evFinalizing, evStarted},
				Conditions: []string{finalizingFor(v1alpha1.ReasonAgentFailed), readyFinal}},
			message: "attempt 1 failed: its pod failed; it escalated a Provider fault (InvalidAPIKey: 401 invalid api key), " +
				"which is not retryable: a new attempt cannot fix it, so the run is not recovered; finalizing from the reserve",
		},
		"failed: an escalated non-retryable fault without a reserve ends the run": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Faults: []v1alpha1.Fault{
				{Scope: v1alpha1.FaultScopeAgent, Kind: "BadConfiguration", Count: 1, Escalated: true, LastMessage: "no model configured"},
			}})), podIs(PodFailed), func(in *Input) { in.Spec.Budget.OutputReserve = v1alpha1.OutputReserve{} }),
			want: outcome{Rung: rungAttemptFailed, Phase: terminated, Reason: v1alpha1.ReasonAgentFailed, Settlement: v1alpha1.SettlementNone,
				StatusAttempt: 1, Events: []string{evTerminated}, Conditions: ended(v1alpha1.ReasonAgentFailed)},
			message: "it escalated a Agent fault (BadConfiguration: no model configured), which is not retryable: " +
				"a new attempt cannot fix it, so the run is not recovered; the output reserve is not available",
		},
		"failed: a retryable escalation of the same attempt does not make a non-retryable one recoverable": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Faults: []v1alpha1.Fault{
				{Scope: v1alpha1.FaultScopeProvider, Kind: "QuotaExceeded", Count: 1, Retryable: true, Escalated: true, LastMessage: "429"},
				{Scope: v1alpha1.FaultScopeProvider, Kind: "ProviderKeyUnavailable", Count: 1, Escalated: true, LastMessage: "secret not found"},
			}})), podIs(PodFailed)),
			want: outcome{Rung: rungAttemptFailed, Phase: finalizing, Reason: v1alpha1.ReasonAgentFailed, StatusAttempt: 2, Attempt: 2,
				Grant: v1alpha1.Grant{ModelRequests: 2, ToolCalls: 2, FinalizeOnly: true}, Superseded: []int32{1},
				RequeueAfter: 31 * time.Minute, Events: []string{evFinalizing, evStarted},
				Conditions: []string{finalizingFor(v1alpha1.ReasonAgentFailed), readyFinal}},
			message: "it escalated a Provider fault (ProviderKeyUnavailable: secret not found), which is not retryable",
		},
		"failed: a local non-retryable fault is only counted: the failed attempt is recovered": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Faults: []v1alpha1.Fault{
				{Scope: v1alpha1.FaultScopeTool, Kind: "NotFound", Count: 1, LastMessage: "404"},
			}})), podIs(PodFailed)),
			want: outcome{Rung: rungAttemptFailed, Phase: recovering, StatusAttempt: 1, RequeueAfter: 5 * time.Second,
				Events: []string{evRecovering}, Conditions: []string{readyRecovering, recoveringFailed}},
			message: "attempt 1 failed: its pod failed; attempt 2 of 3 starts after the 5s backoff",
		},

		// A finalize-only replacement waits, as a recovery does, for the
		// failed attempt's pod to stop: two pods of one run never overlap.
		"failed: a non-retryable fault with the pod still running: delete it before the finalize-only attempt": {
			in: runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Faults: []v1alpha1.Fault{
				{Scope: v1alpha1.FaultScopeProvider, Kind: "InvalidAPIKey", Count: 1, Escalated: true, LastMessage: "401 invalid api key"},
			}})),
			want: outcome{Rung: rungAttemptFailed, Phase: recovering, StatusAttempt: 1, DeletePod: true, RequeueAfter: StopPollInterval,
				Events: []string{evRecovering}, Conditions: []string{readyRecovering, recoveringFailed}},
			message: "attempt 1 failed: it escalated a Provider fault (InvalidAPIKey: 401 invalid api key); deleting its pod, " +
				"then attempt 2 finalizes from the output reserve (AgentFailed",
		},
		"failed: a non-retryable fault, its pod stopped: the finalize-only attempt starts, the fault named once": {
			in: with(runningAt(62*time.Second, fact(1, v1alpha1.RunAttemptStatus{Faults: []v1alpha1.Fault{
				{Scope: v1alpha1.FaultScopeProvider, Kind: "InvalidAPIKey", Count: 1, Escalated: true, LastMessage: "401 invalid api key"},
			}})), podIs(PodAbsent), func(in *Input) {
				const story = "attempt 1 failed: it escalated a Provider fault (InvalidAPIKey: 401 invalid api key)"
				in.Status.Phase = recovering
				in.Status.Conditions = []metav1.Condition{
					cond(v1alpha1.ConditionRecovering, metav1.ConditionTrue, v1alpha1.ConditionReasonAttemptFailed, story, time.Minute),
					cond(v1alpha1.ConditionReady, metav1.ConditionFalse, "Recovering", "", time.Minute),
				}
			}),
			want: outcome{Rung: rungAttemptFailed, Phase: finalizing, Reason: v1alpha1.ReasonAgentFailed, StatusAttempt: 2, Attempt: 2,
				Grant: v1alpha1.Grant{ModelRequests: 2, ToolCalls: 2, FinalizeOnly: true}, Superseded: []int32{1},
				RequeueAfter: 30*time.Minute + 58*time.Second, Events: []string{evFinalizing, evStarted},
				Conditions: []string{finalizingFor(v1alpha1.ReasonAgentFailed), readyFinal, "Recovering=False/Finalizing"}},
			message: "attempt 1 failed: it escalated a Provider fault (InvalidAPIKey: 401 invalid api key); that fault is not retryable: " +
				"a new attempt cannot fix it, so the run is not recovered; finalizing from the reserve",
		},
		"failed: recovery exhausted with the pod still running: delete it before the finalize-only attempt": {
			in: runningAt(100*time.Second,
				fact(1, v1alpha1.RunAttemptStatus{Usage: usage(10, 1)}),
				fact(2, v1alpha1.RunAttemptStatus{Usage: usage(10, 1)}),
				fact(3, v1alpha1.RunAttemptStatus{Usage: usage(10, 1), HeartbeatTime: mt(30 * time.Second)})),
			want: outcome{Rung: rungAttemptFailed, Phase: recovering, StatusAttempt: 3, DeletePod: true, Superseded: []int32{1, 2},
				RequeueAfter: StopPollInterval, Events: []string{evRecovering}, Conditions: []string{readyRecovering, recoveringFailed}},
			message: "attempt 3 failed: no heartbeat for 1m10s (timeout 1m0s); deleting its pod, " +
				"then attempt 4 finalizes from the output reserve (RecoveryExhausted: recovery exhausted after 3 of 3 attempts)",
		},
		"failed: a gate at its limit with the pod not yet started: delete it before the finalize-only attempt": {
			in: with(runningAt(6*time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(12, 3), Steps: 20})), podIs(PodPending)),
			want: outcome{Rung: rungAttemptFailed, Phase: recovering, StatusAttempt: 1, DeletePod: true, RequeueAfter: StopPollInterval,
				Events: []string{evRecovering}, Conditions: []string{readyRecovering, recoveringFailed}},
			message: "then attempt 2 finalizes from the output reserve (StepLimit: step limit reached at 20/20 steps)",
		},
		"failed: spec.stop Finalize with the failed pod still running: delete it before the finalize-only attempt": {
			in: with(runningAt(80*time.Second, fact(1, v1alpha1.RunAttemptStatus{HeartbeatTime: mt(10 * time.Second)})),
				func(in *Input) { in.Spec.Stop = v1alpha1.StopFinalize }),
			want: outcome{Rung: rungAttemptFailed, Phase: recovering, StatusAttempt: 1, DeletePod: true, RequeueAfter: StopPollInterval,
				Events: []string{evRecovering}, Conditions: []string{readyRecovering, recoveringFailed}},
			message: "then attempt 2 finalizes from the output reserve (FinalizeRequested",
		},
		"failed: still waiting for the failed pod to stop: nothing starts, nothing new is reported": {
			in: with(runningAt(103*time.Second,
				fact(1, v1alpha1.RunAttemptStatus{Usage: usage(10, 1)}),
				fact(2, v1alpha1.RunAttemptStatus{Usage: usage(10, 1)}),
				fact(3, v1alpha1.RunAttemptStatus{Usage: usage(10, 1), HeartbeatTime: mt(30 * time.Second)})),
				exhaustedWaiting, func(in *Input) { in.Pod.Terminating = true }),
			want: outcome{Rung: rungAttemptFailed, Phase: recovering, StatusAttempt: 3, DeletePod: true, Superseded: []int32{1, 2},
				RequeueAfter: StopPollInterval, Conditions: []string{readyRecovering, recoveringFailed}},
			message: "attempt 3 failed: no heartbeat for 1m10s (timeout 1m0s); deleting its pod, then attempt 4 finalizes",
		},
		"failed: the failed pod has stopped: the finalize-only attempt starts, the failure's story kept": {
			in: with(runningAt(105*time.Second,
				fact(1, v1alpha1.RunAttemptStatus{Usage: usage(10, 1)}),
				fact(2, v1alpha1.RunAttemptStatus{Usage: usage(10, 1)}),
				fact(3, v1alpha1.RunAttemptStatus{Usage: usage(10, 1), HeartbeatTime: mt(30 * time.Second)})),
				exhaustedWaiting, func(in *Input) { in.Pod = PodObservation{Phase: PodAbsent, Created: true} }),
			want: outcome{Rung: rungAttemptFailed, Phase: finalizing, Reason: v1alpha1.ReasonRecoveryExhausted, StatusAttempt: 4, Attempt: 4,
				Grant: v1alpha1.Grant{ModelRequests: 2, ToolCalls: 2, FinalizeOnly: true}, Superseded: []int32{1, 2, 3},
				RequeueAfter: 30*time.Minute + 15*time.Second, Events: []string{evFinalizing, evStarted},
				Conditions: []string{finalizingFor(v1alpha1.ReasonRecoveryExhausted), readyFinal, "Recovering=False/Finalizing"}},
			message: "attempt 3 failed: no heartbeat for 1m10s (timeout 1m0s); recovery exhausted after 3 of 3 attempts; finalizing from the reserve",
		},

		// Rung 7: policy violation.
		"violation: usage above the grant": {
			in: runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(41, 0)})),
			want: outcome{Rung: rungPolicyViolation, Phase: running, Reason: v1alpha1.ReasonPolicyViolation, StatusAttempt: 1,
				DeletePod: true, RequeueAfter: StopPollInterval, Events: []string{evStopping}, Conditions: []string{readyStop}},
			message: "attempt 1 reported 41 model requests, above its grant of 40",
		},
		"violation: none for what was spent under the working grant before a lowered finalize grant arrived": {
			// A gate moved the run to Finalizing at 10 model requests with a
			// 12-request finalize grant; the agent, still on its 40-request
			// working grant, had already made 14. Not a violation: it is
			// refused further work by the SDK once it reads the new grant.
			in: with(runningAt(2*time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(14, 0), Steps: 3, LastProgressStep: 3})),
				finalizingSince(v1alpha1.ReasonStepLimit, time.Minute, usage(12, 2)),
				func(in *Input) {
					in.Attempts[0].Grant = v1alpha1.Grant{ModelRequests: 12, ToolCalls: 2, FinalizeOnly: true}
				}),
			want: outcome{Rung: rungSteady, Phase: finalizing, Reason: v1alpha1.ReasonStepLimit, StatusAttempt: 1, Attempt: 1,
				Grant: v1alpha1.Grant{ModelRequests: 12, ToolCalls: 2, FinalizeOnly: true}, RequeueAfter: time.Minute,
				Conditions: []string{finalizingFor(v1alpha1.ReasonStepLimit), "Ready=False/Finalizing"}},
		},
		"violation: none for the reserve the gateway serves on top of its own count": {
			// The operator finalized on 10 model requests and 10 tool calls
			// (grant 12/12, reserve 2/2); the gateway had admitted 14 and
			// all 18 working tool calls before it learned of Finalizing, then
			// served the reserve from its own count: 20 tool calls.
			in: with(runningAt(2*time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(14, 20), Steps: 3, LastProgressStep: 3})),
				finalizingSince(v1alpha1.ReasonStepLimit, time.Minute, usage(12, 12)),
				func(in *Input) {
					in.Attempts[0].Grant = v1alpha1.Grant{ModelRequests: 12, ToolCalls: 12, FinalizeOnly: true, Reserve: &v1alpha1.Usage{ModelRequests: 2, ToolCalls: 2}}
				}),
			want: outcome{Rung: rungSteady, Phase: finalizing, Reason: v1alpha1.ReasonStepLimit, StatusAttempt: 1, Attempt: 1,
				Grant: v1alpha1.Grant{ModelRequests: 12, ToolCalls: 12, FinalizeOnly: true}, RequeueAfter: time.Minute,
				Conditions: []string{finalizingFor(v1alpha1.ReasonStepLimit), "Ready=False/Finalizing"}},
		},
		"violation: none for the reserve the gateway serves on top of its recorded base": {
			// As above, with the base the gateway recorded before it served
			// the reserve: 14 model requests and 18 tool calls, + 2/2.
			in: with(runningAt(2*time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(14, 20), FinalizeBase: new(usage(14, 18)), Steps: 3, LastProgressStep: 3})),
				finalizingSince(v1alpha1.ReasonStepLimit, time.Minute, usage(12, 12)),
				func(in *Input) {
					in.Attempts[0].Grant = v1alpha1.Grant{ModelRequests: 12, ToolCalls: 12, FinalizeOnly: true, Reserve: &v1alpha1.Usage{ModelRequests: 2, ToolCalls: 2}}
				}),
			want: outcome{Rung: rungSteady, Phase: finalizing, Reason: v1alpha1.ReasonStepLimit, StatusAttempt: 1, Attempt: 1,
				Grant: v1alpha1.Grant{ModelRequests: 12, ToolCalls: 12, FinalizeOnly: true}, RequeueAfter: time.Minute,
				Conditions: []string{finalizingFor(v1alpha1.ReasonStepLimit), "Ready=False/Finalizing"}},
		},
		"violation: usage above the recorded base plus the reserve": {
			// The reserve served a second time on top of the base (a gateway
			// that took its own count again) is a violation, though it is
			// within the working allowance plus the reserve.
			in: with(runningAt(2*time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(14, 20), FinalizeBase: new(usage(14, 16)), Steps: 3, LastProgressStep: 3})),
				finalizingSince(v1alpha1.ReasonStepLimit, time.Minute, usage(12, 12)),
				func(in *Input) {
					in.Attempts[0].Grant = v1alpha1.Grant{ModelRequests: 12, ToolCalls: 12, FinalizeOnly: true, Reserve: &v1alpha1.Usage{ModelRequests: 2, ToolCalls: 2}}
				}),
			want: outcome{Rung: rungPolicyViolation, Phase: finalizing, Reason: v1alpha1.ReasonPolicyViolation, StatusAttempt: 1,
				DeletePod: true, RequeueAfter: StopPollInterval, Events: []string{evStopping},
				Conditions: []string{"Finalizing=False/Stopping", readyStop}},
			message: "attempt 1 reported 20 tool calls, above its grant of 18",
		},
		"violation: above the working allowance plus the reserve": {
			in: with(runningAt(2*time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(14, 21), Steps: 3, LastProgressStep: 3})),
				finalizingSince(v1alpha1.ReasonStepLimit, time.Minute, usage(12, 12)),
				func(in *Input) {
					in.Attempts[0].Grant = v1alpha1.Grant{ModelRequests: 12, ToolCalls: 12, FinalizeOnly: true, Reserve: &v1alpha1.Usage{ModelRequests: 2, ToolCalls: 2}}
				}),
			want: outcome{Rung: rungPolicyViolation, Phase: finalizing, Reason: v1alpha1.ReasonPolicyViolation, StatusAttempt: 1,
				DeletePod: true, RequeueAfter: StopPollInterval, Events: []string{evStopping},
				Conditions: []string{"Finalizing=False/Stopping", readyStop}},
			message: "attempt 1 reported 21 tool calls, above its grant of 20",
		},
		"violation: a finalize-only attempt above its grant": {
			in: with(runningAt(3*time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(10, 0)}), fact(2, v1alpha1.RunAttemptStatus{Usage: usage(5, 0)})),
				finalizingSince(v1alpha1.ReasonRecoveryExhausted, 0, usage(2, 2)),
				func(in *Input) {
					in.Attempts[1].Created = at(time.Minute)
					in.Attempts[1].Grant = v1alpha1.Grant{ModelRequests: 2, ToolCalls: 2, FinalizeOnly: true}
				}),
			want: outcome{Rung: rungPolicyViolation, Phase: finalizing, Reason: v1alpha1.ReasonPolicyViolation, StatusAttempt: 2,
				DeletePod: true, Superseded: []int32{1}, RequeueAfter: StopPollInterval, Events: []string{evStopping},
				Conditions: []string{"Finalizing=False/Stopping", readyStop}},
			message: "attempt 2 reported 5 model requests, above its grant of 2",
		},
		"violation: a counter went back": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(10, 0), Steps: 5})), podIs(PodSucceeded),
				func(in *Input) {
					in.Attempts[0].Status.FinishProposed = true
					in.Status.Ledger = []v1alpha1.AttemptLedger{{Attempt: 1, Used: usage(12, 0), Steps: 5}}
				}),
			want: outcome{Rung: rungPolicyViolation, Phase: terminated, Reason: v1alpha1.ReasonPolicyViolation, Settlement: v1alpha1.SettlementNone,
				StatusAttempt: 1, Events: []string{evTerminated},
				Conditions: ended(v1alpha1.ReasonPolicyViolation)},
			message: "attempt 1 reported 10 model requests after 12",
			check: func(t *testing.T, d Decision) {
				if got := d.Status.Budget.Used.ModelRequests; got != 12 {
					t.Errorf("ledger must keep the higher count, used %d", got)
				}
			},
		},
		"violation: tokens above a token grant": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: v1alpha1.Usage{ModelRequests: 3, Tokens: 950}})),
				func(in *Input) {
					in.Spec.Budget.Tokens = new(int64(1000))
					in.Spec.Budget.OutputReserve.Tokens = 100
					in.Attempts[0].Grant.Tokens = new(int64(900))
				}),
			want: outcome{Rung: rungPolicyViolation, Phase: running, Reason: v1alpha1.ReasonPolicyViolation, StatusAttempt: 1,
				DeletePod: true, RequeueAfter: StopPollInterval, Events: []string{evStopping}, Conditions: []string{readyStop}},
			message: "950 tokens, above its grant of 900",
		},
		"violation: tokens do not count unless budgeted": {
			in: runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: v1alpha1.Usage{ModelRequests: 3, Tokens: 99999}})),
			want: outcome{Rung: rungSteady, Phase: running, StatusAttempt: 1, Attempt: 1, Grant: working, RequeueAfter: 60 * time.Second,
				Conditions: []string{readyTrue}},
		},

		// Rung 8: finish.
		"finish: proposed finish → Finalizing/Completed from the reserve": {
			in: runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(20, 5), Steps: 8, FinishProposed: true})),
			want: outcome{Rung: rungFinish, Phase: finalizing, Reason: v1alpha1.ReasonCompleted, StatusAttempt: 1, Attempt: 1,
				Grant: v1alpha1.Grant{ModelRequests: 22, ToolCalls: 7, FinalizeOnly: true}, RequeueAfter: 60 * time.Second,
				Conditions: []string{finalizingFor(v1alpha1.ReasonCompleted), readyFinal}},
			message: "attempt 1 proposed finish after 8 steps; finalizing from the reserve of 2 model requests and 2 tool calls",
			check: func(t *testing.T, d Decision) {
				if !d.Status.FinalizingTime.Equal(mt(time.Minute)) || d.Status.Budget.Granted != usage(22, 7) {
					t.Errorf("finalizing time %v, granted %+v", d.Status.FinalizingTime, d.Status.Budget.Granted)
				}
			},
		},
		"finish: spec.stop Finalize wraps up from the reserve → Finalizing/FinalizeRequested": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(20, 5), Steps: 8})),
				func(in *Input) { in.Spec.Stop = v1alpha1.StopFinalize }),
			want: outcome{Rung: rungFinish, Phase: finalizing, Reason: v1alpha1.ReasonFinalizeRequested, StatusAttempt: 1, Attempt: 1,
				Grant: v1alpha1.Grant{ModelRequests: 22, ToolCalls: 7, FinalizeOnly: true}, RequeueAfter: 60 * time.Second,
				Events: []string{evFinalizing}, Conditions: []string{finalizingFor(v1alpha1.ReasonFinalizeRequested), readyFinal}},
			message: "finalize requested (spec.stop: Finalize) after 8 steps; finalizing from the reserve of 2 model requests and 2 tool calls",
		},
		"finish: a proposed finish wins over spec.stop Finalize: Completed": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(20, 5), Steps: 8, FinishProposed: true})),
				func(in *Input) { in.Spec.Stop = v1alpha1.StopFinalize }),
			want: outcome{Rung: rungFinish, Phase: finalizing, Reason: v1alpha1.ReasonCompleted, StatusAttempt: 1, Attempt: 1,
				Grant: v1alpha1.Grant{ModelRequests: 22, ToolCalls: 7, FinalizeOnly: true}, RequeueAfter: 60 * time.Second,
				Conditions: []string{finalizingFor(v1alpha1.ReasonCompleted), readyFinal}},
			message: "attempt 1 proposed finish after 8 steps",
		},
		"finish: a requested finalization that settled ends FinalizeRequested, not succeeded": {
			in: with(runningAt(2*time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(21, 6), Publication: settled})),
				finalizingSince(v1alpha1.ReasonFinalizeRequested, time.Minute, usage(22, 7)), podIs(PodSucceeded),
				func(in *Input) { in.Spec.Stop = v1alpha1.StopFinalize }),
			want: outcome{Rung: rungFinish, Phase: terminated, Reason: v1alpha1.ReasonFinalizeRequested, Settlement: v1alpha1.SettlementComplete,
				StatusAttempt: 1, Events: []string{evTerminated},
				Conditions: endedOK(v1alpha1.ReasonFinalizeRequested, finalizingOver)},
			message: "5 of 5 blocks published",
		},
		"finish: spec.stop Finalize with a failed attempt finalizes in a new attempt": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(20, 5), Steps: 8, LastProgressStep: 8})),
				podIs(PodFailed), func(in *Input) { in.Spec.Stop = v1alpha1.StopFinalize }),
			want: outcome{Rung: rungAttemptFailed, Phase: finalizing, Reason: v1alpha1.ReasonFinalizeRequested, StatusAttempt: 2, Attempt: 2,
				Grant: v1alpha1.Grant{ModelRequests: 2, ToolCalls: 2, FinalizeOnly: true}, Superseded: []int32{1}, RequeueAfter: 31 * time.Minute,
				Events: []string{evFinalizing, evStarted}, Conditions: []string{finalizingFor(v1alpha1.ReasonFinalizeRequested), readyFinal}},
			message: "attempt 1 failed: its pod failed; finalize requested (spec.stop: Finalize); finalizing from the reserve",
		},
		"finish: spec.stop Finalize before the run started ends it": {
			in: with(fresh(queued), queue(1, 3, 0), func(in *Input) { in.Spec.Stop = v1alpha1.StopFinalize }),
			want: outcome{Rung: rungCancel, Phase: terminated, Reason: v1alpha1.ReasonCancelled, Settlement: v1alpha1.SettlementNone,
				Events: []string{evTerminated}, Conditions: endedOK(v1alpha1.ReasonCancelled)},
			message: "stopped (spec.stop: Finalize) before it started, with nothing to finalize",
		},
		"finish: advice after finish adds no grant and changes nothing": {
			in: with(runningAt(2*time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(21, 5), Steps: 9, FinishProposed: true,
				Advice: []v1alpha1.Advice{{Source: reviewer, Kind: needsChanged, Count: 3}, {Source: "stop-hook", Kind: "Block", Count: 1}}})),
				finalizingSince(v1alpha1.ReasonCompleted, time.Minute, usage(22, 7))),
			want: outcome{Rung: rungSteady, Phase: finalizing, Reason: v1alpha1.ReasonCompleted, StatusAttempt: 1, Attempt: 1,
				Grant: v1alpha1.Grant{ModelRequests: 22, ToolCalls: 7, FinalizeOnly: true}, RequeueAfter: 60 * time.Second,
				Conditions: []string{finalizingFor(v1alpha1.ReasonCompleted), readyFinal}},
		},
		"finish: settled while the pod runs: stays Finalizing until the grace is over": {
			in: with(runningAt(2*time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(21, 6), FinishProposed: true, Publication: settled})),
				finalizingSince(v1alpha1.ReasonCompleted, time.Minute, usage(22, 7)),
				func(in *Input) {
					in.Attempts[0].Grant = v1alpha1.Grant{ModelRequests: 22, ToolCalls: 7, FinalizeOnly: true}
				}),
			want: outcome{Rung: rungFinish, Phase: finalizing, Reason: v1alpha1.ReasonCompleted, StatusAttempt: 1, Attempt: 1,
				Grant:        v1alpha1.Grant{ModelRequests: 22, ToolCalls: 7, FinalizeOnly: true},
				RequeueAfter: time.Minute, // finalizingTime (1m) + the 2m grace
				Conditions:   []string{finalizingFor(v1alpha1.ReasonCompleted), readyFinal}},
			message: "gate reached; finalized from the reserve of 2 model requests; waiting up to 1m0s for the pod of attempt 1 to exit",
			check: func(t *testing.T, d Decision) {
				if !d.Status.FinalizingTime.Equal(mt(time.Minute)) || d.Status.Budget.Granted != usage(22, 7) {
					t.Errorf("finalizing time %v, granted %+v", d.Status.FinalizingTime, d.Status.Budget.Granted)
				}
			},
		},
		"finish: settled while the pod runs: no heartbeat asked for a settled finish": {
			in: with(runningAt(2*time.Minute+50*time.Second, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(21, 6), FinishProposed: true,
				Publication: settled, HeartbeatTime: mt(time.Minute)})),
				finalizingSince(v1alpha1.ReasonCompleted, time.Minute, usage(22, 7)),
				func(in *Input) {
					in.Attempts[0].Grant = v1alpha1.Grant{ModelRequests: 22, ToolCalls: 7, FinalizeOnly: true}
				}),
			want: outcome{Rung: rungFinish, Phase: finalizing, Reason: v1alpha1.ReasonCompleted, StatusAttempt: 1, Attempt: 1,
				Grant: v1alpha1.Grant{ModelRequests: 22, ToolCalls: 7, FinalizeOnly: true}, RequeueAfter: 10 * time.Second,
				Conditions: []string{finalizingFor(v1alpha1.ReasonCompleted), readyFinal}},
			message: "waiting up to 10s for the pod of attempt 1 to exit",
		},
		"finish: settled, the pod still runs after the grace: delete it and wait": {
			in: with(runningAt(3*time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(21, 6), FinishProposed: true, Publication: settled})),
				finalizingSince(v1alpha1.ReasonCompleted, time.Minute, usage(22, 7))),
			want: outcome{Rung: rungFinish, Phase: finalizing, Reason: v1alpha1.ReasonCompleted, StatusAttempt: 1,
				DeletePod: true, RequeueAfter: StopPollInterval, Events: []string{evSettled},
				Conditions: []string{finalizingStopped, readyStop}},
			message: "gate reached; finalized from the reserve of 2 model requests; waiting for the pod of attempt 1 to stop",
		},
		"finish: settled, no grace: delete the pod at once": {
			in: with(runningAt(2*time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(21, 6), FinishProposed: true, Publication: settled})),
				finalizingSince(v1alpha1.ReasonCompleted, time.Minute, usage(22, 7)),
				func(in *Input) { in.Spec.Budget.FinalizationGrace.Duration = 0 }),
			want: outcome{Rung: rungFinish, Phase: finalizing, Reason: v1alpha1.ReasonCompleted, StatusAttempt: 1,
				DeletePod: true, RequeueAfter: StopPollInterval, Events: []string{evSettled},
				Conditions: []string{finalizingStopped, readyStop}},
		},
		"finish: proposed and settled in one pass while the pod runs: Finalizing, waiting, with the finalize grant": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(20, 5), Steps: 8, FinishProposed: true, Publication: settled})),
				// The persisted grant is still the working one; the wait must not keep it.
				func(in *Input) { in.Status.Budget.Granted = usage(40, 18) }),
			want: outcome{Rung: rungFinish, Phase: finalizing, Reason: v1alpha1.ReasonCompleted, StatusAttempt: 1, Attempt: 1,
				Grant:        v1alpha1.Grant{ModelRequests: 22, ToolCalls: 7, FinalizeOnly: true},
				RequeueAfter: time.Minute, // heartbeat expiry, before the grace ends at 3m
				Conditions:   []string{finalizingFor(v1alpha1.ReasonCompleted), readyFinal}},
			message: "attempt 1 proposed finish after 8 steps; finalized from the reserve of 2 model requests and 2 tool calls; " +
				"waiting up to 2m0s for the pod of attempt 1 to exit",
			check: func(t *testing.T, d Decision) {
				if !d.Status.FinalizingTime.Equal(mt(time.Minute)) || d.Status.Budget.Granted != usage(22, 7) {
					t.Errorf("finalizing time %v, granted %+v", d.Status.FinalizingTime, d.Status.Budget.Granted)
				}
			},
		},
		"finish: spec.stop Finalize settled in one pass while the pod runs: FinalizeRequested, waiting": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(20, 5), Steps: 8, Publication: settled})),
				func(in *Input) { in.Spec.Stop = v1alpha1.StopFinalize }),
			want: outcome{Rung: rungFinish, Phase: finalizing, Reason: v1alpha1.ReasonFinalizeRequested, StatusAttempt: 1, Attempt: 1,
				Grant: v1alpha1.Grant{ModelRequests: 22, ToolCalls: 7, FinalizeOnly: true}, RequeueAfter: time.Minute,
				Events: []string{evFinalizing}, Conditions: []string{finalizingFor(v1alpha1.ReasonFinalizeRequested), readyFinal}},
			message: "waiting up to 2m0s for the pod of attempt 1 to exit",
		},
		"finish: settled and stopped: Terminated/Completed/Complete": {
			in: with(runningAt(2*time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(21, 6), FinishProposed: true, Publication: settled})),
				finalizingSince(v1alpha1.ReasonCompleted, time.Minute, usage(22, 7)), podIs(PodSucceeded)),
			want: outcome{Rung: rungFinish, Phase: terminated, Reason: v1alpha1.ReasonCompleted, Settlement: v1alpha1.SettlementComplete,
				StatusAttempt: 1, Events: []string{evCompleted},
				Conditions: completed(finalizingOver)},
			message: "gate reached; finalized from the reserve of 2 model requests; 5 of 5 blocks published",
		},
		"finish: proposed and settled with the pod gone: Terminated in one pass": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(20, 5), Steps: 8, FinishProposed: true, Publication: settled})),
				podIs(PodSucceeded)),
			want: outcome{Rung: rungFinish, Phase: terminated, Reason: v1alpha1.ReasonCompleted, Settlement: v1alpha1.SettlementComplete,
				StatusAttempt: 1, Events: []string{evCompleted},
				Conditions: completed(finalizingOver)},
			message: "attempt 1 proposed finish after 8 steps; finalized from the reserve of 2 model requests and 2 tool calls; 5 of 5 blocks published",
		},
		"finish: a gate's finalization settles with its own reason": {
			in: with(runningAt(2*time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(41, 3),
				Publication: v1alpha1.Publication{BlocksPlanned: 5, BlocksCommitted: 3, Settled: true, Settlement: v1alpha1.SettlementPartial}})),
				finalizingSince(v1alpha1.ReasonBudgetExhausted, time.Minute, usage(42, 5)), podIs(PodSucceeded),
				func(in *Input) {
					in.Attempts[0].Grant = v1alpha1.Grant{ModelRequests: 42, ToolCalls: 5, FinalizeOnly: true}
				}),
			want: outcome{Rung: rungFinish, Phase: terminated, Reason: v1alpha1.ReasonBudgetExhausted, Settlement: v1alpha1.SettlementPartial,
				StatusAttempt: 1, Events: []string{evTerminated},
				Conditions: endedOK(v1alpha1.ReasonBudgetExhausted, finalizingOver)},
		},

		// Rung 9: gates at their hard limits.
		"gate: working budget exhausted → Finalizing from the reserve": {
			in: runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(40, 3), Steps: 9, LastProgressStep: 9})),
			want: outcome{Rung: rungGates, Phase: finalizing, Reason: v1alpha1.ReasonBudgetExhausted, StatusAttempt: 1, Attempt: 1,
				Grant: v1alpha1.Grant{ModelRequests: 42, ToolCalls: 5, FinalizeOnly: true}, RequeueAfter: 60 * time.Second,
				Events: []string{evFinalizing}, Conditions: []string{finalizingFor(v1alpha1.ReasonBudgetExhausted), readyFinal}},
			message: "working budget exhausted at 40/40 model requests; finalizing from the reserve of 2 model requests and 2 tool calls",
		},
		"gate: a request the gateway refused on the working grant exhausts it, whatever the counters say": {
			// 2,774 of 2,900 working tokens: below the limit, but the
			// gateway refused a request whose bound no longer fits. Without
			// this fact the run waited, told to stop, until its deadline.
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: v1alpha1.Usage{ModelRequests: 6, Tokens: 2774},
				Steps: 6, LastProgressStep: 6,
				GrantExhausted: &v1alpha1.GrantExhaustion{Unit: v1alpha1.BudgetUnitTokens, Used: 2774, Granted: 2900}})),
				func(in *Input) {
					in.Spec.Budget.Tokens = new(int64(3000))
					in.Spec.Budget.OutputReserve.Tokens = 100
					in.Attempts[0].Grant.Tokens = new(int64(2900))
				}),
			want: outcome{Rung: rungGates, Phase: finalizing, Reason: v1alpha1.ReasonBudgetExhausted, StatusAttempt: 1, Attempt: 1,
				Grant: v1alpha1.Grant{ModelRequests: 8, ToolCalls: 2, Tokens: new(int64(2874)), FinalizeOnly: true}, RequeueAfter: 60 * time.Second,
				Events: []string{evFinalizing}, Conditions: []string{finalizingFor(v1alpha1.ReasonBudgetExhausted), readyFinal}},
			message: "working budget exhausted: the gateway refused attempt 1 a request at 2774/2900 tokens of its grant; finalizing from the reserve",
		},
		"gate: working tool calls exhausted": {
			in: runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(4, 18)})),
			want: outcome{Rung: rungGates, Phase: finalizing, Reason: v1alpha1.ReasonBudgetExhausted, StatusAttempt: 1, Attempt: 1,
				Grant: v1alpha1.Grant{ModelRequests: 6, ToolCalls: 20, FinalizeOnly: true}, RequeueAfter: 60 * time.Second,
				Events: []string{evFinalizing}, Conditions: []string{finalizingFor(v1alpha1.ReasonBudgetExhausted), readyFinal}},
			message: "working budget exhausted at 18/18 tool calls",
		},
		"gate: tool calls do not exhaust a run without working tool calls": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(4, 0)})),
				func(in *Input) {
					in.Spec.Budget.ToolCalls = 2
					in.Attempts[0].Grant.ToolCalls = 0
				}),
			want: outcome{Rung: rungSteady, Phase: running, StatusAttempt: 1, Attempt: 1, Grant: v1alpha1.Grant{ModelRequests: 40},
				RequeueAfter: 60 * time.Second, Conditions: []string{readyTrue}},
		},
		"gate: deadline → Finalizing/DeadlineExceeded": {
			in: runningAt(30*time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(10, 3)})),
			want: outcome{Rung: rungGates, Phase: finalizing, Reason: v1alpha1.ReasonDeadlineExceeded, StatusAttempt: 1, Attempt: 1,
				Grant: v1alpha1.Grant{ModelRequests: 12, ToolCalls: 5, FinalizeOnly: true}, RequeueAfter: 60 * time.Second,
				Events: []string{evFinalizing}, Conditions: []string{finalizingFor(v1alpha1.ReasonDeadlineExceeded), readyFinal}},
			message: "the 30m0s deadline passed (30m0s since start)",
		},
		"gate: step limit → Finalizing/StepLimit": {
			in: runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(10, 3), Steps: 20, LastProgressStep: 19})),
			want: outcome{Rung: rungGates, Phase: finalizing, Reason: v1alpha1.ReasonStepLimit, StatusAttempt: 1, Attempt: 1,
				Grant: v1alpha1.Grant{ModelRequests: 12, ToolCalls: 5, FinalizeOnly: true}, RequeueAfter: 60 * time.Second,
				Events: []string{evFinalizing}, Conditions: []string{finalizingFor(v1alpha1.ReasonStepLimit), readyFinal}},
			message: "step limit reached at 20/20 steps",
		},
		"gate: repeated call → Finalizing/RepeatedCall": {
			in: runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(10, 3), Steps: 4, LastProgressStep: 4,
				Calls: []v1alpha1.CallCount{{Tool: "web.search", Fingerprint: "a", Count: 1}, {Tool: toolGet, Fingerprint: "b", Count: 3}}})),
			want: outcome{Rung: rungGates, Phase: finalizing, Reason: v1alpha1.ReasonRepeatedCall, StatusAttempt: 1, Attempt: 1,
				Grant: v1alpha1.Grant{ModelRequests: 12, ToolCalls: 5, FinalizeOnly: true}, RequeueAfter: 60 * time.Second,
				Events: []string{evFinalizing}, Conditions: []string{finalizingFor(v1alpha1.ReasonRepeatedCall), readyFinal}},
			message: "the same http.get call repeated 3/3 times",
		},
		"gate: no progress → Finalizing/NoProgress": {
			in: runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(10, 3), Steps: 9, LastProgressStep: 4})),
			want: outcome{Rung: rungGates, Phase: finalizing, Reason: v1alpha1.ReasonNoProgress, StatusAttempt: 1, Attempt: 1,
				Grant: v1alpha1.Grant{ModelRequests: 12, ToolCalls: 5, FinalizeOnly: true}, RequeueAfter: 60 * time.Second,
				Events: []string{evFinalizing}, Conditions: []string{finalizingFor(v1alpha1.ReasonNoProgress), readyFinal}},
			message: "no progress for 5/5 steps",
		},
		"gate: no model-request reserve: ends, after the pod stopped": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(42, 3)})),
				func(in *Input) {
					in.Spec.Budget.OutputReserve = v1alpha1.OutputReserve{ToolCalls: 2}
					in.Attempts[0].Grant.ModelRequests = 42
				}),
			want: outcome{Rung: rungGates, Phase: running, Reason: v1alpha1.ReasonBudgetExhausted, StatusAttempt: 1,
				DeletePod: true, RequeueAfter: StopPollInterval, Events: []string{evStopping}, Conditions: []string{readyStop}},
			message: "working budget exhausted at 42/42 model requests; the output reserve is not available",
		},
		"gate: reserve eaten by a superseded attempt: ends": {
			in: with(runningAt(time.Minute,
				fact(1, v1alpha1.RunAttemptStatus{Usage: usage(31, 0)}),
				fact(2, v1alpha1.RunAttemptStatus{Usage: usage(10, 0)})),
				func(in *Input) { in.Attempts[1].Grant = v1alpha1.Grant{ModelRequests: 10, ToolCalls: 18} }),
			want: outcome{Rung: rungGates, Phase: running, Reason: v1alpha1.ReasonBudgetExhausted, StatusAttempt: 2, Superseded: []int32{1},
				DeletePod: true, RequeueAfter: StopPollInterval, Events: []string{evStopping}, Conditions: []string{readyStop}},
			message: "working budget exhausted at 41/40 model requests; the output reserve is not available",
		},

		// Rung 10: steady; directives before the limits.
		"directives: Degrade from 75% of a limit": {
			in: runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(10, 3), Steps: 15, LastProgressStep: 15})),
			want: outcome{Rung: rungSteady, Phase: running, StatusAttempt: 1, Attempt: 1, Grant: working, RequeueAfter: 60 * time.Second,
				Directives: []string{"Degrade/Steps: 15/20 steps"}, Conditions: []string{readyTrue}},
			message: "attempt 1 running: 10/40 model requests, 15/20 steps; directives: Degrade at 15/20 steps",
		},
		"directives: Degrade and Compress from 90%, per gate": {
			in: runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(36, 3), Steps: 18, LastProgressStep: 14,
				Calls: []v1alpha1.CallCount{{Tool: toolGet, Fingerprint: "b", Count: 2}}})),
			want: outcome{Rung: rungSteady, Phase: running, StatusAttempt: 1, Attempt: 1, Grant: working, RequeueAfter: 60 * time.Second,
				Directives: []string{
					"Degrade/Budget: 36/40 model requests", "Compress/Budget: 36/40 model requests",
					"Degrade/Steps: 18/20 steps", "Compress/Steps: 18/20 steps",
					"Degrade/SameCall: 2/3 identical http.get calls", "Compress/SameCall: 2/3 identical http.get calls",
					"Degrade/NoProgress: 4/5 steps without progress", "Compress/NoProgress: 4/5 steps without progress",
				},
				Conditions: []string{readyTrue}},
		},
		"directives: the deadline degrades at its own time": {
			in: runningAt(23*time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(1, 0)})),
			want: outcome{Rung: rungSteady, Phase: running, StatusAttempt: 1, Attempt: 1, Grant: working,
				RequeueAfter: 60 * time.Second, // heartbeat expiry comes before the Compress point at 27m
				Directives:   []string{"Degrade/Deadline: 23m0s of the 30m0s deadline elapsed"}, Conditions: []string{readyTrue}},
		},
		"directives: none for a limit of 1": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{})),
				func(in *Input) { in.Spec.Gates.SameCallLimit = 1 }),
			want: outcome{Rung: rungSteady, Phase: running, StatusAttempt: 1, Attempt: 1, Grant: working, RequeueAfter: 60 * time.Second,
				Conditions: []string{readyTrue}},
		},
		"steady: grant continues the ledger and never exceeds what is left": {
			in: with(runningAt(time.Minute,
				fact(1, v1alpha1.RunAttemptStatus{Usage: usage(37, 17)}),
				fact(2, v1alpha1.RunAttemptStatus{Usage: usage(1, 0)})),
				func(in *Input) { in.Attempts[1].Grant = v1alpha1.Grant{ModelRequests: 3, ToolCalls: 1} }),
			want: outcome{Rung: rungSteady, Phase: running, StatusAttempt: 2, Attempt: 2, Grant: v1alpha1.Grant{ModelRequests: 3, ToolCalls: 1},
				Superseded: []int32{1}, RequeueAfter: 60 * time.Second,
				// One directive of a type per gate: the tool calls (17/18) add none.
				Directives: []string{"Degrade/Budget: 38/40 model requests", "Compress/Budget: 38/40 model requests"},
				Conditions: []string{readyTrue}},
		},
		"requeue: at the Compress point of the deadline": {
			in: with(runningAt(26*time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(1, 0)})),
				func(in *Input) { in.Spec.Recovery.HeartbeatTimeout.Duration = 10 * time.Minute }),
			want: outcome{Rung: rungSteady, Phase: running, StatusAttempt: 1, Attempt: 1, Grant: working, RequeueAfter: time.Minute,
				Directives: []string{"Degrade/Deadline: 26m0s of the 30m0s deadline elapsed"}, Conditions: []string{readyTrue}},
		},
		"requeue: at the deadline": {
			in: with(runningAt(28*time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(1, 0)})),
				func(in *Input) { in.Spec.Recovery.HeartbeatTimeout.Duration = 10 * time.Minute }),
			want: outcome{Rung: rungSteady, Phase: running, StatusAttempt: 1, Attempt: 1, Grant: working, RequeueAfter: 2 * time.Minute,
				Directives: []string{"Degrade/Deadline: 28m0s of the 30m0s deadline elapsed", "Compress/Deadline: 28m0s of the 30m0s deadline elapsed"},
				Conditions: []string{readyTrue}},
		},
		"requeue: at the hard deadline while finalizing": {
			in: with(runningAt(31*time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(10, 0)})),
				finalizingSince(v1alpha1.ReasonDeadlineExceeded, 30*time.Minute, usage(12, 2)),
				func(in *Input) {
					in.Spec.Recovery.HeartbeatTimeout.Duration = 10 * time.Minute
					in.Attempts[0].Grant = v1alpha1.Grant{ModelRequests: 12, ToolCalls: 2, FinalizeOnly: true}
				}),
			want: outcome{Rung: rungSteady, Phase: finalizing, Reason: v1alpha1.ReasonDeadlineExceeded, StatusAttempt: 1, Attempt: 1,
				Grant: v1alpha1.Grant{ModelRequests: 12, ToolCalls: 2, FinalizeOnly: true}, RequeueAfter: time.Minute,
				Conditions: []string{finalizingFor(v1alpha1.ReasonDeadlineExceeded), readyFinal}},
		},
		"steady: local faults are counted and change nothing": {
			in: runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(2, 2), Faults: []v1alpha1.Fault{
				{Scope: v1alpha1.FaultScopeTool, Kind: "Timeout", Count: 3, Retryable: true},
				{Scope: v1alpha1.FaultScopeReviewer, Kind: "Stale", Count: 1},
			}})),
			want: outcome{Rung: rungSteady, Phase: running, StatusAttempt: 1, Attempt: 1, Grant: working, RequeueAfter: 60 * time.Second,
				Conditions: []string{readyTrue}},
			check: func(t *testing.T, d Decision) {
				if d.Status.Gates.LocalFaults != 4 {
					t.Errorf("local faults %d, want 4", d.Status.Gates.LocalFaults)
				}
			},
		},
		"steady: a finalizing run keeps its persisted grant": {
			in: with(runningAt(2*time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(41, 4)})),
				finalizingSince(v1alpha1.ReasonBudgetExhausted, time.Minute, usage(42, 5)),
				func(in *Input) {
					in.Attempts[0].Grant = v1alpha1.Grant{ModelRequests: 42, ToolCalls: 5, FinalizeOnly: true}
				}),
			want: outcome{Rung: rungSteady, Phase: finalizing, Reason: v1alpha1.ReasonBudgetExhausted, StatusAttempt: 1, Attempt: 1,
				Grant: v1alpha1.Grant{ModelRequests: 42, ToolCalls: 5, FinalizeOnly: true}, RequeueAfter: 60 * time.Second,
				Conditions: []string{finalizingFor(v1alpha1.ReasonBudgetExhausted), readyFinal}},
		},
		"steady: a replacement attempt starting is still Recovering": {
			in: with(runningAt(20*time.Second, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(30, 4)})),
				recoveringFrom(v1alpha1.ConditionReasonStartingAttempt),
				func(in *Input) { in.Status.Attempt = 2; in.Pod = PodObservation{Phase: PodPending, Created: true} }),
			want: outcome{Rung: rungSteady, Phase: recovering, StatusAttempt: 2, Attempt: 2, Grant: v1alpha1.Grant{ModelRequests: 10, ToolCalls: 14},
				Superseded: []int32{1}, RequeueAfter: 22*time.Minute + 10*time.Second,
				Directives: []string{degradeAt30},
				Conditions: []string{readyRecovering, recoveringStarting}},
		},
	}
	maps.Copy(cases, exitCases())
	return cases
}

func TestDecide(t *testing.T) { runDecideCases(t, decideCases()) }

// runDecideCases checks each case's decision, message and check, and that
// deciding leaves the input as it was.
func runDecideCases(t *testing.T, cases map[string]decideCase) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			in := tc.in
			before := *in.Status.DeepCopy()
			d, rung := decide(in)
			if diff := cmp.Diff(tc.want, summarize(d, rung)); diff != "" {
				t.Errorf("decision (-want +got):\n%s\nmessage: %s", diff, d.Status.Message)
			}
			if !strings.Contains(d.Status.Message, tc.message) {
				t.Errorf("message %q does not contain %q", d.Status.Message, tc.message)
			}
			if diff := cmp.Diff(before, in.Status); diff != "" {
				t.Errorf("Decide modified its input (-before +after):\n%s", diff)
			}
			if tc.check != nil {
				tc.check(t, d)
			}
		})
	}
}

// TestLadderCoverage checks that the table exercises every rung of the
// ladder and every reason this package decides.
func TestLadderCoverage(t *testing.T) {
	rungs, reasons := map[string]bool{}, map[v1alpha1.Reason]bool{}
	for _, tc := range decideCases() {
		rungs[tc.want.Rung] = true
		reasons[tc.want.Reason] = true
	}
	for _, r := range ladder {
		if !rungs[r.name] {
			t.Errorf("no case reaches rung %s", r.name)
		}
	}
	for _, r := range []v1alpha1.Reason{
		v1alpha1.ReasonCompleted, v1alpha1.ReasonCancelled, v1alpha1.ReasonBudgetExhausted, v1alpha1.ReasonDeadlineExceeded,
		v1alpha1.ReasonStepLimit, v1alpha1.ReasonRepeatedCall, v1alpha1.ReasonNoProgress, v1alpha1.ReasonUnsafeToRecover,
		v1alpha1.ReasonRecoveryExhausted, v1alpha1.ReasonPolicyViolation, v1alpha1.ReasonQueueFull, v1alpha1.ReasonQueueTimeout,
		v1alpha1.ReasonFinalizeRequested, v1alpha1.ReasonAgentFailed,
	} {
		if !reasons[r] {
			t.Errorf("no case reaches reason %s", r)
		}
	}
}

func TestTerminatedIsAbsorbing(t *testing.T) {
	in := with(runningAt(time.Hour, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(99, 99), FinishProposed: true})),
		phase(terminated, v1alpha1.ReasonStepLimit), podIs(PodRunning),
		func(in *Input) {
			in.Spec.Stop = v1alpha1.StopCancel
			in.Status.Settlement = v1alpha1.SettlementPartial
			in.Status.CompletionTime = mt(10 * time.Minute)
			in.Status.Message = "step limit reached at 20/20 steps; finalized; 3 of 5 blocks published"
		})
	// The decision stands; the accounting takes in the attempt's counts,
	// which the run had not counted yet (a fact written after it ended).
	want := Decision{Status: *in.Status.DeepCopy()}
	want.Status.Ledger = []v1alpha1.AttemptLedger{{Attempt: 1, Used: usage(99, 99)}}
	want.Status.Budget.Used = usage(99, 99)
	if diff := cmp.Diff(want, Decide(in)); diff != "" {
		t.Errorf("a Terminated run must not change but for its accounting (-want +got):\n%s", diff)
	}
}

// TestAdviceNeverChangesTheDecision: advisory facts (reviewer, stop hook)
// are recorded by the agent but never block, delay or extend a run.
func TestAdviceNeverChangesTheDecision(t *testing.T) {
	advice := []v1alpha1.Advice{{Source: reviewer, Kind: needsChanged, Count: 4}, {Source: "stop-hook", Kind: "Block", Count: 2},
		{Source: reviewer, Kind: "Continue", Count: 1}}
	for name, tc := range decideCases() {
		if len(tc.in.Attempts) == 0 {
			continue
		}
		t.Run(name, func(t *testing.T) {
			without := Decide(tc.in)
			in := tc.in
			in.Attempts = slices.Clone(in.Attempts)
			for i := range in.Attempts {
				in.Attempts[i].Status.Advice = advice
			}
			if diff := cmp.Diff(without, Decide(in)); diff != "" {
				t.Errorf("advice changed the decision (-without +with):\n%s", diff)
			}
		})
	}
}

func TestThreshold(t *testing.T) {
	cases := map[string]struct {
		pct   int32
		limit int64
		want  int64
	}{
		"75% of 20":            {75, 20, 15},
		"90% of 20":            {90, 20, 18},
		"75% of 4 rounds up":   {75, 4, 3},
		"90% of 4 stays below": {90, 4, 3},
		"100% stays below":     {100, 40, 39},
		"1% of 3 rounds up":    {1, 3, 1},
		"75% of 2":             {75, 2, 1},
		"huge limit":           {90, 1 << 62, (1<<62)/100*90 + 4}, // ceil(2^62·0.9) without overflow
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := threshold(tc.pct, tc.limit); got != tc.want {
				t.Errorf("threshold(%d, %d) = %d, want %d", tc.pct, tc.limit, got, tc.want)
			}
		})
	}
}
