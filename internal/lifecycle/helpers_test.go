package lifecycle

import (
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// t0 is when the test runs start; every test time is relative to it.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func mt(d time.Duration) *metav1.Time {
	t := metav1.NewTime(at(d))
	return &t
}

// testSpec is a run with a 42/20 budget, a 2/2 reserve (working 40/18),
// a 30m deadline with 2m grace, 3 attempts with 5s backoff and 60s
// heartbeat timeout, and gates 20 steps / 3 same calls / 5 idle steps,
// directives at 75% and 90%.
func testSpec() v1alpha1.ResearchRunSpec {
	return v1alpha1.ResearchRunSpec{
		SessionRef: v1alpha1.LocalObjectReference{Name: "s1"},
		Goal:       "survey",
		Budget: v1alpha1.Budget{
			ModelRequests:     42,
			ToolCalls:         20,
			OutputReserve:     v1alpha1.OutputReserve{ModelRequests: 2, ToolCalls: 2},
			Deadline:          &metav1.Duration{Duration: 30 * time.Minute},
			FinalizationGrace: &metav1.Duration{Duration: 2 * time.Minute},
		},
		Gates: v1alpha1.Gates{MaxSteps: 20, SameCallLimit: 3, NoProgressLimit: 5, DegradeAtPercent: 75, CompressAtPercent: 90},
		Recovery: v1alpha1.Recovery{
			MaxAttempts:      3,
			Backoff:          &metav1.Duration{Duration: 5 * time.Second},
			HeartbeatTimeout: &metav1.Duration{Duration: 60 * time.Second},
		},
	}
}

// Rungs of the ladder, by name.
const (
	rungTerminated      = "Terminated"
	rungStopping        = "Stopping"
	rungCancel          = "Cancel"
	rungBlocked         = "Blocked"
	rungQueue           = "Queue"
	rungHardDeadline    = "HardDeadline"
	rungFactGrace       = "FactGrace"
	rungAttemptFailed   = "AttemptFailed"
	rungPolicyViolation = "PolicyViolation"
	rungFinish          = "Finish"
	rungGates           = "Gates"
	rungSteady          = "Steady"
)

// Expected events, as Type/Reason.
const (
	evQueued     = "Normal/Queued"
	evRunning    = "Normal/Running"
	evFinalizing = "Normal/Finalizing"
	evStarted    = "Normal/AttemptStarted"
	evSettled    = "Normal/Stopping" // a settled Completed run whose pod outlived the grace
	evCompleted  = "Normal/Terminated"
	evRecovering = "Warning/Recovering"
	evStopping   = "Warning/Stopping"
	evTerminated = "Warning/Terminated"
)

// Expected conditions, as Type=Status/Reason.
const (
	readyTrue          = "Ready=True/Running"
	readyQueued        = "Ready=False/Queued"
	readyRecovering    = "Ready=False/Recovering"
	readyFinal         = "Ready=False/Finalizing"
	readyStop          = "Ready=False/Stopping"
	recoveringFailed   = "Recovering=True/AttemptFailed"
	recoveringStarting = "Recovering=True/StartingAttempt"
	recovered          = "Recovering=False/Recovered"
	finalizingStopped  = "Finalizing=False/Stopping"
	finalizingOver     = "Finalizing=False/Terminated"
)

// Facts the tables repeat.
const (
	evicted      = "Evicted: node pressure"
	needsChanged = "NeedsChanged"
	reviewer     = "reviewer"
	toolGet      = "http.get"
	toolPost     = "http.post"
	degradeAt30  = "Degrade/Budget: 30/40 model requests"
)

// finalizingFor is the Finalizing condition of a run finalizing for r.
func finalizingFor(r v1alpha1.Reason) string { return "Finalizing=True/" + string(r) }

// ended is the conditions of a run Terminated with r that kstatus reads as
// Failed, plus others, sorted: Ready and Succeeded False, Stalled True, all
// with r.
func ended(r v1alpha1.Reason, others ...string) []string {
	cs := append([]string{"Ready=False/" + string(r), "Stalled=True/" + string(r), "Succeeded=False/" + string(r)}, others...)
	slices.Sort(cs)
	return cs
}

// endedOK is the conditions of a run Terminated with r that kstatus reads
// as Current but that did not succeed (not Completed/Complete), plus
// others, sorted: Ready True, Succeeded False, no Stalled.
func endedOK(r v1alpha1.Reason, others ...string) []string {
	cs := append([]string{"Ready=True/" + string(r), "Succeeded=False/" + string(r)}, others...)
	slices.Sort(cs)
	return cs
}

// completed is the conditions of a run Terminated/Completed/Complete, plus
// others, sorted.
func completed(others ...string) []string {
	cs := append([]string{"Ready=True/Completed", "Succeeded=True/Completed"}, others...)
	slices.Sort(cs)
	return cs
}

// outcome is the part of a Decision table tests compare.
type outcome struct {
	Rung          string
	Phase         v1alpha1.Phase
	Reason        v1alpha1.Reason
	Settlement    v1alpha1.Settlement
	StatusAttempt int32
	Attempt       int32
	Grant         v1alpha1.Grant
	DeletePod     bool
	Superseded    []int32
	RequeueAfter  time.Duration
	Directives    []string // Type/Gate: message
	Events        []string // Type/Reason
	Conditions    []string // Type=Status/Reason, sorted
}

func summarize(d Decision, rung string) outcome {
	o := outcome{
		Rung:          rung,
		Phase:         d.Status.Phase,
		Reason:        d.Status.Reason,
		Settlement:    d.Status.Settlement,
		StatusAttempt: d.Status.Attempt,
		Attempt:       d.Attempt,
		Grant:         d.Grant,
		DeletePod:     d.DeletePod,
		Superseded:    d.Superseded,
		RequeueAfter:  d.RequeueAfter,
	}
	for _, x := range d.Directives {
		o.Directives = append(o.Directives, fmt.Sprintf("%s/%s: %s", x.Type, x.Gate, x.Message))
	}
	for _, e := range d.Events {
		o.Events = append(o.Events, e.Type+"/"+e.Reason)
	}
	for _, c := range d.Status.Conditions {
		if c.Type == v1alpha1.ConditionAwaitingApproval && c.Status != metav1.ConditionTrue {
			// Every started run carries AwaitingApproval=False; the ladder's
			// rows would only repeat it. The approval table covers it.
			continue
		}
		if c.Type == v1alpha1.ConditionReconciling {
			// Reconciling repeats the phase (True with Ready's reason until
			// Terminated): the rows would only repeat it. The kstatus
			// invariant of FuzzDecide and TestRunHealthWithKstatus cover it.
			continue
		}
		o.Conditions = append(o.Conditions, fmt.Sprintf("%s=%s/%s", c.Type, c.Status, c.Reason))
	}
	slices.Sort(o.Conditions)
	return o
}
