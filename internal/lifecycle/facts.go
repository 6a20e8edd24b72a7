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

// facts is what one pass decides from: the input with everything derived
// from it folded in once. The rules and enact only read it; nothing changes
// it after newFacts (started returns another value).
type facts struct {
	in  Input
	lim limits
	now time.Time // in.Now, in UTC

	// phase0 is the input phase ("" counts as Pending).
	phase0 v1alpha1.Phase
	// phase is the phase the rules decide from: phase0, or Running for the
	// session holder once the Queue rung has let it start (see started).
	phase v1alpha1.Phase
	// startTime is status.startTime, or now for an active run without one.
	startTime *metav1.Time
	// leftQueue: the run starts in this pass (it held its session while
	// Pending or Queued).
	leftQueue bool

	// The ledger of all attempts.
	ledger    []v1alpha1.AttemptLedger // merged ledger, sorted by attempt
	used      v1alpha1.Usage           // sum over the ledger, with what children hold and used
	held      v1alpha1.Usage           // of used: the budgets of unfinished children
	steps     int64                    // sum over the ledger
	backwards map[int32]string         // attempts whose counters went back, with the story

	// cur is the current attempt.
	cur attempt
}

// attempt is one attempt as the decision sees it.
type attempt struct {
	n      int32
	facts  AttemptFacts   // zero if its RunAttempt does not exist
	exists bool           // its RunAttempt exists
	own    v1alpha1.Usage // its ledger usage
	// observed: Input.Pod is its pod. False for an attempt this pass starts,
	// of whose pod nothing is known yet.
	observed bool
}

// newFacts folds the input: the ledger, the current attempt, the start time.
func newFacts(in Input) *facts {
	f := &facts{in: in, lim: limitsFor(in.Spec), now: in.Now.UTC()}
	f.phase0 = in.Status.Phase
	if f.phase0 == "" {
		f.phase0 = v1alpha1.PhasePending
	}
	f.phase = f.phase0
	f.foldLedger()
	cur := in.Status.Attempt
	for _, a := range in.Attempts {
		cur = max(cur, a.Attempt)
	}
	if cur == 0 && f.phase.IsActive() {
		cur = 1
	}
	f.cur = f.attempt(cur, true)
	f.startTime = in.Status.StartTime
	if f.phase.IsActive() && f.startTime == nil {
		f.startTime = f.stamp()
	}
	return f
}

// started is the facts of a run that holds its session and starts in this
// pass: Running, with a start time and (at least) attempt 1.
func (f *facts) started() *facts {
	g := *f
	g.phase, g.leftQueue = v1alpha1.PhaseRunning, true
	if g.startTime == nil {
		g.startTime = f.stamp()
	}
	g.cur = f.attempt(max(f.cur.n, 1), true)
	return &g
}

// startIfHolder hands the rungs below Queue the started run when it holds
// its session; a run that waits never gets past the Queue rung.
func startIfHolder(f *facts) *facts {
	if f.phase.IsWaiting() && f.in.Queue.Holder {
		return f.started()
	}
	return f
}

