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
	"strings"
	"time"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// verdict is what a rule decided. enact turns it into the Decision.
type verdict struct {
	// keep: the run is Terminated; nothing changes.
	keep bool
	// phase is where the run goes: Pending, Queued, Running, Recovering or
	// Finalizing; Terminated means "end": Terminated at once if the pod has
	// stopped, else delete the pod and wait (the Stopping latch).
	phase v1alpha1.Phase
	// reason is why the run finalizes or ends.
	reason v1alpha1.Reason
	// cause is why, with the numbers: the sentence that leads the message.
	cause string
	// newAttempt: the run goes on in a new attempt, a replacement or a
	// finalize-only one.
	newAttempt bool
	// finalize: the run enters Finalizing in this pass (and, with phase
	// Terminated, ends at once: its publication already settled).
	finalize bool
	// settled: the finalization is over (its publication settled); the run
	// waits for its pod to exit (Finalizing) or ends (Terminated).
	settled bool
	// failed: the current attempt failed and, unless newAttempt, the run
	// waits for its pod to stop and the backoff before replacing it.
	failed bool
	// newFailure: this pass saw the failure; the backoff counts from now.
	newFailure bool
	// fromFacts: the operator settles the publication from what the
	// gateway recorded (the pod exited 0 and nobody settled it).
	fromFacts bool
	// factsDue: the run holds its course and waits until then for the
	// gateway's last facts of an attempt whose pod stopped.
	factsDue time.Time
	// then, for a failed attempt replaced once its pod has stopped (failed,
	// not newAttempt), says what starts then when it is not a recovery:
	// "attempt 4 finalizes from the output reserve (…)".
	then string
}

// ending is the verdict that ends the run with reason.
func ending(reason v1alpha1.Reason, cause string) verdict {
	return verdict{phase: v1alpha1.PhaseTerminated, reason: reason, cause: cause}
}

// ---- The rules, in ladder order. ----

// absorbing: a Terminated run is final; the decision changes nothing.
func absorbing(f *facts) (verdict, bool) {
	return verdict{keep: true}, f.phase == v1alpha1.PhaseTerminated
}

// stoppingLatch: an earlier pass decided the run ends (status.reason) and is
// waiting for the pod to stop. The decision stands even if the facts that
// led to it change.
func stoppingLatch(f *facts) (verdict, bool) {
	c := f.condition(v1alpha1.ConditionReady)
	if c == nil || c.Reason != v1alpha1.ConditionReasonStopping {
		return verdict{}, false
	}
	reason := f.in.Status.Reason
	if reason == "" {
		reason = v1alpha1.ReasonAgentFailed
	}
	return ending(reason, c.Message), true
}

// cancel: spec.stop Cancel ends the run with nothing more spent and no
// finalization. A Finalize request for a run that never started has
// nothing to finalize and ends it the same way.
func cancel(f *facts) (verdict, bool) {
	switch stop := f.in.Spec.Stop; {
	case stop == v1alpha1.StopCancel && f.phase.IsWaiting():
		return ending(v1alpha1.ReasonCancelled, cancelCause(f.in)+" before it started"), true
	case stop == v1alpha1.StopCancel:
		return ending(v1alpha1.ReasonCancelled, fmt.Sprintf("%s after %d steps and %d model requests",
			cancelCause(f.in), f.steps, f.used.ModelRequests)), true
	case stop == v1alpha1.StopFinalize && f.phase.IsWaiting():
		return ending(v1alpha1.ReasonCancelled, "stopped (spec.stop: Finalize) before it started, with nothing to finalize"), true
	}
	return verdict{}, false
}

// blocked: a run that has not started stays Pending while its session or
// policy is missing or not ready; nothing is started or ended for it.
func blocked(f *facts) (verdict, bool) {
	if f.in.Blocked == "" || f.phase != v1alpha1.PhasePending {
		return verdict{}, false
	}
	return verdict{phase: v1alpha1.PhasePending, cause: f.in.Blocked}, true
}

// queue: a run that does not hold its session waits in its queue, unless the
// queue is full or it waited too long. The holder does not match: the rungs
// below decide for it as started (startIfHolder).
func queue(f *facts) (verdict, bool) {
	q := f.in.Queue
	if !f.phase.IsWaiting() || q.Holder {
		return verdict{}, false
	}
	session := f.in.Spec.SessionRef.Name
	if q.Position > q.Limit {
		return ending(v1alpha1.ReasonQueueFull, fmt.Sprintf("session %q's queue is full: position %d is beyond its limit of %d waiting runs",
			session, q.Position, q.Limit)), true
	}
	if qt := f.in.Status.QueuedTime; qt != nil && q.Timeout > 0 {
		if waited := f.now.Sub(qt.Time); waited >= q.Timeout {
			return ending(v1alpha1.ReasonQueueTimeout, fmt.Sprintf("waited %s in session %q's queue, past its %s timeout",
				dur(waited), session, dur(q.Timeout))), true
		}
	}
	return verdict{phase: v1alpha1.PhaseQueued,
		cause: fmt.Sprintf("queued in session %q at position %d of at most %d waiting runs", session, q.Position, q.Limit)}, true
}

