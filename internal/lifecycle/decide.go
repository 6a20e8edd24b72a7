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
	"maps"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// Decide turns the facts of one run into its next status and the actions
// that bring the world there. It is pure: same input, same decision.
func Decide(in Input) Decision {
	d, _ := decide(in)
	return d
}

// decide is Decide that also names the rung that decided, for tests.
func decide(in Input) (Decision, string) {
	p := newPass(in)
	for _, r := range ladder {
		if r.decide(p) {
			return p.finish(), r.name
		}
	}
	panic("lifecycle: the steady rule always matches")
}

// rule is one rung of the ladder: it reports whether it decided the pass.
// A rule that does not match leaves the pass unchanged, except for the Queue
// rule, which promotes the session holder to Running and lets the rest of
// the ladder decide from there.
type rule struct {
	name   string
	decide func(*pass) bool
}

// ladder is the precedence of the decision, first match wins. It is the only
// place the order is written down; doc.go explains it.
var ladder = []rule{
	{"Terminated", (*pass).terminated},           // absorbing: nothing changes
	{"Stopping", (*pass).stoppingLatch},          // an earlier pass decided to end: wait for the pod
	{"Cancel", (*pass).cancel},                   // spec.stop: Cancel
	{"Blocked", (*pass).blocked},                 // Pending: its session or policy is not there or not ready
	{"Queue", (*pass).queue},                     // Pending/Queued: wait, QueueFull, QueueTimeout, or start
	{"HardDeadline", (*pass).hardDeadline},       // deadline + finalizationGrace, any active phase
	{"AttemptFailed", (*pass).attemptFailed},     // unsafe, finalizing, gate, recover, exhausted
	{"PolicyViolation", (*pass).policyViolation}, // counters back, usage above grant
	{"Finish", (*pass).finishOrSettle},           // finish proposed, publication settled
	{"Gates", (*pass).gates},                     // a gate at its hard limit
	{"Steady", (*pass).steady},                   // keep working: grant, directives
}

// Condition reasons this package writes besides the run's own Reason values.
const (
	// CondReasonStopping (Ready=False): the run has decided to end and waits
	// for its pod to stop. The run's status.reason says why. Persisted, this
	// reason is also what keeps later passes on that decision.
	CondReasonStopping = "Stopping"
	// CondReasonAttemptFailed (Recovering=True): the current attempt failed;
	// its pod is being stopped or the backoff runs. LastTransitionTime is when
	// the failure was seen; the backoff counts from it.
	CondReasonAttemptFailed = "AttemptFailed"
	// CondReasonStartingAttempt (Recovering=True): a replacement attempt was
	// started and its pod is not running yet.
	CondReasonStartingAttempt = "StartingAttempt"
	// CondReasonRecovered (Recovering=False): the replacement attempt runs.
	CondReasonRecovered = "Recovered"
	// CondReasonRunning (Ready=True): an attempt is working.
	CondReasonRunning = "Running"
	// CondReasonTerminated (Finalizing=False): finalization is over.
	CondReasonTerminated = "Terminated"
)

// pass is one decision in progress: the input, the facts folded from it, and
// the next status and actions being built.
type pass struct {
	in  Input
	lim limits
	now time.Time // in.Now, in UTC

	phase0 v1alpha1.Phase             // the input phase ("" counts as Pending)
	st     v1alpha1.ResearchRunStatus // the next status; starts as a copy of in.Status
	d      Decision

	// Facts of all attempts.
	ledger    []v1alpha1.AttemptLedger // merged ledger, sorted by attempt
	used      v1alpha1.Usage           // sum over the ledger
	steps     int64                    // sum over the ledger
	backwards map[int32]string         // attempts whose counters went back, with the story

	// The current attempt.
	cur      int32
	f        AttemptFacts   // its facts; zero if its RunAttempt does not exist
	hasF     bool           // its RunAttempt exists
	own      v1alpha1.Usage // its ledger usage
	podValid bool           // in.Pod is its pod (false once this pass starts a new attempt)

	// What the rules decided, for finish.
	keep       bool   // Terminated: return the input unchanged
	stopping   bool   // waiting for the pod to stop before Terminated
	stopWhy    string // why the run ends, without the waiting clause
	newFailure bool   // this pass recorded a failure of the current attempt
	started    bool   // this pass started a replacement or finalize-only attempt
	requeue    []time.Time
}

// newPass starts a pass: it copies the status, folds the attempts' facts
// into the ledger and finds the current attempt.
func newPass(in Input) *pass {
	p := &pass{in: in, lim: limitsFor(in.Spec), now: in.Now.UTC(), podValid: true}
	p.st = *in.Status.DeepCopy()
	p.phase0 = in.Status.Phase
	if p.phase0 == "" {
		p.phase0 = v1alpha1.PhasePending
	}
	p.st.Phase = p.phase0
	p.foldLedger()
	cur := in.Status.Attempt
	for _, a := range in.Attempts {
		cur = max(cur, a.Attempt)
	}
	if cur == 0 && p.st.Phase.IsActive() {
		cur = 1
	}
	p.setCurrent(cur)
	if p.st.Phase.IsActive() && p.st.StartTime == nil {
		p.st.StartTime = p.stamp()
	}
	return p
}

