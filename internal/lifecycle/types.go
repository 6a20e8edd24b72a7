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
	"time"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// PodPhase is the observed state of the current attempt's pod.
type PodPhase string

const (
	// PodAbsent: there is no pod object (not created yet, or gone).
	PodAbsent PodPhase = "Absent"
	// PodPending: the pod exists and has not started running.
	PodPending PodPhase = "Pending"
	// PodRunning: the pod is running.
	PodRunning PodPhase = "Running"
	// PodSucceeded: the pod exited successfully.
	PodSucceeded PodPhase = "Succeeded"
	// PodFailed: the pod failed; this includes an evicted pod.
	PodFailed PodPhase = "Failed"
)

// stopped reports whether a pod in this phase runs nothing any more. The
// zero value is taken as absent.
func (p PodPhase) stopped() bool {
	return p == PodAbsent || p == "" || p == PodSucceeded || p == PodFailed
}

// Stopped reports whether the observed pod runs nothing any more (it
// exited, or there is none).
func (o PodObservation) Stopped() bool { return o.Phase.stopped() }

// PodObservation is what the reconciler saw of the current attempt's pod.
type PodObservation struct {
	// Phase of the pod; PodAbsent when there is no pod object.
	Phase PodPhase
	// Terminating is true when the pod's deletionTimestamp is set.
	Terminating bool
	// Created is true when the attempt's pod was created at some point
	// (RunAttempt spec.podUID set, or the pod was seen). An absent pod that
	// was created is gone, which fails the attempt.
	Created bool
	// StartTime is when the pod started; zero if unknown.
	StartTime time.Time
	// FinishedAt is when the pod stopped on its own (Succeeded or Failed):
	// the latest finishedAt of its containers; zero if it has not stopped
	// or the time is unknown. The fact grace counts from it.
	FinishedAt time.Time
	// Message is the pod's reason and message, e.g. "Evicted: node pressure",
	// quoted in the run's message.
	Message string
}

// AttemptFacts is one RunAttempt as the decision needs it.
type AttemptFacts struct {
	// Attempt is the attempt number, from 1.
	Attempt int32
	// Created is the RunAttempt's creationTimestamp.
	Created time.Time
	// Grant is the RunAttempt's spec.grant as currently stored.
	Grant v1alpha1.Grant
	// Status is the facts the attempt's pod reported.
	Status v1alpha1.RunAttemptStatus
	// FactsWritten is when the attempt's status was last written by its
	// author (the gateway): the API server's time of the latest write to
	// the status subresource (metadata.managedFields); zero if unknown.
	// status.heartbeatTime cannot tell it: it is when the agent last
	// called, never after its pod stopped.
	FactsWritten time.Time
	// Lease is the Lease of the gateway replica that governs the attempt's
	// liveness (Status.Liveness.Gateway), as the operator read it; only read
	// when Status.Liveness is set.
	Lease GatewayLease
}

// GatewayLease is a gateway replica's coordination.k8s.io Lease: the
// gateway's own heartbeat, which stands for the heartbeat of every attempt
// it governs and has not found silent.
type GatewayLease struct {
	// Found is false when the Lease does not exist.
	Found bool
	// Holder is its spec.holderIdentity: the gateway process renewing it.
	Holder string
	// AcquireTime is its spec.acquireTime: when Holder took it.
	AcquireTime time.Time
	// RenewTime is its spec.renewTime: when Holder last renewed it.
	RenewTime time.Time
}

// QueueView is the run's place in its session's queue.
type QueueView struct {
	// Holder is true when this run holds its session: it is active, or
	// Admit found the session free and this run first in line.
	Holder bool
	// Position is the run's 1-based position among the waiting runs; 0 if Holder.
	Position int32
	// Limit is how many runs may wait behind the active one.
	Limit int32
	// Timeout is how long a run may wait; 0 means no timeout.
	Timeout time.Duration
}

// Input is everything a decision depends on. Now is the only clock.
type Input struct {
	// Now is the time of this decision.
	Now time.Time
	// Name is the run's name, for messages.
	Name string
	// Generation is the run's metadata.generation; conditions and
	// status.observedGeneration carry it.
	Generation int64
	// Spec is the run's spec.
	Spec v1alpha1.ResearchRunSpec
	// Status is the run's status as persisted: phase, reason, ledger, times,
	// conditions, budget.granted. The decision never modifies it.
	Status v1alpha1.ResearchRunStatus
	// Attempts is every RunAttempt of the run, in any order.
	Attempts []AttemptFacts
	// Pod is the pod of the current attempt: the higher of status.attempt
	// and the highest attempt in Attempts.
	Pod PodObservation
	// Queue is the run's place in its session's queue; only read while the
	// run is Pending or Queued.
	Queue QueueView
	// Blocked says why a run that has not started cannot start yet: its
	// Session or RuntimePolicy does not exist, or the policy is not resolved
	// and valid. Only read while the run is Pending.
	Blocked string
	// FactGrace is how long after the current pod stopped on its own
	// (PodObservation.FinishedAt) the decision waits for the gateway's last
	// write of the facts it coalesces (usage, steps) before judging them,
	// unless they are already final; 0: no wait.
	FactGrace time.Duration
	// Children are the run's child runs as seen (docs/children.md): the
	// carves its attempts recorded (status.children) count as spent until
	// their child is seen ended, then only what it used.
	Children []ChildView
	// StopCause says why spec.stop was set when the operator set it on the
	// user's behalf (e.g. "session s was deleted"); it leads the message.
	StopCause string
}

// Event is a Kubernetes event to record on the run. Events are only produced
// on transitions.
type Event struct {
	// Type is corev1.EventTypeNormal or corev1.EventTypeWarning.
	Type string
	// Reason is a PascalCase reason, one of the v1alpha1.EventReason values.
	Reason string
	// Message is a readable sentence with numbers.
	Message string
}

// Decision is what the reconciler must do after one pass. It is complete:
// applying it and deciding again with the same facts converges.
type Decision struct {
	// Status is the complete next status. The reconciler writes it when it
	// differs (semantically) from Input.Status.
	Status v1alpha1.ResearchRunStatus
	// Attempt is the attempt that must exist: its RunAttempt is created if
	// missing, its spec.grant and spec.directives are set to Grant and
	// Directives, and its pod is created if it never was (an attempt's pod
	// is created at most once, and not while DeletePod is set). 0 means no
	// attempt is wanted: nothing is created, and the current attempt (if
	// its RunAttempt exists) gets the zero Grant, so it spends nothing more.
	// Persist Status before writing that zero grant: a zeroed attempt whose
	// run status still says it works would look like a violation next pass.
	Attempt int32
	// Grant is the allowance for Attempt (or, when Attempt is 0, the zero
	// grant for the current attempt), in absolute counters of that
	// attempt's own usage.
	Grant v1alpha1.Grant
	// Directives for Attempt's spec; empty when Attempt is 0 or Finalizing.
	Directives []v1alpha1.Directive
	// DeletePod asks for the current attempt's pod to be deleted.
	DeletePod bool
	// Superseded lists, in ascending order, every older attempt of the run:
	// their RunAttempts must be marked superseded (spec.superseded) and
	// their pods deleted if they still run. Listed on every pass, so
	// applying it is idempotent.
	Superseded []int32
	// RequeueAfter is when to decide again even if nothing changes; 0 means
	// only on change. Computed from Input.Now.
	RequeueAfter time.Duration
	// Events to record, only on transitions.
	Events []Event
}
