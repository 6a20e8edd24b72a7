package lifecycle

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// script feeds the fuzzer's bytes to the simulation; past its end it reads zeros.
type script struct {
	b []byte
	i int
}

func (s *script) next() byte {
	if s.i >= len(s.b) {
		return 0
	}
	v := s.b[s.i]
	s.i++
	return v
}

func (s *script) pick(n int) int { return int(s.next()) % n }

// fuzzSpec builds a valid spec (as the API server would admit it) from cfg.
func fuzzSpec(cfg uint64) v1alpha1.ResearchRunSpec {
	c := &script{}
	for i := range 16 { // one choice per nibble
		c.b = append(c.b, byte(cfg>>(4*i))&0xf)
	}
	spec := testSpec()
	b := &spec.Budget
	b.ModelRequests = 1 + int64(c.pick(16))*3
	b.ToolCalls = int64(c.pick(16)) * 2
	b.OutputReserve = v1alpha1.OutputReserve{
		ModelRequests: min(b.ModelRequests, int64(c.pick(4))),
		ToolCalls:     min(b.ToolCalls, int64(c.pick(4))),
	}
	if c.pick(2) == 1 {
		b.Tokens = new(int64(1 + c.pick(16)*100))
		b.OutputReserve.Tokens = min(*b.Tokens, int64(c.pick(4)*50))
	}
	b.Deadline = &metav1.Duration{Duration: []time.Duration{time.Minute, 5 * time.Minute, 30 * time.Minute, 0}[c.pick(4)]}
	b.FinalizationGrace = &metav1.Duration{Duration: []time.Duration{0, 30 * time.Second, 2 * time.Minute, time.Hour}[c.pick(4)]}
	r := &spec.Recovery
	r.MaxAttempts = int32(1 + c.pick(4))
	r.Backoff = &metav1.Duration{Duration: []time.Duration{0, time.Second, 5 * time.Second, time.Minute}[c.pick(4)]}
	r.HeartbeatTimeout = []*metav1.Duration{nil, {Duration: 0}, {Duration: 10 * time.Second}, {Duration: time.Hour}}[c.pick(4)]
	g := &spec.Gates
	g.MaxSteps = int32(1 + c.pick(16)*2)
	g.SameCallLimit = int32(1 + c.pick(4))
	g.NoProgressLimit = int32(1 + c.pick(8))
	g.DegradeAtPercent = int32(1 + c.pick(16)*6)
	g.CompressAtPercent = min(100, g.DegradeAtPercent+int32(c.pick(16)*6))
	return spec
}