// hardDeadline: at deadline + finalizationGrace the run ends whatever its
// pod does. A finalizing run keeps the reason it was finalizing for.
func hardDeadline(f *facts) (verdict, bool) {
	if !f.phase.IsActive() || f.startTime == nil {
		return verdict{}, false
	}
	start, lim := f.startTime.Time, f.lim
	if f.now.Before(start.Add(lim.deadline + lim.grace)) {
		return verdict{}, false
	}
	if f.phase == v1alpha1.PhaseFinalizing {
		return ending(f.in.Status.Reason, fmt.Sprintf("%s; finalization did not finish within the %s grace after the %s deadline",
			f.finalizingCause(), dur(lim.grace), dur(lim.deadline))), true
	}
	return ending(v1alpha1.ReasonDeadlineExceeded, fmt.Sprintf("hard deadline passed %s after start (the %s deadline plus %s finalization grace)",
		dur(f.now.Sub(start)), dur(lim.deadline), dur(lim.grace))), true
}

// factGrace: the current attempt's pod stopped on its own and the gateway
// may not have written its last coalesced facts yet (usage, steps: within
// its flush interval). The rungs below judge those facts — a failure, a
// finish, a violation, a gate — so the run holds its course until the
// facts are final or FactGrace has passed since the pod stopped. Nothing
// is spent meanwhile: the pod has stopped.
func factGrace(f *facts) (verdict, bool) {
	until, wait := f.factsDue()
	if !wait || !f.phase.IsActive() || f.phase.IsWaiting() {
		return verdict{}, false
	}
	v, _ := steady(f)
	v.factsDue = until
	return v, true
}

// attemptFailed: the current attempt failed (or an earlier pass saw it fail
// and is replacing it). In order: an in-flight effect without idempotency
// key ends the run (UnsafeToRecover); a finalizing run ends with its
// reason; a gate already at its limit finalizes (in a new attempt) or ends;
// a spec.stop Finalize finalizes in a new attempt; an escalated fault that
// is not retryable, which a new attempt cannot fix, finalizes (in a new
// attempt) or ends (AgentFailed); attempts left start a replacement after
// the backoff; otherwise recovery is exhausted and the run finalizes in a
// new attempt or ends. A finalize-only attempt, like a replacement, starts
// only once the failed attempt's pod has stopped (replaceOnceStopped).
func attemptFailed(f *facts) (verdict, bool) {
	why, story, latched, failed := f.attemptFailure()
	if !failed {
		return verdict{}, false
	}
	cur := f.cur.n
	if unsafe := f.unsafeInFlight(); unsafe != "" {
		return ending(v1alpha1.ReasonUnsafeToRecover, fmt.Sprintf("%s, with %s; its outcome is unknown, so the run is not recovered",
			story, unsafe)), true
	}
	if f.phase == v1alpha1.PhaseFinalizing {
		return ending(f.in.Status.Reason, fmt.Sprintf("%s; attempt %d failed while finalizing: %s", f.finalizingCause(), cur, why)), true
	}
	if g, ok := f.hardGate(f.cur); ok {
		return replaceOnceStopped(f, finalizeOrEnd(f, g.reason, story+"; "+g.cause, true), story, latched), true
	}
	if f.in.Spec.Stop == v1alpha1.StopFinalize {
		// Wrap up as asked, in a new attempt, rather than recover first.
		return replaceOnceStopped(f, verdict{phase: v1alpha1.PhaseFinalizing, finalize: true, newAttempt: true,
			reason: v1alpha1.ReasonFinalizeRequested, cause: story + "; " + finalizeCause(f.in)}, story, latched), true
	}
	if x, ok := f.unfixableFault(); ok {
		// Recover only from what a new attempt can fix.
		fault := "it escalated " + faultStory(x) + ", which is"
		if strings.Contains(story, faultStory(x)) {
			fault = "that fault is" // the story already names it
		}
		cause := fmt.Sprintf("%s; %s not retryable: a new attempt cannot fix it, so the run is not recovered", story, fault)
		return replaceOnceStopped(f, finalizeOrEnd(f, v1alpha1.ReasonAgentFailed, cause, true), story, latched), true
	}
	if cur < f.lim.maxAttempts {
		return verdict{phase: v1alpha1.PhaseRecovering, cause: story, failed: true,
			newFailure: !latched, newAttempt: f.replaceable(!latched)}, true
	}
	return replaceOnceStopped(f, finalizeOrEnd(f, v1alpha1.ReasonRecoveryExhausted,
		fmt.Sprintf("%s; recovery exhausted after %d of %d attempts", story, cur, f.lim.maxAttempts), true), story, latched), true
}