// foldLedger merges the reported usage into the stored ledger. A counter
// below its stored value is remembered as a violation; the ledger keeps the
// higher value, so usage is never undercounted.
func (p *pass) foldLedger() {
	stored := map[int32]v1alpha1.AttemptLedger{}
	for _, e := range p.in.Status.Ledger {
		stored[e.Attempt] = e
	}
	merged := maps.Clone(stored)
	p.backwards = map[int32]string{}
	for _, a := range p.in.Attempts {
		if a.Attempt < 1 {
			continue
		}
		rep := a.Status.Usage
		if prev, ok := stored[a.Attempt]; ok {
			if s := wentBack(a.Attempt, prev, rep, a.Status.Steps); s != "" {
				p.backwards[a.Attempt] = s
			}
		}
		e := merged[a.Attempt]
		merged[a.Attempt] = v1alpha1.AttemptLedger{
			Attempt: a.Attempt,
			Used:    maxU(e.Used, rep),
			Steps:   max(e.Steps, a.Status.Steps),
		}
	}
	for _, e := range merged {
		p.ledger = append(p.ledger, e)
		p.used = add(p.used, e.Used)
		p.steps += e.Steps
	}
	slices.SortFunc(p.ledger, func(a, b v1alpha1.AttemptLedger) int { return int(a.Attempt) - int(b.Attempt) })
}

// wentBack tells how a monotonic counter of attempt n went below the ledger.
func wentBack(n int32, prev v1alpha1.AttemptLedger, rep v1alpha1.Usage, steps int64) string {
	back := func(what string, was, now int64) string {
		return fmt.Sprintf("attempt %d reported %d %s after %d; monotonic counters may not go back", n, now, what, was)
	}
	switch {
	case rep.ModelRequests < prev.Used.ModelRequests:
		return back("model requests", prev.Used.ModelRequests, rep.ModelRequests)
	case rep.ToolCalls < prev.Used.ToolCalls:
		return back("tool calls", prev.Used.ToolCalls, rep.ToolCalls)
	case rep.Tokens < prev.Used.Tokens:
		return back("tokens", prev.Used.Tokens, rep.Tokens)
	case steps < prev.Steps:
		return back("steps", prev.Steps, steps)
	}
	return ""
}

// setCurrent makes attempt n the current one.
func (p *pass) setCurrent(n int32) {
	p.cur = n
	p.st.Attempt = n
	p.f, p.hasF = AttemptFacts{Attempt: n}, false
	for _, a := range p.in.Attempts {
		if a.Attempt == n {
			p.f, p.hasF = a, true
			break
		}
	}
	p.own = v1alpha1.Usage{}
	for _, e := range p.ledger {
		if e.Attempt == n {
			p.own = e.Used
		}
	}
}

// startAttempt starts attempt n, replacing the current one. Nothing is known
// of its pod yet.
func (p *pass) startAttempt(n int32) {
	p.setCurrent(n)
	p.podValid = false
	p.started = true
}

// pod is the current attempt's pod as observed.
func (p *pass) pod() PodObservation {
	if !p.podValid {
		return PodObservation{Phase: PodAbsent}
	}
	return p.in.Pod
}

// podStopped reports whether the current attempt's pod runs nothing any more.
func (p *pass) podStopped() bool { return p.pod().Phase.stopped() }

// stampTime is now as persisted: UTC, whole seconds (what a metav1.Time
// keeps), so a status read back equals the status written.
func (p *pass) stampTime() time.Time { return p.now.Truncate(time.Second) }

func (p *pass) stamp() *metav1.Time {
	t := metav1.NewTime(p.stampTime())
	return &t
}

func (p *pass) remaining() v1alpha1.Usage { return sub(p.lim.budget, p.used) }

func (p *pass) requeueIn(d time.Duration) { p.requeue = append(p.requeue, p.now.Add(d)) }

func (p *pass) condition(t string) *metav1.Condition {
	return meta.FindStatusCondition(p.st.Conditions, t)
}

// setCondition sets a condition; its LastTransitionTime moves to now only if
// its status changes.
func (p *pass) setCondition(t string, s metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&p.st.Conditions, metav1.Condition{
		Type:               t,
		Status:             s,
		Reason:             reason,
		Message:            truncate(msg, maxMessage),
		ObservedGeneration: p.in.Generation,
		LastTransitionTime: metav1.NewTime(p.stampTime()),
	})
}

// ---- The rules, in ladder order. ----

// terminated: a Terminated run is final; the decision changes nothing.
func (p *pass) terminated() bool {
	if p.phase0 != v1alpha1.PhaseTerminated {
		return false
	}
	p.keep = true
	return true
}

// stoppingLatch: an earlier pass decided the run ends (status.reason) and is
// waiting for the pod to stop. The decision stands even if the facts that
// led to it change.
func (p *pass) stoppingLatch() bool {
	c := p.condition(v1alpha1.ConditionReady)
	if c == nil || c.Reason != CondReasonStopping {
		return false
	}
	reason := p.st.Reason
	if reason == "" {
		reason = v1alpha1.ReasonAgentFailed
	}
	p.end(reason, c.Message)
	return true
}