// foldLedger merges the reported usage into the stored ledger. A counter
// below its stored value is remembered as a violation; the ledger keeps the
// higher value, so usage is never undercounted.
func (f *facts) foldLedger() {
	stored := map[int32]v1alpha1.AttemptLedger{}
	for _, e := range f.in.Status.Ledger {
		stored[e.Attempt] = e
	}
	merged := maps.Clone(stored)
	f.backwards = map[int32]string{}
	for _, a := range f.in.Attempts {
		if a.Attempt < 1 {
			continue
		}
		rep := a.Status.Usage
		if prev, ok := stored[a.Attempt]; ok {
			if s := wentBack(a.Attempt, prev, rep, a.Status.Steps); s != "" {
				f.backwards[a.Attempt] = s
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
		f.ledger = append(f.ledger, e)
		f.used = add(f.used, e.Used)
		f.steps += e.Steps
	}
	// What an attempt carved for children is spent by the run (not in the
	// attempt's monotonic ledger: it shrinks when a child ends).
	for _, a := range f.in.Attempts {
		c := f.children(a)
		f.used = add(f.used, c.Spend())
		f.held = add(f.held, c.Carved)
	}
	slices.SortFunc(f.ledger, func(a, b v1alpha1.AttemptLedger) int { return int(a.Attempt) - int(b.Attempt) })
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
	case rep.Cost < prev.Used.Cost:
		return fmt.Sprintf("attempt %d reported a cost of %s after %s; monotonic counters may not go back", n, rep.Cost, prev.Used.Cost)
	case steps < prev.Steps:
		return back("steps", prev.Steps, steps)
	}
	return ""
}

// attempt is attempt n with its facts and ledger usage; observed says
// whether Input.Pod is its pod.
func (f *facts) attempt(n int32, observed bool) attempt {
	a := attempt{n: n, facts: AttemptFacts{Attempt: n}, observed: observed}
	for _, x := range f.in.Attempts {
		if x.Attempt == n {
			a.facts, a.exists = x, true
			break
		}
	}
	for _, e := range f.ledger {
		if e.Attempt == n {
			a.own = e.Used
		}
	}
	// Its children's spend is its own: its grant is in the counters of its
	// usage plus its carves (LessChildren).
	a.own = add(a.own, f.childSpend(a.facts))
	return a
}

// next is the attempt after the current one, started in this pass.
func (f *facts) next() attempt { return f.attempt(f.cur.n+1, false) }

// pod is attempt a's pod as observed.
func (f *facts) pod(a attempt) PodObservation {
	if !a.observed {
		return PodObservation{Phase: PodAbsent}
	}
	return f.in.Pod
}

// podStopped reports whether the current attempt's pod runs nothing any more.
func (f *facts) podStopped() bool { return f.pod(f.cur).Phase.stopped() }

// stampTime is now as persisted: UTC, whole seconds (what a metav1.Time
// keeps), so a status read back equals the status written.
func (f *facts) stampTime() time.Time { return f.now.Truncate(time.Second) }

func (f *facts) stamp() *metav1.Time {
	t := metav1.NewTime(f.stampTime())
	return &t
}

func (f *facts) remaining() v1alpha1.Usage { return sub(f.lim.budget, f.used) }

// condition is a condition of the input status.
func (f *facts) condition(t string) *metav1.Condition {
	return meta.FindStatusCondition(f.in.Status.Conditions, t)
}

// ---- Facts of the current attempt. ----

// attemptFailure says whether the current attempt failed and why (why), or
// whether an earlier pass saw it fail and is replacing it (latched). story
// is the sentence the run tells about the failure.
func (f *facts) attemptFailure() (why, story string, latched, failed bool) {
	why, failed = f.failure()
	rc := f.condition(v1alpha1.ConditionRecovering)
	latched = f.phase == v1alpha1.PhaseRecovering && rc != nil && rc.Status == metav1.ConditionTrue &&
		rc.Reason == v1alpha1.ConditionReasonAttemptFailed && f.cur.n == f.in.Status.Attempt
	switch {
	case latched:
		return why, rc.Message, true, true
	case failed:
		return why, fmt.Sprintf("attempt %d failed: %s", f.cur.n, why), false, true
	}
	return "", "", false, false
}

// failure says whether and why the current attempt failed: its pod failed,
// vanished, or exited 0 while being deleted before its work was done; it
// escalated a fault; its pod did not start in time; or it stopped sending
// heartbeats. An attempt that proposed finish and settled its publication is
// done, whatever its pod does next; a pod that exits 0 of its own accord is
// not a failure but the agent's implicit finish (see exitedZero).
func (f *facts) failure() (string, bool) {
	pod, s := f.in.Pod, f.cur.facts.Status
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
		// Exit 0 under a deletion (SIGTERM handled gracefully) is not the
		// agent's decision that its work is done.
		switch {
		case !pod.Terminating:
		case f.phase == v1alpha1.PhaseFinalizing && !s.Publication.Settled:
			return "its pod was deleted and exited before its publication settled", true
		case f.phase != v1alpha1.PhaseFinalizing && !s.FinishProposed:
			return "its pod was deleted and exited without proposing finish", true
		}
	}
	for _, x := range s.Faults {
		if x.Escalated {
			return "it escalated " + faultStory(x), true
		}
	}
	if at, ok := f.startDeadline(f.cur); ok && !f.now.Before(at) {
		return fmt.Sprintf("its pod did not start within %s%s", dur(f.lim.startTimeout), detail(pod.Message)), true
	}
	if pod.Phase == PodRunning && f.lim.heartbeatTimeout > 0 {
		if last := f.lastSignOfLife(); !last.IsZero() && f.now.Sub(last) >= f.lim.heartbeatTimeout {
			return fmt.Sprintf("no heartbeat for %s (timeout %s)", dur(f.now.Sub(last)), dur(f.lim.heartbeatTimeout)), true
		}
	}
	return "", false
}

// faultStory tells a fault: "a Provider fault (InvalidAPIKey: 401 …)".
func faultStory(x v1alpha1.Fault) string {
	return fmt.Sprintf("a %s fault (%s%s)", x.Scope, x.Kind, detail(x.LastMessage))
}