// FuzzDecide drives a run through many passes with fuzzed facts, applying
// each decision as the reconciler would, and checks the invariants the
// design promises on every pass.
func FuzzDecide(f *testing.F) {
	f.Add(uint64(0), []byte{})
	f.Add(uint64(0x123456789abcdef0), []byte("holder runs, spends, finishes, settles"))
	f.Add(uint64(0xfedcba9876543210), []byte{0, 0, 0, 0, 0, 1, 1, 0, 0, 2, 2, 9, 0, 0, 0, 3, 10, 0, 0, 4, 4, 11, 0, 0})
	f.Add(uint64(0x0f0f0f0f0f0f0f0f), []byte{5, 0, 1, 0, 0, 6, 1, 1, 0, 0, 7, 2, 12, 0, 0, 7, 6, 8, 16, 0, 6, 4, 0, 0, 0})
	f.Add(uint64(0xffffffffffffffff), []byte{0, 0, 0, 0, 0, 1, 1, 3, 0, 0, 2, 2, 0, 0, 0, 6, 6, 6, 6, 6, 6, 6, 6, 6})
	f.Fuzz(func(t *testing.T, cfg uint64, b []byte) {
		sc := &script{b: b}
		s := newSim(fuzzSpec(cfg), QueueView{Position: 1, Limit: 1, Timeout: []time.Duration{0, time.Minute}[cfg&1]})
		s.factGrace = []time.Duration{0, 3 * time.Second}[cfg>>1&1]
		everFinalizing := false
		for pass := range 16 {
			perturb(s, sc)
			in := s.input()
			before := *in.Status.DeepCopy()
			d := Decide(in)
			if again := Decide(in); !cmp.Equal(d, again) {
				t.Fatalf("pass %d: Decide is not deterministic:\n%s", pass, cmp.Diff(d, again))
			}
			if !cmp.Equal(before, in.Status) {
				t.Fatalf("pass %d: Decide modified its input", pass)
			}
			checkInvariants(t, pass, in, d, everFinalizing)
			everFinalizing = everFinalizing || d.Status.Phase == v1alpha1.PhaseFinalizing
			s.apply(d)
		}
		// Liveness: once the world cooperates (the session is free, pods
		// start, deleted pods go away, heartbeats flow) and time passes,
		// every run ends. Running pods never exit on their own here, so a
		// settled run waits out its finalizationGrace (at most 1h in
		// fuzzSpec) before its pod is deleted: the 40 passes of 5m each
		// let time pass well beyond it, and beyond the hard deadline.
		for pass := 16; s.status.Phase != v1alpha1.PhaseTerminated; pass++ {
			if pass == 16+40 {
				t.Fatalf("not Terminated after 40 cooperative passes: %s/%s: %s",
					s.status.Phase, s.status.Reason, s.status.Message)
			}
			s.now = s.now.Add(5 * time.Minute)
			s.queue = QueueView{Holder: true}
			if p := s.pod(); p != nil {
				switch {
				case p.Terminating:
					p.Phase, p.Terminating = PodAbsent, false
				case p.Phase == PodPending:
					p.Phase, p.StartTime = PodRunning, s.now
				}
				if a := s.attempt(); a != nil && p.Phase == PodRunning {
					a.Status.HeartbeatTime = &metav1.Time{Time: s.now}
				}
			}
			in := s.input()
			d := Decide(in)
			checkInvariants(t, pass, in, d, everFinalizing)
			everFinalizing = everFinalizing || d.Status.Phase == v1alpha1.PhaseFinalizing
			s.apply(d)
		}
	})
}

// perturb changes the world between passes, as the fuzzer's bytes say:
// time passes, the current pod moves on, the agent reports facts, the user
// asks to stop, the session queue moves.
func perturb(s *sim, sc *script) {
	s.now = s.now.Add([]time.Duration{0, time.Second, 3 * time.Second, 6 * time.Second, 30 * time.Second,
		70 * time.Second, 10 * time.Minute, 25 * time.Minute}[sc.pick(8)])
	perturbPod(s, sc.next())
	if a := s.attempt(); a != nil {
		op := sc.next()
		perturbFacts(&a.Status, a.Grant, op)
		if op&0x20 != 0 {
			a.FactsWritten = s.now // the gateway wrote the facts
		}
	}
	perturbUser(s, sc.next(), sc.next())
}

// perturbPod moves the current attempt's pod on; heartbeats flow unless the
// high bit of op is set.
func perturbPod(s *sim, op byte) {
	p := s.pod()
	if p == nil {
		return
	}
	switch op % 8 {
	case 1:
		if p.Phase == PodPending {
			p.Phase, p.StartTime = PodRunning, s.now
		}
	case 2:
		if p.Phase != PodAbsent && !p.Phase.stopped() {
			p.Phase, p.Message, p.FinishedAt = PodFailed, evicted, s.now
		}
	case 3:
		if p.Phase != PodAbsent && !p.Phase.stopped() {
			p.Phase, p.FinishedAt = PodSucceeded, s.now
		}
	case 6:
		if p.Phase == PodRunning {
			p.Phase, p.Terminating = PodSucceeded, op&0x40 != 0 // exit 0, perhaps under a deletion
		}
	case 4:
		p.Phase, p.Terminating = PodAbsent, false
	case 5:
		if p.Terminating {
			p.Phase, p.Terminating = PodAbsent, false
		}
	}
	if a := s.attempt(); a != nil && p.Phase == PodRunning && op&0x80 == 0 {
		a.Status.HeartbeatTime = &metav1.Time{Time: s.now}
	}
}

