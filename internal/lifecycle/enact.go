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
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/pkg/textutil"
)

// BlockedPollInterval is how often a blocked run looks again (its referents'
// events also wake it).
const BlockedPollInterval = 5 * time.Second

// enactment is a Decision being built from one verdict. It lives for one
// call of enact.
type enactment struct {
	f   *facts
	v   verdict
	cur attempt // the attempt that goes on: f.cur, or the one this pass starts
	st  v1alpha1.ResearchRunStatus
	d   Decision

	stopping bool   // waiting for the pod to stop before Terminated
	stopWhy  string // why the run ends, without the waiting clause
	requeue  []time.Time
	// lateApprovals are the entries of spec.approvals this pass is the
	// first to judge (see approvals).
	lateApprovals []v1alpha1.Approval
}

// enact turns a verdict into the Decision: the next status with its
// conditions, the attempt and grant, the pod to delete, the events and the
// requeue. It is the only code that sets a run's phase.
func enact(f *facts, v verdict) Decision {
	if v.keep {
		st := *f.in.Status.DeepCopy()
		if f.phase == v1alpha1.PhaseTerminated {
			// The decision is final; the accounting is not: a fact the
			// gateway could write only after the run ended (the API server
			// was away, a restarted gateway's last flush) is still counted.
			// The ledger only rises (foldLedger keeps the higher count).
			st.Ledger, st.Steps, st.Budget.Used = f.ledger, f.steps, f.used
			st.Budget.Remaining = f.lim.shown(nonNeg(f.remaining()))
		}
		return Decision{Status: st}
	}
	e := &enactment{f: f, v: v, cur: f.cur, st: *f.in.Status.DeepCopy()}
	e.st.Phase = f.phase
	e.st.StartTime = f.startTime.DeepCopy()
	e.st.Attempt = f.cur.n
	if v.newAttempt {
		e.cur = f.next()
		e.st.Attempt = e.cur.n
	}
	if v.finalize {
		e.enterFinalizing(v.reason, v.cause)
	}
	switch v.phase {
	case v1alpha1.PhaseTerminated:
		why := v.cause
		switch {
		case v.settled && v.fromFacts && v.finalize:
			// Finish and exit seen in one pass: nothing was finalized.
			why = e.st.Finalization.Cause
		case v.settled:
			why = e.finalizedStory()
		}
		e.end(v.reason, why)
	case v1alpha1.PhasePending:
		e.st.Message = v.cause
		e.requeueIn(BlockedPollInterval)
	case v1alpha1.PhaseQueued:
		e.st.Phase = v1alpha1.PhaseQueued
		e.st.QueuePosition = f.in.Queue.Position
		if e.st.QueuedTime == nil {
			e.st.QueuedTime = f.stamp()
		}
		e.st.Message = v.cause
	case v1alpha1.PhaseRunning:
		e.st.Phase = v1alpha1.PhaseRunning
		e.work()
		e.st.Message = f.runningMessage(e.cur, e.d.Directives)
	case v1alpha1.PhaseRecovering:
		e.recover()
	case v1alpha1.PhaseFinalizing:
		e.finalizing()
	}
	if !v.factsDue.IsZero() {
		e.st.Message = fmt.Sprintf("the pod of attempt %d stopped (%s); waiting up to %s for the gateway's last facts",
			e.cur.n, f.in.Pod.Phase, dur(v.factsDue.Sub(f.now)))
		e.requeue = append(e.requeue, v.factsDue)
	}
	return e.finish()
}

// work keeps the attempt working from the working allowance.
func (e *enactment) work() {
	e.d.Attempt = e.cur.n
	e.d.Grant = e.f.runningGrant(e.cur)
	e.d.Directives = e.f.directives(e.cur)
}

