package lifecycle

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// TestFinalizationIsTypedState: entering Finalizing records its reason,
// cause and reserve in status.finalization, and later passes tell the
// finalization from that field, not from the prose of status.message.
func TestFinalizationIsTypedState(t *testing.T) {
	in := runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(40, 3), Steps: 5, LastProgressStep: 5}))
	d := Decide(in)
	want := &v1alpha1.FinalizationStatus{Reason: v1alpha1.ReasonBudgetExhausted,
		Cause: "working budget exhausted at 40/40 model requests", Reserve: usage(2, 2)}
	if diff := cmp.Diff(want, d.Status.Finalization); diff != "" {
		t.Fatalf("status.finalization on entering Finalizing (-want +got):\n%s", diff)
	}

	in = with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(22, 4)})),
		finalizingSince(v1alpha1.ReasonStepLimit, 50*time.Second, usage(22, 4)), podIs(PodFailed),
		func(in *Input) {
			in.Status.Message = "prose that no longer names the cause"
			for i := range in.Status.Conditions {
				in.Status.Conditions[i].Message = in.Status.Message
			}
		})
	d = Decide(in)
	if got := d.Status.Message; !strings.HasPrefix(got, "gate reached; attempt 1 failed while finalizing") {
		t.Errorf("message %q does not lead with the cause from status.finalization", got)
	}
	if diff := cmp.Diff(in.Status.Finalization, d.Status.Finalization); diff != "" {
		t.Errorf("status.finalization changed once Terminated (-before +after):\n%s", diff)
	}
}