// cancel: spec.stop Cancel ends the run with nothing more spent and no
// finalization. A Finalize request for a run that never started has
// nothing to finalize and ends it the same way.
func (p *pass) cancel() bool {
	waiting := p.st.Phase == v1alpha1.PhasePending || p.st.Phase == v1alpha1.PhaseQueued
	switch {
	case p.in.Spec.Stop == v1alpha1.StopCancel && waiting:
		p.end(v1alpha1.ReasonCancelled, p.cancelCause()+" before it started")
	case p.in.Spec.Stop == v1alpha1.StopCancel:
		p.end(v1alpha1.ReasonCancelled, fmt.Sprintf("%s after %d steps and %d model requests",
			p.cancelCause(), p.steps, p.used.ModelRequests))
	case p.in.Spec.Stop == v1alpha1.StopFinalize && waiting:
		p.end(v1alpha1.ReasonCancelled, "stopped (spec.stop: Finalize) before it started, with nothing to finalize")
	default:
		return false
	}
	return true
}

// cancelCause says who cancelled: the user (spec.stop) or the operator on
// the user's behalf (Input.StopCause).
func (p *pass) cancelCause() string {
	if p.in.StopCause != "" {
		return "cancelled because " + p.in.StopCause
	}
	return "cancelled (spec.stop: Cancel)"
}

// BlockedPollInterval is how often a blocked run looks again (its referents'
// events also wake it).
const BlockedPollInterval = 5 * time.Second

// blocked: a run that has not started stays Pending while its session or
// policy is missing or not ready; nothing is started or ended for it.
func (p *pass) blocked() bool {
	if p.in.Blocked == "" || (p.st.Phase != "" && p.st.Phase != v1alpha1.PhasePending) {
		return false
	}
	p.st.Phase = v1alpha1.PhasePending
	p.st.Message = p.in.Blocked
	p.requeueIn(BlockedPollInterval)
	return true
}

// queue: a run that does not hold its session waits in its queue, unless the
// queue is full or it waited too long. The holder is promoted to Running
// and the rest of the ladder decides.
func (p *pass) queue() bool {
	if p.st.Phase != v1alpha1.PhasePending && p.st.Phase != v1alpha1.PhaseQueued {
		return false
	}
	q := p.in.Queue
	if q.Holder {
		p.st.Phase = v1alpha1.PhaseRunning
		p.st.QueuePosition = 0
		if p.st.StartTime == nil {
			p.st.StartTime = p.stamp()
		}
		p.setCurrent(max(p.cur, 1))
		return false
	}
	session := p.in.Spec.SessionRef.Name
	if q.Position > q.Limit {
		p.end(v1alpha1.ReasonQueueFull, fmt.Sprintf("session %q's queue is full: position %d is beyond its limit of %d waiting runs",
			session, q.Position, q.Limit))
		return true
	}
	if p.st.QueuedTime != nil && q.Timeout > 0 {
		if waited := p.now.Sub(p.st.QueuedTime.Time); waited >= q.Timeout {
			p.end(v1alpha1.ReasonQueueTimeout, fmt.Sprintf("waited %s in session %q's queue, past its %s timeout",
				dur(waited), session, dur(q.Timeout)))
			return true
		}
	}
	p.st.Phase = v1alpha1.PhaseQueued
	p.st.QueuePosition = q.Position
	if p.st.QueuedTime == nil {
		p.st.QueuedTime = p.stamp()
	}
	p.st.Message = fmt.Sprintf("queued in session %q at position %d of at most %d waiting runs", session, q.Position, q.Limit)
	return true
}

// hardDeadline: at deadline + finalizationGrace the run ends whatever its
// pod does. A finalizing run keeps the reason it was finalizing for.
func (p *pass) hardDeadline() bool {
	if !p.st.Phase.IsActive() || p.st.StartTime == nil {
		return false
	}
	start := p.st.StartTime.Time
	if p.now.Before(start.Add(p.lim.deadline + p.lim.grace)) {
		return false
	}
	if p.st.Phase == v1alpha1.PhaseFinalizing {
		p.end(p.st.Reason, fmt.Sprintf("%s; finalization did not finish within the %s grace after the %s deadline",
			p.finalizingCause(), dur(p.lim.grace), dur(p.lim.deadline)))
		return true
	}
	p.end(v1alpha1.ReasonDeadlineExceeded, fmt.Sprintf("hard deadline passed %s after start (the %s deadline plus %s finalization grace)",
		dur(p.now.Sub(start)), dur(p.lim.deadline), dur(p.lim.grace)))
	return true
}