// recover keeps the run Recovering: the failed attempt's pod is stopped,
// the backoff waited out, then the next attempt starts, its grant
// continuing the ledger.
func (e *enactment) recover() {
	f, v := e.f, e.v
	e.st.Phase = v1alpha1.PhaseRecovering
	if v.newFailure {
		// Restart the clock even if the run was already Recovering.
		meta.RemoveStatusCondition(&e.st.Conditions, v1alpha1.ConditionRecovering)
		e.setCondition(v1alpha1.ConditionRecovering, metav1.ConditionTrue, v1alpha1.ConditionReasonAttemptFailed, v.cause)
	}
	if v.failed && !v.newAttempt {
		then := fmt.Sprintf("attempt %d of %d starts after the %s backoff", f.cur.n+1, f.lim.maxAttempts, dur(f.lim.backoff))
		if v.then != "" {
			then = v.then // a finalize-only attempt, once the pod has stopped
		}
		if !f.podStopped() {
			e.d.DeletePod = true
			e.st.Message = fmt.Sprintf("%s; deleting its pod, then %s", v.cause, then)
			e.requeueIn(StopPollInterval)
			return
		}
		e.st.Message = fmt.Sprintf("%s; %s", v.cause, then)
		e.requeue = append(e.requeue, f.recoveringSince(v.newFailure).Add(f.lim.backoff))
		return
	}
	e.setCondition(v1alpha1.ConditionRecovering, metav1.ConditionTrue, v1alpha1.ConditionReasonStartingAttempt, v.cause)
	e.st.Message = f.startingMessage(e.cur.n, v.cause)
	e.work()
}

// finalizing keeps a finalizing run's attempt on its finalize grant: the one
// entering Finalizing just gave it, or the one persisted when it began. A
// settled run waits for its pod to exit on its own until finalizingTime +
// finalizationGrace (deleting it at once would race a clean exit).
func (e *enactment) finalizing() {
	if !e.v.finalize {
		e.d.Attempt = e.cur.n
		e.d.Grant = e.f.keptFinalizeGrant(e.cur)
	}
	switch {
	case e.v.settled:
		until, _ := e.f.exitDeadline(e.v.finalize)
		e.st.Message = fmt.Sprintf("%s; waiting up to %s for the pod of attempt %d to exit",
			e.finalizedStory(), dur(until.Sub(e.f.now)), e.cur.n)
		e.requeue = append(e.requeue, until)
	case !e.v.finalize && e.f.condition(v1alpha1.ConditionFinalizing) == nil:
		e.setCondition(v1alpha1.ConditionFinalizing, metav1.ConditionTrue, string(e.st.Reason), e.st.Message)
	}
}

// enterFinalizing moves to Finalizing (once): the attempt may only do
// output work, from what is left of the reserve. The grant is persisted in
// status.budget.granted and kept on later passes; the cause and the reserve
// in status.finalization.
func (e *enactment) enterFinalizing(reason v1alpha1.Reason, cause string) {
	extra := e.f.reserveLeft()
	e.st.Phase = v1alpha1.PhaseFinalizing
	e.st.Reason = reason
	if e.st.FinalizingTime == nil {
		e.st.FinalizingTime = e.f.stamp()
	}
	e.st.Finalization = &v1alpha1.FinalizationStatus{Reason: reason, Cause: textutil.Truncate(cause, maxMessage), Reserve: extra}
	e.st.Message = fmt.Sprintf("%s; finalizing from %s", cause, e.f.describeReserve(extra))
	e.setCondition(v1alpha1.ConditionFinalizing, metav1.ConditionTrue, string(reason), e.st.Message)
	e.d.Attempt = e.cur.n
	e.d.Grant = e.f.finalizeGrant(e.cur, extra)
	e.d.Directives = nil
}

// end ends the run with reason: Terminated at once if the pod has stopped,
// else delete the pod and wait (the Stopping latch keeps the decision).
func (e *enactment) end(reason v1alpha1.Reason, why string) {
	e.d.Attempt, e.d.Grant, e.d.Directives = 0, v1alpha1.Grant{}, nil
	if e.f.podStopped() {
		e.terminate(reason, why)
		return
	}
	e.stopping, e.stopWhy = true, why
	e.st.Reason = reason
	e.st.Message = fmt.Sprintf("%s; waiting for the pod of attempt %d to stop", why, e.cur.n)
	e.d.DeletePod = true
	e.requeueIn(StopPollInterval)
}