// perturbFacts has the agent report facts: usage (within its grant, or
// over it when both high bits of op are set), steps, calls, finish,
// publication, in-flight effects, faults, a counter going back, advice.
func perturbFacts(st *v1alpha1.RunAttemptStatus, g v1alpha1.Grant, op byte) {
	k := int64(op>>4) % 4
	overspend := op&0xc0 == 0xc0
	spend := func(used *int64, granted int64) {
		if overspend {
			*used += k + 1
		} else {
			*used = max(*used, min(*used+k, granted))
		}
	}
	switch op % 16 {
	case 0, 1, 2:
		spend(&st.Usage.ModelRequests, g.ModelRequests)
		spend(&st.Usage.ToolCalls, g.ToolCalls)
		if g.Tokens != nil {
			spend(&st.Usage.Tokens, *g.Tokens)
		}
		st.Steps++
		if op&1 == 0 {
			st.LastProgressStep = st.Steps
		}
	case 3:
		st.Steps += 3
	case 4:
		st.Calls = []v1alpha1.CallCount{{Tool: toolGet, Fingerprint: "f", Count: int64(len(st.Calls)) + k}}
	case 5:
		st.FinishProposed = true
	case 6:
		st.Publication.BlocksPlanned = 5
		st.Publication.BlocksCommitted = min(5, st.Publication.BlocksCommitted+1)
	case 7:
		st.Publication.Settled = true
		st.Publication.Settlement = []v1alpha1.Settlement{v1alpha1.SettlementComplete, v1alpha1.SettlementPartial,
			v1alpha1.SettlementNone}[k%3]
	case 8:
		key := ""
		if op&0x80 != 0 {
			key = "k"
		}
		st.InFlight = []v1alpha1.InFlightEffect{{ID: "c", Tool: toolPost, Effect: v1alpha1.EffectExternal, IdempotencyKey: key}}
	case 9:
		st.InFlight = nil
	case 10:
		st.Faults = append(st.Faults, v1alpha1.Fault{Scope: v1alpha1.FaultScopeTool, Kind: "Timeout", Count: 1,
			Retryable: op&0x40 != 0, Escalated: op&0x80 != 0})
	case 11:
		if op&0x80 != 0 && st.Usage.ModelRequests > 0 {
			st.Usage.ModelRequests-- // a counter going back
		}
	case 12:
		st.Advice = append(st.Advice, v1alpha1.Advice{Source: reviewer, Kind: needsChanged, Count: 1})
	}
}

// perturbUser has the user ask to stop (Finalize, later raised to Cancel)
// and the session queue move.
func perturbUser(s *sim, stop, queue byte) {
	switch {
	case stop%16 == 0 && stop&0x80 != 0:
		s.spec.Stop = v1alpha1.StopCancel
	case stop%16 == 1 && stop&0x80 != 0 && s.spec.Stop == "":
		s.spec.Stop = v1alpha1.StopFinalize
	}
	switch queue % 4 {
	case 0:
		s.queue = QueueView{Holder: true}
	case 1:
		s.queue.Position++
	case 2:
		s.queue.Limit = int32(queue>>4) % 3
	}
}

// invariant is one promise of the design, checked on one pass; it returns
// what went wrong, or "".
type invariant func(in Input, d Decision, everFinalizing bool) string

// invariants are checked on every pass of FuzzDecide.
var invariants = []struct {
	name  string
	check invariant
}{
	{"Terminated is absorbing", terminatedAbsorbing},
	{"Finalizing is one-way", finalizingOneWay},
	{"grant within the remaining budget", grantWithinBudget},
	{"finalize grant within the reserve", finalizeGrantWithinReserve},
	{"a settled pod gets the grace to exit", settledPodGetsGrace},
	{"nothing more after Cancel", nothingAfterCancel},
	{"no recovery over an unsafe effect", noUnsafeRecovery},
	{"no recovery after an escalated non-retryable fault", noUnfixableRecovery},
	{"no new attempt while the failed pod runs", noOverlappingPods},
	{"Terminated only once the pod stopped", terminatedOnlyWhenStopped},
	{"no judgement on facts the gateway may still write", waitsForLastFacts},
	{"bookkeeping", bookkeeping},
	{"kstatus reads the run as RunHealth says", kstatusAgrees},
}

// checkInvariants checks one pass against every invariant.
func checkInvariants(t *testing.T, pass int, in Input, d Decision, everFinalizing bool) {
	t.Helper()
	for _, inv := range invariants {
		if msg := inv.check(in, d, everFinalizing); msg != "" {
			t.Fatalf("pass %d: %s: %s\ninput %s/%s attempt %d pod %+v\ndecided %s/%s: %s", pass, inv.name, msg,
				in.Status.Phase, in.Status.Reason, in.Status.Attempt, in.Pod, d.Status.Phase, d.Status.Reason, d.Status.Message)
		}
	}
}