// attemptFailed: the current attempt failed (or an earlier pass saw it fail
// and is replacing it). In order: an in-flight effect without idempotency
// key ends the run (UnsafeToRecover); a finalizing run ends with its
// reason; a gate already at its limit finalizes (in a new attempt) or ends;
// a spec.stop Finalize finalizes in a new attempt; attempts left start a
// replacement after the backoff; otherwise recovery is exhausted and the
// run finalizes in a new attempt or ends.
func (p *pass) attemptFailed() bool {
	why, failed := p.failure()
	rc := p.condition(v1alpha1.ConditionRecovering)
	latched := p.st.Phase == v1alpha1.PhaseRecovering && rc != nil && rc.Status == metav1.ConditionTrue &&
		rc.Reason == CondReasonAttemptFailed && p.cur == p.in.Status.Attempt
	if !failed && !latched {
		return false
	}
	story := fmt.Sprintf("attempt %d failed: %s", p.cur, why)
	if latched {
		story = rc.Message
	}
	if unsafe := p.unsafeInFlight(); unsafe != "" {
		p.end(v1alpha1.ReasonUnsafeToRecover, fmt.Sprintf("%s, with %s; its outcome is unknown, so the run is not recovered",
			story, unsafe))
		return true
	}
	if p.st.Phase == v1alpha1.PhaseFinalizing {
		p.end(p.st.Reason, fmt.Sprintf("%s; attempt %d failed while finalizing: %s", p.finalizingCause(), p.cur, why))
		return true
	}
	if g, ok := p.hardGate(); ok {
		p.finalizeOrEnd(g.reason, story+"; "+g.cause, true)
		return true
	}
	if p.in.Spec.Stop == v1alpha1.StopFinalize {
		// Wrap up as asked, in a new attempt, rather than recover first.
		p.startAttempt(p.cur + 1)
		p.enterFinalizing(v1alpha1.ReasonFinalizeRequested, story+"; finalize requested (spec.stop: Finalize)")
		return true
	}
	if p.cur < p.lim.maxAttempts {
		p.recover(story, !latched)
		return true
	}
	p.finalizeOrEnd(v1alpha1.ReasonRecoveryExhausted,
		fmt.Sprintf("%s; recovery exhausted after %d of %d attempts", story, p.cur, p.lim.maxAttempts), true)
	return true
}

// recover moves to Recovering: stop the failed pod, wait for the backoff,
// then start the next attempt, whose grant continues the ledger.
func (p *pass) recover(story string, newFailure bool) {
	p.st.Phase = v1alpha1.PhaseRecovering
	if newFailure {
		// Restart the clock even if the run was already Recovering.
		meta.RemoveStatusCondition(&p.st.Conditions, v1alpha1.ConditionRecovering)
		p.setCondition(v1alpha1.ConditionRecovering, metav1.ConditionTrue, CondReasonAttemptFailed, story)
		p.newFailure = true
	}
	since := p.condition(v1alpha1.ConditionRecovering).LastTransitionTime.Time
	next := p.cur + 1
	if !p.podStopped() {
		p.d.DeletePod = true
		p.st.Message = fmt.Sprintf("%s; deleting its pod, then attempt %d of %d starts after the %s backoff",
			story, next, p.lim.maxAttempts, dur(p.lim.backoff))
		p.requeueIn(StopPollInterval)
		return
	}
	if at := since.Add(p.lim.backoff); p.now.Before(at) {
		p.st.Message = fmt.Sprintf("%s; attempt %d of %d starts after the %s backoff",
			story, next, p.lim.maxAttempts, dur(p.lim.backoff))
		p.requeue = append(p.requeue, at)
		return
	}
	p.startAttempt(next)
	p.setCondition(v1alpha1.ConditionRecovering, metav1.ConditionTrue, CondReasonStartingAttempt, story)
	p.st.Message = p.startingMessage(story)
	p.work()
}

// policyViolation: the current attempt's counters went back, or it used
// more than its grant. Facts of superseded attempts are counted in the
// ledger but cannot drive the phase.
func (p *pass) policyViolation() bool {
	if s := p.backwards[p.cur]; s != "" {
		p.end(v1alpha1.ReasonPolicyViolation, s)
		return true
	}
	if !p.hasF {
		return false
	}
	// The limit is the larger of the attempt's current grant and the working
	// allowance it may have been given before: a grant lowered on entering
	// Finalizing reaches the agent a moment later, and what it spent under
	// the earlier grant in that moment is not a violation.
	u, g := p.f.Status.Usage, p.f.Grant
	// An attempt started working unless it was started finalize-only, which
	// only ever replaces a failed attempt (so never attempt 1) when Finalizing
	// begins. Times have one-second resolution, hence the attempt-1 case.
	startedWorking := p.st.FinalizingTime == nil || p.f.Created.Before(p.st.FinalizingTime.Time) || p.cur == 1
	if w := p.runningGrant(); startedWorking {
		g.ModelRequests = max(g.ModelRequests, w.ModelRequests)
		g.ToolCalls = max(g.ToolCalls, w.ToolCalls)
		if g.Tokens != nil && w.Tokens != nil {
			t := max(*g.Tokens, *w.Tokens)
			g.Tokens = &t
		}
	}
	above := func(what string, used, granted int64) bool {
		if used <= granted {
			return false
		}
		p.end(v1alpha1.ReasonPolicyViolation, fmt.Sprintf("attempt %d reported %d %s, above its grant of %d", p.cur, used, what, granted))
		return true
	}
	return above("model requests", u.ModelRequests, g.ModelRequests) ||
		above("tool calls", u.ToolCalls, g.ToolCalls) ||
		(g.Tokens != nil && above("tokens", u.Tokens, *g.Tokens))
}