// replaceOnceStopped holds back a verdict that starts a new, finalize-only
// attempt while the failed attempt's pod has not stopped: like a recovery,
// the run is Recovering (the failure latched in the Recovering condition,
// its story kept) while the pod is deleted, and the finalize-only attempt
// starts in the first pass that sees the pod stopped — no backoff. Two pods
// of one run never overlap. Other verdicts pass unchanged: ending deletes
// the pod and waits by itself (the Stopping latch).
func replaceOnceStopped(f *facts, v verdict, story string, latched bool) verdict {
	if !v.newAttempt || f.podStopped() {
		return v
	}
	return verdict{phase: v1alpha1.PhaseRecovering, cause: story, failed: true, newFailure: !latched,
		then: fmt.Sprintf("attempt %d finalizes from the output reserve (%s: %s)", f.cur.n+1, v.reason,
			strings.TrimPrefix(v.cause, story+"; "))}
}

// finalizeOrEnd finalizes with reason if the reserve is intact — in a new,
// finalize-only attempt when the current one failed — and otherwise ends
// the run with that reason.
func finalizeOrEnd(f *facts, reason v1alpha1.Reason, cause string, newAttempt bool) verdict {
	if !f.reserveIntact() {
		return ending(reason, cause+"; the output reserve is not available, so nothing is finalized")
	}
	return verdict{phase: v1alpha1.PhaseFinalizing, finalize: true, newAttempt: newAttempt, reason: reason, cause: cause}
}

// policyViolation: the current attempt's counters went back, or it used
// more than its grant. Facts of superseded attempts are counted in the
// ledger but cannot drive the phase.
func policyViolation(f *facts) (verdict, bool) {
	if s := f.backwards[f.cur.n]; s != "" {
		return ending(v1alpha1.ReasonPolicyViolation, s), true
	}
	if s := f.overGrant(); s != "" {
		return ending(v1alpha1.ReasonPolicyViolation, s), true
	}
	return verdict{}, false
}

// finishOrSettle: a proposed finish (Completed) — the agent's own, or its
// pod's exit 0, an implicit one — or spec.stop: Finalize (FinalizeRequested)
// moves a working run to Finalizing; a settled publication ends a finalizing
// run, at once if its pod stopped, else once the pod had until
// finalizingTime + finalizationGrace to exit. A pod that exited 0 without
// settling is settled by the operator from the publication facts the
// gateway recorded (fromFacts). Advice never enters this decision.
func finishOrSettle(f *facts) (verdict, bool) {
	fromFacts := f.settlesFromFacts()
	settled := f.cur.facts.Status.Publication.Settled || fromFacts
	switch f.phase {
	case v1alpha1.PhaseRunning, v1alpha1.PhaseRecovering:
		v := verdict{phase: v1alpha1.PhaseFinalizing, finalize: true, reason: v1alpha1.ReasonCompleted,
			settled: settled, fromFacts: fromFacts}
		switch {
		case f.cur.facts.Status.FinishProposed:
			v.cause = fmt.Sprintf("attempt %d proposed finish after %d steps", f.cur.n, f.steps)
		case f.exitedZero():
			// The agent process's exit 0 is its finish proposal.
			v.cause = fmt.Sprintf("attempt %d exited 0 after %d steps without proposing finish: an implicit finish", f.cur.n, f.steps)
		case f.in.Spec.Stop == v1alpha1.StopFinalize:
			v.reason = v1alpha1.ReasonFinalizeRequested
			v.cause = fmt.Sprintf("%s after %d steps", finalizeCause(f.in), f.steps)
		default:
			return verdict{}, false
		}
		if _, wait := f.exitDeadline(true); settled && !wait {
			v.phase = v1alpha1.PhaseTerminated
		}
		return v, true
	case v1alpha1.PhaseFinalizing:
		if !settled {
			return verdict{}, false
		}
		v := verdict{phase: v1alpha1.PhaseFinalizing, reason: f.in.Status.Reason, settled: true, fromFacts: fromFacts}
		if _, wait := f.exitDeadline(false); !wait {
			v.phase = v1alpha1.PhaseTerminated
		}
		return v, true
	}
	return verdict{}, false
}

// gates: a gate at its hard limit finalizes from the reserve if it is
// intact, else ends the run with the gate's reason.
func gates(f *facts) (verdict, bool) {
	if f.phase != v1alpha1.PhaseRunning && f.phase != v1alpha1.PhaseRecovering {
		return verdict{}, false
	}
	g, ok := f.hardGate(f.cur)
	if !ok {
		return verdict{}, false
	}
	return finalizeOrEnd(f, g.reason, g.cause, false), true
}

// steady: nothing ends or changes course; the current attempt keeps working
// (Running once a replacement's pod runs) or finalizing.
func steady(f *facts) (verdict, bool) {
	if f.phase != v1alpha1.PhaseRecovering {
		return verdict{phase: f.phase}, true
	}
	if f.pod(f.cur).Phase == PodRunning {
		return verdict{phase: v1alpha1.PhaseRunning}, true
	}
	story := fmt.Sprintf("attempt %d failed", f.cur.n-1)
	if rc := f.condition(v1alpha1.ConditionRecovering); rc != nil {
		story = rc.Message
	}
	return verdict{phase: v1alpha1.PhaseRecovering, cause: story}, true
}