func terminatedAbsorbing(in Input, d Decision, _ bool) string {
	if in.Status.Phase == v1alpha1.PhaseTerminated {
		// The decision stands; only the accounting may take in late facts,
		// and it only rises.
		want := Decision{Status: *in.Status.DeepCopy()}
		want.Status.Ledger, want.Status.Steps, want.Status.Budget = d.Status.Ledger, d.Status.Steps, d.Status.Budget
		want.Status.Budget.Granted = in.Status.Budget.Granted
		if diff := cmp.Diff(want, d); diff != "" {
			return "a Terminated run changed (-want +got):\n" + diff
		}
		if !usageAtLeast(d.Status.Budget.Used, in.Status.Budget.Used) || d.Status.Steps < in.Status.Steps {
			return fmt.Sprintf("a Terminated run's accounting went down: used %+v → %+v, steps %d → %d",
				in.Status.Budget.Used, d.Status.Budget.Used, in.Status.Steps, d.Status.Steps)
		}
	}
	return ""
}

func usageAtLeast(a, b v1alpha1.Usage) bool {
	return a.ModelRequests >= b.ModelRequests && a.ToolCalls >= b.ToolCalls && a.Tokens >= b.Tokens
}

func finalizingOneWay(in Input, d Decision, everFinalizing bool) string {
	to := d.Status.Phase
	switch {
	case everFinalizing && to != v1alpha1.PhaseFinalizing && to != v1alpha1.PhaseTerminated:
		return fmt.Sprintf("left Finalizing for %s", to)
	case to == v1alpha1.PhaseFinalizing && (d.Status.FinalizingTime == nil || d.Status.Reason == ""):
		return "Finalizing without finalizingTime or reason"
	case in.Status.FinalizingTime != nil && !d.Status.FinalizingTime.Equal(in.Status.FinalizingTime):
		return fmt.Sprintf("finalizingTime changed from %v to %v", in.Status.FinalizingTime, d.Status.FinalizingTime)
	}
	if in.Status.Phase == v1alpha1.PhaseFinalizing && to == v1alpha1.PhaseFinalizing && d.Attempt == in.Status.Attempt {
		g, kept := d.Grant, in.Status.Budget.Granted
		if g.ModelRequests > kept.ModelRequests || g.ToolCalls > kept.ToolCalls || (g.Tokens != nil && *g.Tokens > kept.Tokens) {
			return fmt.Sprintf("finalize grant raised from %+v to %+v", kept, g)
		}
	}
	return ""
}

func grantWithinBudget(in Input, d Decision, _ bool) string {
	if d.Attempt == 0 {
		if d.Grant != (v1alpha1.Grant{}) {
			return fmt.Sprintf("grant %+v for no attempt", d.Grant)
		}
		return ""
	}
	var own v1alpha1.Usage
	for _, e := range d.Status.Ledger {
		if e.Attempt == d.Attempt {
			own = e.Used
		}
	}
	b, g := in.Spec.Budget, d.Grant
	left := sub(v1alpha1.Usage{ModelRequests: b.ModelRequests, ToolCalls: b.ToolCalls}, d.Status.Budget.Used)
	switch {
	case g.ModelRequests < 0 || g.ToolCalls < 0:
		return fmt.Sprintf("negative grant %+v", g)
	case g.ModelRequests-own.ModelRequests > max(0, left.ModelRequests) || g.ToolCalls-own.ToolCalls > max(0, left.ToolCalls):
		return fmt.Sprintf("grant %+v above the remaining budget %+v (the attempt used %+v)", g, left, own)
	case (g.Tokens != nil) != (b.Tokens != nil):
		return fmt.Sprintf("grant tokens %v while budget tokens %v", g.Tokens, b.Tokens)
	case b.Tokens != nil && (*g.Tokens < 0 || *g.Tokens-own.Tokens > max(0, *b.Tokens-d.Status.Budget.Used.Tokens)):
		return fmt.Sprintf("token grant %d above the remaining %d (the attempt used %d)",
			*g.Tokens, *b.Tokens-d.Status.Budget.Used.Tokens, own.Tokens)
	}
	return ""
}