// finishOrSettle: a proposed finish (Completed) or spec.stop: Finalize
// (FinalizeRequested) moves a working run to Finalizing; a settled
// publication ends a finalizing run, at once if its pod stopped, else once
// the pod had until finalizingTime + finalizationGrace to exit (awaitExit).
// Advice never enters this decision.
func (p *pass) finishOrSettle() bool {
	settled := p.f.Status.Publication.Settled
	switch p.st.Phase {
	case v1alpha1.PhaseRunning, v1alpha1.PhaseRecovering:
		var cause string
		reason := v1alpha1.ReasonCompleted
		switch {
		case p.f.Status.FinishProposed:
			cause = fmt.Sprintf("attempt %d proposed finish after %d steps", p.cur, p.steps)
		case p.in.Spec.Stop == v1alpha1.StopFinalize:
			reason = v1alpha1.ReasonFinalizeRequested
			cause = fmt.Sprintf("finalize requested (spec.stop: Finalize) after %d steps", p.steps)
		default:
			return false
		}
		p.enterFinalizing(reason, cause)
		if settled && !p.awaitExit() {
			p.end(reason, p.finalizedStory())
		}
		return true
	case v1alpha1.PhaseFinalizing:
		if !settled {
			return false
		}
		if p.awaitExit() {
			p.d.Attempt = p.cur
			p.d.Grant = p.keptFinalizeGrant()
			return true
		}
		p.end(p.st.Reason, p.finalizedStory())
		return true
	}
	return false
}

// awaitExit: the publication settled but the pod still runs. The agent exits
// on its own after settling, so it gets until FinalizingTime +
// finalizationGrace to do so before its pod is deleted (deleting it at once
// would race a clean exit). Reports whether to keep waiting. The caller
// keeps the attempt finalizing: a run that entered Finalizing in this pass
// has the grant enterFinalizing just gave it (status.budget.granted still
// holds the working grant), a run already finalizing keeps its persisted one.
func (p *pass) awaitExit() bool {
	if p.podStopped() || p.st.FinalizingTime == nil {
		return false
	}
	until := p.st.FinalizingTime.Add(p.lim.grace)
	if !p.now.Before(until) {
		return false
	}
	p.st.Message = fmt.Sprintf("%s; waiting up to %s for the pod of attempt %d to exit", p.finalizedStory(), dur(until.Sub(p.now)), p.cur)
	p.requeue = append(p.requeue, until)
	return true
}

// gates: a gate at its hard limit finalizes from the reserve if it is
// intact, else ends the run with the gate's reason.
func (p *pass) gates() bool {
	if p.st.Phase != v1alpha1.PhaseRunning && p.st.Phase != v1alpha1.PhaseRecovering {
		return false
	}
	g, ok := p.hardGate()
	if !ok {
		return false
	}
	p.finalizeOrEnd(g.reason, g.cause, false)
	return true
}

// steady: nothing ends or changes course; keep the current attempt working
// (or finalizing) with its grant and directives.
func (p *pass) steady() bool {
	switch p.st.Phase {
	case v1alpha1.PhaseRunning, v1alpha1.PhaseRecovering:
		if p.st.Phase == v1alpha1.PhaseRecovering && p.pod().Phase == PodRunning {
			p.st.Phase = v1alpha1.PhaseRunning
		}
		p.work()
		if p.st.Phase == v1alpha1.PhaseRecovering {
			story := fmt.Sprintf("attempt %d failed", p.cur-1)
			if rc := p.condition(v1alpha1.ConditionRecovering); rc != nil {
				story = rc.Message
			}
			p.setCondition(v1alpha1.ConditionRecovering, metav1.ConditionTrue, CondReasonStartingAttempt, story)
			p.st.Message = p.startingMessage(story)
		} else {
			p.st.Message = p.runningMessage()
		}
	case v1alpha1.PhaseFinalizing:
		p.d.Attempt = p.cur
		p.d.Grant = p.keptFinalizeGrant()
		if p.condition(v1alpha1.ConditionFinalizing) == nil {
			p.setCondition(v1alpha1.ConditionFinalizing, metav1.ConditionTrue, string(p.st.Reason), p.st.Message)
		}
	}
	return true
}

// ---- Transitions. ----

// work keeps the current attempt working from the working allowance.
func (p *pass) work() {
	p.d.Attempt = p.cur
	p.d.Grant = p.runningGrant()
	p.d.Directives = p.directives()
}

// finalizeOrEnd finalizes with reason if the reserve is intact — in a new,
// finalize-only attempt when the current one failed — and otherwise ends
// the run with that reason.
func (p *pass) finalizeOrEnd(reason v1alpha1.Reason, cause string, newAttempt bool) {
	if !p.reserveIntact() {
		p.end(reason, cause+"; the output reserve is not available, so nothing is finalized")
		return
	}
	if newAttempt {
		p.startAttempt(p.cur + 1)
	}
	p.enterFinalizing(reason, cause)
}

// enterFinalizing moves to Finalizing (once): the current attempt may only
// do output work, from what is left of the reserve. The grant is persisted
// in status.budget.granted and kept on later passes.
func (p *pass) enterFinalizing(reason v1alpha1.Reason, cause string) {
	extra := minU(p.lim.reserve, nonNeg(p.remaining()))
	p.st.Phase = v1alpha1.PhaseFinalizing
	p.st.Reason = reason
	if p.st.FinalizingTime == nil {
		p.st.FinalizingTime = p.stamp()
	}
	p.st.Message = fmt.Sprintf("%s; finalizing from %s", cause, p.describeReserve(extra))
	p.setCondition(v1alpha1.ConditionFinalizing, metav1.ConditionTrue, string(reason), p.st.Message)
	p.d.Attempt = p.cur
	p.d.Grant = p.grant(add(p.own, extra), true)
	p.d.Directives = nil
}