// terminate declares the run Terminated; its pod has stopped.
func (e *enactment) terminate(reason v1alpha1.Reason, why string) {
	e.st.Phase = v1alpha1.PhaseTerminated
	e.st.Reason = reason
	e.st.Settlement = e.f.settlement()
	if e.v.fromFacts {
		e.st.Settlement = e.f.settlementFromFacts()
	}
	if e.st.CompletionTime == nil {
		e.st.CompletionTime = e.f.stamp()
	}
	e.st.Message = why
	switch {
	case e.v.fromFacts:
		e.st.Message += "; " + e.f.settledFromFactsStory()
	case e.st.StartTime != nil:
		e.st.Message += "; " + e.f.publicationStory()
	}
	if u := e.f.unknownEffectsStory(); u != "" {
		e.st.Message += "; " + u
	}
	e.d.DeletePod = false
}

// finalizedStory tells a finalization that is over, from
// status.finalization as this pass leaves it.
func (e *enactment) finalizedStory() string {
	if fin := e.st.Finalization; fin != nil {
		return fmt.Sprintf("%s; finalized from %s", fin.Cause, e.f.describeReserve(fin.Reserve))
	}
	return e.f.untypedFinalization()
}

func (e *enactment) requeueIn(d time.Duration) { e.requeue = append(e.requeue, e.f.now.Add(d)) }

func (e *enactment) condition(t string) *metav1.Condition {
	return meta.FindStatusCondition(e.st.Conditions, t)
}

// withLedgerEntry is the ledger with an entry for attempt n: an attempt the
// decision names gets its (zero) entry in the pass that creates it, not in a
// write of its own once the attempt is seen.
func withLedgerEntry(ledger []v1alpha1.AttemptLedger, n int32) []v1alpha1.AttemptLedger {
	if n < 1 || slices.ContainsFunc(ledger, func(e v1alpha1.AttemptLedger) bool { return e.Attempt == n }) {
		return ledger
	}
	out := append(slices.Clone(ledger), v1alpha1.AttemptLedger{Attempt: n})
	slices.SortFunc(out, func(a, b v1alpha1.AttemptLedger) int { return int(a.Attempt) - int(b.Attempt) })
	return out
}

// setCondition sets a condition; its LastTransitionTime moves to now only if
// its status changes.
func (e *enactment) setCondition(t string, s metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&e.st.Conditions, metav1.Condition{
		Type:               t,
		Status:             s,
		Reason:             reason,
		Message:            textutil.Truncate(msg, maxMessage),
		ObservedGeneration: e.f.in.Generation,
		LastTransitionTime: metav1.NewTime(e.f.stampTime()),
	})
}

// ---- The rest of the status, events and requeue. ----

func (e *enactment) finish() Decision {
	f, st := e.f, &e.st
	st.ObservedGeneration = f.in.Generation
	st.Tier = f.in.Spec.Tier
	st.Ledger = withLedgerEntry(f.ledger, e.d.Attempt)
	st.Steps = f.steps
	st.Budget.Used = f.used
	st.Budget.Remaining = f.lim.shown(nonNeg(f.remaining()))
	st.Budget.Granted = grantUsage(e.d.Grant)
	st.Gates = e.gateStatus()
	if st.Phase != v1alpha1.PhaseQueued {
		st.QueuePosition = 0
	}
	st.Message = textutil.Truncate(st.Message, maxMessage)
	e.conditions()
	e.approvals()
	e.securityPosture()
	for _, a := range f.in.Attempts {
		if a.Attempt < st.Attempt && !slices.Contains(e.d.Superseded, a.Attempt) {
			e.d.Superseded = append(e.d.Superseded, a.Attempt)
		}
	}
	slices.Sort(e.d.Superseded)
	e.d.Events = append(append(e.events(), e.approvalEvents()...), e.securityEvents()...)
	e.d.RequeueAfter = e.requeueAfter()
	e.d.Status = *st
	return e.d
}

// gateStatus shows how close the run is to each gate.
func (e *enactment) gateStatus() v1alpha1.GateStatus {
	g := v1alpha1.GateStatus{
		Steps:                e.f.steps,
		StepsWithoutProgress: stepsWithoutProgress(e.cur),
		MaxSameCall:          maxSameCall(e.cur).Count,
	}
	for _, a := range e.f.in.Attempts {
		for _, x := range a.Status.Faults {
			if !x.Escalated {
				g.LocalFaults += max(x.Count, 1)
			}
		}
	}
	for _, d := range e.d.Directives {
		if !slices.Contains(g.Directives, d.Type) {
			g.Directives = append(g.Directives, d.Type)
		}
	}
	return g
}