// unfixableFault is the first fault the current attempt escalated that is
// not retryable: a bad key, a bad configuration — what a new attempt would
// meet again. ok is false when every escalated fault is retryable (a new
// attempt may fix it) or none was escalated.
func (f *facts) unfixableFault() (v1alpha1.Fault, bool) {
	for _, x := range f.cur.facts.Status.Faults {
		if x.Escalated && !x.Retryable {
			return x, true
		}
	}
	return v1alpha1.Fault{}, false
}

// exitedZero reports whether the current attempt's pod exited 0 of its own
// accord (Succeeded, not being deleted). While the run is Running or
// Recovering that is the agent process's implicit finish proposal; in
// Finalizing it ends the finalization. An agent that only uses the
// gateway's two doors (models, MCP tools) never calls the agent API's
// finish and settle: its exit is how it says it is done.
func (f *facts) exitedZero() bool {
	return f.cur.observed && f.in.Pod.Phase == PodSucceeded && !f.in.Pod.Terminating
}

// settlesFromFacts reports whether the run's publication is settled by the
// operator, from what the gateway recorded: the pod exited 0 and nobody
// settled it.
func (f *facts) settlesFromFacts() bool {
	return f.exitedZero() && !f.cur.facts.Status.Publication.Settled
}

// factsDue says until when the decision waits for the current attempt's
// last facts: its pod stopped on its own at FinishedAt, and the gateway may
// still hold coalesced facts (usage, steps) it writes within its flush
// interval. The facts are final once the attempt proposed finish and settled
// (both durable before the agent heard back), or once its status shows a
// write after the pod stopped — later in whole seconds, the resolution of
// both times — and in any case at FinishedAt + FactGrace. ok is false when
// there is nothing to wait for.
func (f *facts) factsDue() (time.Time, bool) {
	pod, a := f.in.Pod, f.cur
	if f.in.FactGrace <= 0 || !a.observed || !a.exists || pod.FinishedAt.IsZero() ||
		pod.Phase != PodSucceeded && pod.Phase != PodFailed {
		return time.Time{}, false
	}
	if s := a.facts.Status; s.FinishProposed && s.Publication.Settled {
		return time.Time{}, false
	}
	stopped := pod.FinishedAt.Truncate(time.Second)
	if a.facts.FactsWritten.Truncate(time.Second).After(stopped) {
		return time.Time{}, false
	}
	until := stopped.Add(f.in.FactGrace)
	return until, f.now.Before(until)
}

// startDeadline is when attempt a's pod must be running: its RunAttempt's
// creation plus spec.recovery.startTimeout, while the pod has not started
// (not created yet, or Pending). ok is false when the check does not apply.
func (f *facts) startDeadline(a attempt) (time.Time, bool) {
	if !a.observed || !a.exists || f.lim.startTimeout <= 0 || a.facts.Created.IsZero() {
		return time.Time{}, false
	}
	if ph := f.in.Pod.Phase; ph != PodPending && (ph != PodAbsent || f.in.Pod.Created) {
		return time.Time{}, false
	}
	return a.facts.Created.Add(f.lim.startTimeout), true
}

// lastSignOfLife is the latest of heartbeat (see heartbeat), pod start and
// creation of the current attempt, and of the expiry of each call it has waiting for a
// decision (its request time if it has no expiry). A call that waits for a
// person is a sign of life until it expires: an agent blocked in a tool call
// for the approvalTimeout (15m by default) may send no heartbeat of its own,
// and waiting on a person must not fail the attempt. Once the wait is over
// the heartbeat timeout counts from the expiry again, so an attempt whose
// gateway stopped writing is still found dead.
func (f *facts) lastSignOfLife() time.Time {
	last := f.in.Pod.StartTime
	if a := f.cur; a.exists {
		if a.facts.Created.After(last) {
			last = a.facts.Created
		}
		if hb := f.heartbeat(a.facts); hb.After(last) {
			last = hb
		}
		for _, r := range a.facts.Status.AwaitingApproval {
			t := r.ExpiresAt
			if t == nil {
				t = r.RequestedAt
			}
			if t != nil && t.After(last) {
				last = t.Time
			}
		}
	}
	return last
}

// heartbeat is the latest time attempt a is known to have been alive by
// its heartbeat. An attempt the gateway governs (status.liveness) has no
// periodic heartbeat write: the gateway vouches for it through its own
// Lease, so its heartbeat is
//   - silentSince, once the governing gateway wrote that it stopped seeing
//     the attempt;
//   - else the Lease's renewTime while the process that took the attempt
//     holds it, fresh or stale: a live gateway renews every few seconds, a
//     dead one's last renewal is when the timeout starts;
//   - else, when another process holds the Lease (the gateway restarted),
//     its acquireTime: the process that took the attempt was gone by then;
//   - else (the Lease is gone) the last status write.
//
// and never before liveness.since. A time after now counts as now (clock
// skew between the gateway's node and the operator's must not keep an
// attempt alive). status.heartbeatTime counts too: it is a time the attempt
// was seen (written by older gateways on their own, and by this one on the
// writes it makes for other facts).
func (f *facts) heartbeat(a AttemptFacts) time.Time {
	if t := SignOfLife(a); t.Before(f.now) {
		return t
	}
	return f.now
}

