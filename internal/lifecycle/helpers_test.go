package lifecycle

import (
	"fmt"
	"slices"
	"strings"
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

func ptr[T any](v T) *T { return &v }

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
		o.Conditions = append(o.Conditions, fmt.Sprintf("%s=%s/%s", c.Type, c.Status, c.Reason))
	}
	slices.Sort(o.Conditions)
	return o
}

func dump(d Decision, rung string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%+v\nmessage: %s\n", summarize(d, rung), d.Status.Message)
	for _, e := range d.Events {
		fmt.Fprintf(&b, "event %s %s: %s\n", e.Type, e.Reason, e.Message)
	}
	return b.String()
}