// conditions sets Ready, Reconciling, Succeeded, Stalled, Finalizing and
// Recovering from the decided state. Ready, Reconciling and Stalled are what
// kstatus (Flux, Argo CD) reads; they say what RunHealth says. Reconciling
// carries Ready's reason (or Terminated) and message, so it changes only
// when Ready does, in the same status write.
func (e *enactment) conditions() {
	st := &e.st
	T, F := metav1.ConditionTrue, metav1.ConditionFalse
	health := RunHealth(st.Phase, st.Reason, st.Settlement)
	switch {
	case e.stopping:
		e.setCondition(v1alpha1.ConditionReady, F, v1alpha1.ConditionReasonStopping, e.stopWhy)
		e.setCondition(v1alpha1.ConditionReconciling, T, v1alpha1.ConditionReasonStopping, e.stopWhy)
	case health == HealthCurrent:
		e.setCondition(v1alpha1.ConditionReady, T, string(st.Reason), st.Message)
		e.setCondition(v1alpha1.ConditionReconciling, F, v1alpha1.ConditionReasonTerminated, st.Message)
	case health == HealthFailed:
		e.setCondition(v1alpha1.ConditionReady, F, string(st.Reason), st.Message)
		e.setCondition(v1alpha1.ConditionReconciling, F, v1alpha1.ConditionReasonTerminated, st.Message)
		// kstatus reads Stalled=True as "failed, and will not progress":
		// without it a run that ended short would show as in progress
		// forever.
		e.setCondition(v1alpha1.ConditionStalled, T, string(st.Reason), st.Message)
	case st.Phase == v1alpha1.PhaseRunning:
		e.setCondition(v1alpha1.ConditionReady, T, v1alpha1.ConditionReasonRunning, st.Message)
		e.setCondition(v1alpha1.ConditionReconciling, T, v1alpha1.ConditionReasonRunning, st.Message)
	default:
		e.setCondition(v1alpha1.ConditionReady, F, string(st.Phase), st.Message)
		e.setCondition(v1alpha1.ConditionReconciling, T, string(st.Phase), st.Message)
	}
	if health != HealthFailed {
		e.leave(v1alpha1.ConditionStalled)
	}
	if st.Phase == v1alpha1.PhaseTerminated {
		s := F
		if st.Reason == v1alpha1.ReasonCompleted && st.Settlement == v1alpha1.SettlementComplete {
			s = T
		}
		e.setCondition(v1alpha1.ConditionSucceeded, s, string(st.Reason), st.Message)
	}
	if st.Phase != v1alpha1.PhaseFinalizing || e.stopping {
		e.leave(v1alpha1.ConditionFinalizing)
	}
	if st.Phase != v1alpha1.PhaseRecovering || e.stopping {
		e.leave(v1alpha1.ConditionRecovering)
	}
}

// leave sets condition t False, with why, if it is True.
func (e *enactment) leave(t string) {
	st := &e.st
	if c := e.condition(t); c == nil || c.Status != metav1.ConditionTrue {
		return
	}
	reason, msg := string(st.Phase), st.Message
	switch {
	case e.stopping:
		reason, msg = v1alpha1.ConditionReasonStopping, e.stopWhy
	case st.Phase == v1alpha1.PhaseTerminated:
		reason = v1alpha1.ConditionReasonTerminated
	case t == v1alpha1.ConditionRecovering && st.Phase == v1alpha1.PhaseRunning:
		reason, msg = v1alpha1.ConditionReasonRecovered, fmt.Sprintf("attempt %d is running", e.cur.n)
	}
	e.setCondition(t, metav1.ConditionFalse, reason, msg)
}