// end ends the run with reason: Terminated at once if the pod has stopped,
// else delete the pod and wait (the Stopping latch keeps the decision).
func (p *pass) end(reason v1alpha1.Reason, why string) {
	p.d.Attempt, p.d.Grant, p.d.Directives = 0, v1alpha1.Grant{}, nil
	if p.podStopped() {
		p.terminate(reason, why)
		return
	}
	p.stopping, p.stopWhy = true, why
	p.st.Reason = reason
	p.st.Message = fmt.Sprintf("%s; waiting for the pod of attempt %d to stop", why, p.cur)
	p.d.DeletePod = true
	p.requeueIn(StopPollInterval)
}

// terminate declares the run Terminated; its pod has stopped.
func (p *pass) terminate(reason v1alpha1.Reason, why string) {
	p.st.Phase = v1alpha1.PhaseTerminated
	p.st.Reason = reason
	p.st.Settlement = p.settlement()
	if p.st.CompletionTime == nil {
		p.st.CompletionTime = p.stamp()
	}
	p.st.Message = why
	if p.st.StartTime != nil {
		p.st.Message += "; " + p.publicationStory()
	}
	p.d.DeletePod = false
}

// ---- Facts of the current attempt. ----

// failure says whether and why the current attempt failed: its pod failed,
// vanished, or exited before its work was done; it escalated a fault; or it
// stopped sending heartbeats. An attempt that proposed finish and settled
// its publication is done, whatever its pod does next.
// startDeadline is when the current attempt's pod must be running: its
// RunAttempt's creation plus spec.recovery.startTimeout, while the pod has
// not started (not created yet, or Pending). ok is false when the check does
// not apply.
func (p *pass) startDeadline() (time.Time, bool) {
	if !p.podValid || !p.hasF || p.lim.startTimeout <= 0 || p.f.Created.IsZero() {
		return time.Time{}, false
	}
	if ph := p.in.Pod.Phase; ph != PodPending && (ph != PodAbsent || p.in.Pod.Created) {
		return time.Time{}, false
	}
	return p.f.Created.Add(p.lim.startTimeout), true
}

func (p *pass) failure() (string, bool) {
	if !p.podValid {
		return "", false
	}
	pod, s := p.in.Pod, p.f.Status
	if s.FinishProposed && s.Publication.Settled {
		return "", false
	}
	switch pod.Phase {
	case PodFailed:
		return "its pod failed" + detail(pod.Message), true
	case PodAbsent:
		if pod.Created {
			return "its pod is gone" + detail(pod.Message), true
		}
	case PodSucceeded:
		if p.st.Phase == v1alpha1.PhaseFinalizing {
			if !s.Publication.Settled {
				return "its pod exited before its publication settled", true
			}
		} else if !s.FinishProposed {
			return "its pod exited without proposing finish", true
		}
	}
	for _, f := range s.Faults {
		if f.Escalated {
			return fmt.Sprintf("it escalated a %s fault (%s%s)", f.Scope, f.Kind, detail(f.LastMessage)), true
		}
	}
	if at, ok := p.startDeadline(); ok && !p.now.Before(at) {
		return fmt.Sprintf("its pod did not start within %s%s", dur(p.lim.startTimeout), detail(pod.Message)), true
	}
	if pod.Phase == PodRunning && p.lim.heartbeatTimeout > 0 {
		if last := p.lastSignOfLife(); !last.IsZero() && p.now.Sub(last) >= p.lim.heartbeatTimeout {
			return fmt.Sprintf("no heartbeat for %s (timeout %s)", dur(p.now.Sub(last)), dur(p.lim.heartbeatTimeout)), true
		}
	}
	return "", false
}

// lastSignOfLife is the latest of heartbeat, pod start and attempt creation.
func (p *pass) lastSignOfLife() time.Time {
	last := p.in.Pod.StartTime
	if p.hasF {
		if p.f.Created.After(last) {
			last = p.f.Created
		}
		if hb := p.f.Status.HeartbeatTime; hb != nil && hb.After(last) {
			last = hb.Time
		}
	}
	return last
}

// unsafeInFlight names the first in-flight side effect of the current
// attempt that has no idempotency key, or returns "".
func (p *pass) unsafeInFlight() string {
	for _, e := range p.f.Status.InFlight {
		if e.IdempotencyKey == "" {
			return fmt.Sprintf("%s call %s in flight without an idempotency key", e.Tool, e.ID)
		}
	}
	return ""
}

// settlement is what was durably delivered, from the latest attempt that
// reported publication facts: its settled value, else Partial if blocks
// were committed, else None.
func (p *pass) settlement() v1alpha1.Settlement {
	pub, ok := p.latestPublication()
	switch {
	case !ok:
		return v1alpha1.SettlementNone
	case pub.Settled && pub.Settlement != "":
		return pub.Settlement
	case pub.BlocksCommitted > 0:
		return v1alpha1.SettlementPartial
	}
	return v1alpha1.SettlementNone
}