// finalizeGrantWithinReserve: a finalize-only grant is at most the attempt's
// own usage plus the output reserve (its usage when finalization began plus
// what was left of the reserve, never raised); never the working grant.
func finalizeGrantWithinReserve(in Input, d Decision, _ bool) string {
	if d.Attempt == 0 || !d.Grant.FinalizeOnly {
		return ""
	}
	var own v1alpha1.Usage
	for _, e := range d.Status.Ledger {
		if e.Attempt == d.Attempt {
			own = e.Used
		}
	}
	r, g := in.Spec.Budget.OutputReserve, d.Grant
	if g.ModelRequests > own.ModelRequests+r.ModelRequests || g.ToolCalls > own.ToolCalls+r.ToolCalls ||
		(g.Tokens != nil && *g.Tokens > own.Tokens+r.Tokens) {
		return fmt.Sprintf("finalize grant %+v above the attempt's usage %+v plus the reserve %+v", g, own, r)
	}
	return ""
}

// settledPodGetsGrace: a finalizing run whose current attempt proposed
// finish and settled, with its pod still running, stays Finalizing on that
// attempt (requeued no later than the grace's end) until finalizingTime +
// finalizationGrace, and is ended (its pod deleted) from then on. Cancel,
// an earlier decision to stop, the hard deadline and a policy violation
// come first.
func settledPodGetsGrace(in Input, d Decision, _ bool) string {
	st := in.Status
	if st.Phase != v1alpha1.PhaseFinalizing || st.FinalizingTime == nil || st.StartTime == nil ||
		in.Spec.Stop == v1alpha1.StopCancel || in.Pod.Phase.stopped() || len(in.Attempts) == 0 {
		return ""
	}
	if c := findCondition(st.Conditions, v1alpha1.ConditionReady); c != nil && c.Reason == v1alpha1.ConditionReasonStopping {
		return ""
	}
	cur := in.Attempts[len(in.Attempts)-1] // the sim lists attempts in order
	if cur.Attempt != st.Attempt || !cur.Status.FinishProposed || !cur.Status.Publication.Settled {
		return ""
	}
	lim := limitsFor(in.Spec)
	if !in.Now.Before(st.StartTime.Add(lim.deadline+lim.grace)) || d.Status.Reason != st.Reason {
		return "" // the hard deadline, or a policy violation
	}
	until := st.FinalizingTime.Add(lim.grace)
	if in.Now.Before(until) {
		switch {
		case d.Status.Phase != v1alpha1.PhaseFinalizing || d.DeletePod || d.Attempt != cur.Attempt:
			return fmt.Sprintf("ended %s before the grace was over at %s: phase %s, delete %t, attempt %d",
				in.Now.Sub(st.FinalizingTime.Time), lim.grace, d.Status.Phase, d.DeletePod, d.Attempt)
		case d.RequeueAfter <= 0 || d.RequeueAfter > until.Sub(in.Now):
			return fmt.Sprintf("requeue %s, the grace ends in %s", d.RequeueAfter, until.Sub(in.Now))
		}
		return ""
	}
	if !d.DeletePod || d.Attempt != 0 {
		return fmt.Sprintf("still waiting %s after the grace was over: delete %t, attempt %d",
			in.Now.Sub(until), d.DeletePod, d.Attempt)
	}
	return ""
}

func nothingAfterCancel(in Input, d Decision, _ bool) string {
	if in.Spec.Stop != v1alpha1.StopCancel || in.Status.Phase == v1alpha1.PhaseTerminated {
		return ""
	}
	if d.Attempt != 0 || d.Grant != (v1alpha1.Grant{}) {
		return fmt.Sprintf("attempt %d with grant %+v", d.Attempt, d.Grant)
	}
	if d.Status.Phase == v1alpha1.PhaseFinalizing && in.Status.Phase != v1alpha1.PhaseFinalizing {
		return "entered Finalizing"
	}
	return ""
}

