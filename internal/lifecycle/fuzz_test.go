package lifecycle

import (
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
		b.Tokens = ptr(int64(1 + c.pick(16)*100))
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
		everFinalizing := false
		for pass := 0; pass < 16; pass++ {
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
	})
}

// perturb changes the world between passes, as the fuzzer's bytes say:
// time passes, the current pod moves on, the agent reports facts, the user
// asks to stop, the session queue moves.
func perturb(s *sim, sc *script) {
	s.now = s.now.Add([]time.Duration{0, time.Second, 3 * time.Second, 6 * time.Second, 30 * time.Second,
		70 * time.Second, 10 * time.Minute, 25 * time.Minute}[sc.pick(8)])

	op := sc.next()
	if p := s.pod(); p != nil {
		switch op % 8 {
		case 1:
			if p.Phase == PodPending {
				p.Phase, p.StartTime = PodRunning, s.now
			}
		case 2:
			if p.Phase != PodAbsent {
				p.Phase, p.Message = PodFailed, "Evicted: node pressure"
			}
		case 3:
			if p.Phase != PodAbsent {
				p.Phase = PodSucceeded
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

	op = sc.next()
	if a := s.attempt(); a != nil {
		st, g := &a.Status, a.Grant
		k := int64(op>>4) % 4
		overspend := op&0x80 != 0 && op&0x40 != 0
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
			st.Calls = []v1alpha1.CallCount{{Tool: "http.get", Fingerprint: "f", Count: int64(len(st.Calls)) + k}}
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
			st.InFlight = []v1alpha1.InFlightEffect{{ID: "c", Tool: "http.post", Effect: v1alpha1.EffectExternal, IdempotencyKey: key}}
		case 9:
			st.InFlight = nil
		case 10:
			st.Faults = append(st.Faults, v1alpha1.Fault{Scope: v1alpha1.FaultScopeTool, Kind: "Timeout", Count: 1, Escalated: op&0x80 != 0})
		case 11:
			if op&0x80 != 0 && st.Usage.ModelRequests > 0 {
				st.Usage.ModelRequests-- // a counter going back
			}
		case 12:
			st.Advice = append(st.Advice, v1alpha1.Advice{Source: "reviewer", Kind: "NeedsChanged", Count: 1})
		}
	}

	switch op := sc.next(); op % 16 {
	case 0:
		if op&0x80 != 0 {
			s.spec.Stop = v1alpha1.StopCancel
		}
	case 1:
		if s.spec.Stop == "" && op&0x80 != 0 {
			s.spec.Stop = v1alpha1.StopFinalize
		}
	}

	switch op := sc.next(); op % 4 {
	case 0:
		s.queue = QueueView{Holder: true}
	case 1:
		s.queue.Position++
	case 2:
		s.queue.Limit = int32(op>>4) % 3
	}
}

// checkInvariants checks one pass against the design's promises.
func checkInvariants(t *testing.T, pass int, in Input, d Decision, everFinalizing bool) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("pass %d: "+format+"\ninput phase %s reason %s attempt %d pod %+v\ndecided %s/%s: %s",
			append([]any{pass}, append(args, in.Status.Phase, in.Status.Reason, in.Status.Attempt, in.Pod,
				d.Status.Phase, d.Status.Reason, d.Status.Message)...)...)
	}
	from, to := in.Status.Phase, d.Status.Phase

	// Terminated is absorbing and inert.
	if from == v1alpha1.PhaseTerminated {
		if diff := cmp.Diff(Decision{Status: in.Status}, d); diff != "" {
			fail("a Terminated run changed (-want +got):\n%s", diff)
		}
		return
	}

	// Finalizing is one-way, entered at most once, its time set once.
	if everFinalizing && to != v1alpha1.PhaseFinalizing && to != v1alpha1.PhaseTerminated {
		fail("left Finalizing for %s", to)
	}
	if to == v1alpha1.PhaseFinalizing && d.Status.FinalizingTime == nil {
		fail("Finalizing without finalizingTime")
	}
	if in.Status.FinalizingTime != nil && !d.Status.FinalizingTime.Equal(in.Status.FinalizingTime) {
		fail("finalizingTime changed from %v to %v", in.Status.FinalizingTime, d.Status.FinalizingTime)
	}
	if from == v1alpha1.PhaseFinalizing && to == v1alpha1.PhaseFinalizing && d.Attempt == in.Status.Attempt {
		g, kept := d.Grant, in.Status.Budget.Granted
		if g.ModelRequests > kept.ModelRequests || g.ToolCalls > kept.ToolCalls || (g.Tokens != nil && *g.Tokens > kept.Tokens) {
			fail("finalize grant raised from %+v to %+v", kept, g)
		}
	}

	// A grant never exceeds the remaining budget, per unit.
	if d.Attempt != 0 {
		var own v1alpha1.Usage
		for _, e := range d.Status.Ledger {
			if e.Attempt == d.Attempt {
				own = e.Used
			}
		}
		b := in.Spec.Budget
		left := sub(v1alpha1.Usage{ModelRequests: b.ModelRequests, ToolCalls: b.ToolCalls}, d.Status.Budget.Used)
		g := d.Grant
		if g.ModelRequests < 0 || g.ToolCalls < 0 ||
			g.ModelRequests-own.ModelRequests > max(0, left.ModelRequests) ||
			g.ToolCalls-own.ToolCalls > max(0, left.ToolCalls) {
			fail("grant %+v above the remaining budget %+v (attempt used %+v)", g, left, own)
		}
		if (g.Tokens != nil) != (b.Tokens != nil) {
			fail("grant tokens %v while budget tokens %v", g.Tokens, b.Tokens)
		}
		if b.Tokens != nil && (*g.Tokens < 0 || *g.Tokens-own.Tokens > max(0, *b.Tokens-d.Status.Budget.Used.Tokens)) {
			fail("token grant %d above the remaining %d (attempt used %d)", *g.Tokens, *b.Tokens-d.Status.Budget.Used.Tokens, own.Tokens)
		}
	}
	if to == v1alpha1.PhaseTerminated && (d.Attempt != 0 || d.Grant != (v1alpha1.Grant{})) {
		fail("Terminated with attempt %d grant %+v", d.Attempt, d.Grant)
	}

	// After Cancel: zero grant, no new attempt, never Finalizing.
	if in.Spec.Stop == v1alpha1.StopCancel {
		if d.Attempt != 0 || d.Grant != (v1alpha1.Grant{}) {
			fail("cancelled, yet attempt %d grant %+v", d.Attempt, d.Grant)
		}
		if to == v1alpha1.PhaseFinalizing && from != v1alpha1.PhaseFinalizing {
			fail("cancelled run entered Finalizing")
		}
	}

	// A failed attempt with an effect in flight and no idempotency key is
	// never recovered.
	var cur *AttemptFacts
	for i := range in.Attempts {
		if in.Attempts[i].Attempt == max(in.Status.Attempt, in.Attempts[len(in.Attempts)-1].Attempt) {
			cur = &in.Attempts[i]
		}
	}
	if cur != nil && (in.Pod.Phase == PodFailed || in.Pod.Phase == PodAbsent && in.Pod.Created) &&
		!(cur.Status.FinishProposed && cur.Status.Publication.Settled) {
		unsafe := false
		for _, e := range cur.Status.InFlight {
			unsafe = unsafe || e.IdempotencyKey == ""
		}
		if unsafe {
			if to == v1alpha1.PhaseRecovering || d.Attempt > cur.Attempt {
				fail("recovered attempt %d with an unsafe effect in flight", cur.Attempt)
			}
			if c := findCondition(d.Status.Conditions, v1alpha1.ConditionRecovering); c != nil && c.Status == metav1.ConditionTrue {
				fail("Recovering=True with an unsafe effect in flight")
			}
		}
	}

	// Terminated only once the pod has stopped.
	if to == v1alpha1.PhaseTerminated && (in.Pod.Phase == PodRunning || in.Pod.Phase == PodPending) {
		fail("Terminated while the pod is %s", in.Pod.Phase)
	}

	// Bookkeeping never goes back; conditions and message keep their contract.
	if d.Status.Attempt < in.Status.Attempt {
		fail("attempt went back from %d to %d", in.Status.Attempt, d.Status.Attempt)
	}
	for _, old := range in.Status.Ledger {
		for _, e := range d.Status.Ledger {
			if e.Attempt == old.Attempt && (less(e.Used, old.Used) || e.Steps < old.Steps) {
				fail("ledger of attempt %d went back from %+v to %+v", e.Attempt, old, e)
			}
		}
	}
	if c := findCondition(d.Status.Conditions, v1alpha1.ConditionSucceeded); c != nil {
		if to != v1alpha1.PhaseTerminated {
			fail("Succeeded condition before Terminated")
		}
		ok := d.Status.Reason == v1alpha1.ReasonCompleted && d.Status.Settlement == v1alpha1.SettlementComplete
		if (c.Status == metav1.ConditionTrue) != ok {
			fail("Succeeded=%s for %s/%s", c.Status, d.Status.Reason, d.Status.Settlement)
		}
	}
	if to == v1alpha1.PhaseTerminated && (d.Status.Reason == "" || d.Status.Settlement == "" || d.Status.CompletionTime == nil) {
		fail("Terminated without reason, settlement or completion time")
	}
	if to == v1alpha1.PhaseFinalizing && d.Status.Reason == "" {
		fail("Finalizing without a reason")
	}
	for _, c := range d.Status.Conditions {
		if c.ObservedGeneration != in.Generation || c.LastTransitionTime.IsZero() || c.Reason == "" {
			fail("condition %+v", c)
		}
	}
	if len(d.Status.Message) > maxMessage || d.RequeueAfter < 0 {
		fail("message of %d bytes, requeue %s", len(d.Status.Message), d.RequeueAfter)
	}
}

func findCondition(cs []metav1.Condition, t string) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == t {
			return &cs[i]
		}
	}
	return nil
}