func (p *pass) latestPublication() (v1alpha1.Publication, bool) {
	var (
		best v1alpha1.Publication
		n    int32
	)
	for _, a := range p.in.Attempts {
		if a.Attempt > n && a.Status.Publication != (v1alpha1.Publication{}) {
			best, n = a.Status.Publication, a.Attempt
		}
	}
	return best, n > 0
}

// ---- Budget. ----

// grant turns absolute counters into a Grant; tokens only when budgeted.
func (p *pass) grant(u v1alpha1.Usage, finalizeOnly bool) v1alpha1.Grant {
	g := v1alpha1.Grant{ModelRequests: u.ModelRequests, ToolCalls: u.ToolCalls, FinalizeOnly: finalizeOnly}
	if p.lim.tokens {
		t := u.Tokens
		g.Tokens = &t
	}
	return g
}

// runningGrant is the working allowance of the current attempt, in its own
// absolute counters: the working budget minus what the other attempts used,
// never negative and never more than its usage plus what is left.
func (p *pass) runningGrant() v1alpha1.Grant {
	others := sub(p.used, p.own)
	g := nonNeg(sub(p.lim.working(), others))
	g = minU(g, add(p.own, nonNeg(p.remaining())))
	return p.grant(g, false)
}

// keptFinalizeGrant is the grant persisted when Finalizing began, lowered
// only if usage elsewhere left less than it promised.
func (p *pass) keptFinalizeGrant() v1alpha1.Grant {
	g := minU(p.st.Budget.Granted, add(p.own, nonNeg(p.remaining())))
	return p.grant(nonNeg(g), true)
}

// reserveIntact reports whether the whole output reserve is still
// available, with at least one model request in it.
func (p *pass) reserveIntact() bool {
	r, left := p.lim.reserve, p.remaining()
	return r.ModelRequests > 0 && r.ModelRequests <= left.ModelRequests && r.ToolCalls <= left.ToolCalls &&
		(!p.lim.tokens || r.Tokens <= left.Tokens)
}

// ---- Finish: the rest of the status, events and requeue. ----

func (p *pass) finish() Decision {
	if p.keep {
		return Decision{Status: *p.in.Status.DeepCopy()}
	}
	st := &p.st
	st.ObservedGeneration = p.in.Generation
	st.Ledger = p.ledger
	st.Steps = p.steps
	st.Budget.Used = p.used
	st.Budget.Remaining = nonNeg(p.remaining())
	if !p.lim.tokens {
		st.Budget.Remaining.Tokens = 0
	}
	st.Budget.Granted = v1alpha1.Usage{ModelRequests: p.d.Grant.ModelRequests, ToolCalls: p.d.Grant.ToolCalls}
	if p.d.Grant.Tokens != nil {
		st.Budget.Granted.Tokens = *p.d.Grant.Tokens
	}
	st.Gates = p.gateStatus()
	if st.Phase != v1alpha1.PhaseQueued {
		st.QueuePosition = 0
	}
	st.Message = truncate(st.Message, maxMessage)
	p.conditions()
	for _, a := range p.in.Attempts {
		if a.Attempt < st.Attempt && !slices.Contains(p.d.Superseded, a.Attempt) {
			p.d.Superseded = append(p.d.Superseded, a.Attempt)
		}
	}
	slices.Sort(p.d.Superseded)
	p.d.Events = p.events()
	p.d.RequeueAfter = p.requeueAfter()
	p.d.Status = *st
	return p.d
}

// gateStatus shows how close the run is to each gate.
func (p *pass) gateStatus() v1alpha1.GateStatus {
	g := v1alpha1.GateStatus{
		Steps:                p.steps,
		StepsWithoutProgress: p.stepsWithoutProgress(),
		MaxSameCall:          p.maxSameCall().Count,
	}
	for _, a := range p.in.Attempts {
		for _, f := range a.Status.Faults {
			if !f.Escalated {
				g.LocalFaults += max(f.Count, 1)
			}
		}
	}
	for _, d := range p.d.Directives {
		if !slices.Contains(g.Directives, d.Type) {
			g.Directives = append(g.Directives, d.Type)
		}
	}
	return g
}