// noUnsafeRecovery: a current attempt whose pod failed or vanished with an
// effect in flight and no idempotency key is never replaced.
func noUnsafeRecovery(in Input, d Decision, _ bool) string {
	if len(in.Attempts) == 0 || in.Status.Phase == v1alpha1.PhaseTerminated {
		return ""
	}
	cur := in.Attempts[len(in.Attempts)-1] // the sim lists attempts in order
	if cur.Attempt < in.Status.Attempt || cur.Status.FinishProposed && cur.Status.Publication.Settled {
		return ""
	}
	if in.Pod.Phase != PodFailed && (in.Pod.Phase != PodAbsent || !in.Pod.Created) {
		return ""
	}
	if !slices.ContainsFunc(cur.Status.InFlight, func(e v1alpha1.InFlightEffect) bool { return e.IdempotencyKey == "" }) {
		return ""
	}
	// A Recovering run may hold its course for the fact grace (the pod of a
	// replacement stopped on its own); what must not happen is a new
	// attempt, or a recovery begun for this failure.
	rc := findCondition(d.Status.Conditions, v1alpha1.ConditionRecovering)
	was := findCondition(in.Status.Conditions, v1alpha1.ConditionRecovering)
	began := rc != nil && rc.Status == metav1.ConditionTrue && rc.Reason == v1alpha1.ConditionReasonAttemptFailed &&
		(was == nil || was.Status != metav1.ConditionTrue || was.Reason != v1alpha1.ConditionReasonAttemptFailed)
	entered := d.Status.Phase == v1alpha1.PhaseRecovering && in.Status.Phase != v1alpha1.PhaseRecovering
	if entered || began || d.Attempt > cur.Attempt || d.Status.Attempt > cur.Attempt {
		return fmt.Sprintf("recovered attempt %d: phase %s, attempt %d", cur.Attempt, d.Status.Phase, d.Attempt)
	}
	return ""
}

// noUnfixableRecovery: a current attempt that escalated a fault that is not
// retryable (a bad key, a bad configuration: a new attempt would meet it
// again) is never replaced by a working attempt: an attempt started after
// it is finalize-only.
func noUnfixableRecovery(in Input, d Decision, _ bool) string {
	if len(in.Attempts) == 0 || in.Status.Phase == v1alpha1.PhaseTerminated {
		return ""
	}
	cur := in.Attempts[len(in.Attempts)-1] // the sim lists attempts in order
	if cur.Attempt < in.Status.Attempt || cur.Status.FinishProposed && cur.Status.Publication.Settled {
		return ""
	}
	if !slices.ContainsFunc(cur.Status.Faults, func(x v1alpha1.Fault) bool { return x.Escalated && !x.Retryable }) {
		return ""
	}
	if d.Status.Attempt > cur.Attempt && (d.Attempt != d.Status.Attempt || !d.Grant.FinalizeOnly) {
		return fmt.Sprintf("attempt %d replaced by attempt %d with grant %+v", cur.Attempt, d.Status.Attempt, d.Grant)
	}
	return ""
}

// noOverlappingPods: no decision starts a new attempt (whose pod the
// reconciler then creates) while the current attempt's pod still runs or
// has not started: a replacement, recovery or finalize-only, waits for it to
// stop, so two pods of one run never overlap.
func noOverlappingPods(in Input, d Decision, _ bool) string {
	cur := in.Status.Attempt
	for _, a := range in.Attempts {
		cur = max(cur, a.Attempt)
	}
	if cur == 0 || d.Status.Attempt <= cur || in.Pod.Phase.stopped() {
		return ""
	}
	return fmt.Sprintf("attempt %d started while the pod of attempt %d is %s (terminating %t)",
		d.Status.Attempt, cur, in.Pod.Phase, in.Pod.Terminating)
}