// events reports the transition of this pass, if any.
func (e *enactment) events() []Event {
	const normal, warning = corev1.EventTypeNormal, corev1.EventTypeWarning
	f, st := e.f, &e.st
	severity := func() string {
		if st.Reason == v1alpha1.ReasonCompleted {
			return normal
		}
		return warning
	}
	wasStopping := false
	if c := f.condition(v1alpha1.ConditionReady); c != nil {
		wasStopping = c.Reason == v1alpha1.ConditionReasonStopping
	}
	var evs []Event
	switch {
	case st.Phase == v1alpha1.PhaseTerminated:
		evs = append(evs, Event{severity(), v1alpha1.EventReasonTerminated, fmt.Sprintf("%s (settlement %s): %s", st.Reason, st.Settlement, st.Message)})
	case e.stopping && (!wasStopping || st.Reason != f.in.Status.Reason):
		evs = append(evs, Event{severity(), v1alpha1.EventReasonStopping, fmt.Sprintf("%s: %s", st.Reason, st.Message)})
	case st.Phase != f.phase0 || st.Reason != f.in.Status.Reason:
		// The usual path — start, then finalize a completed answer — has no
		// event of its own: Terminated tells it. Waiting, recovery and a
		// finalization for any other reason are worth one.
		switch st.Phase {
		case v1alpha1.PhaseQueued:
			if f.phase0 != v1alpha1.PhaseQueued {
				evs = append(evs, Event{normal, v1alpha1.EventReasonQueued, st.Message})
			}
		case v1alpha1.PhaseRunning:
			if f.phase0 == v1alpha1.PhaseRecovering {
				evs = append(evs, Event{normal, v1alpha1.EventReasonRunning, st.Message})
			}
		case v1alpha1.PhaseRecovering:
			evs = append(evs, Event{warning, v1alpha1.EventReasonRecovering, st.Message})
		case v1alpha1.PhaseFinalizing:
			if st.Reason != v1alpha1.ReasonCompleted {
				evs = append(evs, Event{normal, v1alpha1.EventReasonFinalizing, fmt.Sprintf("%s: %s", st.Reason, st.Message)})
			}
		}
	case e.v.newFailure:
		evs = append(evs, Event{warning, v1alpha1.EventReasonRecovering, st.Message})
	}
	if e.v.newAttempt && e.cur.n > 1 && !e.stopping && st.Phase != v1alpha1.PhaseTerminated {
		evs = append(evs, Event{normal, v1alpha1.EventReasonAttemptStarted, fmt.Sprintf("started attempt %d", e.cur.n)})
	}
	return evs
}

// requeueAfter is how long until the earliest future time at which the
// decision could change without any new fact: stop poll, backoff expiry,
// queue timeout, directive thresholds of the deadline, deadline, hard
// deadline, pod start timeout, heartbeat expiry, settle grace.
func (e *enactment) requeueAfter() time.Duration {
	f, st := e.f, &e.st
	if st.Phase == v1alpha1.PhaseTerminated {
		return 0
	}
	at := slices.Clone(e.requeue)
	if st.Phase == v1alpha1.PhaseQueued && st.QueuedTime != nil && f.in.Queue.Timeout > 0 {
		at = append(at, st.QueuedTime.Add(f.in.Queue.Timeout))
	}
	if !e.stopping && st.Phase.IsActive() && st.StartTime != nil {
		start := st.StartTime.Time
		at = append(at, start.Add(f.lim.deadline+f.lim.grace))
		if st.Phase != v1alpha1.PhaseFinalizing {
			at = append(at, start.Add(f.lim.deadline))
			if lim := int64(f.lim.deadline); lim > 1 {
				at = append(at,
					start.Add(time.Duration(threshold(f.lim.degradePct, lim))),
					start.Add(time.Duration(threshold(f.lim.compressPct, lim))))
			}
		}
	}
	working := !e.stopping && e.d.Attempt == e.cur.n
	if t, ok := f.startDeadline(e.cur); ok && working {
		at = append(at, t)
	}
	if working && e.cur.observed && f.in.Pod.Phase == PodRunning && f.lim.heartbeatTimeout > 0 {
		if last := f.lastSignOfLife(); !last.IsZero() {
			at = append(at, last.Add(f.lim.heartbeatTimeout))
		}
	}
	var best time.Duration
	for _, t := range at {
		if d := t.Sub(f.now); d > 0 && (best == 0 || d < best) {
			best = d
		}
	}
	return best
}
