package lifecycle

import (
	"slices"
	"time"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// sim stands in for the reconciler and the cluster: it gathers an Input the
// way the reconciler does, applies a Decision the way the reconciler must,
// and lets a test (or the fuzzer) change the facts between passes.
type sim struct {
	spec     v1alpha1.ResearchRunSpec
	status   v1alpha1.ResearchRunStatus
	now      time.Time
	attempts map[int32]*AttemptFacts
	pods     map[int32]*PodObservation
	queue    QueueView
	// factGrace is Input.FactGrace.
	factGrace time.Duration
}

func newSim(spec v1alpha1.ResearchRunSpec, queue QueueView) *sim {
	return &sim{spec: spec, now: t0, queue: queue,
		attempts: map[int32]*AttemptFacts{}, pods: map[int32]*PodObservation{}}
}

// current is the attempt the reconciler observes the pod of.
func (s *sim) current() int32 {
	cur := s.status.Attempt
	for n := range s.attempts {
		cur = max(cur, n)
	}
	return cur
}

// attempt and pod of the current attempt, nil if none.
func (s *sim) attempt() *AttemptFacts { return s.attempts[s.current()] }
func (s *sim) pod() *PodObservation   { return s.pods[s.current()] }

func (s *sim) input() Input {
	in := Input{Now: s.now, Name: "r1", Generation: 1, Spec: *s.spec.DeepCopy(), Status: *s.status.DeepCopy(), Queue: s.queue,
		FactGrace: s.factGrace}
	keys := make([]int32, 0, len(s.attempts))
	for n := range s.attempts {
		keys = append(keys, n)
	}
	slices.Sort(keys)
	for _, n := range keys {
		a := s.attempts[n]
		in.Attempts = append(in.Attempts, AttemptFacts{Attempt: a.Attempt, Created: a.Created, Grant: *a.Grant.DeepCopy(), Status: *a.Status.DeepCopy(),
			FactsWritten: a.FactsWritten})
	}
	in.Pod = PodObservation{Phase: PodAbsent}
	if p := s.pod(); p != nil {
		in.Pod = *p
	}
	return in
}

// apply does what the reconciler does with a decision.
func (s *sim) apply(d Decision) {
	s.status = *d.Status.DeepCopy()
	for _, n := range d.Superseded {
		if p := s.pods[n]; p != nil {
			p.Phase, p.Terminating = PodAbsent, false
		}
	}
	if d.Attempt != 0 {
		a := s.attempts[d.Attempt]
		if a == nil {
			a = &AttemptFacts{Attempt: d.Attempt, Created: s.now}
			s.attempts[d.Attempt] = a
		}
		a.Grant = *d.Grant.DeepCopy()
		if s.pods[d.Attempt] == nil && !d.DeletePod {
			s.pods[d.Attempt] = &PodObservation{Phase: PodPending, Created: true}
		}
	} else if a := s.attempts[d.Status.Attempt]; a != nil {
		a.Grant = v1alpha1.Grant{}
	}
	if d.DeletePod {
		if p := s.pods[d.Status.Attempt]; p != nil && !p.Phase.stopped() {
			p.Terminating = true
		}
	}
}

// step decides once and applies the decision.
func (s *sim) step() (Decision, string) {
	d, rung := decide(s.input())
	s.apply(d)
	return d, rung
}