// waitsForLastFacts: once the current pod stopped on its own, its facts
// are not judged until they are final (finish proposed and settled, or a
// write after the stop, in whole seconds) or FactGrace has passed: the run
// holds its phase, reason and attempt, deletes nothing and looks again no
// later than the grace's end. Only the rungs above it (an earlier decision
// to stop, Cancel, the hard deadline) do not wait.
func waitsForLastFacts(in Input, d Decision, _ bool) string {
	st, pod := in.Status, in.Pod
	if in.FactGrace <= 0 || !st.Phase.IsActive() || in.Spec.Stop == v1alpha1.StopCancel || len(in.Attempts) == 0 ||
		pod.FinishedAt.IsZero() || pod.Phase != PodSucceeded && pod.Phase != PodFailed {
		return ""
	}
	if c := findCondition(st.Conditions, v1alpha1.ConditionReady); c != nil && c.Reason == v1alpha1.ConditionReasonStopping {
		return ""
	}
	lim := limitsFor(in.Spec)
	if st.StartTime == nil || !in.Now.Before(st.StartTime.Add(lim.deadline+lim.grace)) {
		return ""
	}
	cur := in.Attempts[len(in.Attempts)-1] // the sim lists attempts in order
	if cur.Attempt < st.Attempt || cur.Status.FinishProposed && cur.Status.Publication.Settled {
		return ""
	}
	stopped := pod.FinishedAt.Truncate(time.Second)
	until := stopped.Add(in.FactGrace)
	if cur.FactsWritten.Truncate(time.Second).After(stopped) || !in.Now.Before(until) {
		return ""
	}
	switch {
	case d.Status.Phase != st.Phase || d.Status.Reason != st.Reason || d.DeletePod || d.Attempt != cur.Attempt:
		return fmt.Sprintf("judged %s after the pod stopped, before its facts were final: %s/%s, delete %t, attempt %d",
			in.Now.Sub(pod.FinishedAt), d.Status.Phase, d.Status.Reason, d.DeletePod, d.Attempt)
	case d.RequeueAfter <= 0 || d.RequeueAfter > until.Sub(in.Now):
		return fmt.Sprintf("requeue %s, the fact grace ends in %s", d.RequeueAfter, until.Sub(in.Now))
	}
	return ""
}

func terminatedOnlyWhenStopped(in Input, d Decision, _ bool) string {
	if d.Status.Phase == v1alpha1.PhaseTerminated && (in.Pod.Phase == PodRunning || in.Pod.Phase == PodPending) {
		return fmt.Sprintf("Terminated while the pod is %s", in.Pod.Phase)
	}
	return ""
}

// bookkeeping: counters never go back; Terminated, Succeeded and Stalled
// keep their contract; conditions carry generation, time and reason; bounded
// message.
func bookkeeping(in Input, d Decision, _ bool) string {
	st := d.Status
	if st.Attempt < in.Status.Attempt {
		return fmt.Sprintf("attempt went back from %d to %d", in.Status.Attempt, st.Attempt)
	}
	for _, old := range in.Status.Ledger {
		for _, e := range st.Ledger {
			if e.Attempt == old.Attempt && (less(e.Used, old.Used) || e.Steps < old.Steps) {
				return fmt.Sprintf("ledger of attempt %d went back from %+v to %+v", e.Attempt, old, e)
			}
		}
	}
	terminated := st.Phase == v1alpha1.PhaseTerminated
	if terminated && (st.Reason == "" || st.Settlement == "" || st.CompletionTime == nil || d.Attempt != 0) {
		return "Terminated without reason, settlement or completion time, or with an attempt"
	}
	if c := findCondition(st.Conditions, v1alpha1.ConditionSucceeded); c != nil {
		ok := st.Reason == v1alpha1.ReasonCompleted && st.Settlement == v1alpha1.SettlementComplete
		if !terminated || (c.Status == metav1.ConditionTrue) != ok {
			return fmt.Sprintf("Succeeded=%s in %s/%s/%s", c.Status, st.Phase, st.Reason, st.Settlement)
		}
	}
	failed := terminated && RunHealth(st.Phase, st.Reason, st.Settlement) == HealthFailed
	if c := findCondition(st.Conditions, v1alpha1.ConditionStalled); failed {
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != string(st.Reason) {
			return fmt.Sprintf("Terminated/%s/%s without Stalled=True/%s: %+v", st.Reason, st.Settlement, st.Reason, c)
		}
	} else if c != nil && c.Status == metav1.ConditionTrue {
		return fmt.Sprintf("Stalled=True in %s/%s/%s", st.Phase, st.Reason, st.Settlement)
	}
	for _, c := range st.Conditions {
		if c.ObservedGeneration != in.Generation || c.LastTransitionTime.IsZero() || c.Reason == "" {
			return fmt.Sprintf("condition %+v", c)
		}
	}
	if len(st.Message) > maxMessage || d.RequeueAfter < 0 {
		return fmt.Sprintf("message of %d bytes, requeue %s", len(st.Message), d.RequeueAfter)
	}
	return ""
}

func findCondition(cs []metav1.Condition, t string) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == t {
			return &cs[i]
		}
	}
	return nil
}