// conditions sets Ready, Succeeded, Finalizing and Recovering from the
// decided state.
func (p *pass) conditions() {
	st := &p.st
	T, F := metav1.ConditionTrue, metav1.ConditionFalse
	switch {
	case p.stopping:
		p.setCondition(v1alpha1.ConditionReady, F, CondReasonStopping, p.stopWhy)
	case st.Phase == v1alpha1.PhaseTerminated && st.Reason == v1alpha1.ReasonCompleted:
		p.setCondition(v1alpha1.ConditionReady, T, string(st.Reason), st.Message)
	case st.Phase == v1alpha1.PhaseTerminated:
		p.setCondition(v1alpha1.ConditionReady, F, string(st.Reason), st.Message)
		// kstatus (Flux, Argo CD) reads Stalled=True as "failed, and
		// will not progress": without it a run that ended short would show
		// as in progress forever.
		p.setCondition(v1alpha1.ConditionStalled, T, string(st.Reason), st.Message)
	case st.Phase == v1alpha1.PhaseRunning:
		p.setCondition(v1alpha1.ConditionReady, T, CondReasonRunning, st.Message)
	default:
		p.setCondition(v1alpha1.ConditionReady, F, string(st.Phase), st.Message)
	}
	if st.Phase == v1alpha1.PhaseTerminated {
		ok := st.Reason == v1alpha1.ReasonCompleted && st.Settlement == v1alpha1.SettlementComplete
		s := F
		if ok {
			s = T
		}
		p.setCondition(v1alpha1.ConditionSucceeded, s, string(st.Reason), st.Message)
	}
	leave := func(t string) {
		c := p.condition(t)
		if c == nil || c.Status != T {
			return
		}
		reason, msg := string(st.Phase), st.Message
		switch {
		case p.stopping:
			reason, msg = CondReasonStopping, p.stopWhy
		case st.Phase == v1alpha1.PhaseTerminated:
			reason = CondReasonTerminated
		case t == v1alpha1.ConditionRecovering && st.Phase == v1alpha1.PhaseRunning:
			reason, msg = CondReasonRecovered, fmt.Sprintf("attempt %d is running", p.cur)
		}
		p.setCondition(t, F, reason, msg)
	}
	if st.Phase != v1alpha1.PhaseFinalizing || p.stopping {
		leave(v1alpha1.ConditionFinalizing)
	}
	if st.Phase != v1alpha1.PhaseRecovering || p.stopping {
		leave(v1alpha1.ConditionRecovering)
	}
}

// events reports the transition of this pass, if any.
func (p *pass) events() []Event {
	const normal, warning = "Normal", "Warning"
	st := &p.st
	var evs []Event
	wasStopping := false
	if c := meta.FindStatusCondition(p.in.Status.Conditions, v1alpha1.ConditionReady); c != nil {
		wasStopping = c.Reason == CondReasonStopping
	}
	switch {
	case st.Phase == v1alpha1.PhaseTerminated:
		typ := warning
		if st.Reason == v1alpha1.ReasonCompleted {
			typ = normal
		}
		evs = append(evs, Event{typ, "Terminated", fmt.Sprintf("%s (settlement %s): %s", st.Reason, st.Settlement, st.Message)})
	case p.stopping && (!wasStopping || st.Reason != p.in.Status.Reason):
		typ := warning
		if st.Reason == v1alpha1.ReasonCompleted {
			typ = normal
		}
		evs = append(evs, Event{typ, CondReasonStopping, fmt.Sprintf("%s: %s", st.Reason, st.Message)})
	case st.Phase != p.phase0 || st.Reason != p.in.Status.Reason:
		switch st.Phase {
		case v1alpha1.PhaseQueued:
			evs = append(evs, Event{normal, "Queued", st.Message})
		case v1alpha1.PhaseRunning:
			evs = append(evs, Event{normal, "Running", st.Message})
		case v1alpha1.PhaseRecovering:
			evs = append(evs, Event{warning, "Recovering", st.Message})
		case v1alpha1.PhaseFinalizing:
			evs = append(evs, Event{normal, "Finalizing", fmt.Sprintf("%s: %s", st.Reason, st.Message)})
		}
	case p.newFailure:
		evs = append(evs, Event{warning, "Recovering", st.Message})
	}
	if p.started && !p.stopping && st.Phase != v1alpha1.PhaseTerminated {
		evs = append(evs, Event{normal, "AttemptStarted", fmt.Sprintf("started attempt %d", p.cur)})
	}
	return evs
}

// requeueAfter is how long until the earliest future time at which the
// decision could change without any new fact: stop poll, backoff expiry,
// queue timeout, directive thresholds of the deadline, deadline, hard
// deadline, heartbeat expiry.
func (p *pass) requeueAfter() time.Duration {
	st := &p.st
	if st.Phase == v1alpha1.PhaseTerminated {
		return 0
	}
	at := slices.Clone(p.requeue)
	if st.Phase == v1alpha1.PhaseQueued && st.QueuedTime != nil && p.in.Queue.Timeout > 0 {
		at = append(at, st.QueuedTime.Add(p.in.Queue.Timeout))
	}
	if !p.stopping && st.Phase.IsActive() && st.StartTime != nil {
		start := st.StartTime.Time
		at = append(at, start.Add(p.lim.deadline+p.lim.grace))
		if st.Phase != v1alpha1.PhaseFinalizing {
			at = append(at, start.Add(p.lim.deadline))
			if lim := int64(p.lim.deadline); lim > 1 {
				at = append(at,
					start.Add(time.Duration(threshold(p.lim.degradePct, lim))),
					start.Add(time.Duration(threshold(p.lim.compressPct, lim))))
			}
		}
	}
	if t, ok := p.startDeadline(); ok && !p.stopping && p.d.Attempt == p.cur {
		at = append(at, t)
	}
	if !p.stopping && p.d.Attempt == p.cur && p.podValid && p.in.Pod.Phase == PodRunning && p.lim.heartbeatTimeout > 0 {
		if last := p.lastSignOfLife(); !last.IsZero() {
			at = append(at, last.Add(p.lim.heartbeatTimeout))
		}
	}
	var best time.Duration
	for _, t := range at {
		if d := t.Sub(p.now); d > 0 && (best == 0 || d < best) {
			best = d
		}
	}
	return best
}