// SignOfLife is an attempt's latest heartbeat as the heartbeat timeout counts
// it: heartbeatTime, the liveness fact's since, and silentSince if the
// gateway saw the attempt go silent, else the Lease's renewal (its takeover
// when another process holds it; the attempt's last status write when the
// Lease is gone).
func SignOfLife(a AttemptFacts) time.Time {
	s := a.Status
	var t time.Time
	if s.HeartbeatTime != nil {
		t = s.HeartbeatTime.Time
	}
	if lv := s.Liveness; lv != nil {
		t = later(t, lv.Since.Time)
		l := a.Lease
		switch {
		case lv.SilentSince != nil:
			t = later(t, lv.SilentSince.Time)
		case !l.Found:
			t = later(t, a.FactsWritten)
		case l.Holder != lv.Holder:
			t = later(t, l.AcquireTime)
		default:
			t = later(t, l.RenewTime)
		}
	}
	return t
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// unsafeInFlight names the first in-flight side effect of the current
// attempt that has no idempotency key, or returns "".
func (f *facts) unsafeInFlight() string {
	for _, e := range f.cur.facts.Status.InFlight {
		if e.IdempotencyKey == "" {
			return fmt.Sprintf("%s call %s in flight without an idempotency key", e.Tool, e.ID)
		}
	}
	return ""
}

// recoveringSince is when the current attempt's failure was seen: now if
// this pass saw it, else the Recovering condition's LastTransitionTime.
func (f *facts) recoveringSince(newFailure bool) time.Time {
	if rc := f.condition(v1alpha1.ConditionRecovering); rc != nil && !newFailure {
		return rc.LastTransitionTime.Time
	}
	return f.stampTime()
}

// replaceable reports whether the failed current attempt can be replaced
// now: its pod has stopped and the backoff has passed.
func (f *facts) replaceable(newFailure bool) bool {
	return f.podStopped() && !f.now.Before(f.recoveringSince(newFailure).Add(f.lim.backoff))
}

// exitDeadline is until when a settled finalization waits for the current
// pod to exit on its own: finalizingTime (now, for a run entering
// Finalizing in this pass) plus finalizationGrace. ok is false once there is
// nothing to wait for: the pod has stopped, or the grace is over.
func (f *facts) exitDeadline(entering bool) (time.Time, bool) {
	since := f.in.Status.FinalizingTime
	if since == nil && entering {
		since = f.stamp()
	}
	if f.podStopped() || since == nil {
		return time.Time{}, false
	}
	until := since.Add(f.lim.grace)
	return until, f.now.Before(until)
}

// finalizingCause is why the run is finalizing, from status.finalization.
func (f *facts) finalizingCause() string {
	if fin := f.in.Status.Finalization; fin != nil {
		return fin.Cause
	}
	return f.untypedFinalization()
}

// untypedFinalization tells the finalization of a status written before
// status.finalization existed: its Finalizing condition's message (else the
// status message) stands for the cause as a whole.
func (f *facts) untypedFinalization() string {
	if c := f.condition(v1alpha1.ConditionFinalizing); c != nil && c.Message != "" {
		return c.Message
	}
	return f.in.Status.Message
}

// settlement is what was durably delivered, from the latest attempt that
// reported publication facts: its settled value, else Partial if blocks
// were committed, else None.
func (f *facts) settlement() v1alpha1.Settlement {
	pub, ok := f.latestPublication()
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

// settlementFromFacts is what the gateway's report holds, judged the way
// the gateway's settle does: Complete if every planned section is
// published, Partial if some are, None if none. The latest publication facts
// stand for the report (the gateway counts the run's report, across
// attempts).
func (f *facts) settlementFromFacts() v1alpha1.Settlement {
	pub, _ := f.latestPublication()
	switch {
	case pub.BlocksCommitted > 0 && pub.BlocksCommitted == pub.BlocksPlanned:
		return v1alpha1.SettlementComplete
	case pub.BlocksCommitted > 0:
		return v1alpha1.SettlementPartial
	}
	return v1alpha1.SettlementNone
}

func (f *facts) latestPublication() (v1alpha1.Publication, bool) {
	var (
		best v1alpha1.Publication
		n    int32
	)
	for _, a := range f.in.Attempts {
		if a.Attempt > n && a.Status.Publication != (v1alpha1.Publication{}) {
			best, n = a.Status.Publication, a.Attempt
		}
	}
	return best, n > 0
}
